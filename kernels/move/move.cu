/* move.cu — the layer's token movement and reductions as kernels of their own (see move.h):
 * dispatch (pull rows from the source rank; the FP8 forward's pull of quantized rows), combine and
 * reverse dispatch (push rows to the source rank's (token, k) slots), the backward's reverse
 * combine (pull dy, push router-weight gradients), and the fixed-order per-token sums that give y
 * and dx. One warp per row, 16-byte accesses, peers through their symmetric base address.
 * The rows these kernels write (recv, d_out) and the expert outputs they read once are streamed
 * with the evict-first cache hint (st/ld .cs): a token's source row is gathered once per (token,
 * k) slot, up to k times, and the streams would otherwise push those rows out of L2 between
 * their reads. */
#include "kernels/common/device.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/move/move.h"
#include "kernels/move/route.cuh"
#include "schedule/schedule_core.h"

#define WARPS 8      /* warps per CTA of the row kernels, one row each                  */
#define WARPS_FEW 32 /* with r.ctas CTAs: more warps each, so few SMs keep NVLink busy */
#define LOAD_BATCH 4 /* 16-byte loads a lane issues before it uses any (BF16 reverse combine) */
#define PULL_BATCH 8 /* the same for the dispatch pulls, which only copy what they load     */
#define RC_BATCH 7   /* the same for the FP8 reverse combine: 28 words a lane at H = 7168     */

/* The rows this warp moves: its one row (a CTA per WARPS rows), or, with r.ctas CTAs, every
 * (grid's warps)-th row from its first. */
#define FOR_EACH_ROW(r, row)                                                                 \
  for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5),           \
               rows_ = dev_error((r).err) ? 0 : route_rows(r);                             \
       row < rows_; row += (int64_t)gridDim.x * (blockDim.x >> 5))

/* A warp copies a row of nv 16-byte words, PULL_BATCH loads per lane in flight before it stores
 * any: a remote row loaded one word at a time (the loop the compiler makes of dst[i] = s[i],
 * since dst may alias s) costs an NVLink round trip per word, and few comm SMs stay
 * latency-bound. */
__device__ __forceinline__ void copy_row(uint4 *dst, const uint4 *s, int64_t nv, int lane) {
  for (int64_t i0 = lane; i0 < nv; i0 += 32 * PULL_BATCH) {
    uint4 v[PULL_BATCH];
#pragma unroll
    for (int b = 0; b < PULL_BATCH; ++b)
      if (i0 + 32 * b < nv) v[b] = s[i0 + 32 * b];
#pragma unroll
    for (int b = 0; b < PULL_BATCH; ++b)
      if (i0 + 32 * b < nv) __stcs(dst + i0 + 32 * b, v[b]);
  }
}

/* A padding row (no source slot) of nv 16-byte words, zeroed by a warp. */
__device__ __forceinline__ void zero_row(uint4 *dst, int64_t nv, int lane) {
  for (int64_t i = lane; i < nv; i += 32) __stcs(dst + i, make_uint4(0, 0, 0, 0));
}

__global__ void __launch_bounds__(WARPS_FEW * 32) dispatch_pull_kernel(mok_move_route r, size_t x_off, const bf16 *own_x, bf16 *recv) {
  const int lane = threadIdx.x & 31;
  const int64_t nv = r.hidden / 8;
  FOR_EACH_ROW(r, row) {
    uint4 *dst = (uint4 *)(recv + row * r.hidden);
    const int32_t slot = r.row_src[row];
    if (slot < 0) {
      zero_row(dst, nv, lane);
      continue;
    }
    copy_row(dst, route_slot_row(r, x_off, own_x, slot, nv), nv, lane);
  }
}

/* FP8 dispatch: each source rank quantized its x (mok_fp8_quant_act_rows) into its symmetric
 * buffer, codes [T, H] e4m3 at x8_off and scales [T, H / 128] fp32 at s_off. A real row's codes go
 * to recv8[row] and its scales to scales[kb * m_pad + row] (the FP8 GEMM's K-block-major layout);
 * padding rows get zero codes and scale 1, what quantizing mok_move_dispatch_pull's zero rows gives, so
 * the GEMM's input is bit for bit that of pulling bf16 rows and quantizing them after the pull,
 * at half the bytes on NVLink. */
