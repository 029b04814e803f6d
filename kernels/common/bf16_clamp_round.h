/* bf16_clamp_round.h — rounding fp32 to bf16 without moving a value across a clamp limit +-L, in
 * plain C usable from host and device (the SwiGLU epilogue of kernels/gemm/bf16.cu; CPU
 * tests in tests/test_bf16.c).
 *
 * The backward pass decides the SwiGLU clamp's masks (g > L, u > L, u < -L) on pre-activations
 * stored as bf16. Round-to-nearest can carry a value within half an ulp of L across it and flip a
 * mask. mok_cr_round returns round-to-nearest unless that changes a comparison with L or -L; then
 * the nearest bf16 on the value's own side (at most one bf16 ulp from the value). */
#ifndef MOK_BF16_CLAMP_ROUND_H
#define MOK_BF16_CLAMP_ROUND_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MOK_CR_HD __host__ __device__ __forceinline__
#else
#define MOK_CR_HD static inline
#endif

typedef struct {
  float L;      /* the limit, > 0 and finite  */
  float above;  /* the smallest bf16 > L      */
  float atmost; /* the largest bf16 <= L      */
} mok_clamp_round;

MOK_CR_HD uint32_t mok_cr_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

MOK_CR_HD float mok_cr_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* fp32 -> nearest bf16 (ties to even), as fp32; NaN stays a quiet NaN, overflow goes to inf. */
MOK_CR_HD float mok_cr_bf16_rn(float f) {
  uint32_t u = mok_cr_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return mok_cr_float((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return mok_cr_float(u & 0xffff0000u);
}

MOK_CR_HD mok_clamp_round mok_cr_make(float L) {
  mok_clamp_round c;
  float r = mok_cr_bf16_rn(L);
  c.L = L;
  c.above = r > L ? r : mok_cr_float(mok_cr_bits(r) + 0x10000u);
  c.atmost = r <= L ? r : mok_cr_float(mok_cr_bits(r) - 0x10000u);
  return c;
}

MOK_CR_HD float mok_cr_round(float v, mok_clamp_round c) {
  float r = mok_cr_bf16_rn(v);
  if (v > c.L) {
    if (!(r > c.L)) r = c.above;
  } else if (r > c.L) {
    r = c.atmost;
  }
  if (v < -c.L) {
    if (!(r < -c.L)) r = -c.above;
  } else if (r < -c.L) {
    r = -c.atmost;
  }
  return r;
}

#endif /* MOK_BF16_CLAMP_ROUND_H */
