/* gpu_layer.c — mok_forward (and mok_build_and_forward) and mok_backward on the GPU paths:
 * kernels enqueued on the caller's stream, no host synchronization, no allocation (capturable in
 * a CUDA graph). The expert stages are in gpu_experts*.c; which kernels run is the workspace's
 * plan (api/plan.c).
 * Forward:  stage x (symmetric) | barrier | pull dispatch | gate+up GEMMs, SwiGLU | down GEMM |
 *           push combine into the source rank's (token, k) slots | shared expert | barrier |
 *           y = sum_j rw * slot (j order) + shared.
 * Backward: stage dy, rw | barrier | reverse-combine (pull dy, push d_rw) | expert backward GEMMs
 *           and weight gradients | push dx parts | shared expert backward | barrier |
 *           dx = sum_j part (j order) + shared dx.
 * Path FUSED has no separate pull and push kernels: the pull runs on comm CTAs inside the gate+up
 * launch, the combine and dx pushes in the down and last data-gradient epilogues. The FP8
 * forward stages x quantized (e4m3 codes and 1x128 scales), pulls those, and pushes the combine
 * from the down epilogues; its backward runs the data gradients in FP8 on the transposed weights
 * and pushes dx from the last one's epilogues. With a token ring (gpu_ring.c) the routed experts'
 * stages run once per macrobatch on a view of the schedule: forward in reverse order, backward in
 * order, replaying the forward of the macrobatches forward did not keep (x is staged again).
 * With the shared expert beside (plan shared_fwd / shared_bwd), it runs on a side stream beside
 * the first communication kernel of the pass (see "beside" below). */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"
#include "kernels/pointwise/fp8_quant.h"

static mok_status check_weights(const mok_workspace *w, const mok_weights *wt) {
  if (!wt->w_gate || !wt->w_up || !wt->w_down) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(wt->w_gate) || !mok_gpu_aligned(wt->w_up) || !mok_gpu_aligned(wt->w_down))
    return MOK_ERR_MISALIGNED;
  if (mok_gpu_fp8(w)) { /* E4M3 weights and their fp32 block scales */
    if (!wt->w_gate_scale || !wt->w_up_scale || !wt->w_down_scale) return MOK_ERR_INVALID_ARGUMENT;
    if (!mok_gpu_aligned(wt->w_gate_scale) || !mok_gpu_aligned(wt->w_up_scale) ||
        !mok_gpu_aligned(wt->w_down_scale))
      return MOK_ERR_MISALIGNED;
  }
  if (w->shape.shared_intermediate > 0) {
    if (!wt->ws_gate || !wt->ws_up || !wt->ws_down) return MOK_ERR_INVALID_ARGUMENT;
    if (!mok_gpu_aligned(wt->ws_gate) || !mok_gpu_aligned(wt->ws_up) || !mok_gpu_aligned(wt->ws_down))
      return MOK_ERR_MISALIGNED;
  }
  return MOK_SUCCESS;
}

mok_status mok_gpu_check_weights(const mok_workspace *w, const mok_weights *wt) {
  return check_weights(w, wt);
}

/* ---- the shared expert beside the communication ----------------------------------------------
 * The shared expert needs only the rank's own x (and dy), so with the plan's placement "beside"
 * it runs on the workspace's side stream while the routed experts wait for their rows: forked
 * from the caller's stream once x (dy) is staged on every SM, and before the schedule's build in
 * mok_build_and_forward; its GEMMs on the SMs the routed experts' first communication kernel
 * leaves (the device's SMs less the plan's comm CTAs); joined right after that kernel, so that
 * the routed GEMMs start on every SM, or ("beside_late") only before the final sums, where the
 * FP8 one-launch MLP takes the SMs as the shared expert's kernels leave them. Where the plan
 * says "in_line", it runs after the routed experts on the caller's stream. */
