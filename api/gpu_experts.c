/* gpu_experts.c — the expert stages of the unfused GPU path (routed experts over the schedule's
 * rows, the shared expert over the rank's tokens), forward and backward, on one of two GEMM
 * backends fixed when the workspace is created:
 *   wgmma: the grouped TMA + wgmma kernels of kernels/grouped_gemm.h — gate+up with the SwiGLU
 *          epilogue (bf16 pre-activations kept for backward), down, dgrad (the gate/up pair in one
 *          reduction), K-grouped weight gradients summed over rows in ascending order;
 *   v1:    the mma.sync kernels with fp32 pre-activations (the oracle, and tile_m = 64).
 * The shared expert is one dense "expert" on the wgmma backend: a fixed table of T rows.
 * Everything only enqueues on the stream. */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tmap.h"

/* ---- v1 backend ------------------------------------------------------------------------------ */

/* C = A * B^T over rows: grouped by the schedule's expert offsets when s != NULL, else dense with
 * m rows. b_trans: B stored [K, N] instead of [N, K]. */
static cudaError_t rows_gemm(const mok_schedule *s, const int32_t *err, const void *A, int64_t lda,
                             const void *B, const void *B2, int64_t b_split, int64_t ldb,
                             int64_t b_stride, int b_trans, void *C, int64_t ldc, int64_t m,
                             int64_t n, int64_t k, int mode, cudaStream_t stream) {
  v1_gemm_args a;
  memset(&a, 0, sizeof a);
  a.a = A;
  a.lda = lda;
  a.b = B;
  a.b2 = B2;
  a.b_split = b_split;
  a.ldb = ldb;
  a.b_group_stride = b_stride;
  a.c = C;
  a.ldc = ldc;
  a.out_mode = mode;
  a.m = m;
  a.n = n;
  a.k = k;
  if (s) {
    a.offsets = s->expert_offset;
    a.groups = s->ws->el;
    a.max_rows = s->rows;
  }
  a.err = err;
  return v1_gemm_rows(&a, b_trans, stream);
}

/* C_g[M, N] = sum over group g's rows of A[r, :M]^T B[r, :N] (dense: rows [0, rows)). */
static cudaError_t wgrad_gemm(const mok_schedule *s, const int32_t *err, const void *A, int64_t lda,
                              const void *B, int64_t ldb, void *C, int64_t M, int64_t N,
                              int64_t rows, int mode, cudaStream_t stream) {
  v1_gemm_args a;
  memset(&a, 0, sizeof a);
  a.a = A;
  a.lda = lda;
  a.b = B;
  a.ldb = ldb;
  a.c = C;
  a.ldc = N;
  a.c_group_stride = M * N;
  a.out_mode = mode;
  a.m = M;
  a.n = N;
  a.k = rows;
  if (s) { /* the real rows of each expert: padding rows may hold anything (the fused pull
            * leaves them as they were) */
    a.offsets = s->expert_offset;
    a.counts = s->expert_count;
    a.groups = s->ws->el;
  }
  a.err = err;
  a.nan_on_error = 1;
  return v1_gemm_wgrad(&a, stream);
}

static int grad_mode(const mok_grads *g) {
  if (g->grad_fp32) return g->accumulate ? V1_OUT_F32_ADD : V1_OUT_F32;
  return g->accumulate ? V1_OUT_BF16_ADD : V1_OUT_BF16;
}

/* ---- wgmma backend --------------------------------------------------------------------------- */

/* The rows one grouped call covers: the schedule's routed experts, or the dense shared expert. */
typedef struct {
  const mok_schedule *s;  /* NULL: the shared expert                  */
  const int32_t *offset, *count;
  int experts;
  int64_t m_total, rows;  /* rows: the v1 fallback's dense row count  */
} gg_rows;

static gg_rows routed_rows(const mok_schedule *s) {
  gg_rows r = {s, s->expert_offset, s->expert_count, s->ws->el, s->rows, 0};
  return r;
}

/* The shared expert as one expert of the schedule's T rows; its device table is written for that
 * count at the start of each shared-expert pass, on the pass's stream (shared_table). */
static gg_rows shared_rows(const mok_schedule *s) {
  const mok_workspace *w = s->ws;
  gg_rows r = {NULL, w->dense_table, w->dense_table + 2, 1, s->tokens, s->tokens};
  return r;
}

/* Written at every pass, not only when the count changes: a captured graph replays its own
 * count's write, which host-side bookkeeping of the last count could not see. */
static mok_status shared_table(const mok_schedule *s, cudaStream_t stream) {
  TRY_CUDA(v1_dense_table(s->ws->dense_table, s->tokens, stream));
  return MOK_SUCCESS;
}

/* dW[e] (=|+=) sum over the rows' r of dC[r, :n]^T A[r, :k]; NaN when the device error word is set.
 * bf16 accumulation has no grouped kernel: the v1 one serves it. */
