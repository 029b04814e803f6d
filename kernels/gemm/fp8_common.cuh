/* grouped_gemm_fp8_common.cuh — what the FP8 grouped GEMM kernels share: the call's parameters,
 * the direct (register to global) epilogue, and the launcher of the 256-column variant
 * (grouped_gemm_fp8_wide.cu) that grouped_gemm_fp8.cu's variant choice calls. Included by
 * kernels/grouped_gemm_fp8.cu and kernels/grouped_gemm_fp8_wide.cu. */
#ifndef MOK_GROUPED_GEMM_FP8_COMMON_CUH
#define MOK_GROUPED_GEMM_FP8_COMMON_CUH

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "include/mok.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/common/ptx.cuh"

/* FWD: c = a b^T; SWIGLU: gate+up with the SwiGLU epilogue; DSWIGLU: c = a b^T as FWD (the
 * backward's d_act), with the SwiGLU backward in the epilogue (kernels/grouped_gemm_fp8_dswiglu.cuh) */
enum { F8_FWD = 0, F8_SWIGLU = 1, F8_DSWIGLU = 2 };

/* Whether MODE's tiles load as FWD's: 256 columns of one weight. */
#define F8_FWD_LOADS(MODE) ((MODE) != F8_SWIGLU)

#define F8_BK 128 /* fp8 elements = bytes: one 128-byte swizzled row */
#define F8_MAX_EXPERTS 256
/* An accumulator kept in units of the current K block's scale c and multiplied by c_prev / c_new
 * before each block (the 256-column kernel, grouped_gemm_fp8_wide.cuh; the weight gradient with
 * expert_scales 2): each c is held to at least F8_RESCALE_DROP times the previous one and to
 * F8_RESCALE_FLOOR, so that the ratio never blows the sum up and its reciprocal is a normal
 * float. */
#define F8_RESCALE_FLOOR 0x1p-126f
#define F8_RESCALE_DROP 0x1p-40f

/* DSWIGLU's epilogue operands: the forward's pre-activations and activations, the router weights;
 * what it writes: dgu in bf16 and quantized 1x128 (the dx product's A operand), and the parts of
 * the router-weight gradient. */
typedef struct {
  const uint16_t *preact;  /* [m_total, 2 n_out] bf16: g | u                                   */
  const uint8_t *act;      /* [m_total, n_out] e4m3, scales act_scales [n_out / 128][m_pad]   */
  const float *act_scales;
  const float *rw;         /* [m_total]: each row's router weight                              */
  uint16_t *dgu;           /* [m_total, 2 n_out] bf16: dg | du                                 */
  uint8_t *q;              /* [m_total, 2 n_out] e4m3, scales q_scales [2 n_out / 128][m_pad]  */
  float *q_scales;
  float *part;             /* [n_tiles][m_total]: each tile's part of a row's d_rw             */
  int64_t m_total;
} f8_dsw;

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
  uint16_t *c0, *c1;     /* the outputs for the direct epilogue (FWD: c; SWIGLU: act, preact) */
  uint8_t *q_act;        /* SWIGLU on the 256-column kernel, when set: the activations quantized
                            in the epilogue (codes [m_total, n_out] e4m3 and q_scales
                            [n_out / 128][m_pad]) instead of bf16 act                       */
  float *q_scales;
  int push;              /* FWD: the epilogues also store each real row of c into its (token, j)
                            slot on the source rank (move: kernels/fused_comm.h)             */
  mok_gg_move move;
  int64_t move_m_total;
  int turns;             /* the 256-column kernel: the consumer warpgroups issue each K block in
                            turn (f8w_turn_wait)                                              */
  int direct;            /* the 256-column kernel: its outputs (c; preact, act, the codes)
                            stored from registers instead of staged boxes and TMA stores     */
  int d_early;           /* the one-launch MLP: down tiles claimed as soon as their rows are
                            ready, between gate+up tiles (else once gate+up ran out)         */
  f8_dsw dsw;            /* DSWIGLU only                                                     */
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
 * in units of unit_rows (warp 2), then the cluster (or the CTA) syncs, so that the barrier inits
 * are visible to the peer before any multicast. Returns the launch's units. */
template <int MODE, int CL>
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
  if (tid >= 64 && tid < 96) gg_unit_prefix(count, E, unit_rows * CL, n_tiles, 0, prefix, tid & 31);
  if (CL > 1) cluster_sync();
  else __syncthreads();
  return prefix[E];
}

/* The scale of a 1x128 (or 128x128) block from its largest magnitude: amax / 448 (E4M3's
 * largest finite value), 1 for an all-zero block. Every FP8 quantizer takes it from here, so the
 * epilogue's quantization and the separate kernels' agree bit for bit. */
