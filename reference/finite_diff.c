/* finite_diff.c — checks the reference's backward against central finite differences of the loss
 * sum(dy * y), on every entry or on a random sample of each input tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_inputs.h"
#include "reference/ref_internal.h"

enum { X, RW, WG, WU, WD, WSG, WSU, WSD, KINDS };

typedef struct {
  int ep;
  int64_t n[KINDS];          /* entries of each tensor kind on one rank          */
  float **val;               /* [ep * KINDS] mutable copies of the inputs        */
  float **grad;              /* [ep * KINDS] analytic gradients                  */
  mok_ref_rank *ranks;       /* views of val                                     */
  mok_ref_grads *grads;      /* views of grad                                    */
  double **y;                /* [ep] forward outputs in double                   */
} fd_state;

static void fd_free(fd_state *s) {
  for (int i = 0; i < s->ep * KINDS; ++i) {
    if (s->val) free(s->val[i]);
    if (s->grad) free(s->grad[i]);
  }
  for (int r = 0; s->y && r < s->ep; ++r) free(s->y[r]);
  free(s->val);
  free(s->grad);
  free(s->ranks);
  free(s->grads);
  free(s->y);
}

static const float *input_of(const mok_ref_rank *r, int kind) {
  const float *p[KINDS] = {r->x, r->router_weights, r->w_gate, r->w_up, r->w_down,
                           r->ws_gate, r->ws_up, r->ws_down};
  return p[kind];
}

static int fd_init(fd_state *s, const mok_ref_config *c, const mok_ref_rank *in) {
  const mok_shape *sh = &c->shape;
  int64_t el = sh->num_experts / c->ep;
  int64_t n[KINDS] = {sh->tokens * sh->hidden, sh->tokens * sh->top_k,
                      el * sh->intermediate * sh->hidden, el * sh->intermediate * sh->hidden,
                      el * sh->hidden * sh->intermediate, sh->shared_intermediate * sh->hidden,
                      sh->shared_intermediate * sh->hidden, sh->hidden * sh->shared_intermediate};
  memset(s, 0, sizeof *s);
  s->ep = c->ep;
  memcpy(s->n, n, sizeof n);
  s->val = calloc((size_t)(c->ep * KINDS), sizeof(float *));
  s->grad = calloc((size_t)(c->ep * KINDS), sizeof(float *));
  s->ranks = calloc((size_t)c->ep, sizeof(mok_ref_rank));
  s->grads = calloc((size_t)c->ep, sizeof(mok_ref_grads));
  s->y = calloc((size_t)c->ep, sizeof(double *));
  if (!s->val || !s->grad || !s->ranks || !s->grads || !s->y) return 0;
  for (int r = 0; r < c->ep; ++r) {
    for (int kd = 0; kd < KINDS; ++kd) {
      float **v = &s->val[r * KINDS + kd], **g = &s->grad[r * KINDS + kd];
      *v = malloc((size_t)(n[kd] + 1) * sizeof(float));
      *g = malloc((size_t)(n[kd] + 1) * sizeof(float));
      if (!*v || !*g) return 0;
      if (n[kd] > 0) memcpy(*v, input_of(&in[r], kd), (size_t)n[kd] * sizeof(float));
    }
    float **v = &s->val[r * KINDS], **g = &s->grad[r * KINDS];
    mok_ref_rank rk = {v[X], in[r].topk_experts, v[RW], v[WG], v[WU], v[WD], v[WSG], v[WSU], v[WSD]};
    mok_ref_grads gr = {g[X], g[RW], g[WG], g[WU], g[WD], g[WSG], g[WSU], g[WSD]};
    s->ranks[r] = rk;
    s->grads[r] = gr;
    s->y[r] = malloc((size_t)(sh->tokens * sh->hidden + 1) * sizeof(double));
    if (!s->y[r]) return 0;
  }
  return 1;
}

