/* gemm_common.cuh — what the BF16 and FP8 grouped GEMM kernels share besides the tile scheduler
 * (tile_scheduler.h): the per-CTA unit prefix over experts, a consumer warp's release of a stage,
 * the stmatrix + TMA-store epilogue pass and its push to the source ranks, and the host side of a
 * persistent launch in clusters of CL CTAs (the launch options of gemm.h, the grid cap, the
 * co-resident CTAs). Included by the .cu files of kernels/gemm. */
#ifndef MOK_GEMM_COMMON_CUH
#define MOK_GEMM_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include "include/mok.h"
#include "kernels/common/bf16_clamp_round.h"
#include "kernels/common/launch_error.h"
#include "kernels/common/ptx.cuh"
#include "kernels/move/fused_move.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/gemm/tmap.h"
#include "schedule/schedule_core.h"

/* One warp's step of a unit prefix over experts [base, base + 32): lane l's expert base + l has
 * t units; writes its prefix entry (run: the units of the experts before base) and returns run
 * plus the 32 experts' units. */
__device__ __forceinline__ int gg_prefix_step(int t, int base, int E, int run, int32_t *prefix,
                                              int lane) {
  int incl = t;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (base + lane < E) prefix[base + lane] = run + incl - t;
  return run + __shfl_sync(0xffffffffu, incl, 31);
}

/* The experts' visiting order (tile_scheduler.h gg_order_rank), order[position] = expert, by the
 * CTA's first `threads` threads (whole warps; E <= 256): each lane ranks one expert against the
 * counts its warp reads 32 at a time and passes around by shuffles. The caller syncs the CTA
 * before the order is read. Not inlined: inlined, its loops made ptxas spill the weight
 * gradient's consumer registers. */
static __device__ __noinline__ void gg_expert_order(const int32_t *count, int E, uint8_t *order,
                                                int tid, int threads) {
  const int lane = tid & 31;
  for (int i0 = tid - lane; i0 < E; i0 += threads) {
    const int i = i0 + lane;
    const int ci = i < E ? max(count[i], 0) : -1;
    int r = 0;
    for (int b = 0; b < E; b += 32) {
      const int mine = b + lane < E ? max(count[b + lane], 0) : -1;
#pragma unroll 8
      for (int q = 0; q < 32; ++q) {
        const int cj = __shfl_sync(0xffffffffu, mine, q);
        r += (cj > ci) | ((cj == ci) & (b + q < i));
      }
    }
    if (i < E) order[r] = (uint8_t)i;
  }
}

/* One warp: prefix[l] = work units of experts before l, prefix[E] = all units; a warp scan, 32
 * experts at a time. Row-grouped calls (whole 0): ceil(count / unit_rows) row units times n_tiles
 * per expert (negative counts count as 0). The FP8 weight gradient (whole > 0): `whole` units
 * (its dW grid) per expert with a count >= 0, none for one at count -1 (outside a ring view's
 * macrobatch), over the experts in the visiting order (order[position] = expert; NULL: index
 * order). */
__device__ __forceinline__ void gg_unit_prefix(const int32_t *count, const uint8_t *order, int E,
                                               int unit_rows, int n_tiles, int whole,
                                               int32_t *prefix, int lane) {
  int run = 0;
  for (int base = 0; base < E; base += 32) {
    const int l = base + lane;
    const int c = l < E ? count[order ? order[l] : l] : 0;
    const int t = whole > 0 ? (l < E && c >= 0 ? whole : 0)
                            : gg_ceil_div(c > 0 ? c : 0, unit_rows) * n_tiles;
    run = gg_prefix_step(t, base, E, run, prefix, lane);
  }
  if (lane == 0) prefix[E] = run;
}

/* One warp: the prefix of the weight gradient's chunked units (tile_scheduler.h,
 * gg_k_chunk_units), as gg_unit_prefix, over the experts in the visiting order (order[position]
 * = expert, gg_expert_order). */
