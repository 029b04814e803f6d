/* test_pipeline.c — the ring plan: minibatches cover the schedule's rows once, forward walks
 * macrobatches in reverse and leaves macrobatch 0 resident for backward, no two macrobatches in
 * flight share a region, flags and epochs never collide, and the ring's size does not depend on the
 * routing. */
#include <stdlib.h>
#include "schedule/pipeline.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static mok_pipe_params random_params(mok_rng *rng) {
  mok_pipe_params p;
  p.tile_m = (int32_t[]){64, 128, 256}[mok_rng_below(rng, 3)];
  p.minibatch_rows = p.tile_m * (1 + mok_rng_below(rng, 4));
  p.macro_minibatches = 1 + mok_rng_below(rng, 5);
  p.ring_regions = 2 + mok_rng_below(rng, 4);
  return p;
}

void test_pipeline_params(void) {
  mok_pipe_params ok = {128, 256, 4, 2};
  CHECK(mok_pipe_check(&ok) == MOK_SCHED_OK);
  mok_pipe_params bad = ok;
  bad.minibatch_rows = 192; /* not whole tiles */
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.ring_regions = 1; /* nothing could arrive while the one region computes */
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.macro_minibatches = 0;
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);
  bad = ok, bad.tile_m = 0;
  CHECK(mok_pipe_check(&bad) == MOK_SCHED_BAD_ARGUMENT);

  /* from a config: regions from ring_bytes, and the ring's size back */
  mok_shape s = {4096, 7168, 256, 2048, 8, 2048};
  mok_config c;
  mok_config_init(&c);
  mok_pipe_params p;
  int64_t bytes = 0;
  CHECK_STATUS(mok_pipe_from_config(&s, &c, &p, &bytes), MOK_SUCCESS);
  CHECK(p.ring_regions == MOK_PIPE_DEFAULT_REGIONS && p.minibatch_rows == 128 && p.macro_minibatches == 4);
  CHECK(bytes == (int64_t)MOK_PIPE_DEFAULT_REGIONS * 128 * 4 * 7168 * 2);
  const int64_t region = 128 * 4 * 7168 * 2;
  c.ring_bytes = 3 * region + region / 2; /* a partial region is not used */
  CHECK_STATUS(mok_pipe_from_config(&s, &c, &p, &bytes), MOK_SUCCESS);
  CHECK(p.ring_regions == 3 && bytes == 3 * region);
  c.ring_bytes = 2 * region - 1; /* less than two macrobatches */
  CHECK_STATUS(mok_pipe_from_config(&s, &c, &p, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_validate(&s, &c, 2), MOK_ERR_INVALID_ARGUMENT);
  c.ring_bytes = 2 * region;
  CHECK_STATUS(mok_validate(&s, &c, 2), MOK_SUCCESS);
  CHECK_STATUS(mok_pipe_from_config(NULL, &c, &p, &bytes), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_pipe_from_config(&s, &c, NULL, &bytes), MOK_ERR_INVALID_ARGUMENT);
}

/* Every padded row lands in exactly one minibatch of whole tiles, inside one macrobatch. */
void test_pipeline_cover(void) {
  mok_rng rng = mok_rng_for(test_seed(), 11);
  for (int trial = 0; trial < 200; ++trial) {
    mok_pipe_params p = random_params(&rng);
    int64_t total = (int64_t)p.tile_m * mok_rng_below(&rng, 60); /* includes 0 rows */
    int64_t n_mini = mok_pipe_minibatches(&p, total), n_macro = mok_pipe_macrobatches(&p, total);
    int64_t next = 0;
    int ok = 1;
    for (int64_t m = 0; m < n_mini; ++m) {
      int64_t first, rows;
      mok_pipe_minibatch_range(&p, total, m, &first, &rows);
      ok &= first == next && rows > 0 && rows <= p.minibatch_rows && rows % p.tile_m == 0;
      /* the minibatch's rows sit in one macrobatch and one region slice */
      ok &= first / mok_pipe_macro_rows(&p) == (first + rows - 1) / mok_pipe_macro_rows(&p);
      ok &= m / p.macro_minibatches == first / mok_pipe_macro_rows(&p);
      next = first + rows;
    }
    ok &= next == total;
    ok &= n_macro * p.macro_minibatches >= n_mini && (n_macro - 1) * p.macro_minibatches < n_mini + (n_mini == 0);
    CHECK(ok);
  }
}

/* Forward in reverse, backward in order; macrobatch 0 stays resident; regions of macrobatches in
 * flight (any R - 1 consecutive steps across both passes) never collide. */
