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
#include "comm/barrier_signal.h"
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
    int64_t cap = below(4) ? MAXR : below(ep * T * k + el * tile + 1);
    if (cap > MAXR) cap = MAXR; /* rows[] holds MAXR + 1 (ep T k + el tile reaches 4128) */
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

/* ---- the barrier protocol (comm/barrier_signal.h) as a model of N ranks ----------------------
 * Each rank runs a program of collective calls (a few barriers each) the way the barrier kernel
 * does: the same state update and signal (mok_barrier_step), the same rule for a peer's signal
 * (mok_sig_judge), the sticky error with the rank it came from, refusals (a call refused at its
 * start, or failing at a later barrier), a timed-out rank that signals without waiting, and a user
 * that clears the error between calls. A scheduler interleaves the ranks' steps at random; when
 * every unfinished rank is blocked, one of them times out (the device's bound). Runs vary:
 * identical programs; stalls (a waiting rank times out at random, as behind a slow peer); programs
 * that differ (a call with a barrier more or less, a call one rank does not make). Checked:
 *   - safety: a rank that passes a barrier with no fault has every peer at that same barrier of the
 *     same call (or past it by one, or at the next call's first when it ends the call);
 *   - identical programs without stalls never time out, and a call one rank refused ends with the
 *     error on every other rank, naming a refusing rank; a call nobody refused ends with none. */
#define BM_RANKS 6
#define BM_CALLS 10
#define BM_DESYNC 15 /* MOK_ERR_DESYNC as the model's status */
#define BM_REFUSE 1  /* the status a refusal carries */
#define BM_TIMEOUT 13

typedef struct {
  int calls, nb[BM_CALLS + 1], refuse_at[BM_CALLS + 1]; /* refuse_at: barrier index, or -1 */
} bm_program;

typedef struct {
  mok_barrier_state st;
  int err, from;           /* sticky error; from: 0 this rank, r + 1 rank r */
  uint64_t slot[BM_RANKS]; /* the peers' signals to this rank */
  int call, bar, waiting, done;
  int sig_call, sig_bar, sig_refused; /* the last signal it stored, in the model's true terms */
  int end_err[BM_CALLS + 1], end_from[BM_CALLS + 1];
} bm_rank;

static void bm_adopt(bm_rank *r, uint32_t fault) {
  if (!r->err) r->err = (int)(fault >> 8), r->from = (int)(fault & 0xFF) + 1;
}

static void bm_end_call(bm_rank *r, int self) {
  r->end_err[r->call] = r->err;
  r->end_from[r->call] = r->err ? (r->from ? r->from - 1 : self) : -1;
  r->call++, r->bar = 0, r->waiting = 0;
}

typedef struct { long runs, steps, passes, timeouts, unsafe, deadlocks, spread_bad; } bm_counts;

