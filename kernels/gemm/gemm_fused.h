/* fused_comm.h — C API of the fused path's communication inside the grouped GEMMs
 * (kernels/grouped_gemm_bf16.cu and, for the FP8 forward's push, kernels/grouped_gemm_fp8.cu and
 * the one-launch MLP kernels/grouped_gemm_fp8_mlp.cu;
 * device side of the pull kernels/comm_move.cuh, of the push gg_push_pass).
 *   pull (gate+up, forward dispatch): the last `ctas` CTAs of the launch are comm CTAs. The
 *     schedule's rows are walked in minibatches of mb_rows, in order; every comm warp (6 per CTA)
 *     moves its share of each minibatch's real rows (rows[row] <- x[token] of the row's source rank,
 *     bulk copies through shared memory; padding rows never move) and then adds 1 to flags[m]
 *     (release). The GEMM's producer acquires a tile's minibatches (flag == ctas * 6) before its
 *     first TMA load of them. flags must be zero when the kernel starts; every wait is bounded by
 *     timeout_ns (then the error word gets MOK_ERR_TIMEOUT), and a set error word ends the waits.
 *   push (down forward: combine; gate+up data gradient: reverse dispatch): no comm CTAs. The
 *     epilogues store each real row of the output both locally (TMA) and into the row's (token, j)
 *     slot of the source rank at slots_off (16-byte stores from the staging buffer), then fence at
 *     system scope; the cross-rank barrier after the kernel publishes them. Only peer_base,
 *     peer_off, tokens, top_k, row_src and push are read. */
#ifndef MOK_FUSED_COMM_H
#define MOK_FUSED_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char *const *peer_base;       /* device [ep]: every rank's symmetric base, mapped here      */
  size_t peer_off;              /* pull: the staged x [T, H]; push: the slots [T*k, H]        */
  int64_t tokens;               /* T per rank                                                 */
  int top_k;                    /* k                                                          */
  const int32_t *row_src;       /* schedule: [capacity], -1 for padding rows                  */
  const int32_t *expert_offset; /* schedule: [experts_local + 1]                              */
  int32_t *flags;               /* [ceil(m_total / mb_rows)], zero at the start               */
  int mb_rows;                  /* rows per minibatch, a multiple of 128                      */
  int ctas;                     /* comm CTAs, >= 1 (rounded up to the cluster size)           */
  int push;                     /* 0: pull, 1: push                                           */
  int64_t timeout_ns;           /* bound on every wait                                        */
  int32_t *err;                 /* the workspace's sticky error word                          */
} mok_gg_move;

/* mok_gg_bf16_gate_up_swiglu with x = recv [m_total, hidden] pulled by the comm CTAs. */
mok_status mok_gg_bf16_gate_up_swiglu_pulled(void *recv, const void *w_gate, const void *w_up,
                                             void *act, void *preact, const int32_t *expert_offset,
                                             const int32_t *expert_count, int num_experts,
                                             int64_t m_total, int64_t inter, int64_t hidden,
                                             int use_limit, float limit, const mok_gg_move *pull,
                                             cudaStream_t stream);

/* mok_gg_bf16_fwd, and c's real rows pushed to their slots by the epilogues. */
mok_status mok_gg_bf16_fwd_pushed(const void *a, const void *b, void *c,
                                  const int32_t *expert_offset, const int32_t *expert_count,
                                  int num_experts, int64_t m_total, int64_t n, int64_t k,
                                  const mok_gg_move *push, cudaStream_t stream);

/* mok_gg_fp8_fwd (kernels/grouped_gemm.h), and c's real rows pushed to their slots by the
 * epilogues (the 128-column kernel with its staged epilogue). c NULL: the rows are only pushed,
 * nothing is stored locally. */
mok_status mok_gg_fp8_fwd_pushed(const void *a, const float *a_scales, const void *b,
                                 const float *b_scales, void *c, const int32_t *expert_offset,
                                 const int32_t *expert_count, int num_experts, int64_t m_total,
                                 int64_t n, int64_t k, const mok_gg_move *push,
                                 cudaStream_t stream);

