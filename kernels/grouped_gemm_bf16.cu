/* grouped_gemm_bf16.cu — the BF16 grouped GEMM kernel for sm_90a and its four entry points
 * (forward, forward gate+up with SwiGLU, dgrad, K-grouped wgrad); see grouped_gemm.h.
 *
 * One persistent kernel, one CTA per SM, 384 threads:
 *   warpgroup 0: producer; one thread issues TMA loads into a 4-stage shared-memory ring
 *                (each stage: A 128x64 + B 256x64 bf16, 48 KB), completed on mbarriers;
 *   warpgroups 1, 2: consumers; each owns 64 rows of the 128x256 tile, runs wgmma m64n256k16
 *                with fp32 accumulators (128 registers), frees stages through mbarriers and runs
 *                the epilogue (stmatrix into a swizzled staging buffer, TMA store) while the
 *                producer already loads the next tile.
 * Both roles walk the same tile sequence from gemm_tile_scheduler.h (tile = blockIdx.x + i *
 * gridDim.x), so the math never sees the order. Modes differ only in which boxes are loaded, the
 * operand majorness given to wgmma and the epilogue. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_tmap.h"
#include "kernels/gemm_tile_scheduler.h"
#include "kernels/hopper_ptx.cuh"

enum { GG_FWD = 0, GG_SWIGLU = 1, GG_DGRAD = 2, GG_WGRAD = 3 };

#define GG_BM 128
#define GG_BN 256
#define GG_BK 64
#define GG_STAGES 4
#define GG_GROUP_M 16
#define GG_A_BYTES (GG_BM * GG_BK * 2)             /* 16 KB */
#define GG_STAGE_BYTES (GG_A_BYTES + GG_BN * GG_BK * 2) /* 48 KB */
#define GG_EPI_OFF (GG_STAGES * GG_STAGE_BYTES)   /* staging for the epilogue */
#define GG_EPI_BYTES (2 * 16384)                  /* 16 KB per consumer warpgroup */
#define GG_SMEM (GG_EPI_OFF + GG_EPI_BYTES)
#define GG_MAX_EXPERTS 256 /* experts per launch; more are split over launches */
#define GG_THREADS 384

typedef struct {
  const int32_t *offset; /* [E + 1] device, already shifted to this launch's first expert */
  const int32_t *count;  /* [E] device                                                  */
  int num_experts;       /* experts in this launch                                        */
  int expert_base;       /* global index of this launch's first expert (weight row base)  */
  int n_tiles;           /* output column tiles                                           */
  int m_tiles;           /* WGRAD: output row tiles of dW (n / 128)                       */
  int k_blocks;          /* reduction blocks of 64 (not WGRAD)                            */
  int b_rows;            /* rows of one expert in the weight map (n, inter, or n of dgrad)*/
  int n_out;             /* output columns (n, inter, or k of dgrad); boxes past it are
                            neither loaded (a valid box is loaded twice) nor stored          */
  int inter;             /* SWIGLU: I (column offset of u in preact)                      */
  int use_limit;
  float limit;
  int has_preact;
  void *dw;              /* WGRAD output [E, wn, wk], already shifted to expert_base        */
  int wn, wk;            /* WGRAD output shape per expert                                 */
  int out_fp32, accumulate;
} gg_params;

/* ---- epilogue: one pass stores 64 rows x 128 columns of a consumer's accumulators -------- */
/* Columns [N8B * 8, N8B * 8 + 128) of the warpgroup's 64 x 256 fragment go through stmatrix into
 * two swizzled 64x64 boxes, then one thread stores them with TMA at (col0, row0). */
