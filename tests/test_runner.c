/* test_runner.c — runs test tables, reports each test and the closing summary line. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tests/test_runner.h"
#include "tests/test_util.h"

int mok_test_failures = 0;
static uint64_t g_seed = 0;

uint64_t test_seed(void) { return g_seed; }

int test_run_all(const test_case *cases, int n, int argc, char **argv) {
  const char *filter = argc > 1 ? argv[1] : NULL;
  const char *env = getenv("MOK_TEST_SEED");
  uint64_t base = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
  printf("seed %" PRIu64 " (set MOK_TEST_SEED to repeat)\n", base);
  int passed = 0, failed = 0;
  for (int i = 0; i < n; ++i) {
    if (filter && !strstr(cases[i].name, filter)) continue;
    g_seed = base + (uint64_t)i * 0x632BE59BD9B4E019ull;
    mok_test_failures = 0;
    clock_t t0 = clock();
    cases[i].fn();
    double ms = 1000.0 * (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (mok_test_failures == 0) {
      ++passed;
      printf("PASS %-44s %8.1f ms\n", cases[i].name, ms);
    } else {
      ++failed;
      printf("FAIL %-44s (%d checks failed)\n", cases[i].name, mok_test_failures);
    }
    fflush(stdout);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
