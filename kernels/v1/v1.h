/* v1.h — the oracle path's kernels (MOK_PATH_ORACLE): grouped tensor-core GEMMs on mma.sync
 * with fp32 accumulation (gemm.cu) and the SwiGLU on fp32 pre-activations (swiglu.cu). The
 * oracle path runs them with the shared movement kernels (kernels/move); the other paths use
 * v1_gemm_wgrad for the one case the grouped GEMMs lack, bf16 weight gradients accumulated into.
 * Every function only enqueues work on the given stream and returns the launch status; kernels
 * skip their work when the sticky error word is set. */
#ifndef MOK_V1_H
#define MOK_V1_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- grouped GEMM (mma.sync m16n8k16 bf16, fp32 accumulation; gemm.cu) -------------------- */
typedef enum {
  V1_OUT_BF16 = 0,     /* C = acc, stored bf16            */
  V1_OUT_F32 = 1,      /* C = acc, stored fp32            */
  V1_OUT_F32_ADD = 2,  /* C += acc, fp32                  */
  V1_OUT_BF16_ADD = 3  /* C = bf16(float(C) + acc)        */
} v1_out_mode;

typedef struct {
  const void *a;            /* bf16 */
  int64_t lda;
  const void *b;            /* bf16, group g's matrix at b + g * b_group_stride */
  int64_t ldb;
  int64_t b_group_stride;
  const void *b2;           /* rows launcher, b_trans only: reduction index >= b_split reads b2 */
  int64_t b_split;
  void *c;                  /* group g's output at c + g * c_group_stride (wgrad) */
  int64_t ldc;
  int64_t c_group_stride;
  int out_mode;             /* v1_out_mode */
  int64_t m, n, k;
  const int32_t *offsets;   /* device [groups + 1], group row boundaries; NULL: one dense group */
  const int32_t *counts;    /* wgrad, grouped: device [groups], the real rows at the start of each
                               group (NULL: all of its rows); -1: the group's C is left alone   */
  int groups;
  int64_t max_rows;         /* rows launcher, grouped: bound on offsets[groups] */
  const int32_t *err;       /* sticky error word */
  int nan_on_error;         /* write NaN instead of skipping when the error word is set */
} v1_gemm_args;

/* C[r, n] = sum_k A[r, k] * B(n, k) for n < a->n, k < a->k. A is [rows, K] (lda).
 * b_trans = 0: B(n, k) = b[n * ldb + k] ([N, K], like a Linear weight);
 * b_trans = 1: B(n, k) = b[k * ldb + n] ([K, N]).
 * Grouped (offsets != NULL): rows [0, offsets[groups]) (<= max_rows), each group's row range a
 * multiple of 64, row r uses group g's B where offsets[g] <= r < offsets[g + 1].
 * Dense: rows [0, a->m), any m. N and K must be multiples of 128 and 32. */
cudaError_t v1_gemm_rows(const v1_gemm_args *a, int b_trans, cudaStream_t stream);

/* Weight gradient, per group g: C_g[m, n] = sum_{r in group g} A[r, m] * B[r, n], A [rows, M]
 * (lda), B [rows, N] (ldb). Grouped: rows [offsets[g], offsets[g+1]), or [offsets[g], offsets[g]
 * + counts[g]) (padding rows, whatever they hold, are never read); dense: rows [0, a->k).
 * Fixed summation order (deterministic). M a multiple of 64, N of 128. */
cudaError_t v1_gemm_wgrad(const v1_gemm_args *a, cudaStream_t stream);

/* ---- SwiGLU on fp32 pre-activations (swiglu.cu) ----------------------------------------- */
/* a = silu(min(g, L)) * clamp(u, -L, L) (no clamp when use_limit == 0), rows
 * [0, rows_dev ? *rows_dev : rows_max); g, u fp32 and a bf16, [rows, I] with leading dimension I. */
cudaError_t v1_swiglu_forward(const void *g, const void *u, void *a, int64_t rows_max,
                              const int32_t *rows_dev, int64_t I, int use_limit, float limit,
                              const int32_t *err, cudaStream_t stream);

/* dgu [rows, 2I]: columns [0, I) get d/dg, [I, 2I) d/du of the SwiGLU above, from da [rows, I]. */
cudaError_t v1_swiglu_backward(const void *da, const void *g, const void *u, void *dgu,
                               int64_t rows_max, const int32_t *rows_dev, int64_t I,
                               int use_limit, float limit, const int32_t *err,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_V1_H */
