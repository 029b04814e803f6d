/* bf16_wgrad.cu — the BF16 weight gradient (gemm.h: mok_gg_bf16_wgrad, mok_gg_bf16_wgrad_ld): a
 * K-grouped GEMM dW[e] = dC[rows of e]^T A[rows of e], reduced over each expert's rows, read in
 * place (no padding, no transposed copy).
 *
 * One persistent kernel, one CTA per SM, 384 threads. Its units (tile_scheduler.h,
 * gg_decode_k_chunk_from; the experts visited by rows, most first) are, for an expert of at most
 * four 64-row blocks, one 256-column dW tile of it and up to GW_CHUNK of its 128-row dW tiles,
 * which all reduce over the same activation columns A[rows of e, 256 columns]; for an expert
 * with more rows, single tiles. In cluster pairs (CL 2) a unit's tiles are split between the two
 * CTAs (rank r takes its tiles r, r + 2, ...; an expert with more rows has units of two tiles,
 * one a CTA) and its A blocks are loaded once for both, each CTA's producer multicasting two of
 * their four boxes: A is read from L2 once per unit where single CTAs read it once per tile (an
 * expert with more rows) or once per CTA and unit:
 *   warpgroup 0: producer; one thread loads 64-row blocks of A (32 KB) into four A slots and of
 *                dC (128 dW rows, 16 KB) into a 4-stage ring, completed on mbarriers. Where the
 *                expert has at most four blocks, A is loaded once for the unit's first tile and
 *                stays (the other tiles read only dC: 80 KB a tile from L2 instead of 192 at
 *                DeepSeek-V3's EP=1 rows); with more, the slots are a ring like dC's;
 *   warpgroups 1, 2: consumers of 64 dW rows each, wgmma m64n256k16 on MN-major operands into
 *                fp32 accumulators.
 * An expert's rows are few (a few hundred at EP=1 on DeepSeek-V3's shape), so a tile reduces over
 * only a few blocks and what happens between tiles decides the speed:
 *   - an expert's last block issues only the 16-row slices that hold its rows; the rows of the
 *     last slice past the count are the expert's tail, which the caller keeps zero in both
 *     operands (gemm.h), so no slice is touched between its load and the tensor cores;
 *   - the two warpgroups issue their blocks in turn (warpgroup 1 block g after warpgroup 0 issued
 *     it, 0 block g + 1 after 1 issued g, across tiles), so their epilogues fall at different
 *     times and one warpgroup's stores run under the other's tensor work.
 * bf16 dW leaves a tile late: at the tile's end a warpgroup packs its accumulators into 64 bf16x2
 * registers and starts the next tile; the packed slice goes through its 16 KB staging buffer in
 * two 128-column passes and TMA stores (evict_first in L2: dW is written once and not read back)
 * while the next tile's first blocks run on the tensor cores (each pass after a block's wgmmas
 * are issued), so the stores of a tile no longer stand between its last block and the next
 * tile's first. The last tile's (and a tile's with no rows) leave at once. fp32 dW (and
 * accumulation into it) by direct stores at the tile's end. Three stages with a whole 32 KB slice
 * staged per warpgroup measured slower where experts have 320 rows or more and on skewed routing
 * (docs/PERF.md). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

#define GW_BM 128
#define GW_BN 256
#define GW_BK 64
#define GW_DC_BYTES (GW_BM * GW_BK * 2) /* 16 KB: a block of dC, two 64-row boxes    */
#define GW_A_BYTES (GW_BN * GW_BK * 2)  /* 32 KB: a block of A, four 64-column boxes */
#define GW_A_SLOTS 4
#define GW_DC_STAGES 4
#define GW_CHUNK 8 /* dW row tiles of a unit */
#define GW_RESIDENT_ROWS (GW_A_SLOTS * GW_BK) /* an expert's rows whose A blocks all stay */
#define GW_DC_OFF (GW_A_SLOTS * GW_A_BYTES)
#define GW_EPI_OFF (GW_DC_OFF + GW_DC_STAGES * GW_DC_BYTES)
#define GW_EPI_BYTES 16384 /* a consumer warpgroup's staging: half its 64 x 256 bf16 slice */
#define GW_SMEM (GW_EPI_OFF + 2 * GW_EPI_BYTES)
#define GW_MAX_EXPERTS 256 /* experts per launch; more are split over launches */
#define GW_THREADS 384
/* Named barriers (0 is __syncthreads): 2 + cwg one warpgroup's epilogue, GW_BAR_TURN + cwg
 * warpgroup cwg's turn to issue. */
