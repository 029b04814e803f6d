/* test_layer.c — GPU layer tests at the launcher's EP size: build + forward + backward compared
 * with the CPU reference over the routing cases that break naive code (uniform, Zipf, all tokens
 * to one expert, an empty expert, an empty rank, top-1, k = E), with and without shared expert and
 * SwiGLU clamp, token counts that are not multiples of any tile, every gradient output mode; plus
 * CUDA-graph replay on new inputs, bitwise determinism, two layers in flight on one workspace, and
 * steps of varying token counts on one workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

GPU_TEST(layer_uniform) { lh_case c = lh_base_case(); lh_run_case(gpu_ctx.group, &c, "uniform", MOK_SUCCESS); }

GPU_TEST(layer_uniform_shared) {
  lh_case c = lh_base_case();
  c.T = 333; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "uniform+shared", MOK_SUCCESS);
}

GPU_TEST(layer_clamp_shared) {
  lh_case c = lh_base_case();
  c.Is = 256; c.use_limit = 1; c.limit = 0.75f; c.T = 129;
  lh_run_case(gpu_ctx.group, &c, "clamp+shared", MOK_SUCCESS);
}

GPU_TEST(layer_zipf) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_ZIPF; c.E = 16; c.k = 4; c.T = 250; c.H = 384; c.I = 128;
  lh_run_case(gpu_ctx.group, &c, "zipf", MOK_SUCCESS);
}

GPU_TEST(layer_one_expert_top1) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_ONE_EXPERT; c.k = 1; c.T = 190;
  lh_run_case(gpu_ctx.group, &c, "all-to-one top1", MOK_SUCCESS);
}

GPU_TEST(layer_one_expert_k2) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_ONE_EXPERT; c.k = 2; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "first-choice-one k2", MOK_SUCCESS);
}

GPU_TEST(layer_empty_expert) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_EMPTY_EXPERT; c.k = 3;
  lh_run_case(gpu_ctx.group, &c, "empty expert", MOK_SUCCESS);
}

GPU_TEST(layer_empty_rank) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_EMPTY_RANK; c.E = 16; c.k = 2;
  lh_run_case(gpu_ctx.group, &c, "empty rank", MOK_SUCCESS);
}

GPU_TEST(layer_top1) {
  lh_case c = lh_base_case();
  c.k = 1; c.T = 77; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "top1", MOK_SUCCESS);
}

GPU_TEST(layer_k_equals_e) {
  lh_case c = lh_base_case();
  c.E = 4; c.k = 4; c.T = 100;
  lh_run_case(gpu_ctx.group, &c, "k=E", MOK_SUCCESS);
}

GPU_TEST(layer_tile64_tiny) {
  lh_case c = lh_base_case();
  c.tile_m = 64; c.T = 3; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "tile64 T=3", MOK_SUCCESS);
}

GPU_TEST(layer_tile256) {
  lh_case c = lh_base_case();
  c.tile_m = 256; c.T = 301; c.k = 3;
  lh_run_case(gpu_ctx.group, &c, "tile256", MOK_SUCCESS);
}

GPU_TEST(layer_zero_tokens) {
  lh_case c = lh_base_case();
  c.T = 0; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "T=0", MOK_SUCCESS);
}

GPU_TEST(layer_grad_fp32_accumulate) {
  lh_case c = lh_base_case();
  c.Is = 128; c.grad_fp32 = 1; c.accumulate = 1;
  lh_run_case(gpu_ctx.group, &c, "fp32 grads, accumulate", MOK_SUCCESS);
}

GPU_TEST(layer_grad_fp32) {
  lh_case c = lh_base_case();
  c.grad_fp32 = 1; c.T = 150;
  lh_run_case(gpu_ctx.group, &c, "fp32 grads", MOK_SUCCESS);
}

GPU_TEST(layer_grad_bf16_accumulate) {
  lh_case c = lh_base_case();
  c.Is = 128; c.accumulate = 1;
  lh_run_case(gpu_ctx.group, &c, "bf16 grads, accumulate", MOK_SUCCESS);
}

/* bf16 accumulation (the v1 weight-gradient kernel) on a schedule used before with another
 * routing: the padding rows then hold earlier rows, which must not reach the gradients. */
