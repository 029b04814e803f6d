/* fp8_wide.cuh — the FP8 block-scaled grouped GEMM with 256-column tiles, as device functions of
 * one tile: the producer's loads (f8w_produce_tile) and a consumer warpgroup's main loop and
 * epilogue (f8w_consume_tile). Two kernels walk tiles with them: the grouped GEMM's own
 * (fp8_wide.cu: gate+up, and every product whose columns split into 256) and the routed experts'
 * forward MLP in one launch (fp8_mlp.cu). Tile kinds: FWD (c = a b^T, 256 columns of one weight)
 * and SWIGLU (gate+up: 128 columns of each).
 *
 * Why: with m64n128k32 every consumer warpgroup re-reads the whole B tile from shared memory, so
 * operand reads plus TMA fills come near the shared-memory bandwidth. m64n256k32 halves the A
 * reads per FLOP, but a 64x256 fp32 accumulator is 128 registers per thread and a separate
 * 128-register partial per 128-K block does not fit beside it. So there is no partial: the
 * accumulator Y holds the sum in units of the current K block's scale c (per row and 128-column
 * half: c = scale_a[row] * scale_b[block]). Before K block kb's wgmmas add its raw product into Y,
 * Y is multiplied by c_{kb-1} / c_kb; after the last block the tile is Y * c_last. The same sum as
 * the promotion, with one rounding per block either way, except that the blocks chain on the
 * tensor cores (Y is each block's accumulator input), whose FP8 accumulation keeps fewer bits than
 * fp32 (~14, the DeepSeek-V3 report says), where a promotion adds each block on the CUDA cores;
 * the tests hold the result within 1e-2 of fp64 at K = 4096.
 *
 * Extreme scale ratios: Y is the sum divided by the current c, so a block scale far below the
 * previous one would blow Y up. Each c is held to at least 2^-40 times the previous block's and to
 * 2^-126: a block smaller than that adds its product as if its scale were the bound, an error
 * below 2^-40 of what the previous blocks summed to (bf16 keeps 2^-8), or below 2^-126 times the
 * block's raw product. Y overflows only after three such drops in a row (values spanning ~1e36
 * along one row's K). The ratio c_{kb-1} / c_kb is c_{kb-1} times a MUFU reciprocal (an ulp or
 * two, far below bf16's 2^-8), computed before the wait for the previous block.
 *
 * Shape: persistent single CTAs, a TMA producer warp and two consumer warpgroups (64 rows x 256
 * columns each, 232 registers) that issue their K blocks in turn (f8w_turn_wait), 128-row tiles,
 * BK = 128, 4 stages of 48 KB (A 16 KB, B 32 KB) and their row scales. Epilogue: the plain
 * product stages 64 x 64 boxes (stmatrix) and stores them with TMA, and a push (the forward's
 * down, the backward's dx) sends each staged box to the rows' slots (gg_push_pass_slots, 16 bytes
 * per thread and row; the slots loaded at the tile's start); gate+up stages its bf16
 * pre-activations the same way, its bf16 activations too, or their quantized codes in a
 * 64 x 128-byte box stored by TMA (f8_store_quant_tma). The next tile is decoded, and its first
 * weight scales loaded, before the epilogue; inside a tile each block's weight scales are loaded a
 * block ahead. */
