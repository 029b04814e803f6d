/* swiglu_bwd.cuh — the SwiGLU backward's arithmetic on eight columns and the row helpers of the
 * elementwise SwiGLU kernels, in one place for the grouped paths' kernels (swiglu.cu) and the
 * oracle's (kernels/v1/swiglu.cu), whose gradients then follow the same formula. Optional clamp
 * L: at g == L or |u| == L the clamp passes the gradient. */
#ifndef MOK_SWIGLU_BWD_CUH
#define MOK_SWIGLU_BWD_CUH

#include <stdint.h>
#include "kernels/common/device.cuh"

/* Eight columns of the SwiGLU backward: d/dg and d/du, bf16-packed, from d_act fd and the
 * pre-activations fg, fu. */
__device__ __forceinline__ void swiglu_bwd8_packed(const float *fd, const float *fg, const float *fu,
                                                   uint4 *pg, uint4 *pu, int use_limit, float L) {
  float dg[8], du[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    float gc = use_limit ? fminf(fg[q], L) : fg[q];
    float uc = use_limit ? fminf(fmaxf(fu[q], -L), L) : fu[q];
    float s = 1.0f / (1.0f + expf(-gc));
    float silu = gc * s;
    float dsilu = s * (1.0f + gc * (1.0f - s));
    dg[q] = (use_limit && fg[q] > L) ? 0.0f : fd[q] * uc * dsilu;
    du[q] = (use_limit && (fu[q] > L || fu[q] < -L)) ? 0.0f : fd[q] * silu;
  }
  *pg = dev_pack8(dg);
  *pu = dev_pack8(du);
}

/* Eight columns c*8.. of one row: d/dg into row[c], d/du into row[nv + c] (16-byte words). */
__device__ __forceinline__ void swiglu_bwd8(const float *fd, const float *fg, const float *fu,
                                            uint4 *row, int64_t c, int64_t nv, int use_limit,
                                            float L) {
  swiglu_bwd8_packed(fd, fg, fu, &row[c], &row[nv + c], use_limit, L);
}

__device__ __forceinline__ int64_t rows_of(int64_t rows_max, const int32_t *rows_dev) {
  if (!rows_dev) return rows_max;
  int64_t r = *rows_dev;
  return r < rows_max ? r : rows_max;
}

__device__ __forceinline__ void load8f(const float *p, int64_t i, float *f) {
  float4 a = ((const float4 *)p)[2 * i], b = ((const float4 *)p)[2 * i + 1];
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

#endif /* MOK_SWIGLU_BWD_CUH */
