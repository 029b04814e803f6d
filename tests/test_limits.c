/* test_limits.c — sizes at and past the limits: every size product of validation, the schedule,
 * the ring plan and the reference is checked without wrapping, mok_validate rejects what
 * mok_workspace_create would, and the reference's allocations fail with a status, not a crash.
 * Each case here was accepted (or crashed) before its check existed. */
#include <stdint.h>
#include "api/config.h"
#include "mok_reference.h"
#include "schedule/pipeline.h"
#include "schedule/schedule.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static mok_status validate(int64_t T, int64_t H, int64_t E, int64_t I, int64_t k, int ep,
                           int64_t capacity) {
  mok_shape s = {T, H, E, I, k, 0};
  mok_config c;
  mok_config_init(&c);
  c.schedule_capacity = capacity;
  return mok_validate(&s, &c, ep);
}

void test_limits_validate(void) {
  CHECK_STATUS(validate(1024, 256, 8, 256, 2, 1, 0), MOK_SUCCESS);
  /* ep * T * k = 2^64 wraps to 0 in int64 arithmetic */
  CHECK_STATUS(validate(1LL << 62, 256, 8, 256, 4, 1, 0), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(1LL << 61, 256, 8, 256, 8, 1, 0), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(INT64_MAX, 256, 8, 256, 1, 1, 0), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(1LL << 29, 256, 8, 256, 4, 1, 0), MOK_ERR_INVALID_SHAPE); /* 2^31 pairs */
  /* the workspace's limits, now mok_validate's too: local experts, capacity, the scan */
  CHECK_STATUS(validate(16, 256, 4096, 256, 1, 1, 0), MOK_SUCCESS);
  CHECK_STATUS(validate(16, 256, 8192, 256, 1, 1, 0), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(16, 256, 8192, 256, 1, 2, 0), MOK_SUCCESS);
  CHECK_STATUS(validate(1024, 256, 8, 256, 2, 1, 1LL << 31), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(1024, 256, 8, 256, 2, 1, 1LL << 40), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(validate(1024, 256, 8, 256, 2, 1, (INT64_MAX / 128) * 128), MOK_ERR_INVALID_SHAPE);
  int64_t rows = 0;
  mok_shape s = {1LL << 62, 256, 8, 256, 4, 0};
  CHECK_STATUS(mok_schedule_worst_case_rows(&s, 1, 128, &rows), MOK_ERR_INVALID_SHAPE);
  s.tokens = 1 << 20;
  CHECK_STATUS(mok_schedule_worst_case_rows(&s, 1, 128, &rows), MOK_SUCCESS);
  CHECK(rows == (1LL << 22) + 8 * 127); /* min(T * k, E * T) pairs, plus each expert's padding */
  int cpr = 0;
  int64_t ct = 0;
  s = (mok_shape){1 << 20, 256, 4096, 256, 8, 0};
  CHECK_STATUS(mok_sched_chunk_geometry(&s, 1, &cpr, &ct), MOK_ERR_INVALID_SHAPE); /* scan full */
}

void test_limits_schedule_and_ring(void) {
  mok_sched_params p = {1, 0, 1LL << 62, 4, 8, 128, 0, NULL};
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_SHAPE);
  p.tokens = INT64_MAX;
  p.top_k = 1;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_SHAPE);
  p.tokens = 1000;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_SUCCESS);
  mok_pipe_params q = {128, 128, 1, 0, 1LL << 40, 1LL << 40};
  CHECK(mok_pipe_check(&q) == MOK_SCHED_BAD_ARGUMENT);
  q.expert_rows = q.capacity = 1 << 20;
  CHECK(mok_pipe_check(&q) == MOK_SCHED_OK);
  /* a ring over a shape whose region bytes would overflow: refused, not wrapped */
  mok_shape s = {1 << 20, 1LL << 50, 8, 128, 2, 0};
  mok_config c;
  mok_config_init(&c);
  c.ring_bytes = 1LL << 40;
  mok_pipe_params out;
  int64_t ring = 0;
  c.schedule_capacity = 1LL << 30;
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 1, 128, 128, &out, &ring), MOK_ERR_INVALID_SHAPE);
}

static void no_fetch(void *ctx, int e, float *wg, float *wu, float *wd) {
  (void)ctx, (void)e, (void)wg, (void)wu, (void)wd;
}

void test_limits_reference_allocations(void) {
  /* one token's k experts of I * H = 2^64 floats: the product wrapped to 0 before */
  mok_ref_config cfg = {0};
  cfg.shape = (mok_shape){1, 1LL << 32, 8, 1LL << 32, 2, 0};
  cfg.ep = 1;
  float x[4] = {0}, rw[2] = {0.5f, 0.5f}, y[4];
  int32_t ids[2] = {0, 1};
  CHECK_STATUS(mok_ref_token(&cfg, x, ids, rw, NULL, no_fetch, NULL, NULL, NULL, NULL, y, NULL, NULL),
               MOK_ERR_OUT_OF_MEMORY);
  /* a problem far past any machine's memory: a status and nothing held */
  mok_ref_problem p;
  mok_shape big = {256, 65536, 8, 65536, 2, 0};
  CHECK(mok_ref_problem_bytes(&big, 2) > (700LL << 30)); /* 768 GiB */
  mok_shape huge = {1LL << 40, 1LL << 40, 8, 1LL << 40, 2, 0};
  CHECK(mok_ref_problem_bytes(&huge, 1) == -1);
  CHECK_STATUS(mok_ref_problem_make(&p, &huge, 1, MOK_ROUTE_UNIFORM, 1), MOK_ERR_OUT_OF_MEMORY);
  CHECK(p.n_owned == 0 && p.owned == NULL);
  mok_ref_problem_free(&p); /* safe after a failed make */
}
