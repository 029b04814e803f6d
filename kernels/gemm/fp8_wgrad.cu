/* grouped_gemm_fp8_wgrad.cu — the FP8 weight gradient (see grouped_gemm.h): operands quantized
 * 1x128 along the reduction (the tokens), so both are "per channel per 128 tokens" scaled, and a
 * K-grouped GEMM over each expert's token blocks whose promotion multiplies every element by its
 * row's and its column's scale; or, with one scale per expert and channel, the blocks chained on
 * the tensor cores and scaled once. Kernels:
 *   gg_fp8_quant_t_kernel: x [rows, cols] bf16 (or e4m3 codes with 1x128 scales, dequantized on
 *     the way in) -> codes [cols, m_pad] e4m3 (transposed: a column's tokens contiguous, the
 *     K-major layout FP8 wgmma needs) and scales [m_pad/128][cols]; padding rows (past each
 *     expert's count) become zero codes and do not count in the amax.
 *   gg_fp8_quant_t_expert_kernel: the same with one scale per expert and column: a CTA per expert
 *     and 64 columns takes the amax over the expert's rows, then quantizes them (from its
 *     shared-memory ring when they fit, else read again).
 *   gg_fp8_wgrad_kernel: dW[e] = sum over e's token blocks of A_blk^T B_blk, A and B given as
 *     those transposed codes; 128 x 256 output tiles, one producer warp, two consumer warpgroups
 *     of 64 rows, each 128-column half's m64n128k32 partial per 128 tokens promoted on the CUDA
 *     cores by its row's and column's scales; when B has one scale per expert and column (applied
 *     once at the end), the blocks chained into the accumulator with m64n256k32 and the
 *     accumulator rescaled by the row scales' ratio between blocks (an expert's last block
 *     issuing only its 32-token slices that hold real tokens; cluster pairs of vertically
 *     adjacent tiles sharing B by multicast); bf16 dW through TMA stores. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

/* ---- the transposing quantizers --------------------------------------------------------------- */

/* Both stream 128-row x 64-column blocks of x through a ring of F8T_SLOTS shared-memory slots
 * filled by cp.async (rows past a block's real rows zero-filled by the copy), F8T_SLOTS - 1
 * blocks in flight while one is quantized. (The first version held one 16-byte load per thread at
 * a time: ~20 KB in flight per SM, ~2.4 TB/s.) A slot's rows are 128 bytes (bf16) or 64 (codes)
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
__global__ void __launch_bounds__(F8T_THREADS) gg_fp8_quant_t_kernel(const f8t_params p) {
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
__global__ void __launch_bounds__(F8T_THREADS) gg_fp8_quant_t_expert_kernel(const f8t_params p) {
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

/* ---- the K-grouped FP8 GEMM ---------------------------------------------------------------- */

/* A tile is 128 dW rows x 256 dW columns: two consumer warpgroups of 64 rows. With only the
 * expert's few token blocks to reduce over (448 rows at DeepSeek-V3 EP=2), the tiles are short,
 * so what they read from L2 per FLOP and what happens between them decide the speed: a 256-wide
 * tile reads 175 FLOP per byte (128 x 128 read 128), and the bf16 output leaves through TMA
 * stores that drain while the next tile runs. Each warpgroup keeps 64 x 256 fp32 accumulators
 * and one 64 x 128 partial: per token block it computes the left half's partial, promotes it,
 * then the right half's. The promotion (every element its own row x column scale: a multiply
 * and an FMA) costs about a third of the kernel: without it the same tiles run at ~940 TFLOP/s
 * instead of ~610; a promotion that only adds, ~700; a 128 x 128 tile whose next wgmmas run
 * behind the promotion (two partials), ~540 (docs/PERF.md). With B's scales per expert and
 * column (the layer's default) the blocks chain into the accumulator instead, rescaled between
 * blocks (f8g_blocks_rescaled): 670-732 TFLOP/s against 638-665 promoted. */
#define F8G_BM 128                       /* dW rows per tile (two 64-row consumer slices)      */
#define F8G_BN 256                       /* dW columns per tile (two 128-column halves)        */
#define F8G_A_BYTES (F8G_BM * 128)       /* 128 tokens of 128 rows, e4m3: 16 KB                */
#define F8G_HALF_BYTES (128 * 128)       /* one 128-column half of B: 16 KB                    */
#define F8G_STAGE_BYTES (F8G_A_BYTES + 2 * F8G_HALF_BYTES) /* 48 KB, 1024-aligned                */
#define F8G_STAGES 3
#define F8G_SC_OFF (F8G_STAGES * F8G_STAGE_BYTES)          /* per stage: 128 + 256 scales      */
#define F8G_SC_BYTES ((F8G_BM + F8G_BN) * 4)
/* a warpgroup's whole 64 x 256 bf16 slice, so the four TMA stores of a tile wait for nothing but
 * the previous tile's, which had a main loop's time to drain */
