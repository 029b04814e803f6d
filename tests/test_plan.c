/* test_plan.c — the plan (api/plan.c) without a GPU: its choices for the measured shapes, the
 * requests it honours or refuses, its text form, and on random requests the properties every
 * resolved plan has (in range, stable under its own text, reproduced when pinned); tuning's parts
 * that need no GPU: the candidate plans of a request (the default first, each once, every one
 * resolvable and keeping the caller's requests) and the tuned plan cache (keys that tell requests
 * apart, store and lookup, the latest entry winning, damaged lines skipped, a missing file being
 * no entry). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "api/config.h"
#include "api/plan.h"
#include "api/plan_cache.h"
#include "mok.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static const mok_device_facts h200 = {1, 132};

static mok_config config_of(mok_dtype dtype) {
  mok_config c;
  mok_config_init(&c);
  c.dtype = dtype;
  return c;
}

/* The plan of a request, or its status. */
static mok_status resolve(const mok_shape *s, const mok_config *c, int ep,
                          const mok_device_facts *d, mok_plan *p) {
  memset(p, 0x5a, sizeof *p); /* poisoned: every field must be written */
  return mok_plan_resolve(s, c, ep, d, p);
}

void test_plan_defaults(void) {
  const mok_shape dsv3 = {7168, 7168, 256, 2048, 8, 2048};
  mok_plan p;
  /* BF16 DeepSeek-V3 over two GPUs: the fused path, the shared expert in line in the forward and
   * beside the reverse combine in the backward, cluster pairs for 448-row experts */
  mok_config c = config_of(MOK_DTYPE_BF16);
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_FUSED && p.schedule == MOK_SCHEDULE_PARALLEL);
  CHECK(p.tile_m == 128 && p.minibatch_rows == 128);
  CHECK(p.routed_cluster == 2 && p.shared_cluster == 1);
  CHECK(p.fwd_comm_ctas == MOK_PLAN_FUSED_COMM_CTAS && p.bwd_comm_ctas == MOK_PLAN_BESIDE_COMM_CTAS);
  CHECK(p.shared_fwd == MOK_SHARED_IN_LINE && p.shared_bwd == MOK_SHARED_BESIDE);
  CHECK(p.fp8_mlp == 0 && p.routed_warpgroups == 0);
  CHECK(p.wgrad_cluster_down == 2 && p.wgrad_cluster_gate_up == 2); /* H, I in 256-row pairs */
  /* on one GPU: the separate communication kernels (a local copy on every SM), the shared expert
   * beside them in both passes */
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_GROUPED && p.routed_cluster == 2 && p.shared_cluster == 1);
  CHECK(p.shared_fwd == MOK_SHARED_BESIDE && p.shared_bwd == MOK_SHARED_BESIDE);
  CHECK(p.fwd_comm_ctas == MOK_PLAN_BESIDE_COMM_CTAS && p.bwd_comm_ctas == MOK_PLAN_BESIDE_COMM_CTAS);
  /* FP8: the grouped path, the forward MLP in one launch beside the shared expert joined late,
   * the weight gradients in cluster pairs (H and I split into 256-row pairs) */
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_GROUPED && p.fp8_mlp == MOK_FP8_MLP_ONE_LAUNCH);
  CHECK(p.shared_fwd == MOK_SHARED_BESIDE_LATE && p.shared_bwd == MOK_SHARED_BESIDE);
  CHECK(p.fwd_comm_ctas == MOK_PLAN_BESIDE_COMM_CTAS && p.bwd_comm_ctas == MOK_PLAN_BESIDE_COMM_CTAS);
  CHECK(p.routed_warpgroups == 2 && p.wgrad_cluster_down == 2 && p.wgrad_cluster_gate_up == 2);
  CHECK(p.routed_cluster == 0 && p.shared_cluster == 1 && p.shared_warpgroups == 0);
  /* with a token ring the forward has several passes: the shared expert joins after the first */
  c.ring_bytes = (int64_t)1 << 32;
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.shared_fwd == MOK_SHARED_BESIDE);
  /* EP=2's per-GPU work (128 experts): long experts take three FP8 warpgroups */
  mok_shape half = dsv3;
  half.num_experts = 128;
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(resolve(&half, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.routed_warpgroups == 3 && mok_plan_rows_per_expert(&half, 1) == 448);
  /* the FP8 shared expert: its own warpgroups, no BF16 cluster */
  c.fp8_shared_expert = 1;
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.shared_cluster == 0 && p.shared_warpgroups == 3);
  /* other weight-gradient modes: no cluster pairs to choose */
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  c.fp8_weight_grads = 1;
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.wgrad_cluster_down == 0 && p.wgrad_cluster_gate_up == 0);
  /* more local experts than one launch holds: two launches */
  const mok_shape kimi = {7168, 7168, 384, 2048, 8, 2048};
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(resolve(&kimi, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.fp8_mlp == MOK_FP8_MLP_TWO_LAUNCHES && p.shared_fwd == MOK_SHARED_BESIDE);
  /* no shared expert: no placement, no shared fields */
  const mok_shape qwen = {7168, 2048, 128, 768, 8, 0};
  c = config_of(MOK_DTYPE_BF16);
  CHECK_STATUS(resolve(&qwen, &c, 2, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_FUSED && p.routed_cluster == 1 && p.shared_fwd == 0 &&
        p.shared_bwd == 0 && p.shared_cluster == 0 && p.bwd_comm_ctas == 0);
  CHECK_STATUS(resolve(&qwen, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_GROUPED && p.routed_cluster == 2 && p.fwd_comm_ctas == 0);
  /* no sm_90 device, or 64-row tiles: the oracle in BF16, nothing in FP8 */
  const mok_device_facts other = {0, 108};
  c = config_of(MOK_DTYPE_BF16);
  CHECK_STATUS(resolve(&dsv3, &c, 1, &other, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_ORACLE && p.shared_fwd == MOK_SHARED_IN_LINE &&
        p.shared_bwd == MOK_SHARED_IN_LINE && p.routed_cluster == 0 && p.fwd_comm_ctas == 0);
  c.plan.tile_m = 64;
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_ORACLE && p.tile_m == 64 && p.minibatch_rows == 128);
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(resolve(&dsv3, &c, 1, &other, &p), MOK_ERR_NOT_SUPPORTED);
  /* 256-row tiles: the minibatch follows */
  c = config_of(MOK_DTYPE_BF16);
  c.plan.tile_m = 256;
  CHECK_STATUS(resolve(&dsv3, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.tile_m == 256 && p.minibatch_rows == 256);
}

void test_plan_requests(void) {
  const mok_shape dsv3 = {4096, 7168, 256, 2048, 8, 2048};
  mok_plan p;
  mok_config c = config_of(MOK_DTYPE_BF16);
  /* pinned fields are kept */
  c.plan.path = MOK_PATH_GROUPED;
  c.plan.schedule = MOK_SCHEDULE_SERIAL;
  c.plan.shared_fwd = MOK_SHARED_IN_LINE;
  c.plan.routed_cluster = 1;
  c.plan.fwd_comm_ctas = 16;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_GROUPED && p.schedule == MOK_SCHEDULE_SERIAL &&
        p.shared_fwd == MOK_SHARED_IN_LINE && p.routed_cluster == 1);
  CHECK(p.fwd_comm_ctas == 0); /* no kernel beside the forward's shared expert to size */
  c.plan.shared_fwd = MOK_SHARED_BESIDE;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), MOK_SUCCESS);
  CHECK(p.shared_fwd == MOK_SHARED_BESIDE && p.fwd_comm_ctas == 16);
  /* the fused pull's comm CTAs are whole clusters */
  c = config_of(MOK_DTYPE_BF16);
  c.plan.fwd_comm_ctas = 5;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), MOK_SUCCESS);
  CHECK(p.routed_cluster == 2 && p.fwd_comm_ctas == 6);
  /* what cannot run */
  const mok_status cannot = MOK_ERR_NOT_SUPPORTED;
  c = config_of(MOK_DTYPE_BF16);
  c.plan.path = MOK_PATH_FUSED, c.plan.shared_fwd = MOK_SHARED_BESIDE;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.path = MOK_PATH_ORACLE, c.plan.shared_bwd = MOK_SHARED_BESIDE;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_BF16);
  c.ring_bytes = (int64_t)1 << 33, c.plan.shared_bwd = MOK_SHARED_BESIDE; /* fused + ring */
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.path = MOK_PATH_ORACLE, c.ring_bytes = (int64_t)1 << 33;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.shared_fwd = MOK_SHARED_BESIDE; /* AUTO on a device without the grouped GEMMs */
  const mok_device_facts other = {0, 108};
  CHECK_STATUS(resolve(&dsv3, &c, 2, &other, &p), cannot);
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  c.plan.path = MOK_PATH_FUSED;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  c.plan.tile_m = 64;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), cannot);
  const mok_shape kimi = {4096, 7168, 384, 2048, 8, 2048};
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  c.plan.fp8_mlp = MOK_FP8_MLP_ONE_LAUNCH; /* 384 local experts at EP=1 */
  CHECK_STATUS(resolve(&kimi, &c, 1, &h200, &p), cannot);
  CHECK_STATUS(resolve(&kimi, &c, 2, &h200, &p), MOK_SUCCESS); /* 192 a rank */
  const mok_shape odd = {4096, 1152, 64, 640, 8, 0};           /* 9 and 5 tiles of 128 */
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(resolve(&odd, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.wgrad_cluster_down == 1 && p.wgrad_cluster_gate_up == 1 &&
        p.fp8_mlp == MOK_FP8_MLP_TWO_LAUNCHES);
  c.plan.wgrad_cluster_down = 2;
  CHECK_STATUS(resolve(&odd, &c, 1, &h200, &p), cannot);
  c = config_of(MOK_DTYPE_BF16); /* BF16's weight-gradient pairs: the same rule */
  CHECK_STATUS(resolve(&odd, &c, 1, &h200, &p), MOK_SUCCESS);
  CHECK(p.wgrad_cluster_down == 1 && p.wgrad_cluster_gate_up == 1);
  c.plan.wgrad_cluster_gate_up = 2;
  CHECK_STATUS(resolve(&odd, &c, 1, &h200, &p), cannot);
  /* out of range */
  const mok_status bad = MOK_ERR_INVALID_ARGUMENT;
  c = config_of(MOK_DTYPE_BF16);
  c.plan.shared_bwd = MOK_SHARED_BESIDE_LATE; /* a forward placement */
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), bad);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.routed_cluster = 3;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), bad);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.routed_warpgroups = 4;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), bad);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.schedule = (mok_schedule_builder)3;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), bad);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.bwd_comm_ctas = 67; /* more than half of 132 SMs */
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), bad);
  c.plan.bwd_comm_ctas = 66;
  CHECK_STATUS(resolve(&dsv3, &c, 2, &h200, &p), MOK_SUCCESS);
  const mok_shape noshared = {4096, 2048, 128, 768, 8, 0}; /* the request is refused too where */
  c = config_of(MOK_DTYPE_BF16);                           /* nothing runs beside */
  c.plan.fwd_comm_ctas = 100;
  CHECK_STATUS(resolve(&noshared, &c, 1, &h200, &p), bad);
  /* mok_validate sees the device-free part of the same checks */
  c = config_of(MOK_DTYPE_FP8_BLOCK128);
  c.plan.path = MOK_PATH_ORACLE;
  CHECK_STATUS(mok_validate(&dsv3, &c, 2), cannot);
  c = config_of(MOK_DTYPE_BF16);
  c.plan.minibatch_rows = 192;
  CHECK_STATUS(mok_validate(&dsv3, &c, 2), bad);
}