__device__ __forceinline__ void gg_unit_prefix_k_chunks(const int32_t *count, const uint8_t *order,
                                                        int E, int max_rows, int m_tiles,
                                                        int n_tiles, int chunk, int big,
                                                        int32_t *prefix, int lane) {
  int run = 0;
  for (int base = 0; base < E; base += 32) {
    const int l = base + lane;
    const int t =
        l < E ? gg_k_chunk_units(count[order[l]], max_rows, m_tiles, n_tiles, chunk, big) : 0;
    run = gg_prefix_step(t, base, E, run, prefix, lane);
  }
  if (lane == 0) prefix[E] = run;
}

/* One warp: the cluster pairs' prefixes (tile_scheduler.h, gg_build_prefix_pairs), each [E + 1],
 * for a row-grouped call of tile_m-row tiles and n_tiles column tiles. */
__device__ __forceinline__ void gg_unit_prefix_pairs(const int32_t *count, int E, int tile_m,
                                                     int n_tiles, int32_t *pre_pair,
                                                     int32_t *pre_left, int lane) {
  int run_p = 0, run_q = 0;
  for (int base = 0; base < E; base += 32) {
    const int l = base + lane;
    const int c = l < E ? count[l] : 0;
    const int m = gg_ceil_div(c > 0 ? c : 0, tile_m);
    const int tp = m / 2 * n_tiles, tq = m % 2 * n_tiles;
    int ip = tp, iq = tq;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int yp = __shfl_up_sync(0xffffffffu, ip, o), yq = __shfl_up_sync(0xffffffffu, iq, o);
      if (lane >= o) { ip += yp; iq += yq; }
    }
    if (l < E) {
      pre_pair[l] = run_p + ip - tp;
      pre_left[l] = run_q + iq - tq;
    }
    run_p += __shfl_sync(0xffffffffu, ip, 31);
    run_q += __shfl_sync(0xffffffffu, iq, 31);
  }
  if (lane == 0) {
    pre_pair[E] = run_p;
    pre_left[E] = run_q;
  }
}

/* A row-grouped kernel's units in clusters of CL (1 or 2): one warp builds the prefix (CL 1:
 * gg_unit_prefix over tile_m-row tiles; CL 2: tile_scheduler.h's pairs and leftovers, pre_left
 * [E + 1] too); gg_unit_walk gives a cluster its units; gg_unit_tile gives unit u's tile for CTA
 * rank of its cluster and *kind, how its B tile is loaded (GG_PAIR_SHARED by multicast,
 * GG_PAIR_OWN alone, GG_PAIR_NONE loaded and ignored). */
template <int CL>
__device__ __forceinline__ void gg_unit_prefix_rows(const int32_t *count, int E, int tile_m,
                                                    int n_tiles, int32_t *prefix,
                                                    int32_t *pre_left, int lane) {
  if (CL == 1) gg_unit_prefix(count, NULL, E, tile_m, n_tiles, 0, prefix, lane);
  else gg_unit_prefix_pairs(count, E, tile_m, n_tiles, prefix, pre_left, lane);
}

/* The leftover units of a CL 2 prefix (two leftover tiles to a unit); none for CL 1 */
template <int CL>
__device__ __forceinline__ int gg_left_units(const int32_t *pre_left, int E) {
  return CL > 1 ? (pre_left[E] + 1) / 2 : 0;
}

/* Cluster unit0 of ustride's walk over the units (tile_scheduler.h, gg_pair_walk): u = *first,
 * += *step, while u < *end. In cluster pairs with apart set the leftover units run on clusters
 * of their own (gemm_plan.h, mok_gg_bf16_leftover_clusters); else every cluster walks every unit
 * in order, the leftovers last (what a kernel whose rows arrive in order needs). Returns whether
 * the leftovers run apart (gg_weight_read_once's apart). */