#define F8G_EPI_OFF ((F8G_SC_OFF + F8G_STAGES * F8G_SC_BYTES + 1023) / 1024 * 1024) /* swizzle */
#define F8G_EPI_BYTES (4 * 8192)
#define F8G_SMEM (F8G_EPI_OFF + 2 * F8G_EPI_BYTES)
#define F8G_THREADS 384
#define F8G_BAR_TURN 4 /* named barriers 4 and 5: warpgroup 0's and 1's turn (rescaled mode 2) */
/* Timing probe, never a result: built with -DF8G_PROBE_TIMES=1 (bench/probe_wgrad.sh), CTA 0's
 * lead threads record clock64() at each step of their first F8G_PROBE_TILES tiles of the
 * rescaled path (who 0, 1: the consumer warpgroups; 2: the producer), and
 * gg_fp8_wgrad_probe_dump() prints the last launch's record. Consumer events per tile: 0 start,
 * then per token block kb < 4: 1 + 3 kb the stage landed, 2 + 3 kb the previous block done,
 * 3 + 3 kb the turn taken (issued); 13 the tile's dW scaled, 15 the previous tile's stores
 * have left the staging, 14 its stores issued. Producer: event kb the stage for block kb free.
 * 0, the default: no probe. -DF8G_PROBE_NOSTORE=1: the tiles are staged but never stored (the
 * kernel's time without its dW writes); 2: every tile stored over expert 0's first row tile (the
 * writes stay in L2). */
#ifndef F8G_PROBE_TIMES
#define F8G_PROBE_TIMES 0
#endif
#ifndef F8G_PROBE_NOSTORE
#define F8G_PROBE_NOSTORE 0
#endif
#define F8G_PROBE_TILES 24
#if F8G_PROBE_TIMES
__device__ long long g_f8g_probe[3][F8G_PROBE_TILES][16];
#define F8G_MARK(who, tile, ev)                                                       \
  do {                                                                                \
    if (blockIdx.x == 0 && (threadIdx.x & 127) == 0 && (tile) < F8G_PROBE_TILES)    \
      g_f8g_probe[who][tile][ev] = clock64();                                         \
  } while (0)
#else
#define F8G_MARK(who, tile, ev) ((void)0)
#endif

typedef struct {
  const int32_t *offset, *count;
  const float *a_scales, *b_scales; /* (token block, row) at [block * ld + row]               */
  int a_ld, b_ld;
  void *dw;                         /* [E, m, n] fp32 (direct stores), already at this chunk  */
  int dw_row0;                      /* bf16 dW: the chunk's first row in the TMA map's [*, n] */
  int num_experts;
  int m, n;                         /* dW rows and columns per expert                       */
  int m_tiles, n_tiles, group_m;
  int out_fp32, accumulate;
  int expert_scales;                /* 1: every block of an expert carries the same scales
                                       (both operands); 2: B's only (A's per block)            */
  int rescale;                      /* expert_scales 2: the blocks chained into acc, rescaled
                                       (f8g_blocks_rescaled), not promoted (f8g_blocks)        */
  int turns;                        /* with rescale: the warpgroups issue in turn            */
  int whole_blocks;                 /* rescaled: issue an expert's last token block whole, its
                                       padding tokens' zero codes included (flag 131072)      */
  int global_col_scales;            /* rescaled: B's column scales read from global memory at
                                       the tile's end, not from the last stage (flag 262144)  */
} f8g_params;

/* The 32-token slices of token block kb (of nkb) that hold real tokens: 4, except in an expert's
 * last block, whose padding tokens (zero codes) add nothing, so the rescaled main loop does not
 * issue their wgmmas. At DeepSeek-V3 EP=2 (448 tokens an expert on average, a last block of 64)
 * that is one wgmma in eight. whole: every block whole (the previous behaviour). The promoted
 * and the per-expert-A loops issue whole blocks. */
__device__ __forceinline__ int f8g_slices(int cnt, int kb, int nkb, bool whole) {
  if (whole || kb < nkb - 1) return 4;
  return min(4, (cnt - kb * 128 + 31) >> 5);
}

/* acc[i] += part[i] * sa(row) * sb(col) for one m64n128 fragment: element i of this thread sits
 * at row r0 + 8 * ((i >> 1) & 1) and column 8 * (i >> 2) + 2 * (lane & 3) + (i & 1). sbs: the
 * half's 128 column scales. */
__device__ __forceinline__ void f8g_promote(float *acc, const float *part, float sa0, float sa1,
                                            const float *sbs, int lane) {
#pragma unroll
  for (int n8 = 0; n8 < 16; ++n8) {
    const float2 sb = *(const float2 *)(sbs + 8 * n8 + 2 * (lane & 3));
    acc[4 * n8 + 0] = fmaf(part[4 * n8 + 0], sa0 * sb.x, acc[4 * n8 + 0]);
    acc[4 * n8 + 1] = fmaf(part[4 * n8 + 1], sa0 * sb.y, acc[4 * n8 + 1]);
    acc[4 * n8 + 2] = fmaf(part[4 * n8 + 2], sa1 * sb.x, acc[4 * n8 + 2]);
    acc[4 * n8 + 3] = fmaf(part[4 * n8 + 3], sa1 * sb.y, acc[4 * n8 + 3]);
  }
}

