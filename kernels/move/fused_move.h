/* fused_move.h — what the layer's communication needs when it runs inside the grouped GEMM
 * launches (the fused path; device side in fused_move.cuh, the GEMM entry points that carry it in
 * kernels/gemm/gemm_fused.h). One struct describes a pull or a push over a schedule's rows:
 *   pull (gate+up, forward dispatch): the last `ctas` CTAs of the launch are comm CTAs. The
 *     schedule's rows are walked in minibatches of mb_rows, in order; every comm warp moves its
 *     share of each minibatch's real rows (rows[row] <- x[token] of the row's source rank, bulk
 *     copies through shared memory; padding rows never move) and then adds 1 to flags[m]
 *     (release). The GEMM's producer acquires a tile's minibatches (every comm warp counted)
 *     before its first TMA load of them. flags must be zero when the kernel starts; every wait is
 *     bounded by timeout_ns (then the error word gets MOK_ERR_TIMEOUT), and a set error word ends
 *     the waits.
 *   push (down forward: combine; the last data gradient: reverse dispatch): no comm CTAs. The
 *     epilogues store each real row of the output both locally and into the row's (token, j)
 *     slot of the source rank at peer_off (16-byte stores from the staging buffer), then fence at
 *     system scope; the cross-rank barrier after the kernel publishes them. Only peer_base,
 *     peer_off, tokens, top_k, row_src and push are read. */
#ifndef MOK_FUSED_MOVE_H
#define MOK_FUSED_MOVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char *const *peer_base;       /* device [ep]: every rank's symmetric base, mapped here      */
  size_t peer_off;              /* pull: the staged x [T, H]; push: the slots [T*k, H]        */
  int64_t tokens;               /* T per rank (the staged rows' stride)                       */
  int top_k;                    /* k                                                          */
  const int32_t *row_src;       /* schedule: [capacity], -1 for padding rows                  */
  const int32_t *expert_offset; /* schedule: [experts_local + 1]                              */
  int32_t *flags;               /* [ceil(m_total / mb_rows)], zero at the start               */
  int mb_rows;                  /* rows per minibatch, a multiple of 128                      */
  int ctas;                     /* comm CTAs, >= 1 (rounded up to the cluster size)           */
  int push;                     /* 0: pull, 1: push                                           */
  int64_t timeout_ns;           /* bound on every wait                                        */
  int32_t *err;                 /* the workspace's sticky error word                          */
} mok_gg_move;

#endif /* MOK_FUSED_MOVE_H */
