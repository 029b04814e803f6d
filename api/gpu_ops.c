/* gpu_ops.c — the ops layer: each stage of the layer as its own collective call
 * on symmetric buffers the caller allocated with mok_sym_alloc (x, combine slots, dy, router
 * weights, dx parts). Stages that touch peers are framed by barriers (the leading one: the
 * caller's data is staged on every rank and the previous use of the target is over; the trailing
 * one: every transfer has landed), so the caller needs no synchronization of its own.
 * Router-weight gradients travel through the workspace: experts_backward pushes them to the source
 * rank, reverse_dispatch_reduce writes them to grads->d_router_weights. The caller's row buffers
 * hold the schedule's capacity: a workspace with a token ring (config.ring_bytes) has no ops layer
 * (MOK_ERR_NOT_SUPPORTED). The caller's token buffers are sized and laid out for the shape's T
 * rows; a call reads and writes the schedule's count of them (mok_schedule_set_tokens). */
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"

/* A caller's symmetric buffer of at least bytes, and its peers' addresses in the ops table. */
static mok_status use_buffer(mok_workspace *w, const mok_sym_buffer *b, int64_t bytes,
                             cudaStream_t stream) {
  if (!b || !b->ptr || (int64_t)b->bytes < bytes) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gpu_aligned(b->ptr)) return MOK_ERR_MISALIGNED;
  if (!b->window && w->ep > 1) return MOK_ERR_INVALID_ARGUMENT;
  TRY_CUDA(mok_comm_peer_table(w->group->devcomm, b->window, b->ptr, w->ep, w->op_peer, stream));
  return MOK_SUCCESS;
}

static mok_move_route op_route(const mok_schedule *s) {
  mok_move_route r = mok_gpu_route(s);
  r.peer_base = s->ws->op_peer;
  return r;
}

/* A peer stage: the caller's symmetric buffer (bytes needed on every rank) made reachable, then
 * barrier, the transfer of the schedule's rows, barrier. pull: rows of `sym` on their source ranks
 * into `rows`; else push: `rows` into the (token, k) slots of `sym` on their source ranks. */
static mok_status transfer(mok_schedule *s, const mok_sym_buffer *sym, int64_t bytes, void *rows,
                           int pull, cudaStream_t st) {
  if (!sym || !rows) return MOK_ERR_INVALID_ARGUMENT;
  if (mok_gpu_ring_on(s->ws)) return MOK_ERR_NOT_SUPPORTED;
  if (!mok_gpu_aligned(rows)) return MOK_ERR_MISALIGNED;
  TRY(mok_gpu_check_built(s));
  mok_workspace *w = s->ws;
  TRY(use_buffer(w, sym, bytes, st));
  mok_move_route r = op_route(s);
  TRY(mok_gpu_barrier(w, st));
  TRY_CUDA(pull ? mok_move_dispatch_pull(&r, 0, NULL, rows, st) : mok_move_push_rows(&r, rows, 0, NULL, st));
  return mok_gpu_barrier_last(w, st);
}

/* The peer stages are collective calls: a failure on this rank ends the call on every rank. */
static mok_status move_rows(mok_schedule *s, const mok_sym_buffer *sym, int64_t bytes, void *rows,
                            int pull, cudaStream_t st) {
  mok_gpu_call_begin(s->ws);
  return mok_gpu_call_end(s->ws, transfer(s, sym, bytes, rows, pull, st), st);
}

static int64_t token_bytes(const mok_schedule *s) { return s->ws->shape.tokens * s->ws->shape.hidden * 2; }
static int64_t slot_bytes(const mok_schedule *s) { return token_bytes(s) * s->ws->shape.top_k; }

mok_status mok_op_dispatch(mok_schedule *s, const mok_sym_buffer *x, void *recv, cudaStream_t st) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  return move_rows(s, x, token_bytes(s), recv, 1, st);
}

mok_status mok_op_experts_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                  void *out_rows, cudaStream_t st) {
  if (!s || !wt || !recv || !out_rows) return MOK_ERR_INVALID_ARGUMENT;
  if (mok_gpu_ring_on(s->ws)) return MOK_ERR_NOT_SUPPORTED;
  if (!mok_gpu_aligned(recv) || !mok_gpu_aligned(out_rows)) return MOK_ERR_MISALIGNED;
  TRY(mok_gpu_check_built(s));
  TRY(mok_gpu_check_weights(s->ws, wt));
  TRY(mok_gpu_experts_forward(s, wt, recv, out_rows, st));
  /* the BF16 backward's router-weight gradients need the outputs: keep a copy in the schedule
   * (the FP8 backward is the functional layer's) */
  if (s->ws->config.dtype == MOK_DTYPE_BF16)
    TRY_CUDA(cudaMemcpyAsync(s->out_rows, out_rows, (size_t)(s->rows * s->ws->shape.hidden * 2),
                             cudaMemcpyDeviceToDevice, st));
  return MOK_SUCCESS;
}

mok_status mok_op_combine(mok_schedule *s, const void *out_rows, const mok_sym_buffer *combine,
                          cudaStream_t st) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  return move_rows(s, combine, slot_bytes(s), (void *)out_rows, 0, st);
}

