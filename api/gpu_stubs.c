/* gpu_stubs.c — GPU entry points of mok.h that this build does not implement yet. Each checks its
 * arguments like the real call will, then returns MOK_ERR_NOT_SUPPORTED. Functions move out of this
 * file as their GPU implementations land. */
#include "mok.h"

#define REQUIRE(p) do { if (!(p)) return MOK_ERR_INVALID_ARGUMENT; } while (0)

mok_status mok_get_unique_id(mok_unique_id *id) { REQUIRE(id); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_group_create(const mok_unique_id *id, int nranks, int rank, mok_group **group) {
  REQUIRE(id && group && nranks > 0 && rank >= 0 && rank < nranks);
  *group = NULL;
  return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_group_create_from_nccl(void *comm, mok_group **group) {
  REQUIRE(comm && group);
  *group = NULL;
  return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_group_rank(const mok_group *g, int *rank) { REQUIRE(g && rank); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_group_size(const mok_group *g, int *size) { REQUIRE(g && size); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_group_destroy(mok_group *g) { return g ? MOK_ERR_NOT_SUPPORTED : MOK_SUCCESS; }

mok_status mok_workspace_create(mok_group *g, const mok_shape *s, const mok_config *c, mok_workspace **w) {
  REQUIRE(g && s && c && w);
  *w = NULL;
  return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_workspace_bytes(const mok_workspace *w, int64_t *b) { REQUIRE(w && b); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_workspace_error(mok_workspace *w, mok_status *d) { REQUIRE(w && d); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_workspace_clear_error(mok_workspace *w, cudaStream_t s) { (void)s; REQUIRE(w); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_workspace_destroy(mok_workspace *w) { return w ? MOK_ERR_NOT_SUPPORTED : MOK_SUCCESS; }

mok_status mok_schedule_create(mok_workspace *w, mok_schedule **s) { REQUIRE(w && s); *s = NULL; return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_schedule_destroy(mok_schedule *s) { return s ? MOK_ERR_NOT_SUPPORTED : MOK_SUCCESS; }
mok_status mok_schedule_build(mok_schedule *s, const int32_t *topk, cudaStream_t st) {
  (void)st; REQUIRE(s && topk); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_schedule_rows(mok_schedule *s, int64_t *rows) { REQUIRE(s && rows); return MOK_ERR_NOT_SUPPORTED; }

mok_status mok_forward(mok_schedule *s, const mok_weights *w, const void *x, const float *rw, void *y,
                       cudaStream_t st) {
  (void)st; REQUIRE(s && w && x && rw && y); return MOK_ERR_NOT_SUPPORTED;
}
mok_status mok_backward(mok_schedule *s, const mok_weights *w, const void *x, const float *rw,
                        const void *dy, const mok_grads *g, cudaStream_t st) {
  (void)st; REQUIRE(s && w && x && rw && dy && g); return MOK_ERR_NOT_SUPPORTED;
}

mok_status mok_quantize_weight(mok_dtype dtype, const void *w, int64_t experts, int64_t rows,
                               int64_t cols, void *data, void *scales, cudaStream_t st) {
  (void)st; (void)dtype;
  REQUIRE(w && data && scales);
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  return MOK_ERR_NOT_SUPPORTED;
}

mok_status mok_sym_alloc(mok_group *g, size_t bytes, mok_sym_buffer *b) { (void)bytes; REQUIRE(g && b); return MOK_ERR_NOT_SUPPORTED; }
mok_status mok_sym_free(mok_group *g, mok_sym_buffer *b) { REQUIRE(g && b); return MOK_ERR_NOT_SUPPORTED; }

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
