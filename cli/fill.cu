/* fill.cu — the `mok run` inputs filled on the device from the generator of random.h. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "cli/random.h"

__global__ void fill_random_kernel(__nv_bfloat16 *dst, int64_t n, uint64_t seed, uint64_t sid,
                                   float scale) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(cli_random_value(seed, sid, (uint64_t)i, scale));
}

/* Returns a cudaError_t. */
extern "C" int cli_fill_random_bf16(void *dst, int64_t n, uint64_t seed, uint64_t stream_id,
                                    float scale, void *stream) {
  if (n <= 0) return (int)cudaSuccess;
  const int64_t b = (n + 255) / 256;
  fill_random_kernel<<<(unsigned)(b > 16384 ? 16384 : b), 256, 0, (cudaStream_t)stream>>>(
      (__nv_bfloat16 *)dst, n, seed, stream_id, scale);
  return (int)cudaGetLastError();
}
