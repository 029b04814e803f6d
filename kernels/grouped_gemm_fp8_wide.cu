/* grouped_gemm_fp8_wide.cu — the FP8 block-scaled grouped GEMM with 256-column tiles: the default
 * for every product whose columns split into 256 (f8_wide in grouped_gemm_fp8.cu says why).
 *
 * Why: with m64n128k32 every consumer warpgroup re-reads the whole B tile from shared memory, so
 * operand reads plus TMA fills come near the shared-memory bandwidth (docs/PERF.md). m64n256k32
 * halves the A reads per FLOP, but a 64x256 fp32 accumulator is 128 registers per thread and a
 * separate 128-register partial per 128-K block does not fit beside it. So there is no partial:
 * the accumulator Y holds the sum in units of the current K block's scale c (per row and 128-column
 * half: c = scale_a[row] * scale_b[block]). Before K block kb's wgmmas add its raw product into Y,
 * Y is multiplied by c_{kb-1} / c_kb; after the last block the tile is Y * c_last. The same sum as
 * the promotion, with one rounding per block either way, except that the blocks chain on the
 * tensor cores (Y is each block's accumulator input), whose FP8 accumulation keeps fewer bits than
 * fp32 (~14, the DeepSeek-V3 report says), where a promotion adds each block on the CUDA cores;
 * the tests hold the result within 1e-2 of fp64 at K = 4096, an element-wise comparison with the
 * promoting 128-column kernel at long K is still to be made.
 *
 * Extreme scale ratios: Y is the sum divided by the current c, so a block scale far below the
 * previous one would blow Y up. Each c is held to at least 2^-40 times the previous block's and to
 * 2^-126: a block smaller than that adds its product as if its scale were the bound, an error
 * below 2^-40 of what the previous blocks summed to (bf16 keeps 2^-8), or below 2^-126 times the
 * block's raw product. Y overflows only after three such drops in a row (values spanning ~1e36
 * along one row's K). The ratio c_{kb-1} / c_kb is c_{kb-1} times a MUFU reciprocal (an ulp or
 * two, far below bf16's 2^-8), computed before the wait for the previous block.
 *
 * Shape: persistent, a TMA producer warp and two consumer warpgroups (64 rows x 256 columns each,
 * 232 registers), 128-row tiles, BK = 128, 4 stages of 48 KB (A 16 KB, B 32 KB) and their row
 * scales. Epilogue: the plain product stages 64 x 64 boxes (stmatrix) and stores them with TMA,
 * and a push (the forward's down, the backward's dx) sends each staged box to the rows' slots
 * (gg_push_pass_slots, 16 bytes per thread and row; the slots loaded at the tile's start);
 * gate+up stages its bf16 pre-activations the same way, its bf16 activations too, or their
 * quantized codes in a 64 x 128-byte box stored by TMA (f8_store_quant_tma). Stores from
 * registers (flag 1024) write 16 bytes per row and warp instruction, half a sector: on the down
 * shape (16 K blocks per tile) the kernel ran 654 TFLOP/s with them against 860 staged. The next
 * tile is decoded, and its first weight scales loaded, before the epilogue; inside a tile each
 * block's weight scales are loaded a block ahead. CL = 2: a cluster pair of vertically adjacent
 * tiles of one expert shares the B tile through multicast, each CTA loading two of its four
 * 64-row boxes, so L2 serves 32 KB instead of 48 KB per CTA and K block.
 *
 * Not done: each K block as two m64n128k32 groups, one per 128-column half of Y, rescaling one half
 * while the other half's wgmmas run (wgmma.wait_group 1). ptxas moves the multiplies of one half
 * across the other half's wgmmas and then serializes every wgmma (C7514), also with the release
 * predicated instead of branched and with every block taking the same steps. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_fp8_common.cuh"
#include "kernels/grouped_gemm_tmap.h"
#include "kernels/gemm_tile_scheduler.h"
#include "kernels/hopper_ptx.cuh"

#define F8W_BM 128
#define F8W_A_BYTES (F8W_BM * F8_BK)       /* 16 KB */
#define F8W_B_BYTES (256 * F8_BK)          /* 32 KB */
#define F8W_STAGE_BYTES (F8W_A_BYTES + F8W_B_BYTES) /* 48 KB, 1024-aligned */
#define F8W_STAGES 4
#define F8W_SC_OFF (F8W_STAGES * F8W_STAGE_BYTES)   /* each stage's 128 row scales: 512 B */
/* a pushing epilogue's staging, one 64 x 64 bf16 box per warpgroup (swizzle-aligned) */
#define F8W_EPI_OFF (F8W_SC_OFF + F8W_STAGES * F8W_BM * 4)
#define F8W_SMEM (F8W_EPI_OFF + 2 * 8192)
#define F8W_THREADS 384
#define F8W_FIRST_MIN 0x1p-126f /* the smallest c: no zero or subnormal divisor */
#define F8W_DROP_MIN 0x1p-40f  /* the smallest ratio of a block's c to the previous one's */
#define F8W_BAR_TURN 4 /* named barriers 4 and 5: warpgroup 0's and warpgroup 1's turn to issue */

