/* gpu_experts.c — what the expert stages share (gpu_experts.h): the rows a grouped call covers,
 * the plan's launch options, the BF16 MLP forward and backward on the grouped TMA + wgmma GEMMs
 * (gate+up with the SwiGLU epilogue and bf16 pre-activations kept for backward, down, the data
 * gradients with the gate / up pair in one reduction, K-grouped weight gradients summed over rows
 * in ascending order), which both the routed experts (gpu_experts_bf16.c) and the shared expert
 * (gpu_experts_shared.c) run, and the fused path's moves. Everything only enqueues on the
 * stream. */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_experts.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/pointwise/swiglu.h"
#include "kernels/v1/v1.h"

mok_expert_rows mok_routed_rows(const mok_schedule *s) {
  mok_expert_rows r = {s, s->expert_offset, s->expert_count, s->ws->el, s->rows, 0};
  return r;
}

mok_expert_rows mok_shared_rows(const mok_schedule *s) {
  const mok_workspace *w = s->ws;
  mok_expert_rows r = {NULL, w->dense_table, w->dense_table + 2, 1, s->tokens, s->tokens};
  return r;
}

/* Written at every pass, not only when the count changes: a captured graph replays its own
 * count's write, which host-side bookkeeping of the last count could not see. */
mok_status mok_shared_table(const mok_schedule *s, cudaStream_t stream) {
  TRY_CUDA(mok_sched_dense_table(s->ws->dense_table, s->tokens, stream));
  return MOK_SUCCESS;
}

mok_gg_launch mok_routed_launch(const mok_workspace *w) {
  mok_gg_launch l = {w->plan.routed_cluster, 0, 0, w->tickets};
  return l;
}

mok_gg_launch mok_shared_launch(const mok_workspace *w, int max_ctas) {
  mok_gg_launch l = {w->plan.shared_cluster, 0, max_ctas, w->tickets + MOK_GG_TICKET_INTS};
  return l;
}

mok_gg_launch mok_fp8_launch(const mok_workspace *w, int64_t n, int shared, int max_ctas) {
  const int wg = shared ? w->plan.shared_warpgroups : w->plan.routed_warpgroups;
  mok_gg_launch l = {0, mok_gg_fp8_wide_covers(n) ? 0 : wg, max_ctas, NULL};
  return l;
}

int mok_grad_mode(const mok_grads *g) {
  if (g->grad_fp32) return g->accumulate ? V1_OUT_F32_ADD : V1_OUT_F32;
  return g->accumulate ? V1_OUT_BF16_ADD : V1_OUT_BF16;
}

mok_status mok_bf16_wgrad(const mok_workspace *w, mok_expert_rows r, const mok_gg_launch *l,
                          int cluster,
                          const void *dc, int64_t ld_dc, const void *a, int64_t ld_a, void *dw,
                          int64_t n, int64_t k, const mok_grads *g, cudaStream_t stream) {
  if (!g->grad_fp32 && g->accumulate)
    return mok_v1_wgrad(r.s, w->err, dc, ld_dc, a, ld_a, dw, n, k, r.rows, mok_grad_mode(g),
                        stream);
  /* the weight gradient's own cluster choice (0: single CTAs); the grid cap carries over */
  const mok_gg_launch wl = {cluster, 0, l ? l->max_ctas : 0, NULL};
  TRY(mok_gg_bf16_wgrad_ld(dc, ld_dc, a, ld_a, dw, g->grad_fp32, g->accumulate, r.offset, r.count,
                           r.experts, r.m_total, n, k, &wl, stream));
  TRY_CUDA(mok_nan_if_error(dw, (int64_t)r.experts * n * k, g->grad_fp32, w->err, stream));
  return MOK_SUCCESS;
}

mok_status mok_bf16_mlp_forward(const mok_workspace *w, mok_expert_rows r, const mok_gg_launch *l,
                                const void *x, const void *w_gate, const void *w_up,
                                const void *w_down, void *preact, void *act, void *out, int64_t I,
                                cudaStream_t stream) {
  const int64_t H = w->shape.hidden;
  TRY(mok_gg_bf16_gate_up_swiglu(x, w_gate, w_up, act, preact, r.offset, r.count, r.experts,
                                 r.m_total, I, H, w->config.use_swiglu_limit,
                                 w->config.swiglu_limit, l, stream));
  return mok_gg_bf16_fwd(act, w_down, out, r.offset, r.count, r.experts, r.m_total, H, I, l,
                         stream);
}

mok_status mok_bf16_mlp_backward(const mok_workspace *w, mok_expert_rows r,
                                 const mok_gg_launch *l, const void *x, const void *w_gate,
                                 const void *w_up, const void *w_down, const void *preact,
                                 const void *act, const void *dout, void *d_act, void *dgu,
                                 void *dx, void *dw_gate, void *dw_up, void *dw_down,
                                 const int32_t *rows_dev, int64_t I, const mok_grads *g,
                                 const mok_gg_move *push, const int *wgrad_cluster,
                                 cudaStream_t stream) {
  const int64_t H = w->shape.hidden;
  TRY(mok_gg_bf16_dgrad(dout, w_down, d_act, r.offset, r.count, r.experts, r.m_total, H, I, l,
                        stream));
  const int cl_down = wgrad_cluster ? wgrad_cluster[0] : 0;
  const int cl_gate_up = wgrad_cluster ? wgrad_cluster[1] : 0;
  TRY(mok_bf16_wgrad(w, r, l, cl_down, dout, H, act, I, dw_down, H, I, g, stream));
  TRY_CUDA(mok_swiglu_backward_packed(d_act, preact, dgu, r.m_total, rows_dev, I,
                                      w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                      stream));
  TRY(mok_bf16_wgrad(w, r, l, cl_gate_up, dgu, 2 * I, x, H, dw_gate, I, H, g, stream));
  TRY(mok_bf16_wgrad(w, r, l, cl_gate_up, (const char *)dgu + I * 2, 2 * I, x, H, dw_up, I, H, g,
                     stream));
  if (push) /* dx rows also pushed into the source ranks' slots by the epilogues */
    return mok_gg_bf16_dgrad_pair_pushed(dgu, w_gate, w_up, dx, r.offset, r.count, r.experts,
                                         r.m_total, I, H, push, l, stream);
  return mok_gg_bf16_dgrad_pair(dgu, w_gate, w_up, dx, r.offset, r.count, r.experts, r.m_total, I,
                                H, l, stream);
}

mok_gg_move mok_fused_move(const mok_schedule *s, int push, int ctas) {
  const mok_workspace *w = s->ws;
  mok_gg_move q;
  memset(&q, 0, sizeof q);
  q.peer_base = w->peer_base;
  q.peer_off = push ? w->off_slots : w->off_x;
  q.tokens = w->shape.tokens;
  q.top_k = (int)w->shape.top_k;
  q.row_src = s->row_src;
  q.expert_offset = s->expert_offset;
  q.flags = w->ready;
  q.mb_rows = w->plan.minibatch_rows;
  q.ctas = ctas;
  q.push = push;
  q.timeout_ns = w->timeout_ns;
  q.err = w->err;
  return q;
}