template <int N8B>
__device__ __forceinline__ void gg_store_pass(const float *acc, uint32_t stage, int wtid,
                                              const CUtensorMap *map, int col0, int col_end,
                                              int row0, int bar_id) {
  if (col0 >= col_end) return; /* the whole pass lies past the tensor's last column */
  if (wtid == 0) bulk_wait_read0(); /* the previous pass has left the staging buffer */
  named_bar_sync(bar_id, 128);
  const int warp = wtid >> 5, lane = wtid & 31;
  const int q = lane >> 3;
  const int row = warp * 16 + (q & 1) * 8 + (lane & 7);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int n8 = N8B + 2 * j;
    uint32_t r0 = pack_bf16x2(acc[n8 * 4 + 0], acc[n8 * 4 + 1]);
    uint32_t r1 = pack_bf16x2(acc[n8 * 4 + 2], acc[n8 * 4 + 3]);
    uint32_t r2 = pack_bf16x2(acc[n8 * 4 + 4], acc[n8 * 4 + 5]);
    uint32_t r3 = pack_bf16x2(acc[n8 * 4 + 6], acc[n8 * 4 + 7]);
    const int chunk = 2 * j + (q >> 1); /* 16-byte chunk among the 128 columns */
    const int box = chunk >> 3, c = chunk & 7;
    uint32_t addr = stage + box * 8192 + row * 128 + ((c ^ (row & 7)) << 4);
    stmatrix_x4(addr, r0, r1, r2, r3);
  }
  fence_proxy_async_smem();
  named_bar_sync(bar_id, 128);
  if (wtid == 0) {
    tma_store_2d(map, stage, col0, row0);
    if (col0 + 64 < col_end) tma_store_2d(map, stage + 8192, col0 + 64, row0);
    bulk_commit();
  }
}

__device__ __forceinline__ float gg_silu(float g) { return g / (1.0f + __expf(-g)); }