#define GW_BAR_TURN 4
static_assert(GW_DC_OFF % 1024 == 0 && GW_EPI_OFF % 1024 == 0, "128B-swizzle atoms");

typedef struct {
  const int32_t *offset; /* [E + 1] device, already shifted to this launch's first expert */
  const int32_t *count;  /* [E] device; -1: an expert this call leaves alone (a ring view's) */
  int num_experts;       /* experts in this launch                                        */
  int expert_base;       /* global index of this launch's first expert (dW row base)      */
  int m_tiles, n_tiles;  /* dW tiles per expert                                            */
  void *dw;              /* fp32 output [E, wn, wk], already shifted to expert_base        */
  int wn, wk;            /* dW shape per expert                                            */
  int accumulate;
} gw_params;

/* The 16-row slices of block kb that hold real rows: 4, but in an expert's last block. */
__device__ __forceinline__ int gw_slices(int cnt, int kb) {
  return min(4, (cnt - kb * GW_BK + 15) >> 4);
}

/* The bf16 dW slice a warpgroup packed (pk[64]: the fragment's value pairs in order, as
 * pack_bf16x2(acc[2 i], acc[2 i + 1])), one 128-column pass PASS of it into the staging buffer
 * (two 64 x 64 boxes, 128B-swizzled, by stmatrix) and out by two TMA stores at (col0 + 128 PASS,
 * row0) of those before wk; map NULL: staged, not stored (a 64-row block past wn). The stores are
 * evict_first in L2: dW is written once and not read in the pass, so its lines should not push out
 * the operand tiles that are read again. */
template <int PASS>
__device__ __forceinline__ void gw_store_packed(const uint32_t *pk, uint32_t epi, int wtid,
                                                const CUtensorMap *map, int col0, int wk,
                                                int row0, int bar_id) {
  if (wtid == 0) bulk_wait_read0(); /* the previous pass has left the staging buffer */
  named_bar_sync(bar_id, 128);
  const int warp = wtid >> 5, lane = wtid & 31, q = lane >> 3;
  const int row = warp * 16 + (q & 1) * 8 + (lane & 7);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t *r = pk + 32 * PASS + 4 * j;
    const int chunk = 2 * j + (q >> 1), box = chunk >> 3, c = chunk & 7;
    stmatrix_x4(epi + box * 8192 + row * 128 + ((c ^ (row & 7)) << 4), r[0], r[1], r[2], r[3]);
  }
  fence_proxy_async_smem();
  named_bar_sync(bar_id, 128);
  const int c0 = col0 + 128 * PASS;
  if (wtid == 0 && map && c0 < wk) {
    const uint64_t l2_first = l2_policy_evict_first();
    tma_store_2d_hint(map, epi, c0, row0, l2_first);
    if (c0 + 64 < wk) tma_store_2d_hint(map, epi + 8192, c0 + 64, row0, l2_first);
    bulk_commit();
  }
}

/* The ring positions of the A slots and the dC stages, advanced alike by producer and consumers. */
struct gw_ring {
  int slot;
  uint32_t phase;
  __device__ __forceinline__ void next(int n) {
    if (++slot == n) { slot = 0; phase ^= 1; }
  }
};

