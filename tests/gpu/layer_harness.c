/* layer_harness.c — see layer_harness.h: inputs of every rank from the shared seed, device copies of
 * this rank's part, one run of the layer, and checks against the CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "mok_reference.h"
#include "tests/gpu/internal.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

#define GUARD 256 /* poisoned bytes after every output */

static float *fmalloc(int64_t n) { return (float *)calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

mok_config lh_config(const lh_case *c) {
  mok_config cfg;
  mok_config_init(&cfg);
  mok_plan *p = &cfg.plan;
  /* MOK_TEST_PLAN: plan fields pinned for the whole suite (e.g. "schedule=serial"), under the
   * case's own */
  const char *suite_plan = getenv("MOK_TEST_PLAN");
  if (suite_plan) CHECK_STATUS(mok_plan_parse(suite_plan, p), MOK_SUCCESS);
  if (c->plan) CHECK_STATUS(mok_plan_parse(c->plan, p), MOK_SUCCESS);
  if (c->tile_m) p->tile_m = c->tile_m;
  if (c->minibatch_rows) p->minibatch_rows = c->minibatch_rows;
  if (c->comm_sms) p->fwd_comm_ctas = c->comm_sms;
  if (c->bwd_comm_sms) p->bwd_comm_ctas = c->bwd_comm_sms;
  if (c->shared_inline && c->Is > 0) p->shared_fwd = p->shared_bwd = MOK_SHARED_IN_LINE;
  if (c->macro_minibatches) cfg.macrobatch_minibatches = c->macro_minibatches;
  cfg.ring_bytes = c->ring_bytes;
  cfg.dtype = c->dtype;
  if (c->bf16_wgrad) cfg.fp8_weight_grads = 0;
  else if (c->wgrad_mode) cfg.fp8_weight_grads = c->wgrad_mode;
  cfg.fp8_fused_router_grad = !c->unfused_drw;
  cfg.fp8_shared_expert = c->dtype != MOK_DTYPE_BF16 && c->fp8_shared;
  const int tile = p->tile_m ? p->tile_m : 128;
  if (p->minibatch_rows % tile) p->minibatch_rows = tile;
  cfg.schedule_capacity = c->capacity;
  cfg.use_swiglu_limit = c->use_limit;
  cfg.swiglu_limit = c->use_limit ? c->limit : 0.0f;
  cfg.timeout_ms = 20000;
  cfg.plan_cache = ""; /* the suite's plans never depend on what this machine has tuned */
  /* MOK_TEST_PATH: "oracle" (the whole suite on the mma.sync GEMMs), "grouped" (separate
   * communication kernels) or "fused" (the default's path, asked for by name) */
  const char *force = getenv("MOK_TEST_PATH");
  if (!c->path && force) {
    char text[64];
    snprintf(text, sizeof text, "path=%s", force);
    CHECK_STATUS(mok_plan_parse(text, p), MOK_SUCCESS);
  } else if (c->path) {
    p->path = c->path;
  }
  if ((p->path == MOK_PATH_FUSED || p->path == MOK_PATH_GROUPED) && tile % 128)
    p->path = MOK_PATH_ORACLE; /* tile 64: the grouped GEMMs need 128-row tiles */
  if (c->dtype != MOK_DTYPE_BF16 && !c->path) p->path = MOK_PATH_AUTO; /* FP8 runs there only */
  return cfg;
}

int lh_host_make(lh_host *h, const lh_case *c, int ep, uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->c = *c;
  h->ep = ep;
  mok_shape s = {c->T, c->H, c->E, c->I, c->k, c->Is};
  h->shape = s;
  const int64_t T = c->T, H = c->H, I = c->I, k = c->k, Is = c->Is, el = c->E / ep;
  const float sw = 3.0f / sqrtf((float)H), sd = 3.0f / sqrtf((float)I);
  const float ssd = Is > 0 ? 3.0f / sqrtf((float)Is) : 0.0f;
  int bad = 0;
  for (int r = 0; r < ep; ++r) {
    uint64_t st = (uint64_t)r * 64;
    h->x[r] = fmalloc(T * H);
    h->rw[r] = fmalloc(T * k);
    h->dy[r] = fmalloc(T * H);
    h->topk[r] = (int32_t *)calloc((size_t)(T * k + 1), sizeof(int32_t));
    h->wg[r] = fmalloc(el * I * H);
    h->wu[r] = fmalloc(el * I * H);
    h->wd[r] = fmalloc(el * H * I);
    h->sg[r] = fmalloc(Is * H);
    h->su[r] = fmalloc(Is * H);
    h->sd[r] = fmalloc(H * Is);
    mok_fill_random_bf16_values(seed, st + 1, h->x[r], T * H, 1.0f);
    mok_fill_router_weights(seed, st + 2, h->rw[r], T, (int)k);
    mok_fill_random_bf16_values(seed, st + 3, h->dy[r], T * H, 1.0f);
    mok_fill_random_bf16_values(seed, st + 4, h->wg[r], el * I * H, sw);
    mok_fill_random_bf16_values(seed, st + 5, h->wu[r], el * I * H, sw);
    mok_fill_random_bf16_values(seed, st + 6, h->wd[r], el * H * I, sd);
    mok_fill_random_bf16_values(seed, st + 7, h->sg[r], Is * H, sw);
    mok_fill_random_bf16_values(seed, st + 8, h->su[r], Is * H, sw);
    mok_fill_random_bf16_values(seed, st + 9, h->sd[r], H * Is, ssd);
    if (mok_route_fill(c->route, seed, r, T, (int)k, (int)c->E, ep, h->topk[r]) != MOK_SUCCESS) bad = 1;
  }
  if (T > 0 && c->inject == LH_INJECT_DUPLICATE && k >= 2) {
    int32_t *t = h->topk[ep - 1] + (T - 1) * k;
    t[1] = t[0];
  }
  if (T > 0 && c->inject == LH_INJECT_BAD_ID) h->topk[ep - 1][(T / 2) * k] = (int32_t)c->E;
  int64_t n6[6] = {el * I * H, el * I * H, el * H * I, Is * H, Is * H, H * Is};
  for (int i = 0; i < 6; ++i) {
    h->prefill[i] = fmalloc(n6[i]);
    if (c->accumulate) mok_fill_random_bf16_values(seed, 1000 + i, h->prefill[i], n6[i], 0.5f);
  }
  return bad;
}

void lh_host_free(lh_host *h) {
  for (int r = 0; r < h->ep; ++r) {
    free(h->x[r]); free(h->rw[r]); free(h->dy[r]); free(h->topk[r]);
    free(h->wg[r]); free(h->wu[r]); free(h->wd[r]);
    free(h->sg[r]); free(h->su[r]); free(h->sd[r]);
  }
  for (int i = 0; i < 6; ++i) free(h->prefill[i]);
  memset(h, 0, sizeof *h);
}

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes + GUARD) != cudaSuccess) return NULL;
  return p;
}

