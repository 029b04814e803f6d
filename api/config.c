/* config.c — the config: its defaults, the check of a caller's copy (size, magic, version) and its
 * completion to this library's size, the validation of a shape and config for the GPU path, and
 * the schedule's worst-case size. No device is touched here. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "api/config.h"
#include "api/plan.h"
#include "schedule/pipeline.h"
#include "schedule/schedule_core.h"

mok_status mok_config_init(mok_config *c) {
  if (!c) return MOK_ERR_INVALID_ARGUMENT;
  const mok_config d = MOK_CONFIG_INITIALIZER;
  *c = d;
  return MOK_SUCCESS;
}

mok_status mok_config_complete(const mok_config *in, mok_config *out) {
  if (!in || !out) return MOK_ERR_INVALID_ARGUMENT;
  /* The sizes of the layouts this library knows: 0.2's (before plan_cache), whose missing fields
   * take their defaults, and its own. A larger size comes from a newer header than this
   * library's. */
  if (in->magic != MOK_CONFIG_MAGIC ||
      (in->size != MOK_CONFIG_SIZE_0_2 && in->size != sizeof(mok_config)) ||
      in->version > MOK_VERSION_CODE)
    return MOK_ERR_INVALID_ARGUMENT;
  mok_config_init(out);
  memcpy(out, in, in->size);
  out->size = sizeof(mok_config);
  return MOK_SUCCESS;
}

static mok_status check_shape(const mok_shape *s, int ep) {
  if (s->tokens < 0 || s->hidden <= 0 || s->num_experts <= 0 || s->intermediate <= 0 ||
      s->top_k <= 0 || s->shared_intermediate < 0)
    return MOK_ERR_INVALID_SHAPE;
  if (s->top_k > s->num_experts || s->num_experts > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  if (s->num_experts % ep != 0) return MOK_ERR_INVALID_SHAPE;
  /* every routed pair of the group has an int32 index: ep * T * k, checked without wrapping */
  int64_t pairs;
  if (__builtin_mul_overflow((int64_t)ep, s->tokens, &pairs) ||
      __builtin_mul_overflow(pairs, s->top_k, &pairs) || pairs > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  if (s->hidden > INT32_MAX || s->intermediate > INT32_MAX || s->shared_intermediate > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  return MOK_SUCCESS;
}

mok_status mok_schedule_worst_case_rows(const mok_shape *s, int ep, int tile_m, int64_t *rows) {
  if (!s || !rows || ep <= 0 || tile_m <= 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_status st = check_shape(s, ep);
  if (st != MOK_SUCCESS) return st;
  /* no product here wraps: check_shape bounds ep * T * k and E below 2^31, so each factor pair
   * below is under 2^62 */
  int64_t local = s->num_experts / ep;
  int64_t routed = (int64_t)ep * s->tokens * s->top_k;      /* every pair lands here        */
  int64_t per_expert_cap = local * ep * s->tokens;          /* each expert: a token at most once */
  *rows = (routed < per_expert_cap ? routed : per_expert_cap) + local * (tile_m - 1);
  return MOK_SUCCESS;
}

mok_status mok_validate_complete(const mok_shape *s, const mok_config *c, int ep) {
  mok_status st = check_shape(s, ep);
  if (st != MOK_SUCCESS) return st;
  if (s->hidden % MOK_ALIGN_FEATURES || s->intermediate % MOK_ALIGN_FEATURES ||
      s->shared_intermediate % MOK_ALIGN_FEATURES)
    return MOK_ERR_MISALIGNED;
  if (c->dtype != MOK_DTYPE_BF16 && c->dtype != MOK_DTYPE_FP8_BLOCK128 && c->dtype != MOK_DTYPE_MXFP8)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->macrobatch_minibatches < 1 || c->ring_bytes < 0 || c->schedule_capacity < 0)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->use_swiglu_limit && !(c->swiglu_limit > 0.0f && isfinite(c->swiglu_limit)))
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->timeout_ms <= 0) return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_weight_grads < 0 || c->fp8_weight_grads > 3) return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_fused_router_grad != 0 && c->fp8_fused_router_grad != 1)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_shared_expert != 0 && c->fp8_shared_expert != 1) return MOK_ERR_INVALID_ARGUMENT;
  st = mok_plan_check_requests(s, c, ep);
  if (st != MOK_SUCCESS) return st;
  /* the tile the plan will use (the request, or 128) */
  const int tile = c->plan.tile_m ? c->plan.tile_m : 128;
  if (c->schedule_capacity % tile) return MOK_ERR_MISALIGNED;
  const int mb = c->plan.minibatch_rows ? c->plan.minibatch_rows : tile > 128 ? tile : 128;
  mok_pipe_params pipe;
  int64_t ring = 0;
  st = mok_pipe_from_config(s, c, ep, tile, mb, &pipe, &ring); /* a ring: one region at least */
  if (st != MOK_SUCCESS) return st;
  int cpr;
  int64_t ct;
  return mok_sched_chunk_geometry(s, ep, &cpr, &ct); /* what the device's schedule build can hold */
}

