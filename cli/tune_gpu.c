/* tune_gpu.c — `mok tune`: the plan measured fastest for a shape, stored in the plan cache that
 * workspaces of that device, group size, shape and config then run (include/mok.h, "tuning").
 *
 * Every rank runs the same candidates (mok_plan_candidates: a function of the request and the
 * device), each on a workspace of its own, on `mok run`'s generated inputs and routing: warm-up
 * steps, then timed steps of build + forward + backward (mok_build_and_forward, as the PyTorch
 * layer calls it). The launcher takes each step's slowest rank and the median over steps, so one
 * choice is made for the whole group. A candidate replaces the default only when it is faster by
 * more than the noise margin; candidates whose run failed are never chosen. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "cli/cli.h"
#include "mok.h"

#define TUNE_MAX 32        /* candidates at most */
#define TUNE_MARGIN 0.01   /* a candidate must beat the default by this fraction to replace it */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define TK(call)                                                                             \
  do {                                                                                       \
    mok_status s_ = (call);                                                                  \
    if (s_ != MOK_SUCCESS) {                                                                 \
      fprintf(stderr, "mok tune rank %d: %s: %s\n", rank, #call, mok_status_string(s_));     \
      return s_;                                                                             \
    }                                                                                        \
  } while (0)

/* One candidate: its workspace, warm-up and timed steps; ms[i] the step times. */
static mok_status time_plan(const cli_options *o, mok_group *g, int rank, const mok_config *c,
                            const mok_weights *wt, const mok_grads *gr, const void *x,
                            const void *dy, const float *rw, const int32_t *topk, void *y,
                            cudaStream_t q, cudaEvent_t *ev, float *ms, char *text,
                            size_t text_size) {
  mok_workspace *ws = NULL;
  mok_schedule *sch = NULL;
  TK(mok_workspace_create(g, &o->shape, c, &ws));
  mok_status st = mok_schedule_create(ws, &sch);
  snprintf(text, text_size, "%s", mok_workspace_kernels(ws));
  for (int i = 0; st == MOK_SUCCESS && i < o->warmup + o->iters; ++i) {
    const int t = i - o->warmup;
    if (t >= 0) cudaEventRecord(ev[2 * t], q);
    st = mok_build_and_forward(sch, topk, wt, x, rw, y, q);
    if (st == MOK_SUCCESS) st = mok_backward(sch, wt, x, rw, dy, gr, q);
    if (t >= 0) cudaEventRecord(ev[2 * t + 1], q);
  }
  if (cudaStreamSynchronize(q) != cudaSuccess && st == MOK_SUCCESS) st = MOK_ERR_CUDA;
  mok_status dev = MOK_SUCCESS;
  if (st == MOK_SUCCESS) st = mok_workspace_error(ws, &dev);
  if (st == MOK_SUCCESS) st = dev;
  for (int t = 0; st == MOK_SUCCESS && t < o->iters; ++t)
    cudaEventElapsedTime(&ms[t], ev[2 * t], ev[2 * t + 1]);
  mok_schedule_destroy(sch);
  mok_workspace_destroy(ws);
  return st;
}

int cli_tune_worker(const cli_options *o, mok_group *g, int rank, int n, const char *dir,
                    const mok_weights *wt, const mok_grads *gr, const void *x, const void *dy,
                    const float *rw, const int32_t *topk, void *y) {
  mok_plan plans[TUNE_MAX];
  int count = 0;
  mok_status st = mok_plan_candidates(&o->shape, &o->config, n, plans, TUNE_MAX, &count);
  if (st != MOK_SUCCESS) {
    fprintf(stderr, "mok tune rank %d: mok_plan_candidates: %s\n", rank, mok_status_string(st));
    return 1;
  }
  cudaStream_t q;
  if (cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking) != cudaSuccess) return 1;
  cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(2 * o->iters));
  float *ms = malloc(sizeof(float) * (size_t)o->iters);
  if (!ev || !ms) return 1;
  for (int i = 0; i < 2 * o->iters; ++i)
    if (cudaEventCreate(&ev[i]) != cudaSuccess) return 1;
  char path[300];
  snprintf(path, sizeof path, "%s/rank%d.res", dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f, "%d %d\n", count, o->iters);
  const double t0 = now_s();
  for (int c = 0; c < count; ++c) {
    mok_config cfg = o->config;
    cfg.plan = plans[c]; /* the whole plan pinned: the cache is not read */
    char text[512] = "";
    memset(ms, 0, sizeof(float) * (size_t)o->iters);
    st = time_plan(o, g, rank, &cfg, wt, gr, x, dy, rw, topk, y, q, ev, ms, text, sizeof text);
    if (!text[0]) mok_plan_format(&plans[c], text, sizeof text);
    fprintf(f, "%s\n%d", text, (int)st);
    for (int t = 0; t < o->iters; ++t) fprintf(f, " %.6f", ms[t]);
    fprintf(f, "\n");
    if (rank == 0) {
      double v[1024];
      const int k = o->iters < 1024 ? o->iters : 1024;
      for (int t = 0; t < k; ++t) v[t] = ms[t];
      fprintf(stderr, "mok tune: %2d/%d  %8.3f ms  %s%s  (%.1f s)\n", c + 1, count,
              st == MOK_SUCCESS ? cli_median(v, k) : 0.0, text,
              st == MOK_SUCCESS ? "" : " FAILED", now_s() - t0);
    }
  }
  fclose(f);
  for (int i = 0; i < 2 * o->iters; ++i) cudaEventDestroy(ev[i]);
  free(ev);
  free(ms);
  cudaStreamDestroy(q);
  return 0;
}