GPU_TEST(layer_grad_bf16_accumulate_reused) {
  lh_case c1 = lh_base_case(), c2;
  c1.route = MOK_ROUTE_ZIPF; c1.E = 16; c1.k = 4; c1.T = 333;
  c2 = c1;
  c2.route = MOK_ROUTE_UNIFORM; c2.accumulate = 1;
  lh_pair p;
  lh_pair_open(gpu_ctx.group, &p, &c1, &c2, test_seed() + 7);
  if (p.ok) {
    CHECK_STATUS(lh_run(p.e.s, &p.d[0], p.e.stream), MOK_SUCCESS);
    CHECK_STATUS(lh_run(p.e.s, &p.d[1], p.e.stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(p.e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(p.e.ws), MOK_SUCCESS);
    lh_check_against_reference(&p.h[1], &p.d[1], gpu_ctx.rank, "bf16 accumulate, reused schedule");
  }
  lh_pair_close(&p);
}

GPU_TEST(layer_larger) {
  lh_case c = lh_base_case();
  c.T = 160; c.H = 512; c.I = 384; c.E = 16; c.k = 4; c.Is = 256;
  c.route = MOK_ROUTE_ZIPF; c.use_limit = 1; c.limit = 1.5f;
  lh_run_case(gpu_ctx.group, &c, "larger zipf+clamp+shared", MOK_SUCCESS);
}

/* The oracle path (MOK_PATH_ORACLE: the v1 GEMMs) stays covered whatever the default is. */
GPU_TEST(layer_v1_larger) {
  lh_case c = lh_base_case();
  c.T = 160; c.H = 512; c.I = 384; c.E = 16; c.k = 4; c.Is = 256;
  c.route = MOK_ROUTE_ZIPF; c.use_limit = 1; c.limit = 1.5f; c.path = MOK_PATH_ORACLE;
  lh_run_case(gpu_ctx.group, &c, "v1: larger zipf+clamp+shared", MOK_SUCCESS);
}

GPU_TEST(layer_v1_fp32_accumulate) {
  lh_case c = lh_base_case();
  c.Is = 128; c.grad_fp32 = 1; c.accumulate = 1; c.T = 211; c.path = MOK_PATH_ORACLE;
  lh_run_case(gpu_ctx.group, &c, "v1: fp32 grads, accumulate", MOK_SUCCESS);
}

/* Many local experts (more than one grouped launch holds at EP <= 2) and wide rows. */
GPU_TEST(layer_many_experts) {
  lh_case c = lh_base_case();
  c.E = 640; c.k = 6; c.T = 300; c.H = 256; c.I = 128; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "640 experts", MOK_SUCCESS);
}

/* Build + forward + backward captured once in a CUDA graph, replayed on two input sets copied into
 * the same buffers; with other > 0, an eager step of `other` tokens on the same schedule
 * (mok_schedule_set_tokens) runs between the two replays, which then still run the graph's count. */
static void graph_replay_between(lh_case c, const char *label, int64_t other) {
  char la[96], lb[96];
  snprintf(la, sizeof la, "%s, inputs A", label);
  snprintf(lb, sizeof lb, "%s, inputs B", label);
  lh_host ha, hb;
  lh_host_make(&ha, &c, gpu_ctx.size, test_seed());
  lh_host_make(&hb, &c, gpu_ctx.size, test_seed() + 7777);
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &ha) == 0);
  lh_dev_upload(&d, &ha, gpu_ctx.rank);
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, &ha, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(e.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
    CHECK(cudaStreamEndCapture(e.stream, &graph) == cudaSuccess);
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, e.stream) == cudaSuccess);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    lh_check_against_reference(&ha, &d, gpu_ctx.rank, la);
    if (other > 0) {
      lh_case co = c;
      co.T = other;
      lh_host ho;
      lh_dev dov;
      lh_host_make(&ho, &co, gpu_ctx.size, test_seed() + 4242);
      CHECK(lh_dev_alloc(&dov, &ho) == 0);
      lh_dev_upload(&dov, &ho, gpu_ctx.rank);
      CHECK_STATUS(mok_schedule_set_tokens(e.s, other), MOK_SUCCESS);
      CHECK_STATUS(lh_run(e.s, &dov, e.stream), MOK_SUCCESS);
      CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
      CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
      char lo[96];
      snprintf(lo, sizeof lo, "%s, eager %lld tokens between", label, (long long)other);
      lh_check_against_reference(&ho, &dov, gpu_ctx.rank, lo);
      lh_dev_free(&dov);
      lh_host_free(&ho);
    }
    lh_dev_upload(&d, &hb, gpu_ctx.rank);
    CHECK(cudaGraphLaunch(exec, e.stream) == cudaSuccess);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    lh_check_against_reference(&hb, &d, gpu_ctx.rank, lb);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  lh_env_close(&e);
  lh_dev_free(&d);
  lh_host_free(&ha);
  lh_host_free(&hb);
}