mok_status mok_sched_chunk_geometry(const mok_shape *s, int ep, int *cpr_out, int64_t *ct_out) {
  const int64_t T = s->tokens, k = s->top_k, E = s->num_experts;
  if (E / ep > MOK_SCHED_MAX_LOCAL_EXPERTS) return MOK_ERR_INVALID_SHAPE;
  int64_t max_ct = MOK_SCHED_MAX_CHUNK_IDS / k;
  if (max_ct < 1) return MOK_ERR_INVALID_SHAPE;
  int64_t cpr = T > 0 ? (T + max_ct - 1) / max_ct : 1;
  /* The fill walks a chunk's T k / cpr ids on one warp in order, a few dependent steps each; the
   * scan's thread of an expert reads the count of every chunk of every rank, independent loads:
   * chunks of sqrt(8 T k / E) put the two near balance (at T 7168: DeepSeek-V3 42 chunks,
   * Qwen3-30B 60; docs/PERF.md), at most MOK_SCHED_SCAN_CHUNKS over all ranks and within what
   * the scan holds. Fewer only where shared memory asks for more. */
  int64_t pref = (int64_t)llround(sqrt(8.0 * (double)T * (double)k / (double)E));
  if (pref > MOK_SCHED_SCAN_CHUNKS / ep) pref = MOK_SCHED_SCAN_CHUNKS / ep;
  if (pref > MOK_SCHED_MAX_SCAN_ENTRIES / E) pref = MOK_SCHED_MAX_SCAN_ENTRIES / E;
  if (pref > cpr) cpr = pref;
  if (cpr < 1) cpr = 1;
  int64_t ct = T > 0 ? (T + cpr - 1) / cpr : 1;
  cpr = T > 0 ? (T + ct - 1) / ct : 1;
  int64_t entries;
  if (__builtin_mul_overflow(cpr, E, &entries) || entries > MOK_SCHED_MAX_SCAN_ENTRIES)
    return MOK_ERR_INVALID_SHAPE;
  *cpr_out = (int)cpr;
  *ct_out = ct;
  return MOK_SUCCESS;
}

mok_status mok_validate(const mok_shape *s, const mok_config *c, int ep) {
  if (!s || !c || ep <= 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_config full;
  mok_status st = mok_config_complete(c, &full);
  if (st != MOK_SUCCESS) return st;
  return mok_validate_complete(s, &full, ep);
}

mok_status mok_fp8_scale_count(mok_dtype dtype, int64_t experts, int64_t rows, int64_t cols,
                               int64_t *count) {
  if (!count) return MOK_ERR_INVALID_ARGUMENT;
  if (experts < 0 || rows < 0 || cols < 0) return MOK_ERR_INVALID_SHAPE;
  switch (dtype) {
    case MOK_DTYPE_FP8_BLOCK128: *count = experts * ((rows + 127) / 128) * ((cols + 127) / 128); return MOK_SUCCESS;
    case MOK_DTYPE_MXFP8: *count = experts * rows * ((cols + 31) / 32); return MOK_SUCCESS;
    default: return MOK_ERR_INVALID_ARGUMENT;
  }
}
