/* fp8_quant_t.cu — the FP8 weight gradient's operands (fp8_quant.h: mok_fp8_quant_t,
 * mok_fp8_requant_t): x [rows, cols] bf16 (or e4m3 codes with 1x128 scales, dequantized on the
 * way in) quantized along the tokens and transposed, codes [cols, m_pad] (a column's tokens
 * contiguous, the K-major layout FP8 wgmma needs) and scales [m_pad / 128][cols]; padding rows
 * (past each expert's count) become zero codes and do not count in the amax. Two kernels:
 *   fp8_quant_t_kernel: one scale per column and 128-token block;
 *   fp8_quant_t_expert_kernel: one scale per expert and column: a CTA per expert and 64 columns
 *     takes the amax over the expert's rows, then quantizes them (from its shared-memory ring when
 *     they fit, else read again).
 * The GEMM that reads them is kernels/gemm/fp8_wgrad.cu. */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/pointwise/fp8_quant.h"
#include "kernels/common/fp8.cuh"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

/* Both stream 128-row x 64-column blocks of x through a ring of F8T_SLOTS shared-memory slots
 * filled by cp.async (rows past a block's real rows zero-filled by the copy), F8T_SLOTS - 1
 * blocks in flight while one is quantized (enough bytes in flight per SM for the copy rate). A
 * slot's rows are 128 bytes (bf16) or 64 (codes)
 * with their 16-byte chunks XORed by (row / 32) % 4, so the column readers (four threads per
 * column, 32 rows each) hit distinct banks; codes carry their rows' 1x128 scales in the slot,
 * skewed by 4 floats per 32 rows for the same reason. */
#define F8T_SLOTS 4
#define F8T_THREADS 256
#define F8T_BLOCKS_PER_CTA 8 /* the 1x128 kernel: consecutive blocks per CTA              */
#define F8T_SCALE_OFF (128 * 64) /* codes slot: the row scales after the codes                */
#define F8T_SLOT_BYTES(FP8_IN) ((FP8_IN) ? F8T_SCALE_OFF + (128 + 16) * 4 : 128 * 64 * 2)

typedef struct {
  const void *x;         /* [rows, cols] bf16, or e4m3 codes with x_scales                       */
  const float *x_scales; /* codes: [cols / 128][m_pad] 1x128 scales along the columns; or NULL  */
  uint8_t *q_t;          /* [cols, m_pad] codes, transposed                                      */
  float *scales_t;       /* [m_pad / 128][cols]                                                  */
  float *expert_amax;    /* per-expert scales: [E][cols], each column's amax                     */
  const int32_t *offset, *count;
  int num_experts;
  int64_t cols, m_pad;
} f8t_params;

