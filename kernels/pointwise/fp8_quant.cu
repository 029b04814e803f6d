/* fp8_quant.cu — the FP8 quantizers of rows and weights (fp8_quant.h): bf16 activations to E4M3
 * codes with one scale per 1x128 block (K-block-major or row-major scales), bf16 weights to codes
 * with one scale per 128x128 block. The block arithmetic is kernels/common/fp8.cuh's, which the
 * GEMM epilogues' quantization shares, so that their codes agree bit for bit. */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/fp8_block_t.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/launch_error.h"

__device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* One half-warp per 1x128 block: lanes hold 8 consecutive values (16-byte loads, so that enough
 * bytes are in flight for the copy rate). The scale of (row, kb) goes to scales[kb * s_kb + row *
 * s_row]. rows_dev (device, or NULL): rows from *rows_dev on are left as they are. Every lane
 * takes part in the shuffles; only active ones load and store. */
__global__ void fp8_quant_act_kernel(const uint16_t *x, uint8_t *q, float *scales, int64_t m_total,
                                     int64_t k, int64_t s_kb, int64_t s_row,
                                     const int32_t *rows_dev) {
  const int64_t kbs = k / 128;
  const int64_t blk = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 4;
  const int lane = threadIdx.x & 15;
  const int64_t row = blk / kbs, kb = blk - row * kbs;
  const bool active = blk < m_total * kbs && !(rows_dev && row >= *rows_dev);
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const int64_t at = row * k + kb * 128 + lane * 8;
  if (active) {
    const uint4 raw = *(const uint4 *)(x + at);
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = bf16_to_f(u[j] & 0xffff);
      v[2 * j + 1] = bf16_to_f(u[j] >> 16);
    }
  }
  f8_quant_block8(v, q + at, scales + kb * s_kb + row * s_row, lane, active);
}

/* One CTA (256 threads) per 128x128 block. Thread t holds the 16-byte piece t % 16 of the rows
 * t / 16 + 16 i (i < 8): all eight loads are issued before any is used (32 KB in flight per CTA),
 * the block's amax comes from the registers (a max: exact in any order), and the codes from the
 * same registers, so every value is read once. Each row's 256 bytes are read, and its 128 codes
 * written, by 16 consecutive threads. TRANSPOSED: the codes also go into a shared-memory tile and
 * out transposed at q_t[e][kk][col_off + nn] (fp8_block_t.cuh, the layout fp8_layout.cu's
 * transposer writes), the scale beside them: the backward's copy from the same read of w. */
