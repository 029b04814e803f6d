/* gemm.h — C API of mok's grouped (MoE) GEMMs for sm_90a: persistent, warp-specialized kernels
 * (a TMA producer warp, two or three wgmma consumer warpgroups, the tile scheduler of
 * tile_scheduler.h kept apart from the math). Owns the layout contract below; implemented in
 * the .cu files of kernels/gemm. The GEMMs that carry the layer's communication are in
 * gemm_fused.h; the FP8 quantizers that make their operands in kernels/pointwise/fp8_quant.h.
 *
 * Layout contract (shared by every call):
 *   - Rows of all local experts are stacked: expert l owns rows [expert_offset[l],
 *     expert_offset[l+1]) of the row-major activation tensors; the first expert_count[l] rows are
 *     real, the rest padding (any content). Offsets are multiples of MOK_GG_TILE_M (128).
 *   - expert_offset (int32, E + 1 entries) and expert_count (int32, E entries) are DEVICE
 *     pointers; the host knows only m_total, an upper bound of the rows (the buffers' capacity,
 *     >= expert_offset[E]). Nothing is read back to the host: every call can be graph-captured.
 *   - Experts with no rows cost nothing (no tiles are scheduled for them) in the row-grouped
 *     calls; in the weight-gradient call their gradient is zero (or left as is when accumulating).
 *   - Weights are [E, N, K] row-major ("out x in", like nn.Linear.weight).
 *   - Output rows of padding rows may be written with anything.
 *   - Sizes: n and k multiples of MOK_GG_ALIGN (64; FP8: 128); pointers 16-byte aligned;
 *     m_total >= 1.
 * How a call runs (cluster size, consumer warpgroups, grid cap) is given by its mok_gg_launch:
 * the layer passes its plan's choices (api/plan.c), a NULL launch takes the defaults that
 * gemm_plan.h computes from the call's own sizes. No choice changes a result bit.
 * All calls only enqueue work on stream (no host synchronization, no allocation) and return a
 * mok_status: MOK_ERR_INVALID_ARGUMENT (NULL pointer, a launch choice the call cannot run),
 * MOK_ERR_INVALID_SHAPE, MOK_ERR_MISALIGNED, MOK_ERR_NOT_SUPPORTED (no sm_90 device),
 * MOK_ERR_CUDA (a launch or tensor-map failure, recorded: kernels/common/launch_error.h). */
#ifndef MOK_GEMM_H
#define MOK_GEMM_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"
#include "kernels/common/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOK_GG_TILE_M 128 /* expert_offset granularity (rows per GEMM tile)        */
#define MOK_GG_ALIGN 64   /* n and k must be multiples of this (one 128-byte row)  */

/* How one launch runs; 0 in a field: the default for the call's sizes (gemm_plan.h, with the
 * rows per expert taken as m_total / num_experts). The results do not depend on any field. */
typedef struct {
  int cluster;    /* BF16 row-grouped calls: 1 (single CTAs) or 2 (cluster pairs of vertically
                     adjacent tiles of one expert sharing the B tile by multicast). BF16 weight
                     gradient: 1 (the default) or 2 (cluster pairs splitting each unit's dW row
                     tiles, sharing its activation blocks A by multicast). FP8 weight gradient with
                     expert_scales 2: 1 or 2 (pairs sharing B; needs m a multiple of 256).
                     Other FP8 calls: single CTAs only.                                      */
  int warpgroups; /* FP8 products whose columns do not split into 256 (the 128-column kernel):
                     2 (128-row tiles) or 3 (192-row tiles) consumer warpgroups. Other calls:
                     0 only.                                                                  */
  int max_ctas;   /* the persistent grid's cap in CTAs (whole clusters); 0: every co-resident
                     CTA. A kernel running beside the launch on another stream keeps the
                     other SMs.                                                              */
  int32_t *tickets; /* BF16 in cluster pairs (all but the gate+up that pulls its rows): the
                     units' claim counters (tile_scheduler.h gg_claim_step), MOK_GG_TICKET_INTS
                     device ints, zero at the call and left zero by it, that no call running
                     at the same time uses; NULL: the library's own (one set per kernel file),
                     for callers whose calls never overlap on one device.                    */
} mok_gg_launch;

#define MOK_GG_TICKET_INTS 4

/* ---- BF16 -------------------------------------------------------------------------------- */

/* C[r, :] = A[r, :] x B[e]^T for each real row r of expert e.
 *   a:  [m_total, k] bf16        b: [num_experts, n, k] bf16        c: [m_total, n] bf16
 * Used for the forward down projection (a = act [M, I], b = W_down [E, H, I], c = [M, H]). */
mok_status mok_gg_bf16_fwd(const void *a, const void *b, void *c, const int32_t *expert_offset,
                           const int32_t *expert_count, int num_experts, int64_t m_total,
                           int64_t n, int64_t k, const mok_gg_launch *launch, cudaStream_t stream);

