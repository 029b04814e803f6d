/* gpu_internal.h — the GPU path's workspace and schedule objects and the helpers the api/gpu_*.c
 * files share. The workspace holds its plan (api/plan.c), which every stage reads to choose its
 * kernels; nothing else decides how a call runs. Host C. */
#ifndef MOK_GPU_INTERNAL_H
#define MOK_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "api/status_detail.h"
#include "comm/comm.h"
#include "kernels/gemm/gemm.h"
#include "kernels/move/move.h"
#include "mok.h"
#include "schedule/pipeline_core.h"
#include "schedule/schedule_device.h"

/* The FP8 scratch of a workspace (config dtype FP8_BLOCK128), each NULL where its mode is off. */
typedef struct {
  void *q;             /* the E4M3 A operand of a data gradient (rw * dy rows [rows, H], then
                          the gate / up gradients [rows, 2I])                                  */
  float *q_scales;     /*   its 1x128 scales [max(H, 2I)/128][rows rounded up to 128]          */
  int32_t *mlp_sync;   /* the one-launch forward MLP's counters (mok_gg_fp8_mlp_sync_ints)     */
  float *rw_rows;      /* the fused router-weight gradient (config fp8_fused_router_grad): each
                          row's router weight [rows]                                           */
  void *wq_a, *wq_b;   /* the FP8 weight gradients' operands quantized 1x128 along the tokens,
                          transposed: [max(H, 2I)] and [max(H, I)] rows of rows_pad codes      */
  float *wq_as, *wq_bs; /*   and their scales [rows_pad / 128][max(H, 2I) | max(H, I)]         */
  float *wq_amax;      /*   per-expert scales (fp8_weight_grads 2 or 3): the amax scratch
                          [el][max(H, 2I)]; NULL for 1x128 blocks                             */
  void *s8_w, *s8_wt;  /* the FP8 shared expert (config fp8_shared_expert): its weights
                          quantized at each call, gate, up [Is, H], down [H, Is] e4m3, and the
                          backward's gate | up [H, 2Is], down [Is, H]                         */
  float *s8_ws, *s8_wts; /*  their 128x128 block scales, in the same order                     */
  void *s8_x, *s8_q;   /*   x [T, H] and a data gradient's A operand [T, max(H, 2Is)],
                          quantized 1x128: codes, then scales (mok_fp8_scales_of)             */
} mok_fp8_scratch;

struct mok_workspace {
  mok_group *group;
  mok_shape shape;
  mok_config config;         /* the caller's, completed to this library's layout            */
  mok_plan plan;             /* how every stage runs (resolved and agreed at creation)      */
  char plan_text[512];       /* the plan in words (mok_workspace_kernels)                    */
  int plan_tuned;            /* the plan came from the tuned plan cache                      */
  int ep, rank, el;          /* el = E / EP                                              */
  int sms;                   /* the device's SMs                                         */
  int64_t cap;               /* schedule rows per rank                                   */
  mok_pipe_params pipe;      /* the token ring (pipe.ring_regions 0: none); pipe.capacity
                                is cap. The backward and FP8 scratch below hold `rows`
                                rows: cap, or one ring region                           */
  int chunks_per_rank;       /* schedule build geometry                                  */
  int64_t chunk_tokens;
  int64_t timeout_ns;
  /* one symmetric buffer, every rank the same layout */
  mok_sym_buffer sym;
  size_t off_topk, off_x, off_slots, off_dy, off_rw, off_drw, off_flags;
  size_t off_count;          /* this rank's token count of its latest build (int32)      */
  char **peer_base;          /* device [ep]: each rank's address of sym                  */
  char **op_peer;            /* device [ep]: the ops layer's table for a caller's buffer */
  /* local device memory (one allocation) */
  void *local;
  int64_t local_bytes;
  int32_t *err;              /* sticky error word, and err[1]: the rank it was raised on
                                (0 this rank, r + 1 rank r)                               */
  mok_barrier_state *barrier; /* which call and barrier this rank is at                  */
  int call_barriers;         /* host: barriers the call being enqueued has enqueued      */
  int32_t *tickets;          /* [2 * MOK_GG_TICKET_INTS] the BF16 GEMMs' claim counters:
                                the routed experts', the shared expert's (on a side stream) */
  int32_t *dense_table;      /* the shared expert as one grouped-GEMM expert: offset {0,
                                T rounded up to 128}, count {T}                           */
  int32_t *ready;            /* [ready_count] per-minibatch flags of the fused comm CTAs     */
  int64_t ready_count;
  int32_t *view_offset, *view_count, *view_row_src; /* a ring step's view of a schedule  */
  void *d_out;               /* [rows, H]  backward: rw * dy rows, later dx rows         */
  int32_t *local_row;        /* [T*k] the row of each slot of this rank's own tokens that
                                the reduce reads in place, -1 where one is pushed (BF16
                                grouped path without a ring: mok_move_push_rows)          */
  void *d_a;                 /* [rows, I]                                                */
  void *dgu;                 /* [rows, 2I]                                               */
  void *ys;                  /* [T, H]    shared expert output / its dx                  */
  void *ds_a;                /* [T, Is]                                                  */
  void *dsgu;                /* [T, 2Is]                                                 */
  mok_fp8_scratch fp8;
  cudaStream_t side;         /* the shared expert's stream beside the communication
                                kernels (plan shared_fwd / shared_bwd beside), with its
                                fork and join events; NULL when it always runs in line   */
  cudaEvent_t side_fork, side_join;
};

