/* gpu_experts_fp8.c — the routed experts' stages in FP8 (MOK_DTYPE_FP8_BLOCK128): inputs and
 * activations E4M3 in 1x128 blocks, weights E4M3 with 128x128 block scales (mok_quantize_weight);
 * the forward MLP as one launch or two (plan fp8_mlp), its combine pushed from down's epilogues;
 * the backward's data gradients on the transposed weights (mok_fp8_transpose_weights), dx pushed
 * from the last one's epilogues, and the weight gradients in FP8 or bf16 (config
 * fp8_weight_grads). Everything only enqueues on the stream. */
#include <cuda_runtime_api.h>
#include "api/gpu_experts.h"
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/swiglu.h"
#include "kernels/pointwise/tail_rows.h"

/* Forward from the quantized rows the schedule keeps in recv_x (codes, then scales:
 * mok_fp8_scales_of). Kept for backward, as the BF16 path keeps its own: the quantized
 * activations (in a) and the bf16 pre-activations (g | u in g). */
mok_status mok_gpu_experts_forward_fp8(mok_schedule *s, const mok_weights *wt, void *out,
                                       int push, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  float *x_scales = mok_fp8_scales_of(s->recv_x, rows, H), *a_scales = mok_fp8_scales_of(s->a, rows, I);
  const mok_gg_move q = mok_fused_move(s, 1, 0);
  if (push && w->plan.fp8_mlp == MOK_FP8_MLP_ONE_LAUNCH) {
    /* gate+up and down in one launch: down starts on each SM once gate+up has no tile left for
     * it, a row block's down tiles once that block's activations are stored */
    const mok_gg_fp8_mlp m = {
        .x = s->recv_x, .w_gate = wt->w_gate, .w_up = wt->w_up, .w_down = wt->w_down,
        .x_scales = x_scales, .w_gate_scales = wt->w_gate_scale, .w_up_scales = wt->w_up_scale,
        .w_down_scales = wt->w_down_scale, .preact = s->g, .q_act = s->a, .out = out,
        .q_scales = a_scales, .push = &q, .expert_offset = s->expert_offset,
        .expert_count = s->expert_count, .num_experts = (int)w->el, .m_total = rows, .inter = I,
        .hidden = H, .use_limit = w->config.use_swiglu_limit, .limit = w->config.swiglu_limit,
        .sync = w->fp8.mlp_sync, .err = w->err, .timeout_ns = w->timeout_ns};
    return mok_gg_fp8_mlp_forward(&m, NULL, stream);
  }
  /* the activations come out of gate+up already quantized for down */
  TRY(mok_gg_fp8_gate_up_swiglu_quantized(s->recv_x, x_scales, wt->w_gate, wt->w_gate_scale,
                                          wt->w_up, wt->w_up_scale, s->g, s->a, a_scales,
                                          s->expert_offset, s->expert_count, w->el, rows, I, H,
                                          w->config.use_swiglu_limit, w->config.swiglu_limit,
                                          NULL, stream));
  if (!out && !push) return MOK_SUCCESS;
  const mok_gg_launch l = mok_fp8_launch(w, H, 0, 0);
  if (push)
    return mok_gg_fp8_fwd_pushed(s->a, a_scales, wt->w_down, wt->w_down_scale, out,
                                 s->expert_offset, s->expert_count, w->el, rows, H, I, &q, &l,
                                 stream);
  return mok_gg_fp8_fwd(s->a, a_scales, wt->w_down, wt->w_down_scale, out, s->expert_offset,
                        s->expert_count, w->el, rows, H, I, &l, stream);
}

/* One FP8 weight gradient dW[e] = A^T B from both operands quantized along the tokens (wq_a rows
 * [a_row, a_row + m) of a_ld, wq_b rows [0, n)), in cluster pairs or single CTAs as the plan says
 * (cluster), NaN when the device error word is set, as mok_bf16_wgrad does. */