static mok_status gg_wgrad(const mok_workspace *w, gg_rows r, const void *dc, int64_t ld_dc,
                           const void *a, int64_t ld_a, void *dw, int64_t n, int64_t k,
                           const mok_grads *g, cudaStream_t stream) {
  if (!g->grad_fp32 && g->accumulate) {
    TRY_CUDA(wgrad_gemm(r.s, w->err, dc, ld_dc, a, ld_a, dw, n, k, r.rows, grad_mode(g), stream));
    return MOK_SUCCESS;
  }
  TRY(mok_gg_bf16_wgrad_ld(dc, ld_dc, a, ld_a, dw, g->grad_fp32, g->accumulate, r.offset, r.count,
                           r.experts, r.m_total, n, k, stream));
  TRY_CUDA(v1_nan_if_error(dw, (int64_t)r.experts * n * k, g->grad_fp32, w->err, stream));
  return MOK_SUCCESS;
}

/* act = SwiGLU(x W_gate^T, x W_up^T) with the pre-activations kept (bf16, g | u) in preact;
 * out = act W_down^T. */
static mok_status gg_mlp_forward(const mok_workspace *w, gg_rows r, const void *x,
                                 const void *w_gate, const void *w_up, const void *w_down,
                                 void *preact, void *act, void *out, int64_t I,
                                 cudaStream_t stream) {
  const int64_t H = w->shape.hidden;
  TRY(mok_gg_bf16_gate_up_swiglu(x, w_gate, w_up, act, preact, r.offset, r.count, r.experts,
                                 r.m_total, I, H, w->config.use_swiglu_limit,
                                 w->config.swiglu_limit, stream));
  return mok_gg_bf16_fwd(act, w_down, out, r.offset, r.count, r.experts, r.m_total, H, I, stream);
}

/* From dout (the gradient of out): weight gradients, and dx = dgu [W_gate; W_up] (dx may alias
 * dout). Scratch: d_act [rows, I], dgu [rows, 2I]. */
static mok_status gg_mlp_backward(const mok_workspace *w, gg_rows r, const void *x,
                                  const void *w_gate, const void *w_up, const void *w_down,
                                  const void *preact, const void *act, const void *dout,
                                  void *d_act, void *dgu, void *dx, void *dw_gate, void *dw_up,
                                  void *dw_down, const int32_t *rows_dev, int64_t I,
                                  const mok_grads *g, const mok_gg_move *push,
                                  cudaStream_t stream) {
  const int64_t H = w->shape.hidden;
  TRY(mok_gg_bf16_dgrad(dout, w_down, d_act, r.offset, r.count, r.experts, r.m_total, H, I, stream));
  TRY(gg_wgrad(w, r, dout, H, act, I, dw_down, H, I, g, stream));
  TRY_CUDA(v1_swiglu_backward_packed(d_act, preact, dgu, r.m_total, rows_dev, I,
                                     w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                     stream));
  TRY(gg_wgrad(w, r, dgu, 2 * I, x, H, dw_gate, I, H, g, stream));
  TRY(gg_wgrad(w, r, (const char *)dgu + I * 2, 2 * I, x, H, dw_up, I, H, g, stream));
  if (push) /* dx rows also pushed into the source ranks' slots by the epilogues */
    return mok_gg_bf16_dgrad_pair_pushed(dgu, w_gate, w_up, dx, r.offset, r.count, r.experts,
                                         r.m_total, I, H, push, stream);
  return mok_gg_bf16_dgrad_pair(dgu, w_gate, w_up, dx, r.offset, r.count, r.experts, r.m_total, I,
                                H, stream);
}

/* The fused path's communication for this schedule: pull from x (ctas comm CTAs), or push into
 * the slots (by the epilogues). */
static mok_gg_move fused_move(const mok_schedule *s, int push, int ctas) {
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
  q.mb_rows = w->config.minibatch_rows;
  q.ctas = ctas;
  q.push = push;
  q.timeout_ns = w->timeout_ns;
  q.err = w->err;
  return q;
}

/* ---- the stages ------------------------------------------------------------------------------ */

/* FP8 forward from the quantized rows the schedule keeps in recv_x (codes, then scales:
 * mok_fp8_scales_of): inputs and activations are E4M3 in 1x128 blocks, weights E4M3 with 128x128
 * block scales (mok_quantize_weight). Kept for backward, as the BF16 path keeps its own: the
 * quantized activations (in a) and the bf16 pre-activations (g | u in g); the outputs go to out
 * (the schedule's out_rows, or the ops layer's buffer; NULL: none, with
 * the fused d_router_weights). push: the down epilogues also push the outputs into the source
 * ranks' slots (the combine). Neither out nor push (a ring step's replay with the fused
 * d_router_weights): gate+up only, all that backward reads. */
