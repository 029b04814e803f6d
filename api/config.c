/* config.c — host-side knobs: defaults, validation of a shape and config for the GPU path, and the
 * schedule's worst-case size. No device is touched here. */
#include <math.h>
#include <stdint.h>
#include "mok.h"
#include "schedule/pipeline.h"

mok_status mok_config_init(mok_config *c) {
  if (!c) return MOK_ERR_INVALID_ARGUMENT;
  c->dtype = MOK_DTYPE_BF16;
  c->path = MOK_PATH_AUTO;
  c->fwd_comm_sms = 0; /* automatic (mok.h) */
  c->bwd_comm_sms = 0;
  c->tile_m = 128;
  c->minibatch_rows = 128;
  c->macrobatch_minibatches = 64; /* 8192 rows: 16 ring steps at DSv3 EP=2, T 7168 */
  c->ring_bytes = 0;
  c->schedule_capacity = 0;
  c->use_swiglu_limit = 0;
  c->swiglu_limit = 0.0f;
  c->timeout_ms = 10000;
  c->deterministic = 1;
  c->fp8_weight_grads = 3;
  c->fp8_fused_router_grad = 1;
  c->fp8_shared_expert = 0;
  return MOK_SUCCESS;
}

static mok_status check_shape(const mok_shape *s, int ep) {
  if (s->tokens < 0 || s->hidden <= 0 || s->num_experts <= 0 || s->intermediate <= 0 ||
      s->top_k <= 0 || s->shared_intermediate < 0)
    return MOK_ERR_INVALID_SHAPE;
  if (s->top_k > s->num_experts || s->num_experts > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  if (s->num_experts % ep != 0) return MOK_ERR_INVALID_SHAPE;
  if ((int64_t)ep * s->tokens * s->top_k > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  if (s->hidden > INT32_MAX || s->intermediate > INT32_MAX || s->shared_intermediate > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  return MOK_SUCCESS;
}

mok_status mok_schedule_worst_case_rows(const mok_shape *s, int ep, int tile_m, int64_t *rows) {
  if (!s || !rows || ep <= 0 || tile_m <= 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_status st = check_shape(s, ep);
  if (st != MOK_SUCCESS) return st;
  int64_t local = s->num_experts / ep;
  int64_t routed = (int64_t)ep * s->tokens * s->top_k;      /* every pair lands here        */
  int64_t per_expert_cap = local * ep * s->tokens;          /* each expert: a token at most once */
  *rows = (routed < per_expert_cap ? routed : per_expert_cap) + local * (tile_m - 1);
  return MOK_SUCCESS;
}

mok_status mok_validate(const mok_shape *s, const mok_config *c, int ep) {
  if (!s || !c || ep <= 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_status st = check_shape(s, ep);
  if (st != MOK_SUCCESS) return st;
  if (s->hidden % MOK_ALIGN_FEATURES || s->intermediate % MOK_ALIGN_FEATURES ||
      s->shared_intermediate % MOK_ALIGN_FEATURES)
    return MOK_ERR_MISALIGNED;
  if (c->dtype != MOK_DTYPE_BF16 && c->dtype != MOK_DTYPE_FP8_BLOCK128 && c->dtype != MOK_DTYPE_MXFP8)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->path != MOK_PATH_AUTO && c->path != MOK_PATH_FUSED && c->path != MOK_PATH_UNFUSED &&
      c->path != MOK_PATH_GROUPED)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->fwd_comm_sms < 0 || c->bwd_comm_sms < 0 || c->fwd_comm_sms > 128 || c->bwd_comm_sms > 128)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->tile_m != 64 && c->tile_m != 128 && c->tile_m != 256) return MOK_ERR_INVALID_ARGUMENT;
  if (c->minibatch_rows <= 0 || c->minibatch_rows % c->tile_m) return MOK_ERR_INVALID_ARGUMENT;
  if (c->macrobatch_minibatches < 1 || c->ring_bytes < 0 || c->schedule_capacity < 0)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->schedule_capacity % c->tile_m) return MOK_ERR_MISALIGNED;
  if (c->use_swiglu_limit && !(c->swiglu_limit > 0.0f && isfinite(c->swiglu_limit)))
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->timeout_ms <= 0 || (c->deterministic != 0 && c->deterministic != 1)) return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_weight_grads < 0 || c->fp8_weight_grads > 3) return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_fused_router_grad != 0 && c->fp8_fused_router_grad != 1)
    return MOK_ERR_INVALID_ARGUMENT;
  if (c->fp8_shared_expert != 0 && c->fp8_shared_expert != 1) return MOK_ERR_INVALID_ARGUMENT;
  mok_pipe_params pipe;
  int64_t ring = 0;
  return mok_pipe_from_config(s, c, ep, &pipe, &ring); /* a ring holds at least one region */
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
