/* gpu_workspace.c — the GPU path's workspace: the request's validation and its plan (api/plan.c),
 * the collective agreement on shape, config and plan, the symmetric buffer (routing, staged x and
 * dy, the [T*k, H] combine slots, barrier flags) and local scratch, the sticky device error word;
 * plus helpers shared by the other api/gpu_*.c files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/config.h"
#include "api/gpu_internal.h"
#include "api/plan.h"
#include "api/plan_cache.h"
#include "kernels/common/launch_error.h"
#include "kernels/gemm/gemm_fused.h"
#include "schedule/pipeline.h"

static mok_status cuda_status(cudaError_t e) {
  if (e == cudaErrorMemoryAllocation) return MOK_ERR_OUT_OF_MEMORY;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return MOK_ERR_NO_DEVICE;
  return MOK_ERR_CUDA;
}

mok_status mok_gpu_status(cudaError_t e) {
  if (e == cudaSuccess) return MOK_SUCCESS;
  return mok_record_error(cuda_status(e), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

mok_status mok_gpu_status_at(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess) return MOK_SUCCESS;
  return mok_record_error(cuda_status(e), "%s at %s:%d: %s: %s", call, file, line,
                          cudaGetErrorName(e), cudaGetErrorString(e));
}

mok_status mok_gpu_failed_at(mok_status st, unsigned records, const char *call, const char *file,
                             int line) {
  const char *k = mok_kernel_last_error(); /* a kernel library's record of a failed launch */
  if (st == MOK_ERR_CUDA && mok_error_records() == records && k[0]) {
    mok_record_error(st, "%s at %s:%d: %s", call, file, line, k);
    mok_kernel_clear_error();
  }
  return st;
}

int mok_gpu_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* What every rank must agree on, as plain integers: the shape, the config and the plan. */
#define AGREE_PLAN ((int)(sizeof(mok_plan) / sizeof(int)))
#define AGREE_N (21 + AGREE_PLAN)
static void agreement_row(mok_status st, const mok_shape *s, const mok_config *c,
                          const mok_plan *plan, int64_t *row) {
  float L = c->use_swiglu_limit ? c->swiglu_limit : 0.0f;
  int32_t Lbits;
  memcpy(&Lbits, &L, sizeof L);
  int64_t v[AGREE_N] = {st, s->tokens, s->hidden, s->num_experts, s->intermediate, s->top_k,
                        s->shared_intermediate, c->dtype, c->ring_bytes,
                        c->macrobatch_minibatches, c->schedule_capacity, c->use_swiglu_limit != 0,
                        Lbits, c->timeout_ms, c->fp8_weight_grads, c->fp8_fused_router_grad,
                        c->fp8_shared_expert, (int64_t)c->size, c->magic, c->version,
                        AGREE_PLAN};
  int plan_ints[AGREE_PLAN];
  memcpy(plan_ints, plan, sizeof plan_ints);
  for (int i = 0; i < AGREE_PLAN; ++i) v[21 + i] = plan_ints[i];
  memcpy(row, v, sizeof v);
}