void test_pipeline_walk(void) {
  mok_rng rng = mok_rng_for(test_seed(), 12);
  for (int trial = 0; trial < 200; ++trial) {
    mok_pipe_params p = random_params(&rng);
    int64_t n_macro = 1 + mok_rng_below(&rng, 30);
    int64_t steps = 2 * n_macro;
    int64_t *macro = malloc(sizeof(int64_t) * steps), *region = malloc(sizeof(int64_t) * steps);
    char *seen_f = calloc((size_t)n_macro, 1), *seen_b = calloc((size_t)n_macro, 1);
    int ok = 1;
    for (int64_t s = 0; s < n_macro; ++s) {
      macro[s] = mok_pipe_fwd_macro(n_macro, s);
      region[s] = mok_pipe_fwd_region(&p, s);
      macro[n_macro + s] = mok_pipe_bwd_macro(s);
      region[n_macro + s] = mok_pipe_bwd_region(&p, n_macro, s);
      ok &= macro[s] >= 0 && macro[s] < n_macro && !seen_f[macro[s]];
      seen_f[macro[s]] = 1;
      ok &= !seen_b[macro[n_macro + s]];
      seen_b[macro[n_macro + s]] = 1;
      ok &= region[s] >= 0 && region[s] < p.ring_regions && region[n_macro + s] < p.ring_regions;
      ok &= mok_pipe_bwd_resident(s) == (s == 0);
      if (s > 0) ok &= macro[s] < macro[s - 1]; /* reverse */
    }
    /* forward ends on macrobatch 0, in the region backward starts from */
    ok &= macro[n_macro - 1] == 0 && macro[n_macro] == 0 && region[n_macro - 1] == region[n_macro];
    for (int64_t i = 0; i < steps; ++i)
      for (int64_t j = i + 1; j < steps && j - i < p.ring_regions; ++j)
        if (macro[i] != macro[j] || (i < n_macro) == (j < n_macro)) ok &= region[i] != region[j];
    CHECK(ok);
    free(macro);
    free(region);
    free(seen_f);
    free(seen_b);
  }
}

/* Ring rows and flags stay inside the ring, do not collide inside a region, and the ring's size is
 * the same for every routing; epochs never repeat. */
void test_pipeline_ring_and_flags(void) {
  mok_rng rng = mok_rng_for(test_seed(), 13);
  for (int trial = 0; trial < 50; ++trial) {
    mok_pipe_params p = random_params(&rng);
    int64_t ring = mok_pipe_ring_rows(&p), macro_rows = mok_pipe_macro_rows(&p);
    int64_t total = (int64_t)p.tile_m * (1 + mok_rng_below(&rng, 80));
    int64_t n_mini = mok_pipe_minibatches(&p, total);
    int ok = ring == macro_rows * p.ring_regions; /* no dependence on total */
    int32_t region = (int32_t)mok_rng_below(&rng, p.ring_regions);
    int64_t macro = mok_rng_below(&rng, (int)mok_pipe_macrobatches(&p, total));
    char *used = calloc((size_t)macro_rows, 1), *flag_used = calloc((size_t)p.macro_minibatches, 1);
    for (int64_t r = macro * macro_rows; r < (macro + 1) * macro_rows && r < total; ++r) {
      int64_t rr = mok_pipe_ring_row(&p, region, r);
      ok &= rr >= region * macro_rows && rr < (region + 1) * macro_rows && !used[rr - region * macro_rows];
      used[rr - region * macro_rows] = 1;
    }
    for (int64_t m = macro * p.macro_minibatches; m < (macro + 1) * p.macro_minibatches && m < n_mini; ++m) {
      int64_t f = mok_pipe_flag(&p, region, m);
      ok &= f >= (int64_t)region * p.macro_minibatches && f < (int64_t)(region + 1) * p.macro_minibatches;
      ok &= !flag_used[f - (int64_t)region * p.macro_minibatches];
      flag_used[f - (int64_t)region * p.macro_minibatches] = 1;
    }
    CHECK(ok);
    free(used);
    free(flag_used);
  }
  /* epochs over three passes of up to 7 steps grow strictly */
  uint64_t last = 0;
  int grows = 1;
  for (uint64_t inv = 0; inv < 3; ++inv)
    for (int64_t s = 0; s < 7; ++s) {
      uint64_t e = mok_pipe_epoch(inv, 7, s);
      grows &= e > last;
      last = e;
    }
  CHECK(grows);
}
