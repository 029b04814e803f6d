/* bf16.cu — the BF16 row-grouped GEMM kernel for sm_90a and its entry points (gemm.h: the forward,
 * the dgrad and the dgrad of a weight pair, the gate+up with the SwiGLU limit), with the fused
 * path's pull and pushes (gemm_fused.h: the gate+up that pulls its rows, the forward and the pair's
 * dgrad that push theirs). The gate+up without communication and without the limit is
 * bf16_tokens_n.cu's (tokens on wgmma's N side); the weight gradient is bf16_wgrad.cu's.
 *
 * One persistent kernel, one CTA per SM, 384 threads:
 *   warpgroup 0: producer; one thread issues TMA loads into a 4-stage shared-memory ring
 *                (each stage: A 128x64 + B 256x64 bf16, 48 KB), completed on mbarriers;
 *   warpgroups 1, 2: consumers; each owns 64 rows of the 128x256 tile, runs wgmma m64n256k16
 *                with fp32 accumulators (128 registers), frees stages through mbarriers and runs
 *                the epilogue (stmatrix into a swizzled staging buffer, TMA store) while the
 *                producer already loads the next tile.
 * Single CTAs walk the tile sequence of tile_scheduler.h (tile = blockIdx.x + i * gridDim.x),
 * producer and consumers alike, so the math never sees the order. Modes differ only in which boxes
 * are loaded, the operand majorness given to wgmma and the epilogue. The row-grouped modes also
 * run in cluster pairs (CL 2), which pays where experts are short (launch->cluster; gemm_plan.h):
 * a unit is two vertically adjacent tiles of one expert sharing the B tile by multicast, or, for
 * the experts' odd last row tiles, two tiles each with its own B (tile_scheduler.h,
 * gg_decode_pair). Where the leftover units are many (gemm_plan.h, mok_gg_bf16_claims), cluster
 * pairs claim their units at run time from the launch's counters (gemm_common.cuh, gg_claims; the
 * producer writes each unit's index beside its first stage for the consumers); else, and in the
 * gate+up that pulls its rows, they walk a static split (tile_scheduler.h, gg_pair_walk). In the
 * data gradient, a unit whose B tile no other unit nearby reads (gg_weight_read_once) loads it
 * evict_first in L2, so that it leaves room for the tiles that are read again. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/move/fused_move.cuh"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

enum { GG_FWD = 0, GG_SWIGLU = 1, GG_DGRAD = 2 };

#define GG_BM 128
#define GG_BN 256
#define GG_BK 64
#define GG_STAGES 4
#define GG_GROUP_M 16
#define GG_A_BYTES (GG_BM * GG_BK * 2)             /* 16 KB */
#define GG_STAGE_BYTES (GG_A_BYTES + GG_BN * GG_BK * 2) /* 48 KB */
#define GG_EPI_OFF (GG_STAGES * GG_STAGE_BYTES)   /* staging for the epilogue */
#define GG_EPI_BYTES (2 * 16384)                  /* 16 KB per consumer warpgroup */
#define GG_SMEM (GG_EPI_OFF + GG_EPI_BYTES)
#define GG_MAX_EXPERTS 256 /* experts per launch; more are split over launches */
/* Named barriers (0 is __syncthreads): 2 + cwg one consumer warpgroup's epilogue. */
#define GG_THREADS 384

typedef struct {
  const int32_t *offset; /* [E + 1] device, already shifted to this launch's first expert */
  const int32_t *count;  /* [E] device                                                  */
  int num_experts;       /* experts in this launch                                        */
  int expert_base;       /* global index of this launch's first expert (weight row base)  */
  int n_tiles;           /* output column tiles                                           */
  int k_blocks;          /* reduction blocks of 64                                        */
  int b_rows;            /* rows of one expert in the weight map (n, inter, or n of dgrad)*/
  int n_out;             /* output columns (n, inter, or k of dgrad); boxes past it are
                            neither loaded (a valid box is loaded twice) nor stored          */
  int inter;             /* SWIGLU: I (column offset of u in preact)                      */
  int b_split;           /* DGRAD of a weight pair: reduction index where the second starts
                            (each weight then has b_rows = b_split rows per expert); 0: one  */
  int use_limit;
  float limit;
  int has_preact;
  int group_m;           /* raster group, in work units                                   */
  /* Fused communication (kernels/move/fused_move.h): SWIGLU with comm_ctas > 0: the grid's last
   * comm_ctas CTAs pull A into move_rows [move_m_total, move_hidden]; FWD, DGRAD with push: the
   * epilogues also store each real row of C into its (token, j) slot on the source rank */
  int comm_ctas;
  int push;
  mok_gg_move move;
  char *move_rows;
  int64_t move_m_total, move_hidden;
  int move_experts;      /* all local experts (move.expert_offset is not shifted per launch)  */
  int32_t *tickets;      /* CL 2 without comm CTAs: the claim counters (mok_gg_launch.tickets) */
} gg_params;

