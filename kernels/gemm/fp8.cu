/* grouped_gemm_fp8.cu — FP8 E4M3 block-scaled grouped GEMMs for sm_90a (forward, forward gate+up
 * with SwiGLU) and their quantization kernels; see grouped_gemm.h.
 *
 * Recipe (the Hopper-native one): activations carry one fp32 scale per 1x128 block, weights one
 * per 128x128 block. The kernel has the bf16 kernel's shape (persistent, one TMA producer warp,
 * wgmma consumer warpgroups, gemm_tile_scheduler.h) with tiles of 64 rows per consumer warpgroup
 * (two or three of them: 128 or 192 rows) by 128 columns and BK = 128: per K block each consumer
 * runs four m64n128k32 wgmmas into a fresh fp32 partial, waits, and adds
 * partial * scale_a[row] * scale_b on the CUDA cores (promotion once per 128-K); with three, two
 * warpgroups' wgmmas run while the third drains and promotes. The activation scales of a stage
 * come with it (a bulk copy per stage on the same mbarrier). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/fp8_common.cuh"
#include "kernels/gemm/tmap.h"
#include "kernels/gemm/tile_scheduler.h"
#include "kernels/common/ptx.cuh"

/* The tile is NWG x 64 rows (one 64-row slice per consumer warpgroup; NWG = 2 or 3) by 128
 * columns; everything that depends on NWG is a function of it. */
#define F8_BN 128
#define F8_B_BYTES (F8_BN * F8_BK)      /* 16 KB */
#define F8_BM(nwg) (64 * (nwg))
#define F8_A_BYTES(nwg) (F8_BM(nwg) * F8_BK)
#define F8_SA_OFF(nwg) (F8_A_BYTES(nwg) + F8_B_BYTES)
/* A, B and the tile's row scales, 1024-aligned: 33 KB (NWG 2) or 41 KB (NWG 3) */
#define F8_STAGE_BYTES(nwg) ((F8_SA_OFF(nwg) + F8_BM(nwg) * 4 + 1023) / 1024 * 1024)
/* dir: the direct epilogue (no staging buffer), whose shared memory holds one more stage */
#define F8_STAGES(nwg, dir) (((nwg) == 2 ? 5 : 4) + (dir))
#define F8_EPI_OFF(nwg, dir) (F8_STAGES(nwg, dir) * F8_STAGE_BYTES(nwg))
#define F8_SMEM(nwg, dir) (F8_EPI_OFF(nwg, dir) + ((dir) ? 0 : (nwg) * 16384))
#define F8_THREADS(nwg) (128 * ((nwg) + 1))

/* Issues one K block (four m64n128k32 wgmmas) of this warpgroup into a fresh partial. da, db:
 * the descriptors of this warpgroup's A rows and of B in stage 0; st: the stage. */
template <int NWG>
__device__ __forceinline__ void f8_issue(float *part, uint64_t da, uint64_t db, int st) {
  da = wgmma_desc_add(da, st * F8_STAGE_BYTES(NWG));
  db = wgmma_desc_add(db, st * F8_STAGE_BYTES(NWG));
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n128k32_e4m3(part, wgmma_desc_add(da, kk * 32), wgmma_desc_add(db, kk * 32), kk > 0);
  wgmma_commit();
}

/* acc += part * scale_a[row] * scale_b[column half] (rows r0 / r0 + 8: fragment bit 1;
 * columns 64..127: the up half in SWIGLU, the same block in FWD). */
__device__ __forceinline__ void f8_promote(float *acc, const float *part, float sa0, float sa1,
                                           float sb0, float sb1) {
  const float f00 = sa0 * sb0, f10 = sa1 * sb0, f01 = sa0 * sb1, f11 = sa1 * sb1;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const bool hi_row = (i & 2) != 0, up = i >= 32;
    const float f = up ? (hi_row ? f11 : f01) : (hi_row ? f10 : f00);
    acc[i] = fmaf(part[i], f, acc[i]);
  }
}

/* MODE: F8_FWD / F8_SWIGLU. DB: two partials, so that a warpgroup's next K block runs on the
 * tensor cores while it promotes the previous one. CL: 1, or 2 (a cluster pair of vertically
 * adjacent tiles sharing the B tile through multicast, each CTA loading one 64-row box). NWG: 2
 * consumer warpgroups (128-row tiles, 232 registers each), or 3 (192-row tiles, 160 registers
 * each), so that while one warpgroup waits for its wgmmas to drain and promotes, the other two
 * keep the tensor cores busy, and each B tile serves 192 rows. DIR: the direct epilogue
 * (f8_store_direct) and one more stage. */
