/* test_fp8.c — E4M3 conversion (exact values, ties to even, saturation, subnormals, NaN, nearest
 * over every code), block and column quantization's error bounds, MXFP8's scale rule, quantizer
 * and 1x128 conversion loss, and the reference's FP8 modes (forward, backward, FP8 weight
 * gradients). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mok_reference.h"
#include "kernels/common/mx_scale.h"
#include "reference/ref_problem.h"
#include "tests/tests.h"
#include "tests/test_util.h"

void test_fp8_e4m3(void) {
  CHECK(mok_e4m3_from_float(1.0f) == 0x38);
  CHECK(mok_e4m3_from_float(0.5f) == 0x30);
  CHECK(mok_e4m3_from_float(448.0f) == 0x7e);
  CHECK(mok_e4m3_from_float(-448.0f) == 0xfe);
  CHECK(mok_e4m3_from_float(500.0f) == 0x7e);       /* saturates */
  CHECK(mok_e4m3_from_float(1e30f) == 0x7e);
  CHECK(mok_e4m3_from_float(0x1p-9f) == 0x01);      /* smallest subnormal */
  CHECK(mok_e4m3_from_float(0x1p-10f) == 0x00);     /* halfway to 0: ties to even */
  CHECK(mok_e4m3_from_float(3 * 0x1p-10f) == 0x02); /* 1.5 quanta: to 2 */
  CHECK(mok_e4m3_from_float(1.0625f) == 0x38);      /* halfway 1 and 1.125: to 1 (even) */
  CHECK(mok_e4m3_from_float(1.1875f) == 0x3a);      /* halfway 1.125 and 1.25: to 1.25 */
  CHECK(mok_e4m3_from_float(-0.0f) == 0x80);
  CHECK(mok_e4m3_from_float(NAN) == 0x7f && isnan(mok_e4m3_to_float(0x7f)));
  CHECK(mok_e4m3_to_float(0x7e) == 448.0f && mok_e4m3_to_float(0x08) == 0x1p-6f);
  /* every finite code survives the round trip */
  int bad = 0;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    if (mok_e4m3_from_float(mok_e4m3_to_float((uint8_t)b)) != b) ++bad;
  }
  CHECK(bad == 0);
  /* the rounding is to the nearest code (ties to the even mantissa), by brute force */
  uint64_t rng = test_seed() | 1;
  bad = 0;
  for (int i = 0; i < 20000; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(rng >> 11) * 0x1p-53;
    const float v = (float)((u * 2 - 1) * ldexp(1.0, (int)(rng % 19) - 10)); /* 2^-10 .. 2^8 */
    const float r = mok_e4m3_round(v);
    const double dr = fabs((double)r - v);
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7f) == 0x7f) continue;
      const double dc = fabs((double)mok_e4m3_to_float((uint8_t)b) - v);
      if (dc < dr) { ++bad; break; }
      if (dc == dr && mok_e4m3_to_float((uint8_t)b) != r && (mok_e4m3_from_float(r) & 1)) { ++bad; break; }
    }
  }
  CHECK(bad == 0);
}

