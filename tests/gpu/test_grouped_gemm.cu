/* test_grouped_gemm.cu — GPU tests of the grouped GEMMs (kernels/gemm/gemm.h, gemm_fused.h) and
 * the FP8 quantizers (kernels/pointwise/fp8_quant.h) against a CPU reference (fp64 accumulation
 * of the same inputs), on fresh random data every run: odd row counts, empty experts, padding
 * rows filled with NaN, outputs poisoned with NaN first. Pass: ||out - ref|| / ||ref|| < 1e-2
 * over real rows, no NaN there, and (wgrad) bitwise equal results on a second run. Each kept
 * alternative of a call (BF16 cluster sizes, the FP8 128-column kernel's consumer warpgroups, the
 * FP8 weight gradient's cluster pairs, the one-launch MLP, a grid cap) runs through an explicit
 * mok_gg_launch, against the reference and bit for bit against the other choices. The cases are
 * exported as gg_test_cases for the GPU test runner; the weak main() below runs them alone
 * (make gg-test). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "tests/gpu/internal.h"
extern "C" {
#include "tests/test_runner.h"
#include "tests/test_util.h"
}

/* This file's own generator (splitmix64), seeded from the run's printed seed. */
typedef struct { uint64_t s; } gg_rng;
static uint64_t gg_next(gg_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double gg_uniform(gg_rng *r) { return (gg_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static int gg_below(gg_rng *r, int n) { return (int)(gg_next(r) % (uint64_t)n); }

#define CUDA_OK(x)                                                                        \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      ++mok_test_failures;                                                                \
      fprintf(stderr, "  CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
              __LINE__, #x);                                                              \
      return;                                                                             \
    }                                                                                     \
  } while (0)

static const uint16_t BF16_NAN = 0x7FC1;

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7FC0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A grouped problem's row layout: counts (some zero, some odd), offsets padded to 128. */
typedef struct {
  int E;
  std::vector<int32_t> count, offset;
  int64_t m_total;
} gg_rows;

/* E experts' layout to fill (count[e], offset[e]), closed by rows_close at the rows used */
static gg_rows rows_open(int E) {
  gg_rows g;
  g.E = E;
  g.count.resize(E);
  g.offset.resize(E + 1);
  return g;
}

static void rows_close(gg_rows &g, int32_t used) {
  g.offset[g.E] = used;
  g.m_total = used + 128; /* capacity beyond the used rows */
}

static gg_rows make_rows(gg_rng *r, int E, int max_rows, int extra_pad_tiles) {
  gg_rows g = rows_open(E);
  int32_t off = 0;
  for (int e = 0; e < E; ++e) {
    int c;
    int kind = gg_below(r, 6);
    if (kind == 0) c = 0;
    else if (kind == 1) c = 1 + gg_below(r, 3);
    else c = 1 + gg_below(r, max_rows);
    if (e == 1) c = 0;                       /* always one empty expert */
    if (e == 2) c = 127 + gg_below(r, 3);  /* around a tile edge     */
    if (e == 3 && max_rows >= 512) c = 385 + gg_below(r, 128); /* seven or eight 64-row blocks */
    g.count[e] = c;
    g.offset[e] = off;
    off += (c + 127) / 128 * 128 + 128 * gg_below(r, extra_pad_tiles + 1);
  }
  rows_close(g, off);
  return g;
}

static void fill_bf16(gg_rng *r, std::vector<uint16_t> &v, float scale) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = f2bf((float)(2.0 * gg_uniform(r) - 1.0) * scale);
}

/* Fill padding rows (not real rows of any expert) of a [m_total, cols] tensor with NaN. */
static void nan_padding(const gg_rows &g, std::vector<uint16_t> &v, int64_t cols) {
  std::vector<char> real(g.m_total, 0);
  for (int e = 0; e < g.E; ++e)
    for (int i = 0; i < g.count[e]; ++i) real[g.offset[e] + i] = 1;
  for (int64_t row = 0; row < g.m_total; ++row)
    if (!real[row])
      for (int64_t c = 0; c < cols; ++c) v[row * cols + c] = BF16_NAN;
}

/* Zero each expert's tail (its rows past the count up to the next 16, below m_total) of a
 * [m_total, cols] tensor: the weight gradient reads them as the layer leaves them (tail_rows.h);
 * the other padding rows keep their NaN. */
static void zero_tails(const gg_rows &g, std::vector<uint16_t> &v, int64_t cols) {
  for (int e = 0; e < g.E; ++e)
    for (int64_t row = g.offset[e] + g.count[e];
         row < g.offset[e] + (g.count[e] + 15) / 16 * 16 && row < g.m_total; ++row)
      for (int64_t c = 0; c < cols; ++c) v[row * cols + c] = 0;
}

template <typename T> static T *to_dev(const std::vector<T> &h) {
  T *d = NULL;
  if (cudaMalloc(&d, h.size() * sizeof(T) + 16) != cudaSuccess) return NULL;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename T> static std::vector<T> from_dev(const T *d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

/* Relative error accumulator. */
typedef struct {
  double num, den;
  long nan;
} relerr;
static void rel_add(relerr *r, double got, double want) {
  if (isnan(got) || isinf(got)) { r->nan++; return; }
  r->num += (got - want) * (got - want);
  r->den += want * want;
}
static void rel_check(const char *what, relerr r) {
  double e = r.den > 0 ? sqrt(r.num / r.den) : sqrt(r.num);
  printf("    %-28s rel err %.3e  nan %ld\n", what, e, r.nan);
  CHECK(r.nan == 0);
  CHECK(e < 1e-2);
}

/* Rows of expert e checked against the reference: all, or a sample for big experts. */
static std::vector<int> check_rows(gg_rng *r, int count, int max_checked) {
  std::vector<int> rows;
  if (count <= max_checked) {
    for (int i = 0; i < count; ++i) rows.push_back(i);
  } else {
    rows.push_back(0);
    rows.push_back(count - 1);
    for (int i = 2; i < max_checked; ++i) rows.push_back(gg_below(r, count));
  }
  return rows;
}

static double dot_bf16(const uint16_t *a, const uint16_t *b, int64_t k) {
  double s = 0;
  for (int64_t i = 0; i < k; ++i) s += (double)bf2f(a[i]) * (double)bf2f(b[i]);
  return s;
}

/* A launch's label in the printed lines: "default" for NULL. */
static const char *launch_name(const mok_gg_launch *l, char *buf, size_t n) {
  if (!l) return "default";
  snprintf(buf, n, "cluster %d warpgroups %d max_ctas %d", l->cluster, l->warpgroups, l->max_ctas);
  return buf;
}

/* Real rows of a [m_total, cols] bf16 output that differ between two runs (bit for bit). */
static int64_t rows_differ(const gg_rows &g, const std::vector<uint16_t> &x,
                           const std::vector<uint16_t> &y, int64_t cols) {
  int64_t bad = 0;
  for (int e = 0; e < g.E; ++e)
    for (int i = 0; i < g.count[e]; ++i) {
      const int64_t row = g.offset[e] + i;
      bad += memcmp(&x[row * cols], &y[row * cols], cols * 2) != 0;
    }
  return bad;
}

/* ---- forward: C = A W[e]^T ------------------------------------------------------------- */
static void run_fwd(int E, int max_rows, int64_t n, int64_t k, int max_checked,
                    const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed()};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  std::vector<uint16_t> a(g.m_total * k), w((size_t)E * n * k), c(g.m_total * n, BF16_NAN);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, w, 1.0f);
  nan_padding(g, a, k);
  uint16_t *da = to_dev(a), *dw = to_dev(w), *dc = to_dev(c);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK(da && dw && dc && doff && dcnt);
  if (!(da && dw && dc && doff && dcnt)) return;
  CHECK_STATUS(mok_gg_bf16_fwd(da, dw, dc, doff, dcnt, E, g.m_total, n, k, launch, 0),
               MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  c = from_dev(dc, c.size());
  relerr re = {0, 0, 0};
  for (int e = 0; e < E; ++e) {
    std::vector<int> rows = check_rows(&r, g.count[e], max_checked);
    for (int i : rows) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < n; ++j)
        rel_add(&re, bf2f(c[row * n + j]), dot_bf16(&a[row * k], &w[((size_t)e * n + j) * k], k));
    }
  }
  char what[64], ln[64];
  snprintf(what, sizeof what, "fwd E%d n%ld k%ld", E, (long)n, (long)k);
  printf("    %s\n", launch_name(launch, ln, sizeof ln));
  rel_check(what, re);
  cudaFree(da); cudaFree(dw); cudaFree(dc); cudaFree(doff); cudaFree(dcnt);
}

/* ---- forward gate+up with SwiGLU --------------------------------------------------------- */
static void run_swiglu(int E, int max_rows, int64_t inter, int64_t hidden, int use_limit,
                       int want_preact, int max_checked, const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed() ^ 0x5151};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  std::vector<uint16_t> x(g.m_total * hidden), wg((size_t)E * inter * hidden),
      wu((size_t)E * inter * hidden), act(g.m_total * inter, BF16_NAN),
      pre(g.m_total * 2 * inter, BF16_NAN);
  fill_bf16(&r, x, 1.0f);
  fill_bf16(&r, wg, 0.2f);
  fill_bf16(&r, wu, 0.2f);
  nan_padding(g, x, hidden);
  const float L = 1.5f;
  uint16_t *dx = to_dev(x), *dg = to_dev(wg), *du = to_dev(wu), *dact = to_dev(act),
           *dpre = want_preact ? to_dev(pre) : NULL;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK(dx && dg && du && dact && doff && dcnt);
  if (!(dx && dg && du && dact && doff && dcnt)) return;
  CHECK_STATUS(mok_gg_bf16_gate_up_swiglu(dx, dg, du, dact, dpre, doff, dcnt, E, g.m_total, inter,
                                          hidden, use_limit, L, launch, 0),
               MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  act = from_dev(dact, act.size());
  if (want_preact) pre = from_dev(dpre, pre.size());
  relerr ra = {0, 0, 0}, rp = {0, 0, 0};
  for (int e = 0; e < E; ++e) {
    std::vector<int> rows = check_rows(&r, g.count[e], max_checked);
    for (int i : rows) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < inter; ++j) {
        double gv = dot_bf16(&x[row * hidden], &wg[((size_t)e * inter + j) * hidden], hidden);
        double uv = dot_bf16(&x[row * hidden], &wu[((size_t)e * inter + j) * hidden], hidden);
        if (want_preact) {
          rel_add(&rp, bf2f(pre[row * 2 * inter + j]), gv);
          rel_add(&rp, bf2f(pre[row * 2 * inter + inter + j]), uv);
        }
        double gg = gv, uu = uv;
        if (use_limit) {
          gg = gg < L ? gg : L;
          uu = uu < -L ? -L : (uu > L ? L : uu);
        }
        rel_add(&ra, bf2f(act[row * inter + j]), gg / (1.0 + exp(-gg)) * uu);
      }
    }
  }
  char what[64], ln[64];
  snprintf(what, sizeof what, "swiglu%s E%d I%ld H%ld", use_limit ? "+limit" : "", E, (long)inter,
           (long)hidden);
  printf("    %s\n", launch_name(launch, ln, sizeof ln));
  rel_check(what, ra);
  if (want_preact) rel_check("  preact g,u", rp);
  cudaFree(dx); cudaFree(dg); cudaFree(du); cudaFree(dact); cudaFree(dpre);
  cudaFree(doff); cudaFree(dcnt);
}

/* ---- dgrad: dA = dC W[e] ---------------------------------------------------------------- */
/* pair != 0: the reduction runs over two weights [E, n/2, k] (mok_gg_bf16_dgrad_pair), the first
 * for dC's columns [0, n/2), the second for [n/2, n). */
static void run_dgrad(int E, int max_rows, int64_t n, int64_t k, int max_checked, int pair = 0,
                      const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed() ^ 0xd9d9};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  const int64_t nh = n / 2;
  std::vector<uint16_t> dcv(g.m_total * n), w((size_t)E * n * k), dav(g.m_total * k, BF16_NAN);
  fill_bf16(&r, dcv, 1.0f);
  fill_bf16(&r, w, 1.0f);
  nan_padding(g, dcv, n);
  /* pair: w holds W0 [E, n/2, k] then W1 [E, n/2, k] */
  uint16_t *ddc = to_dev(dcv), *dw = to_dev(w), *dda = to_dev(dav);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK(ddc && dw && dda && doff && dcnt);
  if (!(ddc && dw && dda && doff && dcnt)) return;
  if (pair)
    CHECK_STATUS(mok_gg_bf16_dgrad_pair(ddc, dw, dw + (size_t)E * nh * k, dda, doff, dcnt, E,
                                        g.m_total, nh, k, launch, 0), MOK_SUCCESS);
  else
    CHECK_STATUS(mok_gg_bf16_dgrad(ddc, dw, dda, doff, dcnt, E, g.m_total, n, k, launch, 0),
                 MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  dav = from_dev(dda, dav.size());
  relerr re = {0, 0, 0};
  for (int e = 0; e < E; ++e) {
    std::vector<int> rows = check_rows(&r, g.count[e], max_checked);
    for (int i : rows) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < k; ++j) {
        double s = 0;
        for (int64_t q = 0; q < n; ++q) {
          const size_t wi = !pair ? ((size_t)e * n + q) * k + j
                            : q < nh ? ((size_t)e * nh + q) * k + j
                                     : (size_t)E * nh * k + ((size_t)e * nh + q - nh) * k + j;
          s += (double)bf2f(dcv[row * n + q]) * (double)bf2f(w[wi]);
        }
        rel_add(&re, bf2f(dav[row * k + j]), s);
      }
    }
  }
  char what[64], ln[64];
  snprintf(what, sizeof what, "dgrad%s E%d n%ld k%ld", pair ? " pair" : "", E, (long)n, (long)k);
  printf("    %s\n", launch_name(launch, ln, sizeof ln));
  rel_check(what, re);
  cudaFree(ddc); cudaFree(dw); cudaFree(dda); cudaFree(doff); cudaFree(dcnt);
}

