/* barrier_signal.h — the barrier's signal and the rule a rank applies to a peer's signal (plain C,
 * host and device, so that the CPU tests check the rules the kernel runs). See docs/DESIGN.md,
 * "Barriers and faults".
 *
 * A signal is one 64-bit word a rank stores into each peer's slot for it:
 *   call (24 bits, wrapping) | index (12) | fault now (14) | fault at the previous call's end (14)
 * call numbers the collective calls (every rank counts the same calls), index the barrier within
 * one; a fault is (status << 8) | the rank it was raised on, 0 for none. A refusal (a rank that
 * refused the call, or whose call failed) has index MOK_SIG_REFUSED: the sender's call is over. */
#ifndef MOK_COMM_BARRIER_SIGNAL_H
#define MOK_COMM_BARRIER_SIGNAL_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MOK_SIG_FN static __host__ __device__ __forceinline__
#else
#define MOK_SIG_FN static inline
#endif

#define MOK_SIG_CALL_MASK 0xFFFFFFu
#define MOK_SIG_REFUSED 0xFFFu
#define MOK_SIG_WAIT (-1) /* mok_sig_judge: the peer is not at this barrier yet */

MOK_SIG_FN uint32_t mok_sig_fault(int status, int rank) {
  return ((uint32_t)(status & 0x3F) << 8) | (uint32_t)(rank & 0xFF);
}

MOK_SIG_FN uint64_t mok_sig_make(uint32_t call, uint32_t index, uint32_t now, uint32_t prev) {
  return ((uint64_t)(call & MOK_SIG_CALL_MASK) << 40) | ((uint64_t)(index & 0xFFFu) << 28) |
         ((uint64_t)(now & 0x3FFFu) << 14) | (uint64_t)(prev & 0x3FFFu);
}
MOK_SIG_FN uint32_t mok_sig_call(uint64_t f) { return (uint32_t)(f >> 40) & MOK_SIG_CALL_MASK; }
MOK_SIG_FN uint32_t mok_sig_index(uint64_t f) { return (uint32_t)(f >> 28) & 0xFFFu; }

/* How many calls the signal f is ahead of call (negative: behind), modulo 2^24. */
MOK_SIG_FN int32_t mok_sig_calls_ahead(uint64_t f, uint32_t call) {
  return ((int32_t)((mok_sig_call(f) - call) << 8)) >> 8;
}

/* A rank's barrier state, in device memory per workspace; zero at creation. */
typedef struct {
  uint32_t call;      /* the current call's number (24 bits, wrapping)                 */
  uint32_t index;     /* the latest barrier's place in it                              */
  uint32_t prev_end;  /* the fault this rank signalled at the previous call's end      */
  uint32_t end;       /* ... at the current call's end, once there                     */
} mok_barrier_state;

/* One barrier's first step on rank: the state moves to it (first: it opens a new call; last: it
 * ends the call; refuse, a status: the rank refuses the call, which ends it too) and the signal
 * to store into every peer's slot is returned. now: the rank's fault (its sticky error, 0 for
 * none); a refusal with no fault of its own sends its status, its error word left as it is (its
 * caller has the status, and a call every rank refuses leaves no fault anywhere). */
MOK_SIG_FN uint64_t mok_barrier_step(mok_barrier_state *st, int first, int last, int refuse,
                                     int rank, uint32_t now) {
  const int refused = refuse != 0;
  if (refused && !now) now = mok_sig_fault(refuse, rank);
  if (first) {
    st->call = (st->call + 1) & MOK_SIG_CALL_MASK;
    st->index = 0;
    st->prev_end = st->end;
    st->end = 0;
  } else {
    st->index += 1;
  }
  if (last || refused) st->end = now;
  return mok_sig_make(st->call, refused ? MOK_SIG_REFUSED : st->index, now, st->prev_end);
}

/* What peer's signal f means to a rank at barrier (call, index) of its call, last: that barrier
 * ends the call (a refusal does too). Returns MOK_SIG_WAIT while the peer has not reached it, else
 * the fault to take (0: none). The peer may be at this barrier, have refused this call, be one
 * barrier further within the call (it passed this one), or in the next call (only when this
 * barrier ends the call: the peer finished it, and its fault at this call's end travels with it).
 * Anything else is a sequence of calls that differs from this rank's: MOK_ERR_DESYNC from that
 * peer, unless the signal carries a fault that explains it. */
MOK_SIG_FN int64_t mok_sig_judge(uint64_t f, uint32_t call, uint32_t index, int last, int peer,
                                 int desync_status) {
  const uint32_t findex = mok_sig_index(f);
  const int32_t dc = mok_sig_calls_ahead(f, call);
  if (dc < 0 || (dc == 0 && findex != MOK_SIG_REFUSED && findex < index)) return MOK_SIG_WAIT;
  const int in_order =
      (dc == 0 && (findex == index || findex == MOK_SIG_REFUSED || (findex == index + 1 && !last))) ||
      (dc == 1 && last); /* it finished this call: what it signalled at the end travels on */
  uint32_t fault = dc == 0 ? (uint32_t)(f >> 14) & 0x3FFFu : (uint32_t)f & 0x3FFFu;
  if (!in_order && !fault) fault = mok_sig_fault(desync_status, peer);
  return (int64_t)fault;
}

/* A refusing rank waits too, until every peer has reached its call (any barrier of it, or a
 * refusal), so that its refusal is not overwritten by its next call's signal before a peer still
 * in an earlier call has seen it: 1 when peer's signal f has reached call. */
MOK_SIG_FN int mok_sig_reached_call(uint64_t f, uint32_t call) {
  return mok_sig_calls_ahead(f, call) >= 0;
}

#endif