void test_fp8_block_quantization(void) {
  uint64_t rng = test_seed() ^ 0x5151;
  const int64_t E = 2, n = 256, k = 384, nw = E * n * k;
  float *w = malloc(sizeof(float) * nw), *back = malloc(sizeof(float) * nw);
  uint8_t *q = malloc((size_t)nw);
  float *scales = malloc(sizeof(float) * E * (n / 128) * (k / 128));
  for (int64_t i = 0; i < nw; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    w[i] = mok_bf16_round((float)(((double)(rng >> 11) * 0x1p-53 * 2 - 1) * 0.05));
  }
  for (int64_t i = 0; i < 128; ++i) w[(n - 1) * k + 128 + i] = 0.0f; /* a row of a block at zero */
  for (int64_t r = 0; r < 128; ++r)                                   /* a whole block at zero */
    for (int64_t c = 0; c < 128; ++c) w[(n + r) * k + c] = 0.0f;
  mok_fp8_quantize_weight_block128(w, E, n, k, q, scales);
  mok_fp8_dequantize_weight_block128(q, scales, E, n, k, back);
  int bad = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = (e * n + r) * k + c;
        const float s = scales[(e * (n / 128) + r / 128) * (k / 128) + c / 128];
        const double err = fabs((double)back[i] - w[i]);
        if (err > fmax(fabs(w[i]) / 16.0, s * 0x1p-10) * (1 + 1e-6)) ++bad;
      }
  CHECK(bad == 0);
  CHECK(scales[(1 * (n / 128) + 0) * (k / 128) + 0] == 1.0f); /* the all-zero block */
  /* a row: the block maximum maps to 448 codes and comes back within one float rounding */
  float row[256], out[256];
  for (int i = 0; i < 256; ++i) row[i] = mok_bf16_round((float)sin(0.37 * i) * (i < 128 ? 3.0f : 0.01f));
  mok_fp8_fake_quantize_row(row, 256, out);
  for (int b = 0; b < 2; ++b) {
    float amax = 0, omax = 0;
    for (int i = 0; i < 128; ++i) {
      amax = fmaxf(amax, fabsf(row[b * 128 + i]));
      omax = fmaxf(omax, fabsf(out[b * 128 + i]));
    }
    CHECK(fabs(omax - amax) <= 1e-6 * amax);
  }
  free(w); free(back); free(q); free(scales);
}

/* The reference's FP8 forward: close to BF16 (within E4M3's precision), not equal (the
 * quantization happens). */
void test_fp8_reference_forward(void) {
  mok_shape s = {6, 128, 4, 128, 2, 128};
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, &s, 2, MOK_ROUTE_UNIFORM, test_seed()), MOK_SUCCESS);
  p.cfg.round_bf16 = 1;
  const int64_t n = s.tokens * s.hidden;
  float *bf[2] = {malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, bf), MOK_SUCCESS);
  p.cfg.fp8_block128 = 1;
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_SUCCESS);
  for (int r = 0; r < 2; ++r) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      num += ((double)p.y[r][i] - bf[r][i]) * ((double)p.y[r][i] - bf[r][i]);
      den += (double)bf[r][i] * bf[r][i];
    }
    const double e = sqrt(num / den);
    CHECK(e > 1e-4 && e < 0.1);
    free(bf[r]);
  }
  p.cfg.shape.hidden = 64; /* FP8 blocks need multiples of 128 */
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_ERR_MISALIGNED);
  p.cfg.shape.hidden = 128;
  mok_ref_problem_free(&p);
}

/* Both ranks' eight gradients of p's backward under its current config, into fresh buffers g[r][i]
 * of n[i] floats: dx, d_rw, the routed gate / up / down, the shared gate / up / down (NULL
 * without a shared expert). Two ranks, as every problem below. */
static void ref_backward_into(mok_ref_problem *p, const mok_shape *s, int64_t n[8], float *g[2][8]) {
  const int64_t T = s->tokens, H = s->hidden, I = s->intermediate, Is = s->shared_intermediate;
  const int64_t el = s->num_experts / 2;
  const int64_t len[8] = {T * H, T * s->top_k, el * I * H, el * I * H, el * H * I, Is * H, Is * H,
                          H * Is};
  mok_ref_grads rg[2];
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 8; ++i) {
      n[i] = len[i];
      g[r][i] = len[i] > 0 ? malloc(sizeof(float) * (size_t)len[i]) : NULL;
    }
    mok_ref_grads t = {g[r][0], g[r][1], g[r][2], g[r][3], g[r][4], g[r][5], g[r][6], g[r][7]};
    rg[r] = t;
  }
  CHECK_STATUS(mok_ref_backward(&p->cfg, p->ranks, (const float *const *)p->dy, rg), MOK_SUCCESS);
}

/* Two ranks of uniform routing on shape s, the reference in its FP8 (block-128) mode with the
 * GPU's bf16 roundings. */