/* FWD: first weight row of B half h of column tile n_tile (the half past n is replaced by a
 * valid one: it is loaded but never stored). */
__device__ __forceinline__ int t_n0_fwd(int bexp, int n_tile, int h, const gg_params &p) {
  const int col = n_tile * GG_BN + 128 * h;
  return bexp * p.b_rows + (col < p.n_out ? col : n_tile * GG_BN);
}

/* ---- the kernel ------------------------------------------------------------------------------ */
/* Loads half h (16 KB: 128 of the 256 B rows, or 2 of its 4 64-column boxes) of the B tile of
 * stage sb; multicast to both CTAs of a cluster pair when MC. once: no other unit nearby reads
 * this weight tile (tile_scheduler.h, gg_weight_read_once), so its lines are loaded with the L2
 * policy pol (evict_first) and leave room for the tiles that are read again; else plain loads. */
template <int MODE, int MC>
__device__ __forceinline__ void gg_load_b_half(int h, uint32_t sb, uint32_t full, int k0, int bexp,
                                               int n_tile, const gg_params &p,
                                               const CUtensorMap *tm_b0, const CUtensorMap *tm_b1,
                                               int once, uint64_t pol) {
#define GG_LD(dst, map, c0, c1)                                                         \
  do {                                                                                  \
    if (MC && once) tma_load_2d_multicast_hint(dst, map, full, c0, c1, 3, pol);         \
    else if (MC) tma_load_2d_multicast(dst, map, full, c0, c1, (uint16_t)3);           \
    else if (once) tma_load_2d_hint(dst, map, full, c0, c1, pol);                      \
    else tma_load_2d(dst, map, full, c0, c1);                                           \
  } while (0)
  if (MODE == GG_FWD) {
    const int n0 = t_n0_fwd(bexp, n_tile, h, p);
    GG_LD(sb + h * 16384, tm_b0, k0, n0);
  } else if (MODE == GG_SWIGLU) {
    GG_LD(sb + h * 16384, h ? tm_b1 : tm_b0, k0, bexp * p.b_rows + n_tile * 128);
  } else if (MODE == GG_DGRAD) {
    /* a pair of weights stacked along the reduction: blocks past b_split come from the second */
    const bool second = p.b_split > 0 && k0 >= p.b_split;
    const CUtensorMap *tm = second ? tm_b1 : tm_b0;
    const int r = bexp * p.b_rows + (second ? k0 - p.b_split : k0), n0 = n_tile * GG_BN;
#pragma unroll
    for (int j = 2 * h; j < 2 * h + 2; ++j)
      GG_LD(sb + j * 8192, tm, n0 + 64 * j < p.n_out ? n0 + 64 * j : n0, r);
  }
#undef GG_LD
}

/* The producer thread's walk over its units: the static walk (u_first, += u_step, < u_end), or
 * (CLAIM) the units its cluster claims (gemm_common.cuh, gg_claims), each unit's index written
 * beside its first stage for the consumers and the walk ended by a stage of index -1. */