static mok_status routed_experts_forward_fp8(mok_schedule *s, const mok_weights *wt, void *out,
                                             int push, int pull, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  float *x_scales = mok_fp8_scales_of(s->recv_x, rows, H), *a_scales = mok_fp8_scales_of(s->a, rows, I);
  if (pull && !mok_gpu_fp8_pull_inside(w)) return MOK_ERR_NOT_SUPPORTED;
  if (push && mok_gpu_fp8_mlp_one_launch(w)) {
    /* gate+up and down in one launch: down starts on each SM once gate+up has no tile left for
     * it, a row block's down tiles once that block's activations are stored (no barrier between
     * the two; tuning flag 2048: the two launches below); with pull, the dispatch too (the
     * staged codes, then their scales, at off_x of every rank: stage_x) */
    const mok_gg_move q = fused_move(s, 1, 0);
    const mok_gg_move pq = fused_move(s, 0, w->config.fwd_comm_sms);
    const mok_gg_fp8_mlp m = {
        .x = s->recv_x, .w_gate = wt->w_gate, .w_up = wt->w_up, .w_down = wt->w_down,
        .x_scales = x_scales, .w_gate_scales = wt->w_gate_scale, .w_up_scales = wt->w_up_scale,
        .w_down_scales = wt->w_down_scale, .preact = s->g, .q_act = s->a, .out = out,
        .q_scales = a_scales, .push = &q, .pull = pull ? &pq : NULL,
        .pull_scales_off = w->off_x + (size_t)(w->shape.tokens * H),
        .expert_offset = s->expert_offset, .expert_count = s->expert_count,
        .num_experts = (int)w->el, .m_total = rows, .inter = I, .hidden = H,
        .use_limit = w->config.use_swiglu_limit, .limit = w->config.swiglu_limit,
        .sync = w->mlp_sync, .err = w->err, .timeout_ns = w->timeout_ns};
    return mok_gg_fp8_mlp_forward(&m, stream);
  }
  /* the activations come out of gate+up already quantized for down (w->d_a: the bf16 scratch of
   * the 128-column variants, which quantize after) */
  TRY(mok_gg_fp8_gate_up_swiglu_quantized(s->recv_x, x_scales, wt->w_gate, wt->w_gate_scale,
                                          wt->w_up, wt->w_up_scale, w->d_a, s->g, s->a, a_scales,
                                          s->expert_offset, s->expert_count, w->el, rows, I, H,
                                          w->config.use_swiglu_limit, w->config.swiglu_limit,
                                          stream));
  if (!out && !push) return MOK_SUCCESS;
  if (push) {
    const mok_gg_move q = fused_move(s, 1, 0);
    return mok_gg_fp8_fwd_pushed(s->a, a_scales, wt->w_down, wt->w_down_scale, out,
                                 s->expert_offset, s->expert_count, w->el, rows, H, I, &q, stream);
  }
  return mok_gg_fp8_fwd(s->a, a_scales, wt->w_down, wt->w_down_scale, out, s->expert_offset,
                        s->expert_count, w->el, rows, H, I, stream);
}

/* One FP8 weight gradient dW[e] = A^T B from both operands quantized along the tokens (wq_a rows
 * [a_row, a_row + m) of a_ld, wq_b rows [0, n)), NaN when the device error word is set, as
 * gg_wgrad does. */
static mok_status fp8_wgrad(const mok_schedule *s, int64_t a_row, int64_t a_ld, int64_t m,
                            int64_t n, void *dw, const mok_grads *g, cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t rows_pad = MOK_FP8_SCALE_ROWS(s->rows);
  /* the kernel's expert_scales: both operands per expert (mode 2), B's only (mode 3), or none */
  const int mode = w->config.fp8_weight_grads, scales = mode == 2 ? 1 : mode == 3 ? 2 : 0;
  TRY(mok_gg_fp8_wgrad((const char *)w->wq_a + a_row * rows_pad, w->wq_as + a_row, a_ld, w->wq_b,
                       w->wq_bs, n, dw, g->grad_fp32, g->accumulate, scales,
                       s->expert_offset, s->expert_count, w->el, s->rows, m, n, stream));
  TRY_CUDA(v1_nan_if_error(dw, (int64_t)w->el * m * n, g->grad_fp32, w->err, stream));
  return MOK_SUCCESS;
}

/* The FP8 backward's weight gradients from dout (in d_out) and dgu: dW_down = dout^T act and
 * dW_gate | dW_up = [dg | du]^T x, act and x the forward's quantized rows. When w->fp8_wgrad (not
 * for bf16-accumulated gradients) in FP8: each operand quantized 1x128 along the tokens (or with
 * one scale per expert and channel: act and x in modes 2 and 3, dout and dgu in mode 2) and
 * transposed into wq_a / wq_b (dout and dgu from bf16, act and x requantized from their codes:
 * the same bits as dequantizing them first) for the K-grouped FP8 GEMM. Else in bf16 (gg_wgrad)
 * on act and x dequantized (into d_a, then into d_out, which this overwrites). */
