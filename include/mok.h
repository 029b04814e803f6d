/* mok.h — the public C API of mok: a whole mixture-of-experts layer (dispatch, SwiGLU experts,
 * combine), forward and backward, across the GPUs of an expert-parallel group.
 *
 * Two layers:
 *   - the functional layer: group -> workspace -> schedule -> forward / backward;
 *   - the ops layer: each stage as its own call on symmetric buffers the caller manages.
 *
 * Conventions for every call:
 *   - Every function returns a mok_status; MOK_SUCCESS is 0. mok_status_string() names each code.
 *   - A call that returns an error has written nothing to its outputs.
 *   - Tensors are row-major and dense. Weights are stored "out x in", like torch.nn.Linear.weight.
 *   - All tensor pointers are device pointers unless the comment says "host".
 *   - Calls taking a cudaStream_t only enqueue work: no host synchronization, no allocation, so the
 *     schedule build, forward and backward can be captured in a CUDA graph. Faults found on the device
 *     (an expert id out of range, schedule capacity overflow, a peer that never answers) set a sticky
 *     error word in the workspace that mok_workspace_error() reports; kernels that see it set do no
 *     further work and leave their outputs as NaN, so nothing is silently dropped.
 *
 * Shapes (per rank; all ranks of a group must pass the same shape):
 *   T tokens, H hidden, E routed experts in total (E / EP per rank; expert e lives on rank
 *   e / (E / EP)), I expert intermediate size, k top-k, Is shared-expert intermediate size (0: none).
 *   GPU calls require H, I and Is to be multiples of MOK_ALIGN_FEATURES, E to be a multiple of EP,
 *   1 <= k <= E, and T >= 0 (T need not be a multiple of any tile).
 */
#ifndef MOK_H
#define MOK_H

#include <stddef.h>
#include <stdint.h>

/* The CUDA stream type, declared as the CUDA runtime declares it (the same typedef may appear
 * twice), so that this header and mok_reference.h compile without the CUDA include path. */
typedef struct CUstream_st *cudaStream_t;

