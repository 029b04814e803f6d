/* test_faults.c — faults that cross ranks (docs/DESIGN.md, "Barriers and faults"):
 *   - a collective call refused on one rank (a NULL argument; mok_workspace_reject, as a binding
 *     does) fails on every other rank at once, with that rank's status and rank in the error word;
 *     the refusing rank's outputs are untouched, the others' NaN; once every rank clears its error
 *     word, the same workspace gives the reference's results;
 *   - the barrier kernel against synthetic peers (slots the test writes, 40 ranks): silent peers
 *     end the wait after one timeout in all (not one per peer), naming a silent rank; a peer's
 *     refusal, fault or different call sequence reaches this rank with the peer's rank; this
 *     rank's own refusal reaches every peer's slot. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "comm/comm.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static int all_bytes(const void *dev, size_t n, unsigned char v) {
  unsigned char *b = (unsigned char *)lh_to_host(dev, n);
  int ok = 1;
  for (size_t i = 0; i < n && ok; ++i) ok = b[i] == v;
  free(b);
  return ok;
}

static int all_nan_bf16(const void *dev, int64_t n) {
  uint16_t *b = (uint16_t *)lh_to_host(dev, (size_t)n * 2);
  int ok = 1;
  for (int64_t i = 0; i < n && ok; ++i) ok = (b[i] & 0x7F80) == 0x7F80 && (b[i] & 0x7F) != 0;
  free(b);
  return ok;
}

/* After a refused call: every other rank's error word holds want from rank `from`, found without
 * waiting for the timeout (the harness's is 20 s); the refusing rank's own word is clear (its
 * caller has the status). */
static void check_refusal_seen(mok_workspace *ws, const struct timespec *t0, mok_status want,
                               int from, const char *label) {
  if (gpu_ctx.rank == from) want = MOK_SUCCESS, from = -1;
  mok_status dev = MOK_ERR_INTERNAL;
  int rank = -2;
  CHECK_STATUS(mok_workspace_error_rank(ws, &dev, &rank), MOK_SUCCESS);
  const double secs = seconds_since(t0);
  printf("  %-28s rank %d: status %d from rank %d after %.3f s\n", label, gpu_ctx.rank, dev, rank,
         secs);
  CHECK_STATUS(dev, want);
  CHECK(rank == from);
  CHECK(secs < 2.0);
}

GPU_TEST(fault_refused_call_reaches_every_rank) {
  lh_case c = lh_base_case();
  c.Is = 128;
  lh_setup u;
  mok_status st;
  if (!lh_setup_open(gpu_ctx.group, &u, &c, "refused call", &st)) return;
  if (st == MOK_SUCCESS) {
    lh_env *e = &u.e;
    const int refuser = gpu_ctx.size - 1, me = gpu_ctx.rank;
    const int64_t TH = c.T * c.H;
    struct timespec t0;
    /* 1. the forward refused on one rank (router weights missing) */
    CHECK_STATUS(mok_schedule_build(e->s, u.d.topk, e->stream), MOK_SUCCESS);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STATUS(mok_forward(e->s, &u.d.weights, u.d.x, me == refuser ? NULL : u.d.rw, u.d.y,
                             e->stream),
                 me == refuser ? MOK_ERR_INVALID_ARGUMENT : MOK_SUCCESS);
    check_refusal_seen(e->ws, &t0, MOK_ERR_INVALID_ARGUMENT, refuser, "refused forward");
    if (me == refuser) CHECK(all_bytes(u.d.y, (size_t)TH * 2, 0xFF)); /* untouched */
    else CHECK(all_nan_bf16(u.d.y, TH));                                /* NaN, not stale */
    /* 2. the backward refused by a binding (mok_workspace_reject in its place) */
    CHECK_STATUS(mok_workspace_clear_error(e->ws, e->stream), MOK_SUCCESS);
    lh_dev_upload(&u.d, &u.h, me);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (me == refuser)
      CHECK_STATUS(mok_workspace_reject(e->ws, MOK_ERR_INVALID_SHAPE, e->stream), MOK_SUCCESS);
    else
      CHECK_STATUS(mok_backward(e->s, &u.d.weights, u.d.x, u.d.rw, u.d.dy, &u.d.grads, e->stream),
                   MOK_SUCCESS);
    check_refusal_seen(e->ws, &t0, MOK_ERR_INVALID_SHAPE, refuser, "rejected backward");
    if (me == refuser) CHECK(all_bytes(u.d.dx, (size_t)TH * 2, 0xFF));
    else CHECK(all_nan_bf16(u.d.dx, TH));
    CHECK_STATUS(mok_workspace_reject(e->ws, MOK_SUCCESS, e->stream), MOK_ERR_INVALID_ARGUMENT);
    /* 3. cleared on every rank: the same workspace and schedule are right again */
    CHECK_STATUS(mok_workspace_clear_error(e->ws, e->stream), MOK_SUCCESS);
    lh_dev_upload(&u.d, &u.h, me);
    CHECK_STATUS(lh_run(e->s, &u.d, e->stream), MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(e->stream) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e->ws), MOK_SUCCESS);
    lh_check_against_reference(&u.h, &u.d, me, "after the refusals, cleared");
  }
  lh_setup_close(&u);
}

