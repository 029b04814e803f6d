/* grouped_gemm.h — C API of mok's grouped (MoE) GEMMs for sm_90a: persistent, warp-specialized
 * kernels (TMA producer warp, two wgmma consumer warpgroups, a separate tile scheduler). Owns the
 * layout contract below; implemented in kernels/grouped_gemm_*.cu.
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
 *   - Weights are [E, N, K] bf16 row-major ("out x in", like nn.Linear.weight).
 *   - Output rows of padding rows may be written with anything.
 *   - Sizes: n and k multiples of MOK_GG_ALIGN (64); pointers 16-byte aligned; m_total >= 1.
 * All calls only enqueue work on stream (no host synchronization, no allocation) and return a
 * mok_status: MOK_ERR_INVALID_ARGUMENT (NULL pointer), MOK_ERR_INVALID_SHAPE, MOK_ERR_MISALIGNED,
 * MOK_ERR_NOT_SUPPORTED (no sm_90 device), MOK_ERR_CUDA (a launch or tensor-map failure). */
#ifndef MOK_GROUPED_GEMM_H
#define MOK_GROUPED_GEMM_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOK_GG_TILE_M 128 /* expert_offset granularity (rows per GEMM tile)        */
#define MOK_GG_ALIGN 64   /* n and k must be multiples of this (one 128-byte row)  */

/* Launch-shape hint for the calls this host thread makes next: the rows one expert typically has
 * (0, the default: m_total / num_experts, the capacity per expert, which a layer sizes for the
 * worst case). The variant choices (clusters of 2 for short experts, FP8 consumer warpgroups)
 * follow it; the results do not depend on it. Returns the previous value, to restore it. */
int64_t mok_gg_set_rows_hint(int64_t rows_per_expert);

/* Grid cap for the calls this host thread makes next: the persistent GEMMs launch at most `ctas`
 * CTAs (0, the default: every co-resident one), so that a kernel running beside them on another
 * stream keeps the other SMs (the layer's dispatch beside the shared expert). The results do not
 * depend on it. Returns the previous value, to restore it. */
int mok_gg_set_max_ctas(int ctas);

/* C[r, :] = A[r, :] x B[e]^T for each real row r of expert e.
 *   a:  [m_total, k] bf16        b: [num_experts, n, k] bf16        c: [m_total, n] bf16
 * Used for the forward down projection (a = act [M, I], b = W_down [E, H, I], c = [M, H]). */
mok_status mok_gg_bf16_fwd(const void *a, const void *b, void *c, const int32_t *expert_offset,
                           const int32_t *expert_count, int num_experts, int64_t m_total,
                           int64_t n, int64_t k, cudaStream_t stream);

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
                                      int use_limit, float limit, cudaStream_t stream);

/* Backward data gradient: dA[r, :] = dC[r, :] x W[e] for each real row r of expert e.
 *   dc: [m_total, n] bf16    w: [num_experts, n, k] bf16 (the forward weight)    da: [m_total, k] */
mok_status mok_gg_bf16_dgrad(const void *dc, const void *w, void *da, const int32_t *expert_offset,
                             const int32_t *expert_count, int num_experts, int64_t m_total,
                             int64_t n, int64_t k, cudaStream_t stream);

/* The data gradient through a weight pair used side by side in the forward pass (gate and up):
 *   dA[r, :] = dC[r, :n_each] x W0[e] + dC[r, n_each:] x W1[e], one fp32 reduction over 2 n_each.
 *   dc: [m_total, 2 n_each] bf16;  w0, w1: [num_experts, n_each, k] bf16;  da: [m_total, k] bf16.
 *   n_each must be a multiple of 64. */
mok_status mok_gg_bf16_dgrad_pair(const void *dc, const void *w0, const void *w1, void *da,
                                  const int32_t *expert_offset, const int32_t *expert_count,
                                  int num_experts, int64_t m_total, int64_t n_each, int64_t k,
                                  cudaStream_t stream);