template <int CL>
__device__ __forceinline__ int gg_unit_walk(int unit0, int ustride, const int32_t *prefix,
                                            const int32_t *pre_left, int E, int apart, int *first,
                                            int *step, int *end) {
  const int n_left = gg_left_units<CL>(pre_left, E);
  const int r = CL > 1 && apart ? mok_gg_bf16_leftover_clusters(prefix[E], n_left, ustride) : 0;
  gg_pair_walk(unit0, ustride, r, prefix[E], n_left, first, step, end);
  return r > 0;
}

template <int CL>
__device__ __forceinline__ gg_tile gg_unit_tile(int u, int rank, const int32_t *prefix,
                                                const int32_t *pre_left, int E, int n_tiles,
                                                int group_m, int32_t *kind) {
  if (CL == 1) {
    *kind = GG_PAIR_OWN;
    return gg_decode_m_grouped(u, prefix, E, n_tiles, group_m);
  }
  return gg_decode_pair(u, rank, prefix, pre_left, E, n_tiles, group_m, kind);
}

/* Thread 0 of a CTA: the stage ring's barriers, full (one arrival, the producer's expect_tx) and
 * empty (`releases` arrivals), after checking the 1024-byte base the swizzle atoms need. */
__device__ __forceinline__ void gg_ring_init(uint32_t smem_base, uint32_t full0, uint32_t empty0,
                                             int stages, int releases) {
  if (smem_base & 1023) __trap();
  for (int s = 0; s < stages; ++s) {
    mbar_init(full0 + 8 * s, 1);
    mbar_init(empty0 + 8 * s, releases);
  }
}

/* The producer of a cluster pair, after its last load: stays until both CTAs' consumers have
 * released every stage (the peer still arrives on this CTA's barriers, and this CTA's multicasts
 * land in the peer). stage, phase: the producer's ring position after its last load. */
template <int CL>
__device__ __forceinline__ void gg_producer_drain(uint32_t empty0, int stages, int stage,
                                                  uint32_t phase) {
  if (CL > 1) {
    for (int i = 0; i < stages; ++i) {
      mbar_wait(empty0 + 8 * stage, phase ^ 1);
      if (++stage == stages) { stage = 0; phase ^= 1; }
    }
  }
}

/* SwiGLU on a fragment whose gate values are acc[0, N) and up values acc[N, 2N) (same rows and
 * columns): acc[i] = silu(min(g, L)) * clamp(u, -L, L), or silu(g) * u without the limit. */
template <int N>
__device__ __forceinline__ void gg_swiglu(float *acc, int use_limit, float limit) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float g = acc[i], u = acc[i + N];
    if (use_limit) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    acc[i] = __fdividef(g, 1.0f + __expf(-g)) * u;
  }
}

/* Consumer warp release of a stage: one arrival per warp, on every CTA of the cluster whose
 * producer may write into this CTA's copy of the stage. */
template <int CL>
__device__ __forceinline__ void gg_release(uint32_t empty, int lane) {
  if (lane == 0) {
    if (CL == 1) {
      mbar_arrive(empty);
    } else {
#pragma unroll
      for (int c = 0; c < CL; ++c) mbar_arrive_cluster(empty, c);
    }
  }
}

/* ---- claimed units: cluster pairs taking their units at run time (tile_scheduler.h,
 * gg_claim_step) ---- */
/* Rank 0's producer thread draws the tickets from the caller's counters (mok_gg_launch.tickets:
 * [0] the pair units', [1] the leftover units', [2] the clusters finished; zero at a launch's
 * start) and hands each unit to rank 1's through rank 1's shared memory (GG_HAND slots, a full
 * and an empty barrier each, cluster-scope release and acquire). Each producer writes a unit's
 * index beside the stage its first K block lands in, for its consumers, and ends its walk with a
 * stage of no loads whose index is -1. The last cluster to finish zeroes the counters, so the
 * next launch on the stream finds them so. Which cluster computes a unit changes none of its
 * bits. */
