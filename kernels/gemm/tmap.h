/* tmap.h — internal host helpers of the grouped GEMMs: TMA tensor-map encoding (through the
 * runtime's driver entry point, so no link against libcuda) and the device query every launcher
 * makes. Implemented in tmap.cu; a failure is recorded as kernels/common/launch_error.h says. Not
 * part of the public API. */
#ifndef MOK_GEMM_TMAP_H
#define MOK_GEMM_TMAP_H

#include <cuda.h>
#include <stdint.h>
#include "include/mok.h"

/* A 2D row-major tensor [rows, cols] of elem_bytes-sized elements (2: bf16, 1: fp8, 4: fp32) at
 * ptr, loaded / stored in boxes of box_rows x box_cols elements with 128-byte swizzle
 * (box_cols * elem_bytes must be 128). Out-of-bounds loads read zeros; stores are clipped. */
mok_status gg_make_tmap_2d(CUtensorMap *map, const void *ptr, int64_t rows, int64_t cols,
                           int elem_bytes, int box_rows, int box_cols);

/* The same over a strided view: row r starts ld elements after row r - 1 (ld >= cols), so a
 * column block of a wider matrix is a tensor of its own (reads past cols return zeros). */
mok_status gg_make_tmap_2d_ld(CUtensorMap *map, const void *ptr, int64_t rows, int64_t cols,
                              int64_t ld, int elem_bytes, int box_rows, int box_cols);

/* Multiprocessor count of the current device; MOK_ERR_NOT_SUPPORTED unless it is sm_90. */
mok_status gg_device_sms(int *sms);

#endif /* MOK_GEMM_TMAP_H */
