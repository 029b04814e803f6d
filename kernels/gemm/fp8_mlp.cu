/* grouped_gemm_fp8_mlp.cu — the FP8 routed experts' forward MLP as one persistent launch: gate+up
 * with the fused SwiGLU, its activations quantized in the epilogue, and down, whose epilogues push
 * the rows into their combine slots (or store c), with no grid-wide barrier between the two.
 *
 * Work: the gate+up tiles (G: the 256-column kernel's SWIGLU tiles) and the down tiles (D: its
 * FWD tiles) of every expert, through the per-tile producer and consumer of
 * grouped_gemm_fp8_wide.cuh. A claiming thread in each CTA takes tickets from two device counters
 * (fetch-and-add, so no CTA retries another's claim): G tickets while there are any, then D
 * tickets, each followed by a wait for the D tile's 128-row block (every G tile of those rows has
 * stored its codes and scales: a count per row block, 2 per G tile, one per consumer warpgroup
 * after its stores completed, release / acquire at GPU scope; bounded by timeout_ns, then the
 * error word). So down starts on each CTA as soon as gate+up has no tile left for it, and a row
 * block's down tiles wait only for that block, not for the whole of gate+up (no grid-wide
 * barrier). Tuning flag 4096 also takes a D ticket between G tiles whenever the next D tile's rows
 * are ready; interleaved so, the layer measured slower (docs/PERF.md). A D ticket can overtake
 * the ready rows only by the tickets taken at the same moment, whose rows' G tiles the other CTAs
 * then claim, and a CTA's own claimed G tiles never wait (the claiming thread waits, not the
 * producer): the launch completes whatever number of its CTAs are resident
 * (a GPU shared with other kernels, a smaller grid). Which CTA computes a tile changes none of its
 * bits (a tile is computed whole, over the full K in order), so the outputs are bit for bit those
 * of the two launches (mok_gg_fp8_gate_up_swiglu_quantized, then mok_gg_fp8_fwd[_pushed]).
 *
 * The claiming thread hands the tiles to the producer and the consumers through a two-slot queue
 * in shared memory (mbarriers), so it claims a tile or two ahead of the producer and its waits
 * never hold the loads; the consumers look for the next tile when their current one starts (one
 * look per warpgroup, whose warps must run the same code) and load its first weight scales before
 * their epilogue. A warpgroup's row-block count is added a K block into its next tile (its stores
 * have completed by then: the wait for them costs nothing), or at once when the next tile is not
 * in the queue yet (the claiming thread may be waiting for these very rows).
 *
 * The dispatch inside the launch (optional: mok_gg_fp8_mlp.pull). The rows' codes and scales are
 * then pulled here from the source ranks' staged x, by the producer warpgroup's two otherwise
 * idle warps of every CTA (or of the first pull->ctas), while the CTA's GEMM runs: pull tickets
 * (a third counter) are 8-row pieces of the row blocks the gate+up tiles read, in block order.
 * Warp 2's lane 0 moves a piece's codes by bulk copies through MLP_PULL_BUFS shared-memory
 * buffers (a load always in flight per buffer); warp 3 moves its scales into the GEMM's
 * K-block-major layout and writes the padding rows (zero codes, scale 1: what
 * v1_dispatch_pull_fp8 writes, so every input bit is that of the pull kernel). Each warp adds 1
 * to the block's pull count once its part has landed (release); a G ticket's rows are ready at
 * 2 * MLP_PIECES, which the claiming thread waits for (acquire) as it waits for a D tile's rows.
 * The pullers depend on nothing but the peers' staged x, so the launch still completes with any
 * number of resident CTAs as long as one of them pulls. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/move/fused_move.cuh"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/fp8_wide.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

#define MLP_QSLOTS 2
/* a queue entry: int4 {kind, expert, m_tile, n_tile} */
enum { MLP_G = 0, MLP_D = 1, MLP_END = 2, MLP_NONE = 3 /* a consumer's look found none */ };

