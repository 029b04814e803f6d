/* gpu_schedule.c — the schedule object of one MoE layer invocation on the GPU path: its table
 * (built on the device from every rank's routing) and what forward keeps for backward (the pulled
 * tokens, gate / up / SwiGLU rows, expert outputs, the shared expert's activations), for every row
 * the capacity allows or, with a token ring, for the ring's regions. */
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

mok_status mok_schedule_create(mok_workspace *w, mok_schedule **out) {
  if (!w || !out) return MOK_ERR_INVALID_ARGUMENT;
  *out = NULL;
  mok_schedule *s = (mok_schedule *)calloc(1, sizeof *s);
  if (!s) return MOK_ERR_OUT_OF_MEMORY;
  s->ws = w;
  const int64_t T = w->shape.tokens, H = w->shape.hidden, I = w->shape.intermediate,
                k = w->shape.top_k, Is = w->shape.shared_intermediate, cap = w->cap;
  /* the per-row buffers: the capacity's rows, or the token ring's (every region) */
  const int64_t rows = w->pipe.ring_regions > 0 ? mok_pipe_ring_rows(&w->pipe) : cap;
  s->rows = rows;
  const int64_t nchunks = (int64_t)w->ep * w->chunks_per_rank;
  size_t off = 0, o_topk, o_counts, o_cs, o_ec, o_eo, o_rs, o_rx, o_g, o_u, o_a, o_out, o_sg, o_su, o_sa;
#define LOC(var, bytes) do { var = off; off = align_up(off + (size_t)(bytes), 256); } while (0)
  LOC(o_ec, w->el * 4);
  LOC(o_eo, (w->el + 1) * 4);
  LOC(o_topk, w->ep * T * k * 4);
  LOC(o_counts, nchunks * w->el * 4);
  LOC(o_cs, nchunks * 2 * 4); /* each chunk's status, then its validated token count */
  LOC(o_rs, cap * 4);
  /* FP8: recv_x and a hold codes and scales (mok_fp8_scales_of); with the ring, each region's
   * share (its rows a multiple of 128) holds its own */
  const int fp8 = mok_gpu_fp8(w);
  const int64_t rx = fp8 && mok_fp8_rows_bytes(rows, H) > rows * H * 2 ? mok_fp8_rows_bytes(rows, H)
                                                                        : rows * H * 2;
  const int64_t ra = fp8 && mok_fp8_rows_bytes(rows, I) > rows * I * 2 ? mok_fp8_rows_bytes(rows, I)
                                                                        : rows * I * 2;
  LOC(o_rx, rx);
  LOC(o_g, rows * I * 4);
  LOC(o_u, mok_gpu_grouped_gemms(w) ? 0 : rows * I * 4); /* grouped: g holds g | u in bf16 */
  LOC(o_a, ra);
  /* the expert outputs, for a d_router_weights from them; not with the FP8 one fused into the
   * SwiGLU backward, whose forward keeps none (0.9 GiB per rank at DSv3 EP=2) */
  const int keep_out = !(fp8 && w->config.fp8_fused_router_grad);
  LOC(o_out, keep_out ? rows * H * 2 : 0);
  LOC(o_sg, T * Is * 4);
  LOC(o_su, T * Is * 4);
  /* the shared expert's activations: bf16, or with the FP8 shared expert its codes and scales */
  const int64_t sa = w->fp8.s8_w && mok_fp8_rows_bytes(T, Is) > T * Is * 2 ? mok_fp8_rows_bytes(T, Is)
                                                                        : T * Is * 2;
  LOC(o_sa, sa);
#undef LOC
  cudaError_t e = cudaMalloc(&s->mem, off);
  if (e != cudaSuccess) {
    free(s);
    return mok_gpu_status(e);
  }
  char *m = (char *)s->mem;
  s->bytes = (int64_t)off;
  s->expert_count = (int32_t *)(m + o_ec);
  s->expert_offset = (int32_t *)(m + o_eo);
  s->topk_all = (int32_t *)(m + o_topk);
  s->counts = (int32_t *)(m + o_counts);
  s->chunk_status = (int32_t *)(m + o_cs);
  s->row_src = (int32_t *)(m + o_rs);
  s->recv_x = m + o_rx;
  s->g = m + o_g;
  s->u = mok_gpu_grouped_gemms(w) ? NULL : m + o_u;
  s->a = m + o_a;
  s->out_rows = keep_out ? m + o_out : NULL;
  s->sg = m + o_sg;
  s->su = m + o_su;
  s->sa = m + o_sa;
  s->tokens = s->built_tokens = T; /* an empty table fits any count; the first build sets it */
  /* an empty table until the first build */
  e = cudaMemset(m, 0, o_topk);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(s->mem);
    free(s);
    return mok_gpu_status(e);
  }
  *out = s;
  return MOK_SUCCESS;
}

