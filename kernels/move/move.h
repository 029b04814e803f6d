/* move.h — C entry points of the layer's token movement between ranks and its reductions
 * (move.cu): the forward dispatch (pull) and combine (push, then the reduce in j order), the
 * backward's reverse combine (pull dy, push d_router_weights) and reverse dispatch (push dx
 * parts, then the reduce), over a schedule's route. The movement that runs inside the GEMM
 * launches is in fused_move.h. Every function only enqueues work on the given stream and returns
 * the launch status. Kernels read the workspace's sticky error word and skip their work when it
 * is set (final outputs are then written as NaN). */
#ifndef MOK_MOVE_H
#define MOK_MOVE_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

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
} mok_move_route;

/* recv[row] = x of (src rank, token) for each real row (pulled from the source rank's symmetric
 * buffer at x_off, [T, H] bf16; this rank's own rows from own_x, the caller's x, where non-NULL:
 * at EP=1 nothing is staged); padding rows get zeros. */
cudaError_t mok_move_dispatch_pull(const mok_move_route *r, size_t x_off, const void *own_x, void *recv,
                                   cudaStream_t stream);

/* FP8 forward dispatch: pulls each real row's e4m3 codes (source's symmetric [T, H] at x8_off) into
 * recv8 [capacity, H] and its fp32 scales (source's [T, H / 128] at s_off) into scales
 * [H / 128][m_pad] (m_pad >= capacity); padding rows get zero codes and scale 1. The same GEMM
 * input, bit for bit, as mok_move_dispatch_pull followed by mok_fp8_quant_act. */
cudaError_t mok_move_dispatch_pull_fp8(const mok_move_route *r, size_t x8_off, size_t s_off, void *recv8,
                                 float *scales, int64_t m_pad, cudaStream_t stream);

/* Pushes rows[row] ([capacity, H] bf16) to the source rank's symmetric [T*k, H] buffer at dst_off,
 * slot (token * k + j). Used by forward combine and backward reverse-dispatch. local_row non-NULL
 * ([T*k] int32, this rank's): the rows of this rank's own tokens stay where they are, and
 * local_row[token * k + j] = row records where (-1 for every slot another rank pushes into); the
 * reduces below then read them in place. */
cudaError_t mok_move_push_rows(const mok_move_route *r, const void *rows, size_t dst_off,
                               int32_t *local_row, cudaStream_t stream);

/* The (token, j) rows a reduce sums: slots[t*k + j] ([T*k, H] bf16), or, where local_row (if
 * non-NULL) names a row of this rank's own, rows[local_row[t*k + j]] (mok_move_push_rows). The
 * same bits either way. slots NULL: every part is a local row (a workspace without slots, EP=1);
 * a slot that names none reads as NaN, so a table that missed a row cannot pass unseen. */
typedef struct {
  const void *slots;
  const int32_t *local_row;
  const void *rows;
} mok_move_parts;

/* y[t] = sum_j rw[t, j] * part(t, j) (j order) + shared[t] (if non-NULL); fp32 math, bf16 out. */
cudaError_t mok_move_combine_reduce(int64_t T, int k, int64_t H, const mok_move_parts *parts,
                                    const float *rw, const void *shared_out, void *y,
                                    const int32_t *err, cudaStream_t stream);

/* The caller's own dy [T, H] bf16 and router weights [T*k] fp32, read in place of their
 * symmetric copies for this rank's own rows (NULL: the copies; at EP=1 nothing is staged). */
typedef struct {
  const void *dy;
  const float *rw;
} mok_move_own;

/* Backward reverse-combine: for each real row, pulls dy[token] (symmetric, dy_off) and
 * rw[token * k + j] (symmetric fp32, rw_off) from the source rank (this rank's own as own says),
 * writes d_out[row] = rw * dy, and pushes dot(dy, out_rows[row]) into the source rank's fp32
 * [T*k] buffer at drw_off. Padding rows of d_out get zeros. */
cudaError_t mok_move_reverse_combine(const mok_move_route *r, size_t dy_off, size_t rw_off,
                                     const mok_move_own *own, size_t drw_off, const void *out_rows,
                                     void *d_out, cudaStream_t stream);

/* FP8, the router-weight gradient fused into the SwiGLU backward: for each real row, d_out[row] =
 * rw * dy (bf16), the unweighted dy quantized 1x128 into q [rows, H] e4m3 with scales
 * [H / 128][m_pad] fp32, and rw_rows[row] = rw; nothing pushed. Padding rows: zeros, zero codes,
 * scale 1, rw 0. */
cudaError_t mok_move_reverse_combine_fp8(const mok_move_route *r, size_t dy_off, size_t rw_off,
                                         const mok_move_own *own, void *d_out, void *q,
                                         float *scales, int64_t m_pad, float *rw_rows,
                                         cudaStream_t stream);

/* The ops layer's variant of the above with dy rows already pulled (dy_rows [capacity, H], local):
 * rw from the source rank's buffer through rw_base (rw_off), d_rw pushed through r->peer_base. */
cudaError_t mok_move_weight_rows(const mok_move_route *r, char *const *rw_base, size_t rw_off, size_t drw_off,
                           const void *dy_rows, const void *out_rows, void *d_out,
                           cudaStream_t stream);

/* dx[t] = sum_j part(t, j) (j order) + shared_dx[t] (if non-NULL), bf16 out;
 * drw_out[i] = drw_in[i] for i < T*k. NaN everywhere when the error word is set. */
cudaError_t mok_move_dx_reduce(int64_t T, int k, int64_t H, const mok_move_parts *parts,
                               const void *shared_dx, void *dx, const float *drw_in,
                               float *drw_out, const int32_t *err, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* MOK_MOVE_H */