static void graph_replay(lh_case c, const char *label) { graph_replay_between(c, label, 0); }

/* A graph captured at 211 of a workspace's 300 tokens, an eager step of 77 between its replays:
 * the graph replays its own count's staging and shared-expert table. */
GPU_TEST(layer_graph_replay_token_counts) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 211; c.ws_tokens = 300; c.k = 3; c.route = MOK_ROUTE_ZIPF;
  c.path = MOK_PATH_GROUPED;
  c.build_in_forward = 1;
  graph_replay_between(c, "graph replay, 211 of 300 tokens", 77);
}

GPU_TEST(layer_graph_replay) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 211; c.k = 3; c.route = MOK_ROUTE_ZIPF;
  graph_replay(c, "graph replay");
}

/* mok_build_and_forward captured: the side stream forked before the build (the grouped path, so
 * that the shared expert runs beside). */
GPU_TEST(layer_graph_replay_build_in_forward) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 211; c.k = 3; c.route = MOK_ROUTE_ZIPF;
  c.path = MOK_PATH_GROUPED;
  c.build_in_forward = 1;
  graph_replay(c, "graph replay, build in forward");
}

/* Two runs on the same inputs give bitwise-identical outputs and gradients. */
GPU_TEST(layer_determinism) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 300; c.k = 4; c.E = 8; c.route = MOK_ROUTE_ZIPF; c.grad_fp32 = 1;
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, &h, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    void *snap[2] = {NULL, NULL};
    int64_t bytes[2] = {0, 0};
    for (int run = 0; run < 2; ++run) {
      lh_dev_upload(&d, &h, gpu_ctx.rank);
      CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
      CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
      snap[run] = lh_snapshot(&d, &h, &bytes[run]);
    }
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    CHECK(bytes[0] == bytes[1] && memcmp(snap[0], snap[1], (size_t)bytes[0]) == 0);
    lh_check_against_reference(&h, &d, gpu_ctx.rank, "determinism (2nd run)");
    free(snap[0]);
    free(snap[1]);
  }
  lh_env_close(&e);
  lh_dev_free(&d);
  lh_host_free(&h);
}

/* One run of h's case with its current knobs, against the reference; then, when `compare`, its
 * outputs bit for bit against the first compared run's (kept in *first; `base` names that run). */
static void knob_run(lh_host *h, lh_dev *d, const char *label, int compare, void **first,
                     int64_t *first_bytes, const char *base) {
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, h, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st != MOK_SUCCESS) return;
  lh_dev_upload(d, h, gpu_ctx.rank);
  CHECK_STATUS(lh_run(e.s, d, e.stream), MOK_SUCCESS);
  CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
  CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
  lh_check_against_reference(h, d, gpu_ctx.rank, label);
  int64_t bytes = 0;
  void *snap = lh_snapshot(d, h, &bytes);
  if (!compare) {
    free(snap);
  } else if (!*first) {
    *first = snap;
    *first_bytes = bytes;
  } else {
    const int same = bytes == *first_bytes && memcmp(snap, *first, (size_t)bytes) == 0;
    if (!same) printf("  %s: not bitwise equal to the %s run\n", label, base);
    CHECK(same);
    free(snap);
  }
  lh_env_close(&e);
}

/* The fused path (the pull by comm CTAs inside gate+up, the pushes by the GEMM epilogues) against
 * the reference, and bitwise equal to the grouped path (separate communication kernels) whatever
 * its comm CTAs and minibatch size (they move rows, never the arithmetic), and the plan's other
 * alternatives: the GEMMs in single CTAs or cluster pairs, the serial schedule build. */
