/* mok_reference.h — the CPU reference of the whole MoE layer, forward and backward, over all ranks
 * of an expert-parallel group at once: the oracle every GPU result is compared with.
 *
 * Math (docs/DESIGN.md, "The layer, exactly"), per rank s and token t:
 *   y[s][t] = shared(x[s][t]) + sum_{j<k} router_weights[s][t][j] * expert_{topk[s][t][j]}(x[s][t])
 *   expert_e(v) = W_down[e] swiglu(W_gate[e] v, W_up[e] v), weights of expert e on rank e / (E/EP)
 *   swiglu(g, u) = silu(g) * u, or with a limit L: silu(min(g, L)) * clamp(u, -L, L)
 * Backward, given dy: dx, d_router_weights[t][j] = dot(dy[t], expert output), and the gradients of
 * the six weight tensors. At g == L or |u| == L the clamp passes the gradient (as torch.clamp does).
 *
 * Tensors are host float arrays (a bf16 tensor converts exactly: mok_bf16_to_float_array); all sums
 * run in double. With round_bf16 set, the intermediates the GPU stores in bf16 are rounded the same
 * way (activations, expert and shared outputs, their gradients); with it clear the function is exact
 * and smooth, which the finite-difference tests need.
 */
#ifndef MOK_REFERENCE_H
#define MOK_REFERENCE_H

#include <stdint.h>
#include "mok.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported by libmok.so, as mok.h's functions are. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* bf16 <-> float. Rounding is to nearest, ties to even; NaN stays NaN (quiet), infinities stay. */
uint16_t mok_bf16_from_float(float f);
float mok_bf16_to_float(uint16_t b);
float mok_bf16_round(float f); /* float -> bf16 -> float */
void mok_bf16_from_float_array(const float *src, uint16_t *dst, int64_t n);
void mok_bf16_to_float_array(const uint16_t *src, float *dst, int64_t n);

/* E4M3 (FP8 with 4 exponent and 3 mantissa bits, max 448, no infinities) <-> float: rounding to
 * nearest, ties to even, saturating to +-448, as the GPU's cvt.rn.satfinite does; NaN -> 0x7f. */
uint8_t mok_e4m3_from_float(float f);
float mok_e4m3_to_float(uint8_t b);
float mok_e4m3_round(float f);

/* mok's FP8 block scaling (MOK_DTYPE_FP8_BLOCK128), bit for bit as the GPU does it: per block,
 * scale = amax / 448 in fp32 (1 for an all-zero block), codes = e4m3(value * (1 / scale)).
 * Weights [experts, n, k] (n, k multiples of 128) in 128x128 blocks: q [experts, n, k],
 * scales [experts, n/128, k/128] (the layout of mok_quantize_weight); and back to floats. */
void mok_fp8_quantize_weight_block128(const float *w, int64_t experts, int64_t n, int64_t k,
                                      uint8_t *q, float *scales);
void mok_fp8_dequantize_weight_block128(const uint8_t *q, const float *scales, int64_t experts,
                                        int64_t n, int64_t k, float *w);
/* One activation row of n values (a multiple of 128) in 1x128 blocks, quantized and dequantized:
 * out[i] = e4m3 code * its block's scale. */
void mok_fp8_fake_quantize_row(const float *v, int64_t n, float *out);
/* x [rows, cols] in place, along the rows: each column in blocks of `block` consecutive rows (the
 * last block may be shorter; only its rows count in its amax), x = e4m3 code * block scale. The
 * FP8 weight gradients' quantization of an expert's rows (the GPU's mok_fp8_quant_t):
 * block 128, or rows for one scale per expert and column (its expert_amax mode). */
void mok_fp8_fake_quantize_columns(float *x, int64_t rows, int64_t cols, int64_t block);

