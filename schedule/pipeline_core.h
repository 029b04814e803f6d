/* pipeline_core.h — the plan of the token ring (docs/DESIGN.md, key idea 4), as plain C that runs unchanged
 * on the host and in CUDA kernels: how a schedule's experts are cut into macrobatches, in which
 * order the passes walk them, which ring region holds each, and the view of the schedule one
 * macrobatch gives the expert kernels. Nothing here depends on the routing except through the
 * schedule's expert offsets, which only the device knows; the ring's size depends on the shape and
 * the knobs alone.
 *
 * Terms. The schedule's padded rows [0, total) hold the local experts one after another, each
 * padded to tile_m (expert_offset[], ascending). An expert belongs to macrobatch
 * b = expert_offset[e] / macro_rows (the last macrobatch takes the rest), so a macrobatch is a run
 * of whole experts: each expert's rows are computed, and its weight gradient reduced, inside one
 * macrobatch, whatever the knobs, and the results are bitwise those of a walk without the ring.
 * A macrobatch spans fewer than macro_rows + expert_rows rows (expert_rows: the most padded rows
 * one expert can get, every token of every rank once), which is the size of a ring region.
 *   steps = ceil(capacity / macro_rows) macrobatches per pass (the host loops over all of them;
 *   those past the routing's last expert are empty). Forward walks them in reverse (step s:
 *   macrobatch steps - 1 - s, region s mod R), so that its last R steps leave macrobatches
 *   R - 1 .. 0 resident; backward walks them forward (step s: macrobatch s, in the region forward
 *   left it in), and only macrobatches s >= R are pulled again and their forward replayed. */
#ifndef MOK_PIPELINE_CORE_H
#define MOK_PIPELINE_CORE_H

#include <stdint.h>
#include "schedule/schedule_core.h" /* MOK_HD and the status values */

typedef struct {
  int32_t tile_m;            /* rows of one GEMM tile (the schedule's padding granule)        */
  int32_t minibatch_rows;    /* rows moved and computed as one unit, a multiple of tile_m     */
  int32_t macro_minibatches; /* minibatches per macrobatch, >= 1                              */
  int32_t ring_regions;      /* R: macrobatches the ring holds; 0: no ring (all rows resident) */
  int64_t expert_rows;       /* the most padded rows one expert can get                       */
  int64_t capacity;          /* the schedule's padded rows                                     */
} mok_pipe_params;

/* Checks the knobs: positive, minibatch a multiple of the tile, a tile-aligned capacity below
 * 2^31 rows, and a ring of at least one region when there is one. Returns MOK_SCHED_OK or MOK_SCHED_BAD_ARGUMENT. */
MOK_HD int mok_pipe_check(const mok_pipe_params *p) {
  if (p->tile_m <= 0 || p->minibatch_rows <= 0 || p->minibatch_rows % p->tile_m != 0 ||
      p->macro_minibatches <= 0 || p->ring_regions < 0 || p->expert_rows < 0 ||
      p->expert_rows % p->tile_m != 0 || p->capacity < 0)
    return MOK_SCHED_BAD_ARGUMENT;
  /* rows are int32 in the schedule table: bounded here, so that no row arithmetic overflows */
  if (p->capacity > 2147483647LL || p->expert_rows > 2147483647LL) return MOK_SCHED_BAD_ARGUMENT;
  return MOK_SCHED_OK;
}

MOK_HD int64_t mok_pipe_macro_rows(const mok_pipe_params *p) {
  return (int64_t)p->minibatch_rows * p->macro_minibatches;
}

/* Rows of one ring region: any macrobatch fits, and never more than the capacity. */
MOK_HD int64_t mok_pipe_region_rows(const mok_pipe_params *p) {
  int64_t r = mok_pipe_macro_rows(p) + p->expert_rows;
  return r < p->capacity ? r : p->capacity;
}

/* Rows the ring holds: fixed by the shape and knobs, whatever the routing. */
MOK_HD int64_t mok_pipe_ring_rows(const mok_pipe_params *p) {
  return mok_pipe_region_rows(p) * p->ring_regions;
}

/* Macrobatches (steps) of every pass, at least 1. */
MOK_HD int64_t mok_pipe_steps(const mok_pipe_params *p) {
  int64_t mr = mok_pipe_macro_rows(p), n = (p->capacity + mr - 1) / mr;
  return n > 0 ? n : 1;
}

/* The macrobatch of an expert whose rows start at `offset`. */
MOK_HD int64_t mok_pipe_expert_macro(const mok_pipe_params *p, int64_t offset) {
  int64_t b = offset / mok_pipe_macro_rows(p), last = mok_pipe_steps(p) - 1;
  return b < last ? b : last;
}

/* The experts [*e_lo, *e_hi) of macrobatch b, from the schedule's offsets (experts + 1 entries). */
MOK_HD void mok_pipe_macro_experts(const mok_pipe_params *p, const int32_t *offset, int experts,
                                   int64_t b, int *e_lo, int *e_hi) {
  /* first expert whose macrobatch is >= m: offsets ascend, so the macrobatch does too */
  int bound[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t m = b + i;
    int lo = 0, hi = experts;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (mok_pipe_expert_macro(p, offset[mid]) < m) lo = mid + 1;
      else hi = mid;
    }
    bound[i] = lo;
  }
  *e_lo = bound[0];
  *e_hi = bound[1];
}

/* The passes' order: which macrobatch step s processes, and in which region. */
MOK_HD int64_t mok_pipe_fwd_macro(int64_t steps, int64_t step) { return steps - 1 - step; }
MOK_HD int64_t mok_pipe_bwd_macro(int64_t step) { return step; }
MOK_HD int32_t mok_pipe_fwd_region(const mok_pipe_params *p, int64_t step) {
  return (int32_t)(step % p->ring_regions);
}
/* Backward's step s uses the region forward left macrobatch s in. */
MOK_HD int32_t mok_pipe_bwd_region(const mok_pipe_params *p, int64_t steps, int64_t step) {
  return (int32_t)((steps - 1 - step) % p->ring_regions);
}
/* Whether backward step s finds its macrobatch as forward left it (the last R forward steps). */
MOK_HD int mok_pipe_bwd_resident(const mok_pipe_params *p, int64_t step) {
  return step < p->ring_regions;
}

/* One entry of macrobatch b's view of the schedule, for the expert kernels: expert e's offset
 * relative to the macrobatch's first row and its row count, or count -1 for an expert of another
 * macrobatch (the kernels skip it; the weight gradient leaves its gradient alone). Offsets stay
 * ascending: experts before the macrobatch at 0, after it (and the end entry, e == experts) at its
 * padded rows, offset[e_hi] - offset[e_lo]. */
MOK_HD void mok_pipe_view_expert(const int32_t *offset, const int32_t *count, int e, int e_lo,
                                 int e_hi, int32_t *view_offset, int32_t *view_count) {
  const int32_t lo = offset[e_lo], hi = offset[e_hi];
  if (e < e_lo) {
    *view_offset = 0;
    *view_count = -1;
  } else if (e >= e_hi) {
    *view_offset = hi - lo;
    *view_count = -1;
  } else {
    *view_offset = offset[e] - lo;
    *view_count = count[e];
  }
}

#endif /* MOK_PIPELINE_CORE_H */
