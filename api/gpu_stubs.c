/* gpu_stubs.c — GPU entry points of mok.h that this build does not implement yet (FP8 weight
 * quantization; the functional layer, the ops layer and symmetric buffers are in comm/ and
 * api/gpu_*.c). Each checks its arguments like the real call will, then returns
 * MOK_ERR_NOT_SUPPORTED. Functions move out of this file as their GPU implementations land. */
#include "mok.h"

#define REQUIRE(p) do { if (!(p)) return MOK_ERR_INVALID_ARGUMENT; } while (0)

mok_status mok_quantize_weight(mok_dtype dtype, const void *w, int64_t experts, int64_t rows,
                               int64_t cols, void *data, void *scales, cudaStream_t st) {
  (void)st; (void)dtype;
  REQUIRE(w && data && scales);
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  return MOK_ERR_NOT_SUPPORTED;
}