static mok_status fp8_backward_weight_grads(mok_schedule *s, const mok_grads *g,
                                            const int32_t *used, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  const gg_rows r = routed_rows(s);
  const int32_t *off = s->expert_offset, *cnt = s->expert_count;
  const int el = w->el;
  if (w->fp8_wgrad && (g->grad_fp32 || !g->accumulate)) {
    /* per-expert scales: the activations' (modes 2, 3) and the gradients' (mode 2) */
    float *ea = w->wq_amax, *ea_grad = w->config.fp8_weight_grads == 2 ? w->wq_amax : NULL;
    TRY(mok_fp8_quant_t(w->d_out, w->wq_a, w->wq_as, ea_grad, off, cnt, el, rows, H,
                              stream));
    TRY(mok_fp8_requant_t(s->a, mok_fp8_scales_of(s->a, rows, I), w->wq_b, w->wq_bs, ea, off,
                                cnt, el, rows, I, stream));
    TRY(fp8_wgrad(s, 0, H, H, I, g->dw_down, g, stream));
    TRY(mok_fp8_quant_t(w->dgu, w->wq_a, w->wq_as, ea_grad, off, cnt, el, rows, 2 * I,
                              stream));
    TRY(mok_fp8_requant_t(s->recv_x, mok_fp8_scales_of(s->recv_x, rows, H), w->wq_b,
                                w->wq_bs, ea, off, cnt, el, rows, H, stream));
    TRY(fp8_wgrad(s, 0, 2 * I, I, H, g->dw_gate, g, stream));
    return fp8_wgrad(s, I, 2 * I, I, H, g->dw_up, g, stream);
  }
  TRY(mok_fp8_dequant_act(s->a, mok_fp8_scales_of(s->a, rows, I), w->d_a, rows, I, used,
                                stream));
  TRY(gg_wgrad(w, r, w->d_out, H, w->d_a, I, g->dw_down, H, I, g, stream));
  TRY(mok_fp8_dequant_act(s->recv_x, mok_fp8_scales_of(s->recv_x, rows, H), w->d_out, rows,
                                H, used, stream));
  TRY(gg_wgrad(w, r, w->dgu, 2 * I, w->d_out, H, g->dw_gate, I, H, g, stream));
  return gg_wgrad(w, r, (const char *)w->dgu + I * 2, 2 * I, w->d_out, H, g->dw_up, I, H, g,
                  stream);
}

/* FP8 backward with the SwiGLU backward in d_act's epilogue (mok_gpu_fp8_dswiglu): one launch
 * from the reverse combine's dy codes (fp8_q) to dgu (bf16, for the weight gradients), its codes
 * (in d_a, which this route leaves unused) and scales (dsw_scales), and d_rw in the slots; then
 * dx = dgu [W_gate; W_up] (FP8), pushed, before the weight gradients, whose bf16 route reuses
 * d_a. */
static mok_status routed_experts_backward_fp8_dsw(mok_schedule *s, const mok_weights *wt,
                                                  const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  const int32_t *off = s->expert_offset, *cnt = s->expert_count;
  const mok_gg_move push = fused_move(s, 1, 0);
  mok_gg_move drw = push; /* the same slots' mapping, d_rw's [T*k] fp32 there */
  drw.peer_off = w->off_drw;
  const mok_gg_fp8_dswiglu m = {
      .dy = w->fp8_q, .w_down_t = wt->w_down_t, .dy_scales = w->fp8_q_scales,
      .w_down_t_scales = wt->w_down_t_scale, .preact = s->g, .act = s->a,
      .act_scales = mok_fp8_scales_of(s->a, rows, I), .rw = w->rw_rows, .dgu = w->dgu,
      .q = w->d_a, .q_scales = w->dsw_scales, .part = w->dsw_part,
      .drw = &drw, .expert_offset = off, .expert_count = cnt, .num_experts = w->el,
      .m_total = rows, .inter = I, .hidden = H, .use_limit = w->config.use_swiglu_limit,
      .limit = w->config.swiglu_limit};
  TRY(mok_gg_fp8_dact_dswiglu(&m, stream));
  TRY(mok_gg_fp8_fwd_pushed(w->d_a, w->dsw_scales, wt->w_gate_up_t, wt->w_gate_up_t_scale, NULL,
                            off, cnt, w->el, rows, H, 2 * I, &push, stream));
  return fp8_backward_weight_grads(s, g, off + w->el, stream);
}

/* FP8 backward (see gpu_internal.h). Scratch reuse, in order: d_out (rw * dy) is quantized into
 * fp8_q for d_act = dout W_down (FP8); SwiGLU backward gives dgu; the weight gradients
 * (fp8_backward_weight_grads; their bf16 route leaves x in d_out); dgu, quantized into fp8_q
 * (by the SwiGLU backward itself when it also makes d_rw), gives dx = dgu [W_gate; W_up] (FP8),
 * pushed to the source ranks. */