/* ---- the kernel ------------------------------------------------------------------------------ */
template <int MODE>
__global__ void __launch_bounds__(GG_THREADS, 1)
    gg_bf16_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b0,
                   const __grid_constant__ CUtensorMap tm_b1, const __grid_constant__ CUtensorMap tm_c0,
                   const __grid_constant__ CUtensorMap tm_c1, const gg_params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[2 * GG_STAGES];
  __shared__ int32_t prefix[GG_MAX_EXPERTS + 1];

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full0 = smem_u32(&bars[0]);
  const uint32_t empty0 = smem_u32(&bars[GG_STAGES]);
  const int E = p.num_experts;

  if (tid == 0) {
    if (smem_base & 1023) __trap(); /* the swizzle atoms need a 1024-byte aligned base */
    for (int s = 0; s < GG_STAGES; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 8); /* one arrival per consumer warp */
    }
    fence_mbar_init();
  }
  if (tid == 32) {
    tma_prefetch_desc(&tm_a);
    tma_prefetch_desc(&tm_b0);
    if (MODE == GG_SWIGLU) tma_prefetch_desc(&tm_b1);
    if (MODE != GG_WGRAD) tma_prefetch_desc(&tm_c0);
    if (MODE == GG_SWIGLU && p.has_preact) tma_prefetch_desc(&tm_c1);
  }
  if (MODE != GG_WGRAD && tid >= 64 && tid < 96) {
    /* Tile prefix over experts: a warp scan, 32 experts at a time. */
    const int lane = tid & 31;
    int run = 0;
    for (int base = 0; base < E; base += 32) {
      const int l = base + lane;
      int c = l < E ? p.count[l] : 0;
      c = c > 0 ? c : 0;
      const int t = gg_ceil_div(c, GG_BM) * p.n_tiles;
      int incl = t;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      if (l < E) prefix[l] = run + incl - t;
      run += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) prefix[E] = run;
  }
  __syncthreads();
  const int total = MODE == GG_WGRAD ? E * p.m_tiles * p.n_tiles : prefix[E];

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<40>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
        gg_tile t = MODE == GG_WGRAD ? gg_decode_k_grouped(tile, p.m_tiles, p.n_tiles, GG_GROUP_M)
                                     : gg_decode_m_grouped(tile, prefix, E, p.n_tiles, GG_GROUP_M);
        const int row_base = p.offset[t.expert];
        int nkb = p.k_blocks;
        if (MODE == GG_WGRAD) nkb = gg_ceil_div(max(p.count[t.expert], 0), GG_BK);
        const int bexp = p.expert_base + t.expert;
        for (int kb = 0; kb < nkb; ++kb) {
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          mbar_arrive_expect_tx(full, GG_STAGE_BYTES);
          const uint32_t sa = smem_base + stage * GG_STAGE_BYTES;
          const uint32_t sb = sa + GG_A_BYTES;
          const int k0 = kb * GG_BK;
          if (MODE == GG_WGRAD) {
            const int r = row_base + k0;
            const int m0 = t.m_tile * GG_BM, n0 = t.n_tile * GG_BN;
            tma_load_2d(sa, &tm_a, full, m0, r);
            tma_load_2d(sa + 8192, &tm_a, full, m0 + 64 < p.wn ? m0 + 64 : m0, r);
#pragma unroll
            for (int j = 0; j < 4; ++j)
              tma_load_2d(sb + j * 8192, &tm_b0, full, n0 + 64 * j < p.wk ? n0 + 64 * j : n0, r);
          } else {
            tma_load_2d(sa, &tm_a, full, k0, row_base + t.m_tile * GG_BM);
            if (MODE == GG_FWD) {
              const int n0 = bexp * p.b_rows + t.n_tile * GG_BN;
              const int n1 = t.n_tile * GG_BN + 128 < p.n_out ? n0 + 128 : n0;
              tma_load_2d(sb, &tm_b0, full, k0, n0);
              tma_load_2d(sb + 16384, &tm_b0, full, k0, n1);
            } else if (MODE == GG_SWIGLU) {
              const int n0 = bexp * p.b_rows + t.n_tile * 128;
              tma_load_2d(sb, &tm_b0, full, k0, n0);
              tma_load_2d(sb + 16384, &tm_b1, full, k0, n0);
            } else { /* DGRAD: B is [n rows (reduction), k cols (output)] per expert */
              const int r = bexp * p.b_rows + k0, n0 = t.n_tile * GG_BN;
#pragma unroll
              for (int j = 0; j < 4; ++j)
                tma_load_2d(sb + j * 8192, &tm_b0, full, n0 + 64 * j < p.n_out ? n0 + 64 * j : n0, r);
            }
          }
          if (++stage == GG_STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    /* ------------------------------ consumers ----------------------------- */
    setmaxnreg_inc<232>();
    const int cwg = wg - 1;
    const int wtid = tid & 127;
    const int warp = wtid >> 5, lane = wtid & 31;
    const uint32_t epi = smem_base + GG_EPI_OFF + cwg * 16384;
    int stage = 0;
    uint32_t phase = 0;
    float acc[128];
    for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
      gg_tile t = MODE == GG_WGRAD ? gg_decode_k_grouped(tile, p.m_tiles, p.n_tiles, GG_GROUP_M)
                                   : gg_decode_m_grouped(tile, prefix, E, p.n_tiles, GG_GROUP_M);
      int nkb = p.k_blocks, cnt = 0;
      if (MODE == GG_WGRAD) {
        cnt = max(p.count[t.expert], 0);
        nkb = gg_ceil_div(cnt, GG_BK);
      }
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      int prev = -1;
      for (int kb = 0; kb < nkb; ++kb) {
        mbar_wait(full0 + 8 * stage, phase);
        const uint32_t sa = smem_base + stage * GG_STAGE_BYTES;
        const uint32_t sb = sa + GG_A_BYTES;
        if (MODE == GG_WGRAD) {
          const int valid = cnt - kb * GG_BK;
          if (valid < GG_BK) {
            /* Rows past the expert's count are padding with any content: zero them in all six
             * 64-row boxes of the stage (A: 2, B: 4) before the tensor cores read them. */
            const int nrow = GG_BK - valid;
            const int per_box = nrow * 8; /* 16-byte chunks */
            uint4 z = make_uint4(0, 0, 0, 0);
            for (int i = tid - 128; i < 6 * per_box; i += 256) {
              const int box = i / per_box, rem = i - box * per_box;
              const int r = valid + rem / 8, c = rem & 7;
              uint8_t *ptr = smem + stage * GG_STAGE_BYTES + box * 8192 + r * 128 + c * 16;
              *(uint4 *)ptr = z;
            }
            fence_proxy_async_smem();
            named_bar_sync(1, 256);
          }
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint64_t da, db;
          if (MODE == GG_WGRAD) {
            da = wgmma_desc_sw128(sa + cwg * 8192 + kk * 2048, 8192, 1024);
          } else {
            da = wgmma_desc_sw128(sa + cwg * 8192 + kk * 32, 16, 1024);
          }
          if (MODE == GG_WGRAD || MODE == GG_DGRAD) {
            db = wgmma_desc_sw128(sb + kk * 2048, 8192, 1024);
          } else {
            db = wgmma_desc_sw128(sb + kk * 32, 16, 1024);
          }
          if (MODE == GG_WGRAD) wgmma_m64n256k16_bf16<1, 1>(acc, da, db, 1);
          else if (MODE == GG_DGRAD) wgmma_m64n256k16_bf16<0, 1>(acc, da, db, 1);
          else wgmma_m64n256k16_bf16<0, 0>(acc, da, db, 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (prev >= 0 && lane == 0) mbar_arrive(empty0 + 8 * prev);
        prev = stage;
        if (++stage == GG_STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
      if (prev >= 0 && lane == 0) mbar_arrive(empty0 + 8 * prev);
      reg_fence(acc, 128);

      /* ------------------------------ epilogue ------------------------------ */
      if (MODE == GG_FWD || MODE == GG_DGRAD) {
        const int row0 = p.offset[t.expert] + t.m_tile * GG_BM + cwg * 64;
        const int col0 = t.n_tile * GG_BN;
        gg_store_pass<0>(acc, epi, wtid, &tm_c0, col0, p.n_out, row0, 2 + cwg);
        gg_store_pass<16>(acc, epi, wtid, &tm_c0, col0 + 128, p.n_out, row0, 2 + cwg);
      } else if (MODE == GG_SWIGLU) {
        const int row0 = p.offset[t.expert] + t.m_tile * GG_BM + cwg * 64;
        const int col0 = t.n_tile * 128;
        if (p.has_preact) {
          gg_store_pass<0>(acc, epi, wtid, &tm_c1, col0, p.n_out, row0, 2 + cwg);
          gg_store_pass<16>(acc, epi, wtid, &tm_c1, p.inter + col0, 2 * p.n_out, row0, 2 + cwg);
        }
#pragma unroll
        for (int i = 0; i < 64; ++i) {
          float g = acc[i], u = acc[i + 64];
          if (p.use_limit) {
            g = fminf(g, p.limit);
            u = fminf(fmaxf(u, -p.limit), p.limit);
          }
          acc[i] = gg_silu(g) * u;
        }
        gg_store_pass<0>(acc, epi, wtid, &tm_c0, col0, p.n_out, row0, 2 + cwg);
      } else { /* WGRAD: direct stores; 4 lanes cover 32 contiguous bytes of fp32 */
        if (!(p.accumulate && cnt == 0)) {
          const int rbase = t.m_tile * GG_BM + cwg * 64 + warp * 16 + (lane >> 2);
          const size_t ebase = (size_t)t.expert * p.wn * p.wk;
#pragma unroll
          for (int n8 = 0; n8 < 32; ++n8) {
            const int col = t.n_tile * GG_BN + n8 * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row = rbase + 8 * h;
              if (row < p.wn && col < p.wk) {
                const size_t idx = ebase + (size_t)row * p.wk + col;
                float v0 = acc[n8 * 4 + 2 * h], v1 = acc[n8 * 4 + 2 * h + 1];
                if (p.out_fp32) {
                  float2 *dst = (float2 *)((float *)p.dw + idx);
                  if (p.accumulate) {
                    float2 o = *dst;
                    v0 += o.x;
                    v1 += o.y;
                  }
                  *dst = make_float2(v0, v1);
                } else {
                  *(uint32_t *)((uint16_t *)p.dw + idx) = pack_bf16x2(v0, v1);
                }
              }
            }
          }
        }
      }
    }
    if (MODE != GG_WGRAD && wtid == 0) bulk_wait0();
  }
}

/* ---- host side ------------------------------------------------------------------------------ */
template <int MODE>
static mok_status gg_launch(const CUtensorMap *a, const CUtensorMap *b0, const CUtensorMap *b1,
                            const CUtensorMap *c0, const CUtensorMap *c1, gg_params p,
                            int max_tiles, cudaStream_t stream) {
  static int attr_done = 0;
  if (!attr_done) {
    if (cudaFuncSetAttribute(gg_bf16_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             GG_SMEM) != cudaSuccess)
      return MOK_ERR_CUDA;
    attr_done = 1;
  }
  int sms = 0;
  mok_status st = gg_device_sms(&sms);
  if (st != MOK_SUCCESS) return st;
  const int e_all = p.num_experts, base_all = p.expert_base;
  const int32_t *off_all = p.offset, *cnt_all = p.count;
  void *dw_all = p.dw;
  for (int e0 = 0; e0 < e_all; e0 += GG_MAX_EXPERTS) {
    p.num_experts = e_all - e0 < GG_MAX_EXPERTS ? e_all - e0 : GG_MAX_EXPERTS;
    p.expert_base = base_all + e0;
    p.offset = off_all + e0;
    p.count = cnt_all + e0;
    if (MODE == GG_WGRAD)
      p.dw = (uint8_t *)dw_all + (size_t)e0 * p.wn * p.wk * (p.out_fp32 ? 4 : 2);
    int grid = sms < max_tiles ? sms : max_tiles;
    if (MODE == GG_WGRAD) {
      int tiles = p.num_experts * p.m_tiles * p.n_tiles;
      grid = sms < tiles ? sms : tiles;
    }
    if (grid < 1) grid = 1;
    gg_bf16_kernel<MODE><<<grid, GG_THREADS, GG_SMEM, stream>>>(*a, *b0, *b1, *c0, *c1, p);
    if (cudaGetLastError() != cudaSuccess) return MOK_ERR_CUDA;
  }
  return MOK_SUCCESS;
}

static mok_status gg_check_common(const int32_t *off, const int32_t *cnt, int e, int64_t m_total,
                                  int64_t n, int64_t k) {
  if (!off || !cnt) return MOK_ERR_INVALID_ARGUMENT;
  if (e <= 0 || m_total <= 0 || n <= 0 || k <= 0) return MOK_ERR_INVALID_SHAPE;
  if (m_total > INT32_MAX || (int64_t)e * n > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return MOK_ERR_INVALID_SHAPE;
  if (n % MOK_GG_ALIGN || k % MOK_GG_ALIGN) return MOK_ERR_MISALIGNED;
  return MOK_SUCCESS;
}

#define GG_TRY(x)                             \
  do {                                        \
    mok_status s_ = (x);                      \
    if (s_ != MOK_SUCCESS) return s_;         \
  } while (0)

extern "C" mok_status mok_gg_bf16_fwd(const void *a, const void *b, void *c,
                                      const int32_t *expert_offset, const int32_t *expert_count,
                                      int num_experts, int64_t m_total, int64_t n, int64_t k,
                                      cudaStream_t stream) {
  if (!a || !b || !c) return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, n, k));
  CUtensorMap ta, tb, tc;
  GG_TRY(gg_make_tmap_2d(&ta, a, m_total, k, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tb, b, (int64_t)num_experts * n, k, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tc, c, m_total, n, 2, 64, 64));
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)((n + GG_BN - 1) / GG_BN);
  p.k_blocks = (int)(k / GG_BK);
  p.b_rows = (int)n;
  p.n_out = (int)n;
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_FWD>(&ta, &tb, &tb, &tc, &tc, p, max_tiles, stream);
}