__device__ __forceinline__ float f8_scale_of(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

/* Direct epilogue: the thread's bf16 pairs of 8-column groups [N8B, N8B + NG) of its fragment
 * straight to global memory, columns from col0, rows past `rows` (the warpgroup's real rows)
 * skipped. Each warp writes 8 rows x 16 bytes per store: half-sector stores, a small cost next to
 * a K = 2048-7168 main loop, for a stage of shared memory instead of a staging buffer. */
template <int N8B, int NG>
__device__ __forceinline__ void f8_store_direct(const float *acc, uint16_t *c, int64_t ld,
                                                int64_t row0, int col0, int rows, int wtid) {
  const int lane = wtid & 31;
  const int r = (wtid >> 5) * 16 + (lane >> 2);
  uint16_t *p0 = c + (row0 + r) * ld + col0 + 2 * (lane & 3);
  uint16_t *p1 = p0 + 8 * ld;
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const float *v = acc + (N8B + j) * 4;
    if (r < rows) *(uint32_t *)(p0 + 8 * j) = pack_bf16x2(v[0], v[1]);
    if (r + 8 < rows) *(uint32_t *)(p1 + 8 * j) = pack_bf16x2(v[2], v[3]);
  }
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
 * registers: gg_quant_act_kernel, the FP8 reverse combine and the SwiGLU backward's fused
 * quantization share it, so their codes agree bit for bit. */
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

/* The first steps of the quantizing epilogues: the 64 x 128 fragment's values rounded to bf16
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
 * quantizer (gg_quant_act_kernel) on the bf16 activations, so the same bits without the bf16
 * round trip through memory. A row's 128 values lie in one quad of lanes (32 each); codes go to
 * q[(row0 + r) * ld + col0 ...], the scale to scales[kb * m_pad + row0 + r]; rows past `rows`
 * are skipped. */
__device__ __forceinline__ void f8_store_quant(const float *acc, uint8_t *q, float *scales,
                                               int64_t ld, int64_t m_pad, int64_t row0, int col0,
                                               int rows, int wtid) {
  const int lane = wtid & 31;
  const int r = (wtid >> 5) * 16 + (lane >> 2);
  float v[64]; /* the values rounded to bf16 */
  float scale0, scale1;
  f8_quant_rows(acc, v, &scale0, &scale1);
  const float inv0 = 1.0f / scale0, inv1 = 1.0f / scale1;
  uint8_t *q0 = q + (row0 + r) * ld + col0 + 2 * (lane & 3);
  uint8_t *q1 = q0 + 8 * ld;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float *w = v + 4 * j;
    if (r < rows) *(uint16_t *)(q0 + 8 * j) = f8_pack2(w[0] * inv0, w[1] * inv0);
    if (r + 8 < rows) *(uint16_t *)(q1 + 8 * j) = f8_pack2(w[2] * inv1, w[3] * inv1);
  }
  if ((lane & 3) == 0) {
    float *s = scales + (int64_t)(col0 / 128) * m_pad + row0 + r;
    if (r < rows) s[0] = scale0;
    if (r + 8 < rows) s[8] = scale1;
  }
}

/* f8_store_quant with the codes staged in a 64 x 128-byte box (128-byte swizzle) at stage and
 * stored by one TMA store (map: the codes' tensor map, 64 x 128 boxes) at (col0, row0): full
 * 128-byte rows instead of 2-byte stores. All 64 rows are stored (the codes of padding rows too);
 * the scales of real rows only, as f8_store_quant. bar_id: the warpgroup's named barrier. */
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

/* The 256-column variant (flag 128): a, b0, b1 the tensor maps of A (128-row boxes) and of the
 * weights (64-row boxes), c the staged output's (64 x 64 bf16 boxes: FWD's c, SWIGLU's preact),
 * q (SWIGLU) the activations' (p.q_act set: the codes, 64 x 128 bytes; else bf16 act, 64 x
 * 64); p as for the 128-column kernel, n_tiles counting 256 output columns (FWD) or 128 gate + 128
 * up rows (SWIGLU); cl 1, or 2 for cluster pairs sharing B. MOK_ERR_NOT_SUPPORTED when the columns
 * do not split so. */
mok_status f8_wide_launch(int mode, int cl, const CUtensorMap *a, const CUtensorMap *b0,
                          const CUtensorMap *b1, const CUtensorMap *c, const CUtensorMap *q,
                          f8_params p, int64_t m_total, cudaStream_t stream);

#endif /* MOK_GROUPED_GEMM_FP8_COMMON_CUH */
