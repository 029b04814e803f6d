/* run_cpu.c — `mok run` without a GPU: the reference layer over simulated ranks, forward and
 * backward, timed, with an output checksum and a sampled finite-difference check of the gradients. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "cli/cli.h"
#include "mok_reference.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_run_cpu(const cli_options *o) {
  const mok_shape *s = &o->shape;
  mok_route_kind kind = o->routing == CLI_ROUTING_ZIPF ? MOK_ROUTE_ZIPF : MOK_ROUTE_UNIFORM;
  printf("mok run: CPU reference path\n");
  printf("shape    T=%lld H=%lld E=%lld I=%lld k=%lld Is=%lld, %d simulated ranks, %s routing, seed %" PRIu64 "\n",
         (long long)s->tokens, (long long)s->hidden, (long long)s->num_experts,
         (long long)s->intermediate, (long long)s->top_k, (long long)s->shared_intermediate,
         o->ranks, mok_route_name(kind), o->seed);
  if (s->num_experts % o->ranks != 0) {
    fprintf(stderr, "mok: %lld experts do not split over %d ranks\n", (long long)s->num_experts, o->ranks);
    return 2;
  }
  /* the whole problem lives in host memory: say how much, and refuse what the machine lacks */
  const int64_t bytes = mok_ref_problem_bytes(s, o->ranks);
  const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  const double gflop = 2.0 * 3.0 * (double)s->tokens * (double)o->ranks *
                       ((double)s->top_k * (double)s->intermediate + (double)s->shared_intermediate) *
                       (double)s->hidden * 1e-9;
  char need[32];
  if (bytes < 0) snprintf(need, sizeof need, "more than 2^63 bytes");
  else snprintf(need, sizeof need, "%.2f GiB", (double)bytes / (1 << 30));
  printf("size     %s of host memory (this machine: %.1f GiB), %.1f GFLOP forward, about 3x "
         "that backward\n", need, phys / (1 << 30), gflop);
  if (bytes < 0 || (phys > 0 && (double)bytes > 0.9 * phys)) {
    fprintf(stderr, "mok: the CPU reference problem needs more host memory than this machine has; "
            "choose a smaller shape (--tokens, --hidden, --intermediate, --experts)\n");
    return 2;
  }
  mok_ref_problem p;
  mok_status st = mok_ref_problem_make(&p, s, o->ranks, kind, o->seed);
  if (st != MOK_SUCCESS) {
    fprintf(stderr, "mok: cannot make inputs: %s\n", mok_status_string(st));
    mok_ref_problem_free(&p);
    return 1;
  }
  p.cfg.use_swiglu_limit = o->config.use_swiglu_limit;
  p.cfg.swiglu_limit = o->config.swiglu_limit;
  p.cfg.round_bf16 = 1; /* the numerics the GPU path has */

  double t0 = now_s();
  st = mok_ref_forward(&p.cfg, p.ranks, p.y);
  double t_fwd = now_s() - t0;
  if (st == MOK_SUCCESS) {
    t0 = now_s();
    st = mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads);
  }
  double t_bwd = now_s() - t0;
  if (st != MOK_SUCCESS) {
    fprintf(stderr, "mok: reference failed: %s\n", mok_status_string(st));
    mok_ref_problem_free(&p);
    return 1;
  }
  double sum = 0, sum_abs = 0, dx_abs = 0;
  for (int r = 0; r < o->ranks; ++r)
    for (int64_t i = 0; i < s->tokens * s->hidden; ++i) {
      sum += p.y[r][i];
      sum_abs += p.y[r][i] < 0 ? -p.y[r][i] : p.y[r][i];
      dx_abs += p.grads[r].dx[i] < 0 ? -p.grads[r].dx[i] : p.grads[r].dx[i];
    }
  double flops = 6.0 * (double)(s->tokens * s->shared_intermediate + s->tokens * s->top_k * s->intermediate) *
                 (double)s->hidden * o->ranks;
  printf("forward  %8.3f s  %7.2f GFLOP/s (all ranks, one core)\n", t_fwd, flops / t_fwd * 1e-9);
  printf("backward %8.3f s  %7.2f GFLOP/s\n", t_bwd, 2 * flops / t_bwd * 1e-9);
  printf("checksum sum(y) = %.9e  sum|y| = %.9e  sum|dx| = %.9e\n", sum, sum_abs, dx_abs);

  /* finite differences on the first few tokens of every rank (same weights), exact math */
  mok_ref_config fd = p.cfg;
  fd.shape.tokens = s->tokens < 8 ? s->tokens : 8;
  const int samples = o->samples < 0 ? 16 : o->samples;
  double worst = 0;
  int64_t checked = 0;
  if (samples > 0 && fd.shape.tokens > 0) {
    t0 = now_s();
    st = mok_ref_gradient_check(&fd, p.ranks, (const float *const *)p.dy, samples, o->seed, &worst,
                                &checked);
    if (st != MOK_SUCCESS) {
      fprintf(stderr, "mok: gradient check failed to run: %s\n", mok_status_string(st));
      mok_ref_problem_free(&p);
      return 1;
    }
  }
  if (samples == 0) {
    printf("gradient check: none (--samples 0)\n");
    mok_ref_problem_free(&p);
    return 0;
  }
  /* a perturbation across the clamp's kink gives a one-sided difference: a looser bound there */
  double tol = o->config.use_swiglu_limit ? 1e-2 : 1e-3;
  int pass = worst < tol;
  printf("gradient worst error %.3g vs finite differences, %lld entries (first %lld tokens/rank), bound %.0e: %s\n",
         worst, (long long)checked, (long long)fd.shape.tokens, tol, pass ? "PASS" : "FAIL");
  mok_ref_problem_free(&p);
  return pass ? 0 : 1;
}
