/* test_schedule.c — the schedule table: against a naive oracle, its invariants (every (token, k)
 * pair exactly once across all ranks, fixed order, padding) on random and adversarial routings,
 * chunked construction equal to sequential, errors and capacity, each rank's own token count
 * below the stride; and the grouped GEMM's tile scheduler (every tile exactly once, both decodes
 * the same, the read-once weight tiles its kernels load evict_first). */
#include <stdlib.h>
#include <string.h>
#include "reference/ref_inputs.h"
#include "schedule/schedule.h"
#include "schedule/schedule_core.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/tile_scheduler.h"
#include "tests/tests.h"
#include "tests/test_util.h"

typedef struct {
  mok_sched_params p;
  int32_t *topk;                /* [ep][T][k] */
  int32_t *scratch, *count, *offset, *row_src;
} sched_case;

static int32_t *topk_all(mok_route_kind kind, uint64_t seed, int ep, int64_t T, int k, int E) {
  int32_t *t = malloc(sizeof(int32_t) * (size_t)(ep * T * k + 1));
  for (int r = 0; r < ep; ++r)
    if (mok_route_fill(kind, seed, r, T, k, E, ep, t + r * T * k) != MOK_SUCCESS) {
      free(t);
      return NULL;
    }
  return t;
}

static void case_alloc(sched_case *c, int ep, int rank, int64_t T, int k, int E, int tile, int64_t cap) {
  mok_sched_params p = {ep, rank, T, k, E, tile, cap, NULL};
  c->p = p;
  int el = E / ep;
  c->scratch = malloc(sizeof(int32_t) * (size_t)(ep * el));
  c->count = malloc(sizeof(int32_t) * (size_t)el);
  c->offset = malloc(sizeof(int32_t) * (size_t)(el + 1));
  c->row_src = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  for (int64_t i = 0; i <= cap; ++i) c->row_src[i] = -7; /* poison, and a guard entry at cap */
}

static void case_free(sched_case *c) {
  free(c->scratch);
  free(c->count);
  free(c->offset);
  free(c->row_src);
}

/* Checks rank r's table against the naive definition; marks each slot seen in `seen`. */
static void check_table(const sched_case *c, const int32_t *topk, int *seen) {
  const mok_sched_params *p = &c->p;
  int el = p->num_experts / p->ep;
  int64_t per_rank = p->tokens * p->top_k;
  CHECK(c->offset[0] == 0);
  CHECK(c->row_src[p->capacity] == -7); /* nothing written past the capacity */
  for (int l = 0; l < el; ++l) {
    int e = p->rank * el + l;
    int32_t row = c->offset[l];
    CHECK(c->offset[l] % p->tile_m == 0);
    for (int s = 0; s < p->ep; ++s)
      for (int64_t t = 0; t < mok_sched_rank_tokens(p, s); ++t)
        for (int j = 0; j < p->top_k; ++j) {
          int64_t slot = s * per_rank + t * p->top_k + j;
          if (topk[slot] != e) continue;
          if (row >= c->offset[l] + c->count[l] || c->row_src[row] != slot) {
            CHECK(0 && "row order differs from (source rank, token) order");
            return;
          }
          seen[slot] += 1;
          CHECK(mok_sched_slot_rank((int32_t)slot, p->tokens, p->top_k) == s);
          CHECK(mok_sched_slot_token((int32_t)slot, p->tokens, p->top_k) == t);
          CHECK(mok_sched_slot_j((int32_t)slot, p->top_k) == j);
          ++row;
        }
    CHECK(row == c->offset[l] + c->count[l]);
    int64_t padded = ((int64_t)c->count[l] + p->tile_m - 1) / p->tile_m * p->tile_m;
    CHECK(c->offset[l + 1] - c->offset[l] == padded);
    for (; row < c->offset[l + 1]; ++row) CHECK(c->row_src[row] == -1);
  }
}

/* The worst-case rows of a routing of T tokens per rank (the tables' capacity in these tests). */
static int64_t worst_rows(int ep, int64_t T, int k, int E, int tile) {
  mok_shape shape = {T, 128, E, 128, k, 0};
  int64_t cap = 0;
  CHECK_STATUS(mok_schedule_worst_case_rows(&shape, ep, tile, &cap), MOK_SUCCESS);
  return cap;
}

/* Builds every rank's table (each rank's first counts[s] tokens; NULL: all T) and checks each
 * against the oracle, and every counted slot exactly once, no other. */
static void check_all_ranks_counted(int32_t *topk, int ep, int64_t T, int k, int E, int tile,
                                    const int64_t *counts) {
  const int64_t cap = worst_rows(ep, T, k, E, tile);
  int *seen = calloc((size_t)(ep * T * k + 1), sizeof(int));
  for (int r = 0; r < ep; ++r) {
    sched_case c;
    case_alloc(&c, ep, r, T, k, E, tile, cap);
    c.p.counts = counts;
    CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_SUCCESS);
    check_table(&c, topk, seen);
    case_free(&c);
  }
  int right = 1;
  for (int s = 0; s < ep; ++s)
    for (int64_t i = 0; i < T * k; ++i)
      right &= seen[s * T * k + i] == (i / k < (counts ? counts[s] : T));
  CHECK(right);
  free(seen);
}

static void check_all_ranks(int32_t *topk, int ep, int64_t T, int k, int E, int tile) {
  check_all_ranks_counted(topk, ep, T, k, E, tile, NULL);
}

