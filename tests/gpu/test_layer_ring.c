/* test_layer_ring.c — the token ring (config.ring_bytes): build + forward + backward with one
 * region and one-minibatch macrobatches (almost every macrobatch replayed in backward), with two
 * regions, and with a region per macrobatch (nothing replayed) give, bit for bit, the outputs and
 * gradients of the same path without a ring (which matches the reference); on the fused and the
 * grouped path, over the routing cases (uniform, Zipf, every token's first choice one expert, an empty
 * rank, top-1) and bf16-accumulated gradients; the schedule holds less memory; two layers in
 * flight keep their own rings; the ops layer refuses a ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

/* One run of h's case as it is configured; its outputs' snapshot and the schedule's bytes;
 * compared with the reference when check (the runs with a ring are compared bitwise instead). */
static void *run_snapshot(lh_host *h, lh_dev *d, const char *label, int check, int64_t *bytes,
                          int64_t *sched_bytes) {
  lh_env e;
  void *snap = NULL;
  mok_status st = lh_env_open(gpu_ctx.group, &e, h, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    lh_dev_upload(d, h, gpu_ctx.rank);
    CHECK_STATUS(lh_run(e.s, d, e.stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    if (check) lh_check_against_reference(h, d, gpu_ctx.rank, label);
    lh_check_guards(d, h);
    CHECK_STATUS(mok_schedule_bytes(e.s, sched_bytes), MOK_SUCCESS);
    snap = lh_snapshot(d, h, bytes);
  }
  lh_env_close(&e);
  return snap;
}

static void ring_case(lh_case c, const char *label) {
  lh_host h;
  if (lh_host_make(&h, &c, gpu_ctx.size, test_seed())) return; /* the routing cannot serve it */
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  static const mok_path paths[2] = {MOK_PATH_FUSED, MOK_PATH_GROUPED};
  static const struct { int regions, macro; const char *name; } rings[] = {
      {1, 1, "1 region, 1-minibatch macrobatches"},
      {2, 2, "2 regions, 2-minibatch macrobatches"},
      {1 << 20, 1, "a region per macrobatch"},
  };
  for (int pi = 0; pi < 2; ++pi) {
    h.c = c;
    h.c.path = paths[pi];
    int64_t bytes0 = 0, sched0 = 0;
    char name[160];
    snprintf(name, sizeof name, "%s, %s, no ring", label, pi ? "grouped" : "fused");
    void *first = run_snapshot(&h, &d, name, 1, &bytes0, &sched0);
    for (size_t i = 0; first && i < sizeof rings / sizeof rings[0]; ++i) {
      h.c.macro_minibatches = rings[i].macro;
      h.c.ring_bytes = lh_ring_bytes(&h.c, gpu_ctx.size, rings[i].regions);
      CHECK(h.c.ring_bytes > 0);
      snprintf(name, sizeof name, "%s, %s, %s", label, pi ? "grouped" : "fused", rings[i].name);
      int64_t bytes = 0, sched = 0;
      void *snap = run_snapshot(&h, &d, name, 0, &bytes, &sched);
      const int same = snap && bytes == bytes0 && memcmp(snap, first, (size_t)bytes) == 0;
      printf("  %-64s r%d bitwise %s the run without a ring; schedule %.2f MB (without: %.2f)\n",
             name, gpu_ctx.rank, same ? "equal to" : "DIFFERENT from", sched / 1e6, sched0 / 1e6);
      CHECK(same);
      if (rings[i].regions == 1) CHECK(sched < sched0); /* one region: less than the capacity */
      free(snap);
    }
    free(first);
  }
  lh_dev_free(&d);
  lh_host_free(&h);
}

static lh_case ring_base(void) {
  lh_case c = lh_base_case();
  c.T = 517; c.H = 384; c.E = 16; c.k = 4; c.I = 256; c.Is = 128;
  c.minibatch_rows = 128;
  return c;
}

GPU_TEST(layer_ring_uniform) { ring_case(ring_base(), "ring uniform"); }

GPU_TEST(layer_ring_zipf_clamp) {
  lh_case c = ring_base();
  c.route = MOK_ROUTE_ZIPF;
  c.use_limit = 1; c.limit = 0.75f;
  ring_case(c, "ring zipf+clamp");
}

GPU_TEST(layer_ring_one_expert) {
  lh_case c = ring_base();
  c.route = MOK_ROUTE_ONE_EXPERT; c.k = 2; c.Is = 0;
  ring_case(c, "ring first-choice-one");
}

GPU_TEST(layer_ring_empty_rank_top1) {
  lh_case c = ring_base();
  c.route = MOK_ROUTE_EMPTY_RANK; c.k = 1; c.T = 300;
  ring_case(c, "ring empty rank top1");
}

GPU_TEST(layer_ring_bf16_accumulate) {
  lh_case c = ring_base();
  c.route = MOK_ROUTE_ZIPF; c.accumulate = 1; c.T = 260;
  ring_case(c, "ring bf16 accumulate");
}

/* Two layers in flight on one workspace with a one-region ring: forward 1, forward 2, backward 2,
 * backward 1; each schedule keeps its own macrobatches. Then the ops layer says it has no ring. */
GPU_TEST(layer_ring_two_in_flight) {
  lh_case c = ring_base();
  c.T = 240; c.k = 2;
  c.macro_minibatches = 1;
  c.ring_bytes = lh_ring_bytes(&c, gpu_ctx.size, 1);
  lh_pair p;
  lh_pair_open(gpu_ctx.group, &p, &c, &c, test_seed() + 99);
  lh_two_in_flight(&p, "ring, two in flight");
  if (p.ok) {
    char dummy[16];
    CHECK_STATUS(mok_op_experts_forward(p.e.s, &p.d[0].weights, dummy, dummy, p.e.stream),
                 MOK_ERR_NOT_SUPPORTED);
  }
  lh_pair_close(&p);
}

/* Two backwards after one forward with a one-region ring: the first replays into the region
 * forward left macrobatch 0 in, so the second must replay every macrobatch (the schedule's
 * ring_kept); both give the same bits (outputs poisoned in between). */
GPU_TEST(layer_ring_backward_twice) {
  lh_case c = ring_base();
  c.route = MOK_ROUTE_ZIPF;
  c.macro_minibatches = 1;
  c.ring_bytes = lh_ring_bytes(&c, gpu_ctx.size, 1);
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  lh_dev_upload(&d, &h, gpu_ctx.rank);
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, &h, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    int64_t b1 = 0, b2 = 0;
    void *first = lh_snapshot(&d, &h, &b1);
    const size_t ge = h.c.grad_fp32 ? 4 : 2;
    cudaMemset(d.dx, 0xFF, (size_t)(c.T * c.H * 2));
    cudaMemset(d.drw, 0xFF, (size_t)(c.T * c.k * 4));
    for (int i = 0; i < 6; ++i)
      if (d.wn[i] > 0) cudaMemset(d.g[i], 0xFF, (size_t)d.wn[i] * ge);
    CHECK_STATUS(mok_backward(e.s, &d.weights, d.x, d.rw, d.dy, &d.grads, e.stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    void *second = lh_snapshot(&d, &h, &b2);
    const int same = b1 == b2 && memcmp(first, second, (size_t)b1) == 0;
    printf("  ring, backward twice          r%d second backward %s the first\n", gpu_ctx.rank,
           same ? "bitwise equal to" : "DIFFERENT from");
    CHECK(same);
    lh_check_against_reference(&h, &d, gpu_ctx.rank, "ring, second backward");
    free(first);
    free(second);
  }
  lh_env_close(&e);
  lh_dev_free(&d);
  lh_host_free(&h);
}