/* acc[i] += part[i] * sa(row): the promotion when B carries one scale per expert and column
 * (applied once at the end), so only A's row scale changes from block to block. */
__device__ __forceinline__ void f8g_promote_rows(float *acc, const float *part, float sa0,
                                                 float sa1) {
#pragma unroll
  for (int n8 = 0; n8 < 16; ++n8) {
    acc[4 * n8 + 0] = fmaf(part[4 * n8 + 0], sa0, acc[4 * n8 + 0]);
    acc[4 * n8 + 1] = fmaf(part[4 * n8 + 1], sa0, acc[4 * n8 + 1]);
    acc[4 * n8 + 2] = fmaf(part[4 * n8 + 2], sa1, acc[4 * n8 + 2]);
    acc[4 * n8 + 3] = fmaf(part[4 * n8 + 3], sa1, acc[4 * n8 + 3]);
  }
}

/* acc[i] *= sa(row) * sb(col), once per tile: sb the expert's column scales from the tile's first
 * column n0 (global memory, from its first block, or the last stage's copy in shared memory),
 * columns past n times 0 (never stored). sa0 = sa1 = 1 when A's scales were applied per block. */
__device__ __forceinline__ void f8g_scale_once(float *acc, const float *sb, int n0, int n, float sa0,
                                               float sa1, int lane) {
#pragma unroll
  for (int n8 = 0; n8 < 32; ++n8) {
    const int c = 8 * n8 + 2 * (lane & 3);
    const float2 b = n0 + c < n ? *(const float2 *)(sb + c) : make_float2(0.0f, 0.0f);
    acc[4 * n8 + 0] *= sa0 * b.x;
    acc[4 * n8 + 1] *= sa0 * b.y;
    acc[4 * n8 + 2] *= sa1 * b.x;
    acc[4 * n8 + 3] *= sa1 * b.y;
  }
}

/* One 128-column half of a token block: four m64n128k32 into part, then the promotion. The two
 * warpgroups issue without taking turns: handing the tensor pipe over when a batch was issued,
 * half done or done measured 2-11% slower (docs/PERF.md). */
template <int H, bool ROWS_ONLY>
__device__ __forceinline__ void f8g_half(float *acc, float *part, uint64_t da, uint64_t db,
                                         float sa0, float sa1, const float *sbs, int lane) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n128k32_e4m3(part, wgmma_desc_add(da, kk * 32),
                          wgmma_desc_add(db, H * F8G_HALF_BYTES + kk * 32), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  reg_fence(part, 64);
  if (ROWS_ONLY) f8g_promote_rows(acc + 64 * H, part, sa0, sa1);
  else f8g_promote(acc + 64 * H, part, sa0, sa1, sbs + 128 * H, lane);
}

/* The promoted main loop over the token blocks of a tile's cnt tokens (expert_scales 0, or 2 =
 * ROWS_ONLY). */
template <bool ROWS_ONLY>
__device__ __forceinline__ void f8g_blocks(float *acc, float *part, int cnt, bool right,
                                           const uint8_t *smem, uint32_t full0, uint32_t empty0,
                                           uint64_t da0, uint64_t db0, int r0, int lane,
                                           int *stage, uint32_t *phase) {
  const int nkb = (cnt + 127) / 128;
  for (int kb = 0; kb < nkb; ++kb) {
    mbar_wait(full0 + 8 * *stage, *phase);
    const uint64_t da = wgmma_desc_add(da0, *stage * F8G_STAGE_BYTES);
    const uint64_t db = wgmma_desc_add(db0, *stage * F8G_STAGE_BYTES);
    const float *sas = (const float *)(smem + F8G_SC_OFF + *stage * F8G_SC_BYTES);
    const float *sbs = sas + F8G_BM;
    const float sa0 = sas[r0], sa1 = sas[r0 + 8];
    f8g_half<0, ROWS_ONLY>(acc, part, da, db, sa0, sa1, sbs, lane);
    if (right) f8g_half<1, ROWS_ONLY>(acc, part, da, db, sa0, sa1, sbs, lane);
    gg_release<1>(empty0 + 8 * *stage, lane);
    if (++*stage == F8G_STAGES) { *stage = 0; *phase ^= 1; }
  }
}

/* The main loop of expert_scales 2 without a partial: the expert's token blocks chain on the
 * tensor cores into acc, which holds the sum in units of the current block's row scale c (A's;
 * B's is the expert's, applied at the end): before block kb's wgmmas acc is multiplied by
 * c_{kb-1} / c_kb (c held as F8_RESCALE_DROP / F8_RESCALE_FLOOR say), the 256-column forward
 * kernel's scheme (grouped_gemm_fp8_wide.cuh). Per block and warpgroup: four m64n256k32 and 128
 * multiplies, against eight m64n128k32 (A read twice), two drains and 128 FMAs when each half's
 * partial is promoted. A tile with a missing right half computes it from the reloaded left half
 * and never stores it. On return acc is the tile's dW: scaled by the last block's row scales and
 * by B's column scales, read from the last stage before it is released (every block carries the
 * expert's), or (global_cols) left in units of *c0, *c1 (rows r0, r0 + 8) for the caller.
 * turns: the two warpgroups issue their blocks in turn, as the forward kernel's do
 * (f8w_turn_wait): warpgroup 1 block g after warpgroup 0 issued it, warpgroup 0 block g + 1
 * after warpgroup 1 issued g, the sequence running on across tiles (*first: this warpgroup has
 * issued nothing yet); warpgroup 0 takes warpgroup 1's last pass after its last tile. */