void test_schedule_invariants_random(void) {
  mok_rng rng = mok_rng_for(test_seed(), 1);
  for (int trial = 0; trial < 20; ++trial) {
    int ep = 1 + mok_rng_below(&rng, 4);
    int el = 1 + mok_rng_below(&rng, 5);
    int E = ep * el;
    int k = 1 + mok_rng_below(&rng, E < 6 ? E : 6);
    int64_t T = mok_rng_below(&rng, 300); /* includes 0 and sizes that are not tile multiples */
    int tile = (int[]){1, 8, 64, 128}[mok_rng_below(&rng, 4)];
    mok_route_kind kind = mok_rng_below(&rng, 2) ? MOK_ROUTE_ZIPF : MOK_ROUTE_UNIFORM;
    int32_t *topk = topk_all(kind, mok_rng_next(&rng), ep, T, k, E);
    CHECK(topk != NULL);
    if (topk) check_all_ranks(topk, ep, T, k, E, tile);
    free(topk);
  }
}

/* The reduces' parts (mok_move_push_rows, DESIGN.md "Forward"): on each rank the table of its
 * own tokens' rows (mok_sched_local_slot) plus the rows the other ranks push name every (token,
 * j) of its first counts[r] tokens exactly once, each by a row whose row_src is that slot, and
 * nothing else. Random routings, EP 1 to 4, fewer tokens on some ranks. */
void test_schedule_local_rows(void) {
  mok_rng rng = mok_rng_for(test_seed(), 7);
  for (int trial = 0; trial < 24; ++trial) {
    const int ep = 1 + mok_rng_below(&rng, 4), el = 1 + mok_rng_below(&rng, 5), E = ep * el;
    const int k = 1 + mok_rng_below(&rng, E < 6 ? E : 6), tile = (int[]){1, 8, 128}[trial % 3];
    const int64_t T = 1 + mok_rng_below(&rng, 200);
    int64_t counts[4];
    for (int r = 0; r < ep; ++r) counts[r] = trial % 2 ? T : mok_rng_below(&rng, (uint32_t)T + 1);
    int32_t *topk = topk_all(trial % 4 < 2 ? MOK_ROUTE_ZIPF : MOK_ROUTE_UNIFORM,
                             mok_rng_next(&rng), ep, T, k, E);
    CHECK(topk != NULL);
    if (!topk) continue;
    const int64_t cap = worst_rows(ep, T, k, E, tile), per_rank = T * k;
    int32_t *local = malloc(sizeof(int32_t) * (size_t)(ep * per_rank));
    int *pushed = calloc((size_t)(ep * per_rank), sizeof(int));
    sched_case c[4];
    for (int r = 0; r < ep; ++r) { /* rank r's table and its local-row table */
      case_alloc(&c[r], ep, r, T, k, E, tile, cap);
      c[r].p.counts = counts;
      CHECK_STATUS(mok_sched_build_host(&c[r].p, topk, c[r].scratch, c[r].count, c[r].offset,
                                        c[r].row_src), MOK_SUCCESS);
      int32_t *lr = local + r * per_rank;
      for (int64_t i = 0; i < per_rank; ++i) lr[i] = -1;
      for (int32_t row = 0; row < c[r].offset[el]; ++row) {
        const int32_t slot = c[r].row_src[row];
        const int64_t i = mok_sched_local_slot(slot, T, k, r);
        if (i >= 0) {
          CHECK(lr[i] == -1); /* one row per slot */
          lr[i] = row;
        } else if (slot >= 0) {
          pushed[slot] += 1; /* to rank slot / (T k) */
        }
      }
    }
    int right = 1;
    for (int s = 0; s < ep; ++s)
      for (int64_t i = 0; i < per_rank; ++i) {
        const int32_t row = local[s * per_rank + i], slot = (int32_t)(s * per_rank + i);
        const int in_place = row >= 0 && c[s].row_src[row] == slot;
        const int wanted = i / k < counts[s];
        right &= (row < 0 || in_place) && in_place + pushed[slot] == wanted;
        right &= !in_place || topk[slot] / el == s; /* an expert of the rank itself */
      }
    CHECK(right);
    for (int r = 0; r < ep; ++r) case_free(&c[r]);
    free(local);
    free(pushed);
    free(topk);
  }
}

void test_schedule_adversarial(void) {
  uint64_t seed = test_seed();
  struct { mok_route_kind kind; int ep, k, E; int64_t T; } cases[] = {
      {MOK_ROUTE_ONE_EXPERT, 2, 1, 8, 333},   /* every token to expert 0       */
      {MOK_ROUTE_ONE_EXPERT, 4, 3, 8, 200},   /* expert 0 in every token's list */
      {MOK_ROUTE_EMPTY_EXPERT, 2, 2, 8, 150}, /* expert 1 gets nothing         */
      {MOK_ROUTE_EMPTY_RANK, 2, 2, 8, 150},   /* rank 1 gets nothing           */
      {MOK_ROUTE_EMPTY_RANK, 4, 2, 16, 90},
      {MOK_ROUTE_UNIFORM, 2, 8, 8, 77},       /* k = E                         */
      {MOK_ROUTE_UNIFORM, 3, 1, 6, 129},      /* top-1                         */
      {MOK_ROUTE_UNIFORM, 2, 2, 4, 0},        /* no tokens at all              */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    int32_t *topk = topk_all(cases[i].kind, seed + i, cases[i].ep, cases[i].T, cases[i].k, cases[i].E);
    CHECK(topk != NULL);
    if (!topk) continue;
    check_all_ranks(topk, cases[i].ep, cases[i].T, cases[i].k, cases[i].E, 128);
    if (cases[i].kind == MOK_ROUTE_EMPTY_RANK) { /* the last rank's table is empty */
      int ep = cases[i].ep, el = cases[i].E / ep;
      sched_case c;
      case_alloc(&c, ep, ep - 1, cases[i].T, cases[i].k, cases[i].E, 128, 16);
      CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_SUCCESS);
      CHECK(c.offset[el] == 0);
      case_free(&c);
    }
    free(topk);
  }
}

