/* gpu_experts_bf16.c — the routed experts' stages in BF16 on the grouped GEMMs (gpu_experts.c's
 * MLP), on rows already received (paths GROUPED and the ops layer) or with the communication
 * inside the launches (path FUSED: the dispatch pulled by comm CTAs of gate+up, the combine and
 * the dx rows pushed from the epilogues); and the routed stages' entry points, which hand a
 * schedule to the oracle (gpu_experts_v1.c) or FP8 (gpu_experts_fp8.c) stages where the plan
 * and dtype say. Everything only enqueues on the stream. */
#include <cuda_runtime_api.h>
#include "api/gpu_experts.h"
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/tail_rows.h"

mok_status mok_gpu_experts_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   void *out_rows, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  if (mok_gpu_fp8(w)) { /* the ops layer: bf16 rows, quantized here */
    TRY(mok_fp8_quant_act(recv, s->recv_x, mok_fp8_scales_of(s->recv_x, s->rows, H), s->rows, H,
                          stream));
    return mok_gpu_experts_forward_fp8(s, wt, out_rows, 0, stream);
  }
  if (!mok_gpu_grouped_gemms(w)) return mok_v1_routed_forward(s, wt, recv, out_rows, stream);
  const mok_gg_launch l = mok_routed_launch(w);
  return mok_bf16_mlp_forward(w, mok_routed_rows(s), &l, recv, wt->w_gate, wt->w_up, wt->w_down,
                              s->g, s->a, out_rows, I, stream);
}

/* The tails the BF16 weight gradients read (kernels/pointwise/tail_rows.h) zeroed in the rows they
 * reduce over and in what those come from: the pre-activations (the SwiGLU backward's dgu rows are
 * zero where they and d_act are), the activations, d_out and the received rows x. x is zeroed only
 * where it is the schedule's own; the ops layer's caller passes the rows mok_op_dispatch wrote,
 * whose padding rows the pull zeroed. */
static mok_status zero_tails(const mok_schedule *s, void *x, void *d_out, cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const mok_tail_buf b[4] = {{s->g, 2 * I, 2 * I}, {s->a, I, I}, {d_out, H, H}, {x, H, H}};
  TRY_CUDA(mok_zero_tail_rows(s->expert_offset, s->expert_count, w->el, s->rows, b, 4, stream));
  return MOK_SUCCESS;
}

mok_status mok_gpu_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                    void *d_out, void *dx_rows, const mok_grads *g,
                                    cudaStream_t stream) {
  mok_workspace *w = s->ws;
  if (!mok_gpu_grouped_gemms(w))
    return mok_v1_routed_backward(s, wt, recv, d_out, dx_rows, g, stream);
  TRY(zero_tails(s, recv == s->recv_x ? s->recv_x : NULL, d_out, stream));
  const mok_gg_launch l = mok_routed_launch(w);
  return mok_bf16_mlp_backward(w, mok_routed_rows(s), &l, recv, wt->w_gate, wt->w_up, wt->w_down,
                               s->g, s->a, d_out, w->d_a, w->dgu, dx_rows, g->dw_gate, g->dw_up,
                               g->dw_down, s->expert_offset + w->el, w->shape.intermediate, g,
                               NULL, stream);
}

mok_status mok_gpu_experts_forward_fused(mok_schedule *s, const mok_weights *wt, int push,
                                         cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const mok_gg_launch l = mok_routed_launch(w);
  const mok_gg_move pull = mok_fused_move(s, 0, w->plan.fwd_comm_ctas), q = mok_fused_move(s, 1, 0);
  TRY_CUDA(cudaMemsetAsync(w->ready, 0, (size_t)w->ready_count * 4, stream));
  TRY(mok_gg_bf16_gate_up_swiglu_pulled(s->recv_x, wt->w_gate, wt->w_up, s->a, s->g,
                                        s->expert_offset, s->expert_count, w->el, s->rows, I, H,
                                        w->config.use_swiglu_limit, w->config.swiglu_limit, &pull,
                                        &l, stream));
  if (!push)
    return mok_gg_bf16_fwd(s->a, wt->w_down, s->out_rows, s->expert_offset, s->expert_count, w->el,
                           s->rows, H, I, &l, stream);
  return mok_gg_bf16_fwd_pushed(s->a, wt->w_down, s->out_rows, s->expert_offset, s->expert_count,
                                w->el, s->rows, H, I, &q, &l, stream);
}

mok_status mok_gpu_experts_backward_fused(mok_schedule *s, const mok_weights *wt,
                                          const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  TRY(zero_tails(s, s->recv_x, w->d_out, stream)); /* the pull moved no padding row */
  const mok_gg_launch l = mok_routed_launch(w);
  const mok_gg_move push = mok_fused_move(s, 1, 0);
  return mok_bf16_mlp_backward(w, mok_routed_rows(s), &l, s->recv_x, wt->w_gate, wt->w_up,
                               wt->w_down, s->g, s->a, w->d_out, w->d_a, w->dgu, w->d_out,
                               g->dw_gate, g->dw_up, g->dw_down, s->expert_offset + w->el,
                               w->shape.intermediate, g, &push, stream);
}
