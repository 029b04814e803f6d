/* gpu_experts_shared.c — the shared expert: one dense "expert" of the rank's T tokens (a fixed
 * one-expert table), forward into the workspace's ys and backward (its weight gradients, its dx
 * into ys), on the grouped BF16 GEMMs (gpu_experts.c's MLP), in FP8 (config fp8_shared_expert) or
 * on the oracle's GEMMs. Its GEMMs run on at most max_ctas CTAs when it runs beside the routed
 * experts' communication (the plan's shared placement). Everything only enqueues on the stream.
 *
 * The FP8 shared expert: its bf16 weights are quantized (128x128 blocks) at every call into the
 * workspace (the backward quantizes them again: two layers in flight may share the workspace),
 * then it runs on the routed experts' FP8 kernels: forward gate+up with the quantizing SwiGLU
 * epilogue and down; backward d_act and dx from dy and [dg, du] quantized 1x128 and the
 * transposed weights; its weight gradients in bf16 from what the FP8 GEMMs saw (the activations
 * and x dequantized), as config fp8_weight_grads = 0 does for the routed experts. */
#include <cuda_runtime_api.h>
#include "api/gpu_experts.h"
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/swiglu.h"

/* Where the FP8 shared expert's quantized weights sit in the workspace: gate, up [Is, H] and down
 * [H, Is] codes in s8_w with their block scales in s8_ws; the backward's gate | up [H, 2Is] and
 * down [Is, H] in s8_wt, their scales in s8_wts. */
typedef struct {
  uint8_t *gate, *up, *down, *gate_up_t, *down_t;
  float *gate_s, *up_s, *down_s, *gate_up_t_s, *down_t_s;
} s8_layout;

static s8_layout shared_fp8_layout(const mok_workspace *w) {
  const int64_t n = w->shape.shared_intermediate * w->shape.hidden;
  const int64_t nb = (w->shape.shared_intermediate / 128) * (w->shape.hidden / 128);
  uint8_t *q = (uint8_t *)w->fp8.s8_w, *t = (uint8_t *)w->fp8.s8_wt;
  float *qs = w->fp8.s8_ws, *ts = w->fp8.s8_wts;
  s8_layout l = {q, q + n, q + 2 * n, t, t + 2 * n, qs, qs + nb, qs + 2 * nb, ts, ts + 2 * nb};
  return l;
}

/* The shared weights quantized into the layout; transposed: also the backward's copies, from
 * the same read of each weight. */
static mok_status shared_weights_fp8(const mok_workspace *w, const mok_weights *wt, int transposed,
                                     cudaStream_t stream) {
  const int64_t H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const s8_layout l = shared_fp8_layout(w);
  TRY(mok_fp8_quant_weight_t(wt->ws_gate, l.gate, l.gate_s, 1, Is, H,
                             transposed ? l.gate_up_t : NULL, transposed ? l.gate_up_t_s : NULL,
                             2 * Is, 0, stream));
  TRY(mok_fp8_quant_weight_t(wt->ws_up, l.up, l.up_s, 1, Is, H, transposed ? l.gate_up_t : NULL,
                             transposed ? l.gate_up_t_s : NULL, 2 * Is, Is, stream));
  return mok_fp8_quant_weight_t(wt->ws_down, l.down, l.down_s, 1, H, Is,
                                transposed ? l.down_t : NULL, transposed ? l.down_t_s : NULL, H, 0,
                                stream);
}

static mok_status shared_forward_fp8(mok_schedule *s, const mok_weights *wt, const void *x,
                                     int max_ctas, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const mok_expert_rows r = mok_shared_rows(s);
  const s8_layout l = shared_fp8_layout(w);
  const mok_gg_launch lg = {0, 0, max_ctas, NULL}; /* gate+up: the 256-column kernel always */
  const mok_gg_launch ld = mok_fp8_launch(w, H, 1, max_ctas);
  TRY(shared_weights_fp8(w, wt, 0, stream));
  float *xs = mok_fp8_scales_of(w->fp8.s8_x, T, H), *as = mok_fp8_scales_of(s->sa, T, Is);
  TRY(mok_fp8_quant_act(x, w->fp8.s8_x, xs, T, H, stream));
  TRY(mok_gg_fp8_gate_up_swiglu_quantized(w->fp8.s8_x, xs, l.gate, l.gate_s, l.up, l.up_s, s->sg,
                                          s->sa, as, r.offset, r.count, 1, T, Is, H,
                                          w->config.use_swiglu_limit, w->config.swiglu_limit, &lg,
                                          stream));
  return mok_gg_fp8_fwd(s->sa, as, l.down, l.down_s, w->ys, r.offset, r.count, 1, T, H, Is, &ld,
                        stream);
}

/* Its backward after shared_forward_fp8 (the pre-activations in sg, the quantized activations in
 * sa): weight gradients, and dx into ys. Scratch reuse, in order: s8_q holds q(dy), then
 * q([dg, du]); ds_a holds d_act, then the dequantized activations; ys the dequantized x, then dx. */
