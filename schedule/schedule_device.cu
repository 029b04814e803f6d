/* schedule_device.cu — the schedule table built on the device, two ways with the same result:
 * schedule_core.h's chunked functions run unchanged by one GPU thread per chunk (count per chunk,
 * one scan, fill per chunk, pad per expert), or parallel kernels inside each chunk (below). Each chunk's routing is staged in shared memory; the gathered routing of every
 * rank is read from the peers' symmetric buffers. No count ever leaves the device: faults go to the
 * workspace's sticky error word. */
#include <pthread.h>
#include "kernels/common/device.cuh"
#include "schedule/schedule_device.h"
#include "schedule/schedule_core.h"

#define SCHED_THREADS 128

/* Chunk c's rank and first token, and its tokens under that rank's count for this build (staged
 * by the rank's mok_sched_stage, read from its symmetric buffer). Returns 0 when that count is
 * outside [0, T] (a corrupted buffer): the chunk then has no tokens. */
__device__ __forceinline__ void chunk_origin(const mok_sched_args &a, int c, int *src, int64_t *t0) {
  *src = c / a.chunks_per_rank;
  *t0 = (int64_t)(c % a.chunks_per_rank) * a.chunk_tokens;
}
__device__ __forceinline__ int chunk_range(const mok_sched_args &a, int c, int *src, int64_t *t0,
                                           int64_t *ntok) {
  chunk_origin(a, c, src, t0);
  const int64_t count = *(const int32_t *)(a.peer_base[*src] + a.count_off);
  const int ok = count >= 0 && count <= a.tokens;
  const int64_t n = (ok ? count : 0) - *t0;
  *ntok = n < 0 ? 0 : (n > a.chunk_tokens ? a.chunk_tokens : n);
  return ok;
}

/* Count kernels: chunk c's routing pulled from its rank into shared ids and the gathered table
 * topk_all, and cnt[E_local] zeroed. Returns the chunk's token count (*src: its rank, *t0: first),
 * or -1 when the rank's staged count is out of range. */
__device__ int64_t gather_chunk(const mok_sched_args &a, int c, int32_t *ids, int32_t *cnt, int *src,
                                int64_t *t0) {
  int64_t ntok;
  const int ok = chunk_range(a, c, src, t0, &ntok);
  const int64_t n = ntok * a.top_k;
  const int32_t *peer = (const int32_t *)(a.peer_base[*src] + a.topk_off) + *t0 * a.top_k;
  int32_t *local = a.topk_all + ((int64_t)*src * a.tokens + *t0) * a.top_k;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int32_t v = peer[i];
    ids[i] = v;
    local[i] = v;
  }
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x) cnt[l] = 0;
  return ok ? ntok : -1;
}

/* What the count phase found for chunk c, for the fill: its status and the token count it
 * validated (0 where the staged count was out of range). */
__device__ __forceinline__ int32_t *validated_tokens(const mok_sched_args &a) {
  return a.chunk_status + a.ep * a.chunks_per_rank;
}
__device__ __forceinline__ void record_chunk(const mok_sched_args &a, int c, int status,
                                             int64_t ntok) {
  a.chunk_status[c] = status;
  validated_tokens(a)[c] = (int32_t)(ntok < 0 ? 0 : ntok);
}

/* Fill kernels: chunk c's ids from topk_all and its write cursors from the scan into shared memory.
 * Returns the chunk's token count as the count phase validated it (*src, *t0 as above): the peers'
 * staged counts are not read again (a count that changed since would fill other rows than the
 * scan placed), and a chunk the count phase refused fills nothing. */
__device__ int64_t stage_chunk(const mok_sched_args &a, int c, int32_t *ids, int32_t *cur, int *src,
                               int64_t *t0) {
  chunk_origin(a, c, src, t0);
  const int64_t ntok = a.chunk_status[c] == MOK_SCHED_OK ? validated_tokens(a)[c] : 0;
  const int64_t n = ntok * a.top_k;
  const int32_t *local = a.topk_all + ((int64_t)*src * a.tokens + *t0) * a.top_k;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ids[i] = local[i];
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x)
    cur[l] = a.counts[(int64_t)c * a.experts_local + l];
  return ntok;
}