/* The device cuts the routing into chunks of any size and runs the steps in parallel; the table
 * must not depend on the cut. */
void test_schedule_chunking_equal(void) {
  mok_rng rng = mok_rng_for(test_seed(), 2);
  for (int trial = 0; trial < 10; ++trial) {
    int ep = 1 + mok_rng_below(&rng, 4), el = 1 + mok_rng_below(&rng, 4), E = ep * el;
    int k = 1 + mok_rng_below(&rng, E < 4 ? E : 4);
    int64_t T = 1 + mok_rng_below(&rng, 500);
    int64_t chunk = 1 + mok_rng_below(&rng, 64);
    int32_t *topk = topk_all(MOK_ROUTE_ZIPF, mok_rng_next(&rng), ep, T, k, E);
    int rank = mok_rng_below(&rng, ep);
    mok_shape shape = {T, 128, E, 128, k, 0};
    int64_t cap = 0;
    mok_schedule_worst_case_rows(&shape, ep, 64, &cap);
    sched_case host;
    case_alloc(&host, ep, rank, T, k, E, 64, cap);
    CHECK_STATUS(mok_sched_build_host(&host.p, topk, host.scratch, host.count, host.offset, host.row_src),
                 MOK_SUCCESS);

    int64_t per_rank_chunks = (T + chunk - 1) / chunk, nchunks = ep * per_rank_chunks;
    int32_t *counts = calloc((size_t)(nchunks * el), sizeof(int32_t));
    int32_t *count = malloc(sizeof(int32_t) * el), *offset = malloc(sizeof(int32_t) * (el + 1));
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(cap + 1));
    for (int64_t i = 0; i <= cap; ++i) rows[i] = -7;
    /* chunks in reverse order, as a device might happen to run them */
    for (int64_t c = nchunks - 1; c >= 0; --c) {
      int64_t s = c / per_rank_chunks, t0 = (c % per_rank_chunks) * chunk;
      int64_t n = T - t0 < chunk ? T - t0 : chunk;
      CHECK(mok_sched_count_chunk(topk + (s * T + t0) * k, n, k, E, rank * el, el, counts + c * el) == MOK_SCHED_OK);
    }
    CHECK(mok_sched_scan(counts, nchunks, el, 64, cap, count, offset) == MOK_SCHED_OK);
    for (int64_t c = nchunks - 1; c >= 0; --c) {
      int64_t s = c / per_rank_chunks, t0 = (c % per_rank_chunks) * chunk;
      int64_t n = T - t0 < chunk ? T - t0 : chunk;
      mok_sched_fill_chunk(topk + (s * T + t0) * k, n, k, (s * T + t0) * k, rank * el, el, counts + c * el, rows);
    }
    for (int l = el - 1; l >= 0; --l) mok_sched_pad_expert(l, count, offset, rows);
    int same = 1;
    for (int l = 0; l < el; ++l) same &= count[l] == host.count[l] && offset[l] == host.offset[l];
    same &= offset[el] == host.offset[el];
    for (int64_t i = 0; i <= cap; ++i) same &= rows[i] == host.row_src[i];
    CHECK(same);
    free(counts);
    free(count);
    free(offset);
    free(rows);
    case_free(&host);
    free(topk);
  }
}

void test_schedule_errors(void) {
  int32_t topk[2 * 3 * 2];
  mok_rng rng = mok_rng_for(test_seed(), 3);
  (void)rng;
  CHECK_STATUS(mok_route_fill(MOK_ROUTE_UNIFORM, test_seed(), 0, 3, 2, 4, 2, topk), MOK_SUCCESS);
  CHECK_STATUS(mok_route_fill(MOK_ROUTE_UNIFORM, test_seed(), 1, 3, 2, 4, 2, topk + 6), MOK_SUCCESS);
  sched_case c;
  case_alloc(&c, 2, 0, 3, 2, 4, 16, 64);
  topk[9] = 4; /* rank 1, token 1: id E is out of range, on a rank other than the table's */
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_ERR_EXPERT_ID);
  topk[9] = -3;
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_ERR_EXPERT_ID);
  topk[9] = topk[8]; /* duplicate within one token */
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_ERR_DUPLICATE_EXPERT);
  int untouched = 1;
  for (int i = 0; i <= 64; ++i) untouched &= c.row_src[i] == -7;
  CHECK(untouched);
  /* parameters */
  mok_sched_params p = c.p;
  p.num_experts = 5; /* not a multiple of ep */
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_SHAPE);
  p = c.p, p.rank = 2;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_ARGUMENT);
  p = c.p, p.top_k = 5;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_SHAPE);
  p = c.p, p.tile_m = 0;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_ARGUMENT);
  p = c.p, p.tokens = 1 << 30;
  CHECK_STATUS(mok_sched_check_params(&p), MOK_ERR_INVALID_SHAPE); /* slots overflow int32 */
  CHECK_STATUS(mok_sched_check_params(NULL), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_sched_build_host(&c.p, NULL, c.scratch, c.count, c.offset, c.row_src), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, NULL, c.count, c.offset, c.row_src), MOK_ERR_INVALID_ARGUMENT);
  case_free(&c);
}