/* Forward gate + up with the SwiGLU epilogue fused:
 *   g = x W_gate[e]^T, u = x W_up[e]^T (fp32), act = silu(g) * u, or, when use_limit != 0,
 *   act = silu(min(g, limit)) * clamp(u, -limit, limit).
 *   x: [m_total, hidden] bf16; w_gate, w_up: [num_experts, inter, hidden] bf16;
 *   act: [m_total, inter] bf16;
 *   preact: NULL, or [m_total, 2 * inter] bf16 receiving g in columns [0, inter) and u in
 *   [inter, 2 * inter) (rounded to bf16; for the backward pass).
 *   inter must be a multiple of 128. */
mok_status mok_gg_bf16_gate_up_swiglu(const void *x, const void *w_gate, const void *w_up,
                                      void *act, void *preact, const int32_t *expert_offset,
                                      const int32_t *expert_count, int num_experts,
                                      int64_t m_total, int64_t inter, int64_t hidden,
                                      int use_limit, float limit, const mok_gg_launch *launch,
                                      cudaStream_t stream);

/* The same on the row-grouped kernel (kernels/gemm/bf16.cu), which mok_gg_bf16_gate_up_swiglu
 * runs when use_limit != 0: with the limit the tokens-on-N kernel measured no faster
 * (docs/PERF.md). Bitwise the same results. */
mok_status mok_gg_bf16_gate_up_swiglu_rows(const void *x, const void *w_gate, const void *w_up,
                                           void *act, void *preact, const int32_t *expert_offset,
                                           const int32_t *expert_count, int num_experts,
                                           int64_t m_total, int64_t inter, int64_t hidden,
                                           int use_limit, float limit,
                                           const mok_gg_launch *launch, cudaStream_t stream);

/* Backward data gradient: dA[r, :] = dC[r, :] x W[e] for each real row r of expert e.
 *   dc: [m_total, n] bf16    w: [num_experts, n, k] bf16 (the forward weight)    da: [m_total, k] */
mok_status mok_gg_bf16_dgrad(const void *dc, const void *w, void *da, const int32_t *expert_offset,
                             const int32_t *expert_count, int num_experts, int64_t m_total,
                             int64_t n, int64_t k, const mok_gg_launch *launch,
                             cudaStream_t stream);

/* The data gradient through a weight pair used side by side in the forward pass (gate and up):
 *   dA[r, :] = dC[r, :n_each] x W0[e] + dC[r, n_each:] x W1[e], one fp32 reduction over 2 n_each.
 *   dc: [m_total, 2 n_each] bf16;  w0, w1: [num_experts, n_each, k] bf16;  da: [m_total, k] bf16.
 *   n_each must be a multiple of 64. */
mok_status mok_gg_bf16_dgrad_pair(const void *dc, const void *w0, const void *w1, void *da,
                                  const int32_t *expert_offset, const int32_t *expert_count,
                                  int num_experts, int64_t m_total, int64_t n_each, int64_t k,
                                  const mok_gg_launch *launch, cudaStream_t stream);

/* Backward weight gradient, grouped over the reduction: for each expert e,
 *   dW[e] = sum over its real rows r (ascending, a fixed order: bitwise reproducible) of
 *           dC[r, :]^T A[r, :]          -> [n, k]
 *   dc: [m_total, n] bf16;  a: [m_total, k] bf16;
 *   dw: [num_experts, n, k], fp32 when out_fp32 != 0, else bf16.
 *   accumulate != 0 (fp32 only): dW[e] += the sum (an expert with no rows leaves dW[e] as is);
 *   otherwise dW[e] = the sum (zero for an expert with no rows).
 *   An expert's tail, its rows past its count up to the next multiple of 16, must hold zeros in
 *   both dc and a, or lie at or past m_total (the last 16-row slice is read whole;
 *   kernels/pointwise/tail_rows.h zeroes tails); its other padding rows are never read.
 *   expert_count[e] == -1: dW[e] is left as it is (an expert outside a ring view's macrobatch). */
mok_status mok_gg_bf16_wgrad(const void *dc, const void *a, void *dw, int out_fp32, int accumulate,
                             const int32_t *expert_offset, const int32_t *expert_count,
                             int num_experts, int64_t m_total, int64_t n, int64_t k,
                             const mok_gg_launch *launch, cudaStream_t stream);

/* The same over strided views: row r of dc starts at dc + r * ld_dc elements, of a at a + r *
 * ld_a (ld_dc >= n, ld_a >= k, multiples of 8), so dc may be a column block of a wider matrix
 * (the gate or the up half of the SwiGLU gradient). */
mok_status mok_gg_bf16_wgrad_ld(const void *dc, int64_t ld_dc, const void *a, int64_t ld_a,
                                void *dw, int out_fp32, int accumulate,
                                const int32_t *expert_offset, const int32_t *expert_count,
                                int num_experts, int64_t m_total, int64_t n, int64_t k,
                                const mok_gg_launch *launch, cudaStream_t stream);

