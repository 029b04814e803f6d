/* ref_inputs.h — deterministic test and benchmark inputs: a seedable generator, random tensors,
 * router weights, and the routings that break naive MoE code (DESIGN.md "How it is checked").
 * Every rank of a GPU run can regenerate every other rank's inputs from the shared seed. */
#ifndef MOK_REF_INPUTS_H
#define MOK_REF_INPUTS_H

#include <stdint.h>
#include "mok.h"

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

typedef enum {
  MOK_ROUTE_UNIFORM = 0,      /* k distinct experts, uniformly                                */
  MOK_ROUTE_ZIPF = 1,         /* k distinct experts, P(e) ~ 1/(rank of e)^1.2 (skewed)        */
  MOK_ROUTE_ONE_EXPERT = 2,   /* every token's first choice is expert 0 (top-1: all to it)    */
  MOK_ROUTE_EMPTY_EXPERT = 3, /* uniform over all experts but expert 1, which gets nothing     */
  MOK_ROUTE_EMPTY_RANK = 4,   /* uniform over all experts but the last rank's: it gets nothing */
  MOK_ROUTE_COUNT = 5
} mok_route_kind;

const char *mok_route_name(mok_route_kind kind);

/* Fills topk [T, k] for one rank. Fails with MOK_ERR_INVALID_SHAPE when the kind leaves fewer than
 * k experts to choose from (e.g. EMPTY_RANK with E - E/EP < k). */
mok_status mok_route_fill(mok_route_kind kind, uint64_t seed, int rank, int64_t T, int k, int E,
                          int ep, int32_t *topk);

/* Uniform values in [-scale, scale], rounded to bf16 (so bf16 copies hold exactly these values). */
void mok_fill_random_bf16_values(uint64_t seed, uint64_t stream, float *dst, int64_t n, float scale);

/* Positive router weights [T, k], each row summing to 1, rounded to bf16 values. */
void mok_fill_router_weights(uint64_t seed, uint64_t stream, float *dst, int64_t T, int k);

#ifdef __cplusplus
}
#endif
#endif
