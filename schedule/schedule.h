/* schedule.h — host entry points of the schedule table (construction itself: schedule_core.h). */
#ifndef MOK_SCHEDULE_H
#define MOK_SCHEDULE_H

#include <stdint.h>
#include "mok.h"

/* What one rank's table depends on. */
typedef struct {
  int ep;              /* ranks in the group                                   */
  int rank;            /* the rank whose local experts the table serves        */
  int64_t tokens;      /* T, tokens per rank: the slots' stride                */
  int top_k;           /* k                                                    */
  int num_experts;     /* E, a multiple of ep                                  */
  int tile_m;          /* padding granule of every expert's rows, > 0          */
  int64_t capacity;    /* rows row_src can hold                                */
  const int64_t *counts; /* [ep]: each rank's tokens in this build, 0 to T (the
                            first ones of its [T][k] routing); NULL: T for all  */
} mok_sched_params;

/* Source rank s's tokens in the build p describes. */
static inline int64_t mok_sched_rank_tokens(const mok_sched_params *p, int s) {
  return p->counts ? p->counts[s] : p->tokens;
}

/* Checks params: ranges, E divisible by ep, EP*T*k addressable by an int32 slot. */
mok_status mok_sched_check_params(const mok_sched_params *p);

/* Builds rank p->rank's table sequentially from every rank's routing topk_all [ep][T][k], of each
 * rank s its first mok_sched_rank_tokens(p, s) tokens (the rest is not read; a count outside
 * [0, T]: MOK_ERR_INVALID_ARGUMENT).
 * scratch: ep * (E/ep) int32 (caller-owned); expert_count [E/ep]; expert_offset [E/ep + 1];
 * row_src [p->capacity]. One chunk per source rank, so the result equals the device's.
 * On error nothing past the given bounds is written and the table must not be used. */
mok_status mok_sched_build_host(const mok_sched_params *p, const int32_t *topk_all, int32_t *scratch,
                                int32_t *expert_count, int32_t *expert_offset, int32_t *row_src);

#endif /* MOK_SCHEDULE_H */