/* MXFP8 (OCP Microscaling: E4M3 codes, one E8M0 power-of-two scale per 32 consecutive values
 * along a row; the scale rule of kernels/common/mx_scale.h: 2^(floor(log2(amax)) - 8), codes
 * saturating). x [rows, k] (k a multiple of 32) -> codes [rows, k], scales [rows, k / 32]; a
 * block holding a NaN or an infinity gets scale 255 (NaN) and NaN codes. Dequantized:
 * code * 2^(scale - 127), NaN under scale 255. */
void mok_mxfp8_quantize_rows(const float *x, int64_t rows, int64_t k, uint8_t *codes,
                             uint8_t *scales);
void mok_mxfp8_dequantize_rows(const uint8_t *codes, const uint8_t *scales, int64_t rows,
                               int64_t k, float *x);
/* How far MXFP8 rows (k a multiple of 128) re-expressed in 1x128 blocks (the conversion of
 * kernels/pointwise/mxfp8.cu: a block's scale is the largest S of its four MX scales, each code
 * rescaled by 2^(s - S) and rounded to E4M3) are from exact: the number of values that change,
 * and (max_abs_err, if not NULL) the largest change in units of the value's own MX scale. 0:
 * the conversion is lossless (as when a block's four scales are equal). */
int64_t mok_mxfp8_block128_inexact(const uint8_t *codes, const uint8_t *scales, int64_t rows,
                                   int64_t k, double *max_abs_err);

/* mok_mxfp8_to_block128 on the host, bit for bit: MXFP8 weights [experts, n, k] (n, k multiples
 * of 128) -> block-128 codes [experts, n, k] and fp32 scales [experts, n / 128, k / 128]. */
void mok_mxfp8_to_block128_ref(const uint8_t *codes, const uint8_t *scales, int64_t experts,
                               int64_t n, int64_t k, uint8_t *q, float *q_scales);

typedef struct {
  mok_shape shape;       /* per-rank shape, the same on every rank                        */
  int ep;                /* ranks; E must be a multiple of ep                              */
  int use_swiglu_limit;  /* nonzero: clamp as above with swiglu_limit                      */
  float swiglu_limit;    /* L > 0                                                          */
  int round_bf16;        /* nonzero: round stored intermediates to bf16, as the GPU does  */
  int fp8_block128;      /* nonzero: the routed experts' inputs and SwiGLU activations are
                            quantized to E4M3 in 1x128 blocks (mok_fp8_fake_quantize_row), as
                            the GPU's FP8 forward does; the weights are given as dequantized
                            values. H and I multiples of 128. Backward, as the GPU's FP8
                            backward: the routed data gradients see the output gradient and
                            the gate / up gradients quantized the same way; the weight
                            gradients take them unquantized, times the quantized inputs and
                            activations; with round_bf16 the kept pre-activations and d_act
                            are rounded to bf16 as the GPU stores them. The shared expert
                            stays as is unless fp8_shared.                                    */
  int fp8_wgrad;         /* with fp8_block128: the routed weight gradients as the GPU's FP8
                            weight gradients (config fp8_weight_grads) compute them: each
                            expert's rows of their four operands (dout; the activations and
                            inputs the forward's GEMMs saw, rounded to bf16; the gate / up
                            gradients) quantized to E4M3 in 128-row blocks per column
                            (mok_fp8_fake_quantize_columns), rows in the schedule's order,
                            (source rank, token) ascending; 2: one scale per expert and
                            column instead (fp8_weight_grads 2); 3: so for the activations
                            and inputs only, the gradients in 128-row blocks (fp8_weight_grads
                            3)                                                                */
  int fp8_fused_drw;     /* with fp8_block128: the router-weight gradient as the GPU computes
                            it inside the SwiGLU backward: g = rnd(W_down^T q(dy)) from the
                            unweighted dy quantized 1x128, d_act = rw * g (not rounded),
                            d_rw = sum_i g_i * act_i over the activations the forward's down
                            GEMM saw (instead of rw * dy quantized, and dy . output; d_rw then
                            carries dy's E4M3 error, ~2-3e-2, like the data gradients)        */
  int fp8_shared;        /* with fp8_block128: the shared expert quantized the same way as the
                            routed ones (config fp8_shared_expert; its weights given as
                            dequantized values), its weight gradients as those of
                            fp8_wgrad = 0 (Is a multiple of 128)                              */
} mok_ref_config;