template <int MODE, int CL, bool CLAIM>
__device__ __forceinline__ void gg_produce(const CUtensorMap *tm_a, const CUtensorMap *tm_b0,
                                          const CUtensorMap *tm_b1, const gg_params &p,
                                          const int32_t *prefix, const int32_t *pre_left,
                                          uint32_t smem_base, uint32_t full0, uint32_t empty0,
                                          int rank, int unit0, int ustride, int u_first,
                                          int u_step, int u_end, int apart, int32_t *stage_unit,
                                          volatile int32_t *hand_unit, uint64_t *hand_bars) {
  const int E = p.num_experts, n_comm = MODE == GG_SWIGLU ? p.comm_ctas : 0;
  int stage = 0;
  uint32_t phase = 0;
  const uint64_t l2_first = l2_policy_evict_first();
  gg_claims cw = gg_claims_make(p.tickets, unit0, ustride, prefix[E],
                                gg_left_units<CL>(pre_left, E));
  const int claim_at = p.k_blocks > 8 ? p.k_blocks - 8 : 0;
  int u = u_first;
  if (CLAIM) {
    gg_claim_issue(cw, rank);
    u = gg_claim_next(cw, rank, prefix[E], gg_left_units<CL>(pre_left, E), hand_unit, hand_bars);
  }
  while (CLAIM ? u >= 0 : u < u_end) {
    int32_t kind;
    const gg_tile t = gg_unit_tile<CL>(u, rank, prefix, pre_left, E, p.n_tiles, p.group_m, &kind);
    const int m_tile = t.m_tile;
    const int row_base = p.offset[t.expert];
    const int nkb = p.k_blocks;
    const int bexp = p.expert_base + t.expert;
    /* the data gradient's weight tile that no other unit of its raster group reads:
     * evict_first (A loads plain; the forward's loads stay plain, docs/PERF.md) */
    const int once = MODE == GG_DGRAD &&
                     gg_weight_read_once(gg_ceil_div(max(p.count[t.expert], 0), GG_BM), m_tile,
                                         p.group_m, CL, apart, kind);
    /* every unit's tile holds rows of its expert (GG_PAIR_NONE: the other CTA's tile) */
    const int a_row = row_base + m_tile * GG_BM;
    if (MODE == GG_SWIGLU && !CLAIM && n_comm > 0) /* the rows of A this tile reads landed */
      cm_wait_rows(p.move, a_row, min(GG_BM, p.count[t.expert] - m_tile * GG_BM));
    for (int kb = 0; kb < nkb; ++kb) {
      if (CLAIM && kb == claim_at) gg_claim_issue(cw, rank);
      mbar_wait(empty0 + 8 * stage, phase ^ 1);
      const uint32_t full = full0 + 8 * stage;
      if (CLAIM && kb == 0) stage_unit[stage] = u;
      mbar_arrive_expect_tx(full, GG_STAGE_BYTES);
      const uint32_t sa = smem_base + stage * GG_STAGE_BYTES;
      const uint32_t sb = sa + GG_A_BYTES;
      const int k0 = kb * GG_BK;
      tma_load_2d(sa, tm_a, full, k0, a_row);
      if (CL == 1 || kind != GG_PAIR_SHARED) {
        gg_load_b_half<MODE, 0>(0, sb, full, k0, bexp, t.n_tile, p, tm_b0, tm_b1, once,
                                l2_first);
        gg_load_b_half<MODE, 0>(1, sb, full, k0, bexp, t.n_tile, p, tm_b0, tm_b1, once,
                                l2_first);
      } else {
        gg_load_b_half<MODE, 1>(rank, sb, full, k0, bexp, t.n_tile, p, tm_b0, tm_b1, once,
                                l2_first);
      }
      if (++stage == GG_STAGES) { stage = 0; phase ^= 1; }
    }
    if (CLAIM)
      u = gg_claim_next(cw, rank, prefix[E], gg_left_units<CL>(pre_left, E), hand_unit, hand_bars);
    else
      u += u_step;
  }
  if (CLAIM) gg_claim_end_stage(full0, empty0, stage_unit, GG_STAGES, stage, phase);
  gg_producer_drain<CL>(empty0, GG_STAGES, stage, phase);
  if (CLAIM) gg_claim_finish(cw, rank, ustride, hand_bars);
}

