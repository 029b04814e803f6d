/* mxfp8.cu — MXFP8 (E4M3 data, one E8M0 scale per 1x32 block; kernels/common/mx_scale.h): bf16
 * weights quantized to it, and MXFP8 tensors converted to the Hopper-native 128-block recipe that
 * the FP8 grouped GEMMs run (fp8_quant.h).
 *
 * Hopper has no hardware block scales, and promoting every 32-long K block would cost the FP8
 * kernel four times the CUDA-core work, so MX tensors are re-expressed once: a 128-block gets
 * the largest of its MX scales S (a power of two), and each value is rescaled by its own MX
 * scale over S (a power of two <= 1, exact in fp32) and rounded back to E4M3. Values of the
 * block's largest-scaled sub-blocks are unchanged; values of sub-blocks with a smaller scale lose
 * low mantissa bits when the shift takes them into E4M3's subnormal range (or to zero). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/mx_scale.h"

/* v * 2^(e - top) for E8M0 codes e <= top: exact in fp32 wherever the result can still round to
 * a nonzero E4M3 value (ldexpf, not exp2f, whose result is not exact by contract). */
__device__ __forceinline__ float mx_shift(float v, uint8_t e, uint8_t top) {
  return ldexpf(v, (int)e - (int)top);
}
/* 4 e4m3 values (one 32-bit word) -> fp32 */
__device__ __forceinline__ void e4m3x4_to_f(uint32_t w, float *v) {
  uint32_t lo, hi;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(lo) : "h"((uint16_t)(w & 0xffff)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(hi) : "h"((uint16_t)(w >> 16)));
  __half2 a = *(__half2 *)&lo, b = *(__half2 *)&hi;
  v[0] = __low2float(a);
  v[1] = __high2float(a);
  v[2] = __low2float(b);
  v[3] = __high2float(b);
}
__device__ __forceinline__ uint32_t f_to_e4m3x4(const float *v) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(v[1]), "f"(v[0]));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(v[3]), "f"(v[2]));
  return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* The largest E8M0 code held by any thread of a 256-thread CTA (255, NaN, is the largest), on
 * every thread: warp shuffles, then the eight warps' maxima through shared memory. */
__device__ __forceinline__ uint8_t mx_cta_max(uint8_t c) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) c = max(c, (uint8_t)__shfl_xor_sync(0xffffffffu, c, o));
  __shared__ uint8_t red[8];
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = c;
  __syncthreads();
  c = red[0];
  for (int i = 1; i < 8; ++i) c = max(c, red[i]);
  return c;
}

/* Activations: one warp per (row, 128-block); lane l holds 4 values of MX block l / 8. */
__global__ void mxfp8_act_kernel(const uint8_t *qmx, const uint8_t *smx, uint8_t *q, float *scales,
                                 int64_t m_total, int64_t k, int64_t m_pad) {
  const int64_t kbs = k / 128;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= m_total * kbs) return;
  const int64_t row = warp / kbs, kb = warp - row * kbs;
  const uint8_t e = smx[row * (k / 32) + kb * 4 + (lane >> 3)];
  uint8_t emax = e;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) emax = max(emax, (uint8_t)__shfl_xor_sync(0xffffffffu, emax, o));
  const int64_t at = row * k + kb * 128 + lane * 4;
  float v[4];
  e4m3x4_to_f(*(const uint32_t *)(qmx + at), v);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = mx_shift(v[i], e, emax);
  /* a block holding an E8M0 NaN is NaN throughout: NaN codes, NaN scale */
  *(uint32_t *)(q + at) = emax == MOK_E8M0_NAN ? 0x7f7f7f7fu : f_to_e4m3x4(v);
  if (lane == 0) scales[kb * m_pad + row] = mok_mx_scale_value(emax);
}

/* Weights: one CTA (256 threads) per 128x128 block; thread t handles row t / 2, half t % 2
 * (two MX blocks of 32). */
