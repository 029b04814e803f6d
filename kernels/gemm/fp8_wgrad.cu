/* fp8_wgrad.cu — the FP8 weight gradient (gemm.h: mok_gg_fp8_wgrad): a K-grouped GEMM over each
 * expert's 128-token blocks of operands quantized along the tokens and transposed by
 * kernels/pointwise/fp8_quant_t.cu (a column's tokens contiguous, the K-major layout FP8 wgmma
 * needs). gg_fp8_wgrad_kernel: dW[e] = sum over e's token blocks of A_blk^T B_blk, 128 x 256
 * output tiles, one producer warp, two consumer warpgroups of 64 rows; by the operands' scales:
 *   PROMOTED (expert_scales 0, both operands 1x128): each 128-column half's m64n128k32 partial per
 *     token block promoted on the CUDA cores by its row's and column's scales;
 *   EXPERT (1, both per expert and column): the blocks chained on the tensor cores straight into
 *     the accumulator, scaled once at the end;
 *   RESCALED (2, B per expert and column): the blocks chained with m64n256k32 into an accumulator
 *     rescaled by A's row scales' ratio between blocks, an expert's last block issuing only its
 *     32-token slices that hold real tokens, B's column scales applied once from the last stage;
 *     single CTAs or cluster pairs of vertically adjacent tiles sharing B by multicast
 *     (launch->cluster; gemm_plan.h).
 * fp32 dW by direct stores (or added to), bf16 dW through TMA stores. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

/* ---- the K-grouped FP8 GEMM ---------------------------------------------------------------- */

/* A tile is 128 dW rows x 256 dW columns: two consumer warpgroups of 64 rows. With only the
 * expert's few token blocks to reduce over, the tiles are short, so what they read from L2 per
 * FLOP and what happens between them decide the speed: a 256-wide tile reads more FLOP per byte
 * than a 128 x 128 one, and the bf16 output leaves through TMA stores that drain while the next
 * tile runs. Each warpgroup keeps 64 x 256 fp32 accumulators and (PROMOTED) one 64 x 128 partial:
 * per token block it computes the left half's partial, promotes it, then the right half's. */
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
#define F8G_BAR_TURN 4 /* named barriers 4 and 5: warpgroup 0's and 1's turn (RESCALED) */
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
} f8g_params;

/* The 32-token slices of token block kb (of nkb) that hold real tokens: 4, except in an expert's
 * last block, whose padding tokens (zero codes) add nothing, so the rescaled main loop does not
 * issue their wgmmas (pays where experts are short: their last block is a large share). The
 * PROMOTED and EXPERT loops issue whole blocks. */
__device__ __forceinline__ int f8g_slices(int cnt, int kb, int nkb) {
  if (kb < nkb - 1) return 4;
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

/* acc[i] *= sa(row) * sb(col), once per tile: sb the expert's column scales from the tile's first
 * column n0 (EXPERT: global memory, from its first block; RESCALED: the last stage's copy in
 * shared memory), columns past n times 0 (never stored). */
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
 * warpgroups issue without taking turns (turns do not pay here: docs/PERF.md). */
template <int H>
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
  f8g_promote(acc + 64 * H, part, sa0, sa1, sbs + 128 * H, lane);
}

/* The promoted main loop over the token blocks of a tile's cnt tokens (PROMOTED). */
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
    f8g_half<0>(acc, part, da, db, sa0, sa1, sbs, lane);
    if (right) f8g_half<1>(acc, part, da, db, sa0, sa1, sbs, lane);
    gg_release<1>(empty0 + 8 * *stage, lane);
    if (++*stage == F8G_STAGES) { *stage = 0; *phase ^= 1; }
  }
}

/* The main loop of expert_scales 2 without a partial: the expert's token blocks chain on the
 * tensor cores into acc, which holds the sum in units of the current block's row scale c (A's;
 * B's is the expert's, applied at the end): before block kb's wgmmas acc is multiplied by
 * c_{kb-1} / c_kb (c held as F8_RESCALE_DROP / F8_RESCALE_FLOOR say), the 256-column forward
 * kernel's scheme (fp8_wide.cuh). Per block and warpgroup: four m64n256k32 and 128 multiplies,
 * against eight m64n128k32 (A read twice), two drains and 128 FMAs when each half's partial is
 * promoted. A tile with a missing right half computes it from the reloaded left half and never
 * stores it. On return acc is the tile's dW: scaled by the last block's row scales and by B's
 * column scales, read from the last stage before it is released (every block carries the
 * expert's). The two warpgroups issue their blocks in turn, as the forward kernel's do
 * (f8w_turn_wait): warpgroup 1 block g after warpgroup 0 issued it, warpgroup 0 block g + 1
 * after warpgroup 1 issued g, the sequence running on across tiles (*first: this warpgroup has
 * issued nothing yet); warpgroup 0 takes warpgroup 1's last pass after its last tile. */
