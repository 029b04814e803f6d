/* pipeline_core.h — the plan of the fused kernel's token ring (DESIGN.md items 1 and 4), as plain C
 * that runs unchanged on the host and in CUDA kernels: how a schedule's rows are cut into
 * minibatches and macrobatches, in which order the passes walk them, which ring region holds each,
 * and which readiness flag says a minibatch has landed. Nothing here depends on the routing except
 * through the schedule's padded row total, which only the device knows; the ring's size depends on
 * the knobs alone.
 *
 * Terms. The schedule's padded rows [0, total) (total = expert_offset[E_local], a multiple of tile_m)
 * are cut into minibatches of minibatch_rows (the last may be shorter, still whole tiles), and
 * minibatches into macrobatches of macro_minibatches. The ring holds ring_regions macrobatches;
 * a region is reused as soon as the macrobatch in it has drained.
 *   Forward walks macrobatches in reverse (step s processes macrobatch n_macro - 1 - s), so its last
 *   step leaves macrobatch 0 resident. Backward walks them forward (step s processes macrobatch s):
 *   its step 0 finds macrobatch 0 in the region forward left it in and needs no reload or
 *   recomputation; every later macrobatch is pulled again (and its forward replayed) into the next
 *   region in rotation.
 *   Region of a pass's step s: forward (s mod R); backward ((n_macro - 1 + s) mod R). With at most
 *   R - 1 macrobatches in flight, no two of them share a region (tests check this).
 * Readiness flags: one per ring minibatch, region * macro_minibatches + j. A producer stores an
 * epoch that grows with every pass (mok_pipe_epoch), so flags are never reset and a stale flag from
 * an earlier pass or an earlier replay of a captured graph never reads as ready. */
#ifndef MOK_PIPELINE_CORE_H
#define MOK_PIPELINE_CORE_H

#include <stdint.h>
#include "schedule/schedule_core.h" /* MOK_HD and the status values */

typedef struct {
  int32_t tile_m;            /* rows of one GEMM tile (the schedule's padding granule)  */
  int32_t minibatch_rows;    /* rows moved and computed as one unit, a multiple of tile_m */
  int32_t macro_minibatches; /* minibatches per macrobatch, >= 1                         */
  int32_t ring_regions;      /* macrobatches the ring holds, >= 2                         */
} mok_pipe_params;

/* Checks the knobs: positive, minibatch a multiple of the tile, at least two regions (one filling
 * while one computes). Returns MOK_SCHED_OK or MOK_SCHED_BAD_ARGUMENT. */
MOK_HD int mok_pipe_check(const mok_pipe_params *p) {
  if (p->tile_m <= 0 || p->minibatch_rows <= 0 || p->minibatch_rows % p->tile_m != 0 ||
      p->macro_minibatches <= 0 || p->ring_regions < 2)
    return MOK_SCHED_BAD_ARGUMENT;
  return MOK_SCHED_OK;
}

MOK_HD int64_t mok_pipe_macro_rows(const mok_pipe_params *p) {
  return (int64_t)p->minibatch_rows * p->macro_minibatches;
}

/* Rows the ring holds: its size in rows, fixed by the knobs, whatever the routing. */
MOK_HD int64_t mok_pipe_ring_rows(const mok_pipe_params *p) {
  return mok_pipe_macro_rows(p) * p->ring_regions;
}

MOK_HD int64_t mok_pipe_minibatches(const mok_pipe_params *p, int64_t total_rows) {
  return (total_rows + p->minibatch_rows - 1) / p->minibatch_rows;
}

MOK_HD int64_t mok_pipe_macrobatches(const mok_pipe_params *p, int64_t total_rows) {
  return (mok_pipe_minibatches(p, total_rows) + p->macro_minibatches - 1) / p->macro_minibatches;
}

/* Schedule rows [*first, *first + *rows) of minibatch m (global index). */
MOK_HD void mok_pipe_minibatch_range(const mok_pipe_params *p, int64_t total_rows, int64_t m,
                                     int64_t *first, int64_t *rows) {
  int64_t f = m * p->minibatch_rows, end = f + p->minibatch_rows;
  if (end > total_rows) end = total_rows;
  *first = f;
  *rows = end > f ? end - f : 0;
}

/* The macrobatch a pass processes at step s (forward: reverse order; backward: forward order). */
MOK_HD int64_t mok_pipe_fwd_macro(int64_t n_macro, int64_t step) { return n_macro - 1 - step; }
MOK_HD int64_t mok_pipe_bwd_macro(int64_t step) { return step; }

/* The ring region used at step s of each pass. */
MOK_HD int32_t mok_pipe_fwd_region(const mok_pipe_params *p, int64_t step) {
  return (int32_t)(step % p->ring_regions);
}
MOK_HD int32_t mok_pipe_bwd_region(const mok_pipe_params *p, int64_t n_macro, int64_t step) {
  return (int32_t)((n_macro - 1 + step) % p->ring_regions);
}

/* Whether backward step s finds its macrobatch already resident (only step 0, left by forward). */
MOK_HD int mok_pipe_bwd_resident(int64_t step) { return step == 0; }

/* The ring row that holds schedule row `row` while its macrobatch sits in `region`. */
MOK_HD int64_t mok_pipe_ring_row(const mok_pipe_params *p, int32_t region, int64_t row) {
  int64_t macro_rows = mok_pipe_macro_rows(p);
  return (int64_t)region * macro_rows + row % macro_rows;
}

/* The readiness flag of minibatch m while its macrobatch sits in `region`. */
MOK_HD int64_t mok_pipe_flag(const mok_pipe_params *p, int32_t region, int64_t m) {
  return (int64_t)region * p->macro_minibatches + m % p->macro_minibatches;
}

/* The value a ready flag holds for step s of a pass: grows with every pass (invocation counts
 * passes on the device, forward and backward alike, and survives graph replays) and every step,
 * so it never repeats. steps_per_pass bounds the steps of any pass (the worst case of the shape). */
MOK_HD uint64_t mok_pipe_epoch(uint64_t invocation, int64_t steps_per_pass, int64_t step) {
  return invocation * (uint64_t)steps_per_pass + (uint64_t)step + 1u;
}

#endif /* MOK_PIPELINE_CORE_H */
