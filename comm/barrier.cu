/* barrier.cu — the barrier among the ranks of a workspace: each rank stores its epoch
 * (and its sticky error word) into every peer's flag slots in symmetric memory, then waits, bounded
 * by %globaltimer, until every peer's epoch reached its own. A peer's nonzero error word becomes
 * this rank's error, so all ranks skip the same work. */
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

__global__ void barrier_kernel(mok_barrier b) {
  __shared__ uint64_t epoch;
  __shared__ int my_err;
  if (threadIdx.x == 0) {
    epoch = *b.epoch + 1;
    *b.epoch = epoch;
    my_err = dev_error(b.err);
  }
  __syncthreads();
  __threadfence_system(); /* this rank's earlier writes (pushes) before the signal */
  for (int p = threadIdx.x; p < b.ep; p += blockDim.x) {
    char *peer = b.peer_base[p];
    ((volatile int32_t *)(peer + b.perr_off))[b.rank] = my_err;
    __threadfence_system();
    store_release_sys((uint64_t *)(peer + b.flags_off) + b.rank, epoch);
  }
  if (my_err == MOK_ERR_TIMEOUT) return;
  for (int p = threadIdx.x; p < b.ep; p += blockDim.x) {
    const uint64_t *flag = (const uint64_t *)(b.local_base + b.flags_off) + p;
    const uint64_t t0 = globaltimer_ns();
    bool arrived = true;
    while (load_acquire_sys(flag) < epoch) {
      if (globaltimer_ns() - t0 > (uint64_t)b.timeout_ns) { arrived = false; break; }
      __nanosleep(200);
    }
    if (!arrived) {
      dev_set_error(b.err, MOK_ERR_TIMEOUT);
      continue;
    }
    int e = ((volatile const int32_t *)(b.local_base + b.perr_off))[p];
    if (e) dev_set_error(b.err, e);
  }
  __threadfence_system();
}

extern "C" cudaError_t mok_barrier_run(const mok_barrier *b, cudaStream_t stream) {
  barrier_kernel<<<1, 32, 0, stream>>>(*b);
  return cudaGetLastError();
}
