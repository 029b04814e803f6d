/* status_detail.h — records what a failed CUDA or NCCL call was, for mok_last_error (status.c).
 * Host C, no CUDA needed. */
#ifndef MOK_STATUS_DETAIL_H
#define MOK_STATUS_DETAIL_H

#include "mok.h"

/* Formats the calling thread's failure detail (printf-style) and returns status unchanged. */
mok_status mok_record_error(mok_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* How many details the calling thread has recorded: a call that returned MOK_ERR_CUDA without
 * changing it recorded none itself (the grouped GEMM's launchers keep their own record,
 * mok_kernel_last_error), so its caller moves that record into mok_last_error with its own place. */
unsigned mok_error_records(void);

#endif