/* Turns. Both warpgroups wait on the same full barrier, so when a stage lands late they are
 * released together, issue their K blocks at once, and the tensor cores interleave the two
 * groups: both drain at about the same time and both rescale with the tensor cores idle, a state
 * that then persists. Taking turns keeps the queue ordered: warpgroup 1 issues block g after
 * warpgroup 0 has issued it, warpgroup 0 issues block g + 1 after warpgroup 1 has issued g. Each
 * group then finishes a whole block (512 tensor clocks) before the other's, and each warpgroup's
 * drain and rescale run while the other's block is on the tensor cores. The sequence runs on
 * across tiles (both warpgroups walk the same tiles and K blocks), so one's epilogue overlaps the
 * other's last block. A warpgroup without rows in a tile still takes its turns. */
__device__ __forceinline__ void f8w_turn_wait(bool turns, int cwg, bool first) {
  if (turns && !(cwg == 0 && first)) named_bar_sync(F8W_BAR_TURN + cwg, 256);
}
/* last: warpgroup 1's final block, whose pass no one waits for */
__device__ __forceinline__ void f8w_turn_pass(bool turns, int cwg, bool last) {
  if (turns && !(cwg == 1 && last)) named_bar_arrive(F8W_BAR_TURN + 1 - cwg, 256);
}

/* Four m64n256k32 wgmmas of one K block into Y (first: the tile's first block, which starts Y). */
__device__ __forceinline__ void f8w_issue(float *y, uint64_t da, uint64_t db, int st, bool first) {
  da = wgmma_desc_add(da, st * F8W_STAGE_BYTES);
  db = wgmma_desc_add(db, st * F8W_STAGE_BYTES);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n256k32_e4m3(y, wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32),
                          !(first && kk == 0));
  wgmma_commit();
}

/* One 128-column half of Y (64 registers) *= f by row: rows r0 (f0) and r0 + 8 (f1, bit 1). */
__device__ __forceinline__ void f8w_scale_half(float *y, float f0, float f1) {
#pragma unroll
  for (int i = 0; i < 64; ++i) y[i] *= (i & 2) ? f1 : f0;
}

/* Where tile t's weight scales start: FWD two blocks of b (the low half's at the offset, the high
 * half's kbs further), SWIGLU the gate's and the up's block (the same offset in each). */
template <int MODE>
__device__ __forceinline__ int f8w_scales_at(const f8_params &p, gg_tile t, int kbs) {
  const int bexp = p.expert_base + t.expert;
  return (bexp * (p.b_rows / 128) + (MODE == F8_FWD ? 2 : 1) * t.n_tile) * kbs;
}
/* The weight scales of K block kb of the tile whose scales start at off: low and high half. */
template <int MODE>
__device__ __forceinline__ void f8w_load_scales(const f8_params &p, int off, int kbs, int kb,
                                                float *lo, float *hi) {
  *lo = __ldg(p.b_scales0 + off + kb);
  *hi = __ldg(MODE == F8_FWD ? p.b_scales0 + off + kbs + kb : p.b_scales1 + off + kb);
}

