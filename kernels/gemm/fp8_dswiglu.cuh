/* grouped_gemm_fp8_dswiglu.cuh — the FP8 backward's d_act product with the SwiGLU backward in its
 * epilogue (the 256-column kernel's DSWIGLU tiles, grouped_gemm_fp8_wide.cuh). What the separate
 * row kernel (v1_swiglu_backward_rw, kernels/v1_swiglu.cu) does after the product, done here on
 * the tile while it is on chip, so that d_act never goes through memory:
 *   dg, du = SwiGLU'(g, u) * (rw * d_act), in bf16 into dgu and quantized 1x128 into q (the dx
 *   product's A operand), d_rw = dot(d_act, act) into the row's (token, j) slot on its source rank.
 * A consumer warpgroup holds 64 rows x 256 columns of d_act. Four passes of 64 columns each stage
 * the bf16 values (gg_store_pass, no TMA store) and read them back by rows: thread t takes the
 * 16-byte chunk t % 8 of rows t / 8 + 16 j (j < 4), the same rows in every pass, and loads the
 * chunk's pre-activations and activation codes. The bf16 d_act is what the separate product
 * stores, and the arithmetic is swiglu_bwd.cuh's, so dg, du, the codes and their scales are bit
 * for bit the row kernel's. A 1x128 block is two passes' chunks of a row on 8 lanes: the first
 * pass's values wait in registers for the second's, the amax is a 3-step butterfly (a max: the
 * same scale as the row kernel's 16 lanes).
 * d_rw: each thread sums its chunks' products in column order, the row's 8 lanes in a fixed
 * butterfly, giving the tile's part of the row's dot product; a row kernel after the launch
 * (mok_gg_fp8_dact_dswiglu) adds the n_tiles parts in tile order and writes the slot.
 * Deterministic whichever CTA computes which tile; not the row kernel's bits (its lanes sum
 * another column order). The operands the epilogue loads are prefetched into L2 eight K blocks
 * before the tile's end (f8_dsw_prefetch). */
#ifndef MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH
#define MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH

#include <stdint.h>
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/pointwise/swiglu_bwd.cuh"

/* A 1x128 block held as two 8-value chunks by each of a row's 8 lanes (lo: the first pass's
 * columns, hi: the second's), quantized as f8_quant_block8 does a half-warp's: the block's scale
 * to *scale from the row's first lane, the codes to q_lo, q_hi. Every lane of the warp calls
 * it. */
__device__ __forceinline__ void f8_dsw_quant(uint4 lo, uint4 hi, uint8_t *q_lo, uint8_t *q_hi,
                                             float *scale, int chunk, bool store) {
  float v[16];
  v1_unpack8(lo, v);
  v1_unpack8(hi, v + 8);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = f8_block_amax<8>(amax);
  if (!store) return;
  const float sc = f8_scale_of(amax), inv = 1.0f / sc;
  f8_store_codes8(q_lo, v, inv);
  f8_store_codes8(q_hi, v + 8, inv);
  if (chunk == 0) *scale = sc;
}

/* Pass PASS (columns col0 + 64 PASS ..) of the warpgroup's 64 rows from row0, rows real ones:
 * stage, then per row chunk the SwiGLU backward into dgu, dot[j] += d_act * act, and on odd
 * passes the two passes' 1x128 blocks quantized (hold: the even pass's dg, du per j). Padding
 * rows (at or past rows) get zeros, zero codes and scale 1, as the row kernel writes them. */