mok_status mok_op_combine_reduce(mok_schedule *s, const mok_weights *wt, const void *x,
                                 const mok_sym_buffer *combine, const float *rw, void *y,
                                 cudaStream_t st) {
  if (!s || !wt || !combine) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, k = w->shape.top_k;
  if (T > 0 && (!x || !rw || !y || !combine->ptr)) return MOK_ERR_INVALID_ARGUMENT;
  if ((int64_t)combine->bytes < slot_bytes(s)) return MOK_ERR_INVALID_ARGUMENT;
  TRY(mok_gpu_check_built(s));
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(y) || !mok_gpu_aligned(combine->ptr) ||
      ((uintptr_t)rw & 3u))
    return MOK_ERR_MISALIGNED;
  TRY(mok_gpu_check_weights(w, wt));
  TRY(mok_gpu_shared_forward(s, wt, x, 0, st));
  const mok_move_parts parts = {combine->ptr, NULL, NULL};
  TRY_CUDA(mok_move_combine_reduce(T, (int)k, H, &parts, rw,
                                   w->shape.shared_intermediate > 0 ? w->ys : NULL, y, w->err, st));
  return MOK_SUCCESS;
}

mok_status mok_op_reverse_combine(mok_schedule *s, const mok_sym_buffer *dy, void *recv_dy,
                                  cudaStream_t st) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  return move_rows(s, dy, token_bytes(s), recv_dy, 1, st);
}

static mok_status experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   const void *recv_dy, const mok_sym_buffer *rw, void *dx_rows,
                                   const mok_grads *g, cudaStream_t st) {
  if (!wt || !recv || !recv_dy || !rw || !dx_rows || !g) return MOK_ERR_INVALID_ARGUMENT;
  if (mok_gpu_ring_on(s->ws)) return MOK_ERR_NOT_SUPPORTED;
  if (!mok_gpu_aligned(recv) || !mok_gpu_aligned(recv_dy) || !mok_gpu_aligned(dx_rows))
    return MOK_ERR_MISALIGNED;
  mok_workspace *w = s->ws;
  if (w->config.dtype != MOK_DTYPE_BF16) return MOK_ERR_NOT_SUPPORTED; /* FP8: functional layer */
  TRY(mok_gpu_check_built(s));
  TRY(mok_gpu_check_weights(w, wt));
  TRY(mok_gpu_check_grads(s, g, 0));
  TRY(use_buffer(w, rw, w->shape.tokens * w->shape.top_k * 4, st));
  mok_move_route r = mok_gpu_route(s);
  TRY(mok_gpu_barrier_last(w, st));
  TRY_CUDA(mok_move_weight_rows(&r, w->op_peer, 0, w->off_drw, recv_dy, s->out_rows, w->d_out, st));
  return mok_gpu_experts_backward(s, wt, recv, w->d_out, dx_rows, g, st);
}

mok_status mok_op_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   const void *recv_dy, const mok_sym_buffer *rw, void *dx_rows,
                                   const mok_grads *g, cudaStream_t st) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(s->ws);
  return mok_gpu_call_end(s->ws, experts_backward(s, wt, recv, recv_dy, rw, dx_rows, g, st), st);
}

mok_status mok_op_reverse_dispatch(mok_schedule *s, const void *dx_rows,
                                   const mok_sym_buffer *dx_parts, cudaStream_t st) {
  if (!s) return MOK_ERR_INVALID_ARGUMENT;
  return move_rows(s, dx_parts, slot_bytes(s), (void *)dx_rows, 0, st);
}

mok_status mok_op_reverse_dispatch_reduce(mok_schedule *s, const mok_weights *wt, const void *x,
                                          const void *dy, const mok_sym_buffer *dx_parts,
                                          const mok_grads *g, cudaStream_t st) {
  if (!s || !wt || !dx_parts || !g) return MOK_ERR_INVALID_ARGUMENT;
  mok_workspace *w = s->ws;
  const int64_t T = s->tokens, H = w->shape.hidden, k = w->shape.top_k;
  if (T > 0 && (!x || !dy || !dx_parts->ptr)) return MOK_ERR_INVALID_ARGUMENT;
  if ((int64_t)dx_parts->bytes < slot_bytes(s)) return MOK_ERR_INVALID_ARGUMENT;
  TRY(mok_gpu_check_built(s));
  if (w->config.dtype != MOK_DTYPE_BF16) return MOK_ERR_NOT_SUPPORTED; /* FP8: functional layer */
  if (!mok_gpu_aligned(x) || !mok_gpu_aligned(dy) || !mok_gpu_aligned(dx_parts->ptr))
    return MOK_ERR_MISALIGNED;
  TRY(mok_gpu_check_weights(w, wt));
  TRY(mok_gpu_check_grads(s, g, 1));
  TRY(mok_gpu_shared_backward(s, wt, x, dy, g, 0, st));
  const mok_move_parts parts = {dx_parts->ptr, NULL, NULL};
  TRY_CUDA(mok_move_dx_reduce(T, (int)k, H, &parts,
                              w->shape.shared_intermediate > 0 ? w->ys : NULL, g->dx,
                              (const float *)((char *)w->sym.ptr + w->off_drw), g->d_router_weights,
                              w->err, st));
  return MOK_SUCCESS;
}
