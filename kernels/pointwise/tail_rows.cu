/* tail_rows.cu — each expert's tail rows zeroed in a few bf16 row buffers (tail_rows.h): one CTA
 * per (expert, buffer), 16-byte stores. */
#include <stdint.h>
#include "kernels/pointwise/tail_rows.h"

typedef struct {
  mok_tail_buf b[MOK_TAIL_BUFS];
} tail_bufs;

__global__ void zero_tail_rows_kernel(const int32_t *offset, const int32_t *count, int64_t m_total,
                                      tail_bufs bufs) {
  const int e = blockIdx.x;
  const mok_tail_buf b = bufs.b[blockIdx.y];
  const int32_t cnt = count[e];
  if (cnt < 0 || !b.rows) return;
  const int64_t r0 = (int64_t)offset[e] + cnt, end = (int64_t)offset[e] + (cnt + 15) / 16 * 16;
  const int64_t r1 = end < m_total ? end : m_total, nv = b.cols / 8;
  for (int64_t i = threadIdx.x; i < (r1 - r0) * nv; i += blockDim.x) {
    const int64_t row = r0 + i / nv, c = i % nv;
    ((uint4 *)((uint16_t *)b.rows + row * b.ld))[c] = make_uint4(0, 0, 0, 0);
  }
}

extern "C" cudaError_t mok_zero_tail_rows(const int32_t *expert_offset, const int32_t *expert_count,
                                          int num_experts, int64_t m_total,
                                          const mok_tail_buf *bufs, int nbufs,
                                          cudaStream_t stream) {
  if (num_experts <= 0 || nbufs <= 0) return cudaSuccess;
  if (nbufs > MOK_TAIL_BUFS) return cudaErrorInvalidValue;
  tail_bufs t = {};
  for (int i = 0; i < nbufs; ++i) {
    if (bufs[i].rows && (bufs[i].cols % 8 || bufs[i].ld % 8 || ((uintptr_t)bufs[i].rows & 15)))
      return cudaErrorInvalidValue;
    t.b[i] = bufs[i];
  }
  zero_tail_rows_kernel<<<dim3((unsigned)num_experts, (unsigned)nbufs), 256, 0, stream>>>(
      expert_offset, expert_count, m_total, t);
  return cudaGetLastError();
}
