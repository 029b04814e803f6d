/* schedule_node_core.h — the network level of the two-level schedule for groups that span NVLink
 * domains (docs/MULTINODE.md), as plain C that runs unchanged on the host and in CUDA kernels
 * (no allocation, no libc), beside schedule_core.h, whose per-rank expert table it leaves as is.
 *
 * A group of N nodes x G GPUs: rank r = node * G + local, rank r owns experts [r El, (r+1) El),
 * so node n owns [n G El, (n+1) G El). A token of source rank s with experts on a remote node d
 * crosses the network once, to its proxy on d: the rank (d, local(s)) (the same rail), whatever
 * the number of its experts there; NVLink then carries it inside d as in the one-node design.
 *
 * The tables, for one source rank s (the send side) and one proxy p = (d, l) (the receive side):
 *   send_count[d]        tokens of s with at least one expert on node d (0 for s's own node)
 *   send_token[d][i]     those tokens, ascending: the i-th row s puts to its proxy on d
 *   recv_offset[n]       at p, the first staging row of what source node n's rank (n, l) sends
 *                        (n in node order, N + 1 entries; p's own node sends nothing)
 * A row of the per-rank expert table (slot = (s, token, j)) then reads its token either from
 * s's x over NVLink (s on the same node as the expert) or from the staging of its proxy
 * (d, local(s)) at recv_offset[node(s)] + the token's index in send_token[d] of s, found by
 * binary search (mok_sched2_send_index). The expert tables, and so every sum, are the one-node
 * design's: the row order (src rank, token) does not depend on the node split.
 *
 * Construction follows schedule_core.h's chunk steps, per source rank's token chunks:
 *   1. mok_sched2_count_chunk   validate ids, count tokens per destination node (deduplicated);
 *   2. mok_sched2_scan          counts -> per-chunk cursors per node, send_count;
 *   3. mok_sched2_fill_chunk    write send_token at the cursors, in token order;
 *   4. mok_sched2_recv_offsets  at the proxy, from the send counts of the N sources of its rail,
 *                               with the staging capacity check.
 * Staging is bounded whatever the routing: a proxy receives at most (N - 1) tokens per token slot
 * of a macrobatch, so macrobatches of mok_sched2_macro_tokens(staging_rows, N) tokens always fit. */
#ifndef MOK_SCHEDULE_NODE_CORE_H
#define MOK_SCHEDULE_NODE_CORE_H

#include <stdint.h>
#include "schedule/schedule_core.h"

#define MOK_SCHED2_MAX_NODES 64 /* nodes of a group: the per-token dedup mask is 64 bits */

/* Where rank r sits. */
MOK_HD int mok_sched2_node(int rank, int gpus_per_node) { return rank / gpus_per_node; }
MOK_HD int mok_sched2_local(int rank, int gpus_per_node) { return rank % gpus_per_node; }
/* The node holding expert e (experts_per_node = G * El). */
MOK_HD int mok_sched2_expert_node(int e, int experts_per_node) { return e / experts_per_node; }
/* The proxy of source rank s on node d: the same local index (rail). */
MOK_HD int mok_sched2_proxy(int s, int d, int gpus_per_node) {
  return d * gpus_per_node + s % gpus_per_node;
}

/* The nodes one token's experts live on, as a bit mask (ids validated by the caller). */
MOK_HD uint64_t mok_sched2_token_nodes(const int32_t *ids, int k, int experts_per_node) {
  uint64_t m = 0;
  for (int j = 0; j < k; ++j) m |= (uint64_t)1 << mok_sched2_expert_node(ids[j], experts_per_node);
  return m;
}

/* Step 1. topk: the chunk's ntok tokens, [ntok][k], of a source rank on node self_node. Adds to
 * counts[nodes] (zeroed by the caller) the tokens with at least one expert on each node other
 * than self_node (each token once per node). Returns the first validation error in token order
 * (MOK_SCHED_EXPERT_ID, MOK_SCHED_DUPLICATE); then counts must not be used. */
MOK_HD int mok_sched2_count_chunk(const int32_t *topk, int64_t ntok, int k, int num_experts,
                                  int experts_per_node, int nodes, int self_node,
                                  int32_t *counts) {
  if (nodes <= 0 || nodes > MOK_SCHED2_MAX_NODES || experts_per_node <= 0 ||
      (int64_t)experts_per_node * nodes != num_experts || self_node < 0 || self_node >= nodes)
    return MOK_SCHED_BAD_ARGUMENT;
  for (int64_t t = 0; t < ntok; ++t) {
    const int32_t *ids = topk + t * k;
    int st = mok_sched_check_token(ids, k, num_experts);
    if (st != MOK_SCHED_OK) return st;
    const uint64_t m = mok_sched2_token_nodes(ids, k, experts_per_node) &
                       ~((uint64_t)1 << self_node);
    for (int d = 0; d < nodes; ++d) counts[d] += (int32_t)((m >> d) & 1);
  }
  return MOK_SCHED_OK;
}

