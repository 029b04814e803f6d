/* fused_dispatch.h — C API of the fused path's first step: the forward gate+up GEMM (SwiGLU
 * epilogue) whose last CTAs are comm CTAs pulling the rows of A from the peers while the others
 * compute (kernels/grouped_gemm_bf16.cu, kernels/comm_pull.cuh).
 *
 * The comm CTAs walk the schedule's rows in minibatches of mb_rows: each warp of a comm CTA takes
 * whole minibatches (minibatch m goes to comm warp m mod (ctas * 6)), copies every real row of it
 * from (source rank, token) of the peers' staged x into recv with bulk copies through shared memory,
 * waits for its stores, and sets ready[m] = 1 with release semantics. The producer warp of a compute
 * CTA acquires the flags of a tile's row blocks before its first TMA load of them (a bounded wait:
 * past timeout_ns the error word gets MOK_ERR_TIMEOUT and the wait ends). Padding rows are never
 * copied (the GEMM ignores their content). ready must be zero when the kernel starts. */
#ifndef MOK_FUSED_DISPATCH_H
#define MOK_FUSED_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char *const *peer_base;       /* device [ep]: every rank's symmetric base, mapped here     */
  size_t x_off;                 /* offset of the staged x [T, H] bf16 in the symmetric buffer */
  int64_t tokens;               /* T per rank                                                */
  int top_k;                    /* k                                                         */
  const int32_t *row_src;       /* schedule: [capacity], -1 for padding rows                 */
  const int32_t *expert_offset; /* schedule: [experts_local + 1]                             */
  int32_t *ready;               /* [ceil(m_total / mb_rows)] flags, zero at the start        */
  int mb_rows;                  /* rows per minibatch, a multiple of 128                     */
  int ctas;                     /* comm CTAs, >= 1 (rounded up to the cluster size)           */
  int64_t timeout_ns;           /* bound on a producer's wait for a flag                     */
  int32_t *err;                 /* the workspace's sticky error word                         */
} mok_gg_pull;

/* mok_gg_bf16_gate_up_swiglu with x = recv [m_total, hidden] filled by the kernel's comm CTAs
 * from the peers (see above) instead of beforehand. */
mok_status mok_gg_bf16_gate_up_swiglu_pulled(void *recv, const void *w_gate, const void *w_up,
                                             void *act, void *preact, const int32_t *expert_offset,
                                             const int32_t *expert_count, int num_experts,
                                             int64_t m_total, int64_t inter, int64_t hidden,
                                             int use_limit, float limit, const mok_gg_pull *pull,
                                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_FUSED_DISPATCH_H */