#define GG_HAND 2
typedef struct {
  int32_t *tickets;
  gg_claimer c;
  int hs;       /* the handoff's slot */
  uint32_t hph; /* and its phase */
} gg_claims;

/* A NULL launch's counters, one set per kernel file, for callers whose calls never overlap */
static __device__ int32_t gg_own_tickets[MOK_GG_TICKET_INTS];

static inline mok_status gg_claim_tickets(const mok_gg_launch *l, int32_t **tickets) {
  *tickets = l->tickets;
  if (!*tickets) MOK_KCUDA(cudaGetSymbolAddress((void **)tickets, gg_own_tickets));
  return MOK_SUCCESS;
}

/* Thread 0, before the cluster's first sync: the handoff's barriers (hand_bars[2 * GG_HAND]:
 * the full ones, then the empty ones), one arrival each */
__device__ __forceinline__ void gg_claim_bars_init(uint64_t *hand_bars) {
  for (int i = 0; i < 2 * GG_HAND; ++i) mbar_init(smem_u32(&hand_bars[i]), 1);
}

/* The producer's claims: cluster unit0 of `clusters` prefers the leftovers if among the first
 * that gemm_plan.h's split gives them. The kernel passes the rest at each call (the unit counts
 * from its prefix in shared memory), so that the producer's few registers hold only this. */
__device__ __forceinline__ gg_claims gg_claims_make(int32_t *tickets, int unit0, int clusters,
                                                    int n_pair, int n_left) {
  gg_claims w;
  w.tickets = tickets;
  w.c = gg_claimer_make(unit0 < mok_gg_bf16_leftover_clusters(n_pair, n_left, clusters));
  w.hs = 0;
  w.hph = 0;
  return w;
}

/* Rank 0: draws the next ticket (issued a few K blocks before the unit ahead ends, to hide its
 * latency) */
__device__ __forceinline__ void gg_claim_issue(gg_claims &w, int rank) {
  if (rank == 0) w.c.ticket = atomicAdd(w.tickets + w.c.q, 1);
}

/* The cluster's next unit (-1: the end): rank 0 resolves its issued ticket and hands the unit to
 * rank 1 through slot hs (once rank 1 took the slot's last), rank 1 takes it from there. */
__device__ __forceinline__ int gg_claim_next(gg_claims &w, int rank, int n_pair, int n_left,
                                             volatile int32_t *hand_unit, uint64_t *hand_bars) {
  const uint32_t full = smem_u32(&hand_bars[w.hs]), empty = smem_u32(&hand_bars[GG_HAND + w.hs]);
  int u;
  if (rank == 0) {
    mbar_wait_acquire_cluster(empty, w.hph ^ 1);
    while ((u = gg_claim_step(&w.c, n_pair, n_left)) == GG_CLAIM_AGAIN) gg_claim_issue(w, 0);
    st_cluster_u32(smem_u32((const void *)&hand_unit[w.hs]), 1, (uint32_t)u);
    mbar_arrive_release_cluster(full, 1);
  } else {
    mbar_wait_acquire_cluster(full, w.hph);
    u = hand_unit[w.hs];
    mbar_arrive_release_cluster(empty, 0);
  }
  if (++w.hs == GG_HAND) { w.hs = 0; w.hph ^= 1; }
  return u;
}

/* The producer after its walk (stage, phase: its ring position): the end as a stage with no
 * loads, which the consumers release as any. */
__device__ __forceinline__ void gg_claim_end_stage(uint32_t full0, uint32_t empty0,
                                                   int32_t *stage_unit, int stages, int &stage,
                                                   uint32_t &phase) {
  mbar_wait(empty0 + 8 * stage, phase ^ 1);
  stage_unit[stage] = -1;
  mbar_arrive(full0 + 8 * stage);
  if (++stage == stages) { stage = 0; phase ^= 1; }
}

/* Rank 0's producer after gg_producer_drain: rank 1 took every handoff (its arrivals land here
 * before this CTA leaves); then the last of `clusters` to finish zeroes the counters. */
