/* status.c — mok_status_string: one sentence per status code; mok_last_error: the detail of the
 * calling thread's latest failed CUDA or NCCL call (api/status_detail.h records it). */
#include <stdarg.h>
#include <stdio.h>
#include "api/status_detail.h"
#include "mok.h"

static _Thread_local char last_error[512];
static _Thread_local unsigned records;

const char *mok_last_error(void) { return last_error; }

unsigned mok_error_records(void) { return records; }

mok_status mok_record_error(mok_status status, const char *fmt, ...) {
  ++records;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

const char *mok_status_string(mok_status status) {
  switch (status) {
    case MOK_SUCCESS: return "success";
    case MOK_ERR_INVALID_ARGUMENT: return "invalid argument (NULL pointer, unknown enum value or knob out of range)";
    case MOK_ERR_INVALID_SHAPE: return "invalid shape (a size is negative, zero where it must not be, or too large)";
    case MOK_ERR_MISALIGNED: return "misaligned size or pointer (H, I, Is must be multiples of 128 on the GPU path)";
    case MOK_ERR_EXPERT_ID: return "top-k expert id out of range [0, E)";
    case MOK_ERR_DUPLICATE_EXPERT: return "a token lists the same expert twice in its top-k";
    case MOK_ERR_CAPACITY: return "routing needs more schedule rows than the configured capacity";
    case MOK_ERR_SHAPE_MISMATCH: return "ranks of the group passed different shapes or configs";
    case MOK_ERR_NOT_SUPPORTED: return "not supported by this build or machine";
    case MOK_ERR_NO_DEVICE: return "no usable CUDA device";
    case MOK_ERR_CUDA: return "CUDA runtime error";
    case MOK_ERR_NCCL: return "NCCL error";
    case MOK_ERR_OUT_OF_MEMORY: return "out of device memory";
    case MOK_ERR_TIMEOUT: return "a device-side wait for a peer timed out";
    case MOK_ERR_INTERNAL: return "internal error in mok (a broken invariant; please report)";
    case MOK_ERR_DESYNC: return "ranks of the group made different sequences of collective calls";
    default: return "unknown status";
  }
}