/* the dispatch inside the launch */
#define MLP_PIECE_ROWS 8                        /* rows per pull ticket                       */
#define MLP_PIECES (F8W_BM / MLP_PIECE_ROWS)    /* pull tickets per row block                 */
#define MLP_PULL_BUFS 4                         /* bulk-copy buffers of warp 2's lane 0       */
#define MLP_PULL_BUF 3584                       /* bytes per buffer (hidden % 256 == 0 rows   */
#define MLP_PULL_SMEM (MLP_PULL_BUFS * MLP_PULL_BUF) /* split in whole multiples of 256)      */
#define MLP_SCALE_ROWS 4                        /* rows whose scales warp 3 loads at once     */
#define MLP_BAR_PULL 6                          /* named barrier of the two pulling warps     */

typedef struct {
  int32_t *sync;    /* [0] G claims, [1] D claims, [2] pull claims (zeroed per launch)        */
  int32_t *d_count; /* [b]: row block b's gate+up count (2 per G tile when its rows are out)  */
  int32_t *p_count; /* [b]: row block b's pull count (2 per piece landed); NULL: no pull      */
  int32_t *err;     /* the sticky error word                                                  */
  int64_t timeout_ns;
} mlp_sync;

typedef struct {
  char *const *peer_base; /* every rank's symmetric base, mapped here                         */
  size_t x8_off, s_off;   /* there: the staged codes [T, H] e4m3 and scales [T, H / 128] fp32  */
  const int32_t *row_src; /* the schedule's sources of the rows, -1 for padding               */
  int64_t tokens;
  int top_k;
  int ctas;               /* CTAs whose spare warps pull (blockIdx.x < ctas); 0: no pull      */
  uint8_t *x8;            /* the rows' codes [m_total, hidden] (the gate+up A operand)         */
  float *xs;              /* their scales [hidden / 128][m_pad]                               */
} mlp_pull;

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

/* The next tile for this CTA (see the file comment): a G ticket while there are any (with
 * d_early, a D ticket first whenever the next D tile's rows are ready), then D tickets, each
 * followed by a wait for its rows. Tickets are fetch-and-adds, so CTAs never retry each other's
 * claims; an early D ticket may overtake the ready rows by the CTAs that took one at the same
 * moment, whose G tiles the others then claim. MLP_END when both ran out, or on a timeout or a
 * fault in the error word. */
__device__ __forceinline__ int4 mlp_claim(const f8_params &pg, const f8_params &pd,
                                          const mlp_sync &q, const int32_t *pre_g,
                                          const int32_t *pre_d, int E, mlp_claimer &cl) {
  const int ng = pre_g[E], nd = pre_d[E], want = 2 * pg.n_tiles;
  for (;;) {
    const int dt = *(volatile const int32_t *)(q.sync + 1);
    if (dt < nd) {
      const int32_t *count;
      mlp_d_tile(pd, q, pre_d, E, dt, cl, &count);
      if (cl.g_done || (pg.d_early && cm_load_acquire(count) >= want)) {
        const int d = atomicAdd(q.sync + 1, 1);
        if (d < nd) {
          const gg_tile t = mlp_d_tile(pd, q, pre_d, E, d, cl, &count);
          if (!cm_wait_flag(count, want, q.err, q.timeout_ns)) return make_int4(MLP_END, 0, 0, 0);
          cm_fence_proxy_global(); /* the rows' codes and scales, before the TMA loads */
          return mlp_entry(MLP_D, t);
        }
        continue; /* D ran out meanwhile */
      }
    }
    if (!cl.g_done) {
      const int g = atomicAdd(q.sync, 1);
      if (g < ng) {
        const gg_tile t = gg_decode_m_grouped_from(g, pre_g, E, pg.n_tiles, pg.group_m,
                                                   &cl.g_cursor);
        if (q.p_count) { /* the dispatch in this launch: wait for the tile's rows */
          if (!cm_wait_flag(q.p_count + pg.offset[t.expert] / F8W_BM + t.m_tile, 2 * MLP_PIECES,
                            q.err, q.timeout_ns))
            return make_int4(MLP_END, 0, 0, 0);
          cm_fence_proxy_global(); /* the rows' codes and scales, before the TMA loads */
        }
        return mlp_entry(MLP_G, t);
      }
      cl.g_done = true;
      continue;
    }
    if (dt >= nd) return make_int4(MLP_END, 0, 0, 0);
  }
}