extern "C" mok_status mok_gg_bf16_gate_up_swiglu(const void *x, const void *w_gate, const void *w_up,
                                                 void *act, void *preact,
                                                 const int32_t *expert_offset,
                                                 const int32_t *expert_count, int num_experts,
                                                 int64_t m_total, int64_t inter, int64_t hidden,
                                                 int use_limit, float limit, cudaStream_t stream) {
  if (!x || !w_gate || !w_up || !act) return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, inter, hidden));
  if (inter % 128) return MOK_ERR_MISALIGNED;
  if (use_limit && !(limit > 0.0f)) return MOK_ERR_INVALID_ARGUMENT;
  CUtensorMap ta, tg, tu, tc, tp;
  GG_TRY(gg_make_tmap_2d(&ta, x, m_total, hidden, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tg, w_gate, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tu, w_up, (int64_t)num_experts * inter, hidden, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tc, act, m_total, inter, 2, 64, 64));
  if (preact) GG_TRY(gg_make_tmap_2d(&tp, preact, m_total, 2 * inter, 2, 64, 64));
  else tp = tc;
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)(inter / 128);
  p.k_blocks = (int)(hidden / GG_BK);
  p.b_rows = (int)inter;
  p.inter = (int)inter;
  p.n_out = (int)inter;
  p.use_limit = use_limit != 0;
  p.limit = limit;
  p.has_preact = preact != NULL;
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_SWIGLU>(&ta, &tg, &tu, &tc, &tp, p, max_tiles, stream);
}

