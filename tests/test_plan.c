/* test_plan.c — the plan (api/plan.c) without a GPU: its choices for the measured shapes, the
 * requests it honours or refuses, its text form, and on random requests the properties every
 * resolved plan has (in range, stable under its own text, reproduced when pinned). */
#include <string.h>
#include "api/config.h"
#include "api/plan.h"
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
  CHECK(p.fp8_mlp == 0 && p.routed_warpgroups == 0 && p.wgrad_cluster_down == 0);
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
