/* bench_grouped_gemm.cu — benchmark of the grouped GEMMs (kernels/gemm/gemm.h, gemm_fused.h) on
 * the issue's MoE shapes, uniform and Zipf-skewed row counts. Random data (never zeros), warm-up,
 * then CUDA-event timing of each launch; prints the median. TFLOP/s = 2 * real_rows * N * K /
 * time. Rows: each product with its default launch (the choices gemm_plan.h makes for the
 * capacity's rows per expert), then the kept alternatives through explicit launches (suffixes):
 * BF16 _c1 / _c2 (single CTAs, cluster pairs), the FP8 plain product on the 128-column kernel
 * _wg2 / _wg3 (consumer warpgroups; shapes whose columns do not split into 256), the FP8 MLP in
 * one launch and in two (fp8_mlp / fp8_mlp2), the FP8 weight gradient _pairs / _single. Writes
 * each shape's row counts to the file named by argv[1] (default gg_counts.txt) so that
 * bench/grouped_gemm_baseline.py times torch on exactly the same problems; argv[2]: iterations
 * (20). Environment: MOK_GG_BENCH_SHAPES, a substring filter on the shape names; MOK_GG_MAX_CTAS,
 * a cap on every persistent grid (the max_ctas of every row's launch: how a kernel scales with
 * the SMs it is given). */
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
#include "kernels/gemm/gemm_plan.h"
#include "kernels/pointwise/fp8_quant.h"

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

/* The launch of the row being timed: the row's choices, the cap of MOK_GG_MAX_CTAS. */
static int g_max_ctas = 0;
static mok_gg_launch g_launch = {0, 0, 0};
static const mok_gg_launch *launch_now(void) { return &g_launch; }
static void set_launch(int cluster, int warpgroups) {
  g_launch.cluster = cluster;
  g_launch.warpgroups = warpgroups;
  g_launch.max_ctas = g_max_ctas;
}

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
  return mok_gg_bf16_fwd(c->a, c->b, c->c, c->off, c->cnt, c->E, c->m_total, c->n, c->k,
                         launch_now(), 0);
}
static mok_status run_swiglu(void *p) {
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_gate_up_swiglu(c->a, c->b, c->b2, c->c, NULL, c->off, c->cnt, c->E,
                                    c->m_total, c->n / 2, c->k, 0, 0.f, launch_now(), 0);
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
                        c->k, launch_now(), 0);
}
static mok_status run_fp8_swiglu(void *p) {
  f8ctx_t *c = (f8ctx_t *)p;
  return mok_gg_fp8_gate_up_swiglu(c->qa, c->sa, c->qb, c->sb, c->qb2, c->sb2, c->c, NULL, c->off,
                                   c->cnt, c->E, c->m_total, c->n / 2, c->k, 0, 0.f, launch_now(),
                                   0);
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
  return mok_gg_fp8_mlp_forward(&a, launch_now(), 0);
}
static mok_status run_fp8_mlp2(void *p) {
  mlp_t *m = (mlp_t *)p;
  f8ctx_t *c = m->f;
  const int64_t inter = c->n / 2;
  mok_status st = mok_gg_fp8_gate_up_swiglu_quantized(
      c->qa, c->sa, c->qb, c->sb, c->qb2, c->sb2, m->pre, m->q_act, m->q_scales, c->off, c->cnt,
      c->E, c->m_total, inter, c->k, 0, 0.f, launch_now(), 0);
  if (st != MOK_SUCCESS) return st;
  return mok_gg_fp8_fwd(m->q_act, m->q_scales, c->qb, c->sb, m->out, c->off, c->cnt, c->E,
                        c->m_total, c->k, inter, launch_now(), 0);
}
static mok_status run_dgrad(void *p) { /* dA [M, k] = dC [M, n] x W [E, n, k] */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_dgrad(c->c, c->b, c->a, c->off, c->cnt, c->E, c->m_total, c->n, c->k,
                           launch_now(), 0);
}
static mok_status run_wgrad(void *p) { /* dW [E, n, k] fp32 = dC^T A */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_wgrad(c->c, c->a, c->w32, 1, 0, c->off, c->cnt, c->E, c->m_total, c->n,
                           c->k, launch_now(), 0);
}
static mok_status run_wgrad_bf16(void *p) { /* dW [E, n, k] bf16 (the layer's gradients) */
  ctx_t *c = (ctx_t *)p;
  return mok_gg_bf16_wgrad(c->c, c->a, c->w32, 0, 0, c->off, c->cnt, c->E, c->m_total, c->n,
                           c->k, launch_now(), 0);
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
  mok_status st = mok_fp8_quant_t(c->c, f->qc, f->sc, f->act_only ? NULL : f->amax, c->off,
                                  c->cnt, c->E, c->m_total, c->n, 0);
  if (st != MOK_SUCCESS) return st;
  return mok_fp8_quant_t(c->a, f->qa, f->sa, f->amax, c->off, c->cnt, c->E, c->m_total, c->k, 0);
}
static mok_status run_fp8_wgrad(void *p) {
  f8w_t *f = (f8w_t *)p;
  ctx_t *c = f->c;
  const int scales = !f->amax ? 0 : f->act_only ? 2 : 1;
  return mok_gg_fp8_wgrad(f->qc, f->sc, c->n, f->qa, f->sa, c->k, c->w32, 0, 0, scales, c->off,
                          c->cnt, c->E, c->m_total, c->n, c->k, launch_now(), 0);
}