__global__ void mxfp8_weight_kernel(const uint8_t *qmx, const uint8_t *smx, uint8_t *q,
                                    float *scales, int64_t n, int64_t k) {
  const int64_t nb = n / 128, kbs = k / 128;
  const int64_t blk = blockIdx.x;
  const int64_t e = blk / (nb * kbs), rb = (blk / kbs) % nb, cb = blk % kbs;
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t grow = e * n + rb * 128 + row;
  const uint8_t *srow = smx + grow * (k / 32) + cb * 4 + half * 2;
  const uint8_t e0 = srow[0], e1 = srow[1];
  const uint8_t emax = mx_cta_max(max(e0, e1));
  const int64_t base = grow * k + cb * 128 + half * 64;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint8_t ej = j ? e1 : e0;
    for (int i = 0; i < 32; i += 4) {
      float v[4];
      e4m3x4_to_f(*(const uint32_t *)(qmx + base + j * 32 + i), v);
#pragma unroll
      for (int t = 0; t < 4; ++t) v[t] = mx_shift(v[t], ej, emax);
      *(uint32_t *)(q + base + j * 32 + i) = emax == MOK_E8M0_NAN ? 0x7f7f7f7fu : f_to_e4m3x4(v);
    }
  }
  if (threadIdx.x == 0) scales[blk] = mok_mx_scale_value(emax);
}

/* bf16 -> MXFP8: one thread per 32-value block (64 bytes in, 32 codes and one E8M0 byte out), the
 * scale by mx_scale.h's rule and every value times the scale's exact inverse, rounded to
 * saturating E4M3 (as the CPU reference's mok_mxfp8_quantize_rows); a block holding a NaN or an
 * infinity gets E8M0 NaN and NaN codes. */
__global__ void mxfp8_quant_kernel(const uint16_t *w, uint8_t *q, uint8_t *scales, int64_t blocks) {
  const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  uint4 raw[4];
  const uint4 *src = (const uint4 *)(w + b * MOK_MX_BLOCK);
#pragma unroll
  for (int i = 0; i < 4; ++i) raw[i] = src[i];
  const uint16_t *h = (const uint16_t *)raw;
  float v[MOK_MX_BLOCK];
  uint32_t amax_bits = 0; /* |v| as bits: ordered like the magnitudes, NaN and inf above all */
#pragma unroll
  for (int i = 0; i < MOK_MX_BLOCK; ++i) {
    const uint32_t u = (uint32_t)h[i] << 16;
    v[i] = __uint_as_float(u);
    amax_bits = max(amax_bits, u & 0x7fffffffu);
  }
  const uint8_t code = mok_mx_scale_code(__uint_as_float(amax_bits));
  scales[b] = code;
  uint32_t out[MOK_MX_BLOCK / 4];
  if (code == MOK_E8M0_NAN) {
#pragma unroll
    for (int i = 0; i < MOK_MX_BLOCK / 4; ++i) out[i] = 0x7f7f7f7fu;
  } else {
    const float inv = mok_mx_scale_inverse(code); /* a power of two: v * inv is exact */
#pragma unroll
    for (int i = 0; i < MOK_MX_BLOCK; ++i) v[i] *= inv;
#pragma unroll
    for (int i = 0; i < MOK_MX_BLOCK / 4; ++i) out[i] = f_to_e4m3x4(v + 4 * i);
  }
  uint4 *dst = (uint4 *)(q + b * MOK_MX_BLOCK);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

extern "C" mok_status mok_mxfp8_quant_weight(const void *w, void *q, uint8_t *scales,
                                             int64_t rows_total, int64_t k, cudaStream_t stream) {
  if (!w || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (rows_total < 0 || k < 0) return MOK_ERR_INVALID_SHAPE;
  if (k % MOK_MX_BLOCK || ((uintptr_t)w & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  const int64_t blocks = rows_total * (k / MOK_MX_BLOCK);
  if (blocks == 0) return MOK_SUCCESS;
  mxfp8_quant_kernel<<<(unsigned)((blocks + 255) / 256), 256, 0, stream>>>(
      (const uint16_t *)w, (uint8_t *)q, scales, blocks);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

/* bf16 -> the block-128 codes of its MXFP8 values in one pass, the same bits as
 * mxfp8_quant_kernel then mxfp8_weight_kernel (the same conversions in the same order): one CTA
 * (256 threads) per 128x128 block; thread t covers columns 8 (t % 16) .. + 8 of rows t / 16 + 16 j
 * (j < 8), four neighbouring lanes holding one MX block of 32. */
__global__ void mxfp8_quant_block128_kernel(const uint16_t *w, uint8_t *q, float *scales,
                                            int64_t n, int64_t k) {
  const int64_t nb = n / 128, kbs = k / 128;
  const int64_t blk = blockIdx.x;
  const int64_t e = blk / (nb * kbs), rb = (blk / kbs) % nb, cb = blk % kbs;
  const int col = (threadIdx.x & 15) * 8, row_in = threadIdx.x >> 4;
  const int64_t base = (e * n + rb * 128 + row_in) * k + cb * 128 + col;
  float v[8][8];
  uint8_t code[8];
  uint8_t top = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint4 raw = *(const uint4 *)(w + base + (int64_t)j * 16 * k);
    const uint16_t *h = (const uint16_t *)&raw;
    uint32_t amax_bits = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t u = (uint32_t)h[i] << 16;
      v[j][i] = __uint_as_float(u);
      amax_bits = max(amax_bits, u & 0x7fffffffu);
    }
    amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 1));
    amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 2));
    code[j] = mok_mx_scale_code(__uint_as_float(amax_bits));
    top = max(top, code[j]);
  }
  top = mx_cta_max(top);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint32_t out[2] = {0x7f7f7f7fu, 0x7f7f7f7fu};
    if (top != MOK_E8M0_NAN) {
      const float inv = mok_mx_scale_inverse(code[j]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float t4[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) t4[i] = v[j][4 * h + i] * inv;
        const uint32_t mx = f_to_e4m3x4(t4); /* the MXFP8 codes */
        e4m3x4_to_f(mx, t4);
#pragma unroll
        for (int i = 0; i < 4; ++i) t4[i] = mx_shift(t4[i], code[j], top);
        out[h] = f_to_e4m3x4(t4);
      }
    }
    *(uint2 *)(q + base + (int64_t)j * 16 * k) = make_uint2(out[0], out[1]);
  }
  if (threadIdx.x == 0) scales[blk] = mok_mx_scale_value(top);
}