static int beside_forward(const mok_schedule *s) {
  const mok_plan *p = &s->ws->plan;
  return s->tokens > 0 &&
         (p->shared_fwd == MOK_SHARED_BESIDE || p->shared_fwd == MOK_SHARED_BESIDE_LATE);
}
static int beside_backward(const mok_schedule *s) {
  return s->tokens > 0 && s->ws->plan.shared_bwd == MOK_SHARED_BESIDE;
}

static mok_status side_fork(mok_workspace *w, cudaStream_t stream) {
  TRY_CUDA(cudaEventRecord(w->side_fork, stream));
  TRY_CUDA(cudaStreamWaitEvent(w->side, w->side_fork, 0));
  return MOK_SUCCESS;
}

/* The caller's stream waits for the side stream; st, the status so far, is kept. */
static mok_status side_join(mok_workspace *w, mok_status st, cudaStream_t stream) {
  cudaError_t e = cudaEventRecord(w->side_join, w->side);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, w->side_join, 0);
  return st != MOK_SUCCESS ? st : mok_gpu_status_at(e, "side_join", __FILE__, __LINE__);
}

/* How a pass runs its communication kernels: on ctas CTAs (0: every SM), and whether the side
 * stream is still to be joined, which the first of them does once it is enqueued (and then lets
 * the later ones have every SM). */
typedef struct {
  int ctas, join;
} comm_plan;

static mok_status after_comm(mok_workspace *w, comm_plan *cp, cudaStream_t stream) {
  if (!cp->join) return MOK_SUCCESS;
  cp->join = 0;
  cp->ctas = 0;
  return side_join(w, MOK_SUCCESS, stream);
}

/* The route of a schedule or view, its row kernels on comm_ctas CTAs (0: every SM; see mok_move_route). */
static mok_move_route route_on(const mok_schedule *v, int comm_ctas) {
  mok_move_route r = mok_gpu_route(v);
  r.ctas = comm_ctas;
  return r;
}

/* FP8: the dispatch pulls the staged E4M3 codes and scales into the schedule's recv_x. */
static mok_status pull_fp8(mok_schedule *v, int comm_ctas, cudaStream_t stream) {
  mok_workspace *w = v->ws;
  const int64_t T = w->shape.tokens, H = w->shape.hidden; /* T: the staged rows' stride */
  mok_move_route r = route_on(v, comm_ctas);
  TRY_CUDA(mok_move_dispatch_pull_fp8(&r, w->off_x, w->off_x + (size_t)(T * H), v->recv_x,
                                      mok_fp8_scales_of(v->recv_x, v->rows, H),
                                      MOK_FP8_SCALE_ROWS(v->rows), stream));
  return MOK_SUCCESS;
}

/* x staged in the symmetric buffer for the peers' pulls: bf16, or, in FP8, quantized once per
 * token (e4m3 codes [T, H], then the scales [T, H / 128]), so that the dispatch moves half the
 * bytes and the k-fold larger received rows need no quantization. T is the shape's (where the
 * peers find the scales); the schedule's count of rows is written. Not where nothing reads it
 * (mok_gpu_x_staged: BF16 at EP=1, whose dispatch reads x itself). */
static mok_status stage_x(const mok_schedule *s, const void *x, cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, stride = w->shape.tokens;
  char *sym = (char *)w->sym.ptr;
  if (T == 0 || !mok_gpu_x_staged(w)) return MOK_SUCCESS;
  if (mok_gpu_fp8(w))
    return mok_fp8_quant_act_rows(x, sym + w->off_x, (float *)(sym + w->off_x + stride * H), T,
                                  H, stream);
  TRY_CUDA(cudaMemcpyAsync(sym + w->off_x, x, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, stream));
  return MOK_SUCCESS;
}

/* Where the rows of this rank's own tokens stay for the reduce instead of being pushed into its
 * slots (mok_gpu_rows_in_place). NULL: every row is pushed. The table is the workspace's, so each
 * push (forward and backward) writes it anew: another schedule's call may run between the two. */
