/* fp8_quant.h — the FP8 quantizers and layout conversions that make the FP8 GEMMs' operands
 * (kernels/gemm/gemm.h): activations in 1x128 blocks, weights in 128x128 blocks, the backward's
 * transposed weights and token-major operands, and MXFP8 input converted to the block-128 recipe.
 * Scales are decode factors (value = e4m3 * scale; a block's scale is its amax / 448, 1 for an
 * all-zero block; kernels/common/fp8.h). Implemented in fp8_quant.cu (rows, weights),
 * fp8_quant_t.cu (token-major), fp8_layout.cu (transposes, dequantization) and mxfp8.cu. Every
 * call only enqueues work on stream and returns a mok_status (MOK_ERR_INVALID_ARGUMENT,
 * MOK_ERR_INVALID_SHAPE, MOK_ERR_MISALIGNED, MOK_ERR_CUDA recorded as launch_error.h says). */
#ifndef MOK_FP8_QUANT_H
#define MOK_FP8_QUANT_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "include/mok.h"
#include "kernels/common/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rows and weights (fp8_quant.cu) ------------------------------------------------------ */

/* x: [m_total, k] bf16 -> q: [m_total, k] e4m3, scales: [k / 128][MOK_FP8_SCALE_ROWS(m_total)]
 * fp32 (K-block-major, so a tile's 128 row scales of one K block are contiguous). Every row is
 * quantized, padding rows too (their scales are then arbitrary). */
mok_status mok_fp8_quant_act(const void *x, void *q, float *scales, int64_t m_total, int64_t k,
                             cudaStream_t stream);

/* mok_fp8_quant_act on the first *rows_dev rows only (a device count: a schedule's padded rows,
 * expert_offset[E]); the rows after them are left as they are. */
mok_status mok_fp8_quant_act_upto(const void *x, void *q, float *scales, int64_t m_total,
                                  int64_t k, const int32_t *rows_dev, cudaStream_t stream);

/* The same codes and scales, the scales row-major: [m_total][k / 128] (a row's scales contiguous,
 * so that a row moves with its scales, as the FP8 forward's dispatch does). */
mok_status mok_fp8_quant_act_rows(const void *x, void *q, float *scales, int64_t m_total,
                                  int64_t k, cudaStream_t stream);

/* w: [experts, n, k] bf16 -> q: [experts, n, k] e4m3, scales: [experts, n / 128, k / 128] fp32
 * (the layout mok_quantize_weight's MOK_DTYPE_FP8_BLOCK128 uses). */
mok_status mok_fp8_quant_weight(const void *w, void *q, float *scales, int64_t experts, int64_t n,
                                int64_t k, cudaStream_t stream);

/* mok_fp8_quant_weight and, from the same read of w, the codes transposed as
 * mok_fp8_transpose_block128 writes them (q_t, scales_t, ld_t, col_off as there): bit for bit
 * the two calls. q_t and scales_t NULL: mok_fp8_quant_weight alone. */
mok_status mok_fp8_quant_weight_t(const void *w, void *q, float *scales, int64_t experts,
                                  int64_t n, int64_t k, void *q_t, float *scales_t, int64_t ld_t,
                                  int64_t col_off, cudaStream_t stream);

/* ---- layout conversions (fp8_layout.cu) --------------------------------------------------- */

/* The FP8 backward's weights: q [experts, n, k] e4m3 with scales [experts, n / 128, k / 128] (as
 * from mok_fp8_quant_weight) transposed into q_t[e][kk][col_off + nn], rows of ld_t bytes
 * (experts * k rows in all), and scales_t [experts, k / 128, ld_t / 128] at column col_off / 128.
 * Codes and scales move unchanged (exact). Two calls with col_off 0 and n build the gate / up
 * pair's [E, H, 2I]. n, k, ld_t and col_off multiples of 128. */
mok_status mok_fp8_transpose_block128(const void *q, const float *scales, int64_t experts,
                                      int64_t n, int64_t k, void *q_t, float *scales_t,
                                      int64_t ld_t, int64_t col_off, cudaStream_t stream);

/* q [m_total, k] e4m3 with scales as mok_fp8_quant_act writes them -> x [m_total, k] bf16, each
 * value e4m3 * scale rounded to bf16 (the inputs the FP8 GEMMs saw, for the bf16 weight
 * gradients). rows_dev: NULL, or a device count; rows from *rows_dev on are left as they are. */
