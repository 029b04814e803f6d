/* reference.c — the CPU reference of the MoE layer over all ranks: input checks, forward and
 * backward, every sum in double (math in mok_reference.h). Written for clarity, not speed: it is
 * the oracle, run on small shapes and on sampled tokens of large ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_internal.h"
#include "schedule/schedule_core.h"

/* ---- shape helpers --------------------------------------------------------------------------- */

typedef struct {
  int64_t T, H, E, I, k, Is, EL; /* EL: experts per rank */
  int ep;
} dims;

static dims dims_of(const mok_ref_config *c) {
  dims d = {c->shape.tokens, c->shape.hidden, c->shape.num_experts, c->shape.intermediate,
            c->shape.top_k,  c->shape.shared_intermediate, 0, c->ep};
  d.EL = d.E / d.ep;
  return d;
}

/* Whether the shared expert runs in FP8 (mok_ref_config.fp8_shared). */
static int shared_fp8(const mok_ref_config *c) { return c->fp8_block128 && c->fp8_shared; }

mok_status mok_ref_check(const mok_ref_config *c, const mok_ref_rank *ranks) {
  if (!c || !ranks) return MOK_ERR_INVALID_ARGUMENT;
  const mok_shape *s = &c->shape;
  if (c->ep <= 0) return MOK_ERR_INVALID_ARGUMENT;
  if (s->tokens < 0 || s->hidden <= 0 || s->num_experts <= 0 || s->intermediate <= 0 ||
      s->top_k <= 0 || s->top_k > s->num_experts || s->shared_intermediate < 0 ||
      s->num_experts % c->ep != 0 || s->num_experts > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  if (c->use_swiglu_limit && !(c->swiglu_limit > 0.0f && isfinite(c->swiglu_limit)))
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_block128 && (s->hidden % 128 || s->intermediate % 128)) return MOK_ERR_MISALIGNED;
  if (shared_fp8(c) && s->shared_intermediate % 128) return MOK_ERR_MISALIGNED;
  for (int r = 0; r < c->ep; ++r) {
    const mok_ref_rank *in = &ranks[r];
    if (s->tokens > 0 && (!in->x || !in->topk_experts || !in->router_weights))
      return MOK_ERR_INVALID_ARGUMENT;
    if (!in->w_gate || !in->w_up || !in->w_down) return MOK_ERR_INVALID_ARGUMENT;
    if (s->shared_intermediate > 0 && (!in->ws_gate || !in->ws_up || !in->ws_down))
      return MOK_ERR_INVALID_ARGUMENT;
  }
  for (int r = 0; r < c->ep; ++r)
    for (int64_t t = 0; t < s->tokens; ++t) {
      int st = mok_sched_check_token(ranks[r].topk_experts + t * s->top_k, (int)s->top_k,
                                     (int)s->num_experts);
      if (st != MOK_SCHED_OK) return (mok_status)st;
    }
  return MOK_SUCCESS;
}

/* ---- one MLP (a routed expert or the shared one) ----------------------------------------------- */

/* The weights of one SwiGLU MLP of intermediate size n: gate, up [n, H]; down [H, n]. */
typedef struct {
  const float *gate, *up, *down;
  int64_t n;
} mlp;

static mlp routed_mlp(const mok_ref_rank *ranks, dims d, int e) {
  const mok_ref_rank *owner = &ranks[e / d.EL];
  int64_t l = e % d.EL;
  mlp m = {owner->w_gate + l * d.I * d.H, owner->w_up + l * d.I * d.H, owner->w_down + l * d.H * d.I,
           d.I};
  return m;
}

static mlp shared_mlp(const mok_ref_rank *r, dims d) {
  mlp m = {r->ws_gate, r->ws_up, r->ws_down, d.Is};
  return m;
}

