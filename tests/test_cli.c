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

/* The folder of this test executable (the build folder). */
static int build_dir(char *dir, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
  if (n <= 0) return -1;
  dir[n] = 0;
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  return 0;
}

/* Runs a shell command with stderr folded in; returns its exit code and its output in out. */
static int run_cmd(const char *cmd, char *out, size_t cap) {
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  size_t len = fread(out, 1, cap - 1, f);
  out[len] = 0;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs `<build folder>/mok args`. */
static int run_mok(const char *args, char *out, size_t cap) {
  char dir[4096], cmd[8192];
  if (build_dir(dir, sizeof dir) != 0) return -1;
  snprintf(cmd, sizeof cmd, "'%s/mok' %s 2>&1", dir, args);
  return run_cmd(cmd, out, cap);
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
  /* size flags change the named shape's sizes and keep the rest (here deepseek-v3's k = 8) */
  CHECK(run_mok("run --cpu --seed 3 --shape deepseek-v3 --tokens 2 --hidden 128 --experts 16 "
                "--intermediate 64 --shared 64", out, sizeof out) == 0);
  CHECK(strstr(out, "T=2 H=128 E=16 I=64 k=8 Is=64") != NULL);
  /* no --seed: the fixed default, printed, so two runs agree */
  CHECK(run_mok("run --cpu --tokens 16", out, sizeof out) == 0);
  CHECK(run_mok("run --cpu --tokens 16", again, sizeof again) == 0);
  a = strstr(out, "checksum"), b = strstr(again, "checksum");
  CHECK(strstr(out, "seed 1\n") != NULL && a && b && strncmp(a, b, 60) == 0);
  /* GPU-only flags on the CPU path are refused, not ignored; --samples 0 means no check */
  CHECK(run_mok("run --cpu --tokens 16 --iters 5", out, sizeof out) == 2);
  CHECK(strstr(out, "--iters applies to the GPU path only") != NULL);
  CHECK(run_mok("run --cpu --tokens 16 --plan path=grouped", out, sizeof out) == 2);
  CHECK(strstr(out, "--plan applies to the GPU path only") != NULL);
  CHECK(run_mok("run --cpu --tokens 16 --breakdown", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --tokens 16 --samples 0", out, sizeof out) == 0);
  CHECK(strstr(out, "gradient check: none (--samples 0)") != NULL && strstr(out, "checksum") != NULL);
  /* a problem beyond the machine's memory: its size, then a clear refusal, not a crash */
  CHECK(run_mok("run --cpu --hidden 65536 --intermediate 65536", out, sizeof out) == 2);
  CHECK(strstr(out, "GiB of host memory") != NULL && strstr(out, "needs more host memory") != NULL);
  CHECK(run_mok("run --cpu --tokens -3", out, sizeof out) == 2);
  CHECK(strstr(out, "--tokens wants an integer") != NULL);
  CHECK(run_mok("run --cpu --routing sideways", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --shape nope", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --experts 6 --ranks 4", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --topk 9", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --clamp -1", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --frobnicate 1", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --path sideways", out, sizeof out) == 2);
  CHECK(strstr(out, "--path wants auto, fused, grouped or oracle") != NULL);
  CHECK(run_mok("run --cpu --path v1", out, sizeof out) == 2); /* the oracle's old name */
  CHECK(run_mok("run --cpu --plan shared_fwd=sideways", out, sizeof out) == 2);
  CHECK(strstr(out, "--plan wants KEY=VALUE") != NULL);
  CHECK(run_mok("run --cpu --plan no_such_field=1", out, sizeof out) == 2);
  CHECK(run_mok("run --cpu --gg-flags 8", out, sizeof out) == 2); /* no tuning flags any more */
  CHECK(run_mok("run --cpu --tokens 8 --workspace-tokens 5", out, sizeof out) == 2);
  CHECK(strstr(out, "--workspace-tokens 5 is below the 8 tokens of a step") != NULL);
  CHECK(run_mok("run --cpu --tokens 8 --workspace-tokens 16 --breakdown", out, sizeof out) == 2);
  CHECK(strstr(out, "leave out --workspace-tokens") != NULL);
  CHECK(run_mok("run --cpu --dtype fp4", out, sizeof out) == 2);
  CHECK(strstr(out, "--dtype wants bf16 or fp8") != NULL);
  CHECK(run_mok("launch", out, sizeof out) == 2);
  CHECK(run_mok("", out, sizeof out) == 2);
  CHECK(run_mok("--help", out, sizeof out) == 0 && strstr(out, "usage: mok run") != NULL);
  CHECK(run_mok("shapes", out, sizeof out) == 0 && strstr(out, "deepseek-v3") != NULL);
  CHECK(run_mok("version", out, sizeof out) == 0 && strncmp(out, "mok ", 4) == 0);
}

/* The Python ctypes layer against this build's library (tests/python/test_capi.py). */
void test_python_capi(void) {
  static char out[1 << 14];
  char dir[4096], cmd[8192];
  CHECK(build_dir(dir, sizeof dir) == 0);
  const char *script = "tests/python/test_capi.py"; /* from the source tree we are run in */
  if (access(script, R_OK) != 0) {
    CHECK(!"run the tests from the source tree's root");
    return;
  }
  snprintf(cmd, sizeof cmd, "MOK_LIBRARY='%s/libmok.so' python3 %s 2>&1", dir, script);
  int rc = run_cmd(cmd, out, sizeof out);
  if (rc != 0) fprintf(stderr, "%s", out);
  CHECK(rc == 0 && strstr(out, "python capi: ok") != NULL);
}