template <int MODE, int CL>
__global__ void __launch_bounds__(F8W_THREADS, 1)
    gg_fp8_wide_kernel(const __grid_constant__ CUtensorMap tm_a,
                       const __grid_constant__ CUtensorMap tm_b0,
                       const __grid_constant__ CUtensorMap tm_b1,
                       const __grid_constant__ CUtensorMap tm_c,
                       const __grid_constant__ CUtensorMap tm_act, const f8_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * F8W_STAGES];
  __shared__ int32_t prefix[F8_MAX_EXPERTS + 1];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[F8W_STAGES]);
  const int E = p.num_experts;
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  const int unit0 = blockIdx.x / CL, ustride = gridDim.x / CL;
  /* through staged boxes and TMA stores (tm_c): FWD's c, SWIGLU's pre-activations */
  const bool tma_c = !p.direct && (MODE == F8_FWD ? p.c0 != nullptr : p.has_preact != 0);
  if (threadIdx.x == 32 && MODE == F8_SWIGLU && !p.direct) tma_prefetch_desc(&tm_act);
  const int total = f8_cta_start<MODE, CL>(smem_base, full0, empty0, F8W_STAGES, 8 * CL, F8W_BM,
                                           &tm_a, &tm_b0, &tm_b1, tma_c ? &tm_c : NULL, p.count,
                                           E, p.n_tiles, prefix);

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int stage = 0, cursor = 0;
      uint32_t phase = 0;
      for (int u = unit0; u < total; u += ustride) {
        gg_tile t = gg_decode_m_grouped_from(u, prefix, E, p.n_tiles, p.group_m, &cursor);
        const int m_tile = t.m_tile * CL + rank;
        /* a pair's tile past the expert's rows loads the expert's first rows (ignored) */
        const int a_row = p.offset[t.expert] +
                          (p.count[t.expert] > m_tile * F8W_BM ? m_tile * F8W_BM : 0);
        const int bexp = p.expert_base + t.expert;
        /* B rows: FWD 256 output columns; SWIGLU 128 gate rows, then the same 128 up rows */
        const int n0 = bexp * p.b_rows + t.n_tile * (MODE == F8_FWD ? 256 : 128);
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          mbar_arrive_expect_tx(full, F8W_A_BYTES + F8W_B_BYTES + F8W_BM * 4);
          const uint32_t sa = smem_base + stage * F8W_STAGE_BYTES;
          const uint32_t sb = sa + F8W_A_BYTES;
          const int k0 = kb * F8_BK;
          tma_load_2d(sa, &tm_a, full, k0, a_row);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const CUtensorMap *mb = MODE == F8_SWIGLU && j >= 2 ? &tm_b1 : &tm_b0;
            const int row = MODE == F8_FWD ? n0 + 64 * j : n0 + 64 * (j & 1);
            if (CL == 1) tma_load_2d(sb + 8192 * j, mb, full, k0, row);
            else if ((j >> 1) == rank)
              tma_load_2d_multicast(sb + 8192 * j, mb, full, k0, row, (uint16_t)3);
          }
          bulk_load_1d(smem_base + F8W_SC_OFF + stage * (F8W_BM * 4),
                       p.a_scales + (size_t)kb * p.m_pad + a_row, F8W_BM * 4, full);
          if (++stage == F8W_STAGES) { stage = 0; phase ^= 1; }
        }
      }
      gg_producer_drain<CL>(empty0, F8W_STAGES, stage, phase);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const int cwg = wg - 1;
    const int wtid = tid & 127;
    const int warp = wtid >> 5, lane = wtid & 31;
    const int r0 = cwg * 64 + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
    const int kbs = p.k_blocks;
    uint64_t da0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t db0 = wgmma_desc_sw128(smem_base + F8W_A_BYTES, 16, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0)); /* built once: not re-derived from addresses */
    int stage = 0;
    uint32_t phase = 0;
    float y[128];
    const bool turns = p.turns != 0;
    bool first = true; /* no block issued yet by this warpgroup */
    int cursor = 0;
    /* The next tile is decoded, and its first block's weight scales loaded, before the current
     * tile's epilogue, so that their latency hides behind it. */
    gg_tile t = {0, 0, 0};
    int ws_next = 0; /* the next tile's weight scales (f8w_scales_at) */
    float bl = 0.f, bh = 0.f;
    if (unit0 < total) {
      t = gg_decode_m_grouped_from(unit0, prefix, E, p.n_tiles, p.group_m, &cursor);
      ws_next = f8w_scales_at<MODE>(p, t, kbs);
      f8w_load_scales<MODE>(p, ws_next, kbs, 0, &bl, &bh);
    }
    for (int u = unit0; u < total; u += ustride) {
      const bool last_tile = u + ustride >= total;
      const int m_tile = t.m_tile * CL + rank;
      const int cnt = max(p.count[t.expert], 0);
      const int rows = min(cnt - (m_tile * F8W_BM + cwg * 64), 64);
      const int64_t row0 = (int64_t)p.offset[t.expert] + m_tile * F8W_BM + cwg * 64;
      /* a pushing epilogue's destination slots (gg_push_slots), loaded while the math runs */
      int32_t slot[4] = {-1, -1, -1, -1};
      if (MODE == F8_FWD && p.push && rows > 0)
        gg_push_slots<1>(p.move, p.move_m_total, row0, wtid, slot);
      const gg_tile tile = t;
      const int ws = ws_next;
      if (!last_tile) { /* the next tile */
        t = gg_decode_m_grouped_from(u + ustride, prefix, E, p.n_tiles, p.group_m, &cursor);
        ws_next = f8w_scales_at<MODE>(p, t, kbs);
      }
      if (rows <= 0) { /* no real row in this warpgroup's 64: release the stages, no math */
        for (int kb = 0; kb < kbs; ++kb) {
          mbar_wait(full0 + 8 * stage, phase);
          gg_release<CL>(empty0 + 8 * stage, lane);
          f8w_turn_wait(turns, cwg, first);
          f8w_turn_pass(turns, cwg, last_tile && kb == kbs - 1);
          first = false;
          if (++stage == F8W_STAGES) { stage = 0; phase ^= 1; }
        }
        if (!last_tile) f8w_load_scales<MODE>(p, ws_next, kbs, 0, &bl, &bh);
        continue;
      }
      const uint32_t sas0 = smem_base + F8W_SC_OFF + 4 * r0;
      float c00 = 0.f, c10 = 0.f, c01 = 0.f, c11 = 0.f; /* the current block's c by position */
      int prev = -1;
      for (int kb = 0; kb < kbs; ++kb) {
        mbar_wait(full0 + 8 * stage, phase);
        const float a0 = lds_f32(sas0 + stage * (F8W_BM * 4));
        const float a1 = lds_f32(sas0 + stage * (F8W_BM * 4) + 32);
        /* this block's c, held to 2^-40 of the previous one's and to 2^-126 (so that its
         * reciprocal is a normal float); block 0 starts Y */
        const float m = kb > 0 ? F8W_DROP_MIN : 0.0f;
        const float n00 = fmaxf(a0 * bl, fmaxf(c00 * m, F8W_FIRST_MIN));
        const float n10 = fmaxf(a1 * bl, fmaxf(c10 * m, F8W_FIRST_MIN));
        const float n01 = fmaxf(a0 * bh, fmaxf(c01 * m, F8W_FIRST_MIN));
        const float n11 = fmaxf(a1 * bh, fmaxf(c11 * m, F8W_FIRST_MIN));
        /* the next block's weight scales (or the next tile's first), a block ahead */
        if (kb + 1 < kbs) f8w_load_scales<MODE>(p, ws, kbs, kb + 1, &bl, &bh);
        else if (!last_tile) f8w_load_scales<MODE>(p, ws_next, kbs, 0, &bl, &bh);
        if (kb > 0) {
          const float f00 = c00 * rcp_approx(n00), f10 = c10 * rcp_approx(n10);
          const float f01 = c01 * rcp_approx(n01), f11 = c11 * rcp_approx(n11);
          /* the factors are ready before the wait: only the multiplies follow the drain */
          asm volatile("" ::"f"(f00), "f"(f10), "f"(f01), "f"(f11));
          wgmma_wait<0>(); /* block kb - 1 is in Y */
          reg_fence(y, 128);
          gg_release<CL>(empty0 + 8 * prev, lane);
          f8w_scale_half(y, f00, f10);
          f8w_scale_half(y + 64, f01, f11);
        }
        f8w_turn_wait(turns, cwg, first);
        f8w_issue(y, da0, db0, stage, kb == 0);
        f8w_turn_pass(turns, cwg, last_tile && kb == kbs - 1);
        first = false;
        c00 = n00, c10 = n10, c01 = n01, c11 = n11;
        prev = stage;
        if (++stage == F8W_STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
      reg_fence(y, 128);
      gg_release<CL>(empty0 + 8 * prev, lane);
      f8w_scale_half(y, c00, c10);
      f8w_scale_half(y + 64, c01, c11);

      const uint32_t epi = smem_base + F8W_EPI_OFF + cwg * 8192; /* the warpgroup's staging box */
      if (MODE == F8_FWD) {
        const int col0 = tile.n_tile * 256;
        if (p.c0 && !tma_c) f8_store_direct<0, 32>(y, p.c0, p.n_out, row0, col0, rows, wtid);
        if (tma_c || p.push) { /* four 64-column passes through the staging box */
          const uint8_t *epi_ptr = smem + F8W_EPI_OFF + cwg * 8192;
          const CUtensorMap *mc = tma_c ? &tm_c : nullptr;
          const int n = p.n_out;
          gg_store_pass<0, 1>(y, epi, wtid, mc, col0, n, (int)row0, 2 + cwg);
          if (p.push) gg_push_pass_slots<1>(epi_ptr, wtid, p.move, n, col0, n, slot);
          gg_store_pass<8, 1>(y, epi, wtid, mc, col0 + 64, n, (int)row0, 2 + cwg);
          if (p.push) gg_push_pass_slots<1>(epi_ptr, wtid, p.move, n, col0 + 64, n, slot);
          gg_store_pass<16, 1>(y, epi, wtid, mc, col0 + 128, n, (int)row0, 2 + cwg);
          if (p.push) gg_push_pass_slots<1>(epi_ptr, wtid, p.move, n, col0 + 128, n, slot);
          gg_store_pass<24, 1>(y, epi, wtid, mc, col0 + 192, n, (int)row0, 2 + cwg);
          if (p.push) gg_push_pass_slots<1>(epi_ptr, wtid, p.move, n, col0 + 192, n, slot);
        }
      } else {
        const int col0 = tile.n_tile * 128;
        if (p.has_preact && tma_c) { /* g | u: four 64-column boxes, two of each */
          const int ld = 2 * p.n_out;
          gg_store_pass<0, 1>(y, epi, wtid, &tm_c, col0, ld, (int)row0, 2 + cwg);
          gg_store_pass<8, 1>(y, epi, wtid, &tm_c, col0 + 64, ld, (int)row0, 2 + cwg);
          gg_store_pass<16, 1>(y, epi, wtid, &tm_c, p.n_out + col0, ld, (int)row0, 2 + cwg);
          gg_store_pass<24, 1>(y, epi, wtid, &tm_c, p.n_out + col0 + 64, ld, (int)row0, 2 + cwg);
        } else if (p.has_preact) {
          f8_store_direct<0, 16>(y, p.c1, 2 * p.n_out, row0, col0, rows, wtid);
          f8_store_direct<16, 16>(y, p.c1, 2 * p.n_out, row0, p.n_out + col0, rows, wtid);
        }
        gg_swiglu<64>(y, p.use_limit, p.limit);
        if (p.q_act && !p.direct) {
          f8_store_quant_tma(y, epi, &tm_act, p.q_scales, p.m_pad, (int)row0, col0, rows, wtid,
                             2 + cwg);
        } else if (p.q_act) {
          f8_store_quant(y, p.q_act, p.q_scales, p.n_out, p.m_pad, row0, col0, rows, wtid);
        } else if (!p.direct) { /* bf16 act: two 64-column boxes */
          gg_store_pass<0, 1>(y, epi, wtid, &tm_act, col0, p.n_out, (int)row0, 2 + cwg);
          gg_store_pass<8, 1>(y, epi, wtid, &tm_act, col0 + 64, p.n_out, (int)row0, 2 + cwg);
        } else {
          f8_store_direct<0, 16>(y, p.c0, p.n_out, row0, col0, rows, wtid);
        }
      }
    }
    if (wtid == 0) bulk_wait0(); /* the last TMA stores are done */
    if (MODE == F8_FWD && p.push)
      __threadfence_system(); /* the pushed rows, before the cross-rank barrier after the kernel */
  }
}