template <bool OUT_F32, int CL>
__global__ void __launch_bounds__(GW_THREADS, 1)
    gg_bf16_wgrad_kernel(const __grid_constant__ CUtensorMap tm_dc,
                         const __grid_constant__ CUtensorMap tm_a,
                         const __grid_constant__ CUtensorMap tm_dw, const gw_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * GW_A_SLOTS + 2 * GW_DC_STAGES];
  __shared__ int32_t prefix[GW_MAX_EXPERTS + 1];
  __shared__ uint8_t order[GW_MAX_EXPERTS]; /* the experts' visiting order (tile_scheduler.h) */

  const int tid = threadIdx.x, wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t a_full0 = smem_u32(&bars[0]), a_empty0 = smem_u32(&bars[GW_A_SLOTS]);
  const uint32_t d_full0 = smem_u32(&bars[2 * GW_A_SLOTS]);
  const uint32_t d_empty0 = smem_u32(&bars[2 * GW_A_SLOTS + GW_DC_STAGES]);
  const int E = p.num_experts;
  /* CL 2: units go to clusters; both CTAs load each A block and release it on both */
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  const int unit0 = blockIdx.x / CL, ustride = gridDim.x / CL;
  if (tid == 0) { /* a release per consumer warp (of both CTAs, for the A slots of a pair) */
    gg_ring_init(smem_base, a_full0, a_empty0, GW_A_SLOTS, 8 * CL);
    gg_ring_init(smem_base, d_full0, d_empty0, GW_DC_STAGES, 8);
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(&tm_dc);
    tma_prefetch_desc(&tm_a);
    if (!OUT_F32) tma_prefetch_desc(&tm_dw);
  }
  gg_expert_order(p.count, E, order, tid, GW_THREADS);
  __syncthreads();
  if (tid >= 64 && tid < 96)
    gg_unit_prefix_k_chunks(p.count, order, E, GW_RESIDENT_ROWS, p.m_tiles, p.n_tiles, GW_CHUNK, CL,
                            prefix, tid & 31);
  if (CL > 1) cluster_sync(); /* barrier inits visible to the peer before any multicast */
  else __syncthreads();
  const int total = prefix[E];

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      gw_ring ra = {0, 0}, rd = {0, 0};
      int32_t cursor = 0;
      for (int u = unit0; u < total; u += ustride) {
        int tiles;
        gg_tile t = gg_decode_k_chunk_from(u, prefix, E, p.m_tiles, p.n_tiles, GW_CHUNK, CL,
                                           p.count, order, GW_RESIDENT_ROWS, &cursor, &tiles);
        t.expert = order[t.expert]; /* position -> expert */
        const int cnt = max(p.count[t.expert], 0), nkb = gg_ceil_div(cnt, GW_BK);
        const bool resident = cnt <= GW_RESIDENT_ROWS;
        const int row_base = p.offset[t.expert], n0 = t.n_tile * GW_BN;
        /* this CTA's tiles of the unit: i = rank, rank + CL, ...; with none (the last tile of a
         * pair unit with one), one pass that only loads this CTA's half of the A blocks */
        const int mine = (tiles - rank + CL - 1) / CL;
        for (int q = 0; q < (mine > 0 ? mine : 1); ++q) {
          const int i = rank + CL * q;
          const int m0 = (t.m_tile + i) * GW_BM;
          /* A: a tile's blocks (single CTAs, an expert with more rows), else once for the unit */
          const bool a_load = CL == 1 ? !resident || i == 0 : q == 0;
          for (int kb = 0; kb < nkb; ++kb) {
            const int r = row_base + kb * GW_BK;
            /* boxes past the last dW row or column reload a valid one (computed, never stored) */
            if (a_load) {
              mbar_wait(a_empty0 + 8 * ra.slot, ra.phase ^ 1);
              const uint32_t full = a_full0 + 8 * ra.slot, sa = smem_base + ra.slot * GW_A_BYTES;
              mbar_arrive_expect_tx(full, GW_A_BYTES);
              if (CL == 1) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                  tma_load_2d(sa + j * 8192, &tm_a, full, n0 + 64 * j < p.wk ? n0 + 64 * j : n0, r);
              } else { /* boxes 2 rank, 2 rank + 1 for both CTAs */
#pragma unroll
                for (int j = 2 * rank; j < 2 * rank + 2; ++j)
                  tma_load_2d_multicast(sa + j * 8192, &tm_a, full,
                                        n0 + 64 * j < p.wk ? n0 + 64 * j : n0, r, (uint16_t)3);
              }
              ra.next(GW_A_SLOTS);
            }
            if (mine == 0) continue; /* no dC: no tile here */
            mbar_wait(d_empty0 + 8 * rd.slot, rd.phase ^ 1);
            const uint32_t full = d_full0 + 8 * rd.slot;
            const uint32_t sd = smem_base + GW_DC_OFF + rd.slot * GW_DC_BYTES;
            mbar_arrive_expect_tx(full, GW_DC_BYTES);
            tma_load_2d(sd, &tm_dc, full, m0, r);
            tma_load_2d(sd + 8192, &tm_dc, full, m0 + 64 < p.wn ? m0 + 64 : m0, r);
            rd.next(GW_DC_STAGES);
          }
        }
      }
      gg_producer_drain<CL>(a_empty0, GW_A_SLOTS, ra.slot, ra.phase);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const int cwg = wg - 1, wtid = tid & 127, warp = wtid >> 5, lane = wtid & 31;
    const uint32_t epi = smem_base + GW_EPI_OFF + cwg * GW_EPI_BYTES;
    /* both operands MN-major: a 16-row slice is 2048 bytes further in every box */
    uint64_t da0 = wgmma_desc_sw128(smem_base + GW_DC_OFF + cwg * 8192, 8192, 1024);
    uint64_t db0 = wgmma_desc_sw128(smem_base, 8192, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0)); /* built once: not re-derived from addresses */
    gw_ring ra = {0, 0}, rd = {0, 0};
    int32_t cursor = 0;
    bool first = true; /* this warpgroup has issued no block yet (turns) */
    float acc[128];
    uint32_t pk[64];          /* bf16: the previous tile's slice, packed, not yet stored */
    bool pending = false;     /* pk holds a slice to store */
    const CUtensorMap *pmap = NULL; /* its map (NULL: a block past wn), first column and dW row */
    int pcol = 0, prow = 0;
    for (int u = unit0; u < total; u += ustride) {
      int tiles;
      gg_tile t = gg_decode_k_chunk_from(u, prefix, E, p.m_tiles, p.n_tiles, GW_CHUNK, CL, p.count,
                                         order, GW_RESIDENT_ROWS, &cursor, &tiles);
      t.expert = order[t.expert]; /* position -> expert */
      const int cnt = max(p.count[t.expert], 0);
      const int nkb = gg_ceil_div(cnt, GW_BK);
      const bool resident = cnt <= GW_RESIDENT_ROWS;
      const gw_ring ua = ra; /* the unit's first A slot */
      const int mine = (tiles - rank + CL - 1) / CL; /* this CTA's tiles: rank, rank + CL, ... */
      if (CL > 1 && mine == 0) { /* the pair's other tile: its A blocks landed here too; freed
                                  unread */
        for (int kb = 0; kb < nkb; ++kb) {
          mbar_wait(a_full0 + 8 * ra.slot, ra.phase);
          gg_release<CL>(a_empty0 + 8 * ra.slot, lane);
          ra.next(GW_A_SLOTS);
        }
        continue;
      }
      for (int q = 0; q < mine; ++q) {
        const int i = rank + CL * q;
        if (resident) ra = ua; /* every tile reads the unit's slots */
        /* the A slots' last reader releases them: each tile (single CTAs, an expert with more
         * rows: its own blocks), or this CTA's last tile of the unit (the blocks both CTAs read) */
        const bool a_last = CL == 1 ? !resident || q == mine - 1 : q == mine - 1;
#pragma unroll
        for (int j = 0; j < 128; ++j) acc[j] = 0.0f;
        int prev_d = -1, prev_a = -1;
        for (int kb = 0; kb < nkb; ++kb) {
          const int ns = gw_slices(cnt, kb);
          mbar_wait(d_full0 + 8 * rd.slot, rd.phase);
          mbar_wait(a_full0 + 8 * ra.slot, ra.phase);
          const uint64_t da = wgmma_desc_add(da0, rd.slot * GW_DC_BYTES);
          const uint64_t db = wgmma_desc_add(db0, ra.slot * GW_A_BYTES);
          if (!(cwg == 0 && first)) named_bar_sync(GW_BAR_TURN + cwg, 256);
          /* A whole block unrolled, a last, shorter one as a loop, one commit after both
           * (guarded wgmmas, or a commit in each path, make ptxas serialize every wgmma: C7511). */
          wgmma_fence();
          if (ns == 4) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
              wgmma_m64n256k16_bf16<1, 1>(acc, wgmma_desc_add(da, kk * 2048),
                                          wgmma_desc_add(db, kk * 2048), 1);
          } else {
#pragma unroll 1
            for (int kk = 0; kk < ns; ++kk)
              wgmma_m64n256k16_bf16<1, 1>(acc, wgmma_desc_add(da, kk * 2048),
                                          wgmma_desc_add(db, kk * 2048), 1);
          }
          wgmma_commit();
          named_bar_arrive(GW_BAR_TURN + 1 - cwg, 256);
          first = false;
          /* the previous tile's stores, under this block's wgmmas: pass 0 after block 0, pass 1
           * after block 1 (what a tile with fewer blocks leaves follows its last; passes under a
           * condition on the block count make ptxas serialize the wgmmas: C7520) */
          if (!OUT_F32 && pending && kb < 2) {
            if (kb == 0) gw_store_packed<0>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
            else gw_store_packed<1>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
          }
          wgmma_wait<1>();
          if (prev_d >= 0) gg_release<1>(d_empty0 + 8 * prev_d, lane);
          if (prev_a >= 0) gg_release<CL>(a_empty0 + 8 * prev_a, lane);
          prev_d = rd.slot;
          prev_a = a_last ? ra.slot : -1;
          rd.next(GW_DC_STAGES);
          ra.next(GW_A_SLOTS);
        }
        wgmma_wait<0>();
        reg_fence(acc, 128);
        if (prev_d >= 0) gg_release<1>(d_empty0 + 8 * prev_d, lane);
        if (prev_a >= 0) gg_release<CL>(a_empty0 + 8 * prev_a, lane);

        /* ------------------------------ epilogue ------------------------------ */
        const int r0 = (t.m_tile + i) * GW_BM + cwg * 64; /* this warpgroup's first dW row */
        if (!OUT_F32) {
          /* the passes of the previous tile's slice this tile's blocks did not cover */
          if (pending && nkb < 1) gw_store_packed<0>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
          if (pending && nkb < 2) gw_store_packed<1>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
#pragma unroll
          for (int j = 0; j < 64; ++j) pk[j] = pack_bf16x2(acc[2 * j], acc[2 * j + 1]);
          pending = true;
          /* a 64-row block past wn, if any, is staged but not stored (a branch around the passes
           * would make ptxas serialize the wgmmas: C7520) */
          pmap = r0 < p.wn ? &tm_dw : NULL;
          pcol = t.n_tile * GW_BN;
          prow = (p.expert_base + t.expert) * p.wn + r0;
        } else if (!(p.accumulate && cnt == 0)) { /* (nothing to add) */
          /* fp32: direct stores; 4 lanes cover 32 contiguous bytes */
          const int rbase = r0 + warp * 16 + (lane >> 2);
          const size_t ebase = (size_t)t.expert * p.wn * p.wk;
#pragma unroll
          for (int n8 = 0; n8 < 32; ++n8) {
            const int col = t.n_tile * GW_BN + n8 * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = rbase + 8 * h;
              if (row < p.wn && col < p.wk) {
                float2 *dst = (float2 *)((float *)p.dw + ebase + (size_t)row * p.wk + col);
                float v0 = acc[n8 * 4 + 2 * h], v1 = acc[n8 * 4 + 2 * h + 1];
                if (p.accumulate) {
                  const float2 o = *dst;
                  v0 += o.x;
                  v1 += o.y;
                }
                *dst = make_float2(v0, v1);
              }
            }
          }
        }
      }
    }
    if (!OUT_F32 && pending) { /* the last tile's slice */
      gw_store_packed<0>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
      gw_store_packed<1>(pk, epi, wtid, pmap, pcol, p.wk, prow, 2 + cwg);
    }
    if (cwg == 0 && !first) named_bar_sync(GW_BAR_TURN, 256); /* 1's last turn */
    if (wtid == 0) bulk_wait0(); /* this warpgroup's TMA stores are complete */
  }
}

