/* device.cuh — device helpers every stage's kernels share: the sticky error word, NaN, and bf16
 * packing of 16-byte words. */
#ifndef MOK_COMMON_DEVICE_CUH
#define MOK_COMMON_DEVICE_CUH

#include <stdint.h>
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* The workspace's sticky error word: the first fault wins; 0 means no fault. */
__device__ __forceinline__ int dev_error(const int32_t *err) {
  return *(volatile const int32_t *)err;
}
__device__ __forceinline__ void dev_set_error(int32_t *err, int code) {
  atomicCAS((int *)err, 0, code);
}

__device__ __forceinline__ float dev_nan(void) { return __int_as_float(0x7fc00000); }

/* Eight bf16 in one 16-byte word, unpacked to / packed from float. */
__device__ __forceinline__ void dev_unpack8(uint4 v, float *f) {
  const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ uint4 dev_pack8(const float *f) {
  uint4 v;
  __nv_bfloat162 *h = (__nv_bfloat162 *)&v;
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

#endif