#ifndef MOK_GEMM_FP8_WIDE_CUH
#define MOK_GEMM_FP8_WIDE_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/move/fused_move.cuh"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

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
__device__ __forceinline__ void f8w_turn_wait(int cwg, bool first) {
  if (!(cwg == 0 && first)) named_bar_sync(F8W_BAR_TURN + cwg, 256);
}
/* last: warpgroup 1's final block, whose pass no one waits for */
__device__ __forceinline__ void f8w_turn_pass(int cwg, bool last) {
  if (!(cwg == 1 && last)) named_bar_arrive(F8W_BAR_TURN + 1 - cwg, 256);
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
 * half's k_blocks further), SWIGLU the gate's and the up's block (the same offset in each). */
template <int MODE>
__device__ __forceinline__ int f8w_scales_at(const f8_params &p, gg_tile t) {
  const int bexp = p.expert_base + t.expert;
  return (bexp * (p.b_rows / 128) + (MODE == F8_FWD ? 2 : 1) * t.n_tile) * p.k_blocks;
}
/* The weight scales of K block kb of the tile whose scales start at off: low and high half. */
template <int MODE>
__device__ __forceinline__ void f8w_load_scales(const f8_params &p, int off, int kb, float *lo,
                                                float *hi) {
  *lo = __ldg(p.b_scales0 + off + kb);
  *hi = __ldg(MODE == F8_FWD ? p.b_scales0 + off + p.k_blocks + kb : p.b_scales1 + off + kb);
}

/* A position in the stage ring: the stage and its phase parity. */
typedef struct {
  int stage;
  uint32_t phase;
} f8w_ring;

__device__ __forceinline__ void f8w_advance(f8w_ring &r) {
  if (++r.stage == F8W_STAGES) {
    r.stage = 0;
    r.phase ^= 1;
  }
}

/* The producer thread: every K block of tile t into the ring (A's 128 rows, B's 256 rows in four
 * 64-row boxes, the row scales), each stage once its consumers released it. */
template <int MODE>
__device__ __forceinline__ void f8w_produce_tile(const f8_params &p, const CUtensorMap *tm_a,
                                                 const CUtensorMap *tm_b0,
                                                 const CUtensorMap *tm_b1, gg_tile t,
                                                 uint32_t smem_base, uint32_t full0,
                                                 uint32_t empty0, f8w_ring &r) {
  const int m_tile = t.m_tile;
  const int a_row =
      p.offset[t.expert] + (p.count[t.expert] > m_tile * F8W_BM ? m_tile * F8W_BM : 0);
  const int bexp = p.expert_base + t.expert;
  /* B rows: FWD 256 output columns; SWIGLU 128 gate rows, then the same 128 up rows */
  const int n0 = bexp * p.b_rows + t.n_tile * (MODE == F8_FWD ? 256 : 128);
  for (int kb = 0; kb < p.k_blocks; ++kb) {
    mbar_wait(empty0 + 8 * r.stage, r.phase ^ 1);
    const uint32_t full = full0 + 8 * r.stage;
    mbar_arrive_expect_tx(full, F8W_A_BYTES + F8W_B_BYTES + F8W_BM * 4);
    const uint32_t sa = smem_base + r.stage * F8W_STAGE_BYTES;
    const uint32_t sb = sa + F8W_A_BYTES;
    const int k0 = kb * F8_BK;
    tma_load_2d(sa, tm_a, full, k0, a_row);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const CUtensorMap *mb = MODE == F8_SWIGLU && j >= 2 ? tm_b1 : tm_b0;
      const int row = MODE == F8_FWD ? n0 + 64 * j : n0 + 64 * (j & 1);
      tma_load_2d(sb + 8192 * j, mb, full, k0, row);
    }
    bulk_load_1d(smem_base + F8W_SC_OFF + r.stage * (F8W_BM * 4),
                 p.a_scales + (size_t)kb * p.m_pad + a_row, F8W_BM * 4, full);
    f8w_advance(r);
  }
}

/* What a consumer thread keeps across tiles. */
typedef struct {
  uint32_t smem_base, full0, empty0;
  uint64_t da0, db0; /* this warpgroup's A rows and B in stage 0 */
  int cwg, wtid, lane, r0;
} f8w_consumer;

typedef struct {
  f8w_ring ring;
  bool first;    /* no block issued yet by this warpgroup */
  float bl, bh;  /* the weight scales of the next block to issue: the tile's first on entry */
} f8w_cstate;

/* A consumer's state before its first tile: stage 0 of phase 0, no block issued. */
__device__ __forceinline__ f8w_cstate f8w_cstate_start(void) {
  f8w_cstate s;
  s.ring.stage = 0;
  s.ring.phase = 0;
  s.first = true;
  s.bl = s.bh = 0.f;
  return s;
}

__device__ __forceinline__ f8w_consumer f8w_consumer_init(uint32_t smem_base, uint32_t full0,
                                                          uint32_t empty0, int tid) {
  f8w_consumer c;
  c.smem_base = smem_base;
  c.full0 = full0;
  c.empty0 = empty0;
  c.cwg = (tid >> 7) - 1;
  c.wtid = tid & 127;
  c.lane = c.wtid & 31;
  c.r0 = c.cwg * 64 + (c.wtid >> 5) * 16 + (c.lane >> 2); /* this thread's rows: r0, r0 + 8 */
  c.da0 = wgmma_desc_sw128(smem_base + c.cwg * 8192, 16, 1024);
  c.db0 = wgmma_desc_sw128(smem_base + F8W_A_BYTES, 16, 1024);
  asm volatile("" : "+l"(c.da0), "+l"(c.db0)); /* built once: not re-derived from addresses */
  return c;
}

