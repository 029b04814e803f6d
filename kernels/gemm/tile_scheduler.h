/* tile_scheduler.h — the grouped GEMM's tile scheduler, as plain C that runs unchanged on the
 * host (tests, planning) and in CUDA kernels. It only maps a linear tile index to (expert, m tile,
 * n tile); the GEMM kernels never see the order in which tiles are visited.
 *
 * M-grouped problems (forward, dgrad): expert l has m_tiles(l) = ceil(count[l] / tile_m) row tiles
 * and n_tiles column tiles, so tiles(l) = m_tiles(l) * n_tiles; an expert with no rows has none.
 * tile_prefix[l] = sum of tiles(j) for j < l (E + 1 entries), built once per CTA.
 * Inside an expert, tiles are rasterized for L2 reuse: row tiles are taken in groups of
 * group_m; a group sweeps every column tile, and inside a column the group's row tiles are
 * consecutive. So the CTAs running at one moment share a few weight column tiles and one group
 * of activation row tiles.
 * In cluster pairs (gg_decode_pair) a unit is two row tiles of one expert sharing the weight tile,
 * or two experts' leftover last row tiles. gg_weight_read_once says which units' weight tiles no
 * other unit nearby reads (the kernels load those evict_first).
 * K-grouped problems (weight gradients): every expert has the same m_tiles x n_tiles output tiles;
 * the reduction length (the expert's row count) varies. The weight gradient takes them in chunks
 * of row tiles of one column tile (gg_decode_k_chunk_from), in cluster pairs split between the
 * two CTAs.
 * A unit's time grows with its expert's rows, so the weight gradient visits the experts in an
 * order (gg_order_rank): most rows first, ties by index, so that under skewed routing the heavy
 * experts' units start first and the light ones fill the persistent grid's tail (longest
 * processing time first); equal counts keep the index order. Its prefix and decode run over
 * positions in that order; the kernel maps a decoded position to its expert. (The row-grouped
 * problems' units all cost alike: there the order measured a tie, docs/PERF.md.) */
#ifndef MOK_GEMM_TILE_SCHEDULER_H
#define MOK_GEMM_TILE_SCHEDULER_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOK_SCHED_HD __host__ __device__ __forceinline__
#else
#define MOK_SCHED_HD static inline
#endif

typedef struct {
  int32_t expert; /* local expert index                      */
  int32_t m_tile; /* row tile inside the expert (or of dW)   */
  int32_t n_tile; /* column tile                             */
} gg_tile;

MOK_SCHED_HD int32_t gg_ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

/* Expert i's position in the visiting order: the experts with more rows, and those before it with
 * as many, come first (negative counts, a ring view's experts outside its macrobatch, count as
 * 0). A permutation of [0, E) for any counts. */
MOK_SCHED_HD int32_t gg_order_rank(const int32_t *count, int32_t num_experts, int32_t i) {
  const int32_t ci = count[i] > 0 ? count[i] : 0;
  int32_t r = 0;
  for (int32_t j = 0; j < num_experts; ++j) {
    const int32_t cj = count[j] > 0 ? count[j] : 0;
    r += cj > ci || (cj == ci && j < i);
  }
  return r;
}

/* order[position] = expert, on the host (tests, planning); the kernels build the same in
 * parallel (gemm_common.cuh gg_expert_order). */
MOK_SCHED_HD void gg_build_order(const int32_t *count, int32_t num_experts, int32_t *order) {
  for (int32_t i = 0; i < num_experts; ++i) order[gg_order_rank(count, num_experts, i)] = i;
}

/* Position of tile index idx inside one expert's m_tiles x n_tiles grid, grouped by group_m. */
MOK_SCHED_HD void gg_raster(int32_t idx, int32_t m_tiles, int32_t n_tiles, int32_t group_m,
                            int32_t *m_tile, int32_t *n_tile) {
  int32_t group_size = group_m * n_tiles;
  int32_t g = idx / group_size;
  int32_t r = idx - g * group_size;
  int32_t gm = m_tiles - g * group_m;
  if (gm > group_m) gm = group_m;
  *n_tile = r / gm;
  *m_tile = g * group_m + (r - (r / gm) * gm);
}

/* Fills prefix[0..E] from per-expert row counts (sequential; the device kernels build the same
 * table in parallel). Returns the total tile count. */