/* ---- host side ------------------------------------------------------------------------------ */
extern "C" mok_status mok_gg_bf16_wgrad_ld(const void *dc, int64_t ld_dc, const void *a,
                                           int64_t ld_a, void *dw, int out_fp32, int accumulate,
                                           const int32_t *expert_offset,
                                           const int32_t *expert_count, int num_experts,
                                           int64_t m_total, int64_t n, int64_t k,
                                           const mok_gg_launch *launch, cudaStream_t stream) {
  if (!dc || !a || !dw || !expert_offset || !expert_count) return MOK_ERR_INVALID_ARGUMENT;
  if (num_experts <= 0 || m_total <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (m_total > INT32_MAX || (int64_t)num_experts * n > INT32_MAX || k > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  if (n % MOK_GG_ALIGN || k % MOK_GG_ALIGN || ((uintptr_t)dw & 15)) return MOK_ERR_MISALIGNED;
  if (accumulate && !out_fp32) return MOK_ERR_INVALID_ARGUMENT;
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 2, 0, &l)); /* single CTAs (a NULL launch) or pairs (the plan) */
  const int cl = l.cluster ? l.cluster : 1;
  CUtensorMap tdc, ta, tdw;
  MOK_KTRY(gg_make_tmap_2d_ld(&tdc, dc, m_total, n, ld_dc, 2, 64, 64));
  MOK_KTRY(gg_make_tmap_2d_ld(&ta, a, m_total, k, ld_a, 2, 64, 64));
  if (!out_fp32) MOK_KTRY(gg_make_tmap_2d(&tdw, dw, (int64_t)num_experts * n, k, 2, 64, 64));
  else tdw = tdc;
  const void *kerns[2][2] = {
      {(const void *)gg_bf16_wgrad_kernel<false, 1>, (const void *)gg_bf16_wgrad_kernel<false, 2>},
      {(const void *)gg_bf16_wgrad_kernel<true, 1>, (const void *)gg_bf16_wgrad_kernel<true, 2>}};
  const int v = out_fp32 != 0, c = cl - 1;
  static int max_ctas[2][2]; /* co-resident CTAs per variant (whole clusters), found once (this
                                also raises the smem limit) */
  if (!max_ctas[v][c])
    MOK_KTRY(gg_coresident_ctas(kerns[v][c], GW_THREADS, GW_SMEM, cl, &max_ctas[v][c]));
  const int cap = gg_ctas_cap(max_ctas[v][c], cl, l.max_ctas);
  if (cap < cl) return MOK_ERR_INVALID_ARGUMENT;
  gw_params p = {};
  p.m_tiles = (int)((n + GW_BM - 1) / GW_BM);
  p.n_tiles = (int)((k + GW_BN - 1) / GW_BN);
  p.wn = (int)n;
  p.wk = (int)k;
  p.accumulate = accumulate != 0;
  const size_t esz = out_fp32 ? 4 : 2;
  for (int e0 = 0; e0 < num_experts; e0 += GW_MAX_EXPERTS) {
    p.num_experts = num_experts - e0 < GW_MAX_EXPERTS ? num_experts - e0 : GW_MAX_EXPERTS;
    p.expert_base = e0;
    p.offset = expert_offset + e0;
    p.count = expert_count + e0;
    p.dw = (uint8_t *)dw + (size_t)e0 * n * k * esz;
    const int64_t units = (int64_t)p.num_experts * p.m_tiles * p.n_tiles; /* at most */
    const int grid = (int)(units * cl < cap ? units * cl : cap);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = gg_cluster_config(grid, GW_THREADS, GW_SMEM, cl, stream, &attr);
    if (cl == 2 && out_fp32) MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_bf16_wgrad_kernel<true, 2>, tdc, ta, tdw, p));
    else if (cl == 2) MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_bf16_wgrad_kernel<false, 2>, tdc, ta, tdw, p));
    else if (out_fp32) MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_bf16_wgrad_kernel<true, 1>, tdc, ta, tdw, p));
    else MOK_KCUDA(cudaLaunchKernelEx(&cfg, gg_bf16_wgrad_kernel<false, 1>, tdc, ta, tdw, p));
  }
  return MOK_SUCCESS;
}

extern "C" mok_status mok_gg_bf16_wgrad(const void *dc, const void *a, void *dw, int out_fp32,
                                        int accumulate, const int32_t *expert_offset,
                                        const int32_t *expert_count, int num_experts,
                                        int64_t m_total, int64_t n, int64_t k,
                                        const mok_gg_launch *launch, cudaStream_t stream) {
  return mok_gg_bf16_wgrad_ld(dc, n, a, k, dw, out_fp32, accumulate, expert_offset, expert_count,
                              num_experts, m_total, n, k, launch, stream);
}
