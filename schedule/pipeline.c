/* pipeline.c — the ring plan's parameters from a shape, config and group size (host). */
#include "schedule/pipeline.h"

mok_status mok_pipe_from_config(const mok_shape *s, const mok_config *c, int ep, int tile_m,
                                int minibatch_rows, mok_pipe_params *p, int64_t *ring_bytes) {
  if (!s || !c || !p || !ring_bytes || s->hidden <= 0 || ep <= 0) return MOK_ERR_INVALID_ARGUMENT;
  if (c->ring_bytes < 0 || tile_m <= 0 || c->schedule_capacity < 0)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->schedule_capacity > INT32_MAX) return MOK_ERR_INVALID_SHAPE; /* rows are int32 */
  int64_t cap = c->schedule_capacity;
  if (cap == 0) {
    const mok_status st = mok_schedule_worst_case_rows(s, ep, tile_m, &cap);
    if (st != MOK_SUCCESS) return st;
  }
  int64_t every; /* an expert gets each token at most once: ep * T rows, int32 like all rows */
  if (s->tokens < 0 || __builtin_mul_overflow((int64_t)ep, s->tokens, &every) || every > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  mok_pipe_params q = {tile_m, minibatch_rows, c->macrobatch_minibatches, 0,
                       (every + tile_m - 1) / tile_m * tile_m, cap};
  if (mok_pipe_check(&q) != MOK_SCHED_OK) return MOK_ERR_INVALID_ARGUMENT;
  *ring_bytes = 0;
  if (c->ring_bytes > 0) {
    int64_t region_bytes;
    if (__builtin_mul_overflow(mok_pipe_region_rows(&q), s->hidden, &region_bytes) ||
        __builtin_mul_overflow(region_bytes, (int64_t)2, &region_bytes))
      return MOK_ERR_INVALID_SHAPE;
    int64_t regions = region_bytes > 0 ? c->ring_bytes / region_bytes : 1;
    if (regions > mok_pipe_steps(&q)) regions = mok_pipe_steps(&q); /* one per macrobatch at most */
    if (regions < 1) return MOK_ERR_INVALID_ARGUMENT;
    q.ring_regions = (int32_t)regions;
    *ring_bytes = regions * region_bytes;
  }
  *p = q;
  return MOK_SUCCESS;
}
