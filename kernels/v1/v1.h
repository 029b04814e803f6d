/* v1_kernels.h — C entry points of the v1 (unfused, correctness-first) GPU path's kernels: the
 * grouped tensor-core GEMMs, token movement between ranks, SwiGLU, reductions, and the device
 * schedule build. Every function only enqueues work on the given stream and returns the launch
 * status. Kernels read the workspace's sticky error word and skip their work when it is set (final
 * outputs are then written as NaN). */
#ifndef MOK_V1_KERNELS_H
#define MOK_V1_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- grouped GEMM (mma.sync m16n8k16 bf16, fp32 accumulation) ------------------------------ */
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

/* ---- token movement ----------------------------------------------------------------------- */
typedef struct {
  char *const *peer_base;       /* device [ep]: each rank's symmetric base address, mapped here */
  int rank, ep;
  int64_t tokens;               /* T */
  int top_k;                    /* k */
  int64_t hidden;               /* H */
  const int32_t *row_src;       /* schedule: [capacity] */
  const int32_t *expert_offset; /* schedule: [experts_local + 1] */
  int experts_local;
  int64_t capacity;
  int32_t *err;
  int ctas;                     /* the row kernels' grid: 0, a CTA per 8 rows (every SM); > 0,
                                   that many CTAs of 32 warps walking the rows with the grid's
                                   stride, so the other SMs stay free (the shared expert runs
                                   beside the dispatch and the reverse combine)              */
} v1_route;

/* recv[row] = x of (src rank, token) for each real row (pulled from the source rank's symmetric
 * buffer at x_off, [T, H] bf16); padding rows get zeros. */
cudaError_t v1_dispatch_pull(const v1_route *r, size_t x_off, void *recv, cudaStream_t stream);

/* FP8 forward dispatch: pulls each real row's e4m3 codes (source's symmetric [T, H] at x8_off) into
 * recv8 [capacity, H] and its fp32 scales (source's [T, H / 128] at s_off) into scales
 * [H / 128][m_pad] (m_pad >= capacity); padding rows get zero codes and scale 1. The same GEMM
 * input, bit for bit, as v1_dispatch_pull followed by mok_fp8_quant_act. */
cudaError_t v1_dispatch_pull_fp8(const v1_route *r, size_t x8_off, size_t s_off, void *recv8,
                                 float *scales, int64_t m_pad, cudaStream_t stream);

/* The same result as v1_dispatch_pull, moved by bulk copies (cp.async.bulk through shared memory)
 * from `ctas` CTAs: the comm-SM mechanism of the fused path, measured against the plain one. */
cudaError_t v1_dispatch_pull_bulk(const v1_route *r, size_t x_off, void *recv, int ctas,
                                  cudaStream_t stream);

/* Pushes rows[row] ([capacity, H] bf16) to the source rank's symmetric [T*k, H] buffer at dst_off,
 * slot (token * k + j). Used by forward combine and backward reverse-dispatch. */
cudaError_t v1_push_rows(const v1_route *r, const void *rows, size_t dst_off, cudaStream_t stream);

/* y[t] = sum_j rw[t, j] * slots[t*k + j] (j order) + shared[t] (if non-NULL); fp32 math, bf16 out. */
cudaError_t v1_combine_reduce(int64_t T, int k, int64_t H, const void *slots, const float *rw,
                              const void *shared_out, void *y, const int32_t *err,
                              cudaStream_t stream);

/* Backward reverse-combine: for each real row, pulls dy[token] (symmetric, dy_off) and
 * rw[token * k + j] (symmetric fp32, rw_off) from the source rank, writes d_out[row] = rw * dy,
 * and pushes dot(dy, out_rows[row]) into the source rank's fp32 [T*k] buffer at drw_off. Padding
 * rows of d_out get zeros. */
cudaError_t v1_reverse_combine(const v1_route *r, size_t dy_off, size_t rw_off, size_t drw_off,
                               const void *out_rows, void *d_out, cudaStream_t stream);

/* FP8, the router-weight gradient fused into the SwiGLU backward: for each real row, d_out[row] =
 * rw * dy (bf16), the unweighted dy quantized 1x128 into q [rows, H] e4m3 with scales
 * [H / 128][m_pad] fp32, and rw_rows[row] = rw; nothing pushed. Padding rows: zeros, zero codes,
 * scale 1, rw 0. */
cudaError_t v1_reverse_combine_fp8(const v1_route *r, size_t dy_off, size_t rw_off, void *d_out,
                                   void *q, float *scales, int64_t m_pad, float *rw_rows,
                                   cudaStream_t stream);

/* The FP8 SwiGLU backward with the router-weight gradient: per real row, g [rows, I] bf16 (the
 * unweighted product dy W_down^T), d_act = rw_rows[row] * g, dgu [rows, 2I] from d_act and the
 * packed pre-activations (as v1_swiglu_backward_packed), and d_rw = sum_i g_i * act_i, act the
 * forward's codes [rows, I] e4m3 times their scales [I / 128][m_pad] (what its down GEMM read),
 * pushed into the source rank's fp32 [T*k] buffer at drw_off. Padding rows of dgu get zeros.
 * q (or NULL): dgu also quantized 1x128 into q [rows, 2I] e4m3 and q_scales [2I / 128][q_m_pad]
 * (q_m_pad >= capacity), bit for bit what mok_fp8_quant_act_upto makes of dgu. I % 128 == 0. */