static void fp8_problem(mok_ref_problem *p, const mok_shape *s) {
  CHECK_STATUS(mok_ref_problem_make(p, s, 2, MOK_ROUTE_UNIFORM, test_seed()), MOK_SUCCESS);
  p->cfg.round_bf16 = 1;
  p->cfg.fp8_block128 = 1;
}

static void ref_grads_free(float *g[2][8]) {
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 8; ++i) free(g[r][i]);
}

static int same_floats(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* The reference's FP8 backward: every routed gradient close to BF16's (within E4M3's precision)
 * and not equal to it; the shared expert's weight gradients (the shared expert stays BF16) equal
 * BF16's bit for bit. */
void test_fp8_reference_backward(void) {
  /* 40 tokens: every rank's experts get rows (with 6, a rank's two experts sometimes got none,
   * its weight gradients were all zero in both modes and "not equal" failed) */
  mok_shape s = {40, 256, 4, 128, 2, 128};
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, &s, 2, MOK_ROUTE_UNIFORM, test_seed()), MOK_SUCCESS);
  p.cfg.round_bf16 = 1;
  int64_t n[8];
  float *bf[2][8], *f8[2][8];
  ref_backward_into(&p, &s, n, bf);
  p.cfg.fp8_block128 = 1;
  ref_backward_into(&p, &s, n, f8);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 5; ++i) {
      const double e = rel_error(f8[r][i], bf[r][i], n[i]);
      CHECK(e > 1e-4 && e < 0.1);
    }
    for (int i = 5; i < 8; ++i) CHECK(same_floats(f8[r][i], bf[r][i], n[i]));
  }
  ref_grads_free(bf);
  ref_grads_free(f8);
  mok_ref_problem_free(&p);
}

/* The FP8 shared expert (fp8_shared): the backward's routed weight gradients and d_rw stay bit for
 * bit (the shared expert does not feed them) while dx and the shared weight gradients move, within
 * E4M3's precision; with the router weights zero, y is the shared expert alone and equals the FP8
 * MLP written out here (x and the activations quantized 1x128, the activation from the unrounded
 * pre-activations, the bf16 roundings the GPU makes). */
void test_fp8_reference_shared(void) {
  mok_shape s = {40, 256, 4, 128, 2, 256};
  const int64_t T = s.tokens, H = s.hidden, Is = s.shared_intermediate;
  mok_ref_problem p;
  fp8_problem(&p, &s);
  int64_t n[8];
  float *bf[2][8], *f8[2][8];
  ref_backward_into(&p, &s, n, bf);
  p.cfg.fp8_shared = 1;
  ref_backward_into(&p, &s, n, f8);
  for (int r = 0; r < 2; ++r) {
    for (int i = 1; i < 5; ++i) CHECK(same_floats(f8[r][i], bf[r][i], n[i]));
    const int moved[4] = {0, 5, 6, 7};
    for (int j = 0; j < 4; ++j) {
      const double e = rel_error(f8[r][moved[j]], bf[r][moved[j]], n[moved[j]]);
      CHECK(e > 1e-4 && e < 0.1);
    }
  }
  ref_grads_free(bf);
  ref_grads_free(f8);

  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < T * s.top_k; ++i) ((float *)p.ranks[r].router_weights)[i] = 0.0f;
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_SUCCESS);
  float *qx = malloc(sizeof(float) * H), *qa = malloc(sizeof(float) * Is);
  int bad = 0;
  for (int r = 0; r < 2; ++r) {
    const mok_ref_rank *in = &p.ranks[r];
    for (int64_t t = 0; t < T; ++t) {
      mok_fp8_fake_quantize_row(in->x + t * H, H, qx);
      for (int64_t i = 0; i < Is; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += (double)in->ws_gate[i * H + h] * qx[h];
          u += (double)in->ws_up[i * H + h] * qx[h];
        }
        qa[i] = mok_bf16_round((float)(g / (1.0 + exp(-g)) * u));
      }
      mok_fp8_fake_quantize_row(qa, Is, qa);
      for (int64_t h = 0; h < H; ++h) {
        double o = 0;
        for (int64_t i = 0; i < Is; ++i) o += (double)in->ws_down[h * Is + i] * qa[i];
        if (p.y[r][t * H + h] != mok_bf16_round((float)o)) ++bad;
      }
    }
  }
  CHECK(bad == 0);
  free(qx);
  free(qa);
  p.cfg.shape.shared_intermediate = 64; /* FP8 blocks need multiples of 128 */
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_ERR_MISALIGNED);
  p.cfg.shape.shared_intermediate = Is;
  mok_ref_problem_free(&p);
}

