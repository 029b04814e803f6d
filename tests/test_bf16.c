/* test_bf16.c — bf16 rounding: exact values, ties to even, overflow, NaN and signed zero; the
 * clamp-keeping rounding of the SwiGLU pre-activations (kernels/bf16_clamp_round.h). */
#include "kernels/common/bf16_clamp_round.h"
#include "mok_reference.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void test_bf16_rounding(void) {
  CHECK(mok_bf16_from_float(1.0f) == 0x3f80);
  CHECK(mok_bf16_from_float(-2.0f) == 0xc000);
  CHECK(mok_bf16_to_float(0x3f80) == 1.0f);
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0) */
  CHECK(mok_bf16_from_float(1.0f + 0x1p-8f) == 0x3f80);
  /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up */
  CHECK(mok_bf16_from_float(1.0f + 3 * 0x1p-8f) == 0x3f82);
  /* just above halfway rounds up */
  CHECK(mok_bf16_from_float(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(mok_bf16_from_float(from_bits(0x3f807fffu)) == 0x3f80);
  /* the largest float rounds to infinity; infinity and -0 survive */
  CHECK(mok_bf16_from_float(from_bits(0x7f7fffffu)) == 0x7f80);
  CHECK(mok_bf16_from_float(from_bits(0x7f800000u)) == 0x7f80);
  CHECK(mok_bf16_from_float(-0.0f) == 0x8000);
  /* NaN stays NaN, also a NaN whose payload sits only in the low bits */
  uint16_t n = mok_bf16_from_float(from_bits(0x7f800001u));
  CHECK((n & 0x7f80) == 0x7f80 && (n & 0x007f) != 0);
  CHECK(isnan(mok_bf16_round(NAN)));
  /* round-trip of every bf16 value is exact */
  int bad = 0;
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = mok_bf16_to_float((uint16_t)b);
    if (!isnan(f) && mok_bf16_from_float(f) != b) ++bad;
  }
  CHECK(bad == 0);
  /* arrays */
  float src[3] = {1.5f, -3.25f, 1.0f + 0x1p-8f}, back[3];
  uint16_t mid[3];
  mok_bf16_from_float_array(src, mid, 3);
  mok_bf16_to_float_array(mid, back, 3);
  CHECK(back[0] == 1.5f && back[1] == -3.25f && back[2] == 1.0f);
}

/* One value through the clamp-keeping rounding: a bf16 value, the same side of L and -L as v, at
 * most one bf16 ulp away, and round-to-nearest whenever that keeps the sides. Returns 0 if so. */
static int clamp_round_bad(float v, mok_clamp_round c) {
  const float r = mok_cr_round(v, c), rn = mok_bf16_round(v);
  if (isnan(v)) return !isnan(r);
  if (mok_cr_bits(r) & 0xffffu) return 1;
  if ((r > c.L) != (v > c.L) || (r < -c.L) != (v < -c.L)) return 1;
  const int keeps = (rn > c.L) == (v > c.L) && (rn < -c.L) == (v < -c.L);
  if (keeps && r != rn) return 1;
  int e;
  frexpf(v, &e);
  const double ulp = ldexp(1.0, e - 8); /* bf16 keeps 8 significant bits */
  return fabs((double)r - (double)v) > ulp;
}

void test_bf16_clamp_round(void) {
  /* the fp32 -> bf16 rounding the kernel uses is the reference's, bit for bit */
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int bad_rn = 0;
  for (int i = 0; i < 200000; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const float f = from_bits((uint32_t)(rng >> 32));
    const float a = mok_cr_bf16_rn(f), b = mok_bf16_round(f);
    if (!(isnan(a) && isnan(b)) && mok_cr_bits(a) != mok_cr_bits(b)) ++bad_rn;
  }
  CHECK(bad_rn == 0);
  /* limits on and off the bf16 grid; values on every fp32 pattern near +-L and random ones */
  const float limits[] = {0.75f, 1.5f, 7.0f, 0.1f, 3.3f, 1e-3f, 448.3f, 10.0f};
  int bad = 0, flips_fixed = 0;
  for (size_t li = 0; li < sizeof limits / sizeof limits[0]; ++li) {
    const mok_clamp_round c = mok_cr_make(limits[li]);
    CHECK(c.above > c.L && c.atmost <= c.L);
    CHECK(mok_bf16_round(c.above) == c.above && mok_bf16_round(c.atmost) == c.atmost);
    CHECK(!(mok_cr_float(mok_cr_bits(c.above) - 0x10000u) > c.L)); /* nothing bf16 between */
    for (int sgn = -1; sgn <= 1; sgn += 2) {
      const uint32_t mid = mok_cr_bits(sgn * c.L);
      for (int64_t d = -3 * 65536; d <= 3 * 65536; d += 7) {
        const float v = mok_cr_float((uint32_t)((int64_t)mid + d));
        bad += clamp_round_bad(v, c);
        const float rn = mok_bf16_round(v);
        flips_fixed += (rn > c.L) != (v > c.L) || (rn < -c.L) != (v < -c.L);
      }
    }
    for (int i = 0; i < 20000; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const float v = (float)((double)(rng >> 11) * 0x1p-53 * 8.0 - 4.0) * c.L;
      bad += clamp_round_bad(v, c);
    }
    bad += clamp_round_bad(NAN, c) + clamp_round_bad(0.0f, c) + clamp_round_bad(-0.0f, c);
  }
  CHECK(bad == 0);
  CHECK(flips_fixed > 0); /* round-to-nearest alone would have crossed the limit on these */
}