/* ---- wgrad: dW[e] = dC_e^T A_e ---------------------------------------------------------- */
/* Padding rows hold NaN that must not be read, but for each expert's tail, zero (gemm.h).
 * strided != 0: dC is the right half of a [m_total, 2n] matrix and A has 64 columns of slack per
 * row (mok_gg_bf16_wgrad_ld), both bordered with NaN that must not be read. The second run (the
 * determinism check) takes the launch second (a grid cap): its bits must equal the first's. */
static void run_wgrad(int E, int max_rows, int64_t n, int64_t k, int out_fp32, int accumulate,
                      int strided = 0, int skip = 0, const mok_gg_launch *second = NULL) {
  gg_rng r = {test_seed() ^ 0x3a3a};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  std::vector<uint16_t> dcv(g.m_total * n), a(g.m_total * k);
  fill_bf16(&r, dcv, 1.0f);
  fill_bf16(&r, a, 1.0f);
  nan_padding(g, dcv, n);
  nan_padding(g, a, k);
  zero_tails(g, dcv, n);
  zero_tails(g, a, k);
  const int64_t ld_dc = strided ? 2 * n : n, ld_a = strided ? k + 64 : k;
  std::vector<uint16_t> dc_wide(g.m_total * ld_dc, BF16_NAN), a_wide(g.m_total * ld_a, BF16_NAN);
  for (int64_t row = 0; row < g.m_total; ++row) {
    memcpy(&dc_wide[row * ld_dc + (ld_dc - n)], &dcv[row * n], n * 2);
    memcpy(&a_wide[row * ld_a], &a[row * k], k * 2);
  }
  size_t nw = (size_t)E * n * k;
  std::vector<float> init(nw);
  for (size_t i = 0; i < nw; ++i) init[i] = accumulate ? (float)(2 * gg_uniform(&r) - 1) : NAN;
  std::vector<uint16_t> init16(nw, BF16_NAN);
  uint16_t *ddc_wide = to_dev(dc_wide), *da = to_dev(a_wide);
  uint16_t *ddc = ddc_wide ? ddc_wide + (ld_dc - n) : NULL;
  void *dw = out_fp32 ? (void *)to_dev(init) : (void *)to_dev(init16);
  /* skip: every third expert at count -1 (outside a ring view): its dW must keep its bits */
  std::vector<int32_t> cnt_dev(g.count);
  for (int e = 1; skip && e < E; e += 3) cnt_dev[e] = -1;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(cnt_dev);
  CHECK(ddc && da && dw && doff && dcnt);
  if (!(ddc && da && dw && doff && dcnt)) return;
  CHECK_STATUS(mok_gg_bf16_wgrad_ld(ddc, ld_dc, da, ld_a, dw, out_fp32, accumulate, doff, dcnt, E,
                                    g.m_total, n, k, NULL, 0), MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got(nw);
  std::vector<uint8_t> raw1(nw * (out_fp32 ? 4 : 2));
  cudaMemcpy(raw1.data(), dw, raw1.size(), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < nw; ++i)
    got[i] = out_fp32 ? ((float *)raw1.data())[i] : bf2f(((uint16_t *)raw1.data())[i]);
  /* Reference over the real rows only (padding rows hold NaN on both operands). */
  relerr re = {0, 0, 0};
  std::vector<double> acc(k);
  int kept = 1;
  for (int e = 0; e < E; ++e) {
    if (cnt_dev[e] < 0) { /* left alone: the initial bits */
      const size_t b = out_fp32 ? 4 : 2, o = (size_t)e * n * k * b;
      kept &= memcmp(raw1.data() + o, out_fp32 ? (const void *)((const char *)init.data() + o)
                                               : (const void *)((const char *)init16.data() + o),
                     (size_t)n * k * b) == 0;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int rr = 0; rr < g.count[e]; ++rr) {
        int64_t row = g.offset[e] + rr;
        double dv = bf2f(dcv[row * n + i]);
        const uint16_t *ar = &a[row * k];
        for (int64_t j = 0; j < k; ++j) acc[j] += dv * bf2f(ar[j]);
      }
      for (int64_t j = 0; j < k; ++j) {
        size_t idx = ((size_t)e * n + i) * k + j;
        rel_add(&re, got[idx], acc[j] + (accumulate ? init[idx] : 0.0));
      }
    }
  }
  char what[64];
  snprintf(what, sizeof what, "wgrad %s%s%s%s E%d n%ld k%ld", out_fp32 ? "fp32" : "bf16",
           accumulate ? "+acc" : "", strided ? " strided" : "", skip ? " skip" : "", E, (long)n,
           (long)k);
  rel_check(what, re);
  CHECK(kept);
  /* Determinism: a second run (with the second launch if given) gives the same bits. */
  if (out_fp32) CUDA_OK(cudaMemcpy(dw, init.data(), nw * 4, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemcpy(dw, init16.data(), nw * 2, cudaMemcpyHostToDevice));
  CHECK_STATUS(mok_gg_bf16_wgrad_ld(ddc, ld_dc, da, ld_a, dw, out_fp32, accumulate, doff, dcnt, E,
                                    g.m_total, n, k, second, 0), MOK_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> raw2(raw1.size());
  cudaMemcpy(raw2.data(), dw, raw2.size(), cudaMemcpyDeviceToHost);
  CHECK(memcmp(raw1.data(), raw2.data(), raw1.size()) == 0);
  cudaFree(ddc_wide); cudaFree(da); cudaFree(dw); cudaFree(doff); cudaFree(dcnt);
}

/* ---- FP8 block-scaled ------------------------------------------------------------------- */
static double e4m3_to_d(uint8_t b) {
  int sgn = b >> 7, ex = (b >> 3) & 15, man = b & 7;
  double v;
  if (ex == 15 && man == 7) return NAN;
  if (ex == 0) v = man / 8.0 * ldexp(1.0, -6);
  else v = (1.0 + man / 8.0) * ldexp(1.0, ex - 7);
  return sgn ? -v : v;
}

/* Quantizes x [rows, k] (activation) on the GPU; returns the dequantized values (host) and
 * checks the scales against amax / 448 on real rows. */
static std::vector<double> quant_act(const gg_rows &g, const std::vector<uint16_t> &x, int64_t k,
                                     uint8_t **dq, float **ds) {
  const int64_t m = g.m_total, mp = MOK_FP8_SCALE_ROWS(m), kbs = k / 128;
  uint16_t *dx = to_dev(x);
  cudaMalloc((void **)dq, m * k + 16);
  cudaMalloc((void **)ds, kbs * mp * 4 + 16);
  CHECK_STATUS(mok_fp8_quant_act(dx, *dq, *ds, m, k, 0), MOK_SUCCESS);
  cudaDeviceSynchronize();
  std::vector<uint8_t> q = from_dev(*dq, m * k);
  std::vector<float> sc = from_dev(*ds, kbs * mp);
  std::vector<double> out(m * k);
  relerr rq = {0, 0, 0};
  long bad_scale = 0;
  for (int e = 0; e < g.E; ++e)
    for (int i = 0; i < g.count[e]; ++i) {
      int64_t row = g.offset[e] + i;
      for (int64_t kb = 0; kb < kbs; ++kb) {
        double amax = 0;
        for (int j = 0; j < 128; ++j) amax = fmax(amax, fabs(bf2f(x[row * k + kb * 128 + j])));
        float want = amax > 0 ? (float)(amax / 448.0) : 1.0f;
        if (fabs(sc[kb * mp + row] - want) > 1e-6 * want) ++bad_scale;
        for (int j = 0; j < 128; ++j) {
          int64_t idx = row * k + kb * 128 + j;
          out[idx] = e4m3_to_d(q[idx]) * sc[kb * mp + row];
          rel_add(&rq, out[idx], bf2f(x[idx]));
        }
      }
    }
  CHECK(bad_scale == 0);
  double e = sqrt(rq.num / rq.den);
  printf("    fp8 act quantization rel err %.3e\n", e);
  CHECK(rq.nan == 0 && e < 0.06);
  cudaFree(dx);
  return out;
}

static std::vector<double> quant_weight(const std::vector<uint16_t> &w, int64_t E, int64_t n,
                                        int64_t k, uint8_t **dq, float **ds) {
  uint16_t *dw = to_dev(w);
  const int64_t nsc = E * (n / 128) * (k / 128);
  cudaMalloc((void **)dq, E * n * k + 16);
  cudaMalloc((void **)ds, nsc * 4 + 16);
  CHECK_STATUS(mok_fp8_quant_weight(dw, *dq, *ds, E, n, k, 0), MOK_SUCCESS);
  cudaDeviceSynchronize();
  std::vector<uint8_t> q = from_dev(*dq, E * n * k);
  std::vector<float> sc = from_dev(*ds, nsc);
  std::vector<double> out(E * n * k);
  relerr rq = {0, 0, 0};
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        int64_t idx = (e * n + r) * k + c;
        out[idx] = e4m3_to_d(q[idx]) * sc[(e * (n / 128) + r / 128) * (k / 128) + c / 128];
        rel_add(&rq, out[idx], bf2f(w[idx]));
      }
  double e = sqrt(rq.num / rq.den);
  printf("    fp8 weight quantization rel err %.3e\n", e);
  CHECK(rq.nan == 0 && e < 0.06);
  cudaFree(dw);
  return out;
}

/* An expert MLP's random operands, quantized on the device: x [m_total, hidden] (1x128 scales),
 * gate and up [E, inter, hidden], with_down: down [E, hidden, inter] (128x128 scales; else NULL). */
typedef struct {
  uint8_t *qx, *qg, *qu, *qd;
  float *sx, *sg, *su, *sd;
} fp8_mlp_ops;

static fp8_mlp_ops make_fp8_mlp(gg_rng *r, const gg_rows &g, int E, int64_t inter,
                                int64_t hidden, bool with_down) {
  fp8_mlp_ops o = {};
  std::vector<uint16_t> x(g.m_total * hidden), wg((size_t)E * inter * hidden),
      wu((size_t)E * inter * hidden), wd(with_down ? (size_t)E * hidden * inter : 0);
  fill_bf16(r, x, 1.0f);
  fill_bf16(r, wg, 0.2f);
  fill_bf16(r, wu, 0.2f);
  if (with_down) fill_bf16(r, wd, 0.2f);
  quant_act(g, x, hidden, &o.qx, &o.sx);
  quant_weight(wg, E, inter, hidden, &o.qg, &o.sg);
  quant_weight(wu, E, inter, hidden, &o.qu, &o.su);
  if (with_down) quant_weight(wd, E, hidden, inter, &o.qd, &o.sd);
  return o;
}

static void free_fp8_mlp(fp8_mlp_ops *o) {
  cudaFree(o->qx); cudaFree(o->qg); cudaFree(o->qu); cudaFree(o->qd);
  cudaFree(o->sx); cudaFree(o->sg); cudaFree(o->su); cudaFree(o->sd);
}

/* tiny: every other row of expert 0 gets one 128-block 1e20 times smaller than the rest, and its
 * last row is 1e25 times smaller throughout (checked on its own, relative to its own size). */
static void run_fp8_fwd_rows(gg_rng &r, const gg_rows &g, int64_t n, int64_t k, int max_checked,
                             bool tiny = false, const mok_gg_launch *launch = NULL) {
  const int E = g.E;
  std::vector<uint16_t> a(g.m_total * k), w((size_t)E * n * k), c(g.m_total * n, BF16_NAN);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, w, 1.0f);
  const int64_t tiny_row = tiny && g.count[0] > 0 ? g.offset[0] + g.count[0] - 1 : -1;
  if (tiny) {
    for (int i = 0; i + 1 < g.count[0]; i += 2) {
      const int64_t blk = (i / 2) % (k / 128);
      for (int64_t q = 0; q < 128; ++q) {
        uint16_t &v = a[(g.offset[0] + i) * k + blk * 128 + q];
        v = f2bf(bf2f(v) * 1e-20f);
      }
    }
    for (int64_t q = 0; tiny_row >= 0 && q < k; ++q)
      a[tiny_row * k + q] = f2bf(bf2f(a[tiny_row * k + q]) * 1e-25f);
  }
  nan_padding(g, a, k);
  uint8_t *qa, *qw;
  float *sa, *sw;
  std::vector<double> ad = quant_act(g, a, k, &qa, &sa);
  std::vector<double> wd = quant_weight(w, E, n, k, &qw, &sw);
  uint16_t *dc = to_dev(c);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK_STATUS(mok_gg_fp8_fwd(qa, sa, qw, sw, dc, doff, dcnt, E, g.m_total, n, k, launch, 0),
               MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  c = from_dev(dc, c.size());
  relerr re = {0, 0, 0}, rb = {0, 0, 0}, rt = {0, 0, 0};
  for (int e = 0; e < E; ++e) {
    std::vector<int> rows = check_rows(&r, g.count[e], max_checked);
    if (e == 0 && tiny_row >= 0) rows.push_back(g.count[0] - 1);
    for (int i : rows) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        const double *ar = &ad[row * k], *wr = &wd[((size_t)e * n + j) * k];
        for (int64_t q = 0; q < k; ++q) s += ar[q] * wr[q];
        if (row == tiny_row) {
          rel_add(&rt, bf2f(c[row * n + j]), s);
          continue;
        }
        rel_add(&re, bf2f(c[row * n + j]), s);
        rel_add(&rb, bf2f(c[row * n + j]), dot_bf16(&a[row * k], &w[((size_t)e * n + j) * k], k));
      }
    }
  }
  char what[64], ln[64];
  printf("    %s\n", launch_name(launch, ln, sizeof ln));
  if (tiny_row >= 0) rel_check("  fp8 fwd, the 1e-25 row", rt);
  snprintf(what, sizeof what, "fp8 fwd E%d n%ld k%ld", E, (long)n, (long)k);
  rel_check(what, re);
  double eb = sqrt(rb.num / rb.den);
  printf("    %-28s rel err %.3e (vs the bf16 GEMM)\n", "  fp8 fwd", eb);
  CHECK(eb < 0.06);
  cudaFree(qa); cudaFree(qw); cudaFree(sa); cudaFree(sw); cudaFree(dc); cudaFree(doff); cudaFree(dcnt);
}
static void run_fp8_fwd(int E, int max_rows, int64_t n, int64_t k, int max_checked,
                        const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed() ^ 0xf8f8};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  run_fp8_fwd_rows(r, g, n, k, max_checked, false, launch);
}