/* Quantization along the rows (the FP8 weight gradients' operands): blocks of 128 rows per
 * column, a short last block on its own rows only; each block's largest magnitude is kept (the
 * code 448 times the scale, to float rounding), the rest within E4M3's step; an all-zero column stays
 * zero; columns do not mix. */
void test_fp8_quantize_columns(void) {
  const int64_t rows = 300, cols = 3;
  float *x = malloc(sizeof(float) * rows * cols), *q = malloc(sizeof(float) * rows * cols);
  mok_rng r = mok_rng_for(test_seed(), 7);
  for (int64_t i = 0; i < rows; ++i) {
    x[i * cols + 0] = (float)(mok_rng_uniform(&r) * 2 - 1);
    x[i * cols + 1] = 0.0f;
    x[i * cols + 2] = (float)((mok_rng_uniform(&r) * 2 - 1) * (i < 256 ? 1e-3 : 50.0));
  }
  memcpy(q, x, sizeof(float) * rows * cols);
  mok_fp8_fake_quantize_columns(q, rows, cols, 128);
  int bad = 0;
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < rows; b += 128) {
      const int64_t n = rows - b < 128 ? rows - b : 128;
      float amax = 0.0f;
      for (int64_t i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[(b + i) * cols + c]));
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[(b + i) * cols + c], got = q[(b + i) * cols + c];
        if (fabsf(v) == amax && fabsf(got - v) > amax * 1e-6f) ++bad; /* the maximum: 448 * scale */
        if (fabsf(got - v) > fabsf(v) / 15.0f + amax * 0x1p-17f) ++bad; /* within E4M3's step */
      }
    }
  for (int64_t i = 0; i < rows; ++i) bad += q[i * cols + 1] != 0.0f;
  /* the small rows of column 2 keep their precision: the large last block does not set their scale */
  for (int64_t i = 0; i < 256; ++i) bad += fabsf(q[i * cols + 2] - x[i * cols + 2]) > 1e-4f;
  CHECK(bad == 0);
  /* one block of all the rows (one scale per column): the column's largest magnitude kept, every
   * value within E4M3's step of the column's scale; column 2's small rows now share the large
   * rows' scale and lose most of their digits */
  memcpy(q, x, sizeof(float) * rows * cols);
  mok_fp8_fake_quantize_columns(q, rows, cols, rows);
  int lost = 0;
  for (int64_t c = 0; c < cols; ++c) {
    float amax = 0.0f;
    for (int64_t i = 0; i < rows; ++i) amax = fmaxf(amax, fabsf(x[i * cols + c]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t i = 0; i < rows; ++i) {
      const float v = x[i * cols + c], got = q[i * cols + c];
      if (fabsf(v) == amax && fabsf(got - v) > amax * 1e-6f) ++bad;
      if (fabsf(got - v) > fabsf(v) / 15.0f + scale * 0x1p-9f) ++bad;
      lost += c == 2 && i < 256 && fabsf(got - v) > fabsf(v) / 15.0f; /* past E4M3's step */
    }
  }
  if (bad || lost <= 100) printf("  bad %d, lost %d of 256\n", bad, lost);
  CHECK(bad == 0 && lost > 100);
  free(x);
  free(q);
}

/* The reference's FP8 weight-gradient modes (1x128 blocks along the tokens; one scale per expert
 * and column; that for the activations and inputs only): the data gradients (dx, d_rw) and the
 * shared expert's weight gradients are those of the FP8 mode bit for bit; the routed weight
 * gradients differ (their operands are also quantized along the tokens) by E4M3's precision. */
