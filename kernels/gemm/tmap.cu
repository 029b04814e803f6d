/* tmap.cu — TMA tensor-map encoding and the device query of the grouped GEMMs (tmap.h). */
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include "kernels/gemm/tmap.h"
#include "kernels/common/launch_error.h"

static PFN_cuTensorMapEncodeTiled_v12000 gg_encode_fn(void) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
  if (!fn) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
  }
  return fn;
}

mok_status gg_make_tmap_2d(CUtensorMap *map, const void *ptr, int64_t rows, int64_t cols,
                           int elem_bytes, int box_rows, int box_cols) {
  return gg_make_tmap_2d_ld(map, ptr, rows, cols, cols, elem_bytes, box_rows, box_cols);
}

mok_status gg_make_tmap_2d_ld(CUtensorMap *map, const void *ptr, int64_t rows, int64_t cols,
                              int64_t ld, int elem_bytes, int box_rows, int box_cols) {
  if (!map || !ptr) return MOK_ERR_INVALID_ARGUMENT;
  if (rows <= 0 || cols <= 0 || ld < cols) return MOK_ERR_INVALID_SHAPE;
  if (((uintptr_t)ptr & 15) || (ld * elem_bytes) % 16) return MOK_ERR_MISALIGNED;
  PFN_cuTensorMapEncodeTiled_v12000 fn = gg_encode_fn();
  if (!fn)
    return mok_kernel_failed((int)cudaErrorSymbolNotFound, 0,
                             "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", __FILE__,
                             __LINE__);
  CUtensorMapDataType dt = elem_bytes == 2   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                           : elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                             : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)(ld * elem_bytes)};
  cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = fn(map, dt, 2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return mok_kernel_failed((int)r, 1, "cuTensorMapEncodeTiled", __FILE__, __LINE__);
  return MOK_SUCCESS;
}

mok_status gg_device_sms(int *sms) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return MOK_ERR_NO_DEVICE;
  MOK_KCUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major != 9) return MOK_ERR_NOT_SUPPORTED;
  MOK_KCUDA(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev));
  return MOK_SUCCESS;
}