template <int CL>
__device__ __forceinline__ void f8g_blocks_rescaled(float *acc, int cnt, bool whole,
                                                    bool global_cols, int n0, int n,
                                                    const uint8_t *smem, uint32_t full0,
                                                    uint32_t empty0, uint64_t da0, uint64_t db0,
                                                    int r0, int lane, int *stage, uint32_t *phase,
                                                    float *c0, float *c1, bool turns, int cwg,
                                                    bool *first, int ptile) {
  (void)ptile; /* the probe's tile index (F8G_PROBE_TIMES) */
  const int nkb = (cnt + 127) / 128;
  float p0 = 0.0f, p1 = 0.0f;
  int prev = -1;
  for (int kb = 0; kb < nkb; ++kb) {
    const int ns = f8g_slices(cnt, kb, nkb, whole);
    mbar_wait(full0 + 8 * *stage, *phase);
    if (kb < 4) F8G_MARK(cwg, ptile, 1 + 3 * kb);
    const float *sas = (const float *)(smem + F8G_SC_OFF + *stage * F8G_SC_BYTES);
    const float drop = kb > 0 ? F8_RESCALE_DROP : 0.0f;
    const float n0s = fmaxf(sas[r0], fmaxf(p0 * drop, F8_RESCALE_FLOOR));
    const float n1s = fmaxf(sas[r0 + 8], fmaxf(p1 * drop, F8_RESCALE_FLOOR));
    const float f0 = kb > 0 ? p0 * rcp_approx(n0s) : 1.0f;
    const float f1 = kb > 0 ? p1 * rcp_approx(n1s) : 1.0f;
    /* the factors are ready before the wait, so only the multiplies follow it (block kb - 1's
     * stage released before block kb's data is awaited put the scale loads after the wait:
     * measured 0.1-0.2 ms slower on the layer's backward, docs/PERF.md) */
    asm volatile("" ::"f"(f0), "f"(f1));
    wgmma_wait<0>(); /* block kb - 1 is in acc (unconditional: ptxas serializes otherwise) */
    reg_fence(acc, 128);
    if (kb < 4) F8G_MARK(cwg, ptile, 2 + 3 * kb);
    if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] *= (i & 2) ? f1 : f0;
    const uint64_t da = wgmma_desc_add(da0, *stage * F8G_STAGE_BYTES);
    const uint64_t db = wgmma_desc_add(db0, *stage * F8G_STAGE_BYTES);
    if (turns && !(cwg == 0 && *first)) named_bar_sync(F8G_BAR_TURN + cwg, 256);
    if (kb < 4) F8G_MARK(cwg, ptile, 3 + 3 * kb);
    /* A whole block unrolled; an expert's last, shorter one as a loop. One commit after both:
     * with a commit in each path, or the slices as guarded wgmmas, ptxas serializes every wgmma
     * (C7511); this way it adds a fence per looped wgmma and an empty one at the commit. */
    wgmma_fence();
    if (ns == 4) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n256k32_e4m3(acc, wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32), 1);
    } else {
#pragma unroll 1
      for (int kk = 0; kk < ns; ++kk)
        wgmma_m64n256k32_e4m3(acc, wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32), 1);
    }
    wgmma_commit();
    if (turns) named_bar_arrive(F8G_BAR_TURN + 1 - cwg, 256);
    *first = false;
    p0 = n0s;
    p1 = n1s;
    prev = *stage;
    if (++*stage == F8G_STAGES) { *stage = 0; *phase ^= 1; }
  }
  wgmma_wait<0>();
  reg_fence(acc, 128);
  if (prev >= 0) {
    if (!global_cols) {
      const float *sbs = (const float *)(smem + F8G_SC_OFF + prev * F8G_SC_BYTES) + F8G_BM;
      f8g_scale_once(acc, sbs, n0, n, p0, p1, lane);
    }
    gg_release<CL>(empty0 + 8 * prev, lane);
  }
  F8G_MARK(cwg, ptile, 13);
  *c0 = p0;
  *c1 = p1;
}

static_assert(F8G_EPI_OFF % 1024 == 0 && F8G_STAGE_BYTES % 1024 == 0, "128B-swizzle atoms");

/* The kernel's main loops, one instantiation each, so that the rescaled one (the layer's default)
 * carries neither the promoted paths' 64-register partial nor their code. In one kernel its
 * consumers sat at the register limit: a trivial change elsewhere (one select in the PTX) made
 * ptxas spill and serialize every wgmma of the kernel (C7511). */
#define F8G_PROMOTED 0 /* expert_scales 0, or 2 with flag 16384: each block's partial promoted */
#define F8G_EXPERT 1   /* expert_scales 1: both operands per expert, blocks chained, no rescale */
#define F8G_RESCALED 2 /* expert_scales 2: blocks chained into a rescaled accumulator          */

