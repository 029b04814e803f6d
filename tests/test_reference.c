/* test_reference.c — the CPU reference: tiny cases computed by hand, every gradient against central
 * finite differences, the bf16-rounding mode, and bad input. */
#include <stdlib.h>
#include "mok_reference.h"
#include "reference/ref_problem.h"
#include "tests/tests.h"
#include "tests/test_util.h"

/* One token, one expert of width 1: every number below was worked out by hand.
 * x = 1; expert 1: gate 1, up 2, down 3; router weight 0.5; dy = 1.
 *   g = 1, u = 2, sigmoid(1) = 0.7310585786300049, a = silu(1) * 2 = 1.4621171572600098
 *   o = 3a = 4.386351471780029, y = 0.5 o = 2.1931757358900147
 *   d_rw = dy . o = 4.386351471780029; do = 0.5; da = 1.5
 *   silu'(1) = s (1 + (1 - s)) = 0.9276705118714869
 *   dg = da * u * silu'(1) = 2.7830115356144607, du = da * silu(1) = 1.0965878679450074
 *   dx = 1 * dg + 2 * du = 4.976187271504476; dWd = do * a = 0.7310585786300049 */
void test_reference_hand_single(void) {
  float x = 1, rw = 0.5f, dy = 1;
  int32_t topk = 1;
  float wg[2] = {7, 1}, wu[2] = {7, 2}, wd[2] = {7, 3}; /* expert 0 holds decoys */
  mok_ref_config c = {.shape = {1, 1, 2, 1, 1, 0}, .ep = 1};
  mok_ref_rank r = {&x, &topk, &rw, wg, wu, wd, NULL, NULL, NULL};
  float y = NAN;
  float *yp = &y;
  CHECK_STATUS(mok_ref_forward(&c, &r, &yp), MOK_SUCCESS);
  CHECK_CLOSE(y, 2.1931757358900147, 1e-6);
  float dx = NAN, drw = NAN, dwg[2] = {NAN, NAN}, dwu[2] = {NAN, NAN}, dwd[2] = {NAN, NAN};
  mok_ref_grads g = {&dx, &drw, dwg, dwu, dwd, NULL, NULL, NULL};
  const float *dyp = &dy;
  CHECK_STATUS(mok_ref_backward(&c, &r, &dyp, &g), MOK_SUCCESS);
  CHECK_CLOSE(drw, 4.386351471780029, 1e-6);
  CHECK_CLOSE(dx, 4.976187271504476, 1e-6);
  CHECK_CLOSE(dwg[1], 2.7830115356144607, 1e-6);
  CHECK_CLOSE(dwu[1], 1.0965878679450074, 1e-6);
  CHECK_CLOSE(dwd[1], 0.7310585786300049, 1e-6);
  CHECK(dwg[0] == 0 && dwu[0] == 0 && dwd[0] == 0); /* expert 0 got no token */
}

static double silu(double z) { return z / (1.0 + exp(-z)); }

/* Two ranks with one expert each, k = 2 and a shared expert, H = 2, I = Is = 1: the output is the
 * sum written out term by term. */
void test_reference_hand_topk_shared(void) {
  float x[2] = {0.5f, -1.0f};
  int32_t topk[2] = {1, 0}; /* rank 1's expert first: the sum order must not matter here */
  float rw[2] = {0.25f, 0.75f};
  float wg0[2] = {1, 2}, wu0[2] = {-1, 1}, wd0[2] = {2, -3};
  float wg1[2] = {0.5f, 0.5f}, wu1[2] = {3, 1}, wd1[2] = {1, 1};
  float sg[2] = {-1, 1}, su[2] = {1, 1}, sd[2] = {0.5f, 2};
  mok_ref_config c = {.shape = {1, 2, 2, 1, 2, 1}, .ep = 2};
  mok_ref_rank r[2] = {{x, topk, rw, wg0, wu0, wd0, sg, su, sd},
                       {x, topk, rw, wg1, wu1, wd1, sg, su, sd}};
  float y0[2], y1[2];
  float *ys[2] = {y0, y1};
  CHECK_STATUS(mok_ref_forward(&c, r, ys), MOK_SUCCESS);
  double a0 = silu(0.5 * 1 - 1.0 * 2) * (0.5 * -1 - 1.0 * 1);  /* expert 0 */
  double a1 = silu(0.5 * 0.5 - 0.5) * (0.5 * 3 - 1.0);          /* expert 1 */
  double as = silu(0.5 * -1 - 1.0) * (0.5 - 1.0);                /* shared   */
  for (int h = 0; h < 2; ++h) {
    double want = sd[h] * as + 0.25 * wd1[h] * a1 + 0.75 * wd0[h] * a0;
    CHECK_CLOSE(y0[h], want, 1e-6);
    CHECK_CLOSE(y1[h], want, 1e-6); /* rank 1 has the same tokens and routing */
  }
}