/* The routed experts' FP8 forward MLP in one persistent launch (kernels/grouped_gemm_fp8_mlp.cu):
 * mok_gg_fp8_gate_up_swiglu_quantized, then mok_gg_fp8_fwd (out) or mok_gg_fp8_fwd_pushed (push;
 * out may then be NULL), bit for bit, with each 128-row block's down tiles starting as soon as
 * its gate+up tiles have stored their activations. Layout and operands as those calls take them:
 * x [m_total, hidden] e4m3 with x_scales; w_gate, w_up [E, inter, hidden]; w_down [E, hidden,
 * inter] (e4m3, 128x128 block scales); preact NULL or [m_total, 2 * inter] bf16; q_act [m_total,
 * inter] e4m3 and q_scales the activations. sync: mok_gg_fp8_mlp_sync_ints(m_total) int32 of
 * device memory the launch zeroes and uses; err: the sticky error word, set to
 * MOK_ERR_TIMEOUT when a wait for rows exceeds timeout_ns. MOK_ERR_NOT_SUPPORTED where one launch
 * does not cover the call (mok_gg_fp8_mlp_supported false): the caller makes the two launches.
 * pull, when set, is the dispatch inside the launch: x and x_scales are then written by the
 * launch itself, each row block's real rows pulled from their source ranks' staged codes
 * (pull->peer_off) and scales (pull_scales_off) as mok's FP8 dispatch stages them
 * (mok_gg_fp8_quantize_act_rows), its padding rows zero codes with scale 1, bit for bit what
 * v1_dispatch_pull_fp8 writes, before the block's gate+up tiles load them. pull->ctas: how many
 * of the launch's CTAs pull, beside their GEMM tiles (0: all); only peer_base, peer_off, tokens,
 * top_k, row_src and ctas are read. */
typedef struct {
  const void *x, *w_gate, *w_up, *w_down;
  const float *x_scales, *w_gate_scales, *w_up_scales, *w_down_scales;
  void *preact, *q_act, *out;
  float *q_scales;
  const mok_gg_move *push, *pull;
  size_t pull_scales_off;
  const int32_t *expert_offset, *expert_count;
  int num_experts;
  int64_t m_total, inter, hidden;
  int use_limit;
  float limit;
  int32_t *sync, *err;
  int64_t timeout_ns;
} mok_gg_fp8_mlp;

int64_t mok_gg_fp8_mlp_sync_ints(int64_t m_total);
int mok_gg_fp8_mlp_supported(int num_experts, int64_t hidden);
mok_status mok_gg_fp8_mlp_forward(const mok_gg_fp8_mlp *m, cudaStream_t stream);

/* The FP8 backward's d_act = dy W_down (mok_gg_fp8_fwd on dy [m_total, hidden] e4m3 and the
 * transposed down weights [num_experts * inter, hidden]) with the SwiGLU backward in the
 * epilogue (kernels/grouped_gemm_fp8_dswiglu.cuh): from the forward's pre-activations (preact
 * [m_total, 2 inter] bf16 g | u), its activations (act [m_total, inter] e4m3 with act_scales)
 * and each row's router weight rw, it writes dgu = [dg | du] of rw * d_act (bf16
 * [m_total, 2 inter]) and dgu quantized 1x128 (q, q_scales: the dx product's A operand), bit for
 * bit v1_swiglu_backward_rw's, and d_rw = dot(d_act, act) into each real row's slot (drw: a push
 * move whose peer_off is the [T * k] fp32 slots; each row's parts, one per 256 columns, in part
 * (mok_gg_fp8_dswiglu_part_floats), added in column order by a row kernel after the product).
 * Padding rows: zeros, zero codes, scale 1. d_act itself is not written. Needs inter % 256 == 0
 * and the 256-column kernel (mok_gg_fp8_dswiglu_supported). */
typedef struct {
  const void *dy, *w_down_t;
  const float *dy_scales, *w_down_t_scales;
  const void *preact, *act;
  const float *act_scales, *rw;
  void *dgu, *q;
  float *q_scales, *part;
  const mok_gg_move *drw;
  const int32_t *expert_offset, *expert_count;
  int num_experts;
  int64_t m_total, inter, hidden;
  int use_limit;
  float limit;
} mok_gg_fp8_dswiglu;

int64_t mok_gg_fp8_dswiglu_part_floats(int64_t m_total, int64_t inter);
int mok_gg_fp8_dswiglu_supported(int64_t inter);
mok_status mok_gg_fp8_dact_dswiglu(const mok_gg_fp8_dswiglu *m, cudaStream_t stream);

/* mok_gg_bf16_dgrad_pair, and da's real rows pushed to their slots by the epilogues. */
mok_status mok_gg_bf16_dgrad_pair_pushed(const void *dc, const void *w0, const void *w1, void *da,
                                         const int32_t *expert_offset, const int32_t *expert_count,
                                         int num_experts, int64_t m_total, int64_t n_each,
                                         int64_t k, const mok_gg_move *push, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_FUSED_COMM_H */
