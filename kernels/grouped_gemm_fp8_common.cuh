/* grouped_gemm_fp8_common.cuh — what the FP8 grouped GEMM kernels share: the call's parameters,
 * the direct (register to global) epilogue, and the launcher of the 256-column variant
 * (grouped_gemm_fp8_wide.cu) that grouped_gemm_fp8.cu's variant choice calls. Included by
 * kernels/grouped_gemm_fp8.cu and kernels/grouped_gemm_fp8_wide.cu. */
#ifndef MOK_GROUPED_GEMM_FP8_COMMON_CUH
#define MOK_GROUPED_GEMM_FP8_COMMON_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "include/mok.h"
#include "kernels/fused_comm.h"
#include "kernels/hopper_ptx.cuh"

enum { F8_FWD = 0, F8_SWIGLU = 1 };

#define F8_BK 128 /* fp8 elements = bytes: one 128-byte swizzled row */
#define F8_MAX_EXPERTS 256

typedef struct {
  const int32_t *offset, *count;
  const float *a_scales;  /* [k / 128][m_pad]                                  */
  const float *b_scales0; /* [E, rows / 128, k / 128] (FWD: b; SWIGLU: gate)   */
  const float *b_scales1; /* SWIGLU: up                                        */
  int num_experts, expert_base;
  int n_tiles, k_blocks, m_pad;
  int b_rows;            /* rows of one expert in the weight tensor (n or inter) */
  int n_out;             /* output columns (n or inter)                         */
  int use_limit;
  float limit;
  int has_preact;
  int group_m;
  uint16_t *c0, *c1;     /* the outputs for the direct epilogue (FWD: c; SWIGLU: act, preact) */
  int push;              /* FWD: the epilogues also store each real row of c into its (token, j)
                            slot on the source rank (move: kernels/fused_comm.h)             */
  mok_gg_move move;
  int64_t move_m_total;
} f8_params;

/* Direct epilogue: the thread's bf16 pairs of 8-column groups [N8B, N8B + NG) of its fragment
 * straight to global memory, columns from col0, rows past `rows` (the warpgroup's real rows)
 * skipped. Each warp writes 8 rows x 16 bytes per store: half-sector stores, a small cost next to
 * a K = 2048-7168 main loop, for a stage of shared memory instead of a staging buffer. */
template <int N8B, int NG>
__device__ __forceinline__ void f8_store_direct(const float *acc, uint16_t *c, int64_t ld,
                                                int64_t row0, int col0, int rows, int wtid) {
  const int lane = wtid & 31;
  const int r = (wtid >> 5) * 16 + (lane >> 2);
  uint16_t *p0 = c + (row0 + r) * ld + col0 + 2 * (lane & 3);
  uint16_t *p1 = p0 + 8 * ld;
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const float *v = acc + (N8B + j) * 4;
    if (r < rows) *(uint32_t *)(p0 + 8 * j) = pack_bf16x2(v[0], v[1]);
    if (r + 8 < rows) *(uint32_t *)(p1 + 8 * j) = pack_bf16x2(v[2], v[3]);
  }
}

/* The 256-column variant (flag 128): a, b0, b1 the tensor maps of A (128-row boxes) and of the
 * weights (64-row boxes); p as for the 128-column kernel, n_tiles counting 256 output columns (FWD)
 * or 128 gate + 128 up rows (SWIGLU); cl 1, or 2 for cluster pairs sharing B. MOK_ERR_NOT_SUPPORTED
 * when the columns do not split so. */
mok_status f8_wide_launch(int mode, int cl, const CUtensorMap *a, const CUtensorMap *b0,
                          const CUtensorMap *b1, f8_params p, int64_t m_total, cudaStream_t stream);

#endif /* MOK_GROUPED_GEMM_FP8_COMMON_CUH */