void test_fp8_reference_wgrad(void) {
  mok_shape s = {150, 256, 4, 128, 2, 128}; /* 150 tokens, k 2: experts with >128 rows */
  mok_ref_problem p;
  fp8_problem(&p, &s);
  int64_t n[8];
  float *un[2][8], *fw[2][8];
  ref_backward_into(&p, &s, n, un);
  for (int mode = 1; mode <= 3; ++mode) { /* 1x128 blocks; one scale per expert and column; so
                                              for the activations and inputs only */
    p.cfg.fp8_wgrad = mode;
    ref_backward_into(&p, &s, n, fw);
    for (int r = 0; r < 2; ++r) {
      for (int i = 2; i < 5; ++i) {
        const double e = rel_error(fw[r][i], un[r][i], n[i]);
        if (r == 0)
          printf("    fp8 weight gradients, mode %d: dW %d vs unquantized %.3e\n", mode, i, e);
        CHECK(e > 1e-3 && e < 0.06);
      }
      for (int i = 0; i < 8; ++i)
        if (i < 2 || i >= 5) CHECK(same_floats(fw[r][i], un[r][i], n[i]));
    }
    ref_grads_free(fw);
  }
  ref_grads_free(un);
  mok_ref_problem_free(&p);
}

/* The reference's fused router-weight gradient (fp8_fused_drw: d_rw = g . act inside the SwiGLU
 * backward, g from the unweighted dy quantized): the data and weight gradients within E4M3's
 * precision of the unfused mode's (the same quantities, rounded at other places; dx measured up
 * to 3.0e-2 apart), d_rw somewhat wider (the fused one reads dy through its E4M3 quantization, the
 * unfused one in bf16 against the output: measured up to 3.3e-2 apart), dW_down bit for bit (its
 * operands do not change), and d_rw not bit for bit (the other formula ran). */
void test_fp8_reference_fused_drw(void) {
  mok_shape s = {40, 256, 4, 128, 2, 0};
  mok_ref_problem p;
  fp8_problem(&p, &s);
  int64_t n[8];
  float *un[2][8], *fu[2][8];
  ref_backward_into(&p, &s, n, un);
  p.cfg.fp8_fused_drw = 1;
  ref_backward_into(&p, &s, n, fu);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) {
      const double e = rel_error(fu[r][i], un[r][i], n[i]), bound = i == 1 ? 8e-2 : 5e-2;
      if (!(e < bound)) fprintf(stderr, "  gradient %d of rank %d: %.3e\n", i, r, e);
      CHECK(e < bound);
    }
    CHECK(same_floats(fu[r][4], un[r][4], n[4]));
    CHECK(!same_floats(fu[r][1], un[r][1], n[1]));
  }
  ref_grads_free(un);
  ref_grads_free(fu);
  mok_ref_problem_free(&p);
}

/* MXFP8: the E8M0 scale rule (kernels/common/mx_scale.h) against frexp over random magnitudes,
 * subnormals and the edges; the reference quantizer's codes are its definition on fresh random
 * blocks of varied magnitude (every value's E4M3 code of value / scale, the error bounded by half
 * a quantum or the saturation); NaN and infinity poison only their block; the 1x128 conversion's
 * loss: none with equal scales, counted exactly where a smaller-scaled block loses low bits; the
 * weights' 128x128 conversion within its bound, NaN scales poisoning only their block. */