/* Each rank's own token count below the stride T (mok_schedule_set_tokens): every rank's table
 * against the oracle over the counted tokens, each counted (token, k) pair exactly once and no
 * other; ids past a rank's count (left from a larger step) are not read, not even validated; all
 * counts T is the plain build, bit for bit; a count outside [0, T] is refused. */
void test_schedule_token_counts(void) {
  const int64_t T = 300;
  const int k = 4, E = 32, tile = 64;
  static const int eps[] = {1, 2, 4};
  mok_rng rng = mok_rng_for(test_seed(), 9);
  for (int i = 0; i < 3; ++i) {
    const int ep = eps[i];
    int32_t *topk = topk_all(MOK_ROUTE_ZIPF, test_seed() + (uint64_t)i, ep, T, k, E);
    CHECK(topk != NULL);
    if (!topk) return;
    int64_t counts[4];
    for (int s = 0; s < ep; ++s) { /* 0 and T among them, the rest at random */
      counts[s] = s == 0 ? T : s == 1 ? 0 : (int64_t)(mok_rng_next(&rng) % (uint64_t)(T + 1));
      for (int64_t t = counts[s]; t < T; ++t) topk[(s * T + t) * k] = E + 5; /* stale, invalid */
    }
    check_all_ranks_counted(topk, ep, T, k, E, tile, counts);
    free(topk);
  }
  /* all counts T: the plain build, bit for bit; counts out of range: refused, nothing written */
  const int ep = 2;
  int32_t *topk = topk_all(MOK_ROUTE_UNIFORM, test_seed() + 7, ep, T, k, E);
  CHECK(topk != NULL);
  if (!topk) return;
  const int64_t cap = worst_rows(ep, T, k, E, tile);
  sched_case a, b;
  case_alloc(&a, ep, 1, T, k, E, tile, cap);
  case_alloc(&b, ep, 1, T, k, E, tile, cap);
  int64_t full[2] = {T, T}, over[2] = {T, T + 1}, under[2] = {-1, T};
  b.p.counts = full;
  CHECK_STATUS(mok_sched_build_host(&a.p, topk, a.scratch, a.count, a.offset, a.row_src), MOK_SUCCESS);
  CHECK_STATUS(mok_sched_build_host(&b.p, topk, b.scratch, b.count, b.offset, b.row_src), MOK_SUCCESS);
  const int el = E / ep;
  CHECK(memcmp(a.count, b.count, sizeof(int32_t) * (size_t)el) == 0 &&
        memcmp(a.offset, b.offset, sizeof(int32_t) * (size_t)(el + 1)) == 0 &&
        memcmp(a.row_src, b.row_src, sizeof(int32_t) * (size_t)(cap + 1)) == 0);
  case_free(&b);
  case_alloc(&b, ep, 1, T, k, E, tile, cap);
  b.p.counts = over;
  CHECK_STATUS(mok_sched_build_host(&b.p, topk, b.scratch, b.count, b.offset, b.row_src),
               MOK_ERR_INVALID_ARGUMENT);
  b.p.counts = under;
  CHECK_STATUS(mok_sched_build_host(&b.p, topk, b.scratch, b.count, b.offset, b.row_src),
               MOK_ERR_INVALID_ARGUMENT);
  int untouched = 1;
  for (int64_t i = 0; i <= cap; ++i) untouched &= b.row_src[i] == -7;
  CHECK(untouched);
  case_free(&a);
  case_free(&b);
  free(topk);
}

/* A capacity one tile short of what the routing needs fails and writes no row; the exact capacity
 * works; the worst case holds the most adversarial routing. */
void test_schedule_capacity(void) {
  const int ep = 2, k = 1, E = 4;
  const int64_t T = 300;
  int32_t *topk = topk_all(MOK_ROUTE_ONE_EXPERT, test_seed(), ep, T, k, E); /* 600 rows to expert 0 */
  const int tile = 128;
  int64_t need = (ep * T + tile - 1) / tile * tile; /* rank 0 holds expert 0 and 1 (empty) */
  sched_case c;
  case_alloc(&c, ep, 0, T, k, E, tile, need - tile);
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_ERR_CAPACITY);
  int untouched = 1;
  for (int64_t i = 0; i <= c.p.capacity; ++i) untouched &= c.row_src[i] == -7;
  CHECK(untouched);
  case_free(&c);
  case_alloc(&c, ep, 0, T, k, E, tile, need);
  CHECK_STATUS(mok_sched_build_host(&c.p, topk, c.scratch, c.count, c.offset, c.row_src), MOK_SUCCESS);
  CHECK(c.offset[2] == need && c.count[0] == ep * T && c.count[1] == 0);
  case_free(&c);
  /* the worst case of the shape: never smaller than what any routing needs */
  mok_shape shape = {T, 128, E, 128, k, 0};
  int64_t worst = 0;
  CHECK_STATUS(mok_schedule_worst_case_rows(&shape, ep, tile, &worst), MOK_SUCCESS);
  CHECK(worst >= need);
  free(topk);
  /* k = E: every expert gets every token; the worst case is exact up to padding */
  mok_shape all = {T, 128, 4, 128, 4, 0};
  CHECK_STATUS(mok_schedule_worst_case_rows(&all, 2, tile, &worst), MOK_SUCCESS);
  CHECK(worst == 2 * (2 * T) + 2 * (tile - 1));
}

/* The cluster pairs' units (tile_scheduler.h, gg_decode_pair) on random counts (empty, negative,
 * one row tile, odd and even row tiles): over every unit and both ranks each (expert, m tile,
 * n tile) is taken exactly once; a shared unit gives both ranks the same expert and column tile
 * and row tiles 2p and 2p + 1; leftovers are each expert's last row tile of an odd count, after
 * every shared unit; only the last unit's rank 1 can have none, when the leftovers are odd. The
 * clusters' walks over those units take each once, in both ways (below). */
