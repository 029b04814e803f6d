/* plan.h — the resolution of a workspace's plan (mok_plan, include/mok.h) from the shape, the
 * config, the group size and the device: plain C with no device call, so that CI tests every
 * choice without a GPU (tests/test_plan.c). The GEMM heuristics it applies are those of
 * kernels/gemm/gemm_plan.h. */
#ifndef MOK_API_PLAN_H
#define MOK_API_PLAN_H

#include "mok.h"

/* What the plan needs to know of the device. */
typedef struct {
  int sm90; /* an sm_90 GPU: the grouped TMA + wgmma GEMMs run */
  int sms;  /* its multiprocessors                            */
} mok_device_facts;

/* The automatic comm CTAs: the fused pull's (a few bulk-copying CTAs carry a forward's dispatch)
 * and those of the separate dispatch and reverse-combine kernels beside the shared expert. */
#define MOK_PLAN_FUSED_COMM_CTAS 4
#define MOK_PLAN_BESIDE_COMM_CTAS 24

/* The rows one routed expert has on average, ceil(EP * T * k / E): what the GEMM choices follow
 * (not the capacity, which is sized for the worst case). */
int64_t mok_plan_rows_per_expert(const mok_shape *s, int ep);

/* Checks config->plan's requests for the shape and dtype, without the device (part of
 * mok_validate): ranges, and what the dtype or the other requests rule out. */
mok_status mok_plan_check_requests(const mok_shape *s, const mok_config *c, int ep);

/* *out = the plan for this request on this device: every field's request where it is set (and
 * can run: MOK_ERR_NOT_SUPPORTED otherwise), else mok's choice; 0 where a field does not apply.
 * config must be valid (mok_validate). */
mok_status mok_plan_resolve(const mok_shape *s, const mok_config *c, int ep,
                            const mok_device_facts *dev, mok_plan *out);

/* mok_plan_candidates on this device: the default plan first, then each resolved plan that
 * differs from every earlier one and comes from one more request on top of the caller's (a field
 * the caller left to mok, set to one of a few values around its default). Returns the count (at
 * most max), 0 when the request itself does not resolve. */
int mok_plan_candidates_on(const mok_shape *s, const mok_config *c, int ep,
                           const mok_device_facts *dev, mok_plan *out, int max);

#endif /* MOK_API_PLAN_H */