static void run_fp8_swiglu(int E, int max_rows, int64_t inter, int64_t hidden, int use_limit,
                           int want_preact, int max_checked, const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed() ^ 0xf85a};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  std::vector<uint16_t> x(g.m_total * hidden), wg((size_t)E * inter * hidden),
      wu((size_t)E * inter * hidden), act(g.m_total * inter, BF16_NAN),
      pre(g.m_total * 2 * inter, BF16_NAN);
  fill_bf16(&r, x, 1.0f);
  fill_bf16(&r, wg, 0.2f);
  fill_bf16(&r, wu, 0.2f);
  nan_padding(g, x, hidden);
  const float L = 1.5f;
  uint8_t *qx, *qg, *qu;
  float *sx, *sg, *su;
  std::vector<double> xd = quant_act(g, x, hidden, &qx, &sx);
  std::vector<double> gd = quant_weight(wg, E, inter, hidden, &qg, &sg);
  std::vector<double> ud = quant_weight(wu, E, inter, hidden, &qu, &su);
  uint16_t *dact = to_dev(act), *dpre = want_preact ? to_dev(pre) : NULL;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK_STATUS(mok_gg_fp8_gate_up_swiglu(qx, sx, qg, sg, qu, su, dact, dpre, doff, dcnt, E,
                                         g.m_total, inter, hidden, use_limit, L, launch, 0),
               MOK_SUCCESS);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  act = from_dev(dact, act.size());
  if (want_preact) pre = from_dev(dpre, pre.size());
  relerr ra = {0, 0, 0}, rp = {0, 0, 0};
  for (int e = 0; e < E; ++e) {
    std::vector<int> rows = check_rows(&r, g.count[e], max_checked);
    for (int i : rows) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < inter; ++j) {
        double gv = 0, uv = 0;
        const double *xr = &xd[row * hidden];
        const double *gr = &gd[((size_t)e * inter + j) * hidden], *ur = &ud[((size_t)e * inter + j) * hidden];
        for (int64_t q = 0; q < hidden; ++q) {
          gv += xr[q] * gr[q];
          uv += xr[q] * ur[q];
        }
        if (want_preact) {
          rel_add(&rp, bf2f(pre[row * 2 * inter + j]), gv);
          rel_add(&rp, bf2f(pre[row * 2 * inter + inter + j]), uv);
        }
        if (use_limit) {
          gv = gv < L ? gv : L;
          uv = uv < -L ? -L : (uv > L ? L : uv);
        }
        rel_add(&ra, bf2f(act[row * inter + j]), gv / (1.0 + exp(-gv)) * uv);
      }
    }
  }
  char what[64], ln[64];
  printf("    %s\n", launch_name(launch, ln, sizeof ln));
  snprintf(what, sizeof what, "fp8 swiglu%s E%d I%ld H%ld", use_limit ? "+limit" : "", E,
           (long)inter, (long)hidden);
  rel_check(what, ra);
  if (want_preact) rel_check("  preact g,u", rp);
  cudaFree(qx); cudaFree(qg); cudaFree(qu); cudaFree(sx); cudaFree(sg); cudaFree(su);
  cudaFree(dact); cudaFree(dpre); cudaFree(doff); cudaFree(dcnt);
}

/* n 384: the 128-column kernel (the columns do not split into 256), default warpgroups */
static void test_gg_fp8_fwd_small(void) { run_fp8_fwd(6, 300, 384, 384, 1000); }
static void test_gg_fp8_fwd_many_tiles(void) { run_fp8_fwd(9, 1500, 1024, 1024, 24); }
/* K of 32 blocks: the plain product on the 256-column kernel (the backward's d_act) */
static void test_gg_fp8_fwd_long_k(void) { run_fp8_fwd(5, 500, 512, 4096, 16); }
static void test_gg_fp8_swiglu(void) { run_fp8_swiglu(5, 300, 256, 256, 0, 1, 1000); }
static void test_gg_fp8_swiglu_limit(void) { run_fp8_swiglu(7, 700, 384, 512, 1, 0, 24); }
/* More experts than one launch takes (256): the launchers split them; the 256-column kernel (the
 * plain product of n 256, gate+up) and the 128-column one (n 384). */
static void test_gg_fp8_many_experts(void) {
  run_fp8_fwd(300, 40, 256, 128, 2);
  run_fp8_fwd(300, 40, 384, 128, 2);
  run_fp8_swiglu(300, 40, 128, 256, 0, 0, 2);
}

/* The 128-column kernel's consumer warpgroups (n 384, not in 256s): 2 (128-row tiles) and 3
 * (192-row tiles) through launches, each against the reference, then bit for bit against each
 * other (and against a small grid) on the same data, every real row. */
static void test_gg_fp8_warpgroups(void) {
  const mok_gg_launch wg2 = {0, 2, 0}, wg3 = {0, 3, 0};
  run_fp8_fwd(8, 900, 384, 768, 16, &wg2);
  run_fp8_fwd(8, 900, 384, 768, 16, &wg3);
  run_fp8_fwd(5, 200, 640, 512, 16, &wg3);
  gg_rng r = {test_seed() ^ 0xf83b};
  gg_rows g = make_rows(&r, 7, 800, 1);
  const int64_t n = 384, k = 512;
  std::vector<uint16_t> a(g.m_total * k), w((size_t)g.E * n * k);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, w, 0.5f);
  nan_padding(g, a, k);
  uint8_t *qa, *qw;
  float *sa, *sw;
  quant_act(g, a, k, &qa, &sa);
  quant_weight(w, g.E, n, k, &qw, &sw);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  const std::vector<uint16_t> nan_c(g.m_total * n, BF16_NAN);
  const mok_gg_launch runs[] = {{0, 2, 0}, {0, 3, 0}, {1, 3, 5}, {0, 2, 1}};
  std::vector<uint16_t> got[4];
  for (int i = 0; i < 4; ++i) {
    uint16_t *dc = to_dev(nan_c);
    CHECK_STATUS(mok_gg_fp8_fwd(qa, sa, qw, sw, dc, doff, dcnt, g.E, g.m_total, n, k, &runs[i], 0),
                 MOK_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    got[i] = from_dev(dc, nan_c.size());
    cudaFree(dc);
  }
  int64_t unwritten = 0;
  for (int e = 0; e < g.E; ++e)
    for (int i = 0; i < g.count[e]; ++i)
      for (int64_t j = 0; j < n; ++j) unwritten += got[0][(g.offset[e] + i) * n + j] == BF16_NAN;
  for (int i = 1; i < 4; ++i) {
    char ln[64];
    const int64_t d = rows_differ(g, got[0], got[i], n);
    printf("    %s: %lld rows differ from 2 warpgroups\n", launch_name(&runs[i], ln, sizeof ln),
           (long long)d);
    CHECK(d == 0);
  }
  CHECK(unwritten == 0);
  cudaFree(qa); cudaFree(qw); cudaFree(sa); cudaFree(sw); cudaFree(doff); cudaFree(dcnt);
}

/* No capacity beyond the experts' padded rows, and a last expert (200 rows) whose second 192-row
 * tile of the three-warpgroup kernel reaches 128 rows past the end: its A rows come back zero from
 * TMA and only the row scales inside the buffer may be read. The 256-column kernel (n 256) and
 * the 128-column one (n 384) with two and three warpgroups. */
static void test_gg_fp8_exact_capacity(void) {
  gg_rng r = {test_seed() ^ 0xf8ca};
  gg_rows g;
  g.E = 3;
  g.count = {300, 0, 200};
  g.offset = {0, 384, 384, 640};
  g.m_total = 640;
  const mok_gg_launch wg2 = {0, 2, 0}, wg3 = {0, 3, 0};
  run_fp8_fwd_rows(r, g, 256, 256, 1000);
  run_fp8_fwd_rows(r, g, 384, 256, 1000, false, &wg2);
  run_fp8_fwd_rows(r, g, 384, 256, 1000, false, &wg3);
}

/* Scales far apart along K (blocks 1e20 smaller inside normal rows, a row 1e25 smaller), for the
 * 256-column kernel's rescaled accumulator (n 256) and the 128-column kernel's promotion (n 384,
 * two and three warpgroups). */
static void test_gg_fp8_extreme_scales(void) {
  gg_rng r = {test_seed() ^ 0xf8e5};
  gg_rows g;
  g.E = 2;
  g.count = {200, 130};
  g.offset = {0, 256, 512};
  g.m_total = 640;
  const mok_gg_launch wg2 = {0, 2, 0}, wg3 = {0, 3, 0};
  run_fp8_fwd_rows(r, g, 256, 512, 1000, true);
  run_fp8_fwd_rows(r, g, 384, 512, 1000, true, &wg2);
  run_fp8_fwd_rows(r, g, 384, 512, 1000, true, &wg3);
}

/* Gate+up with the activations quantized for down (mok_gg_fp8_gate_up_swiglu_quantized): on
 * every real row the same codes and scales, bit for bit, as the bf16 activations of
 * mok_gg_fp8_gate_up_swiglu quantized by mok_fp8_quant_act, and the same pre-activations; the
 * epilogue stages the codes and stores them by TMA; with and without the clamp, on the whole grid
 * and on a grid of 3 CTAs. */
