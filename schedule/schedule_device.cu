/* schedule_device.cu — the schedule table built on the device: schedule_core.h's chunked functions
 * run unchanged by GPU threads (count per chunk in parallel, one scan, fill per chunk in parallel,
 * pad per expert). Each chunk's routing is staged in shared memory; the gathered routing of every
 * rank is read from the peers' symmetric buffers. No count ever leaves the device: faults go to the
 * workspace's sticky error word. */
#include "kernels/v1_common.cuh"
#include "kernels/v1_kernels.h"
#include "schedule/schedule_core.h"

#define SCHED_THREADS 128

__device__ __forceinline__ void chunk_range(const v1_sched_args &a, int c, int *src, int64_t *t0,
                                            int64_t *ntok) {
  *src = c / a.chunks_per_rank;
  *t0 = (int64_t)(c % a.chunks_per_rank) * a.chunk_tokens;
  int64_t n = a.tokens - *t0;
  *ntok = n < 0 ? 0 : (n > a.chunk_tokens ? a.chunk_tokens : n);
}

__global__ void sched_count_kernel(v1_sched_args a) {
  extern __shared__ int32_t sm[];
  if (v1_error(a.err)) return;
  const int c = blockIdx.x;
  int s;
  int64_t t0, ntok;
  chunk_range(a, c, &s, &t0, &ntok);
  const int64_t n = ntok * a.top_k;
  int32_t *ids = sm, *cnt = sm + a.chunk_tokens * a.top_k;
  const int32_t *src = (const int32_t *)(a.peer_base[s] + a.topk_off) + t0 * a.top_k;
  int32_t *local = a.topk_all + ((int64_t)s * a.tokens + t0) * a.top_k;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int32_t v = src[i];
    ids[i] = v;
    local[i] = v;
  }
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x) cnt[l] = 0;
  __syncthreads();
  if (threadIdx.x == 0)
    a.chunk_status[c] = mok_sched_count_chunk(ids, ntok, a.top_k, a.num_experts,
                                              a.rank * a.experts_local, a.experts_local, cnt);
  __syncthreads();
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x)
    a.counts[(int64_t)c * a.experts_local + l] = cnt[l];
}

/* On any fault the expert table is left empty (no rows): kernels that do not read the error word
 * (the grouped GEMMs) then do nothing with it. */
__device__ void sched_empty_table(const v1_sched_args &a) {
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x) a.expert_count[l] = 0;
  for (int l = threadIdx.x; l <= a.experts_local; l += blockDim.x) a.expert_offset[l] = 0;
}

__global__ void sched_scan_kernel(v1_sched_args a, int nchunks) {
  extern __shared__ int32_t sm[];
  __shared__ int ok;
  if (v1_error(a.err)) {
    sched_empty_table(a);
    return;
  }
  const int el = a.experts_local;
  const int64_t n = (int64_t)nchunks * el;
  int32_t *cnt = sm, *ec = sm + n, *eo = ec + el;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) cnt[i] = a.counts[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    int st = MOK_SCHED_OK;
    for (int c = 0; c < nchunks && st == MOK_SCHED_OK; ++c) st = a.chunk_status[c];
    if (st == MOK_SCHED_OK) st = mok_sched_scan(cnt, nchunks, el, a.tile_m, a.capacity, ec, eo);
    if (st != MOK_SCHED_OK) v1_set_error(a.err, st);
    ok = st == MOK_SCHED_OK;
  }
  __syncthreads();
  if (!ok) {
    sched_empty_table(a);
    return;
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a.counts[i] = cnt[i];
  for (int l = threadIdx.x; l < el; l += blockDim.x) a.expert_count[l] = ec[l];
  for (int l = threadIdx.x; l <= el; l += blockDim.x) a.expert_offset[l] = eo[l];
}

__global__ void sched_fill_kernel(v1_sched_args a) {
  extern __shared__ int32_t sm[];
  if (v1_error(a.err)) return;
  const int c = blockIdx.x;
  int s;
  int64_t t0, ntok;
  chunk_range(a, c, &s, &t0, &ntok);
  const int64_t n = ntok * a.top_k;
  int32_t *ids = sm, *cur = sm + a.chunk_tokens * a.top_k;
  const int32_t *local = a.topk_all + ((int64_t)s * a.tokens + t0) * a.top_k;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ids[i] = local[i];
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x)
    cur[l] = a.counts[(int64_t)c * a.experts_local + l];
  __syncthreads();
  if (threadIdx.x == 0)
    mok_sched_fill_chunk(ids, ntok, a.top_k, (int64_t)s * a.tokens * a.top_k + t0 * a.top_k,
                         a.rank * a.experts_local, a.experts_local, cur, a.row_src);
}

__global__ void sched_pad_kernel(v1_sched_args a) {
  if (v1_error(a.err)) return;
  const int l = blockIdx.x * blockDim.x + threadIdx.x;
  if (l < a.experts_local) mok_sched_pad_expert(l, a.expert_count, a.expert_offset, a.row_src);
}

extern "C" size_t v1_sched_count_smem(const v1_sched_args *a) {
  return (size_t)(a->chunk_tokens * a->top_k + a->experts_local) * sizeof(int32_t);
}

extern "C" size_t v1_sched_scan_smem(const v1_sched_args *a) {
  int64_t nchunks = (int64_t)a->ep * a->chunks_per_rank;
  return (size_t)(nchunks * a->experts_local + 2 * a->experts_local + 1) * sizeof(int32_t);
}

extern "C" cudaError_t v1_sched_prepare(const v1_sched_args *a) {
  int cs = (int)v1_sched_count_smem(a), ss = (int)v1_sched_scan_smem(a);
  cudaError_t e;
  if ((e = cudaFuncSetAttribute(sched_count_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cs)))
    return e;
  if ((e = cudaFuncSetAttribute(sched_fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cs)))
    return e;
  return cudaFuncSetAttribute(sched_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ss);
}

extern "C" cudaError_t v1_sched_count_scan(const v1_sched_args *a, cudaStream_t stream) {
  const int nchunks = a->ep * a->chunks_per_rank;
  cudaError_t e;
  sched_count_kernel<<<nchunks, SCHED_THREADS, v1_sched_count_smem(a), stream>>>(*a);
  if ((e = cudaGetLastError())) return e;
  sched_scan_kernel<<<1, 256, v1_sched_scan_smem(a), stream>>>(*a, nchunks);
  return cudaGetLastError();
}

extern "C" cudaError_t v1_sched_fill_pad(const v1_sched_args *a, cudaStream_t stream) {
  const int nchunks = a->ep * a->chunks_per_rank;
  cudaError_t e;
  sched_fill_kernel<<<nchunks, SCHED_THREADS, v1_sched_count_smem(a), stream>>>(*a);
  if ((e = cudaGetLastError())) return e;
  sched_pad_kernel<<<(a->experts_local + 127) / 128, 128, 0, stream>>>(*a);
  return cudaGetLastError();
}