static mok_status shared_backward_fp8(mok_schedule *s, const mok_weights *wt, const void *x,
                                      const void *dy, const mok_grads *g, int max_ctas,
                                      cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const mok_expert_rows r = mok_shared_rows(s);
  const s8_layout l = shared_fp8_layout(w);
  const mok_gg_launch la = mok_fp8_launch(w, Is, 1, max_ctas), lx = mok_fp8_launch(w, H, 1, max_ctas);
  const mok_gg_launch lw = {0, 0, max_ctas, NULL};
  TRY(shared_weights_fp8(w, wt, 1, stream));
  /* d_act = q(dy) W_down (W_down^T is [Is, H]) */
  float *qs = mok_fp8_scales_of(w->fp8.s8_q, T, H);
  TRY(mok_fp8_quant_act(dy, w->fp8.s8_q, qs, T, H, stream));
  TRY(mok_gg_fp8_fwd(w->fp8.s8_q, qs, l.down_t, l.down_t_s, w->ds_a, r.offset, r.count, 1, T, Is,
                     H, &la, stream));
  TRY_CUDA(mok_swiglu_backward_packed(w->ds_a, s->sg, w->dsgu, T, NULL, Is,
                                      w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                      stream));
  /* weight gradients in bf16 on the activations and x the forward's GEMMs saw */
  TRY(mok_fp8_dequant_act(s->sa, mok_fp8_scales_of(s->sa, T, Is), w->ds_a, T, Is, NULL, stream));
  TRY(mok_bf16_wgrad(w, r, &lw, 0, dy, H, w->ds_a, Is, g->dws_down, H, Is, g, stream));
  float *xs = mok_fp8_scales_of(w->fp8.s8_x, T, H);
  TRY(mok_fp8_quant_act(x, w->fp8.s8_x, xs, T, H, stream)); /* the forward's bits again */
  TRY(mok_fp8_dequant_act(w->fp8.s8_x, xs, w->ys, T, H, NULL, stream));
  TRY(mok_bf16_wgrad(w, r, &lw, 0, w->dsgu, 2 * Is, w->ys, H, g->dws_gate, Is, H, g, stream));
  TRY(mok_bf16_wgrad(w, r, &lw, 0, (const char *)w->dsgu + Is * 2, 2 * Is, w->ys, H, g->dws_up, Is,
                     H, g, stream));
  /* dx = q([dg, du]) [W_gate; W_up] (their transposes are [H, 2Is]) */
  float *gs = mok_fp8_scales_of(w->fp8.s8_q, T, 2 * Is);
  TRY(mok_fp8_quant_act(w->dsgu, w->fp8.s8_q, gs, T, 2 * Is, stream));
  return mok_gg_fp8_fwd(w->fp8.s8_q, gs, l.gate_up_t, l.gate_up_t_s, w->ys, r.offset, r.count, 1,
                        T, H, 2 * Is, &lx, stream);
}

mok_status mok_gpu_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  int max_ctas, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, Is = w->shape.shared_intermediate;
  if (Is == 0) return MOK_SUCCESS;
  /* with no tokens the oracle's kernels do what is left to do (the grouped GEMMs need a row) */
  if (!mok_gpu_grouped_gemms(w) || T == 0) return mok_v1_shared_forward(s, wt, x, stream);
  TRY(mok_shared_table(s, stream));
  if (w->fp8.s8_w) return shared_forward_fp8(s, wt, x, max_ctas, stream);
  const mok_gg_launch l = mok_shared_launch(w, max_ctas);
  return mok_bf16_mlp_forward(w, mok_shared_rows(s), &l, x, wt->ws_gate, wt->ws_up, wt->ws_down,
                              s->sg, s->sa, w->ys, Is, stream);
}

mok_status mok_gpu_shared_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                                   const void *dy, const mok_grads *g, int max_ctas,
                                   cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, Is = w->shape.shared_intermediate;
  if (Is == 0) return MOK_SUCCESS;
  /* with no tokens the oracle's kernels write the weight gradients' zeros (or add nothing) */
  if (!mok_gpu_grouped_gemms(w) || T == 0) return mok_v1_shared_backward(s, wt, x, dy, g, stream);
  TRY(mok_shared_table(s, stream));
  if (w->fp8.s8_w) return shared_backward_fp8(s, wt, x, dy, g, max_ctas, stream);
  const mok_gg_launch l = mok_shared_launch(w, max_ctas);
  return mok_bf16_mlp_backward(w, mok_shared_rows(s), &l, x, wt->ws_gate, wt->ws_up, wt->ws_down,
                               s->sg, s->sa, dy, w->ds_a, w->dsgu, w->ys, g->dws_gate, g->dws_up,
                               g->dws_down, NULL, Is, g, NULL, NULL, stream);
}
