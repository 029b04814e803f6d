/* test_cli.c — the `mok` command end to end: the reference run passes its own check, bad arguments
 * exit 2 with a message, help and shapes work. Runs the binary beside the test executable. */
#define _POSIX_C_SOURCE 200809L /* popen, readlink */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/tests.h"
#include "tests/test_util.h"

/* Runs `<dir of this executable>/mok args` with stderr folded in; returns the exit code and the
 * output in out (truncated to cap). */
static int run_mok(const char *args, char *out, size_t cap) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/mok' %s 2>&1", exe, args);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  size_t len = fread(out, 1, cap - 1, f);
  out[len] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void test_cli(void) {
  static char out[1 << 16];
  CHECK(run_mok("run --cpu --seed 7 --tokens 40", out, sizeof out) == 0);
  CHECK(strstr(out, "checksum") != NULL);
  CHECK(strstr(out, ": PASS") != NULL);
  CHECK(strstr(out, "T=40 H=256") != NULL);
  /* the same seed gives the same checksum */
  static char again[1 << 16];
  CHECK(run_mok("run --cpu --seed 7 --tokens 40", again, sizeof again) == 0);
  const char *a = strstr(out, "checksum"), *b = strstr(again, "checksum");
  CHECK(a && b && strncmp(a, b, 60) == 0);
  CHECK(run_mok("run --cpu --seed 7 --tokens 24 --routing zipf --clamp 0.5 --ranks 4", out, sizeof out) == 0);
  CHECK(strstr(out, "4 simulated ranks, zipf routing") != NULL);
  CHECK(run_mok("run --cpu --tokens -3", out, sizeof out) == 2);
  CHECK(strstr(out, "--tokens wants an integer") != NULL);
  CHECK(run_mok("run --cpu --routing sideways", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --shape nope", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --experts 6 --ranks 4", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --topk 9", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --clamp -1", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --frobnicate 1", out, sizeof out) == 2);
  CHECK(run_mok("launch", out, sizeof out) == 2);
  CHECK(run_mok("", out, sizeof out) == 2);
  CHECK(run_mok("--help", out, sizeof out) == 0 && strstr(out, "usage: mok run") != NULL);
  CHECK(run_mok("shapes", out, sizeof out) == 0 && strstr(out, "deepseek-v3") != NULL);
  CHECK(run_mok("version", out, sizeof out) == 0 && strncmp(out, "mok ", 4) == 0);
}
