/* v1_gemm.cu — the v1 path's grouped GEMMs on tensor cores: mma.sync m16n8k16 bf16 with fp32
 * accumulation, 64x128x32 tiles, a 3-stage cp.async pipeline, per-group row offsets read from
 * device memory. Two launchers: row-grouped products (forward GEMMs, data gradients) and
 * row-reduced products (weight gradients, one output matrix per group). Correctness first; the
 * fast TMA + wgmma kernels live in kernels/grouped_gemm*. */
#include "kernels/common/ptx.cuh"
#include "kernels/common/device.cuh"
#include "kernels/v1/v1.h"

#define BM 64
#define BN 128
#define BK 32
#define STAGES 3
#define THREADS 128
#define A_LD_N (BK + 8)  /* A tile [BM][BK] (k contiguous), padded            */
#define A_LD_T (BM + 8)  /* A tile [BK][BM] (m contiguous), padded            */
#define B_LD_N (BK + 8)  /* B tile [BN][BK]                                   */
#define B_LD_T (BN + 8)  /* B tile [BK][BN]                                   */
#define A_STAGE (BM * A_LD_N > BK * A_LD_T ? BM * A_LD_N : BK * A_LD_T)
#define B_STAGE (BN * B_LD_N > BK * B_LD_T ? BN * B_LD_N : BK * B_LD_T)

__device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two consecutive-k elements of a tile as one packed register (low half = lower k). */
template <bool TRANS, int LD>
__device__ __forceinline__ uint32_t pair_at(const bf16 *s, int mn, int k) {
  if (!TRANS) return *(const uint32_t *)(s + mn * LD + k);
  const unsigned short *u = (const unsigned short *)s;
  return (uint32_t)u[k * LD + mn] | ((uint32_t)u[(k + 1) * LD + mn] << 16);
}

/* A tile: element (m, k) of the product. AT: A stored [k][m] (rows of the reduction). */
template <bool AT>
__device__ __forceinline__ void load_a(bf16 *sa, const bf16 *A, int64_t lda, int64_t m0,
                                       int64_t m_lim, int64_t k0, int64_t k_lim, int tid) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int c = tid + i * THREADS;
    if (!AT) {
      int row = c >> 2, kc = (c & 3) * 8;
      bool ok = m0 + row < m_lim && k0 + kc < k_lim;
      const bf16 *src = ok ? A + (m0 + row) * lda + k0 + kc : A;
      cp_async16(smem_u32(sa + row * A_LD_N + kc), src, ok ? 16 : 0);
    } else {
      int kr = c >> 3, mc = (c & 7) * 8;
      bool ok = k0 + kr < k_lim;
      const bf16 *src = ok ? A + (k0 + kr) * lda + m0 + mc : A;
      cp_async16(smem_u32(sa + kr * A_LD_T + mc), src, ok ? 16 : 0);
    }
  }
}

/* B tile: element (n, k). BT: B stored [k][n]. b2 / b_split: reduction rows >= b_split come from
 * b2 (whole tiles, b_split a multiple of BK). */
template <bool BT>
__device__ __forceinline__ void load_b(bf16 *sb, const bf16 *B, const bf16 *B2, int64_t b_split,
                                       int64_t ldb, int64_t n0, int64_t k0, int64_t k_lim, int tid) {
  const bf16 *base = B;
  int64_t kb = k0;
  if (B2 && k0 >= b_split) { base = B2; kb = k0 - b_split; }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int c = tid + i * THREADS;
    if (!BT) {
      int n = c >> 2, kc = (c & 3) * 8;
      bool ok = k0 + kc < k_lim;
      const bf16 *src = ok ? base + (n0 + n) * ldb + kb + kc : B;
      cp_async16(smem_u32(sb + n * B_LD_N + kc), src, ok ? 16 : 0);
    } else {
      int kr = c >> 4, nc = (c & 15) * 8;
      bool ok = k0 + kr < k_lim;
      const bf16 *src = ok ? base + (kb + kr) * ldb + n0 + nc : B;
      cp_async16(smem_u32(sb + kr * B_LD_T + nc), src, ok ? 16 : 0);
    }
  }
}

