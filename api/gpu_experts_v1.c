/* gpu_experts_v1.c — the oracle path's expert stages (MOK_PATH_ORACLE): the routed experts over
 * the schedule's rows and the shared expert over the rank's tokens, forward and backward, on the
 * mma.sync GEMMs of kernels/v1 with fp32 pre-activations; and their weight-gradient GEMM, which
 * the other paths also use for bf16 gradients accumulated into. Everything only enqueues on the
 * stream. */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_experts.h"
#include "kernels/v1/v1.h"

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

mok_status mok_v1_wgrad(const mok_schedule *s, const int32_t *err, const void *A, int64_t lda,
                        const void *B, int64_t ldb, void *C, int64_t M, int64_t N, int64_t rows,
                        int mode, cudaStream_t stream) {
  TRY_CUDA(wgrad_gemm(s, err, A, lda, B, ldb, C, M, N, rows, mode, stream));
  return MOK_SUCCESS;
}

mok_status mok_v1_routed_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                 void *out_rows, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_gate, NULL, 0, H, I * H, 0, s->g, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_up, NULL, 0, H, I * H, 0, s->u, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->g, s->u, s->a, s->rows, rows_dev, I, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(s, err, s->a, I, wt->w_down, NULL, 0, I, H * I, 0, out_rows, H, 0, H, I, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

mok_status mok_v1_routed_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                  void *d_out, void *dx_rows, const mok_grads *g,
                                  cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  const int mode = mok_grad_mode(g);
  const size_t e2 = 2;
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

mok_status mok_v1_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                 cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_gate, NULL, 0, H, 0, 0, s->sg, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_up, NULL, 0, H, 0, 0, s->su, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->sg, s->su, s->sa, T, NULL, Is, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(NULL, err, s->sa, Is, wt->ws_down, NULL, 0, Is, 0, 0, w->ys, H, T, H, Is, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

mok_status mok_v1_shared_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  const void *dy, const mok_grads *g, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  const int mode = mok_grad_mode(g);
  const size_t e2 = 2;
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
