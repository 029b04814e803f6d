/* test_api.c — the public API's host side: status strings, config defaults and validation, sizes,
 * and a clear status for bad arguments to every public entry point. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "api/status_detail.h"
#include "mok.h"
#include "tests/tests.h"
#include "tests/test_util.h"

void test_api_status_strings(void) {
  for (int s = 0; s < MOK_STATUS_COUNT; ++s) {
    const char *str = mok_status_string((mok_status)s);
    CHECK(str != NULL && strlen(str) > 5 && strcmp(str, "unknown status") != 0);
    for (int t = 0; t < s; ++t) CHECK(strcmp(str, mok_status_string((mok_status)t)) != 0);
  }
  CHECK(strcmp(mok_status_string((mok_status)999), "unknown status") == 0);
  CHECK(strcmp(mok_status_string((mok_status)-1), "unknown status") == 0);
}

static void *last_error_of_new_thread(void *out) {
  *(const char **)out = mok_last_error();
  return NULL;
}

/* mok_last_error: the recorded detail, kept until the next failure, per thread, bounded. */
void test_api_last_error(void) {
  CHECK(mok_last_error() != NULL);
  CHECK_STATUS(mok_record_error(MOK_ERR_CUDA, "cudaMemcpyAsync(%s) at %s:%d", "dst", "f.c", 12),
               MOK_ERR_CUDA);
  CHECK(strcmp(mok_last_error(), "cudaMemcpyAsync(dst) at f.c:12") == 0);
  mok_config c;
  CHECK_STATUS(mok_config_init(&c), MOK_SUCCESS);
  CHECK(strcmp(mok_last_error(), "cudaMemcpyAsync(dst) at f.c:12") == 0); /* kept by a success */
  const char *other = NULL;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, last_error_of_new_thread, &other) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(other != NULL && other[0] == '\0'); /* another thread's is its own */
  char long_call[2000];
  memset(long_call, 'x', sizeof long_call - 1);
  long_call[sizeof long_call - 1] = '\0';
  CHECK_STATUS(mok_record_error(MOK_ERR_NCCL, "%s", long_call), MOK_ERR_NCCL);
  const size_t n = strlen(mok_last_error());
  CHECK(n > 100 && n < sizeof long_call - 1); /* truncated, terminated */
}

