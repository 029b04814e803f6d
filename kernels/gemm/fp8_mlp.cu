/* fp8_mlp.cu — the FP8 routed experts' forward MLP as one persistent launch: gate+up with the
 * fused SwiGLU, its activations quantized in the epilogue, and down, whose epilogues push the rows
 * into their combine slots (or store c), with no grid-wide barrier between the two.
 *
 * Work: the gate+up tiles (G: the 256-column kernel's SWIGLU tiles) and the down tiles (D: its
 * FWD tiles) of every expert, through the per-tile producer and consumer of fp8_wide.cuh. A
 * claiming thread in each CTA takes tickets from two device counters (fetch-and-add, so no CTA
 * retries another's claim): G tickets while there are any, then D tickets, each followed by a
 * wait for the D tile's 128-row block (every G tile of those rows has stored its codes and
 * scales: a count per row block, 2 per G tile, one per consumer warpgroup after its stores
 * completed, release / acquire at GPU scope; bounded by timeout_ns, then the error word). So down
 * starts on each CTA as soon as gate+up has no tile left for it, and a row block's down tiles wait
 * only for that block, not for the whole of gate+up (no grid-wide barrier). A D ticket is taken
 * only once no G ticket is left, so every G tile has been claimed by a running CTA before any CTA
 * waits, and a CTA's own claimed G tiles never wait (the claiming thread waits, not the
 * producer): the launch completes whatever number of its CTAs are resident (a GPU shared with
 * other kernels, a smaller grid). Which CTA computes a tile changes none of its bits (a tile is
 * computed whole, over the full K in order), so the outputs are bit for bit those of the two
 * launches (mok_gg_fp8_gate_up_swiglu_quantized, then mok_gg_fp8_fwd[_pushed]).
 *
 * The claiming thread hands the tiles to the producer and the consumers through a two-slot queue
 * in shared memory (mbarriers), so it claims a tile or two ahead of the producer and its waits
 * never hold the loads; the consumers look for the next tile when their current one starts (one
 * look per warpgroup, whose warps must run the same code) and load its first weight scales before
 * their epilogue. A warpgroup's row-block count is added a K block into its next tile (its stores
 * have completed by then: the wait for them costs nothing), or at once when the next tile is not
 * in the queue yet (the claiming thread may be waiting for these very rows). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/move/fused_move.cuh"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/fp8_wide.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"

#define MLP_QSLOTS 2
/* a queue entry: int4 {kind, expert, m_tile, n_tile} */
enum { MLP_G = 0, MLP_D = 1, MLP_END = 2, MLP_NONE = 3 /* a consumer's look found none */ };

/* the kernel's tile prefixes hold every expert of the call (mok_gg_fp8_mlp_covers) */
static_assert(MOK_GG_MAX_EXPERTS_PER_LAUNCH == F8_MAX_EXPERTS, "one launch, every expert");

typedef struct {
  int32_t *sync;    /* [0] G claims, [1] D claims (zeroed per launch)                         */
  int32_t *d_count; /* [b]: row block b's gate+up count (2 per G tile when its rows are out)  */
  int32_t *err;     /* the sticky error word                                                  */
  int64_t timeout_ns;
} mlp_sync;

/* The claiming thread's state: decode cursors (the counters only grow), whether G ran out. */
typedef struct {
  int g_cursor, d_cursor;
  bool g_done;
} mlp_claimer;

__device__ __forceinline__ int4 mlp_entry(int kind, gg_tile t) {
  return make_int4(kind, t.expert, t.m_tile, t.n_tile);
}

/* D tile d and the count of its row block. */
__device__ __forceinline__ gg_tile mlp_d_tile(const f8_params &pd, const mlp_sync &q,
                                              const int32_t *pre_d, int E, int d,
                                              mlp_claimer &cl, const int32_t **count) {
  const gg_tile t = gg_decode_m_grouped_from(d, pre_d, E, pd.n_tiles, pd.group_m, &cl.d_cursor);
  *count = q.d_count + pd.offset[t.expert] / F8W_BM + t.m_tile;
  return t;
}

