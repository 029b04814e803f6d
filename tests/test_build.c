/* test_build.c — what the build itself must show: no wgmma kernel of the library lost its
 * pipeline. ptxas reports, per kernel, when it had to serialize the wgmma instructions
 * ("Potential Performance Loss: wgmma.mma_async instructions are serialized", C7510-C7520): such
 * a kernel still computes the right result, an order of magnitude slower, and a small change
 * near the register limit can cause it. The Makefile
 * keeps each CUDA object's ptxas report beside it (<object>.ptxas); this test reads them. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include "tests/tests.h"
#include "tests/test_util.h"

#ifndef MOK_BUILD_DIR
#define MOK_BUILD_DIR "build"
#endif

/* Reads one report: counts its serialized kernels (printing them), and whether it compiled the
 * FP8 weight gradient's kernels (their file must be among the reports). */
static int scan(const char *path, int *wgrad_seen) {
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  char line[4096];
  int bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "gg_fp8_wgrad_kernel")) *wgrad_seen = 1;
    if (!strstr(line, "serialized")) continue;
    fprintf(stderr, "  %s: %s", path, line);
    ++bad;
  }
  fclose(f);
  return bad;
}

/* Scans the reports in one folder; returns how many it read. */
static int scan_dir(const char *dir, int *bad, int *wgrad_seen) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int reports = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 6, ".ptxas") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    *bad += scan(path, wgrad_seen);
    ++reports;
  }
  closedir(d);
  return reports;
}

void test_build_wgmma_pipelined(void) {
  static const char *dirs[] = {"common", "move", "gemm", "pointwise", "v1"};
  int reports = 0, bad = 0, wgrad_seen = 0;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; ++i) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/kernels/%s", MOK_BUILD_DIR, dirs[i]);
    reports += scan_dir(dir, &bad, &wgrad_seen);
  }
  printf("    %d ptxas reports under %s/kernels, %d serialized kernels\n", reports, MOK_BUILD_DIR,
         bad);
  /* each CUDA source under kernels/ leaves a report; the weight gradient's names its kernel */
  CHECK(reports >= 10 && wgrad_seen && bad == 0);
}