int lh_dev_alloc(lh_dev *d, const lh_host *h) {
  memset(d, 0, sizeof *d);
  const lh_case *c = &h->c;
  const int64_t T = c->T, H = c->H, I = c->I, k = c->k, Is = c->Is, el = c->E / h->ep;
  const size_t ge = c->grad_fp32 ? 4 : 2;
  d->x = dmalloc(T * H * 2);
  d->y = dmalloc(T * H * 2);
  d->dy = dmalloc(T * H * 2);
  d->dx = dmalloc(T * H * 2);
  d->rw = (float *)dmalloc(T * k * 4);
  d->drw = (float *)dmalloc(T * k * 4);
  d->topk = (int32_t *)dmalloc(T * k * 4);
  int64_t n6[6] = {el * I * H, el * I * H, el * H * I, Is * H, Is * H, H * Is};
  int ok = d->x && d->y && d->dy && d->dx && d->rw && d->drw && d->topk;
  for (int i = 0; i < 6; ++i) {
    d->wn[i] = n6[i];
    d->w[i] = dmalloc(n6[i] * 2);
    d->g[i] = dmalloc(n6[i] * ge);
    ok = ok && d->w[i] && d->g[i];
  }
  mok_weights w = {d->w[0], d->w[1], d->w[2], NULL, NULL, NULL,
                   Is ? d->w[3] : NULL, Is ? d->w[4] : NULL, Is ? d->w[5] : NULL,
                   NULL, NULL, NULL, NULL};
  d->weights = w;
  mok_grads g = {d->dx, d->drw, d->g[0], d->g[1], d->g[2], d->g[3], d->g[4], d->g[5],
                 c->grad_fp32, c->accumulate};
  d->grads = g;
  return ok ? 0 : -1;
}

