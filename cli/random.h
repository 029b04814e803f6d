/* random.h — the `mok run` inputs' generator: counter-based random values that are bit-identical
 * on the host and in CUDA kernels, so the command fills huge tensors on the device (fill.cu) and
 * the host recomputes any element for its spot check. */
#ifndef MOK_CLI_RANDOM_H
#define MOK_CLI_RANDOM_H

#include <stdint.h>

#ifdef __CUDACC__
#define CLI_HD __host__ __device__ __forceinline__
#else
#define CLI_HD static inline
#endif

CLI_HD uint64_t cli_hash64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Element i of stream stream_id under seed: uniform in [-scale, scale) on a 2^-23 grid. The single
 * rounding (one multiply of an exact integer by a power-of-two-scaled constant) makes host and
 * device agree bit for bit. */
CLI_HD float cli_random_value(uint64_t seed, uint64_t stream_id, uint64_t i, float scale) {
  uint64_t h = cli_hash64(seed ^ cli_hash64(stream_id * 0xD1B54A32D192ED03ull + i));
  int32_t q = (int32_t)(h >> 40) - 8388608;
  float unit = scale * (1.0f / 8388608.0f);
  return (float)q * unit;
}

#ifdef __cplusplus
extern "C" {
#endif
/* Fills n bf16 values with cli_random_value(seed, stream_id, i, scale), enqueued on stream. */
int cli_fill_random_bf16(void *dst, int64_t n, uint64_t seed, uint64_t stream_id, float scale,
                         void *stream);
#ifdef __cplusplus
}
#endif

#endif
