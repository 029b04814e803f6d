/* layer_harness.h — building blocks of the GPU layer tests: every rank's inputs generated on every
 * process from the shared seed, this rank's device copies, one build + forward + backward, and the
 * comparison with the CPU reference (||out - ref|| / ||ref||, NaN never passes). */
#ifndef MOK_LAYER_HARNESS_H
#define MOK_LAYER_HARNESS_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "mok.h"
#include "mok_reference.h"

#define LH_MAX_RANKS 16
#define LH_TOL 1e-2

enum { LH_INJECT_NONE = 0, LH_INJECT_DUPLICATE = 1, LH_INJECT_BAD_ID = 2 };

typedef struct {
  int64_t T, H, E, I, k, Is;
  mok_route_kind route;
  int use_limit;
  float limit;
  int tile_m;             /* plan tile_m; 0: default */
  int64_t capacity;       /* 0: worst case */
  int grad_fp32, accumulate;
  int inject;             /* LH_INJECT_* on the last rank's tokens */
  mok_path path;          /* plan path; 0 (AUTO): the default, unless MOK_TEST_PATH (oracle,
                             fused, grouped) says                                            */
  int comm_sms;           /* plan fwd_comm_ctas; 0: default                                 */
  int bwd_comm_sms;       /* plan bwd_comm_ctas; 0: default                                 */
  int shared_inline;      /* plan shared_fwd = shared_bwd = in_line (with a shared expert)    */
  int minibatch_rows;     /* plan minibatch_rows; 0: default                                */
  const char *plan;       /* further plan fields pinned, as mok_plan_parse reads them (NULL:
                             none)                                                          */
  mok_dtype dtype;        /* 0: BF16                                                        */
  int64_t ring_bytes;     /* config.ring_bytes (0: no token ring)                           */
  int macro_minibatches;  /* 0: default                                                     */
  double tol;             /* the gradients' bound against the reference; 0: LH_TOL          */
  int bf16_wgrad;         /* FP8: config fp8_weight_grads = 0 (bf16 weight gradients)       */
  int wgrad_mode;         /* FP8: config fp8_weight_grads = this (1 to 3); 0: the default     */
  int unfused_drw;        /* FP8: config fp8_fused_router_grad = 0 (d_rw from kept outputs) */
  int fp8_shared;         /* FP8: config fp8_shared_expert = 1 (the shared expert in FP8; the
                             host's shared weights then hold their dequantized values)       */
  int build_in_forward;   /* lh_run: mok_build_and_forward, not mok_schedule_build and then
                             mok_forward                                                    */
  int candidates;         /* FP8 cases: also every plan mok_plan_candidates gives, bitwise   */
  int mxfp8;              /* FP8 cases: the routed weights quantized to MXFP8, then converted
                             to block-128 (mok_mxfp8_to_block128), not quantized straight   */
  int64_t ws_tokens;      /* lh_env_open: the workspace's T when above T; its schedule then
                             runs T tokens (mok_schedule_set_tokens)                        */
} lh_case;

/* All ranks' inputs on the host (float arrays holding bf16 values). */
typedef struct {
  lh_case c;
  mok_shape shape;
  int ep;
  float *x[LH_MAX_RANKS], *rw[LH_MAX_RANKS], *dy[LH_MAX_RANKS];
  float *wg[LH_MAX_RANKS], *wu[LH_MAX_RANKS], *wd[LH_MAX_RANKS];
  float *sg[LH_MAX_RANKS], *su[LH_MAX_RANKS], *sd[LH_MAX_RANKS];
  float *prefill[6]; /* this rank's gradient buffers' initial values when accumulating */
  int32_t *topk[LH_MAX_RANKS];
} lh_host;

/* This rank's device buffers. Outputs carry a poisoned guard tail checked after each run. */
typedef struct {
  void *x, *y, *dy, *dx;
  float *rw, *drw;
  int32_t *topk;
  void *w[6];   /* gate, up, down, shared gate, up, down (bf16) */
  void *g[6];   /* their gradients (bf16 or fp32) */
  int64_t wn[6];
  mok_weights weights;
  mok_grads grads;
  int build_in_forward; /* the uploaded case's (lh_dev_upload) */
} lh_dev;

/* Generates every rank's inputs for case c (0 on success; nonzero when the routing kind cannot
 * serve the shape, e.g. an empty rank with one rank). */
int lh_host_make(lh_host *h, const lh_case *c, int ep, uint64_t seed);
void lh_host_free(lh_host *h);