/* ---- the dispatch inside the launch --------------------------------------------------------- */

/* Pull ticket p: the first row of its piece (row block p / MLP_PIECES in the gate+up tiles'
 * order of row blocks); *cursor as in gg_decode_row_tile_from. */
__device__ __forceinline__ int64_t mlp_piece_row(const f8_params &pg, const int32_t *pre_g, int E,
                                                 int p, int *cursor) {
  const gg_tile t = gg_decode_row_tile_from(p / MLP_PIECES, pre_g, E, pg.n_tiles, cursor);
  return (int64_t)pg.offset[t.expert] + (int64_t)t.m_tile * F8W_BM +
         (p % MLP_PIECES) * MLP_PIECE_ROWS;
}

/* The rank row's source token lives on (-1 for a padding row), and in *token the token's row in
 * that rank's staged x: schedule_core.h's mok_sched_slot_rank / _token in int32 arithmetic (a
 * slot is the int32 (rank * T + t) * k + j), which the pulling warps' 40 registers need (the
 * int64 decoding spills 24 more bytes there). */
__device__ __forceinline__ int mlp_src_rank(const mlp_pull &pl, int64_t row, int *token) {
  const int32_t slot = pl.row_src[row];
  if (slot < 0) return -1;
  const int32_t tk = (int32_t)pl.tokens * pl.top_k, rank = slot / tk;
  *token = (slot - rank * tk) / pl.top_k;
  return rank;
}

/* The source row of row's codes (NULL for a padding row). */
__device__ __forceinline__ const uint8_t *mlp_src_codes(const mlp_pull &pl, int64_t hidden,
                                                        int64_t row) {
  int t = 0;
  const int rank = mlp_src_rank(pl, row, &t);
  if (rank < 0) return nullptr;
  return (const uint8_t *)pl.peer_base[rank] + pl.x8_off + (int64_t)t * hidden;
}

/* Warp 2, lane 0: the piece's real rows' codes, item i = (row i / per_row, chunk i % per_row) in
 * buffer i % MLP_PULL_BUFS; each buffer's next load is issued as soon as its store has read it,
 * so MLP_PULL_BUFS loads are in flight. Returns once the stores are complete. */
__device__ __forceinline__ void mlp_pull_codes(const mlp_pull &pl, int64_t hidden, int64_t row0,
                                               uint32_t buf0, uint32_t bar0, uint32_t &phases) {
  const int per_row = (int)((hidden + MLP_PULL_BUF - 1) / MLP_PULL_BUF);
  const int items = MLP_PIECE_ROWS * per_row;
  for (int i = 0; i < items + MLP_PULL_BUFS; ++i) {
    const int b = i % MLP_PULL_BUFS;
    const uint32_t buf = buf0 + b * MLP_PULL_BUF, bar = bar0 + 8 * b;
    if (i >= MLP_PULL_BUFS) { /* item i - BUFS: landed in buffer b; store it */
      const int j = i - MLP_PULL_BUFS;
      const int64_t row = row0 + j / per_row, off = (int64_t)(j % per_row) * MLP_PULL_BUF;
      if (pl.row_src[row] >= 0) {
        const uint32_t n = (uint32_t)(hidden - off < MLP_PULL_BUF ? hidden - off : MLP_PULL_BUF);
        mbar_wait(bar, (phases >> b) & 1);
        phases ^= 1u << b;
        bulk_store_1d(pl.x8 + row * hidden + off, buf, n);
        bulk_commit();
        bulk_wait_read0(); /* buffer b is free again */
      }
    }
    if (i < items) { /* item i: load into buffer b */
      const int64_t row = row0 + i / per_row, off = (int64_t)(i % per_row) * MLP_PULL_BUF;
      const uint8_t *src = mlp_src_codes(pl, hidden, row);
      if (src) {
        const uint32_t n = (uint32_t)(hidden - off < MLP_PULL_BUF ? hidden - off : MLP_PULL_BUF);
        mbar_arrive_expect_tx(bar, n);
        bulk_load_1d(buf, src + off, n, bar);
      }
    }
  }
  bulk_wait0(); /* every store of the piece is complete */
}