template <int PATH, int CL>
__global__ void __launch_bounds__(F8G_THREADS, 1)
    gg_fp8_wgrad_kernel(const __grid_constant__ CUtensorMap tm_a,
                        const __grid_constant__ CUtensorMap tm_b,
                        const __grid_constant__ CUtensorMap tm_c, const f8g_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * F8G_STAGES];
  __shared__ int32_t prefix[F8_MAX_EXPERTS + 1];
  __shared__ int32_t counts[F8_MAX_EXPERTS], blocks0[F8_MAX_EXPERTS]; /* rows, first block */
  const int tid = threadIdx.x, wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[F8G_STAGES]);
  const int E = p.num_experts;
  /* Work units: one tile (CL 1), or (CL 2, the rescaled path) a pair of vertically adjacent
   * tiles of one expert and column tile on the two CTAs of a cluster: each loads its own A and
   * one 128-column half of B, multicast to both, so L2 serves 32 KB instead of 48 KB per CTA and
   * token block (the kernel is bound by each SM's traffic with L2: docs/PERF.md). */
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  const int unit0 = (int)blockIdx.x / CL, ustride = (int)gridDim.x / CL;
  if (tid == 0) {
    gg_ring_init(smem_base, full0, empty0, F8G_STAGES, 8 * CL); /* a release per consumer warp */
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(&tm_a);
    tma_prefetch_desc(&tm_b);
    if (!p.out_fp32) tma_prefetch_desc(&tm_c);
  }
  /* every expert this call writes (count >= 0) has all m_tiles x n_tiles tiles */
  if (tid >= 64 && tid < 96)
    gg_unit_prefix(p.count, E, 1, 1, p.m_tiles / CL * p.n_tiles, prefix, tid & 31);
  for (int e = tid - 128; e >= 0 && e < E; e += 256) {
    counts[e] = max(p.count[e], 0);
    blocks0[e] = p.offset[e] / 128;
  }
  if (CL > 1) cluster_sync(); /* barrier inits visible to the peer before any multicast */
  else __syncthreads();
  const int total = prefix[E];

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      int32_t cursor = 0;
      for (int u = unit0; u < total; u += ustride) {
        const gg_tile t = gg_decode_m_grouped_from(u, prefix, E, p.n_tiles, p.group_m, &cursor);
        const int nkb = (counts[t.expert] + 127) / 128;
        const int blk0 = blocks0[t.expert];
        const int m0 = (t.m_tile * CL + rank) * F8G_BM, n0 = t.n_tile * F8G_BN;
        const int n1 = n0 + 128 < p.n ? n0 + 128 : n0; /* a missing right half reloads the left */
        const uint32_t sb_bytes = (uint32_t)min(F8G_BN, p.n - n0) * 4;
        for (int kb = 0; kb < nkb; ++kb) {
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          if (kb < 4) F8G_MARK(2, (u - unit0) / ustride, kb);
          const uint32_t full = full0 + 8 * stage;
          mbar_arrive_expect_tx(full, F8G_STAGE_BYTES + F8G_BM * 4 + sb_bytes);
          const uint32_t s = smem_base + stage * F8G_STAGE_BYTES;
          const uint32_t sc = smem_base + F8G_SC_OFF + stage * F8G_SC_BYTES;
          const int k0 = (blk0 + kb) * 128;
          tma_load_2d(s, &tm_a, full, k0, m0);
          if (CL == 1) {
            tma_load_2d(s + F8G_A_BYTES, &tm_b, full, k0, n0);
            tma_load_2d(s + F8G_A_BYTES + F8G_HALF_BYTES, &tm_b, full, k0, n1);
          } else { /* this CTA's half of B, into both CTAs' stage */
            tma_load_2d_multicast(s + F8G_A_BYTES + rank * F8G_HALF_BYTES, &tm_b, full, k0,
                                  rank ? n1 : n0, (uint16_t)3);
          }
          bulk_load_1d(sc, p.a_scales + (size_t)(blk0 + kb) * p.a_ld + m0, F8G_BM * 4, full);
          bulk_load_1d(sc + F8G_BM * 4, p.b_scales + (size_t)(blk0 + kb) * p.b_ld + n0, sb_bytes,
                       full);
          if (++stage == F8G_STAGES) { stage = 0; phase ^= 1; }
        }
      }
      gg_producer_drain<CL>(empty0, F8G_STAGES, stage, phase);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const int cwg = wg - 1, wtid = tid & 127, warp = wtid >> 5, lane = wtid & 31;
    const int r0 = cwg * 64 + warp * 16 + (lane >> 2); /* this thread's dW rows: r0, r0 + 8 */
    const uint32_t epi = smem_base + F8G_EPI_OFF + cwg * F8G_EPI_BYTES;
    uint64_t da0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t db0 = wgmma_desc_sw128(smem_base + F8G_A_BYTES, 16, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0));
    int stage = 0;
    uint32_t phase = 0;
    int32_t cursor = 0;
    float acc[128], part[PATH == F8G_PROMOTED ? 64 : 1];
    bool first = true; /* no rescaled block issued yet (turns) */
    const bool whole = p.whole_blocks != 0, global_cols = p.global_col_scales != 0;
    for (int u = unit0; u < total; u += ustride) {
      const gg_tile t = gg_decode_m_grouped_from(u, prefix, E, p.n_tiles, p.group_m, &cursor);
      const int m_tile = t.m_tile * CL + rank;
      const int cnt = counts[t.expert];
      const int nkb = (cnt + 127) / 128;
      const int n0 = t.n_tile * F8G_BN;
      const bool right = n0 + 128 < p.n; /* the tile has its right 128-column half */
      F8G_MARK(cwg, (u - unit0) / ustride, 0);
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      if (PATH == F8G_EXPERT) {
        /* one scale per expert, row and column: the expert's token blocks chain on the tensor
         * cores straight into acc (no partial, no promotion), scaled once below. Both halves
         * always: a missing right half (its reloaded left half) is computed and never stored. */
        for (int kb = 0; kb < nkb; ++kb) {
          mbar_wait(full0 + 8 * stage, phase);
          const uint64_t da = wgmma_desc_add(da0, stage * F8G_STAGE_BYTES);
          const uint64_t db = wgmma_desc_add(db0, stage * F8G_STAGE_BYTES);
          wgmma_fence();
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              wgmma_m64n128k32_e4m3(acc + 64 * h, wgmma_desc_add(da, kk * 32),
                                    wgmma_desc_add(db, h * F8G_HALF_BYTES + kk * 32), true);
          wgmma_commit();
          if (kb > 0) { /* the previous block's wgmmas are done with its stage */
            wgmma_wait<1>();
            gg_release<1>(empty0 + 8 * (stage == 0 ? F8G_STAGES - 1 : stage - 1), lane);
          }
          if (++stage == F8G_STAGES) { stage = 0; phase ^= 1; }
        }
        wgmma_wait<0>(); /* (unconditional: ptxas serializes every wgmma otherwise) */
        reg_fence(acc, 128);
        if (nkb > 0) {
          gg_release<1>(empty0 + 8 * (stage == 0 ? F8G_STAGES - 1 : stage - 1), lane);
          const size_t blk0 = (size_t)blocks0[t.expert];
          const int row = m_tile * F8G_BM + r0;
          f8g_scale_once(acc, p.b_scales + blk0 * p.b_ld + n0, n0, p.n,
                         p.a_scales[blk0 * p.a_ld + row], p.a_scales[blk0 * p.a_ld + row + 8],
                         lane);
        }
      }
      if (PATH == F8G_PROMOTED && p.expert_scales == 0)
        f8g_blocks<false>(acc, part, cnt, right, smem, full0, empty0, da0, db0, r0, lane,
                          &stage, &phase);
      if (PATH != F8G_EXPERT && p.expert_scales == 2 && nkb > 0) {
        float c0 = 1.0f, c1 = 1.0f;
        if (PATH == F8G_RESCALED)
          f8g_blocks_rescaled<CL>(acc, cnt, whole, global_cols, n0, p.n, smem, full0, empty0,
                                  da0, db0, r0, lane, &stage, &phase, &c0, &c1, p.turns != 0,
                                  cwg, &first, (u - unit0) / ustride);
        else
          f8g_blocks<true>(acc, part, cnt, right, smem, full0, empty0, da0, db0, r0, lane,
                           &stage, &phase);
        /* B's scales are the expert's (the same in its every block): once, here, with the last
         * block's row scales when acc was kept in their units (the rescaled loop applied them
         * from the last stage unless global_cols) */
        if (PATH != F8G_RESCALED || global_cols)
          f8g_scale_once(acc, p.b_scales + (size_t)blocks0[t.expert] * p.b_ld + n0, n0, p.n, c0,
                         c1, lane);
      }
      /* ------------------------------ epilogue ------------------------------ */
      if (!p.out_fp32) {
        /* bf16: two 128-column passes into this warpgroup's staging slice (one wait, for the
         * previous tile's stores), TMA-stored while the next tile's main loop runs. The stores
         * drain at the pace of the dW writes: the probe sees ~600 cycles of a tile's ~10400
         * spent waiting for the previous tile's first pass, ~10000 cycles after it was issued.
         * Measured as ties or slower, so not kept (docs/PERF.md): each pass waiting only for
         * the previous tile's same pass (the wait stayed), and the stores marked L2
         * evict-first. */
        const int row0 = p.dw_row0 + cwg * 64 +
                         (F8G_PROBE_NOSTORE == 2 ? 0 : t.expert * p.m + m_tile * F8G_BM);
        const CUtensorMap *mc = F8G_PROBE_NOSTORE == 1 ? nullptr : &tm_c;
#if F8G_PROBE_TIMES
        if (wtid == 0) bulk_wait_read0(); /* the probe times the wait apart */
        F8G_MARK(cwg, (u - unit0) / ustride, 15);
#endif
        gg_store_pass<0, 2>(acc, epi, wtid, mc, n0, p.n, row0, 2 + cwg);
        gg_store_pass<16, 2>(acc, epi + 16384, wtid, mc, n0 + 128, p.n, row0, 2 + cwg, false,
                             mok_clamp_round{}, false);
        F8G_MARK(cwg, (u - unit0) / ustride, 14);
        continue;
      }
      if (p.accumulate && cnt == 0) continue; /* nothing to add */
      const size_t ebase = (size_t)t.expert * p.m * p.n;
      const int row_a = m_tile * F8G_BM + r0;
#pragma unroll
      for (int n8 = 0; n8 < 32; ++n8) {
        const int col = n0 + 8 * n8 + 2 * (lane & 3);
        if (col >= p.n) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2 *dst = (float2 *)((float *)p.dw + ebase + (size_t)(row_a + 8 * h) * p.n + col);
          float v0 = acc[4 * n8 + 2 * h], v1 = acc[4 * n8 + 2 * h + 1];
          if (p.accumulate) {
            const float2 o = *dst;
            v0 += o.x;
            v1 += o.y;
          }
          *dst = make_float2(v0, v1);
        }
      }
    }
    if (PATH == F8G_RESCALED && p.turns && cwg == 0 && !first)
      named_bar_sync(F8G_BAR_TURN, 256); /* 1's last pass */
    if (wtid == 0) bulk_wait0(); /* this warpgroup's TMA stores are complete */
  }
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
      {(const void *)gg_fp8_quant_t_kernel<false>, (const void *)gg_fp8_quant_t_kernel<true>},
      {(const void *)gg_fp8_quant_t_expert_kernel<false>,
       (const void *)gg_fp8_quant_t_expert_kernel<true>}};
  const void *kernel = kernels[per_expert][fp8_in];
  const int smem = F8T_SLOTS * (fp8_in ? F8T_SLOT_BYTES(1) : F8T_SLOT_BYTES(0));
  GG_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  /* per expert: a CTA per (expert, 64 columns); 1x128: a CTA per 64 columns and
     F8T_BLOCKS_PER_CTA of their blocks */
  const int64_t nb = m_pad / 128;
  const dim3 grid(per_expert ? (unsigned)num_experts
                             : (unsigned)((nb + F8T_BLOCKS_PER_CTA - 1) / F8T_BLOCKS_PER_CTA),
                  (unsigned)(cols / 64));
  void *args[] = {&p};
  GG_CUDA(cudaLaunchKernel(kernel, grid, dim3(F8T_THREADS), args, (size_t)smem, stream));
  return MOK_SUCCESS;
}

