/* fp8.h — the layout conventions of mok's block-scaled FP8 data (E4M3 codes with fp32 decode
 * scales: value = code * scale; a block's scale is its amax / 448, 1 for an all-zero block),
 * shared by the quantizers (kernels/pointwise), the GEMMs (kernels/gemm) and the layer (api/).
 * Plain C, host and device. The device arithmetic is in fp8.cuh. */
#ifndef MOK_COMMON_FP8_H
#define MOK_COMMON_FP8_H

/* Elements per scaling block along a row (activations: 1x128; weights: 128x128). */
#define MOK_FP8_BLOCK 128

/* Rows of an activation scale table: m_total rounded up to 128 (scales are stored K-block-major,
 * [k / 128][MOK_FP8_SCALE_ROWS(m_total)], so a tile's 128 row scales of one K block are
 * contiguous). */
#define MOK_FP8_SCALE_ROWS(m_total) ((((m_total) + 127) / 128) * 128)

#endif /* MOK_COMMON_FP8_H */