/* The forward MLP's readiness count (fp8_mlp.cu) for the warpgroup's last tile: after
 * a warpgroup barrier (every thread's stores of it are then ordered before thread 0's release,
 * the barrier being cumulative) and the completion of thread 0's TMA stores, one release add at
 * GPU scope. NULL: none owed. */
__device__ __forceinline__ void f8w_signal(const f8w_consumer &c, int32_t *signal) {
  if (!signal) return;
  named_bar_sync(2 + c.cwg, 128);
  if (c.wtid == 0) {
    bulk_wait0();
    cm_fence_proxy_global(); /* the TMA-stored codes, before the count */
    cm_add_release(signal, 1);
  }
}

/* One consumer warpgroup's part of tile `tile`: its 64 rows' main loop into Y, then the epilogue
 * (see the file comment). ws: where the tile's weight scales start (f8w_scales_at; s.bl / s.bh
 * hold its first block's); next_ws: the next tile's, a NMODE tile of pn, whose first block's are
 * loaded during the last block (-1: not known, the caller loads them); last_turn: this is the
 * warpgroups' last K block of the launch, after which warpgroup 1 passes no turn. y: the
 * accumulator, 128 registers the caller declares once for all its tiles (declared per tile,
 * ptxas keeps the unscaled values beside the scaled ones in the epilogue and spills). signal:
 * a count the warpgroup owes for its previous tile (f8w_signal), added after its second K block's
 * issue (NULL: none). */
