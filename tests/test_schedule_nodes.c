/* test_schedule_nodes.c — the two-level schedule's network level (schedule/schedule_node_core.h)
 * against a naive oracle on random, skewed and adversarial routings over N nodes x G GPUs: every
 * send list is exactly the tokens with an expert on that node, once each (deduplicated), ascending;
 * chunked construction equals one chunk; every row of every rank's expert table (the one-node
 * schedule, unchanged) finds its token exactly once, over NVLink from its source or in its proxy's
 * staging at the offset the receive side computed; staging is bounded by the macrobatch rule under
 * the worst routing and its overflow is reported before anything is written; bad ids and
 * duplicates give the one-node schedule's statuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "reference/ref_inputs.h"
#include "schedule/schedule.h"
#include "schedule/schedule_node_core.h"
#include "tests/tests.h"
#include "tests/test_util.h"

typedef struct {
  int nodes, gpus, el, k;
  int64_t T;
} node_cfg;

/* Source rank s's send lists [nodes][T] and counts [nodes], built in chunks of chunk tokens. */
static int build_send(const node_cfg *c, const int32_t *topk_s, int s, int64_t chunk,
                      int32_t *send_token, int32_t *send_count) {
  const int E = c->nodes * c->gpus * c->el, epn = c->gpus * c->el, self = s / c->gpus;
  const int64_t nch = (c->T + chunk - 1) / chunk;
  int32_t *counts = calloc((size_t)(nch * c->nodes + 1), sizeof(int32_t));
  int st = MOK_SCHED_OK;
  for (int64_t ch = 0; ch < nch && st == MOK_SCHED_OK; ++ch) {
    const int64_t t0 = ch * chunk, n = c->T - t0 < chunk ? c->T - t0 : chunk;
    st = mok_sched2_count_chunk(topk_s + t0 * c->k, n, c->k, E, epn, c->nodes, self,
                                counts + ch * c->nodes);
  }
  if (st == MOK_SCHED_OK) st = mok_sched2_scan(counts, nch, c->nodes, send_count);
  for (int64_t ch = 0; ch < nch && st == MOK_SCHED_OK; ++ch) {
    const int64_t t0 = ch * chunk, n = c->T - t0 < chunk ? c->T - t0 : chunk;
    mok_sched2_fill_chunk(topk_s + t0 * c->k, n, c->k, t0, epn, c->nodes, self,
                          counts + ch * c->nodes, send_token, c->T);
  }
  free(counts);
  return st;
}

/* One configuration and routing: every check of the file's header but the errors. Returns the
 * number of failed checks; *saved: (token, node) pairs the deduplication kept off the network. */
