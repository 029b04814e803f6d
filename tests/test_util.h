/* test_util.h — the tiny test framework: CHECK macros that count failures per test, and helpers
 * shared by the test files (fresh random data, norms). The runner is test_main.c. */
#ifndef MOK_TEST_UTIL_H
#define MOK_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

extern int mok_test_failures; /* failures in the running test */

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      ++mok_test_failures;                                                            \
      fprintf(stderr, "  CHECK failed %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
    }                                                                                 \
  } while (0)

#define CHECK_STATUS(expr, want)                                                      \
  do {                                                                                \
    int got_ = (int)(expr), want_ = (int)(want);                                      \
    if (got_ != want_) {                                                              \
      ++mok_test_failures;                                                            \
      fprintf(stderr, "  CHECK_STATUS failed %s:%d: %s gave %d, want %d\n", __FILE__, \
              __LINE__, #expr, got_, want_);                                          \
    }                                                                                 \
  } while (0)

#define CHECK_CLOSE(got, want, tol)                                                   \
  do {                                                                                \
    double g_ = (got), w_ = (want), t_ = (tol);                                       \
    if (!(fabs(g_ - w_) <= t_)) {                                                     \
      ++mok_test_failures;                                                            \
      fprintf(stderr, "  CHECK_CLOSE failed %s:%d: %s = %.9g, want %.9g (tol %.3g)\n",\
              __FILE__, __LINE__, #got, g_, w_, t_);                                  \
    }                                                                                 \
  } while (0)

/* Tests draw from the project's generator (reference/ref_inputs.h). */
#include "reference/ref_inputs.h"

/* The seed of this run (from MOK_TEST_SEED, else the clock); tests derive theirs from it. */
uint64_t test_seed(void);

#endif /* MOK_TEST_UTIL_H */