void test_plan_text(void) {
  mok_plan p;
  memset(&p, 0, sizeof p);
  CHECK_STATUS(mok_plan_parse("path=grouped,shared_fwd=beside_late,routed_cluster=1,tile_m=256", &p),
               MOK_SUCCESS);
  CHECK(p.path == MOK_PATH_GROUPED && p.shared_fwd == MOK_SHARED_BESIDE_LATE &&
        p.routed_cluster == 1 && p.tile_m == 256 && p.schedule == 0);
  char buf[512];
  CHECK_STATUS(mok_plan_format(&p, buf, sizeof buf), MOK_SUCCESS);
  CHECK(strcmp(buf, "path=grouped,tile_m=256,shared_fwd=beside_late,routed_cluster=1") == 0);
  /* auto (or 0) clears a field; an empty text changes nothing; empty items are skipped */
  CHECK_STATUS(mok_plan_parse("tile_m=auto,,routed_cluster=0", &p), MOK_SUCCESS);
  CHECK(p.tile_m == 0 && p.routed_cluster == 0 && p.path == MOK_PATH_GROUPED);
  CHECK_STATUS(mok_plan_parse("", &p), MOK_SUCCESS);
  /* a bad item leaves the plan as it was */
  const mok_plan before = p;
  CHECK_STATUS(mok_plan_parse("schedule=serial,path=v1", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
  CHECK_STATUS(mok_plan_parse("no_such_key=1", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_parse("tile_m", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_parse("tile_m=12x", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_parse("tile_m=-1", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_parse("path=", &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_parse(NULL, &p), MOK_ERR_INVALID_ARGUMENT);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
  /* a buffer too small for the text */
  CHECK_STATUS(mok_plan_format(&p, buf, 8), MOK_ERR_INVALID_ARGUMENT);
  CHECK(strlen(buf) < 8);
  memset(&p, 0, sizeof p);
  CHECK_STATUS(mok_plan_format(&p, buf, sizeof buf), MOK_SUCCESS);
  CHECK(buf[0] == '\0');
}

/* Random requests on random shapes: whatever resolves is in range, reads back from its text, and
 * resolves to itself when pinned (so a plan saved as text reruns as it ran). */
void test_plan_random(void) {
  mok_rng rng = mok_rng_for(test_seed(), 0x91a);
  int resolved = 0;
  for (int it = 0; it < 4000; ++it) {
    const int ep = 1 << mok_rng_below(&rng, 4);
    const int64_t el = 1 + mok_rng_below(&rng, 300);
    mok_shape s = {mok_rng_below(&rng, 9000), 128 * (1 + mok_rng_below(&rng, 64)), el * ep,
                   128 * (1 + mok_rng_below(&rng, 32)), 1, 128 * mok_rng_below(&rng, 3)};
    s.top_k = 1 + mok_rng_below(&rng, s.num_experts < 16 ? (int)s.num_experts : 16);
    mok_config c = config_of(mok_rng_below(&rng, 2) ? MOK_DTYPE_BF16 : MOK_DTYPE_FP8_BLOCK128);
    c.fp8_weight_grads = mok_rng_below(&rng, 4);
    c.fp8_shared_expert = mok_rng_below(&rng, 2);
    if (mok_rng_below(&rng, 4) == 0) c.ring_bytes = (int64_t)1 << (28 + mok_rng_below(&rng, 8));
    mok_plan *q = &c.plan;
    if (mok_rng_below(&rng, 2)) q->path = (mok_path)mok_rng_below(&rng, 4);
    if (mok_rng_below(&rng, 3) == 0) q->tile_m = (int[]){64, 128, 256}[mok_rng_below(&rng, 3)];
    if (mok_rng_below(&rng, 3) == 0) q->shared_fwd = (mok_shared_placement)mok_rng_below(&rng, 4);
    if (mok_rng_below(&rng, 3) == 0) q->shared_bwd = (mok_shared_placement)mok_rng_below(&rng, 3);
    if (mok_rng_below(&rng, 3) == 0) q->fp8_mlp = (mok_fp8_mlp_form)mok_rng_below(&rng, 3);
    if (mok_rng_below(&rng, 3) == 0) q->routed_cluster = mok_rng_below(&rng, 3);
    if (mok_rng_below(&rng, 3) == 0) q->wgrad_cluster_down = mok_rng_below(&rng, 3);
    if (mok_rng_below(&rng, 3) == 0) q->fwd_comm_ctas = mok_rng_below(&rng, 80);
    const mok_device_facts d = {mok_rng_below(&rng, 8) != 0, 132};
    mok_plan p;
    if (mok_validate_complete(&s, &c, ep) != MOK_SUCCESS) continue;
    const mok_status st = resolve(&s, &c, ep, &d, &p);
    if (st != MOK_SUCCESS) {
      CHECK(st == MOK_ERR_NOT_SUPPORTED || st == MOK_ERR_INVALID_ARGUMENT);
      continue;
    }
    ++resolved;
    CHECK(p.path >= MOK_PATH_FUSED && p.path <= MOK_PATH_GROUPED);
    CHECK(p.fwd_comm_ctas <= d.sms / 2 && p.bwd_comm_ctas <= d.sms / 2);
    CHECK(p.minibatch_rows % p.tile_m == 0);
    CHECK(c.dtype == MOK_DTYPE_BF16 || p.path == MOK_PATH_GROUPED);
    CHECK(s.shared_intermediate > 0 || (p.shared_fwd == 0 && p.shared_bwd == 0));
    char text[512];
    CHECK_STATUS(mok_plan_format(&p, text, sizeof text), MOK_SUCCESS);
    mok_plan back;
    memset(&back, 0, sizeof back);
    CHECK_STATUS(mok_plan_parse(text, &back), MOK_SUCCESS);
    CHECK(memcmp(&back, &p, sizeof p) == 0);
    mok_config pinned = c;
    pinned.plan = p;
    mok_plan again;
    CHECK_STATUS(resolve(&s, &pinned, ep, &d, &again), MOK_SUCCESS);
    CHECK(memcmp(&again, &p, sizeof p) == 0);
  }
  printf("    %d of 4000 random requests resolved\n", resolved);
  CHECK(resolved > 1000);
}

/* Whether a candidate other than the default holds every field text names at its value. */
static int has_plan(const mok_plan *ps, int n, const char *text) {
  mok_plan want;
  memset(&want, 0, sizeof want);
  if (mok_plan_parse(text, &want) != MOK_SUCCESS) return 0;
  const int *w = (const int *)&want;
  const int nf = (int)(sizeof want / sizeof(int));
  for (int i = 1; i < n; ++i) {
    const int *v = (const int *)&ps[i];
    int all = 1;
    for (int f = 0; f < nf; ++f) all &= w[f] == 0 || v[f] == w[f];
    if (all) return 1;
  }
  return 0;
}

void test_plan_candidates(void) {
  const mok_shape dsv3 = {7168, 7168, 256, 2048, 8, 2048};
  mok_plan ps[64];
  for (int dt = 0; dt < 2; ++dt) {
    mok_config c = config_of(dt ? MOK_DTYPE_FP8_BLOCK128 : MOK_DTYPE_BF16);
    for (int ep = 1; ep <= 2; ++ep) {
      mok_plan def;
      CHECK_STATUS(mok_plan_resolve(&dsv3, &c, ep, &h200, &def), MOK_SUCCESS);
      const int n = mok_plan_candidates_on(&dsv3, &c, ep, &h200, ps, 64);
      CHECK(n >= 4 && n < 64);
      CHECK(memcmp(&ps[0], &def, sizeof def) == 0); /* the default first */
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < i; ++j) CHECK(memcmp(&ps[i], &ps[j], sizeof ps[i]) != 0);
        /* each is a plan the request can run: pinned whole, it resolves to itself */
        mok_config pinned = c;
        pinned.plan = ps[i];
        mok_plan again;
        CHECK_STATUS(mok_validate(&dsv3, &pinned, ep), MOK_SUCCESS);
        CHECK_STATUS(mok_plan_resolve(&dsv3, &pinned, ep, &h200, &again), MOK_SUCCESS);
        CHECK(memcmp(&again, &ps[i], sizeof again) == 0);
        CHECK(ps[i].path != MOK_PATH_ORACLE && ps[i].schedule == MOK_SCHEDULE_PARALLEL);
      }
      if (!dt) { /* BF16: the other path, and other comm-CTA counts */
        CHECK(has_plan(ps, n, ep == 1 ? "path=fused" : "path=grouped"));
        CHECK(has_plan(ps, n, "shared_fwd=in_line"));
        CHECK(has_plan(ps, n, "wgrad_cluster_down=2") && has_plan(ps, n, "wgrad_cluster_gate_up=2"));
      } else {
        CHECK(has_plan(ps, n, "fp8_mlp=two_launches"));
        CHECK(has_plan(ps, n, "wgrad_cluster_down=1"));
        for (int i = 0; i < n; ++i) CHECK(ps[i].path == MOK_PATH_GROUPED);
      }
    }
    /* a field the caller requests is never varied */
    c.plan.shared_fwd = MOK_SHARED_IN_LINE;
    c.plan.bwd_comm_ctas = 24;
    const int n = mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 64);
    CHECK(n >= 2);
    for (int i = 0; i < n; ++i) /* (a comm count applies where the kernels run beside) */
      CHECK(ps[i].shared_fwd == MOK_SHARED_IN_LINE &&
            (ps[i].bwd_comm_ctas == 24 || ps[i].shared_bwd != MOK_SHARED_BESIDE));
  }
  /* max bounds the count; the oracle has one way to run; a bad request has none */
  mok_config c = config_of(MOK_DTYPE_BF16);
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 2) == 2);
  const mok_device_facts other = {0, 108};
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &other, ps, 64) == 1 && ps[0].path == MOK_PATH_ORACLE);
  c.plan.tile_m = 96;
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 64) == 0);
}

