/* fp8.cu — the FP8 E4M3 block-scaled grouped GEMMs' entry points for sm_90a (forward, pushed
 * forward, gate+up with SwiGLU, with its activations quantized or not; gemm.h, gemm_fused.h) and
 * the 128-column kernel that runs the products whose columns do not split into 256.
 *
 * Recipe (the Hopper-native one): activations carry one fp32 scale per 1x128 block, weights one
 * per 128x128 block. Gate+up and every product whose columns split into 256 run the 256-column
 * kernel (fp8_wide.cu; mok_gg_fp8_wide_covers in gemm_plan.h). The 128-column kernel here has
 * the bf16 kernel's shape (persistent, one TMA producer warp, wgmma consumer warpgroups,
 * tile_scheduler.h) with tiles of 64 rows per consumer warpgroup (two or three of them: 128 or
 * 192 rows; launch->warpgroups) by 128 columns and BK = 128: per K block each consumer runs four
 * m64n128k32 wgmmas into a fresh fp32 partial, waits, and adds partial * scale_a[row] * scale_b
 * on the CUDA cores (promotion once per 128-K); with three, two warpgroups' wgmmas run while the
 * third drains and promotes. The activation scales of a stage come with it (a bulk copy per
 * stage on the same mbarrier). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

/* The tile is NWG x 64 rows (one 64-row slice per consumer warpgroup; NWG = 2 or 3) by 128
 * columns; everything that depends on NWG is a function of it. */
#define F8_BN 128
#define F8_B_BYTES (F8_BN * F8_BK)      /* 16 KB */
#define F8_BM(nwg) (64 * (nwg))
#define F8_A_BYTES(nwg) (F8_BM(nwg) * F8_BK)
#define F8_SA_OFF(nwg) (F8_A_BYTES(nwg) + F8_B_BYTES)
/* A, B and the tile's row scales, 1024-aligned: 33 KB (NWG 2) or 41 KB (NWG 3) */
#define F8_STAGE_BYTES(nwg) ((F8_SA_OFF(nwg) + F8_BM(nwg) * 4 + 1023) / 1024 * 1024)
#define F8_STAGES(nwg) ((nwg) == 2 ? 5 : 4)
#define F8_EPI_OFF(nwg) (F8_STAGES(nwg) * F8_STAGE_BYTES(nwg))
#define F8_SMEM(nwg) (F8_EPI_OFF(nwg) + (nwg) * 16384)
#define F8_THREADS(nwg) (128 * ((nwg) + 1))

/* Issues one K block (four m64n128k32 wgmmas) of this warpgroup into a fresh partial. da, db:
 * the descriptors of this warpgroup's A rows and of B in stage 0; st: the stage. */
template <int NWG>
__device__ __forceinline__ void f8_issue(float *part, uint64_t da, uint64_t db, int st) {
  da = wgmma_desc_add(da, st * F8_STAGE_BYTES(NWG));
  db = wgmma_desc_add(db, st * F8_STAGE_BYTES(NWG));
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n128k32_e4m3(part, wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32), kk > 0);
  wgmma_commit();
}

/* acc += part * scale_a[row] * scale_b[column half] (rows r0 / r0 + 8: fragment bit 1; columns
 * 64..127 take sb1, the same 128-row weight block's scale as sb0). */
__device__ __forceinline__ void f8_promote(float *acc, const float *part, float sa0, float sa1,
                                           float sb0, float sb1) {
  const float f00 = sa0 * sb0, f10 = sa1 * sb0, f01 = sa0 * sb1, f11 = sa1 * sb1;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const bool hi_row = (i & 2) != 0, up = i >= 32;
    const float f = up ? (hi_row ? f11 : f01) : (hi_row ? f10 : f00);
    acc[i] = fmaf(part[i], f, acc[i]);
  }
}

