/* mx_scale.h — the OCP Microscaling (MX) rules of MXFP8 data (E4M3 codes, one E8M0 power-of-two
 * scale per 32 consecutive elements along K), in plain C usable from host and device, so that a
 * GPU quantizer and the CPU reference (reference/fp8.c; tests in tests/test_fp8.c) pick the same
 * scale bit for bit.
 *
 * A block's scale is 2^(floor(log2(amax)) - 8), 8 being E4M3's largest exponent (448 = 1.75 x
 * 2^8): amax / scale lies in [256, 512), so the largest values saturate to 448 (the OCP rule,
 * "saturating E4M3"). E8M0 stores the exponent biased by 127 in 8 bits: codes 0..254 are
 * 2^-127..2^127, 255 is NaN (a block whose amax is NaN or infinite). An all-zero block takes
 * code 0; exponents past the range are clamped to it. */
#ifndef MOK_COMMON_MX_SCALE_H
#define MOK_COMMON_MX_SCALE_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MOK_MX_HD __host__ __device__ __forceinline__
#else
#define MOK_MX_HD static inline
#endif

#define MOK_MX_BLOCK 32      /* elements per scale, along K */
#define MOK_E8M0_NAN 0xFFu   /* the E8M0 code of NaN */
#define MOK_E4M3_EMAX 8      /* floor(log2(448)) */

MOK_MX_HD uint32_t mok_mx_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

MOK_MX_HD float mok_mx_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* floor(log2(a)) for a finite a > 0, read from its bits (exact, subnormals included). */
MOK_MX_HD int mok_mx_floor_log2(float a) {
  const uint32_t u = mok_mx_bits(a) & 0x7fffffffu;
  const int e = (int)(u >> 23);
  if (e > 0) return e - 127;
  int l = -127; /* subnormal: 2^-149 x mantissa, the mantissa's highest bit decides */
  for (uint32_t m = u & 0x7fffffu; m >= 2u; m >>= 1) ++l;
  return l - 22;
}

/* The E8M0 code of a block whose largest magnitude is amax (>= 0, or NaN / infinite). */
MOK_MX_HD uint8_t mok_mx_scale_code(float amax) {
  const uint32_t u = mok_mx_bits(amax) & 0x7fffffffu;
  if (u >= 0x7f800000u) return (uint8_t)MOK_E8M0_NAN; /* NaN or infinite */
  if (u == 0) return 0;
  int biased = mok_mx_floor_log2(amax) - MOK_E4M3_EMAX + 127;
  if (biased < 0) biased = 0;
  if (biased > 254) biased = 254;
  return (uint8_t)biased;
}

/* The value of an E8M0 code: 2^(code - 127), NaN for 255 (2^-127 is an fp32 subnormal). */
MOK_MX_HD float mok_mx_scale_value(uint8_t code) {
  if (code == MOK_E8M0_NAN) return mok_mx_float(0x7fc00000u);
  if (code == 0) return mok_mx_float(0x00400000u); /* 2^-127 */
  return mok_mx_float((uint32_t)code << 23);
}

/* 1 / scale = 2^(127 - code), exact for every code (code 254 gives the subnormal 2^-127); NaN
 * for 255. */
MOK_MX_HD float mok_mx_scale_inverse(uint8_t code) {
  if (code == MOK_E8M0_NAN) return mok_mx_float(0x7fc00000u);
  if (code == 254) return mok_mx_float(0x00400000u);
  return mok_mx_float((uint32_t)(254 - code) << 23);
}

#endif /* MOK_COMMON_MX_SCALE_H */
