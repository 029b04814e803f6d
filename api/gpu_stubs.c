/* gpu_stubs.c — GPU entry points of mok.h that this build does not implement yet (FP8 weight
 * quantization and the ops layer's stage-by-stage calls; the functional layer and symmetric buffers
 * are in comm/ and api/gpu_*.c). Each checks its arguments like the real call will, then returns
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

mok_status mok_op_dispatch(mok_schedule *s, const mok_sym_buffer *x, void *recv, cudaStream_t st) {
  (void)st; REQUIRE(s && x && recv); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_experts_forward(mok_schedule *s, const mok_weights *w, const void *recv, void *out,
                                  cudaStream_t st) {
  (void)st; REQUIRE(s && w && recv && out); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_combine(mok_schedule *s, const void *out, const mok_sym_buffer *c, cudaStream_t st) {
  (void)st; REQUIRE(s && out && c); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_combine_reduce(mok_schedule *s, const mok_weights *w, const void *x,
                                 const mok_sym_buffer *c, const float *rw, void *y, cudaStream_t st) {
  (void)st; REQUIRE(s && w && x && c && rw && y); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_reverse_combine(mok_schedule *s, const mok_sym_buffer *dy, void *recv_dy, cudaStream_t st) {
  (void)st; REQUIRE(s && dy && recv_dy); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_experts_backward(mok_schedule *s, const mok_weights *w, const void *recv,
                                   const void *recv_dy, const mok_sym_buffer *rw, void *dx_rows,
                                   const mok_grads *g, cudaStream_t st) {
  (void)st; REQUIRE(s && w && recv && recv_dy && rw && dx_rows && g); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_reverse_dispatch(mok_schedule *s, const void *dx_rows, const mok_sym_buffer *p,
                                   cudaStream_t st) {
  (void)st; REQUIRE(s && dx_rows && p); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_op_reverse_dispatch_reduce(mok_schedule *s, const mok_weights *w, const void *x,
                                          const void *dy, const mok_sym_buffer *p, const mok_grads *g,
                                          cudaStream_t st) {
  (void)st; REQUIRE(s && w && x && dy && p && g); return MOK_ERR_NOT_SUPPORTED;
}