static void test_tile_scheduler_pairs(mok_rng *r) {
  /* the claim rule's edges: no leftovers, only leftovers, a quarter exactly and just below */
  CHECK(!mok_gg_bf16_claims(500, 0) && !mok_gg_bf16_claims(0, 0) && mok_gg_bf16_claims(0, 1));
  CHECK(mok_gg_bf16_claims(300, 100) && !mok_gg_bf16_claims(301, 100));
  for (int trial = 0; trial < 60; ++trial) {
    const int E = 1 + mok_rng_below(r, 30), n_tiles = 1 + mok_rng_below(r, 6);
    const int group_m = 1 + mok_rng_below(r, 8), tile_m = 128;
    int32_t count[30], pre_p[31], pre_l[31], prefix[31];
    for (int e = 0; e < E; ++e) {
      const int kind = mok_rng_below(r, 5);
      count[e] = kind == 0 ? -1 + mok_rng_below(r, 2)
                 : kind == 1 ? 1 + mok_rng_below(r, 128)
                             : mok_rng_below(r, 1500);
    }
    const int units = gg_build_prefix_pairs(count, E, tile_m, n_tiles, pre_p, pre_l);
    const int tiles = gg_build_prefix(count, E, tile_m, n_tiles, prefix);
    CHECK(2 * pre_p[E] + pre_l[E] == tiles && units == pre_p[E] + (pre_l[E] + 1) / 2);
    char *seen = calloc((size_t)tiles + 1, 1);
    int bad = 0, none = 0, shared_ok = 1, after = 1, seen_own = 0;
    for (int u = 0; u < units; ++u) {
      int32_t k0, k1;
      const gg_tile a = gg_decode_pair(u, 0, pre_p, pre_l, E, n_tiles, group_m, &k0);
      const gg_tile b = gg_decode_pair(u, 1, pre_p, pre_l, E, n_tiles, group_m, &k1);
      if (k0 == GG_PAIR_SHARED || k1 == GG_PAIR_SHARED) {
        shared_ok &= k0 == k1 && a.expert == b.expert && a.n_tile == b.n_tile &&
                     a.m_tile % 2 == 0 && b.m_tile == a.m_tile + 1;
        after &= !seen_own;
      } else {
        seen_own = 1;
      }
      for (int rank = 0; rank < 2; ++rank) {
        const gg_tile t = rank ? b : a;
        const int kind = rank ? k1 : k0;
        if (kind == GG_PAIR_NONE) {
          none += 1;
          if (rank != 1 || u != units - 1 || pre_l[E] % 2 == 0) ++bad;
          continue;
        }
        const int m_tiles = t.expert >= 0 && t.expert < E ? (prefix[t.expert + 1] - prefix[t.expert]) / n_tiles : 0;
        if (t.expert < 0 || t.expert >= E || t.m_tile < 0 || t.m_tile >= m_tiles || t.n_tile < 0 ||
            t.n_tile >= n_tiles) {
          ++bad;
          continue;
        }
        if (kind == GG_PAIR_OWN && (m_tiles % 2 == 0 || t.m_tile != m_tiles - 1)) ++bad;
        /* its place in the expert order: the tiles of expert e are (m, n) for m < m_tiles */
        seen[prefix[t.expert] + t.m_tile * n_tiles + t.n_tile]++;
      }
    }
    int once = 1;
    for (int i = 0; i < tiles; ++i) once &= seen[i] == 1;
    CHECK(bad == 0);
    CHECK(once);
    CHECK(shared_ok && after);
    CHECK(none == pre_l[E] % 2);
    free(seen);
    /* the clusters' walks (gg_pair_walk): over every cluster each unit exactly once; with the
     * leftovers apart (r from the plan's rule) a leftover cluster walks only leftover units and
     * a pair cluster only pair units, each in increasing order */
    const int n_pair = pre_p[E], n_left = (pre_l[E] + 1) / 2;
    for (int apart = 0; apart < 2; ++apart) {
      const int clusters = 1 + mok_rng_below(r, 70);
      const int rr = apart ? mok_gg_bf16_leftover_clusters(n_pair, n_left, clusters) : 0;
      CHECK(rr >= 0 && rr < (clusters > 1 ? clusters : 1));
      CHECK((rr > 0) == (apart && n_pair > 0 && n_left > 0 && clusters > 1));
      char *walked = calloc((size_t)units + 1, 1);
      int walk_bad = 0;
      for (int c = 0; c < clusters; ++c) {
        int32_t first, step, end;
        gg_pair_walk(c, clusters, rr, n_pair, n_left, &first, &step, &end);
        walk_bad += step < 1 || end > units;
        for (int u = first; u < end && step >= 1; u += step) {
          if (u < 0 || u >= units) { ++walk_bad; break; }
          walked[u]++;
          if (rr > 0) walk_bad += (c < rr) != (u >= n_pair);
        }
      }
      for (int u = 0; u < units; ++u) walk_bad += walked[u] != 1;
      CHECK(walk_bad == 0);
      free(walked);
    }
    /* the row-grouped kernels claim where the leftover units are at least a quarter of all */
    CHECK(mok_gg_bf16_claims(n_pair, n_left) == (n_left > 0 && 4 * n_left >= n_pair + n_left));
    /* run-time claims (gg_claim_step): clusters drawing tickets from two counters in a random
     * interleaving claim every unit exactly once, each its preferred kind first, and all end */
    {
      const int clusters = 1 + mok_rng_below(r, 70);
      const int rr = mok_gg_bf16_leftover_clusters(n_pair, n_left, clusters);
      int32_t tickets[2] = {0, 0};
      gg_claimer cl[70];
      int done[70], live = clusters, claim_bad = 0, *claimed = calloc((size_t)units + 1, sizeof(int));
      for (int c = 0; c < clusters; ++c) {
        cl[c] = gg_claimer_make(c < rr);
        cl[c].ticket = tickets[cl[c].q]++;
        done[c] = 0;
      }
      while (live > 0) {
        const int c = mok_rng_below(r, clusters);
        if (done[c]) continue;
        const int32_t q0 = cl[c].q, sw0 = cl[c].switched;
        int32_t u;
        while ((u = gg_claim_step(&cl[c], n_pair, n_left)) == GG_CLAIM_AGAIN)
          cl[c].ticket = tickets[cl[c].q]++;
        if (u == GG_CLAIM_END) {
          done[c] = 1;
          --live;
          continue;
        }
        if (u < 0 || u >= units) { ++claim_bad; continue; }
        claimed[u]++;
        /* a claimer turns to its second kind only when its first has run out */
        if (!sw0 && cl[c].switched) claim_bad += tickets[q0] <= (q0 ? n_left : n_pair);
        claim_bad += (u >= n_pair) != (cl[c].q == 1);
        cl[c].ticket = tickets[cl[c].q]++;
      }
      for (int u = 0; u < units; ++u) claim_bad += claimed[u] != 1;
      CHECK(claim_bad == 0);
      free(claimed);
    }
  }
}

