/* gpu_test.h — what the GPU test files share: the process's place in the group (one process per
 * GPU, started by tests/gpu/launch.sh), the group itself, and self-registration of test cases.
 * Every rank runs every case in the same order; a case must make the same collective calls on all
 * ranks whatever its checks find. */
#ifndef MOK_GPU_TEST_H
#define MOK_GPU_TEST_H

#include <stddef.h>
#include "mok.h"
#include "tests/test_runner.h"
#include "tests/test_util.h"

typedef struct {
  int rank, size;
  mok_group *group;
} gpu_test_ctx;

extern gpu_test_ctx gpu_ctx;

/* Rank 0's n bytes at data reach every rank (through a file beside the launcher's id file, named
 * with tag); 0 on success. Collective; a no-op for one rank. */
int gpu_test_share(void *data, size_t n, const char *tag);

/* Adds a case to the run (called from constructors, before main). */
void gpu_test_register(const char *name, void (*fn)(void));

#define GPU_TEST(fn)                                                                  \
  static void fn(void);                                                               \
  __attribute__((constructor)) static void register_##fn(void) { gpu_test_register(#fn, fn); } \
  static void fn(void)

#endif
