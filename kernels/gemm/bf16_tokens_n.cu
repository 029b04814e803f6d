/* bf16_tokens_n.cu — the BF16 gate+up with the SwiGLU epilogue (gemm.h:
 * mok_gg_bf16_gate_up_swiglu; with the SwiGLU limit it runs the row-grouped kernel, which measured
 * as fast) with the weights on wgmma's 64-row side and an expert's tokens on its
 * N side, in widths of 32. An expert's last token tile computes its real rows rounded up to 32
 * instead of to the 64-row warpgroup halves of the row-grouped kernel (kernels/gemm/bf16.cu, which
 * runs the other BF16 products and the gate+up that pulls its rows): at 224 rows per expert 224
 * rows are computed, not 256. The products are the same wgmma dot products, so the results are
 * bitwise those of the row-grouped kernel. The down projection and the data gradients so turned
 * measured slower than the row-grouped kernel (docs/PERF.md) and are not built.
 *
 * One persistent kernel, one CTA per SM, 384 threads, the tiles of tile_scheduler.h (row tiles:
 * 128-token tiles of an expert; column tiles: 128 features of W_gate and the same 128 of W_up),
 * single CTAs walking them in a fixed order, cluster pairs claiming their units at run time
 * (gg_claim_step; docs/DESIGN.md "BF16"):
 *   warpgroup 0: producer; in cluster pairs rank 0's thread claims each unit (its fetch-and-add
 *                issued a few K blocks before the unit ahead ends) and hands it to rank 1's; each
 *                writes a unit's index beside the stage its first K block lands in, for its
 *                consumers, and ends the walk with a stage of no loads whose index is -1;
 *                one thread loads per 64-wide K block the tile's two 128-row weight boxes
 *                (32 KB) and its 128 token rows (16 KB) into a 4-stage ring; in cluster pairs
 *                (CL 2, tile_scheduler.h gg_decode_pair) two token tiles of one expert share the
 *                weight tile: rank 0 multicasts the first box, rank 1 the second;
 *   warpgroups 1, 2: consumers; warpgroup c takes rows 64c .. 64c + 63 of each box: per 16-wide K
 *                step one wgmma m64nNk16 per box into its own accumulators, N = the tile's real
 *                tokens rounded up to 32 (a switch over four instantiations of the main loop). The
 *                epilogue applies SwiGLU in registers (a feature's gate and up for a token are in
 *                the same thread) and stores through stmatrix .trans (features contiguous per
 *                token, as the [rows, features] outputs are laid out) and TMA stores of 32-token
 *                boxes. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

#define SW_BT 128 /* tokens per tile, at most */
#define SW_BF 128 /* rows of a weight box: a tile has two */
#define SW_BK 64
#define SW_STAGES 4
#define SW_W_BYTES (2 * SW_BF * SW_BK * 2) /* 32 KB: the two weight boxes of 128 x 64 */
#define SW_X_BYTES (SW_BT * SW_BK * 2)     /* 16 KB */
#define SW_STAGE_BYTES (SW_W_BYTES + SW_X_BYTES)
#define SW_EPI_OFF (SW_STAGES * SW_STAGE_BYTES)
#define SW_EPI_BYTES 16384 /* a consumer warpgroup's staging: 128 tokens x 64 features bf16 */
#define SW_SMEM (SW_EPI_OFF + 2 * SW_EPI_BYTES)
#define SW_MAX_EXPERTS 256
#define SW_THREADS 384
static_assert(SW_STAGE_BYTES % 1024 == 0 && SW_EPI_OFF % 1024 == 0, "128B-swizzle atoms");

typedef struct {
  const int32_t *offset; /* [E + 1] device */
  const int32_t *count;  /* [E] device */
  int num_experts;       /* experts in this launch */
  int expert_base;       /* global index of this launch's first expert (weight row base) */
  int n_tiles;  /* column tiles: inter / 128 */
  int k_blocks; /* reduction blocks of 64: hidden / 64 */
  int inter;    /* I: the weights' rows per expert, and the column of u in preact */
  int use_limit;
  float limit;
  int has_preact;
  int group_m;
  int32_t *tickets; /* CL 2: the claim counters (mok_gg_launch.tickets) */
} sw_params;

/* The main loop over every K block for N tokens: the first weight box's accumulators acc_a[N / 2]
 * (the gate's), the second's acc_b[N / 2] (the up's). */
