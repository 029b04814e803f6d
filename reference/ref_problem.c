/* ref_problem.c — building and freeing multi-rank reference problems. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_problem.h"

/* A zeroed buffer of n floats owned by p, or NULL when it cannot be had (the caller checks once
 * per rank: a NULL is never written). */
static float *take(mok_ref_problem *p, int64_t n) {
  float *f = n >= 0 && (uint64_t)n < SIZE_MAX / sizeof(float) - 1 ? calloc((size_t)(n + 1), sizeof(float)) : NULL;
  if (f) p->owned[p->n_owned++] = f;
  return f;
}

/* The floats one rank of the problem holds (inputs, weights, outputs, gradients), or -1 when the
 * count overflows. */
static int64_t rank_floats(const mok_shape *s, int ep) {
  const int64_t T = s->tokens, H = s->hidden, I = s->intermediate, k = s->top_k;
  const int64_t Is = s->shared_intermediate, EL = s->num_experts / ep;
  int64_t th, tk, e, shared, total;
  if (__builtin_mul_overflow(T, H, &th) || __builtin_mul_overflow(T, k, &tk) ||
      __builtin_mul_overflow(EL, I, &e) || __builtin_mul_overflow(e, H, &e) ||
      __builtin_mul_overflow(Is, H, &shared))
    return -1;
  /* x, dy, y, dx: 4 * T*H; rw, d_rw: 2 * T*k; 3 expert weights and their gradients; the same for
   * the shared expert */
  if (__builtin_mul_overflow(th, 4, &th) || __builtin_mul_overflow(e, 6, &e) ||
      __builtin_mul_overflow(shared, 6, &shared) || __builtin_mul_overflow(tk, 2, &tk) ||
      __builtin_add_overflow(th, tk, &total) || __builtin_add_overflow(total, e, &total) ||
      __builtin_add_overflow(total, shared, &total))
    return -1;
  return total;
}

int64_t mok_ref_problem_bytes(const mok_shape *shape, int ep) {
  if (!shape || ep < 1 || shape->num_experts < ep) return -1;
  const int64_t per_rank = rank_floats(shape, ep);
  int64_t all;
  if (per_rank < 0 || __builtin_mul_overflow(per_rank, (int64_t)ep * (int64_t)sizeof(float), &all)) return -1;
  return all;
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
  if (!p->ranks || !p->grads || !p->dy || !p->y || !p->owned || mok_ref_problem_bytes(s, ep) < 0) {
    mok_ref_problem_free(p);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  const int64_t T = s->tokens, H = s->hidden, I = s->intermediate, k = s->top_k;
  const int64_t Is = s->shared_intermediate, EL = s->num_experts / ep;
  for (int r = 0; r < ep; ++r) {
    uint64_t st = (uint64_t)r * 16;
    float *x = take(p, T * H), *rw = take(p, T * k);
    float *wg = take(p, EL * I * H), *wu = take(p, EL * I * H), *wd = take(p, EL * H * I);
    float *sg = take(p, Is * H), *su = take(p, Is * H), *sd = take(p, H * Is);
    int32_t *topk = calloc((size_t)(T * k + 1), sizeof(int32_t));
    if (topk) p->owned[p->n_owned++] = topk;
    p->dy[r] = take(p, T * H);
    p->y[r] = take(p, T * H);
    mok_ref_grads g = {take(p, T * H), take(p, T * k), take(p, EL * I * H), take(p, EL * I * H),
                       take(p, EL * H * I), take(p, Is * H), take(p, Is * H), take(p, H * Is)};
    p->grads[r] = g;
    if (!x || !rw || !wg || !wu || !wd || !sg || !su || !sd || !topk || !p->dy[r] || !p->y[r] ||
        !g.dx || !g.d_router_weights || !g.dw_gate || !g.dw_up || !g.dw_down || !g.dws_gate ||
        !g.dws_up || !g.dws_down) {
      mok_ref_problem_free(p);
      return MOK_ERR_OUT_OF_MEMORY;
    }
    mok_fill_random_bf16_values(seed, st + 1, x, T * H, 1.0f);
    mok_fill_router_weights(seed, st + 2, rw, T, (int)k);
    mok_fill_random_bf16_values(seed, st + 3, wg, EL * I * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 4, wu, EL * I * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 5, wd, EL * H * I, (float)(1.0 / sqrt((double)I)));
    mok_fill_random_bf16_values(seed, st + 6, sg, Is * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 7, su, Is * H, (float)(1.0 / sqrt((double)H)));
    mok_fill_random_bf16_values(seed, st + 8, sd, H * Is, Is > 0 ? (float)(1.0 / sqrt((double)Is)) : 0.f);
    mok_fill_random_bf16_values(seed, st + 9, p->dy[r], T * H, 1.0f);
    mok_ref_rank rank = {x, topk, rw, wg, wu, wd, Is ? sg : NULL, Is ? su : NULL, Is ? sd : NULL};
    p->ranks[r] = rank;
    mok_status rs = mok_route_fill(kind, seed, r, T, (int)k, (int)s->num_experts, ep, topk);
    if (rs != MOK_SUCCESS) return rs;
  }
  return MOK_SUCCESS;
}

void mok_ref_problem_free(mok_ref_problem *p) {
  for (int i = 0; p->owned && i < p->n_owned; ++i) free(p->owned[i]);
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
