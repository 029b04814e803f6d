/* ring_view.h — C entry point of the kernel that cuts one macrobatch's view out of a schedule
 * (schedule/pipeline_core.h): what the expert kernels read when a pass walks the token ring. */
#ifndef MOK_RING_VIEW_H
#define MOK_RING_VIEW_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "schedule/pipeline_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Macrobatch b's view of the schedule (offset [experts + 1], count [experts], row_src [capacity]):
 * view_offset [experts + 1] and view_count [experts] as mok_pipe_view_expert gives them, and
 * view_row_src [region rows] = the macrobatch's rows' sources, -1 past its end. Enqueued on
 * stream; nothing leaves the device. */
cudaError_t mok_ring_view(const mok_pipe_params *p, const int32_t *offset, const int32_t *count,
                          const int32_t *row_src, int experts, int64_t b, int32_t *view_offset,
                          int32_t *view_count, int32_t *view_row_src, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