__device__ __forceinline__ void gg_claim_finish(gg_claims &w, int rank, int clusters,
                                                uint64_t *hand_bars) {
  if (rank != 0) return;
  for (int i = 0; i < GG_HAND; ++i) {
    mbar_wait_acquire_cluster(smem_u32(&hand_bars[GG_HAND + w.hs]), w.hph ^ 1);
    if (++w.hs == GG_HAND) { w.hs = 0; w.hph ^= 1; }
  }
  __threadfence();
  if (atomicAdd(w.tickets + 2, 1) == clusters - 1) {
    w.tickets[0] = 0;
    w.tickets[1] = 0;
    w.tickets[2] = 0;
  }
}

/* A consumer at the stage the next tile starts at: its unit, or -1 at the walk's end (the stage
 * then released) */
template <int CL>
__device__ __forceinline__ int gg_claimed_unit(uint32_t full0, uint32_t empty0,
                                               const int32_t *stage_unit, int stage,
                                               uint32_t phase, int lane) {
  mbar_wait(full0 + 8 * stage, phase);
  const int u = *(const volatile int32_t *)&stage_unit[stage];
  if (u < 0) gg_release<CL>(empty0 + 8 * stage, lane);
  return u;
}

/* ---- epilogue: one pass stores 64 rows x 64 * NBOX columns of a consumer's accumulators ---- */
/* Columns [N8B * 8, N8B * 8 + 64 * NBOX) of the warpgroup's 64-row fragment go through stmatrix
 * into NBOX swizzled 64x64 bf16 boxes (the staging buffer at stage), then one thread stores them
 * with TMA at (col0, row0) (map NULL: staged only, for a push); boxes from col_end on are not
 * stored. clamp: round to bf16 without
 * crossing the SwiGLU limit (the pre-activations backward re-reads; bf16_clamp_round.h).
 * wait_prev false: the buffer is one no store in flight reads (the caller waited already). */
template <int N8B, int NBOX>
__device__ __forceinline__ void gg_store_pass(const float *acc, uint32_t stage, int wtid,
                                              const CUtensorMap *map, int col0, int col_end,
                                              int row0, int bar_id, bool clamp = false,
                                              mok_clamp_round mk = mok_clamp_round{},
                                              bool wait_prev = true) {
  if (col0 >= col_end) return; /* the whole pass lies past the tensor's last column */
  if (wtid == 0 && wait_prev) bulk_wait_read0(); /* the previous pass has left the staging buffer */
  named_bar_sync(bar_id, 128);
  const int warp = wtid >> 5, lane = wtid & 31;
  const int q = lane >> 3;
  const int row = warp * 16 + (q & 1) * 8 + (lane & 7);
#pragma unroll
  for (int j = 0; j < 4 * NBOX; ++j) {
    const int n8 = N8B + 2 * j;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = clamp ? mok_cr_round(acc[n8 * 4 + i], mk) : acc[n8 * 4 + i];
    const uint32_t r0 = pack_bf16x2(v[0], v[1]), r1 = pack_bf16x2(v[2], v[3]);
    const uint32_t r2 = pack_bf16x2(v[4], v[5]), r3 = pack_bf16x2(v[6], v[7]);
    const int chunk = 2 * j + (q >> 1); /* 16-byte chunk among the pass's columns */
    const int box = chunk >> 3, c = chunk & 7;
    stmatrix_x4(stage + box * 8192 + row * 128 + ((c ^ (row & 7)) << 4), r0, r1, r2, r3);
  }
  fence_proxy_async_smem();
  named_bar_sync(bar_id, 128);
  if (wtid == 0 && map) {
    tma_store_2d(map, stage, col0, row0);
    if (NBOX > 1 && col0 + 64 < col_end) tma_store_2d(map, stage + 8192, col0 + 64, row0);
    bulk_commit();
  }
}

