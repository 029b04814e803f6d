/* gpu_experts.h — what the expert stages (gpu_experts*.c) share: the rows one grouped call covers,
 * the plan's launch options for each GEMM, the BF16 MLP on the grouped GEMMs (the routed experts'
 * and the shared expert's), and the fused path's moves. Host C, internal to api/. */
#ifndef MOK_GPU_EXPERTS_H
#define MOK_GPU_EXPERTS_H

#include "api/gpu_internal.h"
#include "kernels/gemm/gemm_fused.h"

/* The rows one grouped call covers: the schedule's routed experts, or the dense shared expert. */
typedef struct {
  const mok_schedule *s;  /* NULL: the shared expert                   */
  const int32_t *offset, *count;
  int experts;
  int64_t m_total, rows;  /* rows: the oracle GEMMs' dense row count   */
} mok_expert_rows;

mok_expert_rows mok_routed_rows(const mok_schedule *s);
/* The shared expert as one expert of the schedule's T rows; its device table is written for that
 * count at the start of each shared-expert pass (mok_shared_table). */
mok_expert_rows mok_shared_rows(const mok_schedule *s);
mok_status mok_shared_table(const mok_schedule *s, cudaStream_t stream);

/* The plan's launch options: the routed experts' BF16 GEMMs, the shared expert's (on at most
 * max_ctas CTAs, 0: every SM), and an FP8 product of n output columns (its warpgroups where the
 * 128-column kernel runs it). */
mok_gg_launch mok_routed_launch(const mok_workspace *w);
mok_gg_launch mok_shared_launch(const mok_workspace *w, int max_ctas);
mok_gg_launch mok_fp8_launch(const mok_workspace *w, int64_t n, int shared, int max_ctas);

/* The oracle GEMMs' output mode for the weight gradients g asks for (kernels/v1/v1.h). */
int mok_grad_mode(const mok_grads *g);

/* dW[e] (=|+=) sum over the rows r of dC[r, :n]^T A[r, :k]; NaN when the device error word is
 * set. bf16 accumulation has no grouped kernel: the oracle's serves it. cluster: 1 or 2 (cluster
 * pairs, kernels/gemm/bf16_wgrad.cu), 0: single CTAs; l: only its grid cap applies. */
mok_status mok_bf16_wgrad(const mok_workspace *w, mok_expert_rows r, const mok_gg_launch *l,
                          int cluster, const void *dc, int64_t ld_dc, const void *a,
                          int64_t ld_a, void *dw, int64_t n, int64_t k, const mok_grads *g,
                          cudaStream_t stream);

/* act = SwiGLU(x W_gate^T, x W_up^T) with the pre-activations kept (bf16, g | u) in preact;
 * out = act W_down^T. */
mok_status mok_bf16_mlp_forward(const mok_workspace *w, mok_expert_rows r, const mok_gg_launch *l,
                                const void *x, const void *w_gate, const void *w_up,
                                const void *w_down, void *preact, void *act, void *out, int64_t I,
                                cudaStream_t stream);

/* From dout (the gradient of out): weight gradients, and dx = dgu [W_gate; W_up] (dx may alias
 * dout), pushed to the source ranks' slots too when push is set. Scratch: d_act [rows, I], dgu
 * [rows, 2I]. rows_dev: the device count of the rows the SwiGLU backward covers (NULL: m_total).
 * wgrad_cluster: the clusters of the weight gradients of W_down and of W_gate, W_up (the plan's,
 * for the routed experts), NULL: single CTAs. */
mok_status mok_bf16_mlp_backward(const mok_workspace *w, mok_expert_rows r,
                                 const mok_gg_launch *l, const void *x, const void *w_gate,
                                 const void *w_up, const void *w_down, const void *preact,
                                 const void *act, const void *dout, void *d_act, void *dgu,
                                 void *dx, void *dw_gate, void *dw_up, void *dw_down,
                                 const int32_t *rows_dev, int64_t I, const mok_grads *g,
                                 const mok_gg_move *push, const int *wgrad_cluster,
                                 cudaStream_t stream);

/* The fused path's communication for this schedule: pull from the staged x (ctas comm CTAs), or
 * push into the slots (by the epilogues). */
mok_gg_move mok_fused_move(const mok_schedule *s, int push, int ctas);

/* The oracle path (gpu_experts_v1.c): the routed experts over the schedule's rows, the shared
 * expert over the rank's tokens, and its weight gradient (which mok_bf16_wgrad also uses for bf16
 * accumulation). */
mok_status mok_v1_routed_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                 void *out_rows, cudaStream_t stream);
mok_status mok_v1_routed_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                  void *d_out, void *dx_rows, const mok_grads *g,
                                  cudaStream_t stream);
mok_status mok_v1_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                 cudaStream_t stream);
mok_status mok_v1_shared_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  const void *dy, const mok_grads *g, cudaStream_t stream);
mok_status mok_v1_wgrad(const mok_schedule *s, const int32_t *err, const void *A, int64_t lda,
                        const void *B, int64_t ldb, void *C, int64_t M, int64_t N, int64_t rows,
                        int mode, cudaStream_t stream);

#endif /* MOK_GPU_EXPERTS_H */