void test_api_config(void) {
  mok_config c;
  CHECK_STATUS(mok_config_init(NULL), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_config_init(&c), MOK_SUCCESS);
  mok_shape dsv3 = {7168, 7168, 256, 2048, 8, 2048};
  CHECK_STATUS(mok_validate(&dsv3, &c, 8), MOK_SUCCESS);
  CHECK_STATUS(mok_validate(&dsv3, &c, 1), MOK_SUCCESS);
  CHECK_STATUS(mok_validate(&dsv3, &c, 3), MOK_ERR_INVALID_SHAPE); /* 256 experts over 3 ranks */
  CHECK_STATUS(mok_validate(&dsv3, &c, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_validate(NULL, &c, 1), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_validate(&dsv3, NULL, 1), MOK_ERR_INVALID_ARGUMENT);
  mok_shape s = dsv3;
  s.hidden = 7100;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_MISALIGNED);
  s = dsv3, s.intermediate = 2000;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_MISALIGNED);
  s = dsv3, s.shared_intermediate = 100;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_MISALIGNED);
  s = dsv3, s.shared_intermediate = 0; /* no shared expert */
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_SUCCESS);
  s = dsv3, s.tokens = 1001; /* any token count */
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_SUCCESS);
  s = dsv3, s.tokens = 0;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_SUCCESS);
  s = dsv3, s.tokens = -1;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_INVALID_SHAPE);
  s = dsv3, s.top_k = 0;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_INVALID_SHAPE);
  s = dsv3, s.top_k = 257;
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_INVALID_SHAPE);
  s = dsv3, s.tokens = 1 << 28; /* EP * T * k slots overflow int32 */
  CHECK_STATUS(mok_validate(&s, &c, 8), MOK_ERR_INVALID_SHAPE);

  mok_config bad = c;
  bad.dtype = (mok_dtype)7;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.plan.path = (mok_path)9;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.fp8_shared_expert = 2;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.plan.fwd_comm_ctas = -1;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.plan.bwd_comm_ctas = 1000;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.plan.tile_m = 100;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.plan.minibatch_rows = 192; /* not a multiple of tile_m 128 */
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.macrobatch_minibatches = 0;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.schedule_capacity = 1000;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_MISALIGNED);
  bad = c, bad.use_swiglu_limit = 1, bad.swiglu_limit = 0.0f;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad.swiglu_limit = INFINITY;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad.swiglu_limit = 7.0f;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_SUCCESS);
  bad = c, bad.timeout_ms = 0;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  /* the config's header: a config not made by mok_config_init / MOK_CONFIG_INITIALIZER, or by
   * a newer mok.h, is refused; the initializer and mok_config_init agree */
  bad = c, bad.magic = 0;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.size = sizeof(mok_config) + 8;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  bad = c, bad.version = MOK_VERSION_CODE + 1;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_INVALID_ARGUMENT);
  const mok_config lit = MOK_CONFIG_INITIALIZER; /* (field by field: padding is unspecified) */
  CHECK(lit.size == c.size && lit.magic == c.magic && lit.version == c.version &&
        lit.dtype == c.dtype && lit.ring_bytes == c.ring_bytes &&
        lit.macrobatch_minibatches == c.macrobatch_minibatches &&
        lit.schedule_capacity == c.schedule_capacity && lit.use_swiglu_limit == c.use_swiglu_limit &&
        lit.swiglu_limit == c.swiglu_limit && lit.timeout_ms == c.timeout_ms &&
        lit.fp8_weight_grads == c.fp8_weight_grads &&
        lit.fp8_fused_router_grad == c.fp8_fused_router_grad &&
        lit.fp8_shared_expert == c.fp8_shared_expert &&
        memcmp(&lit.plan, &c.plan, sizeof c.plan) == 0);
  CHECK(c.size == sizeof(mok_config) && c.magic == MOK_CONFIG_MAGIC &&
        c.version == MOK_VERSION_CODE && c.fp8_weight_grads == 3 && c.timeout_ms == 10000);
  /* MXFP8 is a weight format (run as FP8_BLOCK128), not a layer dtype; FP8 runs on the grouped
   * path only */
  bad = c, bad.dtype = MOK_DTYPE_MXFP8;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_NOT_SUPPORTED);
  bad = c, bad.dtype = MOK_DTYPE_FP8_BLOCK128, bad.plan.path = MOK_PATH_FUSED;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_ERR_NOT_SUPPORTED);
  bad.plan.path = MOK_PATH_GROUPED;
  CHECK_STATUS(mok_validate(&dsv3, &bad, 8), MOK_SUCCESS);

  /* worst-case schedule rows: DeepSeek-V3 at EP 8, 7168 tokens per rank */
  int64_t rows = 0;
  CHECK_STATUS(mok_schedule_worst_case_rows(&dsv3, 8, 128, &rows), MOK_SUCCESS);
  CHECK(rows == (int64_t)8 * 7168 * 8 + 32 * 127);
  CHECK_STATUS(mok_schedule_worst_case_rows(&dsv3, 8, 0, &rows), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_worst_case_rows(NULL, 8, 128, &rows), MOK_ERR_INVALID_ARGUMENT);

  int64_t n = 0;
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_FP8_BLOCK128, 32, 4096, 7168, &n), MOK_SUCCESS);
  CHECK(n == 32 * 32 * 56);
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_FP8_BLOCK128, 1, 129, 1, &n), MOK_SUCCESS);
  CHECK(n == 2);
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_MXFP8, 2, 3, 64, &n), MOK_SUCCESS);
  CHECK(n == 2 * 3 * 2);
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_BF16, 2, 3, 64, &n), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_MXFP8, -1, 3, 64, &n), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_fp8_scale_count(MOK_DTYPE_MXFP8, 1, 3, 64, NULL), MOK_ERR_INVALID_ARGUMENT);

  /* mok_fp8_transpose_weights refuses before it touches a device */
  char buf[64] __attribute__((aligned(16)));
  mok_weights q = {buf, buf, buf, buf, buf, buf, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  void *o = buf;
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_BF16, &q, 2, 256, 512, o, o, o, o, 0),
               MOK_ERR_NOT_SUPPORTED);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_MXFP8, &q, 2, 256, 512, o, o, o, o, 0),
               MOK_ERR_NOT_SUPPORTED);
  CHECK_STATUS(mok_fp8_transpose_weights((mok_dtype)7, &q, 2, 256, 512, o, o, o, o, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, NULL, 2, 256, 512, o, o, o, o, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q, 2, 256, 512, o, NULL, o, o, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q, 2, 200, 512, o, o, o, o, 0),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q, -1, 256, 512, o, o, o, o, 0),
               MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q, 0, 256, 512, o, o, o, o, 0),
               MOK_SUCCESS); /* nothing to move */
  q.w_up_scale = NULL;
  CHECK_STATUS(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &q, 2, 256, 512, o, o, o, o, 0),
               MOK_ERR_INVALID_ARGUMENT);

  /* mok_quantize_weight_transposed, likewise: w_up of inter 256, hidden 512 beside w_gate */
  const mok_dtype f8 = MOK_DTYPE_FP8_BLOCK128;
  const struct {
    mok_dtype dtype;
    void *w, *scales_t;
    int64_t experts, cols, ld_t, col_off;
    mok_status want;
  } qt[] = {
      {MOK_DTYPE_BF16, o, o, 2, 512, 512, 256, MOK_ERR_NOT_SUPPORTED},
      {MOK_DTYPE_MXFP8, o, o, 2, 512, 512, 256, MOK_ERR_NOT_SUPPORTED},
      {(mok_dtype)7, o, o, 2, 512, 512, 256, MOK_ERR_INVALID_ARGUMENT},
      {f8, NULL, o, 2, 512, 512, 256, MOK_ERR_INVALID_ARGUMENT},
      {f8, o, NULL, 2, 512, 512, 256, MOK_ERR_INVALID_ARGUMENT},
      {f8, o, o, 2, 512, 512, 384, MOK_ERR_INVALID_SHAPE}, /* the copy's columns past ld_t */
      {f8, o, o, 2, 512, 512, -128, MOK_ERR_INVALID_SHAPE},
      {f8, o, o, -1, 512, 512, 256, MOK_ERR_INVALID_SHAPE},
      {f8, o, o, 2, 500, 512, 256, MOK_ERR_MISALIGNED},
      {f8, o, o, 2, 512, 640, 64, MOK_ERR_MISALIGNED},
      {f8, o, o, 0, 512, 512, 256, MOK_SUCCESS}, /* nothing to quantize */
  };
  for (size_t i = 0; i < sizeof qt / sizeof qt[0]; ++i)
    CHECK_STATUS(mok_quantize_weight_transposed(qt[i].dtype, qt[i].w, qt[i].experts, 256,
                                                qt[i].cols, o, o, o, qt[i].scales_t, qt[i].ld_t,
                                                qt[i].col_off, 0),
                 qt[i].want);
}