/* ---- the barrier kernel against synthetic peers ------------------------------------------- */
#define SP_RANKS 40

typedef struct {
  uint64_t *mine;           /* device [SP_RANKS]: the peers' signals to this rank (rank 0) */
  uint64_t *theirs;         /* device [SP_RANKS][SP_RANKS]: each peer's slots                */
  char **peer_base;         /* device [SP_RANKS]                                             */
  mok_barrier_state *state; /* device                                                        */
  int32_t *err;             /* device [2]: error word, its rank                               */
} sp_env;

static void sp_set_peers(sp_env *s, uint64_t sig) {
  uint64_t v[SP_RANKS];
  CHECK(cudaMemcpy(v, s->mine, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int p = 1; p < SP_RANKS; ++p) v[p] = sig;
  CHECK(cudaMemcpy(s->mine, v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess);
}

static void sp_set_peer(sp_env *s, int p, uint64_t sig) {
  CHECK(cudaMemcpy(s->mine + p, &sig, 8, cudaMemcpyHostToDevice) == cudaSuccess);
}

/* One barrier on rank 0 (a one-barrier call unless refuse); returns its seconds; *err, *from. */
static double sp_run(sp_env *s, int32_t refuse, int64_t timeout_ns, int *err, int *from) {
  CHECK(cudaMemset(s->err, 0, 8) == cudaSuccess);
  mok_barrier b;
  memset(&b, 0, sizeof b);
  b.peer_base = s->peer_base;
  b.flags_off = 0;
  b.local_base = (char *)s->mine;
  b.rank = 0;
  b.ep = SP_RANKS;
  b.state = s->state;
  b.err = s->err;
  b.err_rank = s->err + 1;
  b.timeout_ns = timeout_ns;
  b.first = 1;
  b.last = 1;
  b.refuse = refuse;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(mok_barrier_run(&b, 0) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  const double secs = seconds_since(&t0);
  int32_t e[2] = {-1, -1};
  CHECK(cudaMemcpy(e, s->err, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
  *err = e[0];
  *from = e[1] - 1; /* -1: this rank */
  return secs;
}

GPU_TEST(barrier_against_synthetic_peers) {
  sp_env s;
  memset(&s, 0, sizeof s);
  CHECK(cudaMalloc((void **)&s.mine, SP_RANKS * 8) == cudaSuccess);
  CHECK(cudaMalloc((void **)&s.theirs, SP_RANKS * SP_RANKS * 8) == cudaSuccess);
  CHECK(cudaMalloc((void **)&s.peer_base, SP_RANKS * sizeof(char *)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&s.state, sizeof(mok_barrier_state)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&s.err, 8) == cudaSuccess);
  if (!s.mine || !s.theirs || !s.peer_base || !s.state || !s.err) goto done;
  cudaMemset(s.mine, 0, SP_RANKS * 8);
  cudaMemset(s.theirs, 0, SP_RANKS * SP_RANKS * 8);
  cudaMemset(s.state, 0, sizeof(mok_barrier_state));
  char *base[SP_RANKS];
  base[0] = (char *)s.mine;
  for (int p = 1; p < SP_RANKS; ++p) base[p] = (char *)(s.theirs + (size_t)p * SP_RANKS);
  cudaMemcpy(s.peer_base, base, sizeof base, cudaMemcpyHostToDevice);
  int err, from;
  const int64_t timeout = 200000000; /* 0.2 s */

  /* call 1: every peer silent. One timeout in all (each thread waits on two peers here). */
  double t = sp_run(&s, 0, timeout, &err, &from);
  printf("  silent peers: status %d naming rank %d after %.3f s (timeout 0.200 s)\n", err, from, t);
  CHECK_STATUS(err, MOK_ERR_TIMEOUT);
  CHECK(from >= 1 && from < SP_RANKS);
  CHECK(t >= 0.19 && t < 0.35);
  uint64_t got[SP_RANKS];
  int landed = 1;
  for (int p = 1; p < SP_RANKS; ++p) { /* this rank's signal in every peer's slot for it */
    uint64_t v = 0;
    cudaMemcpy(&v, s.theirs + (size_t)p * SP_RANKS, 8, cudaMemcpyDeviceToHost);
    landed = landed && v == mok_sig_make(1, 0, 0, 0);
  }
  CHECK(landed);

  /* call 2: peer 7 refused the call; the rest are here */
  sp_set_peers(&s, mok_sig_make(2, 0, 0, 0));
  sp_set_peer(&s, 7, mok_sig_make(2, MOK_SIG_REFUSED, mok_sig_fault(MOK_ERR_INVALID_ARGUMENT, 7), 0));
  t = sp_run(&s, 0, timeout, &err, &from);
  CHECK_STATUS(err, MOK_ERR_INVALID_ARGUMENT);
  CHECK(from == 7 && t < 0.15);

  /* call 3: all here, no fault */
  sp_set_peers(&s, mok_sig_make(3, 0, 0, 0));
  t = sp_run(&s, 0, timeout, &err, &from);
  CHECK_STATUS(err, MOK_SUCCESS);
  CHECK(t < 0.15);

  /* call 4: peer 12 here with a fault first raised on rank 30 */
  sp_set_peers(&s, mok_sig_make(4, 0, 0, 0));
  sp_set_peer(&s, 12, mok_sig_make(4, 0, mok_sig_fault(MOK_ERR_CAPACITY, 30), 0));
  t = sp_run(&s, 0, timeout, &err, &from);
  CHECK_STATUS(err, MOK_ERR_CAPACITY);
  CHECK(from == 30);

  /* call 5: peer 5 two calls ahead with no fault: another sequence of calls */
  sp_set_peers(&s, mok_sig_make(5, 0, 0, 0));
  sp_set_peer(&s, 5, mok_sig_make(7, 0, 0, 0));
  t = sp_run(&s, 0, timeout, &err, &from);
  CHECK_STATUS(err, MOK_ERR_DESYNC);
  CHECK(from == 5 && t < 0.15);

  /* call 6: this rank refuses; its refusal lands in every peer's slot, and it waits only until
   * the peers have reached the call */
  sp_set_peers(&s, mok_sig_make(6, 0, 0, 0));
  t = sp_run(&s, MOK_ERR_MISALIGNED, timeout, &err, &from);
  CHECK_STATUS(err, MOK_SUCCESS); /* its own word is left alone: its caller has the status */
  CHECK(t < 0.15);
  for (int p = 1; p < SP_RANKS; ++p) {
    cudaMemcpy(&got[p], s.theirs + (size_t)p * SP_RANKS, 8, cudaMemcpyDeviceToHost);
    landed = landed && got[p] == mok_sig_make(6, MOK_SIG_REFUSED,
                                              mok_sig_fault(MOK_ERR_MISALIGNED, 0), 0);
  }
  CHECK(landed);
  printf("  synthetic peers: refusal, fault, desync and own refusal seen as expected: %s\n",
         landed ? "yes" : "no");
done:
  cudaFree(s.mine);
  cudaFree(s.theirs);
  cudaFree(s.peer_base);
  cudaFree(s.state);
  cudaFree(s.err);
}
