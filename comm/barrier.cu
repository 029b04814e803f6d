/* barrier.cu — the barrier among the ranks of a workspace. Each rank stores one 64-bit signal into
 * every peer's slot for it in symmetric memory, then waits, bounded by %globaltimer, until every
 * peer's signal has reached the same barrier. A signal names its barrier by (call, index) and
 * carries the sender's sticky error with the rank it was raised on, and what the sender signalled
 * at the end of its previous call (a peer that has moved on to the next call overwrites its last
 * signal of this one: the copy keeps its fault visible). A peer's fault becomes this rank's, so
 * all ranks skip the same work. The rules are in docs/DESIGN.md, "Barriers and faults". */
#include "comm/comm.h"
#include "kernels/common/device.cuh"

__device__ __forceinline__ uint64_t globaltimer_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void store_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* What this rank's sticky error is as a fault to signal: (status << 8) | the rank it came from. */
__device__ __forceinline__ uint32_t own_fault(const mok_barrier &b) {
  const int e = dev_error(b.err);
  if (!e) return 0;
  const int from = *(volatile const int32_t *)b.err_rank;
  return mok_sig_fault(e, from ? from - 1 : b.rank);
}

/* Takes a fault (status << 8 | rank) as this rank's error unless it already has one. */
__device__ __forceinline__ void adopt(const mok_barrier &b, uint32_t fault) {
  if (atomicCAS((int *)b.err, 0, (int)(fault >> 8)) == 0)
    *(volatile int32_t *)b.err_rank = (int32_t)(fault & 0xFFu) + 1;
}

__global__ void barrier_kernel(mok_barrier b) {
  __shared__ uint32_t call, index, last_bar;
  __shared__ uint64_t sig;
  __shared__ int skip_wait;
  if (threadIdx.x == 0) {
    mok_barrier_state st = *b.state;
    sig = mok_barrier_step(&st, b.first, b.last, b.refuse, b.rank, own_fault(b));
    *b.state = st;
    call = mok_sig_call(sig);
    index = mok_sig_index(sig);
    last_bar = b.last || b.refuse;
    skip_wait = dev_error(b.err) == MOK_ERR_TIMEOUT;
  }
  __syncthreads();
  __threadfence_system(); /* this rank's earlier writes (pushes) before the signal */
  for (int p = threadIdx.x; p < b.ep; p += blockDim.x)
    store_release_sys((uint64_t *)(b.peer_base[p] + b.flags_off) + b.rank, sig);
  if (skip_wait) return;
  const uint64_t t0 = globaltimer_ns(); /* one bound for all of this thread's peers */
  for (int p = threadIdx.x; p < b.ep; p += blockDim.x) {
    const uint64_t *slot = (const uint64_t *)(b.local_base + b.flags_off) + p;
    for (;;) {
      const uint64_t f = load_acquire_sys(slot);
      if (b.refuse && mok_sig_reached_call(f, call)) break; /* the peer has seen the refusal */
      const int64_t fault = b.refuse ? MOK_SIG_WAIT
                                     : mok_sig_judge(f, call, index, last_bar, p, MOK_ERR_DESYNC);
      if (fault != MOK_SIG_WAIT) {
        if (fault) adopt(b, (uint32_t)fault);
        break;
      }
      if (globaltimer_ns() - t0 > (uint64_t)b.timeout_ns) {
        adopt(b, mok_sig_fault(MOK_ERR_TIMEOUT, p)); /* names the peer that did not arrive */
        break;
      }
      __nanosleep(200);
    }
  }
  __threadfence_system();
}

extern "C" cudaError_t mok_barrier_run(const mok_barrier *b, cudaStream_t stream) {
  barrier_kernel<<<1, 32, 0, stream>>>(*b);
  return cudaGetLastError();
}
