/* fp8_wide.cu — the FP8 block-scaled grouped GEMM with 256-column tiles as a kernel of its own:
 * persistent CTAs walk the tile scheduler's tiles with a static stride, each tile through the
 * per-tile producer and consumer of fp8_wide.cuh (the design is described there), and the
 * launcher that fp8.cu's entry points call. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/fp8_wide.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

template <int MODE>
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
  const int unit0 = blockIdx.x, ustride = gridDim.x;
  const bool tma_c = MODE == F8_FWD ? p.c0 != nullptr : p.has_preact != 0;
  if (threadIdx.x == 32 && MODE == F8_SWIGLU) tma_prefetch_desc(&tm_act);
  const int total = f8_cta_start<MODE>(smem_base, full0, empty0, F8W_STAGES, 8, F8W_BM, &tm_a,
                                       &tm_b0, &tm_b1, tma_c ? &tm_c : NULL, p.count, E,
                                       p.n_tiles, prefix);

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      f8w_ring r = {0, 0};
      int cursor = 0;
      for (int u = unit0; u < total; u += ustride) {
        const gg_tile t = gg_decode_m_grouped_from(u, prefix, E, p.n_tiles, p.group_m, &cursor);
        f8w_produce_tile<MODE>(p, &tm_a, &tm_b0, &tm_b1, t, smem_base, full0, empty0, r);
      }
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const f8w_consumer c = f8w_consumer_init(smem_base, full0, empty0, tid);
    f8w_cstate s = f8w_cstate_start();
    int cursor = 0;
    float y[128];
    /* The next tile is decoded, and its first block's weight scales loaded, a tile ahead, so
     * that their latency hides behind the current tile's epilogue. */
    gg_tile t = {0, 0, 0};
    int ws_next = -1;
    if (unit0 < total) {
      t = gg_decode_m_grouped_from(unit0, prefix, E, p.n_tiles, p.group_m, &cursor);
      ws_next = f8w_scales_at<MODE>(p, t);
      f8w_load_scales<MODE>(p, ws_next, 0, &s.bl, &s.bh);
    }
    for (int u = unit0; u < total; u += ustride) {
      const bool last_tile = u + ustride >= total;
      const gg_tile tile = t;
      const int ws = ws_next;
      ws_next = -1;
      if (!last_tile) { /* the next tile */
        t = gg_decode_m_grouped_from(u + ustride, prefix, E, p.n_tiles, p.group_m, &cursor);
        ws_next = f8w_scales_at<MODE>(p, t);
      }
      f8w_consume_tile<MODE, MODE>(p, p, &tm_c, &tm_act, c, tile, ws, ws_next, last_tile, s, y);
    }
    if (c.wtid == 0) bulk_wait0(); /* the last TMA stores are done */
    if (MODE == F8_FWD && p.push)
      __threadfence_system(); /* the pushed rows, before the cross-rank barrier after the kernel */
  }
}

template <int MODE>
static mok_status f8w_launch_mode(const CUtensorMap *a, const CUtensorMap *b0,
                                  const CUtensorMap *b1, const CUtensorMap *c,
                                  const CUtensorMap *q, f8_params p, int max_units, int grid_cap,
                                  cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs, found once */
  if (!max_ctas)
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_wide_kernel<MODE>, F8W_THREADS, F8W_SMEM, 1,
                                &max_ctas));
  const int cap = gg_ctas_cap(max_ctas, 1, grid_cap);
  int units = max_units < cap ? max_units : cap;
  if (units < 1) units = 1;
  gg_fp8_wide_kernel<MODE><<<units, F8W_THREADS, F8W_SMEM, stream>>>(*a, *b0, *b1, *c, *q, p);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}

mok_status f8_wide_launch(int mode, const CUtensorMap *a, const CUtensorMap *b0,
                          const CUtensorMap *b1, const CUtensorMap *c, const CUtensorMap *q,
                          f8_params p, int64_t m_total, int max_ctas, cudaStream_t stream) {
  if (mode != F8_SWIGLU) {
    if (p.n_out % 256) return MOK_ERR_NOT_SUPPORTED;
    p.n_tiles = p.n_out / 256;
  } else {
    p.n_tiles = p.n_out / 128;
  }
  p.group_m = 16;
  const int max_tiles = (int)((m_total + F8W_BM - 1) / F8W_BM) * p.n_tiles;
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  for (int e0 = 0; e0 < e_all; e0 += F8_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < F8_MAX_EXPERTS ? e_all - e0 : F8_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    const mok_status st =
        mode == F8_FWD
            ? f8w_launch_mode<F8_FWD>(a, b0, b1, c, q, p, max_tiles, max_ctas, stream)
            : f8w_launch_mode<F8_SWIGLU>(a, b0, b1, c, q, p, max_tiles, max_ctas, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}
