/* ref_inputs.c — routings and random tensors for tests, the CLI and benchmarks. */
#include <math.h>
#include <stdlib.h>
#include "mok_reference.h"
#include "reference/ref_inputs.h"

const char *mok_route_name(mok_route_kind kind) {
  static const char *names[MOK_ROUTE_COUNT] = {"uniform", "zipf", "one-expert", "empty-expert",
                                               "empty-rank"};
  return (unsigned)kind < MOK_ROUTE_COUNT ? names[kind] : "unknown";
}

/* Draws k distinct experts with probabilities proportional to weight[] (zero: never), without
 * replacement; work[] is scratch of E doubles. */
static void draw_distinct(mok_rng *rng, const double *weight, double *work, int E, int k, int32_t *out) {
  double total = 0;
  for (int e = 0; e < E; ++e) total += (work[e] = weight[e]);
  for (int j = 0; j < k; ++j) {
    double x = mok_rng_uniform(rng) * total, run = 0;
    int pick = -1;
    for (int e = 0; e < E; ++e) {
      if (work[e] <= 0) continue;
      pick = e; /* the last positive one, in case rounding runs past the end */
      run += work[e];
      if (x < run) break;
    }
    out[j] = pick;
    total -= work[pick];
    work[pick] = 0;
  }
}

mok_status mok_route_fill(mok_route_kind kind, uint64_t seed, int rank, int64_t T, int k, int E,
                          int ep, int32_t *topk) {
  if (!topk && T > 0) return MOK_ERR_INVALID_ARGUMENT;
  if ((unsigned)kind >= MOK_ROUTE_COUNT || ep <= 0 || rank < 0 || rank >= ep) return MOK_ERR_INVALID_ARGUMENT;
  if (T < 0 || k <= 0 || E <= 0 || k > E || E % ep) return MOK_ERR_INVALID_SHAPE;
  double *weight = malloc((size_t)E * sizeof(double)), *work = malloc((size_t)E * sizeof(double));
  if (!weight || !work) {
    free(weight);
    free(work);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  int available = 0;
  mok_rng perm = mok_rng_for(seed, 0x5eed); /* Zipf: which expert is hottest, the same on every rank */
  int *order = malloc((size_t)E * sizeof(int));
  if (!order) {
    free(weight);
    free(work);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  for (int e = 0; e < E; ++e) order[e] = e;
  for (int e = E - 1; e > 0; --e) {
    int o = mok_rng_below(&perm, e + 1), tmp = order[e];
    order[e] = order[o];
    order[o] = tmp;
  }
  for (int e = 0; e < E; ++e) {
    double w = 1.0;
    if (kind == MOK_ROUTE_ZIPF) w = pow((double)(order[e] + 1), -1.2);
    if (kind == MOK_ROUTE_EMPTY_EXPERT && e == 1 % E) w = 0;
    if (kind == MOK_ROUTE_EMPTY_RANK && e >= E - E / ep) w = 0;
    if (kind == MOK_ROUTE_ONE_EXPERT && e == 0) w = 0; /* expert 0 is placed first by hand */
    weight[e] = w;
    available += w > 0;
  }
  free(order);
  int need = kind == MOK_ROUTE_ONE_EXPERT ? k - 1 : k;
  if (available < need) {
    free(weight);
    free(work);
    return MOK_ERR_INVALID_SHAPE;
  }
  mok_rng rng = mok_rng_for(seed, 0x70c0 + (uint64_t)rank);
  for (int64_t t = 0; t < T; ++t) {
    int32_t *row = topk + t * k;
    if (kind == MOK_ROUTE_ONE_EXPERT) {
      row[0] = 0;
      draw_distinct(&rng, weight, work, E, k - 1, row + 1);
    } else {
      draw_distinct(&rng, weight, work, E, k, row);
    }
  }
  free(weight);
  free(work);
  return MOK_SUCCESS;
}

void mok_fill_random_bf16_values(uint64_t seed, uint64_t stream, float *dst, int64_t n, float scale) {
  mok_rng rng = mok_rng_for(seed, stream);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = mok_bf16_round((float)((2.0 * mok_rng_uniform(&rng) - 1.0) * scale));
}

void mok_fill_router_weights(uint64_t seed, uint64_t stream, float *dst, int64_t T, int k) {
  mok_rng rng = mok_rng_for(seed, stream);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += (dst[t * k + j] = (float)(0.05 + mok_rng_uniform(&rng)));
    for (int j = 0; j < k; ++j) dst[t * k + j] = mok_bf16_round((float)(dst[t * k + j] / sum));
  }
}