/* ---- FP8 E4M3, block-scaled (1x128 activation blocks, 128x128 weight blocks, fp32 scales) ----
 * Operands as kernels/pointwise/fp8_quant.h makes them. The GEMMs accumulate each 128-long K
 * block on the tensor cores and apply scale_a[row] * scale_b[block] once per block (promoted on
 * the CUDA cores, or chained into an accumulator rescaled by the scales' ratio: fp8_wide.cuh).
 * n (inter) and k (hidden) must be multiples of 128; scale pointers 16-byte aligned. Products
 * whose n splits into 256 columns run the 256-column kernel, the others the 128-column kernel
 * (launch->warpgroups). */

/* C[r, :] = (A[r, :] * a_scales) x (B[e] * b_scales[e])^T, bf16 out.
 *   a: [m_total, k] e4m3, a_scales [k / 128][MOK_FP8_SCALE_ROWS(m_total)]; b: [num_experts, n, k]
 *   e4m3, b_scales [num_experts, n / 128, k / 128]; c: [m_total, n] bf16. */
mok_status mok_gg_fp8_fwd(const void *a, const float *a_scales, const void *b,
                          const float *b_scales, void *c, const int32_t *expert_offset,
                          const int32_t *expert_count, int num_experts, int64_t m_total,
                          int64_t n, int64_t k, const mok_gg_launch *launch, cudaStream_t stream);

/* FP8 gate + up with the fused SwiGLU epilogue (same activation and preact conventions as
 * mok_gg_bf16_gate_up_swiglu). x: [m_total, hidden] e4m3 with x_scales; w_gate, w_up:
 * [num_experts, inter, hidden] e4m3 with their [num_experts, inter / 128, hidden / 128] scales.
 * act: [m_total, inter] bf16. */
mok_status mok_gg_fp8_gate_up_swiglu(const void *x, const float *x_scales, const void *w_gate,
                                     const float *w_gate_scales, const void *w_up,
                                     const float *w_up_scales, void *act, void *preact,
                                     const int32_t *expert_offset, const int32_t *expert_count,
                                     int num_experts, int64_t m_total, int64_t inter,
                                     int64_t hidden, int use_limit, float limit,
                                     const mok_gg_launch *launch, cudaStream_t stream);

/* mok_gg_fp8_gate_up_swiglu with the activations quantized in the epilogue for the down
 * projection instead of stored in bf16: q_act [m_total, inter] e4m3 and q_scales
 * [inter / 128][MOK_FP8_SCALE_ROWS(m_total)], bit for bit what the 1x128 activation quantizer
 * gives on the bf16 activations, for the real rows (padding rows: unspecified). preact as there. */
mok_status mok_gg_fp8_gate_up_swiglu_quantized(const void *x, const float *x_scales,
                                               const void *w_gate, const float *w_gate_scales,
                                               const void *w_up, const float *w_up_scales,
                                               void *preact, void *q_act, float *q_scales,
                                               const int32_t *expert_offset,
                                               const int32_t *expert_count, int num_experts,
                                               int64_t m_total, int64_t inter, int64_t hidden,
                                               int use_limit, float limit,
                                               const mok_gg_launch *launch, cudaStream_t stream);

/* FP8 weight gradient: dW[e] = sum over expert e's real rows r of A[r, :m]^T B[r, :n] -> [m, n],
 * from A and B as the transposing quantizer (mok_fp8_quant_t) writes them: a_t [m rows of
 * m_pad codes], its scales at a_scales[block * a_ld + row] (a_ld >= m: a_t and a_scales may be a
 * row block of a wider quantized matrix, e.g. the gate or up half of [dg | du]), likewise b_t,
 * b_scales, b_ld. Token blocks are reduced in ascending order (deterministic):
 *   expert_scales 0 (both operands with 1x128 scales along the tokens): each 128-token block is
 *     one fp32 partial on the tensor cores, added times its row's and its column's scale on the
 *     CUDA cores;
 *   expert_scales 1 (both quantized with one scale per expert and column): the expert's blocks
 *     accumulate on the tensor cores, scaled once at the end (no promotion: the tensor cores'
 *     FP8 accumulation keeps ~14 bits, so the error grows with the expert's rows);
 *   expert_scales 2 (only B per expert and column): the blocks chain into an accumulator
 *     rescaled by A's row scales' ratio between blocks, B's column scales applied once.
 * dw: [num_experts, m, n], fp32 when out_fp32 (accumulate: added to, an expert with no rows left
 * as is), else bf16 (overwritten; accumulate not supported). expert_count[e] == -1: dW[e] left
 * as it is. m, n multiples of 128. */
mok_status mok_gg_fp8_wgrad(const void *a_t, const float *a_scales, int64_t a_ld, const void *b_t,
                            const float *b_scales, int64_t b_ld, void *dw, int out_fp32,
                            int accumulate, int expert_scales, const int32_t *expert_offset,
                            const int32_t *expert_count, int num_experts, int64_t m_total,
                            int64_t m, int64_t n, const mok_gg_launch *launch,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_GEMM_H */
