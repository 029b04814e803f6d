/* test_pipeline.c — the token ring's plan: knobs and sizes from a config, every expert in exactly
 * one macrobatch that fits a region, views with ascending offsets that skip the other experts,
 * forward in reverse and backward in order with the last R macrobatches resident, and a ring size
 * that does not depend on the routing. */
#include <stdlib.h>
#include "schedule/pipeline.h"
#include "tests/tests.h"
#include "tests/test_util.h"

void test_pipeline_params(void) {
  mok_pipe_params ok = {128, 256, 4, 2, 1024, 8192};
  CHECK(mok_pipe_check(&ok) == MOK_SCHED_OK);
  mok_pipe_params bad = ok;
  bad.minibatch_rows = 192; /* not whole tiles */
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.ring_regions = -1;
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.macro_minibatches = 0;
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.tile_m = 0;
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.expert_rows = 100; /* not whole tiles */
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);

  /* from a config: no ring by default; regions from ring_bytes, and the ring's size back */
  mok_shape s = {4096, 7168, 256, 2048, 8, 2048};
  mok_config c;
  mok_config_init(&c);
  mok_pipe_params p;
  int64_t bytes = -1, cap = 0;
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, &p, &bytes), MOK_SUCCESS);
  CHECK_STATUS(mok_schedule_worst_case_rows(&s, 2, 128, &cap), MOK_SUCCESS);
  CHECK(p.ring_regions == 0 && bytes == 0 && p.capacity == cap && p.expert_rows == 8192);
  CHECK(mok_pipe_macro_rows(&p) == 128 * 64 && mok_pipe_steps(&p) == (cap + 8191) / 8192);
  const int64_t region = (8192 + 8192) * 7168 * 2; /* macrobatch rows + one expert's most */
  c.ring_bytes = 3 * region + region / 2;            /* a partial region is not used */
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, &p, &bytes), MOK_SUCCESS);
  CHECK(p.ring_regions == 3 && bytes == 3 * region && mok_pipe_region_rows(&p) == 16384);
  c.ring_bytes = region - 1; /* less than one region */
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, &p, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_validate(&s, &c, 2), MOK_ERR_INVALID_ARGUMENT);
  c.ring_bytes = region;
  CHECK_STATUS(mok_validate(&s, &c, 2), MOK_SUCCESS);
  c.ring_bytes = (int64_t)1 << 50; /* more regions than macrobatches: one per macrobatch */
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, &p, &bytes), MOK_SUCCESS);
  CHECK(p.ring_regions == mok_pipe_steps(&p));
  c.schedule_capacity = 4096; /* a capacity below one region: one region of the capacity */
  c.ring_bytes = 4096 * 7168 * 2;
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, &p, &bytes), MOK_SUCCESS);
  CHECK(p.ring_regions == 1 && mok_pipe_region_rows(&p) == 4096 && mok_pipe_steps(&p) == 1);
  CHECK_STATUS(mok_pipe_from_config(NULL, &c, 2, 128, 128, &p, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 2, 128, 128, NULL, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_pipe_from_config(&s, &c, 0, 128, 128, &p, &bytes), MOK_ERR_INVALID_ARGUMENT);
}

/* A random schedule's offsets and counts: experts padded to the tile, some empty, at most
 * expert_rows each, total within the capacity. */
static int random_schedule(mok_rng *rng, const mok_pipe_params *p, int el, int32_t *offset,
                           int32_t *count) {
  int64_t at = 0;
  for (int e = 0; e < el; ++e) {
    const int64_t most = p->expert_rows < p->capacity - at ? p->expert_rows : p->capacity - at;
    const int64_t c =
        mok_rng_below(rng, 4) == 0 || most <= 0 ? 0 : mok_rng_below(rng, (int)most + 1);
    offset[e] = (int32_t)at;
    count[e] = (int32_t)c;
    at += (c + p->tile_m - 1) / p->tile_m * p->tile_m;
  }
  offset[el] = (int32_t)at;
  return at <= p->capacity;
}

/* Every expert lies in exactly one macrobatch, in order; each macrobatch fits a region; its view
 * keeps its experts (offsets from its first row, counts as they are) and marks the others. */
