/* v1_common.cuh — device helpers shared by the v1 (unfused) GPU path's kernels: the sticky error
 * word, bf16 packing, and 16-byte vector types. Included by kernels/v1_*.cu, schedule/ and comm/
 * device files only. */
#ifndef MOK_V1_COMMON_CUH
#define MOK_V1_COMMON_CUH

#include <stdint.h>
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* The workspace's sticky error word: the first fault wins; 0 means no fault. */
__device__ __forceinline__ int v1_error(const int32_t *err) {
  return *(volatile const int32_t *)err;
}
__device__ __forceinline__ void v1_set_error(int32_t *err, int code) {
  atomicCAS((int *)err, 0, code);
}

__device__ __forceinline__ float v1_nan(void) { return __int_as_float(0x7fc00000); }

/* Eight bf16 in one 16-byte word, unpacked to / packed from float. */
__device__ __forceinline__ void v1_unpack8(uint4 v, float *f) {
  const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ uint4 v1_pack8(const float *f) {
  uint4 v;
  __nv_bfloat162 *h = (__nv_bfloat162 *)&v;
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

#endif