static int check_case(const node_cfg *c, mok_route_kind kind, uint64_t seed, int64_t *saved) {
  const int ep = c->nodes * c->gpus, E = ep * c->el, epn = c->gpus * c->el, k = c->k;
  const int64_t T = c->T;
  int bad = 0;
  int32_t *topk = malloc(sizeof(int32_t) * (size_t)(ep * T * k));
  for (int r = 0; r < ep; ++r)
    if (mok_route_fill(kind, seed, r, T, k, E, ep, topk + r * T * k) != MOK_SUCCESS) {
      free(topk);
      return 0; /* the kind cannot serve this shape */
    }
  int32_t *send = malloc(sizeof(int32_t) * (size_t)(ep * c->nodes * T + 1));
  int32_t *cnt = malloc(sizeof(int32_t) * (size_t)(ep * c->nodes));
  int32_t *alt = malloc(sizeof(int32_t) * (size_t)(c->nodes * T + 1));
  int32_t *alt_cnt = malloc(sizeof(int32_t) * (size_t)c->nodes);
  for (int s = 0; s < ep; ++s) {
    int32_t *st_s = send + (int64_t)s * c->nodes * T, *cn_s = cnt + s * c->nodes;
    const int32_t *tk = topk + s * T * k;
    bad += build_send(c, tk, s, T, st_s, cn_s) != MOK_SCHED_OK;
    /* chunks of 7 tokens: the same lists */
    bad += build_send(c, tk, s, 7, alt, alt_cnt) != MOK_SCHED_OK;
    for (int d = 0; d < c->nodes; ++d) {
      bad += alt_cnt[d] != cn_s[d];
      bad += cn_s[d] > 0 && memcmp(alt + d * T, st_s + d * T, sizeof(int32_t) * (size_t)cn_s[d]) != 0;
    }
    /* the oracle: a token is in d's list iff one of its experts is on d (d not s's node) */
    for (int d = 0; d < c->nodes; ++d) {
      int32_t i = 0;
      for (int64_t t = 0; t < T; ++t) {
        int hits = 0;
        for (int j = 0; j < k; ++j) hits += tk[t * k + j] / epn == d;
        if (d == s / c->gpus || hits == 0) continue;
        if (i >= cn_s[d] || st_s[d * T + i] != t) ++bad;
        *saved += hits - 1;
        ++i;
      }
      bad += i != cn_s[d];
    }
  }
  /* the receive side: each proxy's staging, the rails' lists in node order */
  int32_t *off = malloc(sizeof(int32_t) * (size_t)(ep * (c->nodes + 1)));
  int32_t *rail = malloc(sizeof(int32_t) * (size_t)c->nodes);
  for (int p = 0; p < ep; ++p) {
    const int d = p / c->gpus, l = p % c->gpus;
    int64_t need = 0;
    for (int n = 0; n < c->nodes; ++n) {
      rail[n] = cnt[(n * c->gpus + l) * c->nodes + d];
      if (n != d) need += rail[n];
    }
    bad += rail[d] != 0; /* nothing is sent to one's own node */
    int32_t *o = off + p * (c->nodes + 1);
    if (need > 0) bad += mok_sched2_recv_offsets(rail, c->nodes, d, need - 1, o) != MOK_SCHED_CAPACITY;
    bad += mok_sched2_recv_offsets(rail, c->nodes, d, need, o) != MOK_SCHED_OK;
    bad += o[c->nodes] != need;
    for (int n = 0; n < c->nodes; ++n) bad += o[n + 1] - o[n] != (n == d ? 0 : rail[n]);
  }
  /* every row of every rank's expert table finds its token exactly once */
  int64_t cap = 0, rows_total = 0;
  mok_shape sh = {0};
  sh.tokens = T, sh.hidden = 128, sh.intermediate = 128, sh.num_experts = E, sh.top_k = k;
  mok_schedule_worst_case_rows(&sh, ep, 8, &cap);
  int32_t *scratch = malloc(sizeof(int32_t) * (size_t)(ep * c->el));
  int32_t *ecount = malloc(sizeof(int32_t) * (size_t)c->el), *eoff = malloc(sizeof(int32_t) * (size_t)(c->el + 1));
  int32_t *row_src = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  for (int r = 0; r < ep; ++r) {
    mok_sched_params prm = {ep, r, T, k, E, 8, cap, NULL};
    bad += mok_sched_build_host(&prm, topk, scratch, ecount, eoff, row_src) != MOK_SUCCESS;
    const int d = r / c->gpus;
    for (int l = 0; l < c->el; ++l)
      for (int32_t row = eoff[l]; row < eoff[l] + ecount[l]; ++row) {
        const int32_t slot = row_src[row];
        const int s = mok_sched_slot_rank(slot, T, k);
        const int32_t t = (int32_t)mok_sched_slot_token(slot, T, k);
        ++rows_total;
        if (s / c->gpus == d) continue; /* over NVLink from s's x, as in one node */
        const int p = mok_sched2_proxy(s, d, c->gpus);
        const int32_t *list = send + ((int64_t)s * c->nodes + d) * T;
        const int32_t i = mok_sched2_send_index(list, cnt[s * c->nodes + d], t);
        if (i < 0) { ++bad; continue; }
        /* the staging row holds (s, t): s is node(s)'s rank on p's rail, entry i of its list */
        const int32_t srow = off[p * (c->nodes + 1) + s / c->gpus] + i;
        const int32_t lo = off[p * (c->nodes + 1) + s / c->gpus];
        const int32_t hi = off[p * (c->nodes + 1) + s / c->gpus + 1];
        bad += !(srow >= lo && srow < hi) || p % c->gpus != s % c->gpus || list[i] != t;
      }
  }
  bad += rows_total != (int64_t)ep * T * k; /* every (token, expert) pair once, across ranks */
  free(topk); free(send); free(cnt); free(alt); free(alt_cnt); free(off); free(rail);
  free(scratch); free(ecount); free(eoff); free(row_src);
  return bad;
}