void lh_dev_free(lh_dev *d) {
  cudaFree(d->x); cudaFree(d->y); cudaFree(d->dy); cudaFree(d->dx);
  cudaFree(d->rw); cudaFree(d->drw); cudaFree(d->topk);
  for (int i = 0; i < 6; ++i) { cudaFree(d->w[i]); cudaFree(d->g[i]); }
  memset(d, 0, sizeof *d);
}

static void upload_bf16(void *dst, const float *src, int64_t n) {
  uint16_t *b = (uint16_t *)malloc((size_t)(n > 0 ? n : 1) * 2);
  mok_bf16_from_float_array(src, b, n);
  cudaMemcpy(dst, b, (size_t)n * 2, cudaMemcpyHostToDevice);
  free(b);
}

void lh_dev_upload(lh_dev *d, const lh_host *h, int rank) {
  const lh_case *c = &h->c;
  const int64_t T = c->T, H = c->H, k = c->k;
  upload_bf16(d->x, h->x[rank], T * H);
  upload_bf16(d->dy, h->dy[rank], T * H);
  cudaMemcpy(d->rw, h->rw[rank], (size_t)(T * k) * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d->topk, h->topk[rank], (size_t)(T * k) * 4, cudaMemcpyHostToDevice);
  d->build_in_forward = c->build_in_forward;
  const float *w6[6] = {h->wg[rank], h->wu[rank], h->wd[rank], h->sg[rank], h->su[rank], h->sd[rank]};
  for (int i = 0; i < 6; ++i) upload_bf16(d->w[i], w6[i], d->wn[i]);
  /* poison every output (NaN), guards included */
  cudaMemset(d->y, 0xFF, (size_t)(T * H * 2) + GUARD);
  cudaMemset(d->dx, 0xFF, (size_t)(T * H * 2) + GUARD);
  cudaMemset(d->drw, 0xFF, (size_t)(T * k * 4) + GUARD);
  const size_t ge = c->grad_fp32 ? 4 : 2;
  for (int i = 0; i < 6; ++i) {
    cudaMemset(d->g[i], 0xFF, (size_t)d->wn[i] * ge + GUARD);
    if (c->accumulate) {
      if (c->grad_fp32) cudaMemcpy(d->g[i], h->prefill[i], (size_t)d->wn[i] * 4, cudaMemcpyHostToDevice);
      else upload_bf16(d->g[i], h->prefill[i], d->wn[i]);
    }
  }
  cudaDeviceSynchronize();
}

mok_status lh_run(mok_schedule *s, lh_dev *d, cudaStream_t stream) {
  mok_status st;
  if (d->build_in_forward) {
    st = mok_build_and_forward(s, d->topk, &d->weights, d->x, d->rw, d->y, stream);
  } else {
    st = mok_schedule_build(s, d->topk, stream);
    if (st == MOK_SUCCESS) st = mok_forward(s, &d->weights, d->x, d->rw, d->y, stream);
  }
  if (st == MOK_SUCCESS) st = mok_backward(s, &d->weights, d->x, d->rw, d->dy, &d->grads, stream);
  return st;
}

/* Device tensor -> host floats (bf16 or fp32 storage). */
static float *fetch(const void *dev, int64_t n, int f32) {
  float *out = fmalloc(n);
  if (f32) {
    cudaMemcpy(out, dev, (size_t)n * 4, cudaMemcpyDeviceToHost);
  } else {
    uint16_t *b = (uint16_t *)malloc((size_t)(n > 0 ? n : 1) * 2);
    cudaMemcpy(b, dev, (size_t)n * 2, cudaMemcpyDeviceToHost);
    mok_bf16_to_float_array(b, out, n);
    free(b);
  }
  return out;
}

double lh_rel_err(const float *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!isfinite(got[i])) return NAN;
    double dlt = (double)got[i] - want[i];
    num += dlt * dlt;
    den += (double)want[i] * want[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}