int lh_dev_alloc(lh_dev *d, const lh_host *h);
void lh_dev_upload(lh_dev *d, const lh_host *h, int rank);  /* inputs, weights; poisons outputs */
void lh_dev_free(lh_dev *d);

/* ||got - want|| / ||want||; NaN when got has a non-finite value; 0/0 counts as 0. */
double lh_rel_err(const float *got, const float *want, int64_t n);
mok_config lh_config(const lh_case *c);

/* build + forward (in one call with the case's build_in_forward) + backward on stream (no
 * synchronization). */
mok_status lh_run(mok_schedule *s, lh_dev *d, cudaStream_t stream);

/* Compares this rank's outputs and gradients with the reference of h (in its FP8 mode when the
 * case's dtype is FP8); prints one line; counts failed checks into the running test. */
void lh_check_against_reference(const lh_host *h, const lh_dev *d, int rank, const char *label);
/* Every output NaN (the device error path) and guard tails intact. */
void lh_check_all_nan(const lh_host *h, const lh_dev *d, const char *label);
/* Guard tails of the outputs still poisoned (nothing written out of bounds). */
void lh_check_guards(const lh_dev *d, const lh_host *h);

/* Copies every output and gradient of d to one host blob (for bitwise comparison). */
void *lh_snapshot(const lh_dev *d, const lh_host *h, int64_t *bytes);

typedef struct {
  mok_workspace *ws;
  mok_schedule *s;
  cudaStream_t stream;
} lh_env;

/* A case with every default but the fields a test sets. */
lh_case lh_base_case(void);
/* A workspace on group g for h's shape (T raised to the case's ws_tokens) and config, nsched
 * schedules (0 or 1) set to h's T tokens, a stream. */
mok_status lh_env_open(mok_group *g, lh_env *e, const lh_host *h, int nsched);
void lh_env_close(lh_env *e);
/* The workspace's device error word (synchronizes). */
mok_status lh_device_error(mok_workspace *ws);
/* One case on group g: fresh inputs, one run, compare with the reference (or, when expect is a
 * fault, check that every rank reports it and every output is NaN). */
void lh_run_case(mok_group *g, const lh_case *c, const char *label, mok_status expect);

/* A case's set-up: fresh host inputs (the test's seed), their device copies (outputs poisoned), a
 * workspace with one schedule and a stream on group g. lh_setup_open returns 0 when the routing
 * cannot serve the shape at this EP (label printed as skipped; nothing to close), else 1 with the
 * workspace's status in *st, checked to be MOK_SUCCESS; lh_setup_close after that either way. */
typedef struct {
  lh_host h;
  lh_dev d;
  lh_env e;
} lh_setup;
int lh_setup_open(mok_group *g, lh_setup *u, const lh_case *c, const char *label, mok_status *st);
void lh_setup_close(lh_setup *u);

/* config.ring_bytes of `regions` token-ring regions for case c (its shape and macrobatch knob) on
 * a group of ep ranks. */
int64_t lh_ring_bytes(const lh_case *c, int ep, int regions);

/* Device buffers in the kernel-level tests: n bytes copied to a fresh host buffer (the caller
 * frees it; 0x5A bytes where the copy failed); two device ranges bytewise equal; two 1x128 scale
 * tables ([blocks][m_pad] fp32) equal in every block's first rows entries; n router weights in
 * (0, 1] from seed, uploaded to dev. */
char *lh_to_host(const void *dev, size_t n);
int lh_same_bytes(const void *a, const void *b, size_t n);
int lh_same_scales(const float *a, const float *b, int64_t blocks, int64_t m_pad, int64_t rows);
void lh_upload_router_rows(float *dev, int64_t n, uint64_t seed);

/* Two input sets on this rank, uploaded: c1 with the test seed, c2 (the same shape and config,
 * another routing or gradient mode) with seed2; one workspace (c1's config) and schedule. ok: the
 * workspace opened. */
typedef struct {
  lh_host h[2];
  lh_dev d[2];
  lh_env e;
  int ok;
} lh_pair;
void lh_pair_open(mok_group *g, lh_pair *p, const lh_case *c1, const lh_case *c2, uint64_t seed2);
void lh_pair_close(lh_pair *p);
/* Two layers in flight on the pair's workspace: forward 1, forward 2 (on a second schedule),
 * backward 2, backward 1; both compared with the reference. */
void lh_two_in_flight(lh_pair *p, const char *label);

#endif