template <int MODE, int CL>
__global__ void __launch_bounds__(GG_THREADS, 1)
    gg_bf16_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b0,
                   const __grid_constant__ CUtensorMap tm_b1, const __grid_constant__ CUtensorMap tm_c0,
                   const __grid_constant__ CUtensorMap tm_c1, const gg_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * GG_STAGES];
  __shared__ int32_t prefix[GG_MAX_EXPERTS + 1], pre_left[CL > 1 ? GG_MAX_EXPERTS + 1 : 1];
  __shared__ __align__(8) uint64_t comm_bars[2 * CM_WARPS];
  /* claimed units: the unit each stage's first K block belongs to (-1: the walk's end), written
   * by this CTA's producer before the stage's arrival; the handoff from rank 0 to rank 1 */
  __shared__ int32_t stage_unit[GG_STAGES], hand_unit[GG_HAND];
  __shared__ __align__(8) uint64_t hand_bars[2 * GG_HAND];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[GG_STAGES]);
  const int E = p.num_experts;
  /* Work units: one tile (CL = 1), or two tiles on the two CTAs of a cluster (gg_unit_tile,
   * gemm_common.cuh). */
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  /* Fused communication: the last comm_ctas CTAs are comm CTAs; the units go to the others. */
  const int n_comm = MODE == GG_SWIGLU ? p.comm_ctas : 0;
  const int n_compute = (int)gridDim.x - n_comm;
  const int unit0 = blockIdx.x / CL, ustride = n_compute / CL;

  if (tid == 0) {
    gg_ring_init(smem_base, full0, empty0, GG_STAGES, 8 * CL); /* a release per consumer warp */
    if (CL > 1) gg_claim_bars_init(hand_bars);
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(&tm_a);
    tma_prefetch_desc(&tm_b0);
    if (MODE == GG_SWIGLU || (MODE == GG_DGRAD && p.b_split)) tma_prefetch_desc(&tm_b1);
    tma_prefetch_desc(&tm_c0);
    if (MODE == GG_SWIGLU && p.has_preact) tma_prefetch_desc(&tm_c1);
  }
  if (tid >= 64 && tid < 96) /* unit prefix over experts */
    gg_unit_prefix_rows<CL>(p.count, E, GG_BM, p.n_tiles, prefix, pre_left, tid & 31);
  if (CL > 1) cluster_sync(); /* barrier inits visible to the peer before any multicast */
  else __syncthreads();
  /* CL 1 and the pull's gate+up: a static walk (the pull's in order, the leftovers last) */
  int u_first, u_step, u_end;
  const int apart = gg_unit_walk<CL>(unit0, ustride, prefix, pre_left, E, n_comm == 0, &u_first,
                                     &u_step, &u_end);
  /* cluster pairs claim their units where the leftovers are many (gemm_plan.h), except where the
   * pull delivers rows in order */
  const bool claim = CL > 1 && n_comm == 0 &&
                     mok_gg_bf16_claims(prefix[E], gg_left_units<CL>(pre_left, E));
  if (MODE == GG_SWIGLU && n_comm > 0 && (int)blockIdx.x >= n_compute) {
    /* ------------------------------ comm CTA ------------------------------ */
    cm_pull_minibatches(p.move, (int)blockIdx.x - n_compute, p.move_rows, p.move_hidden,
                        p.move_experts, p.move_m_total, smem, comm_bars);
    return;
  }

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      if (claim)
        gg_produce<MODE, CL, true>(&tm_a, &tm_b0, &tm_b1, p, prefix, pre_left, smem_base, full0,
                                   empty0, rank, unit0, ustride, u_first, u_step, u_end, apart,
                                   stage_unit, hand_unit, hand_bars);
      else
        gg_produce<MODE, CL, false>(&tm_a, &tm_b0, &tm_b1, p, prefix, pre_left, smem_base, full0,
                                    empty0, rank, unit0, ustride, u_first, u_step, u_end, apart,
                                    stage_unit, hand_unit, hand_bars);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const int cwg = wg - 1;
    const int wtid = tid & 127;
    const int lane = wtid & 31;
    const uint32_t epi = smem_base + GG_EPI_OFF + cwg * 16384;
    /* operand descriptors in stage 0 (this warpgroup's 64 A rows; B), stepped per stage and slice */
    uint64_t da0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t db0 = MODE == GG_DGRAD
                       ? wgmma_desc_sw128(smem_base + GG_A_BYTES, 8192, 1024)
                       : wgmma_desc_sw128(smem_base + GG_A_BYTES, 16, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0)); /* built once: not re-derived from addresses */
    int stage = 0;
    uint32_t phase = 0;
    const uint8_t *epi_ptr = smem + GG_EPI_OFF + cwg * 16384;
    float acc[128];
    for (int u = u_first;; u += u_step) {
      if (claim) {
        if ((u = gg_claimed_unit<CL>(full0, empty0, stage_unit, stage, phase, lane)) < 0) break;
      } else if (u >= u_end) {
        break;
      }
      int32_t kind;
      const gg_tile t = gg_unit_tile<CL>(u, rank, prefix, pre_left, E, p.n_tiles, p.group_m, &kind);
      const int m_tile = t.m_tile;
      const int nkb = p.k_blocks, cnt = max(p.count[t.expert], 0);
      /* This warpgroup's 64 rows hold real rows? If not (the upper half of an expert's last
       * tile, or the CTA of a unit with one leftover tile) it skips the math and the stores. */
      const bool math = kind != GG_PAIR_NONE && cnt - m_tile * GG_BM > cwg * 64;
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      int prev = -1;
      for (int kb = 0; kb < nkb; ++kb) {
        mbar_wait(full0 + 8 * stage, phase);
        if (math) {
          const uint64_t da = wgmma_desc_add(da0, stage * GG_STAGE_BYTES);
          const uint64_t db = wgmma_desc_add(db0, stage * GG_STAGE_BYTES);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const uint64_t dak = wgmma_desc_add(da, kk * 32);
            const uint64_t dbk = wgmma_desc_add(db, kk * (MODE == GG_DGRAD ? 2048 : 32));
            if (MODE == GG_DGRAD) wgmma_m64n256k16_bf16<0, 1>(acc, dak, dbk, 1);
            else wgmma_m64n256k16_bf16<0, 0>(acc, dak, dbk, 1);
          }
          wgmma_commit();
          wgmma_wait<1>();
          if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
          prev = stage;
        } else {
          gg_release<CL>(empty0 + 8 * stage, lane);
        }
        if (++stage == GG_STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
      if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
      reg_fence(acc, 128);
      if (!math) continue;

      /* ------------------------------ epilogue ------------------------------ */
      if (MODE == GG_FWD || MODE == GG_DGRAD) {
        const int row0 = p.offset[t.expert] + m_tile * GG_BM + cwg * 64;
        const int col0 = t.n_tile * GG_BN;
        gg_store_pass<0, 2>(acc, epi, wtid, &tm_c0, col0, p.n_out, row0, 2 + cwg);
        if (p.push) gg_push_pass(epi_ptr, wtid, p.move, p.move_m_total, p.move_hidden, col0, p.n_out, row0);
        gg_store_pass<16, 2>(acc, epi, wtid, &tm_c0, col0 + 128, p.n_out, row0, 2 + cwg);
        if (p.push) gg_push_pass(epi_ptr, wtid, p.move, p.move_m_total, p.move_hidden, col0 + 128, p.n_out, row0);
      } else if (MODE == GG_SWIGLU) {
        const int row0 = p.offset[t.expert] + m_tile * GG_BM + cwg * 64;
        const int col0 = t.n_tile * 128;
        if (p.has_preact) {
          const mok_clamp_round mk = mok_cr_make(p.limit);
          const bool clamp = p.use_limit != 0;
          gg_store_pass<0, 2>(acc, epi, wtid, &tm_c1, col0, p.n_out, row0, 2 + cwg, clamp, mk);
          gg_store_pass<16, 2>(acc, epi, wtid, &tm_c1, p.inter + col0, 2 * p.n_out, row0, 2 + cwg, clamp, mk);
        }
        gg_swiglu<64>(acc, p.use_limit, p.limit);
        gg_store_pass<0, 2>(acc, epi, wtid, &tm_c0, col0, p.n_out, row0, 2 + cwg);
      }
    }
    if (wtid == 0) bulk_wait0(); /* this warpgroup's TMA stores are complete */
    if ((MODE == GG_FWD || MODE == GG_DGRAD) && p.push)
      __threadfence_system(); /* the pushed rows, before the cross-rank barrier after the kernel */
  }
}