template <int N, int CL>
__device__ __forceinline__ void sw_mainloop(float *acc_a, float *acc_b, uint64_t dg0, uint64_t du0,
                                            uint64_t dx0, uint32_t full0, uint32_t empty0,
                                            int nkb, int &stage, uint32_t &phase, int lane) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc_a[i] = acc_b[i] = 0.0f;
  int prev = -1;
  for (int kb = 0; kb < nkb; ++kb) {
    mbar_wait(full0 + 8 * stage, phase);
    const uint32_t off = stage * SW_STAGE_BYTES;
    const uint64_t dg = wgmma_desc_add(dg0, off), du = wgmma_desc_add(du0, off);
    const uint64_t dx = wgmma_desc_add(dx0, off);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      /* all boxes K-major: a 16-wide K step is 32 bytes along a row */
      wgmma_m64nk16_bf16<N>(acc_a, wgmma_desc_add(dg, kk * 32), wgmma_desc_add(dx, kk * 32), 1);
      wgmma_m64nk16_bf16<N>(acc_b, wgmma_desc_add(du, kk * 32), wgmma_desc_add(dx, kk * 32), 1);
    }
    wgmma_commit();
    wgmma_wait<1>();
    if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
    prev = stage;
    if (++stage == SW_STAGES) { stage = 0; phase ^= 1; }
  }
  wgmma_wait<0>();
  if (prev >= 0) gg_release<CL>(empty0 + 8 * prev, lane);
  reg_fence(acc_a, N / 2);
  reg_fence(acc_b, N / 2);
}

/* One epilogue pass: the warpgroup's 64 features x N tokens of acc (the wgmma fragment: rows are
 * features, columns tokens) into the staging buffer as [token][64 features] bf16 rows of 128 bytes,
 * 128B-swizzled, by stmatrix .trans; then one thread stores N / 32 boxes of 32 tokens at (col0,
 * row0). clamp: bf16_clamp_round.h's rounding for the kept pre-activations. */
template <int N>
__device__ __forceinline__ void sw_store_pass(const float *acc, uint32_t stage, int wtid,
                                              const CUtensorMap *map, int col0, int row0,
                                              int bar_id, bool clamp, mok_clamp_round mk) {
  if (wtid == 0) bulk_wait_read0(); /* the previous pass has left the staging buffer */
  named_bar_sync(bar_id, 128);
  const int warp = wtid >> 5, lane = wtid & 31, q = lane >> 3;
#pragma unroll
  for (int j = 0; j < N / 16; ++j) {
    const int n8 = 2 * j;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = clamp ? mok_cr_round(acc[n8 * 4 + i], mk) : acc[n8 * 4 + i];
    /* matrices: (features +0, tokens n8), (+8, n8), (+0, n8 + 1), (+8, n8 + 1) */
    const uint32_t r0 = pack_bf16x2(v[0], v[1]), r1 = pack_bf16x2(v[2], v[3]);
    const uint32_t r2 = pack_bf16x2(v[4], v[5]), r3 = pack_bf16x2(v[6], v[7]);
    const int token = 8 * (n8 + (q >> 1)) + (lane & 7);
    const int chunk = 2 * warp + (q & 1); /* 16-byte chunk: features 8 chunk .. 8 chunk + 7 */
    stmatrix_x4_trans(stage + token * 128 + ((chunk ^ (token & 7)) << 4), r0, r1, r2, r3);
  }
  fence_proxy_async_smem();
  named_bar_sync(bar_id, 128);
  if (wtid == 0) {
#pragma unroll
    for (int b = 0; b < N / 32; ++b) tma_store_2d(map, stage + b * 4096, col0, row0 + 32 * b);
    bulk_commit();
  }
}

template <int N>
__device__ __forceinline__ void sw_epilogue_swiglu(float *acc_a, float *acc_b, uint32_t epi, int wtid,
                                            const CUtensorMap *tm_c, const CUtensorMap *tm_p,
                                            int f0, int row0, int cwg, const sw_params &p) {
  const mok_clamp_round mk = mok_cr_make(p.limit);
  const bool clamp = p.use_limit != 0;
  if (p.has_preact) {
    sw_store_pass<N>(acc_a, epi, wtid, tm_p, f0, row0, 2 + cwg, clamp, mk);
    sw_store_pass<N>(acc_b, epi, wtid, tm_p, p.inter + f0, row0, 2 + cwg, clamp, mk);
  }
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    float g = acc_a[i], u = acc_b[i];
    if (p.use_limit) {
      g = fminf(g, p.limit);
      u = fminf(fmaxf(u, -p.limit), p.limit);
    }
    acc_a[i] = __fdividef(g, 1.0f + __expf(-g)) * u;
  }
  sw_store_pass<N>(acc_a, epi, wtid, tm_c, f0, row0, 2 + cwg, false, mk);
}

