/* schedule_core.h — the schedule table's construction, as plain C that runs unchanged on the host
 * and in CUDA kernels (no allocation, no libc; every bound comes from the caller).
 *
 * The table (one per rank r, serving its local experts e = r*E_local + l, l in [0, E_local)):
 *   expert_count[l]       rows routed to local expert l (real rows, no padding)
 *   expert_offset[l]      first row of expert l; expert_offset[E_local] is the padded total.
 *                         Every offset is a multiple of tile_m: expert l owns rows
 *                         [expert_offset[l], expert_offset[l+1]), real rows first, then padding.
 *   row_src[row]          for a real row, the global slot it came from,
 *                           slot = src_rank * (T*k) + token * k + j,
 *                         i.e. topk_experts[src_rank][token][j] == e; -1 for a padding row.
 * Order (fixed, documented, independent of any hardware scheduling): inside an expert, rows are
 * sorted by (src_rank, token) ascending. A token lists an expert at most once, so j is implied.
 * Forward dispatch pulls x[token] of src_rank into row; forward combine pushes the row's output to
 * slot; backward reverse-combine pulls dy[token]; reverse-dispatch pushes dx parts to slot.
 *
 * Construction is split in chunks so the device can run it in parallel and the host sequentially,
 * with the same result: the routings of all ranks, [EP][T][k], are cut into chunks of consecutive
 * tokens of one rank, numbered in (rank, token) order.
 *   1. mok_sched_count_chunk   per chunk: validate ids, count rows per local expert;
 *   2. mok_sched_scan          once: counts -> per-chunk write cursors, offsets, capacity check;
 *   3. mok_sched_fill_chunk    per chunk: write row_src at the chunk's cursors;
 *   4. mok_sched_pad_expert    per expert: write -1 into its padding rows.
 */
#ifndef MOK_SCHEDULE_CORE_H
#define MOK_SCHEDULE_CORE_H

#include <stdint.h>

/* Limits of the device build of the schedule (checked on the host by mok_validate and
 * mok_workspace_create through mok_sched_chunk_geometry). */
#define MOK_SCHED_MAX_CHUNK_IDS 8192     /* top-k ids one chunk stages in shared memory       */
#define MOK_SCHED_MAX_SCAN_ENTRIES 49152 /* chunks * local experts in the single-block scan     */
#define MOK_SCHED_SCAN_CHUNKS 128        /* chunks of all ranks the build prefers at most: the
                                            scan walks them per expert (docs/PERF.md)          */
#define MOK_SCHED_MAX_LOCAL_EXPERTS 4096 /* E / EP                                             */

#ifdef __CUDACC__
#define MOK_HD __host__ __device__ __forceinline__
#else
#define MOK_HD static inline
#endif

/* Status values of the schedule core; they equal the matching mok_status codes. */
enum {
  MOK_SCHED_OK = 0,
  MOK_SCHED_BAD_ARGUMENT = 1, /* MOK_ERR_INVALID_ARGUMENT */
  MOK_SCHED_EXPERT_ID = 4,    /* MOK_ERR_EXPERT_ID */
  MOK_SCHED_DUPLICATE = 5,    /* MOK_ERR_DUPLICATE_EXPERT */
  MOK_SCHED_CAPACITY = 6      /* MOK_ERR_CAPACITY */
};

/* Validates one token's top-k list: every id in [0, num_experts), no id twice (O(k^2)). */
MOK_HD int mok_sched_check_token(const int32_t *ids, int k, int num_experts) {
  for (int j = 0; j < k; ++j) {
    if (ids[j] < 0 || ids[j] >= num_experts) return MOK_SCHED_EXPERT_ID;
    for (int i = 0; i < j; ++i)
      if (ids[i] == ids[j]) return MOK_SCHED_DUPLICATE;
  }
  return MOK_SCHED_OK;
}

/* Step 1. topk: the chunk's ntok tokens, [ntok][k]. Adds to counts[E_local] (zeroed by the caller)
 * the rows each local expert [expert_lo, expert_lo + E_local) receives from this chunk. Returns the
 * first validation error in token order; on error counts is left partially updated and must not
 * be used. */
