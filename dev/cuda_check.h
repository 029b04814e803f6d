/* cuda_check.h — the dev programs' CUDA error check: CHECK(call) prints the file, line and the
 * runtime's message and exits on any error. */
#ifndef MOK_DEV_CUDA_CHECK_H
#define MOK_DEV_CUDA_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

#endif /* MOK_DEV_CUDA_CHECK_H */
