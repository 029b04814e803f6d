/* ref_inputs.h — the seedable generator behind the reference's test inputs (mok_reference.h,
 * "Test inputs"), for the reference and the tests. */
#ifndef MOK_REF_INPUTS_H
#define MOK_REF_INPUTS_H

#include <stdint.h>
#include "mok_reference.h"

#ifdef __cplusplus
extern "C" {
#endif

/* splitmix64: small, fast, good enough for test data. */
typedef struct { uint64_t s; } mok_rng;
static inline uint64_t mok_rng_next(mok_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double mok_rng_uniform(mok_rng *r) { return (mok_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline int mok_rng_below(mok_rng *r, int n) { return (int)(mok_rng_next(r) % (uint64_t)n); }
/* A generator for stream `stream` of seed: independent draws for each (rank, tensor). */
static inline mok_rng mok_rng_for(uint64_t seed, uint64_t stream) {
  mok_rng r = {seed ^ (stream * 0xD1B54A32D192ED03ull)};
  mok_rng_next(&r);
  return r;
}

#ifdef __cplusplus
}
#endif
#endif