extern "C" mok_status mok_fp8_quant_t(const void *x, void *q_t, float *scales_t,
                                            float *expert_amax, const int32_t *expert_offset,
                                            const int32_t *expert_count, int num_experts,
                                            int64_t m_total, int64_t cols, cudaStream_t stream) {
  return f8t_quantize(x, NULL, q_t, scales_t, expert_amax, expert_offset, expert_count,
                      num_experts, m_total, cols, stream);
}

extern "C" mok_status mok_fp8_requant_t(const void *q, const float *q_scales, void *q_t,
                                              float *scales_t, float *expert_amax,
                                              const int32_t *expert_offset,
                                              const int32_t *expert_count, int num_experts,
                                              int64_t m_total, int64_t cols, cudaStream_t stream) {
  if (!q_scales) return MOK_ERR_INVALID_ARGUMENT;
  return f8t_quantize(q, q_scales, q_t, scales_t, expert_amax, expert_offset, expert_count,
                      num_experts, m_total, cols, stream);
}

extern "C" mok_status mok_gg_fp8_wgrad(const void *a_t, const float *a_scales, int64_t a_ld,
                                       const void *b_t, const float *b_scales, int64_t b_ld,
                                       void *dw, int out_fp32, int accumulate,
                                       int expert_scales, const int32_t *expert_offset,
                                       const int32_t *expert_count, int num_experts,
                                       int64_t m_total, int64_t m, int64_t n,
                                       cudaStream_t stream) {
  if (!a_t || !a_scales || !b_t || !b_scales || !dw || !expert_offset || !expert_count)
    return MOK_ERR_INVALID_ARGUMENT;
  if (num_experts <= 0 || m_total <= 0 || m <= 0 || n <= 0) return MOK_ERR_INVALID_SHAPE;
  if (accumulate && !out_fp32) return MOK_ERR_INVALID_ARGUMENT; /* as the bf16 kernel */
  if (expert_scales < 0 || expert_scales > 2) return MOK_ERR_INVALID_ARGUMENT;
  if (a_ld < m || b_ld < n || a_ld > INT32_MAX || b_ld > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  if (m % 128 || n % 128 || a_ld % 4 || b_ld % 4 || ((uintptr_t)a_t & 15) || ((uintptr_t)b_t & 15) ||
      ((uintptr_t)a_scales & 15) || ((uintptr_t)b_scales & 15) || ((uintptr_t)dw & 15))
    return MOK_ERR_MISALIGNED;
  if ((int64_t)num_experts * m * n > ((int64_t)1 << 40) || (int64_t)num_experts * m > INT32_MAX ||
      n > INT32_MAX / 2)
    return MOK_ERR_INVALID_SHAPE;
  const int64_t m_pad = MOK_FP8_SCALE_ROWS(m_total);
  CUtensorMap ta, tb, tc;
  GG_TRY(gg_make_tmap_2d(&ta, a_t, m, m_pad, 1, F8G_BM, 128));
  GG_TRY(gg_make_tmap_2d(&tb, b_t, n, m_pad, 1, 128, 128));
  if (!out_fp32) GG_TRY(gg_make_tmap_2d(&tc, dw, (int64_t)num_experts * m, n, 2, 64, 64));
  else tc = ta;
  /* co-resident CTAs, the same for every single-CTA path (one shape of CTA), and whole cluster
   * pairs; each kernel's smem limit raised once */
  static int max_ctas = 0, max_ctas2 = 0;
  if (!max_ctas) {
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_PROMOTED, 1>, F8G_THREADS,
                              F8G_SMEM, 1, &max_ctas));
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_EXPERT, 1>, F8G_THREADS,
                              F8G_SMEM, 1, &max_ctas));
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_RESCALED, 1>, F8G_THREADS,
                              F8G_SMEM, 1, &max_ctas));
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_RESCALED, 2>, F8G_THREADS,
                              F8G_SMEM, 2, &max_ctas2));
  }
  f8g_params p = {};
  p.a_scales = a_scales;
  p.b_scales = b_scales;
  p.a_ld = (int)a_ld;
  p.b_ld = (int)b_ld;
  p.m = (int)m;
  p.n = (int)n;
  p.m_tiles = (int)(m / F8G_BM);
  p.n_tiles = (int)((n + F8G_BN - 1) / F8G_BN);
  p.group_m = 8;
  p.out_fp32 = out_fp32 != 0;
  p.accumulate = accumulate != 0;
  p.expert_scales = expert_scales;
  /* flag 16384: expert_scales 2 promoting each half's partial (the previous default) */
  p.rescale = expert_scales == 2 && !(gg_tuning_flags() & 16384);
  p.turns = p.rescale && !(gg_tuning_flags() & 512); /* 512: as the forward's, no turns */
  p.whole_blocks = (gg_tuning_flags() & 131072) != 0;      /* the padding tokens' wgmmas too */
  p.global_col_scales = (gg_tuning_flags() & 262144) != 0; /* B's scales from global memory */
  /* the rescaled path in cluster pairs sharing B by multicast where the row tiles pair up; flag
   * 524288: on single CTAs, each loading its whole B tile */
  const int cl = p.rescale && p.m_tiles % 2 == 0 && !(gg_tuning_flags() & 524288) ? 2 : 1;
  const size_t esz = out_fp32 ? 4 : 2;
  for (int e0 = 0; e0 < num_experts; e0 += F8_MAX_EXPERTS) {
    p.num_experts = num_experts - e0 < F8_MAX_EXPERTS ? num_experts - e0 : F8_MAX_EXPERTS;
    p.offset = expert_offset + e0;
    p.count = expert_count + e0;
    p.dw = (char *)dw + (size_t)e0 * m * n * esz;
    p.dw_row0 = (int)(e0 * m);
    const int64_t ctas = (int64_t)p.num_experts * p.m_tiles * p.n_tiles; /* a CTA per tile */
    const int cap = gg_ctas_cap(cl == 2 ? max_ctas2 : max_ctas, cl);
    const int grid = (int)(ctas < cap ? ctas : cap);
    if (cl == 2) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = gg_cluster_config(grid, F8G_THREADS, F8G_SMEM, 2, stream,
                                                       &attr);
      GG_CUDA(cudaLaunchKernelEx(&cfg, gg_fp8_wgrad_kernel<F8G_RESCALED, 2>, ta, tb, tc, p));
    } else if (expert_scales == 1) {
      gg_fp8_wgrad_kernel<F8G_EXPERT, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc, p);
    } else if (p.rescale) {
      gg_fp8_wgrad_kernel<F8G_RESCALED, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc,
                                                                                    p);
    } else {
      gg_fp8_wgrad_kernel<F8G_PROMOTED, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc,
                                                                                    p);
    }
    GG_LAUNCHED();
  }
  return MOK_SUCCESS;
}

#if F8G_PROBE_TIMES
#include <stdio.h>
/* The probe's record of the last launch (CTA 0), as cycles from the first consumer event. */
extern "C" void gg_fp8_wgrad_probe_dump(void) {
  static long long h[3][F8G_PROBE_TILES][16];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(h, g_f8g_probe, sizeof h);
  const long long t0 = h[0][0][0];
  for (int t = 0; t < F8G_PROBE_TILES; ++t)
    for (int w = 0; w < 3; ++w) {
      printf("probe tile %2d %s", t, w == 2 ? "prod" : w ? "wg1 " : "wg0 ");
      for (int e = 0; e < (w == 2 ? 4 : 16); ++e)
        printf(" %7lld", h[w][t][e] ? h[w][t][e] - t0 : -1);
      printf("\n");
    }
}
#endif
