/* grouped_gemm_fp8_dswiglu.cuh — the FP8 backward's d_act product with the SwiGLU backward done
 * inside the same launch (the 256-column kernel's DSWIGLU tiles, grouped_gemm_fp8_wide.cuh), by
 * warps that are idle there: what the separate row kernel (v1_swiglu_backward_rw,
 * kernels/v1_swiglu.cu) does after the product,
 *   dg, du = SwiGLU'(g, u) * (rw * d_act), in bf16 into dgu and quantized 1x128 into q (the dx
 *   product's A operand), d_rw = dot(d_act, act) into the row's (token, j) slot,
 * runs beside the consumers' next main loop instead of after the whole product.
 *
 * The consumers store their 64 x 256 block of d_act as the plain product does (staged boxes, TMA
 * stores into da) and hand the block over: once the stores are complete (bulk wait, then the
 * async-to-generic proxy fence), a warpgroup's thread 0 claims the next entry of a ring in shared
 * memory (a counter; an entry is reused once the helpers released it) and publishes
 * {row0, rows, n_tile} on its full barrier. Warps 1-3 of the producer warpgroup (warp 0 holds the
 * TMA thread) take every entry in order; each works on rows hw, hw + 3, ... of the block, a row's
 * 256 columns at 8 per lane, as the row kernel does with its rows: so dg, du, their codes and
 * scales are bit for bit the row kernel's (its arithmetic, swiglu_bwd.cuh; its quantizer,
 * f8_quant_block8). Each warp releases the entry after its rows. A warpgroup with no real rows
 * in a tile hands over rows = 0: the helpers write its rows as padding (zeros, zero codes, scale
 * 1, as the row kernel does). A warpgroup ends with rows = -1; the helpers stop after both ends.
 *
 * d_rw: a row's lanes sum their 8 products in column order, then a fixed butterfly gives the
 * block's part of the row's dot product, stored in part; a row kernel after the launch
 * (mok_gg_fp8_dact_dswiglu) adds the n_tiles parts in tile order and writes the slot.
 * Deterministic whichever CTA or helper warp takes a block; not the row kernel's bits (its lanes
 * sum another column order). The consumers prefetch each tile's pre-activations and activation
 * codes into L2 eight K blocks before its end (f8_dsw_prefetch). */
#ifndef MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH
#define MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH

#include <stdint.h>
#include "kernels/comm_move.cuh"
#include "kernels/grouped_gemm_common.cuh"
#include "kernels/grouped_gemm_fp8_common.cuh"
#include "kernels/swiglu_bwd.cuh"

#define F8_DSW_SLOTS 8   /* ring entries: blocks handed over and not yet released */
#define F8_DSW_HELPERS 3 /* warps 1-3 of the producer warpgroup                    */

/* The hand-over ring in shared memory. */
typedef struct {
  int4 *entry;          /* {row0, unused, rows, n_tile}                          */
  int *head;            /* entries claimed so far                                */
  uint32_t full0, empty0; /* mbarriers: full (1 arrival), empty (F8_DSW_HELPERS)  */
} f8_dsw_ring;

/* Thread 0 of a consumer warpgroup: the block {row0, rows, n_tile} to the helpers, after this
 * thread's TMA stores of it are complete and visible to generic loads. */
__device__ __forceinline__ void f8_dsw_hand_over(const f8_dsw_ring &h, int64_t row0, int rows,
                                                 int n_tile) {
  bulk_wait0();
  cm_fence_proxy_global();
  const int slot = atomicAdd(h.head, 1);
  const int i = slot % F8_DSW_SLOTS;
  mbar_wait(h.empty0 + 8 * i, ((slot / F8_DSW_SLOTS) & 1) ^ 1);
  h.entry[i] = make_int4((int)row0, 0, rows, n_tile);
  mbar_arrive(h.full0 + 8 * i);
}

/* One row's 256 columns from col0 (lane: 8 of them): the row kernel's body. */
__device__ __forceinline__ void f8_dsw_row(const f8_params &p, int64_t grow, int col0, int n_tile,
                                           bool real, int lane) {
  const f8_dsw &d = p.dsw;
  const int n = p.n_out, col = col0 + 8 * lane;
  const int64_t ld = 2 * (int64_t)n;
  uint4 pg = make_uint4(0, 0, 0, 0), pu = pg;
  float dot = 0.0f;
  if (real) {
    float fd[8], fg[8], fu[8], fa[8];
    v1_unpack8(__ldcg((const uint4 *)(d.da + grow * n + col)), fd);
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
      dot += fd[k] * (fa[k] * s);
      fd[k] = w * fd[k];
    }
    swiglu_bwd8_packed(fd, fg, fu, &pg, &pu, p.use_limit, p.limit);
  }
  uint4 *out = (uint4 *)(d.dgu + grow * ld + col);
  out[0] = pg;
  out[n / 8] = pu;
  float v[8];
  v1_unpack8(pg, v);
  f8_quant_block8(v, d.q + grow * ld + col, d.q_scales + (int64_t)(col >> 7) * p.m_pad + grow,
                  lane, true);
  v1_unpack8(pu, v);
  f8_quant_block8(v, d.q + grow * ld + n + col,
                  d.q_scales + (int64_t)((n + col) >> 7) * p.m_pad + grow, lane, true);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (real && lane == 0) d.part[(int64_t)n_tile * d.m_total + grow] = dot;
}

/* A helper warp (hw: 0 .. F8_DSW_HELPERS - 1): every handed-over block's rows hw, hw + 3, ...,
 * until both consumer warpgroups ended. */
__device__ __forceinline__ void f8_dsw_helper(const f8_params &p, const f8_dsw_ring &h, int hw,
                                              int lane) {
  int ended = 0;
  for (int slot = 0; ended < 2; ++slot) {
    const int i = slot % F8_DSW_SLOTS;
    mbar_wait(h.full0 + 8 * i, (slot / F8_DSW_SLOTS) & 1);
    const int4 e = h.entry[i];
    __syncwarp();
    if (e.z < 0) {
      ++ended;
    } else {
      for (int r = hw; r < 64; r += F8_DSW_HELPERS) {
        const int64_t grow = (int64_t)e.x + r;
        if (grow >= p.dsw.m_total) break;
        f8_dsw_row(p, grow, e.w * 256, e.w, r < e.z, lane);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(h.empty0 + 8 * i);
  }
}

/* The tile's epilogue operands (the warpgroup's rows' pre-activations g and u, their activation
 * codes: 1.25 KB a row) into L2 a few K blocks before the helpers read them, one bulk prefetch
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

#endif /* MOK_GROUPED_GEMM_FP8_DSWIGLU_CUH */