/* What the plan says, as the stages ask it. */
static inline int mok_gpu_grouped_gemms(const mok_workspace *w) {
  return w->plan.path != MOK_PATH_ORACLE; /* the TMA + wgmma kernels (else mma.sync, v1) */
}
static inline int mok_gpu_fused(const mok_workspace *w) { return w->plan.path == MOK_PATH_FUSED; }
static inline int mok_gpu_fp8(const mok_workspace *w) {
  return w->config.dtype == MOK_DTYPE_FP8_BLOCK128;
}

/* A schedule, or one ring step's view of it (mok_gpu_ring_view: the tables of one macrobatch and
 * the per-row buffers of one region). The stage functions read the rows through it. */
struct mok_schedule {
  mok_workspace *ws;
  void *mem;
  int64_t bytes;
  int32_t *topk_all, *counts, *chunk_status, *expert_count, *expert_offset, *row_src;
  int64_t rows;              /* rows of the per-row buffers: cap, the ring's, or a region's */
  void *recv_x;              /* [rows, H] tokens pulled to this rank's experts (FP8: their
                                E4M3 codes, then the scales: mok_fp8_scales_of)           */
  void *g, *u, *a;           /* [rows, I] gate, up (fp32), SwiGLU output (bf16); for backward
                                (grouped GEMMs: g is [rows, 2I] bf16 g | u, the same bytes;
                                u only on the oracle path; FP8: a holds the activations'
                                codes and scales)                                         */
  void *out_rows;            /* [rows, H] expert outputs; NULL in FP8 with the fused
                                d_router_weights, which needs none                        */
  void *sg, *su, *sa;        /* [T, Is]  shared expert's gate, up (fp32), activation     */
  int ring_kept;             /* host: the ring's regions hold what the last forward left
                                (cleared by a build, and by a backward that replayed)    */
  int64_t tokens;            /* host: this rank's T for the next build and the passes on it
                                (mok_schedule_set_tokens; at most the shape's, its
                                default); the shape's T stays the stride of the staged
                                tokens and of the slots                                  */
  int64_t built_tokens;      /* host: the T of the latest build (the passes need tokens)  */
};

/* The passes' check that the schedule was built for its token count. */
static inline mok_status mok_gpu_check_built(const mok_schedule *s) {
  return s->tokens == s->built_tokens ? MOK_SUCCESS : MOK_ERR_INVALID_ARGUMENT;
}

/* FP8: a schedule keeps the forward's quantized rows as E4M3 codes [rows, cols] followed by their
 * 1x128 scales [cols/128][rows rounded up to 128] (the layout the FP8 GEMMs read), in the buffer
 * the BF16 path keeps its rows in (recv_x: cols H; a: cols I). */
