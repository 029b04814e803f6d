/* run_gpu.c — `mok run` on GPUs: the launcher (one process per visible GPU: this program re-run
 * with MOK_RANK set) and the per-rank worker, which fills inputs and weights on the device from a
 * counter-based generator, times schedule build + forward and backward with CUDA events, and checks
 * a few sample tokens (y, dx, d_router_weights) against a host fp64 recomputation from the same
 * generator. The launcher combines the ranks' result files: TFLOP/s per GPU over the median across
 * iterations of the slowest rank's time. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "cli/cli.h"
#include "cli/random.h"
#include "mok.h"
#include "mok_reference.h"

#define SAMPLES 4       /* tokens checked per rank by default (FP8: 2; each token's experts are
                           quantized on the host, seconds per expert at the DeepSeek-V3 shape) */
/* The tokens per rank the sampled check takes: --samples, else the default above. */
static int sample_tokens(const cli_options *o, int fp8) {
  return o->samples >= 0 ? o->samples : fp8 ? 2 : SAMPLES;
}
#define CHECK_TOL 2e-2  /* relative error bound of the sampled check (the norm over all sampled
                           tokens' values of a tensor) */
/* FP8 mode's d_rw: the host recomputes in fp64 and quantizes its own activations, so an E4M3 code
 * that the GPU's slightly different pre-activation puts one step (6-12%) away moves the dot
 * product d_rw = d_act . act by ~2% of its size; measured at DeepSeek-V3 sizes 1.80e-2 (256
 * experts, fused and unfused d_rw alike) and 2.24e-2 (128 experts), y and dx 0.65-0.76e-2. */
#define CHECK_TOL_FP8_DRW 4e-2

enum { TX = 0, TDY = 1, TWG = 2, TWU = 3, TWD = 4, TSG = 5, TSU = 6, TSD = 7 };
static uint64_t stream_of(int rank, int tensor) { return (uint64_t)rank * 16 + (uint64_t)tensor; }

/* The layer's stages, run one by one through the ops layer (each peer stage includes its barriers),
 * so their times add up to a little more than the fused calls'. */
#define BD_STAGES 9
#define BD_ROWS BD_STAGES
static const char *bd_names[BD_STAGES] = {
    "schedule build", "dispatch (pull x)", "experts forward", "combine (push)", "combine reduce + shared",
    "reverse combine (pull dy)", "experts backward", "reverse dispatch (push)", "dx reduce + shared bwd"};
/* which stages move rows over NVLink, for the GB/s column */
static const int bd_moves[BD_STAGES] = {0, 1, 0, 1, 0, 1, 0, 1, 0};

/* ---------------------------------------------------------------- launcher -------------------- */

