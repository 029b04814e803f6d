/* tail_rows.h — zeroes each expert's tail: its rows past its count up to the next multiple of 16,
 * which the BF16 weight gradient's last 16-row slice reads as zeros (kernels/gemm/bf16_wgrad.cu;
 * docs/DESIGN.md, "The weight gradient's tail rows"), in a few bf16 row buffers at once
 * (tail_rows.cu). Only enqueues work on the given stream and returns the launch status. */
#ifndef MOK_POINTWISE_TAIL_ROWS_H
#define MOK_POINTWISE_TAIL_ROWS_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOK_TAIL_BUFS 4

/* A bf16 row buffer [m_total, ld]: its first cols columns (a multiple of 8) are zeroed. */
typedef struct {
  void *rows;
  int64_t ld, cols;
} mok_tail_buf;

/* For each expert e with expert_count[e] >= 0 (a ring view's other experts have -1), rows
 * [offset[e] + count[e], offset[e] + count[e] rounded up to 16) of every buffer, those below
 * m_total, set to zero (rows at or past m_total are past the GEMMs' tensor maps, which read them
 * as zeros). nbufs at most MOK_TAIL_BUFS; a buffer with rows NULL is skipped. */
cudaError_t mok_zero_tail_rows(const int32_t *expert_offset, const int32_t *expert_count,
                               int num_experts, int64_t m_total, const mok_tail_buf *bufs,
                               int nbufs, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_POINTWISE_TAIL_ROWS_H */