__global__ void __launch_bounds__(WARPS_FEW * 32) dispatch_pull_fp8_kernel(mok_move_route r, size_t x8_off, size_t s_off, uint8_t *recv8,
                                         float *scales, int64_t m_pad) {
  const int lane = threadIdx.x & 31;
  const int64_t nv = r.hidden / 16, kbs = r.hidden / 128;
  FOR_EACH_ROW(r, row) {
    uint4 *dst = (uint4 *)(recv8 + row * r.hidden);
    const int32_t slot = r.row_src[row];
    if (slot < 0) {
      zero_row(dst, nv, lane);
      for (int64_t kb = lane; kb < kbs; kb += 32) scales[kb * m_pad + row] = 1.0f;
      continue;
    }
    const char *base = r.peer_base[mok_sched_slot_rank(slot, r.tokens, r.top_k)];
    const int64_t t = mok_sched_slot_token(slot, r.tokens, r.top_k);
    const float *ss = (const float *)(base + s_off) + t * kbs;
    /* the first 64 scales are loaded before the codes, so their round trip overlaps the codes' */
    const float s0 = lane < kbs ? ss[lane] : 0.0f, s1 = lane + 32 < kbs ? ss[lane + 32] : 0.0f;
    copy_row(dst, (const uint4 *)(base + x8_off) + t * nv, nv, lane);
    if (lane < kbs) scales[lane * m_pad + row] = s0;
    if (lane + 32 < kbs) scales[(lane + 32) * m_pad + row] = s1;
    for (int64_t kb = lane + 64; kb < kbs; kb += 32) scales[kb * m_pad + row] = ss[kb];
  }
}

__global__ void push_rows_kernel(mok_move_route r, const bf16 *rows, size_t dst_off,
                                 int32_t *local_row) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (dev_error(r.err) || row >= route_rows(r)) return;
  const int32_t slot = r.row_src[row];
  if (slot < 0) return;
  const int64_t nv = r.hidden / 8, per_rank = r.tokens * r.top_k;
  if (local_row && mok_sched_local_slot(slot, r.tokens, r.top_k, r.rank) >= 0)
    return; /* read in place by the reduce (local_rows_kernel) */
  const int src = mok_sched_slot_rank(slot, r.tokens, r.top_k);
  uint4 *d = (uint4 *)(r.peer_base[src] + dst_off) + (slot % per_rank) * nv;
  const uint4 *s = (const uint4 *)(rows + row * r.hidden);
#pragma unroll 4
  for (int64_t i = lane; i < nv; i += 32) d[i] = s[i];
  __threadfence_system();
}

/* local_row[token * k + j] = row for each real row of this rank's own tokens, a thread per row. */
__global__ void local_rows_kernel(mok_move_route r, int32_t *local_row) {
  const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (dev_error(r.err) || row >= route_rows(r)) return;
  const int64_t i = mok_sched_local_slot(r.row_src[row], r.tokens, r.top_k, r.rank);
  if (i >= 0) local_row[i] = (int32_t)row;
}

/* One warp over a row of nv 16-byte words: dst = w * dy (bf16) and returns dot(dy, o) to every
 * lane (fp32, lanes' partial sums combined in a fixed butterfly order). */