/* The next tile for this CTA (see the file comment): a G ticket while there are any, then D
 * tickets, each followed by a wait for its rows. Tickets are fetch-and-adds, so CTAs never retry
 * each other's claims. MLP_END when both ran out, or on a timeout or a fault in the error word. */
__device__ __forceinline__ int4 mlp_claim(const f8_params &pg, const f8_params &pd,
                                          const mlp_sync &q, const int32_t *pre_g,
                                          const int32_t *pre_d, int E, mlp_claimer &cl) {
  const int ng = pre_g[E], nd = pre_d[E], want = 2 * pg.n_tiles;
  while (!cl.g_done) {
    const int g = atomicAdd(q.sync, 1);
    if (g < ng) {
      const gg_tile t = gg_decode_m_grouped_from(g, pre_g, E, pg.n_tiles, pg.group_m,
                                                 &cl.g_cursor);
      return mlp_entry(MLP_G, t);
    }
    cl.g_done = true;
  }
  /* a look before the fetch-and-add: once D ran out, the CTAs stop adding to its counter */
  if (*(volatile const int32_t *)(q.sync + 1) >= nd) return make_int4(MLP_END, 0, 0, 0);
  const int d = atomicAdd(q.sync + 1, 1);
  if (d >= nd) return make_int4(MLP_END, 0, 0, 0);
  const int32_t *count;
  const gg_tile t = mlp_d_tile(pd, q, pre_d, E, d, cl, &count);
  if (!cm_wait_flag(count, want, q.err, q.timeout_ns)) return make_int4(MLP_END, 0, 0, 0);
  cm_fence_proxy_global(); /* the rows' codes and scales, before the TMA loads */
  return mlp_entry(MLP_D, t);
}

/* The claiming thread hands tile u to the producer and the consumers (slot qs of the queue, once
 * they all took its last). */
__device__ __forceinline__ void mlp_publish(int4 *queue, uint32_t qfull0, uint32_t qempty0,
                                            int &qs, uint32_t &qph, int4 u) {
  mbar_wait(qempty0 + 8 * qs, qph ^ 1);
  queue[qs] = u;
  mbar_arrive(qfull0 + 8 * qs);
  if (++qs == MLP_QSLOTS) qs = 0, qph ^= 1;
}

/* The producer thread (whole_warp false) or a consumer warp takes the next tile. */
__device__ __forceinline__ int4 mlp_take(const int4 *queue, uint32_t qfull0, uint32_t qempty0,
                                         int &qs, uint32_t &qph, int lane, bool whole_warp = true) {
  mbar_wait(qfull0 + 8 * qs, qph);
  const int4 u = queue[qs];
  if (whole_warp) __syncwarp();
  if (lane == 0) mbar_arrive(qempty0 + 8 * qs);
  if (++qs == MLP_QSLOTS) qs = 0, qph ^= 1;
  return u;
}

/* Where tile u's weight scales start (-1: no tile). */
__device__ __forceinline__ int mlp_scales_at(const f8_params &pg, const f8_params &pd, int4 u) {
  const gg_tile t = {u.y, u.z, u.w};
  if (u.x == MLP_G) return f8w_scales_at<F8_SWIGLU>(pg, t);
  if (u.x == MLP_D) return f8w_scales_at<F8_FWD>(pd, t);
  return -1;
}

__device__ __forceinline__ void mlp_first_scales(const f8_params &pg, const f8_params &pd, int4 u,
                                                 f8w_cstate &s) {
  if (u.x == MLP_G) f8w_load_scales<F8_SWIGLU>(pg, mlp_scales_at(pg, pd, u), 0, &s.bl, &s.bh);
  if (u.x == MLP_D) f8w_load_scales<F8_FWD>(pd, mlp_scales_at(pg, pd, u), 0, &s.bl, &s.bh);
}

