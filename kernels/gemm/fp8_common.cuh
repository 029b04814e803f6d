/* fp8_common.cuh — what the FP8 grouped GEMM kernels share: the call's parameters, the host
 * check of a product's sizes, the start of a CTA, the quantizing epilogue of gate+up, and the
 * launcher of the 256-column kernel (fp8_wide.cu) that fp8.cu's products call. The FP8 numeric
 * helpers themselves are kernels/common/fp8.cuh's. Included by the FP8 kernels of kernels/gemm. */
#ifndef MOK_GEMM_FP8_COMMON_CUH
#define MOK_GEMM_FP8_COMMON_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "include/mok.h"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/move/fused_move.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"

/* FWD: c = a b^T; SWIGLU: gate+up with the SwiGLU epilogue */
enum { F8_FWD = 0, F8_SWIGLU = 1 };

#define F8_BK 128 /* fp8 elements = bytes: one 128-byte swizzled row */
#define F8_MAX_EXPERTS 256
/* An accumulator kept in units of the current K block's scale c and multiplied by c_prev / c_new
 * before each block (the 256-column kernel, fp8_wide.cuh; the weight gradient with
 * expert_scales 2): each c is held to at least F8_RESCALE_DROP times the previous one and to
 * F8_RESCALE_FLOOR, so that the ratio never blows the sum up and its reciprocal is a normal
 * float. */
#define F8_RESCALE_FLOOR 0x1p-126f
#define F8_RESCALE_DROP 0x1p-40f

typedef struct {
  const int32_t *offset, *count;
  const float *a_scales;  /* [k / 128][m_pad]                                  */
  const float *b_scales0; /* [E, rows / 128, k / 128] (FWD: b; SWIGLU: gate)   */
  const float *b_scales1; /* SWIGLU: up                                        */
  int num_experts, expert_base;
  int n_tiles, k_blocks, m_pad;
  int b_rows;            /* rows of one expert in the weight tensor (n or inter) */
  int n_out;             /* output columns (n or inter)                         */
  int use_limit;
  float limit;
  int has_preact;
  int group_m;
  uint16_t *c0;          /* FWD: c (NULL: the rows are only pushed, nothing stored locally)  */
  uint8_t *q_act;        /* SWIGLU, when set: the activations quantized in the epilogue (codes
                            [m_total, n_out] e4m3 and q_scales [n_out / 128][m_pad]) instead
                            of bf16 act                                                      */
  float *q_scales;
  int push;              /* FWD: the epilogues also store each real row of c into its (token, j)
                            slot on the source rank (move: kernels/move/fused_move.h)        */
  mok_gg_move move;
  int64_t move_m_total;
} f8_params;

/* Host check of one FP8 product's row layout and sizes: e experts' offsets and counts, m_total
 * rows, n output columns, k reduction (multiples of 128, indices within int32). */
static inline mok_status f8_check(const int32_t *off, const int32_t *cnt, int e, int64_t m_total,
                                  int64_t n, int64_t k) {
  if (!off || !cnt) return MOK_ERR_INVALID_ARGUMENT;
  if (e <= 0 || m_total <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (m_total > INT32_MAX || (int64_t)e * n > INT32_MAX || k > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128) return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

/* The start of an FP8 kernel's CTA: the stage ring (thread 0; `releases` consumer-warp arrivals
 * per stage), the tensor maps prefetched (thread 32; c0 NULL: none), the unit prefix over experts
 * in units of unit_rows (warp 2), then the CTA syncs. Returns the launch's units. */
template <int MODE>
__device__ __forceinline__ int f8_cta_start(uint32_t smem_base, uint32_t full0, uint32_t empty0,
                                            int stages, int releases, int unit_rows,
                                            const CUtensorMap *a, const CUtensorMap *b0,
                                            const CUtensorMap *b1, const CUtensorMap *c0,
                                            const int32_t *count, int E, int n_tiles,
                                            int32_t *prefix) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    gg_ring_init(smem_base, full0, empty0, stages, releases);
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(a);
    tma_prefetch_desc(b0);
    if (MODE == F8_SWIGLU) tma_prefetch_desc(b1);
    if (c0) tma_prefetch_desc(c0);
  }
  if (tid >= 64 && tid < 96)
    gg_unit_prefix(count, NULL, E, unit_rows, n_tiles, 0, prefix, tid & 31);
  __syncthreads();
  return prefix[E];
}

/* The first steps of the quantizing epilogue: the 64 x 128 fragment's values rounded to bf16
 * (v), and the scales of this thread's rows r and r + 8 from their quads' amax. */
