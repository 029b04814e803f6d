/* fp8.c — E4M3 (the FP8 format Hopper computes in) and the block-scaled quantization of mok's FP8
 * path, bit for bit as the GPU kernels do it (kernels/pointwise/fp8_quant.cu): per block,
 * scale = amax / 448 in fp32 (1 for an all-zero block), each value times 1 / scale in fp32, rounded
 * to the nearest E4M3 value (ties to even), saturated to +-448. */
#include <math.h>
#include <string.h>
#include "mok_reference.h"
#include "kernels/common/mx_scale.h"

#define E4M3_MAX 448.0f

uint8_t mok_e4m3_from_float(float f) {
  if (isnan(f)) return 0x7f;
  const uint8_t sign = signbit(f) ? 0x80 : 0x00;
  double a = fabs((double)f);
  if (a >= E4M3_MAX) return sign | 0x7e; /* saturate: S.1111.110 = 448 */
  /* the quantum of a's binade: 2^(e - 3) for normals (e >= -6), 2^-9 below */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): a's binade is 2^(e - 1) */
  int exp2 = e - 1 < -6 ? -6 : e - 1;
  double q = ldexp(1.0, exp2 - 3);
  double n = nearbyint(a / q); /* exact division by a power of two; ties to even */
  double v = n * q;
  if (v >= E4M3_MAX) return sign | 0x7e;
  if (v == 0) return sign;
  /* encode v: normal if v >= 2^-6 */
  frexp(v, &e);
  if (e - 1 >= -6) {
    const int biased = e - 1 + 7;
    const int mant = (int)(ldexp(v, -(e - 1)) * 8.0 + 0.5) - 8; /* v / 2^(e-1) = 1.mmm */
    return sign | (uint8_t)(biased << 3) | (uint8_t)mant;
  }
  return sign | (uint8_t)(int)(v / ldexp(1.0, -9) + 0.5); /* subnormal: m * 2^-9 */
}

float mok_e4m3_to_float(uint8_t b) {
  const int s = b >> 7, ex = (b >> 3) & 15, m = b & 7;
  if (ex == 15 && m == 7) return NAN;
  const double v = ex == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, ex - 7);
  return (float)(s ? -v : v);
}

float mok_e4m3_round(float f) { return mok_e4m3_to_float(mok_e4m3_from_float(f)); }

/* One block of n values at stride (1 for rows): the scale, and each value's code. */
static float quantize(const float *v, int64_t n, int64_t stride, uint8_t *q, int64_t qstride) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(v[i * stride]));
  const float scale = amax > 0.0f ? amax / E4M3_MAX : 1.0f;
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) q[i * qstride] = mok_e4m3_from_float(v[i * stride] * inv);
  return scale;
}

void mok_fp8_fake_quantize_row(const float *v, int64_t n, float *out) {
  uint8_t q[128];
  for (int64_t b = 0; b + 128 <= n; b += 128) {
    const float scale = quantize(v + b, 128, 1, q, 1);
    for (int i = 0; i < 128; ++i) out[b + i] = mok_e4m3_to_float(q[i]) * scale;
  }
}

void mok_fp8_fake_quantize_columns(float *x, int64_t rows, int64_t cols, int64_t block) {
  if (block <= 0) return;
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < rows; b += block) {
      const int64_t n = rows - b < block ? rows - b : block;
      float *v = x + b * cols + c;
      float amax = 0.0f;
      for (int64_t i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(v[i * cols]));
      const float scale = amax > 0.0f ? amax / E4M3_MAX : 1.0f; /* as quantize() */
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < n; ++i)
        v[i * cols] = mok_e4m3_to_float(mok_e4m3_from_float(v[i * cols] * inv)) * scale;
    }
}

void mok_fp8_quantize_weight_block128(const float *w, int64_t experts, int64_t n, int64_t k,
                                      uint8_t *q, float *scales) {
  const int64_t nb = n / 128, kb = k / 128;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t rb = 0; rb < nb; ++rb)
      for (int64_t cb = 0; cb < kb; ++cb) {
        const int64_t base = (e * n + rb * 128) * k + cb * 128;
        float amax = 0.0f;
        for (int r = 0; r < 128; ++r)
          for (int c = 0; c < 128; ++c) amax = fmaxf(amax, fabsf(w[base + r * k + c]));
        const float scale = amax > 0.0f ? amax / E4M3_MAX : 1.0f;
        const float inv = 1.0f / scale;
        for (int r = 0; r < 128; ++r)
          for (int c = 0; c < 128; ++c)
            q[base + r * k + c] = mok_e4m3_from_float(w[base + r * k + c] * inv);
        scales[(e * nb + rb) * kb + cb] = scale;
      }
}

