/* plan.c — the plan (include/mok.h, mok_plan): its text form, the checks of a config's requests,
 * and its resolution from the shape, the config, the group size and the device. Plain C; no
 * device is touched (the caller passes what the device is: api/plan.h). Every automatic choice is
 * here, so that a reader finds in one place what runs for a shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api/plan.h"
#include "kernels/gemm/gemm_plan.h"

/* ---- the text form ------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  int value;
} plan_word;

static const plan_word path_words[] = {
    {"fused", MOK_PATH_FUSED}, {"grouped", MOK_PATH_GROUPED}, {"oracle", MOK_PATH_ORACLE}, {0, 0}};
static const plan_word schedule_words[] = {
    {"parallel", MOK_SCHEDULE_PARALLEL}, {"serial", MOK_SCHEDULE_SERIAL}, {0, 0}};
static const plan_word shared_words[] = {{"in_line", MOK_SHARED_IN_LINE},
                                         {"beside", MOK_SHARED_BESIDE},
                                         {"beside_late", MOK_SHARED_BESIDE_LATE},
                                         {0, 0}};
static const plan_word mlp_words[] = {
    {"one_launch", MOK_FP8_MLP_ONE_LAUNCH}, {"two_launches", MOK_FP8_MLP_TWO_LAUNCHES}, {0, 0}};

/* One field of the plan: its key, where it lives, and its words (NULL: a number). */
typedef struct {
  const char *key;
  size_t offset;
  const plan_word *words;
} plan_field;

#define PF(key, member, words) {key, offsetof(mok_plan, member), words}
static const plan_field plan_fields[] = {
    PF("path", path, path_words),
    PF("schedule", schedule, schedule_words),
    PF("tile_m", tile_m, NULL),
    PF("minibatch", minibatch_rows, NULL),
    PF("fwd_comm", fwd_comm_ctas, NULL),
    PF("bwd_comm", bwd_comm_ctas, NULL),
    PF("shared_fwd", shared_fwd, shared_words),
    PF("shared_bwd", shared_bwd, shared_words),
    PF("fp8_mlp", fp8_mlp, mlp_words),
    PF("routed_cluster", routed_cluster, NULL),
    PF("shared_cluster", shared_cluster, NULL),
    PF("routed_warpgroups", routed_warpgroups, NULL),
    PF("shared_warpgroups", shared_warpgroups, NULL),
    PF("wgrad_cluster_down", wgrad_cluster_down, NULL),
    PF("wgrad_cluster_gate_up", wgrad_cluster_gate_up, NULL),
};
#undef PF
#define PLAN_FIELDS ((int)(sizeof plan_fields / sizeof plan_fields[0]))

/* Every field of mok_plan is an int or an enum of int size. */
static int *field_at(mok_plan *p, const plan_field *f) { return (int *)((char *)p + f->offset); }
static int field_of(const mok_plan *p, const plan_field *f) {
  return *(const int *)((const char *)p + f->offset);
}

/* "key=value" of length n at text -> *out. */
static mok_status parse_item(const char *text, size_t n, mok_plan *out) {
  const char *eq = memchr(text, '=', n);
  if (!eq) return MOK_ERR_INVALID_ARGUMENT;
  const size_t klen = (size_t)(eq - text), vlen = n - klen - 1;
  char value[32];
  if (vlen == 0 || vlen >= sizeof value) return MOK_ERR_INVALID_ARGUMENT;
  memcpy(value, eq + 1, vlen);
  value[vlen] = '\0';
  for (int i = 0; i < PLAN_FIELDS; ++i) {
    const plan_field *f = &plan_fields[i];
    if (strlen(f->key) != klen || strncmp(f->key, text, klen) != 0) continue;
    if (strcmp(value, "auto") == 0 || strcmp(value, "0") == 0) {
      *field_at(out, f) = 0;
      return MOK_SUCCESS;
    }
    if (f->words) {
      for (const plan_word *w = f->words; w->name; ++w)
        if (strcmp(w->name, value) == 0) {
          *field_at(out, f) = w->value;
          return MOK_SUCCESS;
        }
      return MOK_ERR_INVALID_ARGUMENT;
    }
    char *end = NULL;
    const long v = strtol(value, &end, 10);
    if (!end || *end || v < 0 || v > 1 << 24) return MOK_ERR_INVALID_ARGUMENT;
    *field_at(out, f) = (int)v;
    return MOK_SUCCESS;
  }
  return MOK_ERR_INVALID_ARGUMENT;
}

