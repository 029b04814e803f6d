/* ref_token.c — the reference for one token from only the weights it uses: a one-token, one-rank
 * problem whose experts are the token's k experts, run through mok_ref_forward / mok_ref_backward. */
#include <stdint.h>
#include <stdlib.h>
#include "mok_reference.h"
#include "schedule/schedule_core.h"

mok_status mok_ref_token(const mok_ref_config *cfg, const float *x, const int32_t *topk,
                         const float *rw, const float *dy, mok_ref_fetch_expert fetch, void *ctx,
                         const float *ws_gate, const float *ws_up, const float *ws_down, float *y,
                         float *dx, float *d_rw) {
  if (!cfg || !x || !topk || !rw || !fetch || !y || (dy && (!dx || !d_rw))) return MOK_ERR_INVALID_ARGUMENT;
  const mok_shape *s = &cfg->shape;
  if (s->hidden <= 0 || s->intermediate <= 0 || s->top_k <= 0 || s->top_k > s->num_experts ||
      s->num_experts > INT32_MAX || s->shared_intermediate < 0)
    return MOK_ERR_INVALID_SHAPE;
  int st = mok_sched_check_token(topk, (int)s->top_k, (int)s->num_experts);
  if (st != MOK_SCHED_OK) return (mok_status)st;
  /* the k experts' weights, 3 * k * I * H floats, sized without wrapping */
  const int64_t k = s->top_k;
  int64_t n, all;
  if (__builtin_mul_overflow(s->intermediate, s->hidden, &n) ||
      __builtin_mul_overflow(n, 3 * k, &all) || (uint64_t)all > SIZE_MAX / sizeof(float))
    return MOK_ERR_OUT_OF_MEMORY;
  /* the token's experts become experts 0..k-1 of a one-rank problem */
  mok_ref_config mini = *cfg;
  mini.shape.tokens = 1;
  mini.shape.num_experts = k;
  mini.ep = 1;
  float *w = malloc(sizeof(float) * (size_t)all);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)k);
  if (!w || !ids) {
    free(w);
    free(ids);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  float *wg = w, *wu = w + k * n, *wd = w + 2 * k * n;
  for (int64_t j = 0; j < k; ++j) {
    fetch(ctx, topk[j], wg + j * n, wu + j * n, wd + j * n);
    ids[j] = (int32_t)j;
  }
  mok_ref_rank r = {x, ids, rw, wg, wu, wd, ws_gate, ws_up, ws_down};
  mok_status res = mok_ref_forward(&mini, &r, &y);
  if (res == MOK_SUCCESS && dy) {
    mok_ref_grads g = {dx, d_rw, NULL, NULL, NULL, NULL, NULL, NULL};
    res = mok_ref_backward(&mini, &r, &dy, &g);
  }
  free(w);
  free(ids);
  return res;
}
