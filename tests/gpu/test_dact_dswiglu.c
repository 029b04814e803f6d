/* test_dact_dswiglu.c — the FP8 backward's d_act product with the SwiGLU backward in its epilogue
 * (mok_gg_fp8_dact_dswiglu) against the two steps it replaces: mok_gg_fp8_fwd into a bf16 d_act,
 * then the row kernel mok_swiglu_backward_rw. dgu, its 1x128 codes and scales must be bit for
 * bit the row kernel's over the schedule's rows (real and padding: every output poisoned first);
 * d_rw, summed in another order, within 1e-4 of the largest; and the fused kernel's every output
 * bit for bit the same on a grid of 3 CTAs (each CTA then computes other tiles: the
 * determinism across CTA counts). Random inputs on real schedules, every rank's d_rw slots
 * written by its peers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"
#include "kernels/gemm/gemm_fused.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tmap.h"
#include "kernels/v1/v1.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

typedef struct {
  void *dgu, *q;
  float *qs;
  char *drw; /* host copy of this rank's [T*k] d_rw slots */
} dsw_out;

static void dsw_case(int64_t T, int64_t H, int64_t I, mok_route_kind route, int use_limit,
                     const char *label) {
  lh_case c = lh_base_case();
  c.T = T;
  c.H = H;
  c.I = I;
  c.route = route;
  c.dtype = MOK_DTYPE_FP8_BLOCK128;
  lh_setup u;
  mok_status st;
  if (!lh_setup_open(gpu_ctx.group, &u, &c, label, &st)) return;
  if (st != MOK_SUCCESS) {
    lh_setup_close(&u);
    return;
  }
  if (!mok_gg_fp8_dswiglu_supported(I)) {
    fprintf(stderr, "  %s: not supported\n", label);
    CHECK(0);
    lh_setup_close(&u);
    return;
  }
  mok_workspace *w = u.e.ws;
  mok_schedule *sched = u.e.s;
  cudaStream_t q = u.e.stream;
  CHECK_STATUS(mok_schedule_build(sched, u.d.topk, q), MOK_SUCCESS);
  int64_t rows = 0;
  CHECK_STATUS(mok_schedule_rows(sched, &rows), MOK_SUCCESS);
  const int64_t cap = w->cap, m_pad = MOK_FP8_SCALE_ROWS(cap), el = w->el;
  const int64_t kb2 = 2 * I / 128;
  const uint64_t seed = test_seed() + 29u * (uint64_t)gpu_ctx.rank;
  void *dy = NULL, *dy8 = NULL, *wd = NULL, *wd8 = NULL, *pre = NULL, *act = NULL, *act8 = NULL;
  void *da = NULL;
  float *dys = NULL, *wds = NULL, *acts = NULL, *rw = NULL, *part = NULL;
  CHECK(cudaMalloc(&dy, (size_t)(cap * H * 2 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&dy8, (size_t)(cap * H + 16)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&dys, (size_t)(H / 128 * m_pad * 4 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&wd, (size_t)(el * I * H * 2 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&wd8, (size_t)(el * I * H + 16)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&wds, (size_t)(el * (I / 128) * (H / 128) * 4 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&pre, (size_t)(cap * 2 * I * 2 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&act, (size_t)(cap * I * 2 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&act8, (size_t)(cap * I + 16)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&acts, (size_t)(I / 128 * m_pad * 4 + 16)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&rw, (size_t)(cap * 4 + 16)) == cudaSuccess);
  CHECK(cudaMalloc(&da, (size_t)(cap * I * 2 + 16)) == cudaSuccess);
  CHECK(cudaMalloc((void **)&part, (size_t)(mok_gg_fp8_dswiglu_part_floats(cap, I) * 4 + 16)) ==
        cudaSuccess);
  dsw_out o[3];
  for (int i = 0; i < 3; ++i) {
    CHECK(cudaMalloc(&o[i].dgu, (size_t)(cap * 2 * I * 2 + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&o[i].q, (size_t)(cap * 2 * I + 16)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&o[i].qs, (size_t)(kb2 * m_pad * 4 + 16)) == cudaSuccess);
    /* poison every output: a row the kernel misses differs from the reference */
    CHECK(cudaMemsetAsync(o[i].dgu, 0xF0 + i, (size_t)(cap * 2 * I * 2), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(o[i].q, 0xF0 + i, (size_t)(cap * 2 * I), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(o[i].qs, 0xF0 + i, (size_t)(kb2 * m_pad * 4), q) == cudaSuccess);
    o[i].drw = NULL;
  }
  /* inputs: dy and the weights quantized, pre-activations (some past the clamp's 1.5), act
   * through its quantization, router weights in (0, 1] */
  CHECK(v1_fill_random_bf16(dy, cap * H, seed, 1, 1.0f, q) == cudaSuccess);
  CHECK_STATUS(mok_fp8_quant_act(dy, dy8, dys, cap, H, q), MOK_SUCCESS);
  CHECK(v1_fill_random_bf16(wd, el * I * H, seed, 2, 0.05f, q) == cudaSuccess);
  CHECK_STATUS(mok_fp8_quant_weight(wd, wd8, wds, el, I, H, q), MOK_SUCCESS);
  CHECK(v1_fill_random_bf16(pre, cap * 2 * I, seed, 3, 3.0f, q) == cudaSuccess);
  CHECK(v1_fill_random_bf16(act, cap * I, seed, 4, 2.0f, q) == cudaSuccess);
  CHECK_STATUS(mok_fp8_quant_act(act, act8, acts, cap, I, q), MOK_SUCCESS);
  lh_upload_router_rows(rw, cap, seed);

  const mok_move_route r = mok_gpu_route(sched);
  mok_gg_move drw;
  memset(&drw, 0, sizeof drw);
  drw.peer_base = w->peer_base;
  drw.peer_off = w->off_drw;
  drw.tokens = T;
  drw.top_k = (int)c.k;
  drw.row_src = sched->row_src;
  drw.push = 1;
  mok_gg_fp8_dswiglu m;
  memset(&m, 0, sizeof m);
  m.dy = dy8;
  m.dy_scales = dys;
  m.w_down_t = wd8;
  m.w_down_t_scales = wds;
  m.preact = pre;
  m.act = act8;
  m.act_scales = acts;
  m.rw = rw;
  m.part = part;
  m.drw = &drw;
  m.expert_offset = sched->expert_offset;
  m.expert_count = sched->expert_count;
  m.num_experts = (int)el;
  m.m_total = cap;
  m.inter = I;
  m.hidden = H;
  m.use_limit = use_limit;
  m.limit = 1.5f;
  const size_t drw_bytes = (size_t)(T * c.k * 4);
  for (int run = 0; run < 3; ++run) {
    CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* every rank's d_rw slots free */
    CHECK(cudaMemsetAsync((char *)w->sym.ptr + w->off_drw, 0xF0 + run, drw_bytes, q) ==
          cudaSuccess);
    CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* poisoned everywhere before any push */
    if (run == 0) { /* the two steps */
      CHECK_STATUS(mok_gg_fp8_fwd(dy8, dys, wd8, wds, da, sched->expert_offset,
                                  sched->expert_count, (int)el, cap, I, H, q),
                   MOK_SUCCESS);
      CHECK(mok_swiglu_backward_rw(&r, w->off_drw, da, pre, act8, acts, m_pad, rw, o[0].dgu,
                                  o[0].q, o[0].qs, m_pad, I, use_limit, 1.5f, q) == cudaSuccess);
    } else { /* fused: the whole grid, then 3 CTAs */
      if (run == 2) gg_set_tuning(0, 0, 3, 0);
      m.dgu = o[run].dgu;
      m.q = o[run].q;
      m.q_scales = o[run].qs;
      CHECK_STATUS(mok_gg_fp8_dact_dswiglu(&m, q), MOK_SUCCESS);
      if (run == 2) gg_set_tuning(0, 0, 0, 0);
    }
    CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* every peer's d_rw pushed here */
    CHECK(cudaStreamSynchronize(q) == cudaSuccess);
    o[run].drw = lh_to_host((char *)w->sym.ptr + w->off_drw, drw_bytes);
  }
  CHECK_STATUS(lh_device_error(w), MOK_SUCCESS);
  const size_t dgu_bytes = (size_t)(rows * 2 * I * 2), q_bytes = (size_t)(rows * 2 * I);
  const int dgu_eq = lh_same_bytes(o[0].dgu, o[1].dgu, dgu_bytes);
  const int q_eq = lh_same_bytes(o[0].q, o[1].q, q_bytes);
  const int s_eq = lh_same_scales(o[0].qs, o[1].qs, kb2, m_pad, rows);
  const int grid_eq = lh_same_bytes(o[1].dgu, o[2].dgu, dgu_bytes) &&
                      lh_same_bytes(o[1].q, o[2].q, q_bytes) &&
                      lh_same_scales(o[1].qs, o[2].qs, kb2, m_pad, rows) &&
                      memcmp(o[1].drw, o[2].drw, drw_bytes) == 0;
  /* d_rw: every slot routed to a local expert of some rank was written by both; unrouted slots
   * keep each run's poison, so compare the slots the reference wrote (finite there) */
  const float *ref = (const float *)o[0].drw, *got = (const float *)o[1].drw;
  double amax = 0.0, err = 0.0;
  int64_t n_ref = 0, bad = 0;
  for (int64_t i = 0; i < T * c.k; ++i) {
    const uint32_t bits = ((const uint32_t *)ref)[i];
    if (bits == 0xF0F0F0F0u) { /* not written by the reference: not by the fused kernel either */
      if (((const uint32_t *)got)[i] != 0xF1F1F1F1u) ++bad;
      continue;
    }
    ++n_ref;
    if (fabs(ref[i]) > amax) amax = fabs(ref[i]);
    const double e = fabs((double)got[i] - (double)ref[i]);
    if (!(e <= err)) err = isnan(e) ? INFINITY : e;
  }
  const int drw_ok = bad == 0 && n_ref > 0 && err <= 1e-4 * amax + 1e-30;
  if (!(dgu_eq && q_eq && s_eq && grid_eq && drw_ok))
    fprintf(stderr, "  %s r%d: dgu %s, codes %s, scales %s, 3-CTA grid %s, d_rw %s (err %.3g of %.3g, "
            "%lld slots, %lld stray)\n", label, gpu_ctx.rank, dgu_eq ? "equal" : "DIFFER",
            q_eq ? "equal" : "DIFFER", s_eq ? "equal" : "DIFFER", grid_eq ? "equal" : "DIFFER",
            drw_ok ? "ok" : "BAD", err, amax, (long long)n_ref, (long long)bad);
  else
    printf("  %-30s r%d %lld rows: dgu, codes, scales bitwise; d_rw %.2g of %.3g; 3 CTAs bitwise\n",
           label, gpu_ctx.rank, (long long)rows, err, amax);
  CHECK(dgu_eq && q_eq && s_eq && grid_eq && drw_ok);
  for (int i = 0; i < 3; ++i) {
    cudaFree(o[i].dgu);
    cudaFree(o[i].q);
    cudaFree(o[i].qs);
    free(o[i].drw);
  }
  void *bufs[] = {dy, dy8, dys, wd, wd8, wds, pre, act, act8, acts, rw, da, part};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) cudaFree(bufs[i]);
  lh_setup_close(&u);
}

GPU_TEST(dact_dswiglu_matches_two_steps) {
  dsw_case(333, 256, 256, MOK_ROUTE_ZIPF, 0, "T=333 H=256 I=256 zipf");
  dsw_case(300, 384, 512, MOK_ROUTE_UNIFORM, 1, "T=300 H=384 I=512 clamp");
  dsw_case(50, 256, 256, MOK_ROUTE_EMPTY_RANK, 0, "empty rank");
}