__global__ void sched_count_kernel(mok_sched_args a) {
  extern __shared__ int32_t sm[];
  if (dev_error(a.err)) return;
  const int c = blockIdx.x;
  int s;
  int64_t t0;
  int32_t *ids = sm, *cnt = sm + a.chunk_tokens * a.top_k;
  const int64_t ntok = gather_chunk(a, c, ids, cnt, &s, &t0);
  __syncthreads();
  if (threadIdx.x == 0)
    record_chunk(a, c,
                 ntok < 0 ? MOK_SCHED_BAD_ARGUMENT
                          : mok_sched_count_chunk(ids, ntok, a.top_k, a.num_experts,
                                                  a.rank * a.experts_local, a.experts_local, cnt),
                 ntok);
  __syncthreads();
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x)
    a.counts[(int64_t)c * a.experts_local + l] = cnt[l];
}

/* On any fault the expert table is left empty (no rows): kernels that do not read the error word
 * (the grouped GEMMs) then do nothing with it. */
__device__ void sched_empty_table(const mok_sched_args &a) {
  for (int l = threadIdx.x; l < a.experts_local; l += blockDim.x) a.expert_count[l] = 0;
  for (int l = threadIdx.x; l <= a.experts_local; l += blockDim.x) a.expert_offset[l] = 0;
}