/* One consumer tile of kind MODE, the next one of kind NMODE (its scales at next_ws, or -1). */
template <int MODE, int NMODE>
__device__ __forceinline__ void mlp_consume(const f8_params &pg, const f8_params &pd,
                                            const CUtensorMap *tm_pre, const CUtensorMap *tm_q,
                                            const CUtensorMap *tm_c, const f8w_consumer &c,
                                            int4 u, int next_ws, int32_t *signal, f8w_cstate &s,
                                            float *y) {
  const f8_params &p = MODE == F8_SWIGLU ? pg : pd;
  const f8_params &pn = NMODE == F8_SWIGLU ? pg : pd;
  const gg_tile t = {u.y, u.z, u.w};
  f8w_consume_tile<MODE, NMODE>(p, pn, MODE == F8_SWIGLU ? tm_pre : tm_c,
                                MODE == F8_SWIGLU ? tm_q : tm_c, c, t, f8w_scales_at<MODE>(p, t),
                                next_ws, false, s, y, signal);
}

__global__ void __launch_bounds__(F8W_THREADS, 1)
    gg_fp8_mlp_kernel(const __grid_constant__ CUtensorMap tm_x,
                      const __grid_constant__ CUtensorMap tm_wg,
                      const __grid_constant__ CUtensorMap tm_wu,
                      const __grid_constant__ CUtensorMap tm_pre,
                      const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_qa,
                      const __grid_constant__ CUtensorMap tm_wd,
                      const __grid_constant__ CUtensorMap tm_c, const f8_params pg,
                      const f8_params pd, const mlp_sync q) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * F8W_STAGES + 2 * MLP_QSLOTS];
  __shared__ int32_t pre_g[F8_MAX_EXPERTS + 1], pre_d[F8_MAX_EXPERTS + 1];
  __shared__ int4 queue[MLP_QSLOTS];
  __shared__ int peeked[2][2]; /* a consumer warpgroup's look at the queue, by tile parity */

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[F8W_STAGES]);
  const uint32_t qfull0 = smem_u32(&bars[2 * F8W_STAGES]);
  const uint32_t qempty0 = qfull0 + 8 * MLP_QSLOTS;
  const int E = pg.num_experts;
  if (tid == 0) {
    gg_ring_init(smem_base, full0, empty0, F8W_STAGES, 8);
    for (int i = 0; i < MLP_QSLOTS; ++i) {
      mbar_init(qfull0 + 8 * i, 1);
      mbar_init(qempty0 + 8 * i, 9); /* the producer and every consumer warp take every tile */
    }
    fence_mbar_init();
  }
  if (tid == 32) {
    const CUtensorMap *maps[8] = {&tm_x, &tm_wg, &tm_wu, &tm_pre, &tm_q, &tm_qa, &tm_wd, &tm_c};
    for (int i = 0; i < 8; ++i) tma_prefetch_desc(maps[i]);
  }
  if (tid >= 64 && tid < 96)
    gg_unit_prefix(pg.count, NULL, E, F8W_BM, pg.n_tiles, 0, pre_g, tid & 31);
  if (tid >= 96 && tid < 128)
    gg_unit_prefix(pd.count, NULL, E, F8W_BM, pd.n_tiles, 0, pre_d, tid & 31);
  __syncthreads();

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) { /* the producer: the queue's tiles into the stage ring */
      f8w_ring r = {0, 0};
      int qs = 0;
      uint32_t qph = 0;
      for (;;) {
        const int4 u = mlp_take(queue, qfull0, qempty0, qs, qph, 0, false);
        if (u.x == MLP_END) break;
        const gg_tile t = {u.y, u.z, u.w};
        if (u.x == MLP_G)
          f8w_produce_tile<F8_SWIGLU>(pg, &tm_x, &tm_wg, &tm_wu, t, smem_base, full0, empty0, r);
        else
          f8w_produce_tile<F8_FWD>(pd, &tm_qa, &tm_wd, &tm_wd, t, smem_base, full0, empty0, r);
      }
    } else if (tid == 32) { /* the claiming thread: tiles into the queue */
      mlp_claimer cl = {0, 0, false};
      int qs = 0;
      uint32_t qph = 0;
      for (;;) {
        const int4 u = mlp_claim(pg, pd, q, pre_g, pre_d, E, cl);
        mlp_publish(queue, qfull0, qempty0, qs, qph, u);
        if (u.x == MLP_END) break;
      }
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const f8w_consumer c = f8w_consumer_init(smem_base, full0, empty0, tid);
    f8w_cstate s = f8w_cstate_start();
    float y[128];
    int qs = 0;
    uint32_t qph = 0;
    int32_t *pending = nullptr; /* the row block count this warpgroup still owes */
    int4 u = mlp_take(queue, qfull0, qempty0, qs, qph, c.lane);
    mlp_first_scales(pg, pd, u, s);
    for (int i = 0; u.x != MLP_END; ++i) {
      /* Once this tile's first stage has landed, the claiming thread has usually queued the
       * next one: take it if it is there. One answer for the whole warpgroup (thread 0 looks,
       * the others read its answer after a barrier; two slots by tile parity), since its warps
       * must run the same code: the same wgmmas, the same named barriers. */
      mbar_wait(c.full0 + 8 * s.ring.stage, s.ring.phase);
      if (c.wtid == 0) peeked[c.cwg][i & 1] = (int)mbar_test_wait(qfull0 + 8 * qs, qph);
      named_bar_sync(2 + c.cwg, 128);
      int4 next = make_int4(MLP_NONE, 0, 0, 0);
      if (peeked[c.cwg][i & 1]) next = mlp_take(queue, qfull0, qempty0, qs, qph, c.lane);
      const int next_ws = mlp_scales_at(pg, pd, next);
      if (u.x == MLP_G && next.x == MLP_D)
        mlp_consume<F8_SWIGLU, F8_FWD>(pg, pd, &tm_pre, &tm_q, &tm_c, c, u, next_ws, pending, s, y);
      else if (u.x == MLP_G)
        mlp_consume<F8_SWIGLU, F8_SWIGLU>(pg, pd, &tm_pre, &tm_q, &tm_c, c, u, next_ws, pending, s,
                                          y);
      else if (next.x == MLP_G)
        mlp_consume<F8_FWD, F8_SWIGLU>(pg, pd, &tm_pre, &tm_q, &tm_c, c, u, next_ws, pending, s, y);
      else
        mlp_consume<F8_FWD, F8_FWD>(pg, pd, &tm_pre, &tm_q, &tm_c, c, u, next_ws, pending, s, y);
      pending = u.x == MLP_G ? q.d_count + pg.offset[u.y] / F8W_BM + u.z : nullptr;
      if (next.x == MLP_NONE) { /* the claiming thread may be waiting for these very rows */
        f8w_signal(c, pending);
        pending = nullptr;
        next = mlp_take(queue, qfull0, qempty0, qs, qph, c.lane);
        mlp_first_scales(pg, pd, next, s);
      }
      u = next;
    }
    f8w_signal(c, pending);
    /* warpgroup 1's pass after its last block, which no block of warpgroup 0 waited for */
    if (c.cwg == 0 && !s.first) named_bar_sync(F8W_BAR_TURN, 256);
    if (c.wtid == 0) bulk_wait0(); /* the last TMA stores are done */
    if (pd.push) __threadfence_system(); /* the pushed rows, before the cross-rank barrier */
  }
}