mok_status mok_schedule_destroy(mok_schedule *s) {
  if (!s) return MOK_SUCCESS;
  cudaError_t e = cudaDeviceSynchronize();
  cudaFree(s->mem);
  free(s);
  return mok_gpu_status(e);
}

mok_status mok_schedule_set_tokens(mok_schedule *s, int64_t tokens) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  if (tokens < 0 || tokens > s->ws->shape.tokens) return MOK_ERR_INVALID_SHAPE;
  s->tokens = tokens;
  return MOK_SUCCESS;
}

mok_status mok_gpu_check_topk(const mok_schedule *s, const int32_t *topk) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  if (s->tokens * s->ws->shape.top_k > 0 && !topk) return MOK_ERR_INVALID_ARGUMENT;
  if (((uintptr_t)topk & 3u) != 0) return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

/* Stage this rank's routing and token count; barrier; count + scan over every rank's routing
 * (pulled from the peers, each under its own count); fill + pad; barrier (which also spreads any
 * rank's fault to all ranks and keeps the staged routing alive until every peer has read it). */
mok_status mok_gpu_schedule_enqueue(mok_schedule *s, const int32_t *topk, int ends_call,
                                    cudaStream_t stream) {
  mok_workspace *w = s->ws;
  char *sym = (char *)w->sym.ptr;
  TRY_CUDA(mok_sched_stage(topk, s->tokens, (int)w->shape.top_k, (int32_t *)(sym + w->off_topk),
                          (int32_t *)(sym + w->off_count), stream));
  TRY(mok_gpu_barrier(w, stream));
  s->ring_kept = 0; /* a new table: the ring holds nothing of it until a forward */
  s->built_tokens = s->tokens;
  mok_sched_args a = mok_gpu_sched_args(s);
  TRY_CUDA(mok_sched_count_scan(&a, stream));
  TRY_CUDA(mok_sched_fill_pad(&a, stream));
  return ends_call ? mok_gpu_barrier_last(w, stream) : mok_gpu_barrier(w, stream);
}

mok_status mok_schedule_build(mok_schedule *s, const int32_t *topk, cudaStream_t stream) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(s->ws);
  mok_status st = mok_gpu_check_topk(s, topk);
  if (st == MOK_SUCCESS) st = mok_gpu_schedule_enqueue(s, topk, 1, stream);
  return mok_gpu_call_end(s->ws, st, stream);
}

mok_status mok_schedule_rows(mok_schedule *s, int64_t *rows) {
  if (!s || !rows) return MOK_ERR_INVALID_ARGUMENT;
  int32_t v = 0;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess)
    e = cudaMemcpy(&v, s->expert_offset + s->ws->el, sizeof v, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return mok_gpu_status(e);
  *rows = v;
  return MOK_SUCCESS;
}

mok_status mok_schedule_bytes(const mok_schedule *s, int64_t *bytes) {
  if (!s || !bytes) return MOK_ERR_INVALID_ARGUMENT;
  *bytes = s->bytes;
  return MOK_SUCCESS;
}