void test_schedule_nodes(void) {
  const node_cfg cfgs[] = {
      {2, 2, 2, 2, 37}, {4, 2, 3, 4, 64}, {3, 1, 4, 3, 50}, {8, 8, 4, 8, 24}, {2, 4, 1, 8, 33},
  };
  const mok_route_kind kinds[] = {MOK_ROUTE_UNIFORM, MOK_ROUTE_ZIPF, MOK_ROUTE_ONE_EXPERT,
                                  MOK_ROUTE_EMPTY_EXPERT, MOK_ROUTE_EMPTY_RANK};
  int bad = 0;
  int64_t saved_uniform = 0;
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; ++i)
    for (size_t j = 0; j < sizeof kinds / sizeof kinds[0]; ++j) {
      int64_t saved = 0;
      const int b = check_case(&cfgs[i], kinds[j], test_seed() + 31 * i + j, &saved);
      if (b) printf("  %d nodes x %d GPUs, %s: %d checks failed\n", cfgs[i].nodes, cfgs[i].gpus,
                    mok_route_name(kinds[j]), b);
      bad += b;
      if (kinds[j] == MOK_ROUTE_UNIFORM) saved_uniform += saved;
    }
  CHECK(bad == 0);
  CHECK(saved_uniform > 0); /* tokens with several experts on one node crossed once */
}

/* The worst routing for staging (every token of every node to one node's experts) fills a proxy
 * with (N - 1) rows per token; mok_sched2_macro_tokens' macrobatch always fits; ids outside
 * [0, E), duplicates and bad geometry are refused like the one-node schedule's. */
void test_schedule_nodes_bounds(void) {
  const node_cfg c = {4, 2, 2, 2, 40};
  const int ep = 8, E = 16, epn = 4;
  int32_t *topk = malloc(sizeof(int32_t) * (size_t)(ep * c.T * c.k));
  for (int64_t i = 0; i < ep * c.T; ++i) { /* experts 0 and 1: node 0's first rank */
    topk[i * 2] = 0;
    topk[i * 2 + 1] = 1;
  }
  int32_t send[4 * 40], cnt[4], rail[4], off[5];
  for (int l = 0; l < c.gpus; ++l) {
    for (int n = 0; n < c.nodes; ++n) {
      CHECK(build_send(&c, topk + (n * c.gpus + l) * c.T * c.k, n * c.gpus + l, 9, send, cnt) ==
            MOK_SCHED_OK);
      rail[n] = cnt[0];
      CHECK(cnt[0] == (n == 0 ? 0 : c.T) && cnt[1] == 0 && cnt[2] == 0 && cnt[3] == 0);
    }
    const int64_t worst = (c.nodes - 1) * c.T;
    CHECK(mok_sched2_recv_offsets(rail, c.nodes, 0, worst, off) == MOK_SCHED_OK && off[4] == worst);
    off[4] = -9;
    CHECK(mok_sched2_recv_offsets(rail, c.nodes, 0, worst - 1, off) == MOK_SCHED_CAPACITY);
    CHECK(off[4] == -9); /* nothing written */
    CHECK(mok_sched2_macro_tokens(worst, c.nodes) == c.T);
  }
  CHECK(mok_sched2_macro_tokens(100, 1) == INT64_MAX && mok_sched2_macro_tokens(100, 3) == 50);
  int32_t counts[4] = {0, 0, 0, 0};
  int32_t ids[2] = {3, 16};
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 4, 0, counts) == MOK_SCHED_EXPERT_ID);
  ids[1] = -1;
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 4, 0, counts) == MOK_SCHED_EXPERT_ID);
  ids[1] = 3;
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 4, 0, counts) == MOK_SCHED_DUPLICATE);
  ids[1] = 5;
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, 5, 4, 0, counts) == MOK_SCHED_BAD_ARGUMENT);
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 4, 4, counts) == MOK_SCHED_BAD_ARGUMENT);
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 65, 0, counts) == MOK_SCHED_BAD_ARGUMENT);
  CHECK(mok_sched2_count_chunk(ids, 1, 2, E, epn, 4, 0, counts) == MOK_SCHED_OK);
  CHECK(counts[0] == 0 && counts[1] == 1 && counts[2] == 0 && counts[3] == 0);
  int32_t list[5] = {1, 4, 9, 10, 30};
  CHECK(mok_sched2_send_index(list, 5, 9) == 2 && mok_sched2_send_index(list, 5, 30) == 4 &&
        mok_sched2_send_index(list, 5, 2) == -1 && mok_sched2_send_index(list, 0, 1) == -1);
  free(topk);
}