/* acc += A[m0.., k_begin..k_end) * B[n0.., same k)^T over the block's 64x128 tile. */
template <bool AT, bool BT>
__device__ void mainloop(float (*acc)[8][4], bf16 *smem, const bf16 *A, int64_t lda, int64_t m0,
                         int64_t m_lim, const bf16 *B, const bf16 *B2, int64_t b_split,
                         int64_t ldb, int64_t n0, int64_t k_begin, int64_t k_end) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, tg = lane & 3;
  bf16 *sa = smem, *sb = smem + STAGES * A_STAGE;
  const int64_t ntiles = (k_end - k_begin + BK - 1) / BK;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ntiles) {
      int64_t k0 = k_begin + s * BK;
      load_a<AT>(sa + s * A_STAGE, A, lda, m0, m_lim, k0, k_end, tid);
      load_b<BT>(sb + s * B_STAGE, B, B2, b_split, ldb, n0, k0, k_end, tid);
    }
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < ntiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    int64_t pre = kt + STAGES - 1;
    if (pre < ntiles) {
      int st = (int)(pre % STAGES);
      int64_t k0 = k_begin + pre * BK;
      load_a<AT>(sa + st * A_STAGE, A, lda, m0, m_lim, k0, k_end, tid);
      load_b<BT>(sb + st * B_STAGE, B, B2, b_split, ldb, n0, k0, k_end, tid);
    }
    cp_async_commit();
    const bf16 *ta = sa + (kt % STAGES) * A_STAGE, *tb = sb + (kt % STAGES) * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[2][4], bfr[8][2];
      const int k = kk + tg * 2;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        int m = wm * 32 + mi * 16 + g;
        if (!AT) {
          af[mi][0] = pair_at<false, A_LD_N>(ta, m, k);
          af[mi][1] = pair_at<false, A_LD_N>(ta, m + 8, k);
          af[mi][2] = pair_at<false, A_LD_N>(ta, m, k + 8);
          af[mi][3] = pair_at<false, A_LD_N>(ta, m + 8, k + 8);
        } else {
          af[mi][0] = pair_at<true, A_LD_T>(ta, m, k);
          af[mi][1] = pair_at<true, A_LD_T>(ta, m + 8, k);
          af[mi][2] = pair_at<true, A_LD_T>(ta, m, k + 8);
          af[mi][3] = pair_at<true, A_LD_T>(ta, m + 8, k + 8);
        }
      }
#pragma unroll
      for (int ni = 0; ni < 8; ++ni) {
        int n = wn * 64 + ni * 8 + g;
        if (!BT) {
          bfr[ni][0] = pair_at<false, B_LD_N>(tb, n, k);
          bfr[ni][1] = pair_at<false, B_LD_N>(tb, n, k + 8);
        } else {
          bfr[ni][0] = pair_at<true, B_LD_T>(tb, n, k);
          bfr[ni][1] = pair_at<true, B_LD_T>(tb, n, k + 8);
        }
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni]);
    }
  }
  cp_async_wait<0>();
}

__device__ __forceinline__ void store_pair(void *C, int64_t idx, float v0, float v1, int mode) {
  switch (mode) {
    case V1_OUT_BF16:
      *(__nv_bfloat162 *)((bf16 *)C + idx) = __floats2bfloat162_rn(v0, v1);
      break;
    case V1_OUT_F32:
      *(float2 *)((float *)C + idx) = make_float2(v0, v1);
      break;
    case V1_OUT_F32_ADD: {
      float2 *p = (float2 *)((float *)C + idx);
      float2 o = *p;
      *p = make_float2(o.x + v0, o.y + v1);
      break;
    }
    default: {
      __nv_bfloat162 *p = (__nv_bfloat162 *)((bf16 *)C + idx);
      float2 o = __bfloat1622float2(*p);
      *p = __floats2bfloat162_rn(o.x + v0, o.y + v1);
      break;
    }
  }
}

__device__ void epilogue(float (*acc)[8][4], void *C, int64_t ldc, int64_t m0, int64_t m_lim,
                         int64_t n0, int mode) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 1, wn = warp & 1, g = lane >> 2, tg = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64_t r = m0 + wm * 32 + mi * 16 + g + h * 8;
        int64_t c = n0 + wn * 64 + ni * 8 + tg * 2;
        if (r < m_lim) store_pair(C, r * ldc + c, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], mode);
      }
}

__device__ __forceinline__ void fill_acc(float (*acc)[8][4], float v) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = v;
}