mok_status mok_fp8_dequant_act(const void *q, const float *scales, void *x, int64_t m_total,
                               int64_t k, const int32_t *rows_dev, cudaStream_t stream);

/* ---- token-major operands of the FP8 weight gradient (fp8_quant_t.cu) --------------------- */

/* x [m_total, cols] bf16 (rows laid out by expert_offset / expert_count, the GEMMs' layout
 * contract) -> q_t [cols, m_pad] e4m3, m_pad = MOK_FP8_SCALE_ROWS(m_total): column c of x as row
 * c, its tokens contiguous; scales_t [m_pad / 128][cols] fp32, one per column and 128-token block
 * (the block's amax over its real rows / 448, 1 when they are all zero). Padding rows get zero
 * codes and do not count; blocks past expert_offset[E] are not written. cols a multiple of 128.
 * expert_amax: NULL, or num_experts * cols floats: then one scale per expert and column (from
 * its amax over all the expert's real rows, which is also written there), in each of its blocks,
 * padding blocks included; one kernel reads the expert's rows once when they fit its ring of
 * four 128-row blocks, else twice (the second time mostly from L2). */
mok_status mok_fp8_quant_t(const void *x, void *q_t, float *scales_t, float *expert_amax,
                           const int32_t *expert_offset, const int32_t *expert_count,
                           int num_experts, int64_t m_total, int64_t cols, cudaStream_t stream);

/* The same from q [m_total, cols] e4m3 codes with scales as mok_fp8_quant_act writes them
 * (q_scales 16-byte aligned): bit for bit mok_fp8_dequant_act then mok_fp8_quant_t, without the
 * bf16 copy. */
mok_status mok_fp8_requant_t(const void *q, const float *q_scales, void *q_t, float *scales_t,
                             float *expert_amax, const int32_t *expert_offset,
                             const int32_t *expert_count, int num_experts, int64_t m_total,
                             int64_t cols, cudaStream_t stream);

/* ---- MXFP8 (mxfp8.cu) ------------------------------------------------------------------------
 * E4M3 data with one E8M0 scale byte per 1x32 block along the last dimension (the OCP MX rules,
 * kernels/common/mx_scale.h). */

/* w [rows_total, k] bf16 -> q [rows_total, k] e4m3, scales [rows_total, k / 32] E8M0, bit for bit
 * the CPU reference's mok_mxfp8_quantize_rows (a block with a NaN or an infinity: E8M0 NaN and
 * NaN codes). k a multiple of 32; w and q 16-byte aligned. */
mok_status mok_mxfp8_quant_weight(const void *w, void *q, uint8_t *scales, int64_t rows_total,
                                  int64_t k, cudaStream_t stream);

/* w [experts, n, k] bf16 -> the block-128 codes and scales of its MXFP8 values (n, k multiples of
 * 128): mok_mxfp8_quant_weight then mok_mxfp8_weight_to_block128 in one pass, the same bits. */
mok_status mok_mxfp8_quant_weight_block128(const void *w, void *q, float *scales, int64_t experts,
                                           int64_t n, int64_t k, cudaStream_t stream);

/* MXFP8 converted once to the block-128 recipe the FP8 GEMMs run: each 128-block's scale is the
 * largest of its MX scales (a power of two) and every value is rescaled by its own MX scale over
 * it (exact in fp32) and rounded back to E4M3. Exact where a block's MX scales are equal;
 * otherwise values of smaller-scaled 32-blocks that the shift takes below E4M3's normal range
 * (2^-6 of the block scale) round to its subnormal step (2^-9) or to zero. A block holding an
 * E8M0 NaN (255) becomes NaN: NaN scale and NaN codes.
 *   q_mx: [rows, cols] e4m3, scales_mx: [rows, cols / 32] uint8 (cols a multiple of 128). */

/* Activations [m_total, k] -> q [m_total, k] e4m3 + scales as mok_fp8_quant_act writes. */
mok_status mok_mxfp8_act_to_block128(const void *q_mx, const uint8_t *scales_mx, void *q,
                                     float *scales, int64_t m_total, int64_t k,
                                     cudaStream_t stream);

/* Weights [experts, n, k] -> q [experts, n, k] e4m3 + scales [experts, n / 128, k / 128]. */
mok_status mok_mxfp8_weight_to_block128(const void *q_mx, const uint8_t *scales_mx, void *q,
                                        float *scales, int64_t experts, int64_t n, int64_t k,
                                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_FP8_QUANT_H */