/* ---- host ------------------------------------------------------------------------------------ */

extern "C" int64_t mok_gg_fp8_mlp_sync_ints(int64_t m_total) {
  return 2 + (m_total + F8W_BM - 1) / F8W_BM;
}

extern "C" mok_status mok_gg_fp8_mlp_forward(const mok_gg_fp8_mlp *m, const mok_gg_launch *launch,
                                             cudaStream_t stream) {
  if (!m || !m->x || !m->x_scales || !m->w_gate || !m->w_gate_scales || !m->w_up ||
      !m->w_up_scales || !m->w_down || !m->w_down_scales || !m->q_act || !m->q_scales ||
      !m->sync || !m->err || (!m->out && !m->push))
    return MOK_ERR_INVALID_ARGUMENT;
  const int64_t mt = m->m_total, inter = m->inter, hidden = m->hidden;
  const int E = m->num_experts;
  /* both products: gate+up (inter columns over hidden), down (hidden over inter) */
  MOK_KTRY(f8_check(m->expert_offset, m->expert_count, E, mt, inter, hidden));
  MOK_KTRY(f8_check(m->expert_offset, m->expert_count, E, mt, hidden, inter));
  if (((uintptr_t)m->x_scales & 15) || ((uintptr_t)m->q_act & 15) ||
      ((uintptr_t)m->q_scales & 15))
    return MOK_ERR_MISALIGNED;
  if (m->use_limit && !(m->limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  if (m->push && !gg_move_ok(m->push, 1)) return MOK_ERR_INVALID_ARGUMENT;
  mok_gg_launch l; /* single CTAs, 256-column tiles: only the grid cap is a choice */
  MOK_KTRY(gg_launch_get(launch, 1, 0, &l));
  if (!mok_gg_fp8_mlp_covers(E, hidden)) return MOK_ERR_NOT_SUPPORTED;

  CUtensorMap tx, tg, tu, tpre, tq, tqa, td, tc;
  MOK_KTRY(gg_make_tmap_2d(&tx, m->x, mt, hidden, 1, F8W_BM, 128));
  MOK_KTRY(gg_make_tmap_2d(&tg, m->w_gate, (int64_t)E * inter, hidden, 1, 64, 128));
  MOK_KTRY(gg_make_tmap_2d(&tu, m->w_up, (int64_t)E * inter, hidden, 1, 64, 128));
  MOK_KTRY(gg_make_tmap_2d(&tq, m->q_act, mt, inter, 1, 64, 128));
  MOK_KTRY(gg_make_tmap_2d(&tqa, m->q_act, mt, inter, 1, F8W_BM, 128));
  MOK_KTRY(gg_make_tmap_2d(&td, m->w_down, (int64_t)E * hidden, inter, 1, 64, 128));
  if (m->preact) MOK_KTRY(gg_make_tmap_2d(&tpre, m->preact, mt, 2 * inter, 2, 64, 64));
  else tpre = tq;
  if (m->out) MOK_KTRY(gg_make_tmap_2d(&tc, m->out, mt, hidden, 2, 64, 64));
  else tc = tq; /* push only: the epilogue stages the rows and stores nothing locally */

  f8_params pg = {};
  pg.offset = m->expert_offset;
  pg.count = m->expert_count;
  pg.num_experts = E;
  pg.m_pad = (int)MOK_FP8_SCALE_ROWS(mt);
  pg.group_m = 16;
  f8_params pd = pg;
  pg.a_scales = m->x_scales;
  pg.b_scales0 = m->w_gate_scales;
  pg.b_scales1 = m->w_up_scales;
  pg.n_tiles = (int)(inter / 128);
  pg.k_blocks = (int)(hidden / F8_BK);
  pg.b_rows = pg.n_out = (int)inter;
  pg.use_limit = m->use_limit != 0;
  pg.limit = m->limit;
  pg.has_preact = m->preact != NULL;
  pg.q_act = (uint8_t *)m->q_act;
  pg.q_scales = m->q_scales;
  pd.a_scales = m->q_scales;
  pd.b_scales0 = pd.b_scales1 = m->w_down_scales;
  pd.c0 = (uint16_t *)m->out;
  pd.n_tiles = (int)(hidden / 256);
  pd.k_blocks = (int)(inter / F8_BK);
  pd.b_rows = pd.n_out = (int)hidden;
  if (m->push) {
    pd.push = 1;
    pd.move = *m->push;
    pd.move_m_total = mt;
  }
  const int64_t blocks = (mt + F8W_BM - 1) / F8W_BM;
  const mlp_sync q = {m->sync, m->sync + 2, m->err, m->timeout_ns};

  static int max_ctas = 0; /* co-resident CTAs, found once */
  if (!max_ctas)
    MOK_KTRY(gg_coresident_ctas((const void *)gg_fp8_mlp_kernel, F8W_THREADS, F8W_SMEM, 1,
                                &max_ctas));
  const int64_t units = blocks * (pg.n_tiles + pd.n_tiles);
  const int cap = gg_ctas_cap(max_ctas, 1, l.max_ctas);
  const int grid = units < cap ? (int)units : cap;
  MOK_KCUDA(cudaMemsetAsync(m->sync, 0, (size_t)mok_gg_fp8_mlp_sync_ints(mt) * 4, stream));
  gg_fp8_mlp_kernel<<<grid, F8W_THREADS, F8W_SMEM, stream>>>(tx, tg, tu, tpre, tq, tqa, td, tc,
                                                             pg, pd, q);
  MOK_KLAUNCHED();
  return MOK_SUCCESS;
}