/* Backward weight gradient, grouped over the reduction: for each expert e,
 *   dW[e] = sum over its real rows r (ascending, a fixed order: bitwise reproducible) of
 *           dC[r, :]^T A[r, :]          -> [n, k]
 *   dc: [m_total, n] bf16;  a: [m_total, k] bf16;
 *   dw: [num_experts, n, k], fp32 when out_fp32 != 0, else bf16.
 *   accumulate != 0 (fp32 only): dW[e] += the sum (an expert with no rows leaves dW[e] as is);
 *   otherwise dW[e] = the sum (zero for an expert with no rows). Padding rows are ignored.
 *   expert_count[e] == -1: dW[e] is left as it is (an expert outside a ring view's macrobatch). */
mok_status mok_gg_bf16_wgrad(const void *dc, const void *a, void *dw, int out_fp32, int accumulate,
                             const int32_t *expert_offset, const int32_t *expert_count,
                             int num_experts, int64_t m_total, int64_t n, int64_t k,
                             cudaStream_t stream);

/* The same over strided views: row r of dc starts at dc + r * ld_dc elements, of a at a + r *
 * ld_a (ld_dc >= n, ld_a >= k, multiples of 8), so dc may be a column block of a wider matrix
 * (the gate or the up half of the SwiGLU gradient). */
mok_status mok_gg_bf16_wgrad_ld(const void *dc, int64_t ld_dc, const void *a, int64_t ld_a,
                                void *dw, int out_fp32, int accumulate,
                                const int32_t *expert_offset, const int32_t *expert_count,
                                int num_experts, int64_t m_total, int64_t n, int64_t k,
                                cudaStream_t stream);

/* ---- FP8 E4M3, block-scaled (1x128 activation blocks, 128x128 weight blocks, fp32 scales) ----
 * Scales are decode factors: value = e4m3 * scale; a block's scale is amax / 448 (1 for an
 * all-zero block). The GEMMs accumulate each 128-long K block in fp32 on the tensor cores and
 * add it, times scale_a[row] * scale_b[block], into fp32 registers on the CUDA cores. n (inter)
 * and k (hidden) must be multiples of 128; scale pointers 16-byte aligned. */
#define MOK_GG_FP8_BLOCK 128

/* Rows of an activation scale table: m_total rounded up to 128. */
#define MOK_GG_FP8_SCALE_ROWS(m_total) ((((m_total) + 127) / 128) * 128)

/* x: [m_total, k] bf16 -> q: [m_total, k] e4m3, scales: [k / 128][MOK_GG_FP8_SCALE_ROWS(m_total)]
 * fp32 (K-block-major, so a tile's 128 row scales of one K block are contiguous). Every row is
 * quantized, padding rows too (their scales are then arbitrary). */
mok_status mok_gg_fp8_quantize_act(const void *x, void *q, float *scales, int64_t m_total,
                                   int64_t k, cudaStream_t stream);

/* mok_gg_fp8_quantize_act on the first *rows_dev rows only (a device count: a schedule's padded
 * rows, expert_offset[E]); the rows after them are left as they are. */
mok_status mok_gg_fp8_quantize_act_upto(const void *x, void *q, float *scales, int64_t m_total,
                                        int64_t k, const int32_t *rows_dev, cudaStream_t stream);

/* The same codes and scales, the scales row-major: [m_total][k / 128] (a row's scales contiguous,
 * so that a row moves with its scales, as the FP8 forward's dispatch does). */
mok_status mok_gg_fp8_quantize_act_rows(const void *x, void *q, float *scales, int64_t m_total,
                                        int64_t k, cudaStream_t stream);

/* w: [experts, n, k] bf16 -> q: [experts, n, k] e4m3, scales: [experts, n / 128, k / 128] fp32
 * (the layout mok_quantize_weight's MOK_DTYPE_FP8_BLOCK128 uses). */
mok_status mok_gg_fp8_quantize_weight(const void *w, void *q, float *scales, int64_t experts,
                                      int64_t n, int64_t k, cudaStream_t stream);

/* C[r, :] = (A[r, :] * a_scales) x (B[e] * b_scales[e])^T, bf16 out.
 *   a: [m_total, k] e4m3, a_scales as from mok_gg_fp8_quantize_act; b: [num_experts, n, k] e4m3,
 *   b_scales as from mok_gg_fp8_quantize_weight; c: [m_total, n] bf16. */
mok_status mok_gg_fp8_fwd(const void *a, const float *a_scales, const void *b,
                          const float *b_scales, void *c, const int32_t *expert_offset,
                          const int32_t *expert_count, int num_experts, int64_t m_total,
                          int64_t n, int64_t k, cudaStream_t stream);

