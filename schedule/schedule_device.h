/* schedule_device.h — the schedule table built on the device (schedule_device.cu: schedule_core.h
 * run by GPU threads, every rank's routing read from symmetric memory, no count copied to the
 * host) and the shared expert's one-expert table. Every function only enqueues work on the given
 * stream and returns the launch status. */
#ifndef MOK_SCHEDULE_DEVICE_H
#define MOK_SCHEDULE_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "schedule/schedule_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device build's limits, MOK_SCHED_MAX_*, are in schedule/schedule_core.h (checked on the
 * host by mok_sched_chunk_geometry, api/config.c). */

typedef struct {
  char *const *peer_base;  /* every rank's symmetric base                                */
  size_t topk_off;         /* offset of the staged topk [T, k] int32 in the symmetric buffer */
  size_t count_off;        /* offset of the staged token count (int32) of this build          */
  int rank, ep;
  int64_t tokens;          /* T of the shape: each rank's stride in topk and in the slots;
                              a build's count (each rank's own) is at most that              */
  int top_k, num_experts, experts_local, tile_m;
  int64_t capacity;
  int chunks_per_rank;     /* chunks of one rank's tokens                               */
  int64_t chunk_tokens;    /* tokens per chunk (the last chunk of a rank may hold fewer)   */
  int32_t *topk_all;       /* [ep * T * k] gathered routing                              */
  int32_t *counts;         /* [ep * chunks_per_rank * experts_local]                     */
  int32_t *chunk_status;   /* [2][ep * chunks_per_rank]: each chunk's status, then the token
                              count the count phase validated (the fill uses only those)   */
  int32_t *expert_count;   /* [experts_local]                                            */
  int32_t *expert_offset;  /* [experts_local + 1]                                        */
  int32_t *row_src;        /* [capacity]                                                 */
  int32_t *err;
  int parallel;            /* 1: the parallel count / scan / fill kernels (same table)        */
} mok_sched_args;

/* Phase 0: this rank's topk [count, k] and its count staged at topk_dst and count_dst (its
 * symmetric buffer) for the peers' builds, in one kernel (a graph keeps count by value). */
cudaError_t mok_sched_stage(const int32_t *topk, int64_t count, int top_k, int32_t *topk_dst,
                           int32_t *count_dst, cudaStream_t stream);

/* The shared expert as one grouped-GEMM expert of count rows: table = {0, count rounded up to
 * 128, count, 0} (offsets, then the count), written by one thread on stream. */
cudaError_t mok_sched_dense_table(int32_t *table, int64_t count, cudaStream_t stream);

/* Shared memory the two build phases need; the host checks it against the device limit. */
size_t mok_sched_count_smem(const mok_sched_args *a);
size_t mok_sched_scan_smem(const mok_sched_args *a);

/* Raises the kernels' dynamic shared-memory limits on the current device to what a needs, never
 * lowering them (host, once per workspace; not inside a capture; thread-safe). */
cudaError_t mok_sched_prepare(const mok_sched_args *a);
/* Phase 1 (after the topk of every rank is staged and a barrier): gather + count per chunk, one
 * scan (capacity check, cursors, offsets). Sets the error word on a bad id, duplicate or overflow. */
cudaError_t mok_sched_count_scan(const mok_sched_args *a, cudaStream_t stream);
/* Phase 2: fill per chunk, pad per expert. Skipped when the error word is set. */
cudaError_t mok_sched_fill_pad(const mok_sched_args *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_SCHEDULE_DEVICE_H */
