/* swiglu.cu — the oracle path's SwiGLU (see v1.h), elementwise, fp32 math on fp32 gate / up
 * pre-activations (so the clamp's masks are decided on unrounded values, as in the reference);
 * activations and gradients are bf16. Optional clamp L: a = silu(min(g, L)) * clamp(u, -L, L); at
 * g == L or |u| == L the clamp passes the gradient. */
#include "kernels/common/device.cuh"
#include "kernels/pointwise/swiglu_bwd.cuh"
#include "kernels/v1/v1.h"

__global__ void swiglu_fwd_kernel(const float *g, const float *u, bf16 *a, int64_t rows_max,
                                  const int32_t *rows_dev, int64_t I, int use_limit, float L,
                                  const int32_t *err) {
  if (dev_error(err)) return;
  const int64_t nv = I / 8, n = rows_of(rows_max, rows_dev) * nv;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float fg[8], fu[8], fa[8];
    load8f(g, i, fg);
    load8f(u, i, fu);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      float gc = use_limit ? fminf(fg[q], L) : fg[q];
      float uc = use_limit ? fminf(fmaxf(fu[q], -L), L) : fu[q];
      fa[q] = gc / (1.0f + expf(-gc)) * uc;
    }
    ((uint4 *)a)[i] = dev_pack8(fa);
  }
}

__global__ void swiglu_bwd_kernel(const bf16 *da, const float *g, const float *u, bf16 *dgu,
                                  int64_t rows_max, const int32_t *rows_dev, int64_t I,
                                  int use_limit, float L, const int32_t *err) {
  if (dev_error(err)) return;
  const int64_t nv = I / 8, n = rows_of(rows_max, rows_dev) * nv;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / nv, c = i % nv;
    float fd[8], fg[8], fu[8];
    dev_unpack8(((const uint4 *)da)[i], fd);
    load8f(g, i, fg);
    load8f(u, i, fu);
    swiglu_bwd8(fd, fg, fu, (uint4 *)(dgu + r * 2 * I), c, nv, use_limit, L);
  }
}

/* The same from the grouped GEMM's packed pre-activations: preact [rows, 2I] bf16, g in columns
 * [0, I), u in [I, 2I) (the clamp's masks then see the bf16-rounded values). */
static unsigned ew_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b > 16384 ? 16384 : (b < 1 ? 1 : b));
}

extern "C" cudaError_t v1_swiglu_forward(const void *g, const void *u, void *a, int64_t rows_max,
                                         const int32_t *rows_dev, int64_t I, int use_limit,
                                         float limit, const int32_t *err, cudaStream_t stream) {
  if (rows_max <= 0 || I <= 0) return cudaSuccess;
  swiglu_fwd_kernel<<<ew_blocks(rows_max * I / 8), 256, 0, stream>>>(
      (const float *)g, (const float *)u, (bf16 *)a, rows_max, rows_dev, I, use_limit, limit, err);
  return cudaGetLastError();
}

extern "C" cudaError_t v1_swiglu_backward(const void *da, const void *g, const void *u, void *dgu,
                                          int64_t rows_max, const int32_t *rows_dev, int64_t I,
                                          int use_limit, float limit, const int32_t *err,
                                          cudaStream_t stream) {
  if (rows_max <= 0 || I <= 0) return cudaSuccess;
  swiglu_bwd_kernel<<<ew_blocks(rows_max * I / 8), 256, 0, stream>>>(
      (const bf16 *)da, (const float *)g, (const float *)u, (bf16 *)dgu, rows_max, rows_dev, I,
      use_limit, limit, err);
  return cudaGetLastError();
}