/* Times f under the launch (cluster, warpgroups; the cap of MOK_GG_MAX_CTAS) and prints the row:
 * shape, name, ms, and TFLOP/s for flop (or GB/s for bytes when gbs). */
static double row(const char *shape, const char *name, launch_fn f, void *ctx, double work,
                  int iters, int cluster = 0, int warpgroups = 0, int warm = 3, int gbs = 0) {
  set_launch(cluster, warpgroups);
  const double ms = time_median_ms(f, ctx, warm, iters);
  if (gbs) printf("%-22s %-18s %10.3f %8.0f GB/s\n", shape, name, ms, work / ms * 1e-6);
  else printf("%-22s %-18s %10.3f %10.1f\n", shape, name, ms, work / ms * 1e-9);
  set_launch(0, 0);
  return ms;
}

int main(int argc, char **argv) {
  const char *counts_path = argc > 1 ? argv[1] : "gg_counts.txt";
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  const char *cap_env = getenv("MOK_GG_MAX_CTAS"); /* a cap on every persistent grid (0: none) */
  g_max_ctas = cap_env ? atoi(cap_env) : 0;
  if (g_max_ctas < 0) { fprintf(stderr, "MOK_GG_MAX_CTAS must be >= 0\n"); return 1; }
  set_launch(0, 0);
  FILE *cf = fopen(counts_path, "w");
  if (!cf) { perror(counts_path); return 1; }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs%s\n", prop.name, prop.multiProcessorCount,
         g_max_ctas ? ", grids capped (MOK_GG_MAX_CTAS)" : "");
  const shape shapes[] = {
      {"dsv3_ep8_gateup", 32, 1792, 0, 4096, 7168, 1, 1},
      {"dsv3_ep8_down", 32, 1792, 0, 7168, 2048, 0, 1},
      {"dsv3_ep2_gateup", 128, 448, 0, 4096, 7168, 1, 1},
      {"dsv3_ep2_down", 128, 448, 0, 7168, 2048, 0, 1},
      {"qwen3_gateup", 128, 256, 0, 1536, 2048, 1, 0},
      {"qwen3_down", 128, 256, 0, 2048, 768, 0, 0},
      {"dsv3_ep8_gateup_zipf", 32, 1792, 1, 4096, 7168, 1, 0},
      {"dsv3_ep8_down_zipf", 32, 1792, 1, 7168, 2048, 0, 0},
      {"qwen3_gateup_zipf", 128, 256, 1, 1536, 2048, 1, 0},
      {"qwen3_down_zipf", 128, 256, 1, 2048, 768, 0, 0},
      /* DeepSeek-V2-Lite's backward d_act (N = intermediate 1408, not in 256s): the FP8 plain
       * product on the 128-column kernel */
      {"dsv2lite_dact", 64, 384, 0, 1408, 2048, 0, 0},
  };
  printf("%-22s %-18s %10s %10s\n", "shape", "kernel", "ms", "TFLOP/s");
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
    if (s.gateup) { /* BF16 gate+up: default, single CTAs, cluster pairs */
      size_t nh = nb / 2;
      CK(cudaMalloc(&c.b, nh * 2));
      CK(cudaMalloc(&c.b2, nh * 2));
      fill(c.b, nh, 3, 0.05f);
      fill(c.b2, nh, 4, 0.05f);
      row(s.name, "swiglu", run_swiglu, &c, flop, iters);
      row(s.name, "swiglu_c1", run_swiglu, &c, flop, iters, 1);
      row(s.name, "swiglu_c2", run_swiglu, &c, flop, iters, 2);
      cudaFree(c.b2);
      c.b2 = NULL;
      cudaFree(c.b);
    }
    CK(cudaMalloc(&c.b, nb * 2));
    fill(c.b, nb, 5, 0.05f);
    row(s.name, "fwd", run_fwd, &c, flop, iters);
    row(s.name, "fwd_c1", run_fwd, &c, flop, iters, 1);
    row(s.name, "fwd_c2", run_fwd, &c, flop, iters, 2);
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
      if (s.gateup) row(s.name, "fp8_swiglu", run_fp8_swiglu, &f, flop, iters);
      row(s.name, "fp8_fwd", run_fp8_fwd, &f, flop, iters);
      if (!mok_gg_fp8_wide_covers(s.n)) { /* the 128-column kernel's consumer warpgroups */
        row(s.name, "fp8_fwd_wg2", run_fp8_fwd, &f, flop, iters, 0, 2);
        row(s.name, "fp8_fwd_wg3", run_fp8_fwd, &f, flop, iters, 0, 3);
      }
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
        for (int rep = 0; rep < 2; ++rep) {
          row(s.name, "fp8_mlp", run_fp8_mlp, &m, mflop, iters);
          row(s.name, "fp8_mlp2", run_fp8_mlp2, &m, mflop, iters);
        }
        int32_t err = 0;
        CK(cudaMemcpy(&err, m.err, 4, cudaMemcpyDeviceToHost));
        if (err) printf("%-22s fp8_mlp: error word %d\n", s.name, err);
        cudaFree(m.q_act); cudaFree(m.q_scales); cudaFree(m.pre); cudaFree(m.out);
        cudaFree(m.sync); cudaFree(m.err);
      }
      cudaFree(f.qa); cudaFree(f.sa); cudaFree(f.qb); cudaFree(f.sb);
    }
    if (s.backward) {
      /* dgrad of this layer: dC [M, n] x W [E, n, k] -> [M, k] */
      row(s.name, "dgrad", run_dgrad, &c, flop, iters, 0, 0, 2);
      row(s.name, "dgrad_c1", run_dgrad, &c, flop, iters, 1, 0, 2);
      row(s.name, "dgrad_c2", run_dgrad, &c, flop, iters, 2, 0, 2);
      CK(cudaMalloc(&c.w32, nb * 4));
      row(s.name, "wgrad_f32", run_wgrad, &c, flop, iters, 0, 0, 2);
      row(s.name, "wgrad_bf16", run_wgrad_bf16, &c, flop, iters, 0, 0, 2); /* TMA-store epilogue */
      f8w_t fw = {&c, NULL, NULL, NULL, NULL, NULL, 0};
      const int64_t mp = MOK_FP8_SCALE_ROWS(o);
      CK(cudaMalloc(&fw.qc, (size_t)s.n * mp));
      CK(cudaMalloc(&fw.qa, (size_t)s.k * mp));
      CK(cudaMalloc(&fw.sc, (size_t)(mp / 128) * s.n * 4));
      CK(cudaMalloc(&fw.sa, (size_t)(mp / 128) * s.k * 4));
      /* the quantizations' rate in GB/s of bf16 read + codes written (real rows) */
      const double qbytes = (double)o * (double)(s.n + s.k) * 3.0;
      row(s.name, "f8w_quant", run_fp8_wgrad_quant, &fw, qbytes, iters, 0, 0, 2, 1);
      row(s.name, "fp8_wgrad", run_fp8_wgrad, &fw, flop, iters, 0, 0, 2);
      /* one scale per expert and column: the quantization (amax, then codes), the GEMM */
      CK(cudaMalloc(&fw.amax, (size_t)c.E * (s.n > s.k ? s.n : s.k) * 4));
      row(s.name, "f8w_quantx", run_fp8_wgrad_quant, &fw, qbytes, iters, 0, 0, 2, 1);
      row(s.name, "fp8_wgradx", run_fp8_wgrad, &fw, flop, iters, 0, 0, 2);
      /* per-expert scales for the inputs only, the gradients' blocks rescaled (the layer's
       * default): the default launch, cluster pairs, single CTAs, the default again */
      fw.act_only = 1;
      row(s.name, "f8w_quanth", run_fp8_wgrad_quant, &fw, qbytes, iters, 0, 0, 2, 1);
      row(s.name, "fp8_wgradh", run_fp8_wgrad, &fw, flop, iters, 0, 0, 2);
      if (s.n % 256 == 0) row(s.name, "fp8_wgradh_pairs", run_fp8_wgrad, &fw, flop, iters, 2, 0, 2);
      row(s.name, "fp8_wgradh_single", run_fp8_wgrad, &fw, flop, iters, 1, 0, 2);
      row(s.name, "fp8_wgradh", run_fp8_wgrad, &fw, flop, iters, 0, 0, 2);
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
