/* test_mxfp8.c — MXFP8 weights on the device: mok_quantize_weight(MOK_DTYPE_MXFP8) gives bit for
 * bit the CPU reference's codes and E8M0 scales (mok_mxfp8_quantize_rows) on fresh random bf16
 * weights whose 32-blocks span 2^-40 .. 2^40, with an all-zero block, bf16 subnormals, the largest
 * bf16 values, NaN and both infinities; mok_mxfp8_to_block128 gives bit for bit the reference's
 * conversion (mok_mxfp8_to_block128_ref), NaN blocks NaN and nothing else, and so does the one-pass
 * mok_quantize_weight_mxfp8_block128 from the bf16 weights; every output poisoned first, and the
 * bytes past each output untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "mok_reference.h"
#include "reference/ref_inputs.h"
#include "tests/gpu/gpu_test.h"

GPU_TEST(mxfp8_quantize_convert_bitwise) {
  enum { E = 3, N = 256, K = 384, GUARD = 64 };
  const int64_t n = (int64_t)E * N * K, nb = n / 32, ns = (int64_t)E * (N / 128) * (K / 128);
  float *w = malloc(sizeof(float) * (size_t)n);
  uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)n);
  uint8_t *hq = malloc((size_t)n), *hs = malloc((size_t)nb), *dq = malloc((size_t)n + GUARD),
          *ds = malloc((size_t)nb + GUARD), *cq = malloc((size_t)n), *dcq = malloc((size_t)n + GUARD);
  float *cs = malloc(sizeof(float) * (size_t)ns), *dcs = malloc(sizeof(float) * (size_t)ns + GUARD);
  mok_rng rng = mok_rng_for(test_seed(), 0x6d78);
  for (int64_t i = 0; i < n; ++i) { /* each 32-block its own binade, some blocks mixed */
    const int64_t b = i / 32;
    const int e = (int)((b * 7 + mok_rng_below(&rng, 3)) % 81) - 40;
    const double u = 2.0 * mok_rng_uniform(&rng) - 1.0;
    w[i] = (float)ldexp(u, e);
  }
  for (int i = 0; i < 32; ++i) w[5 * 32 + i] = 0.0f;                  /* an all-zero block    */
  for (int i = 0; i < 32; ++i) w[6 * 32 + i] = (float)ldexp(i - 16, -133); /* bf16 subnormals */
  for (int i = 0; i < 32; ++i) w[7 * 32 + i] = i % 2 ? 3.3895e38f : -3.3e38f; /* bf16's top */
  w[9 * 32 + 3] = NAN;
  w[11 * 32 + 31] = INFINITY;
  w[(int64_t)N * K + 12 * 32] = -INFINITY; /* expert 1 */
  mok_bf16_from_float_array(w, wb, n);
  mok_bf16_to_float_array(wb, w, n); /* the values the device sees */
  mok_mxfp8_quantize_rows(w, (int64_t)E * N, K, hq, hs);
  mok_mxfp8_to_block128_ref(hq, hs, E, N, K, cq, cs);

  void *dw = NULL, *q = NULL, *s = NULL, *q2 = NULL, *s2 = NULL, *q3 = NULL, *s3 = NULL;
  CHECK(cudaMalloc(&dw, (size_t)n * 2) == cudaSuccess);
  CHECK(cudaMalloc(&q, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMalloc(&s, (size_t)nb + GUARD) == cudaSuccess);
  CHECK(cudaMalloc(&q2, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMalloc(&s2, (size_t)ns * 4 + GUARD) == cudaSuccess);
  CHECK(cudaMalloc(&q3, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMalloc(&s3, (size_t)ns * 4 + GUARD) == cudaSuccess);
  CHECK(cudaMemset(q3, 0x5a, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMemset(s3, 0xa5, (size_t)ns * 4 + GUARD) == cudaSuccess);
  CHECK(cudaMemcpy(dw, wb, (size_t)n * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemset(q, 0x5a, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMemset(s, 0xa5, (size_t)nb + GUARD) == cudaSuccess);
  CHECK(cudaMemset(q2, 0x5a, (size_t)n + GUARD) == cudaSuccess);
  CHECK(cudaMemset(s2, 0xa5, (size_t)ns * 4 + GUARD) == cudaSuccess);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, dw, E, N, K, q, s, 0), MOK_SUCCESS);
  CHECK_STATUS(mok_mxfp8_to_block128(q, (const uint8_t *)s, E, N, K, q2, (float *)s2, 0),
               MOK_SUCCESS);
  CHECK_STATUS(mok_quantize_weight_mxfp8_block128(dw, E, N, K, q3, (float *)s3, 0), MOK_SUCCESS);
  /* refused before anything runs: cols not a multiple of 32 / of 128, misaligned data */
  CHECK_STATUS(mok_quantize_weight_mxfp8_block128(dw, E, N, 96, q3, (float *)s3, 0),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_quantize_weight_mxfp8_block128(dw, E, 64, K, q3, (float *)s3, 0),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, dw, E, N, 48, q, s, 0), MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_quantize_weight(MOK_DTYPE_MXFP8, (char *)dw + 2, E, N, K, q, s, 0),
               MOK_ERR_MISALIGNED);
  CHECK_STATUS(mok_mxfp8_to_block128(q, (const uint8_t *)s, E, N, 96, q2, (float *)s2, 0),
               MOK_ERR_MISALIGNED);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  cudaMemcpy(dq, q, (size_t)n + GUARD, cudaMemcpyDeviceToHost);
  cudaMemcpy(ds, s, (size_t)nb + GUARD, cudaMemcpyDeviceToHost);
  cudaMemcpy(dcq, q2, (size_t)n + GUARD, cudaMemcpyDeviceToHost);
  cudaMemcpy(dcs, s2, (size_t)ns * 4 + GUARD, cudaMemcpyDeviceToHost);
  uint8_t *fq = malloc((size_t)n + GUARD), *fs = malloc((size_t)ns * 4 + GUARD);
  cudaMemcpy(fq, q3, (size_t)n + GUARD, cudaMemcpyDeviceToHost);
  cudaMemcpy(fs, s3, (size_t)ns * 4 + GUARD, cudaMemcpyDeviceToHost);
  /* the one pass against the two: codes and scale bits equal, past the outputs untouched */
  const int same_fused = memcmp(fq, dcq, (size_t)n + GUARD) == 0 &&
                         memcmp(fs, dcs, (size_t)ns * 4 + GUARD) == 0;
  printf("  one-pass MXFP8 -> block-128: %s the two passes\n", same_fused ? "bitwise" : "DIFFERS from");
  CHECK(same_fused);
  free(fq);
  free(fs);

  int64_t bad_q = 0, bad_s = 0, bad_cq = 0, bad_cs = 0, nan_blocks = 0, guard = 0;
  for (int64_t i = 0; i < n; ++i) bad_q += dq[i] != hq[i];
  for (int64_t i = 0; i < nb; ++i) bad_s += ds[i] != hs[i];
  for (int64_t i = 0; i < n; ++i) bad_cq += dcq[i] != cq[i];
  for (int64_t i = 0; i < ns; ++i) {
    const int hn = isnan(cs[i]), dn = isnan(dcs[i]);
    nan_blocks += hn;
    bad_cs += hn != dn || (!hn && memcmp(&cs[i], &dcs[i], 4) != 0);
  }
  for (int i = 0; i < GUARD; ++i)
    guard += dq[n + i] != 0x5a || ds[nb + i] != 0xa5 || dcq[n + i] != 0x5a ||
             ((uint8_t *)dcs)[ns * 4 + i] != 0xa5;
  /* the cases the data was built to hold */
  const int specials = hs[5] == 0 && hq[5 * 32 + 7] == 0 && hs[9] == 0xFF && hs[11] == 0xFF &&
                       hs[(int64_t)N * K / 32 + 12] == 0xFF && hs[7] == 246 && hq[9 * 32] == 0x7f;
  printf("  MXFP8 of %lld values: codes %lld and scales %lld differ from the host; block-128: codes "
         "%lld, scales %lld differ; %lld NaN blocks; guards %s\n",
         (long long)n, (long long)bad_q, (long long)bad_s, (long long)bad_cq, (long long)bad_cs,
         (long long)nan_blocks, guard ? "WRITTEN" : "intact");
  CHECK(bad_q == 0 && bad_s == 0 && bad_cq == 0 && bad_cs == 0 && guard == 0);
  CHECK(specials);
  CHECK(nan_blocks == 2); /* expert 0's first block row (NaN and inf), expert 1's (-inf) */
  cudaFree(dw); cudaFree(q); cudaFree(s); cudaFree(q2); cudaFree(s2); cudaFree(q3); cudaFree(s3);
  free(w); free(wb); free(hq); free(hs); free(dq); free(ds); free(cq); free(dcq); free(cs); free(dcs);
}