/* ---- host side ------------------------------------------------------------------------------ */
template <int MODE, int CL>
static mok_status gg_launch_cl(const CUtensorMap *a, const CUtensorMap *b0, const CUtensorMap *b1,
                               const CUtensorMap *c0, const CUtensorMap *c1, gg_params p,
                               int max_units, int grid_cap, cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs (whole clusters), found once */
  if (!max_ctas)
    MOK_KTRY(gg_coresident_ctas((const void *)gg_bf16_kernel<MODE, CL>, GG_THREADS, GG_SMEM, CL,
                                &max_ctas));
  const int n_comm = MODE == GG_SWIGLU ? p.comm_ctas : 0; /* a multiple of CL */
  const int cap = gg_ctas_cap(max_ctas, CL, grid_cap) - n_comm;
  if (cap < CL) return MOK_ERR_INVALID_ARGUMENT; /* no SM left for the GEMM */
  int units = max_units < cap / CL ? max_units : cap / CL;
  if (units < 1) units = 1;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = gg_cluster_config(units * CL + n_comm, GG_THREADS, GG_SMEM, CL,
                                                   stream, &attr);
  MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_bf16_kernel<MODE, CL>, *a, *b0, *b1, *c0, *c1, p));
  return MOK_SUCCESS;
}

/* Splits the experts over launches of at most GG_MAX_EXPERTS and picks the cluster size: the
 * launch's, else gemm_plan.h's for the capacity's rows per expert.
 * max_tiles: an upper bound of the tiles of one launch (grid size); m_total: the rows. */