__device__ __forceinline__ void f8_quant_rows(const float *acc, float *v, float *scale0,
                                              float *scale1) {
  float amax0 = 0.0f, amax1 = 0.0f; /* rows r and r + 8 */
#pragma unroll
  for (int i = 0; i < 64; i += 2) {
    const uint32_t pk = pack_bf16x2(acc[i], acc[i + 1]);
    v[i] = __uint_as_float(pk << 16);
    v[i + 1] = __uint_as_float(pk & 0xffff0000u);
    const float m = fmaxf(fabsf(v[i]), fabsf(v[i + 1]));
    if (i & 2) amax1 = fmaxf(amax1, m);
    else amax0 = fmaxf(amax0, m);
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    amax0 = fmaxf(amax0, __shfl_xor_sync(0xffffffffu, amax0, o));
    amax1 = fmaxf(amax1, __shfl_xor_sync(0xffffffffu, amax1, o));
  }
  *scale0 = f8_scale_of(amax0);
  *scale1 = f8_scale_of(amax1);
}

/* Quantizing epilogue of a warpgroup's 64 rows x 128 columns (acc[0, 64): the m64n128 fragment,
 * one 128-block per row): each value rounded to bf16, then the block's scale = amax / 448 (1 for
 * an all-zero block) and the codes = value / scale in e4m3, the very steps of the activation
 * quantizer (mok_fp8_quant_act) on the bf16 activations, so the same bits without the bf16
 * round trip through memory. A row's 128 values lie in one quad of lanes (32 each). The codes are
 * staged in a 64 x 128-byte box (128-byte swizzle) at stage and stored by one TMA store (map: the
 * codes' tensor map, 64 x 128 boxes) at (col0, row0): all 64 rows (the codes of padding rows
 * too); the scales of real rows only (rows < `rows`), to scales[kb * m_pad + row0 + r]. bar_id:
 * the warpgroup's named barrier. */
__device__ __forceinline__ void f8_store_quant_tma(const float *acc, uint32_t stage,
                                                   const CUtensorMap *map, float *scales,
                                                   int64_t m_pad, int row0, int col0, int rows,
                                                   int wtid, int bar_id) {
  const int lane = wtid & 31;
  const int r = (wtid >> 5) * 16 + (lane >> 2);
  float v[64];
  float scale0, scale1;
  f8_quant_rows(acc, v, &scale0, &scale1);
  const float inv0 = 1.0f / scale0, inv1 = 1.0f / scale1;
  if (wtid == 0) bulk_wait_read0(); /* the previous store has left the box */
  named_bar_sync(bar_id, 128);
  /* row r, columns 8j + 2q, 8j + 2q + 1: 16-byte chunk j / 2, swizzled by the row */
  const uint32_t b0 = stage + r * 128, b1 = b0 + 8 * 128;
  const int q2 = 2 * (lane & 3), sw = r & 7; /* rows r and r + 8 share the swizzle */
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float *w = v + 4 * j;
    const uint32_t at = (((j >> 1) ^ sw) << 4) + ((j & 1) << 3) + q2;
    sts_u16(b0 + at, f8_pack2(w[0] * inv0, w[1] * inv0));
    sts_u16(b1 + at, f8_pack2(w[2] * inv1, w[3] * inv1));
  }
  fence_proxy_async_smem();
  named_bar_sync(bar_id, 128);
  if (wtid == 0) {
    tma_store_2d(map, stage, col0, row0);
    bulk_commit();
  }
  if ((lane & 3) == 0) {
    float *s = scales + (int64_t)(col0 / 128) * m_pad + row0 + r;
    if (r < rows) s[0] = scale0;
    if (r + 8 < rows) s[8] = scale1;
  }
}

/* The 256-column kernel (fp8_wide.cu): a, b0, b1 the tensor maps of A (128-row boxes) and of the
 * weights (64-row boxes), c the staged output's (64 x 64 bf16 boxes: FWD's c, SWIGLU's preact),
 * q (SWIGLU) the activations' (p.q_act set: the codes, 64 x 128 bytes; else bf16 act, 64 x 64);
 * p as for the 128-column kernel, n_tiles counting 256 output columns (FWD) or 128 gate + 128 up
 * rows (SWIGLU); max_ctas the grid cap (mok_gg_launch). MOK_ERR_NOT_SUPPORTED when FWD's columns
 * do not split into 256. */
mok_status f8_wide_launch(int mode, const CUtensorMap *a, const CUtensorMap *b0,
                          const CUtensorMap *b1, const CUtensorMap *c, const CUtensorMap *q,
                          f8_params p, int64_t m_total, int max_ctas, cudaStream_t stream);

#endif /* MOK_GEMM_FP8_COMMON_CUH */