template <int MODE, int CL>
static mok_status f8w_launch_mode(const CUtensorMap *a, const CUtensorMap *b0,
                                  const CUtensorMap *b1, const CUtensorMap *c,
                                  const CUtensorMap *q, f8_params p, int max_units,
                                  cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs (whole clusters), found once */
  if (!max_ctas)
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_wide_kernel<MODE, CL>, F8W_THREADS, F8W_SMEM,
                              CL, &max_ctas));
  const int cap = gg_ctas_cap(max_ctas, CL);
  int units = max_units < cap / CL ? max_units : cap / CL;
  if (units < 1) units = 1;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg =
      gg_cluster_config(units * CL, F8W_THREADS, F8W_SMEM, CL, stream, &attr);
  if (cudaLaunchKernelEx(&cfg, gg_fp8_wide_kernel<MODE, CL>, *a, *b0, *b1, *c, *q, p) !=
      cudaSuccess)
    return MOK_ERR_CUDA;
  return MOK_SUCCESS;
}

mok_status f8_wide_launch(int mode, int cl, const CUtensorMap *a, const CUtensorMap *b0,
                          const CUtensorMap *b1, const CUtensorMap *c, const CUtensorMap *q,
                          f8_params p, int64_t m_total, cudaStream_t stream) {
  if (mode == F8_FWD) {
    if (p.n_out % 256) return MOK_ERR_NOT_SUPPORTED;
    p.n_tiles = p.n_out / 256;
  } else {
    p.n_tiles = p.n_out / 128;
  }
  p.group_m = 16 / cl;
  p.turns = !(gg_tuning_flags() & 512); /* flag 512: the warpgroups issue as they come */
  p.direct = (gg_tuning_flags() & 1024) != 0; /* flag 1024: outputs stored from registers */
  const int max_tiles = (int)((m_total + F8W_BM - 1) / F8W_BM) * p.n_tiles;
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  for (int e0 = 0; e0 < e_all; e0 += F8_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < F8_MAX_EXPERTS ? e_all - e0 : F8_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    /* pairs: each expert's odd tile count leaves at most one half-empty pair */
    const int units = cl == 2 ? (max_tiles + p.num_experts * p.n_tiles) / 2 + 1 : max_tiles;
    mok_status st;
    if (mode == F8_FWD)
      st = cl == 2 ? f8w_launch_mode<F8_FWD, 2>(a, b0, b1, c, q, p, units, stream)
                   : f8w_launch_mode<F8_FWD, 1>(a, b0, b1, c, q, p, units, stream);
    else
      st = cl == 2 ? f8w_launch_mode<F8_SWIGLU, 2>(a, b0, b1, c, q, p, units, stream)
                   : f8w_launch_mode<F8_SWIGLU, 1>(a, b0, b1, c, q, p, units, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}