__global__ void sched_scan_kernel(mok_sched_args a, int nchunks) {
  extern __shared__ int32_t sm[];
  __shared__ int ok;
  if (dev_error(a.err)) {
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
    if (st != MOK_SCHED_OK) dev_set_error(a.err, st);
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

__global__ void sched_fill_kernel(mok_sched_args a) {
  extern __shared__ int32_t sm[];
  if (dev_error(a.err)) return;
  const int c = blockIdx.x;
  int s;
  int64_t t0;
  int32_t *ids = sm, *cur = sm + a.chunk_tokens * a.top_k;
  const int64_t ntok = stage_chunk(a, c, ids, cur, &s, &t0);
  __syncthreads();
  if (threadIdx.x == 0)
    mok_sched_fill_chunk(ids, ntok, a.top_k, (int64_t)s * a.tokens * a.top_k + t0 * a.top_k,
                         a.rank * a.experts_local, a.experts_local, cur, a.row_src);
}

/* ---- the same table by parallel kernels --------------------------------------------------------
 * Count: every thread validates and counts whole tokens (shared-memory atomics; the counts do not
 * depend on their order; the first fault in token order wins through an atomicMin on t * 8 + code).
 * Scan: one block, a thread per local expert for the totals and the cursors, a block-wide scan of
 * the padded totals. Fill: one warp per chunk walks the ids in (token, j) order 32 at a time;
 * lanes naming the same expert (__match_any_sync) take consecutive rows in lane order, so every
 * row lands where the sequential fill puts it. The table is bitwise the same as above. */

__global__ void sched_count_par_kernel(mok_sched_args a) {
  extern __shared__ int32_t sm[];
  __shared__ int first_bad;
  if (dev_error(a.err)) return;
  const int c = blockIdx.x, k = a.top_k, el = a.experts_local, lo = a.rank * el;
  int s;
  int64_t t0;
  int32_t *ids = sm, *cnt = sm + a.chunk_tokens * k;
  const int64_t got = gather_chunk(a, c, ids, cnt, &s, &t0), ntok = got < 0 ? 0 : got;
  if (threadIdx.x == 0) first_bad = got < 0 ? MOK_SCHED_BAD_ARGUMENT : INT32_MAX;
  __syncthreads();
  for (int64_t t = threadIdx.x; t < ntok; t += blockDim.x) {
    const int32_t *tok = ids + t * k;
    const int st = mok_sched_check_token(tok, k, a.num_experts);
    if (st != MOK_SCHED_OK) {
      atomicMin(&first_bad, (int)(t * 8 + st));
      continue;
    }
    for (int j = 0; j < k; ++j) {
      const int l = tok[j] - lo;
      if (l >= 0 && l < el) atomicAdd(&cnt[l], 1);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0)
    record_chunk(a, c, first_bad == INT32_MAX ? MOK_SCHED_OK : (first_bad & 7), ntok);
  for (int l = threadIdx.x; l < el; l += blockDim.x) a.counts[(int64_t)c * el + l] = cnt[l];
}

/* Exclusive prefix sum over the block (blockDim.x a multiple of 32, at most 1024) of one int64 per
 * thread; *total gets the sum. Once per kernel (its shared memory is not reused). */
__device__ int64_t block_exclusive_scan(int64_t v, int64_t *total) {
  __shared__ int64_t warp_base[32];
  __shared__ int64_t grand;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int64_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_base[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int64_t w = lane < nwarps ? warp_base[lane] : 0;
    int64_t wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t y = __shfl_up_sync(0xffffffffu, wi, o);
      if (lane >= o) wi += y;
    }
    if (lane < nwarps) warp_base[lane] = wi - w;
    if (lane == 31) grand = wi;
  }
  __syncthreads();
  *total = grand;
  return warp_base[warp] + incl - v;
}

/* One block of SCHED_SCAN_THREADS threads; thread i owns the local experts [i * per, (i+1) * per). */
#define SCHED_SCAN_THREADS 1024
__global__ void sched_scan_par_kernel(mok_sched_args a, int nchunks) {
  __shared__ int status;
  if (dev_error(a.err)) {
    sched_empty_table(a);
    return;
  }
  const int el = a.experts_local;
  if (threadIdx.x == 0) {
    int st = MOK_SCHED_OK;
    for (int c = 0; c < nchunks && st == MOK_SCHED_OK; ++c) st = a.chunk_status[c];
    status = st;
  }
  __syncthreads();
  if (status != MOK_SCHED_OK) {
    if (threadIdx.x == 0) dev_set_error(a.err, status);
    sched_empty_table(a);
    return;
  }
  const int per = (el + blockDim.x - 1) / blockDim.x;
  const int l0 = threadIdx.x * per, l1 = min(l0 + per, el);
  int64_t padded = 0;
  for (int l = l0; l < l1; ++l) {
    int64_t rows = 0;
    for (int c = 0; c < nchunks; ++c) rows += a.counts[(int64_t)c * el + l];
    padded += (rows + a.tile_m - 1) / a.tile_m * a.tile_m;
  }
  int64_t total;
  int64_t offset = block_exclusive_scan(padded, &total);
  if (total > a.capacity || total > INT32_MAX) {
    if (threadIdx.x == 0) dev_set_error(a.err, MOK_SCHED_CAPACITY);
    sched_empty_table(a);
    return;
  }
  for (int l = l0; l < l1; ++l) {
    int64_t row = offset;
    for (int c = 0; c < nchunks; ++c) {
      const int64_t i = (int64_t)c * el + l;
      const int32_t n = a.counts[i];
      a.counts[i] = (int32_t)row;
      row += n;
    }
    a.expert_offset[l] = (int32_t)offset;
    a.expert_count[l] = (int32_t)(row - offset);
    offset += (row - offset + a.tile_m - 1) / a.tile_m * a.tile_m;
  }
  if (threadIdx.x == 0) a.expert_offset[el] = (int32_t)total;
}

/* One warp per chunk. */
__global__ void sched_fill_par_kernel(mok_sched_args a) {
  extern __shared__ int32_t sm[];
  if (dev_error(a.err)) return;
  const int c = blockIdx.x, k = a.top_k, el = a.experts_local, lo = a.rank * el;
  const int lane = threadIdx.x; /* one warp per block */
  int s;
  int64_t t0;
  int32_t *ids = sm, *cur = sm + a.chunk_tokens * k;
  const int64_t n = stage_chunk(a, c, ids, cur, &s, &t0) * k;
  __syncwarp();
  const int64_t slot_base = (int64_t)s * a.tokens * k + t0 * k;
  const unsigned below = (1u << lane) - 1u;
  for (int64_t base = 0; base < n; base += 32) {
    const int64_t i = base + lane;
    int l = -1;
    if (i < n) {
      l = ids[i] - lo;
      if (l < 0 || l >= el) l = -1;
    }
    const unsigned peers = __match_any_sync(0xffffffffu, l);
    int row = 0;
    if (l >= 0) {
      row = cur[l] + __popc(peers & below);
      a.row_src[row] = (int32_t)(slot_base + i);
    }
    __syncwarp();
    if (l >= 0 && (peers >> lane) == 1u) cur[l] = row + 1; /* the group's last lane: past its row */
    __syncwarp();
  }
}

__global__ void sched_pad_kernel(mok_sched_args a) {
  if (dev_error(a.err)) return;
  const int l = blockIdx.x * blockDim.x + threadIdx.x;
  if (l < a.experts_local) mok_sched_pad_expert(l, a.expert_count, a.expert_offset, a.row_src);
}

__global__ void sched_stage_kernel(const int32_t *topk, int64_t n, int32_t *dst,
                                   int32_t *count_dst, int32_t count) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = topk[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) *count_dst = count;
}

extern "C" cudaError_t mok_sched_stage(const int32_t *topk, int64_t count, int top_k,
                                      int32_t *topk_dst, int32_t *count_dst,
                                      cudaStream_t stream) {
  const int64_t n = count * top_k;
  int64_t blocks = (n + 255) / 256;
  blocks = blocks < 1 ? 1 : (blocks > 264 ? 264 : blocks);
  sched_stage_kernel<<<(int)blocks, 256, 0, stream>>>(topk, n, topk_dst, count_dst,
                                                      (int32_t)count);
  return cudaGetLastError();
}

__global__ void dense_table_kernel(int32_t *table, int32_t count) {
  table[0] = 0;
  table[1] = (count + 127) / 128 * 128;
  table[2] = count;
  table[3] = 0;
}

extern "C" cudaError_t mok_sched_dense_table(int32_t *table, int64_t count, cudaStream_t stream) {
  dense_table_kernel<<<1, 1, 0, stream>>>(table, (int32_t)count);
  return cudaGetLastError();
}

extern "C" size_t mok_sched_count_smem(const mok_sched_args *a) {
  return (size_t)(a->chunk_tokens * a->top_k + a->experts_local) * sizeof(int32_t);
}

extern "C" size_t mok_sched_scan_smem(const mok_sched_args *a) {
  int64_t nchunks = (int64_t)a->ep * a->chunks_per_rank;
  return (size_t)(nchunks * a->experts_local + 2 * a->experts_local + 1) * sizeof(int32_t);
}

/* The kernels' dynamic shared-memory limits are per device and process, not per workspace: each
 * only ever rises (a workspace of fewer tokens, made later, must not lower the limit an earlier,
 * larger one launches against). Guarded: workspaces may be made from several host threads. */
#define SCHED_MAX_DEVICES 64
static pthread_mutex_t g_limit_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_count_limit[SCHED_MAX_DEVICES], g_scan_limit[SCHED_MAX_DEVICES];

static cudaError_t raise_limits(int dev, int cs, int ss) {
  const void *count_kernels[] = {(const void *)sched_count_kernel, (const void *)sched_fill_kernel,
                                 (const void *)sched_count_par_kernel,
                                 (const void *)sched_fill_par_kernel};
  cudaError_t e = cudaSuccess;
  if (cs > g_count_limit[dev]) {
    for (int i = 0; i < 4 && e == cudaSuccess; ++i)
      e = cudaFuncSetAttribute(count_kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize, cs);
    if (e == cudaSuccess) g_count_limit[dev] = cs;
  }
  if (e == cudaSuccess && ss > g_scan_limit[dev]) {
    e = cudaFuncSetAttribute((const void *)sched_scan_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, ss);
    if (e == cudaSuccess) g_scan_limit[dev] = ss;
  }
  return e;
}

extern "C" cudaError_t mok_sched_prepare(const mok_sched_args *a) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < 0 || dev >= SCHED_MAX_DEVICES) return cudaErrorInvalidDevice;
  pthread_mutex_lock(&g_limit_lock);
  e = raise_limits(dev, (int)mok_sched_count_smem(a), (int)mok_sched_scan_smem(a));
  pthread_mutex_unlock(&g_limit_lock);
  return e;
}