void mok_fp8_dequantize_weight_block128(const uint8_t *q, const float *scales, int64_t experts,
                                        int64_t n, int64_t k, float *w) {
  const int64_t nb = n / 128, kb = k / 128;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const int64_t i = (e * n + r) * k + c;
        w[i] = mok_e4m3_to_float(q[i]) * scales[(e * nb + r / 128) * kb + c / 128];
      }
}

/* ---- MXFP8 (kernels/common/mx_scale.h) ---------------------------------------------------- */
void mok_mxfp8_quantize_rows(const float *x, int64_t rows, int64_t k, uint8_t *codes,
                             uint8_t *scales) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k; b += MOK_MX_BLOCK) {
      const float *v = x + r * k + b;
      float amax = 0.0f;
      int bad = 0;
      for (int i = 0; i < MOK_MX_BLOCK; ++i) {
        if (!isfinite(v[i])) bad = 1;
        amax = fmaxf(amax, fabsf(v[i]));
      }
      const uint8_t s = bad ? (uint8_t)MOK_E8M0_NAN : mok_mx_scale_code(amax);
      scales[r * (k / MOK_MX_BLOCK) + b / MOK_MX_BLOCK] = s;
      const float inv = mok_mx_scale_inverse(s); /* a power of two: v * inv is exact */
      for (int i = 0; i < MOK_MX_BLOCK; ++i)
        codes[r * k + b + i] = bad ? 0x7f : mok_e4m3_from_float(v[i] * inv);
    }
}

void mok_mxfp8_dequantize_rows(const uint8_t *codes, const uint8_t *scales, int64_t rows,
                               int64_t k, float *x) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t s = scales[r * (k / MOK_MX_BLOCK) + i / MOK_MX_BLOCK];
      x[r * k + i] = (float)((double)mok_e4m3_to_float(codes[r * k + i]) *
                             (double)mok_mx_scale_value(s));
    }
}

int64_t mok_mxfp8_block128_inexact(const uint8_t *codes, const uint8_t *scales, int64_t rows,
                                   int64_t k, double *max_abs_err) {
  int64_t changed = 0;
  double worst = 0.0;
  const int per = 128 / MOK_MX_BLOCK;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k; b += 128) {
      const uint8_t *s = scales + r * (k / MOK_MX_BLOCK) + b / MOK_MX_BLOCK;
      int top = 0;
      for (int j = 0; j < per; ++j) top = s[j] > top && s[j] != MOK_E8M0_NAN ? s[j] : top;
      for (int i = 0; i < 128; ++i) {
        const int j = i / MOK_MX_BLOCK;
        if (s[j] == MOK_E8M0_NAN) continue; /* NaN stays NaN */
        const double v = mok_e4m3_to_float(codes[r * k + b + i]);   /* in units of 2^s */
        const double shift = ldexp(1.0, (int)s[j] - top);            /* 2^(s - S) <= 1  */
        const double back = mok_e4m3_to_float(mok_e4m3_from_float((float)(v * shift))) / shift;
        if (back != v) {
          ++changed;
          if (fabs(back - v) > worst) worst = fabs(back - v);
        }
      }
    }
  if (max_abs_err) *max_abs_err = worst;
  return changed;
}

void mok_mxfp8_to_block128_ref(const uint8_t *codes, const uint8_t *scales, int64_t experts,
                               int64_t n, int64_t k, uint8_t *q, float *q_scales) {
  const int64_t nb = n / 128, kb = k / 128, ks = k / MOK_MX_BLOCK;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t rb = 0; rb < nb; ++rb)
      for (int64_t cb = 0; cb < kb; ++cb) {
        const int64_t row0 = e * n + rb * 128;
        int top = 0; /* the block's largest MX scale; 255 (NaN) is the largest of all */
        for (int64_t r = 0; r < 128; ++r)
          for (int j = 0; j < 128 / MOK_MX_BLOCK; ++j) {
            const int sj = scales[(row0 + r) * ks + cb * (128 / MOK_MX_BLOCK) + j];
            top = sj > top ? sj : top;
          }
        q_scales[(e * nb + rb) * kb + cb] = mok_mx_scale_value((uint8_t)top);
        for (int64_t r = 0; r < 128; ++r)
          for (int64_t c = 0; c < 128; ++c) {
            const int64_t i = (row0 + r) * k + cb * 128 + c;
            const int sj = scales[(row0 + r) * ks + (cb * 128 + c) / MOK_MX_BLOCK];
            q[i] = top == MOK_E8M0_NAN
                       ? 0x7f
                       : mok_e4m3_from_float(ldexpf(mok_e4m3_to_float(codes[i]), sj - top));
          }
      }
}