__device__ __forceinline__ float scaled_row_and_dot(const uint4 *dy, const uint4 *o, float w, uint4 *dst,
                                                    int64_t nv, int lane) {
  float dot = 0.0f;
  for (int64_t i0 = lane; i0 < nv; i0 += 32 * LOAD_BATCH) { /* loads first (see LOAD_BATCH) */
    uint4 vd[LOAD_BATCH], vo[LOAD_BATCH];
#pragma unroll
    for (int b = 0; b < LOAD_BATCH; ++b) {
      const int64_t i = i0 + 32 * b;
      vd[b] = i < nv ? dy[i] : make_uint4(0, 0, 0, 0);
      vo[b] = i < nv ? __ldcs(o + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < LOAD_BATCH; ++b) {
      const int64_t i = i0 + 32 * b;
      if (i >= nv) break;
      float fd[8], fo[8], fw[8];
      dev_unpack8(vd[b], fd);
      dev_unpack8(vo[b], fo);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        dot += fd[q] * fo[q];
        fw[q] = w * fd[q];
      }
      __stcs(dst + i, dev_pack8(fw));
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
  return dot;
}

/* Reverse-combine, expert side: d_out[row] = rw * dy of the row's (token, k) slot, and
 * d_rw = dot(dy, out_rows[row]) pushed to the source rank's slot at drw_off. dy comes from the
 * source rank's symmetric buffer at dy_off (dy_rows NULL: the functional path pulls it here;
 * this rank's own rows from own.dy where given) or from dy_rows already pulled (the ops layer);
 * rw from rw_base[src] + rw_off (this rank's own from own.rw where given). */
__global__ void __launch_bounds__(WARPS_FEW * 32) weight_rows_kernel(mok_move_route r, char *const *rw_base, size_t rw_off, size_t drw_off,
                                   const bf16 *dy_rows, size_t dy_off, mok_move_own own,
                                   const bf16 *out_rows, bf16 *d_out) {
  const int lane = threadIdx.x & 31;
  const int64_t nv = r.hidden / 8;
  FOR_EACH_ROW(r, row) {
    uint4 *dst = (uint4 *)(d_out + row * r.hidden);
    const int32_t slot = r.row_src[row];
    if (slot < 0) {
      zero_row(dst, nv, lane);
      continue;
    }
    const float w = route_slot_f32_in(r, rw_base, rw_off, own.rw, slot);
    const uint4 *dy = dy_rows ? (const uint4 *)(dy_rows + row * r.hidden)
                              : route_slot_row(r, dy_off, own.dy, slot, nv);
    const uint4 *o = (const uint4 *)(out_rows + row * r.hidden);
    const float dot = scaled_row_and_dot(dy, o, w, dst, nv, lane);
    if (lane == 0) *route_slot_f32(r, r.peer_base, drw_off, slot) = dot;
  }
  __threadfence_system();
}

/* FP8 reverse-combine when the router-weight gradient is left to the SwiGLU backward
 * (mok_swiglu_backward_rw): d_out[row] = rw * dy (bf16, dW_down's operand), the unweighted dy
 * quantized 1x128 into q [rows, H] e4m3 and scales [H / 128][m_pad] (the d_act GEMM's A operand:
 * the steps of mok_fp8_quant_act, a half-warp per 128 values), rw_rows[row] = rw. Padding
 * rows: zeros, zero codes, scale 1, rw 0. Nothing is pushed. */
__global__ void __launch_bounds__(WARPS_FEW * 32) reverse_combine_fp8_kernel(mok_move_route r, size_t dy_off, size_t rw_off, mok_move_own own, bf16 *d_out,
                                           uint8_t *q, float *scales, int64_t m_pad,
                                           float *rw_rows) {
  const int lane = threadIdx.x & 31;
  const int64_t nv = r.hidden / 8;
  FOR_EACH_ROW(r, row) {
    uint4 *dst = (uint4 *)(d_out + row * r.hidden);
    const int32_t slot = r.row_src[row];
    const float w = slot >= 0 ? route_slot_f32_in(r, r.peer_base, rw_off, own.rw, slot) : 0.0f;
    const uint4 *dy = slot >= 0 ? route_slot_row(r, dy_off, own.dy, slot, nv) : NULL;
    /* 16 lanes hold a 128-value block: chunk i = 32 * it + lane is block i / 16 (H % 128 == 0,
     * so a half-warp is all in or all out). RC_BATCH chunks are loaded before any is used, so
     * that a warp keeps that many remote loads in flight (on few comm SMs, one at a time left
     * this kernel latency-bound). */
    for (int64_t it0 = 0; it0 * 32 < nv; it0 += RC_BATCH) {
      uint4 v[RC_BATCH];
#pragma unroll
      for (int b = 0; b < RC_BATCH; ++b) {
        const int64_t i = (it0 + b) * 32 + lane;
        v[b] = i < nv && dy ? dy[i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int b = 0; b < RC_BATCH; ++b) {
        if ((it0 + b) * 32 >= nv) break; /* the same for the whole warp */
        const int64_t i = (it0 + b) * 32 + lane;
        float f[8], fw[8];
        dev_unpack8(v[b], f);
#pragma unroll
        for (int j = 0; j < 8; ++j) fw[j] = w * f[j];
        f8_quant_block8(f, q + row * r.hidden + i * 8, scales + (i / 16) * m_pad + row, lane,
                        i < nv);
        if (i < nv) __stcs(dst + i, dev_pack8(fw));
      }
    }
    if (lane == 0) rw_rows[row] = w;
  }
}

/* The 16-byte word c of part (t, j) of a reduce (mok_move_parts). */
__device__ __forceinline__ uint4 part_word(const mok_move_parts &p, int64_t slot, int64_t nv,
                                           int64_t c) {
  const int32_t row = p.local_row ? p.local_row[slot] : -1;
  if (row >= 0) return ((const uint4 *)p.rows)[row * nv + c];
  if (!p.slots) return make_uint4(0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u); /* bf16 NaN */
  return ((const uint4 *)p.slots)[slot * nv + c];
}

__global__ void combine_reduce_kernel(int64_t T, int k, int64_t H, mok_move_parts parts,
                                      const float *rw, const bf16 *shared_out, bf16 *y,
                                      const int32_t *err) {
  const int64_t nv = H / 8;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * nv) return;
  const int64_t t = idx / nv, c = idx % nv;
  float acc[8];
  if (dev_error(err)) {
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] = dev_nan();
  } else {
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] = 0.0f;
    for (int j = 0; j < k; ++j) {
      const float w = rw[t * k + j];
      float f[8];
      dev_unpack8(part_word(parts, t * k + j, nv, c), f);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += w * f[q];
    }
    if (shared_out) {
      float f[8];
      dev_unpack8(((const uint4 *)shared_out)[t * nv + c], f);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += f[q];
    }
  }
  ((uint4 *)y)[t * nv + c] = dev_pack8(acc);
}

