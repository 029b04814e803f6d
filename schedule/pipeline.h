/* pipeline.h — host entry point of the ring plan (the plan itself: pipeline_core.h): the knobs of a
 * config turned into pipeline parameters and the ring's size. */
#ifndef MOK_PIPELINE_H
#define MOK_PIPELINE_H

#include "mok.h"
#include "schedule/pipeline_core.h"

/* Ring regions when config.ring_bytes is 0. */
#define MOK_PIPE_DEFAULT_REGIONS 4

/* Fills *p from the config: tile_m, minibatch_rows, macrobatch_minibatches, and as many regions as
 * ring_bytes holds (MOK_PIPE_DEFAULT_REGIONS when it is 0). *ring_bytes gets the ring's size: its
 * rows times H bf16. MOK_ERR_INVALID_ARGUMENT when the knobs are off or ring_bytes holds fewer than
 * two macrobatches. */
mok_status mok_pipe_from_config(const mok_shape *shape, const mok_config *config,
                                mok_pipe_params *p, int64_t *ring_bytes);

#endif