static mok_status fp8_wgrad(const mok_schedule *s, int64_t a_row, int64_t a_ld, int64_t m,
                            int64_t n, int cluster, void *dw, const mok_grads *g,
                            cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t rows_pad = MOK_FP8_SCALE_ROWS(s->rows);
  /* the kernel's expert_scales: both operands per expert (mode 2), B's only (mode 3), or none */
  const int mode = w->config.fp8_weight_grads, scales = mode == 2 ? 1 : mode == 3 ? 2 : 0;
  const mok_gg_launch l = {cluster, 0, 0, NULL};
  TRY(mok_gg_fp8_wgrad((const char *)w->fp8.wq_a + a_row * rows_pad, w->fp8.wq_as + a_row, a_ld,
                       w->fp8.wq_b, w->fp8.wq_bs, n, dw, g->grad_fp32, g->accumulate, scales,
                       s->expert_offset, s->expert_count, w->el, s->rows, m, n, &l, stream));
  TRY_CUDA(mok_nan_if_error(dw, (int64_t)w->el * m * n, g->grad_fp32, w->err, stream));
  return MOK_SUCCESS;
}

/* The weight gradients from dout (in d_out) and dgu: dW_down = dout^T act and dW_gate | dW_up =
 * [dg | du]^T x, act and x the forward's quantized rows. In FP8 (fp8_weight_grads 1 to 3; not for
 * bf16-accumulated gradients): each operand quantized 1x128 along the tokens (or with one scale
 * per expert and channel: act and x in modes 2 and 3, dout and dgu in mode 2) and transposed into
 * wq_a / wq_b (dout and dgu from bf16, act and x requantized from their codes: the same bits as
 * dequantizing them first) for the K-grouped FP8 GEMM. Else in bf16 (mok_bf16_wgrad) on act and x
 * dequantized (into d_a, then into d_out, which this overwrites). */
static mok_status weight_grads(mok_schedule *s, const mok_grads *g, const int32_t *used,
                               cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  const mok_expert_rows r = mok_routed_rows(s);
  const int32_t *off = s->expert_offset, *cnt = s->expert_count;
  const int el = w->el;
  if (w->config.fp8_weight_grads && (g->grad_fp32 || !g->accumulate)) {
    /* per-expert scales: the activations' (modes 2, 3) and the gradients' (mode 2) */
    float *ea = w->fp8.wq_amax, *ea_grad = w->config.fp8_weight_grads == 2 ? w->fp8.wq_amax : NULL;
    TRY(mok_fp8_quant_t(w->d_out, w->fp8.wq_a, w->fp8.wq_as, ea_grad, off, cnt, el, rows, H,
                        stream));
    TRY(mok_fp8_requant_t(s->a, mok_fp8_scales_of(s->a, rows, I), w->fp8.wq_b, w->fp8.wq_bs, ea,
                          off, cnt, el, rows, I, stream));
    TRY(fp8_wgrad(s, 0, H, H, I, w->plan.wgrad_cluster_down, g->dw_down, g, stream));
    TRY(mok_fp8_quant_t(w->dgu, w->fp8.wq_a, w->fp8.wq_as, ea_grad, off, cnt, el, rows, 2 * I,
                        stream));
    TRY(mok_fp8_requant_t(s->recv_x, mok_fp8_scales_of(s->recv_x, rows, H), w->fp8.wq_b,
                          w->fp8.wq_bs, ea, off, cnt, el, rows, H, stream));
    TRY(fp8_wgrad(s, 0, 2 * I, I, H, w->plan.wgrad_cluster_gate_up, g->dw_gate, g, stream));
    return fp8_wgrad(s, I, 2 * I, I, H, w->plan.wgrad_cluster_gate_up, g->dw_up, g, stream);
  }
  /* bf16 weight gradients on the dequantized rows and dgu, their tails zeroed (tail_rows.h;
   * d_out's the reverse combine zeroed) */
  const mok_tail_buf act_dgu[2] = {{w->d_a, I, I}, {w->dgu, 2 * I, 2 * I}}, x_rows = {w->d_out, H, H};
  TRY(mok_fp8_dequant_act(s->a, mok_fp8_scales_of(s->a, rows, I), w->d_a, rows, I, used, stream));
  TRY_CUDA(mok_zero_tail_rows(off, cnt, el, rows, act_dgu, 2, stream));
  TRY(mok_bf16_wgrad(w, r, NULL, 0, w->d_out, H, w->d_a, I, g->dw_down, H, I, g, stream));
  TRY(mok_fp8_dequant_act(s->recv_x, mok_fp8_scales_of(s->recv_x, rows, H), w->d_out, rows, H,
                          used, stream));
  TRY_CUDA(mok_zero_tail_rows(off, cnt, el, rows, &x_rows, 1, stream));
  TRY(mok_bf16_wgrad(w, r, NULL, 0, w->dgu, 2 * I, w->d_out, H, g->dw_gate, I, H, g, stream));
  return mok_bf16_wgrad(w, r, NULL, 0, (const char *)w->dgu + I * 2, 2 * I, w->d_out, H, g->dw_up,
                        I, H, g, stream);
}