/* Warp 3: the piece's scales, MLP_SCALE_ROWS rows at a time (their sources first, then the
 * lanes' loads of all their K blocks in flight: kb = lane, lane + 32), and its padding rows: zero
 * codes, scale 1. */
__device__ __forceinline__ void mlp_pull_scales(const mlp_pull &pl, int64_t hidden, int m_pad,
                                                int64_t row0, int lane) {
  const int kbs = (int)(hidden / 128);
  for (int r0 = 0; r0 < MLP_PIECE_ROWS; r0 += MLP_SCALE_ROWS) {
    const float *src[MLP_SCALE_ROWS];
#pragma unroll
    for (int u = 0; u < MLP_SCALE_ROWS; ++u) {
      int t = 0;
      const int rank = mlp_src_rank(pl, row0 + r0 + u, &t);
      src[u] = rank < 0 ? nullptr
                        : (const float *)(pl.peer_base[rank] + pl.s_off) + (int64_t)t * kbs;
    }
    for (int kb0 = 0; kb0 < kbs; kb0 += 64) {
      float v[MLP_SCALE_ROWS][2];
#pragma unroll
      for (int u = 0; u < MLP_SCALE_ROWS; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kb = kb0 + lane + 32 * h;
          v[u][h] = src[u] && kb < kbs ? src[u][kb] : 1.0f;
        }
#pragma unroll
      for (int u = 0; u < MLP_SCALE_ROWS; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kb = kb0 + lane + 32 * h;
          if (kb < kbs) pl.xs[(int64_t)kb * m_pad + row0 + r0 + u] = v[u][h];
        }
    }
#pragma unroll
    for (int u = 0; u < MLP_SCALE_ROWS; ++u)
      if (!src[u]) {
        uint4 *dst = (uint4 *)(pl.x8 + (row0 + r0 + u) * hidden);
        for (int64_t c = lane; c < hidden / 16; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
      }
  }
}

/* Warps 2 and 3 of a pulling CTA: pull tickets until none is left (or the error word is set).
 * Pieces are 8 rows: at the start every CTA takes one, so 16 CTAs pull each of the first row
 * blocks and they land after a piece's few round trips. Warp 2's lane 0 claims and passes the
 * ticket to warp 3 through slot[] (two entries, by parity, each read before the next barrier
 * lets warp 2 write it again). */
__device__ __forceinline__ void mlp_pull_rows(const mlp_pull &pl, const mlp_sync &q,
                                              const f8_params &pg, const int32_t *pre_g, int E,
                                              int64_t hidden, uint8_t *bufs, uint64_t *bars,
                                              int *slot, int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  const int np = pre_g[E] / pg.n_tiles * MLP_PIECES;
  const uint32_t buf0 = smem_u32(bufs), bar0 = smem_u32(bars);
  if (warp == 2 && lane == 0) {
    for (int b = 0; b < MLP_PULL_BUFS; ++b) mbar_init(bar0 + 8 * b, 1);
    fence_mbar_init();
  }
  uint32_t phases = 0;
  int cursor = 0;
  for (int i = 0;; ++i) {
    if (warp == 2 && lane == 0) slot[i & 1] = cm_error(q.err) ? np : atomicAdd(q.sync + 2, 1);
    named_bar_sync(MLP_BAR_PULL, 64);
    const int p = slot[i & 1];
    if (p >= np) return;
    const int64_t row0 = mlp_piece_row(pg, pre_g, E, p, &cursor);
    int32_t *count = q.p_count + row0 / F8W_BM;
    if (warp == 2) {
      if (lane == 0) {
        mlp_pull_codes(pl, hidden, row0, buf0, bar0, phases);
        cm_fence_proxy_global(); /* the bulk stores, before the count */
        cm_add_release(count, 1);
      }
    } else {
      mlp_pull_scales(pl, hidden, pg.m_pad, row0, lane);
      __threadfence();
      __syncwarp();
      if (lane == 0) cm_add_release(count, 1);
    }
  }
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
  f8w_consume_tile<MODE, NMODE, 1>(p, pn, MODE == F8_SWIGLU ? tm_pre : tm_c,
                                   MODE == F8_SWIGLU ? tm_q : tm_c, c, t, 0,
                                   f8w_scales_at<MODE>(p, t), next_ws, false, s, y, signal);
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
                      const f8_params pd, const mlp_sync q, const mlp_pull pl) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * F8W_STAGES + 2 * MLP_QSLOTS];
  __shared__ int32_t pre_g[F8_MAX_EXPERTS + 1], pre_d[F8_MAX_EXPERTS + 1];
  __shared__ int4 queue[MLP_QSLOTS];
  __shared__ int peeked[2][2]; /* a consumer warpgroup's look at the queue, by tile parity */
  __shared__ __align__(8) uint64_t pull_bars[MLP_PULL_BUFS];
  __shared__ int pull_slot[2];

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
  if (tid >= 64 && tid < 96) gg_unit_prefix(pg.count, E, F8W_BM, pg.n_tiles, 0, pre_g, tid & 31);
  if (tid >= 96 && tid < 128) gg_unit_prefix(pd.count, E, F8W_BM, pd.n_tiles, 0, pre_d, tid & 31);
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
          f8w_produce_tile<F8_SWIGLU, 1>(pg, &tm_x, &tm_wg, &tm_wu, t, 0, smem_base, full0, empty0,
                                         r);
        else
          f8w_produce_tile<F8_FWD, 1>(pd, &tm_qa, &tm_wd, &tm_wd, t, 0, smem_base, full0, empty0,
                                      r);
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
    } else if (tid >= 64 && (int)blockIdx.x < pl.ctas) { /* warps 2 and 3: the dispatch */
      mlp_pull_rows(pl, q, pg, pre_g, E, (int64_t)pd.n_tiles * 256, smem + F8W_SMEM, pull_bars,
                    pull_slot, tid);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const f8w_consumer c = f8w_consumer_init(smem_base, full0, empty0, tid, pg.turns != 0);
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
    if (c.turns && c.cwg == 0 && !s.first) named_bar_sync(F8W_BAR_TURN, 256);
    if (c.wtid == 0) bulk_wait0(); /* the last TMA stores are done */
    if (pd.push) __threadfence_system(); /* the pushed rows, before the cross-rank barrier */
  }
}