/* Push (the fused path's forward down and data gradient, FP8 forward down and dx): the 64 rows x
 * 64 * NBOX columns gg_store_pass<., NBOX> just staged at columns [col0, col0 + 64 * NBOX) also go
 * to their rows' (token, j) slots on the source ranks (q: kernels/move/fused_move.h), 16 bytes per
 * thread and step (the same bf16 values the TMA stores write locally); rows at or past m_total and
 * padding rows never move; a row holds `hidden` bf16 values. Reads the staging buffer between the
 * pass's last barrier and the next pass's first.
 * gg_push_slots loads the slots of the rows this thread moves (the same in every pass of a
 * fragment: -1 where nothing moves), so that a caller can load them once per tile, early;
 * gg_push_pass_slots moves one pass with them. */
template <int NBOX>
__device__ __forceinline__ void gg_push_slots(const mok_gg_move &q, int64_t m_total, int64_t row0,
                                              int wtid, int32_t *slot) {
#pragma unroll
  for (int j = 0; j < 8 * NBOX / 2; ++j) {
    const int64_t grow = row0 + wtid / (8 * NBOX) + (128 / (8 * NBOX)) * j;
    slot[j] = grow < m_total ? q.row_src[grow] : -1;
  }
}

template <int NBOX>
__device__ __forceinline__ void gg_push_pass_slots(const uint8_t *stage, int wtid,
                                                   const mok_gg_move &q, int64_t hidden, int col0,
                                                   int col_end, const int32_t *slot) {
  const int c = wtid & (8 * NBOX - 1); /* 16-byte chunk among the pass's 64 * NBOX columns */
  if (col0 + c * 8 >= col_end) return;
  const int64_t row_bytes = hidden * 2, per_rank = q.tokens * q.top_k;
  const int box = c >> 3, cc = c & 7;
#pragma unroll
  for (int j = 0; j < 8 * NBOX / 2; ++j) {
    const int row = wtid / (8 * NBOX) + (128 / (8 * NBOX)) * j;
    if (slot[j] < 0) continue;
    const uint4 v = *(const uint4 *)(stage + box * 8192 + row * 128 + ((cc ^ (row & 7)) << 4));
    char *dst = q.peer_base[mok_sched_slot_rank(slot[j], q.tokens, q.top_k)] + q.peer_off +
                (int64_t)(slot[j] % per_rank) * row_bytes + (int64_t)(col0 + c * 8) * 2;
    *(uint4 *)dst = v;
  }
}

template <int NBOX = 2>
__device__ __forceinline__ void gg_push_pass(const uint8_t *stage, int wtid, const mok_gg_move &q,
                                             int64_t m_total, int64_t hidden, int col0, int col_end,
                                             int row0) {
  if (col0 + (wtid & (8 * NBOX - 1)) * 8 >= col_end) return;
  int32_t slot[8 * NBOX / 2];
  gg_push_slots<NBOX>(q, m_total, row0, wtid, slot);
  gg_push_pass_slots<NBOX>(stage, wtid, q, hidden, col0, col_end, slot);
}

/* Host check of a fused move's fields that both directions read (kernels/move/fused_move.h), and
 * that it is the direction the call makes (push 1 or 0). */
static inline int gg_move_ok(const mok_gg_move *q, int push) {
  return q->peer_base && q->row_src && q->top_k >= 1 && q->tokens >= 0 && q->push == push;
}

/* A launch of grid CTAs in clusters of cl (cl == 1: no cluster attribute); attr is its storage. */
static inline cudaLaunchConfig_t gg_cluster_config(int grid, int threads, int smem, int cl,
                                                   cudaStream_t stream, cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t cfg = {};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cl;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = cl > 1 ? 1 : 0;
  return cfg;
}

/* CTAs of kernel that can be co-resident (whole clusters of cl) with smem bytes of dynamic shared
 * memory each; also raises the kernel's dynamic shared memory limit to smem. */