/* NWG: 2 consumer warpgroups (128-row tiles, 232 registers each), or 3 (192-row tiles, 160
 * registers each), so that while one warpgroup waits for its wgmmas to drain and promotes, the
 * other two keep the tensor cores busy, and each B tile serves 192 rows. tm_c: c's map (with
 * p.c0 NULL, a push only: any map, nothing is stored). */
template <int NWG>
__global__ void __launch_bounds__(F8_THREADS(NWG), 1)
    gg_fp8_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                  const __grid_constant__ CUtensorMap tm_c, const f8_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int STAGES = F8_STAGES(NWG), STAGE_BYTES = F8_STAGE_BYTES(NWG), BM = F8_BM(NWG);
  constexpr int A_BYTES = F8_A_BYTES(NWG), SA_OFF = F8_SA_OFF(NWG);
  __shared__ __align__(8) uint64_t bars[2 * STAGES];
  __shared__ int32_t prefix[F8_MAX_EXPERTS + 1];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[STAGES]);
  const int E = p.num_experts;
  const int unit0 = blockIdx.x, ustride = gridDim.x;
  const int total = f8_cta_start<F8_FWD>(smem_base, full0, empty0, STAGES, 4 * NWG, BM, &tm_a,
                                         &tm_b, &tm_b, &tm_c, p.count, E, p.n_tiles, prefix);

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<NWG == 2 ? 40 : 32>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int u = unit0; u < total; u += ustride) {
        gg_tile t = gg_decode_m_grouped(u, prefix, E, p.n_tiles, p.group_m);
        const int m_tile = t.m_tile;
        const int a_row = p.offset[t.expert] +
                          (p.count[t.expert] > m_tile * BM ? m_tile * BM : 0);
        /* row scales: the 64-row slices inside the padded rows (past them no warpgroup has math) */
        int sa_bytes = BM * 4;
        if (NWG > 2 && a_row + BM > p.m_pad) sa_bytes = (p.m_pad - a_row) * 4;
        const int bexp = p.expert_base + t.expert;
        const int col = t.n_tile * F8_BN;
        const int n0 = bexp * p.b_rows + col;
        const int n1 = col + 64 < p.n_out ? n0 + 64 : n0;
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          mbar_arrive_expect_tx(full, A_BYTES + F8_B_BYTES + sa_bytes);
          const uint32_t sa = smem_base + stage * STAGE_BYTES;
          const int k0 = kb * F8_BK;
          tma_load_2d(sa, &tm_a, full, k0, a_row);
          tma_load_2d(sa + A_BYTES, &tm_b, full, k0, n0);
          tma_load_2d(sa + A_BYTES + 8192, &tm_b, full, k0, n1);
          bulk_load_1d(sa + SA_OFF, p.a_scales + (size_t)kb * p.m_pad + a_row, sa_bytes, full);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<NWG == 2 ? 232 : 160>();
    const int cwg = wg - 1;
    const int wtid = tid & 127;
    const int warp = wtid >> 5, lane = wtid & 31;
    const uint32_t epi = smem_base + F8_EPI_OFF(NWG) + cwg * 16384;
    const int r0 = cwg * 64 + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
    const int kbs = p.k_blocks;
    uint64_t da0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t db0 = wgmma_desc_sw128(smem_base + A_BYTES, 16, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0)); /* built once: not re-derived from addresses */
    int stage = 0;
    uint32_t phase = 0;
    float acc[64], p0[64];
    for (int u = unit0; u < total; u += ustride) {
      gg_tile t = gg_decode_m_grouped(u, prefix, E, p.n_tiles, p.group_m);
      const int m_tile = t.m_tile;
      const int cnt = max(p.count[t.expert], 0);
      const bool math = cnt - m_tile * BM > cwg * 64;
      const int bexp = p.expert_base + t.expert;
      /* the weight-scale row of the tile's 128-row block (both column halves) */
      const float *sb0, *sb1;
      sb0 = sb1 = p.b_scales0 + ((size_t)bexp * (p.b_rows / 128) + t.n_tile) * kbs;
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      if (!math) {
        for (int kb = 0; kb < kbs; ++kb) {
          mbar_wait(full0 + 8 * stage, phase);
          gg_release<1>(empty0 + 8 * stage, lane);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
        continue;
      }
      for (int kb = 0; kb < kbs; ++kb) {
        mbar_wait(full0 + 8 * stage, phase);
        const float s_b0 = __ldg(sb0 + kb), s_b1 = __ldg(sb1 + kb);
        f8_issue<NWG>(p0, da0, db0, stage);
        /* the row scales came with the stage: read them while the wgmmas run */
        const float *sas = (const float *)(smem + stage * STAGE_BYTES + SA_OFF);
        const float s_a0 = sas[r0], s_a1 = sas[r0 + 8];
        wgmma_wait<0>();
        reg_fence(p0, 64);
        gg_release<1>(empty0 + 8 * stage, lane);
        f8_promote(acc, p0, s_a0, s_a1, s_b0, s_b1);
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }

      /* the epilogue: the staging buffer and TMA stores (and the push from the staging) */
      const int row0 = p.offset[t.expert] + m_tile * BM + cwg * 64;
      gg_store_pass<0, 2>(acc, epi, wtid, p.c0 ? &tm_c : nullptr, t.n_tile * F8_BN, p.n_out, row0,
                          2 + cwg);
      if (p.push)
        gg_push_pass(smem + F8_EPI_OFF(NWG) + cwg * 16384, wtid, p.move, p.move_m_total, p.n_out,
                     t.n_tile * F8_BN, p.n_out, row0);
    }
    if (wtid == 0) bulk_wait0();
    if (p.push)
      __threadfence_system(); /* the pushed rows, before the cross-rank barrier after the kernel */
  }
}