/* The expert whose padded rows hold row r (offsets ascending, offset[E] the end), or -1 past it. */
__device__ __forceinline__ int f8t_expert_of(const int32_t *offset, int E, int64_t r) {
  if (r >= offset[E]) return -1;
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (offset[mid] <= r) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/* The real rows of the 128-row block at r0 of expert e (blocks are inside one expert: offsets are
 * multiples of 128): 0 to 128. */
__device__ __forceinline__ int f8t_real_rows(const int32_t *offset, const int32_t *count, int e,
                                             int64_t r0) {
  const int64_t real64 = (int64_t)max(count[e], 0) - (r0 - offset[e]);
  return real64 <= 0 ? 0 : (real64 >= 128 ? 128 : (int)real64);
}

/* This thread's copies of the block at r0 (its first `real` rows from x, the rest zeros),
 * columns c0..c0 + 63, into the slot; the caller commits the group. */
template <bool FP8_IN>
__device__ __forceinline__ void f8t_issue(uint8_t *slot, const f8t_params &p, int64_t r0,
                                          int64_t c0, int real) {
  const uint32_t s = smem_u32(slot);
  const int es = FP8_IN ? 1 : 2, row_bytes = 64 * es, chunks = row_bytes / 16; /* per row */
  const uint8_t *x = (const uint8_t *)p.x + c0 * es;
#pragma unroll
  for (int k = 0; k < 128 * chunks / F8T_THREADS; ++k) { /* chunk i % chunks of row i / chunks */
    const int i = threadIdx.x + F8T_THREADS * k, r = i / chunks, ch = i % chunks;
    const int live = r < real;
    cp_async16(s + r * row_bytes + ((ch ^ ((r >> 5) & 3)) << 4),
               x + (live ? r0 + r : 0) * p.cols * es + ch * 16, live ? 16 : 0);
  }
  if (FP8_IN && threadIdx.x < 32) { /* the rows' scales, four per copy */
    const int q = threadIdx.x, left = real - 4 * q;
    const float *src = p.x_scales + (c0 / 128) * p.m_pad + (left > 0 ? r0 + 4 * q : 0);
    cp_async16(s + F8T_SCALE_OFF + (4 * q + 4 * (q >> 3)) * 4, src,
               left <= 0 ? 0 : (left >= 4 ? 16 : 4 * left));
  }
}

/* This thread's 32 values of its column (c = threadIdx.x / 4, rows 32 * (threadIdx.x % 4) on) as
 * floats, and the column's amax over the block, shared by its four threads. FP8_IN: each code
 * times its row's scale rounded to bf16, so the result is that of mok_fp8_dequant_act
 * followed by the bf16 version, bit for bit, without the bf16 copy. */
template <bool FP8_IN>
__device__ __forceinline__ float f8t_column(const uint8_t *slot, float *v) {
  const int c = threadIdx.x >> 2, sub = threadIdx.x & 3;
  if (FP8_IN) {
    const uint8_t *col = slot + sub * 32 * 64 + (((c >> 4) ^ sub) << 4) + (c & 15);
    const float *sc = (const float *)(slot + F8T_SCALE_OFF) + sub * 36;
#pragma unroll
    for (int j = 0; j < 32; j += 4) { /* four rows' codes at a time */
      float f[4];
      f8_codes4((uint32_t)col[j * 64] | (uint32_t)col[(j + 1) * 64] << 8 |
                    (uint32_t)col[(j + 2) * 64] << 16 | (uint32_t)col[(j + 3) * 64] << 24,
                f);
#pragma unroll
      for (int q = 0; q < 4; q += 2) {
        const uint32_t b = pack_bf16x2(f[q] * sc[j + q], f[q + 1] * sc[j + q + 1]);
        v[j + q] = __uint_as_float(b << 16);
        v[j + q + 1] = __uint_as_float(b & 0xffff0000u);
      }
    }
  } else {
    const uint8_t *col = slot + sub * 32 * 128 + (((c >> 3) ^ sub) << 4) + (c & 7) * 2;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      v[j] = __uint_as_float((uint32_t)*(const uint16_t *)(col + j * 128) << 16);
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  return fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
}

/* This thread's 32 values (v, of column c0 + c, rows r0 + 32 * sub on) as codes of the transposed
 * row, and the column's scale for the block once per column. */
__device__ __forceinline__ void f8t_store_column(const f8t_params &p, const float *v, float scale,
                                                 int64_t r0, int64_t c0) {
  const int c = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const float inv = 1.0f / scale;
  uint32_t w[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = f8_pack4(v + 4 * j, inv);
  uint4 *dst = (uint4 *)(p.q_t + (c0 + c) * p.m_pad + r0 + sub * 32);
  dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
  dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  if (sub == 0) p.scales_t[(r0 / 128) * p.cols + c0 + c] = scale;
}

/* What f8t_stream does with each block. */
#define F8T_AMAX 0  /* only the columns' amax over the blocks                          */
#define F8T_OWN 1   /* quantize each block with its own columns' scales (1x128)        */
#define F8T_GIVEN 2 /* quantize each block with the given scales                       */

/* The expert of the block at r0 and the block's real rows: fixed_e, or (fixed_e < 0) found from
 * *cursor, an expert at or before the block's (blocks come in ascending order), which it advances;
 * -1 past the last expert's rows. */
__device__ __forceinline__ int f8t_block(const f8t_params &p, int fixed_e, int *cursor, int64_t r0,
                                         int *real) {
  int e = fixed_e;
  if (e < 0 && r0 < p.offset[p.num_experts]) {
    e = *cursor;
    while (p.offset[e + 1] <= r0) ++e;
    *cursor = e;
  }
  *real = e < 0 ? 0 : f8t_real_rows(p.offset, p.count, e, r0);
  return e;
}

/* Blocks b0..b0 + n - 1 (rows from b0 * 128), columns c0..c0 + 63, through the ring. Returns the
 * columns' amax over them (F8T_AMAX). Blocks past the last expert's rows are skipped (nothing
 * reads them). */
template <bool FP8_IN, int WHAT>
__device__ __forceinline__ float f8t_stream(uint8_t *smem, const f8t_params &p, int fixed_e,
                                            int64_t b0, int n, int64_t c0, float scale) {
  float v[32];
  float amax = 0.0f;
  int real;
  /* the issuing and the quantizing walk's experts (one lookup, then forward) */
  int ce = fixed_e >= 0 ? fixed_e : max(f8t_expert_of(p.offset, p.num_experts, b0 * 128), 0);
  int cq = ce;
#pragma unroll
  for (int i = 0; i < F8T_SLOTS - 1; ++i) {
    if (i < n && f8t_block(p, fixed_e, &ce, (b0 + i) * 128, &real) >= 0)
      f8t_issue<FP8_IN>(smem + i * F8T_SLOT_BYTES(FP8_IN), p, (b0 + i) * 128, c0, real);
    cp_async_commit();
  }
  for (int i = 0; i < n; ++i) {
    cp_async_wait<F8T_SLOTS - 2>();
    __syncthreads(); /* block i landed for all threads; every thread is done with block i - 1 */
    const int ni = i + F8T_SLOTS - 1;
    if (ni < n && f8t_block(p, fixed_e, &ce, (b0 + ni) * 128, &real) >= 0)
      f8t_issue<FP8_IN>(smem + (ni % F8T_SLOTS) * F8T_SLOT_BYTES(FP8_IN), p, (b0 + ni) * 128, c0,
                        real);
    cp_async_commit();
    const int64_t r0 = (b0 + i) * 128;
    if (f8t_block(p, fixed_e, &cq, r0, &real) < 0) continue;
    const float a = f8t_column<FP8_IN>(smem + (i % F8T_SLOTS) * F8T_SLOT_BYTES(FP8_IN), v);
    if (WHAT == F8T_AMAX) amax = fmaxf(amax, a);
    else f8t_store_column(p, v, WHAT == F8T_OWN ? f8_scale_of(a) : scale, r0, c0);
  }
  cp_async_wait<0>();
  __syncthreads(); /* the ring is free for the next stream */
  return amax;
}

/* 1x128 scales: each column's scale from its block's amax. A CTA per 64 columns and
 * F8T_BLOCKS_PER_CTA consecutive blocks. */
template <bool FP8_IN>
__global__ void __launch_bounds__(F8T_THREADS) fp8_quant_t_kernel(const f8t_params p) {
  extern __shared__ __align__(128) uint8_t f8t_smem[];
  const int nb = (int)(p.m_pad / 128), b0 = (int)blockIdx.x * F8T_BLOCKS_PER_CTA;
  f8t_stream<FP8_IN, F8T_OWN>(f8t_smem, p, -1, b0, min(F8T_BLOCKS_PER_CTA, nb - b0),
                              (int64_t)blockIdx.y * 64, 0.0f);
}

/* One scale per expert and column: a CTA per (expert, 64 columns) streams the expert's real blocks
 * for the columns' amax (also written to expert_amax), then quantizes every block of the expert,
 * padding blocks included, with that scale: from the ring itself when the real blocks fit in it
 * (up to 512 rows), else streaming them again (from L2 mostly). The same codes and scales as an
 * amax pass over all the blocks followed by the quantization (a maximum is order-free). */
template <bool FP8_IN>
__global__ void __launch_bounds__(F8T_THREADS) fp8_quant_t_expert_kernel(const f8t_params p) {
  extern __shared__ __align__(128) uint8_t f8t_smem[];
  const int e = blockIdx.x, c = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int64_t c0 = (int64_t)blockIdx.y * 64, b0 = p.offset[e] / 128;
  const int nblk = (int)(p.offset[e + 1] / 128 - b0);
  const int nlive = min(nblk, (max(p.count[e], 0) + 127) / 128);
  const float amax = f8t_stream<FP8_IN, F8T_AMAX>(f8t_smem, p, e, b0, nlive, c0, 0.0f);
  if (sub == 0) p.expert_amax[(int64_t)e * p.cols + c0 + c] = amax;
  const float scale = f8_scale_of(amax);
  float v[32];
  if (nlive <= F8T_SLOTS) { /* block i is still in slot i: the stream overwrote none */
    for (int i = 0; i < nlive; ++i) {
      f8t_column<FP8_IN>(f8t_smem + i * F8T_SLOT_BYTES(FP8_IN), v);
      f8t_store_column(p, v, scale, (b0 + i) * 128, c0);
    }
  } else {
    f8t_stream<FP8_IN, F8T_GIVEN>(f8t_smem, p, e, b0, nlive, c0, scale);
  }
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = 0.0f;
  for (int i = nlive; i < nblk; ++i) f8t_store_column(p, v, scale, (b0 + i) * 128, c0);
}

/* ---- host side ------------------------------------------------------------------------------ */

/* Both transposing quantizers: x bf16 (q_scales NULL) or e4m3 codes with their 1x128 scales;
 * expert_amax non-NULL: one scale per expert and column (each column's amax there too). */
static mok_status f8t_quantize(const void *x, const float *x_scales, void *q_t, float *scales_t,
                               float *expert_amax, const int32_t *expert_offset,
                               const int32_t *expert_count, int num_experts, int64_t m_total,
                               int64_t cols, cudaStream_t stream) {
  if (!x || !q_t || !scales_t || !expert_offset || !expert_count) return MOK_ERR_INVALID_ARGUMENT;
  if (num_experts <= 0 || m_total <= 0 || cols <= 0) return MOK_ERR_INVALID_SHAPE;
  if (cols % 128 || ((uintptr_t)x & 15) || ((uintptr_t)q_t & 15) || ((uintptr_t)expert_amax & 3))
    return MOK_ERR_MISALIGNED;
  const int64_t m_pad = MOK_FP8_SCALE_ROWS(m_total);
  if (m_pad / 128 > INT32_MAX || cols / 64 > 65535) return MOK_ERR_INVALID_SHAPE;
  if (x_scales && ((uintptr_t)x_scales & 15)) return MOK_ERR_MISALIGNED;
  f8t_params p;
  p.x = x;
  p.x_scales = x_scales;
  p.q_t = (uint8_t *)q_t;
  p.scales_t = scales_t;
  p.expert_amax = expert_amax;
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.cols = cols;
  p.m_pad = m_pad;
  const int fp8_in = x_scales != NULL, per_expert = expert_amax != NULL;
  const void *kernels[2][2] = {
      {(const void *)fp8_quant_t_kernel<false>, (const void *)fp8_quant_t_kernel<true>},
      {(const void *)fp8_quant_t_expert_kernel<false>,
       (const void *)fp8_quant_t_expert_kernel<true>}};
  const void *kernel = kernels[per_expert][fp8_in];
  const int smem = F8T_SLOTS * (fp8_in ? F8T_SLOT_BYTES(1) : F8T_SLOT_BYTES(0));
  MOK_KCUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  /* per expert: a CTA per (expert, 64 columns); 1x128: a CTA per 64 columns and
     F8T_BLOCKS_PER_CTA of their blocks */
  const int64_t nb = m_pad / 128;
  const dim3 grid(per_expert ? (unsigned)num_experts
                             : (unsigned)((nb + F8T_BLOCKS_PER_CTA - 1) / F8T_BLOCKS_PER_CTA),
                  (unsigned)(cols / 64));
  void *args[] = {&p};
  MOK_KCUDA(cudaLaunchKernel(kernel, grid, dim3(F8T_THREADS), args, (size_t)smem, stream));
  return MOK_SUCCESS;
}

extern "C" mok_status mok_fp8_quant_t(const void *x, void *q_t, float *scales_t, float *expert_amax,
                                      const int32_t *expert_offset, const int32_t *expert_count,
                                      int num_experts, int64_t m_total, int64_t cols,
                                      cudaStream_t stream) {
  return f8t_quantize(x, NULL, q_t, scales_t, expert_amax, expert_offset, expert_count, num_experts,
                      m_total, cols, stream);
}

extern "C" mok_status mok_fp8_requant_t(const void *q, const float *q_scales, void *q_t,
                                        float *scales_t, float *expert_amax,
                                        const int32_t *expert_offset, const int32_t *expert_count,
                                        int num_experts, int64_t m_total, int64_t cols,
                                        cudaStream_t stream) {
  if (!q_scales) return MOK_ERR_INVALID_ARGUMENT;
  return f8t_quantize(q, q_scales, q_t, scales_t, expert_amax, expert_offset, expert_count,
                      num_experts, m_total, cols, stream);
}