int cli_tune_report(const cli_options *o, int n, const char *dir, int ranks_failed) {
  int count = -1, iters = 0;
  char (*text)[512] = NULL;
  double *worst = NULL; /* [candidate][iter]: the slowest rank's step */
  int *failed = NULL;
  int bad = ranks_failed;
  for (int r = 0; r < n; ++r) {
    char path[300];
    snprintf(path, sizeof path, "%s/rank%d.res", dir, r);
    FILE *f = fopen(path, "r");
    if (!f) {
      fprintf(stderr, "mok tune: rank %d left no result\n", r);
      bad = 1;
      continue;
    }
    int c = 0, it = 0;
    if (fscanf(f, "%d %d\n", &c, &it) != 2 || c <= 0 || c > TUNE_MAX || it <= 0 ||
        (count >= 0 && (c != count || it != iters))) {
      fprintf(stderr, "mok tune: rank %d's result does not read\n", r);
      bad = 1;
      fclose(f);
      continue;
    }
    if (count < 0) {
      count = c;
      iters = it;
      text = calloc((size_t)count, sizeof *text);
      worst = calloc((size_t)(count * iters), sizeof(double));
      failed = calloc((size_t)count, sizeof(int));
      if (!text || !worst || !failed) return 1;
    }
    for (int k = 0; k < count; ++k) {
      char line[512];
      int st = 1;
      if (!fgets(line, sizeof line, f) || fscanf(f, "%d", &st) != 1) {
        failed[k] = 1;
        continue;
      }
      line[strcspn(line, "\n")] = '\0';
      if (r == 0) snprintf(text[k], sizeof text[k], "%s", line);
      else if (strcmp(text[k], line) != 0) failed[k] = 1; /* the ranks ran other plans */
      if (st != 0) failed[k] = 1;
      for (int t = 0; t < iters; ++t) {
        double v = 0;
        if (fscanf(f, "%lf", &v) != 1) failed[k] = 1;
        if (v > worst[k * iters + t]) worst[k * iters + t] = v;
      }
      int ch;
      while ((ch = fgetc(f)) != EOF && ch != '\n') {
      }
    }
    fclose(f);
    remove(path);
  }
  char idpath[300];
  snprintf(idpath, sizeof idpath, "%s/id", dir);
  remove(idpath);
  remove(dir);
  if (count <= 0) return 1;
  double *med = calloc((size_t)count, sizeof(double));
  if (!med) return 1;
  for (int k = 0; k < count; ++k) med[k] = cli_median(worst + k * iters, iters);
  if (failed[0]) {
    fprintf(stderr, "mok tune: the default plan failed to run; nothing stored\n");
    return 1;
  }
  int best = 0;
  for (int k = 1; k < count; ++k)
    if (!failed[k] && med[k] < med[best]) best = k;
  if (best != 0 && med[best] > med[0] * (1.0 - TUNE_MARGIN)) best = 0; /* within the noise */
  const mok_shape s = o->shape;
  printf("mok tune: %d GPU(s), T %lld/rank, H %lld, I %lld, E %lld, k %lld, Is %lld, %s, "
         "routing %s; %d warm-up + %d timed steps per plan, slowest rank, median\n",
         n, (long long)s.tokens, (long long)s.hidden, (long long)s.intermediate,
         (long long)s.num_experts, (long long)s.top_k, (long long)s.shared_intermediate,
         o->config.dtype == MOK_DTYPE_FP8_BLOCK128 ? "FP8" : "BF16",
         o->routing == CLI_ROUTING_ZIPF ? "zipf" : "uniform", o->warmup, iters);
  printf("  %3s %10s %8s  %s\n", "#", "fwd+bwd ms", "vs dflt", "plan");
  for (int k = 0; k < count; ++k) {
    if (failed[k])
      printf("  %3d %10s %8s  %s\n", k, "failed", "", text[k]);
    else
      printf("  %3d %10.3f %+7.1f%%  %s%s\n", k, med[k], 100.0 * (med[k] / med[0] - 1.0),
             text[k], k == best ? "   <- chosen" : k == 0 ? "   (default)" : "");
  }
  mok_plan chosen;
  memset(&chosen, 0, sizeof chosen);
  if (mok_plan_parse(text[best], &chosen) != MOK_SUCCESS) return 1;
  const char *path = o->config.plan_cache ? o->config.plan_cache : "";
  char key[1024];
  mok_status st = mok_plan_cache_key(&s, &o->config, n, key, sizeof key);
  if (st != MOK_SUCCESS) {
    fprintf(stderr, "mok tune: the plan cache's key: %s\n", mok_status_string(st));
    return 1;
  }
  if (!o->tune_save || !path[0]) {
    printf("  chosen: %s (not stored%s)\n", text[best], path[0] ? ": --save 0" : ": no plan cache");
  } else {
    st = mok_plan_cache_store(path, key, &chosen, med[best]);
    if (st != MOK_SUCCESS) {
      fprintf(stderr, "mok tune: storing into %s: %s\n", path, mok_status_string(st));
      return 1;
    }
    printf("  chosen: %s\n  stored in %s for: %s\n", text[best], path, key);
  }
  free(med);
  free(text);
  free(worst);
  free(failed);
  return bad;
}
