/* test_schedule_kernels.c — the device schedule build, serial and parallel kernels, against the host
 * build (schedule/schedule.c): the same table bit for bit (expert counts, offsets, every row's source
 * slot and the padding) and the same fault code, for every rank of simulated groups of 1 to 8 ranks
 * on this one GPU (each simulated rank's routing in its own device buffer, reached through the
 * kernels' peer table), several chunk geometries, the routing cases and the faults, and each
 * rank's own token count below the stride T (mok_schedule_set_tokens). Also prints the two builds' kernel times on a DeepSeek-V3-sized routing
 * (information, not a check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "tests/gpu/internal.h"
#include "tests/gpu/gpu_test.h"

/* INJECT_COUNT_CHANGES: the last rank's staged count changes between the count and the fill (a
 * peer already staging its next build): the fill must use the counts the count phase validated */
enum { INJECT_NONE, INJECT_BAD_ID, INJECT_DUPLICATE, INJECT_SMALL_CAPACITY, INJECT_BAD_COUNT,
       INJECT_COUNT_CHANGES };

typedef struct {
  int ep, k, E, tile_m, cpr; /* cpr: chunks per rank */
  int64_t T;
  mok_route_kind route;
  int inject;
  const int64_t *counts;     /* each rank's tokens in this build (<= T); NULL: T */
} sk_case;

/* One device build's buffers. */
typedef struct {
  int32_t *topk_all, *counts, *chunk_status, *expert_count, *expert_offset, *row_src, *err;
} sk_out;

static int sk_alloc(sk_out *o, int64_t ids, int64_t nchunks, int el, int64_t cap) {
  memset(o, 0, sizeof *o);
  int ok = cudaMalloc((void **)&o->topk_all, (size_t)(ids + 1) * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->counts, (size_t)(nchunks * el + 1) * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->chunk_status, (size_t)(2 * nchunks + 1) * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->expert_count, (size_t)el * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->expert_offset, (size_t)(el + 1) * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->row_src, (size_t)(cap + 1) * 4) == cudaSuccess &&
           cudaMalloc((void **)&o->err, 4) == cudaSuccess;
  return ok ? 0 : 1;
}

static void sk_free(sk_out *o) {
  cudaFree(o->topk_all); cudaFree(o->counts); cudaFree(o->chunk_status);
  cudaFree(o->expert_count); cudaFree(o->expert_offset); cudaFree(o->row_src); cudaFree(o->err);
}

/* Runs one build into o (error word cleared, table poisoned first); returns the error word.
 * restage: when not NULL, *restage = restage_value is stored between the count and the fill. */
static int32_t sk_build(mok_sched_args a, sk_out *o, int el, int64_t cap, int parallel,
                        int32_t *restage, int32_t restage_value, cudaStream_t q) {
  a.topk_all = o->topk_all;
  a.counts = o->counts;
  a.chunk_status = o->chunk_status;
  a.expert_count = o->expert_count;
  a.expert_offset = o->expert_offset;
  a.row_src = o->row_src;
  a.err = o->err;
  a.parallel = parallel;
  CHECK(cudaMemsetAsync(o->err, 0, 4, q) == cudaSuccess);
  CHECK(cudaMemsetAsync(o->expert_count, 0x5A, (size_t)el * 4, q) == cudaSuccess);
  CHECK(cudaMemsetAsync(o->expert_offset, 0x5A, (size_t)(el + 1) * 4, q) == cudaSuccess);
  CHECK(cudaMemsetAsync(o->row_src, 0x5A, (size_t)cap * 4, q) == cudaSuccess);
  CHECK(mok_sched_count_scan(&a, q) == cudaSuccess);
  if (restage) {
    CHECK(cudaMemcpyAsync(restage, &restage_value, 4, cudaMemcpyHostToDevice, q) == cudaSuccess);
    CHECK(cudaStreamSynchronize(q) == cudaSuccess);
  }
  CHECK(mok_sched_fill_pad(&a, q) == cudaSuccess);
  int32_t err = -1;
  CHECK(cudaMemcpyAsync(&err, o->err, 4, cudaMemcpyDeviceToHost, q) == cudaSuccess);
  CHECK(cudaStreamSynchronize(q) == cudaSuccess);
  return err;
}