static inline float *mok_fp8_scales_of(void *codes, int64_t rows, int64_t cols) {
  return (float *)((char *)codes + rows * cols);
}
static inline int64_t mok_fp8_rows_bytes(int64_t rows, int64_t cols) {
  return rows * cols + cols / 128 * ((rows + 127) / 128 * 128) * 4;
}

/* Helpers (gpu_workspace.c). */
/* Collective calls and their barriers (comm/barrier.cu; docs/DESIGN.md, "Barriers and faults").
 * Every collective call starts with mok_gpu_call_begin, runs its barriers (the last one with
 * mok_gpu_barrier_last) and returns through mok_gpu_call_end, which turns a failure into a
 * refusal the peers see: their matching call fails with this rank's status and rank. */
void mok_gpu_call_begin(mok_workspace *w);
mok_status mok_gpu_barrier(mok_workspace *w, cudaStream_t stream);
mok_status mok_gpu_barrier_last(mok_workspace *w, cudaStream_t stream);
mok_status mok_gpu_call_end(mok_workspace *w, mok_status st, cudaStream_t stream);
mok_move_route mok_gpu_route(const mok_schedule *s);
/* mok_schedule_build in two: its argument checks (host; nothing enqueued), then the build
 * enqueued on arguments already checked. */
mok_status mok_gpu_check_topk(const mok_schedule *s, const int32_t *topk);
mok_status mok_gpu_schedule_enqueue(mok_schedule *s, const int32_t *topk, int ends_call,
                                    cudaStream_t stream);
mok_sched_args mok_gpu_sched_args(const mok_schedule *s);
int mok_gpu_aligned(const void *p); /* 16-byte aligned (NULL counts as aligned) */
/* A CUDA error as a mok status, its name and text recorded for mok_last_error; _at also records
 * the failed call's text and where mok made it (what TRY_CUDA passes). */
mok_status mok_gpu_status(cudaError_t e);
mok_status mok_gpu_status_at(cudaError_t e, const char *call, const char *file, int line);
/* st from call, which ran after the thread's detail count was records: a CUDA failure it left
 * unrecorded, which the kernel libraries' launchers record on their own (mok_kernel_last_error),
 * is moved into mok_last_error with call's text and place. */
mok_status mok_gpu_failed_at(mok_status st, unsigned records, const char *call, const char *file,
                             int line);

/* Early returns on a failed CUDA call (recorded with its place) or a failed mok status. */
#define TRY_CUDA(expr)                                                              \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) return mok_gpu_status_at(e_, #expr, __FILE__, __LINE__); \
  } while (0)
#define TRY(expr)                                                                         \
  do {                                                                                    \
    const unsigned r_ = mok_error_records();                                             \
    mok_status s_ = (expr);                                                               \
    if (s_ != MOK_SUCCESS) return mok_gpu_failed_at(s_, r_, #expr, __FILE__, __LINE__); \
  } while (0)

/* The token ring (gpu_ring.c). */
int mok_gpu_ring_on(const mok_workspace *w);

/* Whether the reduces read this rank's own rows where the GEMMs left them instead of from its
 * combine slots (docs/DESIGN.md "Forward"): the BF16 grouped path without a ring, whose out_rows
 * and d_out hold every row until the reduce (a ring's regions are reused; the fused and FP8 paths
 * push from the GEMMs' epilogues). At EP=1 every row is the rank's own, so such a workspace
 * has no combine slots at all. */
static inline int mok_gpu_rows_in_place(const mok_workspace *w) {
  return !mok_gpu_fused(w) && !mok_gpu_fp8(w) && !mok_gpu_ring_on(w);
}
static inline int mok_gpu_has_slots(const mok_workspace *w) {
  return w->ep > 1 || !mok_gpu_rows_in_place(w);
}
/* Whether a call stages x in the symmetric buffer (docs/DESIGN.md "Forward"): for the peers'
 * pulls, for the FP8 dispatch (x's codes are quantized there) and for the fused path's comm CTAs.
 * The BF16 grouped dispatch reads this rank's own rows from the caller's x, so at EP=1 it needs
 * no copy. dy and the router weights are staged only for the peers: the reverse combines read
 * this rank's own from the caller's tensors. */
static inline int mok_gpu_x_staged(const mok_workspace *w) {
  return w->ep > 1 || mok_gpu_fp8(w) || mok_gpu_fused(w);
}
static inline int mok_gpu_dy_staged(const mok_workspace *w) { return w->ep > 1; }
/* *v = macrobatch b's view of s in ring region `region` (its tables built on stream). */
mok_status mok_gpu_ring_view(const mok_schedule *s, int64_t b, int32_t region, mok_schedule *v,
                             cudaStream_t stream);

/* ---- the expert stages (gpu_experts*.c), shared by the functional layer and the ops layer ---- */

/* Argument checks of the weights and the gradients (gpu_layer.c). */
mok_status mok_gpu_check_weights(const mok_workspace *w, const mok_weights *wt);
mok_status mok_gpu_check_grads(const mok_schedule *s, const mok_grads *g, int need_dx);

/* The routed experts' forward on rows already in recv: out_rows = MLP(recv) (BF16, either GEMM
 * backend; FP8: recv's bf16 rows quantized into the schedule's recv_x first, the ops layer's
 * entry). */
mok_status mok_gpu_experts_forward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                   void *out_rows, cudaStream_t stream);
/* The routed experts' backward from d_out = rw * dy rows: weight gradients and dx rows (dx_rows
 * may equal d_out), BF16. */
