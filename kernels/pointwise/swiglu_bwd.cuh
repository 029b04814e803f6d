/* swiglu_bwd.cuh — the SwiGLU backward's arithmetic on eight columns, in one place for the two
 * kernels that run it on the FP8 path: the row kernel (kernels/v1_swiglu.cu) and the d_act
 * GEMM's epilogue (kernels/grouped_gemm_fp8_dswiglu.cuh), whose gradients then agree bit for bit.
 * Optional clamp L as in kernels/v1_swiglu.cu: at g == L or |u| == L the clamp passes the
 * gradient. */
#ifndef MOK_SWIGLU_BWD_CUH
#define MOK_SWIGLU_BWD_CUH

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
  *pg = v1_pack8(dg);
  *pu = v1_pack8(du);
}

#endif /* MOK_SWIGLU_BWD_CUH */
