/* test_bf16.c — bf16 rounding: exact values, ties to even, overflow, NaN and signed zero. */
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