/* The weight gradient's chunks: walked as persistent CTAs walk them (u, u + grid, ..., each with
 * its cursor), the units cover every tile of every expert with a count >= 0 exactly once and none
 * of an expert at count -1; each unit's row tiles are consecutive ones of one column, 1..chunk of
 * them for an expert with at most max_rows rows, 1..big (1 or 2) for an expert with more; with
 * the experts in a visiting order, the same over positions. */
static void test_tile_scheduler_k_chunks(mok_rng *r) {
  for (int trial = 0; trial < 40; ++trial) {
    const int E = 1 + mok_rng_below(r, 12), m_tiles = 1 + mok_rng_below(r, 20);
    const int n_tiles = 1 + mok_rng_below(r, 9), chunk = 1 + mok_rng_below(r, 9);
    const int grid = 1 + mok_rng_below(r, 40), max_rows = 256, big = 1 + trial % 2;
    int32_t count[12], prefix[13];
    uint8_t order[12];
    for (int e = 0; e < E; ++e) count[e] = mok_rng_below(r, 4) == 0 ? -1 : (int32_t)mok_rng_below(r, 500);
    for (int e = 0; e < E; ++e) order[e] = (uint8_t)(trial % 4 < 2 ? e : E - 1 - e);
    prefix[0] = 0;
    for (int e = 0; e < E; ++e)
      prefix[e + 1] = prefix[e] + gg_k_chunk_units(count[order[e]], max_rows, m_tiles, n_tiles, chunk, big);
    const int total = prefix[E];
    char *seen = calloc((size_t)E * m_tiles * n_tiles, 1);
    int bad = 0;
    for (int cta = 0; cta < grid; ++cta) {
      int32_t cursor = 0;
      for (int u = cta; u < total; u += grid) {
        int32_t tiles = 0;
        gg_tile t = gg_decode_k_chunk_from(u, prefix, E, m_tiles, n_tiles, chunk, big, count,
                                           order, max_rows, &cursor, &tiles);
        t.expert = t.expert >= 0 && t.expert < E ? order[t.expert] : -1; /* position -> expert */
        const int most = t.expert >= 0 && count[t.expert] <= max_rows ? chunk : big;
        if (t.expert < 0 || count[t.expert] < 0 || tiles < 1 || tiles > most ||
            t.m_tile < 0 || t.m_tile + tiles > m_tiles || t.n_tile < 0 || t.n_tile >= n_tiles) {
          ++bad;
          continue;
        }
        for (int i = 0; i < tiles; ++i)
          seen[((size_t)t.expert * m_tiles + t.m_tile + i) * n_tiles + t.n_tile]++;
      }
    }
    int once = 1;
    for (int e = 0; e < E; ++e)
      for (int m = 0; m < m_tiles; ++m)
        for (int n = 0; n < n_tiles; ++n)
          once &= seen[((size_t)e * m_tiles + m) * n_tiles + n] == (count[e] >= 0 ? 1 : 0);
    CHECK(bad == 0);
    CHECK(once);
    free(seen);
  }
}

/* The experts' visiting order on random counts (ties, zeros, -1, one expert, 256): a permutation,
 * the counts non-increasing along it (-1 as 0), ties in index order; equal counts keep the index
 * order (uniform routing visits the experts as before). */