mok_status mok_gpu_experts_backward(mok_schedule *s, const mok_weights *wt, const void *recv,
                                    void *d_out, void *dx_rows, const mok_grads *g,
                                    cudaStream_t stream);
/* Path FUSED: the forward experts with the dispatch inside gate+up (recv_x filled from the peers'
 * staged x by the launch's comm CTAs, x staged on every rank before; w->ready is zeroed here)
 * and, when push, the combine push in down's epilogues (out_rows also in the source ranks'
 * slots; push 0: a backward replay). */
mok_status mok_gpu_experts_forward_fused(mok_schedule *s, const mok_weights *wt, int push,
                                         cudaStream_t stream);
/* Path FUSED: the experts backward from w->d_out, the dx rows also pushed into the source ranks'
 * slots by the last data gradient's epilogues. */
mok_status mok_gpu_experts_backward_fused(mok_schedule *s, const mok_weights *wt,
                                          const mok_grads *g, cudaStream_t stream);
/* FP8: the forward experts from rows already quantized into the schedule's recv_x (by the FP8
 * dispatch pull, or by mok_gpu_experts_forward from bf16 rows), the outputs in out (NULL: none,
 * as the layer's forward with the fused d_router_weights keeps none: mok_gpu_fp8_kept_out);
 * push: the down epilogues also push them into the source ranks' slots (the combine's move).
 * Neither out nor push: gate+up only (a ring step's replay). */
mok_status mok_gpu_experts_forward_fp8(mok_schedule *s, const mok_weights *wt, void *out,
                                       int push, cudaStream_t stream);
static inline void *mok_gpu_fp8_kept_out(const mok_schedule *s) {
  return s->ws->config.fp8_fused_router_grad ? NULL : s->out_rows;
}
/* FP8: the experts backward from w->d_out (rw * dy rows; with the fused d_router_weights also
 * the unweighted dy already quantized in fp8.q) and what the FP8 forward kept (the quantized
 * inputs and activations, the bf16 pre-activations): the data gradients on the FP8 kernels with
 * the transposed weights, the weight gradients as config fp8_weight_grads says; the dx rows
 * pushed into the source ranks' slots by the last data gradient's epilogues. */
mok_status mok_gpu_experts_backward_fp8(mok_schedule *s, const mok_weights *wt,
                                        const mok_grads *g, cudaStream_t stream);
/* The shared expert (gpu_experts_shared.c): forward into w->ys, backward (weight gradients, dx
 * into w->ys), on the stream given, its GEMMs on at most max_ctas CTAs (0: every SM). */
mok_status mok_gpu_shared_forward(mok_schedule *s, const mok_weights *wt, const void *x,
                                  int max_ctas, cudaStream_t stream);
mok_status mok_gpu_shared_backward(mok_schedule *s, const mok_weights *wt, const void *x,
                                   const void *dy, const mok_grads *g, int max_ctas,
                                   cudaStream_t stream);

#endif