template <int MODE, int DB, int CL, int NWG, int DIR>
__global__ void __launch_bounds__(F8_THREADS(NWG), 1)
    gg_fp8_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b0,
                  const __grid_constant__ CUtensorMap tm_b1, const __grid_constant__ CUtensorMap tm_c0,
                  const __grid_constant__ CUtensorMap tm_c1, const f8_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  constexpr int STAGES = F8_STAGES(NWG, DIR), STAGE_BYTES = F8_STAGE_BYTES(NWG), BM = F8_BM(NWG);
  constexpr int A_BYTES = F8_A_BYTES(NWG), SA_OFF = F8_SA_OFF(NWG);
  __shared__ __align__(8) uint64_t bars[2 * STAGES];
  __shared__ int32_t prefix[F8_MAX_EXPERTS + 1];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[STAGES]);
  const int E = p.num_experts;
  const int rank = CL > 1 ? (int)cluster_ctarank() : 0;
  const int unit0 = blockIdx.x / CL, ustride = gridDim.x / CL;
  const int total = f8_cta_start<MODE, CL>(smem_base, full0, empty0, STAGES, 4 * NWG * CL, BM,
                                           &tm_a, &tm_b0, &tm_b1, &tm_c0, p.count, E,
                                           p.n_tiles, prefix);

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<NWG == 2 ? 40 : 32>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int u = unit0; u < total; u += ustride) {
        gg_tile t = gg_decode_m_grouped(u, prefix, E, p.n_tiles, p.group_m);
        const int m_tile = t.m_tile * CL + rank;
        /* a pair's tile past the expert's rows loads the expert's first rows (ignored) */
        const int a_row = p.offset[t.expert] +
                          (p.count[t.expert] > m_tile * BM ? m_tile * BM : 0);
        /* row scales: the 64-row slices inside the padded rows (past them no warpgroup has math) */
        int sa_bytes = BM * 4;
        if (NWG > 2 && a_row + BM > p.m_pad) sa_bytes = (p.m_pad - a_row) * 4;
        const int bexp = p.expert_base + t.expert;
        int n0, n1;
        if (MODE == F8_FWD) {
          const int col = t.n_tile * F8_BN;
          n0 = bexp * p.b_rows + col;
          n1 = col + 64 < p.n_out ? n0 + 64 : n0;
        } else {
          n0 = n1 = bexp * p.b_rows + t.n_tile * 64;
        }
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          mbar_arrive_expect_tx(full, A_BYTES + F8_B_BYTES + sa_bytes);
          const uint32_t sa = smem_base + stage * STAGE_BYTES;
          const int k0 = kb * F8_BK;
          tma_load_2d(sa, &tm_a, full, k0, a_row);
          if (CL == 1) {
            tma_load_2d(sa + A_BYTES, &tm_b0, full, k0, n0);
            tma_load_2d(sa + A_BYTES + 8192, MODE == F8_SWIGLU ? &tm_b1 : &tm_b0, full, k0, n1);
          } else if (rank == 0) {
            tma_load_2d_multicast(sa + A_BYTES, &tm_b0, full, k0, n0, (uint16_t)3);
          } else {
            tma_load_2d_multicast(sa + A_BYTES + 8192, MODE == F8_SWIGLU ? &tm_b1 : &tm_b0,
                                  full, k0, n1, (uint16_t)3);
          }
          bulk_load_1d(sa + SA_OFF, p.a_scales + (size_t)kb * p.m_pad + a_row, sa_bytes, full);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
      gg_producer_drain<CL>(empty0, STAGES, stage, phase);
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<NWG == 2 ? 232 : 160>();
    const int cwg = wg - 1;
    const int wtid = tid & 127;
    const int warp = wtid >> 5, lane = wtid & 31;
    const uint32_t epi = smem_base + F8_EPI_OFF(NWG, DIR) + cwg * 16384; /* unused when DIR */
    const int r0 = cwg * 64 + warp * 16 + (lane >> 2); /* this thread's rows: r0, r0 + 8 */
    const int kbs = p.k_blocks;
    uint64_t da0 = wgmma_desc_sw128(smem_base + cwg * 8192, 16, 1024);
    uint64_t db0 = wgmma_desc_sw128(smem_base + A_BYTES, 16, 1024);
    asm volatile("" : "+l"(da0), "+l"(db0)); /* built once: not re-derived from addresses */
    int stage = 0;
    uint32_t phase = 0;
    float acc[64], p0[64], p1[DB ? 64 : 1];
    for (int u = unit0; u < total; u += ustride) {
      gg_tile t = gg_decode_m_grouped(u, prefix, E, p.n_tiles, p.group_m);
      const int m_tile = t.m_tile * CL + rank;
      const int cnt = max(p.count[t.expert], 0);
      const bool math = cnt - m_tile * BM > cwg * 64;
      const int bexp = p.expert_base + t.expert;
      const float *sb0, *sb1; /* weight-scale rows: FWD one 128-row block, SWIGLU gate and up */
      if (MODE == F8_FWD) {
        sb0 = sb1 = p.b_scales0 + ((size_t)bexp * (p.b_rows / 128) + t.n_tile) * kbs;
      } else {
        const size_t blk = (size_t)bexp * (p.b_rows / 128) + (t.n_tile >> 1);
        sb0 = p.b_scales0 + blk * kbs;
        sb1 = p.b_scales1 + blk * kbs;
      }
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      if (!math) {
        for (int kb = 0; kb < kbs; ++kb) {
          mbar_wait(full0 + 8 * stage, phase);
          gg_release<CL>(empty0 + 8 * stage, lane);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
        continue;
      }
      if (!DB) {
        for (int kb = 0; kb < kbs; ++kb) {
          mbar_wait(full0 + 8 * stage, phase);
          const float s_b0 = __ldg(sb0 + kb), s_b1 = __ldg(sb1 + kb);
          f8_issue<NWG>(p0, da0, db0, stage);
          /* the row scales came with the stage: read them while the wgmmas run */
          const float *sas = (const float *)(smem + stage * STAGE_BYTES + SA_OFF);
          const float s_a0 = sas[r0], s_a1 = sas[r0 + 8];
          wgmma_wait<0>();
          reg_fence(p0, 64);
          gg_release<CL>(empty0 + 8 * stage, lane);
          f8_promote(acc, p0, s_a0, s_a1, s_b0, s_b1);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      } else {
        /* K block kb is promoted from one partial while kb + 1 runs into the other. */
        mbar_wait(full0 + 8 * stage, phase);
        float cb0 = __ldg(sb0), cb1 = __ldg(sb1);
        f8_issue<NWG>(p0, da0, db0, stage);
        int cst = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
        for (int kb = 0;;) {
          float nb0 = 0.f, nb1 = 0.f;
          int nst = stage;
          const bool more = kb + 1 < kbs;
          if (more) {
            mbar_wait(full0 + 8 * stage, phase);
            nb0 = __ldg(sb0 + kb + 1);
            nb1 = __ldg(sb1 + kb + 1);
            f8_issue<NWG>(p1, da0, db0, stage);
            if (++stage == STAGES) { stage = 0; phase ^= 1; }
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
          reg_fence(p0, 64);
          {
            const float *sas = (const float *)(smem + cst * STAGE_BYTES + SA_OFF);
            const float s_a0 = sas[r0], s_a1 = sas[r0 + 8];
            gg_release<CL>(empty0 + 8 * cst, lane);
            f8_promote(acc, p0, s_a0, s_a1, cb0, cb1);
          }
          if (!more) break;
          ++kb;
          cst = nst;
          cb0 = nb0;
          cb1 = nb1;
          nst = stage;
          const bool more2 = kb + 1 < kbs;
          if (more2) {
            mbar_wait(full0 + 8 * stage, phase);
            nb0 = __ldg(sb0 + kb + 1);
            nb1 = __ldg(sb1 + kb + 1);
            f8_issue<NWG>(p0, da0, db0, stage);
            if (++stage == STAGES) { stage = 0; phase ^= 1; }
            wgmma_wait<1>();
          } else {
            wgmma_wait<0>();
          }
          reg_fence(p1, 64);
          {
            const float *sas = (const float *)(smem + cst * STAGE_BYTES + SA_OFF);
            const float s_a0 = sas[r0], s_a1 = sas[r0 + 8];
            gg_release<CL>(empty0 + 8 * cst, lane);
            f8_promote(acc, p1, s_a0, s_a1, cb0, cb1);
          }
          if (!more2) break;
          ++kb;
          cst = nst;
          cb0 = nb0;
          cb1 = nb1;
        }
      }

      /* the epilogue: direct stores (DIR) or the staging buffer and TMA stores */
      const int row0 = p.offset[t.expert] + m_tile * BM + cwg * 64;
      const int rows = min(cnt - (m_tile * BM + cwg * 64), 64);
      if (MODE == F8_FWD) {
        if (DIR) f8_store_direct<0, 16>(acc, p.c0, p.n_out, row0, t.n_tile * F8_BN, rows, wtid);
        else gg_store_pass<0, 2>(acc, epi, wtid, p.c0 ? &tm_c0 : nullptr, t.n_tile * F8_BN,
                                 p.n_out, row0, 2 + cwg);
        if (!DIR && p.push)
          gg_push_pass(smem + F8_EPI_OFF(NWG, DIR) + cwg * 16384, wtid, p.move, p.move_m_total,
                       p.n_out, t.n_tile * F8_BN, p.n_out, row0);
      } else {
        const int col0 = t.n_tile * 64;
        if (p.has_preact && DIR) {
          f8_store_direct<0, 8>(acc, p.c1, 2 * p.n_out, row0, col0, rows, wtid);
          f8_store_direct<8, 8>(acc, p.c1, 2 * p.n_out, row0, p.n_out + col0, rows, wtid);
        } else if (p.has_preact) {
          gg_store_pass<0, 1>(acc, epi, wtid, &tm_c1, col0, p.n_out, row0, 2 + cwg);
          gg_store_pass<8, 1>(acc, epi, wtid, &tm_c1, p.n_out + col0, 2 * p.n_out, row0, 2 + cwg);
        }
        gg_swiglu<32>(acc, p.use_limit, p.limit);
        if (DIR) f8_store_direct<0, 8>(acc, p.c0, p.n_out, row0, col0, rows, wtid);
        else gg_store_pass<0, 1>(acc, epi, wtid, &tm_c0, col0, p.n_out, row0, 2 + cwg);
      }
    }
    if (wtid == 0) bulk_wait0();
    if (MODE == F8_FWD && p.push)
      __threadfence_system(); /* the pushed rows, before the cross-rank barrier after the kernel */
  }
}

/* ---- quantization ------------------------------------------------------------------------- */
__device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* One half-warp per 1x128 block: lanes hold 8 consecutive values (16-byte loads, so that enough
 * bytes are in flight for the copy rate). The scale of (row, kb) goes to scales[kb * s_kb + row *
 * s_row]. rows_dev (device, or NULL): rows from *rows_dev on are left as they are. Every lane
 * takes part in the shuffles; only active ones load and store. */
__global__ void gg_quant_act_kernel(const uint16_t *x, uint8_t *q, float *scales, int64_t m_total,
                                    int64_t k, int64_t s_kb, int64_t s_row,
                                    const int32_t *rows_dev) {
  const int64_t kbs = k / 128;
  const int64_t blk = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 4;
  const int lane = threadIdx.x & 15;
  const int64_t row = blk / kbs, kb = blk - row * kbs;
  const bool active = blk < m_total * kbs && !(rows_dev && row >= *rows_dev);
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const int64_t at = row * k + kb * 128 + lane * 8;
  if (active) {
    const uint4 raw = *(const uint4 *)(x + at);
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = bf16_to_f(u[j] & 0xffff);
      v[2 * j + 1] = bf16_to_f(u[j] >> 16);
    }
  }
  f8_quant_block8(v, q + at, scales + kb * s_kb + row * s_row, lane, active);
}

/* One CTA (256 threads) per 128x128 block: each thread holds half a row (64 values). */
__global__ void gg_quant_weight_kernel(const uint16_t *w, uint8_t *q, float *scales, int64_t n,
                                       int64_t k) {
  const int64_t nb = n / 128, kbs = k / 128;
  const int64_t blk = blockIdx.x; /* (expert, row block, col block) */
  const int64_t e = blk / (nb * kbs), rb = (blk / kbs) % nb, cb = blk % kbs;
  const int row = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int64_t base = (e * n + rb * 128 + row) * k + cb * 128 + half * 64;
  float amax = 0.0f;
  for (int i = 0; i < 64; i += 8) {
    const uint4 raw = *(const uint4 *)(w + base + i);
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      amax = fmaxf(amax, fmaxf(fabsf(bf16_to_f(u[j] & 0xffff)), fabsf(bf16_to_f(u[j] >> 16))));
  }
  __shared__ float red[8];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = red[0];
  for (int i = 1; i < 8; ++i) amax = fmaxf(amax, red[i]);
  const float scale = f8_scale_of(amax);
  const float inv = 1.0f / scale;
  for (int i = 0; i < 64; i += 8) {
    const uint4 raw = *(const uint4 *)(w + base + i);
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t o[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      o[j] = (uint32_t)f8_pack2(bf16_to_f(u[2 * j] & 0xffff) * inv, bf16_to_f(u[2 * j] >> 16) * inv) |
             ((uint32_t)f8_pack2(bf16_to_f(u[2 * j + 1] & 0xffff) * inv,
                                 bf16_to_f(u[2 * j + 1] >> 16) * inv)
              << 16);
    *(uint2 *)(q + base + i) = make_uint2(o[0], o[1]);
  }
  if (threadIdx.x == 0) scales[blk] = scale;
}

/* ---- host side ------------------------------------------------------------------------------ */
static int64_t f8_m_pad(int64_t m_total) { return (m_total + 127) / 128 * 128; }

static mok_status f8_quantize_act(const void *x, void *q, float *scales, int64_t m_total, int64_t k,
                                  int64_t s_kb, int64_t s_row, const int32_t *rows_dev,
                                  cudaStream_t stream) {
  if (!x || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (m_total <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (k % 128 || ((uintptr_t)x & 15) || ((uintptr_t)q & 15) || ((uintptr_t)scales & 15))
    return MOK_ERR_MISALIGNED;
  const int64_t halves = m_total * (k / 128); /* one half-warp per 1x128 block */
  const int64_t blocks = (halves * 16 + 255) / 256;
  gg_quant_act_kernel<<<(unsigned)blocks, 256, 0, stream>>>((const uint16_t *)x, (uint8_t *)q,
                                                            scales, m_total, k, s_kb, s_row,
                                                            rows_dev);
  GG_LAUNCHED();
  return MOK_SUCCESS;
}

extern "C" mok_status mok_fp8_quant_act(const void *x, void *q, float *scales,
                                              int64_t m_total, int64_t k, cudaStream_t stream) {
  return f8_quantize_act(x, q, scales, m_total, k, f8_m_pad(m_total), 1, NULL, stream);
}

extern "C" mok_status mok_fp8_quant_act_upto(const void *x, void *q, float *scales,
                                                   int64_t m_total, int64_t k,
                                                   const int32_t *rows_dev, cudaStream_t stream) {
  if (!rows_dev) return MOK_ERR_INVALID_ARGUMENT;
  return f8_quantize_act(x, q, scales, m_total, k, f8_m_pad(m_total), 1, rows_dev, stream);
}

extern "C" mok_status mok_fp8_quant_act_rows(const void *x, void *q, float *scales,
                                                   int64_t m_total, int64_t k,
                                                   cudaStream_t stream) {
  return f8_quantize_act(x, q, scales, m_total, k, 1, k / 128, NULL, stream);
}

extern "C" mok_status mok_fp8_quant_weight(const void *w, void *q, float *scales,
                                                 int64_t experts, int64_t n, int64_t k,
                                                 cudaStream_t stream) {
  if (!w || !q || !scales) return MOK_ERR_INVALID_ARGUMENT;
  if (experts <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (n % 128 || k % 128 || ((uintptr_t)w & 15) || ((uintptr_t)q & 15)) return MOK_ERR_MISALIGNED;
  const int64_t blocks = experts * (n / 128) * (k / 128);
  gg_quant_weight_kernel<<<(unsigned)blocks, 256, 0, stream>>>((const uint16_t *)w, (uint8_t *)q,
                                                               scales, n, k);
  GG_LAUNCHED();
  return MOK_SUCCESS;
}

template <int MODE, int DB, int CL, int NWG, int DIR = 0>
static mok_status f8_launch_v(const CUtensorMap *a, const CUtensorMap *b0, const CUtensorMap *b1,
                              const CUtensorMap *c0, const CUtensorMap *c1, f8_params p,
                              int max_units, cudaStream_t stream) {
  static int max_ctas = 0; /* co-resident CTAs (whole clusters), found once */
  if (!max_ctas)
    GG_TRY(gg_coresident_ctas((const void *)gg_fp8_kernel<MODE, DB, CL, NWG, DIR>,
                              F8_THREADS(NWG), F8_SMEM(NWG, DIR), CL, &max_ctas));
  const int cap = gg_ctas_cap(max_ctas, CL);
  int units = max_units < cap / CL ? max_units : cap / CL;
  if (units < 1) units = 1;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = gg_cluster_config(units * CL, F8_THREADS(NWG), F8_SMEM(NWG, DIR),
                                                   CL, stream, &attr);
  GG_CUDA(
      cudaLaunchKernelEx(&cfg, gg_fp8_kernel<MODE, DB, CL, NWG, DIR>, *a, *b0, *b1, *c0, *c1, p));
  return MOK_SUCCESS;
}

/* The 256-column kernel (grouped_gemm_fp8_wide.cu) is the default wherever the columns split into
 * 256: gate+up with SwiGLU, where it measured +14% (DeepSeek-V3 EP8) to +20-40% (Qwen3) over the
 * 128-column kernel; the backward's long-K products (d_act, dx); and the down projection, whose
 * short K (16 blocks) leaves the direct epilogue less amortized (-7% alone) but which, pushed into
 * the source ranks' slots, measured 0.25 ms faster in the layer's forward (docs/PERF.md). One
 * kernel for every plain product also keeps the layer's and the ops path's outputs equal bit for
 * bit. Flags 2, 16, 32 and 64 select the 128-column variants; flag 256 keeps pushed products on
 * the 128-column kernel; flag 128 (once the opt-in) is now what the default does. */
static int f8_wide(int push) {
  const int flags = gg_tuning_flags();
  if (push && (flags & 256)) return 0;
  return !(flags & (2 | 16 | 32 | 64));
}

/* Consumer warpgroups (the A tensor map's box is 64 rows per warpgroup). Three paid where the
 * experts are long (+7-13% at 448 and 1792 rows per expert) and cost where they are short (-20%
 * at 256 rows, where a 192-row tile leaves a 64-row tail tile that streams a whole B tile for a
 * third of the rows): decided from the rows per expert, the caller's hint (mok_gg_set_rows_hint)
 * or the capacity's. Tuning flags: 2 (two partials) exists with two warpgroups only; 16 forces
 * two, 32 three; the 256-column kernel has two. */
static int f8_nwg(int wide, int64_t m_total, int num_experts) {
  const int flags = gg_tuning_flags();
  if (wide || (flags & (2 | 16))) return 2; /* the wide kernel's A boxes: 128 rows too */
  if (flags & 32) return 3;
  const int64_t hint = gg_rows_hint(); /* rows per expert, when the caller knows them */
  return (hint > 0 ? hint >= 384 : m_total >= 384 * (int64_t)num_experts) ? 3 : 2;
}

/* Variant choice. Default: the 256-column kernel for gate+up (f8_wide); otherwise one partial, no
 * clusters, two or three consumer warpgroups (f8_nwg). The benchmark tuning hook's flags select
 * the others (docs/PERF.md has the measurements). */
template <int MODE>
static mok_status f8_launch(const CUtensorMap *a, const CUtensorMap *b0, const CUtensorMap *b1,
                            const CUtensorMap *c0, const CUtensorMap *c1, f8_params p,
                            int64_t m_total, cudaStream_t stream,
                            const CUtensorMap *q = NULL /* the codes' map, with p.q_act */) {
  const int flags = gg_tuning_flags();
  const int wide = f8_wide(p.push);
  if (wide) { /* where the columns split into 256 (flag 4: cluster pairs) */
    const mok_status st = f8_wide_launch(MODE, (flags & 4) ? 2 : 1, a, b0, b1,
                                         MODE == F8_FWD ? c0 : c1, q ? q : c0, p, m_total, stream);
    if (st != MOK_ERR_NOT_SUPPORTED) return st;
  }
  const int db = (flags & 2) ? 1 : 0, cl = (flags & 4) ? 2 : 1;
  const int nwg = f8_nwg(wide, m_total, p.num_experts);
  /* A probe until measured: flag 64 = the direct epilogue and one more stage (one partial, no
   * clusters) */
  const int dir = (flags & 64) && !db && cl == 1 && !p.push; /* a push reads the staging */
  const int max_tiles = (int)((m_total + F8_BM(nwg) - 1) / F8_BM(nwg)) * p.n_tiles;
  p.group_m = 16 / cl;
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  for (int e0 = 0; e0 < e_all; e0 += F8_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < F8_MAX_EXPERTS ? e_all - e0 : F8_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    const int units = cl == 2 ? (max_tiles + p.num_experts * p.n_tiles) / 2 + 1 : max_tiles;
    mok_status st;
    if (dir && nwg == 3) st = f8_launch_v<MODE, 0, 1, 3, 1>(a, b0, b1, c0, c1, p, units, stream);
    else if (dir) st = f8_launch_v<MODE, 0, 1, 2, 1>(a, b0, b1, c0, c1, p, units, stream);
    else if (nwg == 3 && cl == 2) st = f8_launch_v<MODE, 0, 2, 3>(a, b0, b1, c0, c1, p, units, stream);
    else if (nwg == 3) st = f8_launch_v<MODE, 0, 1, 3>(a, b0, b1, c0, c1, p, units, stream);
    else if (db && cl == 2) st = f8_launch_v<MODE, 1, 2, 2>(a, b0, b1, c0, c1, p, units, stream);
    else if (db) st = f8_launch_v<MODE, 1, 1, 2>(a, b0, b1, c0, c1, p, units, stream);
    else if (cl == 2) st = f8_launch_v<MODE, 0, 2, 2>(a, b0, b1, c0, c1, p, units, stream);
    else st = f8_launch_v<MODE, 0, 1, 2>(a, b0, b1, c0, c1, p, units, stream);
    if (st != MOK_SUCCESS) return st;
  }
  return MOK_SUCCESS;
}

static mok_status f8_fwd(const void *a, const float *a_scales, const void *b, const float *b_scales,
                         void *c, const int32_t *expert_offset, const int32_t *expert_count,
                         int num_experts, int64_t m_total, int64_t n, int64_t k,
                         const mok_gg_move *push, cudaStream_t stream) {
  if (!a || !a_scales || !b || !b_scales || (!c && !push)) return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(f8_check(expert_offset, expert_count, num_experts, m_total, n, k));
  if (((uintptr_t)a_scales & 15)) return MOK_ERR_MISALIGNED;
  CUtensorMap ta, tb, tc;
  const int wide = f8_wide(push != NULL);
  GG_TRY(gg_make_tmap_2d(&ta, a, m_total, k, 1, F8_BM(f8_nwg(wide, m_total, num_experts)), 128));
  GG_TRY(gg_make_tmap_2d(&tb, b, (int64_t)num_experts * n, k, 1, 64, 128));
  if (c) GG_TRY(gg_make_tmap_2d(&tc, c, m_total, n, 2, 64, 64));
  else tc = ta; /* push only: the epilogue stages the rows and stores nothing locally */
  f8_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.a_scales = a_scales;
  p.b_scales0 = p.b_scales1 = b_scales;
  p.c0 = p.c1 = (uint16_t *)c;
  p.num_experts = num_experts;
  p.n_tiles = (int)(n / F8_BN);
  p.k_blocks = (int)(k / F8_BK);
  p.m_pad = (int)f8_m_pad(m_total);
  p.b_rows = (int)n;
  p.n_out = (int)n;
  if (push) {
    if (!gg_move_ok(push, 1)) return MOK_ERR_INVALID_ARGUMENT;
    p.push = 1;
    p.move = *push;
    p.move_m_total = m_total;
  }
  return f8_launch<F8_FWD>(&ta, &tb, &tb, &tc, &tc, p, m_total, stream);
}

extern "C" mok_status mok_gg_fp8_fwd(const void *a, const float *a_scales, const void *b,
                                     const float *b_scales, void *c, const int32_t *expert_offset,
                                     const int32_t *expert_count, int num_experts, int64_t m_total,
                                     int64_t n, int64_t k, cudaStream_t stream) {
  return f8_fwd(a, a_scales, b, b_scales, c, expert_offset, expert_count, num_experts, m_total, n,
                k, NULL, stream);
}

extern "C" mok_status mok_gg_fp8_fwd_pushed(const void *a, const float *a_scales, const void *b,
                                            const float *b_scales, void *c,
                                            const int32_t *expert_offset,
                                            const int32_t *expert_count, int num_experts,
                                            int64_t m_total, int64_t n, int64_t k,
                                            const mok_gg_move *push, cudaStream_t stream) {
  if (!push) return MOK_ERR_INVALID_ARGUMENT;
  return f8_fwd(a, a_scales, b, b_scales, c, expert_offset, expert_count, num_experts, m_total, n,
                k, push, stream);
}

/* ---- d_act with the SwiGLU backward in the epilogue (kernels/fused_comm.h) ---- */

extern "C" int64_t mok_gg_fp8_dswiglu_part_floats(int64_t m_total, int64_t inter) {
  return inter / 256 * m_total;
}

/* d_rw of every real row: its n_tiles parts added in column order, into its slot. */
__global__ void f8_dsw_drw_kernel(const float *part, int n_tiles, int64_t m_total,
                                  const int32_t *used, mok_gg_move q) {
  const int64_t rows = *used < m_total ? *used : m_total;
  const int64_t per_rank = q.tokens * q.top_k;
  for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
       row += (int64_t)gridDim.x * blockDim.x) {
    const int32_t slot = q.row_src[row];
    if (slot < 0) continue;
    float sum = 0.0f;
    for (int t = 0; t < n_tiles; ++t) sum += part[(int64_t)t * m_total + row];
    char *base = q.peer_base[mok_sched_slot_rank(slot, q.tokens, q.top_k)] + q.peer_off;
    ((float *)base)[slot % per_rank] = sum;
  }
  __threadfence_system(); /* the slots, before the cross-rank barrier after the kernel */
}

extern "C" int mok_gg_fp8_dswiglu_supported(int64_t inter) {
  return inter % 256 == 0 && f8_wide(0);
}

extern "C" mok_status mok_gg_fp8_dact_dswiglu(const mok_gg_fp8_dswiglu *m, cudaStream_t stream) {
  if (!m || !m->dy || !m->dy_scales || !m->w_down_t || !m->w_down_t_scales || !m->preact ||
      !m->act || !m->act_scales || !m->rw || !m->dgu || !m->q || !m->q_scales || !m->part ||
      !m->drw)
    return MOK_ERR_INVALID_ARGUMENT;
  const int64_t mt = m->m_total, inter = m->inter, hidden = m->hidden;
  GG_TRY(f8_check(m->expert_offset, m->expert_count, m->num_experts, mt, inter, hidden));
  if (((uintptr_t)m->dy_scales & 15) || ((uintptr_t)m->preact & 15) || ((uintptr_t)m->act & 7) ||
      ((uintptr_t)m->dgu & 15) || ((uintptr_t)m->q & 7))
    return MOK_ERR_MISALIGNED;
  if (m->use_limit && !(m->limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  if (!gg_move_ok(m->drw, 1)) return MOK_ERR_INVALID_ARGUMENT;
  if (!mok_gg_fp8_dswiglu_supported(inter)) return MOK_ERR_NOT_SUPPORTED;
  CUtensorMap ta, tb;
  GG_TRY(gg_make_tmap_2d(&ta, m->dy, mt, hidden, 1, F8_BM(2), 128));
  GG_TRY(gg_make_tmap_2d(&tb, m->w_down_t, (int64_t)m->num_experts * inter, hidden, 1, 64, 128));
  f8_params p = {};
  p.offset = m->expert_offset;
  p.count = m->expert_count;
  p.a_scales = m->dy_scales;
  p.b_scales0 = p.b_scales1 = m->w_down_t_scales;
  p.num_experts = m->num_experts;
  p.k_blocks = (int)(hidden / F8_BK);
  p.m_pad = (int)f8_m_pad(mt);
  p.b_rows = p.n_out = (int)inter;
  p.use_limit = m->use_limit != 0;
  p.limit = m->limit;
  p.dsw.preact = (const uint16_t *)m->preact;
  p.dsw.act = (const uint8_t *)m->act;
  p.dsw.act_scales = m->act_scales;
  p.dsw.rw = m->rw;
  p.dsw.dgu = (uint16_t *)m->dgu;
  p.dsw.q = (uint8_t *)m->q;
  p.dsw.q_scales = m->q_scales;
  p.dsw.part = m->part;
  p.dsw.m_total = mt;
  GG_TRY(f8_wide_launch(F8_DSWIGLU, 1, &ta, &tb, &tb, &ta, &ta, p, mt, stream));
  const int64_t blocks = (mt + 255) / 256;
  f8_dsw_drw_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      m->part, (int)(inter / 256), mt, m->expert_offset + m->num_experts, *m->drw);
  GG_LAUNCHED();
  return MOK_SUCCESS;
}

static mok_status f8_gate_up(const void *x, const float *x_scales, const void *w_gate,
                             const float *w_gate_scales, const void *w_up, const float *w_up_scales,
                             void *act, void *preact, void *q_act, float *q_scales,
                             const int32_t *expert_offset, const int32_t *expert_count,
                             int num_experts, int64_t m_total, int64_t inter, int64_t hidden,
                             int use_limit, float limit, cudaStream_t stream) {
  if (!x || !x_scales || !w_gate || !w_gate_scales || !w_up || !w_up_scales || !act)
    return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(f8_check(expert_offset, expert_count, num_experts, m_total, inter, hidden));
  if (use_limit && !(limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  if (((uintptr_t)x_scales & 15)) return MOK_ERR_MISALIGNED;
  CUtensorMap ta, tg, tu, tc, tp;
  GG_TRY(gg_make_tmap_2d(&ta, x, m_total, hidden, 1,
                         F8_BM(f8_nwg(f8_wide(0), m_total,
                                      num_experts)), 128));
  GG_TRY(gg_make_tmap_2d(&tg, w_gate, (int64_t)num_experts * inter, hidden, 1, 64, 128));
  GG_TRY(gg_make_tmap_2d(&tu, w_up, (int64_t)num_experts * inter, hidden, 1, 64, 128));
  GG_TRY(gg_make_tmap_2d(&tc, act, m_total, inter, 2, 64, 64));
  if (preact) GG_TRY(gg_make_tmap_2d(&tp, preact, m_total, 2 * inter, 2, 64, 64));
  else tp = tc;
  f8_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.a_scales = x_scales;
  p.b_scales0 = w_gate_scales;
  p.b_scales1 = w_up_scales;
  p.c0 = (uint16_t *)act;
  p.c1 = (uint16_t *)preact;
  p.num_experts = num_experts;
  p.n_tiles = (int)(inter / 64);
  p.k_blocks = (int)(hidden / F8_BK);
  p.m_pad = (int)f8_m_pad(m_total);
  p.b_rows = (int)inter;
  p.n_out = (int)inter;
  p.use_limit = use_limit != 0;
  p.limit = limit;
  p.has_preact = preact != NULL;
  /* the 256-column kernel quantizes in its epilogue (one 128-block per row and tile); the
   * 128-column variants write bf16 act, quantized after */
  const int fused_q = q_act && f8_wide(0);
  CUtensorMap tq; /* the codes, stored by TMA from a staged 64 x 128-byte box */
  if (fused_q) {
    if (((uintptr_t)q_act & 15) || ((uintptr_t)q_scales & 15)) return MOK_ERR_MISALIGNED;
    p.q_act = (uint8_t *)q_act;
    p.q_scales = q_scales;
    GG_TRY(gg_make_tmap_2d(&tq, q_act, m_total, inter, 1, 64, 128));
  }
  GG_TRY(f8_launch<F8_SWIGLU>(&ta, &tg, &tu, &tc, &tp, p, m_total, stream, fused_q ? &tq : NULL));
  if (q_act && !fused_q) return mok_fp8_quant_act(act, q_act, q_scales, m_total, inter, stream);
  return MOK_SUCCESS;
}

extern "C" mok_status mok_gg_fp8_gate_up_swiglu(const void *x, const float *x_scales,
                                                const void *w_gate, const float *w_gate_scales,
                                                const void *w_up, const float *w_up_scales,
                                                void *act, void *preact,
                                                const int32_t *expert_offset,
                                                const int32_t *expert_count, int num_experts,
                                                int64_t m_total, int64_t inter, int64_t hidden,
                                                int use_limit, float limit, cudaStream_t stream) {
  return f8_gate_up(x, x_scales, w_gate, w_gate_scales, w_up, w_up_scales, act, preact, NULL, NULL,
                    expert_offset, expert_count, num_experts, m_total, inter, hidden, use_limit,
                    limit, stream);
}

extern "C" mok_status mok_gg_fp8_gate_up_swiglu_quantized(
    const void *x, const float *x_scales, const void *w_gate, const float *w_gate_scales,
    const void *w_up, const float *w_up_scales, void *act, void *preact, void *q_act,
    float *q_scales, const int32_t *expert_offset, const int32_t *expert_count, int num_experts,
    int64_t m_total, int64_t inter, int64_t hidden, int use_limit, float limit,
    cudaStream_t stream) {
  if (!q_act || !q_scales) return MOK_ERR_INVALID_ARGUMENT;
  return f8_gate_up(x, x_scales, w_gate, w_gate_scales, w_up, w_up_scales, act, preact, q_act,
                    q_scales, expert_offset, expert_count, num_experts, m_total, inter, hidden,
                    use_limit, limit, stream);
}
