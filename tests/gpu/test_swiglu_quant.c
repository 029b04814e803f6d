/* test_swiglu_quant.c — the FP8 SwiGLU backward with the router-weight gradient quantizes its dgu
 * 1x128 on the way out (the dx GEMM's A operand): those codes and scales are bit for bit what
 * quantizing its dgu afterwards gives (mok_fp8_quant_act_upto), padding rows included, and
 * dgu and d_rw are the same with and without the quantization. Random inputs on real schedules;
 * intermediate sizes whose 128-column blocks leave half a warp idle in the last step. */
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "mok_reference.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/internal.h"
#include "tests/gpu/layer_harness.h"

/* n bf16 values, uniform in [-scale, scale], from the test inputs' generator. */
static int upload_random(void *dst, int64_t n, uint64_t seed, uint64_t stream, float scale) {
  float *f = (float *)malloc((size_t)(n + 1) * sizeof(float));
  uint16_t *b = (uint16_t *)malloc((size_t)(n + 1) * sizeof(uint16_t));
  int ok = f && b;
  if (ok) {
    mok_fill_random_bf16_values(seed, stream, f, n, scale);
    mok_bf16_from_float_array(f, b, n);
    ok = cudaMemcpy(dst, b, (size_t)n * 2, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  free(f);
  free(b);
  return ok;
}

static void swiglu_quant_case(int64_t T, int64_t I, mok_route_kind route, int use_limit,
                              const char *label) {
  lh_case c = lh_base_case();
  c.T = T;
  c.I = I;
  c.route = route;
  c.dtype = MOK_DTYPE_FP8_BLOCK128;
  lh_setup u;
  mok_status st;
  if (!lh_setup_open(gpu_ctx.group, &u, &c, label, &st)) return;
  if (st == MOK_SUCCESS) {
    mok_workspace *w = u.e.ws;
    mok_schedule *sched = u.e.s;
    cudaStream_t q = u.e.stream;
    CHECK_STATUS(mok_schedule_build(sched, u.d.topk, q), MOK_SUCCESS);
    int64_t rows = 0;
    CHECK_STATUS(mok_schedule_rows(sched, &rows), MOK_SUCCESS);
    const int64_t cap = w->cap, m_pad = MOK_FP8_SCALE_ROWS(cap), kb2 = 2 * I / 128;
    const uint64_t seed = test_seed() + 17u * (uint64_t)gpu_ctx.rank;
    void *g = NULL, *pre = NULL, *act = NULL, *codes = NULL, *dgu[2] = {NULL, NULL};
    void *qa = NULL, *qb = NULL;
    float *act_s = NULL, *rw_rows = NULL, *sa = NULL, *sb = NULL;
    CHECK(cudaMalloc(&g, (size_t)(cap * I * 2 + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&pre, (size_t)(cap * 2 * I * 2 + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&act, (size_t)(cap * I * 2 + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&codes, (size_t)(cap * I + 16)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&act_s, (size_t)((I / 128) * m_pad * 4 + 16)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&rw_rows, (size_t)(cap * 4 + 16)) == cudaSuccess);
    for (int i = 0; i < 2; ++i) CHECK(cudaMalloc(&dgu[i], (size_t)(cap * 2 * I * 2 + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&qa, (size_t)(cap * 2 * I + 16)) == cudaSuccess);
    CHECK(cudaMalloc(&qb, (size_t)(cap * 2 * I + 16)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&sa, (size_t)(kb2 * m_pad * 4 + 16)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&sb, (size_t)(kb2 * m_pad * 4 + 16)) == cudaSuccess);
    /* inputs: g, the pre-activations (some past the clamp's 1.5), act through its quantization,
     * router weights in (0, 1] */
    CHECK(upload_random(g, cap * I, seed, 1, 0.5f));
    CHECK(upload_random(pre, cap * 2 * I, seed, 2, 3.0f));
    CHECK(upload_random(act, cap * I, seed, 3, 2.0f));
    CHECK_STATUS(mok_fp8_quant_act(act, codes, act_s, cap, I, q), MOK_SUCCESS);
    lh_upload_router_rows(rw_rows, cap, seed);
    /* poison what the two runs write */
    CHECK(cudaMemsetAsync(qa, 0xFF, (size_t)(cap * 2 * I), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(qb, 0xFE, (size_t)(cap * 2 * I), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(sa, 0xFF, (size_t)(kb2 * m_pad * 4), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(sb, 0xFE, (size_t)(kb2 * m_pad * 4), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(dgu[0], 0xFF, (size_t)(cap * 2 * I * 2), q) == cudaSuccess);
    CHECK(cudaMemsetAsync(dgu[1], 0xFE, (size_t)(cap * 2 * I * 2), q) == cudaSuccess);
    mok_move_route r = mok_gpu_route(sched);
    const size_t drw_bytes = (size_t)(T * c.k * 4);
    char *drw[2] = {NULL, NULL};
    const int32_t *used = sched->expert_offset + w->el;
    for (int run = 0; run < 2; ++run) {
      mok_gpu_call_begin(w); /* one collective call: barrier, pushes, barrier */
      CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* every rank's d_rw slots free */
      CHECK(mok_swiglu_backward_rw(&r, w->off_drw, g, pre, codes, act_s, m_pad, rw_rows, dgu[run],
                                  run ? qb : NULL, run ? sb : NULL, m_pad, I, use_limit, 1.5f,
                                  q) == cudaSuccess);
      if (!run) CHECK_STATUS(mok_fp8_quant_act_upto(dgu[0], qa, sa, cap, 2 * I, used, q),
                             MOK_SUCCESS);
      CHECK_STATUS(mok_gpu_barrier_last(w, q), MOK_SUCCESS); /* every peer's d_rw pushed here */
      CHECK(cudaStreamSynchronize(q) == cudaSuccess);
      drw[run] = lh_to_host((char *)w->sym.ptr + w->off_drw, drw_bytes);
    }
    CHECK_STATUS(lh_device_error(w), MOK_SUCCESS);
    /* rows [0, rows) are the schedule's (real and padding); compare those */
    const int same_dgu = lh_same_bytes(dgu[0], dgu[1], (size_t)(rows * 2 * I * 2));
    const int same_codes = lh_same_bytes(qa, qb, (size_t)(rows * 2 * I));
    const int same_scales = lh_same_scales(sa, sb, kb2, m_pad, rows);
    const int same_drw = memcmp(drw[0], drw[1], drw_bytes) == 0;
    if (!(same_dgu && same_codes && same_scales && same_drw))
      fprintf(stderr, "  %s: dgu %s, codes %s, scales %s, d_rw %s\n", label,
              same_dgu ? "equal" : "DIFFER", same_codes ? "equal" : "DIFFER",
              same_scales ? "equal" : "DIFFER", same_drw ? "equal" : "DIFFER");
    else
      printf("  %-34s r%d %lld rows: dgu, its codes and scales, d_rw bitwise equal\n", label,
             gpu_ctx.rank, (long long)rows);
    CHECK(same_dgu && same_codes && same_scales && same_drw);
    free(drw[0]);
    free(drw[1]);
    void *bufs[] = {g, pre, act, codes, act_s, rw_rows, dgu[0], dgu[1], qa, qb, sa, sb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) cudaFree(bufs[i]);
  }
  lh_setup_close(&u);
}

GPU_TEST(swiglu_bwd_fused_quant_bitwise) {
  swiglu_quant_case(333, 256, MOK_ROUTE_ZIPF, 0, "T=333 I=256 zipf");
  swiglu_quant_case(200, 384, MOK_ROUTE_UNIFORM, 1, "T=200 I=384 (half-warp tail), clamp");
  swiglu_quant_case(50, 128, MOK_ROUTE_EMPTY_RANK, 0, "empty rank, I=128");
}