cudaError_t v1_swiglu_backward_rw(const v1_route *r, size_t drw_off, const void *g,
                                  const void *preact, const void *act, const float *act_scales,
                                  int64_t m_pad, const float *rw_rows, void *dgu, void *q,
                                  float *q_scales, int64_t q_m_pad, int64_t I, int use_limit,
                                  float limit, cudaStream_t stream);

/* The ops layer's variant of the above with dy rows already pulled (dy_rows [capacity, H], local):
 * rw from the source rank's buffer through rw_base (rw_off), d_rw pushed through r->peer_base. */
cudaError_t v1_weight_rows(const v1_route *r, char *const *rw_base, size_t rw_off, size_t drw_off,
                           const void *dy_rows, const void *out_rows, void *d_out,
                           cudaStream_t stream);

/* dx[t] = sum_j parts[t*k + j] (j order) + shared_dx[t] (if non-NULL), bf16 out;
 * drw_out[i] = drw_in[i] for i < T*k. NaN everywhere when the error word is set. */
cudaError_t v1_dx_reduce(int64_t T, int k, int64_t H, const void *parts, const void *shared_dx,
                         void *dx, const float *drw_in, float *drw_out, const int32_t *err,
                         cudaStream_t stream);

/* ---- SwiGLU ------------------------------------------------------------------------------ */
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

/* The same from packed bf16 pre-activations preact [rows, 2I] (g | u), as the grouped GEMM's
 * SwiGLU epilogue stores them. */
cudaError_t v1_swiglu_backward_packed(const void *da, const void *preact, void *dgu,
                                      int64_t rows_max, const int32_t *rows_dev, int64_t I,
                                      int use_limit, float limit, const int32_t *err,
                                      cudaStream_t stream);

/* dst[0, n) = NaN (fp32 when fp32 != 0, else bf16) if the error word is set; else nothing. */
cudaError_t v1_nan_if_error(void *dst, int64_t n, int fp32, const int32_t *err,
                            cudaStream_t stream);

/* ---- schedule build on the device (schedule_core.h run by GPU threads) ------------------- */
typedef struct {
  char *const *peer_base;  /* every rank's symmetric base                                */
  size_t topk_off;         /* offset of the staged topk [T, k] int32 in the symmetric buffer */
  size_t count_off;        /* offset of the staged token count (int32) of this build          */
  int rank, ep;
  int64_t tokens;          /* T of the shape: each rank's stride in topk and in the slots;
                              a build's count (each rank's own) is at most that              */
  int top_k, num_experts, experts_local, tile_m;
  int64_t capacity;
  int chunks_per_rank;     /* chunks of one rank's tokens                               */
  int64_t chunk_tokens;    /* tokens per chunk (the last chunk of a rank may hold fewer)   */
  int32_t *topk_all;       /* [ep * T * k] gathered routing                              */
  int32_t *counts;         /* [ep * chunks_per_rank * experts_local]                     */
  int32_t *chunk_status;   /* [ep * chunks_per_rank]                                     */
  int32_t *expert_count;   /* [experts_local]                                            */
  int32_t *expert_offset;  /* [experts_local + 1]                                        */
  int32_t *row_src;        /* [capacity]                                                 */
  int32_t *err;
  int parallel;            /* 1: the parallel count / scan / fill kernels (same table)        */
} v1_sched_args;

/* Phase 0: this rank's topk [count, k] and its count staged at topk_dst and count_dst (its
 * symmetric buffer) for the peers' builds, in one kernel (a graph keeps count by value). */
cudaError_t v1_sched_stage(const int32_t *topk, int64_t count, int top_k, int32_t *topk_dst,
                           int32_t *count_dst, cudaStream_t stream);

/* The shared expert as one grouped-GEMM expert of count rows: table = {0, count rounded up to
 * 128, count, 0} (offsets, then the count), written by one thread on stream. */
cudaError_t v1_dense_table(int32_t *table, int64_t count, cudaStream_t stream);

/* Shared memory the two build phases need; the host checks it against the device limit. */
size_t v1_sched_count_smem(const v1_sched_args *a);
size_t v1_sched_scan_smem(const v1_sched_args *a);

/* Raises the kernels' dynamic shared-memory limits on the current device to what a needs, never
 * lowering them (host, once per workspace; not inside a capture; thread-safe). */
cudaError_t v1_sched_prepare(const v1_sched_args *a);
/* Phase 1 (after the topk of every rank is staged and a barrier): gather + count per chunk, one
 * scan (capacity check, cursors, offsets). Sets the error word on a bad id, duplicate or overflow. */
cudaError_t v1_sched_count_scan(const v1_sched_args *a, cudaStream_t stream);
/* Phase 2: fill per chunk, pad per expert. Skipped when the error word is set. */
cudaError_t v1_sched_fill_pad(const v1_sched_args *a, cudaStream_t stream);

/* ---- utilities --------------------------------------------------------------------------- */
/* Fills n bf16 values with v1_random_value(seed, stream_id, i, scale) (kernels/v1_random.h). */
cudaError_t v1_fill_random_bf16(void *dst, int64_t n, uint64_t seed, uint64_t stream_id,
                                float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