/* The device table of o equals the host's (count, offsets, rows [0, total)). */
static int sk_same(const sk_out *o, int el, const int32_t *ec, const int32_t *eo, const int32_t *rs) {
  int32_t *dec = malloc((size_t)el * 4), *deo = malloc((size_t)(el + 1) * 4);
  cudaMemcpy(dec, o->expert_count, (size_t)el * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(deo, o->expert_offset, (size_t)(el + 1) * 4, cudaMemcpyDeviceToHost);
  int same = memcmp(dec, ec, (size_t)el * 4) == 0 && memcmp(deo, eo, (size_t)(el + 1) * 4) == 0;
  if (same && eo[el] > 0) {
    int32_t *drs = malloc((size_t)eo[el] * 4);
    cudaMemcpy(drs, o->row_src, (size_t)eo[el] * 4, cudaMemcpyDeviceToHost);
    same = memcmp(drs, rs, (size_t)eo[el] * 4) == 0;
    free(drs);
  }
  free(dec);
  free(deo);
  return same;
}

/* After a fault the expert table is empty (every count and offset zero). */
static int sk_empty(const sk_out *o, int el) {
  int32_t *dec = malloc((size_t)el * 4), *deo = malloc((size_t)(el + 1) * 4);
  cudaMemcpy(dec, o->expert_count, (size_t)el * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(deo, o->expert_offset, (size_t)(el + 1) * 4, cudaMemcpyDeviceToHost);
  int empty = 1;
  for (int l = 0; l < el; ++l) empty &= dec[l] == 0 && deo[l] == 0;
  empty &= deo[el] == 0;
  free(dec);
  free(deo);
  return empty;
}

static void sk_run(const sk_case *c, const char *label, int timing) {
  const int ep = c->ep, k = c->k, E = c->E, el = E / ep;
  const int64_t T = c->T, per_rank = T * k;
  const int64_t ct = T > 0 ? (T + c->cpr - 1) / c->cpr : 1;
  const int cpr = T > 0 ? (int)((T + ct - 1) / ct) : 1;
  const int64_t nchunks = (int64_t)ep * cpr;
  int32_t *topk = calloc((size_t)(ep * per_rank + 1), 4);
  for (int r = 0; r < ep; ++r)
    if (mok_route_fill(c->route, test_seed(), r, T, k, E, ep, topk + r * per_rank) != MOK_SUCCESS) {
      free(topk);
      return; /* the routing kind cannot serve this shape */
    }
  if (T > 0 && c->inject == INJECT_BAD_ID) topk[(ep - 1) * per_rank + (T / 2) * k] = E;
  if (T > 0 && k >= 2 && c->inject == INJECT_DUPLICATE) topk[(ep - 1) * per_rank + (T - 1) * k + 1] = topk[(ep - 1) * per_rank + (T - 1) * k];
  int64_t worst = 0;
  mok_shape shape = {T, 128, E, 128, k, 0};
  CHECK_STATUS(mok_schedule_worst_case_rows(&shape, ep, c->tile_m, &worst), MOK_SUCCESS);
  const int64_t cap = c->inject == INJECT_SMALL_CAPACITY ? c->tile_m : (worst > 0 ? worst : 1);

  /* every simulated rank's routing in its own device buffer, reached through a peer table */
  char **peers_h = calloc((size_t)ep, sizeof *peers_h), **peers_d = NULL;
  int64_t *counts = malloc((size_t)ep * sizeof *counts);
  for (int r = 0; r < ep; ++r) { /* the routing, then the rank's staged count (mok_sched_stage) */
    counts[r] = c->counts ? c->counts[r] : T;
    const int32_t staged = c->inject == INJECT_BAD_COUNT && r == ep - 1 ? (int32_t)T + 1
                                                                        : (int32_t)counts[r];
    CHECK(cudaMalloc((void **)&peers_h[r], (size_t)(per_rank + 1) * 4) == cudaSuccess);
    CHECK(cudaMemcpy(peers_h[r], topk + r * per_rank, (size_t)per_rank * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(peers_h[r] + per_rank * 4, &staged, 4, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  CHECK(cudaMalloc((void **)&peers_d, (size_t)ep * sizeof *peers_d) == cudaSuccess);
  CHECK(cudaMemcpy(peers_d, peers_h, (size_t)ep * sizeof *peers_d, cudaMemcpyHostToDevice) == cudaSuccess);
  sk_out ser, par;
  CHECK(sk_alloc(&ser, ep * per_rank, nchunks, el, cap) == 0);
  CHECK(sk_alloc(&par, ep * per_rank, nchunks, el, cap) == 0);
  int32_t *ec = malloc((size_t)el * 4), *eo = malloc((size_t)(el + 1) * 4);
  int32_t *rs = malloc((size_t)cap * 4), *scratch = malloc((size_t)ep * el * 4);
  cudaStream_t q;
  CHECK(cudaStreamCreate(&q) == cudaSuccess);
  int bad = 0;
  for (int rank = 0; rank < ep; ++rank) {
    mok_sched_args a;
    memset(&a, 0, sizeof a);
    a.peer_base = peers_d;
    a.topk_off = 0;
    a.count_off = (size_t)per_rank * 4;
    a.rank = rank;
    a.ep = ep;
    a.tokens = T;
    a.top_k = k;
    a.num_experts = E;
    a.experts_local = el;
    a.tile_m = c->tile_m;
    a.capacity = cap;
    a.chunks_per_rank = cpr;
    a.chunk_tokens = ct;
    CHECK(mok_sched_prepare(&a) == cudaSuccess);
    mok_sched_params p = {ep, rank, T, k, E, c->tile_m, cap, c->counts ? counts : NULL};
    const mok_status want = c->inject == INJECT_BAD_COUNT
                                ? MOK_ERR_INVALID_ARGUMENT
                                : mok_sched_build_host(&p, topk, scratch, ec, eo, rs);
    int32_t *restage = c->inject == INJECT_COUNT_CHANGES
                           ? (int32_t *)(peers_h[ep - 1] + per_rank * 4) : NULL;
    const int32_t later = (int32_t)(counts[ep - 1] / 2);
    const int32_t es = sk_build(a, &ser, el, cap, 0, restage, later, q);
    if (restage) CHECK(cudaMemcpy(restage, &(int32_t){(int32_t)counts[ep - 1]}, 4,
                                  cudaMemcpyHostToDevice) == cudaSuccess);
    const int32_t ep_ = sk_build(a, &par, el, cap, 1, restage, later, q);
    if (restage) CHECK(cudaMemcpy(restage, &(int32_t){(int32_t)counts[ep - 1]}, 4,
                                  cudaMemcpyHostToDevice) == cudaSuccess);
    if (es != (int32_t)want || ep_ != (int32_t)want) {
      printf("    %s rank %d: fault word serial %d parallel %d, host %d\n", label, rank, es, ep_, want);
      ++bad;
      continue;
    }
    if (want == MOK_SUCCESS) {
      if (!sk_same(&ser, el, ec, eo, rs)) { printf("    %s rank %d: serial table differs\n", label, rank); ++bad; }
      if (!sk_same(&par, el, ec, eo, rs)) { printf("    %s rank %d: parallel table differs\n", label, rank); ++bad; }
    } else if (!sk_empty(&ser, el) || !sk_empty(&par, el)) {
      printf("    %s rank %d: the expert table is not empty after a fault\n", label, rank);
      ++bad;
    }
    if (timing && rank == 0) { /* information: the two builds' kernels, median of 21 */
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      float ms[2][21];
      for (int par_ = 0; par_ < 2; ++par_)
        for (int i = 0; i < 21; ++i) {
          a.topk_all = par_ ? par.topk_all : ser.topk_all;
          a.counts = par_ ? par.counts : ser.counts;
          a.chunk_status = par_ ? par.chunk_status : ser.chunk_status;
          a.expert_count = par_ ? par.expert_count : ser.expert_count;
          a.expert_offset = par_ ? par.expert_offset : ser.expert_offset;
          a.row_src = par_ ? par.row_src : ser.row_src;
          a.err = par_ ? par.err : ser.err;
          a.parallel = par_;
          cudaEventRecord(e0, q);
          mok_sched_count_scan(&a, q);
          mok_sched_fill_pad(&a, q);
          cudaEventRecord(e1, q);
          cudaEventSynchronize(e1);
          cudaEventElapsedTime(&ms[par_][i], e0, e1);
        }
      for (int par_ = 0; par_ < 2; ++par_) /* insertion sort, then the middle */
        for (int i = 1; i < 21; ++i)
          for (int j = i; j > 0 && ms[par_][j] < ms[par_][j - 1]; --j) {
            float t = ms[par_][j]; ms[par_][j] = ms[par_][j - 1]; ms[par_][j - 1] = t;
          }
      printf("    %s: build kernels, median of 21: serial %.3f ms, parallel %.3f ms (%lld chunks)\n",
             label, ms[0][10], ms[1][10], (long long)nchunks);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
  CHECK(bad == 0);
  cudaStreamDestroy(q);
  sk_free(&ser);
  sk_free(&par);
  for (int r = 0; r < ep; ++r) cudaFree(peers_h[r]);
  cudaFree(peers_d);
  free(peers_h); free(topk); free(ec); free(eo); free(rs); free(scratch); free(counts);
}

GPU_TEST(schedule_kernels_routings) {
  static const int eps[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; ++i)
    for (int route = 0; route < MOK_ROUTE_COUNT; ++route) {
      sk_case c = {eps[i], 4, 32, 128, 3, 700, (mok_route_kind)route, INJECT_NONE, NULL};
      char label[64];
      snprintf(label, sizeof label, "EP%d %s", eps[i], mok_route_name((mok_route_kind)route));
      sk_run(&c, label, 0);
    }
}

GPU_TEST(schedule_kernels_geometry) {
  /* one chunk per rank, many chunks, a last chunk of one token, top-1, k = E, tile 64 and 256 */
  sk_case cases[] = {
      {2, 8, 64, 128, 1, 1000, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL},
      {2, 8, 64, 128, 16, 1000, MOK_ROUTE_ZIPF, INJECT_NONE, NULL},
      {4, 2, 16, 64, 7, 301, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL},
      {1, 1, 8, 256, 5, 333, MOK_ROUTE_ONE_EXPERT, INJECT_NONE, NULL},
      {2, 4, 4, 128, 2, 99, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL},
      {8, 6, 1024, 128, 4, 517, MOK_ROUTE_ZIPF, INJECT_NONE, NULL}, /* 128 local experts */
      {1, 8, 4096, 128, 2, 1500, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL}, /* 4096 local experts */
      {2, 8, 64, 128, 3, 0, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL}, /* no tokens */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    char label[64];
    snprintf(label, sizeof label, "geometry %zu", i);
    sk_run(&cases[i], label, 0);
  }
}

GPU_TEST(schedule_kernels_faults) {
  sk_case bad_id = {4, 4, 32, 128, 3, 500, MOK_ROUTE_UNIFORM, INJECT_BAD_ID, NULL};
  sk_case dup = {2, 4, 32, 128, 3, 500, MOK_ROUTE_ZIPF, INJECT_DUPLICATE, NULL};
  sk_case cap = {2, 4, 32, 128, 3, 500, MOK_ROUTE_UNIFORM, INJECT_SMALL_CAPACITY, NULL};
  sk_run(&bad_id, "bad expert id", 0);
  sk_run(&dup, "duplicate expert", 0);
  sk_run(&cap, "capacity overflow", 0);
}

/* Each rank's own token count in a build, below the stride (the workspace's T): 0, a part of a
 * chunk, whole chunks, all of them; a corrupted staged count (above T), which is a fault; and a
 * staged count that changes after the count phase, which changes nothing. */
GPU_TEST(schedule_kernels_token_counts) {
  static const int64_t c4[] = {300, 0, 123, 257}, c2[] = {1, 299}, c1[] = {100};
  sk_case cases[] = {
      {4, 4, 32, 128, 3, 300, MOK_ROUTE_UNIFORM, INJECT_NONE, c4},
      {2, 8, 64, 128, 5, 300, MOK_ROUTE_ZIPF, INJECT_NONE, c2},
      {1, 8, 16, 128, 2, 300, MOK_ROUTE_ONE_EXPERT, INJECT_NONE, c1},
      {4, 4, 32, 128, 3, 300, MOK_ROUTE_UNIFORM, INJECT_BAD_COUNT, c4},
      {4, 4, 32, 128, 3, 300, MOK_ROUTE_UNIFORM, INJECT_COUNT_CHANGES, c4},
      {2, 8, 64, 128, 5, 300, MOK_ROUTE_ZIPF, INJECT_COUNT_CHANGES, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    char label[64];
    snprintf(label, sizeof label, "token counts %zu", i);
    sk_run(&cases[i], label, 0);
  }
}

GPU_TEST(schedule_kernels_timing) {
  /* DeepSeek-V3 routing at EP=2 and EP=8, 4096 tokens per rank, the chunk geometry the workspace
   * picks (8 chunks per rank) */
  sk_case ep2 = {2, 8, 256, 128, 8, 4096, MOK_ROUTE_UNIFORM, INJECT_NONE, NULL};
  sk_case ep8 = {8, 8, 256, 128, 8, 4096, MOK_ROUTE_ZIPF, INJECT_NONE, NULL};
  sk_run(&ep2, "DSv3 EP2 T4096", 1);
  sk_run(&ep8, "DSv3 EP8 T4096 zipf", 1);
}

/* One rank's routing table built by mok_schedule_build on workspace w (T tokens, top-k k, E
 * experts), against the host build of every rank's routing (the same seed on every rank); 0 when
 * the device's padded rows equal the host's and no fault was raised. Collective. */
static int build_matches_host(mok_workspace *w, int64_t T, int k, int E, uint64_t seed) {
  const int ep = gpu_ctx.size, rank = gpu_ctx.rank, el = E / ep;
  const int64_t per_rank = T * k;
  int32_t *topk = malloc((size_t)(ep * per_rank) * 4), *scratch = malloc((size_t)ep * el * 4);
  int32_t *ec = malloc((size_t)el * 4), *eo = malloc((size_t)(el + 1) * 4);
  int64_t worst = 0;
  mok_shape shape = {T, 256, E, 256, k, 0};
  int bad = mok_schedule_worst_case_rows(&shape, ep, 128, &worst) != MOK_SUCCESS;
  int32_t *rs = malloc((size_t)(worst > 0 ? worst : 1) * 4);
  for (int r = 0; r < ep; ++r)
    bad |= mok_route_fill(MOK_ROUTE_UNIFORM, seed, r, T, k, E, ep, topk + r * per_rank) !=
           MOK_SUCCESS;
  mok_sched_params p = {ep, rank, T, k, E, 128, worst, NULL};
  bad |= mok_sched_build_host(&p, topk, scratch, ec, eo, rs) != MOK_SUCCESS;
  int32_t *topk_d = NULL;
  bad |= cudaMalloc((void **)&topk_d, (size_t)per_rank * 4) != cudaSuccess;
  if (topk_d)
    bad |= cudaMemcpy(topk_d, topk + rank * per_rank, (size_t)per_rank * 4,
                      cudaMemcpyHostToDevice) != cudaSuccess;
  mok_schedule *s = NULL;
  CHECK_STATUS(mok_schedule_create(w, &s), MOK_SUCCESS);
  int64_t rows = -1;
  mok_status device_status = MOK_ERR_INTERNAL;
  if (s) {
    const mok_status st = mok_schedule_build(s, topk_d, 0); /* every rank calls it */
    if (st != MOK_SUCCESS)
      printf("    T %lld: %s (%s)\n", (long long)T, mok_status_string(st), mok_last_error());
    bad |= st != MOK_SUCCESS;
    CHECK_STATUS(mok_schedule_rows(s, &rows), MOK_SUCCESS);
    CHECK_STATUS(mok_workspace_error(w, &device_status), MOK_SUCCESS);
    mok_schedule_destroy(s);
  }
  bad |= rows != eo[el] || device_status != MOK_SUCCESS;
  if (rows != eo[el])
    printf("    T %lld: device rows %lld, host %d\n", (long long)T, (long long)rows, eo[el]);
  cudaFree(topk_d);
  free(topk), free(scratch), free(ec), free(eo), free(rs);
  return bad;
}

/* The build kernels' shared-memory limits belong to the device, not to a workspace: a workspace of
 * fewer tokens made after a larger one must not lower the limit the larger one's build launches
 * against (it did: its build failed with cudaErrorInvalidValue once a small workspace existed). */
GPU_TEST(schedule_build_after_a_smaller_workspace) {
  const int E = 8 * gpu_ctx.size, k = 4;
  const int64_t big_T = 1500, small_T = 3;
  mok_config c;
  mok_config_init(&c);
  mok_shape big = {big_T, 256, E, 256, k, 0}, small = {small_T, 256, E, 256, k, 0};
  mok_workspace *wb = NULL, *ws = NULL;
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &big, &c, &wb), MOK_SUCCESS);
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &small, &c, &ws), MOK_SUCCESS);
  if (!wb || !ws) {
    mok_workspace_destroy(wb);
    mok_workspace_destroy(ws);
    return;
  }
  CHECK(build_matches_host(ws, small_T, k, E, test_seed()) == 0);
  CHECK(build_matches_host(wb, big_T, k, E, test_seed() + 1) == 0); /* the larger, made first */
  CHECK(build_matches_host(ws, small_T, k, E, test_seed() + 2) == 0);
  CHECK_STATUS(mok_workspace_destroy(ws), MOK_SUCCESS);
  CHECK(build_matches_host(wb, big_T, k, E, test_seed() + 3) == 0); /* and after it is gone */
  CHECK_STATUS(mok_workspace_destroy(wb), MOK_SUCCESS);
}