static int32_t *local_rows(const mok_workspace *w) {
  return mok_gpu_rows_in_place(w) ? w->local_row : NULL;
}

/* The reduces' combine slots in the symmetric buffer; NULL where the workspace has none (EP=1
 * with every row read in place). */
static const char *slots_of(const mok_workspace *w) {
  return mok_gpu_has_slots(w) ? (const char *)w->sym.ptr + w->off_slots : NULL;
}

/* The routed experts of one schedule, or of one ring step's view of it (the rows that move and
 * compute), after x is staged on every rank: pull dispatch (as cp says; this rank's own rows
 * from x), expert MLPs, push combine. */
static mok_status experts_forward_pass(mok_schedule *v, const mok_weights *wt, const void *x,
                                       comm_plan *cp, cudaStream_t stream) {
  mok_workspace *w = v->ws;
  mok_move_route r = route_on(v, cp->ctas);
  if (mok_gpu_fused(w)) /* pull and combine push inside the GEMMs */
    return mok_gpu_experts_forward_fused(v, wt, 1, stream);
  if (mok_gpu_fp8(w)) { /* the combine pushed by down's epilogues */
    TRY(pull_fp8(v, cp->ctas, stream));
    TRY(after_comm(w, cp, stream));
    return mok_gpu_experts_forward_fp8(v, wt, mok_gpu_fp8_kept_out(v), 1, stream);
  }
  TRY_CUDA(mok_move_dispatch_pull(&r, w->off_x, x, v->recv_x, stream));
  TRY(after_comm(w, cp, stream));
  TRY(mok_gpu_experts_forward(v, wt, v->recv_x, v->out_rows, stream));
  r.ctas = 0;
  TRY_CUDA(mok_move_push_rows(&r, v->out_rows, w->off_slots, local_rows(w), stream));
  return MOK_SUCCESS;
}

/* The routed experts after x is staged: barrier, then the schedule's passes (a ring's in reverse:
 * the last steps stay for backward). */
static mok_status routed_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                 comm_plan *cp, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  TRY(mok_gpu_barrier(w, stream));
  if (!mok_gpu_ring_on(w)) return experts_forward_pass(s, wt, x, cp, stream);
  const int64_t steps = mok_pipe_steps(&w->pipe);
  for (int64_t i = 0; i < steps; ++i) {
    mok_schedule v;
    TRY(mok_gpu_ring_view(s, mok_pipe_fwd_macro(steps, i), mok_pipe_fwd_region(&w->pipe, i), &v,
                          stream));
    TRY(experts_forward_pass(&v, wt, x, cp, stream));
  }
  s->ring_kept = 1;
  return MOK_SUCCESS;
}

/* The forward once its arguments are checked; topk: the schedule is built in the same call
 * (mok_build_and_forward). x is staged first, on every SM (the peers' pulls wait for it, and
 * beside the shared expert's GEMMs the copy would crawl). With the shared expert beside, its
 * GEMMs come next, so that they overlap the rest of what the routed experts wait for: the build
 * and the barriers. */
static mok_status forward(mok_schedule *s, const mok_weights *wt, const int32_t *topk,
                          const void *x, const float *router_weights, void *y,
                          cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, k = w->shape.top_k,
                Is = w->shape.shared_intermediate;
  TRY(stage_x(s, x, stream));
  const int beside = beside_forward(s);
  mok_status st = MOK_SUCCESS;
  if (beside) {
    TRY(side_fork(w, stream));
    st = mok_gpu_shared_forward(s, wt, x, w->sms - w->plan.fwd_comm_ctas, w->side);
  }
  /* joined after the first comm kernel, or (beside_late) only before the combine */
  const int late = beside && w->plan.shared_fwd == MOK_SHARED_BESIDE_LATE;
  comm_plan cp = {beside ? w->plan.fwd_comm_ctas : 0, beside && !late};
  if (st == MOK_SUCCESS && topk) st = mok_gpu_schedule_enqueue(s, topk, 0, stream);
  if (st == MOK_SUCCESS) st = routed_forward(s, wt, x, &cp, stream);
  if (cp.join || late) st = side_join(w, st, stream); /* late, or an error came first */
  TRY(st);
  if (!beside) TRY(mok_gpu_shared_forward(s, wt, x, 0, stream));
  TRY(mok_gpu_barrier_last(w, stream));
  const mok_move_parts parts = {slots_of(w), local_rows(w), s->out_rows};
  TRY_CUDA(mok_move_combine_reduce(T, (int)k, H, &parts, router_weights, Is > 0 ? w->ys : NULL,
                                   y, w->err, stream));
  return MOK_SUCCESS;
}