MOK_HD int mok_sched_count_chunk(const int32_t *topk, int64_t ntok, int k, int num_experts,
                                 int expert_lo, int experts_local, int32_t *counts) {
  for (int64_t t = 0; t < ntok; ++t) {
    const int32_t *ids = topk + t * k;
    int st = mok_sched_check_token(ids, k, num_experts);
    if (st != MOK_SCHED_OK) return st;
    for (int j = 0; j < k; ++j) {
      int l = ids[j] - expert_lo;
      if (l >= 0 && l < experts_local) counts[l] += 1;
    }
  }
  return MOK_SCHED_OK;
}

/* Step 2. counts: [nchunks][E_local] from step 1, in chunk order. Checks the padded total against
 * capacity first and, if it does not fit, returns MOK_SCHED_CAPACITY having written nothing.
 * Otherwise rewrites counts in place into each chunk's first write row per expert (the cursors
 * step 3 starts from) and writes expert_count[E_local] and expert_offset[E_local + 1]. */
MOK_HD int mok_sched_scan(int32_t *counts, int64_t nchunks, int experts_local, int tile_m,
                          int64_t capacity, int32_t *expert_count, int32_t *expert_offset) {
  if (tile_m <= 0 || experts_local <= 0 || nchunks < 0 || capacity < 0) return MOK_SCHED_BAD_ARGUMENT;
  int64_t total = 0;
  for (int l = 0; l < experts_local; ++l) {
    int64_t n = 0;
    for (int64_t c = 0; c < nchunks; ++c) n += counts[c * experts_local + l];
    total += (n + tile_m - 1) / tile_m * tile_m;
    if (total > capacity || total > INT32_MAX) return MOK_SCHED_CAPACITY;
  }
  int64_t offset = 0;
  for (int l = 0; l < experts_local; ++l) {
    int64_t row = offset;
    for (int64_t c = 0; c < nchunks; ++c) {
      int32_t n = counts[c * experts_local + l];
      counts[c * experts_local + l] = (int32_t)row;
      row += n;
    }
    expert_offset[l] = (int32_t)offset;
    expert_count[l] = (int32_t)(row - offset);
    offset += (row - offset + tile_m - 1) / tile_m * tile_m;
  }
  expert_offset[experts_local] = (int32_t)offset;
  return MOK_SCHED_OK;
}

/* Step 3. topk: the chunk's ntok tokens, [ntok][k], already validated by step 1; slot_base: the
 * global slot of the chunk's first (token, j = 0), src_rank * T * k + first_token * k. cursor: the
 * chunk's E_local write rows from step 2, advanced in place. Writes row_src for every row this
 * chunk routes to a local expert, in token order. */
MOK_HD void mok_sched_fill_chunk(const int32_t *topk, int64_t ntok, int k, int64_t slot_base,
                                 int expert_lo, int experts_local, int32_t *cursor,
                                 int32_t *row_src) {
  for (int64_t t = 0; t < ntok; ++t) {
    for (int j = 0; j < k; ++j) {
      int l = topk[t * k + j] - expert_lo;
      if (l >= 0 && l < experts_local) row_src[cursor[l]++] = (int32_t)(slot_base + t * k + j);
    }
  }
}

/* Step 4. Writes -1 into local expert l's padding rows. */
MOK_HD void mok_sched_pad_expert(int l, const int32_t *expert_count, const int32_t *expert_offset,
                                 int32_t *row_src) {
  for (int32_t row = expert_offset[l] + expert_count[l]; row < expert_offset[l + 1]; ++row)
    row_src[row] = -1;
}

/* Decoding a slot: source rank, token, and j. */
MOK_HD int mok_sched_slot_rank(int32_t slot, int64_t tokens, int k) {
  return (int)(slot / (tokens * k));
}
MOK_HD int64_t mok_sched_slot_token(int32_t slot, int64_t tokens, int k) {
  return (slot % (tokens * k)) / k;
}
MOK_HD int mok_sched_slot_j(int32_t slot, int k) { return (int)(slot % k); }

/* Where a row of rank `rank`'s table (row_src entry `slot`) meets the reduce that sums it: the
 * index token * k + j into that rank's own [T*k] slots when the token is the rank's own (the
 * reduce reads the row in place, mok_move_push_rows), -1 when it is pushed to another rank or is
 * padding. */
MOK_HD int64_t mok_sched_local_slot(int32_t slot, int64_t tokens, int k, int rank) {
  if (slot < 0 || mok_sched_slot_rank(slot, tokens, k) != rank) return -1;
  return slot % (tokens * k);
}

#endif /* MOK_SCHEDULE_CORE_H */