/* FP8 gate + up with the fused SwiGLU epilogue (same activation and preact conventions as
 * mok_gg_bf16_gate_up_swiglu). x: [m_total, hidden] e4m3 with x_scales; w_gate, w_up:
 * [num_experts, inter, hidden] e4m3 with their [num_experts, inter / 128, hidden / 128] scales. */
mok_status mok_gg_fp8_gate_up_swiglu(const void *x, const float *x_scales, const void *w_gate,
                                     const float *w_gate_scales, const void *w_up,
                                     const float *w_up_scales, void *act, void *preact,
                                     const int32_t *expert_offset, const int32_t *expert_count,
                                     int num_experts, int64_t m_total, int64_t inter,
                                     int64_t hidden, int use_limit, float limit,
                                     cudaStream_t stream);

/* mok_gg_fp8_gate_up_swiglu with the activations quantized for the down projection (preact as
 * there: NULL, or the bf16 pre-activations for backward): q_act
 * [m_total, inter] e4m3 and q_scales [inter / 128][MOK_GG_FP8_SCALE_ROWS(m_total)], bit for bit
 * what mok_gg_fp8_quantize_act gives on the bf16 activations, for the real rows (padding rows:
 * unspecified, as act's are). On the default kernel the epilogue quantizes and act (bf16 [m_total, inter])
 * is not written; under the tuning flags that select a 128-column kernel act is written, then
 * quantized. */
mok_status mok_gg_fp8_gate_up_swiglu_quantized(const void *x, const float *x_scales,
                                               const void *w_gate, const float *w_gate_scales,
                                               const void *w_up, const float *w_up_scales,
                                               void *act, void *preact, void *q_act,
                                               float *q_scales,
                                               const int32_t *expert_offset,
                                               const int32_t *expert_count, int num_experts,
                                               int64_t m_total, int64_t inter, int64_t hidden,
                                               int use_limit, float limit, cudaStream_t stream);

/* The FP8 backward's weights: q [experts, n, k] e4m3 with scales [experts, n / 128, k / 128] (as
 * from mok_gg_fp8_quantize_weight) transposed into q_t[e][kk][col_off + nn], rows of ld_t bytes
 * (experts * k rows in all), and scales_t [experts, k / 128, ld_t / 128] at column col_off / 128.
 * Codes and scales move unchanged (exact). Two calls with col_off 0 and n build the gate / up
 * pair's [E, H, 2I]. n, k, ld_t and col_off multiples of 128. */
mok_status mok_gg_fp8_transpose_weight(const void *q, const float *scales, int64_t experts,
                                       int64_t n, int64_t k, void *q_t, float *scales_t,
                                       int64_t ld_t, int64_t col_off, cudaStream_t stream);

/* q [m_total, k] e4m3 with scales as mok_gg_fp8_quantize_act writes them -> x [m_total, k] bf16,
 * each value e4m3 * scale rounded to bf16 (the inputs the FP8 GEMMs saw, for the bf16 weight
 * gradients). rows_dev: NULL, or a device count; rows from *rows_dev on are left as they are. */
mok_status mok_gg_fp8_dequantize_act(const void *q, const float *scales, void *x, int64_t m_total,
                                     int64_t k, const int32_t *rows_dev, cudaStream_t stream);

/* ---- FP8 weight gradient (operands quantized 1x128 along the tokens) ----
 * The layer's FP8 backward uses them unless config fp8_weight_grads is 0. */

/* x [m_total, cols] bf16 (rows laid out by expert_offset / expert_count, the layout contract) ->
 * q_t [cols, m_pad] e4m3, m_pad = MOK_GG_FP8_SCALE_ROWS(m_total): column c of x as row c, its
 * tokens contiguous; scales_t [m_pad / 128][cols] fp32, one per column and 128-token block (the
 * block's amax over its real rows / 448, 1 when they are all zero). Padding rows get zero codes
 * and do not count; blocks past expert_offset[E] are not written. cols a multiple of 128.
 * expert_amax: NULL, or num_experts * cols floats: then one scale per expert and column (from
 * its amax over all the expert's real rows, which is also written there), in each of its blocks,
 * padding blocks included; one kernel reads the expert's rows once when they fit its ring of
 * four 128-row blocks, else twice (the second time mostly from L2). */