/* One rank's inputs (host). Shared weights are NULL when shape.shared_intermediate == 0. */
typedef struct {
  const float *x;               /* [T, H]                */
  const int32_t *topk_experts;  /* [T, k], ids in [0, E) */
  const float *router_weights;  /* [T, k]                */
  const float *w_gate;          /* [E/EP, I, H]          */
  const float *w_up;            /* [E/EP, I, H]          */
  const float *w_down;          /* [E/EP, H, I]          */
  const float *ws_gate;         /* [Is, H]               */
  const float *ws_up;           /* [Is, H]               */
  const float *ws_down;         /* [H, Is]               */
} mok_ref_rank;

/* One rank's gradients (host, overwritten). Shared ones are ignored when Is == 0. The three routed
 * (or the three shared) weight gradients may be NULL on every rank: they are then not computed. */
typedef struct {
  float *dx;               /* [T, H]       */
  float *d_router_weights; /* [T, k]       */
  float *dw_gate;          /* [E/EP, I, H] */
  float *dw_up;            /* [E/EP, I, H] */
  float *dw_down;          /* [E/EP, H, I] */
  float *dws_gate;         /* [Is, H]      */
  float *dws_up;           /* [Is, H]      */
  float *dws_down;         /* [H, Is]      */
} mok_ref_grads;

/* Checks a config and every rank's inputs: shapes, NULL pointers, expert ids in range, no expert
 * twice in one token's list. Returns the first problem found, in rank then token order. */
mok_status mok_ref_check(const mok_ref_config *cfg, const mok_ref_rank *ranks);

/* Forward over all ranks: y[s] is [T, H]. Validates first; writes nothing on error. */
mok_status mok_ref_forward(const mok_ref_config *cfg, const mok_ref_rank *ranks, float *const *y);

/* Backward over all ranks: dy[s] is [T, H]; grads[s] gets rank s's gradients (its tokens' dx and
 * d_router_weights, its experts' and its shared expert's weight gradients). */
mok_status mok_ref_backward(const mok_ref_config *cfg, const mok_ref_rank *ranks,
                            const float *const *dy, const mok_ref_grads *grads);

/* Writes expert e's weights (of any rank) into w_gate, w_up [I, H] and w_down [H, I]. */
typedef void (*mok_ref_fetch_expert)(void *ctx, int expert, float *w_gate, float *w_up, float *w_down);

/* The reference for one token from only the weights it uses, for spot checks of shapes too large
 * for the whole reference: x [H], its top-k ids and router weights [k], the shared expert's weights
 * (NULL when Is == 0), each routed expert fetched through fetch(ctx, e, ...). Writes y [H] and, when
 * dy [H] is given, dx [H] and d_router_weights [k] (dx and d_router_weights NULL without dy).
 * cfg->shape gives H, E, I, k and Is; its tokens and cfg->ep are not used. Same math and roundings
 * as mok_ref_forward / mok_ref_backward. */
mok_status mok_ref_token(const mok_ref_config *cfg, const float *x, const int32_t *topk,
                         const float *router_weights, const float *dy, mok_ref_fetch_expert fetch,
                         void *ctx, const float *ws_gate, const float *ws_up, const float *ws_down,
                         float *y, float *dx, float *d_router_weights);