template <int MODE>
static mok_status gg_launch(const CUtensorMap *a, const CUtensorMap *b0, const CUtensorMap *b1,
                            const CUtensorMap *c0, const CUtensorMap *c1, gg_params p,
                            int max_tiles, int64_t m_total, const mok_gg_launch *launch,
                            cudaStream_t stream) {
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 2, 0, &l));
  const int64_t rows = gg_rows_per_expert(m_total, p.num_experts);
  const int cl = l.cluster ? l.cluster : mok_gg_bf16_cluster_for(rows);
  p.group_m = 16 / cl;
  if (cl == 2) MOK_KTRY(gg_claim_tickets(&l, &p.tickets));
  if (p.comm_ctas > 0) p.comm_ctas = (p.comm_ctas + cl - 1) / cl * cl;
  p.move.ctas = p.comm_ctas; /* the pull's warps count what the consumers wait for */
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  for (int e0 = 0; e0 < e_all; e0 += GG_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < GG_MAX_EXPERTS ? e_all - e0 : GG_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    if (e0 > 0) p.comm_ctas = 0; /* the first launch's comm CTAs pulled every expert's rows */
    int units = max_tiles;
    /* a pair unit covers two row tiles (tile_scheduler.h, gg_decode_pair) */
    if (cl == 2) units = (max_tiles + 1) / 2;
    mok_status st =
        cl == 2 ? gg_launch_cl<MODE, 2>(a, b0, b1, c0, c1, p, units, l.max_ctas, stream)
                : gg_launch_cl<MODE, 1>(a, b0, b1, c0, c1, p, units, l.max_ctas, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}

static mok_status gg_fwd(const void *a, const void *b, void *c, const int32_t *expert_offset,
                         const int32_t *expert_count, int num_experts, int64_t m_total, int64_t n,
                         int64_t k, const mok_gg_move *push, const mok_gg_launch *launch,
                         cudaStream_t stream);

extern "C" mok_status mok_gg_bf16_fwd(const void *a, const void *b, void *c,
                                      const int32_t *expert_offset, const int32_t *expert_count,
                                      int num_experts, int64_t m_total, int64_t n, int64_t k,
                                      const mok_gg_launch *launch, cudaStream_t stream) {
  return gg_fwd(a, b, c, expert_offset, expert_count, num_experts, m_total, n, k, NULL, launch,
                stream);
}

extern "C" mok_status mok_gg_bf16_fwd_pushed(const void *a, const void *b, void *c,
                                             const int32_t *expert_offset,
                                             const int32_t *expert_count, int num_experts,
                                             int64_t m_total, int64_t n, int64_t k,
                                             const mok_gg_move *push, const mok_gg_launch *launch,
                                             cudaStream_t stream) {
  if (!push) return MOK_ERR_INVALID_ARGUMENT;
  return gg_fwd(a, b, c, expert_offset, expert_count, num_experts, m_total, n, k, push, launch,
                stream);
}

/* The fused communication of one call (kernels/move/fused_move.h); push: 1 for a push (by the
 * epilogues, no comm CTAs), 0 for a pull by q->ctas comm CTAs. */
static mok_status gg_set_move(gg_params *p, const mok_gg_move *q, int push, const void *rows,
                              int64_t m_total, int64_t hidden, int num_experts) {
  if (!gg_move_ok(q, push)) return MOK_ERR_INVALID_ARGUMENT;
  if (!push && (!q->expert_offset || !q->flags || !q->err || q->ctas < 1 || q->mb_rows < 128 ||
                q->mb_rows % 128 || q->timeout_ns <= 0))
    return MOK_ERR_INVALID_ARGUMENT;
  p->comm_ctas = push ? 0 : q->ctas;
  p->push = push;
  p->move = *q;
  p->move_rows = (char *)rows;
  p->move_m_total = m_total;
  p->move_hidden = hidden;
  p->move_experts = num_experts;
  return MOK_SUCCESS;
}

static mok_status gg_fwd(const void *a, const void *b, void *c, const int32_t *expert_offset,
                         const int32_t *expert_count, int num_experts, int64_t m_total, int64_t n,
                         int64_t k, const mok_gg_move *push, const mok_gg_launch *launch,
                         cudaStream_t stream) {
  if (!a || !b || !c) return MOK_ERR_INVALID_ARGUMENT;
  MOK_KTRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, n, k));
  CUtensorMap ta, tb, tc;
  MOK_KTRY(gg_make_tmap_2d(&ta, a, m_total, k, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tb, b, (int64_t)num_experts * n, k, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tc, c, m_total, n, 2, 64, 64));
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)((n + GG_BN - 1) / GG_BN);
  p.k_blocks = (int)(k / GG_BK);
  p.b_rows = (int)n;
  p.n_out = (int)n;
  if (push) MOK_KTRY(gg_set_move(&p, push, 1, c, m_total, n, num_experts));
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_FWD>(&ta, &tb, &tb, &tc, &tc, p, max_tiles, m_total, launch, stream);
}

