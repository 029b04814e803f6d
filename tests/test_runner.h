/* test_runner.h — the runner shared by the CPU and GPU test binaries: runs a table of tests, each
 * with a fresh seed, and prints 'N passed, N failed' last. */
#ifndef MOK_TEST_RUNNER_H
#define MOK_TEST_RUNNER_H

typedef struct {
  const char *name;
  void (*fn)(void);
} test_case;

/* Runs the cases whose names contain argv[1] (all when absent); returns the process exit code. */
int test_run_all(const test_case *cases, int n, int argc, char **argv);

#endif
