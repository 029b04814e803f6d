/* bf16.c — bf16 <-> float conversion with round-to-nearest-even, as the GPU's cvt.rn.bf16 does. */
#include <string.h>
#include "mok_reference.h"

uint16_t mok_bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float mok_bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float mok_bf16_round(float f) { return mok_bf16_to_float(mok_bf16_from_float(f)); }

void mok_bf16_from_float_array(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = mok_bf16_from_float(src[i]);
}

void mok_bf16_to_float_array(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = mok_bf16_to_float(src[i]);
}
