/* launch_error.cu — the record of a failed CUDA call in a kernel library launcher
 * (launch_error.h): one per host thread, so that concurrent callers never see each other's. */
#include <cuda_runtime.h>
#include <stdio.h>
#include "kernels/common/launch_error.h"

static thread_local char g_last_error[384];

extern "C" mok_status mok_kernel_failed(int code, int driver, const char *what, const char *file,
                                        int line) {
  /* a driver code is printed as a number: no link against libcuda for its name */
  const char *name = driver ? "CUresult" : cudaGetErrorName((cudaError_t)code);
  snprintf(g_last_error, sizeof g_last_error, "%s at %s:%d: %s (%d)", what, file, line, name, code);
  return MOK_ERR_CUDA;
}

extern "C" const char *mok_kernel_last_error(void) { return g_last_error; }

extern "C" void mok_kernel_clear_error(void) { g_last_error[0] = '\0'; }
