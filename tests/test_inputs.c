/* test_inputs.c — the routing generators produce what their names promise. */
#include <stdlib.h>
#include "reference/ref_inputs.h"
#include "tests/tests.h"
#include "tests/test_util.h"

void test_routing_generators(void) {
  const int ep = 2, E = 8, k = 2;
  const int64_t T = 400;
  int32_t *topk = malloc(sizeof(int32_t) * T * k);
  int hits[8];
  for (int kind = 0; kind < MOK_ROUTE_COUNT; ++kind) {
    for (int r = 0; r < ep; ++r) {
      CHECK_STATUS(mok_route_fill((mok_route_kind)kind, test_seed(), r, T, k, E, ep, topk), MOK_SUCCESS);
      memset(hits, 0, sizeof hits);
      int valid = 1;
      for (int64_t t = 0; t < T; ++t) {
        valid &= topk[t * k] >= 0 && topk[t * k] < E && topk[t * k + 1] >= 0 && topk[t * k + 1] < E;
        valid &= topk[t * k] != topk[t * k + 1];
        if (valid) hits[topk[t * k]]++, hits[topk[t * k + 1]]++;
      }
      CHECK(valid);
      if (kind == MOK_ROUTE_ONE_EXPERT) CHECK(hits[0] == T);
      if (kind == MOK_ROUTE_EMPTY_EXPERT) CHECK(hits[1] == 0);
      if (kind == MOK_ROUTE_EMPTY_RANK) CHECK(hits[4] + hits[5] + hits[6] + hits[7] == 0);
      if (kind == MOK_ROUTE_UNIFORM) for (int e = 0; e < E; ++e) CHECK(hits[e] > 0);
      if (kind == MOK_ROUTE_ZIPF) {
        int mx = 0, mn = 1 << 30;
        for (int e = 0; e < E; ++e) mx = hits[e] > mx ? hits[e] : mx, mn = hits[e] < mn ? hits[e] : mn;
        CHECK(mx > 2 * mn); /* skewed */
      }
    }
  }
  /* the same seed gives the same routing; another seed another */
  int32_t *again = malloc(sizeof(int32_t) * T * k);
  mok_route_fill(MOK_ROUTE_UNIFORM, 42, 1, T, k, E, ep, topk);
  mok_route_fill(MOK_ROUTE_UNIFORM, 42, 1, T, k, E, ep, again);
  CHECK(memcmp(topk, again, sizeof(int32_t) * T * k) == 0);
  mok_route_fill(MOK_ROUTE_UNIFORM, 43, 1, T, k, E, ep, again);
  CHECK(memcmp(topk, again, sizeof(int32_t) * T * k) != 0);
  /* k = E is a permutation per token; too few experts left is an error */
  CHECK_STATUS(mok_route_fill(MOK_ROUTE_UNIFORM, 1, 0, 3, 8, 8, 2, again), MOK_SUCCESS);
  CHECK_STATUS(mok_route_fill(MOK_ROUTE_EMPTY_RANK, 1, 0, 3, 8, 8, 2, again), MOK_ERR_INVALID_SHAPE);
  CHECK_STATUS(mok_route_fill(MOK_ROUTE_UNIFORM, 1, 2, 3, 2, 8, 2, again), MOK_ERR_INVALID_ARGUMENT);
  free(topk);
  free(again);
}
