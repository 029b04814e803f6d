/* pull_bench.cu — why the dispatch pull and the reverse combine write at ~1.6-1.9 TB/s where a fill
 * writes 3.3 (docs/PERF.md, "Under the 700 W cap"): the library's row kernels (kernels/move/move.cu)
 * on a synthetic EP=1 route, against cudaMemsetAsync and a device copy of the same bytes, and two
 * candidate pulls written here: PULL2 (a warp moves two rows, all 16 of a lane's loads in flight
 * before any store), PIPE (a persistent warp reads 32 rows' sources at once and issues the
 * next row's loads before the current row's stores) and BULK (persistent warps whose lane 0 moves
 * each row by a bulk copy into shared memory and a bulk store out, BULK_SLOTS rows in flight a
 * warp: few threads, no registers in the data's way). Rounds interleave the variants; medians.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Iinclude -I. \
 *        -o build/pull_bench dev/pull_bench.cu kernels/move/move.cu
 *   build/pull_bench [H E]        (default Qwen3-30B: H 2048, E 128; T 7168, k 8)
 *
 * PULL2's, PIPE's and BULK's recv are compared bytewise with the library pull's (the exit status
 * says whether they matched). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/ptx.cuh"
#include "dev/cuda_check.h"
#include "kernels/move/move.h"

/* Two rows per warp: 2 x 8 16-byte loads a lane in flight, then the stores. H = 2048 (256 words). */
__global__ void __launch_bounds__(256) pull2_kernel(const int32_t *row_src, int64_t rows, int k,
                                                    const uint4 *x, int64_t nv, uint4 *recv) {
  const int lane = threadIdx.x & 31;
  const int64_t w = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int64_t r0 = 2 * w;
  if (r0 >= rows) return;
  const int nr = r0 + 1 < rows ? 2 : 1;
  int32_t s[2];
  for (int j = 0; j < 2; ++j) s[j] = j < nr ? row_src[r0 + j] : -1;
  for (int64_t i0 = lane; i0 < nv; i0 += 32 * 8) {
    uint4 v[2][8];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int64_t i = i0 + 32 * b;
        v[j][b] = (s[j] >= 0 && i < nv) ? x[(int64_t)(s[j] / k) * nv + i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int64_t i = i0 + 32 * b;
        if (j < nr && i < nv) recv[(r0 + j) * nv + i] = v[j][b];
      }
  }
}

/* Persistent warps over chunks of 32 rows: the chunk's sources read by one load per lane, then row
 * by row with the next row's first words loaded before this row's stores. nv <= 32 * 8 words per
 * pass of a row (any H: rows of more words loop). */
__global__ void __launch_bounds__(256) pipe_kernel(const int32_t *row_src, int64_t rows, int k,
                                                   const uint4 *x, int64_t nv, uint4 *recv) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * 8;
  for (int64_t c = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); c * 32 < rows; c += warps) {
    const int64_t base = c * 32;
    const int32_t mine = base + lane < rows ? row_src[base + lane] : -1;
    const int n = rows - base < 32 ? (int)(rows - base) : 32;
    for (int j = 0; j < n; ++j) {
      const int32_t s = __shfl_sync(0xffffffffu, mine, j);
      const uint4 *src = x + (int64_t)(s < 0 ? 0 : s / k) * nv;
      uint4 *dst = recv + (base + j) * nv;
      for (int64_t i0 = lane; i0 < nv; i0 += 32 * 8) {
        uint4 v[8];
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          const int64_t i = i0 + 32 * b;
          v[b] = (s >= 0 && i < nv) ? src[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < 8; ++b)
          if (i0 + 32 * b < nv) dst[i0 + 32 * b] = v[b];
      }
    }
  }
}

/* BULK: BULK_WARPS warps a CTA, each with BULK_SLOTS row buffers of shared memory and an mbarrier
 * each, plus one zero row for the CTA (padding rows are stored from it). Lane 0 of a warp walks
 * its rows (warp w: w, w + all warps, ...): loads the first BULK_SLOTS, then per row waits its
 * buffer, stores it, and loads the row BULK_SLOTS - 1 further on into the buffer the previous
 * row's store has read (bulk wait_group.read 1: the newest store may still be reading). */