static mok_status check_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                const float *router_weights, const void *y) {
  if (!s || !wt) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  if (s->tokens > 0 && (!x || !router_weights || !y)) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(y) || ((uintptr_t)router_weights & 3u))
    return MOK_ERR_MISALIGNED;
  return check_weights(w, wt);
}

/* The collective calls: a failure on this rank, found by the checks or later, ends the call on
 * every rank (mok_gpu_call_end). */
mok_status mok_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                       const float *router_weights, void *y, cudaStream_t stream) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(s->ws);
  mok_status st = check_forward(s, wt, x, router_weights, y);
  if (st == MOK_SUCCESS) st = mok_gpu_check_built(s);
  if (st == MOK_SUCCESS) st = forward(s, wt, NULL, x, router_weights, y, stream);
  return mok_gpu_call_end(s->ws, st, stream);
}

mok_status mok_build_and_forward(mok_schedule *s, const int32_t *topk_experts,
                                 const mok_weights *wt, const void *x, const float *router_weights,
                                 void *y, cudaStream_t stream) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(s->ws);
  mok_status st = mok_gpu_check_topk(s, topk_experts);
  if (st == MOK_SUCCESS) st = check_forward(s, wt, x, router_weights, y);
  if (st == MOK_SUCCESS) st = forward(s, wt, topk_experts, x, router_weights, y, stream);
  return mok_gpu_call_end(s->ws, st, stream);
}