template <int PASS>
__device__ __forceinline__ void f8_dsw_pass(const float *y, uint32_t epi, const f8_params &p,
                                            int wtid, int cwg, int64_t row0, int col0, int rows,
                                            float *dot, uint4 *hold) {
  const f8_dsw &d = p.dsw;
  gg_store_pass<8 * PASS, 1>(y, epi, wtid, nullptr, 0, 64, (int)row0, 2 + cwg);
  const uint8_t *box = (const uint8_t *)__cvta_shared_to_generic(epi);
  const int n = p.n_out, c = wtid & 7;
  const int col = col0 + 64 * PASS + 8 * c;
  const int64_t ld = 2 * (int64_t)n;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = (wtid >> 3) + 16 * j;
    const int64_t grow = row0 + r;
    uint4 pg = make_uint4(0, 0, 0, 0), pu = pg;
    if (r < rows) {
      float fd[8], fg[8], fu[8], fa[8];
      v1_unpack8(*(const uint4 *)(box + r * 128 + ((c ^ (r & 7)) << 4)), fd);
      const uint4 *pre = (const uint4 *)(d.preact + grow * ld + col);
      v1_unpack8(__ldg(pre), fg);
      v1_unpack8(__ldg(pre + n / 8), fu);
      const uint2 codes = __ldg((const uint2 *)(d.act + grow * n + col));
      const float s = __ldg(d.act_scales + (int64_t)(col >> 7) * p.m_pad + grow);
      const float w = __ldg(d.rw + grow);
      f8_codes4(codes.x, fa);
      f8_codes4(codes.y, fa + 4);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        dot[j] += fd[k] * (fa[k] * s);
        fd[k] = w * fd[k];
      }
      swiglu_bwd8_packed(fd, fg, fu, &pg, &pu, p.use_limit, p.limit);
    }
    const bool in = grow < d.m_total;
    if (in) {
      uint4 *out = (uint4 *)(d.dgu + grow * ld + col);
      out[0] = pg;
      out[n / 8] = pu;
    }
    if (PASS & 1) {
      uint8_t *q = d.q + grow * ld + col;
      f8_dsw_quant(hold[2 * j], pg, q - 64, q, d.q_scales + (int64_t)(col >> 7) * p.m_pad + grow,
                   c, in);
      f8_dsw_quant(hold[2 * j + 1], pu, q + n - 64, q + n,
                   d.q_scales + (int64_t)((n + col) >> 7) * p.m_pad + grow, c, in);
    } else {
      hold[2 * j] = pg;
      hold[2 * j + 1] = pu;
    }
  }
}

/* The warpgroup's 64 rows x 256 columns of d_act in y (see the file comment). */
__device__ __forceinline__ void f8_dsw_epilogue(const float *y, uint32_t epi, const f8_params &p,
                                                int wtid, int cwg, int64_t row0, int n_tile,
                                                int rows) {
  const f8_dsw &d = p.dsw;
  const int col0 = n_tile * 256, c = wtid & 7;
  float dot[4] = {0.f, 0.f, 0.f, 0.f};
  uint4 hold[8];
  f8_dsw_pass<0>(y, epi, p, wtid, cwg, row0, col0, rows, dot, hold);
  f8_dsw_pass<1>(y, epi, p, wtid, cwg, row0, col0, rows, dot, hold);
  f8_dsw_pass<2>(y, epi, p, wtid, cwg, row0, col0, rows, dot, hold);
  f8_dsw_pass<3>(y, epi, p, wtid, cwg, row0, col0, rows, dot, hold);
  /* the tile's part of each row's d_rw: the row's 8 lanes in a fixed butterfly */
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) dot[j] += __shfl_xor_sync(0xffffffffu, dot[j], o);
    const int r = (wtid >> 3) + 16 * j;
    if (c == 0 && r < rows) d.part[(int64_t)n_tile * d.m_total + row0 + r] = dot[j];
  }
}

/* The tile's epilogue operands (the warpgroup's rows' pre-activations g and u, their activation
 * codes: 1.25 KB a row) into L2 a few K blocks before the epilogue reads them, one bulk prefetch
 * per row and operand. */
__device__ __forceinline__ void f8_dsw_prefetch(const f8_params &p, int wtid, int64_t row0,
                                                int n_tile, int rows) {
  const f8_dsw &d = p.dsw;
  const int n = p.n_out, col0 = n_tile * 256;
  for (int i = wtid; i < 3 * rows; i += 128) {
    const int64_t grow = row0 + i / 3;
    const int op = i % 3;
    if (op == 2) bulk_prefetch_l2(d.act + grow * n + col0, 256);
    else bulk_prefetch_l2(d.preact + grow * 2 * n + op * n + col0, 512);
  }
}

/* A warpgroup without real rows in the tile: its 64 rows' 256 columns of dg and du as padding
 * (zeros, zero codes, scale 1), a 16-byte chunk per lane and row. */
__device__ __forceinline__ void f8_dsw_zero(const f8_params &p, int wtid, int64_t row0,
                                            int n_tile) {
  const f8_dsw &d = p.dsw;
  const int n = p.n_out, c = wtid & 31, col = n_tile * 256 + 8 * c;
  const int64_t ld = 2 * (int64_t)n;
  for (int r = wtid >> 5; r < 64; r += 4) {
    const int64_t grow = row0 + r;
    if (grow >= d.m_total) break;
    uint4 *out = (uint4 *)(d.dgu + grow * ld + col);
    out[0] = out[n / 8] = make_uint4(0, 0, 0, 0);
    uint8_t *q = d.q + grow * ld + col;
    *(uint2 *)q = *(uint2 *)(q + n) = make_uint2(0, 0);
    if ((c & 15) == 0) {
      d.q_scales[(int64_t)(col >> 7) * p.m_pad + grow] = 1.0f;
      d.q_scales[(int64_t)((n + col) >> 7) * p.m_pad + grow] = 1.0f;
    }
  }
}

#endif /* MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH */
