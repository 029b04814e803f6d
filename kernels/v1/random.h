/* v1_random.h — a counter-based random value generator that gives bit-identical results on the
 * host and in CUDA kernels, so a benchmark can fill huge tensors on the device and the host can
 * recompute any element for a spot check. */
#ifndef MOK_V1_RANDOM_H
#define MOK_V1_RANDOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOK_V1_HD __host__ __device__ __forceinline__
#else
#define MOK_V1_HD static inline
#endif

MOK_V1_HD uint64_t v1_hash64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Element i of stream stream_id under seed: uniform in [-scale, scale) on a 2^-23 grid. The single
 * rounding (one multiply of an exact integer by a power-of-two-scaled constant) makes host and
 * device agree bit for bit. */
MOK_V1_HD float v1_random_value(uint64_t seed, uint64_t stream_id, uint64_t i, float scale) {
  uint64_t h = v1_hash64(seed ^ v1_hash64(stream_id * 0xD1B54A32D192ED03ull + i));
  int32_t q = (int32_t)(h >> 40) - 8388608;
  float unit = scale * (1.0f / 8388608.0f);
  return (float)q * unit;
}

#endif