static double rnd(const mok_ref_config *c, double v) {
  return c->round_bf16 ? (double)mok_bf16_round((float)v) : v;
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* Scratch of one MLP evaluation, sized for max(I, Is) and H. */
typedef struct {
  double *g, *u, *a, *o, *da, *dg, *du;
  float *qv, *qa; /* fp8: the quantized input row [H] and activations [max(I, Is)] */
  float *qd;      /* fp8 backward: the quantized output gradient [H]               */
  float *qg, *qu; /*               and gate / up gradients [max(I, Is)]            */
} mlp_scratch;

/* g = gate v, u = up v, a = swiglu(g, u), o = down a (with the GPU's bf16 roundings if asked;
 * fp8: v and a quantized to E4M3 in 1x128 blocks first, as the FP8 GEMMs see them). */
static void mlp_forward(const mok_ref_config *c, dims d, mlp m, const float *v, mlp_scratch *s,
                        int fp8) {
  const double L = c->swiglu_limit;
  if (fp8) {
    mok_fp8_fake_quantize_row(v, d.H, s->qv);
    v = s->qv;
  }
  for (int64_t i = 0; i < m.n; ++i) {
    double g = 0, u = 0;
    const float *wg = m.gate + i * d.H, *wu = m.up + i * d.H;
    for (int64_t h = 0; h < d.H; ++h) {
      g += (double)wg[h] * v[h];
      u += (double)wu[h] * v[h];
    }
    double gc = c->use_swiglu_limit ? fmin(g, L) : g;
    double uc = c->use_swiglu_limit ? fmax(-L, fmin(u, L)) : u;
    /* fp8: kept for backward as the FP8 path keeps them, in bf16 (the quantization of the
     * gradients below turns the smallest differences into whole E4M3 steps) */
    s->g[i] = fp8 ? rnd(c, g) : g;
    s->u[i] = fp8 ? rnd(c, u) : u;
    s->a[i] = rnd(c, gc * sigmoid(gc) * uc);
  }
  if (fp8) {
    for (int64_t i = 0; i < m.n; ++i) s->qa[i] = (float)s->a[i];
    mok_fp8_fake_quantize_row(s->qa, m.n, s->qa);
    for (int64_t i = 0; i < m.n; ++i) s->a[i] = s->qa[i];
  }
  for (int64_t h = 0; h < d.H; ++h) {
    double o = 0;
    const float *wd = m.down + h * m.n;
    for (int64_t i = 0; i < m.n; ++i) o += (double)wd[i] * s->a[i];
    s->o[h] = rnd(c, o);
  }
}

/* Backward of one MLP for output gradient dout [H] (after mlp_forward on the same v and fp8 filled
 * s): adds this MLP's part of dx into dx [H] and its weight gradients into dgate, dup [n, H] and
 * ddown [H, n] (double accumulators; all three NULL: no weight gradients).
 * fused (fp8 only, non-NULL: the GPU's fused router-weight gradient, c->fp8_fused_drw): the data
 * gradients start from fused->dy, the unweighted output gradient, quantized: g = rnd(W^T q(dy)),
 * d_act = fused->w * g, and fused->drw = sum_i g_i a_i (dout, the weighted one, still feeds the
 * weight gradients).
 * fp8 (the GPU's FP8 backward): the data gradients see dout and the gate / up gradients quantized
 * to E4M3 in 1x128 blocks (the FP8 GEMMs' A operands); the weight gradients take them unquantized,
 * times what the FP8 forward's GEMMs saw (the quantized v and activations); the pre-activations
 * (mlp_forward) and d_act are rounded as the FP8 path stores them. */
typedef struct {
  const float *dy; /* [H] the unweighted output gradient */
  double w;        /* the router weight                  */
  double drw;      /* out: d_router_weight               */
} fused_drw;

static void mlp_backward(const mok_ref_config *c, dims d, mlp m, const float *v, const double *dout,
                         mlp_scratch *s, double *dx, double *dgate, double *dup, double *ddown,
                         int fp8, fused_drw *fused) {
  const double L = c->swiglu_limit;
  if (fp8) {
    for (int64_t h = 0; h < d.H; ++h) s->qd[h] = fused ? fused->dy[h] : (float)dout[h];
    mok_fp8_fake_quantize_row(s->qd, d.H, s->qd);
    v = s->qv;
  }
  for (int64_t i = 0; i < m.n; ++i) s->da[i] = 0;
  for (int64_t h = 0; h < d.H; ++h) {
    const float *wd = m.down + h * m.n;
    const double dq = fp8 ? (double)s->qd[h] : dout[h];
    for (int64_t i = 0; i < m.n; ++i) s->da[i] += (double)wd[i] * dq;
    if (ddown)
      for (int64_t i = 0; i < m.n; ++i) ddown[h * m.n + i] += dout[h] * s->a[i];
  }
  if (fp8) /* d_act as the FP8 path stores it */
    for (int64_t i = 0; i < m.n; ++i) s->da[i] = rnd(c, s->da[i]);
  if (fused) { /* the stored product is g, unweighted: d_rw from it, then d_act = w * g */
    double drw = 0;
    for (int64_t i = 0; i < m.n; ++i) {
      drw += s->da[i] * s->a[i];
      s->da[i] *= fused->w;
    }
    fused->drw = drw;
  }
  for (int64_t i = 0; i < m.n; ++i) {
    double g = s->g[i], u = s->u[i];
    int clamp = c->use_swiglu_limit;
    double gc = clamp ? fmin(g, L) : g;
    double uc = clamp ? fmax(-L, fmin(u, L)) : u;
    double sg = sigmoid(gc);
    double dsilu = sg * (1.0 + gc * (1.0 - sg));
    double pass_g = (clamp && g > L) ? 0.0 : 1.0;
    double pass_u = (clamp && (u < -L || u > L)) ? 0.0 : 1.0;
    s->dg[i] = rnd(c, s->da[i] * uc * dsilu * pass_g);
    s->du[i] = rnd(c, s->da[i] * gc * sg * pass_u);
    s->qg[i] = (float)s->dg[i];
    s->qu[i] = (float)s->du[i];
  }
  if (fp8) {
    mok_fp8_fake_quantize_row(s->qg, m.n, s->qg);
    mok_fp8_fake_quantize_row(s->qu, m.n, s->qu);
  }
  for (int64_t i = 0; i < m.n; ++i) {
    const double dg = s->dg[i], du = s->du[i];
    const double dgx = fp8 ? (double)s->qg[i] : dg, dux = fp8 ? (double)s->qu[i] : du;
    const float *wg = m.gate + i * d.H, *wu = m.up + i * d.H;
    for (int64_t h = 0; h < d.H; ++h) dx[h] += (double)wg[h] * dgx + (double)wu[h] * dux;
    if (dgate)
      for (int64_t h = 0; h < d.H; ++h) {
        dgate[i * d.H + h] += dg * v[h];
        dup[i * d.H + h] += du * v[h];
      }
  }
}

static int scratch_alloc(mlp_scratch *s, dims d) {
  int64_t n = d.I > d.Is ? d.I : d.Is;
  s->g = calloc((size_t)n, sizeof(double));
  s->u = calloc((size_t)n, sizeof(double));
  s->a = calloc((size_t)n, sizeof(double));
  s->da = calloc((size_t)n, sizeof(double));
  s->o = calloc((size_t)d.H, sizeof(double));
  s->qv = calloc((size_t)d.H, sizeof(float));
  s->qa = calloc((size_t)n, sizeof(float));
  s->dg = calloc((size_t)n, sizeof(double));
  s->du = calloc((size_t)n, sizeof(double));
  s->qd = calloc((size_t)d.H, sizeof(float));
  s->qg = calloc((size_t)n, sizeof(float));
  s->qu = calloc((size_t)n, sizeof(float));
  return s->g && s->u && s->a && s->da && s->o && s->qv && s->qa && s->dg && s->du && s->qd &&
         s->qg && s->qu;
}

static void scratch_free(mlp_scratch *s) {
  free(s->g);
  free(s->u);
  free(s->a);
  free(s->da);
  free(s->o);
  free(s->qv);
  free(s->qa);
  free(s->dg);
  free(s->du);
  free(s->qd);
  free(s->qg);
  free(s->qu);
}

/* ---- forward --------------------------------------------------------------------------------- */

/* y[t] = shared(x[t]) + sum_j w[t,j] * expert(x[t]), for every rank's tokens. */
mok_status mok_ref_forward_f64(const mok_ref_config *c, const mok_ref_rank *ranks, double *const *y) {
  mok_status st = mok_ref_check(c, ranks);
  if (st != MOK_SUCCESS) return st;
  if (!y) return MOK_ERR_INVALID_ARGUMENT;
  dims d = dims_of(c);
  for (int r = 0; r < d.ep; ++r)
    if (!y[r] && d.T > 0) return MOK_ERR_INVALID_ARGUMENT;
  mlp_scratch s;
  if (!scratch_alloc(&s, d)) {
    scratch_free(&s);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  for (int r = 0; r < d.ep; ++r) {
    const mok_ref_rank *in = &ranks[r];
    for (int64_t t = 0; t < d.T; ++t) {
      const float *v = in->x + t * d.H;
      double *out = y[r] + t * d.H;
      for (int64_t h = 0; h < d.H; ++h) out[h] = 0;
      if (d.Is > 0) {
        mlp_forward(c, d, shared_mlp(in, d), v, &s, shared_fp8(c));
        for (int64_t h = 0; h < d.H; ++h) out[h] += s.o[h];
      }
      for (int64_t j = 0; j < d.k; ++j) {
        int e = in->topk_experts[t * d.k + j];
        double w = in->router_weights[t * d.k + j];
        mlp_forward(c, d, routed_mlp(ranks, d, e), v, &s, c->fp8_block128);
        for (int64_t h = 0; h < d.H; ++h) out[h] += w * s.o[h];
      }
    }
  }
  scratch_free(&s);
  return MOK_SUCCESS;
}

mok_status mok_ref_forward(const mok_ref_config *c, const mok_ref_rank *ranks, float *const *y) {
  mok_status st = mok_ref_check(c, ranks);
  if (st != MOK_SUCCESS) return st;
  if (!y) return MOK_ERR_INVALID_ARGUMENT;
  dims d = dims_of(c);
  double **yd = calloc((size_t)d.ep, sizeof(double *));
  if (!yd) return MOK_ERR_OUT_OF_MEMORY;
  st = MOK_SUCCESS;
  for (int r = 0; r < d.ep && st == MOK_SUCCESS; ++r) {
    if (!y[r] && d.T > 0) st = MOK_ERR_INVALID_ARGUMENT;
    yd[r] = malloc((size_t)(d.T * d.H + 1) * sizeof(double));
    if (!yd[r]) st = MOK_ERR_OUT_OF_MEMORY;
  }
  if (st == MOK_SUCCESS) st = mok_ref_forward_f64(c, ranks, yd);
  for (int r = 0; r < d.ep; ++r) {
    if (st == MOK_SUCCESS)
      for (int64_t i = 0; i < d.T * d.H; ++i) y[r][i] = (float)yd[r][i];
    free(yd[r]);
  }
  free(yd);
  return st;
}

/* ---- backward -------------------------------------------------------------------------------- */

static void store(float *dst, const double *src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (float)src[i];
}

/* FP8 weight gradients (c->fp8_wgrad): every routed expert's rows of the four operands, in the
 * schedule's order ((source rank, token) ascending, the order the backward loop meets them):
 * dout [rows, H], act [rows, I], x [rows, H], dg and du [rows, I]. */
typedef struct {
  int64_t *first, *next; /* per global expert: its first row, and the next row to write */
  float *dout, *act, *x, *dg, *du;
} wgrad_rows;

static int wgrad_rows_make(wgrad_rows *w, const mok_ref_rank *ranks, dims d) {
  memset(w, 0, sizeof *w);
  const int64_t E = d.EL * d.ep;
  w->first = calloc((size_t)(E + 1), sizeof(int64_t));
  w->next = calloc((size_t)(E + 1), sizeof(int64_t));
  if (!w->first || !w->next) return 0;
  for (int r = 0; r < d.ep; ++r)
    for (int64_t i = 0; i < d.T * d.k; ++i) w->first[ranks[r].topk_experts[i] + 1]++;
  for (int64_t e = 0; e < E; ++e) w->first[e + 1] += w->first[e];
  memcpy(w->next, w->first, (size_t)(E + 1) * sizeof(int64_t));
  const int64_t rows = w->first[E] + 1;
  w->dout = calloc((size_t)(rows * d.H), sizeof(float));
  w->x = calloc((size_t)(rows * d.H), sizeof(float));
  w->act = calloc((size_t)(rows * d.I), sizeof(float));
  w->dg = calloc((size_t)(rows * d.I), sizeof(float));
  w->du = calloc((size_t)(rows * d.I), sizeof(float));
  return w->dout && w->x && w->act && w->dg && w->du;
}

static void wgrad_rows_free(wgrad_rows *w) {
  free(w->first); free(w->next);
  free(w->dout); free(w->x); free(w->act); free(w->dg); free(w->du);
}

/* One routed row of expert e after its mlp_backward: the values the GPU quantizes along the
 * tokens (the act and x its FP8 forward saw, dequantized to bf16 as the GPU does). */
static void wgrad_rows_add(wgrad_rows *w, dims d, int e, const double *dout, const mlp_scratch *s) {
  const int64_t r = w->next[e]++;
  for (int64_t h = 0; h < d.H; ++h) {
    w->dout[r * d.H + h] = (float)dout[h];
    w->x[r * d.H + h] = mok_bf16_round(s->qv[h]);
  }
  for (int64_t i = 0; i < d.I; ++i) {
    w->act[r * d.I + i] = mok_bf16_round((float)s->a[i]);
    w->dg[r * d.I + i] = (float)s->dg[i];
    w->du[r * d.I + i] = (float)s->du[i];
  }
}

/* Each expert's operands quantized along its rows, then dW_down += dout^T act,
 * dW_gate += dg^T x, dW_up += du^T x into the double accumulators (expert e at e * I * H).
 * mode (c->fp8_wgrad): 1: every operand in 128-row blocks; 2: every operand with one scale per
 * column over all the expert's rows; 3: the activations and inputs (act, x) so, the gradients
 * (dout, dg, du) in 128-row blocks. */
static void wgrad_rows_reduce(wgrad_rows *w, dims d, int mode, double *acc_gate,
                              double *acc_up, double *acc_down) {
  for (int64_t e = 0; e < d.EL * d.ep; ++e) {
    const int64_t r0 = w->first[e], n = w->first[e + 1] - r0;
    if (n == 0) continue;
    float *dout = w->dout + r0 * d.H, *x = w->x + r0 * d.H;
    float *act = w->act + r0 * d.I, *dg = w->dg + r0 * d.I, *du = w->du + r0 * d.I;
    /* one scale per column over all n rows, or per 128 rows */
    const int64_t grad_block = mode == 2 ? n : 128, act_block = mode >= 2 ? n : 128;
    mok_fp8_fake_quantize_columns(dout, n, d.H, grad_block);
    mok_fp8_fake_quantize_columns(x, n, d.H, act_block);
    mok_fp8_fake_quantize_columns(act, n, d.I, act_block);
    mok_fp8_fake_quantize_columns(dg, n, d.I, grad_block);
    mok_fp8_fake_quantize_columns(du, n, d.I, grad_block);
    double *gd = acc_down + e * d.I * d.H, *gg = acc_gate + e * d.I * d.H;
    double *gu = acc_up + e * d.I * d.H;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < d.H; ++h) {
        const double dq = dout[r * d.H + h], xq = x[r * d.H + h];
        for (int64_t i = 0; i < d.I; ++i) {
          gd[h * d.I + i] += dq * act[r * d.I + i];
          gg[i * d.H + h] += (double)dg[r * d.I + i] * xq;
          gu[i * d.H + h] += (double)du[r * d.I + i] * xq;
        }
      }
  }
}

mok_status mok_ref_backward(const mok_ref_config *c, const mok_ref_rank *ranks,
                            const float *const *dy, const mok_ref_grads *grads) {
  mok_status st = mok_ref_check(c, ranks);
  if (st != MOK_SUCCESS) return st;
  if (!dy || !grads) return MOK_ERR_INVALID_ARGUMENT;
  dims d = dims_of(c);
  const int fp8 = c->fp8_block128;
  /* weight gradients: all three of a kind on every rank, or none anywhere (skipped) */
  const int want_w = grads[0].dw_gate != NULL, want_ws = d.Is > 0 && grads[0].dws_gate != NULL;
  for (int r = 0; r < d.ep; ++r) {
    const mok_ref_grads *g = &grads[r];
    int has_w = g->dw_gate && g->dw_up && g->dw_down, no_w = !g->dw_gate && !g->dw_up && !g->dw_down;
    int has_ws = g->dws_gate && g->dws_up && g->dws_down, no_ws = !g->dws_gate && !g->dws_up && !g->dws_down;
    if ((d.T > 0 && (!dy[r] || !g->dx || !g->d_router_weights)) || !(want_w ? has_w : no_w) ||
        (d.Is > 0 && !(want_ws ? has_ws : no_ws)))
      return MOK_ERR_INVALID_ARGUMENT;
  }
  const int64_t w_elems = want_w ? d.EL * d.I * d.H : 0, ws_elems = want_ws ? d.Is * d.H : 0;
  /* double accumulators: all ranks' routed weights, then this rank's shared weights */
  double *acc_w = calloc((size_t)(3 * d.ep * w_elems + 1), sizeof(double));
  double *acc_ws = calloc((size_t)(3 * ws_elems + 1), sizeof(double));
  double *dx = calloc((size_t)d.H, sizeof(double));
  double *dout = calloc((size_t)d.H, sizeof(double));
  mlp_scratch s;
  int ok = scratch_alloc(&s, d) && acc_w && acc_ws && dx && dout;
  if (!ok) st = MOK_ERR_OUT_OF_MEMORY;
  /* routed accumulators of expert e: gate, up, down at [0], [1], [2] * ep * w_elems + e * I*H */
  double *acc_gate = acc_w, *acc_up = acc_w + d.ep * w_elems, *acc_down = acc_w + 2 * d.ep * w_elems;
  /* FP8 weight gradients: the routed rows are collected here and reduced after the loop */
  const int f8w = fp8 && c->fp8_wgrad && want_w;
  wgrad_rows wr;
  memset(&wr, 0, sizeof wr);
  if (ok && f8w && !wgrad_rows_make(&wr, ranks, d)) {
    ok = 0;
    st = MOK_ERR_OUT_OF_MEMORY;
  }

  for (int r = 0; ok && r < d.ep; ++r) {
    const mok_ref_rank *in = &ranks[r];
    memset(acc_ws, 0, (size_t)(3 * ws_elems + 1) * sizeof(double));
    for (int64_t t = 0; t < d.T; ++t) {
      const float *v = in->x + t * d.H;
      const float *dyt = dy[r] + t * d.H;
      for (int64_t h = 0; h < d.H; ++h) dx[h] = 0;
      if (d.Is > 0) {
        mlp m = shared_mlp(in, d);
        for (int64_t h = 0; h < d.H; ++h) dout[h] = dyt[h];
        mlp_forward(c, d, m, v, &s, shared_fp8(c));
        if (want_ws)
          mlp_backward(c, d, m, v, dout, &s, dx, acc_ws, acc_ws + ws_elems, acc_ws + 2 * ws_elems,
                       shared_fp8(c), NULL);
        else
          mlp_backward(c, d, m, v, dout, &s, dx, NULL, NULL, NULL, shared_fp8(c), NULL);
      }
      for (int64_t j = 0; j < d.k; ++j) {
        int e = in->topk_experts[t * d.k + j];
        double w = in->router_weights[t * d.k + j];
        mlp m = routed_mlp(ranks, d, e);
        mlp_forward(c, d, m, v, &s, fp8);
        double drw = 0;
        for (int64_t h = 0; h < d.H; ++h) {
          drw += (double)dyt[h] * s.o[h];
          dout[h] = rnd(c, w * dyt[h]);
        }
        fused_drw fu = {dyt, w, 0.0};
        fused_drw *fused = fp8 && c->fp8_fused_drw ? &fu : NULL;
        int64_t off = (int64_t)e * d.I * d.H; /* e = owner * EL + l, so this is owner's slab + l */
        if (want_w && !f8w)
          mlp_backward(c, d, m, v, dout, &s, dx, acc_gate + off, acc_up + off, acc_down + off, fp8,
                       fused);
        else
          mlp_backward(c, d, m, v, dout, &s, dx, NULL, NULL, NULL, fp8, fused);
        grads[r].d_router_weights[t * d.k + j] = (float)(fused ? fu.drw : drw);
        if (f8w) wgrad_rows_add(&wr, d, e, dout, &s);
      }
      store(grads[r].dx + t * d.H, dx, d.H);
    }
    if (want_ws) {
      store(grads[r].dws_gate, acc_ws, ws_elems);
      store(grads[r].dws_up, acc_ws + ws_elems, ws_elems);
      store(grads[r].dws_down, acc_ws + 2 * ws_elems, ws_elems);
    }
  }
  if (ok && f8w) wgrad_rows_reduce(&wr, d, c->fp8_wgrad, acc_gate, acc_up, acc_down);
  if (f8w) wgrad_rows_free(&wr);
  for (int r = 0; ok && want_w && r < d.ep; ++r) {
    store(grads[r].dw_gate, acc_gate + r * w_elems, w_elems);
    store(grads[r].dw_up, acc_up + r * w_elems, w_elems);
    store(grads[r].dw_down, acc_down + r * w_elems, w_elems);
  }
  scratch_free(&s);
  free(acc_w);
  free(acc_ws);
  free(dx);
  free(dout);
  return st;
}