/* Scratch reuse, in order: d_out (rw * dy) is quantized into fp8.q for d_act = dout W_down (FP8);
 * the SwiGLU backward gives dgu; the weight gradients (their bf16 route leaves x in d_out); dgu,
 * quantized into fp8.q (by the SwiGLU backward itself when it also makes d_rw), gives
 * dx = dgu [W_gate; W_up] (FP8), pushed to the source ranks. */
mok_status mok_gpu_experts_backward_fp8(mok_schedule *s, const mok_weights *wt,
                                        const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  const int32_t *off = s->expert_offset, *cnt = s->expert_count;
  const int32_t *used = off + w->el; /* the padded rows of this schedule or view (device) */
  const int fused_drw = w->config.fp8_fused_router_grad;
  /* fused d_rw: the reverse combine already quantized the unweighted dy into fp8.q */
  if (!fused_drw)
    TRY(mok_fp8_quant_act_upto(w->d_out, w->fp8.q, w->fp8.q_scales, rows, H, used, stream));
  const mok_gg_launch ld = mok_fp8_launch(w, I, 0, 0), lx = mok_fp8_launch(w, H, 0, 0);
  TRY(mok_gg_fp8_fwd(w->fp8.q, w->fp8.q_scales, wt->w_down_t, wt->w_down_t_scale, w->d_a, off,
                     cnt, w->el, rows, I, H, &ld, stream));
  if (fused_drw) {
    const mok_move_route r = mok_gpu_route(s);
    /* dgu's 1x128 codes for the dx GEMM come out of the same kernel (the weight gradients
     * between here and that GEMM leave fp8.q alone) */
    TRY_CUDA(mok_swiglu_backward_rw(&r, w->off_drw, w->d_a, s->g, s->a,
                                    mok_fp8_scales_of(s->a, rows, I), MOK_FP8_SCALE_ROWS(rows),
                                    w->fp8.rw_rows, w->dgu, w->fp8.q, w->fp8.q_scales,
                                    MOK_FP8_SCALE_ROWS(rows), I, w->config.use_swiglu_limit,
                                    w->config.swiglu_limit, stream));
  } else {
    TRY_CUDA(mok_swiglu_backward_packed(w->d_a, s->g, w->dgu, rows, used, I,
                                        w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                        stream));
  }
  TRY(weight_grads(s, g, used, stream));
  if (!fused_drw)
    TRY(mok_fp8_quant_act_upto(w->dgu, w->fp8.q, w->fp8.q_scales, rows, 2 * I, used, stream));
  const mok_gg_move push = mok_fused_move(s, 1, 0);
  return mok_gg_fp8_fwd_pushed(w->fp8.q, w->fp8.q_scales, wt->w_gate_up_t, wt->w_gate_up_t_scale,
                               NULL, off, cnt, w->el, rows, H, 2 * I, &push, &lx, stream);
}
