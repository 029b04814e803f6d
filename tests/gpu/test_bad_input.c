/* test_bad_input.c — GPU API calls with bad input return a clear status, on every rank alike, and
 * write nothing: misaligned sizes and pointers, shapes the group disagrees on, E not divisible
 * by EP, k > E, unsupported dtype or path, NULL arguments. */
#include <stdio.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "tests/gpu/gpu_test.h"

static mok_shape small_shape(void) {
  mok_shape s = {64, 256, 8, 256, 2, 0};
  return s;
}

static mok_status try_create(const mok_shape *s, const mok_config *c) {
  mok_workspace *w = NULL;
  mok_status st = mok_workspace_create(gpu_ctx.group, s, c, &w);
  if (st == MOK_SUCCESS) mok_workspace_destroy(w);
  else CHECK(w == NULL);
  return st;
}

GPU_TEST(bad_workspace_arguments) {
  mok_config c;
  mok_config_init(&c);
  mok_shape s = small_shape();
  CHECK_STATUS(try_create(&s, &c), MOK_SUCCESS);
  mok_shape m = s;
  m.hidden = 100;
  CHECK_STATUS(try_create(&m, &c), MOK_ERR_MISALIGNED);
  m = s;
  m.intermediate = 200;
  CHECK_STATUS(try_create(&m, &c), MOK_ERR_MISALIGNED);
  m = s;
  m.top_k = 9;
  CHECK_STATUS(try_create(&m, &c), MOK_ERR_INVALID_SHAPE);
  m = s;
  m.num_experts = 2 * gpu_ctx.size + 1; /* not a multiple of EP when EP > 1 */
  CHECK_STATUS(try_create(&m, &c), gpu_ctx.size > 1 ? MOK_ERR_INVALID_SHAPE : MOK_SUCCESS);
  mok_config f = c;
  f.dtype = MOK_DTYPE_MXFP8; /* MX weights convert to block-128 first */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_NOT_SUPPORTED);
  f.dtype = MOK_DTYPE_FP8_BLOCK128;
  f.plan.path = MOK_PATH_ORACLE; /* the oracle has no FP8 GEMMs */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_NOT_SUPPORTED);
  f.plan.path = MOK_PATH_FUSED; /* FP8 runs on the grouped path */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_NOT_SUPPORTED);
  f.plan.path = MOK_PATH_AUTO; /* FP8 on AUTO: the grouped path */
  CHECK_STATUS(try_create(&s, &f), MOK_SUCCESS);
  f.plan.path = MOK_PATH_GROUPED;
  CHECK_STATUS(try_create(&s, &f), MOK_SUCCESS);
  f = c;
  f.plan.path = MOK_PATH_GROUPED;
  f.plan.tile_m = 64; /* the grouped GEMMs need 128-row tiles */
  f.plan.minibatch_rows = 128;
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_NOT_SUPPORTED);
  f = c;
  f.plan.path = MOK_PATH_AUTO; /* too many comm CTAs: refused on any path */
  f.plan.fwd_comm_ctas = 128;
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_INVALID_ARGUMENT);
  f = c;
  f.plan.path = (mok_path)7; /* no such path */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_INVALID_ARGUMENT);
  f = c;
  f.plan.path = MOK_PATH_FUSED;
  f.plan.tile_m = 64; /* the fused path needs the grouped GEMM's 128-row tiles */
  f.plan.minibatch_rows = 128;
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_NOT_SUPPORTED);
  f = c;
  f.plan.path = MOK_PATH_FUSED;
  f.plan.fwd_comm_ctas = 128; /* leaves the GEMM too few SMs */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_INVALID_ARGUMENT);
  f = c;
  f.schedule_capacity = 100; /* not a multiple of tile_m */
  CHECK_STATUS(try_create(&s, &f), MOK_ERR_MISALIGNED);
  m = s;
  m.tokens = 64 + gpu_ctx.rank; /* ranks disagree */
  CHECK_STATUS(try_create(&m, &c), gpu_ctx.size > 1 ? MOK_ERR_SHAPE_MISMATCH : MOK_SUCCESS);
  mok_workspace *w = NULL;
  CHECK_STATUS(mok_workspace_create(NULL, &s, &c, &w), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, NULL, &c, &w), MOK_ERR_INVALID_ARGUMENT);
}