template <bool TRANSPOSED>
__global__ void __launch_bounds__(F8B_THREADS) fp8_quant_weight_kernel(
    const uint16_t *w, uint8_t *q, float *scales, int64_t n, int64_t k, uint8_t *q_t,
    float *scales_t, int64_t ld_t, int64_t col_off) {
  __shared__ __align__(16) uint32_t tile[TRANSPOSED ? F8B_WORDS : 1];
  const int64_t nb = n / 128, kbs = k / 128;
  const int64_t blk = blockIdx.x; /* (expert, row block, col block) */
  const int64_t e = blk / (nb * kbs), rb = (blk / kbs) % nb, cb = blk % kbs;
  const int piece = threadIdx.x & 15, row0 = threadIdx.x >> 4;
  const int64_t base = (e * n + rb * 128 + row0) * k + cb * 128 + piece * 8;
  uint4 raw[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) raw[i] = __ldcs((const uint4 *)(w + base + 16 * i * k));
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t u[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      amax = fmaxf(amax, fmaxf(fabsf(bf16_to_f(u[j] & 0xffff)), fabsf(bf16_to_f(u[j] >> 16))));
  }
  __shared__ float red[8];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = red[0];
  for (int i = 1; i < 8; ++i) amax = fmaxf(amax, red[i]);
  const float scale = f8_scale_of(amax);
  const float inv = 1.0f / scale;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t u[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
    uint32_t o[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      o[j] = (uint32_t)f8_pack2(bf16_to_f(u[2 * j] & 0xffff) * inv, bf16_to_f(u[2 * j] >> 16) * inv) |
             ((uint32_t)f8_pack2(bf16_to_f(u[2 * j + 1] & 0xffff) * inv,
                                 bf16_to_f(u[2 * j + 1] >> 16) * inv)
              << 16);
    *(uint2 *)(q + base + 16 * i * k) = make_uint2(o[0], o[1]);
    if (TRANSPOSED) *(uint2 *)&tile[f8b_word(row0 + 16 * i, 2 * piece)] = make_uint2(o[0], o[1]);
  }
  if (threadIdx.x == 0) scales[blk] = scale;
  if (TRANSPOSED) {
    __syncthreads();
    f8b_store_transposed(tile, q_t + (e * k + cb * 128) * ld_t + col_off + rb * 128, ld_t);
    if (threadIdx.x == 0) scales_t[(e * kbs + cb) * (ld_t / 128) + col_off / 128 + rb] = scale;
  }
}

/* ---- host side ------------------------------------------------------------------------------ */

static mok_status f8_quantize_act(const void *x, void *q, float *scales, int64_t m_total, int64_t k,
                                  int64_t s_kb, int64_t s_row, const int32_t *rows_dev,
                                  cudaStream_t stream) {
  if (!x || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (m_total <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (k % 128 || ((uintptr_t)x & 15) || ((uintptr_t)q & 15) || ((uintptr_t)scales & 15))
    return MOK_ERR_MISALIGNED;
  const int64_t halves = m_total * (k / 128); /* one half-warp per 1x128 block */
  const int64_t blocks = (halves * 16 + 255) / 256;
  fp8_quant_act_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
      (const uint16_t *)x, (uint8_t *)q, scales, m_total, k, s_kb, s_row, rows_dev);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

extern "C" mok_status mok_fp8_quant_act(const void *x, void *q, float *scales, int64_t m_total,
                                        int64_t k, cudaStream_t stream) {
  return f8_quantize_act(x, q, scales, m_total, k, MOK_FP8_SCALE_ROWS(m_total), 1, NULL, stream);
}

extern "C" mok_status mok_fp8_quant_act_upto(const void *x, void *q, float *scales, int64_t m_total,
                                             int64_t k, const int32_t *rows_dev,
                                             cudaStream_t stream) {
  if (!rows_dev) return MOK_ERR_INVALID_ARGUMENT;
  return f8_quantize_act(x, q, scales, m_total, k, MOK_FP8_SCALE_ROWS(m_total), 1, rows_dev,
                         stream);
}

extern "C" mok_status mok_fp8_quant_act_rows(const void *x, void *q, float *scales, int64_t m_total,
                                             int64_t k, cudaStream_t stream) {
  return f8_quantize_act(x, q, scales, m_total, k, 1, k / 128, NULL, stream);
}

extern "C" mok_status mok_fp8_quant_weight(const void *w, void *q, float *scales, int64_t experts,
                                           int64_t n, int64_t k, cudaStream_t stream) {
  return mok_fp8_quant_weight_t(w, q, scales, experts, n, k, NULL, NULL, 0, 0, stream);
}

extern "C" mok_status mok_fp8_quant_weight_t(const void *w, void *q, float *scales, int64_t experts,
                                             int64_t n, int64_t k, void *q_t, float *scales_t,
                                             int64_t ld_t, int64_t col_off, cudaStream_t stream) {
  if (!w || !q || !scales || (!q_t) != (!scales_t)) return MOK_ERR_INVALID_ARGUMENT;
  if (experts <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128 || ((uintptr_t)w & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  if (q_t) {
    if (col_off < 0 || ld_t < col_off + n) return MOK_ERR_INVALID_SHAPE;
    if (ld_t % 128 || col_off % 128 || ((uintptr_t)q_t & 15)) return MOK_ERR_MISALIGNED;
  }
  const int64_t blocks = experts * (n / 128) * (k / 128);
  if (blocks > INT32_MAX) return MOK_ERR_INVALID_SHAPE; /* one CTA per block */
  if (q_t)
    fp8_quant_weight_kernel<true><<<(unsigned)blocks, F8B_THREADS, 0, stream>>>(
        (const uint16_t *)w, (uint8_t *)q, scales, n, k, (uint8_t *)q_t, scales_t, ld_t, col_off);
  else
    fp8_quant_weight_kernel<false><<<(unsigned)blocks, F8B_THREADS, 0, stream>>>(
        (const uint16_t *)w, (uint8_t *)q, scales, n, k, NULL, NULL, 0, 0);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}