MOK_SCHED_HD int32_t gg_build_prefix(const int32_t *count, int32_t num_experts, int32_t tile_m,
                                     int32_t n_tiles, int32_t *prefix) {
  int32_t total = 0;
  for (int32_t l = 0; l < num_experts; ++l) {
    prefix[l] = total;
    int32_t c = count[l] > 0 ? count[l] : 0;
    total += gg_ceil_div(c, tile_m) * n_tiles;
  }
  prefix[num_experts] = total;
  return total;
}

/* M-grouped: tile index -> (expert, m tile, n tile). idx in [0, prefix[E]). Binary search for the
 * expert l with prefix[l] <= idx < prefix[l + 1] (experts with no tiles are skipped). */
MOK_SCHED_HD gg_tile gg_decode_m_grouped(int32_t idx, const int32_t *prefix, int32_t num_experts,
                                         int32_t n_tiles, int32_t group_m) {
  int32_t lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= idx) lo = mid; else hi = mid - 1;
  }
  gg_tile t;
  t.expert = lo;
  int32_t m_tiles = (prefix[lo + 1] - prefix[lo]) / n_tiles;
  gg_raster(idx - prefix[lo], m_tiles, n_tiles, group_m, &t.m_tile, &t.n_tile);
  return t;
}

/* The same decode for a caller whose idx never decreases (a persistent CTA walking its tiles):
 * *cursor (0 before the first call) is the expert of the previous call, advanced past experts that
 * end at or before idx, which costs one or two prefix reads per call instead of a binary search. */
MOK_SCHED_HD gg_tile gg_decode_m_grouped_from(int32_t idx, const int32_t *prefix,
                                              int32_t num_experts, int32_t n_tiles,
                                              int32_t group_m, int32_t *cursor) {
  int32_t l = *cursor;
  while (l < num_experts - 1 && prefix[l + 1] <= idx) ++l;
  *cursor = l;
  gg_tile t;
  t.expert = l;
  int32_t m_tiles = (prefix[l + 1] - prefix[l]) / n_tiles;
  gg_raster(idx - prefix[l], m_tiles, n_tiles, group_m, &t.m_tile, &t.n_tile);
  return t;
}

/* M-grouped, one entry per row tile: row tile u in [0, prefix[E] / n_tiles), in the order
 * (expert, m tile), -> (expert, m tile) (n_tile 0), from the same prefix; *cursor as in
 * gg_decode_m_grouped_from (u never decreasing for one caller). What walks over the row tiles'
 * rows use (the one-launch FP8 MLP's pull). */
MOK_SCHED_HD gg_tile gg_decode_row_tile_from(int32_t u, const int32_t *prefix, int32_t num_experts,
                                             int32_t n_tiles, int32_t *cursor) {
  int32_t l = *cursor;
  while (l < num_experts - 1 && prefix[l + 1] / n_tiles <= u) ++l;
  *cursor = l;
  gg_tile t;
  t.expert = l;
  t.m_tile = u - prefix[l] / n_tiles;
  t.n_tile = 0;
  return t;
}

/* M-grouped in cluster pairs, the two CTAs of a cluster taking one unit together. An expert's row
 * tiles are taken two at a time: floor(m_tiles / 2) pairs of vertically adjacent tiles per column
 * tile, whose CTAs share the weight tile by multicast (rank r takes row tile 2 p + r). What is
 * left, the last row tile of an expert with an odd number, is a leftover: the leftovers of all
 * experts, one per column tile, are numbered after every pair, two to a unit, each CTA with its
 * own tile and its own weight tile (rank r takes leftover 2 i + r; past the last one, none). So
 * an expert with one row tile (most experts under skewed routing) does not hold a second CTA
 * idle. How the persistent clusters walk the units is gg_pair_walk's.
 * pre_pair[l]: pair units of experts before l; pre_left[l]: leftovers of experts before l. */
typedef enum { GG_PAIR_SHARED = 0, GG_PAIR_OWN = 1, GG_PAIR_NONE = 2 } gg_pair_kind;

/* Fills pre_pair and pre_left (each [E + 1]) from the row counts (negative counts count as 0);
 * returns the units: pre_pair[E] + ceil(pre_left[E] / 2). */
MOK_SCHED_HD int32_t gg_build_prefix_pairs(const int32_t *count, int32_t num_experts,
                                           int32_t tile_m, int32_t n_tiles, int32_t *pre_pair,
                                           int32_t *pre_left) {
  int32_t p = 0, q = 0;
  for (int32_t l = 0; l < num_experts; ++l) {
    pre_pair[l] = p;
    pre_left[l] = q;
    const int32_t m = gg_ceil_div(count[l] > 0 ? count[l] : 0, tile_m);
    p += m / 2 * n_tiles;
    q += m % 2 * n_tiles;
  }
  pre_pair[num_experts] = p;
  pre_left[num_experts] = q;
  return p + (q + 1) / 2;
}

