/* pipeline.c — the ring plan's parameters from a shape and config (host). */
#include "schedule/pipeline.h"

mok_status mok_pipe_from_config(const mok_shape *s, const mok_config *c, mok_pipe_params *p,
                                int64_t *ring_bytes) {
  if (!s || !c || !p || !ring_bytes || s->hidden <= 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_pipe_params q = {c->tile_m, c->minibatch_rows, c->macrobatch_minibatches, 2};
  if (c->ring_bytes < 0 || q.tile_m <= 0 || q.minibatch_rows <= 0 || q.macro_minibatches <= 0)
    return MOK_ERR_INVALID_ARGUMENT;
  const int64_t region_bytes = mok_pipe_macro_rows(&q) * s->hidden * 2;
  int64_t regions = c->ring_bytes == 0 ? MOK_PIPE_DEFAULT_REGIONS : c->ring_bytes / region_bytes;
  if (regions > INT32_MAX) regions = INT32_MAX;
  q.ring_regions = (int32_t)regions;
  if (mok_pipe_check(&q) != MOK_SCHED_OK) return MOK_ERR_INVALID_ARGUMENT;
  *p = q;
  *ring_bytes = mok_pipe_ring_rows(&q) * s->hidden * 2;
  return MOK_SUCCESS;
}
