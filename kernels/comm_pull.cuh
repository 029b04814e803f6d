/* comm_pull.cuh — the device side of fused dispatch (kernels/fused_dispatch.h): the comm CTAs'
 * minibatch pull by bulk copies, and the compute producer's acquire of a row range. Included by
 * kernels/grouped_gemm_bf16.cu. */
#ifndef MOK_COMM_PULL_CUH
#define MOK_COMM_PULL_CUH

#include <stdint.h>
#include "kernels/fused_dispatch.h"
#include "kernels/hopper_ptx.cuh"
#include "schedule/schedule_core.h"

#define CP_WARPS 6         /* copying warps per comm CTA (one thread each drives the copies) */
#define CP_CHUNK 16384     /* bytes per bulk copy; two buffers per warp: 192 KB per CTA        */

MOK_DEV uint64_t cp_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

MOK_DEV int cp_load_acquire(const int32_t *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

MOK_DEV void cp_store_release(int32_t *p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Orders generic-proxy global accesses with async-proxy ones (bulk copies, TMA) of this thread. */
MOK_DEV void cp_fence_proxy_global(void) { asm volatile("fence.proxy.async.global;" ::: "memory"); }

MOK_DEV int cp_error(const int32_t *err) { return *(volatile const int32_t *)err; }

MOK_DEV int64_t cp_rows(const mok_gg_pull &q, int experts_local, int64_t m_total) {
  const int64_t total = q.expert_offset[experts_local];
  return total < m_total ? total : m_total;
}

/* Comm CTA `cta` of q.ctas: its warps copy their minibatches' real rows into recv and release the
 * minibatches' flags. smem: CP_WARPS * 2 * CP_CHUNK bytes (1024-aligned); bars: 2 * CP_WARPS. */
MOK_DEV void cp_pull_minibatches(const mok_gg_pull &q, int cta, char *recv, int64_t hidden,
                                 int experts_local, int64_t m_total, uint8_t *smem,
                                 uint64_t *bars) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp >= CP_WARPS || lane != 0) return;
  /* scalars, not arrays, so nothing goes to local memory */
  const uint32_t bar0 = smem_u32(&bars[2 * warp]), bar1 = smem_u32(&bars[2 * warp + 1]);
  const uint32_t buf0 = smem_u32(smem + (2 * warp) * CP_CHUNK);
  const uint32_t buf1 = smem_u32(smem + (2 * warp + 1) * CP_CHUNK);
  mbar_init(bar0, 1);
  mbar_init(bar1, 1);
  fence_mbar_init();
  const int64_t rows = cp_rows(q, experts_local, m_total), row_bytes = hidden * 2;
  const int64_t n_mb = (rows + q.mb_rows - 1) / q.mb_rows;
  const int nw = q.ctas * CP_WARPS;
  uint32_t cnt = 0; /* items through this warp's buffers: item c uses buffer c & 1, phase (c >> 1) & 1 */
  for (int64_t mb = (int64_t)cta * CP_WARPS + warp; mb < n_mb; mb += nw) {
    if (cp_error(q.err)) return; /* the consumers stop waiting on a fault */
    const int64_t r0 = mb * q.mb_rows, r1 = r0 + q.mb_rows < rows ? r0 + q.mb_rows : rows;
    int have_prev = 0, pb = 0;
    uint32_t ppar = 0, pn = 0;
    char *pdst = NULL;
    for (int64_t row = r0; row < r1; ++row) {
      const int32_t slot = q.row_src[row];
      if (slot < 0) continue; /* padding: never read */
      const char *src = q.peer_base[mok_sched_slot_rank(slot, q.tokens, q.top_k)] + q.x_off +
                        mok_sched_slot_token(slot, q.tokens, q.top_k) * row_bytes;
      char *dst = recv + row * row_bytes;
      for (int64_t off = 0; off < row_bytes; off += CP_CHUNK) {
        const uint32_t n = (uint32_t)(row_bytes - off < CP_CHUNK ? row_bytes - off : CP_CHUNK);
        const int b = (int)(cnt & 1);
        const uint32_t par = (cnt >> 1) & 1;
        ++cnt;
        bulk_wait_read0(); /* the store that last read buffer b has finished reading it */
        mbar_arrive_expect_tx(b ? bar1 : bar0, n);
        bulk_load_1d(b ? buf1 : buf0, src + off, n, b ? bar1 : bar0);
        if (have_prev) { /* the previous item, landed by now or soon: store it while b loads */
          mbar_wait(pb ? bar1 : bar0, ppar);
          bulk_store_1d(pdst, pb ? buf1 : buf0, pn);
          bulk_commit();
        }
        have_prev = 1;
        pb = b;
        ppar = par;
        pdst = dst + off;
        pn = n;
      }
    }
    if (have_prev) {
      mbar_wait(pb ? bar1 : bar0, ppar);
      bulk_store_1d(pdst, pb ? buf1 : buf0, pn);
      bulk_commit();
    }
    bulk_wait0();            /* this minibatch's rows are in recv */
    cp_fence_proxy_global(); /* ... ordered before the flag for the consumers' TMA loads */
    cp_store_release(q.ready + mb, 1);
  }
}

/* Producer thread: waits until every minibatch holding rows [row0, row0 + nrows) has landed, then
 * orders its later TMA loads after the flags. On timeout sets MOK_ERR_TIMEOUT and returns. */
MOK_DEV void cp_wait_rows(const mok_gg_pull &q, int64_t row0, int64_t nrows) {
  if (nrows <= 0) return;
  const int64_t mb0 = row0 / q.mb_rows, mb1 = (row0 + nrows - 1) / q.mb_rows;
  for (int64_t mb = mb0; mb <= mb1; ++mb) {
    if (cp_load_acquire(q.ready + mb)) continue;
    const uint64_t t0 = cp_globaltimer();
    while (!cp_load_acquire(q.ready + mb)) {
      if (cp_error(q.err)) return;
      if (cp_globaltimer() - t0 > (uint64_t)q.timeout_ns) {
        atomicCAS((int *)q.err, 0, (int)MOK_ERR_TIMEOUT);
        return;
      }
      __nanosleep(64);
    }
  }
  cp_fence_proxy_global();
}

#endif /* MOK_COMM_PULL_CUH */