GPU_TEST(layer_fused_knobs_bitwise) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 517; c.k = 4; c.E = 16; c.H = 384; c.route = MOK_ROUTE_ZIPF;
  static const struct { mok_path path; int comm, mb; const char *plan, *label; } runs[] = {
      {MOK_PATH_GROUPED, 0, 0, NULL, "grouped"},
      {MOK_PATH_FUSED, 1, 128, NULL, "fused, 1 comm CTA, minibatch 128"},
      {MOK_PATH_FUSED, 6, 384, NULL, "fused, 6 comm CTAs, minibatch 384"},
      {MOK_PATH_FUSED, 0, 0, NULL, "fused, defaults"},
      {MOK_PATH_FUSED, 0, 0, "routed_cluster=1,shared_cluster=2", "fused, single CTAs"},
      {MOK_PATH_FUSED, 0, 0, "routed_cluster=2,shared_cluster=1", "fused, cluster pairs"},
      {MOK_PATH_GROUPED, 0, 0, "routed_cluster=1,schedule=serial", "grouped, 1 CTA, serial"},
      {MOK_PATH_GROUPED, 0, 0, "shared_fwd=beside_late", "grouped, shared joined late"},
  };
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  void *first = NULL;
  int64_t first_bytes = 0;
  const char *force = getenv("MOK_TEST_PATH");
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
    h.c.path = runs[i].path;
    h.c.comm_sms = runs[i].comm;
    h.c.minibatch_rows = runs[i].mb;
    h.c.plan = runs[i].plan;
    /* the oracle suite's grouped run keeps its own oracle, compared with the reference only */
    const int v1 = runs[i].path == MOK_PATH_GROUPED && force && !strcmp(force, "oracle");
    knob_run(&h, &d, runs[i].label, !v1, &first, &first_bytes, "grouped");
  }
  free(first);
  lh_dev_free(&d);
  lh_host_free(&h);
}

/* Every plan `mok tune` may choose (mok_plan_candidates: the default and its one-field
 * variations) against the reference, and bitwise equal to the default's run: tuning changes the
 * speed, never a bit. BF16 (the FP8 candidates: layer_fp8_uniform_shared). */
GPU_TEST(layer_plan_candidates_bitwise) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 517; c.k = 4; c.E = 16; c.H = 384; c.route = MOK_ROUTE_ZIPF;
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  mok_config cc;
  mok_config_init(&cc);
  mok_plan cands[32];
  int n = 0;
  CHECK_STATUS(mok_plan_candidates(&h.shape, &cc, gpu_ctx.size, cands, 32, &n), MOK_SUCCESS);
  CHECK(n >= 4);
  const char *force = getenv("MOK_TEST_PATH");
  void *first = NULL;
  int64_t first_bytes = 0;
  for (int i = 0; i < n && !(force && !strcmp(force, "oracle")); ++i) {
    static char text[512];
    CHECK_STATUS(mok_plan_format(&cands[i], text, sizeof text), MOK_SUCCESS);
    h.c.plan = text;
    knob_run(&h, &d, text, 1, &first, &first_bytes, "default plan's");
  }
  free(first);
  lh_dev_free(&d);
  lh_host_free(&h);
}

/* The tuned plan cache at workspace creation: an entry for the request's key is the plan the
 * workspace runs (mok_workspace_plan_tuned says so), a pinned field or an entry this device
 * cannot run leave the plan to the shape, and a request of another key (more tokens) is not
 * served by it. */
