/* ref_problem.c — building and freeing multi-rank reference problems. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_problem.h"

static float *take(mok_ref_problem *p, int64_t n) {
  float *f = calloc((size_t)(n + 1), sizeof(float));
  p->owned[p->n_owned++] = f;
  return f;
}

mok_status mok_ref_problem_make(mok_ref_problem *p, const mok_shape *s, int ep, mok_route_kind kind, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->cfg.shape = *s;
  p->cfg.ep = ep;
  p->ranks = calloc((size_t)ep, sizeof(mok_ref_rank));
  p->grads = calloc((size_t)ep, sizeof(mok_ref_grads));
  p->dy = calloc((size_t)ep, sizeof(float *));
  p->y = calloc((size_t)ep, sizeof(float *));
  p->owned = calloc((size_t)ep * 24, sizeof(void *));
  const int64_t T = s->tokens, H = s->hidden, I = s->intermediate, k = s->top_k;
  const int64_t Is = s->shared_intermediate, EL = s->num_experts / ep;
  for (int r = 0; r < ep; ++r) {
    uint64_t st = (uint64_t)r * 16;
    float *x = take(p, T * H), *rw = take(p, T * k);
    float *wg = take(p, EL * I * H), *wu = take(p, EL * I * H), *wd = take(p, EL * H * I);
    float *sg = take(p, Is * H), *su = take(p, Is * H), *sd = take(p, H * Is);
    int32_t *topk = calloc((size_t)(T * k + 1), sizeof(int32_t));
    p->owned[p->n_owned++] = topk;
    mok_fill_random_bf16_values(seed, st + 1, x, T * H, 1.0f);
    mok_fill_router_weights(seed, st + 2, rw, T, (int)k);
    mok_fill_random_bf16_values(seed, st + 3, wg, EL * I * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 4, wu, EL * I * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 5, wd, EL * H * I, (float)(1.0 / sqrt((double)I)));
    mok_fill_random_bf16_values(seed, st + 6, sg, Is * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 7, su, Is * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 8, sd, H * Is, Is > 0 ? (float)(1.0 / sqrt((double)Is)) : 0.f);
    p->dy[r] = take(p, T * H);
    mok_fill_random_bf16_values(seed, st + 9, p->dy[r], T * H, 1.0f);
    p->y[r] = take(p, T * H);
    mok_ref_rank rank = {x, topk, rw, wg, wu, wd, Is ? sg : NULL, Is ? su : NULL, Is ? sd : NULL};
    p->ranks[r] = rank;
    mok_ref_grads g = {take(p, T * H), take(p, T * k), take(p, EL * I * H), take(p, EL * I * H),
                       take(p, EL * H * I), take(p, Is * H), take(p, Is * H), take(p, H * Is)};
    p->grads[r] = g;
    mok_status rs = mok_route_fill(kind, seed, r, T, (int)k, (int)s->num_experts, ep, topk);
    if (rs != MOK_SUCCESS) return rs;
  }
  return MOK_SUCCESS;
}

void mok_ref_problem_free(mok_ref_problem *p) {
  for (int i = 0; i < p->n_owned; ++i) free(p->owned[i]);
  free(p->owned);
  free(p->ranks);
  free(p->grads);
  free(p->dy);
  free(p->y);
  memset(p, 0, sizeof *p);
}

double rel_error(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}