static inline mok_status gg_coresident_ctas(const void *kernel, int threads, int smem, int cl,
                                            int *ctas) {
  MOK_KCUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int sms = 0;
  MOK_KTRY(gg_device_sms(&sms));
  if (cl == 1) {
    *ctas = sms;
    return MOK_SUCCESS;
  }
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = gg_cluster_config(sms / cl * cl, threads, smem, cl, 0, &attr);
  int clusters = 0;
  MOK_KCUDA(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  if (clusters < 1) /* not one whole cluster fits */
    return mok_kernel_failed((int)cudaErrorInvalidConfiguration, 0,
                             "cudaOccupancyMaxActiveClusters", __FILE__, __LINE__);
  *ctas = clusters * cl;
  return MOK_SUCCESS;
}

/* A call's launch options (gemm.h): *out = *launch, or every field 0 (the defaults) for NULL.
 * MOK_ERR_INVALID_ARGUMENT for a field out of its range (cluster 0 to max_cluster, warpgroups 0 or
 * one of the two values the 128-column FP8 kernel has when nwg_ok, max_ctas >= 0); each launcher
 * then checks what its call can run of the rest. */
static inline mok_status gg_launch_get(const mok_gg_launch *launch, int max_cluster, int nwg_ok,
                                       mok_gg_launch *out) {
  mok_gg_launch l = {0, 0, 0, NULL};
  if (launch) l = *launch;
  if (l.cluster < 0 || l.cluster > max_cluster || l.max_ctas < 0) return MOK_ERR_INVALID_ARGUMENT;
  if (l.warpgroups != 0 && !(nwg_ok && (l.warpgroups == 2 || l.warpgroups == 3)))
    return MOK_ERR_INVALID_ARGUMENT;
  *out = l;
  return MOK_SUCCESS;
}

/* The rows per expert that a launch's defaults follow without a plan (gemm_plan.h): the
 * capacity's, m_total / num_experts rounded up (the layer's plan rounds its average so too). */
static inline int64_t gg_rows_per_expert(int64_t m_total, int num_experts) {
  return num_experts > 0 ? (m_total + num_experts - 1) / num_experts : m_total;
}

/* The persistent grid's cap: ctas (the co-resident CTAs, whole clusters of cl), or max_ctas
 * (a launch's mok_gg_launch.max_ctas; 0: none) when smaller, in whole clusters. */
static inline int gg_ctas_cap(int ctas, int cl, int max_ctas) {
  if (max_ctas <= 0 || max_ctas >= ctas) return ctas;
  return max_ctas / cl * cl;
}

/* The argument checks every row-grouped BF16 call shares (gemm.h's statuses): the offsets and
 * counts given; E, m_total, n, k positive and in int32 (E n too); n and k multiples of 64. */
static inline mok_status gg_check_common(const int32_t *off, const int32_t *cnt, int e, int64_t m_total,
                                  int64_t n, int64_t k) {
  if (!off || !cnt) return MOK_ERR_INVALID_ARGUMENT;
  if (e <= 0 || m_total <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (m_total > INT32_MAX || (int64_t)e * n > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  if (n % MOK_GG_ALIGN || k % MOK_GG_ALIGN) return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

/* The gate+up's: its pointers, the checks above for (inter, hidden), inter a multiple of 128, a
 * positive limit when used. */
static inline mok_status gg_check_gate_up(const void *x, const void *w_gate, const void *w_up,
                                          const void *act, const int32_t *off, const int32_t *cnt,
                                          int e, int64_t m_total, int64_t inter, int64_t hidden,
                                          int use_limit, float limit) {
  if (!x || !w_gate || !w_up || !act) return MOK_ERR_INVALID_ARGUMENT;
  MOK_KTRY(gg_check_common(off, cnt, e, m_total, inter, hidden));
  if (inter % 128) return MOK_ERR_MISALIGNED;
  if (use_limit && !(limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  return MOK_SUCCESS;
}

#endif /* MOK_GEMM_COMMON_CUH */
