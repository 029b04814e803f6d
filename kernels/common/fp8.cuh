/* fp8.cuh — the device arithmetic of mok's block-scaled FP8 data (the conventions of fp8.h):
 * a block's scale from its amax, E4M3 packing and unpacking, the 1x128 quantizer of a half-warp's
 * registers and the bf16 dequantization. One copy for every kernel that makes or reads codes (the
 * quantizers of kernels/pointwise, the dispatch of kernels/move, the GEMM epilogues of
 * kernels/gemm), so that their codes and scales agree bit for bit. Header-only, device code. */
#ifndef MOK_COMMON_FP8_CUH
#define MOK_COMMON_FP8_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/common/fp8.h"
#include "kernels/common/ptx.cuh"

/* The scale of a 1x128 (or 128x128) block from its largest magnitude: amax / 448 (E4M3's
 * largest finite value), 1 for an all-zero block. Every FP8 quantizer takes it from here, so the
 * epilogue's quantization and the separate kernels' agree bit for bit. */
__device__ __forceinline__ float f8_scale_of(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

/* Two floats as e4m3x2 (lo in the low byte), round to nearest, saturating. */
__device__ __forceinline__ uint16_t f8_pack2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

/* Four consecutive values times inv as E4M3 codes, the first in the low byte. */
__device__ __forceinline__ uint32_t f8_pack4(const float *v, float inv) {
  return (uint32_t)f8_pack2(v[0] * inv, v[1] * inv) |
         ((uint32_t)f8_pack2(v[2] * inv, v[3] * inv) << 16);
}

/* A 1x128 block's largest magnitude from each of the LANES consecutive lanes that hold it (their
 * own amax): a butterfly of maxima, exact, so any split of the block over lanes gives the same
 * scale. */
template <int LANES>
__device__ __forceinline__ float f8_block_amax(float amax) {
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

/* Eight consecutive values times inv as E4M3 codes, 8 bytes at q. */
__device__ __forceinline__ void f8_store_codes8(uint8_t *q, const float *v, float inv) {
  *(uint2 *)q = make_uint2(f8_pack4(v, inv), f8_pack4(v + 4, inv));
}

/* One 1x128 block held by a half-warp, eight values a lane (lane & 15 the position), quantized:
 * the block's amax by shuffles, scale f8_scale_of(amax), the eight codes to *q (8 bytes), the
 * scale to *scale from the half-warp's first lane. Every lane of the warp calls it (the
 * shuffles); active says whether this one stores. The one quantizer of 1x128 activation blocks in
 * registers: the activation quantizer (kernels/pointwise/fp8_quant.cu), the FP8 reverse combine
 * and the SwiGLU backward's fused quantization share it, so their codes agree bit for bit. */
__device__ __forceinline__ void f8_quant_block8(const float *v, uint8_t *q, float *scale, int lane,
                                                bool active) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = f8_block_amax<16>(amax);
  if (!active) return;
  const float sc = f8_scale_of(amax), inv = 1.0f / sc;
  f8_store_codes8(q, v, inv);
  if ((lane & 15) == 0) *scale = sc;
}

/* Four e4m3 codes (the first in the low byte) as floats, exactly (through f16x2: E4M3 is within
 * f16). */
__device__ __forceinline__ void f8_codes4(uint32_t c, float *f) {
  uint32_t h01, h23;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h01) : "h"((uint16_t)(c & 0xffff)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h23) : "h"((uint16_t)(c >> 16)));
  const float2 f01 = __half22float2(*(const __half2 *)&h01);
  const float2 f23 = __half22float2(*(const __half2 *)&h23);
  f[0] = f01.x, f[1] = f01.y, f[2] = f23.x, f[3] = f23.y;
}

/* 16 e4m3 codes times scale s, each rounded to bf16: what mok_fp8_dequant_act writes. */
__device__ __forceinline__ void f8_dequant16(uint4 codes, float s, uint4 *out) {
  const uint32_t c[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float f[4];
    f8_codes4(c[j], f);
    o[2 * j] = pack_bf16x2(f[0] * s, f[1] * s);
    o[2 * j + 1] = pack_bf16x2(f[2] * s, f[3] * s);
  }
  out[0] = make_uint4(o[0], o[1], o[2], o[3]);
  out[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

#endif /* MOK_COMMON_FP8_CUH */