__global__ void dx_reduce_kernel(int64_t T, int k, int64_t H, mok_move_parts parts,
                                 const bf16 *shared_dx, bf16 *dx, const float *drw_in,
                                 float *drw_out, const int32_t *err) {
  const int64_t nv = H / 8;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int bad = dev_error(err);
  if (idx < T * k) drw_out[idx] = bad ? dev_nan() : drw_in[idx];
  if (idx >= T * nv) return;
  const int64_t t = idx / nv, c = idx % nv;
  float acc[8];
  if (bad) {
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] = dev_nan();
  } else {
#pragma unroll
    for (int q = 0; q < 8; ++q) acc[q] = 0.0f;
    for (int j = 0; j < k; ++j) {
      float f[8];
      dev_unpack8(part_word(parts, t * k + j, nv, c), f);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += f[q];
    }
    if (shared_dx) {
      float f[8];
      dev_unpack8(((const uint4 *)shared_dx)[t * nv + c], f);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += f[q];
    }
  }
  ((uint4 *)dx)[t * nv + c] = dev_pack8(acc);
}

static unsigned row_blocks(int64_t capacity) { return (unsigned)((capacity + WARPS - 1) / WARPS); }

/* The grid of a row kernel that honours r->ctas (see mok_move_route): CTAs and threads per CTA. */
static dim3 row_grid(const mok_move_route *r) {
  if (r->ctas <= 0) return dim3(row_blocks(r->capacity));
  const int64_t need = (r->capacity + WARPS_FEW - 1) / WARPS_FEW;
  return dim3((unsigned)(need < r->ctas ? need : r->ctas));
}
static unsigned row_threads(const mok_move_route *r) { return (r->ctas > 0 ? WARPS_FEW : WARPS) * 32; }

