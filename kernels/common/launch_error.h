/* launch_error.h — a failed CUDA runtime or driver call inside a kernel library launcher
 * (kernels/gemm, kernels/pointwise), recorded for the calling host thread with what failed and
 * where, and returned as MOK_ERR_CUDA. The layer's API (api/gpu_workspace.c) moves the record
 * into mok_last_error() and clears it. Host C; implemented in launch_error.cu. */
#ifndef MOK_LAUNCH_ERROR_H
#define MOK_LAUNCH_ERROR_H

#include "include/mok.h"

#ifdef __cplusplus
extern "C" {
#endif

/* code: a cudaError_t, or a CUresult when driver != 0. Returns MOK_ERR_CUDA. */
mok_status mok_kernel_failed(int code, int driver, const char *what, const char *file, int line);
/* The latest record of this host thread ("" while none, or once cleared). */
const char *mok_kernel_last_error(void);
void mok_kernel_clear_error(void);

#ifdef __cplusplus
}
#endif

/* Early returns from a launcher: a failed runtime call, the launch just made with <<<...>>>, a
 * failed mok status. */
#define MOK_KCUDA(expr)                                                 \
  do {                                                                  \
    const cudaError_t c_ = (expr);                                      \
    if (c_ != cudaSuccess)                                              \
      return mok_kernel_failed((int)c_, 0, #expr, __FILE__, __LINE__);  \
  } while (0)
#define MOK_KLAUNCHED() MOK_KCUDA(cudaGetLastError())
#define MOK_KTRY(x)                   \
  do {                                \
    mok_status s_ = (x);              \
    if (s_ != MOK_SUCCESS) return s_; \
  } while (0)

#endif /* MOK_LAUNCH_ERROR_H */
