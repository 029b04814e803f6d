/* bench_grouped_gemm.cu — benchmark of the BF16 grouped GEMMs (kernels/grouped_gemm.h) on the
 * issue's MoE shapes, uniform and Zipf-skewed row counts. Random data (never zeros), warm-up, then
 * CUDA-event timing of each launch; prints the median. TFLOP/s = 2 * real_rows * N * K / time.
 * Writes each shape's row counts to the file named by argv[1] (default gg_counts.txt) so that
 * bench/grouped_gemm_baseline.py times torch on exactly the same problems. Environment:
 * MOK_GG_CLUSTER (1 or 2) forces a cluster size, MOK_GG_FLAGS sets the tuning flags of the default
 * rows (e.g. for a profiler run of one variant), MOK_GG_MAX_CTAS caps the persistent kernels' grids
 * (mok_gg_set_max_ctas: how a kernel scales with the SMs it is given). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tmap.h"

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float f = ((float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    uint32_t u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    p[i] = (uint16_t)(u >> 16);
  }
}
static void fill(void *p, size_t n, uint64_t seed, float scale) {
  fill_bf16_kernel<<<1024, 256>>>((uint16_t *)p, n, seed, scale);
  CK(cudaGetLastError());
}

typedef struct {
  const char *name;
  int E, rows;   /* experts, rows per expert (uniform) or mean rows (zipf) */
  int zipf;      /* 0 uniform, 1 Zipf(1.0) counts with the same total      */
  int n, k;      /* GEMM N (for gate+up: 2 * I) and K                      */
  int gateup;    /* 1: fused SwiGLU gate+up (I = n / 2), 0: plain forward    */
  int backward;  /* 1: also time dgrad and wgrad on this shape             */
  int sweep;     /* bit 0: bf16 cluster / raster-group variants; bit 1: FP8 variants */
} shape;

static std::vector<int> make_counts(const shape &s) {
  std::vector<int> c(s.E, s.rows);
  if (s.zipf) {
    long total = (long)s.E * s.rows, used = 0;
    double w = 0;
    for (int e = 0; e < s.E; ++e) w += 1.0 / (e + 1);
    for (int e = 0; e < s.E; ++e) {
      c[e] = (int)floor(total * (1.0 / (e + 1)) / w);
      used += c[e];
    }
    c[0] += (int)(total - used);
  }
  return c;
}

typedef mok_status (*launch_fn)(void *ctx);
#if F8G_PROBE_TIMES
extern "C" void gg_fp8_wgrad_probe_dump(void); /* kernels/grouped_gemm_fp8_wgrad.cu */
#endif

