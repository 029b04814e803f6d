/* test_barrier.c — the barrier's rule for a peer's signal (comm/barrier_signal.h), case by case:
 * where a peer may be when a rank waits at a barrier, what it is told, and what is a different
 * sequence of calls. test_fuzz.c runs the whole protocol over random interleavings. */
#include <stdint.h>
#include "comm/barrier_signal.h"
#include "mok.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static uint32_t timeout_of(int rank) { return mok_sig_fault(MOK_ERR_TIMEOUT, rank); }

static int64_t judge(uint64_t f, uint32_t call, uint32_t index, int last) {
  return mok_sig_judge(f, call, index, last, 3, MOK_ERR_DESYNC);
}

void test_barrier_rules(void) {
  const uint32_t none = 0, bad_id = mok_sig_fault(MOK_ERR_EXPERT_ID, 1);
  const uint32_t refused = mok_sig_fault(MOK_ERR_INVALID_ARGUMENT, 2);
  const int64_t desync = mok_sig_fault(MOK_ERR_DESYNC, 3);
  /* never signalled (a fresh workspace's zero slots) or behind: wait */
  CHECK(judge(0, 1, 0, 0) == MOK_SIG_WAIT);
  CHECK(judge(mok_sig_make(6, 0, none, none), 7, 0, 1) == MOK_SIG_WAIT);
  CHECK(judge(mok_sig_make(7, 0, none, none), 7, 1, 0) == MOK_SIG_WAIT);
  /* at this barrier: its fault now */
  CHECK(judge(mok_sig_make(7, 1, none, none), 7, 1, 0) == 0);
  CHECK(judge(mok_sig_make(7, 1, bad_id, none), 7, 1, 0) == bad_id);
  /* refused this call, at any barrier of it: the refusal's status and rank */
  CHECK(judge(mok_sig_make(7, MOK_SIG_REFUSED, refused, none), 7, 0, 0) == refused);
  CHECK(judge(mok_sig_make(7, MOK_SIG_REFUSED, refused, none), 7, 2, 1) == refused);
  /* one barrier on within the call: it passed this one */
  CHECK(judge(mok_sig_make(7, 2, none, none), 7, 1, 0) == 0);
  /* ... but not past the call's last barrier, nor two on */
  CHECK(judge(mok_sig_make(7, 2, none, none), 7, 1, 1) == desync);
  CHECK(judge(mok_sig_make(7, 3, none, none), 7, 1, 0) == desync);
  /* the next call's first barrier or refusal, when this barrier ends the call: the fault it
   * signalled at this call's end travels with it, not its fault of the new call */
  CHECK(judge(mok_sig_make(8, 0, none, none), 7, 2, 1) == 0);
  CHECK(judge(mok_sig_make(8, 0, none, bad_id), 7, 2, 1) == bad_id);
  CHECK(judge(mok_sig_make(8, 0, bad_id, none), 7, 2, 1) == 0);
  CHECK(judge(mok_sig_make(8, MOK_SIG_REFUSED, refused, none), 7, 2, 1) == 0);
  CHECK(judge(mok_sig_make(8, 1, timeout_of(4), none), 7, 2, 1) == 0); /* it timed out there */
  /* the next call while this one is not over, or a later call: another sequence of calls,
   * unless the peer's fault explains why it ran ahead (a timed-out peer signals without waiting) */
  CHECK(judge(mok_sig_make(8, 0, none, none), 7, 1, 0) == desync);
  CHECK(judge(mok_sig_make(9, 0, none, none), 7, 2, 1) == desync);
  const uint32_t timeout = mok_sig_fault(MOK_ERR_TIMEOUT, 4);
  CHECK(judge(mok_sig_make(8, 0, none, timeout), 7, 1, 0) == timeout);
  /* call numbers wrap at 2^24 */
  CHECK(judge(mok_sig_make(0, 0, none, none), MOK_SIG_CALL_MASK, 1, 1) == 0);
  CHECK(judge(mok_sig_make(MOK_SIG_CALL_MASK, 0, none, none), 0, 0, 0) == MOK_SIG_WAIT);
  /* the state update: a first barrier opens a call and keeps the previous call's end */
  mok_barrier_state st = {MOK_SIG_CALL_MASK, 4, 0, 0};
  uint64_t f = mok_barrier_step(&st, 0, 1, 0, 0, bad_id);
  CHECK(st.index == 5 && st.end == bad_id);
  f = mok_barrier_step(&st, 1, 0, 0, 0, none);
  CHECK(st.call == 0 && st.index == 0 && st.prev_end == bad_id && st.end == 0);
  CHECK(judge(f, MOK_SIG_CALL_MASK, 5, 1) == bad_id);
  f = mok_barrier_step(&st, 0, 0, MOK_ERR_INVALID_ARGUMENT, 2, none); /* a refusal, no fault */
  CHECK(st.end == refused && judge(f, 0, 1, 0) == refused);
  f = mok_barrier_step(&st, 1, 1, MOK_ERR_INVALID_ARGUMENT, 2, bad_id); /* a fault goes first */
  CHECK(st.end == bad_id && judge(f, 1, 0, 1) == bad_id);
}