static mok_status routed_experts_backward_fp8(mok_schedule *s, const mok_weights *wt,
                                              const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate, rows = s->rows;
  const int32_t *off = s->expert_offset, *cnt = s->expert_count;
  const int32_t *used = off + w->el; /* the padded rows of this schedule or view (device) */
  if (mok_gpu_fp8_dswiglu(w)) return routed_experts_backward_fp8_dsw(s, wt, g, stream);
  /* fused d_rw: the reverse combine already quantized the unweighted dy into fp8_q */
  if (!w->fp8_fused_drw)
    TRY(mok_fp8_quant_act_upto(w->d_out, w->fp8_q, w->fp8_q_scales, rows, H, used, stream));
  TRY(mok_gg_fp8_fwd(w->fp8_q, w->fp8_q_scales, wt->w_down_t, wt->w_down_t_scale, w->d_a, off, cnt,
                     w->el, rows, I, H, stream));
  if (w->fp8_fused_drw) {
    const v1_route r = mok_gpu_route(s);
    /* dgu's 1x128 codes for the dx GEMM come out of the same kernel (the weight gradients
     * between here and that GEMM leave fp8_q alone) */
    TRY_CUDA(v1_swiglu_backward_rw(&r, w->off_drw, w->d_a, s->g, s->a,
                                   mok_fp8_scales_of(s->a, rows, I), MOK_FP8_SCALE_ROWS(rows),
                                   w->rw_rows, w->dgu, w->fp8_q, w->fp8_q_scales,
                                   MOK_FP8_SCALE_ROWS(rows), I, w->config.use_swiglu_limit,
                                   w->config.swiglu_limit, stream));
  } else {
    TRY_CUDA(v1_swiglu_backward_packed(w->d_a, s->g, w->dgu, rows, used, I,
                                       w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                       stream));
  }
  TRY(fp8_backward_weight_grads(s, g, used, stream));
  if (!w->fp8_fused_drw)
    TRY(mok_fp8_quant_act_upto(w->dgu, w->fp8_q, w->fp8_q_scales, rows, 2 * I, used, stream));
  const mok_gg_move push = fused_move(s, 1, 0);
  return mok_gg_fp8_fwd_pushed(w->fp8_q, w->fp8_q_scales, wt->w_gate_up_t, wt->w_gate_up_t_scale,
                               NULL, off, cnt, w->el, rows, H, 2 * I, &push, stream);
}

static mok_status routed_experts_forward(mok_schedule *s, const mok_weights *wt,
                                         const void *recv, void *out_rows, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  if (w->config.dtype == MOK_DTYPE_FP8_BLOCK128) { /* the ops layer: bf16 rows, quantized here */
    TRY(mok_fp8_quant_act(recv, s->recv_x, mok_fp8_scales_of(s->recv_x, s->rows, H), s->rows,
                                H, stream));
    return routed_experts_forward_fp8(s, wt, out_rows, 0, 0, stream);
  }
  if (w->wgmma)
    return gg_mlp_forward(w, routed_rows(s), recv, wt->w_gate, wt->w_up, wt->w_down, s->g, s->a,
                          out_rows, I, stream);
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_gate, NULL, 0, H, I * H, 0, s->g, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_up, NULL, 0, H, I * H, 0, s->u, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->g, s->u, s->a, s->rows, rows_dev, I, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(s, err, s->a, I, wt->w_down, NULL, 0, I, H * I, 0, out_rows, H, 0, H, I, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

static mok_status routed_experts_forward_fused(mok_schedule *s, const mok_weights *wt, int push,
                                               cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int ctas = w->fwd_comm;
  mok_gg_move pull = fused_move(s, 0, ctas), q = fused_move(s, 1, 0);
  TRY_CUDA(cudaMemsetAsync(w->ready, 0, (size_t)w->ready_count * 4, stream));
  TRY(mok_gg_bf16_gate_up_swiglu_pulled(s->recv_x, wt->w_gate, wt->w_up, s->a, s->g,
                                        s->expert_offset, s->expert_count, w->el, s->rows, I, H,
                                        w->config.use_swiglu_limit, w->config.swiglu_limit, &pull,
                                        stream));
  if (!push)
    return mok_gg_bf16_fwd(s->a, wt->w_down, s->out_rows, s->expert_offset, s->expert_count, w->el,
                           s->rows, H, I, stream);
  return mok_gg_bf16_fwd_pushed(s->a, wt->w_down, s->out_rows, s->expert_offset, s->expert_count,
                                w->el, s->rows, H, I, &q, stream);
}

static mok_status routed_experts_backward_fused(mok_schedule *s, const mok_weights *wt,
                                                const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const mok_gg_move push = fused_move(s, 1, 0);
  return gg_mlp_backward(w, routed_rows(s), s->recv_x, wt->w_gate, wt->w_up, wt->w_down, s->g,
                         s->a, w->d_out, w->d_a, w->dgu, w->d_out, g->dw_gate, g->dw_up,
                         g->dw_down, s->expert_offset + w->el, w->shape.intermediate, g, &push,
                         stream);
}

/* ---- the FP8 shared expert (config fp8_shared_expert) -----------------------------------------
 * The shared expert's bf16 weights are quantized (128x128 blocks) at every call into the
 * workspace (the backward quantizes them again: two layers in flight may share the workspace),
 * then it runs as one dense expert on the routed experts' FP8 kernels: forward gate+up with the
 * quantizing SwiGLU epilogue and down; backward d_act and dx from dy and [dg, du] quantized 1x128
 * and the transposed weights; its weight gradients in bf16 from what the FP8 GEMMs saw (the
 * activations and x dequantized), as config fp8_weight_grads = 0 does for the routed experts. */

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
  uint8_t *q = (uint8_t *)w->s8_w, *t = (uint8_t *)w->s8_wt;
  s8_layout l = {q, q + n, q + 2 * n, t, t + 2 * n,
                 w->s8_ws, w->s8_ws + nb, w->s8_ws + 2 * nb, w->s8_wts, w->s8_wts + 2 * nb};
  return l;
}

/* The shared weights quantized into the layout; transposed: also the backward's copies. */
static mok_status shared_weights_fp8(const mok_workspace *w, const mok_weights *wt, int transposed,
                                     cudaStream_t stream) {
  const int64_t H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const s8_layout l = shared_fp8_layout(w);
  TRY(mok_fp8_quant_weight(wt->ws_gate, l.gate, l.gate_s, 1, Is, H, stream));
  TRY(mok_fp8_quant_weight(wt->ws_up, l.up, l.up_s, 1, Is, H, stream));
  TRY(mok_fp8_quant_weight(wt->ws_down, l.down, l.down_s, 1, H, Is, stream));
  if (!transposed) return MOK_SUCCESS;
  mok_weights q8;
  memset(&q8, 0, sizeof q8);
  q8.w_gate = l.gate;
  q8.w_up = l.up;
  q8.w_down = l.down;
  q8.w_gate_scale = l.gate_s;
  q8.w_up_scale = l.up_s;
  q8.w_down_scale = l.down_s;
  return mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q8, 1, Is, H, l.gate_up_t,
                                   l.gate_up_t_s, l.down_t, l.down_t_s, stream);
}

