/* ring_view.cu — one macrobatch's view of the schedule, on the device: the plan's per-expert
 * entries (pipeline_core.h) and the macrobatch's slice of row_src, so that the expert kernels and
 * the token moves run on a ring region unchanged. */
#include "schedule/ring_view.h"

#define VIEW_THREADS 256
#define VIEW_MAX_BLOCKS 512

__global__ void ring_view_kernel(mok_pipe_params p, const int32_t *offset, const int32_t *count,
                                 const int32_t *row_src, int experts, int64_t b,
                                 int32_t *view_offset, int32_t *view_count, int32_t *view_row_src) {
  __shared__ int span[2];
  if (threadIdx.x == 0) mok_pipe_macro_experts(&p, offset, experts, b, &span[0], &span[1]);
  __syncthreads();
  const int e_lo = span[0], e_hi = span[1];
  if (blockIdx.x == 0)
    for (int e = threadIdx.x; e <= experts; e += blockDim.x) {
      int32_t o, c;
      mok_pipe_view_expert(offset, count, e, e_lo, e_hi, &o, &c);
      view_offset[e] = o;
      if (e < experts) view_count[e] = c;
    }
  const int64_t lo = offset[e_lo], rows = offset[e_hi] - lo, region = mok_pipe_region_rows(&p);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < region;
       i += (int64_t)gridDim.x * blockDim.x)
    view_row_src[i] = i < rows ? row_src[lo + i] : -1;
}

extern "C" cudaError_t mok_ring_view(const mok_pipe_params *p, const int32_t *offset,
                                     const int32_t *count, const int32_t *row_src, int experts,
                                     int64_t b, int32_t *view_offset, int32_t *view_count,
                                     int32_t *view_row_src, cudaStream_t stream) {
  const int64_t region = mok_pipe_region_rows(p);
  int64_t blocks = (region + VIEW_THREADS - 1) / VIEW_THREADS;
  if (blocks < 1) blocks = 1;
  if (blocks > VIEW_MAX_BLOCKS) blocks = VIEW_MAX_BLOCKS;
  ring_view_kernel<<<(int)blocks, VIEW_THREADS, 0, stream>>>(*p, offset, count, row_src, experts, b,
                                                             view_offset, view_count, view_row_src);
  return cudaGetLastError();
}
