/* pipeline.c — the ring plan's parameters from a shape, config and group size (host). */
#include "schedule/pipeline.h"

mok_status mok_pipe_from_config(const mok_shape *s, const mok_config *c, int ep, int tile_m,
                                int minibatch_rows, mok_pipe_params *p, int64_t *ring_bytes) {
  if (!s || !c || !p || !ring_bytes || s->hidden <= 0 || ep <= 0) return MOK_ERR_INVALID_ARGUMENT;
  if (c->ring_bytes < 0 || tile_m <= 0 || c->schedule_capacity < 0)
    return MOK_ERR_INVALID_ARGUMENT;
  int64_t cap = c->schedule_capacity;
  if (cap == 0) {
    const mok_status st = mok_schedule_worst_case_rows(s, ep, tile_m, &cap);
    if (st != MOK_SUCCESS) return st;
  }
  const int64_t every = (int64_t)ep * s->tokens; /* an expert gets each token at most once */
  mok_pipe_params q = {tile_m, minibatch_rows, c->macrobatch_minibatches, 0,
                       (every + tile_m - 1) / tile_m * tile_m, cap};
  if (mok_pipe_check(&q) != MOK_SCHED_OK) return MOK_ERR_INVALID_ARGUMENT;
  *ring_bytes = 0;
  if (c->ring_bytes > 0) {
    const int64_t region_bytes = mok_pipe_region_rows(&q) * s->hidden * 2;
    int64_t regions = region_bytes > 0 ? c->ring_bytes / region_bytes : 1;
    if (regions > mok_pipe_steps(&q)) regions = mok_pipe_steps(&q); /* one per macrobatch at most */
    if (regions < 1) return MOK_ERR_INVALID_ARGUMENT;
    q.ring_regions = (int32_t)regions;
    *ring_bytes = regions * region_bytes;
  }
  *p = q;
  return MOK_SUCCESS;
}
