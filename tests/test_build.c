/* test_build.c — what the build itself must show: no wgmma kernel of the library lost its
 * pipeline. ptxas reports, per kernel, when it had to serialize the wgmma instructions
 * ("Potential Performance Loss: wgmma.mma_async instructions are serialized", C7510-C7520): such
 * a kernel still computes the right result, an order of magnitude slower, and a small change
 * near the register limit can cause it. The Makefile
 * keeps each CUDA object's ptxas report beside it (<object>.ptxas); this test reads them. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include "tests/tests.h"
#include "tests/test_util.h"

#ifndef MOK_CUDA_HOME
#define MOK_CUDA_HOME "/usr/local/cuda"
#endif
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

/* Runs a shell command; returns its exit status (-1 if it could not run). */
static int sh(const char *cmd) {
  const int rc = system(cmd);
  return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* The public headers compile without the CUDA include path (a CPU-reference user needs none), in
 * C and C++, and beside the CUDA runtime's own header (the stream typedef appears in both). */
void test_build_headers_without_cuda(void) {
  const char *const cmds[] = {
      "printf '#include \"mok_reference.h\"\\n' | cc -std=c11 -Wall -Wextra -Werror -Iinclude "
      "-fsyntax-only -x c -",
      "printf '#include \"mok_reference.h\"\\n' | c++ -Wall -Wextra -Werror -Iinclude "
      "-fsyntax-only -x c++ -",
      "printf '#include <cuda_runtime_api.h>\\n#include \"mok.h\"\\n' | cc -std=c11 -Wall -Werror "
      "-Iinclude -I" MOK_CUDA_HOME "/include -fsyntax-only -x c -",
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; ++i) failed += sh(cmds[i]) != 0;
  CHECK(failed == 0);
}

/* make install into a fresh prefix, then a program built with only pkg-config's flags links
 * against the installed library and runs the CPU reference through it. */
void test_build_install_and_pkg_config(void) {
  char prefix[] = "/tmp/mok-install-XXXXXX";
  CHECK(mkdtemp(prefix) != NULL);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "make -s install PREFIX=%s >/dev/null && test -f %s/lib/pkgconfig/mok.pc && "
           "printf '%%s\\n' '#include <stdio.h>' '#include \"mok_reference.h\"' "
           "'int main(void) { mok_shape s = {64, 128, 8, 128, 2, 0}; mok_ref_problem p;' "
           "'  mok_status st = mok_ref_problem_make(&p, &s, 1, MOK_ROUTE_UNIFORM, 1);' "
           "'  if (st == MOK_SUCCESS) st = mok_ref_forward(&p.cfg, p.ranks, p.y);' "
           "'  if (st == MOK_SUCCESS) printf(\"y[0] %%g\\n\", p.y[0][0]), mok_ref_problem_free(&p);' "
           "'  return st != MOK_SUCCESS || mok_status_string(st) == NULL; }' > %s/use.c && "
           "cc -std=c11 -Wall -Werror %s/use.c -o %s/use "
           "$(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags --libs mok) && %s/use",
           prefix, prefix, prefix, prefix, prefix, prefix, prefix);
  const int rc = sh(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf %s", prefix);
  sh(cmd);
  CHECK(rc == 0);
}