mok_status mok_plan_parse(const char *text, mok_plan *plan) {
  if (!text || !plan) return MOK_ERR_INVALID_ARGUMENT;
  mok_plan p = *plan;
  for (const char *s = text; *s;) {
    const char *comma = strchr(s, ',');
    const size_t n = comma ? (size_t)(comma - s) : strlen(s);
    if (n > 0) {
      const mok_status st = parse_item(s, n, &p);
      if (st != MOK_SUCCESS) return st;
    }
    s += n + (comma ? 1 : 0);
  }
  *plan = p;
  return MOK_SUCCESS;
}

mok_status mok_plan_format(const mok_plan *plan, char *buf, size_t size) {
  if (!plan || !buf || size == 0) return MOK_ERR_INVALID_ARGUMENT;
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < PLAN_FIELDS; ++i) {
    const plan_field *f = &plan_fields[i];
    const int v = field_of(plan, f);
    if (v == 0) continue; /* auto in a request, not applicable in a resolved plan */
    char value[32];
    snprintf(value, sizeof value, "%d", v);
    if (f->words)
      for (const plan_word *w = f->words; w->name; ++w)
        if (w->value == v) snprintf(value, sizeof value, "%s", w->name);
    const int n = snprintf(buf + at, size - at, "%s%s=%s", at ? "," : "", f->key, value);
    if (n < 0 || (size_t)n >= size - at) return MOK_ERR_INVALID_ARGUMENT;
    at += (size_t)n;
  }
  return MOK_SUCCESS;
}

/* ---- requests ------------------------------------------------------------------------------ */

int64_t mok_plan_rows_per_expert(const mok_shape *s, int ep) {
  const int64_t routed = (int64_t)ep * s->tokens * s->top_k;
  return s->num_experts > 0 ? (routed + s->num_experts - 1) / s->num_experts : 0;
}

static int in_words(int v, const plan_word *w) {
  if (v == 0) return 1;
  for (; w->name; ++w)
    if (w->value == v) return 1;
  return 0;
}

/* The tile the plan will use, and the minibatch (both: the request or the default). */
static int plan_tile(const mok_config *c) { return c->plan.tile_m ? c->plan.tile_m : 128; }
static int plan_minibatch(const mok_config *c) {
  if (c->plan.minibatch_rows) return c->plan.minibatch_rows;
  const int tile = plan_tile(c);
  return tile > 128 ? tile : 128;
}

