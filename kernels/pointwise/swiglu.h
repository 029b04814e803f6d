/* swiglu.h — the SwiGLU backward of the grouped-GEMM paths (the forward runs in the gate+up
 * GEMM's epilogue), its FP8 form that also makes the router-weight gradient, and the NaN fill of
 * a gradient when the device error word is set (swiglu.cu). Every function only enqueues work on
 * the given stream and returns the launch status. */
#ifndef MOK_POINTWISE_SWIGLU_H
#define MOK_POINTWISE_SWIGLU_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "kernels/move/move.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dgu [rows, 2I]: columns [0, I) get d/dg, [I, 2I) d/du of a = silu(min(g, L)) * clamp(u, -L, L)
 * (no clamp when use_limit == 0), from da [rows, I] and the packed bf16 pre-activations preact
 * [rows, 2I] (g | u) the gate+up GEMM's epilogue stores; rows [0, rows_dev ? *rows_dev :
 * rows_max). At g == L or |u| == L the clamp passes the gradient. */
cudaError_t mok_swiglu_backward_packed(const void *da, const void *preact, void *dgu,
                                      int64_t rows_max, const int32_t *rows_dev, int64_t I,
                                      int use_limit, float limit, const int32_t *err,
                                      cudaStream_t stream);

/* dst[0, n) = NaN (fp32 when fp32 != 0, else bf16) if the error word is set; else nothing. */
cudaError_t mok_nan_if_error(void *dst, int64_t n, int fp32, const int32_t *err,
                            cudaStream_t stream);

/* The FP8 SwiGLU backward with the router-weight gradient: per real row, g [rows, I] bf16 (the
 * unweighted product dy W_down^T), d_act = rw_rows[row] * g, dgu [rows, 2I] from d_act and the
 * packed pre-activations (as mok_swiglu_backward_packed), and d_rw = sum_i g_i * act_i, act the
 * forward's codes [rows, I] e4m3 times their scales [I / 128][m_pad] (what its down GEMM read),
 * pushed into the source rank's fp32 [T*k] buffer at drw_off. Padding rows of dgu get zeros.
 * q (or NULL): dgu also quantized 1x128 into q [rows, 2I] e4m3 and q_scales [2I / 128][q_m_pad]
 * (q_m_pad >= capacity), bit for bit what mok_fp8_quant_act_upto makes of dgu. I % 128 == 0. */
cudaError_t mok_swiglu_backward_rw(const mok_move_route *r, size_t drw_off, const void *g,
                                  const void *preact, const void *act, const float *act_scales,
                                  int64_t m_pad, const float *rw_rows, void *dgu, void *q,
                                  float *q_scales, int64_t q_m_pad, int64_t I, int use_limit,
                                  float limit, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_POINTWISE_SWIGLU_H */