GPU_TEST(bad_call_arguments) {
  mok_config c;
  mok_config_init(&c);
  mok_shape s = small_shape();
  mok_workspace *w = NULL;
  mok_schedule *sch = NULL;
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &s, &c, &w), MOK_SUCCESS);
  if (!w) return;
  CHECK_STATUS(mok_schedule_create(w, &sch), MOK_SUCCESS);
  const int64_t T = s.tokens, H = s.hidden, I = s.intermediate, el = s.num_experts / gpu_ctx.size;
  char *buf = NULL;
  size_t bytes = (size_t)(4 * T * H * 2 + 3 * el * I * H * 2 + 4096);
  CHECK(cudaMalloc((void **)&buf, bytes) == cudaSuccess);
  cudaMemset(buf, 0, bytes);
  void *x = buf, *y = buf + T * H * 2;
  float *rw = (float *)(buf + 2 * T * H * 2);
  char *wb = buf + 4 * T * H * 2;
  mok_weights wt = {wb, wb + el * I * H * 2, wb + 2 * el * I * H * 2, NULL, NULL, NULL, NULL, NULL,
                    NULL, NULL, NULL, NULL, NULL};
  cudaStream_t q;
  cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking);
  CHECK_STATUS(mok_forward(sch, &wt, (char *)x + 2, rw, y, q), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_forward(sch, &wt, x, rw, (char *)y + 8, q), MOK_ERR_MISALIGNED);
  mok_weights bad = wt;
  bad.w_up = (const char *)wt.w_up + 2;
  CHECK_STATUS(mok_forward(sch, &bad, x, rw, y, q), MOK_ERR_MISALIGNED);
  bad = wt;
  bad.w_down = NULL;
  CHECK_STATUS(mok_forward(sch, &bad, x, rw, y, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_forward(sch, &wt, NULL, rw, y, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_build(sch, NULL, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_build(sch, (const int32_t *)((char *)rw + 2), q), MOK_ERR_MISALIGNED);
  /* build and forward in one call: every argument checked before the build is enqueued (the
   * zeroed routing it would read names expert 0 twice per token: a device fault, seen below) */
  const int32_t *topk = (const int32_t *)(buf + 3 * T * H * 2);
  CHECK_STATUS(mok_build_and_forward(sch, NULL, &wt, x, rw, y, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_build_and_forward(sch, (const int32_t *)((const char *)topk + 2), &wt, x, rw, y, q),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_build_and_forward(sch, topk, &wt, (char *)x + 2, rw, y, q), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_build_and_forward(sch, topk, &bad, x, rw, y, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_build_and_forward(sch, topk, &wt, x, rw, NULL, q), MOK_ERR_INVALID_ARGUMENT);
  mok_grads g;
  memset(&g, 0, sizeof g);
  CHECK_STATUS(mok_backward(sch, &wt, x, rw, y, &g, q), MOK_ERR_INVALID_ARGUMENT);
  CHECK(cudaStreamSynchronize(q) == cudaSuccess);
  /* nothing was enqueued but the refusals, which every rank made alike: no fault anywhere (one
   * rank's refusal alone is test_faults.c's) */
  mok_status dev = MOK_ERR_INTERNAL;
  int from = -2;
  CHECK_STATUS(mok_workspace_error_rank(w, &dev, &from), MOK_SUCCESS);
  CHECK_STATUS(dev, MOK_SUCCESS);
  CHECK(from == -1);
  int r = -1, n = -1;
  CHECK_STATUS(mok_group_rank(gpu_ctx.group, &r), MOK_SUCCESS);
  CHECK_STATUS(mok_group_size(gpu_ctx.group, &n), MOK_SUCCESS);
  CHECK(r == gpu_ctx.rank && n == gpu_ctx.size);
  int64_t wbytes = 0;
  CHECK_STATUS(mok_workspace_bytes(w, &wbytes), MOK_SUCCESS);
  CHECK(wbytes > 0);
  cudaStreamDestroy(q);
  cudaFree(buf);
  mok_schedule_destroy(sch);
  mok_workspace_destroy(w);
}
