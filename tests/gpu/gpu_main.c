/* gpu_main.c — main() of the GPU test binary: joins the group described by the launcher's
 * environment (MOK_RANK, MOK_NRANKS, MOK_ID_FILE; alone when unset), picks this rank's GPU, runs
 * the registered layer cases and then the grouped-GEMM cases (gg_test_cases, when linked in). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "tests/gpu/gpu_test.h"

gpu_test_ctx gpu_ctx;

#define MAX_CASES 256
static test_case g_cases[MAX_CASES];
static int g_ncases = 0;

void gpu_test_register(const char *name, void (*fn)(void)) {
  if (g_ncases < MAX_CASES) {
    g_cases[g_ncases].name = name;
    g_cases[g_ncases].fn = fn;
    ++g_ncases;
  }
}

/* The grouped-GEMM tests export these (tests/gpu/test_grouped_gemm.cu); weak so the binary links
 * without them. */
extern const test_case gg_test_cases[] __attribute__((weak));
extern const int gg_test_case_count __attribute__((weak));

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

/* Rank 0 writes the id to path (atomically, by rename); the others wait for it (bounded). */
static int exchange_id(mok_unique_id *id, int rank, const char *path) {
  if (rank == 0) {
    if (mok_get_unique_id(id) != MOK_SUCCESS) return -1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1) {
      if (f) fclose(f);
      return -1;
    }
    fclose(f);
    return rename(tmp, path);
  }
  for (int i = 0; i < 1200; ++i) { /* up to 120 s */
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return 0;
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

int gpu_test_share(void *data, size_t n, const char *tag) {
  if (gpu_ctx.size <= 1) return 0;
  const char *base = getenv("MOK_ID_FILE");
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s.%s", base ? base : "/tmp/mok_id", tag);
  if (gpu_ctx.rank == 0) {
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
      if (f) fclose(f);
      return -1;
    }
    fclose(f);
    return rename(tmp, path);
  }
  for (int i = 0; i < 600; ++i) { /* up to 60 s */
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(data, 1, n, f);
      fclose(f);
      if (got == n) return 0;
    }
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

int main(int argc, char **argv) {
  gpu_ctx.rank = env_int("MOK_RANK", 0);
  gpu_ctx.size = env_int("MOK_NRANKS", 1);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
    fprintf(stderr, "rank %d: no CUDA device\n", gpu_ctx.rank);
    printf("0 passed, 1 failed\n");
    return 1;
  }
  cudaSetDevice(env_int("MOK_LOCAL_RANK", gpu_ctx.rank) % ndev);
  mok_unique_id id;
  const char *path = getenv("MOK_ID_FILE");
  int rc = 0;
  if (gpu_ctx.size > 1) rc = exchange_id(&id, gpu_ctx.rank, path ? path : "/tmp/mok_id");
  else rc = mok_get_unique_id(&id) == MOK_SUCCESS ? 0 : -1;
  mok_status st = rc == 0 ? mok_group_create(&id, gpu_ctx.size, gpu_ctx.rank, &gpu_ctx.group)
                          : MOK_ERR_INVALID_ARGUMENT;
  if (st != MOK_SUCCESS) {
    fprintf(stderr, "rank %d: group creation failed: %s\n", gpu_ctx.rank, mok_status_string(st));
    printf("0 passed, 1 failed\n");
    return 1;
  }
  printf("rank %d of %d, device %d\n", gpu_ctx.rank, gpu_ctx.size, env_int("MOK_LOCAL_RANK", gpu_ctx.rank) % ndev);
  int n = g_ncases;
  if (&gg_test_case_count && gg_test_cases)
    for (int i = 0; i < gg_test_case_count && n < MAX_CASES; ++i) g_cases[n++] = gg_test_cases[i];
  int code = test_run_all(g_cases, n, argc, argv);
  mok_group_destroy(gpu_ctx.group);
  return code;
}
