/* gpu_ring.c — the token ring (docs/DESIGN.md, key idea 4; its walk in schedule/pipeline_core.h): a
 * schedule's per-row buffers hold ring_regions regions of one macrobatch each instead of every row
 * the capacity allows, and the passes walk the macrobatches one step at a time, each step on a
 * view of the schedule: that macrobatch's experts (offsets from its first row, the others at
 * count -1) and row sources, and one region's buffers. The views are built on the device; the host
 * only counts steps, which the shape and knobs fix. */
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"
#include "schedule/ring_view.h"

int mok_gpu_ring_on(const mok_workspace *w) { return w->pipe.ring_regions > 0; }

mok_status mok_gpu_ring_view(const mok_schedule *s, int64_t b, int32_t region, mok_schedule *v,
                             cudaStream_t stream) {
  const mok_workspace *w = s->ws;
  const int64_t rows = mok_pipe_region_rows(&w->pipe), first = (int64_t)region * rows;
  const int64_t H = w->shape.hidden, I = w->shape.intermediate;
  TRY_CUDA(mok_ring_view(&w->pipe, s->expert_offset, s->expert_count, s->row_src, w->el, b,
                         w->view_offset, w->view_count, w->view_row_src, stream));
  *v = *s;
  v->expert_offset = w->view_offset;
  v->expert_count = w->view_count;
  v->row_src = w->view_row_src;
  v->rows = rows;
  v->recv_x = (char *)s->recv_x + first * H * 2;
  v->g = (char *)s->g + first * I * 4; /* g | u, bf16 */
  v->a = (char *)s->a + first * I * 2;
  v->out_rows = s->out_rows ? (char *)s->out_rows + first * H * 2 : NULL;
  return MOK_SUCCESS;
}