void test_pipeline_macrobatches(void) {
  mok_rng rng = mok_rng_for(test_seed(), 11);
  for (int trial = 0; trial < 300; ++trial) {
    mok_pipe_params p;
    p.tile_m = (int32_t[]){64, 128, 256}[mok_rng_below(&rng, 3)];
    p.minibatch_rows = p.tile_m * (1 + mok_rng_below(&rng, 4));
    p.macro_minibatches = 1 + mok_rng_below(&rng, 5);
    p.ring_regions = 1 + mok_rng_below(&rng, 4);
    p.expert_rows = (int64_t)p.tile_m * (1 + mok_rng_below(&rng, 12));
    const int el = 1 + mok_rng_below(&rng, 40);
    p.capacity = (int64_t)p.tile_m * (1 + mok_rng_below(&rng, 200));
    int32_t *offset = malloc(sizeof(int32_t) * (el + 1)), *count = malloc(sizeof(int32_t) * el);
    int32_t *vo = malloc(sizeof(int32_t) * (el + 1)), *vc = malloc(sizeof(int32_t) * el);
    int ok = random_schedule(&rng, &p, el, offset, count) && mok_pipe_check(&p) == MOK_SCHED_OK;
    const int64_t steps = mok_pipe_steps(&p);
    int next = 0;
    for (int64_t b = 0; b < steps; ++b) {
      int lo, hi;
      mok_pipe_macro_experts(&p, offset, el, b, &lo, &hi);
      ok &= lo == next && hi >= lo && hi <= el;
      next = hi;
      const int64_t rows = offset[hi] - offset[lo];
      ok &= rows >= 0 && rows <= mok_pipe_region_rows(&p);
      for (int e = 0; e <= el; ++e) {
        int32_t c;
        mok_pipe_view_expert(offset, count, e, lo, hi, &vo[e], &c);
        if (e < el) vc[e] = c;
      }
      for (int e = 0; e < el; ++e) {
        const int in = e >= lo && e < hi;
        ok &= in ? (vc[e] == count[e] && vo[e] == offset[e] - offset[lo]) : vc[e] == -1;
        ok &= vo[e] <= vo[e + 1] && vo[e] >= 0;
        ok &= !in || mok_pipe_expert_macro(&p, offset[e]) == b;
      }
      ok &= vo[el] == rows;
    }
    ok &= next == el;
    CHECK(ok);
    free(offset);
    free(count);
    free(vo);
    free(vc);
  }
}

/* Forward in reverse, backward in order; backward's step s uses the region forward left
 * macrobatch s in, and finds it there untouched exactly when s < R. */
void test_pipeline_walk(void) {
  mok_rng rng = mok_rng_for(test_seed(), 12);
  for (int trial = 0; trial < 200; ++trial) {
    mok_pipe_params p = {128, 128, 1 + mok_rng_below(&rng, 4), 1 + mok_rng_below(&rng, 6), 256, 0};
    p.capacity = 128 * (int64_t)(1 + mok_rng_below(&rng, 120));
    const int64_t steps = mok_pipe_steps(&p);
    int64_t *fwd_step_of = malloc(sizeof(int64_t) * steps); /* each macrobatch's forward step */
    int64_t *last = malloc(sizeof(int64_t) * p.ring_regions); /* the macrobatch a region holds */
    for (int r = 0; r < p.ring_regions; ++r) last[r] = -1;
    int ok = 1;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t b = mok_pipe_fwd_macro(steps, s);
      const int32_t r = mok_pipe_fwd_region(&p, s);
      ok &= b >= 0 && b < steps && r >= 0 && r < p.ring_regions;
      if (s > 0) ok &= b == mok_pipe_fwd_macro(steps, s - 1) - 1;
      fwd_step_of[b] = s;
      last[r] = b;
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t b = mok_pipe_bwd_macro(s);
      const int32_t r = mok_pipe_bwd_region(&p, steps, s);
      ok &= r == mok_pipe_fwd_region(&p, fwd_step_of[b]);
      /* resident: the region still holds b from forward, and no earlier backward step reused it */
      ok &= mok_pipe_bwd_resident(&p, s) == (last[r] == b);
      last[r] = b; /* a replay (or the resident rows) now holds b */
    }
    CHECK(ok);
    free(fwd_step_of);
    free(last);
  }
  /* the ring's size: R regions of one macrobatch plus one expert's most rows, whatever the
   * capacity (which the worst case of the routing sizes) */
  mok_pipe_params a = {128, 256, 4, 3, 2048, 100000}, b = a;
  b.capacity = 200000;
  CHECK(mok_pipe_ring_rows(&a) == mok_pipe_ring_rows(&b));
  CHECK(mok_pipe_ring_rows(&a) == 3 * (1024 + 2048));
}
