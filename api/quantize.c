/* quantize.c — mok_quantize_weight: routed-expert weights to FP8 ahead of time, in the
 * Hopper-native 128x128-block recipe or in MXFP8 (1x32 blocks, E8M0 scales);
 * mok_mxfp8_to_block128: MXFP8 weights converted once to the block-128 recipe the layer runs
 * (mok_quantize_weight_mxfp8_block128: both in one pass from bf16);
 * mok_fp8_transpose_weights: the FP8 backward's transposed copies of the block-128 weights
 * (mok_quantize_weight_transposed: codes and copy from one read of the bf16 weight). */
#include <stdint.h>
#include "kernels/pointwise/fp8_quant.h"
#include "mok.h"

/* A weight [experts, rows, cols]: sizes not negative, rows and cols multiples of the granules
 * (MOK_ERR_MISALIGNED), experts * rows * cols addressable (MOK_ERR_INVALID_SHAPE). */
static mok_status check_weight_shape(int64_t experts, int64_t rows, int64_t cols, int64_t row_gran,
                                     int64_t col_gran) {
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  if (rows % row_gran || cols % col_gran) return MOK_ERR_MISALIGNED;
  int64_t rows_total = 0;
  if (__builtin_mul_overflow(experts, rows, &rows_total) || rows_total > INT64_MAX / (cols + 1))
    return MOK_ERR_INVALID_SHAPE;
  return MOK_SUCCESS;
}

mok_status mok_quantize_weight(mok_dtype dtype, const void *w, int64_t experts, int64_t rows,
                               int64_t cols, void *data, void *scales, cudaStream_t stream) {
  if (!w || !data || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  switch (dtype) {
    case MOK_DTYPE_FP8_BLOCK128:
      if (rows % 128 || cols % 128) return MOK_ERR_MISALIGNED;
      if (experts == 0 || rows == 0 || cols == 0) return MOK_SUCCESS;
      return mok_fp8_quant_weight(w, data, (float *)scales, experts, rows, cols, stream);
    case MOK_DTYPE_MXFP8: {
      const mok_status st = check_weight_shape(experts, rows, cols, 1, 32);
      if (st != MOK_SUCCESS) return st;
      return mok_mxfp8_quant_weight(w, data, (uint8_t *)scales, experts * rows, cols, stream);
    }
    default:
      return MOK_ERR_INVALID_ARGUMENT;
  }
}

mok_status mok_mxfp8_to_block128(const void *mx_data, const uint8_t *mx_scales, int64_t experts,
                                 int64_t rows, int64_t cols, void *data, float *scales,
                                 cudaStream_t stream) {
  if (!mx_data || !mx_scales || !data || !scales) return MOK_ERR_INVALID_ARGUMENT;
  const mok_status st = check_weight_shape(experts, rows, cols, 128, 128);
  if (st != MOK_SUCCESS) return st;
  if (experts == 0 || rows == 0 || cols == 0) return MOK_SUCCESS;
  return mok_mxfp8_weight_to_block128(mx_data, mx_scales, data, scales, experts, rows, cols,
                                      stream);
}

mok_status mok_fp8_transpose_weights(mok_dtype dtype, const mok_weights *w, int64_t experts,
                                     int64_t inter, int64_t hidden, void *gate_up_t,
                                     void *gate_up_t_scales, void *down_t, void *down_t_scales,
                                     cudaStream_t stream) {
  if (!w || !gate_up_t || !gate_up_t_scales || !down_t || !down_t_scales)
    return MOK_ERR_INVALID_ARGUMENT;
  if (dtype != MOK_DTYPE_FP8_BLOCK128) {
    if (dtype == MOK_DTYPE_BF16 || dtype == MOK_DTYPE_MXFP8) return MOK_ERR_NOT_SUPPORTED;
    return MOK_ERR_INVALID_ARGUMENT;
  }
  if (!w->w_gate || !w->w_up || !w->w_down || !w->w_gate_scale || !w->w_up_scale ||
      !w->w_down_scale)
    return MOK_ERR_INVALID_ARGUMENT;
  if (experts < 0 || inter < 0 || hidden < 0) return MOK_ERR_INVALID_SHAPE;
  if (inter % 128 || hidden % 128) return MOK_ERR_MISALIGNED;
  if (experts == 0 || inter == 0 || hidden == 0) return MOK_SUCCESS;
  mok_status st = mok_fp8_transpose_block128(w->w_gate, (const float *)w->w_gate_scale, experts,
                                              inter, hidden, gate_up_t, (float *)gate_up_t_scales,
                                              2 * inter, 0, stream);
  if (st == MOK_SUCCESS)
    st = mok_fp8_transpose_block128(w->w_up, (const float *)w->w_up_scale, experts, inter, hidden,
                                     gate_up_t, (float *)gate_up_t_scales, 2 * inter, inter, stream);
  if (st == MOK_SUCCESS)
    st = mok_fp8_transpose_block128(w->w_down, (const float *)w->w_down_scale, experts, hidden,
                                     inter, down_t, (float *)down_t_scales, hidden, 0, stream);
  return st;
}

mok_status mok_quantize_weight_mxfp8_block128(const void *w, int64_t experts, int64_t rows,
                                              int64_t cols, void *data, float *scales,
                                              cudaStream_t stream) {
  if (!w || !data || !scales) return MOK_ERR_INVALID_ARGUMENT;
  const mok_status st = check_weight_shape(experts, rows, cols, 128, 128);
  if (st != MOK_SUCCESS) return st;
  if (experts == 0 || rows == 0 || cols == 0) return MOK_SUCCESS;
  return mok_mxfp8_quant_weight_block128(w, data, scales, experts, rows, cols, stream);
}

mok_status mok_quantize_weight_transposed(mok_dtype dtype, const void *w, int64_t experts,
                                          int64_t rows, int64_t cols, void *data, void *scales,
                                          void *data_t, void *scales_t, int64_t ld_t,
                                          int64_t col_off, cudaStream_t stream) {
  if (!w || !data || !scales || !data_t || !scales_t) return MOK_ERR_INVALID_ARGUMENT;
  if (dtype != MOK_DTYPE_FP8_BLOCK128) {
    if (dtype == MOK_DTYPE_BF16 || dtype == MOK_DTYPE_MXFP8) return MOK_ERR_NOT_SUPPORTED;
    return MOK_ERR_INVALID_ARGUMENT;
  }
  if (experts < 0 || rows < 0 || cols < 0 || col_off < 0 || ld_t < col_off + rows)
    return MOK_ERR_INVALID_SHAPE;
  if (rows % 128 || cols % 128 || ld_t % 128 || col_off % 128) return MOK_ERR_MISALIGNED;
  if (experts == 0 || rows == 0 || cols == 0) return MOK_SUCCESS;
  return mok_fp8_quant_weight_t(w, data, (float *)scales, experts, rows, cols, data_t,
                                (float *)scales_t, ld_t, col_off, stream);
}
