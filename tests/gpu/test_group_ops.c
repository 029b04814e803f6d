/* test_group_ops.c — GPU tests of the group from a caller-owned NCCL communicator, the ops layer
 * run stage by stage on caller-allocated symmetric buffers (compared with the CPU reference), and a
 * peer that never arrives: the bounded barrier wait ends in MOK_ERR_TIMEOUT instead of a hang. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

GPU_TEST(group_from_caller_nccl_comm) {
  static int round = 0;
  char tag[32];
  snprintf(tag, sizeof tag, "nccl%d", round++);
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (gpu_ctx.rank == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(gpu_test_share(&id, sizeof id, tag) == 0);
  ncclComm_t comm = NULL;
  CHECK(ncclCommInitRank(&comm, gpu_ctx.size, id, gpu_ctx.rank) == ncclSuccess);
  if (!comm) return;
  mok_group *g = NULL;
  CHECK_STATUS(mok_group_create_from_nccl(comm, &g), MOK_SUCCESS);
  if (g) {
    int r = -1, n = -1;
    mok_group_rank(g, &r);
    mok_group_size(g, &n);
    CHECK(r == gpu_ctx.rank && n == gpu_ctx.size);
    lh_case c = lh_base_case();
    c.Is = 128;
    c.T = 99;
    lh_run_case(g, &c, "on caller's communicator", MOK_SUCCESS);
    CHECK_STATUS(mok_group_destroy(g), MOK_SUCCESS);
  }
  CHECK(ncclCommDestroy(comm) == ncclSuccess); /* still ours: mok did not destroy it */
}

static int64_t at_least(int64_t bytes) { return bytes > 256 ? bytes : 256; }