/* The SwiGLU limit: g above L and u below -L are clamped and pass no gradient. */
void test_reference_hand_clamp(void) {
  float x = 1, rw = 1, dy = 1;
  int32_t topk = 0;
  float wg = 5, wu = -3, wd = 2;
  mok_ref_config c = {.shape = {1, 1, 1, 1, 1, 0}, .ep = 1, .use_swiglu_limit = 1,
                      .swiglu_limit = 2.0f};
  mok_ref_rank r = {&x, &topk, &rw, &wg, &wu, &wd, NULL, NULL, NULL};
  float y, *yp = &y;
  CHECK_STATUS(mok_ref_forward(&c, &r, &yp), MOK_SUCCESS);
  double a = silu(2.0) * -2.0; /* silu(min(5, 2)) * clamp(-3, -2, 2) */
  CHECK_CLOSE(y, 2 * a, 1e-6);
  float dx = NAN, drw = NAN, dwg = NAN, dwu = NAN, dwd = NAN;
  mok_ref_grads g = {&dx, &drw, &dwg, &dwu, &dwd, NULL, NULL, NULL};
  const float *dyp = &dy;
  CHECK_STATUS(mok_ref_backward(&c, &r, &dyp, &g), MOK_SUCCESS);
  CHECK(dx == 0 && dwg == 0 && dwu == 0);
  CHECK_CLOSE(dwd, a, 1e-6);
  CHECK_CLOSE(drw, 2 * a, 1e-6);
  /* inside the limit the clamp changes nothing */
  c.swiglu_limit = 10.0f;
  CHECK_STATUS(mok_ref_forward(&c, &r, &yp), MOK_SUCCESS);
  CHECK_CLOSE(y, 2 * silu(5.0) * -3.0, 1e-4);
}

static void fd_case(const mok_shape *s, int ep, mok_route_kind kind, int clamp, int64_t samples,
                    double tol) {
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, s, ep, kind, test_seed()), MOK_SUCCESS);
  p.cfg.use_swiglu_limit = clamp;
  p.cfg.swiglu_limit = 0.6f;
  double worst = -1;
  int64_t checked = 0;
  CHECK_STATUS(mok_ref_gradient_check(&p.cfg, p.ranks, (const float *const *)p.dy, samples,
                                      test_seed(), &worst, &checked),
               MOK_SUCCESS);
  if (!(worst >= 0 && worst < tol))
    fprintf(stderr, "  %s ep=%d clamp=%d: worst error %.3g over %lld entries\n", mok_route_name(kind),
            ep, clamp, worst, (long long)checked);
  CHECK(worst >= 0 && worst < tol);
  CHECK(checked > 0);
  mok_ref_problem_free(&p);
}

/* Every entry of every gradient of two ranks, with a shared expert. */
void test_reference_fd_exhaustive(void) {
  mok_shape s = {5, 8, 4, 6, 2, 4};
  fd_case(&s, 2, MOK_ROUTE_UNIFORM, 0, 0, 1e-4);
  mok_shape s_noshared = {3, 8, 4, 4, 2, 0};
  fd_case(&s_noshared, 1, MOK_ROUTE_UNIFORM, 0, 0, 1e-4);
}

/* With the SwiGLU limit active on many entries. A perturbation that crosses the kink gives a
 * one-sided difference, so the bound is looser. */
void test_reference_fd_clamp(void) {
  mok_shape s = {6, 8, 4, 6, 2, 4};
  fd_case(&s, 2, MOK_ROUTE_UNIFORM, 1, 0, 5e-3);
}

/* The routings of docs/DESIGN.md ("How it is checked"), on sampled entries: skewed, one hot expert, an empty expert, an empty
 * rank, top-1, and k = E. */
void test_reference_fd_routings(void) {
  mok_shape s = {7, 8, 8, 4, 3, 4};
  for (int kind = 0; kind < MOK_ROUTE_COUNT; ++kind) fd_case(&s, 2, (mok_route_kind)kind, 0, 40, 1e-4);
  mok_shape top1 = {7, 8, 4, 4, 1, 0};
  fd_case(&top1, 2, MOK_ROUTE_ONE_EXPERT, 0, 0, 1e-4);
  mok_shape k_is_e = {4, 8, 4, 4, 4, 4};
  fd_case(&k_is_e, 2, MOK_ROUTE_UNIFORM, 0, 0, 1e-4);
}