static int guard_ok(const void *dev, size_t offset) {
  unsigned char b[GUARD];
  cudaMemcpy(b, (const char *)dev + offset, GUARD, cudaMemcpyDeviceToHost);
  for (int i = 0; i < GUARD; ++i)
    if (b[i] != 0xFF) return 0;
  return 1;
}

void lh_check_guards(const lh_dev *d, const lh_host *h) {
  const lh_case *c = &h->c;
  const size_t ge = c->grad_fp32 ? 4 : 2;
  CHECK(guard_ok(d->y, (size_t)(c->T * c->H * 2)));
  CHECK(guard_ok(d->dx, (size_t)(c->T * c->H * 2)));
  CHECK(guard_ok(d->drw, (size_t)(c->T * c->k * 4)));
  for (int i = 0; i < 6; ++i) CHECK(guard_ok(d->g[i], (size_t)d->wn[i] * ge));
}

static const char *g_names[6] = {"dWg", "dWu", "dWd", "dWsg", "dWsu", "dWsd"};

void lh_check_against_reference(const lh_host *h, const lh_dev *d, int rank, const char *label) {
  const lh_case *c = &h->c;
  const int64_t T = c->T, H = c->H, I = c->I, k = c->k, Is = c->Is, el = c->E / h->ep;
  /* FP8: the reference's FP8 mode (h holds the weights' dequantized values) */
  const int fp8 = c->dtype == MOK_DTYPE_FP8_BLOCK128;
  /* the GPU's FP8 weight gradients: on unless asked off, or accumulating into bf16 (then bf16) */
  const int f8w = fp8 && !c->bf16_wgrad && (c->grad_fp32 || !c->accumulate);
  mok_config dflt; /* the layer's FP8 weight-gradient mode: the case's, or the default */
  mok_config_init(&dflt);
  const int wmode = c->wgrad_mode ? c->wgrad_mode : dflt.fp8_weight_grads;
  mok_ref_config rc = {.shape = h->shape, .ep = h->ep, .use_swiglu_limit = c->use_limit,
                       .swiglu_limit = c->use_limit ? c->limit : 0.0f, .round_bf16 = 1,
                       .fp8_block128 = fp8, .fp8_wgrad = f8w ? wmode : 0,
                       .fp8_fused_drw = fp8 && !c->unfused_drw,
                       .fp8_shared = fp8 && c->fp8_shared};
  mok_ref_rank ranks[LH_MAX_RANKS];
  float *y[LH_MAX_RANKS];
  mok_ref_grads gr[LH_MAX_RANKS];
  const float *dy[LH_MAX_RANKS];
  for (int r = 0; r < h->ep; ++r) {
    mok_ref_rank in = {h->x[r], h->topk[r], h->rw[r], h->wg[r], h->wu[r], h->wd[r],
                       Is ? h->sg[r] : NULL, Is ? h->su[r] : NULL, Is ? h->sd[r] : NULL};
    ranks[r] = in;
    y[r] = fmalloc(T * H);
    dy[r] = h->dy[r];
    mok_ref_grads g = {fmalloc(T * H), fmalloc(T * k), fmalloc(el * I * H), fmalloc(el * I * H),
                       fmalloc(el * H * I), fmalloc(Is * H), fmalloc(Is * H), fmalloc(H * Is)};
    gr[r] = g;
  }
  CHECK_STATUS(mok_ref_forward(&rc, ranks, y), MOK_SUCCESS);
  CHECK_STATUS(mok_ref_backward(&rc, ranks, dy, gr), MOK_SUCCESS);

  double e[9];
  float *got;
  got = fetch(d->y, T * H, 0); e[0] = lh_rel_err(got, y[rank], T * H); free(got);
  got = fetch(d->dx, T * H, 0); e[1] = lh_rel_err(got, gr[rank].dx, T * H); free(got);
  got = fetch(d->drw, T * k, 1); e[2] = lh_rel_err(got, gr[rank].d_router_weights, T * k); free(got);
  float *ref6[6] = {gr[rank].dw_gate, gr[rank].dw_up, gr[rank].dw_down, gr[rank].dws_gate,
                    gr[rank].dws_up, gr[rank].dws_down};
  int nw = Is > 0 ? 6 : 3;
  for (int i = 0; i < nw; ++i) {
    if (c->accumulate)
      for (int64_t j = 0; j < d->wn[i]; ++j) ref6[i][j] += h->prefill[i][j];
    got = fetch(d->g[i], d->wn[i], c->grad_fp32);
    e[3 + i] = lh_rel_err(got, ref6[i], d->wn[i]);
    free(got);
  }
  printf("  %-26s r%d y %.1e dx %.1e drw %.1e", label, rank, e[0], e[1], e[2]);
  for (int i = 0; i < nw; ++i) printf(" %s %.1e", g_names[i], e[3 + i]);
  printf("\n");
  for (int i = 0; i < 3 + nw; ++i) {
    const double tol = i == 0 || c->tol <= 0 ? LH_TOL : c->tol; /* y: always LH_TOL */
    if (!(e[i] < tol)) {
      ++mok_test_failures;
      fprintf(stderr, "  %s rank %d: tensor %d relative error %.3e (tolerance %.0e)\n", label, rank,
              i, e[i], tol);
    }
  }
  lh_check_guards(d, h);
  for (int r = 0; r < h->ep; ++r) {
    free(y[r]);
    free(gr[r].dx); free(gr[r].d_router_weights); free(gr[r].dw_gate); free(gr[r].dw_up);
    free(gr[r].dw_down); free(gr[r].dws_gate); free(gr[r].dws_up); free(gr[r].dws_down);
  }
}

