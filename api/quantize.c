/* quantize.c — mok_quantize_weight: routed-expert weights to FP8 ahead of time. The Hopper-native
 * 128x128-block recipe runs the grouped GEMM's quantization kernel; quantizing bf16 straight to
 * MXFP8 is not in this build (MX checkpoints come already quantized). */
#include "kernels/grouped_gemm.h"
#include "mok.h"

mok_status mok_quantize_weight(mok_dtype dtype, const void *w, int64_t experts, int64_t rows,
                               int64_t cols, void *data, void *scales, cudaStream_t stream) {
  if (!w || !data || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  switch (dtype) {
    case MOK_DTYPE_FP8_BLOCK128:
      if (rows % 128 || cols % 128) return MOK_ERR_MISALIGNED;
      if (experts == 0 || rows == 0 || cols == 0) return MOK_SUCCESS;
      return mok_gg_fp8_quantize_weight(w, data, (float *)scales, experts, rows, cols, stream);
    case MOK_DTYPE_MXFP8:
      return MOK_ERR_NOT_SUPPORTED;
    default:
      return MOK_ERR_INVALID_ARGUMENT;
  }
}