extern "C" mok_status mok_gg_bf16_dgrad(const void *dc, const void *w, void *da,
                                        const int32_t *expert_offset, const int32_t *expert_count,
                                        int num_experts, int64_t m_total, int64_t n, int64_t k,
                                        cudaStream_t stream) {
  if (!dc || !w || !da) return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, n, k));
  CUtensorMap ta, tb, tc;
  GG_TRY(gg_make_tmap_2d(&ta, dc, m_total, n, 2, 128, 64));
  GG_TRY(gg_make_tmap_2d(&tb, w, (int64_t)num_experts * n, k, 2, 64, 64));
  GG_TRY(gg_make_tmap_2d(&tc, da, m_total, k, 2, 64, 64));
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.n_tiles = (int)((k + GG_BN - 1) / GG_BN);
  p.k_blocks = (int)(n / GG_BK);
  p.b_rows = (int)n;
  p.n_out = (int)k;
  int max_tiles = (int)((m_total + GG_BM - 1) / GG_BM) * p.n_tiles;
  return gg_launch<GG_DGRAD>(&ta, &tb, &tb, &tc, &tc, p, max_tiles, stream);
}

extern "C" mok_status mok_gg_bf16_wgrad(const void *dc, const void *a, void *dw, int out_fp32,
                                        int accumulate, const int32_t *expert_offset,
                                        const int32_t *expert_count, int num_experts,
                                        int64_t m_total, int64_t n, int64_t k,
                                        cudaStream_t stream) {
  if (!dc || !a || !dw) return MOK_ERR_INVALID_ARGUMENT;
  GG_TRY(gg_check_common(expert_offset, expert_count, num_experts, m_total, n, k));
  if (accumulate && !out_fp32) return MOK_ERR_INVALID_ARGUMENT;
  if (((uintptr_t)dw & 15)) return MOK_ERR_MISALIGNED;
  CUtensorMap ta, tb;
  GG_TRY(gg_make_tmap_2d(&ta, dc, m_total, n, 2, 64, 64));
  GG_TRY(gg_make_tmap_2d(&tb, a, m_total, k, 2, 64, 64));
  gg_params p = {};
  p.offset = expert_offset;
  p.count = expert_count;
  p.num_experts = num_experts;
  p.m_tiles = (int)((n + GG_BM - 1) / GG_BM);
  p.n_tiles = (int)((k + GG_BN - 1) / GG_BN);
  p.dw = dw;
  p.wn = (int)n;
  p.wk = (int)k;
  p.out_fp32 = out_fp32 != 0;
  p.accumulate = accumulate != 0;
  return gg_launch<GG_WGRAD>(&ta, &tb, &tb, &ta, &ta, p, 0, stream);
}
