/* pipeline.h — host entry point of the ring plan (the plan itself: pipeline_core.h): the knobs of a
 * config and the group size turned into pipeline parameters and the ring's size. */
#ifndef MOK_PIPELINE_H
#define MOK_PIPELINE_H

#include "mok.h"
#include "schedule/pipeline_core.h"

/* Fills *p from the shape, config, group size ep and the plan's tile_m and minibatch_rows:
 * macrobatch_minibatches, the schedule's capacity (config.schedule_capacity, or the worst case),
 * the most rows one expert can get, and as many ring regions as ring_bytes holds (at most one per
 * macrobatch); ring_bytes 0 is no ring (ring_regions 0). *ring_bytes gets the ring's size: its
 * rows times H bf16. MOK_ERR_INVALID_ARGUMENT when the knobs are off or a nonzero ring_bytes holds
 * less than one region. */
mok_status mok_pipe_from_config(const mok_shape *shape, const mok_config *config, int ep,
                                int tile_m, int minibatch_rows, mok_pipe_params *p,
                                int64_t *ring_bytes);

#endif
