/* test_pull_bulk.c — dispatch by bulk copies (the comm-SM mechanism) moves exactly what the plain
 * pull moves: every row bit for bit, padding rows zeroed, for 1 to many CTAs and for rows longer
 * than one bulk chunk. */
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "api/gpu_internal.h"
#include "kernels/v1/v1.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/layer_harness.h"

static void pull_case(int64_t T, int64_t H, mok_route_kind route, const char *label) {
  lh_case c = lh_base_case();
  c.T = T;
  c.H = H;
  c.route = route;
  lh_setup u;
  mok_status st;
  if (!lh_setup_open(gpu_ctx.group, &u, &c, label, &st)) return;
  if (st == MOK_SUCCESS) {
    mok_workspace *w = u.e.ws;
    mok_schedule *sched = u.e.s;
    cudaStream_t q = u.e.stream;
    const size_t bytes = (size_t)(w->cap * H * 2);
    void *want = NULL, *got = NULL;
    CHECK(cudaMalloc(&want, bytes + 16) == cudaSuccess && cudaMalloc(&got, bytes + 16) == cudaSuccess);
    char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    CHECK_STATUS(mok_schedule_build(sched, u.d.topk, q), MOK_SUCCESS);
    if (T > 0)
      CHECK(cudaMemcpyAsync((char *)w->sym.ptr + w->off_x, u.d.x, (size_t)(T * H * 2),
                            cudaMemcpyDeviceToDevice, q) == cudaSuccess);
    CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* every rank's x staged */
    v1_route r = mok_gpu_route(sched);
    CHECK(cudaMemsetAsync(want, 0xFF, bytes, q) == cudaSuccess);
    CHECK(v1_dispatch_pull(&r, w->off_x, want, q) == cudaSuccess);
    CHECK(cudaStreamSynchronize(q) == cudaSuccess);
    int64_t rows = 0;
    CHECK_STATUS(mok_schedule_rows(sched, &rows), MOK_SUCCESS);
    CHECK(cudaMemcpy(a, want, (size_t)(rows * H * 2), cudaMemcpyDeviceToHost) == cudaSuccess);
    const int ctas[4] = {1, 3, 16, 132};
    for (int i = 0; i < 4; ++i) {
      CHECK(cudaMemsetAsync(got, 0xFF, bytes, q) == cudaSuccess); /* poison */
      CHECK(v1_dispatch_pull_bulk(&r, w->off_x, got, ctas[i], q) == cudaSuccess);
      CHECK(cudaStreamSynchronize(q) == cudaSuccess);
      CHECK(cudaMemcpy(b, got, (size_t)(rows * H * 2), cudaMemcpyDeviceToHost) == cudaSuccess);
      int same = memcmp(a, b, (size_t)(rows * H * 2)) == 0;
      if (!same) fprintf(stderr, "  %s: bulk pull with %d CTAs differs from the plain pull\n", label, ctas[i]);
      CHECK(same);
    }
    CHECK_STATUS(mok_gpu_barrier(w, q), MOK_SUCCESS); /* nobody restages x while a peer reads it */
    CHECK(cudaStreamSynchronize(q) == cudaSuccess);
    CHECK_STATUS(lh_device_error(w), MOK_SUCCESS);
    free(a);
    free(b);
    cudaFree(want);
    cudaFree(got);
  }
  lh_setup_close(&u);
}

GPU_TEST(pull_bulk_matches_plain) {
  pull_case(333, 256, MOK_ROUTE_ZIPF, "T=333 H=256 zipf");
  pull_case(77, 8320, MOK_ROUTE_UNIFORM, "T=77 H=8320 (two chunks a row)");
  pull_case(50, 256, MOK_ROUTE_EMPTY_RANK, "empty rank");
  pull_case(0, 256, MOK_ROUTE_UNIFORM, "T=0");
}
