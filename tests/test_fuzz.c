/* test_fuzz.c — seeded, time-bounded fuzzing of the CPU-side entry points, each against an oracle
 * written the naive way: mok_validate and the size helpers (huge, negative and edge sizes; the
 * oracle computes in 128-bit integers), the host schedule build (bad ids, duplicates, k = E,
 * T = 0, per-rank counts, capacity; the oracle is a direct loop over every (rank, token, choice)),
 * the ring plan's bookkeeping, and the reference's input checks. The seed and the counts are
 * printed; MOK_FUZZ_SEED and MOK_FUZZ_SECONDS (default 2 per fuzzer) repeat or lengthen a run.
 * `make sanitize-test` runs it under ASan and UBSan. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "api/config.h"
#include "mok_reference.h"
#include "schedule/pipeline.h"
#include "schedule/schedule.h"
#include "schedule/schedule_core.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static uint64_t rng_state;
static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int64_t below(int64_t n) { return n > 0 ? (int64_t)(next() % (uint64_t)n) : 0; }

/* A size drawn to hit the edges: small, a power of two (+-1), near 2^31 or 2^62, negative, 0. */
static int64_t size_value(void) {
  switch (below(8)) {
    case 0: return below(5) - 1;
    case 1: return below(300);
    case 2: return (int64_t)128 * (1 + below(64));
    case 3: return ((int64_t)1 << below(63)) + below(3) - 1;
    case 4: return INT32_MAX - below(4) + below(4);
    case 5: return INT64_MAX - below(4);
    case 6: return -(int64_t)(next() >> 1);
    default: return (int64_t)128 << below(24);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double budget(void) {
  const char *e = getenv("MOK_FUZZ_SECONDS");
  double s = e ? atof(e) : 2.0;
  return s > 0 ? s : 2.0;
}

static uint64_t seed_once(const char *what) {
  const char *e = getenv("MOK_FUZZ_SEED");
  uint64_t seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
  rng_state = seed;
  printf("    %s: seed %llu (MOK_FUZZ_SEED to repeat)\n", what, (unsigned long long)seed);
  return seed;
}

void test_fuzz_validate(void) {
  seed_once("validate");
  const double end = now() + budget();
  long n = 0, accepted = 0, bad = 0;
  while (now() < end) {
    for (int it = 0; it < 256; ++it, ++n) {
      mok_shape s = {size_value(), size_value(), size_value(), size_value(), size_value(), size_value()};
      if (below(2)) s.top_k = below(9); /* often a plausible k */
      if (below(2)) s.num_experts = 1 + below(9000);
      const int ep = below(8) == 0 ? (int)below(3) - 1 : 1 + (int)below(64);
      mok_config c;
      mok_config_init(&c);
      if (below(3) == 0) c.schedule_capacity = below(2) ? size_value() : 128 * below(1 << 20);
      if (below(4) == 0) c.ring_bytes = size_value();
      const mok_status st = mok_validate(&s, &c, ep);
      if (st != MOK_SUCCESS) continue;
      ++accepted;
      /* the oracle: what an accepted shape must satisfy, in 128-bit arithmetic */
      __int128 pairs = (__int128)ep * s.tokens * s.top_k;
      int ok = ep > 0 && s.tokens >= 0 && s.hidden > 0 && s.intermediate > 0 && s.top_k > 0 &&
               s.top_k <= s.num_experts && s.num_experts % ep == 0 && pairs <= INT32_MAX &&
               s.num_experts / ep <= MOK_SCHED_MAX_LOCAL_EXPERTS && s.hidden <= INT32_MAX &&
               s.intermediate <= INT32_MAX && c.schedule_capacity <= INT32_MAX;
      int64_t rows = -1;
      ok = ok && mok_schedule_worst_case_rows(&s, ep, 128, &rows) == MOK_SUCCESS && rows >= 0 &&
           rows <= (__int128)pairs + (__int128)(s.num_experts / ep) * 127;
      mok_pipe_params pipe;
      int64_t ring = -1;
      ok = ok && mok_pipe_from_config(&s, &c, ep, 128, 128, &pipe, &ring) == MOK_SUCCESS &&
           pipe.capacity <= INT32_MAX && ring >= 0 && (c.ring_bytes <= 0 || ring <= c.ring_bytes);
      int cpr = 0;
      int64_t ct = 0;
      ok = ok && mok_sched_chunk_geometry(&s, ep, &cpr, &ct) == MOK_SUCCESS && cpr >= 1 &&
           ct >= 1 && (__int128)cpr * ct >= s.tokens;
      if (!ok && bad++ < 5)
        fprintf(stderr, "  accepted: T %lld H %lld E %lld I %lld k %lld Is %lld ep %d cap %lld\n",
                (long long)s.tokens, (long long)s.hidden, (long long)s.num_experts,
                (long long)s.intermediate, (long long)s.top_k, (long long)s.shared_intermediate,
                ep, (long long)c.schedule_capacity);
    }
  }
  printf("    %ld shapes, %ld accepted, %ld accepted wrongly\n", n, accepted, bad);
  CHECK(bad == 0 && accepted > 0);
}

/* The naive schedule: rank `rank`'s table from every rank's routing, or the status it must give. */
static mok_status naive_schedule(const mok_sched_params *p, const int32_t *topk, int32_t *count,
                                 int32_t *offset, int32_t *rows) {
  const int el = p->num_experts / p->ep, lo = p->rank * el, k = p->top_k;
  for (int s = 0; s < p->ep; ++s)
    for (int64_t t = 0; t < p->counts[s]; ++t) {
      const int32_t *ids = topk + (s * p->tokens + t) * k;
      for (int j = 0; j < k; ++j) {
        if (ids[j] < 0 || ids[j] >= p->num_experts) return MOK_ERR_EXPERT_ID;
        for (int i = 0; i < j; ++i)
          if (ids[i] == ids[j]) return MOK_ERR_DUPLICATE_EXPERT;
      }
    }
  int64_t total = 0;
  for (int l = 0; l < el; ++l) {
    count[l] = 0;
    for (int s = 0; s < p->ep; ++s)
      for (int64_t t = 0; t < p->counts[s]; ++t)
        for (int j = 0; j < k; ++j) count[l] += topk[(s * p->tokens + t) * k + j] == lo + l;
    offset[l] = (int32_t)total;
    total += (count[l] + p->tile_m - 1) / p->tile_m * p->tile_m;
  }
  offset[el] = (int32_t)total;
  if (total > p->capacity) return MOK_ERR_CAPACITY;
  for (int64_t r = 0; r < total; ++r) rows[r] = -1;
  for (int l = 0; l < el; ++l) {
    int64_t at = offset[l];
    for (int s = 0; s < p->ep; ++s)
      for (int64_t t = 0; t < p->counts[s]; ++t)
        for (int j = 0; j < k; ++j)
          if (topk[(s * p->tokens + t) * k + j] == lo + l) rows[at++] = (int32_t)((s * p->tokens + t) * k + j);
  }
  return MOK_SUCCESS;
}

void test_fuzz_schedule(void) {
  seed_once("schedule");
  const double end = now() + budget();
  long builds = 0, errors = 0, bad = 0;
  enum { MAXR = 4096 };
  static int32_t topk[4 * 64 * 16], scratch[64], count[17], offset[17], rows[MAXR + 1];
  static int32_t ncount[17], noffset[17], nrows[MAXR + 1];
  while (now() < end) {
    const int ep = 1 + (int)below(4), el = 1 + (int)below(4), E = ep * el;
    const int k = 1 + (int)below(E < 16 ? E : 16);
    const int64_t T = below(65);
    int64_t counts[4];
    for (int s = 0; s < ep; ++s) counts[s] = below(3) ? T : below(T + 1);
    for (int64_t i = 0; i < ep * T; ++i) { /* k distinct ids, then perhaps one fault */
      int32_t *ids = topk + i * k;
      for (int j = 0; j < k; ++j) {
        int32_t e;
        int dup;
        do {
          e = (int32_t)below(E);
          dup = 0;
          for (int q = 0; q < j; ++q) dup |= ids[q] == e;
        } while (dup);
        ids[j] = e;
      }
      const int64_t f = below(4000);
      if (f == 0) ids[below(k)] = below(2) ? E + (int32_t)below(3) : -1 - (int32_t)below(3);
      if (f == 1 && k > 1) ids[1 + below(k - 1)] = ids[0];
    }
    const int tile = 1 + (int)below(8);
    const int64_t cap = below(4) ? MAXR : below(ep * T * k + el * tile + 1);
    for (int rank = 0; rank < ep; ++rank, ++builds) {
      mok_sched_params p = {ep, rank, T, k, E, tile, cap, counts};
      for (int64_t r = 0; r <= cap; ++r) rows[r] = -7;
      const mok_status got = mok_sched_build_host(&p, topk, scratch, count, offset, rows);
      const mok_status want = naive_schedule(&p, topk, ncount, noffset, nrows);
      int ok = got == want && rows[cap] == -7; /* nothing past the capacity */
      if (got != MOK_SUCCESS) ++errors;
      if (ok && got == MOK_SUCCESS) {
        for (int l = 0; l < el; ++l) ok &= count[l] == ncount[l] && offset[l] == noffset[l];
        ok &= offset[el] == noffset[el];
        for (int64_t r = 0; ok && r < noffset[el]; ++r) ok &= rows[r] == nrows[r];
      }
      if (!ok && bad++ < 5)
        fprintf(stderr, "  schedule: ep %d rank %d T %lld k %d E %d tile %d cap %lld: got %d want %d\n",
                ep, rank, (long long)T, k, E, tile, (long long)cap, got, want);
    }
  }
  printf("    %ld schedule builds (%ld refused), %ld differ from the oracle\n", builds, errors, bad);
  CHECK(bad == 0 && builds > 0 && errors > 0);
}

void test_fuzz_ring_plan(void) {
  seed_once("ring plan");
  const double end = now() + budget();
  long plans = 0, valid = 0, bad = 0;
  while (now() < end) {
    for (int it = 0; it < 256; ++it, ++plans) {
      const int32_t tile = (int32_t)(1 << below(9));
      mok_pipe_params q = {tile, tile * (int32_t)(1 + below(8)), (int32_t)(1 + below(8)),
                           (int32_t)below(5), tile * below(1 << 16), tile * below(1 << 18)};
      if (below(8) == 0) q.capacity = size_value();
      if (below(8) == 0) q.expert_rows = size_value();
      if (mok_pipe_check(&q) != MOK_SCHED_OK) continue;
      ++valid;
      const int64_t steps = mok_pipe_steps(&q), region = mok_pipe_region_rows(&q);
      int ok = steps >= 1 && region >= 0 && region <= q.capacity &&
               steps * mok_pipe_macro_rows(&q) >= q.capacity &&
               (steps - 1) * mok_pipe_macro_rows(&q) < (q.capacity > 0 ? q.capacity : 1);
      for (int r = 0; ok && r < 8; ++r) {
        const int64_t off = below(q.capacity + 1), b = mok_pipe_expert_macro(&q, off);
        ok = b >= 0 && b < steps;
      }
      if (!ok && bad++ < 5)
        fprintf(stderr, "  ring plan: tile %d mb %d macro %d regions %d expert_rows %lld cap %lld\n",
                q.tile_m, q.minibatch_rows, q.macro_minibatches, q.ring_regions,
                (long long)q.expert_rows, (long long)q.capacity);
    }
  }
  printf("    %ld ring plans, %ld valid, %ld inconsistent\n", plans, valid, bad);
  CHECK(bad == 0 && valid > 0);
}

void test_fuzz_reference_inputs(void) {
  seed_once("reference");
  const double end = now() + budget();
  long problems = 0, bad = 0;
  while (now() < end) {
    const int ep = 1 + (int)below(3), E = ep * (1 + (int)below(4)), k = 1 + (int)below(E);
    mok_shape s = {below(6), 2 + below(6), E, 2 + below(6), k, below(2) ? 0 : 2 + below(4)};
    mok_ref_problem p;
    if (mok_ref_problem_make(&p, &s, ep, MOK_ROUTE_UNIFORM, next()) != MOK_SUCCESS) {
      ++bad;
      break;
    }
    ++problems;
    mok_status want = MOK_SUCCESS;
    const int fault = s.tokens > 0 ? (int)below(3) : 0; /* 0: none, 1: a bad id, 2: a duplicate */
    if (fault == 1 || (fault == 2 && k > 1)) {
      int32_t *ids = (int32_t *)p.ranks[below(ep)].topk_experts + below(s.tokens) * k;
      if (fault == 1) ids[below(k)] = below(2) ? E : -1, want = MOK_ERR_EXPERT_ID;
      else ids[1] = ids[0], want = MOK_ERR_DUPLICATE_EXPERT;
    }
    for (int r = 0; r < ep; ++r) memset(p.y[r], 0x7f, sizeof(float) * (size_t)(s.tokens * s.hidden));
    const mok_status got = mok_ref_forward(&p.cfg, p.ranks, p.y);
    int ok = got == want;
    if (got == MOK_SUCCESS) /* every output written (the poison gone), finite */
      for (int r = 0; ok && r < ep; ++r)
        for (int64_t i = 0; ok && i < s.tokens * s.hidden; ++i) ok = p.y[r][i] == p.y[r][i] && p.y[r][i] < 1e30f;
    if (!ok && bad++ < 5)
      fprintf(stderr, "  reference: ep %d T %lld E %d k %d fault %d: got %d want %d\n", ep,
              (long long)s.tokens, E, k, fault, got, want);
    mok_ref_problem_free(&p);
  }
  printf("    %ld reference problems, %ld wrong\n", problems, bad);
  CHECK(bad == 0 && problems > 0);
}