template <int MODE, int NMODE>
__device__ __forceinline__ void f8w_consume_tile(const f8_params &p, const f8_params &pn,
                                                 const CUtensorMap *tm_c,
                                                 const CUtensorMap *tm_act, const f8w_consumer &c,
                                                 gg_tile tile, int ws, int next_ws,
                                                 bool last_turn, f8w_cstate &s, float *y,
                                                 int32_t *signal = nullptr) {
  /* through staged boxes and TMA stores (tm_c): FWD's c, SWIGLU's pre-activations */
  const bool tma_c = MODE == F8_FWD ? p.c0 != nullptr : p.has_preact != 0;
  const int kbs = p.k_blocks, cwg = c.cwg, wtid = c.wtid, lane = c.lane;
  const int m_tile = tile.m_tile;
  const int cnt = max(p.count[tile.expert], 0);
  const int rows = min(cnt - (m_tile * F8W_BM + cwg * 64), 64);
  const int64_t row0 = (int64_t)p.offset[tile.expert] + m_tile * F8W_BM + cwg * 64;
  /* a pushing epilogue's destination slots (gg_push_slots), loaded while the math runs */
  int32_t slot[4] = {-1, -1, -1, -1};
  if (MODE == F8_FWD && p.push && rows > 0)
    gg_push_slots<1>(p.move, p.move_m_total, row0, wtid, slot);
  if (rows <= 0) { /* no real row in this warpgroup's 64: release the stages, no math */
    for (int kb = 0; kb < kbs; ++kb) {
      mbar_wait(c.full0 + 8 * s.ring.stage, s.ring.phase);
      gg_release<1>(c.empty0 + 8 * s.ring.stage, lane);
      f8w_turn_wait(cwg, s.first);
      f8w_turn_pass(cwg, last_turn && kb == kbs - 1);
      s.first = false;
      f8w_advance(s.ring);
    }
    f8w_signal(c, signal);
    if (next_ws >= 0) f8w_load_scales<NMODE>(pn, next_ws, 0, &s.bl, &s.bh);
    return;
  }
  const uint32_t sas0 = c.smem_base + F8W_SC_OFF + 4 * c.r0;
  float c00 = 0.f, c10 = 0.f, c01 = 0.f, c11 = 0.f; /* the current block's c by position */
  int prev = -1;
  for (int kb = 0; kb < kbs; ++kb) {
    mbar_wait(c.full0 + 8 * s.ring.stage, s.ring.phase);
    const float a0 = lds_f32(sas0 + s.ring.stage * (F8W_BM * 4));
    const float a1 = lds_f32(sas0 + s.ring.stage * (F8W_BM * 4) + 32);
    /* this block's c, held to 2^-40 of the previous one's and to 2^-126 (so that its
     * reciprocal is a normal float); block 0 starts Y */
    const float m = kb > 0 ? F8_RESCALE_DROP : 0.0f;
    const float n00 = fmaxf(a0 * s.bl, fmaxf(c00 * m, F8_RESCALE_FLOOR));
    const float n10 = fmaxf(a1 * s.bl, fmaxf(c10 * m, F8_RESCALE_FLOOR));
    const float n01 = fmaxf(a0 * s.bh, fmaxf(c01 * m, F8_RESCALE_FLOOR));
    const float n11 = fmaxf(a1 * s.bh, fmaxf(c11 * m, F8_RESCALE_FLOOR));
    /* the next block's weight scales (or the next tile's first), a block ahead */
    if (kb + 1 < kbs) f8w_load_scales<MODE>(p, ws, kb + 1, &s.bl, &s.bh);
    else if (next_ws >= 0) f8w_load_scales<NMODE>(pn, next_ws, 0, &s.bl, &s.bh);
    if (kb > 0) {
      const float f00 = c00 * rcp_approx(n00), f10 = c10 * rcp_approx(n10);
      const float f01 = c01 * rcp_approx(n01), f11 = c11 * rcp_approx(n11);
      /* the factors are ready before the wait: only the multiplies follow the drain */
      asm volatile("" ::"f"(f00), "f"(f10), "f"(f01), "f"(f11));
      wgmma_wait<0>(); /* block kb - 1 is in Y */
      reg_fence(y, 128);
      gg_release<1>(c.empty0 + 8 * prev, lane);
      f8w_scale_half(y, f00, f10);
      f8w_scale_half(y + 64, f01, f11);
    }
    f8w_turn_wait(cwg, s.first);
    f8w_issue(y, c.da0, c.db0, s.ring.stage, kb == 0);
    f8w_turn_pass(cwg, last_turn && kb == kbs - 1);
    s.first = false;
    if (kb == (kbs > 1 ? 1 : 0)) f8w_signal(c, signal);
    c00 = n00, c10 = n10, c01 = n01, c11 = n11;
    prev = s.ring.stage;
    f8w_advance(s.ring);
  }
  wgmma_wait<0>();
  reg_fence(y, 128);
  gg_release<1>(c.empty0 + 8 * prev, lane);
  f8w_scale_half(y, c00, c10);
  f8w_scale_half(y + 64, c01, c11);

  const uint32_t epi = c.smem_base + F8W_EPI_OFF + cwg * 8192; /* the warpgroup's staging box */
  if (MODE == F8_FWD) {
    const int col0 = tile.n_tile * 256;
    if (tma_c || p.push) { /* four 64-column passes through the staging box */
      const uint8_t *epi_ptr = (const uint8_t *)__cvta_shared_to_generic(epi);
      const CUtensorMap *mc = tma_c ? tm_c : nullptr;
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
    if (tma_c) { /* g | u: four 64-column boxes, two of each */
      const int ld = 2 * p.n_out;
      gg_store_pass<0, 1>(y, epi, wtid, tm_c, col0, ld, (int)row0, 2 + cwg);
      gg_store_pass<8, 1>(y, epi, wtid, tm_c, col0 + 64, ld, (int)row0, 2 + cwg);
      gg_store_pass<16, 1>(y, epi, wtid, tm_c, p.n_out + col0, ld, (int)row0, 2 + cwg);
      gg_store_pass<24, 1>(y, epi, wtid, tm_c, p.n_out + col0 + 64, ld, (int)row0, 2 + cwg);
    }
    gg_swiglu<64>(y, p.use_limit, p.limit);
    if (p.q_act) {
      f8_store_quant_tma(y, epi, tm_act, p.q_scales, p.m_pad, (int)row0, col0, rows, wtid,
                         2 + cwg);
    } else { /* bf16 act: two 64-column boxes */
      gg_store_pass<0, 1>(y, epi, wtid, tm_act, col0, p.n_out, (int)row0, 2 + cwg);
      gg_store_pass<8, 1>(y, epi, wtid, tm_act, col0 + 64, p.n_out, (int)row0, 2 + cwg);
    }
  }
}

#endif /* MOK_GEMM_FP8_WIDE_CUH */