extern "C" cudaError_t mok_sched_count_scan(const mok_sched_args *a, cudaStream_t stream) {
  const int nchunks = a->ep * a->chunks_per_rank;
  cudaError_t e;
  if (a->parallel) {
    sched_count_par_kernel<<<nchunks, 256, mok_sched_count_smem(a), stream>>>(*a);
    if ((e = cudaGetLastError())) return e;
    sched_scan_par_kernel<<<1, SCHED_SCAN_THREADS, 0, stream>>>(*a, nchunks);
    return cudaGetLastError();
  }
  sched_count_kernel<<<nchunks, SCHED_THREADS, mok_sched_count_smem(a), stream>>>(*a);
  if ((e = cudaGetLastError())) return e;
  sched_scan_kernel<<<1, 256, mok_sched_scan_smem(a), stream>>>(*a, nchunks);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_sched_fill_pad(const mok_sched_args *a, cudaStream_t stream) {
  const int nchunks = a->ep * a->chunks_per_rank;
  cudaError_t e;
  if (a->parallel)
    sched_fill_par_kernel<<<nchunks, 32, mok_sched_count_smem(a), stream>>>(*a);
  else
    sched_fill_kernel<<<nchunks, SCHED_THREADS, mok_sched_count_smem(a), stream>>>(*a);
  if ((e = cudaGetLastError())) return e;
  sched_pad_kernel<<<(a->experts_local + 127) / 128, 128, 0, stream>>>(*a);
  return cudaGetLastError();
}
