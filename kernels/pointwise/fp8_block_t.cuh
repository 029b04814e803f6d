/* fp8_block_t.cuh — a 128 x 128 block of E4M3 codes transposed through shared memory, for the FP8
 * backward's weights (fp8_layout.cu moves the forward's codes, fp8_quant.cu writes them beside
 * the forward's as it quantizes). 256 threads per block; every global access is 16 bytes wide
 * or, for the quantizer's row-major codes, 8.
 *
 * The block sits in a 16 KB tile of 32-bit words, four codes of a row each, row r's word w at
 * r * 32 + (w ^ 4 * ((r / 16) % 8)). The XOR spreads the 16-row groups over the banks: the
 * readers below take one word-column of 16 rows per thread, 8 row groups and 4 word-columns per
 * warp, and hit 32 distinct banks; it keeps aligned pairs and quads of words together, so 8- and
 * 16-byte stores into the tile stay aligned. */
#ifndef MOK_FP8_BLOCK_T_CUH
#define MOK_FP8_BLOCK_T_CUH

#include <stdint.h>

#define F8B_THREADS 256
#define F8B_WORDS (128 * 32) /* the tile: 128 rows of 32 words */

__device__ __forceinline__ int f8b_word(int row, int word) {
  return row * 32 + (word ^ (((row >> 4) & 7) << 2));
}

/* Four words, one per row, as four words, one per column: out[b] holds byte b of in[0..3]. */
__device__ __forceinline__ void f8b_transpose4x4(const uint32_t *in, uint32_t *out) {
  const uint32_t lo01 = __byte_perm(in[0], in[1], 0x5140), hi01 = __byte_perm(in[0], in[1], 0x7362);
  const uint32_t lo23 = __byte_perm(in[2], in[3], 0x5140), hi23 = __byte_perm(in[2], in[3], 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

/* The tile (complete: the caller synchronized after its stores) out transposed: row c of the
 * result is column c of the block, 128 bytes at dst + c * ld_t. Thread t writes columns
 * 4 (t / 8) .. + 3, rows 16 (t % 8) .. + 15 of the block: four 16-byte stores, the 8 threads of a
 * column-quad together covering each of its four output rows. */
__device__ __forceinline__ void f8b_store_transposed(const uint32_t *tile, uint8_t *dst,
                                                     int64_t ld_t) {
  const int rg = threadIdx.x & 7, cw = threadIdx.x >> 3;
  uint32_t col[4][4]; /* [column b][group q of four rows] */
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t rows[4], t[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) rows[j] = tile[f8b_word(16 * rg + 4 * q + j, cw)];
    f8b_transpose4x4(rows, t);
#pragma unroll
    for (int b = 0; b < 4; ++b) col[b][q] = t[b];
  }
#pragma unroll
  for (int b = 0; b < 4; ++b)
    *(uint4 *)(dst + (int64_t)(4 * cw + b) * ld_t + 16 * rg) =
        make_uint4(col[b][0], col[b][1], col[b][2], col[b][3]);
}

#endif /* MOK_FP8_BLOCK_T_CUH */