template <bool BT>
__global__ void __launch_bounds__(THREADS) gemm_rows_kernel(v1_gemm_args p) {
  __shared__ __align__(16) bf16 smem[STAGES * (A_STAGE + B_STAGE)];
  const int64_t m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * BN;
  int64_t m_lim = p.m;
  const bf16 *B = (const bf16 *)p.b, *B2 = (const bf16 *)p.b2;
  if (p.offsets) {
    m_lim = p.offsets[p.groups];
    if (m_lim > p.max_rows) m_lim = p.max_rows;
    if (m0 >= m_lim) return;
    int lo = 0, hi = p.groups - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) >> 1;
      if (p.offsets[mid] <= m0) lo = mid; else hi = mid - 1;
    }
    B += lo * p.b_group_stride;
    if (B2) B2 += lo * p.b_group_stride;
  } else if (m0 >= m_lim) {
    return;
  }
  float acc[2][8][4];
  if (dev_error(p.err)) {
    if (!p.nan_on_error) return;
    fill_acc(acc, dev_nan());
  } else {
    fill_acc(acc, 0.0f);
    mainloop<false, BT>(acc, smem, (const bf16 *)p.a, p.lda, m0, m_lim, B, B2, p.b_split, p.ldb,
                        n0, 0, p.k);
  }
  epilogue(acc, p.c, p.ldc, m0, m_lim, n0, p.out_mode);
}

__global__ void __launch_bounds__(THREADS) gemm_wgrad_kernel(v1_gemm_args p) {
  __shared__ __align__(16) bf16 smem[STAGES * (A_STAGE + B_STAGE)];
  const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * BM;
  const int grp = blockIdx.z;
  int64_t r_lo = 0, r_hi = p.k;
  if (p.offsets) { r_lo = p.offsets[grp]; r_hi = p.offsets[grp + 1]; }
  if (p.offsets && p.counts) {
    const int32_t c = p.counts[grp];
    if (c < 0) return; /* a group this call leaves alone */
    if (r_lo + c < r_hi) r_hi = r_lo + c;
  }
  void *C = p.out_mode == V1_OUT_F32 || p.out_mode == V1_OUT_F32_ADD
                ? (void *)((float *)p.c + grp * p.c_group_stride)
                : (void *)((bf16 *)p.c + grp * p.c_group_stride);
  float acc[2][8][4];
  if (dev_error(p.err)) {
    if (!p.nan_on_error) return;
    fill_acc(acc, dev_nan());
  } else {
    fill_acc(acc, 0.0f);
    if (r_hi > r_lo)
      mainloop<true, true>(acc, smem, (const bf16 *)p.a, p.lda, m0, p.m, (const bf16 *)p.b, NULL, 0,
                           p.ldb, n0, r_lo, r_hi);
  }
  epilogue(acc, C, p.ldc, m0, p.m, n0, p.out_mode);
}

extern "C" cudaError_t v1_gemm_rows(const v1_gemm_args *a, int b_trans, cudaStream_t stream) {
  if (a->n % BN || a->k % BK || (a->b2 && a->b_split % BK)) return cudaErrorInvalidValue;
  int64_t rows = a->offsets ? a->max_rows : a->m;
  int64_t mt = (rows + BM - 1) / BM, nt = a->n / BN;
  if (mt == 0 || nt == 0) return cudaSuccess;
  if (nt > 65535) return cudaErrorInvalidValue;
  dim3 grid((unsigned)mt, (unsigned)nt);
  if (b_trans) gemm_rows_kernel<true><<<grid, THREADS, 0, stream>>>(*a);
  else gemm_rows_kernel<false><<<grid, THREADS, 0, stream>>>(*a);
  return cudaGetLastError();
}

extern "C" cudaError_t v1_gemm_wgrad(const v1_gemm_args *a, cudaStream_t stream) {
  if (a->n % BN || a->m % BM) return cudaErrorInvalidValue;
  int groups = a->offsets ? a->groups : 1;
  if (a->n == 0 || a->m == 0 || groups == 0) return cudaSuccess;
  if (a->m / BM > 65535 || groups > 65535) return cudaErrorInvalidValue;
  dim3 grid((unsigned)(a->n / BN), (unsigned)(a->m / BM), (unsigned)groups);
  gemm_wgrad_kernel<<<grid, THREADS, 0, stream>>>(*a);
  return cudaGetLastError();
}