/* Step 2. counts: [nchunks][nodes] from step 1, in chunk (token) order. Rewrites them in place
 * into each chunk's first write index per node and writes send_count[nodes]. */
MOK_HD int mok_sched2_scan(int32_t *counts, int64_t nchunks, int nodes, int32_t *send_count) {
  if (nodes <= 0 || nodes > MOK_SCHED2_MAX_NODES || nchunks < 0) return MOK_SCHED_BAD_ARGUMENT;
  for (int d = 0; d < nodes; ++d) {
    int64_t at = 0;
    for (int64_t c = 0; c < nchunks; ++c) {
      const int32_t n = counts[c * nodes + d];
      counts[c * nodes + d] = (int32_t)at;
      at += n;
    }
    if (at > INT32_MAX) return MOK_SCHED_CAPACITY;
    send_count[d] = (int32_t)at;
  }
  return MOK_SCHED_OK;
}

/* Step 3. The chunk's ntok tokens (validated by step 1), its first token first_token; cursor: the
 * chunk's nodes write indices from step 2, advanced in place; send_token: [nodes][stride], node d's
 * list at d * stride (stride >= every send_count). */
MOK_HD void mok_sched2_fill_chunk(const int32_t *topk, int64_t ntok, int k, int64_t first_token,
                                  int experts_per_node, int nodes, int self_node, int32_t *cursor,
                                  int32_t *send_token, int64_t stride) {
  for (int64_t t = 0; t < ntok; ++t) {
    const uint64_t m = mok_sched2_token_nodes(topk + t * k, k, experts_per_node) &
                       ~((uint64_t)1 << self_node);
    for (int d = 0; d < nodes; ++d)
      if ((m >> d) & 1) send_token[d * stride + cursor[d]++] = (int32_t)(first_token + t);
  }
}

/* Step 4, at proxy p = (d, l). rail_count[n]: send_count[d] of rank (n, l), for n in [0, nodes)
 * (its own node's entry, 0, is ignored). Writes recv_offset[nodes + 1]: the staging rows of each
 * source node, in node order, and their total last. MOK_SCHED_CAPACITY, having written nothing,
 * when the total exceeds staging_rows. */
MOK_HD int mok_sched2_recv_offsets(const int32_t *rail_count, int nodes, int self_node,
                                   int64_t staging_rows, int32_t *recv_offset) {
  if (nodes <= 0 || nodes > MOK_SCHED2_MAX_NODES || self_node < 0 || self_node >= nodes ||
      staging_rows < 0)
    return MOK_SCHED_BAD_ARGUMENT;
  int64_t total = 0;
  for (int n = 0; n < nodes; ++n) {
    if (rail_count[n] < 0) return MOK_SCHED_BAD_ARGUMENT;
    if (n != self_node) total += rail_count[n];
  }
  if (total > staging_rows || total > INT32_MAX) return MOK_SCHED_CAPACITY;
  int64_t at = 0;
  for (int n = 0; n < nodes; ++n) {
    recv_offset[n] = (int32_t)at;
    if (n != self_node) at += rail_count[n];
  }
  recv_offset[nodes] = (int32_t)at;
  return MOK_SCHED_OK;
}

/* The index of token in one ascending send list of count entries (binary search), -1 if absent. */
MOK_HD int32_t mok_sched2_send_index(const int32_t *list, int32_t count, int32_t token) {
  int32_t lo = 0, hi = count - 1;
  while (lo <= hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (list[mid] == token) return mid;
    if (list[mid] < token) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Tokens per macrobatch that fit staging_rows at every proxy under any routing: each of the
 * nodes - 1 remote source nodes sends a proxy at most one row per token. 0 when not even one. */
MOK_HD int64_t mok_sched2_macro_tokens(int64_t staging_rows, int nodes) {
  if (nodes <= 1) return INT64_MAX; /* one node: nothing crosses the network */
  return staging_rows < 0 ? 0 : staging_rows / (nodes - 1);
}

#endif /* MOK_SCHEDULE_NODE_CORE_H */