static char **self_argv(void) {
  static char buf[65536];
  static char *argv[512];
  FILE *f = fopen("/proc/self/cmdline", "rb");
  if (!f) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  int argc = 0;
  for (size_t i = 0; i < n && argc < 511; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
  argv[argc] = NULL;
  return argv;
}

double cli_median(double *v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

int cli_run_ranks(const cli_options *o, int n, char *dir, size_t size) {
  if (snprintf(dir, size, "/tmp/mok_run.XXXXXX") >= (int)size || !mkdtemp(dir)) {
    perror("mok: mkdtemp");
    return -1;
  }
  char **argv = self_argv();
  if (!argv) {
    fprintf(stderr, "mok: cannot read /proc/self/cmdline\n");
    return -1;
  }
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
  pid_t pids[64];
  fflush(stdout);
  for (int r = 0; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      char rs[16], ns[16];
      snprintf(rs, sizeof rs, "%d", r);
      snprintf(ns, sizeof ns, "%d", n);
      setenv("MOK_RANK", rs, 1);
      setenv("MOK_NRANKS", ns, 1);
      setenv("MOK_RUN_DIR", dir, 1);
      setenv("MOK_RUN_SEED", seed, 1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
      setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
      execv("/proc/self/exe", argv);
      perror("mok: execv");
      _exit(127);
    }
    pids[r] = p;
  }
  int bad = 0;
  for (int r = 0; r < n; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  return bad;
}

static int launch(const cli_options *o, int n) {
  const int fp8 = o->config.dtype == MOK_DTYPE_FP8_BLOCK128; /* no breakdown */
  char dir[64];
  int bad = cli_run_ranks(o, n, dir, sizeof dir);
  if (bad < 0) return 1;
  /* combine the result files */
  mok_shape s = o->shape;
  int iters = o->iters;
  double *fwd = calloc((size_t)iters, sizeof(double)), *bwd = calloc((size_t)iters, sizeof(double));
  double *tot = calloc((size_t)iters, sizeof(double)), *bld = calloc((size_t)iters, sizeof(double));
  double *fo = calloc((size_t)iters, sizeof(double));
  double *stage = calloc((size_t)(iters * BD_ROWS), sizeof(double)); /* [row][iter], slowest rank */
  double err[3] = {0, 0, 0};
  int dev_status = 0, have = 0;
  char kernels[512] = "?";
  long long rows_max = 0, ws_bytes = 0;
  for (int r = 0; r < n; ++r) {
    char path[300];
    snprintf(path, sizeof path, "%s/rank%d.res", dir, r);
    FILE *f = fopen(path, "r");
    if (!f) {
      fprintf(stderr, "mok: rank %d left no result\n", r);
      bad = 1;
      continue;
    }
    int st = 0;
    long long rows = 0, wb = 0;
    double e[3];
    char line[512];
    if (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = 0;
      if (r == 0) snprintf(kernels, sizeof kernels, "%s", line);
    }
    if (fscanf(f, "%d %lld %lld %lf %lf %lf", &st, &rows, &wb, &e[0], &e[1], &e[2]) == 6) {
      ++have;
      if (st) dev_status = st;
      if (rows > rows_max) rows_max = rows;
      ws_bytes = wb;
      for (int i = 0; i < 3; ++i)
        if (!(e[i] <= err[i])) err[i] = e[i]; /* NaN sticks */
      for (int i = 0; i < iters; ++i) {
        double bu = 0, a = 0, b = 0;
        if (fscanf(f, "%lf %lf %lf", &bu, &a, &b) != 3) break;
        if (bu > bld[i]) bld[i] = bu;
        if (a > fo[i]) fo[i] = a;
        if (bu + a > fwd[i]) fwd[i] = bu + a;
        if (b > bwd[i]) bwd[i] = b;
        if (bu + a + b > tot[i]) tot[i] = bu + a + b;
      }
      for (int i = 0; o->breakdown && !fp8 && i < iters; ++i)
        for (int j = 0; j < BD_ROWS; ++j) {
          double v = 0;
          if (fscanf(f, "%lf", &v) == 1 && v > stage[j * iters + i]) stage[j * iters + i] = v;
        }
    }
    fclose(f);
    remove(path);
  }
  remove(dir);
  double mf = cli_median(fwd, iters), mb = cli_median(bwd, iters), mt = cli_median(tot, iters);
  double mbld = cli_median(bld, iters), mfo = cli_median(fo, iters);
  double flop_f = 6.0 * ((double)s.tokens * s.shared_intermediate / s.intermediate +
                         (double)s.tokens * s.top_k) * s.hidden * s.intermediate;
  int check_ok = have == n && dev_status == 0 && err[0] < CHECK_TOL && err[1] < CHECK_TOL &&
                 err[2] < (fp8 ? CHECK_TOL_FP8_DRW : CHECK_TOL);
  printf("mok run: GPU path, %d GPU(s), one process each; plan %s\n", n, kernels);
  printf("  shape: T %lld/rank, H %lld, I %lld, E %lld, k %lld, Is %lld; routing %s; seed %llu\n",
         (long long)s.tokens, (long long)s.hidden, (long long)s.intermediate,
         (long long)s.num_experts, (long long)s.top_k, (long long)s.shared_intermediate,
         o->routing == CLI_ROUTING_ZIPF ? "zipf" : "uniform", (unsigned long long)o->seed);
  printf("  workspace + schedule %.2f GiB/rank, busiest rank's schedule rows %lld; %d warm-up + %d timed iterations\n",
         ws_bytes / 1073741824.0, rows_max, o->warmup, iters);
  if (o->workspace_tokens > s.tokens)
    printf("  workspace of %lld tokens/rank, steps of %lld (mok_schedule_set_tokens)\n",
           (long long)o->workspace_tokens, (long long)s.tokens);
  printf("  %-28s %10s %14s\n", "stage (slowest rank, median)", "ms", "TFLOP/s/GPU");
  if (o->build_in_forward) {
    printf("  %-28s %10s\n", "schedule build", "in forward");
  } else {
    printf("  %-28s %10.3f %13.1f%%\n", "schedule build (of fwd+bwd)", mbld,
           mt > 0 ? 100.0 * mbld / mt : 0.0);
    printf("  %-28s %10.3f %14.1f\n", "forward", mfo, mfo > 0 ? flop_f / (mfo * 1e9) : 0.0);
  }
  printf("  %-28s %10.3f %14.1f\n", "build + forward", mf, mf > 0 ? flop_f / (mf * 1e9) : 0.0);
  printf("  %-28s %10.3f %14.1f\n", "backward", mb, mb > 0 ? 2 * flop_f / (mb * 1e9) : 0.0);
  printf("  %-28s %10.3f %14.1f\n", "forward + backward", mt, mt > 0 ? 3 * flop_f / (mt * 1e9) : 0.0);
  if (sample_tokens(o, fp8) == 0)
    printf("  check: none (--samples 0); device status %d (%s): %s\n", dev_status,
           mok_status_string((mok_status)dev_status), check_ok ? "PASS" : "FAIL");
  else
    printf("  check, %d sample tokens/rank vs host fp64%s: y %.2e, dx %.2e, d_rw %.2e, device status %d (%s): %s\n",
           sample_tokens(o, fp8), fp8 ? " (FP8 mode)" : "", err[0], err[1], err[2], dev_status,
           mok_status_string((mok_status)dev_status), check_ok ? "PASS" : "FAIL");
  if (fp8) printf("  FP8 (block-128): no breakdown; TFLOP/s counted as for BF16\n");
  if (o->breakdown && !fp8) {
    /* bytes a rank moves per peer stage: its T*k token rows of H bf16 (on average over ranks) */
    double moved = (double)s.tokens * s.top_k * s.hidden * 2;
    double sum = 0, med[BD_ROWS];
    for (int j = 0; j < BD_ROWS; ++j) med[j] = cli_median(stage + j * iters, iters);
    for (int j = 0; j < BD_STAGES; ++j) sum += med[j];
    printf("  breakdown through the ops layer (each stage timed alone, slowest rank, median):\n");
    printf("  %-28s %10s %8s %12s\n", "stage", "ms", "share", "GB/s/rank");
    for (int j = 0; j < BD_STAGES; ++j) {
      printf("  %-28s %10.3f %7.1f%%", bd_names[j], med[j], sum > 0 ? 100 * med[j] / sum : 0.0);
      if (bd_moves[j] && med[j] > 0) printf(" %12.1f", moved / (med[j] * 1e6));
      printf("\n");
    }
    printf("  %-28s %10.3f   (GB/s: T*k rows of H bf16 per rank, local rows included, barriers included)\n",
           "sum of stages", sum);
    printf("  (the layer's own step pushes only other ranks' rows on the BF16 grouped path without a "
           "ring: the reduces read a rank's own rows in place)\n");
  }
  free(stage);
  free(fwd);
  free(bwd);
  free(tot);
  free(bld);
  free(fo);
  return bad || !check_ok;
}

/* ---------------------------------------------------------------- worker ---------------------- */

static float rv(uint64_t seed, int rank, int tensor, uint64_t i, float scale) {
  return mok_bf16_round(cli_random_value(seed, stream_of(rank, tensor), i, scale));
}

/* The generated weights of any expert, for the reference's spot check of one token. */
typedef struct {
  uint64_t seed;
  int64_t H, I, el;
  float sw, sd;
  int fp8; /* the weights as the FP8 path sees them: quantized in 128x128 blocks, dequantized */
} expert_gen;

/* One expert's [rows, cols] weight through the FP8 block quantization and back (host). */
static void fp8_roundtrip(float *w, int64_t rows, int64_t cols) {
  uint8_t *q = malloc((size_t)(rows * cols));
  float *sc = malloc(sizeof(float) * (size_t)(rows / 128 * (cols / 128) + 1));
  mok_fp8_quantize_weight_block128(w, 1, rows, cols, q, sc);
  mok_fp8_dequantize_weight_block128(q, sc, 1, rows, cols, w);
  free(q);
  free(sc);
}

static void fetch_generated(void *ctx, int e, float *wg, float *wu, float *wd) {
  const expert_gen *c = (const expert_gen *)ctx;
  const int owner = (int)(e / c->el);
  const int64_t l = e % c->el, n = c->I * c->H;
  for (int64_t i = 0; i < n; ++i) {
    wg[i] = rv(c->seed, owner, TWG, (uint64_t)(l * n + i), c->sw);
    wu[i] = rv(c->seed, owner, TWU, (uint64_t)(l * n + i), c->sw);
    wd[i] = rv(c->seed, owner, TWD, (uint64_t)(l * n + i), c->sd);
  }
  if (c->fp8) {
    fp8_roundtrip(wg, c->I, c->H);
    fp8_roundtrip(wu, c->I, c->H);
    fp8_roundtrip(wd, c->H, c->I);
  }
}

/* ||got - ref|| / ||ref||; NaN when got has a non-finite entry. */
/* Adds ||got - ref||^2 and ||ref||^2 over n values into acc[0], acc[1]; a non-finite value in got
 * makes acc[0] NaN (and it stays NaN). */
static void rel_add(double *acc, const float *ref, const float *got, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!isfinite(got[i])) acc[0] = NAN;
    acc[0] += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
    acc[1] += (double)ref[i] * ref[i];
  }
}

static double rel_of(const double *acc) { return acc[1] > 0 ? sqrt(acc[0] / acc[1]) : sqrt(acc[0]); }

static int exchange_id(mok_unique_id *id, int rank, const char *dir) {
  char path[300], tmp[310];
  snprintf(path, sizeof path, "%s/id", dir);
  snprintf(tmp, sizeof tmp, "%s/id.tmp", dir);
  if (rank == 0) {
    if (mok_get_unique_id(id) != MOK_SUCCESS) return -1;
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    size_t w = fwrite(id, sizeof *id, 1, f);
    fclose(f);
    return w == 1 ? rename(tmp, path) : -1;
  }
  for (int i = 0; i < 1200; ++i) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t r = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (r == 1) return 0;
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  fprintf(stderr, "mok rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_)); return 1; } } while (0)
#define MK(call) do { mok_status s_ = (call); if (s_ != MOK_SUCCESS) { \
  fprintf(stderr, "mok rank %d: %s: %s\n", rank, #call, mok_status_string(s_)); return 1; } } while (0)

/* ---------------------------------------------------------------- breakdown ------------------- */

static int time_stages(const cli_options *o, mok_group *g, mok_workspace *ws, mok_schedule *sch,
                       const mok_weights *wt,
                       const mok_grads *gr, const void *x, const void *dy, const float *rw,
                       const int32_t *topk, cudaStream_t q, float *ms) {
  const mok_shape s = o->shape;
  const int64_t T = s.tokens, H = s.hidden, k = s.top_k;
  int n = 1;
  mok_group_size(g, &n);
  int64_t cap = o->config.schedule_capacity;
  mok_plan plan;
  if (mok_workspace_plan(ws, &plan) != MOK_SUCCESS) return 1;
  if (cap == 0 && mok_schedule_worst_case_rows(&s, n, plan.tile_m, &cap) != MOK_SUCCESS) return 1;
  mok_sym_buffer xs, cb, dys, rws, parts;
  const int64_t pad = 256;
  if (mok_sym_alloc(g, (size_t)(T * H * 2 + pad), &xs) || mok_sym_alloc(g, (size_t)(T * k * H * 2 + pad), &cb) ||
      mok_sym_alloc(g, (size_t)(T * H * 2 + pad), &dys) || mok_sym_alloc(g, (size_t)(T * k * 4 + pad), &rws) ||
      mok_sym_alloc(g, (size_t)(T * k * H * 2 + pad), &parts))
    return 1;
  void *buf[4] = {NULL, NULL, NULL, NULL}; /* recv, out_rows, recv_dy, dx_rows */
  for (int i = 0; i < 4; ++i)
    if (cudaMalloc(&buf[i], (size_t)(cap * H * 2 + pad)) != cudaSuccess) return 1;
  if (cudaMemcpyAsync(xs.ptr, x, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, q) ||
      cudaMemcpyAsync(dys.ptr, dy, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice, q) ||
      cudaMemcpyAsync(rws.ptr, rw, (size_t)(T * k * 4), cudaMemcpyDeviceToDevice, q))
    return 1;
  cudaEvent_t ev[BD_STAGES + 1];
  for (int i = 0; i <= BD_STAGES; ++i)
    if (cudaEventCreate(&ev[i]) != cudaSuccess) return 1;
  for (int it = -o->warmup; it < o->iters; ++it) {
    mok_status st[BD_STAGES];
    cudaEventRecord(ev[0], q);
    st[0] = mok_schedule_build(sch, topk, q);
    cudaEventRecord(ev[1], q);
    st[1] = mok_op_dispatch(sch, &xs, buf[0], q);
    cudaEventRecord(ev[2], q);
    st[2] = mok_op_experts_forward(sch, wt, buf[0], buf[1], q);
    cudaEventRecord(ev[3], q);
    st[3] = mok_op_combine(sch, buf[1], &cb, q);
    cudaEventRecord(ev[4], q);
    st[4] = mok_op_combine_reduce(sch, wt, x, &cb, rw, buf[3] /* scratch y */, q);
    cudaEventRecord(ev[5], q);
    st[5] = mok_op_reverse_combine(sch, &dys, buf[2], q);
    cudaEventRecord(ev[6], q);
    st[6] = mok_op_experts_backward(sch, wt, buf[0], buf[2], &rws, buf[3], gr, q);
    cudaEventRecord(ev[7], q);
    st[7] = mok_op_reverse_dispatch(sch, buf[3], &parts, q);
    cudaEventRecord(ev[8], q);
    st[8] = mok_op_reverse_dispatch_reduce(sch, wt, x, dy, &parts, gr, q);
    cudaEventRecord(ev[9], q);
    for (int j = 0; j < BD_STAGES; ++j)
      if (st[j] != MOK_SUCCESS) {
        fprintf(stderr, "mok: breakdown stage '%s': %s\n", bd_names[j], mok_status_string(st[j]));
        return 1;
      }
    if (cudaEventSynchronize(ev[BD_STAGES]) != cudaSuccess) return 1;
    for (int j = 0; it >= 0 && j < BD_STAGES; ++j) cudaEventElapsedTime(&ms[it * BD_ROWS + j], ev[j], ev[j + 1]);
  }
  if (cudaStreamSynchronize(q) != cudaSuccess) return 1;
  for (int i = 0; i <= BD_STAGES; ++i) cudaEventDestroy(ev[i]);
  for (int i = 0; i < 4; ++i) cudaFree(buf[i]);
  mok_sym_buffer *bufs[5] = {&xs, &cb, &dys, &rws, &parts};
  for (int i = 0; i < 5; ++i) mok_sym_free(g, bufs[i]);
  return 0;
}

static int worker(const cli_options *o, int rank, int n, const char *dir) {
  const char *se = getenv("MOK_RUN_SEED");
  const uint64_t seed = se ? strtoull(se, NULL, 10) : o->seed;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(rank % ndev));
  mok_unique_id id;
  if (exchange_id(&id, rank, dir) != 0) {
    fprintf(stderr, "mok rank %d: no group id\n", rank);
    return 1;
  }
  mok_group *g = NULL;
  MK(mok_group_create(&id, n, rank, &g));
  const mok_shape s = o->shape;
  mok_config cfg = o->config;
  const int64_t T = s.tokens, H = s.hidden, I = s.intermediate, E = s.num_experts, k = s.top_k,
                Is = s.shared_intermediate, el = E / n;
  mok_workspace *ws = NULL;
  mok_schedule *sch = NULL;
  mok_shape ws_shape = s; /* --workspace-tokens: a larger workspace, steps of T tokens */
  if (o->workspace_tokens > T) ws_shape.tokens = o->workspace_tokens;
  if (!o->tune) { /* tuning makes a workspace per candidate plan */
    MK(mok_workspace_create(g, &ws_shape, &cfg, &ws));
    MK(mok_schedule_create(ws, &sch));
    MK(mok_schedule_set_tokens(sch, T));
  }

  const float sw = 3.0f / sqrtf((float)H), sd = 3.0f / sqrtf((float)I);
  const float ssd = Is ? 3.0f / sqrtf((float)Is) : 0.0f;
  void *x, *y, *dy, *dx, *w[6], *gw[6];
  float *rw, *drw;
  int32_t *topk;
  int64_t wn[6] = {el * I * H, el * I * H, el * H * I, Is * H, Is * H, H * Is};
  CK(cudaMalloc(&x, (size_t)(T * H * 2 + 16)));
  CK(cudaMalloc(&y, (size_t)(T * H * 2 + 16)));
  CK(cudaMalloc(&dy, (size_t)(T * H * 2 + 16)));
  CK(cudaMalloc(&dx, (size_t)(T * H * 2 + 16)));
  CK(cudaMalloc((void **)&rw, (size_t)(T * k * 4 + 16)));
  CK(cudaMalloc((void **)&drw, (size_t)(T * k * 4 + 16)));
  CK(cudaMalloc((void **)&topk, (size_t)(T * k * 4 + 16)));
  for (int i = 0; i < 6; ++i) {
    CK(cudaMalloc(&w[i], (size_t)(wn[i] * 2 + 16)));
    CK(cudaMalloc(&gw[i], (size_t)(wn[i] * 2 + 16)));
  }
  float scales[6] = {sw, sw, sd, sw, sw, ssd};
  int tensors[6] = {TWG, TWU, TWD, TSG, TSU, TSD};
  CK((cudaError_t)cli_fill_random_bf16(x, T * H, seed, stream_of(rank, TX), 1.0f, 0));
  CK((cudaError_t)cli_fill_random_bf16(dy, T * H, seed, stream_of(rank, TDY), 1.0f, 0));
  for (int i = 0; i < 6; ++i)
    CK((cudaError_t)cli_fill_random_bf16(w[i], wn[i], seed, stream_of(rank, tensors[i]), scales[i], 0));
  int32_t *h_topk = malloc((size_t)(T * k + 1) * 4);
  float *h_rw = malloc((size_t)(T * k + 1) * 4);
  mok_route_kind kind = o->routing == CLI_ROUTING_ZIPF ? MOK_ROUTE_ZIPF : MOK_ROUTE_UNIFORM;
  MK(mok_route_fill(kind, seed, rank, T, (int)k, (int)E, n, h_topk));
  mok_fill_router_weights(seed, 100 + (uint64_t)rank, h_rw, T, (int)k);
  CK(cudaMemcpy(topk, h_topk, (size_t)(T * k) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(rw, h_rw, (size_t)(T * k) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(y, 0xFF, (size_t)(T * H * 2)));
  CK(cudaMemset(dx, 0xFF, (size_t)(T * H * 2)));
  CK(cudaMemset(drw, 0xFF, (size_t)(T * k * 4)));
  CK(cudaDeviceSynchronize());

  mok_weights wt = {w[0], w[1], w[2], NULL, NULL, NULL, Is ? w[3] : NULL, Is ? w[4] : NULL,
                    Is ? w[5] : NULL, NULL, NULL, NULL, NULL};
  const int fp8 = cfg.dtype == MOK_DTYPE_FP8_BLOCK128;
  void *q8[5] = {NULL, NULL, NULL, NULL, NULL};
  void *s8[5] = {NULL, NULL, NULL, NULL, NULL};
  if (fp8) { /* E4M3 routed weights and their 128x128 scales, made by the library */
    const int64_t r3[3] = {I, I, H}, c3[3] = {H, H, I};
    for (int i = 0; i < 3; ++i) {
      int64_t ns = 0;
      MK(mok_fp8_scale_count(MOK_DTYPE_FP8_BLOCK128, el, r3[i], c3[i], &ns));
      CK(cudaMalloc(&q8[i], (size_t)(wn[i] + 16)));
      CK(cudaMalloc(&s8[i], (size_t)(ns * 4 + 16)));
      MK(mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, w[i], el, r3[i], c3[i], q8[i], s8[i], 0));
    }
    wt.w_gate = q8[0]; wt.w_up = q8[1]; wt.w_down = q8[2];
    wt.w_gate_scale = s8[0]; wt.w_up_scale = s8[1]; wt.w_down_scale = s8[2];
    /* the backward's transposed copies: gate | up [el, H, 2I], down [el, I, H] */
    CK(cudaMalloc(&q8[3], (size_t)(2 * wn[0] + 16)));
    CK(cudaMalloc(&s8[3], (size_t)(el * (H / 128) * (2 * I / 128) * 4 + 16)));
    CK(cudaMalloc(&q8[4], (size_t)(wn[2] + 16)));
    CK(cudaMalloc(&s8[4], (size_t)(el * (I / 128) * (H / 128) * 4 + 16)));
    MK(mok_fp8_transpose_weights(MOK_DTYPE_FP8_BLOCK128, &wt, el, I, H, q8[3], s8[3], q8[4], s8[4], 0));
    CK(cudaDeviceSynchronize());
    wt.w_gate_up_t = q8[3]; wt.w_gate_up_t_scale = s8[3];
    wt.w_down_t = q8[4]; wt.w_down_t_scale = s8[4];
  }
  mok_grads gr = {dx, drw, gw[0], gw[1], gw[2], gw[3], gw[4], gw[5], 0, 0};
  if (o->tune) {
    const int rc = cli_tune_worker(o, g, rank, n, dir, &wt, &gr, x, dy, rw, topk, y);
    mok_group_destroy(g);
    return rc;
  }
  cudaStream_t q;
  CK(cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking));
  const int iters = o->iters;
  cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)(4 * iters));
  for (int i = 0; i < 4 * iters; ++i) CK(cudaEventCreate(&ev[i]));
  for (int i = 0; i < o->warmup + iters; ++i) {
    int t = i - o->warmup;
    if (t >= 0) CK(cudaEventRecord(ev[4 * t], q));
    if (!o->build_in_forward) MK(mok_schedule_build(sch, topk, q));
    if (t >= 0) CK(cudaEventRecord(ev[4 * t + 1], q));
    if (o->build_in_forward) MK(mok_build_and_forward(sch, topk, &wt, x, rw, y, q));
    else MK(mok_forward(sch, &wt, x, rw, y, q));
    if (t >= 0) CK(cudaEventRecord(ev[4 * t + 2], q));
    MK(mok_backward(sch, &wt, x, rw, dy, &gr, q));
    if (t >= 0) CK(cudaEventRecord(ev[4 * t + 3], q));
  }
  CK(cudaStreamSynchronize(q));
  mok_status dev = MOK_SUCCESS;
  MK(mok_workspace_error(ws, &dev));
  int64_t rows = 0, wbytes = 0;
  MK(mok_schedule_rows(sch, &rows));
  MK(mok_workspace_bytes(ws, &wbytes));
  int64_t sbytes = 0;
  MK(mok_schedule_bytes(sch, &sbytes));
  wbytes += sbytes; /* what the layer holds: the workspace and the schedule (with its ring) */

  /* sampled check: a few tokens against the CPU reference, from only the weights they use */
  expert_gen gen = {seed, H, I, el, sw, sd, fp8};
  mok_ref_config rc = {.shape = s, .ep = 1, .use_swiglu_limit = cfg.use_swiglu_limit,
                       .swiglu_limit = cfg.swiglu_limit, .round_bf16 = 1, .fp8_block128 = fp8,
                       .fp8_wgrad = fp8 ? cfg.fp8_weight_grads : 0,
                       .fp8_fused_drw = fp8 && cfg.fp8_fused_router_grad,
                       .fp8_shared = fp8 && cfg.fp8_shared_expert};
  float *sgw = malloc((size_t)(Is * H + 1) * 4), *suw = malloc((size_t)(Is * H + 1) * 4);
  float *sdw = malloc((size_t)(Is * H + 1) * 4);
  for (int64_t i = 0; i < Is * H; ++i) {
    sgw[i] = rv(seed, rank, TSG, (uint64_t)i, sw);
    suw[i] = rv(seed, rank, TSU, (uint64_t)i, sw);
    sdw[i] = rv(seed, rank, TSD, (uint64_t)i, ssd);
  }
  if (rc.fp8_shared && Is > 0) { /* the values the layer's quantization of them gives */
    fp8_roundtrip(sgw, Is, H);
    fp8_roundtrip(suw, Is, H);
    fp8_roundtrip(sdw, H, Is);
  }
  float *xv = malloc((size_t)H * 4), *dyv = malloc((size_t)H * 4), *got = malloc((size_t)H * 4);
  float *yr = malloc((size_t)H * 4), *dxr = malloc((size_t)H * 4);
  float *drr = malloc((size_t)k * 4), *gd = malloc((size_t)k * 4);
  uint16_t *b = malloc((size_t)H * 2);
  double acc[3][2] = {{0, 0}, {0, 0}, {0, 0}}; /* y, dx, d_rw over all sampled tokens */
  const int samples = sample_tokens(o, fp8);
  for (int sidx = 0; sidx < samples && T > 0; ++sidx) {
    int64_t t = (T - 1) * (sidx + 1) / (samples + 1);
    for (int64_t h = 0; h < H; ++h) {
      xv[h] = rv(seed, rank, TX, (uint64_t)(t * H + h), 1.0f);
      dyv[h] = rv(seed, rank, TDY, (uint64_t)(t * H + h), 1.0f);
    }
    MK(mok_ref_token(&rc, xv, h_topk + t * k, h_rw + t * k, dyv, fetch_generated, &gen,
                     Is ? sgw : NULL, Is ? suw : NULL, Is ? sdw : NULL, yr, dxr, drr));
    CK(cudaMemcpy(b, (char *)y + t * H * 2, (size_t)H * 2, cudaMemcpyDeviceToHost));
    mok_bf16_to_float_array(b, got, H);
    rel_add(acc[0], yr, got, H);
    CK(cudaMemcpy(b, (char *)dx + t * H * 2, (size_t)H * 2, cudaMemcpyDeviceToHost));
    mok_bf16_to_float_array(b, got, H);
    rel_add(acc[1], dxr, got, H);
    CK(cudaMemcpy(gd, drw + t * k, (size_t)k * 4, cudaMemcpyDeviceToHost));
    rel_add(acc[2], drr, gd, k);
  }
  const double err[3] = {rel_of(acc[0]), rel_of(acc[1]), rel_of(acc[2])};
  free(sgw);
  free(suw);
  free(sdw);
  free(xv);
  free(dyv);
  free(got);
  free(yr);
  free(dxr);
  free(drr);
  free(gd);
  free(b);

  for (int i = 0; i < 5; ++i) {
    cudaFree(q8[i]);
    cudaFree(s8[i]);
  }
  float *stage_ms = NULL;
  if (o->breakdown && !fp8) {
    stage_ms = calloc((size_t)(iters * BD_ROWS), sizeof(float));
    if (!stage_ms || time_stages(o, g, ws, sch, &wt, &gr, x, dy, rw, topk, q, stage_ms) != 0) {
      fprintf(stderr, "mok rank %d: breakdown failed\n", rank);
      return 1;
    }
  }

  char path[300];
  snprintf(path, sizeof path, "%s/rank%d.res", dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  int tuned = 0;
  MK(mok_workspace_plan_tuned(ws, &tuned));
  fprintf(f, "%s%s\n", mok_workspace_kernels(ws), /* the plan the library resolved, in words */
          tuned ? " (tuned: from the plan cache)" : "");
  fprintf(f, "%d %lld %lld %.6e %.6e %.6e\n", (int)dev, (long long)rows, (long long)wbytes, err[0],
          err[1], err[2]);
  for (int i = 0; i < iters; ++i) {
    float a = 0, b1 = 0, b2 = 0;
    cudaEventElapsedTime(&a, ev[4 * i], ev[4 * i + 1]);
    cudaEventElapsedTime(&b1, ev[4 * i + 1], ev[4 * i + 2]);
    cudaEventElapsedTime(&b2, ev[4 * i + 2], ev[4 * i + 3]);
    fprintf(f, "%.6f %.6f %.6f\n", a, b1, b2);
  }
  for (int i = 0; stage_ms && i < iters; ++i)
    for (int j = 0; j < BD_ROWS; ++j) fprintf(f, "%.6f%c", stage_ms[i * BD_ROWS + j], j + 1 < BD_ROWS ? ' ' : '\n');
  free(stage_ms);
  fclose(f);
  mok_schedule_destroy(sch);
  mok_workspace_destroy(ws);
  mok_group_destroy(g);
  return 0;
}

int cli_run_gpu(const cli_options *o) {
  const char *rank = getenv("MOK_RANK"), *dir = getenv("MOK_RUN_DIR");
  if (rank && dir) return worker(o, atoi(rank), atoi(getenv("MOK_NRANKS") ? getenv("MOK_NRANKS") : "1"), dir);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    fprintf(stderr, "mok: no GPU visible\n");
    return 1;
  }
  if (n > 64) n = 64;
  if (o->tune) {
    char dir[64];
    const int bad = cli_run_ranks(o, n, dir, sizeof dir);
    if (bad < 0) return 1;
    return cli_tune_report(o, n, dir, bad);
  }
  return launch(o, n);
}