/* NULL handles and pointers get MOK_ERR_INVALID_ARGUMENT from every GPU entry point, with or
 * without a GPU, and destroy(NULL) is a no-op. */
void test_api_bad_arguments(void) {
  mok_unique_id id;
  mok_group *g = (mok_group *)&id; /* never dereferenced: every call below fails earlier */
  mok_shape s = {16, 128, 8, 128, 2, 0};
  mok_config c;
  mok_config_init(&c);
  mok_weights w = {0};
  mok_grads gr = {0};
  mok_sym_buffer buf = {0};
  int x = 0;
  CHECK_STATUS(mok_get_unique_id(NULL), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_create(NULL, 2, 0, &g), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_create(&id, 2, 2, &g), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_create(&id, 0, 0, &g), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_create(&id, 2, 0, NULL), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_create_from_nccl(NULL, &g), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_rank(NULL, &x), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_size(NULL, &x), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_group_destroy(NULL), MOK_SUCCESS);
  mok_workspace *ws = NULL;
  CHECK_STATUS(mok_workspace_create(NULL, &s, &c, &ws), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_create(g, NULL, &c, &ws), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_create(g, &s, NULL, &ws), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_create(g, &s, &c, NULL), MOK_ERR_INVALID_ARGUMENT);
  int64_t bytes;
  mok_status dev;
  CHECK_STATUS(mok_workspace_bytes(NULL, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_error(NULL, &dev), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_clear_error(NULL, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_workspace_destroy(NULL), MOK_SUCCESS);
  mok_schedule *sc = NULL;
  CHECK_STATUS(mok_schedule_create(NULL, &sc), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_destroy(NULL), MOK_SUCCESS);
  CHECK_STATUS(mok_schedule_build(NULL, (const int32_t *)&x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_rows(NULL, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_schedule_set_tokens(NULL, 1), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_forward(NULL, &w, &x, (const float *)&x, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_build_and_forward(NULL, (const int32_t *)&x, &w, &x, (const float *)&x, &x, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_backward(NULL, &w, &x, (const float *)&x, &x, &gr, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, NULL, 1, 128, 128, &x, &x, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, &x, -1, 128, 128, &x, &x, 0),
               MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, &x, 1, 100, 128, &x, &x, 0), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, &x, 1, 128, 64, &x, &x, 0), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, &x, 0, 128, 128, &x, &x, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_BF16, &x, 1, 128, 128, &x, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  {
    char a16[64] __attribute__((aligned(16)));
    CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, a16, 1, 128, 48, a16, a16, 0),
                 MOK_ERR_MISALIGNED); /* cols not a multiple of 32 */
    CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, a16 + 2, 1, 128, 64, a16, a16, 0),
                 MOK_ERR_MISALIGNED);
    CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, a16, INT64_MAX / 2, 4, 64, a16, a16, 0),
                 MOK_ERR_INVALID_SHAPE);
    CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, a16, 0, 128, 64, a16, a16, 0), MOK_SUCCESS);
    const uint8_t *s8 = (const uint8_t *)a16;
    float *f = (float *)a16;
    CHECK_STATUS(mok_mxfp8_to_block128(NULL, s8, 1, 128, 128, a16, f, 0), MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_mxfp8_to_block128(a16, s8, 1, 128, 96, a16, f, 0), MOK_ERR_MISALIGNED);
    CHECK_STATUS(mok_mxfp8_to_block128(a16, s8, 1, 64, 128, a16, f, 0), MOK_ERR_MISALIGNED);
    CHECK_STATUS(mok_mxfp8_to_block128(a16, s8, -1, 128, 128, a16, f, 0), MOK_ERR_INVALID_SHAPE);
    CHECK_STATUS(mok_mxfp8_to_block128(a16, s8, INT64_MAX / 64, 256, 128, a16, f, 0),
                 MOK_ERR_INVALID_SHAPE);
    CHECK_STATUS(mok_mxfp8_to_block128(a16, s8, 0, 128, 128, a16, f, 0), MOK_SUCCESS);
    CHECK_STATUS(mok_quantize_weight_mxfp8_block128(NULL, 1, 128, 128, a16, f, 0),
                 MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_quantize_weight_mxfp8_block128(a16, 1, 128, 96, a16, f, 0), MOK_ERR_MISALIGNED);
    CHECK_STATUS(mok_quantize_weight_mxfp8_block128(a16, -1, 128, 128, a16, f, 0),
                 MOK_ERR_INVALID_SHAPE);
    CHECK_STATUS(mok_quantize_weight_mxfp8_block128(a16, INT64_MAX / 64, 256, 128, a16, f, 0),
                 MOK_ERR_INVALID_SHAPE);
    CHECK_STATUS(mok_quantize_weight_mxfp8_block128(a16, 0, 128, 128, a16, f, 0), MOK_SUCCESS);
  }
  CHECK_STATUS(mok_sym_alloc(NULL, 64, &buf), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_sym_free(NULL, &buf), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_dispatch(NULL, &buf, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_experts_forward(NULL, &w, &x, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_combine(NULL, &x, &buf, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_combine_reduce(NULL, &w, &x, &buf, (const float *)&x, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_reverse_combine(NULL, &buf, &x, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_op_reverse_dispatch(NULL, &x, &buf, 0), MOK_ERR_INVALID_ARGUMENT);
}
