/* write_bw.cu — the card's memory bandwidth for what the BF16 weight gradient does to HBM: writes
 * of a large output (DeepSeek-V3's dW_down at EP=1: 256 x 7168 x 2048 bf16, 7.5 GB), next to
 * reads of as many bytes, and the weight gradient's own pattern (each CTA a 128 x 256 bf16 tile,
 * 512 bytes of each of 128 rows, adjacent CTAs the adjacent column tiles). The floor a
 * write-bound kernel of that size can reach. Medians of ITERS after a warm-up.
 *
 *   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I. -o build/write_bw dev/write_bw.cu
 *   build/write_bw [GB] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "dev/cuda_check.h"

#define ITERS 9

__global__ void write16(int4 *p, size_t n) { /* n int4 */
  const int4 v = make_int4(1, 2, 3, 4);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

__global__ void read16(const int4 *p, size_t n, int *sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) *sink = acc; /* keeps the loads */
}

/* dW tiles: matrix [E * rows, cols] bf16, tile 128 x 256 (512 B of each row), tile t of a
 * persistent grid: column tile fastest (as the weight gradient's units), then row tile. */
__global__ void tile_writes(uint8_t *p, int64_t row_tiles, int64_t col_tiles, int64_t ld_bytes) {
  const int4 v = make_int4(5, 6, 7, 8);
  const int64_t tiles = row_tiles * col_tiles;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t rt = t / col_tiles, ct = t % col_tiles;
    uint8_t *base = p + rt * 128 * ld_bytes + ct * 512;
    /* 128 rows x 32 int4: 4096 stores, 16 per thread of 256 */
    for (int i = threadIdx.x; i < 128 * 32; i += blockDim.x) {
      const int r = i >> 5, c = i & 31;
      *(int4 *)(base + r * ld_bytes + c * 16) = v;
    }
  }
}

static int cmp(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void *g_p;
static size_t g_bytes;
static int *g_sink;
static int g_sms;

static void do_memset(cudaStream_t s) { CHECK(cudaMemsetAsync(g_p, 1, g_bytes, s)); }
static void do_write(cudaStream_t s) { write16<<<g_sms * 4, 512, 0, s>>>((int4 *)g_p, g_bytes / 16); }
static void do_read(cudaStream_t s) { read16<<<g_sms * 4, 512, 0, s>>>((const int4 *)g_p, g_bytes / 16, g_sink); }
static void do_tiles(cudaStream_t s) {
  const int64_t cols = 2048, ld = cols * 2, rows = g_bytes / ld;
  tile_writes<<<g_sms * 2, 256, 0, s>>>((uint8_t *)g_p, rows / 128, cols / 256, ld);
}

static void bench(const char *name, void (*fn)(cudaStream_t), double bytes) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  fn(0);
  fn(0);
  CHECK(cudaDeviceSynchronize());
  float ms[ITERS];
  for (int i = 0; i < ITERS; ++i) {
    CHECK(cudaEventRecord(a, 0));
    fn(0);
    CHECK(cudaEventRecord(b, 0));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CHECK(cudaGetLastError());
  qsort(ms, ITERS, sizeof(float), cmp);
  printf("  %-44s %8.3f ms  %6.2f TB/s\n", name, ms[ITERS / 2], bytes / (ms[ITERS / 2] * 1e-3) / 1e12);
}

int main(int argc, char **argv) {
  const double gb = argc > 1 ? atof(argv[1]) : 7.516; /* 256 x 7168 x 2048 x 2 bytes */
  g_bytes = ((size_t)(gb * 1e9) / (128 * 4096)) * (128 * 4096);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  CHECK(cudaMalloc(&g_p, g_bytes));
  CHECK(cudaMalloc(&g_sink, 4));
  printf("%s, %d SMs: %.3f GB, median of %d\n", prop.name, g_sms, g_bytes / 1e9, ITERS);
  bench("cudaMemsetAsync (writes)", do_memset, (double)g_bytes);
  bench("16-byte stores, grid-stride (writes)", do_write, (double)g_bytes);
  bench("dW tiles 128 x 256 bf16, 16-byte stores", do_tiles, (double)g_bytes);
  bench("16-byte streaming loads (reads)", do_read, (double)g_bytes);
  CHECK(cudaFree(g_p));
  return 0;
}