/* Rounding the stored intermediates to bf16 moves results by bf16's precision, not more, and
 * never to NaN. */
void test_reference_rounding_close(void) {
  mok_shape s = {16, 64, 8, 32, 2, 32};
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, &s, 2, MOK_ROUTE_ZIPF, test_seed()), MOK_SUCCESS);
  int64_t n = s.tokens * s.hidden;
  float *exact[2] = {malloc(sizeof(float) * n), malloc(sizeof(float) * n)};
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, exact), MOK_SUCCESS);
  p.cfg.round_bf16 = 1;
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_SUCCESS);
  for (int r = 0; r < 2; ++r) {
    double e = rel_error(p.y[r], exact[r], n);
    CHECK(e > 1e-5 && e < 1e-2);
    free(exact[r]);
  }
  mok_ref_problem_free(&p);
}

/* Bad input gets a clear status and leaves the outputs untouched. */
void test_reference_bad_input(void) {
  mok_shape s = {4, 8, 4, 4, 2, 0};
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, &s, 2, MOK_ROUTE_UNIFORM, test_seed()), MOK_SUCCESS);
  for (int64_t i = 0; i < s.tokens * s.hidden; ++i) p.y[0][i] = p.y[1][i] = 12345.0f;
  int32_t *topk = (int32_t *)p.ranks[1].topk_experts;
  int32_t saved = topk[3];
  topk[3] = 4; /* E = 4: out of range */
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_ERR_EXPERT_ID);
  topk[3] = -1;
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_ERR_EXPERT_ID);
  topk[3] = topk[2]; /* token 1 lists one expert twice */
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_ERR_DUPLICATE_EXPERT);
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads),
               MOK_ERR_DUPLICATE_EXPERT);
  topk[3] = saved;
  int untouched = 1;
  for (int64_t i = 0; i < s.tokens * s.hidden; ++i)
    untouched &= p.y[0][i] == 12345.0f && p.y[1][i] == 12345.0f;
  CHECK(untouched);
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_SUCCESS);

  mok_ref_config bad = p.cfg;
  bad.ep = 3; /* E = 4 does not split over 3 ranks */
  CHECK_STATUS(mok_ref_forward(&bad, p.ranks, p.y), MOK_ERR_INVALID_SHAPE);
  bad = p.cfg;
  bad.shape.top_k = 5;
  CHECK_STATUS(mok_ref_forward(&bad, p.ranks, p.y), MOK_ERR_INVALID_SHAPE);
  bad = p.cfg;
  bad.use_swiglu_limit = 1;
  bad.swiglu_limit = -1.0f;
  CHECK_STATUS(mok_ref_forward(&bad, p.ranks, p.y), MOK_ERR_INVALID_ARGUMENT);
  bad = p.cfg;
  bad.shape.shared_intermediate = 4; /* shared weights are NULL */
  CHECK_STATUS(mok_ref_forward(&bad, p.ranks, p.y), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_ref_forward(NULL, p.ranks, p.y), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, NULL), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, NULL, p.grads), MOK_ERR_INVALID_ARGUMENT);
  mok_ref_grads g1 = p.grads[1];
  p.grads[1].dw_down = NULL;
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads),
               MOK_ERR_INVALID_ARGUMENT);
  p.grads[1] = g1;
  double worst;
  int64_t checked;
  CHECK_STATUS(mok_ref_gradient_check(&p.cfg, p.ranks, (const float *const *)p.dy, -1, 1, &worst,
                                      &checked),
               MOK_ERR_INVALID_ARGUMENT);
  mok_ref_problem_free(&p);
}

/* fetch callback over a whole problem: expert e lives on rank e / (E/EP) */
static void fetch_from_problem(void *ctx, int e, float *wg, float *wu, float *wd) {
  const mok_ref_problem *p = (const mok_ref_problem *)ctx;
  const mok_shape *s = &p->cfg.shape;
  int64_t el = s->num_experts / p->cfg.ep, n = s->intermediate * s->hidden;
  const mok_ref_rank *owner = &p->ranks[e / el];
  memcpy(wg, owner->w_gate + (e % el) * n, sizeof(float) * n);
  memcpy(wu, owner->w_up + (e % el) * n, sizeof(float) * n);
  memcpy(wd, owner->w_down + (e % el) * n, sizeof(float) * n);
}