GPU_TEST(workspace_runs_tuned_plan) {
  const mok_shape s = {256, 256, 8 * gpu_ctx.size, 128, 2, 128};
  char path[256], key[1024];
  snprintf(path, sizeof path, "/tmp/mok_tuned_test.%d.%d/plans.tsv", (int)getpid(), gpu_ctx.rank);
  mok_config c;
  mok_config_init(&c);
  c.plan_cache = path;
  mok_plan cands[32];
  int n = 0;
  CHECK_STATUS(mok_plan_candidates(&s, &c, gpu_ctx.size, cands, 32, &n), MOK_SUCCESS);
  CHECK(n >= 2);
  if (n < 2) return;
  CHECK_STATUS(mok_plan_cache_key(&s, &c, gpu_ctx.size, key, sizeof key), MOK_SUCCESS);
  const mok_plan want = cands[n - 1]; /* a plan other than the default */
  CHECK_STATUS(mok_plan_cache_store(path, key, &want, 1.0), MOK_SUCCESS);
  struct { const char *pin; int64_t tokens; int tuned; } runs[] = {
      {NULL, 256, 1}, {"schedule=parallel", 256, 0}, {NULL, 384, 0}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
    mok_config ci = c;
    if (runs[i].pin) CHECK_STATUS(mok_plan_parse(runs[i].pin, &ci.plan), MOK_SUCCESS);
    mok_shape si = s;
    si.tokens = runs[i].tokens;
    mok_workspace *ws = NULL;
    CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &si, &ci, &ws), MOK_SUCCESS);
    if (!ws) continue;
    int tuned = -1;
    mok_plan got;
    CHECK_STATUS(mok_workspace_plan_tuned(ws, &tuned), MOK_SUCCESS);
    CHECK_STATUS(mok_workspace_plan(ws, &got), MOK_SUCCESS);
    printf("  tuned plan cache, %s, T %lld: tuned %d, %s\n", runs[i].pin ? runs[i].pin : "no pin",
           (long long)si.tokens, tuned, mok_workspace_kernels(ws));
    CHECK(tuned == runs[i].tuned);
    if (runs[i].tuned) CHECK(memcmp(&got, &want, sizeof got) == 0);
    else CHECK(memcmp(&got, &want, sizeof got) != 0 || runs[i].pin);
    mok_workspace_destroy(ws);
  }
  /* an entry this device cannot run (more comm CTAs than half the SMs): the shape's plan */
  mok_plan bad = want;
  bad.fwd_comm_ctas = 1000;
  CHECK_STATUS(mok_plan_cache_store(path, key, &bad, 1.0), MOK_SUCCESS);
  mok_workspace *ws = NULL;
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &s, &c, &ws), MOK_SUCCESS);
  if (ws) {
    int tuned = -1;
    mok_plan got;
    CHECK_STATUS(mok_workspace_plan_tuned(ws, &tuned), MOK_SUCCESS);
    CHECK_STATUS(mok_workspace_plan(ws, &got), MOK_SUCCESS);
    CHECK(tuned == 0 && memcmp(&got, &cands[0], sizeof got) == 0);
    mok_workspace_destroy(ws);
  }
  remove(path);
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/mok_tuned_test.%d.%d", (int)getpid(), gpu_ctx.rank);
  rmdir(dir);
}

/* The combine slots and x's staging copy by path: at EP=1 a BF16 grouped workspace (every row
 * read in place by the reduces, the dispatch reading the caller's x) holds neither, so it is
 * exactly T*k*H + T*H bf16 smaller than the fused one (which pushes from its epilogues and pulls
 * x through its comm CTAs); across GPUs both hold them. The layer tests run the lean workspace
 * against the reference; this checks the bytes it saves. */
GPU_TEST(workspace_slots_by_path) {
  const mok_shape s = {320, 512, 8 * gpu_ctx.size, 128, 4, 0};
  const char *paths[] = {"path=grouped", "path=fused"};
  int64_t bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    mok_config c;
    mok_config_init(&c);
    c.plan_cache = "";
    CHECK_STATUS(mok_plan_parse(paths[i], &c.plan), MOK_SUCCESS);
    mok_workspace *ws = NULL;
    CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &s, &c, &ws), MOK_SUCCESS);
    if (!ws) return;
    CHECK_STATUS(mok_workspace_bytes(ws, &bytes[i]), MOK_SUCCESS);
    mok_workspace_destroy(ws);
  }
  const int64_t slots = s.tokens * s.top_k * s.hidden * 2, x = s.tokens * s.hidden * 2;
  printf("  workspace bytes: grouped %lld, fused %lld (slots %lld, x %lld)\n", (long long)bytes[0],
         (long long)bytes[1], (long long)slots, (long long)x);
  CHECK(bytes[1] - bytes[0] == (gpu_ctx.size == 1 ? slots + x : 0));
}