/* ---- host side ------------------------------------------------------------------------------ */

template <int NWG>
static mok_status f8_launch_nwg(const CUtensorMap *a, const CUtensorMap *b, const CUtensorMap *c,
                                f8_params p, int max_units, int grid_cap, cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs, found once */
  if (!max_ctas)
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_kernel<NWG>, F8_THREADS(NWG), F8_SMEM(NWG),
                                1, &max_ctas));
  const int cap = gg_ctas_cap(max_ctas, 1, grid_cap);
  int units = max_units < cap ? max_units : cap;
  if (units < 1) units = 1;
  gg_fp8_kernel<NWG><<<units, F8_THREADS(NWG), F8_SMEM(NWG), stream>>>(*a, *b, *c, p);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

/* The 128-column kernel with nwg consumer warpgroups, the experts split over launches of at most
 * F8_MAX_EXPERTS. */
static mok_status f8_launch(int nwg, const CUtensorMap *a, const CUtensorMap *b,
                            const CUtensorMap *c, f8_params p, int64_t m_total, int grid_cap,
                            cudaStream_t stream) {
  const int max_tiles = (int)((m_total + F8_BM(nwg) - 1) / F8_BM(nwg)) * p.n_tiles;
  p.group_m = 16;
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  for (int e0 = 0; e0 < e_all; e0 += F8_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < F8_MAX_EXPERTS ? e_all - e0 : F8_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    const mok_status st = nwg == 3 ? f8_launch_nwg<3>(a, b, c, p, max_tiles, grid_cap, stream)
                                   : f8_launch_nwg<2>(a, b, c, p, max_tiles, grid_cap, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}

static mok_status f8_fwd(const void *a, const float *a_scales, const void *b, const float *b_scales,
                         void *c, const int32_t *expert_offset, const int32_t *expert_count,
                         int num_experts, int64_t m_total, int64_t n, int64_t k,
                         const mok_gg_move *push, const mok_gg_launch *launch,
                         cudaStream_t stream) {
  if (!a || !a_scales || !b || !b_scales || (!c && !push)) return MOK_ERR_INVALID_ARGUMENT;
  MOK_KTRY(f8_check(expert_offset, expert_count, num_experts, m_total, n, k));
  if (((uintptr_t)a_scales & 15)) return MOK_ERR_MISALIGNED;
  /* the 256-column kernel where the columns split so; else this file's, with the launch's
   * consumer warpgroups or gemm_plan.h's for the capacity's rows per expert */
  const int wide = mok_gg_fp8_wide_covers(n);
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 1, !wide, &l));
  const int nwg = wide ? 2
                  : l.warpgroups
                      ? l.warpgroups
                      : mok_gg_fp8_warpgroups_for(gg_rows_per_expert(m_total, num_experts));
  CUtensorMap ta, tb, tc;
  MOK_KTRY(gg_make_tmap_2d(&ta, a, m_total, k, 1, F8_BM(nwg), 128)); /* wide: 128-row boxes too */
  MOK_KTRY(gg_make_tmap_2d(&tb, b, (int64_t)num_experts * n, k, 1, 64, 128));
  if (c) MOK_KTRY(gg_make_tmap_2d(&tc, c, m_total, n, 2, 64, 64));
  else tc = ta; /* push only: the epilogue stages the rows and stores nothing locally */
  f8_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.a_scales = a_scales;
  p.b_scales0 = p.b_scales1 = b_scales;
  p.c0 = (uint16_t *)c;
  p.num_experts = num_experts;
  p.n_tiles = (int)(n / F8_BN);
  p.k_blocks = (int)(k / F8_BK);
  p.m_pad = (int)MOK_FP8_SCALE_ROWS(m_total);
  p.b_rows = (int)n;
  p.n_out = (int)n;
  if (push) {
    if (!gg_move_ok(push, 1)) return MOK_ERR_INVALID_ARGUMENT;
    p.push = 1;
    p.move = *push;
    p.move_m_total = m_total;
  }
  if (wide) return f8_wide_launch(F8_FWD, &ta, &tb, &tb, &tc, &tc, p, m_total, l.max_ctas, stream);
  return f8_launch(nwg, &ta, &tb, &tc, p, m_total, l.max_ctas, stream);
}