/* Unit u, CTA rank (0 or 1) -> its tile and *kind. For GG_PAIR_NONE the tile is the other CTA's
 * (valid rows and weights to load and ignore). */
MOK_SCHED_HD gg_tile gg_decode_pair(int32_t u, int32_t rank, const int32_t *pre_pair,
                                    const int32_t *pre_left, int32_t num_experts, int32_t n_tiles,
                                    int32_t group_m, int32_t *kind) {
  const int32_t n_pair = pre_pair[num_experts];
  gg_tile t;
  if (u < n_pair) {
    t = gg_decode_m_grouped(u, pre_pair, num_experts, n_tiles, group_m);
    t.m_tile = 2 * t.m_tile + rank;
    *kind = GG_PAIR_SHARED;
    return t;
  }
  int32_t j = 2 * (u - n_pair) + rank;
  *kind = GG_PAIR_OWN;
  if (j >= pre_left[num_experts]) {
    j -= 1; /* the last leftover, the other CTA's */
    *kind = GG_PAIR_NONE;
  }
  int32_t lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) >> 1;
    if (pre_left[mid] <= j) lo = mid; else hi = mid - 1;
  }
  t.expert = lo;
  t.m_tile = 2 * ((pre_pair[lo + 1] - pre_pair[lo]) / n_tiles);
  t.n_tile = j - pre_left[lo];
  return t;
}

/* Cluster c's walk over the n_pair pair units and n_left leftover units, of `clusters`
 * persistent clusters: u = *first, += *step, while u < *end. With r = 0 every cluster walks
 * every unit in order (c, c + clusters, ...): the leftovers last, as a kernel whose rows arrive
 * in order needs. With r >= 1 (gemm_plan.h, mok_gg_bf16_leftover_clusters) clusters 0 .. r - 1
 * walk the leftover units (n_pair + c, + r, ...) and the others the pair units (c - r,
 * + clusters - r, ...): the leftovers' weight streams (HBM-bound) run beside the pairs' tensor
 * work rather than as a tail after it, while the pair units running at one moment stay a run of
 * consecutive ones, a raster group's. Each unit is walked by one cluster either way. */
MOK_SCHED_HD void gg_pair_walk(int32_t c, int32_t clusters, int32_t r, int32_t n_pair,
                               int32_t n_left, int32_t *first, int32_t *step, int32_t *end) {
  if (r <= 0) {
    *first = c; *step = clusters; *end = n_pair + n_left;
  } else if (c < r) {
    *first = n_pair + c; *step = r; *end = n_pair + n_left;
  } else {
    *first = c - r; *step = clusters - r; *end = n_pair;
  }
}

/* Cluster pairs may also claim their units at run time from two ticket counters (fetch-and-add
 * on device memory), the pair units' and the leftover units': a cluster draws its preferred kind
 * (the leftovers for the first r clusters of gg_pair_walk, the pairs for the others) while any is
 * left, then the other kind, so neither kind waits for the other and no cluster idles while a
 * unit is left, whatever the units cost. gg_claim_step turns the claimer's last ticket into the
 * unit it names (pairs numbered first, as gg_decode_pair); GG_CLAIM_AGAIN: draw a ticket of kind
 * c->q (the claimer has turned to its second kind) and step again; GG_CLAIM_END: both ran out. */
enum { GG_CLAIM_END = -1, GG_CLAIM_AGAIN = -2 };
typedef struct {
  int32_t q;        /* the kind drawn now: 0 pairs, 1 leftovers */
  int32_t switched; /* whether q is the claimer's second kind */
  int32_t ticket;   /* the last ticket drawn of kind q */
} gg_claimer;

MOK_SCHED_HD gg_claimer gg_claimer_make(int32_t leftovers_first) {
  gg_claimer c = {leftovers_first ? 1 : 0, 0, 0};
  return c;
}

MOK_SCHED_HD int32_t gg_claim_step(gg_claimer *c, int32_t n_pair, int32_t n_left) {
  if (c->ticket < (c->q ? n_left : n_pair)) return c->q ? n_pair + c->ticket : c->ticket;
  if (c->switched) return GG_CLAIM_END;
  c->switched = 1;
  c->q ^= 1;
  return GG_CLAIM_AGAIN;
}