template <int CL>
__device__ __forceinline__ void f8g_blocks_rescaled(float *acc, int cnt, int n0, int n,
                                                    const uint8_t *smem, uint32_t full0,
                                                    uint32_t empty0, uint64_t da0, uint64_t db0,
                                                    int r0, int lane, int *stage, uint32_t *phase,
                                                    int cwg, bool *first) {
  const int nkb = (cnt + 127) / 128;
  float p0 = 0.0f, p1 = 0.0f;
  int prev = -1;
  for (int kb = 0; kb < nkb; ++kb) {
    const int ns = f8g_slices(cnt, kb, nkb);
    mbar_wait(full0 + 8 * *stage, *phase);
    const float *sas = (const float *)(smem + F8G_SC_OFF + *stage * F8G_SC_BYTES);
    const float drop = kb > 0 ? F8_RESCALE_DROP : 0.0f;
    const float n0s = fmaxf(sas[r0], fmaxf(p0 * drop, F8_RESCALE_FLOOR));
    const float n1s = fmaxf(sas[r0 + 8], fmaxf(p1 * drop, F8_RESCALE_FLOOR));
    const float f0 = kb > 0 ? p0 * rcp_approx(n0s) : 1.0f;
    const float f1 = kb > 0 ? p1 * rcp_approx(n1s) : 1.0f;
    /* the factors are ready before the wait, so only the multiplies follow it (releasing block
     * kb - 1's stage before block kb's data is awaited would put the scale loads after the
     * wait) */
    asm volatile("" ::"f"(f0), "f"(f1));
    wgmma_wait<0>(); /* block kb - 1 is in acc (unconditional: ptxas serializes otherwise) */
    reg_fence(acc, 128);
    if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] *= (i & 2) ? f1 : f0;
    const uint64_t da = wgmma_desc_add(da0, *stage * F8G_STAGE_BYTES);
    const uint64_t db = wgmma_desc_add(db0, *stage * F8G_STAGE_BYTES);
    if (!(cwg == 0 && *first)) named_bar_sync(F8G_BAR_TURN + cwg, 256);
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
    named_bar_arrive(F8G_BAR_TURN + 1 - cwg, 256);
    *first = false;
    p0 = n0s;
    p1 = n1s;
    prev = *stage;
    if (++*stage == F8G_STAGES) { *stage = 0; *phase ^= 1; }
  }
  wgmma_wait<0>();
  reg_fence(acc, 128);
  if (prev >= 0) {
    const float *sbs = (const float *)(smem + F8G_SC_OFF + prev * F8G_SC_BYTES) + F8G_BM;
    f8g_scale_once(acc, sbs, n0, n, p0, p1, lane);
    gg_release<CL>(empty0 + 8 * prev, lane);
  }
}

static_assert(F8G_EPI_OFF % 1024 == 0 && F8G_STAGE_BYTES % 1024 == 0, "128B-swizzle atoms");

/* The kernel's main loops, one instantiation each, so that the rescaled one (the layer's default)
 * carries neither the promoted paths' 64-register partial nor their code. In one kernel its
 * consumers sat at the register limit: a trivial change elsewhere (one select in the PTX) made
 * ptxas spill and serialize every wgmma of the kernel (C7511). */
#define F8G_PROMOTED 0 /* expert_scales 0: each block's partial promoted                      */
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
  /* the experts' visiting order (tile_scheduler.h: most rows first), and by position in it
   * each expert's rows and first 128-row block */
  __shared__ uint8_t order[F8_MAX_EXPERTS];
  __shared__ int32_t counts[F8_MAX_EXPERTS], blocks0[F8_MAX_EXPERTS];
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
  gg_expert_order(p.count, E, order, tid, F8G_THREADS);
  __syncthreads();
  /* every expert this call writes (count >= 0) has all m_tiles x n_tiles tiles */
  if (tid >= 64 && tid < 96)
    gg_unit_prefix(p.count, order, E, 1, 1, p.m_tiles / CL * p.n_tiles, prefix, tid & 31);
  for (int i = tid - 128; i >= 0 && i < E; i += 256) {
    counts[i] = max(p.count[order[i]], 0);
    blocks0[i] = p.offset[order[i]] / 128;
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
    for (int u = unit0; u < total; u += ustride) {
      const gg_tile t = gg_decode_m_grouped_from(u, prefix, E, p.n_tiles, p.group_m, &cursor);
      const int m_tile = t.m_tile * CL + rank;
      const int cnt = counts[t.expert];
      const int nkb = (cnt + 127) / 128;
      const int n0 = t.n_tile * F8G_BN;
      const bool right = n0 + 128 < p.n; /* the tile has its right 128-column half */
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
      if (PATH == F8G_PROMOTED)
        f8g_blocks(acc, part, cnt, right, smem, full0, empty0, da0, db0, r0, lane, &stage,
                   &phase);
      /* B's scales are the expert's (the same in its every block): applied by the rescaled loop
       * once, from the last stage, with the last block's row scales */
      if (PATH == F8G_RESCALED && nkb > 0)
        f8g_blocks_rescaled<CL>(acc, cnt, n0, p.n, smem, full0, empty0, da0, db0, r0, lane,
                                &stage, &phase, cwg, &first);
      /* ------------------------------ epilogue ------------------------------ */
      if (!p.out_fp32) {
        /* bf16: two 128-column passes into this warpgroup's staging slice (one wait, for the
         * previous tile's stores), TMA-stored while the next tile's main loop runs */
        const int row0 = p.dw_row0 + cwg * 64 + order[t.expert] * p.m + m_tile * F8G_BM;
        gg_store_pass<0, 2>(acc, epi, wtid, &tm_c, n0, p.n, row0, 2 + cwg);
        gg_store_pass<16, 2>(acc, epi + 16384, wtid, &tm_c, n0 + 128, p.n, row0, 2 + cwg, false,
                             mok_clamp_round{}, false);
        continue;
      }
      if (p.accumulate && cnt == 0) continue; /* nothing to add */
      const size_t ebase = (size_t)order[t.expert] * p.m * p.n;
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
    if (PATH == F8G_RESCALED && cwg == 0 && !first)
      named_bar_sync(F8G_BAR_TURN, 256); /* 1's last pass */
    if (wtid == 0) bulk_wait0(); /* this warpgroup's TMA stores are complete */
  }
}

