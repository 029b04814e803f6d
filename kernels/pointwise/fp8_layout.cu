/* fp8_layout.cu — the FP8 backward's layout conversions (fp8_quant.h): block-scaled E4M3 weights
 * transposed (codes moved, scales moved, nothing re-quantized, so exact), and 1x128-quantized rows
 * dequantized back to bf16 for the weight gradients. */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/pointwise/fp8_block_t.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

/* One CTA (256 threads) per 128x128 block of q [E, n, k]: the block into shared memory by
 * 16-byte loads (thread t: the 16-byte piece t % 8 of rows t / 8 + 32 i), out transposed at
 * q_t[e][kk][col_off + nn] (row length ld_t) by fp8_block_t.cuh; thread 0 moves the scale. */
__global__ void __launch_bounds__(F8B_THREADS) fp8_transpose_kernel(
    const uint8_t *q, const float *scales, uint8_t *q_t, float *scales_t, int64_t n, int64_t k,
    int64_t ld_t, int64_t col_off) {
  __shared__ __align__(16) uint32_t tile[F8B_WORDS];
  const int64_t nb = n / 128, kbs = k / 128;
  const int64_t blk = blockIdx.x; /* (expert, row block, col block) */
  const int64_t e = blk / (nb * kbs), rb = (blk / kbs) % nb, cb = blk % kbs;
  const uint8_t *src = q + (e * n + rb * 128) * k + cb * 128;
  const int piece = threadIdx.x & 7, row0 = threadIdx.x >> 3;
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __ldcs((const uint4 *)(src + (row0 + 32 * i) * k + 16 * piece));
#pragma unroll
  for (int i = 0; i < 4; ++i) *(uint4 *)&tile[f8b_word(row0 + 32 * i, 4 * piece)] = v[i];
  __syncthreads();
  f8b_store_transposed(tile, q_t + (e * k + cb * 128) * ld_t + col_off + rb * 128, ld_t);
  if (threadIdx.x == 0)
    scales_t[(e * kbs + cb) * (ld_t / 128) + col_off / 128 + rb] = scales[blk];
}

/* Eight threads per 1x128 block of a row, each 16 consecutive codes (a 16-byte load, two 16-byte
 * stores): value = e4m3 * scale, rounded to bf16. Scales K-block-major, [k / 128][m_pad]. Rows
 * from *rows_dev on (when given) are left as they are. */
__global__ void fp8_dequant_act_kernel(const uint8_t *q, const float *scales, uint16_t *x,
                                       int64_t m_total, int64_t k, int64_t m_pad,
                                       const int32_t *rows_dev) {
  const int64_t kbs = k / 128;
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t blk = t >> 3;
  if (blk >= m_total * kbs) return;
  const int64_t row = blk / kbs, kb = blk % kbs;
  if (rows_dev && row >= *rows_dev) return;
  const float s = scales[kb * m_pad + row];
  const int64_t at = row * k + kb * 128 + (t & 7) * 16;
  f8_dequant16(*(const uint4 *)(q + at), s, (uint4 *)(x + at));
}

extern "C" mok_status mok_fp8_transpose_block128(const void *q, const float *scales,
                                                 int64_t experts, int64_t n, int64_t k, void *q_t,
                                                 float *scales_t, int64_t ld_t, int64_t col_off,
                                                 cudaStream_t stream) {
  if (!q || !scales || !q_t || !scales_t) return MOK_ERR_INVALID_ARGUMENT;
  if (experts <= 0 || n <= 0 || k <= 0 || col_off < 0 || ld_t < col_off + n)
    return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128 || ld_t % 128 || col_off % 128 || ((uintptr_t)q & 15) ||
      ((uintptr_t)q_t & 15))
    return MOK_ERR_MISALIGNED;
  const int64_t blocks = experts * (n / 128) * (k / 128);
  if (blocks > INT32_MAX) return MOK_ERR_INVALID_SHAPE; /* one CTA per block */
  fp8_transpose_kernel<<<(unsigned)blocks, F8B_THREADS, 0, stream>>>(
      (const uint8_t *)q, scales, (uint8_t *)q_t, scales_t, n, k, ld_t, col_off);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

extern "C" mok_status mok_fp8_dequant_act(const void *q, const float *scales, void *x,
                                          int64_t m_total, int64_t k, const int32_t *rows_dev,
                                          cudaStream_t stream) {
  if (!q || !scales || !x) return MOK_ERR_INVALID_ARGUMENT;
  if (m_total <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (k % 128 || ((uintptr_t)q & 15) || ((uintptr_t)x & 15)) return MOK_ERR_MISALIGNED;
  const int64_t threads = m_total * (k / 128) * 8; /* eight per 1x128 block */
  const int64_t blocks = (threads + 255) / 256;
  fp8_dequant_act_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
      (const uint8_t *)q, scales, (uint16_t *)x, m_total, k, MOK_FP8_SCALE_ROWS(m_total),
      rows_dev);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}
