/* gemm_fused.h — the grouped GEMMs that carry the layer's communication (kernels/move/
 * fused_move.h describes a pull or a push): the BF16 gate+up pulling its rows, the BF16 and FP8
 * products pushing theirs from the epilogues, and the FP8 routed experts' forward MLP as one
 * launch. Layout contract, operands and launch options as in gemm.h. */
#ifndef MOK_GEMM_FUSED_H
#define MOK_GEMM_FUSED_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"
#include "kernels/gemm/gemm.h"
#include "kernels/move/fused_move.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mok_gg_bf16_gate_up_swiglu with x = recv [m_total, hidden] pulled by pull->ctas comm CTAs of
 * the same launch (added to the launch's grid, rounded up to its cluster size). */
mok_status mok_gg_bf16_gate_up_swiglu_pulled(void *recv, const void *w_gate, const void *w_up,
                                             void *act, void *preact, const int32_t *expert_offset,
                                             const int32_t *expert_count, int num_experts,
                                             int64_t m_total, int64_t inter, int64_t hidden,
                                             int use_limit, float limit, const mok_gg_move *pull,
                                             const mok_gg_launch *launch, cudaStream_t stream);

/* mok_gg_bf16_fwd, and c's real rows pushed to their slots by the epilogues. */
mok_status mok_gg_bf16_fwd_pushed(const void *a, const void *b, void *c,
                                  const int32_t *expert_offset, const int32_t *expert_count,
                                  int num_experts, int64_t m_total, int64_t n, int64_t k,
                                  const mok_gg_move *push, const mok_gg_launch *launch,
                                  cudaStream_t stream);

/* mok_gg_bf16_dgrad_pair, and da's real rows pushed to their slots by the epilogues. */
mok_status mok_gg_bf16_dgrad_pair_pushed(const void *dc, const void *w0, const void *w1, void *da,
                                         const int32_t *expert_offset, const int32_t *expert_count,
                                         int num_experts, int64_t m_total, int64_t n_each,
                                         int64_t k, const mok_gg_move *push,
                                         const mok_gg_launch *launch, cudaStream_t stream);

/* mok_gg_fp8_fwd, and c's real rows pushed to their slots by the epilogues. c NULL: the rows are
 * only pushed, nothing is stored locally. */
mok_status mok_gg_fp8_fwd_pushed(const void *a, const float *a_scales, const void *b,
                                 const float *b_scales, void *c, const int32_t *expert_offset,
                                 const int32_t *expert_count, int num_experts, int64_t m_total,
                                 int64_t n, int64_t k, const mok_gg_move *push,
                                 const mok_gg_launch *launch, cudaStream_t stream);

/* The routed experts' FP8 forward MLP in one persistent launch (fp8_mlp.cu):
 * mok_gg_fp8_gate_up_swiglu_quantized, then mok_gg_fp8_fwd (out) or mok_gg_fp8_fwd_pushed (push;
 * out may then be NULL), bit for bit, with each 128-row block's down tiles starting as soon as
 * its gate+up tiles have stored their activations. Operands as those calls take them: x
 * [m_total, hidden] e4m3 with x_scales; w_gate, w_up [E, inter, hidden]; w_down [E, hidden,
 * inter] (e4m3, 128x128 block scales); preact NULL or [m_total, 2 * inter] bf16; q_act [m_total,
 * inter] e4m3 and q_scales the activations. sync: mok_gg_fp8_mlp_sync_ints(m_total) int32 of
 * device memory the launch zeroes and uses; err: the sticky error word, set to MOK_ERR_TIMEOUT
 * when a wait for rows exceeds timeout_ns. MOK_ERR_NOT_SUPPORTED where one launch does not cover
 * the call (mok_gg_fp8_mlp_covers in gemm_plan.h is false): the caller makes the two launches.
 * launch: its max_ctas only (the launch completes with any number of resident CTAs). */
typedef struct {
  const void *x, *w_gate, *w_up, *w_down;
  const float *x_scales, *w_gate_scales, *w_up_scales, *w_down_scales;
  void *preact, *q_act, *out;
  float *q_scales;
  const mok_gg_move *push;
  const int32_t *expert_offset, *expert_count;
  int num_experts;
  int64_t m_total, inter, hidden;
  int use_limit;
  float limit;
  int32_t *sync, *err;
  int64_t timeout_ns;
} mok_gg_fp8_mlp;

int64_t mok_gg_fp8_mlp_sync_ints(int64_t m_total);
mok_status mok_gg_fp8_mlp_forward(const mok_gg_fp8_mlp *m, const mok_gg_launch *launch,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_GEMM_FUSED_H */