/* Whether a row-grouped unit's weight tile is read by no other unit nearby, so that its loads can
 * mark the lines evict_first (ptx.cuh, l2_policy_evict_first) at no cost of a re-read from HBM:
 * the units running at one moment share weight column tiles inside their raster groups, and a
 * group is done with a column tile long before the expert's next group reads it (a group sweeps
 * every column tile). m_tiles: the expert's row tiles; m_tile: the unit's (a cluster CTA's own,
 * as gg_decode_pair gives it); cluster: 1 or 2; kind: gg_decode_pair's (cluster 1: ignored).
 *   cluster 1 (gg_raster): a column tile is read by the row tiles of the unit's group: read once
 *     where the group holds one row tile and no later group reads it, i.e. the unit is the
 *     expert's last row tile and starts its group (an expert with one row tile, or a last group
 *     of one; with group_m 1 every group holds one, but the next reads the tile n_tiles units on);
 *   cluster 2: a GG_PAIR_SHARED unit loads the tile once for both CTAs by multicast: read once
 *     where its pair is the only one of its group, so the expert's last pair (its leftover, if
 *     any, reads the tile again, later or apart); a GG_PAIR_OWN leftover walked after every pair
 *     (apart 0, gg_pair_walk's r = 0) is the tile's last reader; walked apart from the pairs
 *     (apart 1) it may run beside its expert's pairs, so it is read once only where the expert
 *     has no pairs (one row tile); a GG_PAIR_NONE CTA loads, unused, the tile its peer's
 *     leftover loads at the same time: read once as that one. */
MOK_SCHED_HD int32_t gg_weight_read_once(int32_t m_tiles, int32_t m_tile, int32_t group_m,
                                         int32_t cluster, int32_t apart, int32_t kind) {
  if (cluster > 1) {
    if (kind != GG_PAIR_SHARED) return !apart || m_tiles == 1;
    m_tiles >>= 1; /* the expert's pairs, and the unit's */
    m_tile >>= 1;
  }
  return m_tile == m_tiles - 1 && m_tile % group_m == 0;
}

/* K-grouped in chunks (the weight gradient keeping its activation tile in shared memory): where
 * an expert's rows are few (count <= max_rows), a unit is one column tile of its dW and up to
 * `chunk` consecutive row tiles, which all reduce over the same activation columns; an expert
 * with more rows has units of `big` row tiles (1: one unit per tile, finer units balance the SMs
 * better where the activation tile cannot stay; 2: a cluster pair's two tiles, which share the
 * activation blocks as they stream); one at count -1 (outside a ring view's macrobatch) has
 * none. Units are chunk-major inside an expert. gg_k_chunk_units: an expert's units; prefix[l]:
 * the units of experts before l. */
MOK_SCHED_HD int32_t gg_k_chunk_units(int32_t count, int32_t max_rows, int32_t m_tiles,
                                      int32_t n_tiles, int32_t chunk, int32_t big) {
  if (count < 0) return 0;
  return gg_ceil_div(m_tiles, count <= max_rows ? chunk : big) * n_tiles;
}

/* Unit u -> its first tile (expert position, m tile, n tile) and *tiles, its row tiles; the chunk
 * size follows the count of the expert at that position (count[order[position]], order NULL:
 * the index order), as gg_k_chunk_units. *cursor as in gg_decode_m_grouped_from (u never
 * decreasing for one caller). */
MOK_SCHED_HD gg_tile gg_decode_k_chunk_from(int32_t u, const int32_t *prefix, int32_t num_experts,
                                            int32_t m_tiles, int32_t n_tiles, int32_t chunk,
                                            int32_t big, const int32_t *count,
                                            const uint8_t *order, int32_t max_rows,
                                            int32_t *cursor, int32_t *tiles) {
  int32_t l = *cursor;
  while (l < num_experts - 1 && prefix[l + 1] <= u) ++l;
  *cursor = l;
  const int32_t ch = count[order ? order[l] : l] <= max_rows ? chunk : big;
  const int32_t i = u - prefix[l], c = i / n_tiles;
  gg_tile t;
  t.expert = l;
  t.n_tile = i - c * n_tiles;
  t.m_tile = c * ch;
  *tiles = m_tiles - t.m_tile < ch ? m_tiles - t.m_tile : ch;
  return t;
}

#endif /* MOK_GEMM_TILE_SCHEDULER_H */