#define BULK_WARPS 4
#define BULK_SLOTS 3
static size_t bulk_smem(int64_t nv) { return (size_t)(BULK_WARPS * BULK_SLOTS + 1) * nv * 16; }

__device__ __forceinline__ void bulk_issue(int64_t row, const int32_t *row_src, int k,
                                           const uint4 *x, int64_t nv, uint32_t buf, uint32_t bar) {
  const int32_t s = row_src[row];
  const uint32_t bytes = (uint32_t)(nv * 16);
  if (s < 0) {
    mbar_arrive(bar); /* nothing to load: stored from the zero row */
    return;
  }
  mbar_arrive_expect_tx(bar, bytes);
  bulk_load_1d(buf, x + (int64_t)(s / k) * nv, bytes, bar);
}

__global__ void __launch_bounds__(BULK_WARPS * 32) bulk_kernel(const int32_t *row_src, int64_t rows,
                                                               int k, const uint4 *x, int64_t nv,
                                                               uint4 *recv) {
  extern __shared__ __align__(128) uint4 bsm[];
  __shared__ __align__(8) uint64_t bars[BULK_WARPS * BULK_SLOTS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t bytes = (uint32_t)(nv * 16);
  uint4 *zero = bsm + (int64_t)BULK_WARPS * BULK_SLOTS * nv;
  for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) zero[i] = make_uint4(0, 0, 0, 0);
  const uint32_t buf0 = smem_u32(bsm + (int64_t)warp * BULK_SLOTS * nv);
  const uint32_t bar0 = smem_u32(&bars[warp * BULK_SLOTS]);
  if (lane == 0)
    for (int q = 0; q < BULK_SLOTS; ++q) mbar_init(bar0 + 8 * q, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the zero row, for bulk stores */
  __syncthreads();
  if (lane != 0) return;
  const int64_t warps = (int64_t)gridDim.x * BULK_WARPS, w0 = (int64_t)blockIdx.x * BULK_WARPS + warp;
  const int64_t n = w0 < rows ? (rows - w0 + warps - 1) / warps : 0; /* this warp's rows */
  for (int64_t j = 0; j < BULK_SLOTS && j < n; ++j)
    bulk_issue(w0 + j * warps, row_src, k, x, nv, buf0 + (uint32_t)j * bytes, bar0 + 8 * (uint32_t)j);
  for (int64_t j = 0; j < n; ++j) {
    const int q = (int)(j % BULK_SLOTS);
    const int64_t row = w0 + j * warps;
    mbar_wait(bar0 + 8 * q, (uint32_t)((j / BULK_SLOTS) & 1));
    const uint32_t src = row_src[row] < 0 ? smem_u32(zero) : buf0 + (uint32_t)q * bytes;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 ::"l"((uint64_t)(recv + row * nv)), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    const int64_t next = j - 1 + BULK_SLOTS; /* into the previous row's buffer */
    if (j >= 1 && next < n) {
      asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
      const int qp = (int)((j - 1) % BULK_SLOTS);
      bulk_issue(w0 + next * warps, row_src, k, x, nv, buf0 + (uint32_t)qp * bytes, bar0 + 8 * (uint32_t)qp);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

static float median(float *v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      float t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[n / 2];
}

int main(int argc, char **argv) {
  const int64_t H = argc > 2 ? atoll(argv[1]) : 2048, T = 7168;
  const int E = argc > 2 ? atoi(argv[2]) : 128, k = 8;
  const int64_t nv = H / 8;
  /* uniform routing: k distinct experts per token (a fixed-seed LCG); rows sorted by expert, each
   * expert padded to 128 rows (-1), as the schedule lays them out */
  int32_t *count = (int32_t *)calloc(E, sizeof(int32_t));
  int32_t *choice = (int32_t *)malloc(T * k * sizeof(int32_t));
  uint64_t st = 12345;
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      int e, dup;
      do {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        e = (int)((st >> 33) % (uint64_t)E);
        dup = 0;
        for (int q = 0; q < j; ++q) dup |= choice[t * k + q] == e;
      } while (dup);
      choice[t * k + j] = e;
      count[e]++;
    }
  int32_t *offset = (int32_t *)malloc((E + 1) * sizeof(int32_t));
  offset[0] = 0;
  for (int e = 0; e < E; ++e) offset[e + 1] = offset[e] + (count[e] + 127) / 128 * 128;
  const int64_t rows = offset[E];
  int32_t *row_src = (int32_t *)malloc(rows * sizeof(int32_t));
  for (int64_t r = 0; r < rows; ++r) row_src[r] = -1;
  int32_t *fill = (int32_t *)calloc(E, sizeof(int32_t));
  for (int64_t s = 0; s < T * k; ++s) {
    const int e = choice[s];
    row_src[offset[e] + fill[e]++] = (int32_t)s;
  }

  int32_t *d_row_src, *d_offset, *d_err;
  uint4 *x, *recv, *out2, *dy_out;
  char **d_peer;
  float *rw, *drw;
  CHECK(cudaMalloc(&d_row_src, rows * 4));
  CHECK(cudaMalloc(&d_offset, (E + 1) * 4));
  CHECK(cudaMalloc(&d_err, 4));
  CHECK(cudaMalloc(&x, T * H * 2));
  CHECK(cudaMalloc(&recv, rows * H * 2));
  CHECK(cudaMalloc(&out2, rows * H * 2));
  CHECK(cudaMalloc(&dy_out, rows * H * 2));
  CHECK(cudaMalloc(&d_peer, sizeof(char *)));
  CHECK(cudaMalloc(&rw, T * k * 4 * 2));
  drw = rw + T * k;
  CHECK(cudaMemcpy(d_row_src, row_src, rows * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_offset, offset, (E + 1) * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_err, 0, 4));
  CHECK(cudaMemset(x, 0x3c, T * H * 2));
  CHECK(cudaMemset(rw, 0, T * k * 4 * 2));
  /* x holds its token index in every word, so a wrong source shows */
  {
    uint16_t *hx = (uint16_t *)malloc(T * H * 2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) hx[t * H + h] = (uint16_t)(t * 31 + h);
    CHECK(cudaMemcpy(x, hx, T * H * 2, cudaMemcpyHostToDevice));
    free(hx);
  }
  char *base = (char *)x;
  CHECK(cudaMemcpy(d_peer, &base, sizeof(char *), cudaMemcpyHostToDevice));

  mok_move_route r;
  memset(&r, 0, sizeof r);
  r.peer_base = d_peer;
  r.rank = 0;
  r.ep = 1;
  r.tokens = T;
  r.top_k = k;
  r.hidden = H;
  r.row_src = d_row_src;
  r.expert_offset = d_offset;
  r.experts_local = E;
  r.capacity = rows;
  r.err = d_err;

  /* correctness: PULL2, PIPE and BULK against the library's pull */
  size_t bytes = (size_t)rows * H * 2;
  uint8_t *h_ref = (uint8_t *)malloc(bytes), *h_o = (uint8_t *)malloc(bytes);
  CHECK(mok_move_dispatch_pull(&r, 0, NULL, recv, 0));
  CHECK(cudaMemcpy(h_ref, recv, bytes, cudaMemcpyDeviceToHost));
  const int64_t warps2 = (rows + 1) / 2;
  pull2_kernel<<<(unsigned)((warps2 + 7) / 8), 256>>>(d_row_src, rows, k, x, nv, out2);
  CHECK(cudaMemcpy(h_o, out2, bytes, cudaMemcpyDeviceToHost));
  const int ok2 = memcmp(h_ref, h_o, bytes) == 0;
  CHECK(cudaMemset(out2, 0xff, bytes));
  pipe_kernel<<<132 * 8, 256>>>(d_row_src, rows, k, x, nv, out2);
  CHECK(cudaMemcpy(h_o, out2, bytes, cudaMemcpyDeviceToHost));
  const int okp = memcmp(h_ref, h_o, bytes) == 0;
  CHECK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bulk_smem(nv)));
  int sms = 0, per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bulk_kernel, BULK_WARPS * 32, bulk_smem(nv)));
  const unsigned bulk_grid = (unsigned)(sms * (per_sm > 0 ? per_sm : 1));
  CHECK(cudaMemset(out2, 0xff, bytes));
  bulk_kernel<<<bulk_grid, BULK_WARPS * 32, bulk_smem(nv)>>>(d_row_src, rows, k, x, nv, out2);
  CHECK(cudaMemcpy(h_o, out2, bytes, cudaMemcpyDeviceToHost));
  const int okb = memcmp(h_ref, h_o, bytes) == 0;

  enum { NV = 10, ITERS = 20, ROUNDS = 3 };
  const char *names[NV] = {"library pull, a CTA per 8 rows", "library pull, 132 CTAs x 32 warps",
                           "library pull, 264 CTAs x 32 warps", "PULL2 (two rows a warp)",
                           "PIPE (persistent, 1056 CTAs)", "PIPE (persistent, 264 CTAs)",
                           "library reverse combine (weight rows)", "cudaMemsetAsync",
                           "cudaMemcpyAsync D2D", "BULK (bulk copies through shared memory)"};
  float t[NV][ROUNDS * ITERS];
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int round = 0; round < ROUNDS; ++round)
    for (int v = 0; v < NV; ++v)
      for (int it = -3; it < ITERS; ++it) {
        mok_move_route rv = r;
        CHECK(cudaEventRecord(e0));
        switch (v) {
          case 0: CHECK(mok_move_dispatch_pull(&rv, 0, NULL, recv, 0)); break;
          case 1: rv.ctas = 132; CHECK(mok_move_dispatch_pull(&rv, 0, NULL, recv, 0)); break;
          case 2: rv.ctas = 264; CHECK(mok_move_dispatch_pull(&rv, 0, NULL, recv, 0)); break;
          case 3: pull2_kernel<<<(unsigned)((warps2 + 7) / 8), 256>>>(d_row_src, rows, k, x, nv, out2); break;
          case 4: pipe_kernel<<<132 * 8, 256>>>(d_row_src, rows, k, x, nv, out2); break;
          case 5: pipe_kernel<<<264, 256>>>(d_row_src, rows, k, x, nv, out2); break;
          case 6: {
            const mok_move_own none = {NULL, NULL};
            CHECK(mok_move_reverse_combine(&rv, 0, (size_t)((char *)rw - base), &none,
                                           (size_t)((char *)drw - base), recv, dy_out, 0));
          } break;
          case 7: CHECK(cudaMemsetAsync(out2, 0, bytes)); break;
          case 8: CHECK(cudaMemcpyAsync(out2, recv, bytes, cudaMemcpyDeviceToDevice)); break;
          case 9:
            bulk_kernel<<<bulk_grid, BULK_WARPS * 32, bulk_smem(nv)>>>(d_row_src, rows, k, x, nv, out2);
            break;
        }
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        if (it >= 0) CHECK(cudaEventElapsedTime(&t[v][round * ITERS + it], e0, e1));
      }
  CHECK(cudaGetLastError());
  printf("H %lld, E %d, T %lld, k %d: %lld rows, %.3f GB a pass; PULL2 %s, PIPE %s, BULK %s the "
         "library's bytes\n", (long long)H, E, (long long)T, k, (long long)rows, bytes * 1e-9,
         ok2 ? "equals" : "DIFFERS from", okp ? "equals" : "DIFFERS from",
         okb ? "equals" : "DIFFERS from");
  printf("| variant | us (median) | GB/s written |\n|---|---|---|\n");
  for (int v = 0; v < NV; ++v) {
    const float ms = median(t[v], ROUNDS * ITERS);
    printf("| %s | %.1f | %.0f |\n", names[v], ms * 1e3, bytes / (ms * 1e-3) * 1e-9);
  }
  return ok2 && okp && okb ? 0 : 1;
}