static void test_tile_scheduler_order(mok_rng *r) {
  for (int trial = 0; trial < 60; ++trial) {
    const int E = trial == 0 ? 1 : trial == 1 ? 256 : 1 + mok_rng_below(r, 256);
    const int spread = 1 + mok_rng_below(r, trial % 3 == 0 ? 3 : 600);
    int32_t count[256], order[256];
    for (int e = 0; e < E; ++e)
      count[e] = mok_rng_below(r, 8) == 0 ? -1 : (int32_t)mok_rng_below(r, spread);
    gg_build_order(count, E, order);
    char seen[256] = {0};
    int perm = 1, sorted = 1;
    for (int i = 0; i < E; ++i) {
      perm &= order[i] >= 0 && order[i] < E && !seen[order[i]];
      if (order[i] >= 0 && order[i] < E) seen[order[i]] = 1;
    }
    CHECK(perm);
    if (!perm) continue;
    for (int i = 1; i < E; ++i) {
      const int a = count[order[i - 1]] > 0 ? count[order[i - 1]] : 0;
      const int b = count[order[i]] > 0 ? count[order[i]] : 0;
      sorted &= a > b || (a == b && order[i - 1] < order[i]);
    }
    CHECK(sorted);
    for (int e = 0; e < E; ++e) count[e] = 37;
    gg_build_order(count, E, order);
    int identity = 1;
    for (int i = 0; i < E; ++i) identity &= order[i] == i;
    CHECK(identity);
  }
}

/* gg_weight_read_once against the readers counted: on random counts (empty experts, one row tile,
 * a few, many), tile sizes and raster groups, single CTAs and cluster pairs, every unit's weight
 * tile (expert, n tile) is counted once per load (a shared pair's multicast once, a GG_PAIR_NONE
 * CTA's unused copy not) by the raster group that loads it: the units of one group_m * n_tiles
 * run of an expert's units (in pairs, of its pair units), or the leftovers after every pair.
 * Single CTAs: read-once exactly where no other unit of the group reads the tile and no later
 * unit does (with group_m 1 the expert's next row tile reads it n_tiles units on). Shared pairs:
 * the same over the pair units (the expert's leftover may read the tile again, in the leftover
 * phase). Leftovers: read-once, and no later unit reads the tile; walked apart from the pairs,
 * read-once exactly where the expert has one row tile, the tile's one reader. So it never calls
 * read-once a tile that another unit of its group reads. */
void test_tile_scheduler_read_once(void) {
  mok_rng r = mok_rng_for(test_seed(), 43);
  enum { MAX_E = 40, MAX_M = 30 };
  int n_once = 0, n_shared = 0, n_left = 0, n_other = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int E = 1 + mok_rng_below(&r, MAX_E), n_tiles = 1 + mok_rng_below(&r, 8);
    const int tile_m = 64 * (1 + mok_rng_below(&r, 3)), group_m = 1 + mok_rng_below(&r, 16);
    const int cl = 1 + trial % 2;
    int32_t count[MAX_E], pre[MAX_E + 1], pre_l[MAX_E + 1];
    for (int e = 0; e < E; ++e) {
      const int kind = mok_rng_below(&r, 5);
      count[e] = kind == 0 ? -1 + mok_rng_below(&r, 2)                /* none */
                 : kind == 1 ? 1 + mok_rng_below(&r, tile_m)           /* one row tile */
                 : kind == 2 ? 1 + mok_rng_below(&r, 4 * tile_m)       /* a few */
                             : 1 + mok_rng_below(&r, MAX_M * tile_m); /* up to MAX_M */
    }
    const int units = cl == 1 ? gg_build_prefix(count, E, tile_m, n_tiles, pre)
                              : gg_build_prefix_pairs(count, E, tile_m, n_tiles, pre, pre_l);
    /* readers[(e * n_tiles + n) * (MAX_M + 1) + g]: loads of tile (e, n) by group g (MAX_M: the
     * leftovers); last[e * n_tiles + n]: the last unit that loads it, last_grouped[.]: the last
     * outside the leftovers */
    int *readers = calloc((size_t)E * n_tiles * (MAX_M + 1), sizeof(int));
    int *last = malloc(sizeof(int) * (size_t)E * n_tiles * 2), *last_grouped = last + E * n_tiles;
    for (int i = 0; i < 2 * E * n_tiles; ++i) last[i] = -1;
    int bad = 0;
    for (int pass = 0; pass < 2; ++pass) /* 0: count the readers; 1: check the answers */
      for (int u = 0; u < units; ++u)
        for (int rank = 0; rank < cl; ++rank) {
          int32_t kind = GG_PAIR_OWN;
          const gg_tile t =
              cl == 1 ? gg_decode_m_grouped(u, pre, E, n_tiles, group_m)
                      : gg_decode_pair(u, rank, pre, pre_l, E, n_tiles, group_m, &kind);
          if (t.expert < 0 || t.expert >= E || t.n_tile < 0 || t.n_tile >= n_tiles) {
            ++bad;
            continue;
          }
          const int m_tiles = gg_ceil_div(count[t.expert] > 0 ? count[t.expert] : 0, tile_m);
          const int once = gg_weight_read_once(m_tiles, t.m_tile, group_m, cl, 0, kind);
          /* the leftovers walked apart from the pairs: read once only with no pairs beside */
          const int once_apart = gg_weight_read_once(m_tiles, t.m_tile, group_m, cl, 1, kind);
          const int w = t.expert * n_tiles + t.n_tile;
          const int grouped = cl == 1 || kind == GG_PAIR_SHARED;
          const int g = grouped ? (u - pre[t.expert]) / (group_m * n_tiles) : MAX_M;
          if (g < 0 || g > MAX_M) {
            ++bad;
            continue;
          }
          const int loads = kind != GG_PAIR_NONE && (kind != GG_PAIR_SHARED || rank == 0);
          const int n = readers[w * (MAX_M + 1) + g];
          if (pass == 0) {
            if (loads) {
              readers[w * (MAX_M + 1) + g] += 1;
              if (u > last[w]) last[w] = u;
              if (grouped && u > last_grouped[w]) last_grouped[w] = u;
            }
            continue;
          }
          if (kind == GG_PAIR_NONE) { /* its load is unused: the hint follows its peer's */
            bad += !once;
            bad += cl == 2 && once_apart != (m_tiles == 1);
            continue;
          }
          /* apart changes only the leftovers: a leftover's tile is read once exactly where the
           * expert's one row tile is its only reader (loaded once over all units) */
          if (cl == 1 || kind == GG_PAIR_SHARED) bad += once_apart != once;
          else bad += once_apart != (m_tiles == 1) || (m_tiles == 1 && (last[w] != u || n != 1));
          if (once && n != 1) ++bad; /* another reader in its group */
          if (cl == 1) bad += once != (n == 1 && last[w] == u);
          else if (kind == GG_PAIR_SHARED) bad += once != (n == 1 && last_grouped[w] == u);
          else bad += !once || last[w] != u; /* a leftover: the tile's last reader */
          if (rank == 0) {
            n_once += once;
            if (kind == GG_PAIR_OWN && cl == 2) ++n_left;
            else if (once && cl == 2) ++n_shared;
            else n_other += !once;
          }
        }
    CHECK(bad == 0);
    free(readers);
    free(last);
  }
  /* the cases the rule tells apart all came up */
  CHECK(n_once > 0 && n_shared > 0 && n_left > 0 && n_other > 0);
}