static mok_status shared_forward_fp8(mok_schedule *s, const mok_weights *wt, const void *x,
                                     cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const gg_rows r = shared_rows(s);
  const s8_layout l = shared_fp8_layout(w);
  TRY(shared_weights_fp8(w, wt, 0, stream));
  float *xs = mok_fp8_scales_of(w->s8_x, T, H), *as = mok_fp8_scales_of(s->sa, T, Is);
  TRY(mok_fp8_quant_act(x, w->s8_x, xs, T, H, stream));
  /* ds_a: the bf16 scratch of the 128-column variants, which quantize after */
  TRY(mok_gg_fp8_gate_up_swiglu_quantized(w->s8_x, xs, l.gate, l.gate_s, l.up, l.up_s, w->ds_a,
                                          s->sg, s->sa, as, r.offset, r.count, 1, T, Is, H,
                                          w->config.use_swiglu_limit, w->config.swiglu_limit,
                                          stream));
  return mok_gg_fp8_fwd(s->sa, as, l.down, l.down_s, w->ys, r.offset, r.count, 1, T, H, Is,
                        stream);
}

/* Its backward after shared_forward_fp8 (the pre-activations in sg, the quantized activations in
 * sa): weight gradients, and dx into ys. Scratch reuse, in order: s8_q holds q(dy), then
 * q([dg, du]); ds_a holds d_act, then the dequantized activations; ys the dequantized x, then dx. */
static mok_status shared_backward_fp8(mok_schedule *s, const mok_weights *wt, const void *x,
                                      const void *dy, const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const gg_rows r = shared_rows(s);
  const s8_layout l = shared_fp8_layout(w);
  TRY(shared_weights_fp8(w, wt, 1, stream));
  /* d_act = q(dy) W_down (W_down^T is [Is, H]) */
  float *qs = mok_fp8_scales_of(w->s8_q, T, H);
  TRY(mok_fp8_quant_act(dy, w->s8_q, qs, T, H, stream));
  TRY(mok_gg_fp8_fwd(w->s8_q, qs, l.down_t, l.down_t_s, w->ds_a, r.offset, r.count, 1, T, Is, H,
                     stream));
  TRY_CUDA(v1_swiglu_backward_packed(w->ds_a, s->sg, w->dsgu, T, NULL, Is,
                                     w->config.use_swiglu_limit, w->config.swiglu_limit, w->err,
                                     stream));
  /* weight gradients in bf16 on the activations and x the forward's GEMMs saw */
  TRY(mok_fp8_dequant_act(s->sa, mok_fp8_scales_of(s->sa, T, Is), w->ds_a, T, Is, NULL,
                                stream));
  TRY(gg_wgrad(w, r, dy, H, w->ds_a, Is, g->dws_down, H, Is, g, stream));
  float *xs = mok_fp8_scales_of(w->s8_x, T, H);
  TRY(mok_fp8_quant_act(x, w->s8_x, xs, T, H, stream)); /* the forward's bits again */
  TRY(mok_fp8_dequant_act(w->s8_x, xs, w->ys, T, H, NULL, stream));
  TRY(gg_wgrad(w, r, w->dsgu, 2 * Is, w->ys, H, g->dws_gate, Is, H, g, stream));
  TRY(gg_wgrad(w, r, (const char *)w->dsgu + Is * 2, 2 * Is, w->ys, H, g->dws_up, Is, H, g,
               stream));
  /* dx = q([dg, du]) [W_gate; W_up] (their transposes are [H, 2Is]) */
  float *gs = mok_fp8_scales_of(w->s8_q, T, 2 * Is);
  TRY(mok_fp8_quant_act(w->dsgu, w->s8_q, gs, T, 2 * Is, stream));
  return mok_gg_fp8_fwd(w->s8_q, gs, l.gate_up_t, l.gate_up_t_s, w->ys, r.offset, r.count, 1, T,
                        H, 2 * Is, stream);
}