static double time_median_ms(launch_fn f, void *ctx, int warm, int iters) {
  for (int i = 0; i < warm; ++i)
    if (f(ctx) != MOK_SUCCESS) { fprintf(stderr, "launch failed\n"); exit(1); }
  CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto &e : ev) CK(cudaEventCreate(&e));
  CK(cudaEventRecord(ev[0]));
  for (int i = 0; i < iters; ++i) {
    f(ctx);
    CK(cudaEventRecord(ev[i + 1]));
  }
  CK(cudaEventSynchronize(ev[iters]));
  CK(cudaGetLastError());
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
  for (auto &e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

typedef struct {
  void *a, *b, *b2, *c, *c2, *w32;
  int32_t *off, *cnt;
  int E;
  int64_t m_total, n, k;
} ctx_t;

static mok_status run_fwd(void *p) {
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_fwd(c->a, c->b, c->c, c->off, c->cnt, c->E, c->m_total, c->n, c->k, 0);
}
static mok_status run_swiglu(void *p) {
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_gate_up_swiglu(c->a, c->b, c->b2, c->c, NULL, c->off, c->cnt, c->E,
                                    c->m_total, c->n / 2, c->k, 0, 0.f, 0);
}
typedef struct {
  void *qa, *qb, *qb2;
  float *sa, *sb, *sb2;
  void *c;
  int32_t *off, *cnt;
  int E;
  int64_t m_total, n, k;
} f8ctx_t;
static mok_status run_fp8_fwd(void *p) {
  f8ctx_t *c = (f8ctx_t *)p;
  return mok_gg_fp8_fwd(c->qa, c->sa, c->qb, c->sb, c->c, c->off, c->cnt, c->E, c->m_total, c->n,
                        c->k, 0);
}
static mok_status run_fp8_swiglu(void *p) {
  f8ctx_t *c = (f8ctx_t *)p;
  return mok_gg_fp8_gate_up_swiglu(c->qa, c->sa, c->qb, c->sb, c->qb2, c->sb2, c->c, NULL, c->off,
                                   c->cnt, c->E, c->m_total, c->n / 2, c->k, 0, 0.f, 0);
}
/* The forward MLP of a gate+up shape (n = 2 inter, k = hidden): gate+up with the activations
 * quantized, then down (w_down [E, k, n / 2]: the first half of the same quantized bytes), in one
 * launch or two. */
typedef struct {
  f8ctx_t *f;
  void *q_act, *pre, *out;
  float *q_scales;
  int32_t *sync, *err;
} mlp_t;
static mok_status run_fp8_mlp(void *p) {
  mlp_t *m = (mlp_t *)p;
  f8ctx_t *c = m->f;
  mok_gg_fp8_mlp a = {};
  a.x = c->qa; a.x_scales = c->sa;
  a.w_gate = c->qb; a.w_gate_scales = c->sb; a.w_up = c->qb2; a.w_up_scales = c->sb2;
  a.w_down = c->qb; a.w_down_scales = c->sb;
  a.preact = m->pre; a.q_act = m->q_act; a.q_scales = m->q_scales; a.out = m->out;
  a.expert_offset = c->off; a.expert_count = c->cnt; a.num_experts = c->E;
  a.m_total = c->m_total; a.inter = c->n / 2; a.hidden = c->k;
  a.sync = m->sync; a.err = m->err; a.timeout_ns = 10000000000LL;
  return mok_gg_fp8_mlp_forward(&a, 0);
}
static mok_status run_fp8_mlp2(void *p) {
  mlp_t *m = (mlp_t *)p;
  f8ctx_t *c = m->f;
  const int64_t inter = c->n / 2;
  mok_status st = mok_gg_fp8_gate_up_swiglu_quantized(
      c->qa, c->sa, c->qb, c->sb, c->qb2, c->sb2, m->out, m->pre, m->q_act, m->q_scales, c->off,
      c->cnt, c->E, c->m_total, inter, c->k, 0, 0.f, 0);
  if (st != MOK_SUCCESS) return st;
  return mok_gg_fp8_fwd(m->q_act, m->q_scales, c->qb, c->sb, m->out, c->off, c->cnt, c->E,
                        c->m_total, c->k, inter, 0);
}
static mok_status run_dgrad(void *p) { /* dA [M, k] = dC [M, n] x W [E, n, k] */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_dgrad(c->c, c->b, c->a, c->off, c->cnt, c->E, c->m_total, c->n, c->k, 0);
}
static mok_status run_wgrad(void *p) { /* dW [E, n, k] fp32 = dC^T A */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_wgrad(c->c, c->a, c->w32, 1, 0, c->off, c->cnt, c->E, c->m_total, c->n,
                           c->k, 0);
}
static mok_status run_wgrad_bf16(void *p) { /* dW [E, n, k] bf16 (the layer's gradients) */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_wgrad(c->c, c->a, c->w32, 0, 0, c->off, c->cnt, c->E, c->m_total, c->n,
                           c->k, 0);
}
/* The FP8 weight gradient: dC and A quantized 1x128 along the tokens (transposed), then the
 * K-grouped FP8 GEMM into bf16 dW; timed with and without the two quantizations. */
typedef struct {
  ctx_t *c;
  void *qc, *qa;
  float *sc, *sa;
  float *amax; /* NULL: 1x128 blocks; else one scale per expert and column (its scratch) */
  int act_only; /* with amax: only the B operand (a, the inputs) per expert, c per 128 rows */
} f8w_t;
static mok_status run_fp8_wgrad_quant(void *p) {
  f8w_t *f = (f8w_t *)p;
  ctx_t *c = f->c;
  mok_status st = mok_fp8_quant_t(c->c, f->qc, f->sc, f->act_only ? NULL : f->amax,
                                        c->off, c->cnt, c->E, c->m_total, c->n, 0);
  if (st != MOK_SUCCESS) return st;
  return mok_fp8_quant_t(c->a, f->qa, f->sa, f->amax, c->off, c->cnt, c->E, c->m_total,
                               c->k, 0);
}
static mok_status run_fp8_wgrad(void *p) {
  f8w_t *f = (f8w_t *)p;
  ctx_t *c = f->c;
  const int scales = !f->amax ? 0 : f->act_only ? 2 : 1;
  return mok_gg_fp8_wgrad(f->qc, f->sc, c->n, f->qa, f->sa, c->k, c->w32, 0, 0, scales, c->off,
                          c->cnt, c->E, c->m_total, c->n, c->k, 0);
}

/* Cluster size x raster group variants of one kernel (printed as kernel/cC/gG); the default
 * is restored afterwards. */
static int base_flags; /* tuning flags of the default rows (MOK_GG_FLAGS) */

static void sweep(const char *name, const char *kern, launch_fn f, void *ctx, double flop, int iters) {
  const int groups[] = {4, 8, 16};
  for (int cl = 1; cl <= 2; ++cl)
    for (int g : groups) {
      gg_set_tuning(g, cl, 0, 0);
      double ms = time_median_ms(f, ctx, 2, iters);
      char label[32];
      snprintf(label, sizeof label, "%s/c%d/g%d", kern, cl, g);
      printf("  %-20s %-14s %8.3f %10.1f  grid %d\n", name, label, ms, flop / ms * 1e-9,
             gg_last_grid());
    }
  /* probes: clusters of 2 without multicast; a grid of one CTA per SM */
  const int probes[][2] = {{0, 1}, {132, 0}, {132, 1}};
  for (auto &pr : probes) {
    gg_set_tuning(0, 2, pr[0], pr[1]);
    double ms = time_median_ms(f, ctx, 2, iters);
    char label[40];
    snprintf(label, sizeof label, "%s/c2/grid%d/%s", kern, pr[0], pr[1] ? "nomc" : "mc");
    printf("  %-20s %-22s %8.3f %10.1f  grid %d\n", name, label, ms, flop / ms * 1e-9,
           gg_last_grid());
  }
  const char *cl_env = getenv("MOK_GG_CLUSTER");
  gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
}

int main(int argc, char **argv) {
  const char *counts_path = argc > 1 ? argv[1] : "gg_counts.txt";
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  const char *cl_env = getenv("MOK_GG_CLUSTER"); /* force a cluster size (1 or 2) */
  const char *fl_env = getenv("MOK_GG_FLAGS");    /* tuning flags for the default rows */
  const char *cap_env = getenv("MOK_GG_MAX_CTAS"); /* a cap on every persistent grid (0: none) */
  base_flags = fl_env ? atoi(fl_env) : 0;
  if (cap_env) mok_gg_set_max_ctas(atoi(cap_env));
  gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
  FILE *cf = fopen(counts_path, "w");
  if (!cf) { perror(counts_path); return 1; }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const shape shapes[] = {
      {"dsv3_ep8_gateup", 32, 1792, 0, 4096, 7168, 1, 1, 2},
      {"dsv3_ep8_down", 32, 1792, 0, 7168, 2048, 0, 1, 2},
      {"dsv3_ep2_gateup", 128, 448, 0, 4096, 7168, 1, 1, 0},
      {"dsv3_ep2_down", 128, 448, 0, 7168, 2048, 0, 1, 0},
      {"qwen3_gateup", 128, 256, 0, 1536, 2048, 1, 0, 2},
      {"qwen3_down", 128, 256, 0, 2048, 768, 0, 0, 0},
      {"dsv3_ep8_gateup_zipf", 32, 1792, 1, 4096, 7168, 1, 0, 0},
      {"dsv3_ep8_down_zipf", 32, 1792, 1, 7168, 2048, 0, 0, 0},
      {"qwen3_gateup_zipf", 128, 256, 1, 1536, 2048, 1, 0, 0},
      {"qwen3_down_zipf", 128, 256, 1, 2048, 768, 0, 0, 0},
  };
  printf("%-22s %-10s %10s %10s\n", "shape", "kernel", "ms", "TFLOP/s");
  const char *only = getenv("MOK_GG_BENCH_SHAPES"); /* a substring filter on the shape names */
  for (const shape &s : shapes) {
    if (only && !strstr(s.name, only)) continue;
    std::vector<int> cnt = make_counts(s);
    std::vector<int> off(s.E + 1);
    long real = 0;
    int o = 0;
    for (int e = 0; e < s.E; ++e) {
      off[e] = o;
      o += (cnt[e] + 127) / 128 * 128;
      real += cnt[e];
    }
    off[s.E] = o;
    fprintf(cf, "%s %d %d %d", s.name, s.n, s.k, s.E);
    for (int e = 0; e < s.E; ++e) fprintf(cf, " %d", cnt[e]);
    fprintf(cf, "\n");
    ctx_t c = {};
    c.E = s.E;
    c.m_total = o;
    c.n = s.n;
    c.k = s.k;
    size_t na = (size_t)o * s.k, nb = (size_t)s.E * s.n * s.k, nc = (size_t)o * s.n;
    CK(cudaMalloc(&c.a, na * 2));
    CK(cudaMalloc(&c.c, nc * 2));
    CK(cudaMalloc(&c.off, (s.E + 1) * 4));
    CK(cudaMalloc(&c.cnt, s.E * 4));
    CK(cudaMemcpy(c.off, off.data(), (s.E + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.cnt, cnt.data(), s.E * 4, cudaMemcpyHostToDevice));
    fill(c.a, na, 1, 1.0f);
    fill(c.c, nc, 2, 1.0f);
    const double flop = 2.0 * real * s.n * s.k;
    if (s.gateup) {
      size_t nh = nb / 2;
      CK(cudaMalloc(&c.b, nh * 2));
      CK(cudaMalloc(&c.b2, nh * 2));
      fill(c.b, nh, 3, 0.05f);
      fill(c.b2, nh, 4, 0.05f);
      double ms = time_median_ms(run_swiglu, &c, 3, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "swiglu", ms, flop / ms * 1e-9);
      if (s.sweep & 1) sweep(s.name, "swiglu", run_swiglu, &c, flop, iters);
      cudaFree(c.b2);
      c.b2 = NULL;
      cudaFree(c.b);
    }
    CK(cudaMalloc(&c.b, nb * 2));
    fill(c.b, nb, 5, 0.05f);
    {
      double ms = time_median_ms(run_fwd, &c, 3, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fwd", ms, flop / ms * 1e-9);
      if (s.sweep & 1) sweep(s.name, "fwd", run_fwd, &c, flop, iters);
      /* staggered consumer warpgroups (tuning flags 8 / 16: 2 / 3 k-blocks of head start) */
      const int st_flags[] = {8, 16};
      for (int fl : st_flags) {
        gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, fl);
        ms = time_median_ms(run_fwd, &c, 3, iters);
        printf("%-22s %-10s %10.3f %10.1f\n", s.name, fl == 8 ? "fwd_st2" : "fwd_st3", ms,
               flop / ms * 1e-9);
      }
      gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
    }
    {
      /* FP8 block-scaled: quantize A and B (bf16 -> e4m3 + scales) once, then time the GEMM */
      f8ctx_t f = {};
      f.E = s.E; f.m_total = o; f.n = s.n; f.k = s.k; f.off = c.off; f.cnt = c.cnt; f.c = c.c;
      CK(cudaMalloc(&f.qa, na));
      CK(cudaMalloc(&f.sa, (size_t)(s.k / 128) * MOK_FP8_SCALE_ROWS(o) * 4));
      CK(cudaMalloc(&f.qb, nb));
      CK(cudaMalloc(&f.sb, nb / (128 * 128) * 4 + 16));
      if (mok_fp8_quant_act(c.a, f.qa, f.sa, o, s.k, 0) != MOK_SUCCESS ||
          mok_fp8_quant_weight(c.b, f.qb, f.sb, s.E, s.n, s.k, 0) != MOK_SUCCESS) {
        fprintf(stderr, "fp8 quantization failed\n");
        exit(1);
      }
      /* gate+up: gate and up are taken as the two halves' worth of rows of the same quantized
       * [E, n, k] bytes (only the timing matters here) */
      f.qb2 = f.qb;
      f.sb2 = f.sb;
      if (s.gateup) {
        double ms = time_median_ms(run_fp8_swiglu, &f, 3, iters);
        printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_swiglu", ms, flop / ms * 1e-9);
      }
      double ms = time_median_ms(run_fp8_fwd, &f, 3, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_fwd", ms, flop / ms * 1e-9);
      if (s.gateup) { /* the forward MLP in one launch and in two, interleaved twice */
        mlp_t m = {&f, NULL, NULL, NULL, NULL, NULL, NULL};
        const int64_t inter = s.n / 2;
        CK(cudaMalloc(&m.q_act, (size_t)o * inter));
        CK(cudaMalloc(&m.q_scales, (size_t)(inter / 128) * MOK_FP8_SCALE_ROWS(o) * 4));
        CK(cudaMalloc(&m.pre, (size_t)o * s.n * 2));
        CK(cudaMalloc(&m.out, (size_t)o * s.k * 2));
        CK(cudaMalloc(&m.sync, mok_gg_fp8_mlp_sync_ints(o) * 4));
        CK(cudaMalloc(&m.err, 4));
        CK(cudaMemset(m.err, 0, 4));
        const double mflop = 1.5 * flop; /* gate+up 2 M n k, down 2 M k n / 2 */
        for (int rep = 0; rep < 2; ++rep) { /* one launch; down tiles early (4096); two */
          ms = time_median_ms(run_fp8_mlp, &m, 3, iters);
          printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_mlp", ms, mflop / ms * 1e-9);
          gg_set_tuning(0, 0, 0, base_flags | 4096);
          ms = time_median_ms(run_fp8_mlp, &m, 3, iters);
          printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_mlp_early", ms, mflop / ms * 1e-9);
          gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
          ms = time_median_ms(run_fp8_mlp2, &m, 3, iters);
          printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_mlp2", ms, mflop / ms * 1e-9);
        }
        int32_t err = 0;
        CK(cudaMemcpy(&err, m.err, 4, cudaMemcpyDeviceToHost));
        if (err) printf("%-22s fp8_mlp: error word %d\n", s.name, err);
        cudaFree(m.q_act); cudaFree(m.q_scales); cudaFree(m.pre); cudaFree(m.out);
        cudaFree(m.sync); cudaFree(m.err);
      }
      /* the 256-column kernel's warpgroups issuing as they come (flag 512), its outputs stored
       * from registers (flag 1024), then the default again: A, B, C, A in one process, so that
       * the card's state is shared */
      for (int rep = 0; rep < 3; ++rep) {
        const int fl[] = {512, 1024, 0};
        gg_set_tuning(0, 0, 0, base_flags | fl[rep]);
        const char *sfxs[] = {"_noturn", "_direct", "_again"}, *sfx = sfxs[rep];
        char nm[32];
        if (s.gateup) {
          ms = time_median_ms(run_fp8_swiglu, &f, 3, iters);
          snprintf(nm, sizeof nm, "fp8_swiglu%s", sfx);
          printf("%-22s %-10s %10.3f %10.1f\n", s.name, nm, ms, flop / ms * 1e-9);
        }
        ms = time_median_ms(run_fp8_fwd, &f, 3, iters);
        snprintf(nm, sizeof nm, "fp8_fwd%s", sfx);
        printf("%-22s %-10s %10.3f %10.1f\n", s.name, nm, ms, flop / ms * 1e-9);
      }
      gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
      if (s.sweep & 2) { /* FP8 variants: 32 / 16 = three / two warpgroups, 4 = clusters of 2,
                            64 = direct epilogue + a stage, 2 = two partials (two warpgroups),
                            128 = 256-column tiles with a rescaled accumulator */
        const int flags[] = {32, 36, 96, 16, 20, 80, 2, 6, 128, 132};
        const char *names[] = {"fp8/3wg/c1", "fp8/3wg/c2", "fp8/3wg/direct", "fp8/2wg/c1",
                               "fp8/2wg/c2", "fp8/2wg/direct", "fp8/2wg/db/c1", "fp8/2wg/db/c2",
                               "fp8/wide256", "fp8/wide256/c2"};
        for (int i = 0; i < (int)(sizeof flags / sizeof flags[0]); ++i) {
          gg_set_tuning(0, 0, 0, flags[i]);
          double m1 = time_median_ms(s.gateup ? run_fp8_swiglu : run_fp8_fwd, &f, 2, iters);
          printf("  %-20s %-14s %8.3f %10.1f\n", s.name, names[i], m1, flop / m1 * 1e-9);
        }
        const char *cl_env = getenv("MOK_GG_CLUSTER");
        gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
      }
      cudaFree(f.qa); cudaFree(f.sa); cudaFree(f.qb); cudaFree(f.sb);
    }
    if (s.backward) {
      /* dgrad of this layer: dC [M, n] x W [E, n, k] -> [M, k] */
      double ms = time_median_ms(run_dgrad, &c, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "dgrad", ms, flop / ms * 1e-9);
      CK(cudaMalloc(&c.w32, nb * 4));
      ms = time_median_ms(run_wgrad, &c, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "wgrad_f32", ms, flop / ms * 1e-9);
      /* bf16 out (TMA-store epilogue), and with the warpgroups staggered by 2 / 3 k-blocks */
      const int wflags[] = {0, 8, 16};
      const char *wname[] = {"wgrad_bf16", "wgrad_st2", "wgrad_st3"};
      for (int i = 0; i < 3; ++i) {
        gg_set_tuning(0, 0, 0, wflags[i]);
        ms = time_median_ms(run_wgrad_bf16, &c, 2, iters);
        printf("%-22s %-10s %10.3f %10.1f\n", s.name, wname[i], ms, flop / ms * 1e-9);
      }
      gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
      f8w_t fw = {&c, NULL, NULL, NULL, NULL, NULL, 0};
      const int64_t mp = MOK_FP8_SCALE_ROWS(o);
      CK(cudaMalloc(&fw.qc, (size_t)s.n * mp));
      CK(cudaMalloc(&fw.qa, (size_t)s.k * mp));
      CK(cudaMalloc(&fw.sc, (size_t)(mp / 128) * s.n * 4));
      CK(cudaMalloc(&fw.sa, (size_t)(mp / 128) * s.k * 4));
      /* the quantizations' rate in GB/s of bf16 read + codes written (real rows) */
      const double qbytes = (double)o * (double)(s.n + s.k) * 3.0;
      ms = time_median_ms(run_fp8_wgrad_quant, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %8.0f GB/s\n", s.name, "f8w_quant", ms, qbytes / ms * 1e-6);
      ms = time_median_ms(run_fp8_wgrad, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_wgrad", ms, flop / ms * 1e-9);
      /* one scale per expert and column: the quantization (amax, then codes), the GEMM */
      CK(cudaMalloc(&fw.amax, (size_t)c.E * (s.n > s.k ? s.n : s.k) * 4));
      ms = time_median_ms(run_fp8_wgrad_quant, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %8.0f GB/s\n", s.name, "f8w_quantx", ms, qbytes / ms * 1e-6);
      ms = time_median_ms(run_fp8_wgrad, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_wgradx", ms, flop / ms * 1e-9);
      /* per-expert scales for the inputs only, the gradients' blocks promoted */
      fw.act_only = 1;
      ms = time_median_ms(run_fp8_wgrad_quant, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %8.0f GB/s\n", s.name, "f8w_quanth", ms, qbytes / ms * 1e-6);
      ms = time_median_ms(run_fp8_wgrad, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_wgradh", ms, flop / ms * 1e-9);
#if F8G_PROBE_TIMES
      gg_fp8_wgrad_probe_dump(); /* the timing probe's record of that row's last launch */
#endif
      /* flag 16384: the same with each block's partial promoted; flag 512: rescaled without
       * turns; 131072: every token block whole (padding tokens too); 262144: B's column scales
       * from global memory; 524288: single CTAs, no B multicast; then the default again */
      const int hflags[] = {16384, 512, 131072, 262144, 131072 | 262144, 524288};
      const char *hname[] = {"fp8_wgradp", "fp8_wgradn", "fp8_wgradw", "fp8_wgradg", "fp8_wgradwg",
                             "fp8_wgrad1"};
      for (int i = 0; i < 6; ++i) {
        gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags | hflags[i]);
        ms = time_median_ms(run_fp8_wgrad, &fw, 2, iters);
        printf("%-22s %-10s %10.3f %10.1f\n", s.name, hname[i], ms, flop / ms * 1e-9);
      }
      gg_set_tuning(0, cl_env ? atoi(cl_env) : 0, 0, base_flags);
      ms = time_median_ms(run_fp8_wgrad, &fw, 2, iters);
      printf("%-22s %-10s %10.3f %10.1f\n", s.name, "fp8_wgradh", ms, flop / ms * 1e-9);
      cudaFree(fw.amax);
      cudaFree(fw.qc); cudaFree(fw.qa); cudaFree(fw.sc); cudaFree(fw.sa);
      cudaFree(c.w32);
    }
    fflush(stdout);
    cudaFree(c.a); cudaFree(c.b); cudaFree(c.c); cudaFree(c.off); cudaFree(c.cnt);
  }
  fclose(cf);
  return 0;
}