/* One token from only its experts' weights gives what the whole reference gives for it; skipping
 * the weight gradients changes nothing else. */
void test_reference_token(void) {
  mok_shape s = {9, 16, 8, 8, 3, 8};
  mok_ref_problem p;
  CHECK_STATUS(mok_ref_problem_make(&p, &s, 2, MOK_ROUTE_ZIPF, test_seed()), MOK_SUCCESS);
  p.cfg.round_bf16 = 1;
  p.cfg.use_swiglu_limit = 1;
  p.cfg.swiglu_limit = 0.7f;
  CHECK_STATUS(mok_ref_forward(&p.cfg, p.ranks, p.y), MOK_SUCCESS);
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads), MOK_SUCCESS);
  float y[16], dx[16], drw[3];
  for (int r = 0; r < 2; ++r)
    for (int64_t t = 0; t < s.tokens; t += 4) {
      const mok_ref_rank *in = &p.ranks[r];
      CHECK_STATUS(mok_ref_token(&p.cfg, in->x + t * 16, in->topk_experts + t * 3, in->router_weights + t * 3,
                                 p.dy[r] + t * 16, fetch_from_problem, &p, in->ws_gate, in->ws_up,
                                 in->ws_down, y, dx, drw),
                   MOK_SUCCESS);
      CHECK(rel_error(y, p.y[r] + t * 16, 16) < 1e-6);
      CHECK(rel_error(dx, p.grads[r].dx + t * 16, 16) < 1e-6);
      CHECK(rel_error(drw, p.grads[r].d_router_weights + t * 3, 3) < 1e-6);
    }
  /* weight gradients skipped on every rank: dx and d_router_weights unchanged, bit for bit */
  float *dx_all = malloc(sizeof(float) * 9 * 16), *drw_all = malloc(sizeof(float) * 9 * 3);
  memcpy(dx_all, p.grads[1].dx, sizeof(float) * 9 * 16);
  memcpy(drw_all, p.grads[1].d_router_weights, sizeof(float) * 9 * 3);
  mok_ref_grads saved[2] = {p.grads[0], p.grads[1]};
  for (int r = 0; r < 2; ++r)
    p.grads[r].dw_gate = p.grads[r].dw_up = p.grads[r].dw_down = p.grads[r].dws_gate =
        p.grads[r].dws_up = p.grads[r].dws_down = NULL;
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads), MOK_SUCCESS);
  CHECK(memcmp(dx_all, p.grads[1].dx, sizeof(float) * 9 * 16) == 0);
  CHECK(memcmp(drw_all, p.grads[1].d_router_weights, sizeof(float) * 9 * 3) == 0);
  p.grads[0].dw_gate = saved[0].dw_gate; /* some ranks with, some without: refused */
  CHECK_STATUS(mok_ref_backward(&p.cfg, p.ranks, (const float *const *)p.dy, p.grads), MOK_ERR_INVALID_ARGUMENT);
  p.grads[0] = saved[0];
  p.grads[1] = saved[1];
  free(dx_all);
  free(drw_all);
  /* bad input */
  const mok_ref_rank *in = &p.ranks[0];
  int32_t dup[3] = {1, 1, 2}, out_of_range[3] = {0, 8, 1};
  CHECK_STATUS(mok_ref_token(&p.cfg, in->x, dup, in->router_weights, NULL, fetch_from_problem, &p,
                             in->ws_gate, in->ws_up, in->ws_down, y, NULL, NULL),
               MOK_ERR_DUPLICATE_EXPERT);
  CHECK_STATUS(mok_ref_token(&p.cfg, in->x, out_of_range, in->router_weights, NULL, fetch_from_problem, &p,
                             in->ws_gate, in->ws_up, in->ws_down, y, NULL, NULL),
               MOK_ERR_EXPERT_ID);
  CHECK_STATUS(mok_ref_token(&p.cfg, in->x, in->topk_experts, in->router_weights, p.dy[0], fetch_from_problem,
                             &p, in->ws_gate, in->ws_up, in->ws_down, y, NULL, drw),
               MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_ref_token(&p.cfg, in->x, in->topk_experts, in->router_weights, NULL, NULL, &p,
                             in->ws_gate, in->ws_up, in->ws_down, y, NULL, NULL),
               MOK_ERR_INVALID_ARGUMENT);
  mok_ref_problem_free(&p);
}