/* tm_w0, tm_w1: the maps of the two weight boxes (W_gate and W_up). */
template <int CL>
__global__ void __launch_bounds__(SW_THREADS, 1)
    sw_kernel(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_w0,
              const __grid_constant__ CUtensorMap tm_w1, const __grid_constant__ CUtensorMap tm_c,
              const __grid_constant__ CUtensorMap tm_p, const sw_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * SW_STAGES];
  __shared__ int32_t prefix[SW_MAX_EXPERTS + 1], pre_left[CL > 1 ? SW_MAX_EXPERTS + 1 : 1];
  /* CL 2: the unit each stage's first K block belongs to (-1: the walk's end), written by this
   * CTA's producer before the stage's arrival; the handoff of claimed units from rank 0 (its
   * empty barriers) to rank 1 (its full barriers and slots) */
  __shared__ int32_t stage_unit[SW_STAGES], hand_unit[GG_HAND];
  __shared__ __align__(8) uint64_t hand_bars[2 * GG_HAND];
  const int tid = threadIdx.x, wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]), empty0 = smem_u32(&bars[SW_STAGES]);
  const int E = p.num_experts;
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  const int unit0 = blockIdx.x / CL, ustride = gridDim.x / CL;
  if (tid == 0) {
    gg_ring_init(smem_base, full0, empty0, SW_STAGES, 8 * CL);
    gg_claim_bars_init(hand_bars);
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(&tm_x);
    tma_prefetch_desc(&tm_w0);
    tma_prefetch_desc(&tm_w1);
    tma_prefetch_desc(&tm_c);
    if (p.has_preact) tma_prefetch_desc(&tm_p);
  }
  if (tid >= 64 && tid < 96)
    gg_unit_prefix_rows<CL>(p.count, E, SW_BT, p.n_tiles, prefix, pre_left, tid & 31);
  if (CL > 1) cluster_sync();
  else __syncthreads();
  /* CL 1: a static walk; CL 2: claimed units (p.tickets) */
  int u_first, u_step, u_end;
  gg_unit_walk<CL>(unit0, ustride, prefix, pre_left, E, 0, &u_first, &u_step, &u_end);

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      gg_claims cw = gg_claims_make(p.tickets, unit0, ustride, prefix[E],
                                    gg_left_units<CL>(pre_left, E));
      const int claim_at = p.k_blocks > 8 ? p.k_blocks - 8 : 0;
      int u = u_first;
      if (CL > 1) {
        gg_claim_issue(cw, rank);
        u = gg_claim_next(cw, rank, prefix[E], gg_left_units<CL>(pre_left, E), hand_unit, hand_bars);
      }
      while (CL > 1 ? u >= 0 : u < u_end) {
        int32_t kind;
        const gg_tile t = gg_unit_tile<CL>(u, rank, prefix, pre_left, E, p.n_tiles, p.group_m, &kind);
        const int row_base = p.offset[t.expert];
        const int x_row = row_base + t.m_tile * SW_BT; /* rows of its expert, always */
        /* the two boxes' first weight rows: the same features of W_gate and W_up */
        const int w_row = (p.expert_base + t.expert) * p.inter + t.n_tile * SW_BF;
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          if (CL > 1 && kb == claim_at) gg_claim_issue(cw, rank);
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          if (CL > 1 && kb == 0) stage_unit[stage] = u;
          mbar_arrive_expect_tx(full, SW_STAGE_BYTES);
          const uint32_t sw = smem_base + stage * SW_STAGE_BYTES;
          const int k0 = kb * SW_BK;
          if (CL == 1 || kind != GG_PAIR_SHARED) {
            tma_load_2d(sw, &tm_w0, full, k0, w_row);
            tma_load_2d(sw + 16384, &tm_w1, full, k0, w_row);
          } else if (rank == 0) {
            tma_load_2d_multicast(sw, &tm_w0, full, k0, w_row, (uint16_t)3);
          } else {
            tma_load_2d_multicast(sw + 16384, &tm_w1, full, k0, w_row, (uint16_t)3);
          }
          tma_load_2d(sw + SW_W_BYTES, &tm_x, full, k0, x_row);
          if (++stage == SW_STAGES) { stage = 0; phase ^= 1; }
        }
        if (CL == 1) u += u_step;
        else u = gg_claim_next(cw, rank, prefix[E], gg_left_units<CL>(pre_left, E), hand_unit, hand_bars);
      }
      if (CL > 1) gg_claim_end_stage(full0, empty0, stage_unit, SW_STAGES, stage, phase);
      gg_producer_drain<CL>(empty0, SW_STAGES, stage, phase);
      if (CL > 1) gg_claim_finish(cw, rank, ustride, hand_bars);
    }
  } else {
    setmaxnreg_inc<232>();
    const int cwg = wg - 1, wtid = tid & 127, lane = wtid & 31;
    const uint32_t epi = smem_base + SW_EPI_OFF + cwg * SW_EPI_BYTES;
    /* this warpgroup's 64 rows of each weight box */
    uint64_t dg0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t du0 = wgmma_desc_sw128(smem_base + 16384 + cwg * 8192, 16, 1024);
    uint64_t dx0 = wgmma_desc_sw128(smem_base + SW_W_BYTES, 16, 1024);
    asm volatile("" : "+l"(dg0), "+l"(du0), "+l"(dx0));
    int stage = 0;
    uint32_t phase = 0;
    float acc_a[64], acc_b[64];
    for (int u = u_first;; u += u_step) {
      if (CL > 1) {
        if ((u = gg_claimed_unit<CL>(full0, empty0, stage_unit, stage, phase, lane)) < 0) break;
      } else if (u >= u_end) {
        break;
      }
      int32_t kind;
      const gg_tile t = gg_unit_tile<CL>(u, rank, prefix, pre_left, E, p.n_tiles, p.group_m, &kind);
      const int cnt = max(p.count[t.expert], 0);
      const int n_real = kind == GG_PAIR_NONE ? 0 : min(SW_BT, cnt - t.m_tile * SW_BT);
      const int widths = n_real > 0 ? (n_real + 31) / 32 : 0;
      const int row0 = p.offset[t.expert] + t.m_tile * SW_BT;
      /* this warpgroup's first feature (column of act) */
      const int f0 = t.n_tile * SW_BF + 64 * cwg;
      switch (widths) {
        case 1:
          sw_mainloop<32, CL>(acc_a, acc_b, dg0, du0, dx0, full0, empty0, p.k_blocks, stage, phase, lane);
          sw_epilogue_swiglu<32>(acc_a, acc_b, epi, wtid, &tm_c, &tm_p, f0, row0, cwg, p);
          break;
        case 2:
          sw_mainloop<64, CL>(acc_a, acc_b, dg0, du0, dx0, full0, empty0, p.k_blocks, stage, phase, lane);
          sw_epilogue_swiglu<64>(acc_a, acc_b, epi, wtid, &tm_c, &tm_p, f0, row0, cwg, p);
          break;
        case 3:
          sw_mainloop<96, CL>(acc_a, acc_b, dg0, du0, dx0, full0, empty0, p.k_blocks, stage, phase, lane);
          sw_epilogue_swiglu<96>(acc_a, acc_b, epi, wtid, &tm_c, &tm_p, f0, row0, cwg, p);
          break;
        case 4:
          sw_mainloop<128, CL>(acc_a, acc_b, dg0, du0, dx0, full0, empty0, p.k_blocks, stage, phase, lane);
          sw_epilogue_swiglu<128>(acc_a, acc_b, epi, wtid, &tm_c, &tm_p, f0, row0, cwg, p);
          break;
        default: /* no rows: the stages still pass through, released unread */
          for (int kb = 0; kb < p.k_blocks; ++kb) {
            mbar_wait(full0 + 8 * stage, phase);
            gg_release<CL>(empty0 + 8 * stage, lane);
            if (++stage == SW_STAGES) { stage = 0; phase ^= 1; }
          }
      }
    }
    if (wtid == 0) bulk_wait0();
  }
}