mok_status mok_plan_check_requests(const mok_shape *s, const mok_config *c, int ep) {
  const mok_plan *q = &c->plan;
  /* values */
  if (!in_words(q->path, path_words) || !in_words(q->schedule, schedule_words) ||
      !in_words(q->shared_fwd, shared_words) || !in_words(q->shared_bwd, shared_words) ||
      !in_words(q->fp8_mlp, mlp_words) || q->shared_bwd == MOK_SHARED_BESIDE_LATE)
    return MOK_ERR_INVALID_ARGUMENT;
  if (q->tile_m != 0 && q->tile_m != 64 && q->tile_m != 128 && q->tile_m != 256)
    return MOK_ERR_INVALID_ARGUMENT;
  const int tile = plan_tile(c), mb = plan_minibatch(c);
  if (mb < 0 || mb % tile) return MOK_ERR_INVALID_ARGUMENT;
  if (q->fwd_comm_ctas < 0 || q->bwd_comm_ctas < 0 || q->fwd_comm_ctas > 128 ||
      q->bwd_comm_ctas > 128)
    return MOK_ERR_INVALID_ARGUMENT;
  const int cl[4] = {q->routed_cluster, q->shared_cluster, q->wgrad_cluster_down,
                     q->wgrad_cluster_gate_up};
  for (int i = 0; i < 4; ++i)
    if (cl[i] < 0 || cl[i] > 2) return MOK_ERR_INVALID_ARGUMENT;
  const int wg[2] = {q->routed_warpgroups, q->shared_warpgroups};
  for (int i = 0; i < 2; ++i)
    if (wg[i] != 0 && wg[i] != 2 && wg[i] != 3) return MOK_ERR_INVALID_ARGUMENT;
  /* what the dtype and the other requests rule out */
  const int fp8 = c->dtype == MOK_DTYPE_FP8_BLOCK128;
  if (c->dtype == MOK_DTYPE_MXFP8) return MOK_ERR_NOT_SUPPORTED;
  if (tile % 128 && (q->path == MOK_PATH_FUSED || q->path == MOK_PATH_GROUPED || fp8))
    return MOK_ERR_NOT_SUPPORTED; /* the grouped GEMMs' tiles are 128 rows */
  if (fp8 && q->path != MOK_PATH_AUTO && q->path != MOK_PATH_GROUPED) return MOK_ERR_NOT_SUPPORTED;
  const int oracle = q->path == MOK_PATH_ORACLE || (q->path == MOK_PATH_AUTO && tile % 128);
  const int ring = c->ring_bytes > 0;
  if (ring && oracle) return MOK_ERR_NOT_SUPPORTED;
  /* the shared expert beside the communication needs separate communication kernels */
  const int has_shared = s->shared_intermediate > 0;
  if (has_shared && (oracle || q->path == MOK_PATH_FUSED) &&
      (q->shared_fwd == MOK_SHARED_BESIDE || q->shared_fwd == MOK_SHARED_BESIDE_LATE))
    return MOK_ERR_NOT_SUPPORTED;
  if (has_shared && (oracle || (q->path == MOK_PATH_FUSED && ring)) &&
      q->shared_bwd == MOK_SHARED_BESIDE)
    return MOK_ERR_NOT_SUPPORTED;
  const int64_t el = s->num_experts / ep;
  if (fp8 && q->fp8_mlp == MOK_FP8_MLP_ONE_LAUNCH && !mok_gg_fp8_mlp_covers(el, s->hidden))
    return MOK_ERR_NOT_SUPPORTED;
  if ((q->wgrad_cluster_down == 2 && s->hidden % 256) ||
      (q->wgrad_cluster_gate_up == 2 && s->intermediate % 256))
    return MOK_ERR_NOT_SUPPORTED; /* pairs of 128-row dW tiles */
  return MOK_SUCCESS;
}

/* ---- resolution ---------------------------------------------------------------------------- */

