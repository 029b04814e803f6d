/* fused_comm_plan.h — the bookkeeping the fused path's comm CTAs and GEMM epilogues must agree on,
 * as plain C for host and device (kernels/comm_move.cuh uses it; tests/test_fused_plan.c checks it
 * against the grouped GEMM's own tile walk on the CPU).
 *
 * A consumer warpgroup of the grouped GEMM stores the 64-row block starting at row
 * offset[e] + m_tile * 128 + wg * 64 of expert e, one 256-column tile at a time, when the block
 * holds a real row (m_tile * 128 + wg * 64 < count[e]); blocks of padding rows are skipped. A push
 * waits until every stored block of its minibatch has been counted. */
#ifndef MOK_FUSED_COMM_PLAN_H
#define MOK_FUSED_COMM_PLAN_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOK_FC_HD __host__ __device__ __forceinline__
#else
#define MOK_FC_HD static inline
#endif

#define MOK_FC_BLOCK_ROWS 64 /* rows of one stored output block (a consumer warpgroup's half tile) */

/* Whether the block at row `row_in_expert` (a multiple of 64) of an expert with `count` real rows
 * is stored. */
MOK_FC_HD int mok_fc_block_stored(int64_t row_in_expert, int32_t count) {
  return row_in_expert < (int64_t)count;
}

/* The local expert owning row: the last one whose offset <= row (offsets ascending). */
MOK_FC_HD int mok_fc_expert_of(const int32_t *offset, int experts, int64_t row) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (offset[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/* Blocks stored for rows [r0, r1) (r0 a multiple of 64), times the GEMM's column tiles: what a
 * push of that minibatch waits for. */
MOK_FC_HD int64_t mok_fc_expected_blocks(const int32_t *offset, const int32_t *count, int experts,
                                         int64_t r0, int64_t r1, int n_tiles) {
  int64_t blocks = 0;
  for (int64_t row = r0; row < r1; row += MOK_FC_BLOCK_ROWS) {
    const int e = mok_fc_expert_of(offset, experts, row);
    if (mok_fc_block_stored(row - offset[e], count[e])) ++blocks;
  }
  return blocks * n_tiles;
}

#endif /* MOK_FUSED_COMM_PLAN_H */