/* ---- host side ------------------------------------------------------------------------------ */
template <int CL>
static mok_status sw_launch(const CUtensorMap *x, const CUtensorMap *w0, const CUtensorMap *w1,
                            const CUtensorMap *c, const CUtensorMap *pr, sw_params p, int max_units,
                            int grid_cap, cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs (whole clusters), found once */
  if (!max_ctas)
    MOK_KTRY(gg_coresident_ctas((const void *)sw_kernel<CL>, SW_THREADS, SW_SMEM, CL,
                                &max_ctas));
  const int cap = gg_ctas_cap(max_ctas, CL, grid_cap);
  if (cap < CL) return MOK_ERR_INVALID_ARGUMENT;
  int units = max_units < cap / CL ? max_units : cap / CL;
  if (units < 1) units = 1;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = gg_cluster_config(units * CL, SW_THREADS, SW_SMEM, CL, stream, &attr);
  MOK_KCUDA(cudaLaunchKernelEx(&cfg, sw_kernel<CL>, *x, *w0, *w1, *c, *pr, p));
  return MOK_SUCCESS;
}

/* The experts over launches of at most SW_MAX_EXPERTS (the per-CTA prefix), in the launch's
 * cluster size, else gemm_plan.h's for the capacity's rows per expert. */
static mok_status sw_run(const CUtensorMap *x, const CUtensorMap *w0, const CUtensorMap *w1,
                         const CUtensorMap *c, const CUtensorMap *pr, sw_params p,
                         const int32_t *offset, const int32_t *count, int num_experts,
                         int64_t m_total, const mok_gg_launch *launch, cudaStream_t stream) {
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 2, 0, &l));
  const int cl = l.cluster ? l.cluster : mok_gg_bf16_cluster_for(gg_rows_per_expert(m_total, num_experts));
  if (cl == 2) MOK_KTRY(gg_claim_tickets(&l, &p.tickets));
  p.group_m = 16 / cl;
  const int max_tiles = (int)((m_total + SW_BT - 1) / SW_BT) * p.n_tiles;
  for (int e0 = 0; e0 < num_experts; e0 += SW_MAX_EXPERTS) {
    p.num_experts = num_experts - e0 < SW_MAX_EXPERTS ? num_experts - e0 : SW_MAX_EXPERTS;
    p.expert_base = e0;
    p.offset = offset + e0;
    p.count = count + e0;
    const mok_status st =
        cl == 2 ? sw_launch<2>(x, w0, w1, c, pr, p, (max_tiles + 1) / 2, l.max_ctas, stream)
                : sw_launch<1>(x, w0, w1, c, pr, p, max_tiles, l.max_ctas, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}

extern "C" mok_status mok_gg_bf16_gate_up_swiglu(const void *x, const void *w_gate, const void *w_up,
                                                 void *act, void *preact,
                                                 const int32_t *expert_offset,
                                                 const int32_t *expert_count, int num_experts,
                                                 int64_t m_total, int64_t inter, int64_t hidden,
                                                 int use_limit, float limit,
                                                 const mok_gg_launch *launch,
                                                 cudaStream_t stream) {
  if (use_limit) /* the row-grouped kernel: with the limit this one measured no faster */
    return mok_gg_bf16_gate_up_swiglu_rows(x, w_gate, w_up, act, preact, expert_offset,
                                           expert_count, num_experts, m_total, inter, hidden,
                                           use_limit, limit, launch, stream);
  MOK_KTRY(gg_check_gate_up(x, w_gate, w_up, act, expert_offset, expert_count, num_experts,
                            m_total, inter, hidden, use_limit, limit));
  CUtensorMap tx, tg, tu, tc, tp;
  MOK_KTRY(gg_make_tmap_2d(&tx, x, m_total, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tg, w_gate, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tu, w_up, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  MOK_KTRY(gg_make_tmap_2d(&tc, act, m_total, inter, 2, 32, 64));
  if (preact) MOK_KTRY(gg_make_tmap_2d(&tp, preact, m_total, 2 * inter, 2, 32, 64));
  else tp = tc;
  sw_params p = {};
  p.n_tiles = (int)(inter / SW_BF);
  p.k_blocks = (int)(hidden / SW_BK);
  p.inter = (int)inter;
  p.use_limit = use_limit != 0;
  p.limit = limit;
  p.has_preact = preact != NULL;
  return sw_run(&tx, &tg, &tu, &tc, &tp, p, expert_offset, expert_count, num_experts,
                           m_total, launch, stream);
}