void test_fp8_mxfp8(void) {
  CHECK(mok_mx_scale_code(448.0f) == 127 && mok_mx_scale_value(127) == 1.0f);
  CHECK(mok_mx_scale_code(1.0f) == 119);           /* 2^-8: 1 / scale = 256 */
  CHECK(mok_mx_scale_code(511.0f) == 127);         /* 511 -> saturates to 448 */
  CHECK(mok_mx_scale_code(512.0f) == 128);
  CHECK(mok_mx_scale_code(0.0f) == 0 && mok_mx_scale_code(-0.0f) == 0);
  CHECK(mok_mx_scale_code(NAN) == 0xFF && mok_mx_scale_code(INFINITY) == 0xFF);
  CHECK(mok_mx_scale_code(0x1p-149f) == 0);        /* clamped to 2^-127 */
  CHECK(mok_mx_scale_code(FLT_MAX) == 127 + 127 - 8);
  CHECK(isnan(mok_mx_scale_value(0xFF)) && isnan(mok_mx_scale_inverse(0xFF)));
  int bad = 0;
  for (int c = 0; c < 255; ++c) { /* every code's value and its exact inverse */
    const double v = mok_mx_scale_value((uint8_t)c), inv = mok_mx_scale_inverse((uint8_t)c);
    if (v != ldexp(1.0, c - 127) || inv != ldexp(1.0, 127 - c)) ++bad;
  }
  CHECK(bad == 0);
  mok_rng rng = mok_rng_for(test_seed(), 38);
  bad = 0;
  for (int t = 0; t < 200000; ++t) { /* floor(log2) from the bits, normals and subnormals */
    uint32_t u = (uint32_t)mok_rng_next(&rng) & 0x7fffffffu;
    if (t % 4 == 0) u &= 0x007fffffu; /* a subnormal */
    if (u == 0 || u >= 0x7f800000u) continue;
    float a;
    memcpy(&a, &u, 4);
    int e;
    frexp((double)a, &e);
    if (mok_mx_floor_log2(a) != e - 1) ++bad;
    int want = e - 1 - 8 + 127;
    want = want < 0 ? 0 : want > 254 ? 254 : want;
    if (mok_mx_scale_code(a) != want) ++bad;
  }
  CHECK(bad == 0);

  enum { ROWS = 16, K = 256 };
  static float x[ROWS * K], y[ROWS * K];
  static uint8_t q[ROWS * K], s[ROWS * K / 32];
  for (int i = 0; i < ROWS * K; ++i) /* magnitudes spanning 2^-20 .. 2^20 across blocks */
    x[i] = (float)((2.0 * mok_rng_uniform(&rng) - 1.0) * ldexp(1.0, (i / 32) % 41 - 20));
  x[5] = 0.0f;
  for (int i = 64; i < 96; ++i) x[i] = 0.0f; /* an all-zero block */
  mok_mxfp8_quantize_rows(x, ROWS, K, q, s);
  mok_mxfp8_dequantize_rows(q, s, ROWS, K, y);
  bad = 0;
  for (int b = 0; b < ROWS * K / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
    if (s[b] != mok_mx_scale_code(amax)) ++bad;
    const double sc = ldexp(1.0, (int)s[b] - 127);
    for (int i = 0; i < 32; ++i) {
      const double v = x[b * 32 + i], d = y[b * 32 + i];
      if (q[b * 32 + i] != mok_e4m3_from_float((float)(v / sc))) ++bad;
      /* within half an E4M3 quantum (relative 2^-4, or 2^-10 x scale in the subnormals), or
       * saturated at 448 x scale */
      const double tol = fmax(fabs(v) * 0x1p-4, sc * 0x1p-10);
      if (!(fabs(d - v) <= tol || (fabs(d) == 448.0 * sc && fabs(v) >= 448.0 * sc))) ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(s[2] == 0 && y[64] == 0.0f && y[95] == 0.0f);
  x[40] = NAN;      /* block 1 of row 0 */
  x[K + 7] = -INFINITY; /* block 0 of row 1 */
  mok_mxfp8_quantize_rows(x, ROWS, K, q, s);
  mok_mxfp8_dequantize_rows(q, s, ROWS, K, y);
  CHECK(s[1] == 0xFF && isnan(y[32]) && isnan(y[63]) && s[K / 32] == 0xFF && isnan(y[K]));
  CHECK(s[0] != 0xFF && !isnan(y[0]) && s[K / 32 + 1] != 0xFF && !isnan(y[K + 32]));

  /* 1x128 conversion: equal scales are lossless; a block 2^-4 below its neighbours keeps codes
   * that stay normal after the shift and loses the low bits of the ones that fall under 2^-6 */
  static uint8_t cq[128], cs[4];
  for (int i = 0; i < 128; ++i) cq[i] = (uint8_t)(0x38 + (i % 8)); /* 1.0 .. 1.875 */
  memset(cs, 120, 4);
  double err = -1.0;
  CHECK(mok_mxfp8_block128_inexact(cq, cs, 1, 128, &err) == 0 && err == 0.0);
  cs[1] = 116;                      /* block 1: 2^-4 of the largest */
  CHECK(mok_mxfp8_block128_inexact(cq, cs, 1, 128, NULL) == 0); /* 1.mmm * 2^-4: still normal */
  cs[1] = 111;                      /* 2^-9: 1.mmm lands on the subnormal quantum 2^-9 */
  const int64_t n = mok_mxfp8_block128_inexact(cq, cs, 1, 128, &err);
  int want = 0;
  for (int i = 32; i < 64; ++i) want += (i % 8) != 0; /* only 1.0 is exact there */
  CHECK(n == want && err > 0.0 && err <= 0.5);

  /* the weights' 128x128 conversion (mok_mxfp8_to_block128's reference) on random MX codes whose
   * scales vary inside a block by up to 2^-12: a value whose rescaled code stays at or above
   * 2^-6 of the block scale is exact, one below it is within half the subnormal step (2^-10 of
   * the block scale); blocks with equal scales are exact throughout; a block with an E8M0 NaN is
   * NaN, its neighbours are not */
  enum { WE = 2, WN = 256, WK = 256 };
  static uint8_t wq[WE * WN * WK], ws[WE * WN * WK / 32], oq[WE * WN * WK];
  static float os[WE * 2 * 2];
  for (int i = 0; i < WE * WN * WK; ++i) {
    uint8_t b = (uint8_t)mok_rng_next(&rng);
    wq[i] = (b & 0x7f) == 0x7f ? 0x3f : b; /* no NaN codes */
  }
  for (int i = 0; i < WE * WN * WK / 32; ++i) {
    const int row = i / (WK / 32), col_block = (i % (WK / 32)) / 4; /* 128-column block */
    const int flat = (row / 128) % 2 == 0 && col_block == 0;        /* equal scales there */
    ws[i] = (uint8_t)(flat ? 121 : 118 + (int)(mok_rng_next(&rng) % 13));
  }
  mok_mxfp8_to_block128_ref(wq, ws, WE, WN, WK, oq, os);
  bad = 0;
  int64_t rounded = 0, flat_changed = 0;
  for (int64_t i = 0; i < (int64_t)WE * WN * WK; ++i) {
    const int64_t row = i / WK, col = i % WK;
    const int64_t blk = ((row / 128) * (WK / 128)) + col / 128; /* experts * n/128 rows of blocks */
    const double S = os[blk], want = mok_e4m3_to_float(wq[i]) * ldexp(1.0, ws[row * (WK / 32) + col / 32] - 127);
    const double got = mok_e4m3_to_float(oq[i]) * S;
    if (got != want) {
      ++rounded;
      if (fabs(want / S) >= 0x1p-6 || fabs(got - want) > S * 0x1p-10) ++bad;
      if ((row / 128) % 2 == 0 && col < 128) ++flat_changed;
    }
  }
  CHECK(bad == 0 && flat_changed == 0 && rounded > 0);
  ws[3 * (WK / 32) + 5] = 0xFF; /* row 3, columns 160..191: block (0, 1) of expert 0 */
  mok_mxfp8_to_block128_ref(wq, ws, WE, WN, WK, oq, os);
  CHECK(isnan(os[1]) && oq[3 * WK + 160] == 0x7f && oq[100 * WK + 255] == 0x7f);
  CHECK(!isnan(os[0]) && !isnan(os[2]) && oq[0] == wq[0]);
}
