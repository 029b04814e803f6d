/* fused_move.cuh — the device side of the fused path's pull (fused_move.h): the comm CTAs'
 * minibatch pull by bulk copies, the GEMM producer's acquire of a row range before loading it, and
 * the release / acquire counters and bounded waits that the one-launch FP8 MLP shares. (The push
 * lives in the GEMM epilogues, kernels/gemm/gemm_common.cuh.) Included by kernels/gemm. */
#ifndef MOK_FUSED_MOVE_CUH
#define MOK_FUSED_MOVE_CUH

#include <stdint.h>
#include "include/mok.h"
#include "kernels/move/fused_move.h"
#include "kernels/common/ptx.cuh"
#include "schedule/schedule_core.h"

#define CM_WARPS 6         /* copying warps per comm CTA (one thread each drives the copies) */
#define CM_CHUNK 16384     /* bytes per bulk copy; two buffers per warp: 192 KB per CTA        */

MOK_DEV uint64_t cm_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

MOK_DEV int cm_load_acquire(const int32_t *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

MOK_DEV void cm_add_release(int32_t *p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Orders generic-proxy global accesses with async-proxy ones (bulk copies, TMA) of this thread. */
MOK_DEV void cm_fence_proxy_global(void) { asm volatile("fence.proxy.async.global;" ::: "memory"); }

MOK_DEV int cm_error(const int32_t *err) { return *(volatile const int32_t *)err; }

/* Waits until *flag >= want; on timeout sets MOK_ERR_TIMEOUT. Returns 0 when it must give up
 * (timeout or a fault seen in the error word). */
MOK_DEV int cm_wait_flag(const int32_t *flag, int want, const int32_t *err, int64_t timeout_ns) {
  if (cm_load_acquire(flag) >= want) return 1;
  const uint64_t t0 = cm_globaltimer();
  while (cm_load_acquire(flag) < want) {
    if (cm_error(err)) return 0;
    if (cm_globaltimer() - t0 > (uint64_t)timeout_ns) {
      atomicCAS((int *)err, 0, (int)MOK_ERR_TIMEOUT);
      return 0;
    }
    __nanosleep(64);
  }
  return 1;
}

/* Adds 1 (release) to the flags of minibatches [from, to) after this thread's bulk stores that the
 * caller waited for; orders those stores (async proxy) before the flags. */
MOK_DEV void cm_signal(int32_t *flags, int64_t from, int64_t to) {
  if (from >= to) return;
  cm_fence_proxy_global();
  for (int64_t m = from; m < to; ++m) cm_add_release(flags + m, 1);
}

/* Comm CTA `cta` of q.ctas: its warps pull the schedule's real rows (see fused_move.h). Every comm
 * warp takes part in every minibatch, in minibatch order (warp w of nw moves the minibatch's rows
 * w, w + nw, ...), so the first minibatches land first and soon; each warp adds 1 to a minibatch's
 * flag once its rows of it have landed, and the minibatch is ready at nw. One pipeline per warp
 * runs across minibatches (the load of item c overlaps the store of item c - 1): a minibatch is
 * counted once the stores of its last item are complete, while the next minibatch's first load
 * is in flight; minibatches with no row for this warp are counted with the next one that has
 * one (or at once when nothing is in flight, or at the end).
 * rows: the local [m_total, hidden] matrix; smem: CM_WARPS * 2 * CM_CHUNK bytes; bars: 2 * CM_WARPS. */
MOK_DEV void cm_pull_minibatches(const mok_gg_move &q, int cta, char *rows_base, int64_t hidden,
                                 int experts, int64_t m_total, uint8_t *smem, uint64_t *bars) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp >= CM_WARPS || lane != 0) return;
  /* scalars, not arrays, so nothing goes to local memory */
  const uint32_t bar0 = smem_u32(&bars[2 * warp]), bar1 = smem_u32(&bars[2 * warp + 1]);
  const uint32_t buf0 = smem_u32(smem + (2 * warp) * CM_CHUNK);
  const uint32_t buf1 = smem_u32(smem + (2 * warp + 1) * CM_CHUNK);
  mbar_init(bar0, 1);
  mbar_init(bar1, 1);
  fence_mbar_init();
  int64_t rows = q.expert_offset[experts];
  if (rows > m_total) rows = m_total;
  const int64_t row_bytes = hidden * 2;
  const int64_t n_mb = (rows + q.mb_rows - 1) / q.mb_rows;
  const int nw = q.ctas * CM_WARPS, gw = cta * CM_WARPS + warp;
  uint32_t cnt = 0; /* items through this warp's buffers: item c uses buffer c & 1, phase (c >> 1) & 1 */
  int have_prev = 0, pb = 0;
  uint32_t ppar = 0, pn = 0;
  char *pdst = NULL;
  int64_t signaled = 0; /* minibatches [0, signaled) counted by this warp */
  for (int64_t mb = 0; mb < n_mb; ++mb) {
    if (cm_error(q.err)) return; /* the waiting side gives up on a fault too */
    if (!have_prev) { /* nothing moved yet: the minibatches before are complete for this warp */
      cm_signal(q.flags, signaled, mb);
      signaled = mb;
    }
    const int64_t r0 = mb * q.mb_rows, r1 = r0 + q.mb_rows < rows ? r0 + q.mb_rows : rows;
    for (int64_t row = r0 + gw; row < r1; row += nw) {
      const int32_t slot = q.row_src[row];
      if (slot < 0) continue; /* padding: never moved */
      const char *src = q.peer_base[mok_sched_slot_rank(slot, q.tokens, q.top_k)] + q.peer_off +
                        mok_sched_slot_token(slot, q.tokens, q.top_k) * row_bytes;
      char *dst = rows_base + row * row_bytes;
      for (int64_t off = 0; off < row_bytes; off += CM_CHUNK) {
        const uint32_t n = (uint32_t)(row_bytes - off < CM_CHUNK ? row_bytes - off : CM_CHUNK);
        const int b = (int)(cnt & 1);
        const uint32_t par = (cnt >> 1) & 1;
        ++cnt;
        bulk_wait_read0(); /* the store that last read buffer b has finished reading it */
        mbar_arrive_expect_tx(b ? bar1 : bar0, n);
        bulk_load_1d(b ? buf1 : buf0, src + off, n, b ? bar1 : bar0);
        if (have_prev) { /* the previous item: store it while this one loads */
          mbar_wait(pb ? bar1 : bar0, ppar);
          bulk_store_1d(pdst, pb ? buf1 : buf0, pn);
          bulk_commit();
        }
        if (signaled < mb && have_prev) {
          /* the previous item was this warp's last of an earlier minibatch: once the stores are
           * complete (the load just issued keeps going), minibatches before mb are counted */
          bulk_wait0();
          cm_signal(q.flags, signaled, mb);
          signaled = mb;
        }
        have_prev = 1;
        pb = b;
        ppar = par;
        pdst = dst + off;
        pn = n;
      }
    }
  }
  if (have_prev) {
    mbar_wait(pb ? bar1 : bar0, ppar);
    bulk_store_1d(pdst, pb ? buf1 : buf0, pn);
    bulk_commit();
  }
  bulk_wait0(); /* every row of this warp has landed */
  cm_signal(q.flags, signaled, n_mb);
}

/* Pull, producer thread: waits until every minibatch holding rows [row0, row0 + nrows) has landed
 * (all q.ctas * CM_WARPS comm warps counted), then orders its later TMA loads after the flags. */
MOK_DEV void cm_wait_rows(const mok_gg_move &q, int64_t row0, int64_t nrows) {
  if (nrows <= 0) return;
  const int64_t mb0 = row0 / q.mb_rows, mb1 = (row0 + nrows - 1) / q.mb_rows;
  const int want = q.ctas * CM_WARPS;
  for (int64_t mb = mb0; mb <= mb1; ++mb)
    if (!cm_wait_flag(q.flags + mb, want, q.err, q.timeout_ns)) return;
  cm_fence_proxy_global();
}

#endif /* MOK_FUSED_MOVE_CUH */