/* The shared expert beside the communication (on the workspace's side stream, its GEMMs on the
 * SMs the dispatch and the reverse combine leave): against the reference, and bitwise equal to the
 * shared expert in line, whatever the comm-SM counts (they move rows, never the arithmetic), and
 * with the schedule built in the forward's call (the shared expert's GEMMs then overlap the
 * build). BF16 on the grouped path (the fused one keeps its dispatch inside gate+up); FP8 in
 * fp8_case. */
GPU_TEST(layer_shared_beside_bitwise) {
  lh_case c = lh_base_case();
  c.Is = 256; c.T = 517; c.k = 4; c.E = 16; c.H = 384; c.route = MOK_ROUTE_ZIPF;
  c.path = MOK_PATH_GROUPED;
  static const struct { int inl, fwd, bwd, build; const char *label; } runs[] = {
      {1, 0, 0, 0, "shared expert in line"},
      {0, 0, 0, 0, "beside, default comm SMs"},
      {0, 1, 1, 0, "beside, 1 comm SM"},
      {0, 9, 23, 0, "beside, 9 / 23 comm SMs"},
      {0, 0, 0, 1, "beside, build in forward"},
      {0, 9, 23, 1, "beside, 9 / 23, build in forward"},
  };
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  void *first = NULL;
  int64_t first_bytes = 0;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
    h.c.shared_inline = runs[i].inl;
    h.c.comm_sms = runs[i].fwd;
    h.c.bwd_comm_sms = runs[i].bwd;
    h.c.build_in_forward = runs[i].build;
    knob_run(&h, &d, runs[i].label, 1, &first, &first_bytes, "in-line");
  }
  free(first);
  lh_dev_free(&d);
  lh_host_free(&h);
}

/* Two layers in flight on one workspace: forward 1, forward 2, backward 2, backward 1. */
/* One workspace for steps of varying size (mok_schedule_set_tokens): 300, 77, 0, 211 and 300
 * tokens on a workspace of 300, each on fresh inputs against the reference, the build apart and in
 * the forward's call in turn, on each expert path; a count out of range is refused, and so is a
 * pass between a new count and its build, with nothing enqueued (y stays poisoned). */
GPU_TEST(layer_token_counts_on_one_workspace) {
  static const int64_t counts[] = {300, 77, 0, 211, 300};
  static const mok_path paths[] = {MOK_PATH_AUTO, MOK_PATH_GROUPED, MOK_PATH_ORACLE};
  static const char *names[] = {"default path", "grouped path", "oracle path"};
  for (int p = 0; p < 3; ++p) {
    lh_case c = lh_base_case();
    c.Is = 128; c.T = 300; c.k = 3; c.route = MOK_ROUTE_ZIPF; c.path = paths[p];
    lh_host hw;
    if (lh_host_make(&hw, &c, gpu_ctx.size, test_seed())) {
      lh_host_free(&hw);
      continue;
    }
    lh_env e;
    const mok_status st = lh_env_open(gpu_ctx.group, &e, &hw, 1);
    CHECK_STATUS(st, MOK_SUCCESS);
    if (st == MOK_SUCCESS) {
      CHECK_STATUS(mok_schedule_set_tokens(e.s, c.T + 1), MOK_ERR_INVALID_SHAPE);
      CHECK_STATUS(mok_schedule_set_tokens(e.s, -1), MOK_ERR_INVALID_SHAPE);
      CHECK_STATUS(mok_schedule_set_tokens(NULL, 1), MOK_ERR_INVALID_ARGUMENT);
      int64_t built = c.T;
      for (int i = 0; i < 5; ++i) {
        lh_case ci = c;
        ci.T = counts[i];
        ci.build_in_forward = i & 1;
        lh_host h;
        if (lh_host_make(&h, &ci, gpu_ctx.size, test_seed() + 1 + (uint64_t)i)) {
          lh_host_free(&h);
          continue;
        }
        lh_dev d;
        CHECK(lh_dev_alloc(&d, &h) == 0);
        lh_dev_upload(&d, &h, gpu_ctx.rank);
        CHECK_STATUS(mok_schedule_set_tokens(e.s, counts[i]), MOK_SUCCESS);
        if (counts[i] != built) { /* not built for this count yet: refused */
          CHECK_STATUS(mok_forward(e.s, &d.weights, d.x, d.rw, d.y, e.stream),
                       MOK_ERR_INVALID_ARGUMENT);
          CHECK_STATUS(mok_backward(e.s, &d.weights, d.x, d.rw, d.dy, &d.grads, e.stream),
                       MOK_ERR_INVALID_ARGUMENT);
          CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
          uint16_t first = 0;
          if (counts[i] > 0) cudaMemcpy(&first, d.y, 2, cudaMemcpyDeviceToHost);
          CHECK(counts[i] == 0 || first == 0xFFFF);
        }
        CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
        built = counts[i];
        CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
        CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
        char label[64];
        snprintf(label, sizeof label, "%s, %lld of %lld tokens", names[p], (long long)counts[i],
                 (long long)c.T);
        lh_check_against_reference(&h, &d, gpu_ctx.rank, label);
        lh_dev_free(&d);
        lh_host_free(&h);
      }
    }
    lh_env_close(&e);
    lh_host_free(&hw);
  }
}