extern "C" mok_status mok_gg_fp8_fwd(const void *a, const float *a_scales, const void *b,
                                     const float *b_scales, void *c, const int32_t *expert_offset,
                                     const int32_t *expert_count, int num_experts, int64_t m_total,
                                     int64_t n, int64_t k, const mok_gg_launch *launch,
                                     cudaStream_t stream) {
  return f8_fwd(a, a_scales, b, b_scales, c, expert_offset, expert_count, num_experts, m_total, n,
                k, NULL, launch, stream);
}

extern "C" mok_status mok_gg_fp8_fwd_pushed(const void *a, const float *a_scales, const void *b,
                                            const float *b_scales, void *c,
                                            const int32_t *expert_offset,
                                            const int32_t *expert_count, int num_experts,
                                            int64_t m_total, int64_t n, int64_t k,
                                            const mok_gg_move *push, const mok_gg_launch *launch,
                                            cudaStream_t stream) {
  if (!push) return MOK_ERR_INVALID_ARGUMENT;
  return f8_fwd(a, a_scales, b, b_scales, c, expert_offset, expert_count, num_experts, m_total, n,
                k, push, launch, stream);
}

/* Gate+up on the 256-column kernel: act in bf16 (q_act NULL), or its codes and scales quantized
 * in the epilogue (act unused). */