mok_status mok_gpu_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  if (Is == 0) return MOK_SUCCESS;
  if (T > 0 && (w->s8_w || w->wgmma)) TRY(shared_table(s, stream));
  if (w->s8_w && T > 0) return shared_forward_fp8(s, wt, x, stream);
  if (w->wgmma && T > 0)
    return gg_mlp_forward(w, shared_rows(s), x, wt->ws_gate, wt->ws_up, wt->ws_down, s->sg, s->sa,
                          w->ys, Is, stream);
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_gate, NULL, 0, H, 0, 0, s->sg, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_up, NULL, 0, H, 0, 0, s->su, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->sg, s->su, s->sa, T, NULL, Is, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(NULL, err, s->sa, Is, wt->ws_down, NULL, 0, Is, 0, 0, w->ys, H, T, H, Is, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

/* Expert backward from d_out = rw * dy rows ([rows, H], also reused as scratch): weight gradients
 * of this rank's experts and dx rows (dx_rows may equal d_out). */
static mok_status routed_experts_backward(mok_schedule *s, const mok_weights *wt,
                                          const void *recv, void *d_out, void *dx_rows,
                                          const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  const int mode = grad_mode(g);
  const size_t e2 = 2;
  if (w->wgmma)
    return gg_mlp_backward(w, routed_rows(s), recv, wt->w_gate, wt->w_up, wt->w_down, s->g, s->a,
                           d_out, w->d_a, w->dgu, dx_rows, g->dw_gate, g->dw_up, g->dw_down,
                           rows_dev, I, g, NULL, stream);
  TRY_CUDA(rows_gemm(s, err, d_out, H, wt->w_down, NULL, 0, I, H * I, 1, w->d_a, I, 0, I, H, V1_OUT_BF16, stream));
  TRY_CUDA(wgrad_gemm(s, err, d_out, H, s->a, I, g->dw_down, H, I, 0, mode, stream));
  TRY_CUDA(v1_swiglu_backward(w->d_a, s->g, s->u, w->dgu, s->rows, rows_dev, I,
                              w->config.use_swiglu_limit, w->config.swiglu_limit, err, stream));
  TRY_CUDA(wgrad_gemm(s, err, w->dgu, 2 * I, recv, H, g->dw_gate, I, H, 0, mode, stream));
  TRY_CUDA(wgrad_gemm(s, err, (const char *)w->dgu + I * e2, 2 * I, recv, H, g->dw_up, I, H, 0,
                      mode, stream));
  TRY_CUDA(rows_gemm(s, err, w->dgu, 2 * I, wt->w_gate, wt->w_up, I, H, I * H, 1, dx_rows, H, 0, H,
                     2 * I, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

/* Shared expert backward (local): its weight gradients, and its dx into the workspace's ys. */
mok_status mok_gpu_shared_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                                   const void *dy, const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  const int mode = grad_mode(g);
  const size_t e2 = 2;
  if (Is == 0) return MOK_SUCCESS;
  if (T > 0 && (w->s8_w || w->wgmma)) TRY(shared_table(s, stream));
  if (w->s8_w && T > 0) return shared_backward_fp8(s, wt, x, dy, g, stream);
  if (w->wgmma && T > 0)
    return gg_mlp_backward(w, shared_rows(s), x, wt->ws_gate, wt->ws_up, wt->ws_down, s->sg, s->sa,
                           dy, w->ds_a, w->dsgu, w->ys, g->dws_gate, g->dws_up, g->dws_down, NULL,
                           Is, g, NULL, stream);
  TRY_CUDA(rows_gemm(NULL, err, dy, H, wt->ws_down, NULL, 0, Is, 0, 1, w->ds_a, Is, T, Is, H, V1_OUT_BF16, stream));
  TRY_CUDA(wgrad_gemm(NULL, err, dy, H, s->sa, Is, g->dws_down, H, Is, T, mode, stream));
  TRY_CUDA(v1_swiglu_backward(w->ds_a, s->sg, s->su, w->dsgu, T, NULL, Is,
                              w->config.use_swiglu_limit, w->config.swiglu_limit, err, stream));
  TRY_CUDA(wgrad_gemm(NULL, err, w->dsgu, 2 * Is, x, H, g->dws_gate, Is, H, T, mode, stream));
  TRY_CUDA(wgrad_gemm(NULL, err, (const char *)w->dsgu + Is * e2, 2 * Is, x, H, g->dws_up, Is, H, T,
                      mode, stream));
  TRY_CUDA(rows_gemm(NULL, err, w->dsgu, 2 * Is, wt->ws_gate, wt->ws_up, Is, H, 0, 1, w->ys, H, T, H,
                     2 * Is, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

/* ---- the routed stages' entry points: the grouped GEMMs' variant choices (clusters of 2 for
 * short experts, FP8 warpgroups) follow the rows an expert of this layer has on average,
 * EP * T * k / E with this rank's count of this call for T, not the capacity, which is sized for
 * the worst case (mok_gg_set_rows_hint; measured at DSv3 EP=2: forward -8%, backward -5%). ---- */
static int64_t routed_rows_hint(const mok_schedule *s) {
  const mok_workspace *w = s->ws;
  const int64_t E = w->shape.num_experts;
  return ((int64_t)w->ep * s->tokens * w->shape.top_k + E - 1) / E;
}

#define WITH_ROWS_HINT(s, call)                                      \
  do {                                                               \
    const int64_t prev_ = mok_gg_set_rows_hint(routed_rows_hint(s)); \
    const mok_status st_ = (call);                                   \
    mok_gg_set_rows_hint(prev_);                                     \
    return st_;                                                      \
  } while (0)

mok_status mok_gpu_experts_forward_fp8(mok_schedule *s, const mok_weights *wt, int push,
                                       int pull, cudaStream_t stream) {
  /* the fused d_router_weights needs no outputs: push only, and a replay stops after gate+up */
  void *out = s->ws->fp8_fused_drw ? NULL : s->out_rows;
  WITH_ROWS_HINT(s, routed_experts_forward_fp8(s, wt, out, push, pull, stream));
}

/* FP8 forward: whether the expert MLP runs as one launch (where it covers the shape; tuning
 * flag 2048: the two launches). */
int mok_gpu_fp8_mlp_one_launch(const mok_workspace *w) {
  return !(gg_tuning_flags() & 2048) && mok_gg_fp8_mlp_supported((int)w->el, w->shape.hidden);
}

/* FP8 backward: whether d_act's epilogue runs the SwiGLU backward (tuning flag 32768, with the
 * fused d_rw, where the 256-column kernel covers the intermediate size). Measured 0.4-0.7 ms
 * slower on the backward than the row kernel after d_act (docs/PERF.md), so opt-in. */
int mok_gpu_fp8_dswiglu(const mok_workspace *w) {
  return w->fp8_fused_drw && w->dsw_scales && (gg_tuning_flags() & 32768) &&
         mok_gg_fp8_dswiglu_supported(w->shape.intermediate);
}

/* FP8 forward: whether the dispatch runs inside that one launch (tuning flag 8192). Measured as
 * a tie with the default, the pull kernel of its own beside the shared expert (docs/PERF.md,
 * "The FP8 dispatch inside the one-launch MLP"). */
int mok_gpu_fp8_pull_inside(const mok_workspace *w) {
  return w->config.dtype == MOK_DTYPE_FP8_BLOCK128 && !w->fused_dispatch &&
         (gg_tuning_flags() & 8192) && mok_gpu_fp8_mlp_one_launch(w);
}

/* FP8 forward: whether the shared expert's side stream is joined only before the combine, not
 * before the expert MLP (the default; tuning flag 65536 joins it before the MLP). The one-launch
 * MLP claims its tiles from counters and completes with any number of resident CTAs, so it starts
 * on the comm SMs as soon as the dispatch pull ends and takes the other SMs as the shared
 * expert's down GEMM leaves them: -0.03 to -0.08 ms on the forward, y the same bits
 * (docs/PERF.md, "The shared expert joined late"). Not with the token ring (several passes) or
 * the dispatch inside the launch (the shared expert in line). */
int mok_gpu_fp8_shared_joined_late(const mok_workspace *w) {
  return w->config.dtype == MOK_DTYPE_FP8_BLOCK128 && !w->fused_dispatch &&
         !(gg_tuning_flags() & 65536) && mok_gpu_fp8_mlp_one_launch(w) &&
         !mok_gpu_fp8_pull_inside(w) && !mok_gpu_ring_on(w);
}

mok_status mok_gpu_experts_backward_fp8(mok_schedule *s, const mok_weights *wt,
                                        const mok_grads *g, cudaStream_t stream) {
  WITH_ROWS_HINT(s, routed_experts_backward_fp8(s, wt, g, stream));
}

mok_status mok_gpu_experts_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   void *out_rows, cudaStream_t stream) {
  WITH_ROWS_HINT(s, routed_experts_forward(s, wt, recv, out_rows, stream));
}

mok_status mok_gpu_experts_forward_fused(mok_schedule *s, const mok_weights *wt, int push,
                                         cudaStream_t stream) {
  WITH_ROWS_HINT(s, routed_experts_forward_fused(s, wt, push, stream));
}

mok_status mok_gpu_experts_backward_fused(mok_schedule *s, const mok_weights *wt,
                                          const mok_grads *g, cudaStream_t stream) {
  WITH_ROWS_HINT(s, routed_experts_backward_fused(s, wt, g, stream));
}

mok_status mok_gpu_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                    void *d_out, void *dx_rows, const mok_grads *g,
                                    cudaStream_t stream) {
  WITH_ROWS_HINT(s, routed_experts_backward(s, wt, recv, d_out, dx_rows, g, stream));
}