GPU_TEST(layer_two_in_flight) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 120; c.k = 2;
  lh_pair p;
  lh_pair_open(gpu_ctx.group, &p, &c, &c, test_seed() + 99);
  lh_two_in_flight(&p, "two in flight");
  lh_pair_close(&p);
}

/* Device-detected faults: the error word on every rank, NaN outputs, nothing out of bounds. */
GPU_TEST(fault_duplicate_expert) {
  lh_case c = lh_base_case();
  c.inject = LH_INJECT_DUPLICATE; c.Is = 128;
  lh_run_case(gpu_ctx.group, &c, "duplicate expert", MOK_ERR_DUPLICATE_EXPERT);
}

GPU_TEST(fault_expert_id_out_of_range) {
  lh_case c = lh_base_case();
  c.inject = LH_INJECT_BAD_ID;
  lh_run_case(gpu_ctx.group, &c, "expert id out of range", MOK_ERR_EXPERT_ID);
}

/* The same fault found by a build in the forward's call while the shared expert runs beside it:
 * every output still NaN. */
GPU_TEST(fault_expert_id_build_in_forward) {
  lh_case c = lh_base_case();
  c.inject = LH_INJECT_BAD_ID; c.Is = 128;
  c.path = MOK_PATH_GROUPED;
  c.build_in_forward = 1;
  lh_run_case(gpu_ctx.group, &c, "expert id, build in forward", MOK_ERR_EXPERT_ID);
}

GPU_TEST(fault_capacity_all_ranks) {
  lh_case c = lh_base_case();
  c.capacity = 128;
  lh_run_case(gpu_ctx.group, &c, "capacity, all ranks", MOK_ERR_CAPACITY);
}

GPU_TEST(fault_capacity_one_rank) {
  lh_case c = lh_base_case();
  c.route = MOK_ROUTE_ONE_EXPERT; c.k = 1; c.T = 300; c.capacity = 256;
  lh_run_case(gpu_ctx.group, &c, "capacity, rank 0 only", MOK_ERR_CAPACITY);
}

/* After a fault, clearing the error word makes the same workspace and schedule usable again. */
GPU_TEST(fault_then_clear) {
  lh_case bad = lh_base_case();
  bad.inject = LH_INJECT_DUPLICATE;
  lh_case good = lh_base_case();
  lh_host hb, hg;
  lh_host_make(&hb, &bad, gpu_ctx.size, test_seed());
  lh_host_make(&hg, &good, gpu_ctx.size, test_seed() + 5);
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &hb) == 0);
  lh_dev_upload(&d, &hb, gpu_ctx.rank);
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, &hb, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
    CHECK_STATUS(lh_device_error(e.ws), MOK_ERR_DUPLICATE_EXPERT);
    CHECK_STATUS(mok_workspace_clear_error(e.ws, e.stream), MOK_SUCCESS);
    lh_dev_upload(&d, &hg, gpu_ctx.rank);
    CHECK_STATUS(lh_run(e.s, &d, e.stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e.stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    lh_check_against_reference(&hg, &d, gpu_ctx.rank, "after clear");
  }
  lh_env_close(&e);
  lh_dev_free(&d);
  lh_host_free(&hb);
  lh_host_free(&hg);
}