/* Collective: all-gathers every rank's row; MOK_ERR_SHAPE_MISMATCH if any differs. */
static mok_status agree(mok_group *g, const int64_t *row) {
  int64_t *dev = NULL, *host = NULL;
  cudaStream_t st = NULL;
  mok_status rc = MOK_SUCCESS;
  size_t n = (size_t)AGREE_N * g->size;
  host = (int64_t *)malloc(n * sizeof(int64_t));
  if (!host) return MOK_ERR_OUT_OF_MEMORY;
  if (cudaMalloc((void **)&dev, n * sizeof(int64_t)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    rc = mok_record_error(MOK_ERR_CUDA, "the shape agreement's buffer or stream: %s",
                          cudaGetErrorString(cudaGetLastError()));
    goto done;
  }
  /* the upload, the gather and the download in one stream's order: a synchronous copy from
   * pageable memory may return before its DMA lands, and the legacy stream it runs on does not
   * order a non-blocking stream after it */
  if (cudaMemcpyAsync(dev + (size_t)AGREE_N * g->rank, row, AGREE_N * sizeof(int64_t),
                      cudaMemcpyHostToDevice, st) != cudaSuccess) {
    rc = mok_record_error(MOK_ERR_CUDA, "the shape agreement's upload: %s",
                          cudaGetErrorString(cudaGetLastError()));
    goto done;
  }
  if (ncclAllGather(dev + (size_t)AGREE_N * g->rank, dev, AGREE_N, ncclInt64, g->comm, st) != ncclSuccess) {
    rc = mok_record_error(MOK_ERR_NCCL, "the shape agreement's ncclAllGather: %s",
                          ncclGetLastError(g->comm));
    goto done;
  }
  if (cudaMemcpyAsync(host, dev, n * sizeof(int64_t), cudaMemcpyDeviceToHost, st) != cudaSuccess ||
      cudaStreamSynchronize(st) != cudaSuccess) {
    rc = mok_record_error(MOK_ERR_CUDA, "the shape agreement's download: %s",
                          cudaGetErrorString(cudaGetLastError()));
    goto done;
  }
  for (int r = 0; r < g->size; ++r)
    if (memcmp(host + (size_t)AGREE_N * r, row, AGREE_N * sizeof(int64_t)) != 0) rc = MOK_ERR_SHAPE_MISMATCH;
done:
  if (st) cudaStreamDestroy(st);
  cudaFree(dev);
  free(host);
  return rc;
}

/* What the plan needs to know of this device (api/plan.h). */
static mok_status device_facts(mok_device_facts *d) {
  int dev = 0, major = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
    return mok_record_error(MOK_ERR_CUDA, "the device's compute capability or SM count: %s",
                            cudaGetErrorString(cudaGetLastError()));
  d->sm90 = major == 9;
  d->sms = sms;
  return MOK_SUCCESS;
}

/* The shared expert's side stream and its events, where the plan runs it beside the
 * communication in either pass (w->side stays NULL otherwise). */
static cudaError_t side_create(mok_workspace *w) {
  const mok_plan *p = &w->plan;
  if (p->shared_fwd != MOK_SHARED_BESIDE && p->shared_fwd != MOK_SHARED_BESIDE_LATE &&
      p->shared_bwd != MOK_SHARED_BESIDE)
    return cudaSuccess;
  cudaError_t e = cudaStreamCreateWithFlags(&w->side, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->side_fork, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&w->side_join, cudaEventDisableTiming);
  return e;
}

static void side_destroy(mok_workspace *w) {
  if (w->side_join) cudaEventDestroy(w->side_join);
  if (w->side_fork) cudaEventDestroy(w->side_fork);
  if (w->side) cudaStreamDestroy(w->side);
  w->side = NULL;
}

/* The current device's name, for the plan cache's key ("" when it cannot be read). */
static void device_name(char *buf, size_t size) {
  int dev = 0;
  struct cudaDeviceProp prop;
  buf[0] = '\0';
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    snprintf(buf, size, "%s", prop.name);
}

mok_status mok_plan_cache_key(const mok_shape *s, const mok_config *caller, int ep, char *buf,
                              size_t size) {
  if (!s || !caller || !buf || size == 0) return MOK_ERR_INVALID_ARGUMENT;
  mok_config c;
  mok_status st = mok_config_complete(caller, &c);
  if (st != MOK_SUCCESS) return st;
  char name[256];
  device_name(name, sizeof name);
  return mok_plan_cache_key_on(s, &c, ep, name, buf, size);
}

mok_status mok_plan_candidates(const mok_shape *s, const mok_config *caller, int ep,
                               mok_plan *plans, int max, int *count) {
  if (!s || !caller || !plans || max <= 0 || !count) return MOK_ERR_INVALID_ARGUMENT;
  *count = 0;
  mok_config c;
  mok_status st = mok_config_complete(caller, &c);
  if (st == MOK_SUCCESS) st = mok_validate_complete(s, &c, ep);
  mok_device_facts dev;
  if (st == MOK_SUCCESS) st = device_facts(&dev);
  mok_plan p;
  if (st == MOK_SUCCESS) st = mok_plan_resolve(s, &c, ep, &dev, &p); /* its status, if any */
  if (st != MOK_SUCCESS) return st;
  *count = mok_plan_candidates_on(s, &c, ep, &dev, plans, max);
  return MOK_SUCCESS;
}

/* The tuned plan: when the caller requested no plan field and the plan cache holds an entry for
 * this device, group size, shape and config, *c's plan takes it as its requests; returns 1 then. */
static int apply_tuned(const mok_shape *s, mok_config *c, int ep) {
  static const mok_plan none;
  if (memcmp(&c->plan, &none, sizeof none) != 0) return 0;
  char key[1024];
  if (!c->plan_cache || !c->plan_cache[0]) return 0;
  if (mok_plan_cache_key(s, c, ep, key, sizeof key) != MOK_SUCCESS) return 0;
  mok_plan p;
  int found = 0;
  if (mok_plan_cache_lookup(c->plan_cache, key, &p, &found) != MOK_SUCCESS || !found) return 0;
  c->plan = p;
  return 1;
}

/* Validation of one rank's request and its plan, before any collective. */
static mok_status check_request(const mok_shape *s, const mok_config *c, int ep, mok_plan *plan,
                                mok_pipe_params *pipe, int *cpr, int64_t *ct, int *sms) {
  mok_status st = mok_validate_complete(s, c, ep);
  if (st != MOK_SUCCESS) return st;
  mok_device_facts dev;
  st = device_facts(&dev);
  if (st != MOK_SUCCESS) return st;
  *sms = dev.sms;
  st = mok_plan_resolve(s, c, ep, &dev, plan);
  if (st != MOK_SUCCESS) return st;
  int64_t ring_bytes = 0; /* the capacity (the knob's or the worst case) and the ring */
  st = mok_pipe_from_config(s, c, ep, plan->tile_m, plan->minibatch_rows, pipe, &ring_bytes);
  if (st != MOK_SUCCESS) return st;
  if (pipe->capacity > INT32_MAX) return MOK_ERR_INVALID_SHAPE;
  return mok_sched_chunk_geometry(s, ep, cpr, ct);
}

mok_status mok_workspace_create(mok_group *g, const mok_shape *s, const mok_config *caller,
                                mok_workspace **out) {
  if (!g || !s || !caller || !out) return MOK_ERR_INVALID_ARGUMENT;
  *out = NULL;
  mok_config full;
  mok_status st = mok_config_complete(caller, &full);
  if (st != MOK_SUCCESS) return st;
  mok_pipe_params pipe;
  memset(&pipe, 0, sizeof pipe);
  mok_plan plan;
  memset(&plan, 0, sizeof plan);
  int64_t ct = 1;
  int cpr = 1, sms = 0;
  /* the tuned plan where the cache has one (an entry this build cannot run is passed over) */
  mok_config tuned_config = full;
  int tuned = s && apply_tuned(s, &tuned_config, g->size);
  if (tuned) {
    st = check_request(s, &tuned_config, g->size, &plan, &pipe, &cpr, &ct, &sms);
    if (st != MOK_SUCCESS) tuned = 0;
  }
  const mok_config *c = tuned ? &tuned_config : &full;
  if (!tuned) st = check_request(s, c, g->size, &plan, &pipe, &cpr, &ct, &sms);
  int64_t row[AGREE_N];
  agreement_row(st, s, &full, &plan, row);
  mok_status ag = agree(g, row);
  if (st != MOK_SUCCESS) return st;
  if (ag == MOK_ERR_SHAPE_MISMATCH && tuned)
    return mok_record_error(ag, "the ranks resolved different plans: their tuned plan caches "
                                "(config.plan_cache) differ");
  if (ag != MOK_SUCCESS) return ag;

  mok_workspace *w = (mok_workspace *)calloc(1, sizeof *w);
  if (!w) return MOK_ERR_OUT_OF_MEMORY;
  w->group = g;
  w->shape = *s;
  w->config = *c;
  w->plan = plan;
  w->plan_tuned = tuned;
  mok_plan_format(&plan, w->plan_text, sizeof w->plan_text);
  w->sms = sms;
  w->ep = g->size;
  w->rank = g->rank;
  w->el = (int)(s->num_experts / g->size);
  w->pipe = pipe;
  w->cap = pipe.capacity;
  w->chunks_per_rank = cpr;
  w->chunk_tokens = ct;
  w->timeout_ns = (int64_t)c->timeout_ms * 1000000;
  const int64_t cap = w->cap;
  const int ring = pipe.ring_regions > 0;
  const int64_t rows = ring ? mok_pipe_region_rows(&pipe) : cap; /* the scratch's rows */

  const int64_t T = s->tokens, H = s->hidden, I = s->intermediate, k = s->top_k,
                Is = s->shared_intermediate;
  size_t off = 0;
#define SYM(field, bytes) do { w->field = off; off = align_up(off + (size_t)(bytes), 256); } while (0)
  SYM(off_topk, T * k * 4);
  SYM(off_x, mok_gpu_x_staged(w) ? T * H * 2 : 0);
  SYM(off_slots, mok_gpu_has_slots(w) ? T * k * H * 2 : 0);
  SYM(off_dy, mok_gpu_dy_staged(w) ? T * H * 2 : 0);
  SYM(off_rw, mok_gpu_dy_staged(w) ? T * k * 4 : 0);
  SYM(off_drw, T * k * 4);
  SYM(off_flags, (int64_t)w->ep * 8);
  SYM(off_count, 4);
#undef SYM
  st = mok_sym_alloc(g, off, &w->sym);
  if (st != MOK_SUCCESS) {
    free(w);
    return st;
  }
  size_t loff = 0;
  size_t o_err, o_barrier, o_tickets, o_dense, o_ready, o_lrow, o_dout, o_da, o_dgu, o_ys, o_dsa, o_dsgu, o_peer, o_op_peer;
  size_t o_vo = 0, o_vc = 0, o_vr = 0;
#define LOC(var, bytes) do { var = loff; loff = align_up(loff + (size_t)(bytes), 256); } while (0)
  LOC(o_err, 8);
  LOC(o_barrier, sizeof(mok_barrier_state));
  LOC(o_tickets, 2 * MOK_GG_TICKET_INTS * 4);
  LOC(o_dense, 4 * 4);
  LOC(o_ready, (rows + plan.minibatch_rows - 1) / plan.minibatch_rows * 4);
  LOC(o_peer, (int64_t)w->ep * 8);
  LOC(o_op_peer, (int64_t)w->ep * 8);
  if (ring) { /* a ring step's view of a schedule */
    LOC(o_vo, ((int64_t)w->el + 1) * 4);
    LOC(o_vc, (int64_t)w->el * 4);
    LOC(o_vr, rows * 4);
  }
  LOC(o_lrow, T * k * 4);
  LOC(o_dout, rows * H * 2);
  LOC(o_da, rows * I * 2);
  LOC(o_dgu, rows * 2 * I * 2);
  LOC(o_ys, T * H * 2);
  LOC(o_dsa, T * Is * 2);
  LOC(o_dsgu, T * 2 * Is * 2);
  const int fp8 = c->dtype == MOK_DTYPE_FP8_BLOCK128;
  const int64_t rows_pad = (rows + 127) / 128 * 128; /* rows of a scale table */
  const int64_t q_cols = H > 2 * I ? H : 2 * I;
  size_t o_q = 0, o_qs = 0, o_wa = 0, o_was = 0, o_wb = 0, o_wbs = 0, o_rwr = 0, o_wam = 0;
  size_t o_mlp = 0;
  if (fp8) { /* the backward's quantized data-gradient operand and its 1x128 scales; the
              * one-launch forward MLP's claim and readiness counters */
    LOC(o_q, rows * q_cols);
    LOC(o_qs, q_cols / 128 * rows_pad * 4);
    LOC(o_mlp, mok_gg_fp8_mlp_sync_ints(rows) * 4);
  }
  /* FP8, the router-weight gradient inside the SwiGLU backward (config fp8_fused_router_grad):
   * each row's router weight */
  const int fused_drw = fp8 && c->fp8_fused_router_grad;
  if (fused_drw) LOC(o_rwr, rows * 4);
  /* FP8 weight gradients: both operands of each, quantized along the tokens and transposed */
  const int fp8_wgrad = fp8 && c->fp8_weight_grads;
  const int64_t wa_rows = q_cols, wb_rows = H > I ? H : I; /* max(H, 2I), max(H, I) */
  if (fp8_wgrad) {
    LOC(o_wa, wa_rows * rows_pad);
    LOC(o_was, rows_pad / 128 * wa_rows * 4);
    LOC(o_wb, wb_rows * rows_pad);
    LOC(o_wbs, rows_pad / 128 * wb_rows * 4);
    if (c->fp8_weight_grads >= 2) LOC(o_wam, (int64_t)w->el * wa_rows * 4);
  }
  /* FP8 shared expert: its weights quantized (gate, up, down; then the backward's transposed
   * gate | up and down), x quantized, and one operand quantized for a data gradient (dy, then
   * [dg, du]), each as codes then scales (mok_fp8_scales_of) */
  const int fp8_shared = fp8 && c->fp8_shared_expert && Is > 0;
  const int64_t sq_cols = H > 2 * Is ? H : 2 * Is, sblk = (Is / 128) * (H / 128);
  size_t o_s8w = 0, o_s8ws = 0, o_s8t = 0, o_s8ts = 0, o_s8x = 0, o_s8q = 0;
  if (fp8_shared) {
    LOC(o_s8w, 3 * Is * H);
    LOC(o_s8ws, 3 * sblk * 4);
    LOC(o_s8t, 3 * Is * H);
    LOC(o_s8ts, 3 * sblk * 4);
    LOC(o_s8x, mok_fp8_rows_bytes(T, H));
    LOC(o_s8q, mok_fp8_rows_bytes(T, sq_cols));
  }
#undef LOC
  cudaError_t e = cudaMalloc(&w->local, loff);
  if (e != cudaSuccess) {
    mok_sym_free(g, &w->sym);
    free(w);
    return mok_gpu_status(e);
  }
  char *L = (char *)w->local;
  w->local_bytes = (int64_t)loff;
  w->err = (int32_t *)(L + o_err);
  w->barrier = (mok_barrier_state *)(L + o_barrier);
  w->peer_base = (char **)(L + o_peer);
  w->op_peer = (char **)(L + o_op_peer);
  w->local_row = (int32_t *)(L + o_lrow);
  w->d_out = L + o_dout;
  w->d_a = L + o_da;
  w->dgu = L + o_dgu;
  w->ys = L + o_ys;
  w->ds_a = L + o_dsa;
  w->dsgu = L + o_dsgu;
  w->tickets = (int32_t *)(L + o_tickets);
  w->dense_table = (int32_t *)(L + o_dense);
  mok_fp8_scratch *f = &w->fp8;
  if (fp8) {
    f->q = L + o_q;
    f->q_scales = (float *)(L + o_qs);
    f->mlp_sync = (int32_t *)(L + o_mlp);
  }
  if (fused_drw) f->rw_rows = (float *)(L + o_rwr);
  if (fp8_wgrad) {
    f->wq_a = L + o_wa;
    f->wq_as = (float *)(L + o_was);
    f->wq_b = L + o_wb;
    f->wq_bs = (float *)(L + o_wbs);
    f->wq_amax = c->fp8_weight_grads >= 2 ? (float *)(L + o_wam) : NULL;
  }
  if (fp8_shared) {
    f->s8_w = L + o_s8w;
    f->s8_ws = (float *)(L + o_s8ws);
    f->s8_wt = L + o_s8t;
    f->s8_wts = (float *)(L + o_s8ts);
    f->s8_x = L + o_s8x;
    f->s8_q = L + o_s8q;
  }
  if (ring) {
    w->view_offset = (int32_t *)(L + o_vo);
    w->view_count = (int32_t *)(L + o_vc);
    w->view_row_src = (int32_t *)(L + o_vr);
  }
  w->ready = (int32_t *)(L + o_ready);
  w->ready_count = (rows + plan.minibatch_rows - 1) / plan.minibatch_rows;
  const int32_t dense[4] = {0, (int32_t)((T + 127) / 128 * 128), (int32_t)T, 0};

  e = cudaMemset(w->local, 0, o_dout);
  /* the FP8 shared expert's quantized rows: the scales of the padding rows past T (which the
   * quantizers never write and the GEMMs' tiles read) start zero. After a call of more tokens
   * (mok_schedule_set_tokens) they hold that call's bytes: finite (an E4M3 code is never 0x7F or
   * 0xFF, a scale is finite), read only for the padding rows' own results, whose A rows the tensor
   * maps end at the count (zeros), and which are never stored. */
  if (e == cudaSuccess && fp8_shared)
    e = cudaMemset(L + o_s8x, 0, (size_t)(loff - o_s8x));
  if (e == cudaSuccess) e = cudaMemcpy(w->dense_table, dense, sizeof dense, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemset(w->sym.ptr, 0, off);
  if (e == cudaSuccess)
    e = mok_comm_peer_table(g->devcomm, w->sym.window, w->sym.ptr, w->ep, w->peer_base, 0);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  mok_sched_args sa;
  memset(&sa, 0, sizeof sa);
  sa.ep = w->ep;
  sa.top_k = (int)k;
  sa.experts_local = w->el;
  sa.chunks_per_rank = cpr;
  sa.chunk_tokens = ct;
  if (e == cudaSuccess) e = mok_sched_prepare(&sa);
  st = mok_gpu_status(e);
  /* every rank's flags are zero before any rank can signal */
  int64_t zero_row[AGREE_N] = {0};
  agreement_row(st, s, c, &plan, zero_row);
  mok_status ag2 = agree(g, zero_row);
  if (st == MOK_SUCCESS) st = ag2;
  if (st == MOK_SUCCESS) st = mok_gpu_status(side_create(w));
  if (st != MOK_SUCCESS) {
    side_destroy(w);
    cudaFree(w->local);
    mok_sym_free(g, &w->sym);
    free(w);
    return st;
  }
  *out = w;
  return MOK_SUCCESS;
}

mok_status mok_workspace_plan(const mok_workspace *w, mok_plan *plan) {
  if (!w || !plan) return MOK_ERR_INVALID_ARGUMENT;
  *plan = w->plan;
  return MOK_SUCCESS;
}

const char *mok_workspace_kernels(const mok_workspace *w) { return w ? w->plan_text : ""; }

mok_status mok_workspace_plan_tuned(const mok_workspace *w, int *tuned) {
  if (!w || !tuned) return MOK_ERR_INVALID_ARGUMENT;
  *tuned = w->plan_tuned;
  return MOK_SUCCESS;
}

mok_status mok_workspace_bytes(const mok_workspace *w, int64_t *bytes) {
  if (!w || !bytes) return MOK_ERR_INVALID_ARGUMENT;
  *bytes = (int64_t)w->sym.bytes + w->local_bytes;
  return MOK_SUCCESS;
}

mok_status mok_workspace_error_rank(mok_workspace *w, mok_status *device_status, int *rank) {
  if (!w || !device_status || !rank) return MOK_ERR_INVALID_ARGUMENT;
  int32_t v[2] = {0, 0};
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(v, w->err, sizeof v, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return mok_gpu_status(e);
  *device_status = (mok_status)v[0];
  *rank = v[0] == 0 ? -1 : v[1] == 0 ? w->rank : v[1] - 1;
  return MOK_SUCCESS;
}

mok_status mok_workspace_error(mok_workspace *w, mok_status *device_status) {
  int rank;
  return mok_workspace_error_rank(w, device_status, &rank);
}

mok_status mok_workspace_clear_error(mok_workspace *w, cudaStream_t stream) {
  if (!w) return MOK_ERR_INVALID_ARGUMENT;
  return mok_gpu_status(cudaMemsetAsync(w->err, 0, 2 * sizeof(int32_t), stream));
}

mok_status mok_workspace_destroy(mok_workspace *w) {
  if (!w) return MOK_SUCCESS;
  cudaError_t e = cudaDeviceSynchronize();
  mok_status st = mok_sym_free(w->group, &w->sym);
  side_destroy(w);
  cudaFree(w->local);
  free(w);
  if (e != cudaSuccess) return mok_gpu_status(e);
  return st;
}

void mok_gpu_call_begin(mok_workspace *w) { w->call_barriers = 0; }

/* At EP=1 there is no peer to wait for, signal or refuse to: no barrier is enqueued (stream
 * order is all a rank's own work needs; docs/DESIGN.md "Barriers and faults"). */
static mok_status barrier(mok_workspace *w, int last, mok_status refuse, cudaStream_t stream) {
  if (w->ep == 1) return MOK_SUCCESS;
  mok_barrier b;
  b.peer_base = w->peer_base;
  b.flags_off = w->off_flags;
  b.local_base = (char *)w->sym.ptr;
  b.rank = w->rank;
  b.ep = w->ep;
  b.state = w->barrier;
  b.err = w->err;
  b.err_rank = w->err + 1;
  b.timeout_ns = w->timeout_ns;
  b.first = w->call_barriers++ == 0;
  b.last = last;
  b.refuse = (int32_t)refuse;
  TRY_CUDA(mok_barrier_run(&b, stream));
  return MOK_SUCCESS;
}

mok_status mok_gpu_barrier(mok_workspace *w, cudaStream_t stream) { return barrier(w, 0, 0, stream); }

mok_status mok_gpu_barrier_last(mok_workspace *w, cudaStream_t stream) {
  return barrier(w, 1, 0, stream);
}

/* A call that failed on this rank ends for its peers too: a refusal in place of its remaining
 * barriers (the peers' waits for this call end at once, with st and this rank in their error
 * words). This rank's caller has st; its error word is left as it is, so that a call every rank
 * refuses leaves no fault anywhere. A refusal that cannot be enqueued leaves the peers to their
 * timeout. */
mok_status mok_gpu_call_end(mok_workspace *w, mok_status st, cudaStream_t stream) {
  if (st != MOK_SUCCESS && w) (void)barrier(w, 0, st, stream);
  return st;
}

mok_status mok_workspace_reject(mok_workspace *w, mok_status cause, cudaStream_t stream) {
  if (!w || cause <= MOK_SUCCESS || cause >= MOK_STATUS_COUNT) return MOK_ERR_INVALID_ARGUMENT;
  mok_gpu_call_begin(w);
  return barrier(w, 0, cause, stream); /* the refusal itself: a launch failure is this call's */
}

mok_move_route mok_gpu_route(const mok_schedule *s) {
  const mok_workspace *w = s->ws;
  mok_move_route r;
  r.peer_base = w->peer_base;
  r.rank = w->rank;
  r.ep = w->ep;
  r.tokens = w->shape.tokens;
  r.top_k = (int)w->shape.top_k;
  r.hidden = w->shape.hidden;
  r.row_src = s->row_src;
  r.expert_offset = s->expert_offset;
  r.experts_local = w->el;
  r.capacity = s->rows;
  r.err = w->err;
  r.ctas = 0;
  return r;
}

mok_sched_args mok_gpu_sched_args(const mok_schedule *s) {
  const mok_workspace *w = s->ws;
  mok_sched_args a;
  a.peer_base = w->peer_base;
  a.topk_off = w->off_topk;
  a.count_off = w->off_count;
  a.rank = w->rank;
  a.ep = w->ep;
  a.tokens = w->shape.tokens;
  a.top_k = (int)w->shape.top_k;
  a.num_experts = (int)w->shape.num_experts;
  a.experts_local = w->el;
  a.tile_m = w->plan.tile_m;
  a.capacity = w->cap;
  a.chunks_per_rank = w->chunks_per_rank;
  a.chunk_tokens = w->chunk_tokens;
  a.topk_all = s->topk_all;
  a.counts = s->counts;
  a.chunk_status = s->chunk_status;
  a.expert_count = s->expert_count;
  a.expert_offset = s->expert_offset;
  a.row_src = s->row_src;
  a.err = w->err;
  a.parallel = w->plan.schedule == MOK_SCHEDULE_PARALLEL;
  return a;
}
