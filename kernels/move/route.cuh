/* route.cuh — device helpers over a schedule's route (mok_move_route, move.h): the rows its
 * kernels cover, and where a real row's (token, k) slot lives on its source rank (the slot's fp32
 * value in a [T*k] buffer, the token's row in a [T, H] buffer). Included by the kernels that
 * move rows (move.cu) or push a value per row (kernels/pointwise/swiglu.cu). */
#ifndef MOK_MOVE_ROUTE_CUH
#define MOK_MOVE_ROUTE_CUH

#include <stdint.h>
#include "kernels/move/move.h"
#include "schedule/schedule_core.h"

/* The schedule's padded rows, at most its capacity. */
__device__ __forceinline__ int64_t route_rows(const mok_move_route &r) {
  const int64_t total = r.expert_offset[r.experts_local];
  return total < r.capacity ? total : r.capacity;
}

/* The fp32 of slot (a real row's) in its source rank's [T*k] buffer at base[src] + off. */
__device__ __forceinline__ float *route_slot_f32(const mok_move_route &r, char *const *base, size_t off,
                                              int32_t slot) {
  const int src = mok_sched_slot_rank(slot, r.tokens, r.top_k);
  return (float *)(base[src] + off) + slot % (r.tokens * r.top_k);
}

/* The same value read where this rank's own slots are in the caller's buffer own ([T*k], NULL:
 * every slot from its source rank's symmetric buffer, this rank's too). */
__device__ __forceinline__ float route_slot_f32_in(const mok_move_route &r, char *const *base, size_t off,
                                                const float *own, int32_t slot) {
  const int64_t per_rank = r.tokens * r.top_k;
  if (own && mok_sched_slot_rank(slot, r.tokens, r.top_k) == r.rank) return own[slot % per_rank];
  return *route_slot_f32(r, base, off, slot);
}

/* The slot's token row (nv 16-byte words) in its source rank's symmetric [T, H] buffer at off;
 * with own non-NULL, a row of this rank's own tokens in the caller's [T, H] buffer own instead
 * (the same bytes: the symmetric buffer holds a copy of it for the peers, and none at EP=1). */
__device__ __forceinline__ const uint4 *route_slot_row(const mok_move_route &r, size_t off, const void *own,
                                                    int32_t slot, int64_t nv) {
  const int src = mok_sched_slot_rank(slot, r.tokens, r.top_k);
  const int64_t t = mok_sched_slot_token(slot, r.tokens, r.top_k);
  if (own && src == r.rank) return (const uint4 *)own + t * nv;
  return (const uint4 *)(r.peer_base[src] + off) + t * nv;
}

#endif /* MOK_MOVE_ROUTE_CUH */