static int all_nan(const void *dev, int64_t n, int f32) {
  float *v = fetch(dev, n, f32);
  int ok = 1;
  for (int64_t i = 0; i < n && ok; ++i) ok = isnan(v[i]);
  free(v);
  return ok;
}

void lh_check_all_nan(const lh_host *h, const lh_dev *d, const char *label) {
  const lh_case *c = &h->c;
  int ok = all_nan(d->y, c->T * c->H, 0) && all_nan(d->dx, c->T * c->H, 0) &&
           all_nan(d->drw, c->T * c->k, 1);
  for (int i = 0; i < (c->Is > 0 ? 6 : 3); ++i) ok = ok && all_nan(d->g[i], d->wn[i], c->grad_fp32);
  if (!ok) fprintf(stderr, "  %s: an output is not NaN after a device fault\n", label);
  CHECK(ok);
  lh_check_guards(d, h);
}

void *lh_snapshot(const lh_dev *d, const lh_host *h, int64_t *bytes) {
  const lh_case *c = &h->c;
  const size_t ge = c->grad_fp32 ? 4 : 2;
  size_t sz[9] = {(size_t)(c->T * c->H * 2), (size_t)(c->T * c->H * 2), (size_t)(c->T * c->k * 4)};
  const void *src[9] = {d->y, d->dx, d->drw};
  for (int i = 0; i < 6; ++i) {
    sz[3 + i] = (size_t)d->wn[i] * ge;
    src[3 + i] = d->g[i];
  }
  size_t total = 0;
  for (int i = 0; i < 9; ++i) total += sz[i];
  char *blob = (char *)malloc(total + 1);
  size_t off = 0;
  for (int i = 0; i < 9; ++i) {
    cudaMemcpy(blob + off, src[i], sz[i], cudaMemcpyDeviceToHost);
    off += sz[i];
  }
  *bytes = (int64_t)total;
  return blob;
}

/* ---- whole cases ---- */
lh_case lh_base_case(void) {
  lh_case c;
  memset(&c, 0, sizeof c);
  c.T = 200; c.H = 256; c.E = 8; c.I = 256; c.k = 2; c.Is = 0;
  c.route = MOK_ROUTE_UNIFORM;
  return c;
}