#ifdef __cplusplus
extern "C" {
#endif

/* libmok.so is built with hidden visibility: it exports the functions declared between these
 * pragmas (here and in mok_reference.h), nothing else. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

#define MOK_VERSION_MAJOR 0
#define MOK_VERSION_MINOR 4
#define MOK_VERSION_PATCH 0
#define MOK_VERSION_CODE (MOK_VERSION_MAJOR * 10000 + MOK_VERSION_MINOR * 100 + MOK_VERSION_PATCH)

/* Hidden and intermediate sizes on the GPU path must be multiples of this (one FP8 scaling block,
 * one 128-byte TMA row of bf16 twice over). */
#define MOK_ALIGN_FEATURES 128

/* ---------------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------------- */
typedef enum {
  MOK_SUCCESS = 0,
  MOK_ERR_INVALID_ARGUMENT = 1,  /* a NULL pointer, an unknown enum value, a knob out of range     */
  MOK_ERR_INVALID_SHAPE = 2,     /* a size that is negative, zero where it must not be, or too big */
  MOK_ERR_MISALIGNED = 3,        /* a size or pointer that breaks the alignment rules above        */
  MOK_ERR_EXPERT_ID = 4,         /* a top-k expert id outside [0, E)                               */
  MOK_ERR_DUPLICATE_EXPERT = 5,  /* one token lists the same expert twice in its top-k             */
  MOK_ERR_CAPACITY = 6,          /* the routing needs more schedule rows than the capacity knob    */
  MOK_ERR_SHAPE_MISMATCH = 7,    /* ranks of one group passed different shapes or configs          */
  MOK_ERR_NOT_SUPPORTED = 8,     /* valid request this build or machine cannot run (yet)           */
  MOK_ERR_NO_DEVICE = 9,         /* a GPU call on a machine with no usable CUDA device             */
  MOK_ERR_CUDA = 10,             /* the CUDA runtime returned an error                             */
  MOK_ERR_NCCL = 11,             /* NCCL returned an error                                         */
  MOK_ERR_OUT_OF_MEMORY = 12,    /* an allocation at create time failed                            */
  MOK_ERR_TIMEOUT = 13,          /* a device-side wait on a peer ran past config.timeout_ms        */
  MOK_ERR_INTERNAL = 14,         /* a broken invariant inside mok: please report it                */
  MOK_ERR_DESYNC = 15,           /* ranks of one group made different sequences of collective calls */
  MOK_STATUS_COUNT = 16
} mok_status;

/* A short English description of a status code; never NULL (unknown codes get "unknown status"). */
const char *mok_status_string(mok_status status);

/* What the latest failed CUDA or NCCL call on the calling thread was, where mok made it and why
 * (e.g. "cudaMemcpyAsync(...) at api/gpu_layer.c:123: cudaErrorInvalidValue: invalid argument");
 * "" while none has failed. Kept until the next such failure: read it right after a call that
 * returned MOK_ERR_CUDA or MOK_ERR_NCCL. Never NULL; valid until the thread's next mok call. */
const char *mok_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Data types, shapes, the plan and the config
 * ------------------------------------------------------------------------------------------- */
typedef enum {
  MOK_DTYPE_BF16 = 0,          /* bf16 storage, fp32 accumulation                                   */
  MOK_DTYPE_FP8_BLOCK128 = 1,  /* the routed experts' GEMMs in E4M3, forward and backward: 1x128
                                  activation and 128x128 weight blocks with fp32 scales (the
                                  Hopper-native recipe); weights from mok_quantize_weight, the
                                  backward's transposed copies from mok_fp8_transpose_weights;
                                  the shared expert stays bf16 unless config.fp8_shared_expert  */
  MOK_DTYPE_MXFP8 = 2          /* E4M3 with 32-element blocks and E8M0 scales (MX checkpoints):
                                  a weight format, not a layer dtype. mok_quantize_weight makes
                                  it, mok_mxfp8_to_block128 converts it once to FP8_BLOCK128,
                                  whose layer runs it (docs/DESIGN.md, "MXFP8"); a config with
                                  it is MOK_ERR_NOT_SUPPORTED                                   */
} mok_dtype;

typedef struct {
  int64_t tokens;              /* T: tokens on this rank, >= 0; for a workspace, the most tokens
                                  a call may have (mok_schedule_set_tokens)                      */
  int64_t hidden;              /* H: model width                                                 */
  int64_t num_experts;         /* E: routed experts across the whole group                       */
  int64_t intermediate;        /* I: routed expert intermediate size                             */
  int64_t top_k;               /* k: experts per token, 1 <= k <= E                              */
  int64_t shared_intermediate; /* Is: shared expert intermediate size; 0 means no shared expert  */
} mok_shape;

/* The plan: how a workspace runs, every kernel-variant and schedule choice in one place. It is
 * resolved once, by mok_workspace_create, from the shape, the config and the device; every rank
 * of the group must resolve the same plan (MOK_ERR_SHAPE_MISMATCH otherwise, as for a shape
 * mismatch); it is the only thing the launches read. The alternatives of a field give bitwise
 * the same results (path ORACLE excepted: other GEMMs, other roundings). config.plan holds the
 * caller's requests: 0 in a field lets mok choose (the resolved plan then holds the choice, or 0
 * where the field does not apply to the shape, dtype or path); a request that cannot run returns
 * MOK_ERR_NOT_SUPPORTED, one out of range MOK_ERR_INVALID_ARGUMENT. The text form
 * (mok_plan_parse, mok_plan_format) is "key=value,key=value" with the keys and values named
 * below. See docs/DESIGN.md, "The plan". */
typedef enum {
  MOK_PATH_AUTO = 0,     /* request only: the fastest path for the shape and dtype (resolved:
                            FUSED for BF16 across GPUs, GROUPED for FP8 and on one GPU, ORACLE
                            where the grouped GEMMs cannot run)                             */
  MOK_PATH_FUSED = 1,    /* "fused": communication inside the grouped GEMM launches: comm CTAs
                            of the gate+up launch pull the dispatch, the down and last data-
                            gradient epilogues push the combine and dx rows (sm_90, BF16)    */
  MOK_PATH_ORACLE = 2,   /* "oracle": separate kernels and mma.sync GEMMs with fp32
                            pre-activations (kernels/v1): the GPU oracle the other paths are
                            checked against, and the path of tile_m 64 (BF16)                */
  MOK_PATH_GROUPED = 3   /* "grouped": separate dispatch / combine kernels with the grouped TMA
                            + wgmma expert GEMMs (sm_90, tile_m 128 or 256)                  */
} mok_path;

typedef enum {
  MOK_SCHEDULE_AUTO = 0,
  MOK_SCHEDULE_PARALLEL = 1, /* "parallel": the table built by many threads per chunk          */
  MOK_SCHEDULE_SERIAL = 2    /* "serial": one thread per chunk (the same table; its cross-check) */
} mok_schedule_builder;

typedef enum {
  MOK_SHARED_AUTO = 0,
  MOK_SHARED_IN_LINE = 1,    /* "in_line": the shared expert on the caller's stream, after the
                                routed experts, on every SM                                     */
  MOK_SHARED_BESIDE = 2,     /* "beside": on a side stream beside the pass's first communication
                                kernel, on the SMs that kernel leaves, joined right after it
                                (separate communication kernels only)                          */
  MOK_SHARED_BESIDE_LATE = 3 /* "beside_late", forward only: the same, joined only before the
                                combine (the FP8 one-launch MLP takes the SMs as the shared
                                expert leaves them)                                            */
} mok_shared_placement;

typedef enum {
  MOK_FP8_MLP_AUTO = 0,
  MOK_FP8_MLP_ONE_LAUNCH = 1,  /* "one_launch": gate+up and down in one persistent launch, each
                                  row block's down tiles waiting only for that block (H a
                                  multiple of 256, at most 256 local experts)                   */
  MOK_FP8_MLP_TWO_LAUNCHES = 2 /* "two_launches": gate+up, then down                             */
} mok_fp8_mlp_form;

typedef struct {
  mok_path path;                 /* path=fused|grouped|oracle                                   */
  mok_schedule_builder schedule; /* schedule=parallel|serial                                    */
  int tile_m;                    /* tile_m=64|128|256: rows per GEMM tile; each expert's rows
                                    are padded to it (64: the oracle path only)                 */
  int minibatch_rows;            /* minibatch=ROWS: rows moved and computed as one unit (the
                                    fused pull's readiness step), a multiple of tile_m         */
  int fwd_comm_ctas;             /* fwd_comm=N: forward CTAs that move tokens. Fused: the comm
                                    CTAs inside gate+up (rounded up to its cluster size).
                                    Grouped with the shared expert beside: the CTAs of the
                                    dispatch kernel (the shared expert's GEMMs get the rest).
                                    At most half the SMs                                       */
  int bwd_comm_ctas;             /* bwd_comm=N: the reverse combine's CTAs beside the shared
                                    expert's backward                                           */
  mok_shared_placement shared_fwd; /* shared_fwd=in_line|beside|beside_late                    */
  mok_shared_placement shared_bwd; /* shared_bwd=in_line|beside                                */
  mok_fp8_mlp_form fp8_mlp;      /* fp8_mlp=one_launch|two_launches (FP8)                       */
  int routed_cluster;            /* routed_cluster=1|2: the BF16 row-grouped GEMMs of the routed
                                    experts in single CTAs or cluster pairs sharing B           */
  int shared_cluster;            /* shared_cluster=1|2: the same for the shared expert          */
  int routed_warpgroups;         /* routed_warpgroups=2|3: FP8 products whose columns do not
                                    split into 256: consumer warpgroups of the 128-column kernel */
  int shared_warpgroups;         /* shared_warpgroups=2|3: the same for the FP8 shared expert   */
  int wgrad_cluster_down;        /* wgrad_cluster_down=1|2: the weight gradient of W_down in
                                    single CTAs or cluster pairs (FP8, fp8_weight_grads 3:
                                    sharing B, pairs need H a multiple of 256; BF16 routed
                                    experts: sharing the activation blocks A)                   */
  int wgrad_cluster_gate_up;     /* wgrad_cluster_gate_up=1|2: the same for W_gate, W_up (I)     */
} mok_plan;

/* Parses "key=value,..." (the keys and values above; "auto" or 0 for any field) into *plan,
 * setting only the fields named. MOK_ERR_INVALID_ARGUMENT on an unknown key or value (*plan is
 * then unchanged). Host; needs no device. */
mok_status mok_plan_parse(const char *text, mok_plan *plan);

/* Writes every field of *plan as "key=value,..." ("auto" for 0) into buf (size bytes,
 * NUL-terminated). MOK_ERR_INVALID_ARGUMENT when it does not fit (buf holds a truncated string). */
mok_status mok_plan_format(const mok_plan *plan, char *buf, size_t size);

#define MOK_CONFIG_MAGIC 0x6d6f6b43u /* "mokC" */

/* The config: what a workspace computes and holds (dtype, numerics, memory) and the caller's plan
 * requests. Make one with mok_config_init() or MOK_CONFIG_INITIALIZER, then set fields: the
 * leading size, magic and version let a library accept a config from a caller built against an
 * older mok.h (fields past the caller's size take their defaults) and reject garbage. Every call
 * that takes a config checks them (MOK_ERR_INVALID_ARGUMENT). New fields are only added at the
 * end. */
typedef struct {
  size_t size;                 /* sizeof(mok_config) of the caller's header                     */
  unsigned int magic;          /* MOK_CONFIG_MAGIC                                              */
  unsigned int version;        /* MOK_VERSION_CODE of the caller's header                       */
  mok_dtype dtype;             /* routed-expert GEMM precision (the shared expert's: below)    */
  int64_t ring_bytes;          /* the token ring of each schedule: 0, none (every row the routing
                                  can produce stays resident, as the capacity sizes it); else as
                                  many regions of (macrobatch rows + EP*T) rows of H bf16 as fit,
                                  at least one. Forward keeps the last regions' macrobatches for
                                  backward, which pulls the others again and replays their
                                  forward: memory then depends on this knob, not on the capacity
                                  (paths FUSED and GROUPED; BF16 or FP8)                          */
  int macrobatch_minibatches;  /* minibatches per macrobatch, >= 1: the experts whose rows start
                                  in the same minibatch_rows * macrobatch_minibatches rows of the
                                  schedule form one macrobatch, the unit of the token ring      */
  int64_t schedule_capacity;   /* padded rows the schedule may hold per rank; 0: the worst case
                                  for the shape (never overflows); smaller values save memory and
                                  report MOK_ERR_CAPACITY when a routing does not fit; a multiple
                                  of the plan's tile_m                                           */
  int use_swiglu_limit;        /* nonzero: a = silu(min(g, L)) * clamp(u, -L, L)                 */
  float swiglu_limit;          /* L, > 0, used when use_swiglu_limit is nonzero                  */
  int timeout_ms;              /* bound on any device-side wait for a peer; > 0                  */
  int fp8_weight_grads;        /* FP8 only, 0 to 3: the routed weight gradients' GEMMs. 3 (the
                                  default): in FP8, the gradients quantized 1x128 along each
                                  expert's tokens (each 128-token block promoted with its own
                                  scale), the activations and inputs (act, x) with one scale per
                                  expert and channel; 1: both operands 1x128 (the DeepSeek-V3
                                  recipe); 2: both per expert and channel, the tokens accumulated
                                  on the tensor cores with no promotion (coarser: the tensor
                                  cores' ~14-bit FP8 accumulation costs precision as experts get
                                  long); 0: in bf16, on the forward's quantized inputs and
                                  activations dequantized (most exact). bf16 gradients
                                  accumulated into (mok_grads.accumulate without grad_fp32) take
                                  the bf16 route in every mode                                   */
  int fp8_fused_router_grad;   /* FP8 only, 0 or 1. 1 (the default): d_router_weights inside the
                                  SwiGLU backward (g . act, from the unweighted dy quantized to
                                  E4M3 for the d_act GEMM), and the forward keeps no expert
                                  outputs; 0: from the forward's kept outputs and the bf16 dy
                                  (more exact: dy not quantized; more memory)                    */
  int fp8_shared_expert;       /* FP8 only, 0 or 1. 1: the shared expert's GEMMs in FP8 too:
                                  its bf16 weights quantized in 128x128 blocks by the layer at
                                  every call, its input, activations, output gradient and gate /
                                  up gradients in 1x128 blocks, its weight gradients (of the
                                  dequantized weights) in bf16; y is then further from the bf16
                                  layer's (one expert's error, not averaged over k). 0 (the
                                  default): the shared expert in bf16                            */
  mok_plan plan;               /* plan requests (0: let mok choose), above                      */
  const char *plan_cache;      /* the tuned plans (`mok tune`, mok_plan_cache_store): a file of
                                  the plan measured fastest per device, shape, group size and
                                  config, read at workspace creation when no plan field is
                                  requested; NULL or "": none. (`mok` and the Python package
                                  pass $XDG_CACHE_HOME/mok/plans.tsv, else ~/.cache/mok/plans.tsv,
                                  by default.) Every plan gives the same results; only the speed
                                  depends on it                                                  */
} mok_config;

/* The config's layout before plan_cache: a caller built against mok 0.2 passes this size. */
#define MOK_CONFIG_SIZE_0_2 offsetof(mok_config, plan_cache)

#define MOK_CONFIG_INITIALIZER                                                                  \
  {                                                                                             \
    sizeof(mok_config), MOK_CONFIG_MAGIC, MOK_VERSION_CODE, MOK_DTYPE_BF16, 0, 64, 0, 0, 0.0f,  \
        10000, 3, 1, 0, {MOK_PATH_AUTO, MOK_SCHEDULE_AUTO, 0, 0, 0, 0, MOK_SHARED_AUTO,         \
                         MOK_SHARED_AUTO, MOK_FP8_MLP_AUTO, 0, 0, 0, 0, 0, 0},                  \
        NULL                                                                                    \
  }

/* Fills *config with the defaults (what MOK_CONFIG_INITIALIZER holds): BF16, no token ring, 64
 * minibatches per macrobatch, capacity 0 (the worst case), no SwiGLU limit, timeout 10000 ms;
 * when FP8: weight gradients in FP8 (mode 3), the router-weight gradient fused into the SwiGLU
 * backward, the shared expert in bf16; every plan field 0 (mok chooses). */
mok_status mok_config_init(mok_config *config);

/* Checks a shape and config for the GPU path without touching a device: the config's size and
 * magic, alignment, ranges, E divisible by ep, the plan requests' values and what the dtype
 * allows (FP8 runs on the grouped path only; MXFP8 weights run as FP8_BLOCK128, so a config with
 * MOK_DTYPE_MXFP8 is MOK_ERR_NOT_SUPPORTED), the
 * schedule's and the token ring's sizes. What depends on the device (an sm_90 GPU for the grouped
 * GEMMs, the SM count bounding the comm CTAs) is checked by mok_workspace_create. ep is the
 * expert-parallel group size. */
mok_status mok_validate(const mok_shape *shape, const mok_config *config, int ep);

/* Worst-case padded schedule rows per rank for a shape, group size and tile: the smaller of
 * EP*T*k and (E/EP)*EP*T, plus (E/EP)*(tile_m-1) padding rows. */
mok_status mok_schedule_worst_case_rows(const mok_shape *shape, int ep, int tile_m,
                                        int64_t *rows);

/* ---------------------------------------------------------------------------------------------
 * Expert-parallel group (one process per GPU)
 * ------------------------------------------------------------------------------------------- */
typedef struct mok_group mok_group;

/* An opaque id that one rank makes and sends to the others (same bytes as ncclUniqueId). */
typedef struct { char internal[128]; } mok_unique_id;

/* Makes a fresh id on one rank (host). */
mok_status mok_get_unique_id(mok_unique_id *id);

/* Collective over nranks processes: creates the group and its own NCCL communicator on the
 * current CUDA device. rank in [0, nranks). */
mok_status mok_group_create(const mok_unique_id *id, int nranks, int rank, mok_group **group);

/* Creates a group over an NCCL communicator the caller owns (an ncclComm_t passed as void*). The
 * communicator must outlive the group; mok never destroys it. Collective. */
mok_status mok_group_create_from_nccl(void *nccl_comm, mok_group **group);

/* Rank and size of the group (host). */
mok_status mok_group_rank(const mok_group *group, int *rank);
mok_status mok_group_size(const mok_group *group, int *size);

/* Collective. Destroys the group (and its communicator when mok created it). NULL is a no-op. */
mok_status mok_group_destroy(mok_group *group);

/* ---------------------------------------------------------------------------------------------
 * Functional layer
 * ------------------------------------------------------------------------------------------- */

/* Scratch for one shape and config on one group: symmetric receive / combine buffers, the token
 * ring, the gathered routing and the device error word. Its size depends on the shape and knobs
 * only, never on the routing. One workspace may serve many MoE layers run one after another on the
 * same stream. */
typedef struct mok_workspace mok_workspace;

/* Collective. Validates the request (mok_validate, and what the device allows), resolves the plan
 * (mok_plan), checks that every rank passed the same shape and config and resolved the same plan
 * (MOK_ERR_SHAPE_MISMATCH otherwise, on every rank), then allocates. */
mok_status mok_workspace_create(mok_group *group, const mok_shape *shape,
                                const mok_config *config, mok_workspace **workspace);

/* The workspace's resolved plan (host). */
mok_status mok_workspace_plan(const mok_workspace *workspace, mok_plan *plan);

/* The resolved plan in words (host; mok_plan_format's text, valid while the workspace lives),
 * e.g. "path=grouped,schedule=parallel,tile_m=128,...". "" for NULL. */
const char *mok_workspace_kernels(const mok_workspace *workspace);

/* *tuned = 1 when the workspace's plan came from the tuned plan cache (config.plan_cache), 0
 * when mok chose it from the shape alone or the caller requested fields. */
mok_status mok_workspace_plan_tuned(const mok_workspace *workspace, int *tuned);

/* ---- tuning: the plan measured fastest per shape ---------------------------------------------
 * Every plan of a shape gives the same bits; which is fastest depends on the machine. `mok tune`
 * times the candidates (mok_plan_candidates) on the shape with synthetic routing, the slowest
 * rank's time deciding, and stores the fastest in the plan cache; workspaces of that device,
 * shape, group size and config then run it (config.plan_cache; pinning any plan field instead
 * resolves from the shape as before). See docs/DESIGN.md, "Tuning". */

/* The plans this device can run for the request, the default (what mok chooses from the shape)
 * first, then those that differ from it in one field the caller did not request, each once:
 * *count of them (at most max) in plans[], as resolved plans. Host; reads the current device's
 * properties. */
mok_status mok_plan_candidates(const mok_shape *shape, const mok_config *config, int ep,
                               mok_plan *plans, int max, int *count);

/* The plan cache's key of a request on the current device (its name, the group size, the shape,
 * every config field that can change which plan is fastest, and this library's version), as one
 * line of text without tabs. Host. */
mok_status mok_plan_cache_key(const mok_shape *shape, const mok_config *config, int ep, char *buf,
                              size_t size);

/* *found = 1 and *plan = the cached plan of key in the file at path (the latest entry), else
 * *found = 0 (also when the file does not exist). Lines that do not parse are ignored. */
mok_status mok_plan_cache_lookup(const char *path, const char *key, mok_plan *plan, int *found);

/* Stores plan (and its measured step time ms, for the reader) as key's entry of the file at path,
 * replacing an earlier entry of the key; the folder is made when missing, and the file is
 * replaced whole (a reader never sees half of it). */
mok_status mok_plan_cache_store(const char *path, const char *key, const mok_plan *plan,
                                double ms);

/* Device bytes the workspace holds on this rank (host). */
mok_status mok_workspace_bytes(const mok_workspace *workspace, int64_t *bytes);

/* Reads the sticky device error word (this synchronizes with the device: call it at a step
 * boundary, not inside a captured graph). *device_status is MOK_SUCCESS when no fault was seen.
 * A fault raised on any rank of the group reaches every rank's word at the next barrier of the
 * call it happened in: a bad expert id, a capacity overflow, a peer that never arrived
 * (MOK_ERR_TIMEOUT), ranks that made different calls (MOK_ERR_DESYNC); a collective call one
 * rank refused puts that rank's status (e.g. MOK_ERR_INVALID_ARGUMENT) in every other rank's
 * word (the refusing rank's call returned it). */
mok_status mok_workspace_error(mok_workspace *workspace, mok_status *device_status);

/* mok_workspace_error, and the rank the fault was first raised on (for MOK_ERR_TIMEOUT: the rank
 * that did not arrive); -1 when there is none. */
mok_status mok_workspace_error_rank(mok_workspace *workspace, mok_status *device_status,
                                    int *rank);

/* Clears the device error word (enqueued on stream). After any fault, including a timeout, the
 * workspace is usable again once every rank has cleared its word: the barriers' names keep later
 * calls apart from what a late peer still does. */
mok_status mok_workspace_clear_error(mok_workspace *workspace, cudaStream_t stream);

/* Collective in place of a call this rank will not make (a binding that refused its arguments
 * before reaching mok, say): enqueued on stream, it ends the peers' matching collective call at
 * once with cause (a status other than success) and this rank in their error words, instead of
 * leaving them to their timeout; this rank's own word is left as it is. mok's own calls do this
 * for themselves when they fail: a call refused on every rank leaves no fault anywhere. */
mok_status mok_workspace_reject(mok_workspace *workspace, mok_status cause, cudaStream_t stream);

/* Collective. NULL is a no-op. */
mok_status mok_workspace_destroy(mok_workspace *workspace);

/* The schedule of one MoE layer invocation: for each local expert, which (source rank, token, k)
 * rows it processes, in a fixed order, padded to tile_m; plus what forward keeps for backward.
 * Create one per layer that is in flight between its forward and its backward. */
typedef struct mok_schedule mok_schedule;

mok_status mok_schedule_create(mok_workspace *workspace, mok_schedule **schedule);
mok_status mok_schedule_destroy(mok_schedule *schedule);

/* Host. This rank's token count for the schedule's next build and the passes on it, 0 to the
 * workspace's shape.tokens (the default), so that steps of varying size share one workspace and its
 * memory. Ranks may pass different counts: each build reads every peer's from symmetric memory.
 * Until the schedule is built again, mok_forward, mok_backward and the ops refuse it
 * (MOK_ERR_INVALID_ARGUMENT); the tensors of every call have the count's T rows. */
mok_status mok_schedule_set_tokens(mok_schedule *schedule, int64_t tokens);

/* Collective, enqueued on stream. Gathers every rank's topk_experts [T, k] int32 through symmetric
 * memory and builds this rank's table on the device; no count reaches the host. Invalid ids,
 * duplicates within a token and capacity overflow set the workspace error word. */
mok_status mok_schedule_build(mok_schedule *schedule, const int32_t *topk_experts,
                              cudaStream_t stream);

/* Padded rows this rank's experts got in the last build (host; synchronizes with the device, for
 * tests and diagnostics only). */
mok_status mok_schedule_rows(mok_schedule *schedule, int64_t *rows);

/* Device bytes the schedule holds on this rank (its table and what forward keeps for backward:
 * the capacity's rows, or the token ring's regions) (host). */
mok_status mok_schedule_bytes(const mok_schedule *schedule, int64_t *bytes);

/* Routed-expert weights of this rank's E/EP experts and the shared expert's weights.
 * BF16: w_gate, w_up [E/EP, I, H] bf16; w_down [E/EP, H, I] bf16.
 * FP8 dtypes: w_gate, w_up, w_down point to E4M3 data of the same shapes, made by
 *   mok_quantize_weight(), and the *_scale pointers to its scales; ignored for BF16.
 *   mok_backward also reads the transposed copies mok_fp8_transpose_weights() makes from them
 *   (w_gate_up_t, w_down_t and their scales; forward ignores them, and they may be NULL when
 *   there is no backward).
 * Shared expert (bf16, also with FP8 routed experts: with config.fp8_shared_expert the layer
 * quantizes it at every call; NULL when Is == 0): ws_gate, ws_up [Is, H]; ws_down [H, Is]. */
typedef struct {
  const void *w_gate;
  const void *w_up;
  const void *w_down;
  const void *w_gate_scale;
  const void *w_up_scale;
  const void *w_down_scale;
  const void *ws_gate;
  const void *ws_up;
  const void *ws_down;
  const void *w_gate_up_t;       /* FP8 backward: [E/EP, H, 2I] e4m3 (W_gate^T | W_up^T)        */
  const void *w_gate_up_t_scale; /*   its scales [E/EP, H/128, 2I/128] fp32                     */
  const void *w_down_t;          /*   [E/EP, I, H] e4m3 (W_down^T)                              */
  const void *w_down_t_scale;    /*   its scales [E/EP, I/128, H/128] fp32                      */
} mok_weights;

/* Collective, enqueued on stream. y[t] = shared(x[t]) + sum_j router_weights[t,j] *
 * expert_{topk[t,j]}(x[t]), summed in j order, with the schedule built from this step's topk.
 * x [T, H] bf16; router_weights [T, k] fp32; y [T, H] bf16 (written, never read); T the
 * schedule's token count. Errors, before anything is enqueued: MOK_ERR_INVALID_ARGUMENT (a NULL
 * pointer where T > 0, missing FP8 scales, the schedule not built for its count),
 * MOK_ERR_MISALIGNED (a tensor not 16-byte aligned, router weights not 4-byte aligned). */
mok_status mok_forward(mok_schedule *schedule, const mok_weights *weights, const void *x,
                       const float *router_weights, void *y, cudaStream_t stream);

/* Collective, enqueued on stream. mok_schedule_build(schedule, topk_experts) then mok_forward in
 * one call, with the same results bit for bit; the shared expert's GEMMs start before the build,
 * so that they overlap it. Every argument is checked before anything is enqueued. */
mok_status mok_build_and_forward(mok_schedule *schedule, const int32_t *topk_experts,
                                 const mok_weights *weights, const void *x,
                                 const float *router_weights, void *y, cudaStream_t stream);

/* Gradients written by mok_backward. Weight gradients have the weights' bf16 shapes and are stored
 * in bf16, or fp32 when grad_fp32 is nonzero; when accumulate is nonzero they are added to what
 * the buffers hold (fp32 main-grad style), else overwritten. The shared expert's gradients are
 * ignored when Is == 0. */
typedef struct {
  void *dx;                /* [T, H] bf16                                                       */
  float *d_router_weights; /* [T, k] fp32: dot(dy[t], expert_{topk[t,j]}(x[t]))               */
  void *dw_gate;           /* [E/EP, I, H]                                                     */
  void *dw_up;             /* [E/EP, I, H]                                                     */
  void *dw_down;           /* [E/EP, H, I]                                                     */
  void *dws_gate;          /* [Is, H]                                                          */
  void *dws_up;            /* [Is, H]                                                          */
  void *dws_down;          /* [H, Is]                                                          */
  int grad_fp32;           /* nonzero: weight gradients are fp32                                */
  int accumulate;          /* nonzero: add into the weight-gradient buffers                     */
} mok_grads;

/* Collective, enqueued on stream. The backward of mok_forward on the same schedule, inputs and
 * weights; dy [T, H] bf16. Deterministic: the same inputs give bitwise-identical gradients,
 * whatever the plan. FP8: also the transposed weights (mok_weights). Errors as mok_forward's,
 * and MOK_ERR_MISALIGNED for weight gradients not 4-byte (bf16) or 8-byte (fp32) aligned. */
mok_status mok_backward(mok_schedule *schedule, const mok_weights *weights, const void *x,
                        const float *router_weights, const void *dy, const mok_grads *grads,
                        cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------
 * FP8 weight quantization (ahead of time)
 * ------------------------------------------------------------------------------------------- */

/* Scale entries for a weight tensor [experts, rows, cols] in an FP8 dtype: BLOCK128 has one fp32
 * per 128x128 block, experts * ceil(rows/128) * ceil(cols/128); MXFP8 one E8M0 byte per 1x32 block
 * along cols, experts * rows * ceil(cols/32). */
mok_status mok_fp8_scale_count(mok_dtype dtype, int64_t experts, int64_t rows, int64_t cols,
                               int64_t *count);

/* Enqueued on stream. Quantizes w [experts, rows, cols] bf16 into data (E4M3, same shape) and
 * scales (mok_fp8_scale_count entries) in the given FP8 dtype. MOK_DTYPE_FP8_BLOCK128: rows and
 * cols multiples of 128 (MOK_ERR_MISALIGNED otherwise), w and data 16-byte aligned; scales
 * [experts, rows/128, cols/128] fp32, each block's absolute maximum over 448. MOK_DTYPE_MXFP8
 * (the OCP MX rules): cols a multiple of 32, w and data 16-byte aligned; scales [experts, rows,
 * cols/32] E8M0 bytes, each 2^(floor(log2(amax)) - 8) over its 32 values, the codes saturating
 * E4M3; a block holding a NaN or an infinity gets E8M0 NaN (255) and NaN codes. This is also the
 * layout MXFP8 weights given by the caller take (a checkpoint's codes and scales as stored,
 * row-major, the 32-blocks along cols). */
mok_status mok_quantize_weight(mok_dtype dtype, const void *w, int64_t experts, int64_t rows,
                               int64_t cols, void *data, void *scales, cudaStream_t stream);

/* Enqueued on stream. MXFP8 weights (mok_quantize_weight's MOK_DTYPE_MXFP8 layout) converted to
 * MOK_DTYPE_FP8_BLOCK128 ones, which the layer runs (docs/DESIGN.md, "MXFP8"): a 128x128 block's
 * scale is the largest of its MX scales, each value is re-expressed at that scale exactly where
 * it stays in E4M3's normal range, else rounded to the nearest subnormal step (2^-9 of the block
 * scale, or zero); exact when a block's MX scales are equal. A block holding an E8M0 NaN becomes
 * NaN (scale and codes). rows and cols multiples of 128 (MOK_ERR_MISALIGNED), mx_data and data
 * 16-byte aligned; data [experts, rows, cols] e4m3, scales [experts, rows/128, cols/128] fp32. Make
 * them again whenever the weights change, then mok_fp8_transpose_weights for the backward. */
mok_status mok_mxfp8_to_block128(const void *mx_data, const uint8_t *mx_scales, int64_t experts,
                                 int64_t rows, int64_t cols, void *data, float *scales,
                                 cudaStream_t stream);

/* Enqueued on stream. bf16 weights w [experts, rows, cols] -> the block-128 codes and scales of
 * their MXFP8 values, in one pass: bit for bit mok_quantize_weight(MOK_DTYPE_MXFP8) followed by
 * mok_mxfp8_to_block128, without the MXFP8 tensors (how a model trained on MX numerics from bf16
 * master weights makes its layer's weights). rows and cols multiples of 128, w and data 16-byte
 * aligned; data and scales as mok_mxfp8_to_block128's. */
mok_status mok_quantize_weight_mxfp8_block128(const void *w, int64_t experts, int64_t rows,
                                              int64_t cols, void *data, float *scales,
                                              cudaStream_t stream);

/* Enqueued on stream. The FP8 backward's weights from the forward's (w->w_gate, w_up, w_down and
 * their scales, as mok_quantize_weight made them for `experts` experts of intermediate size inter
 * and hidden size hidden): gate_up_t [experts, hidden, 2 inter] e4m3 holding W_gate^T beside
 * W_up^T, with scales [experts, hidden/128, 2 inter/128]; down_t [experts, inter, hidden] e4m3
 * (W_down^T), with scales [experts, inter/128, hidden/128]. Codes and scales are moved, not
 * quantized again, so the backward's GEMMs see exactly the forward's weights. Only
 * MOK_DTYPE_FP8_BLOCK128 (MOK_ERR_NOT_SUPPORTED otherwise); sizes multiples of 128, data 16-byte
 * aligned. Make them again whenever the weights change. */
mok_status mok_fp8_transpose_weights(mok_dtype dtype, const mok_weights *w, int64_t experts,
                                     int64_t inter, int64_t hidden, void *gate_up_t,
                                     void *gate_up_t_scales, void *down_t, void *down_t_scales,
                                     cudaStream_t stream);

/* Enqueued on stream. mok_quantize_weight(MOK_DTYPE_FP8_BLOCK128, w, ...) and, from the same read
 * of w, its codes' transposed copy as mok_fp8_transpose_weights lays it out: data_t [experts,
 * cols, ld_t] e4m3 with code (e, r, c) at data_t[e][c][col_off + r], and scales_t [experts,
 * cols/128, ld_t/128] fp32 with block (e, rb, cb)'s scale at column col_off/128 + rb. Bit for bit
 * those two calls, with one read of the bf16 weight instead of a second pass over the codes (how
 * training makes the step's FP8 weights when its backward follows): w_gate with ld_t 2 inter and
 * col_off 0, w_up with 2 inter and inter, w_down with hidden and 0 give the backward's gate_up_t
 * and down_t. Only MOK_DTYPE_FP8_BLOCK128 (MOK_ERR_NOT_SUPPORTED otherwise); rows, cols, ld_t and
 * col_off multiples of 128, col_off + rows <= ld_t; w, data and data_t 16-byte aligned. */
mok_status mok_quantize_weight_transposed(mok_dtype dtype, const void *w, int64_t experts,
                                          int64_t rows, int64_t cols, void *data, void *scales,
                                          void *data_t, void *scales_t, int64_t ld_t,
                                          int64_t col_off, cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------
 * Ops layer: the stages one by one, on buffers the caller manages
 * ------------------------------------------------------------------------------------------- */

/* A buffer every rank of the group allocated with the same size, registered for peer access. */
typedef struct {
  void *ptr;       /* this rank's device pointer                                    */
  size_t bytes;    /* size on every rank                                           */
  void *window;    /* the registration (an ncclWindow_t); opaque                   */
} mok_sym_buffer;

/* Collective: allocate and register / deregister and free a symmetric buffer. */
mok_status mok_sym_alloc(mok_group *group, size_t bytes, mok_sym_buffer *buffer);
mok_status mok_sym_free(mok_group *group, mok_sym_buffer *buffer);

/* Forward stages, in order. All enqueued on stream, all collective where they touch peers.
 * recv:     [rows, H] bf16, rows = the schedule's capacity: tokens pulled to this rank's experts
 *           (its padding rows zero; the backward reads them as mok_op_dispatch left them).
 * out_rows: [rows, H] bf16: the experts' outputs, row for row.
 * combine:  symmetric [T*k, H] bf16: expert outputs pushed back to their (token, k) slots. */
mok_status mok_op_dispatch(mok_schedule *schedule, const mok_sym_buffer *x, void *recv,
                           cudaStream_t stream);
mok_status mok_op_experts_forward(mok_schedule *schedule, const mok_weights *weights,
                                  const void *recv, void *out_rows, cudaStream_t stream);
mok_status mok_op_combine(mok_schedule *schedule, const void *out_rows,
                          const mok_sym_buffer *combine, cudaStream_t stream);
mok_status mok_op_combine_reduce(mok_schedule *schedule, const mok_weights *weights,
                                 const void *x, const mok_sym_buffer *combine,
                                 const float *router_weights, void *y, cudaStream_t stream);

/* Backward stages, in order: pull dy to the experts, expert backward (weight gradients of this
 * rank's experts, d_router_weights pushed home), push dx parts to the (token, k) slots, reduce. */
mok_status mok_op_reverse_combine(mok_schedule *schedule, const mok_sym_buffer *dy, void *recv_dy,
                                  cudaStream_t stream);
mok_status mok_op_experts_backward(mok_schedule *schedule, const mok_weights *weights,
                                   const void *recv, const void *recv_dy,
                                   const mok_sym_buffer *router_weights, void *dx_rows,
                                   const mok_grads *grads, cudaStream_t stream);
mok_status mok_op_reverse_dispatch(mok_schedule *schedule, const void *dx_rows,
                                   const mok_sym_buffer *dx_parts, cudaStream_t stream);
mok_status mok_op_reverse_dispatch_reduce(mok_schedule *schedule, const mok_weights *weights,
                                          const void *x, const void *dy,
                                          const mok_sym_buffer *dx_parts, const mok_grads *grads,
                                          cudaStream_t stream);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* MOK_H */