mok_status mok_plan_resolve(const mok_shape *s, const mok_config *c, int ep,
                            const mok_device_facts *dev, mok_plan *out) {
  const mok_plan *q = &c->plan;
  mok_status st = mok_plan_check_requests(s, c, ep);
  if (st != MOK_SUCCESS) return st;
  mok_plan p;
  memset(&p, 0, sizeof p);
  const int fp8 = c->dtype == MOK_DTYPE_FP8_BLOCK128, ring = c->ring_bytes > 0;
  const int64_t el = s->num_experts / ep, T = s->tokens, Is = s->shared_intermediate;
  const int64_t rpe = mok_plan_rows_per_expert(s, ep);
  p.tile_m = plan_tile(c);
  p.minibatch_rows = plan_minibatch(c);
  /* the path: communication inside the grouped GEMMs where the rows cross NVLink (BF16, EP > 1);
   * the separate communication kernels in FP8 (whose forward pushes its combine from down's
   * epilogues) and on one GPU, where the dispatch is a local copy that a kernel on every SM makes
   * far faster than the fused pull's few comm CTAs; the oracle where the grouped GEMMs cannot run */
  const int grouped_ok = dev->sm90 && p.tile_m % 128 == 0;
  p.path = q->path                ? q->path
           : !grouped_ok && !fp8 ? MOK_PATH_ORACLE
           : fp8 || ep == 1      ? MOK_PATH_GROUPED
                                 : MOK_PATH_FUSED;
  if (p.path != MOK_PATH_ORACLE && !grouped_ok) return MOK_ERR_NOT_SUPPORTED;
  if (fp8 && !grouped_ok) return MOK_ERR_NOT_SUPPORTED;
  if (ring && p.path == MOK_PATH_ORACLE) return MOK_ERR_NOT_SUPPORTED;
  const int grouped = p.path == MOK_PATH_GROUPED, fused = p.path == MOK_PATH_FUSED;
  const int wgmma = p.path != MOK_PATH_ORACLE;
  p.schedule = q->schedule ? q->schedule : MOK_SCHEDULE_PARALLEL;
  if (fp8)
    p.fp8_mlp = q->fp8_mlp ? q->fp8_mlp
                : mok_gg_fp8_mlp_covers(el, s->hidden) ? MOK_FP8_MLP_ONE_LAUNCH
                                                       : MOK_FP8_MLP_TWO_LAUNCHES;
  /* the GEMMs' clusters and warpgroups follow the rows an expert has on average */
  if (wgmma && !fp8) {
    p.routed_cluster = q->routed_cluster ? q->routed_cluster : mok_gg_bf16_cluster_for(rpe);
    p.wgrad_cluster_down =
        q->wgrad_cluster_down ? q->wgrad_cluster_down : mok_gg_bf16_wgrad_cluster_for(s->hidden);
    p.wgrad_cluster_gate_up = q->wgrad_cluster_gate_up
                                  ? q->wgrad_cluster_gate_up
                                  : mok_gg_bf16_wgrad_cluster_for(s->intermediate);
  }
  if (fp8) {
    p.routed_warpgroups =
        q->routed_warpgroups ? q->routed_warpgroups : mok_gg_fp8_warpgroups_for(rpe);
    if (c->fp8_weight_grads == 3) {
      p.wgrad_cluster_down =
          q->wgrad_cluster_down ? q->wgrad_cluster_down : mok_gg_fp8_wgrad_cluster_for(s->hidden);
      p.wgrad_cluster_gate_up = q->wgrad_cluster_gate_up
                                    ? q->wgrad_cluster_gate_up
                                    : mok_gg_fp8_wgrad_cluster_for(s->intermediate);
    }
  }
  if (Is > 0) {
    const int fp8_shared = fp8 && c->fp8_shared_expert;
    if (wgmma && !fp8_shared)
      p.shared_cluster = q->shared_cluster ? q->shared_cluster : mok_gg_bf16_cluster_for(T);
    if (fp8_shared)
      p.shared_warpgroups =
          q->shared_warpgroups ? q->shared_warpgroups : mok_gg_fp8_warpgroups_for(T);
    /* The shared expert needs only the rank's own x (and dy): beside the separate communication
     * kernels it runs while the routed experts wait for their rows; where the communication is
     * inside the GEMMs (the fused forward, a fused backward's ring replays) it runs in line.
     * The FP8 one-launch MLP claims its tiles from counters, so it starts on the SMs the
     * shared expert leaves: there the side stream is joined only before the combine. */
    const int beside_fwd = q->shared_fwd == MOK_SHARED_BESIDE || q->shared_fwd == MOK_SHARED_BESIDE_LATE;
    if ((beside_fwd && !grouped) ||
        (q->shared_bwd == MOK_SHARED_BESIDE && !(wgmma && !(fused && ring))))
      return MOK_ERR_NOT_SUPPORTED; /* (the path was chosen here: AUTO on such a device) */
    if (grouped)
      p.shared_fwd = q->shared_fwd ? q->shared_fwd
                     : fp8 && p.fp8_mlp == MOK_FP8_MLP_ONE_LAUNCH && !ring
                         ? MOK_SHARED_BESIDE_LATE
                         : MOK_SHARED_BESIDE;
    else
      p.shared_fwd = MOK_SHARED_IN_LINE;
    if (wgmma && !(fused && ring))
      p.shared_bwd = q->shared_bwd ? q->shared_bwd : MOK_SHARED_BESIDE;
    else
      p.shared_bwd = MOK_SHARED_IN_LINE;
  }
  /* comm CTAs: the fused pull's (whole clusters of the gate+up launch), or the separate kernels'
   * beside the shared expert */
  if (fused) {
    const int cl = p.routed_cluster > 0 ? p.routed_cluster : 1;
    const int n = q->fwd_comm_ctas ? q->fwd_comm_ctas : MOK_PLAN_FUSED_COMM_CTAS;
    p.fwd_comm_ctas = (n + cl - 1) / cl * cl;
  } else if (p.shared_fwd == MOK_SHARED_BESIDE || p.shared_fwd == MOK_SHARED_BESIDE_LATE) {
    p.fwd_comm_ctas = q->fwd_comm_ctas ? q->fwd_comm_ctas : MOK_PLAN_BESIDE_COMM_CTAS;
  }
  if (p.shared_bwd == MOK_SHARED_BESIDE)
    p.bwd_comm_ctas = q->bwd_comm_ctas ? q->bwd_comm_ctas : MOK_PLAN_BESIDE_COMM_CTAS;
  /* the comm CTAs leave at least half the SMs to the GEMMs (a request too, where it does not
   * apply) */
  if (p.fwd_comm_ctas > dev->sms / 2 || p.bwd_comm_ctas > dev->sms / 2 ||
      q->fwd_comm_ctas > dev->sms / 2 || q->bwd_comm_ctas > dev->sms / 2)
    return MOK_ERR_INVALID_ARGUMENT;
  *out = p;
  return MOK_SUCCESS;
}