static mok_status gg_gate_up(const void *x, const void *w_gate, const void *w_up, void *act,
                             void *preact, const int32_t *expert_offset,
                             const int32_t *expert_count, int num_experts, int64_t m_total,
                             int64_t inter, int64_t hidden, int use_limit, float limit,
                             const mok_gg_move *pull, const mok_gg_launch *launch,
                             cudaStream_t stream) {
  MOK_KTRY(gg_check_gate_up(x, w_gate, w_up, act, expert_offset, expert_count, num_experts,
                            m_total, inter, hidden, use_limit, limit));
  CUtensorMap ta, tg, tu, tc, tp;
  MOK_KTRY(gg_make_tmap_2d(&ta, x, m_total, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tg, w_gate, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tu, w_up, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tc, act, m_total, inter, 2, 64, 64));
  if (preact) MOK_KTRY(gg_make_tmap_2d(&tp, preact, m_total, 2 * inter, 2, 64, 64));
  else tp = tc;
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)(inter / 128);
  p.k_blocks = (int)(hidden / GG_BK);
  p.b_rows = (int)inter;
  p.inter = (int)inter;
  p.n_out = (int)inter;
  p.use_limit = use_limit != 0;
  p.limit = limit;
  p.has_preact = preact != NULL;
  if (pull) MOK_KTRY(gg_set_move(&p, pull, 0, x, m_total, hidden, num_experts));
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_SWIGLU>(&ta, &tg, &tu, &tc, &tp, p, max_tiles, m_total, launch, stream);
}

extern "C" mok_status mok_gg_bf16_gate_up_swiglu_rows(const void *x, const void *w_gate,
                                                      const void *w_up, void *act, void *preact,
                                                      const int32_t *expert_offset,
                                                      const int32_t *expert_count,
                                                      int num_experts, int64_t m_total,
                                                      int64_t inter, int64_t hidden,
                                                      int use_limit, float limit,
                                                      const mok_gg_launch *launch,
                                                      cudaStream_t stream) {
  return gg_gate_up(x, w_gate, w_up, act, preact, expert_offset, expert_count, num_experts, m_total,
                    inter, hidden, use_limit, limit, NULL, launch, stream);
}