extern "C" cudaError_t mok_move_dispatch_pull(const mok_move_route *r, size_t x_off, const void *own_x,
                                              void *recv, cudaStream_t stream) {
  if (r->capacity <= 0) return cudaSuccess;
  dispatch_pull_kernel<<<row_grid(r), row_threads(r), 0, stream>>>(*r, x_off, (const bf16 *)own_x,
                                                                   (bf16 *)recv);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_dispatch_pull_fp8(const mok_move_route *r, size_t x8_off, size_t s_off,
                                            void *recv8, float *scales, int64_t m_pad,
                                            cudaStream_t stream) {
  if (r->capacity <= 0) return cudaSuccess;
  if (r->hidden % 128 != 0 || m_pad < r->capacity) return cudaErrorInvalidValue;
  dispatch_pull_fp8_kernel<<<row_grid(r), row_threads(r), 0, stream>>>(
      *r, x8_off, s_off, (uint8_t *)recv8, scales, m_pad);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_push_rows(const mok_move_route *r, const void *rows, size_t dst_off,
                                          int32_t *local_row, cudaStream_t stream) {
  if (local_row) { /* -1: a slot another rank pushes into (or none does) */
    const cudaError_t e =
        cudaMemsetAsync(local_row, 0xFF, (size_t)(r->tokens * r->top_k) * 4, stream);
    if (e != cudaSuccess) return e;
    if (r->capacity > 0)
      local_rows_kernel<<<(unsigned)((r->capacity + 255) / 256), 256, 0, stream>>>(*r, local_row);
    if (r->ep == 1) return cudaGetLastError(); /* every row stays */
  }
  if (r->capacity <= 0) return cudaSuccess;
  push_rows_kernel<<<row_blocks(r->capacity), WARPS * 32, 0, stream>>>(*r, (const bf16 *)rows,
                                                                       dst_off, local_row);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_reverse_combine(const mok_move_route *r, size_t dy_off, size_t rw_off,
                                          const mok_move_own *own, size_t drw_off,
                                          const void *out_rows, void *d_out, cudaStream_t stream) {
  if (r->capacity <= 0) return cudaSuccess;
  weight_rows_kernel<<<row_grid(r), row_threads(r), 0, stream>>>(
      *r, r->peer_base, rw_off, drw_off, NULL, dy_off, *own, (const bf16 *)out_rows, (bf16 *)d_out);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_reverse_combine_fp8(const mok_move_route *r, size_t dy_off, size_t rw_off,
                                              const mok_move_own *own, void *d_out, void *q,
                                              float *scales, int64_t m_pad, float *rw_rows,
                                              cudaStream_t stream) {
  if (r->capacity <= 0) return cudaSuccess;
  reverse_combine_fp8_kernel<<<row_grid(r), row_threads(r), 0, stream>>>(
      *r, dy_off, rw_off, *own, (bf16 *)d_out, (uint8_t *)q, scales, m_pad, rw_rows);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_weight_rows(const mok_move_route *r, char *const *rw_base, size_t rw_off,
                                      size_t drw_off, const void *dy_rows, const void *out_rows,
                                      void *d_out, cudaStream_t stream) {
  if (r->capacity <= 0) return cudaSuccess;
  const mok_move_own none = {NULL, NULL};
  weight_rows_kernel<<<row_grid(r), row_threads(r), 0, stream>>>(
      *r, rw_base, rw_off, drw_off, (const bf16 *)dy_rows, 0, none, (const bf16 *)out_rows,
      (bf16 *)d_out);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_combine_reduce(int64_t T, int k, int64_t H,
                                               const mok_move_parts *parts, const float *rw,
                                               const void *shared_out, void *y,
                                               const int32_t *err, cudaStream_t stream) {
  int64_t n = T * (H / 8);
  if (n <= 0) return cudaSuccess;
  combine_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
      T, k, H, *parts, rw, (const bf16 *)shared_out, (bf16 *)y, err);
  return cudaGetLastError();
}

extern "C" cudaError_t mok_move_dx_reduce(int64_t T, int k, int64_t H,
                                          const mok_move_parts *parts, const void *shared_dx,
                                          void *dx, const float *drw_in, float *drw_out,
                                          const int32_t *err, cudaStream_t stream) {
  int64_t n = T * (H / 8);
  if (T * k > n) n = T * k;
  if (n <= 0) return cudaSuccess;
  dx_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
      T, k, H, *parts, (const bf16 *)shared_dx, (bf16 *)dx, drw_in, drw_out, err);
  return cudaGetLastError();
}
