/* swiglu.cu — the SwiGLU backward of the grouped-GEMM paths (see swiglu.h), elementwise, fp32
 * math on the packed bf16 pre-activations the gate+up epilogue stores: the BF16 form, and the FP8
 * form that also makes the router-weight gradient and quantizes dgu for the dx GEMM; and the NaN
 * poisoning of an output on a device fault. Optional clamp L: a = silu(min(g, L)) *
 * clamp(u, -L, L); at g == L or |u| == L the clamp passes the gradient. */
#include "kernels/common/device.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/move/route.cuh"
#include "kernels/pointwise/swiglu.h"
#include "kernels/pointwise/swiglu_bwd.cuh"

__global__ void swiglu_bwd_packed_kernel(const bf16 *da, const bf16 *preact, bf16 *dgu,
                                         int64_t rows_max, const int32_t *rows_dev, int64_t I,
                                         int use_limit, float L, const int32_t *err) {
  if (dev_error(err)) return;
  const int64_t nv = I / 8, n = rows_of(rows_max, rows_dev) * nv;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / nv, c = i % nv;
    const uint4 *pre = (const uint4 *)(preact + r * 2 * I);
    float fd[8], fg[8], fu[8];
    dev_unpack8(((const uint4 *)da)[i], fd);
    dev_unpack8(pre[c], fg);
    dev_unpack8(pre[nv + c], fu);
    swiglu_bwd8(fd, fg, fu, (uint4 *)(dgu + r * 2 * I), c, nv, use_limit, L);
  }
}

/* Eight bf16 values of a 1x128 block held by a half-warp, quantized as mok_fp8_quant_act
 * does, bit for bit (f8_quant_block8). */
__device__ __forceinline__ void quant_block8(uint4 packed, uint8_t *q, float *scale, int lane,
                                             bool active) {
  float v[8];
  dev_unpack8(packed, v);
  f8_quant_block8(v, q, scale, lane, active);
}

/* FP8 backward with the router-weight gradient fused (mok_swiglu_backward_rw): one warp per row,
 * 8 columns per lane and step (I % 128 == 0, so a 128-column block is a half-warp's step: whole
 * half-warps are in or out). d_rw's partial sums are the lanes' in column order, combined in a
 * fixed butterfly: deterministic. With q, dgu is also quantized 1x128 (the dx GEMM's A operand). */
#define RW_WARPS 8
__global__ void swiglu_bwd_rw_kernel(mok_move_route r, size_t drw_off, const bf16 *g, const bf16 *preact,
                                     const uint8_t *act, const float *act_scales, int64_t m_pad,
                                     const float *rw_rows, bf16 *dgu, uint8_t *q, float *q_scales,
                                     int64_t q_m_pad, int64_t I, int use_limit, float L) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * RW_WARPS + (threadIdx.x >> 5);
  if (dev_error(r.err) || row >= route_rows(r)) return;
  const int64_t nv = I / 8;
  uint4 *out = (uint4 *)(dgu + row * 2 * I);
  uint8_t *qrow = q ? q + row * 2 * I : NULL;
  const int32_t slot = r.row_src[row];
  if (slot < 0) { /* padding: zeros, zero codes, scale 1 (what quantizing zeros gives) */
    for (int64_t c = lane; c < 2 * nv; c += 32) {
      out[c] = make_uint4(0, 0, 0, 0);
      if (q) *(uint2 *)(qrow + c * 8) = make_uint2(0, 0);
    }
    for (int64_t kb = lane; q && kb < 2 * nv / 16; kb += 32) q_scales[kb * q_m_pad + row] = 1.0f;
    return;
  }
  const float w = rw_rows[row];
  const uint4 *pre = (const uint4 *)(preact + row * 2 * I);
  float dot = 0.0f;
  for (int64_t c0 = 0; c0 < nv; c0 += 32) {
    const int64_t c = c0 + lane;
    const bool in = c < nv;
    uint4 pg = make_uint4(0, 0, 0, 0), pu = pg;
    if (in) {
      float fg[8], fp[8], fu[8], fa[8], fd[8];
      dev_unpack8(((const uint4 *)(g + row * I))[c], fg);
      dev_unpack8(pre[c], fp);
      dev_unpack8(pre[nv + c], fu);
      const uint2 codes = *(const uint2 *)(act + row * I + c * 8);
      const float s = act_scales[(c / 16) * m_pad + row];
      f8_codes4(codes.x, fa);
      f8_codes4(codes.y, fa + 4);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        dot += fg[j] * (fa[j] * s);
        fd[j] = w * fg[j];
      }
      swiglu_bwd8_packed(fd, fp, fu, &pg, &pu, use_limit, L);
      out[c] = pg;
      out[nv + c] = pu;
    }
    if (q) { /* the warp together: dg's block (c / 16), then du's (nv + c) / 16 */
      quant_block8(pg, qrow + c * 8, q_scales + (c / 16) * q_m_pad + row, lane, in);
      quant_block8(pu, qrow + (nv + c) * 8, q_scales + ((nv + c) / 16) * q_m_pad + row, lane, in);
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
  if (lane == 0) *route_slot_f32(r, r.peer_base, drw_off, slot) = dot;
  __threadfence_system();
}

/* NaN over n elements (fp32 or bf16) when the error word is set; every block returns at once
 * otherwise. */
__global__ void nan_if_error_kernel(void *dst, int64_t n, int fp32, const int32_t *err) {
  if (!dev_error(err)) return;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (fp32) ((float *)dst)[i] = dev_nan();
    else ((bf16 *)dst)[i] = __float2bfloat16_rn(dev_nan());
  }
}

static unsigned ew_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b > 16384 ? 16384 : (b < 1 ? 1 : b));
}

extern "C" cudaError_t mok_swiglu_backward_packed(const void *da, const void *preact, void *dgu,
                                                 int64_t rows_max, const int32_t *rows_dev,
                                                 int64_t I, int use_limit, float limit,
                                                 const int32_t *err, cudaStream_t stream) {
  if (rows_max <= 0 || I <= 0) return cudaSuccess;
  swiglu_bwd_packed_kernel<<<ew_blocks(rows_max * I / 8), 256, 0, stream>>>(
      (const bf16 *)da, (const bf16 *)preact, (bf16 *)dgu, rows_max, rows_dev, I, use_limit, limit,
      err);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_swiglu_backward_rw(const mok_move_route *r, size_t drw_off, const void *g,
                                             const void *preact, const void *act,
                                             const float *act_scales, int64_t m_pad,
                                             const float *rw_rows, void *dgu, void *q,
                                             float *q_scales, int64_t q_m_pad, int64_t I,
                                             int use_limit, float limit, cudaStream_t stream) {
  if (r->capacity <= 0 || I <= 0) return cudaSuccess;
  if (I % 128 || (q && (!q_scales || q_m_pad < r->capacity))) return cudaErrorInvalidValue;
  swiglu_bwd_rw_kernel<<<(unsigned)((r->capacity + RW_WARPS - 1) / RW_WARPS), RW_WARPS * 32, 0,
                         stream>>>(*r, drw_off, (const bf16 *)g, (const bf16 *)preact,
                                   (const uint8_t *)act, act_scales, m_pad, rw_rows, (bf16 *)dgu,
                                   (uint8_t *)q, q_scales, q_m_pad, I, use_limit, limit);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_nan_if_error(void *dst, int64_t n, int fp32, const int32_t *err,
                                       cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t b = (n + 255) / 256;
  nan_if_error_kernel<<<(unsigned)(b > 1024 ? 1024 : b), 256, 0, stream>>>(dst, n, fp32, err);
  return cudaGetLastError();
}
