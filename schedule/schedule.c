/* schedule.c — host construction of the schedule table: parameter checks and the sequential driver
 * over the chunked core in schedule_core.h (the device runs the same core in parallel). */
#include "schedule/schedule.h"
#include "schedule/schedule_core.h"

mok_status mok_sched_check_params(const mok_sched_params *p) {
  if (!p) return MOK_ERR_INVALID_ARGUMENT;
  if (p->ep <= 0 || p->rank < 0 || p->rank >= p->ep || p->tile_m <= 0 || p->capacity < 0)
    return MOK_ERR_INVALID_ARGUMENT;
  if (p->tokens < 0 || p->top_k <= 0 || p->num_experts <= 0 || p->top_k > p->num_experts)
    return MOK_ERR_INVALID_SHAPE;
  if (p->num_experts % p->ep != 0) return MOK_ERR_INVALID_SHAPE;
  int64_t pairs; /* ep * T * k, checked without wrapping */
  if (__builtin_mul_overflow((int64_t)p->ep, p->tokens, &pairs) ||
      __builtin_mul_overflow(pairs, (int64_t)p->top_k, &pairs) || pairs > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  return MOK_SUCCESS;
}

mok_status mok_sched_build_host(const mok_sched_params *p, const int32_t *topk_all, int32_t *scratch,
                                int32_t *expert_count, int32_t *expert_offset, int32_t *row_src) {
  mok_status st = mok_sched_check_params(p);
  if (st != MOK_SUCCESS) return st;
  if ((!topk_all && p->tokens > 0) || !scratch || !expert_count || !expert_offset ||
      (!row_src && p->capacity > 0))
    return MOK_ERR_INVALID_ARGUMENT;
  for (int s = 0; s < p->ep; ++s)
    if (mok_sched_rank_tokens(p, s) < 0 || mok_sched_rank_tokens(p, s) > p->tokens)
      return MOK_ERR_INVALID_ARGUMENT;
  const int el = p->num_experts / p->ep;
  const int lo = p->rank * el;
  const int64_t per_rank = p->tokens * p->top_k; /* the stride, whatever the counts */

  for (int64_t i = 0; i < (int64_t)p->ep * el; ++i) scratch[i] = 0;
  for (int s = 0; s < p->ep; ++s) {
    int r = mok_sched_count_chunk(topk_all + s * per_rank, mok_sched_rank_tokens(p, s), p->top_k,
                                  p->num_experts, lo, el, scratch + (int64_t)s * el);
    if (r != MOK_SCHED_OK) return (mok_status)r;
  }
  int r = mok_sched_scan(scratch, p->ep, el, p->tile_m, p->capacity, expert_count, expert_offset);
  if (r != MOK_SCHED_OK) return (mok_status)r;
  for (int s = 0; s < p->ep; ++s)
    mok_sched_fill_chunk(topk_all + s * per_rank, mok_sched_rank_tokens(p, s), p->top_k,
                         s * per_rank, lo, el, scratch + (int64_t)s * el, row_src);
  for (int l = 0; l < el; ++l) mok_sched_pad_expert(l, expert_count, expert_offset, row_src);
  return MOK_SUCCESS;
}