static char *temp_path(const char *name, char *buf, size_t size) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, size, "%s/mok_plan_cache_test.%ld/sub/%s", dir && dir[0] ? dir : "/tmp",
           (long)getpid(), name);
  return buf;
}

static void remove_tree(const char *file) {
  char dir[1024];
  remove(file);
  snprintf(dir, sizeof dir, "%s", file);
  for (int i = 0; i < 2; ++i) {
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = '\0';
    rmdir(dir);
  }
}

void test_plan_cache(void) {
  const mok_shape s = {7168, 7168, 256, 2048, 8, 2048};
  mok_config c = config_of(MOK_DTYPE_BF16);
  char k1[1024], k2[1024], k3[1024], path[1024];
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H200", k1, sizeof k1), MOK_SUCCESS);
  CHECK(strchr(k1, '\t') == NULL && strstr(k1, "NVIDIA_H200") != NULL);
  /* what changes the fastest plan changes the key */
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 2, "NVIDIA H200", k2, sizeof k2), MOK_SUCCESS);
  CHECK(strcmp(k1, k2) != 0);
  mok_config f = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &f, 1, "NVIDIA H200", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  mok_shape t = s;
  t.tokens = 4096;
  CHECK_STATUS(mok_plan_cache_key_on(&t, &c, 1, "NVIDIA H200", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H100", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H200", k3, 8), MOK_ERR_INVALID_ARGUMENT);

  temp_path("plans.tsv", path, sizeof path);
  mok_plan p, got;
  int found = 1;
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS); /* no file */
  CHECK(found == 0);
  memset(&p, 0, sizeof p);
  CHECK_STATUS(mok_plan_parse("path=fused,fwd_comm=8,routed_cluster=2", &p), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_store(path, k1, &p, 40.5), MOK_SUCCESS); /* makes the folders */
  mok_plan q = p;
  q.fwd_comm_ctas = 16;
  CHECK_STATUS(mok_plan_cache_store(path, k2, &q, 30.0), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && memcmp(&got, &p, sizeof p) == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k2, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && memcmp(&got, &q, sizeof q) == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k3, &got, &found), MOK_SUCCESS);
  CHECK(found == 0);
  /* storing a key again replaces its entry: one line per key */
  p.fwd_comm_ctas = 2;
  CHECK_STATUS(mok_plan_cache_store(path, k1, &p, 39.0), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.fwd_comm_ctas == 2);
  FILE *fh = fopen(path, "r");
  int lines_k1 = 0, lines = 0;
  char line[4096];
  while (fh && fgets(line, sizeof line, fh)) {
    ++lines;
    lines_k1 += strncmp(line, k1, strlen(k1)) == 0 && line[strlen(k1)] == '\t';
  }
  if (fh) fclose(fh);
  CHECK(lines_k1 == 1 && lines == 3); /* the comment, k2, k1 */
  /* damaged lines are skipped; a later good entry of a key still counts, a later bad one not */
  fh = fopen(path, "a");
  CHECK(fh != NULL);
  if (fh) {
    fprintf(fh, "garbage without tabs\n%s\tpath=nowhere\t1.0\n%s\t\n", k2, k2);
    fprintf(fh, "%s\tpath=grouped,fwd_comm=32\t12.0\n", k2);
    fprintf(fh, "%s\tfwd_comm=notanumber\t11.0\n", k2);
    fclose(fh);
  }
  CHECK_STATUS(mok_plan_cache_lookup(path, k2, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.path == MOK_PATH_GROUPED && got.fwd_comm_ctas == 32);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.fwd_comm_ctas == 2);
  /* bad arguments; "" is no cache */
  CHECK_STATUS(mok_plan_cache_store("", k1, &p, 1.0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_cache_store(path, "a\tb", &p, 1.0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_cache_lookup("", k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, NULL, &found), MOK_ERR_INVALID_ARGUMENT);
  remove_tree(path);

  /* a config of mok 0.2's layout (no plan_cache) is accepted, its cache the default */
  mok_config old = config_of(MOK_DTYPE_BF16), full;
  old.size = MOK_CONFIG_SIZE_0_2;
  old.plan_cache = (const char *)1; /* past the caller's size: never read */
  CHECK_STATUS(mok_config_complete(&old, &full), MOK_SUCCESS);
  CHECK(full.plan_cache == NULL && full.size == sizeof(mok_config));
  old.size = MOK_CONFIG_SIZE_0_2 + 4;
  CHECK_STATUS(mok_config_complete(&old, &full), MOK_ERR_INVALID_ARGUMENT);
}