/* sum over ranks of dot(dy, y), in double */
static mok_status loss(fd_state *s, const mok_ref_config *c, const float *const *dy, double *out) {
  mok_status st = mok_ref_forward_f64(c, s->ranks, s->y);
  if (st != MOK_SUCCESS) return st;
  double l = 0;
  int64_t n = c->shape.tokens * c->shape.hidden;
  for (int r = 0; r < c->ep; ++r)
    for (int64_t i = 0; i < n; ++i) l += (double)dy[r][i] * s->y[r][i];
  *out = l;
  return MOK_SUCCESS;
}

static double rms(const float *g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (double)g[i] * g[i];
  return n > 0 ? sqrt(s / (double)n) : 0.0;
}

mok_status mok_ref_gradient_check(const mok_ref_config *cfg, const mok_ref_rank *ranks,
                                  const float *const *dy, int64_t samples, uint64_t seed,
                                  double *worst_error, int64_t *checked) {
  if (!cfg || !ranks || !dy || !worst_error || !checked || samples < 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_status st = mok_ref_check(cfg, ranks);
  if (st != MOK_SUCCESS) return st;
  mok_ref_config c = *cfg;
  c.round_bf16 = 0; /* rounding makes the function a staircase: differences need exact math */
  fd_state s;
  if (!fd_init(&s, &c, ranks)) {
    fd_free(&s);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  st = mok_ref_backward(&c, s.ranks, dy, s.grads);
  double worst = 0;
  int64_t count = 0;
  mok_rng rng = mok_rng_for(seed, 0xfd);
  int kinds = c.shape.shared_intermediate > 0 ? KINDS : WSG;
  for (int kd = 0; kd < kinds && st == MOK_SUCCESS; ++kd) {
    int64_t per_rank = s.n[kd], total = per_rank * c.ep;
    if (total == 0) continue;
    /* the rms over all ranks' entries of this gradient: the floor of the relative error */
    double floor_sq = 0;
    for (int r = 0; r < c.ep; ++r) floor_sq += pow(rms(s.grad[r * KINDS + kd], per_rank), 2) / c.ep;
    double floor = 1e-2 * sqrt(floor_sq) + 1e-30;
    int64_t n_checks = samples == 0 ? total : samples;
    for (int64_t i = 0; i < n_checks && st == MOK_SUCCESS; ++i) {
      int64_t flat = samples == 0 ? i : (int64_t)(mok_rng_next(&rng) % (uint64_t)total);
      int r = (int)(flat / per_rank);
      int64_t idx = flat % per_rank;
      float *p = &s.val[r * KINDS + kd][idx];
      const float orig = *p;
      const double an = s.grad[r * KINDS + kd][idx];
      double err = INFINITY;
      /* With the clamp, a step may cross a kink of the SwiGLU limit (an input entry moves many
       * pre-activations, so even both sides may cross one): the analytic gradient is the
       * derivative on the side the point lies on, which one of the one-sided differences sees
       * whole once the step is short enough; so shorter steps are tried until one agrees. */
      const int tries = c.use_swiglu_limit ? 3 : 1;
      for (int t = 0; t < tries && err > 1e-4 && st == MOK_SUCCESS; ++t) {
        const double h = 1e-3 * fmax(1.0, fabs((double)orig)) / (double)(1 << (4 * t));
        double lp = 0, lm = 0;
        *p = (float)(orig + h);
        double up = *p;
        st = loss(&s, &c, dy, &lp);
        *p = (float)(orig - h);
        double down = *p;
        if (st == MOK_SUCCESS) st = loss(&s, &c, dy, &lm);
        *p = orig;
        double fd = (lp - lm) / (up - down);
        double e = fabs(fd - an) / fmax(fabs(an), floor);
        if (c.use_swiglu_limit && e > 1e-4 && st == MOK_SUCCESS) {
          double l0 = 0;
          st = loss(&s, &c, dy, &l0);
          double fwd = (lp - l0) / (up - orig), bwd = (l0 - lm) / (orig - down);
          e = fmin(e, fmin(fabs(fwd - an), fabs(bwd - an)) / fmax(fabs(an), floor));
        }
        err = fmin(err, e);
      }
      if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
      ++count;
    }
  }
  fd_free(&s);
  if (st != MOK_SUCCESS) return st;
  *worst_error = worst;
  *checked = count;
  return MOK_SUCCESS;
}
