/* gpu_layer.c — mok_forward and mok_backward on the v1 GPU path: separate kernels enqueued on the
 * caller's stream, no host synchronization, no allocation (capturable in a CUDA graph).
 * Forward:  stage x (symmetric) | barrier | pull dispatch | gate, up GEMMs | SwiGLU | down GEMM |
 *           push combine into the source rank's (token, k) slots | shared expert | barrier |
 *           y = sum_j rw * slot (j order) + shared.
 * Backward: stage dy, rw | barrier | reverse-combine (pull dy, push d_rw) | expert backward GEMMs
 *           and weight gradients | push dx parts | shared expert backward | barrier |
 *           dx = sum_j part (j order) + shared dx. */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"

#define TRY_CUDA(expr) do { cudaError_t e_ = (expr); if (e_ != cudaSuccess) return mok_gpu_status(e_); } while (0)
#define TRY(expr) do { mok_status s_ = (expr); if (s_ != MOK_SUCCESS) return s_; } while (0)

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
    a.max_rows = s->ws->cap;
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
  if (s) {
    a.offsets = s->expert_offset;
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

static mok_status check_weights(const mok_workspace *w, const mok_weights *wt) {
  if (!wt->w_gate || !wt->w_up || !wt->w_down) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(wt->w_gate) || !mok_gpu_aligned(wt->w_up) || !mok_gpu_aligned(wt->w_down))
    return MOK_ERR_MISALIGNED;
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

mok_status mok_gpu_experts_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   void *out_rows, cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_gate, NULL, 0, H, I * H, 0, s->g, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(s, err, recv, H, wt->w_up, NULL, 0, H, I * H, 0, s->u, I, 0, I, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->g, s->u, s->a, w->cap, rows_dev, I, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(s, err, s->a, I, wt->w_down, NULL, 0, I, H * I, 0, out_rows, H, 0, H, I, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

mok_status mok_gpu_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t T = w->shape.tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  if (Is == 0) return MOK_SUCCESS;
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_gate, NULL, 0, H, 0, 0, s->sg, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(rows_gemm(NULL, err, x, H, wt->ws_up, NULL, 0, H, 0, 0, s->su, Is, T, Is, H, V1_OUT_F32, stream));
  TRY_CUDA(v1_swiglu_forward(s->sg, s->su, s->sa, T, NULL, Is, w->config.use_swiglu_limit,
                             w->config.swiglu_limit, err, stream));
  TRY_CUDA(rows_gemm(NULL, err, s->sa, Is, wt->ws_down, NULL, 0, Is, 0, 0, w->ys, H, T, H, Is, V1_OUT_BF16, stream));
  return MOK_SUCCESS;
}

mok_status mok_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                       const float *router_weights, void *y, cudaStream_t stream) {
  if (!s || !wt) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  const int64_t T = w->shape.tokens, H = w->shape.hidden, k = w->shape.top_k,
                Is = w->shape.shared_intermediate;
  if (T > 0 && (!x || !router_weights || !y)) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(y) || ((uintptr_t)router_weights & 3u))
    return MOK_ERR_MISALIGNED;
  TRY(check_weights(w, wt));
  char *sym = (char *)w->sym.ptr;
  v1_route r = mok_gpu_route(s);

  if (T > 0) TRY_CUDA(cudaMemcpyAsync(sym + w->off_x, x, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, stream));
  TRY(mok_gpu_barrier(w, stream));
  TRY_CUDA(v1_dispatch_pull(&r, w->off_x, s->recv_x, stream));
  TRY(mok_gpu_experts_forward(s, wt, s->recv_x, s->out_rows, stream));
  TRY_CUDA(v1_push_rows(&r, s->out_rows, w->off_slots, stream));
  TRY(mok_gpu_shared_forward(s, wt, x, stream));
  TRY(mok_gpu_barrier(w, stream));
  TRY_CUDA(v1_combine_reduce(T, (int)k, H, sym + w->off_slots, router_weights,
                             Is > 0 ? w->ys : NULL, y, w->err, stream));
  return MOK_SUCCESS;
}

mok_status mok_gpu_check_grads(const mok_workspace *w, const mok_grads *g, int need_dx) {
  const int64_t T = w->shape.tokens, Is = w->shape.shared_intermediate;
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

/* Expert backward from d_out = rw * dy rows ([cap, H], also reused as scratch): weight gradients
 * of this rank's experts and dx rows (dx_rows may equal d_out). */
mok_status mok_gpu_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                    void *d_out, void *dx_rows, const mok_grads *g,
                                    cudaStream_t stream) {
  mok_workspace *w = s->ws;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  const int32_t *err = w->err;
  const int32_t *rows_dev = s->expert_offset + w->el;
  const int mode = grad_mode(g);
  const size_t e2 = 2;
  TRY_CUDA(rows_gemm(s, err, d_out, H, wt->w_down, NULL, 0, I, H * I, 1, w->d_a, I, 0, I, H, V1_OUT_BF16, stream));
  TRY_CUDA(wgrad_gemm(s, err, d_out, H, s->a, I, g->dw_down, H, I, 0, mode, stream));
  TRY_CUDA(v1_swiglu_backward(w->d_a, s->g, s->u, w->dgu, w->cap, rows_dev, I,
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
  const int64_t T = w->shape.tokens, H = w->shape.hidden, Is = w->shape.shared_intermediate;
  const int32_t *err = w->err;
  const int mode = grad_mode(g);
  const size_t e2 = 2;
  if (Is == 0) return MOK_SUCCESS;
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

mok_status mok_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                        const float *router_weights, const void *dy, const mok_grads *g,
                        cudaStream_t stream) {
  if (!s || !wt || !g) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  const int64_t T = w->shape.tokens, H = w->shape.hidden, k = w->shape.top_k,
                Is = w->shape.shared_intermediate;
  if (T > 0 && (!x || !router_weights || !dy)) return MOK_ERR_INVALID_ARGUMENT;
  TRY(mok_gpu_check_grads(w, g, 1));
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(dy) || ((uintptr_t)router_weights & 3u))
    return MOK_ERR_MISALIGNED;
  TRY(check_weights(w, wt));
  char *sym = (char *)w->sym.ptr;
  v1_route r = mok_gpu_route(s);

  if (T > 0) {
    TRY_CUDA(cudaMemcpyAsync(sym + w->off_dy, dy, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, stream));
    TRY_CUDA(cudaMemcpyAsync(sym + w->off_rw, router_weights, (size_t)(T * k) * 4,
                             cudaMemcpyDeviceToDevice, stream));
  }
  TRY(mok_gpu_barrier(w, stream));
  TRY_CUDA(v1_reverse_combine(&r, w->off_dy, w->off_rw, w->off_drw, s->out_rows, w->d_out, stream));
  TRY(mok_gpu_experts_backward(s, wt, s->recv_x, w->d_out, w->d_out, g, stream));
  TRY_CUDA(v1_push_rows(&r, w->d_out, w->off_slots, stream));
  TRY(mok_gpu_shared_backward(s, wt, x, dy, g, stream));
  TRY(mok_gpu_barrier(w, stream));
  TRY_CUDA(v1_dx_reduce(T, (int)k, H, sym + w->off_slots, Is > 0 ? w->ys : NULL, g->dx,
                        (const float *)(sym + w->off_drw), g->d_router_weights, w->err, stream));
  return MOK_SUCCESS;
}
