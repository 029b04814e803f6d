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

/* A small, seedable generator (splitmix64), so every run draws fresh data from a printed seed. */
typedef struct { uint64_t s; } test_rng;
static inline uint64_t test_next(test_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double test_uniform(test_rng *r) { return (test_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline int test_below(test_rng *r, int n) { return (int)(test_next(r) % (uint64_t)n); }

/* The seed of this run (from MOK_TEST_SEED, else the clock); tests derive theirs from it. */
uint64_t test_seed(void);

#endif /* MOK_TEST_UTIL_H */