/* ---- host ------------------------------------------------------------------------------------ */

extern "C" int64_t mok_gg_fp8_mlp_sync_ints(int64_t m_total) {
  return 3 + 2 * ((m_total + F8W_BM - 1) / F8W_BM);
}

/* What one launch covers: down's columns in 256s, every expert's prefix in shared memory. */
extern "C" int mok_gg_fp8_mlp_supported(int num_experts, int64_t hidden) {
  return hidden % 256 == 0 && num_experts <= F8_MAX_EXPERTS;
}

extern "C" mok_status mok_gg_fp8_mlp_forward(const mok_gg_fp8_mlp *m, cudaStream_t stream) {
  if (!m || !m->x || !m->x_scales || !m->w_gate || !m->w_gate_scales || !m->w_up ||
      !m->w_up_scales || !m->w_down || !m->w_down_scales || !m->q_act || !m->q_scales ||
      !m->sync || !m->err || (!m->out && !m->push))
    return MOK_ERR_INVALID_ARGUMENT;
  const int64_t mt = m->m_total, inter = m->inter, hidden = m->hidden;
  const int E = m->num_experts;
  /* both products: gate+up (inter columns over hidden), down (hidden over inter) */
  GG_TRY(f8_check(m->expert_offset, m->expert_count, E, mt, inter, hidden));
  GG_TRY(f8_check(m->expert_offset, m->expert_count, E, mt, hidden, inter));
  if (((uintptr_t)m->x_scales & 15) || ((uintptr_t)m->q_act & 15) ||
      ((uintptr_t)m->q_scales & 15))
    return MOK_ERR_MISALIGNED;
  if (m->use_limit && !(m->limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  if (m->push && !gg_move_ok(m->push, 1)) return MOK_ERR_INVALID_ARGUMENT;
  if (m->pull && (!gg_move_ok(m->pull, 0) || m->pull->ctas < 0 ||
                  (m->pull->peer_off & 15) || (m->pull_scales_off & 3)))
    return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gg_fp8_mlp_supported(E, hidden)) return MOK_ERR_NOT_SUPPORTED;

  CUtensorMap tx, tg, tu, tpre, tq, tqa, td, tc;
  GG_TRY(gg_make_tmap_2d(&tx, m->x, mt, hidden, 1, F8W_BM, 128));
  GG_TRY(gg_make_tmap_2d(&tg, m->w_gate, (int64_t)E * inter, hidden, 1, 64, 128));
  GG_TRY(gg_make_tmap_2d(&tu, m->w_up, (int64_t)E * inter, hidden, 1, 64, 128));
  GG_TRY(gg_make_tmap_2d(&tq, m->q_act, mt, inter, 1, 64, 128));
  GG_TRY(gg_make_tmap_2d(&tqa, m->q_act, mt, inter, 1, F8W_BM, 128));
  GG_TRY(gg_make_tmap_2d(&td, m->w_down, (int64_t)E * hidden, inter, 1, 64, 128));
  if (m->preact) GG_TRY(gg_make_tmap_2d(&tpre, m->preact, mt, 2 * inter, 2, 64, 64));
  else tpre = tq;
  if (m->out) GG_TRY(gg_make_tmap_2d(&tc, m->out, mt, hidden, 2, 64, 64));
  else tc = tq; /* push only: the epilogue stages the rows and stores nothing locally */

  const int flags = gg_tuning_flags();
  f8_params pg = {};
  pg.offset = m->expert_offset;
  pg.count = m->expert_count;
  pg.num_experts = E;
  pg.m_pad = (int)MOK_FP8_SCALE_ROWS(mt);
  pg.group_m = 16;
  pg.turns = !(flags & 512);
  pg.direct = (flags & 1024) != 0;
  pg.d_early = (flags & 4096) != 0;
  f8_params pd = pg;
  pg.a_scales = m->x_scales;
  pg.b_scales0 = m->w_gate_scales;
  pg.b_scales1 = m->w_up_scales;
  pg.c1 = (uint16_t *)m->preact;
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
  pd.c0 = pd.c1 = (uint16_t *)m->out;
  pd.n_tiles = (int)(hidden / 256);
  pd.k_blocks = (int)(inter / F8_BK);
  pd.b_rows = pd.n_out = (int)hidden;
  if (m->push) {
    pd.push = 1;
    pd.move = *m->push;
    pd.move_m_total = mt;
  }
  const int64_t blocks = (mt + F8W_BM - 1) / F8W_BM;
  const mlp_sync q = {m->sync, m->sync + 3, m->pull ? m->sync + 3 + blocks : NULL, m->err,
                      m->timeout_ns};

  static int max_ctas = 0; /* co-resident CTAs, found once */
  if (!max_ctas)
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_mlp_kernel, F8W_THREADS,
                              F8W_SMEM + MLP_PULL_SMEM, 1, &max_ctas));
  const int64_t units = blocks * (pg.n_tiles + pd.n_tiles);
  const int cap = gg_ctas_cap(max_ctas, 1);
  const int grid = units < cap ? (int)units : cap;
  mlp_pull pl = {};
  if (m->pull) {
    pl.peer_base = m->pull->peer_base;
    pl.x8_off = m->pull->peer_off;
    pl.s_off = m->pull_scales_off;
    pl.row_src = m->pull->row_src;
    pl.tokens = m->pull->tokens;
    pl.top_k = m->pull->top_k;
    pl.ctas = m->pull->ctas > 0 && m->pull->ctas < grid ? m->pull->ctas : grid;
    pl.x8 = (uint8_t *)m->x;
    pl.xs = (float *)m->x_scales;
  }
  GG_CUDA(cudaMemsetAsync(m->sync, 0, (size_t)mok_gg_fp8_mlp_sync_ints(mt) * 4, stream));
  gg_fp8_mlp_kernel<<<grid, F8W_THREADS, F8W_SMEM + MLP_PULL_SMEM, stream>>>(
      tx, tg, tu, tpre, tq, tqa, td, tc, pg, pd, q, pl);
  GG_LAUNCHED();
  return MOK_SUCCESS;
}
