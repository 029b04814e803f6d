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

/* The schedule build's chunking: sqrt(8 T k / E) chunks per rank at the design shapes, at least
 * what shared memory requires, at most MOK_SCHED_SCAN_CHUNKS over all ranks, and no more than
 * the single-block scan holds: a shape past the scan at that count (13 chunks x 4096 experts)
 * is cut to the scan's 12, not refused. */
void test_limits_chunk_geometry(void) {
  const struct {
    int64_t T, E, k;
    int ep, cpr;
    int64_t ct;
  } cases[] = {
      {7168, 256, 8, 1, 42, 171},  /* DeepSeek-V3                                         */
      {7168, 256, 8, 8, 16, 448},  /* the same per rank at EP=8: 128 chunks in the scan  */
      {7168, 128, 8, 1, 60, 120},  /* Qwen3-30B                                           */
      {7168, 64, 8, 1, 85, 85},    /* OLMoE-like                                          */
      {10240, 4096, 8, 1, 12, 854}, /* the scan's limit                                   */
      {65536, 8, 8, 1, 128, 512},  /* few experts: the scan's 128 chunks                 */
      {1 << 20, 32, 8, 1, 1024, 1024}, /* more than 128: each chunk's 8192 ids in shared memory */
      {3, 256, 8, 1, 1, 3},        /* fewer tokens than a chunk                           */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    mok_shape s = {cases[i].T, 256, cases[i].E, 256, cases[i].k, 0};
    int cpr = 0;
    int64_t ct = 0;
    CHECK_STATUS(mok_sched_chunk_geometry(&s, cases[i].ep, &cpr, &ct), MOK_SUCCESS);
    CHECK(cpr == cases[i].cpr && ct == cases[i].ct);
    CHECK((int64_t)cpr * ct >= s.tokens && (int64_t)(cpr - 1) * ct < s.tokens);
    CHECK(ct * s.top_k <= MOK_SCHED_MAX_CHUNK_IDS);
    CHECK((int64_t)cpr * s.num_experts <= MOK_SCHED_MAX_SCAN_ENTRIES);
    CHECK((int64_t)cpr * cases[i].ep <= MOK_SCHED_SCAN_CHUNKS || ct * s.top_k == MOK_SCHED_MAX_CHUNK_IDS);
    if (cpr != cases[i].cpr || ct != cases[i].ct)
      printf("  T %lld E %lld k %lld: %d chunks of %lld tokens\n", (long long)s.tokens,
             (long long)s.num_experts, (long long)s.top_k, cpr, (long long)ct);
  }
}