static mok_status f8_gate_up(const void *x, const float *x_scales, const void *w_gate,
                             const float *w_gate_scales, const void *w_up, const float *w_up_scales,
                             void *act, void *preact, void *q_act, float *q_scales,
                             const int32_t *expert_offset, const int32_t *expert_count,
                             int num_experts, int64_t m_total, int64_t inter, int64_t hidden,
                             int use_limit, float limit, const mok_gg_launch *launch,
                             cudaStream_t stream) {
  if (!x || !x_scales || !w_gate || !w_gate_scales || !w_up || !w_up_scales || (!act && !q_act))
    return MOK_ERR_INVALID_ARGUMENT;
  MOK_KTRY(f8_check(expert_offset, expert_count, num_experts, m_total, inter, hidden));
  if (use_limit && !(limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  if (((uintptr_t)x_scales & 15)) return MOK_ERR_MISALIGNED;
  if (q_act && (((uintptr_t)q_act & 15) || ((uintptr_t)q_scales & 15))) return MOK_ERR_MISALIGNED;
  mok_gg_launch l;
  MOK_KTRY(gg_launch_get(launch, 1, 0, &l));
  CUtensorMap ta, tg, tu, tq, tp;
  MOK_KTRY(gg_make_tmap_2d(&ta, x, m_total, hidden, 1, F8_BM(2), 128));
  MOK_KTRY(gg_make_tmap_2d(&tg, w_gate, (int64_t)num_experts * inter, hidden, 1, 64, 128));
  MOK_KTRY(gg_make_tmap_2d(&tu, w_up, (int64_t)num_experts * inter, hidden, 1, 64, 128));
  /* the activations: their codes, stored by TMA from a staged 64 x 128-byte box, or bf16 act */
  if (q_act) MOK_KTRY(gg_make_tmap_2d(&tq, q_act, m_total, inter, 1, 64, 128));
  else MOK_KTRY(gg_make_tmap_2d(&tq, act, m_total, inter, 2, 64, 64));
  if (preact) MOK_KTRY(gg_make_tmap_2d(&tp, preact, m_total, 2 * inter, 2, 64, 64));
  else tp = tq;
  f8_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.a_scales = x_scales;
  p.b_scales0 = w_gate_scales;
  p.b_scales1 = w_up_scales;
  p.num_experts = num_experts;
  p.k_blocks = (int)(hidden / F8_BK);
  p.m_pad = (int)MOK_FP8_SCALE_ROWS(m_total);
  p.b_rows = (int)inter;
  p.n_out = (int)inter;
  p.use_limit = use_limit != 0;
  p.limit = limit;
  p.has_preact = preact != NULL;
  p.q_act = (uint8_t *)q_act;
  p.q_scales = q_act ? q_scales : NULL;
  return f8_wide_launch(F8_SWIGLU, &ta, &tg, &tu, &tp, &tq, p, m_total, l.max_ctas, stream);
}

extern "C" mok_status mok_gg_fp8_gate_up_swiglu(const void *x, const float *x_scales,
                                                const void *w_gate, const float *w_gate_scales,
                                                const void *w_up, const float *w_up_scales,
                                                void *act, void *preact,
                                                const int32_t *expert_offset,
                                                const int32_t *expert_count, int num_experts,
                                                int64_t m_total, int64_t inter, int64_t hidden,
                                                int use_limit, float limit,
                                                const mok_gg_launch *launch, cudaStream_t stream) {
  if (!act) return MOK_ERR_INVALID_ARGUMENT;
  return f8_gate_up(x, x_scales, w_gate, w_gate_scales, w_up, w_up_scales, act, preact, NULL, NULL,
                    expert_offset, expert_count, num_experts, m_total, inter, hidden, use_limit,
                    limit, launch, stream);
}

extern "C" mok_status mok_gg_fp8_gate_up_swiglu_quantized(
    const void *x, const float *x_scales, const void *w_gate, const float *w_gate_scales,
    const void *w_up, const float *w_up_scales, void *preact, void *q_act, float *q_scales,
    const int32_t *expert_offset, const int32_t *expert_count, int num_experts, int64_t m_total,
    int64_t inter, int64_t hidden, int use_limit, float limit, const mok_gg_launch *launch,
    cudaStream_t stream) {
  if (!q_act || !q_scales) return MOK_ERR_INVALID_ARGUMENT;
  return f8_gate_up(x, x_scales, w_gate, w_gate_scales, w_up, w_up_scales, NULL, preact, q_act,
                    q_scales, expert_offset, expert_count, num_experts, m_total, inter, hidden,
                    use_limit, limit, launch, stream);
}