mok_status mok_gpu_check_grads(const mok_schedule *s, const mok_grads *g, int need_dx) {
  const mok_workspace *w = s->ws;
  const int64_t T = s->tokens, Is = w->shape.shared_intermediate;
  if (need_dx && T > 0 && (!g->dx || !g->d_router_weights)) return MOK_ERR_INVALID_ARGUMENT;
  if (!g->dw_gate || !g->dw_up || !g->dw_down) return MOK_ERR_INVALID_ARGUMENT;
  if (Is > 0 && (!g->dws_gate || !g->dws_up || !g->dws_down)) return MOK_ERR_INVALID_ARGUMENT;
  const uintptr_t ga = g->grad_fp32 ? 8u : 4u;
  if ((need_dx && (!mok_gpu_aligned(g->dx) || ((uintptr_t)g->d_router_weights & 3u))) ||
      ((uintptr_t)g->dw_gate % ga) || ((uintptr_t)g->dw_up % ga) || ((uintptr_t)g->dw_down % ga) ||
      (Is > 0 && (((uintptr_t)g->dws_gate % ga) || ((uintptr_t)g->dws_up % ga) ||
                  ((uintptr_t)g->dws_down % ga))))
    return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

/* FP8 backward: the transposed weights mok_fp8_transpose_weights makes. */
static mok_status check_backward_weights(const mok_workspace *w, const mok_weights *wt) {
  if (!mok_gpu_fp8(w)) return MOK_SUCCESS;
  if (!wt->w_gate_up_t || !wt->w_gate_up_t_scale || !wt->w_down_t || !wt->w_down_t_scale)
    return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(wt->w_gate_up_t) || !mok_gpu_aligned(wt->w_gate_up_t_scale) ||
      !mok_gpu_aligned(wt->w_down_t) || !mok_gpu_aligned(wt->w_down_t_scale))
    return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

/* A ring step's forward again, for backward: x rows pulled into the region, gate+up (the
 * pre-activations and activations) and down (the outputs d_router_weights needs; not with the FP8
 * fused d_router_weights), nothing pushed; the same bits as the forward's. */
static mok_status experts_replay(mok_schedule *v, const mok_weights *wt, const void *x,
                                 comm_plan *cp, cudaStream_t stream) {
  mok_workspace *w = v->ws;
  if (mok_gpu_fused(w)) return mok_gpu_experts_forward_fused(v, wt, 0, stream);
  if (mok_gpu_fp8(w)) {
    TRY(pull_fp8(v, cp->ctas, stream));
    TRY(after_comm(w, cp, stream));
    return mok_gpu_experts_forward_fp8(v, wt, mok_gpu_fp8_kept_out(v), 0, stream);
  }
  mok_move_route r = route_on(v, cp->ctas);
  TRY_CUDA(mok_move_dispatch_pull(&r, w->off_x, x, v->recv_x, stream));
  TRY(after_comm(w, cp, stream));
  return mok_gpu_experts_forward(v, wt, v->recv_x, v->out_rows, stream);
}

/* The routed experts' backward on a schedule or a ring step's view, after dy and the router
 * weights are staged: reverse-combine (pull dy, push d_router_weights; this rank's own rows from
 * the caller's dy and router weights, own), expert backward, push of the dx rows. */
static mok_status experts_backward_pass(mok_schedule *v, const mok_weights *wt, const mok_grads *g,
                                        const mok_move_own *own, comm_plan *cp,
                                        cudaStream_t stream) {
  mok_workspace *w = v->ws;
  mok_move_route r = route_on(v, cp->ctas);
  if (mok_gpu_fp8(w) && w->config.fp8_fused_router_grad) /* d_rw from the SwiGLU backward */
    TRY_CUDA(mok_move_reverse_combine_fp8(&r, w->off_dy, w->off_rw, own, w->d_out, w->fp8.q,
                                          w->fp8.q_scales, MOK_FP8_SCALE_ROWS(v->rows),
                                          w->fp8.rw_rows, stream));
  else
    TRY_CUDA(mok_move_reverse_combine(&r, w->off_dy, w->off_rw, own, w->off_drw, v->out_rows,
                                      w->d_out, stream));
  TRY(after_comm(w, cp, stream));
  if (mok_gpu_fused(w)) /* the dx push inside the last data gradient */
    return mok_gpu_experts_backward_fused(v, wt, g, stream);
  if (mok_gpu_fp8(w)) /* likewise */
    return mok_gpu_experts_backward_fp8(v, wt, g, stream);
  TRY(mok_gpu_experts_backward(v, wt, v->recv_x, w->d_out, w->d_out, g, stream));
  r.ctas = 0;
  TRY_CUDA(mok_move_push_rows(&r, w->d_out, w->off_slots, local_rows(w), stream));
  return MOK_SUCCESS;
}

/* The routed experts' backward after dy and the router weights are staged: barrier, then the
 * schedule's passes (a ring's in order, the macrobatches forward did not keep replayed first). */
static mok_status routed_backward(mok_schedule *s, const mok_weights *wt, const mok_grads *g,
                                  const void *x, const mok_move_own *own, comm_plan *cp,
                                  cudaStream_t stream) {
  mok_workspace *w = s->ws;
  TRY(mok_gpu_barrier(w, stream));
  if (!mok_gpu_ring_on(w)) return experts_backward_pass(s, wt, g, own, cp, stream);
  const int64_t steps = mok_pipe_steps(&w->pipe);
  const int kept = s->ring_kept; /* a second backward after one forward replays everything */
  for (int64_t i = 0; i < steps; ++i) {
    mok_schedule v;
    TRY(mok_gpu_ring_view(s, mok_pipe_bwd_macro(i), mok_pipe_bwd_region(&w->pipe, steps, i), &v,
                          stream));
    if (!kept || !mok_pipe_bwd_resident(&w->pipe, i)) TRY(experts_replay(&v, wt, x, cp, stream));
    TRY(experts_backward_pass(&v, wt, g, own, cp, stream));
  }
  if (steps > w->pipe.ring_regions) s->ring_kept = 0; /* replays reused regions */
  return MOK_SUCCESS;
}

/* dy and the router weights staged in the symmetric buffer for the peers' pulls (not at EP=1:
 * mok_gpu_dy_staged); with a ring, x too (the macrobatches forward did not keep pull their x
 * rows again; stage_x says where). */
static mok_status stage_backward(const mok_schedule *s, const void *x,
                                 const float *router_weights, const void *dy, int ring,
                                 cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, k = w->shape.top_k;
  char *sym = (char *)w->sym.ptr;
  if (!mok_gpu_dy_staged(w)) return ring ? stage_x(s, x, stream) : MOK_SUCCESS;
  TRY_CUDA(cudaMemcpyAsync(sym + w->off_dy, dy, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, stream));
  TRY_CUDA(cudaMemcpyAsync(sym + w->off_rw, router_weights, (size_t)(T * k) * 4,
                           cudaMemcpyDeviceToDevice, stream));
  return ring ? stage_x(s, x, stream) : MOK_SUCCESS;
}

static mok_status backward(mok_schedule *s, const mok_weights *wt, const void *x,
                           const float *router_weights, const void *dy, const mok_grads *g,
                           cudaStream_t stream) {
  if (!wt || !g) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, k = w->shape.top_k,
                Is = w->shape.shared_intermediate;
  if (T > 0 && (!x || !router_weights || !dy)) return MOK_ERR_INVALID_ARGUMENT;
  TRY(mok_gpu_check_built(s));
  TRY(mok_gpu_check_grads(s, g, 1));
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(dy) || ((uintptr_t)router_weights & 3u))
    return MOK_ERR_MISALIGNED;
  TRY(check_weights(w, wt));
  TRY(check_backward_weights(w, wt));
  char *sym = (char *)w->sym.ptr;
  const int ring = mok_gpu_ring_on(w);

  if (T > 0) TRY(stage_backward(s, x, router_weights, dy, ring, stream)); /* on every SM */
  const int beside = beside_backward(s);
  mok_status st = MOK_SUCCESS;
  if (beside) {
    TRY(side_fork(w, stream));
    st = mok_gpu_shared_backward(s, wt, x, dy, g, w->sms - w->plan.bwd_comm_ctas, w->side);
  }
  comm_plan cp = {beside ? w->plan.bwd_comm_ctas : 0, beside};
  const mok_move_own own = {dy, router_weights};
  if (st == MOK_SUCCESS) st = routed_backward(s, wt, g, x, &own, &cp, stream);
  if (cp.join) st = side_join(w, st, stream); /* not joined yet: an error came first */
  TRY(st);
  if (!beside) TRY(mok_gpu_shared_backward(s, wt, x, dy, g, 0, stream));
  TRY(mok_gpu_barrier_last(w, stream));
  const mok_move_parts parts = {slots_of(w), local_rows(w), w->d_out};
  TRY_CUDA(mok_move_dx_reduce(T, (int)k, H, &parts, Is > 0 ? w->ys : NULL, g->dx,
                              (const float *)(sym + w->off_drw), g->d_router_weights, w->err,
                              stream));
  return MOK_SUCCESS;
}

mok_status mok_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                        const float *router_weights, const void *dy, const mok_grads *g,
                        cudaStream_t stream) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(s->ws);
  return mok_gpu_call_end(s->ws, backward(s, wt, x, router_weights, dy, g, stream), stream);
}