mok_status lh_env_open(mok_group *g, lh_env *e, const lh_host *h, int nsched) {
  memset(e, 0, sizeof *e);
  mok_config cfg = lh_config(&h->c);
  mok_shape shape = h->shape;
  if (h->c.ws_tokens > shape.tokens) shape.tokens = h->c.ws_tokens;
  mok_status st = mok_workspace_create(g, &shape, &cfg, &e->ws);
  if (st != MOK_SUCCESS) return st;
  if (nsched > 0) st = mok_schedule_create(e->ws, &e->s);
  if (st == MOK_SUCCESS && e->s && shape.tokens != h->shape.tokens)
    st = mok_schedule_set_tokens(e->s, h->shape.tokens);
  if (st == MOK_SUCCESS && e->s && !mok_gpu_fp8(e->ws)) {
    /* BF16: the per-row buffers start as NaN (what a freed allocation may hold), so that a row
     * the layer reads before writing it, a padding or tail row (tail_rows.h) above all, cannot
     * pass unseen: the schedule's rows (received, pre-activations, activations, outputs) and the
     * workspace's backward rows (d_out, d_act, dgu) */
    const mok_schedule *s = e->s;
    const mok_workspace *w = e->ws;
    if (cudaMemset(s->recv_x, 0xFF, (size_t)((char *)s->sg - (char *)s->recv_x)) != cudaSuccess ||
        cudaMemset(w->d_out, 0xFF, (size_t)((char *)w->ys - (char *)w->d_out)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
      st = MOK_ERR_CUDA;
  }
  cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking);
  return st;
}

void lh_env_close(lh_env *e) {
  if (e->stream) cudaStreamDestroy(e->stream);
  mok_schedule_destroy(e->s);
  mok_workspace_destroy(e->ws);
}

mok_status lh_device_error(mok_workspace *ws) {
  mok_status dev = MOK_ERR_INTERNAL;
  CHECK_STATUS(mok_workspace_error(ws, &dev), MOK_SUCCESS);
  return dev;
}

int lh_setup_open(mok_group *g, lh_setup *u, const lh_case *c, const char *label, mok_status *st) {
  if (lh_host_make(&u->h, c, gpu_ctx.size, test_seed())) {
    printf("  %-26s not possible at EP=%d: skipped\n", label, gpu_ctx.size);
    lh_host_free(&u->h);
    return 0;
  }
  CHECK(lh_dev_alloc(&u->d, &u->h) == 0);
  lh_dev_upload(&u->d, &u->h, gpu_ctx.rank);
  *st = lh_env_open(g, &u->e, &u->h, 1);
  CHECK_STATUS(*st, MOK_SUCCESS);
  return 1;
}

void lh_setup_close(lh_setup *u) {
  lh_env_close(&u->e);
  lh_dev_free(&u->d);
  lh_host_free(&u->h);
}

/* One case: fresh inputs, one run, compare (or expect a device fault and NaN outputs). */
void lh_run_case(mok_group *g, const lh_case *c, const char *label, mok_status expect) {
  lh_setup u;
  mok_status st;
  if (!lh_setup_open(g, &u, c, label, &st)) return;
  if (st == MOK_SUCCESS) {
    const lh_env *e = &u.e;
    CHECK_STATUS(lh_run(e->s, &u.d, e->stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e->stream) == cudaSuccess);
    mok_status dev = lh_device_error(e->ws);
    if (dev != expect)
      fprintf(stderr, "  %s: device status %d (%s), want %d\n", label, dev, mok_status_string(dev), expect);
    CHECK_STATUS(dev, expect);
    if (expect == MOK_SUCCESS) {
      int64_t rows = -1;
      CHECK_STATUS(mok_schedule_rows(e->s, &rows), MOK_SUCCESS);
      CHECK(rows >= 0);
      lh_check_against_reference(&u.h, &u.d, gpu_ctx.rank, label);
    } else {
      lh_check_all_nan(&u.h, &u.d, label);
    }
  }
  lh_setup_close(&u);
}


int64_t lh_ring_bytes(const lh_case *c, int ep, int regions) {
  mok_config cfg = lh_config(c);
  cfg.ring_bytes = (int64_t)1 << 50; /* as many regions as there are macrobatches */
  const mok_shape s = {c->ws_tokens > c->T ? c->ws_tokens : c->T, c->H, c->E, c->I, c->k, c->Is};
  mok_pipe_params p;
  int64_t all = 0;
  const int tile = cfg.plan.tile_m ? cfg.plan.tile_m : 128;
  const int mb = cfg.plan.minibatch_rows ? cfg.plan.minibatch_rows : tile > 128 ? tile : 128;
  if (mok_pipe_from_config(&s, &cfg, ep, tile, mb, &p, &all) != MOK_SUCCESS) return 0;
  return (int64_t)regions * mok_pipe_region_rows(&p) * c->H * 2;
}

void lh_pair_open(mok_group *g, lh_pair *p, const lh_case *c1, const lh_case *c2, uint64_t seed2) {
  memset(p, 0, sizeof *p);
  lh_host_make(&p->h[0], c1, gpu_ctx.size, test_seed());
  lh_host_make(&p->h[1], c2, gpu_ctx.size, seed2);
  for (int i = 0; i < 2; ++i) {
    CHECK(lh_dev_alloc(&p->d[i], &p->h[i]) == 0);
    lh_dev_upload(&p->d[i], &p->h[i], gpu_ctx.rank);
  }
  const mok_status st = lh_env_open(g, &p->e, &p->h[0], 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  p->ok = st == MOK_SUCCESS;
}

void lh_pair_close(lh_pair *p) {
  lh_env_close(&p->e);
  for (int i = 0; i < 2; ++i) {
    lh_dev_free(&p->d[i]);
    lh_host_free(&p->h[i]);
  }
}

void lh_two_in_flight(lh_pair *p, const char *label) {
  if (!p->ok) return;
  lh_dev *d1 = &p->d[0], *d2 = &p->d[1];
  mok_schedule *s2 = NULL;
  CHECK_STATUS(mok_schedule_create(p->e.ws, &s2), MOK_SUCCESS);
  cudaStream_t q = p->e.stream;
  CHECK_STATUS(mok_schedule_build(p->e.s, d1->topk, q), MOK_SUCCESS);
  CHECK_STATUS(mok_forward(p->e.s, &d1->weights, d1->x, d1->rw, d1->y, q), MOK_SUCCESS);
  CHECK_STATUS(mok_schedule_build(s2, d2->topk, q), MOK_SUCCESS);
  CHECK_STATUS(mok_forward(s2, &d2->weights, d2->x, d2->rw, d2->y, q), MOK_SUCCESS);
  CHECK_STATUS(mok_backward(s2, &d2->weights, d2->x, d2->rw, d2->dy, &d2->grads, q), MOK_SUCCESS);
  CHECK_STATUS(mok_backward(p->e.s, &d1->weights, d1->x, d1->rw, d1->dy, &d1->grads, q),
               MOK_SUCCESS);
  CHECK(cudaStreamSynchronize(q) == cudaSuccess);
  CHECK_STATUS(lh_device_error(p->e.ws), MOK_SUCCESS);
  char name[128];
  for (int i = 0; i < 2; ++i) {
    snprintf(name, sizeof name, "%s, layer %d", label, i + 1);
    lh_check_against_reference(&p->h[i], &p->d[i], gpu_ctx.rank, name);
  }
  mok_schedule_destroy(s2);
}

char *lh_to_host(const void *dev, size_t n) {
  char *h = malloc(n + 1);
  if (h && cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost) != cudaSuccess) memset(h, 0x5A, n);
  return h;
}

int lh_same_bytes(const void *a, const void *b, size_t n) {
  char *x = lh_to_host(a, n), *y = lh_to_host(b, n);
  const int same = x && y && memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

int lh_same_scales(const float *a, const float *b, int64_t blocks, int64_t m_pad, int64_t rows) {
  const size_t n = (size_t)(blocks * m_pad * 4);
  float *x = (float *)lh_to_host(a, n), *y = (float *)lh_to_host(b, n);
  int same = x && y;
  for (int64_t i = 0; same && i < blocks && rows > 0; ++i)
    if (memcmp(x + i * m_pad, y + i * m_pad, (size_t)(rows * 4)) != 0) same = 0;
  free(x);
  free(y);
  return same;
}

void lh_upload_router_rows(float *dev, int64_t n, uint64_t seed) {
  float *h = malloc((size_t)(n * 4 + 4));
  uint64_t z = seed | 1u;
  for (int64_t i = 0; i < n; ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((z >> 40) + 1) / 16777216.0f;
  }
  CHECK(cudaMemcpy(dev, h, (size_t)(n * 4), cudaMemcpyHostToDevice) == cudaSuccess);
  free(h);
}