extern "C" mok_status mok_mxfp8_quant_weight_block128(const void *w, void *q, float *scales,
                                                      int64_t experts, int64_t n, int64_t k,
                                                      cudaStream_t stream) {
  if (!w || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (experts < 0 || n < 0 || k < 0) return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128 || ((uintptr_t)w & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  const int64_t blocks = experts * (n / 128) * (k / 128);
  if (blocks == 0) return MOK_SUCCESS;
  mxfp8_quant_block128_kernel<<<(unsigned)blocks, 256, 0, stream>>>((const uint16_t *)w,
                                                                     (uint8_t *)q, scales, n, k);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

extern "C" mok_status mok_mxfp8_act_to_block128(const void *q_mx, const uint8_t *scales_mx, void *q,
                                                float *scales, int64_t m_total, int64_t k,
                                                cudaStream_t stream) {
  if (!q_mx || !scales_mx || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (m_total <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (k % 128 || ((uintptr_t)q_mx & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  const int64_t warps = m_total * (k / 128);
  mxfp8_act_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, stream>>>(
      (const uint8_t *)q_mx, scales_mx, (uint8_t *)q, scales, m_total, k,
      MOK_FP8_SCALE_ROWS(m_total));
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

extern "C" mok_status mok_mxfp8_weight_to_block128(const void *q_mx, const uint8_t *scales_mx,
                                                   void *q, float *scales, int64_t experts,
                                                   int64_t n, int64_t k, cudaStream_t stream) {
  if (!q_mx || !scales_mx || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (experts <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128 || ((uintptr_t)q_mx & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  mxfp8_weight_kernel<<<(unsigned)(experts * (n / 128) * (k / 128)), 256, 0, stream>>>(
      (const uint8_t *)q_mx, scales_mx, (uint8_t *)q, scales, n, k);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}