extern "C" mok_status mok_gg_bf16_gate_up_swiglu_pulled(void *recv, const void *w_gate,
                                                        const void *w_up, void *act, void *preact,
                                                        const int32_t *expert_offset,
                                                        const int32_t *expert_count,
                                                        int num_experts, int64_t m_total,
                                                        int64_t inter, int64_t hidden,
                                                        int use_limit, float limit,
                                                        const mok_gg_move *pull,
                                                        const mok_gg_launch *launch,
                                                        cudaStream_t stream) {
  if (!pull) return MOK_ERR_INVALID_ARGUMENT;
  return gg_gate_up(recv, w_gate, w_up, act, preact, expert_offset, expert_count, num_experts,
                    m_total, inter, hidden, use_limit, limit, pull, launch, stream);
}

/* dA = dC x W (w1 == NULL), or dA = dC[:, :n/2] x W0 + dC[:, n/2:] x W1 (a weight pair, each
 * [E, n/2, k], in one reduction). */
static mok_status gg_dgrad(const void *dc, const void *w0, const void *w1, void *da,
                           const int32_t *expert_offset, const int32_t *expert_count,
                           int num_experts, int64_t m_total, int64_t n, int64_t k,
                           const mok_gg_move *push, const mok_gg_launch *launch,
                           cudaStream_t stream) {
  if (!dc || !w0 || !da) return MOK_ERR_INVALID_ARGUMENT;
  MOK_KTRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, n, k));
  const int64_t rows = w1 ? n / 2 : n; /* weight rows per expert */
  if (w1 && rows % GG_BK) return MOK_ERR_MISALIGNED;
  CUtensorMap ta, tb0, tb1, tc;
  MOK_KTRY(gg_make_tmap_2d(&ta, dc, m_total, n, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tb0, w0, (int64_t)num_experts * rows, k, 2, 64, 64));
  if (w1) MOK_KTRY(gg_make_tmap_2d(&tb1, w1, (int64_t)num_experts * rows, k, 2, 64, 64));
  else tb1 = tb0;
  MOK_KTRY(gg_make_tmap_2d(&tc, da, m_total, k, 2, 64, 64));
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)((k + GG_BN - 1) / GG_BN);
  p.k_blocks = (int)(n / GG_BK);
  p.b_rows = (int)rows;
  p.b_split = w1 ? (int)rows : 0;
  p.n_out = (int)k;
  if (push) MOK_KTRY(gg_set_move(&p, push, 1, da, m_total, k, num_experts));
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_DGRAD>(&ta, &tb0, &tb1, &tc, &tc, p, max_tiles, m_total, launch, stream);
}

extern "C" mok_status mok_gg_bf16_dgrad(const void *dc, const void *w, void *da,
                                        const int32_t *expert_offset, const int32_t *expert_count,
                                        int num_experts, int64_t m_total, int64_t n, int64_t k,
                                        const mok_gg_launch *launch, cudaStream_t stream) {
  return gg_dgrad(dc, w, NULL, da, expert_offset, expert_count, num_experts, m_total, n, k, NULL,
                  launch, stream);
}

extern "C" mok_status mok_gg_bf16_dgrad_pair(const void *dc, const void *w0, const void *w1,
                                             void *da, const int32_t *expert_offset,
                                             const int32_t *expert_count, int num_experts,
                                             int64_t m_total, int64_t n_each, int64_t k,
                                             const mok_gg_launch *launch, cudaStream_t stream) {
  if (!w1) return MOK_ERR_INVALID_ARGUMENT;
  if (n_each > INT32_MAX / 2) return MOK_ERR_INVALID_SHAPE;
  return gg_dgrad(dc, w0, w1, da, expert_offset, expert_count, num_experts, m_total, 2 * n_each,
                  k, NULL, launch, stream);
}

extern "C" mok_status mok_gg_bf16_dgrad_pair_pushed(const void *dc, const void *w0, const void *w1,
                                                    void *da, const int32_t *expert_offset,
                                                    const int32_t *expert_count, int num_experts,
                                                    int64_t m_total, int64_t n_each, int64_t k,
                                                    const mok_gg_move *push,
                                                    const mok_gg_launch *launch,
                                                    cudaStream_t stream) {
  if (!w1 || !push) return MOK_ERR_INVALID_ARGUMENT;
  if (n_each > INT32_MAX / 2) return MOK_ERR_INVALID_SHAPE;
  return gg_dgrad(dc, w0, w1, da, expert_offset, expert_count, num_experts, m_total, 2 * n_each,
                  k, push, launch, stream);
}