static void bm_run(int n, const bm_program *prog, int stalls, int same, bm_counts *c) {
  bm_rank R[BM_RANKS];
  memset(R, 0, sizeof R);
  for (int guard = 0; guard < 100000; ++guard) {
    int live = 0, progressed = 0;
    for (int i = 0; i < n; ++i) live += !R[i].done;
    if (!live) break;
    /* one random unfinished rank tries to step; if it is blocked, try the others in turn */
    const int start = (int)below(n);
    int blocked_any = -1;
    for (int t = 0; t < n && !progressed; ++t) {
      const int id = (start + t) % n;
      bm_rank *r = &R[id];
      const bm_program *pg = &prog[id];
      if (r->done) continue;
      if (r->call >= pg->calls) { r->done = 1; progressed = 1; break; }
      if (!r->waiting) {
        if (r->bar == 0 && r->err && below(4) != 0) r->err = 0, r->from = 0; /* the user clears */
        const int refused = pg->refuse_at[r->call] == r->bar;
        const int last = r->bar == pg->nb[r->call] - 1;
        const uint32_t now = r->err ? mok_sig_fault(r->err, r->from ? r->from - 1 : id) : 0;
        const uint64_t sig =
            mok_barrier_step(&r->st, r->bar == 0, last, refused ? BM_REFUSE : 0, id, now);
        for (int p = 0; p < n; ++p) R[p].slot[id] = sig;
        r->sig_call = r->call, r->sig_bar = r->bar, r->sig_refused = refused;
        if (r->err == BM_TIMEOUT) { /* signals without waiting */
          if (last || refused) bm_end_call(r, id); else r->bar++;
        } else r->waiting = 1;
        progressed = 1;
        ++c->steps;
        break;
      }
      const int refusing = pg->refuse_at[r->call] == r->bar;
      const int last = refusing || r->bar == pg->nb[r->call] - 1;
      int wait_on = -1;
      uint32_t faults[BM_RANKS];
      for (int p = 0; p < n && wait_on < 0; ++p) {
        if (refusing) { /* until every peer has reached this call */
          if (!mok_sig_reached_call(r->slot[p], r->st.call)) wait_on = p;
          faults[p] = 0;
          continue;
        }
        const int64_t f = mok_sig_judge(r->slot[p], r->st.call, r->st.index, last, p, BM_DESYNC);
        if (f == MOK_SIG_WAIT) wait_on = p; else faults[p] = (uint32_t)f;
      }
      if (wait_on >= 0 && !(stalls && below(64) == 0)) { blocked_any = id; continue; }
      if (wait_on >= 0) { /* a stall: this rank's wait runs out */
        bm_adopt(r, mok_sig_fault(BM_TIMEOUT, wait_on));
        ++c->timeouts;
      } else {
        for (int p = 0; p < n; ++p) if (faults[p]) bm_adopt(r, faults[p]);
        if (!r->err && !refusing) { /* safety: every peer is in this phase */
          ++c->passes;
          for (int p = 0; p < n; ++p) {
            const bm_rank *q = &R[p];
            const int ok = (!q->sig_refused || q->sig_call == r->call + 1) &&
                ((q->sig_call == r->call && (q->sig_bar == r->bar || q->sig_bar == r->bar + 1)) ||
                 (last && q->sig_call == r->call + 1)); /* it finished this call */
            if (!ok && c->unsafe++ < 3)
              fprintf(stderr, "  barrier model: rank %d passed call %d barrier %d with rank %d at "
                      "call %d barrier %d%s\n", id, r->call, r->bar, p, q->sig_call, q->sig_bar,
                      q->sig_refused ? " (refused)" : "");
          }
        }
      }
      if (last) bm_end_call(r, id); else r->bar++, r->waiting = 0;
      progressed = 1;
      ++c->steps;
    }
    if (!progressed && blocked_any >= 0) { /* every unfinished rank waits: the bound ends one */
      bm_rank *r = &R[blocked_any];
      bm_adopt(r, mok_sig_fault(BM_TIMEOUT, 0));
      ++c->timeouts;
      if (same && !stalls) ++c->deadlocks;
      if (r->bar == prog[blocked_any].nb[r->call] - 1 || prog[blocked_any].refuse_at[r->call] == r->bar)
        bm_end_call(r, blocked_any);
      else r->bar++, r->waiting = 0;
    }
  }
  if (!same || stalls) return;
  /* identical programs, no stalls: a call some rank refused ends with that refusal on every other rank,
   * naming a rank that refused it (or that carried an uncleared refusal into it); a call nobody
   * refused, begun with no error anywhere, ends with none */
  for (int j = 0; j < prog[0].calls; ++j) {
    int refusers = 0, carried = 0;
    for (int i = 0; i < n; ++i) { /* carried: a fault of the call before may live on uncleared */
      refusers += prog[i].refuse_at[j] >= 0;
      carried += j > 0 && (R[i].end_err[j - 1] != 0 || prog[i].refuse_at[j - 1] >= 0);
    }
    for (int i = 0; i < n; ++i) {
      const int e = R[i].end_err[j], from = R[i].end_from[j];
      int ok;
      if (prog[i].refuse_at[j] >= 0) continue; /* a refusing rank's caller has the status */
      if (refusers)
        ok = e == BM_REFUSE && from >= 0 && from < n && (prog[from].refuse_at[j] >= 0 || carried);
      else
        ok = carried ? e == 0 || e == BM_REFUSE : e == 0;
      if (!ok && c->spread_bad++ < 3)
        fprintf(stderr, "  barrier model: call %d (%d refusing) ended on rank %d with %d from %d\n",
                j, refusers, i, e, from);
    }
  }
}

void test_fuzz_barrier_protocol(void) {
  seed_once("barrier protocol");
  const double end = now() + budget();
  bm_counts c;
  memset(&c, 0, sizeof c);
  long kinds[3] = {0, 0, 0};
  while (now() < end) {
    for (int it = 0; it < 64; ++it) {
      const int n = 1 + (int)below(BM_RANKS);
      bm_program prog[BM_RANKS];
      const int calls = 1 + (int)below(BM_CALLS);
      const int kind = (int)below(3); /* 0 identical, 1 stalls, 2 programs that differ */
      ++kinds[kind];
      for (int i = 0; i < n; ++i) {
        prog[i].calls = calls;
        for (int j = 0; j <= BM_CALLS; ++j) prog[i].refuse_at[j] = -1;
      }
      for (int j = 0; j < calls; ++j) {
        const int nb = 1 + (int)below(3);
        for (int i = 0; i < n; ++i) {
          prog[i].nb[j] = nb;
          if (below(8) == 0) prog[i].refuse_at[j] = below(3) == 0 ? (int)below(nb) : 0;
        }
      }
      if (kind == 2) { /* one rank's program differs */
        bm_program *d = &prog[below(n)];
        const int j = (int)below(calls);
        if (below(2) && d->calls < BM_CALLS) { /* a call the others do not make */
          for (int q = d->calls; q > j; --q) d->nb[q] = d->nb[q - 1], d->refuse_at[q] = d->refuse_at[q - 1];
          d->refuse_at[j] = -1;
          d->calls++;
        } else { /* a barrier more or less */
          d->nb[j] = d->nb[j] > 1 && below(2) ? d->nb[j] - 1 : d->nb[j] + 1;
          if (d->refuse_at[j] >= d->nb[j]) d->refuse_at[j] = -1;
        }
      }
      bm_run(n, prog, kind == 1, kind != 2, &c);
      ++c.runs;
    }
  }
  printf("    %ld runs (%ld identical, %ld with stalls, %ld differing), %ld barrier steps, "
         "%ld fault-free passes, %ld timeouts; %ld unsafe passes, %ld deadlocks of identical "
         "programs, %ld faults not spread\n", c.runs, kinds[0], kinds[1], kinds[2], c.steps,
         c.passes, c.timeouts, c.unsafe, c.deadlocks, c.spread_bad);
  CHECK(c.runs > 0 && c.passes > 0 && c.unsafe == 0 && c.deadlocks == 0 && c.spread_bad == 0);
}
