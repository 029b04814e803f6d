/* grouped_gemm_tmap.h — internal host helpers of the grouped GEMM: TMA tensor-map encoding
 * (through the runtime's driver entry point, so no link against libcuda), device queries and the
 * benchmark tuning hook.
 * Implemented in grouped_gemm_tmap.cu. Not part of the public API. */
#ifndef MOK_GROUPED_GEMM_TMAP_H
#define MOK_GROUPED_GEMM_TMAP_H

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

/* Tuning hook for benchmarks and `mok run --gg-cluster/--gg-flags` (not thread-safe; 0 restores
 * each default): the raster group in work units, the cluster size of the row-grouped calls (1 or
 * 2; 2 multicasts B), a cap on the grid in CTAs, and flags. BF16: 1 = clusters of 2 without
 * multicast, 8 / 16 = consumer warpgroups staggered by 2 / 3 k-blocks. FP8: 2 = two partial
 * accumulators, 4 = clusters of 2, 16 / 32 = two / three consumer warpgroups, 64 = the direct
 * epilogue with one more stage (2, 16, 32 and 64 also move gate+up off its default, the 256-column
 * kernel), 128 = the 256-column kernel (now the default: no effect; + 4: in cluster pairs), 256 =
 * pushed products kept on the 128-column kernel, 512 = the 256-column kernel's consumer
 * warpgroups issuing without taking turns (the previous default), 1024 = its plain products
 * storing c from registers (the previous default), 2048 = the layer's FP8 forward MLP as two
 * launches (gate+up, then down) instead of one (grouped_gemm_fp8_mlp.cu), 4096 = that one launch
 * claiming down tiles as soon as their rows are ready (not once gate+up ran out), 8192 = the
 * layer's FP8 dispatch pulled inside that one launch (the shared expert then in line), not by a
 * kernel of its own beside the shared expert, 16384 = the FP8 weight gradient with per-expert B
 * scales promoting each token block's partial (the previous default) instead of chaining the
 * blocks into a rescaled accumulator, 32768 = the layer's FP8 SwiGLU backward in d_act's epilogue
 * (grouped_gemm_fp8_dswiglu.cuh), not as a row kernel of its own after d_act, 65536 = the layer's
 * FP8 forward joining the shared expert's side stream before its one-launch MLP (the previous
 * order), not only before the combine, where the MLP starts beside the shared expert's down GEMM,
 * 131072 = the rescaled FP8 weight gradient issuing an expert's last token block whole (its
 * padding tokens' zero codes through the tensor cores too), 262144 = that kernel reading B's
 * column scales from global memory at each tile's end, not from the last stage, 524288 = that
 * kernel on single CTAs, each loading its whole B tile, not in cluster pairs sharing B by
 * multicast. The bits are shared: one value sets every kernel's probes.
 * gg_last_grid() is the grid of the last launch. */
#ifdef __cplusplus
extern "C" {
#endif
void gg_set_tuning(int group_m, int cluster, int grid_ctas, int flags);
int gg_last_grid(void);
int gg_tuning_flags(void); /* the flags above */
/* A failed CUDA runtime call (code: a cudaError_t) or driver call (a CUresult, driver = 1) in the
 * grouped GEMM: recorded for this host thread with what failed and where, and returned as
 * MOK_ERR_CUDA. gg_last_error() is the latest such record ("" while none, or once cleared); the
 * layer's API moves it into mok_last_error and clears it. */
mok_status gg_cuda_failed(int code, int driver, const char *what, const char *file, int line);
const char *gg_last_error(void);
void gg_clear_last_error(void);
#define GG_CUDA(expr)                                                     \
  do {                                                                    \
    const cudaError_t c_ = (expr);                                        \
    if (c_ != cudaSuccess)                                                \
      return gg_cuda_failed((int)c_, 0, #expr, __FILE__, __LINE__);       \
  } while (0)
/* The launch just made with <<<...>>>: its error, if any, recorded as above. */
#define GG_LAUNCHED() GG_CUDA(cudaGetLastError())
/* mok_gg_set_rows_hint's value on this host thread (0: none; the choices use the capacity). */
int64_t gg_rows_hint(void);
/* ctas (co-resident CTAs) capped by mok_gg_set_max_ctas on this host thread, whole clusters of cl. */
int gg_ctas_cap(int ctas, int cl);
#ifdef __cplusplus
}
#endif

#endif /* MOK_GROUPED_GEMM_TMAP_H */
