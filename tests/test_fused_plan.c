/* test_fused_plan.c — the fused path's comm CTAs and the grouped GEMM agree on what is moved and
 * when (kernels/fused_comm_plan.h), checked on the CPU against the GEMM's own tile walk
 * (kernels/gemm_tile_scheduler.h, the unit prefix of kernels/grouped_gemm_bf16.cu, clusters of 1
 * and 2 CTAs): for every minibatch the push waits for exactly the output blocks the epilogues store
 * (a wrong count is a hang or a push of unfinished rows), every real row is stored once per column
 * tile, and every tile's producer waits for the minibatches holding all the real rows it reads. */
#include <stdlib.h>
#include "kernels/fused_comm_plan.h"
#include "kernels/gemm_tile_scheduler.h"
#include "tests/tests.h"
#include "tests/test_util.h"

#define FP_TILE 128 /* the GEMM's row tile */

typedef struct {
  int experts, tile_m, mb_rows, n_tiles, cl;
  int32_t count[64], offset[65];
} fp_case;

static uint64_t fp_next(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Counts per expert: empty, tile edges, odd, long; offsets padded to tile_m. */
static void fp_fill(fp_case *c, uint64_t *rng) {
  static const int32_t edge[] = {0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 511, 700};
  int32_t off = 0;
  for (int e = 0; e < c->experts; ++e) {
    c->count[e] = fp_next(rng) % 3 ? edge[fp_next(rng) % (sizeof edge / sizeof edge[0])]
                                   : (int32_t)(fp_next(rng) % 900);
    c->offset[e] = off;
    off += (c->count[e] + c->tile_m - 1) / c->tile_m * c->tile_m;
  }
  c->offset[c->experts] = off;
}

/* Walks the GEMM's units as the kernel does and checks the plan; returns the failures. */
static int fp_check(const fp_case *c) {
  const int E = c->experts, total_rows = c->offset[E];
  const int n_mb = (total_rows + c->mb_rows - 1) / c->mb_rows;
  int32_t prefix[65];
  int run = 0;
  for (int e = 0; e < E; ++e) { /* the kernel's unit prefix: ceil(count / (128 * CL)) row units */
    prefix[e] = run;
    run += gg_ceil_div(c->count[e] > 0 ? c->count[e] : 0, FP_TILE * c->cl) * c->n_tiles;
  }
  prefix[E] = run;
  int64_t *signals = calloc((size_t)n_mb + 1, sizeof *signals);
  int *stored = calloc((size_t)total_rows + 1, sizeof *stored);
  int bad = 0;
  for (int u = 0; u < prefix[E]; ++u) {
    const gg_tile t = gg_decode_m_grouped(u, prefix, E, c->n_tiles, 16 / c->cl);
    for (int rank = 0; rank < c->cl; ++rank) {
      const int m_tile = t.m_tile * c->cl + rank, cnt = c->count[t.expert];
      const int row_base = c->offset[t.expert];
      /* producer (pull): the rows it waits for cover the real rows its tile reads */
      const int a_row = row_base + (cnt > m_tile * FP_TILE ? m_tile * FP_TILE : 0);
      const int waited = cnt - (a_row - row_base) < FP_TILE ? cnt - (a_row - row_base) : FP_TILE;
      if (cnt > m_tile * FP_TILE) {
        const int real_end = cnt < (m_tile + 1) * FP_TILE ? cnt : (m_tile + 1) * FP_TILE;
        if (waited < real_end - m_tile * FP_TILE) ++bad;
      }
      if (waited <= 0) ++bad;
      /* consumers (push): a warpgroup stores its 64-row block when it holds a real row */
      for (int wg = 0; wg < 2; ++wg) {
        const int math = cnt - m_tile * FP_TILE > wg * 64; /* the kernel's predicate */
        const int64_t in_expert = (int64_t)m_tile * FP_TILE + wg * 64;
        if (math != mok_fc_block_stored(in_expert, cnt)) ++bad;
        if (!math) continue;
        const int64_t row0 = row_base + in_expert;
        if (row0 + 64 > c->offset[t.expert + 1]) { ++bad; continue; } /* inside the expert's rows */
        signals[row0 / c->mb_rows] += 1;
        for (int r = 0; r < 64; ++r) stored[row0 + r] += 1;
      }
    }
  }
  for (int mb = 0; mb < n_mb; ++mb) {
    const int64_t r0 = (int64_t)mb * c->mb_rows;
    const int64_t r1 = r0 + c->mb_rows < total_rows ? r0 + c->mb_rows : total_rows;
    if (signals[mb] != mok_fc_expected_blocks(c->offset, c->count, E, r0, r1, c->n_tiles)) ++bad;
  }
  for (int e = 0; e < E; ++e) /* every real row stored once per column tile */
    for (int r = 0; r < c->count[e]; ++r)
      if (stored[c->offset[e] + r] != c->n_tiles) ++bad;
  free(signals);
  free(stored);
  return bad;
}

void test_fused_comm_plan(void) {
  uint64_t rng = test_seed() | 1;
  static const int tiles_m[] = {128, 256}, mbs[] = {128, 256, 384, 1024}, nts[] = {1, 3, 28};
  int cases = 0, bad_cases = 0;
  for (int rep = 0; rep < 40; ++rep)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 4; ++b)
        for (int n = 0; n < 3; ++n)
          for (int cl = 1; cl <= 2; ++cl) {
            fp_case c;
            c.experts = 1 + (int)(fp_next(&rng) % 64);
            c.tile_m = tiles_m[a];
            c.mb_rows = mbs[b] < c.tile_m ? c.tile_m : mbs[b] / c.tile_m * c.tile_m;
            c.n_tiles = nts[n];
            c.cl = cl;
            fp_fill(&c, &rng);
            ++cases;
            if (fp_check(&c)) ++bad_cases;
          }
  CHECK(cases == 40 * 2 * 4 * 3 * 2);
  CHECK(bad_cases == 0);
  /* the check can fail: a push that forgets the last block of its minibatch */
  fp_case c = {.experts = 2, .tile_m = 128, .mb_rows = 128, .n_tiles = 1, .cl = 1};
  c.count[0] = 130; c.count[1] = 0;
  c.offset[0] = 0; c.offset[1] = 256; c.offset[2] = 256;
  CHECK(mok_fc_expected_blocks(c.offset, c.count, 2, 0, 128, 1) == 2);
  CHECK(mok_fc_expected_blocks(c.offset, c.count, 2, 128, 256, 1) == 1); /* rows 128, 129 */
  CHECK(fp_check(&c) == 0);
}