/* ---- host side ------------------------------------------------------------------------------ */

extern "C" mok_status mok_gg_fp8_wgrad(const void *a_t, const float *a_scales, int64_t a_ld,
                                       const void *b_t, const float *b_scales, int64_t b_ld,
                                       void *dw, int out_fp32, int accumulate,
                                       int expert_scales, const int32_t *expert_offset,
                                       const int32_t *expert_count, int num_experts,
                                       int64_t m_total, int64_t m, int64_t n,
                                       const mok_gg_launch *launch, cudaStream_t stream) {
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
  /* cluster pairs: the rescaled path only, where the 128-row tiles pair up */
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 2, 0, &l));
  if (l.cluster == 2 && (expert_scales != 2 || m % 256)) return MOK_ERR_INVALID_ARGUMENT;
  const int cl = l.cluster ? l.cluster : expert_scales == 2 ? mok_gg_fp8_wgrad_cluster_for(m) : 1;
  const int64_t m_pad = MOK_FP8_SCALE_ROWS(m_total);
  CUtensorMap ta, tb, tc;
  MOK_KTRY(gg_make_tmap_2d(&ta, a_t, m, m_pad, 1, F8G_BM, 128));
  MOK_KTRY(gg_make_tmap_2d(&tb, b_t, n, m_pad, 1, 128, 128));
  if (!out_fp32) MOK_KTRY(gg_make_tmap_2d(&tc, dw, (int64_t)num_experts * m, n, 2, 64, 64));
  else tc = ta;
  /* co-resident CTAs, the same for every single-CTA path (one shape of CTA), and whole cluster
   * pairs; each kernel's smem limit raised once */
  static int max_ctas = 0, max_ctas2 = 0;
  if (!max_ctas) {
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_PROMOTED, 1>, F8G_THREADS,
                                F8G_SMEM, 1, &max_ctas));
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_EXPERT, 1>, F8G_THREADS,
                                F8G_SMEM, 1, &max_ctas));
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_RESCALED, 1>, F8G_THREADS,
                                F8G_SMEM, 1, &max_ctas));
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_wgrad_kernel<F8G_RESCALED, 2>, F8G_THREADS,
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
  const size_t esz = out_fp32 ? 4 : 2;
  for (int e0 = 0; e0 < num_experts; e0 += F8_MAX_EXPERTS) {
    p.num_experts = num_experts - e0 < F8_MAX_EXPERTS ? num_experts - e0 : F8_MAX_EXPERTS;
    p.offset = expert_offset + e0;
    p.count = expert_count + e0;
    p.dw = (char *)dw + (size_t)e0 * m * n * esz;
    p.dw_row0 = (int)(e0 * m);
    const int64_t ctas = (int64_t)p.num_experts * p.m_tiles * p.n_tiles; /* a CTA per tile */
    const int cap = gg_ctas_cap(cl == 2 ? max_ctas2 : max_ctas, cl, l.max_ctas);
    if (cap < cl) return MOK_ERR_INVALID_ARGUMENT; /* max_ctas below one cluster */
    const int grid = (int)(ctas < cap ? ctas : cap);
    if (cl == 2) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = gg_cluster_config(grid, F8G_THREADS, F8G_SMEM, 2, stream,
                                                       &attr);
      MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_fp8_wgrad_kernel<F8G_RESCALED, 2>, ta, tb, tc, p));
    } else if (expert_scales == 1) {
      gg_fp8_wgrad_kernel<F8G_EXPERT, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc, p);
    } else if (expert_scales == 2) {
      gg_fp8_wgrad_kernel<F8G_RESCALED, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc,
                                                                                    p);
    } else {
      gg_fp8_wgrad_kernel<F8G_PROMOTED, 1><<<grid, F8G_THREADS, F8G_SMEM, stream>>>(ta, tb, tc,
                                                                                    p);
    }
    MOK_KLAUNCHED();
  }
  return MOK_SUCCESS;
}