/* ---- candidates ---------------------------------------------------------------------------- */

/* A few values of a comm-CTA count around its default d: a third less and more where d is
 * large, half and double where it is small. */
static int comm_values(int d, int *v) {
  if (d <= 0) return 0;
  if (d >= 12) {
    v[0] = d * 2 / 3;
    v[1] = d * 4 / 3;
  } else {
    v[0] = d / 2 > 0 ? d / 2 : 1;
    v[1] = 2 * d;
  }
  return v[0] == v[1] ? 1 : 2;
}

int mok_plan_candidates_on(const mok_shape *s, const mok_config *c, int ep,
                           const mok_device_facts *dev, mok_plan *out, int max) {
  if (!s || !c || !dev || !out || max <= 0) return 0;
  mok_plan base;
  if (mok_plan_resolve(s, c, ep, dev, &base) != MOK_SUCCESS) return 0;
  int n = 0;
  out[n++] = base;
  if (base.path == MOK_PATH_ORACLE) return n; /* the oracle: one way to run */
  enum { MAXV = 3 };
  struct {
    int *field; /* in the request copy */
    int values[MAXV], nv;
  } vary[16];
  mok_config req = *c;
  mok_plan *q = &req.plan;
  int nvary = 0;
#define VARY(member, ...)                                                   \
  do {                                                                      \
    const int vals[] = {__VA_ARGS__};                                       \
    vary[nvary].field = (int *)&q->member; /* every field int-sized */     \
    vary[nvary].nv = (int)(sizeof vals / sizeof vals[0]);                   \
    for (int i_ = 0; i_ < vary[nvary].nv; ++i_) vary[nvary].values[i_] = vals[i_]; \
    ++nvary;                                                                \
  } while (0)
  VARY(path, MOK_PATH_GROUPED, MOK_PATH_FUSED);
  VARY(shared_fwd, MOK_SHARED_IN_LINE, MOK_SHARED_BESIDE, MOK_SHARED_BESIDE_LATE);
  VARY(shared_bwd, MOK_SHARED_IN_LINE, MOK_SHARED_BESIDE);
  VARY(minibatch_rows, 2 * base.minibatch_rows);
  VARY(routed_cluster, 1, 2);
  VARY(shared_cluster, 1, 2);
  VARY(fp8_mlp, MOK_FP8_MLP_ONE_LAUNCH, MOK_FP8_MLP_TWO_LAUNCHES);
  VARY(routed_warpgroups, 2, 3);
  VARY(wgrad_cluster_down, 1, 2);
  VARY(wgrad_cluster_gate_up, 1, 2);
#undef VARY
  int cv[2];
  vary[nvary].field = &q->fwd_comm_ctas;
  vary[nvary].nv = comm_values(base.fwd_comm_ctas, cv);
  memcpy(vary[nvary++].values, cv, sizeof cv);
  vary[nvary].field = &q->bwd_comm_ctas;
  vary[nvary].nv = comm_values(base.bwd_comm_ctas, cv);
  memcpy(vary[nvary++].values, cv, sizeof cv);
  for (int f = 0; f < nvary && n < max; ++f) {
    if (*vary[f].field != 0) continue; /* the caller's request stays */
    for (int i = 0; i < vary[f].nv && n < max; ++i) {
      *vary[f].field = vary[f].values[i];
      mok_plan p;
      if (mok_plan_resolve(s, &req, ep, dev, &p) == MOK_SUCCESS) {
        int seen = 0;
        for (int j = 0; j < n && !seen; ++j) seen = memcmp(&out[j], &p, sizeof p) == 0;
        if (!seen) out[n++] = p;
      }
    }
    *vary[f].field = 0;
  }
  return n;
}