/* The grouped GEMM's tile scheduler on random tile counts (some experts empty): the M-grouped
 * decode visits every (expert, m tile, n tile) exactly once over [0, prefix[E]), raster groups
 * keep their row tiles together, and the cursor decode, walked as a persistent CTA walks its
 * tiles (idx, idx + grid, ...), gives the same tiles. The row-tile decode walks every expert's
 * row tiles once, in order, and its cursor changes nothing either. */
void test_tile_scheduler(void) {
  mok_rng r = mok_rng_for(test_seed(), 41);
  for (int trial = 0; trial < 40; ++trial) {
    const int E = 1 + mok_rng_below(&r, 12), n_tiles = 1 + mok_rng_below(&r, 9);
    const int group_m = 1 + mok_rng_below(&r, 8), grid = 1 + mok_rng_below(&r, 40);
    int32_t prefix[13], m_tiles[12];
    prefix[0] = 0;
    for (int e = 0; e < E; ++e) {
      m_tiles[e] = mok_rng_below(&r, 4) == 0 ? 0 : 1 + mok_rng_below(&r, 11);
      prefix[e + 1] = prefix[e] + m_tiles[e] * n_tiles;
    }
    const int total = prefix[E];
    char *seen = calloc((size_t)E * 11 * n_tiles + 1, 1);
    int bad = 0;
    for (int idx = 0; idx < total; ++idx) {
      const gg_tile t = gg_decode_m_grouped(idx, prefix, E, n_tiles, group_m);
      if (t.expert < 0 || t.expert >= E || t.m_tile < 0 || t.m_tile >= m_tiles[t.expert] ||
          t.n_tile < 0 || t.n_tile >= n_tiles) {
        ++bad;
        continue;
      }
      seen[((size_t)t.expert * 11 + t.m_tile) * n_tiles + t.n_tile]++;
      /* inside a raster group, consecutive indices of one column take consecutive row tiles */
      if (idx + 1 < prefix[t.expert + 1]) {
        const gg_tile u = gg_decode_m_grouped(idx + 1, prefix, E, n_tiles, group_m);
        if (u.n_tile == t.n_tile && u.m_tile != t.m_tile + 1) ++bad;
      }
    }
    int once = 1;
    for (int e = 0; e < E; ++e)
      for (int m = 0; m < m_tiles[e]; ++m)
        for (int n = 0; n < n_tiles; ++n) once &= seen[((size_t)e * 11 + m) * n_tiles + n] == 1;
    CHECK(bad == 0);
    CHECK(once);
    for (int cta = 0; cta < grid && cta < total; ++cta) {
      int32_t cursor = 0;
      int same = 1;
      for (int idx = cta; idx < total; idx += grid) {
        const gg_tile a = gg_decode_m_grouped(idx, prefix, E, n_tiles, group_m);
        const gg_tile b = gg_decode_m_grouped_from(idx, prefix, E, n_tiles, group_m, &cursor);
        same &= a.expert == b.expert && a.m_tile == b.m_tile && a.n_tile == b.n_tile;
      }
      CHECK(same);
    }
    /* the row-tile decode: walked in order, every (expert, m tile) once, in that order; walked
     * with a stride and a cursor, the same as decoded afresh */
    int32_t cursor = 0, u = 0, in_order = 1;
    for (int e = 0; e < E; ++e)
      for (int m = 0; m < m_tiles[e]; ++m, ++u) {
        const gg_tile t = gg_decode_row_tile_from(u, prefix, E, n_tiles, &cursor);
        in_order &= t.expert == e && t.m_tile == m && t.n_tile == 0;
      }
    CHECK(in_order && u == total / n_tiles);
    for (int cta = 0; cta < grid && cta < total / n_tiles; ++cta) {
      int32_t c = 0;
      int same = 1;
      for (int u = cta; u < total / n_tiles; u += grid) {
        int32_t fresh = 0;
        const gg_tile a = gg_decode_row_tile_from(u, prefix, E, n_tiles, &fresh);
        const gg_tile b = gg_decode_row_tile_from(u, prefix, E, n_tiles, &c);
        same &= a.expert == b.expert && a.m_tile == b.m_tile;
      }
      CHECK(same);
    }
    free(seen);
  }
  test_tile_scheduler_pairs(&r);
  test_tile_scheduler_k_chunks(&r);
  test_tile_scheduler_order(&r);
}