/* The ops layer, stage by stage, on caller-allocated symmetric buffers. */
GPU_TEST(ops_layer_sequence) {
  lh_case c = lh_base_case();
  c.Is = 128; c.T = 150; c.k = 3; c.route = MOK_ROUTE_ZIPF;
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  lh_dev_upload(&d, &h, gpu_ctx.rank);
  lh_env e;
  mok_status st = lh_env_open(gpu_ctx.group, &e, &h, 1);
  CHECK_STATUS(st, MOK_SUCCESS);
  if (st == MOK_SUCCESS) {
    const int64_t T = c.T, H = c.H, k = c.k;
    mok_sym_buffer xs, cb, dys, rws, parts;
    CHECK_STATUS(mok_sym_alloc(gpu_ctx.group, (size_t)at_least(T * H * 2), &xs), MOK_SUCCESS);
    CHECK_STATUS(mok_sym_alloc(gpu_ctx.group, (size_t)at_least(T * k * H * 2), &cb), MOK_SUCCESS);
    CHECK_STATUS(mok_sym_alloc(gpu_ctx.group, (size_t)at_least(T * H * 2), &dys), MOK_SUCCESS);
    CHECK_STATUS(mok_sym_alloc(gpu_ctx.group, (size_t)at_least(T * k * 4), &rws), MOK_SUCCESS);
    CHECK_STATUS(mok_sym_alloc(gpu_ctx.group, (size_t)at_least(T * k * H * 2), &parts), MOK_SUCCESS);
    mok_plan plan;
    CHECK_STATUS(mok_workspace_plan(e.ws, &plan), MOK_SUCCESS);
    int64_t cap = 0;
    CHECK_STATUS(mok_schedule_worst_case_rows(&h.shape, gpu_ctx.size, plan.tile_m, &cap), MOK_SUCCESS);
    void *recv = NULL, *out = NULL, *recv_dy = NULL, *dx_rows = NULL;
    cudaMalloc(&recv, (size_t)(cap * H * 2));
    cudaMalloc(&out, (size_t)(cap * H * 2));
    cudaMalloc(&recv_dy, (size_t)(cap * H * 2));
    cudaMalloc(&dx_rows, (size_t)(cap * H * 2));
    cudaMemcpy(xs.ptr, d.x, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice);
    cudaMemcpy(dys.ptr, d.dy, (size_t)(T * H * 2), cudaMemcpyDeviceToDevice);
    cudaMemcpy(rws.ptr, d.rw, (size_t)(T * k * 4), cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    cudaStream_t q = e.stream;
    mok_sym_buffer small = xs;
    small.bytes = 16;
    CHECK_STATUS(mok_op_dispatch(e.s, &small, recv, q), MOK_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mok_schedule_build(e.s, d.topk, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_dispatch(e.s, &xs, recv, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_experts_forward(e.s, &d.weights, recv, out, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_combine(e.s, out, &cb, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_combine_reduce(e.s, &d.weights, d.x, &cb, d.rw, d.y, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_reverse_combine(e.s, &dys, recv_dy, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_experts_backward(e.s, &d.weights, recv, recv_dy, &rws, dx_rows, &d.grads, q),
                 MOK_SUCCESS);
    CHECK_STATUS(mok_op_reverse_dispatch(e.s, dx_rows, &parts, q), MOK_SUCCESS);
    CHECK_STATUS(mok_op_reverse_dispatch_reduce(e.s, &d.weights, d.x, d.dy, &parts, &d.grads, q),
                 MOK_SUCCESS);
    CHECK(cudaStreamSynchronize(q) == cudaSuccess);
    CHECK_STATUS(lh_device_error(e.ws), MOK_SUCCESS);
    lh_check_against_reference(&h, &d, gpu_ctx.rank, "ops layer");
    cudaFree(recv); cudaFree(out); cudaFree(recv_dy); cudaFree(dx_rows);
    mok_sym_free(gpu_ctx.group, &xs);
    mok_sym_free(gpu_ctx.group, &cb);
    mok_sym_free(gpu_ctx.group, &dys);
    mok_sym_free(gpu_ctx.group, &rws);
    mok_sym_free(gpu_ctx.group, &parts);
  }
  lh_env_close(&e);
  lh_dev_free(&d);
  lh_host_free(&h);
}

/* The last rank builds a schedule the others never build: its barrier wait must end after
 * timeout_ms with MOK_ERR_TIMEOUT (and the others see no fault). */
GPU_TEST(fault_peer_timeout) {
  if (gpu_ctx.size < 2) {
    printf("  peer timeout: needs 2 ranks, skipped\n");
    return;
  }
  lh_case c = lh_base_case();
  lh_host h;
  lh_host_make(&h, &c, gpu_ctx.size, test_seed());
  lh_dev d;
  CHECK(lh_dev_alloc(&d, &h) == 0);
  lh_dev_upload(&d, &h, gpu_ctx.rank);
  mok_config cfg = lh_config(&c);
  cfg.timeout_ms = 300;
  mok_workspace *ws = NULL;
  mok_schedule *s = NULL;
  CHECK_STATUS(mok_workspace_create(gpu_ctx.group, &h.shape, &cfg, &ws), MOK_SUCCESS);
  if (ws) {
    CHECK_STATUS(mok_schedule_create(ws, &s), MOK_SUCCESS);
    const int lonely = gpu_ctx.rank == gpu_ctx.size - 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (lonely) CHECK_STATUS(mok_schedule_build(s, d.topk, 0), MOK_SUCCESS);
    mok_status dev = lh_device_error(ws);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("  peer timeout: rank %d status %d after %.2f s\n", gpu_ctx.rank, dev, secs);
    CHECK_STATUS(dev, lonely ? MOK_ERR_TIMEOUT : MOK_SUCCESS);
    CHECK(secs < 10.0);
    if (!lonely) { /* let the lonely rank's signals land before the buffers go */
      struct timespec nap = {1, 500000000};
      nanosleep(&nap, NULL);
    }
    mok_schedule_destroy(s);
    mok_workspace_destroy(ws);
  }
  lh_dev_free(&d);
  lh_host_free(&h);
}
