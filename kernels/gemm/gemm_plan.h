/* gemm_plan.h — the grouped GEMMs' variant choices as pure functions of the sizes, in plain C
 * that runs unchanged on the host (the layer's plan, api/plan.c; CPU tests) and in the
 * launchers (the defaults of a NULL mok_gg_launch). No choice changes a result bit; each was
 * measured on the shapes docs/PERF.md lists. rows_per_expert: the rows one expert typically has
 * (the layer: EP * T * k / E; a launcher without a plan: m_total / num_experts; both rounded
 * up). */
#ifndef MOK_GEMM_PLAN_H
#define MOK_GEMM_PLAN_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOK_GP_HD __host__ __device__ __forceinline__
#else
#define MOK_GP_HD static inline
#endif

/* BF16 row-grouped products: cluster pairs sharing the B tile by multicast pay where an expert
 * has few row tiles (little reuse of a weight tile in L2). Up to six row tiles (768 rows) they
 * measured faster in both passes and both routings; at seven (896 rows) neither way won
 * (docs/PERF.md, "Cluster pairs up to 768 rows per expert"). */
MOK_GP_HD int mok_gg_bf16_cluster_for(int64_t rows_per_expert) {
  return rows_per_expert <= 6 * 128 ? 2 : 1;
}

/* BF16 row-grouped products in cluster pairs (tile_scheduler.h, gg_pair_walk): how many of the
 * `clusters` persistent clusters walk the leftover units apart from the pair units, from the
 * units' counts. A leftover streams a whole weight tile for at most 128 rows (its loads bound by
 * HBM), a pair unit reuses its weight tile (bound by the tensor cores): on clusters of their own
 * the leftovers' streams run beside the pairs' tensor work instead of after it, and the pair
 * units keep their order, a raster group's units side by side. The leftover units' share of all
 * units, rounded: of a third, half and the whole share, the whole measured fastest (docs/PERF.md,
 * "The leftover units on clusters of their own"). At least one cluster and one fewer than all;
 * none where either kind is missing. */
MOK_GP_HD int32_t mok_gg_bf16_leftover_clusters(int32_t pair_units, int32_t leftover_units,
                                               int32_t clusters) {
  if (pair_units <= 0 || leftover_units <= 0 || clusters < 2) return 0;
  const int64_t all = (int64_t)pair_units + leftover_units;
  const int64_t r = ((int64_t)clusters * leftover_units + all / 2) / all;
  return (int32_t)(r < 1 ? 1 : r > clusters - 1 ? clusters - 1 : r);
}

/* BF16 row-grouped products in cluster pairs: whether the clusters claim their units at run time
 * (tile_scheduler.h, gg_claim_step: a cluster turns to the other kind once its own ran out) or
 * walk the static split above, from the units' counts on the device. Claims where the leftover
 * units are at least a quarter of all units: under DeepSeek-V3's skewed routing at EP=1 (a third
 * leftovers) they measured faster in both passes, at Qwen3-30B's (a sixth) and at uniform
 * routing (almost none) slower or even (docs/PERF.md). The tokens-on-N gate+up always claims. */
MOK_GP_HD int mok_gg_bf16_claims(int32_t pair_units, int32_t leftover_units) {
  return leftover_units > 0 && 3 * (int64_t)leftover_units >= pair_units;
}

/* The BF16 weight gradient of m dW rows per expert: cluster pairs, each CTA half of a unit's dW
 * row tiles, sharing the activation blocks by multicast, where the tiles pair up (m a multiple
 * of 256): they halve each CTA's L2 reads of the activations, at short and long experts and
 * under skewed routing alike (docs/PERF.md, "Four built candidates"). The layer's plan only: a
 * NULL launch of mok_gg_bf16_wgrad keeps single CTAs. */
MOK_GP_HD int mok_gg_bf16_wgrad_cluster_for(int64_t m) { return m % 256 == 0 ? 2 : 1; }

/* FP8 products on the 128-column kernel: three consumer warpgroups (192-row tiles) pay where the
 * experts are long; on short ones a 192-row tile leaves a tail tile that streams a whole B tile
 * for a third of its rows. */
MOK_GP_HD int mok_gg_fp8_warpgroups_for(int64_t rows_per_expert) {
  return rows_per_expert >= 384 ? 3 : 2;
}

/* Whether an FP8 product of n output columns runs the 256-column kernel (else the 128-column
 * one). Gate+up always does (its tiles are 128 columns of each weight). */
MOK_GP_HD int mok_gg_fp8_wide_covers(int64_t n) { return n % 256 == 0; }

/* The FP8 weight gradient with per-expert B scales (expert_scales 2) of m dW rows per expert:
 * cluster pairs of vertically adjacent 128-row tiles sharing B where the tiles pair up. */
MOK_GP_HD int mok_gg_fp8_wgrad_cluster_for(int64_t m) { return m % 256 == 0 ? 2 : 1; }

/* Whether the FP8 forward MLP runs as one launch: down's columns in 256s, and every local
 * expert's tile prefix in the kernel's shared memory. */
#define MOK_GG_MAX_EXPERTS_PER_LAUNCH 256
MOK_GP_HD int mok_gg_fp8_mlp_covers(int64_t num_experts, int64_t hidden) {
  return hidden % 256 == 0 && num_experts <= MOK_GG_MAX_EXPERTS_PER_LAUNCH;
}

#endif /* MOK_GEMM_PLAN_H */
