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

mok_status mok_gpu_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                    void *d_out, void *dx_rows, const mok_grads *g,
                                    cudaStream_t stream) {
  mok_workspace *w = s->ws;
  if (!mok_gpu_grouped_gemms(w))
    return mok_v1_routed_backward(s, wt, recv, d_out, dx_rows, g, stream);
  /* The tails the weight gradients read (kernels/pointwise/tail_rows.h) are zero already: the
   * pull (or mok_op_dispatch) zeroed recv's padding rows, gate+up made zeros of them, and the
   * reverse combine zeroed d_out's. */
  const mok_gg_launch l = mok_routed_launch(w);
  const int wc[2] = {w->plan.wgrad_cluster_down, w->plan.wgrad_cluster_gate_up};
  return mok_bf16_mlp_backward(w, mok_routed_rows(s), &l, recv, wt->w_gate, wt->w_up, wt->w_down,
                               s->g, s->a, d_out, w->d_a, w->dgu, dx_rows, g->dw_gate, g->dw_up,
                               g->dw_down, s->expert_offset + w->el, w->shape.intermediate, g,
                               NULL, wc, stream);
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
  /* The tails the weight gradients read (kernels/pointwise/tail_rows.h): this path's pull moves no
   * padding row, so x's tails, and the pre-activations and activations gate+up made from them,
   * hold whatever was there; zeroed here (d_out's the reverse combine zeroed, and the SwiGLU
   * backward's dgu tails are zero where d_act's and the pre-activations' are). */
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const mok_tail_buf tails[3] = {{s->recv_x, H, H}, {s->g, 2 * I, 2 * I}, {s->a, I, I}};
  TRY_CUDA(mok_zero_tail_rows(s->expert_offset, s->expert_count, w->el, s->rows, tails, 3, stream));
  const mok_gg_launch l = mok_routed_launch(w);
  const mok_gg_move push = mok_fused_move(s, 1, 0);
  const int wc[2] = {w->plan.wgrad_cluster_down, w->plan.wgrad_cluster_gate_up};
  return mok_bf16_mlp_backward(w, mok_routed_rows(s), &l, s->recv_x, wt->w_gate, wt->w_up,
                               wt->w_down, s->g, s->a, w->d_out, w->d_a, w->dgu, w->d_out,
                               g->dw_gate, g->dw_up, g->dw_down, s->expert_offset + w->el,
                               w->shape.intermediate, g, &push, wc,
                               stream);
}