static void test_gg_fp8_swiglu_quantized(void) {
  gg_rng r = {test_seed() ^ 0xf8a9};
  const int E = 5;
  const int64_t inter = 384, hidden = 512;
  gg_rows g = make_rows(&r, E, 400, 1);
  const int64_t mp = MOK_FP8_SCALE_ROWS(g.m_total), kbs = inter / 128;
  fp8_mlp_ops o = make_fp8_mlp(&r, g, E, inter, hidden, false);
  uint8_t *qx = o.qx, *qg = o.qg, *qu = o.qu;
  float *sx = o.sx, *sg = o.sg, *su = o.su;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  uint16_t *act = NULL;
  uint8_t *q0 = NULL, *q1 = NULL;
  float *s0 = NULL, *s1 = NULL;
  cudaMalloc((void **)&act, g.m_total * inter * 2);
  cudaMalloc((void **)&q0, g.m_total * inter);
  cudaMalloc((void **)&q1, g.m_total * inter);
  cudaMalloc((void **)&s0, kbs * mp * 4);
  cudaMalloc((void **)&s1, kbs * mp * 4);
  uint16_t *p0 = NULL, *p1 = NULL; /* the pre-activations kept for backward, written alongside */
  cudaMalloc((void **)&p0, g.m_total * 2 * inter * 2);
  cudaMalloc((void **)&p1, g.m_total * 2 * inter * 2);
  const mok_gg_launch small = {0, 0, 3};
  for (int grid = 0; grid < 2; ++grid)
    for (int lim = 0; lim < 2; ++lim) {
      const mok_gg_launch *launch = grid ? &small : NULL;
      cudaMemset(q1, 0x7f, g.m_total * inter); /* e4m3 NaN codes and NaN scales where unwritten */
      cudaMemset(s1, 0xff, kbs * mp * 4);
      cudaMemset(p1, 0xff, g.m_total * 2 * inter * 2);
      CHECK_STATUS(mok_gg_fp8_gate_up_swiglu(qx, sx, qg, sg, qu, su, act, p0, doff, dcnt, E,
                                             g.m_total, inter, hidden, lim, 0.75f, NULL, 0),
                   MOK_SUCCESS);
      CHECK_STATUS(mok_fp8_quant_act(act, q0, s0, g.m_total, inter, 0), MOK_SUCCESS);
      CHECK_STATUS(mok_gg_fp8_gate_up_swiglu_quantized(qx, sx, qg, sg, qu, su, p1, q1, s1, doff,
                                                       dcnt, E, g.m_total, inter, hidden, lim,
                                                       0.75f, launch, 0),
                   MOK_SUCCESS);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<uint8_t> c0 = from_dev(q0, g.m_total * inter), c1 = from_dev(q1, g.m_total * inter);
      std::vector<float> a0 = from_dev(s0, kbs * mp), a1 = from_dev(s1, kbs * mp);
      std::vector<uint16_t> pre0 = from_dev(p0, g.m_total * 2 * inter),
                            pre1 = from_dev(p1, g.m_total * 2 * inter);
      int64_t bad = 0, real = 0;
      for (int e = 0; e < E; ++e)
        for (int i = 0; i < g.count[e]; ++i) {
          const int64_t row = g.offset[e] + i;
          ++real;
          bad += memcmp(&c0[row * inter], &c1[row * inter], inter) != 0;
          bad += memcmp(&pre0[row * 2 * inter], &pre1[row * 2 * inter], 2 * inter * 2) != 0;
          for (int64_t kb = 0; kb < kbs; ++kb) bad += memcmp(&a0[kb * mp + row], &a1[kb * mp + row], 4) != 0;
        }
      printf("    %s, limit %d: %lld real rows, %lld codes or scales differ\n",
             grid ? "3 CTAs" : "default", lim, (long long)real, (long long)bad);
      CHECK(real > 0 && bad == 0);
    }
  CHECK_STATUS(mok_gg_fp8_gate_up_swiglu_quantized(qx, sx, qg, sg, qu, su, NULL, NULL, s1, doff,
                                                   dcnt, E, g.m_total, inter, hidden, 0, 0.f, NULL,
                                                   0),
               MOK_ERR_INVALID_ARGUMENT);
  /* a choice gate+up (always on the 256-column kernel) cannot run: warpgroups, clusters */
  const mok_gg_launch wg3 = {0, 3, 0}, cl2 = {2, 0, 0};
  CHECK_STATUS(mok_gg_fp8_gate_up_swiglu_quantized(qx, sx, qg, sg, qu, su, NULL, q1, s1, doff, dcnt,
                                                   E, g.m_total, inter, hidden, 0, 0.f, &wg3, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_gate_up_swiglu(qx, sx, qg, sg, qu, su, act, NULL, doff, dcnt, E,
                                         g.m_total, inter, hidden, 0, 0.f, &cl2, 0),
               MOK_ERR_INVALID_ARGUMENT);
  free_fp8_mlp(&o);
  cudaFree(doff); cudaFree(dcnt); cudaFree(act); cudaFree(q0); cudaFree(q1); cudaFree(s0);
  cudaFree(s1); cudaFree(p0); cudaFree(p1);
}

/* Two runs' outputs of the one-launch MLP, side by side: the activations' codes [m_total, inter]
 * and scales, the pre-activations [m_total, 2 inter] and the down outputs [m_total, hidden]. */
typedef struct {
  uint8_t *q[2];
  float *sc[2];
  uint16_t *pre[2], *out[2];
  size_t nq, ns, npre, nout;
} mlp_outs;

static mlp_outs mlp_outs_alloc(const gg_rows &g, int64_t inter, int64_t hidden) {
  mlp_outs o = {};
  o.nq = g.m_total * inter;
  o.ns = (inter / 128) * MOK_FP8_SCALE_ROWS(g.m_total);
  o.npre = g.m_total * 2 * inter;
  o.nout = g.m_total * hidden;
  for (int i = 0; i < 2; ++i) {
    cudaMalloc((void **)&o.q[i], o.nq);
    cudaMalloc((void **)&o.sc[i], o.ns * 4);
    cudaMalloc((void **)&o.pre[i], o.npre * 2);
    cudaMalloc((void **)&o.out[i], o.nout * 2);
  }
  return o;
}

/* Both runs' outputs NaN: e4m3 NaN codes, NaN scales, bf16 NaN pre-activations and outputs. */
static void mlp_outs_poison(const mlp_outs &o) {
  for (int i = 0; i < 2; ++i) {
    cudaMemset(o.q[i], 0x7f, o.nq);
    cudaMemset(o.sc[i], 0xff, o.ns * 4);
    cudaMemset(o.pre[i], 0xff, o.npre * 2);
    cudaMemset(o.out[i], 0xff, o.nout * 2);
  }
}

/* m writes run i's outputs. */
static void mlp_outs_use(const mlp_outs &o, int i, mok_gg_fp8_mlp *m) {
  m->preact = o.pre[i];
  m->q_act = o.q[i];
  m->q_scales = o.sc[i];
  m->out = o.out[i];
}

/* Over the real rows: how many, how many differ between the runs in any output (codes, scales,
 * pre-activations, outputs, bit for bit), and how many of run 1's outputs are still NaN. */
typedef struct {
  int64_t real, differ, unwritten;
} mlp_outs_diff;

static mlp_outs_diff mlp_outs_compare(const mlp_outs &o, const gg_rows &g, int64_t inter,
                                      int64_t hidden) {
  const int64_t mp = MOK_FP8_SCALE_ROWS(g.m_total), kbs = inter / 128;
  std::vector<uint8_t> c0 = from_dev(o.q[0], o.nq), c1 = from_dev(o.q[1], o.nq);
  std::vector<float> a0 = from_dev(o.sc[0], o.ns), a1 = from_dev(o.sc[1], o.ns);
  std::vector<uint16_t> p0 = from_dev(o.pre[0], o.npre), p1 = from_dev(o.pre[1], o.npre);
  std::vector<uint16_t> o0 = from_dev(o.out[0], o.nout), o1 = from_dev(o.out[1], o.nout);
  mlp_outs_diff d = {0, 0, 0};
  for (int ex = 0; ex < g.E; ++ex)
    for (int i = 0; i < g.count[ex]; ++i) {
      const int64_t row = g.offset[ex] + i;
      ++d.real;
      d.differ += memcmp(&c0[row * inter], &c1[row * inter], inter) != 0;
      d.differ += memcmp(&p0[row * 2 * inter], &p1[row * 2 * inter], 2 * inter * 2) != 0;
      d.differ += memcmp(&o0[row * hidden], &o1[row * hidden], hidden * 2) != 0;
      for (int64_t kb = 0; kb < kbs; ++kb)
        d.differ += memcmp(&a0[kb * mp + row], &a1[kb * mp + row], 4) != 0;
      for (int64_t j = 0; j < hidden; ++j) d.unwritten += o1[row * hidden + j] == 0xFFFF;
    }
  return d;
}

static void mlp_outs_free(mlp_outs *o) {
  for (int i = 0; i < 2; ++i) {
    cudaFree(o->q[i]);
    cudaFree(o->sc[i]);
    cudaFree(o->pre[i]);
    cudaFree(o->out[i]);
  }
}

/* The forward MLP in one launch (mok_gg_fp8_mlp_forward): the activations' codes and scales, the
 * pre-activations and the down output bit for bit those of the two launches
 * (mok_gg_fp8_gate_up_swiglu_quantized, then mok_gg_fp8_fwd) on every real row, with and without
 * the clamp, on the whole grid and on grids of 1 and 3 CTAs (launch max_ctas), where a CTA waits
 * for the rows of the down tile it holds while others may still run gate+up: the launch must
 * complete with few resident CTAs. Outputs start as NaN; the error word stays 0. Then the errors:
 * a NULL operand, a launch choice it cannot run, a shape one launch does not cover. */
static void test_gg_fp8_mlp_one_launch(void) {
  gg_rng r = {test_seed() ^ 0xf8c1};
  const int E = 7;
  const int64_t inter = 384, hidden = 512;
  gg_rows g = make_rows(&r, E, 700, 1);
  fp8_mlp_ops o = make_fp8_mlp(&r, g, E, inter, hidden, true);
  uint8_t *qx = o.qx, *qg = o.qg, *qu = o.qu, *qd = o.qd;
  float *sx = o.sx, *sg = o.sg, *su = o.su, *sd = o.sd;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  mlp_outs out = mlp_outs_alloc(g, inter, hidden);
  int32_t *sync = NULL, *err = NULL;
  cudaMalloc((void **)&sync, mok_gg_fp8_mlp_sync_ints(g.m_total) * 4);
  cudaMalloc((void **)&err, 4);
  cudaMemset(err, 0, 4);
  mok_gg_fp8_mlp m = {};
  m.x = qx; m.x_scales = sx;
  m.w_gate = qg; m.w_gate_scales = sg; m.w_up = qu; m.w_up_scales = su;
  m.w_down = qd; m.w_down_scales = sd;
  mlp_outs_use(out, 1, &m);
  m.expert_offset = doff; m.expert_count = dcnt; m.num_experts = E;
  m.m_total = g.m_total; m.inter = inter; m.hidden = hidden;
  m.sync = sync; m.err = err; m.timeout_ns = 10000000000LL;
  const struct { int ctas, lim; } runs[] = {{0, 0}, {0, 1}, {1, 0}, {3, 1}, {3, 0}};
  for (const auto &run : runs) {
    mlp_outs_poison(out);
    CHECK_STATUS(mok_gg_fp8_gate_up_swiglu_quantized(qx, sx, qg, sg, qu, su, out.pre[0], out.q[0],
                                                     out.sc[0], doff, dcnt, E, g.m_total, inter,
                                                     hidden, run.lim, 0.75f, NULL, 0),
                 MOK_SUCCESS);
    CHECK_STATUS(mok_gg_fp8_fwd(out.q[0], out.sc[0], qd, sd, out.out[0], doff, dcnt, E, g.m_total,
                                hidden, inter, NULL, 0),
                 MOK_SUCCESS);
    m.use_limit = run.lim;
    m.limit = 0.75f;
    const mok_gg_launch cap = {0, 0, run.ctas};
    CHECK_STATUS(mok_gg_fp8_mlp_forward(&m, run.ctas ? &cap : NULL, 0), MOK_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    int32_t e = -1;
    cudaMemcpy(&e, err, 4, cudaMemcpyDeviceToHost);
    const mlp_outs_diff d = mlp_outs_compare(out, g, inter, hidden);
    printf("    %s CTAs, limit %d: %lld real rows, %lld rows differ, %lld outputs unwritten, "
           "error word %d\n", run.ctas ? (run.ctas == 1 ? "1" : "3") : "all", run.lim,
           (long long)d.real, (long long)d.differ, (long long)d.unwritten, e);
    CHECK(d.real > 0 && d.differ == 0 && d.unwritten == 0 && e == 0);
  }
  mok_gg_fp8_mlp bad = m;
  bad.sync = NULL;
  CHECK_STATUS(mok_gg_fp8_mlp_forward(&bad, NULL, 0), MOK_ERR_INVALID_ARGUMENT);
  const mok_gg_launch cl2 = {2, 0, 0}, wg3 = {0, 3, 0}, neg = {0, 0, -1};
  CHECK_STATUS(mok_gg_fp8_mlp_forward(&m, &cl2, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_mlp_forward(&m, &wg3, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_mlp_forward(&m, &neg, 0), MOK_ERR_INVALID_ARGUMENT);
  bad = m;
  bad.hidden = 384; /* down's columns not in 256s: the caller makes two launches */
  CHECK_STATUS(mok_gg_fp8_mlp_forward(&bad, NULL, 0), MOK_ERR_NOT_SUPPORTED);
  mlp_outs_free(&out);
  free_fp8_mlp(&o);
  cudaFree(doff); cudaFree(dcnt); cudaFree(sync); cudaFree(err);
}

/* The row-major scale layout (mok_fp8_quant_act_rows, what the FP8 forward's dispatch moves):
 * the same codes bit for bit, and each scale equal to the K-block-major one; odd row count. */
static void test_gg_fp8_quantize_rows(void) {
  gg_rng r = {test_seed() ^ 0xf8a0};
  const int64_t m = 301, k = 640, kbs = k / 128, mp = MOK_FP8_SCALE_ROWS(m);
  std::vector<uint16_t> x(m * k);
  fill_bf16(&r, x, 3.0f);
  for (int64_t j = 0; j < 128; ++j) x[5 * k + 128 + j] = 0; /* an all-zero block: scale 1 */
  uint16_t *dx = to_dev(x);
  uint8_t *q0 = NULL, *q1 = NULL;
  float *s0 = NULL, *s1 = NULL;
  cudaMalloc((void **)&q0, m * k);
  cudaMalloc((void **)&q1, m * k);
  cudaMalloc((void **)&s0, kbs * mp * 4);
  cudaMalloc((void **)&s1, m * kbs * 4);
  cudaMemset(q1, 0x7f, m * k);
  cudaMemset(s1, 0xff, m * kbs * 4);
  CHECK_STATUS(mok_fp8_quant_act(dx, q0, s0, m, k, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_quant_act_rows(dx, q1, s1, m, k, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_quant_act_rows(dx, q1, s1, m, 100, 0), MOK_ERR_MISALIGNED);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<uint8_t> c0 = from_dev(q0, m * k), c1 = from_dev(q1, m * k);
  std::vector<float> a0 = from_dev(s0, kbs * mp), a1 = from_dev(s1, m * kbs);
  int64_t bad = 0;
  for (int64_t i = 0; i < m * k; ++i) bad += c0[i] != c1[i];
  for (int64_t row = 0; row < m; ++row)
    for (int64_t kb = 0; kb < kbs; ++kb)
      bad += memcmp(&a0[kb * mp + row], &a1[row * kbs + kb], 4) != 0;
  printf("    row-major scales: %lld codes or scales differ; zero block scale %g\n", (long long)bad,
         a1[5 * kbs + 1]);
  CHECK(bad == 0);
  CHECK(a1[5 * kbs + 1] == 1.0f);
  cudaFree(dx); cudaFree(q0); cudaFree(q1); cudaFree(s0); cudaFree(s1);
}

/* The FP8 backward's layout conversions: two weights transposed side by side into [E, k, 2n]
 * (mok_fp8_transpose_block128 with col_off 0 and n) equal the host's transposition of their
 * codes and scales byte for byte, and so do the codes and copies mok_fp8_quant_weight_t makes
 * from the bf16 weights in one pass; dequantized rows (mok_fp8_dequant_act) equal e4m3 * scale
 * rounded to bf16 on the host, bit for bit; bad arguments are refused. */
static void test_gg_fp8_layout(void) {
  gg_rng r = {test_seed() ^ 0xf8b1};
  const int64_t E = 3, n = 256, k = 384, nb = n / 128, kbs = k / 128, ld = 2 * n;
  std::vector<uint16_t> w0((size_t)(E * n * k)), w1((size_t)(E * n * k));
  fill_bf16(&r, w0, 0.3f);
  fill_bf16(&r, w1, 2.0f);
  uint8_t *q0, *q1, *qt = NULL;
  float *s0, *s1, *st = NULL;
  quant_weight(w0, E, n, k, &q0, &s0);
  quant_weight(w1, E, n, k, &q1, &s1);
  cudaMalloc((void **)&qt, E * k * ld);
  cudaMalloc((void **)&st, E * kbs * (ld / 128) * 4);
  cudaMemset(qt, 0x7f, E * k * ld);
  cudaMemset(st, 0xff, E * kbs * (ld / 128) * 4);
  CHECK_STATUS(mok_fp8_transpose_block128(q0, s0, E, n, k, qt, st, ld, 0, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_transpose_block128(q1, s1, E, n, k, qt, st, ld, n, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_transpose_block128(q1, s1, E, n, k, qt, st, ld, n + 128, 0),
               MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_fp8_transpose_block128(q1, s1, E, n, k, qt, st, ld, 64, 0), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_fp8_transpose_block128(NULL, s1, E, n, k, qt, st, ld, 0, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> c[2] = {from_dev(q0, E * n * k), from_dev(q1, E * n * k)};
  std::vector<float> sc[2] = {from_dev(s0, E * nb * kbs), from_dev(s1, E * nb * kbs)};
  std::vector<uint8_t> ct = from_dev(qt, E * k * ld);
  std::vector<float> sct = from_dev(st, E * kbs * (ld / 128));
  int64_t bad = 0;
  for (int h = 0; h < 2; ++h)
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j)
          bad += ct[(e * k + j) * ld + h * n + i] != c[h][(e * n + i) * k + j];
      for (int64_t ib = 0; ib < nb; ++ib)
        for (int64_t jb = 0; jb < kbs; ++jb)
          bad += memcmp(&sct[(e * kbs + jb) * (ld / 128) + h * nb + ib],
                        &sc[h][(e * nb + ib) * kbs + jb], 4) != 0;
    }
  printf("    transpose: %lld codes or scales differ\n", (long long)bad);
  CHECK(bad == 0);

  /* codes and transposed copy from one read of the bf16 weights (mok_fp8_quant_weight_t) equal
   * the two passes' byte for byte, every output poisoned first */
  {
    uint16_t *dw[2] = {to_dev(w0), to_dev(w1)};
    uint8_t *fq = NULL, *fqt = NULL;
    float *fs = NULL, *fst = NULL;
    cudaMalloc((void **)&fq, 2 * E * n * k);
    cudaMalloc((void **)&fs, 2 * E * nb * kbs * 4);
    cudaMalloc((void **)&fqt, E * k * ld);
    cudaMalloc((void **)&fst, E * kbs * (ld / 128) * 4);
    cudaMemset(fq, 0x7f, 2 * E * n * k);
    cudaMemset(fs, 0xff, 2 * E * nb * kbs * 4);
    cudaMemset(fqt, 0x7e, E * k * ld);
    cudaMemset(fst, 0xfe, E * kbs * (ld / 128) * 4);
    for (int h = 0; h < 2; ++h)
      CHECK_STATUS(mok_fp8_quant_weight_t(dw[h], fq + h * E * n * k, fs + h * E * nb * kbs, E, n,
                                          k, fqt, fst, ld, h * n, 0),
                   MOK_SUCCESS);
    CHECK_STATUS(mok_fp8_quant_weight_t(dw[0], fq, fs, E, n, k, fqt, NULL, ld, 0, 0),
                 MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_fp8_quant_weight_t(dw[0], fq, fs, E, n, k, fqt, fst, ld, n + 128, 0),
                 MOK_ERR_INVALID_SHAPE);
    CUDA_OK(cudaDeviceSynchronize());
    int64_t fbad = 0;
    for (int h = 0; h < 2; ++h) {
      std::vector<uint8_t> fc = from_dev(fq + h * E * n * k, E * n * k);
      std::vector<float> fsc = from_dev(fs + h * E * nb * kbs, E * nb * kbs);
      fbad += memcmp(fc.data(), c[h].data(), fc.size()) != 0;
      fbad += memcmp(fsc.data(), sc[h].data(), fsc.size() * 4) != 0;
    }
    std::vector<uint8_t> fct = from_dev(fqt, E * k * ld);
    std::vector<float> fsct = from_dev(fst, E * kbs * (ld / 128));
    for (size_t i = 0; i < fct.size(); ++i) fbad += fct[i] != ct[i];
    for (size_t i = 0; i < fsct.size(); ++i) fbad += memcmp(&fsct[i], &sct[i], 4) != 0;
    printf("    quantized and transposed in one pass: %lld differences from the two passes\n",
           (long long)fbad);
    CHECK(fbad == 0);
    cudaFree(dw[0]); cudaFree(dw[1]); cudaFree(fq); cudaFree(fs); cudaFree(fqt); cudaFree(fst);
  }

  gg_rows g = make_rows(&r, 4, 300, 1);
  const int64_t m = g.m_total, ka = 640, kba = ka / 128, mp = MOK_FP8_SCALE_ROWS(m);
  std::vector<uint16_t> x(m * ka);
  fill_bf16(&r, x, 5.0f);
  uint8_t *qx;
  float *sx;
  quant_act(g, x, ka, &qx, &sx);
  uint16_t *dx = NULL;
  cudaMalloc((void **)&dx, m * ka * 2);
  cudaMemset(dx, 0xff, m * ka * 2);
  CHECK_STATUS(mok_fp8_dequant_act(qx, sx, dx, m, ka, NULL, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_dequant_act(qx, sx, dx, m, 100, NULL, 0), MOK_ERR_MISALIGNED);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> cq = from_dev(qx, m * ka);
  std::vector<float> cs = from_dev(sx, kba * mp);
  std::vector<uint16_t> back = from_dev(dx, m * ka);
  bad = 0;
  for (int64_t row = 0; row < m; ++row)
    for (int64_t j = 0; j < ka; ++j)
      bad += back[row * ka + j] != f2bf((float)e4m3_to_d(cq[row * ka + j]) * cs[(j / 128) * mp + row]);
  printf("    dequantize: %lld of %lld values differ\n", (long long)bad, (long long)(m * ka));
  CHECK(bad == 0);
  cudaFree(q0); cudaFree(q1); cudaFree(s0); cudaFree(s1); cudaFree(qt); cudaFree(st);
  cudaFree(qx); cudaFree(sx); cudaFree(dx);
}

/* ---- FP8 weight gradient ------------------------------------------------------------------ */
/* x [m_total, cols] quantized transposed on the device (mok_fp8_quant_t) against the host:
 * each (128-token block, column) of a real expert block has scale amax / 448 over the real rows
 * (expert: over all the expert's real rows, every block of it the same) and codes within E4M3's
 * rounding of value / scale; padding rows' codes are zero. Returns the device buffers and the
 * dequantized values [m_total, cols] (padding rows 0) for the GEMM check. */
static std::vector<double> quant_t(const gg_rows &g, const std::vector<uint16_t> &x, int64_t cols,
                                   uint8_t **dq, float **ds, int32_t *doff, int32_t *dcnt,
                                   int expert = 0) {
  const int64_t m_pad = MOK_FP8_SCALE_ROWS(g.m_total), nb = m_pad / 128;
  uint16_t *dx = to_dev(x);
  cudaMalloc((void **)dq, cols * m_pad + 16);
  cudaMalloc((void **)ds, nb * cols * 4 + 16);
  cudaMemset(*dq, 0x7f, cols * m_pad);
  cudaMemset(*ds, 0xff, nb * cols * 4);
  float *amax = NULL;
  if (expert) {
    CHECK(cudaMalloc((void **)&amax, (size_t)g.E * cols * 4) == cudaSuccess);
    cudaMemset(amax, 0x7f, (size_t)g.E * cols * 4); /* poison: the call writes every entry */
  }
  CHECK_STATUS(mok_fp8_quant_t(dx, *dq, *ds, amax, doff, dcnt, g.E, g.m_total, cols, 0),
               MOK_SUCCESS);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaFree(amax);
  std::vector<uint8_t> q = from_dev(*dq, cols * m_pad);
  std::vector<float> sc = from_dev(*ds, nb * cols);
  std::vector<double> out(g.m_total * cols, 0.0);
  int64_t bad_scale = 0, bad_code = 0, bad_pad = 0;
  relerr rq = {0, 0, 0};
  for (int e = 0; e < g.E; ++e)
    for (int64_t b0 = g.offset[e]; b0 < g.offset[e] + (g.count[e] + 127) / 128 * 128; b0 += 128) {
      const int64_t real = std::min<int64_t>(128, g.offset[e] + g.count[e] - b0);
      for (int64_t c = 0; c < cols; ++c) {
        double amax = 0;
        const int64_t a0 = expert ? g.offset[e] : b0, an = expert ? g.count[e] : real;
        for (int64_t i = 0; i < an; ++i) amax = fmax(amax, fabs(bf2f(x[(a0 + i) * cols + c])));
        const float want = amax > 0 ? (float)(amax / 448.0) : 1.0f;
        const float s = sc[(b0 / 128) * cols + c];
        if (!(fabs(s - want) <= 1e-6 * want)) ++bad_scale;
        for (int64_t i = 0; i < 128; ++i) {
          const uint8_t code = q[c * m_pad + b0 + i];
          if (i >= real) { bad_pad += (code & 0x7f) != 0; continue; }
          const double v = bf2f(x[(b0 + i) * cols + c]), got = e4m3_to_d(code) * s;
          out[(b0 + i) * cols + c] = got;
          rel_add(&rq, got, v);
          if (fabs(got - v) > fabs(v) / 15.0 + 1e-30 + s * ldexp(1.0, -9)) ++bad_code;
        }
      }
    }
  const double e = sqrt(rq.num / rq.den);
  printf("    transposed quantization: rel err %.3e, %lld scales, %lld codes, %lld padding codes off\n", e,
         (long long)bad_scale, (long long)bad_code, (long long)bad_pad);
  CHECK(bad_scale == 0 && bad_code == 0 && bad_pad == 0 && rq.nan == 0 && e < 0.06);
  cudaFree(dx);
  return out;
}

/* dW[e] = A_e^T B_e on the FP8 kernel against the host product of the same dequantized operands
 * (fp64): odd and zero counts, padding rows NaN in the bf16 inputs, experts at count -1 left as
 * they were; A a row block of a wider quantized matrix (a_ld > m) when `half`; expert 1: both
 * operands with one scale per expert and column, the tokens chained on the tensor cores; 2: B
 * only, A per 128 rows (the blocks chained and the accumulator rescaled by A's row scales'
 * ratio). launch: NULL, or a cluster choice (expert 2). steep: A's every other 128-row block
 * of an expert 2^-36 times the rest (a power of two: the same codes, the scales apart by 2^36),
 * so that the rescaled accumulator is multiplied by 2^36 and back block after block. */
static void run_fp8_wgrad(int E, int max_rows, int64_t m, int64_t n, int out_fp32, int accumulate,
                          int half, int skip, int expert = 0, int steep = 0,
                          const mok_gg_launch *launch = NULL) {
  gg_rng r = {test_seed() ^ 0xf8e1};
  gg_rows g = make_rows(&r, E, max_rows, 1);
  const int64_t m_pad = MOK_FP8_SCALE_ROWS(g.m_total), am = half ? 2 * m : m;
  std::vector<uint16_t> a(g.m_total * am), b(g.m_total * n);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, b, 3.0f);
  for (int e = 0; steep && e < E; ++e)
    for (int rr = 128; rr < g.count[e]; rr += 256)
      for (int q = rr; q < rr + 128 && q < g.count[e]; ++q)
        for (int64_t c = 0; c < am; ++c) {
          uint16_t *v = &a[(size_t)(g.offset[e] + q) * am + c];
          *v = f2bf(bf2f(*v) * 0x1p-36f);
        }
  nan_padding(g, a, am);
  nan_padding(g, b, n);
  std::vector<int32_t> cnt_dev(g.count);
  for (int e = 2; skip && e < E; e += 3) cnt_dev[e] = -1;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count), *dcnt_call = to_dev(cnt_dev);
  uint8_t *qa, *qb;
  float *sa, *sb;
  std::vector<double> av = quant_t(g, a, am, &qa, &sa, doff, dcnt, expert == 1);
  std::vector<double> bv = quant_t(g, b, n, &qb, &sb, doff, dcnt, expert != 0);
  const size_t nw = (size_t)E * m * n;
  std::vector<float> init(nw);
  for (size_t i = 0; i < nw; ++i) init[i] = accumulate ? (float)(2 * gg_uniform(&r) - 1) : NAN;
  std::vector<uint16_t> init16(nw, BF16_NAN);
  void *dw = out_fp32 ? (void *)to_dev(init) : (void *)to_dev(init16);
  /* half: A is the upper half of a [2m]-column matrix: its codes start m rows in */
  const uint8_t *qa_use = qa + (half ? m * m_pad : 0);
  const float *sa_use = sa + (half ? m : 0);
  CHECK_STATUS(mok_gg_fp8_wgrad(qa_use, sa_use, am, qb, sb, n, dw, out_fp32, accumulate, expert,
                                doff, dcnt_call, E, g.m_total, m, n, launch, 0),
               MOK_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> raw(nw * (out_fp32 ? 4 : 2));
  cudaMemcpy(raw.data(), dw, raw.size(), cudaMemcpyDeviceToHost);
  relerr re = {0, 0, 0};
  int kept = 1;
  std::vector<double> acc(n);
  for (int e = 0; e < E; ++e) {
    const size_t esz = out_fp32 ? 4 : 2, o = (size_t)e * m * n;
    if (cnt_dev[e] < 0) {
      kept &= memcmp(raw.data() + o * esz, out_fp32 ? (const void *)(init.data() + o)
                                                    : (const void *)(init16.data() + o),
                     (size_t)m * n * esz) == 0;
      continue;
    }
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int rr = 0; rr < g.count[e]; ++rr) {
        const int64_t row = g.offset[e] + rr;
        const double ai = av[row * am + (half ? m : 0) + i];
        for (int64_t j = 0; j < n; ++j) acc[j] += ai * bv[row * n + j];
      }
      for (int64_t j = 0; j < n; ++j) {
        const size_t idx = o + (size_t)i * n + j;
        double want = acc[j] + (accumulate ? init[idx] : 0.0);
        const double got = out_fp32 ? ((float *)raw.data())[idx] : bf2f(((uint16_t *)raw.data())[idx]);
        rel_add(&re, got, want);
      }
    }
  }
  const double err = sqrt(re.num / (re.den > 0 ? re.den : 1));
  char ln[64];
  printf("    fp8 wgrad E %d m %lld n %lld fp32 %d acc %d half %d skip %d expert %d steep %d "
         "(%s): rel err %.3e, kept %d\n", E, (long long)m, (long long)n, out_fp32, accumulate,
         half, skip, expert, steep, launch_name(launch, ln, sizeof ln), err, kept);
  CHECK(re.nan == 0 && err < (out_fp32 ? 5e-3 : 1e-2) && kept);
  cudaFree(qa); cudaFree(qb); cudaFree(sa); cudaFree(sb); cudaFree(dw);
  cudaFree(doff); cudaFree(dcnt); cudaFree(dcnt_call);
}

static void test_gg_fp8_wgrad(void) {
  run_fp8_wgrad(6, 300, 256, 384, 1, 0, 0, 0);
  run_fp8_wgrad(5, 500, 128, 256, 0, 0, 1, 0);
  run_fp8_wgrad(7, 300, 256, 128, 1, 1, 0, 1);
  run_fp8_wgrad(7, 200, 128, 256, 0, 0, 0, 1);
  /* bf16 out through the TMA stores, a last tile with only its left 128 columns, and several row
   * tiles; and fp32 the same */
  run_fp8_wgrad(4, 700, 384, 640, 0, 0, 0, 0);
  run_fp8_wgrad(3, 450, 256, 640, 1, 0, 1, 0);
  /* one scale per expert and column (no promotion): the same cases' kinds */
  run_fp8_wgrad(6, 300, 256, 384, 1, 0, 0, 0, 1);
  run_fp8_wgrad(7, 300, 256, 128, 1, 1, 0, 1, 1);
  run_fp8_wgrad(4, 700, 384, 640, 0, 0, 0, 0, 1);
  run_fp8_wgrad(3, 450, 256, 640, 1, 0, 1, 0, 1);
  /* per-expert scales for B only: the same cases' kinds */
  run_fp8_wgrad(6, 300, 256, 384, 1, 0, 0, 0, 2);
  run_fp8_wgrad(7, 300, 256, 128, 1, 1, 0, 1, 2);
  run_fp8_wgrad(4, 700, 384, 640, 0, 0, 0, 0, 2);
  run_fp8_wgrad(3, 450, 256, 640, 1, 0, 1, 0, 2);
  /* the rescaled accumulator across token blocks 2^36 apart, up and down */
  run_fp8_wgrad(4, 700, 256, 384, 1, 0, 0, 0, 2, 1);
  run_fp8_wgrad(3, 900, 128, 256, 0, 0, 0, 0, 2, 1);
  /* B per expert on single CTAs and in cluster pairs, explicitly (m 256: the tiles pair up) */
  const mok_gg_launch single = {1, 0, 0}, pairs = {2, 0, 0};
  run_fp8_wgrad(6, 300, 256, 384, 1, 0, 0, 0, 2, 1, &single);
  run_fp8_wgrad(3, 450, 256, 640, 0, 0, 1, 0, 2, 0, &pairs);
  /* refused: NULL operands, expert_scales 3, pairs where they cannot run */
  CHECK_STATUS(mok_gg_fp8_wgrad(NULL, NULL, 128, NULL, NULL, 128, NULL, 1, 0, 0, NULL, NULL, 1, 128,
                                128, 128, NULL, 0),
               MOK_ERR_INVALID_ARGUMENT);
  void *nz = (void *)16;
  CHECK_STATUS(mok_gg_fp8_wgrad(nz, (const float *)nz, 128, nz, (const float *)nz, 128, nz, 1, 0,
                                3, (const int32_t *)nz, (const int32_t *)nz, 1, 128, 128, 128, NULL,
                                0),
               MOK_ERR_INVALID_ARGUMENT);
  const mok_gg_launch wg2 = {0, 2, 0}, cl3 = {3, 0, 0};
  const struct { int expert_scales; int64_t m; const mok_gg_launch *l; } refused[] = {
      {2, 384, &pairs}, /* m % 256: the row tiles do not pair up */
      {0, 256, &pairs}, /* pairs on the rescaled path only */
      {1, 256, &pairs}, {2, 256, &wg2}, {2, 256, &cl3}};
  for (const auto &q : refused)
    CHECK_STATUS(mok_gg_fp8_wgrad(nz, (const float *)nz, q.m, nz, (const float *)nz, 128, nz, 1, 0,
                                  q.expert_scales, (const int32_t *)nz, (const int32_t *)nz, 1,
                                  128, q.m, 128, q.l, 0),
                 MOK_ERR_INVALID_ARGUMENT);
}

/* The rescaled FP8 weight gradient (B per expert, the layer's default) several ways, bit for
 * bit against the default launch (NULL), on odd, zero and tile-edge counts whose last blocks hold
 * 1 to 128 tokens (an expert's last block issues only its slices with real tokens), bf16 and fp32
 * out, poisoned outputs (every tile must be written). */
static void wgrad_bitwise(int64_t m, int64_t n, int nv, const mok_gg_launch *const *launches,
                          const char *const *names) {
  gg_rng r = {test_seed() ^ 0x51ce ^ (uint64_t)(m * n)};
  const int E = 12;
  gg_rows g = make_rows(&r, E, 700, 1);
  g.count[3] = 33; /* last blocks of 33, 64 + 1, 96 and 128 tokens besides the random ones */
  g.count[4] = 128 + 65;
  g.count[5] = 256 + 96;
  g.count[6] = 384;
  int32_t off = 0;
  for (int e = 0; e < E; ++e) {
    g.offset[e] = off;
    off += (g.count[e] + 127) / 128 * 128;
  }
  rows_close(g, off);
  std::vector<uint16_t> a(g.m_total * m), b(g.m_total * n);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, b, 3.0f);
  nan_padding(g, a, m);
  nan_padding(g, b, n);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  uint8_t *qa, *qb;
  float *sa, *sb;
  quant_t(g, a, m, &qa, &sa, doff, dcnt, 0);
  quant_t(g, b, n, &qb, &sb, doff, dcnt, 1);
  const size_t nw = (size_t)E * m * n;
  for (int fp32 = 0; fp32 < 2; ++fp32) {
    const size_t bytes = nw * (fp32 ? 4 : 2), es = fp32 ? 4 : 2;
    std::vector<uint8_t> ref(bytes), out(bytes);
    void *dw;
    CHECK(cudaMalloc(&dw, bytes) == cudaSuccess);
    for (int v = 0; v < nv; ++v) {
      cudaMemset(dw, 0xff, bytes); /* NaN in either width: every tile must be written */
      CHECK_STATUS(mok_gg_fp8_wgrad(qa, sa, m, qb, sb, n, dw, fp32, 0, 2, doff, dcnt, E,
                                    g.m_total, m, n, launches[v], 0),
                   MOK_SUCCESS);
      CUDA_OK(cudaDeviceSynchronize());
      cudaMemcpy((v ? out : ref).data(), dw, bytes, cudaMemcpyDeviceToHost);
      int64_t bad = 0; /* NaN in the default, or elements off it */
      for (size_t i = 0; i < nw; ++i) {
        if (v == 0) {
          const double x = fp32 ? ((const float *)ref.data())[i]
                                : bf2f(((const uint16_t *)ref.data())[i]);
          bad += x != x;
        } else {
          bad += memcmp(&ref[i * es], &out[i * es], es) != 0;
        }
      }
      printf("    fp8 wgrad m %lld n %lld, %s out, %s: %s %lld of %zu\n", (long long)m,
             (long long)n, fp32 ? "fp32" : "bf16", names[v],
             v ? "elements off the default" : "NaN", (long long)bad, nw);
      CHECK(bad == 0);
    }
    cudaFree(dw);
  }
  cudaFree(qa); cudaFree(qb); cudaFree(sa); cudaFree(sb); cudaFree(doff); cudaFree(dcnt);
}

/* Cluster pairs sharing B by multicast (the default where m splits into 256-row pairs) against
 * single CTAs, each loading its whole B tile, and both on a capped grid: with a last column tile
 * holding its left half only (n 640), and where an expert's column tiles hold two pairs each
 * (m 512). Then m 384 (no pairs): the default against single CTAs on 3 CTAs. */
static void test_gg_fp8_wgrad_pairs_bitwise(void) {
  const mok_gg_launch single = {1, 0, 0}, pairs = {2, 0, 0}, single5 = {1, 0, 5},
                      pairs5 = {2, 0, 5}, single3 = {1, 0, 3};
  const mok_gg_launch *const l4[] = {NULL, &single, &pairs, &single5, &pairs5};
  const char *const n4[] = {"default (pairs)", "single CTAs", "pairs", "single CTAs, 5 CTAs",
                            "pairs, 5 CTAs (4)"};
  wgrad_bitwise(256, 640, 5, l4, n4);
  wgrad_bitwise(512, 768, 3, l4, n4);
  const mok_gg_launch *const l2[] = {NULL, &single3};
  const char *const n2[] = {"default (single CTAs)", "single CTAs, 3 CTAs"};
  wgrad_bitwise(384, 256, 2, l2, n2);
}

/* The weight gradients' requantization of the forward's codes (mok_fp8_requant_t): the same
 * bytes, codes and scales, as dequantizing to bf16 and quantizing that along the tokens, on odd
 * and empty experts with NaN-poisoned padding rows; both outputs start from the same poison. */
static void test_gg_fp8_requant_t(void) {
  gg_rng r = {test_seed() ^ 0x7e9a};
  const int E = 6;
  const int64_t cols = 384;
  gg_rows g = make_rows(&r, E, 700, 1); /* experts past the quantizer's 4-block ring too */
  const int64_t m = g.m_total, mp = MOK_FP8_SCALE_ROWS(m), nb = mp / 128;
  std::vector<uint16_t> x(m * cols);
  fill_bf16(&r, x, 2.0f);
  nan_padding(g, x, cols);
  uint16_t *dx = to_dev(x), *dbf;
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  uint8_t *q, *qt[2];
  float *qs, *st[2];
  CUDA_OK(cudaMalloc((void **)&q, m * cols + 16));
  CUDA_OK(cudaMalloc((void **)&qs, (cols / 128) * mp * 4 + 16));
  CUDA_OK(cudaMalloc((void **)&dbf, m * cols * 2 + 16));
  for (int i = 0; i < 2; ++i) {
    CUDA_OK(cudaMalloc((void **)&qt[i], cols * mp + 16));
    CUDA_OK(cudaMalloc((void **)&st[i], nb * cols * 4 + 16));
  }
  float *amax;
  CUDA_OK(cudaMalloc((void **)&amax, E * cols * 4));
  CHECK_STATUS(mok_fp8_quant_act(dx, q, qs, m, cols, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_fp8_dequant_act(q, qs, dbf, m, cols, NULL, 0), MOK_SUCCESS);
  for (int ex = 0; ex < 2; ++ex) { /* 1x128 blocks; one scale per expert and column */
    float *ea = ex ? amax : NULL;
    for (int i = 0; i < 2; ++i) {
      cudaMemset(qt[i], 0x5a, cols * mp);
      cudaMemset(st[i], 0xa5, nb * cols * 4);
    }
    CHECK_STATUS(mok_fp8_quant_t(dbf, qt[0], st[0], ea, doff, dcnt, E, m, cols, 0),
                 MOK_SUCCESS);
    CHECK_STATUS(mok_fp8_requant_t(q, qs, qt[1], st[1], ea, doff, dcnt, E, m, cols, 0),
                 MOK_SUCCESS);
    CHECK_STATUS(mok_fp8_requant_t(q, NULL, qt[1], st[1], ea, doff, dcnt, E, m, cols, 0),
                 MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_fp8_requant_t(q, qs, qt[1], st[1], ea, doff, dcnt, E, m, 200, 0),
                 MOK_ERR_MISALIGNED);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> a = from_dev(qt[0], cols * mp), b = from_dev(qt[1], cols * mp);
    std::vector<float> sa = from_dev(st[0], nb * cols), sb = from_dev(st[1], nb * cols);
    const int same_q = memcmp(a.data(), b.data(), a.size()) == 0;
    const int same_s = memcmp(sa.data(), sb.data(), sa.size() * 4) == 0;
    int64_t written = 0; /* the fused kernel wrote something: not both still poisoned */
    for (size_t i = 0; i < b.size(); ++i) written += b[i] != 0x5a;
    printf("    requantized along the tokens (%s): codes %s, scales %s (%lld codes written)\n",
           ex ? "per expert" : "1x128", same_q ? "equal" : "DIFFER", same_s ? "equal" : "DIFFER",
           (long long)written);
    CHECK(same_q && same_s && written > (int64_t)(b.size() / 4));
  }
  cudaFree(amax);
  for (int i = 0; i < 2; ++i) { cudaFree(qt[i]); cudaFree(st[i]); }
  cudaFree(q); cudaFree(qs); cudaFree(dbf); cudaFree(dx); cudaFree(doff); cudaFree(dcnt);
}

/* ---- MXFP8 input: conversion to the 128-block recipe, then the FP8 GEMM -------------------- */
static uint8_t rand_e4m3(gg_rng *r) {
  uint8_t b;
  do b = (uint8_t)gg_below(r, 256); while ((b & 0x7f) == 0x7f); /* no NaN */
  return b;
}
static void test_gg_mxfp8_fwd(void) {
  gg_rng r = {test_seed() ^ 0x3333};
  const int E = 5;
  const int64_t n = 256, k = 512;
  gg_rows g = make_rows(&r, E, 300, 1);
  const int64_t m = g.m_total, mp = MOK_FP8_SCALE_ROWS(m);
  std::vector<uint8_t> qa(m * k), qw((size_t)E * n * k), sa(m * (k / 32)), sw((size_t)E * n * (k / 32));
  for (auto &b : qa) b = rand_e4m3(&r);
  for (auto &b : qw) b = rand_e4m3(&r);
  /* scales: mostly equal inside a 128-block (exact), sometimes a few powers of two apart */
  for (auto &b : sa) b = (uint8_t)(124 + gg_below(&r, 2) * gg_below(&r, 4));
  for (auto &b : sw) b = (uint8_t)(120 + gg_below(&r, 2) * gg_below(&r, 4));
  auto mx = [](uint8_t q, uint8_t e) { return e4m3_to_d(q) * ldexp(1.0, (int)e - 127); };
  uint8_t *dqa = to_dev(qa), *dqw = to_dev(qw), *dsa = to_dev(sa), *dsw = to_dev(sw), *oqa, *oqw;
  float *osa, *osw;
  cudaMalloc((void **)&oqa, m * k + 16);
  cudaMalloc((void **)&oqw, (size_t)E * n * k + 16);
  cudaMalloc((void **)&osa, (k / 128) * mp * 4 + 16);
  cudaMalloc((void **)&osw, (size_t)E * (n / 128) * (k / 128) * 4 + 16);
  CHECK_STATUS(mok_mxfp8_act_to_block128(dqa, dsa, oqa, osa, m, k, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_mxfp8_weight_to_block128(dqw, dsw, oqw, osw, E, n, k, 0), MOK_SUCCESS);
  std::vector<uint16_t> c(m * n, BF16_NAN);
  uint16_t *dc = to_dev(c);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CHECK_STATUS(mok_gg_fp8_fwd(oqa, osa, oqw, osw, dc, doff, dcnt, E, m, n, k, NULL, 0), MOK_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  /* the converted tensors represent the MX values (up to the documented rounding) */
  std::vector<uint8_t> cqa = from_dev(oqa, m * k), cqw = from_dev(oqw, (size_t)E * n * k);
  std::vector<float> csa = from_dev(osa, (k / 128) * mp), csw = from_dev(osw, (size_t)E * (n / 128) * (k / 128));
  relerr rc = {0, 0, 0};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j)
      rel_add(&rc, e4m3_to_d(cqa[i * k + j]) * csa[(j / 128) * mp + i], mx(qa[i * k + j], sa[i * (k / 32) + j / 32]));
  for (int64_t i = 0; i < E * n; ++i)
    for (int64_t j = 0; j < k; ++j)
      rel_add(&rc, e4m3_to_d(cqw[i * k + j]) * csw[(i / 128) * (k / 128) + j / 128],
              mx(qw[i * k + j], sw[i * (k / 32) + j / 32]));
  rel_check("mxfp8 -> block128 values", rc);
  c = from_dev(dc, c.size());
  relerr re = {0, 0, 0};
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < g.count[e]; ++i) {
      int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q)
          s += mx(qa[row * k + q], sa[row * (k / 32) + q / 32]) *
               mx(qw[((size_t)e * n + j) * k + q], sw[((size_t)e * n + j) * (k / 32) + q / 32]);
        rel_add(&re, bf2f(c[row * n + j]), s);
      }
    }
  rel_check("mxfp8 fwd vs MX reference", re);
  cudaFree(dqa); cudaFree(dqw); cudaFree(dsa); cudaFree(dsw); cudaFree(oqa); cudaFree(oqw);
  cudaFree(osa); cudaFree(osw); cudaFree(dc); cudaFree(doff); cudaFree(dcnt);
}

/* ---- bad arguments ----------------------------------------------------------------------- */
/* Refused with nothing launched: NULL operands, sizes, a push without its move, and the launch
 * choices a call cannot run (gemm.h: mok_gg_launch). The buffers hold every problem below, so a
 * launch that ran anyway would not fault; offsets and counts are zero (no rows). */
static void test_gg_bad_args(void) {
  int32_t *d = NULL;
  CHECK(cudaMalloc(&d, 1 << 20) == cudaSuccess);
  CHECK(cudaMemset(d, 0, 1 << 20) == cudaSuccess);
  float *f = (float *)d;
  CHECK_STATUS(mok_gg_bf16_fwd(NULL, d, d, d, d, 1, 128, 64, 64, NULL, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_bf16_fwd(d, d, d, d, d, 1, 128, 65, 64, NULL, 0), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_gg_bf16_fwd(d, d, d, d, d, 0, 128, 64, 64, NULL, 0), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_gg_bf16_gate_up_swiglu(d, d, d, d, NULL, d, d, 1, 128, 64, 64, 0, 0.f, NULL, 0),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_gg_bf16_wgrad(d, d, d, 0, 1, d, d, 1, 128, 64, 64, NULL, 0),
               MOK_ERR_INVALID_ARGUMENT);
  /* FP8: a push without its move, or a move that is not a push */
  CHECK_STATUS(mok_gg_fp8_fwd_pushed(d, f, d, f, d, d, d, 1, 128, 128, 128, NULL, NULL, 0),
               MOK_ERR_INVALID_ARGUMENT);
  mok_gg_move pull = {};
  CHECK_STATUS(mok_gg_fp8_fwd_pushed(d, f, d, f, d, d, d, 1, 128, 128, 128, &pull, NULL, 0),
               MOK_ERR_INVALID_ARGUMENT);
  /* launch choices: out of range for every call, then what one call cannot run */
  const mok_gg_launch cl2 = {2, 0, 0}, cl3 = {3, 0, 0}, cl_neg = {-1, 0, 0}, wg1 = {0, 1, 0},
                      wg2 = {0, 2, 0}, wg3 = {0, 3, 0}, wg4 = {0, 4, 0}, neg = {0, 0, -1};
  const mok_gg_launch *bad_all[] = {&cl3, &cl_neg, &wg1, &wg4, &neg};
  for (const mok_gg_launch *l : bad_all) {
    CHECK_STATUS(mok_gg_bf16_fwd(d, d, d, d, d, 1, 128, 64, 64, l, 0), MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_gg_fp8_fwd(d, f, d, f, d, d, d, 1, 128, 384, 128, l, 0),
                 MOK_ERR_INVALID_ARGUMENT);
  }
  /* BF16: no consumer-warpgroup choice; the weight gradient on single CTAs or pairs */
  const mok_gg_launch cl4 = {4, 0, 0};
  CHECK_STATUS(mok_gg_bf16_fwd(d, d, d, d, d, 1, 128, 64, 64, &wg2, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_bf16_dgrad(d, d, d, d, d, 1, 128, 64, 64, &wg3, 0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_bf16_wgrad(d, d, d, 1, 0, d, d, 1, 128, 64, 64, &cl4, 0),
               MOK_ERR_INVALID_ARGUMENT);
  /* FP8 products: single CTAs; warpgroups only on the 128-column kernel (n not in 256s) */
  CHECK_STATUS(mok_gg_fp8_fwd(d, f, d, f, d, d, d, 1, 128, 384, 128, &cl2, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_fwd(d, f, d, f, d, d, d, 1, 128, 256, 128, &wg3, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_fwd(d, f, d, f, d, d, d, 1, 128, 256, 128, &wg2, 0),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_gg_fp8_gate_up_swiglu(d, f, d, f, d, f, d, NULL, d, d, 1, 128, 128, 128, 0,
                                         0.f, &wg2, 0),
               MOK_ERR_INVALID_ARGUMENT);
  /* the same calls with choices they can run (no rows: nothing to compute; outputs past d's
   * offsets and counts) */
  const mok_gg_launch cl1 = {1, 0, 0};
  CHECK_STATUS(mok_gg_bf16_wgrad(d, d, d + 65536, 1, 0, d, d, 1, 128, 64, 64, &cl1, 0),
               MOK_SUCCESS);
  CHECK_STATUS(mok_gg_bf16_fwd(d, d, d + 65536, d, d, 1, 128, 64, 64, &cl2, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_gg_fp8_fwd(d, f, d, f, d + 65536, d, d, 1, 384, 384, 128, &wg3, 0),
               MOK_SUCCESS);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaFree(d);
}

static void test_gg_fwd_small(void) { run_fwd(6, 300, 384, 320, 1000); }
static void test_gg_fwd_many_tiles(void) { run_fwd(9, 1500, 1024, 1024, 40); }
static void test_gg_fwd_many_experts(void) { run_fwd(300, 40, 128, 64, 1000); }
static void test_gg_swiglu(void) { run_swiglu(5, 300, 256, 192, 0, 1, 1000); }
static void test_gg_swiglu_limit(void) { run_swiglu(7, 700, 384, 512, 1, 0, 40); }
static void test_gg_dgrad(void) { run_dgrad(6, 300, 320, 384, 1000); }
static void test_gg_dgrad_many_tiles(void) { run_dgrad(8, 1500, 512, 1024, 24); }
/* The same problems on single CTAs (each loading its whole B tile) and in cluster pairs sharing
 * it by multicast, through launches, against the reference. */
static const mok_gg_launch k_single = {1, 0, 0}, k_pairs = {2, 0, 0};
static void test_gg_fwd_cluster1(void) { run_fwd(9, 1500, 1024, 1024, 40, &k_single); }
static void test_gg_swiglu_cluster1(void) { run_swiglu(5, 300, 256, 192, 0, 1, 1000, &k_single); }
static void test_gg_dgrad_cluster1(void) { run_dgrad(6, 300, 320, 384, 1000, 0, &k_single); }
static void test_gg_fwd_cluster2(void) { run_fwd(9, 1500, 1024, 1024, 40, &k_pairs); }
static void test_gg_swiglu_cluster2(void) { run_swiglu(5, 300, 256, 192, 0, 1, 1000, &k_pairs); }
static void test_gg_dgrad_cluster2(void) {
  run_dgrad(6, 300, 320, 384, 1000, 0, &k_pairs);
  run_dgrad(6, 300, 512, 384, 1000, 1, &k_pairs);
}

/* Rows whose experts all have an odd number of row tiles (1 or 3: many leftover units), or all
 * an even number but the first (2 or 4: few) */
static gg_rows make_rows_tiles(gg_rng *r, int E, int odd) {
  gg_rows g = rows_open(E);
  int32_t off = 0;
  for (int e = 0; e < E; ++e) {
    const int tiles = odd || e == 0 ? 1 + 2 * gg_below(r, 2) : 2 + 2 * gg_below(r, 2);
    g.count[e] = (tiles - 1) * 128 + 1 + gg_below(r, 128);
    g.offset[e] = off;
    off += tiles * 128;
  }
  rows_close(g, off);
  return g;
}

/* BF16 single CTAs against cluster pairs bit for bit, and both on capped grids (5 CTAs: 2 pairs),
 * on the same data: every real row of the forward (n 768: a last column tile of one B half), of
 * gate+up's activations and pre-activations (with the clamp: the row-grouped kernel; without:
 * the tokens-on-N kernel), and of the pair dgrad. Cluster pairs claim their units from counters,
 * the library's or the caller's, which every launch leaves zero for the next (the row-grouped
 * kernel where the leftover units are many, gemm_plan.h: the rows come random, with many
 * leftovers and with few). Outputs start as NaN, so a row a launch skipped differs. */
static void clusters_bitwise(gg_rng &r, const gg_rows &g) {
  const int E = g.E;
  int tiles_odd = 0, tiles = 0;
  for (int e = 0; e < E; ++e) {
    const int t = (g.count[e] + 127) / 128;
    tiles += t;
    tiles_odd += t % 2;
  }
  printf("    %d experts, %d row tiles, %d an expert's odd last: the row-grouped pairs %s\n", E,
         tiles, tiles_odd,
         mok_gg_bf16_claims((tiles - tiles_odd) / 2, (tiles_odd + 1) / 2) ? "claim" : "walk");
  const int64_t n = 768, k = 512, inter = 384;
  std::vector<uint16_t> a(g.m_total * k), w((size_t)E * n * k), dc(g.m_total * n);
  fill_bf16(&r, a, 1.0f);
  fill_bf16(&r, w, 0.2f);
  fill_bf16(&r, dc, 1.0f);
  nan_padding(g, a, k);
  nan_padding(g, dc, n);
  uint16_t *da = to_dev(a), *dw = to_dev(w), *ddc = to_dev(dc);
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count), *tickets = NULL;
  CUDA_OK(cudaMalloc((void **)&tickets, MOK_GG_TICKET_INTS * 4));
  CUDA_OK(cudaMemset(tickets, 0, MOK_GG_TICKET_INTS * 4));
  const std::vector<uint16_t> nan_n(g.m_total * n, BF16_NAN), nan_k(g.m_total * k, BF16_NAN);
  const mok_gg_launch single5 = {1, 0, 5}, pairs5 = {2, 0, 5}, pairs_t = {2, 0, 0, tickets},
                      pairs3_t = {2, 0, 3, tickets};
  const mok_gg_launch *runs[] = {&k_single, &k_pairs, &single5, &pairs5, NULL, &pairs_t, &pairs3_t};
  const int nr = 7;
  std::vector<uint16_t> fwd[nr], act[nr], pre[nr], dgr[nr], actn[nr], pren[nr];
  for (int i = 0; i < nr; ++i) {
    uint16_t *c = to_dev(nan_n), *ac = to_dev(nan_n), *pr = to_dev(nan_n), *dx = to_dev(nan_k);
    uint16_t *acn = to_dev(nan_n), *prn = to_dev(nan_n);
    CHECK_STATUS(mok_gg_bf16_fwd(da, dw, c, doff, dcnt, E, g.m_total, n, k, runs[i], 0),
                 MOK_SUCCESS);
    /* gate and up: the two halves of w's rows, inter each, as [E, inter, k] */
    CHECK_STATUS(mok_gg_bf16_gate_up_swiglu(da, dw, dw + (size_t)E * inter * k, ac, pr, doff, dcnt,
                                            E, g.m_total, inter, k, 1, 0.5f, runs[i], 0),
                 MOK_SUCCESS);
    for (int rep = 0; rep < 2; ++rep) /* twice: the second launch finds the counters zero */
      CHECK_STATUS(mok_gg_bf16_gate_up_swiglu(da, dw, dw + (size_t)E * inter * k, acn, prn, doff,
                                              dcnt, E, g.m_total, inter, k, 0, 0.f, runs[i], 0),
                   MOK_SUCCESS);
    CHECK_STATUS(mok_gg_bf16_dgrad_pair(ddc, dw, dw + (size_t)E * inter * k, dx, doff, dcnt, E,
                                        g.m_total, inter, k, runs[i], 0),
                 MOK_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    fwd[i] = from_dev(c, nan_n.size());
    act[i] = from_dev(ac, (size_t)g.m_total * inter);
    pre[i] = from_dev(pr, (size_t)g.m_total * 2 * inter);
    actn[i] = from_dev(acn, (size_t)g.m_total * inter);
    pren[i] = from_dev(prn, (size_t)g.m_total * 2 * inter);
    dgr[i] = from_dev(dx, nan_k.size());
    cudaFree(c); cudaFree(ac); cudaFree(pr); cudaFree(dx); cudaFree(acn); cudaFree(prn);
  }
  const std::vector<int32_t> left = from_dev(tickets, MOK_GG_TICKET_INTS);
  int nonzero = 0;
  for (int32_t v : left) nonzero += v != 0;
  printf("    the caller's claim counters after the launches: %d of %d nonzero\n", nonzero,
         MOK_GG_TICKET_INTS);
  CHECK(nonzero == 0);
  int64_t nan_rows = 0;
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < g.count[e]; ++i) {
      const int64_t row = g.offset[e] + i;
      for (int64_t j = 0; j < n; ++j)
        if (fwd[0][row * n + j] == BF16_NAN) { ++nan_rows; break; }
      for (int64_t j = 0; j < inter; ++j)
        if (actn[0][row * inter + j] == BF16_NAN) { ++nan_rows; break; }
    }
  for (int i = 1; i < nr; ++i) {
    char ln[64];
    const int64_t d0 = rows_differ(g, fwd[0], fwd[i], n),
                  d1 = rows_differ(g, act[0], act[i], inter),
                  d2 = rows_differ(g, pre[0], pre[i], 2 * inter),
                  d3 = rows_differ(g, dgr[0], dgr[i], k),
                  d4 = rows_differ(g, actn[0], actn[i], inter),
                  d5 = rows_differ(g, pren[0], pren[i], 2 * inter);
    printf("    %s%s against single CTAs: rows differing fwd %lld, act %lld, preact %lld, dgrad "
           "pair %lld; without the limit act %lld, preact %lld\n", launch_name(runs[i], ln, sizeof ln),
           runs[i] && runs[i]->tickets ? " (the caller's counters)" : "", (long long)d0,
           (long long)d1, (long long)d2, (long long)d3, (long long)d4, (long long)d5);
    CHECK(d0 == 0 && d1 == 0 && d2 == 0 && d3 == 0 && d4 == 0 && d5 == 0);
  }
  CHECK(nan_rows == 0);
  cudaFree(da); cudaFree(dw); cudaFree(ddc); cudaFree(doff); cudaFree(dcnt); cudaFree(tickets);
}

static void test_gg_bf16_clusters_bitwise(void) {
  gg_rng r = {test_seed() ^ 0xb1c2};
  clusters_bitwise(r, make_rows(&r, 9, 900, 1));
  clusters_bitwise(r, make_rows_tiles(&r, 9, 1));
  clusters_bitwise(r, make_rows_tiles(&r, 9, 0));
}

/* the determinism check's second run on single CTAs (explicitly) capped at 7 */
static const mok_gg_launch k_single7 = {1, 0, 7};
static void test_gg_wgrad_fp32(void) { run_wgrad(6, 300, 192, 320, 1, 0, 0, 0, &k_single7); }
static void test_gg_wgrad_bf16(void) { run_wgrad(5, 200, 256, 256, 0, 0, 0, 0, &k_single7); }
static void test_gg_wgrad_accumulate(void) { run_wgrad(4, 700, 128, 512, 1, 1); }
static void test_gg_wgrad_strided(void) { run_wgrad(5, 300, 256, 320, 1, 0, 1); }
/* bf16 out (the TMA-store epilogue): strided, dW rows not a multiple of the 128-row tile, and more
 * experts than one launch holds (the store's row coordinate carries the launch's first expert) */
static void test_gg_wgrad_bf16_strided(void) { run_wgrad(6, 300, 192, 320, 0, 0, 1); }
static void test_gg_wgrad_bf16_many_experts(void) { run_wgrad(300, 40, 192, 128, 0, 0); }
/* experts at count -1 (a ring view's others) keep their gradient, in bf16 and fp32 accumulation */
static void test_gg_wgrad_skip(void) {
  run_wgrad(7, 300, 256, 256, 0, 0, 0, 1);
  run_wgrad(7, 300, 128, 320, 1, 1, 0, 1);
}
/* dW rows past one unit's chunk of row tiles (10 and 9.5 tiles: a second, short chunk, its last
 * tile half past wn), experts of at most four blocks (the activation tile kept for the chunk)
 * beside experts of more (single tiles), bf16 and fp32 accumulation, some at count -1 */
static void test_gg_wgrad_chunks(void) {
  run_wgrad(6, 420, 1216, 320, 0, 0, 0, 0, &k_single7);
  run_wgrad(5, 420, 1280, 256, 1, 1, 0, 1);
}
/* experts of seven or eight blocks (make_rows' fourth) beside shorter and longer ones in one
 * launch, 10 column tiles (the last 64 columns wide) and 2.5 row tiles (the last half past wn),
 * bf16 and fp32 accumulation, some at count -1 */
static void test_gg_wgrad_wide(void) {
  run_wgrad(7, 560, 320, 2368, 0, 0, 0, 0, &k_single7);
  run_wgrad(6, 560, 320, 2368, 1, 1, 1, 1);
}
/* In cluster pairs, the second run of each, bitwise against the first on single CTAs (and the
 * first against the reference): experts of at most four blocks (a unit's row tiles split between
 * the two CTAs, the activation blocks loaded once for both) beside experts of more (units of two
 * tiles, one a CTA), dW row tiles odd in number (1216 rows: 9.5; 320: 2.5, the last unit's second
 * CTA without a tile), bf16 and fp32 accumulation, strided, some experts at count -1, a capped
 * grid (5 CTAs: 2 pairs). */
static const mok_gg_launch k_wpairs = {2, 0, 0}, k_wpairs5 = {2, 0, 5};
static void test_gg_wgrad_pairs(void) {
  run_wgrad(6, 420, 1216, 320, 0, 0, 0, 0, &k_wpairs);
  run_wgrad(5, 420, 1280, 256, 1, 1, 0, 1, &k_wpairs5);
  run_wgrad(7, 560, 320, 2368, 0, 0, 1, 1, &k_wpairs);
  run_wgrad(6, 300, 192, 320, 1, 0, 0, 0, &k_wpairs5);
}
/* mok_zero_tail_rows: exactly each expert's tail rows (below m_total; none for count -1) become
 * zero in every buffer, each with its own ld and cols; every other element keeps its bits. */
static void test_gg_zero_tail_rows(void) {
  gg_rng r = {test_seed() ^ 0x7a11};
  gg_rows g = make_rows(&r, 9, 300, 1);
  g.count[4] = -1;                                       /* a ring view's other expert */
  g.count[8] = 5;                                       /* the last expert's tail ... */
  g.m_total = g.offset[8] + 12;                         /* ... cut by m_total          */
  const int64_t ld[2] = {200, 64}, cols[2] = {192, 48};
  std::vector<uint16_t> h[2];
  uint16_t *d[2];
  mok_tail_buf b[2];
  for (int i = 0; i < 2; ++i) {
    h[i].resize(g.m_total * ld[i]);
    fill_bf16(&r, h[i], 1.0f);
    d[i] = to_dev(h[i]);
    CHECK(d[i] != NULL);
    if (!d[i]) return;
    b[i] = mok_tail_buf{d[i], ld[i], cols[i]};
  }
  int32_t *doff = to_dev(g.offset), *dcnt = to_dev(g.count);
  CUDA_OK(mok_zero_tail_rows(doff, dcnt, g.E, g.m_total, b, 2, 0));
  CUDA_OK(cudaDeviceSynchronize());
  long wrong = 0, zeroed = 0;
  for (int i = 0; i < 2; ++i) {
    std::vector<uint16_t> got = from_dev(d[i], h[i].size());
    for (int64_t row = 0; row < g.m_total; ++row) {
      int tail = 0;
      for (int e = 0; e < g.E; ++e)
        tail |= g.count[e] >= 0 && row >= g.offset[e] + g.count[e] &&
                row < g.offset[e] + (g.count[e] + 15) / 16 * 16;
      for (int64_t c = 0; c < ld[i]; ++c) {
        const uint16_t want = tail && c < cols[i] ? 0 : h[i][row * ld[i] + c];
        wrong += got[row * ld[i] + c] != want;
        zeroed += tail && c < cols[i];
      }
    }
    cudaFree(d[i]);
  }
  printf("    %ld elements zeroed, %ld wrong\n", zeroed, wrong);
  CHECK(wrong == 0 && zeroed > 0);
  mok_tail_buf odd = {d[0], 200, 100}; /* cols not a multiple of 8 */
  CHECK(mok_zero_tail_rows(doff, dcnt, g.E, g.m_total, &odd, 1, 0) == cudaErrorInvalidValue);
  cudaGetLastError();
  cudaFree(doff); cudaFree(dcnt);
}
static void test_gg_dgrad_pair(void) { run_dgrad(6, 300, 512, 384, 1000, 1); }
static void test_gg_dgrad_pair_many(void) { run_dgrad(7, 1200, 768, 1024, 24, 1); }

extern "C" const test_case gg_test_cases[] = {
    {"gg_bad_args", test_gg_bad_args},
    {"gg_fp8_mlp_one_launch", test_gg_fp8_mlp_one_launch},
    {"gg_fwd_small", test_gg_fwd_small},
    {"gg_fwd_many_tiles", test_gg_fwd_many_tiles},
    {"gg_fwd_many_experts", test_gg_fwd_many_experts},
    {"gg_swiglu", test_gg_swiglu},
    {"gg_swiglu_limit", test_gg_swiglu_limit},
    {"gg_dgrad", test_gg_dgrad},
    {"gg_dgrad_many_tiles", test_gg_dgrad_many_tiles},
    {"gg_fwd_cluster1", test_gg_fwd_cluster1},
    {"gg_swiglu_cluster1", test_gg_swiglu_cluster1},
    {"gg_dgrad_cluster1", test_gg_dgrad_cluster1},
    {"gg_fwd_cluster2", test_gg_fwd_cluster2},
    {"gg_swiglu_cluster2", test_gg_swiglu_cluster2},
    {"gg_dgrad_cluster2", test_gg_dgrad_cluster2},
    {"gg_bf16_clusters_bitwise", test_gg_bf16_clusters_bitwise},
    {"gg_fp8_fwd_small", test_gg_fp8_fwd_small},
    {"gg_fp8_fwd_many_tiles", test_gg_fp8_fwd_many_tiles},
    {"gg_fp8_fwd_long_k", test_gg_fp8_fwd_long_k},
    {"gg_fp8_swiglu", test_gg_fp8_swiglu},
    {"gg_fp8_swiglu_limit", test_gg_fp8_swiglu_limit},
    {"gg_fp8_many_experts", test_gg_fp8_many_experts},
    {"gg_fp8_warpgroups", test_gg_fp8_warpgroups},
    {"gg_fp8_exact_capacity", test_gg_fp8_exact_capacity},
    {"gg_fp8_extreme_scales", test_gg_fp8_extreme_scales},
    {"gg_fp8_quantize_rows", test_gg_fp8_quantize_rows},
    {"gg_fp8_swiglu_quantized", test_gg_fp8_swiglu_quantized},
    {"gg_fp8_layout", test_gg_fp8_layout},
    {"gg_fp8_wgrad", test_gg_fp8_wgrad},
    {"gg_fp8_wgrad_pairs_bitwise", test_gg_fp8_wgrad_pairs_bitwise},
    {"gg_fp8_requant_t", test_gg_fp8_requant_t},
    {"gg_mxfp8_fwd", test_gg_mxfp8_fwd},
    {"gg_wgrad_fp32", test_gg_wgrad_fp32},
    {"gg_wgrad_bf16", test_gg_wgrad_bf16},
    {"gg_wgrad_accumulate", test_gg_wgrad_accumulate},
    {"gg_wgrad_strided", test_gg_wgrad_strided},
    {"gg_wgrad_bf16_strided", test_gg_wgrad_bf16_strided},
    {"gg_wgrad_bf16_many_experts", test_gg_wgrad_bf16_many_experts},
    {"gg_wgrad_skip", test_gg_wgrad_skip},
    {"gg_wgrad_chunks", test_gg_wgrad_chunks},
    {"gg_wgrad_wide", test_gg_wgrad_wide},
    {"gg_wgrad_pairs", test_gg_wgrad_pairs},
    {"gg_zero_tail_rows", test_gg_zero_tail_rows},
    {"gg_dgrad_pair", test_gg_dgrad_pair},
    {"gg_dgrad_pair_many", test_gg_dgrad_pair_many},
};
extern "C" const int gg_test_case_count = (int)(sizeof gg_test_cases / sizeof gg_test_cases[0]);

/* Weak: a GPU test binary with its own main() registers gg_test_cases there instead. */
__attribute__((weak)) int main(int argc, char **argv) {
  return test_run_all(gg_test_cases, gg_test_case_count, argc, argv);
}