/* Checks mok_ref_backward against central finite differences of the loss sum(dy * y) (exact math,
 * round_bf16 ignored). samples = 0 checks every entry of every input tensor of every rank; else
 * `samples` random entries of each tensor kind (x, router weights, the six weights). Reports the
 * worst error |fd - analytic| / max(|analytic|, 1e-2 * rms of that gradient tensor) and how many
 * entries were checked. With the SwiGLU limit on, a step that crosses the clamp's kink is judged by
 * the better one-sided difference (whose error is O(step), about 1e-3). */
mok_status mok_ref_gradient_check(const mok_ref_config *cfg, const mok_ref_rank *ranks,
                                  const float *const *dy, int64_t samples, uint64_t seed,
                                  double *worst_error, int64_t *checked);

/* ---- Test inputs ------------------------------------------------------------------------
 * Deterministic inputs for tests and benchmarks, from one seed, so that every rank of a run can
 * regenerate every other rank's: random bf16-valued tensors, router weights, and the routings
 * that break naive MoE code (docs/DESIGN.md, "How it is checked"). */

typedef enum {
  MOK_ROUTE_UNIFORM = 0,      /* k distinct experts, uniformly                                */
  MOK_ROUTE_ZIPF = 1,         /* k distinct experts, P(e) ~ 1/(rank of e)^1.2 (skewed)        */
  MOK_ROUTE_ONE_EXPERT = 2,   /* every token's first choice is expert 0 (top-1: all to it)    */
  MOK_ROUTE_EMPTY_EXPERT = 3, /* uniform over all experts but expert 1, which gets nothing     */
  MOK_ROUTE_EMPTY_RANK = 4,   /* uniform over all experts but the last rank's: it gets nothing */
  MOK_ROUTE_COUNT = 5
} mok_route_kind;

const char *mok_route_name(mok_route_kind kind);

/* Fills topk [T, k] for one rank. Fails with MOK_ERR_INVALID_SHAPE when the kind leaves fewer than
 * k experts to choose from (e.g. EMPTY_RANK with E - E/EP < k). */
mok_status mok_route_fill(mok_route_kind kind, uint64_t seed, int rank, int64_t T, int k, int E,
                          int ep, int32_t *topk);

/* Uniform values in [-scale, scale], rounded to bf16 (so bf16 copies hold exactly these values). */
void mok_fill_random_bf16_values(uint64_t seed, uint64_t stream, float *dst, int64_t n, float scale);

/* Positive router weights [T, k], each row summing to 1, rounded to bf16 values. */
void mok_fill_router_weights(uint64_t seed, uint64_t stream, float *dst, int64_t T, int k);

/* A whole multi-rank problem in host memory: every rank's inputs, weights and output gradient,
 * drawn from one seed. */
typedef struct {
  mok_ref_config cfg;
  mok_ref_rank *ranks;  /* [ep] views into the buffers below         */
  float **dy;           /* [ep] output gradients [T, H]                */
  float **y;            /* [ep] forward outputs [T, H]                 */
  mok_ref_grads *grads; /* [ep] gradient buffers                       */
  void **owned;         /* everything allocated, for mok_ref_problem_free */
  int n_owned;
} mok_ref_problem;

/* Allocates and fills a problem: bf16-valued random x (scale 1), weights (scale 1/sqrt(fan-in)),
 * router weights, dy, and the routing `kind`. Returns MOK_SUCCESS, MOK_ERR_OUT_OF_MEMORY, or the
 * routing's status. */
mok_status mok_ref_problem_make(mok_ref_problem *p, const mok_shape *shape, int ep,
                                mok_route_kind kind, uint64_t seed);
void mok_ref_problem_free(mok_ref_problem *p);
/* The host memory mok_ref_problem_make takes for a shape over ep ranks, in bytes; -1 when the size
 * overflows or the arguments are invalid. mok_ref_problem_make returns MOK_ERR_OUT_OF_MEMORY (and
 * holds nothing) when an allocation fails. */
int64_t mok_ref_problem_bytes(const mok_shape *shape, int ep);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* MOK_REFERENCE_H */