mok_status mok_gg_fp8_quantize_t(const void *x, void *q_t, float *scales_t, float *expert_amax,
                                 const int32_t *expert_offset, const int32_t *expert_count,
                                 int num_experts, int64_t m_total, int64_t cols,
                                 cudaStream_t stream);

/* The same from q [m_total, cols] e4m3 codes with scales as mok_gg_fp8_quantize_act writes them
 * (q_scales 16-byte aligned): bit for bit mok_gg_fp8_dequantize_act then mok_gg_fp8_quantize_t,
 * without the bf16 copy. */
mok_status mok_gg_fp8_requantize_t(const void *q, const float *q_scales, void *q_t,
                                   float *scales_t, float *expert_amax,
                                   const int32_t *expert_offset, const int32_t *expert_count,
                                   int num_experts, int64_t m_total, int64_t cols,
                                   cudaStream_t stream);

/* dW[e] = sum over expert e's real rows r of A[r, :m]^T B[r, :n] -> [m, n], from A and B as
 * mok_gg_fp8_quantize_t writes them: a_t [m rows of m_pad codes], its scales at
 * a_scales[block * a_ld + row] (a_ld >= m: a_t and a_scales may be a row block of a wider
 * quantized matrix, e.g. the gate or up half of [dg | du]), likewise b_t, b_scales, b_ld.
 * Each 128-token block is one fp32 partial on the tensor cores, added times its row's and its
 * column's scale on the CUDA cores, blocks in ascending order (deterministic). expert_scales
 * 1 (both operands quantized with expert_amax: every block of an expert the same scales): the
 * expert's blocks accumulate on the tensor cores in ascending order, scaled once at the end (no
 * promotion: the tensor cores' FP8 accumulation keeps ~14 bits, so the error grows with the
 * expert's rows; DeepSeek-V3 reports up to ~2% at K = 4096 for it). expert_scales 2 (only B
 * quantized with expert_amax): each block's partial is still promoted, times A's row scale only
 * (one FMA per element), and B's column scale is applied once at the end.
 * dw: [num_experts, m, n], fp32 when out_fp32 (accumulate: added to, an expert with no rows left
 * as is), else bf16 (overwritten; accumulate not supported). expert_count[e] == -1: dW[e] left
 * as it is. m, n multiples of 128. */
mok_status mok_gg_fp8_wgrad(const void *a_t, const float *a_scales, int64_t a_ld, const void *b_t,
                            const float *b_scales, int64_t b_ld, void *dw, int out_fp32,
                            int accumulate, int expert_scales, const int32_t *expert_offset,
                            const int32_t *expert_count, int num_experts, int64_t m_total,
                            int64_t m, int64_t n, cudaStream_t stream);

/* ---- MXFP8 input (E4M3 data, one E8M0 scale byte per 1x32 block along the last dimension) ----
 * Converted once to the 128-block recipe above, which the FP8 GEMMs run: each 128-block's scale
 * is the largest of its MX scales (a power of two) and every value is rescaled by its own MX scale
 * over it (exact in fp32) and rounded back to E4M3. Exact where a block's MX scales are equal;
 * otherwise values of smaller-scaled 32-blocks can lose low mantissa bits (E4M3 subnormals) or
 * flush to zero. E8M0 255 (NaN) gives a NaN scale.
 *   q_mx: [rows, cols] e4m3, scales_mx: [rows, cols / 32] uint8 (cols a multiple of 128). */

/* Activations [m_total, k] -> q [m_total, k] e4m3 + scales as mok_gg_fp8_quantize_act writes. */
mok_status mok_gg_mxfp8_act_to_block128(const void *q_mx, const uint8_t *scales_mx, void *q,
                                        float *scales, int64_t m_total, int64_t k,
                                        cudaStream_t stream);

/* Weights [experts, n, k] -> q [experts, n, k] e4m3 + scales [experts, n / 128, k / 128]. */
mok_status mok_gg_mxfp8_weight_to_block128(const void *q_mx, const uint8_t *scales_mx, void *q,
                                           float *scales, int64_t experts, int64_t n, int64_t k,
                                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_GROUPED_GEMM_H */
