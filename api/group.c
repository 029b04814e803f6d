#define _POSIX_C_SOURCE 200809L
/* group.c — the expert-parallel group (one process per GPU): unique id, creation from an id or
 * from a caller's NCCL communicator, rank and size, destruction; and the ops layer's symmetric
 * buffers (ncclMemAlloc + ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "api/status_detail.h"
#include "comm/comm.h"
#include "mok.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(mok_unique_id), "mok_unique_id must hold an ncclUniqueId");

/* Records which NCCL call failed and why (mok_last_error); with MOK_DEBUG set in the
 * environment, also says so on stderr. */
static mok_status nccl_failed(const char *what, ncclResult_t r, ncclComm_t comm) {
  mok_record_error(MOK_ERR_NCCL, "%s: %s (%s)", what, ncclGetErrorString(r),
                   comm ? ncclGetLastError(comm) : "");
  if (getenv("MOK_DEBUG")) fprintf(stderr, "mok: %s failed\n", mok_last_error());
  return MOK_ERR_NCCL;
}

mok_status mok_get_unique_id(mok_unique_id *id) {
  if (!id) return MOK_ERR_INVALID_ARGUMENT;
  ncclUniqueId u;
  const ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) return nccl_failed("ncclGetUniqueId", r, NULL);
  memcpy(id->internal, &u, sizeof u);
  return MOK_SUCCESS;
}

static mok_status current_device(int *dev) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) return MOK_ERR_NO_DEVICE;
  if (cudaGetDevice(dev) != cudaSuccess)
    return mok_record_error(MOK_ERR_CUDA, "cudaGetDevice: %s",
                            cudaGetErrorString(cudaGetLastError()));
  return MOK_SUCCESS;
}

static mok_status finish_group(ncclComm_t comm, int owns, int device, mok_group **out) {
  mok_group *g = (mok_group *)calloc(1, sizeof *g);
  if (!g) return MOK_ERR_OUT_OF_MEMORY;
  g->comm = comm;
  g->owns_comm = owns;
  g->device = device;
  if (ncclCommCount(comm, &g->size) != ncclSuccess || ncclCommUserRank(comm, &g->rank) != ncclSuccess) {
    free(g);
    return nccl_failed("ncclCommCount", ncclInvalidArgument, comm);
  }
  if (g->size > MOK_BARRIER_MAX_RANKS) { /* the barrier's signals name ranks in 8 bits */
    free(g);
    return MOK_ERR_NOT_SUPPORTED;
  }
  int lsa = 0;
  mok_status st = mok_comm_devcomm_create(comm, &g->devcomm, &lsa);
  if (st != MOK_SUCCESS) {
    if (getenv("MOK_DEBUG")) fprintf(stderr, "mok: ncclDevCommCreate failed (%d ranks)\n", g->size);
    if (g->size != 1) {
      free(g);
      return st;
    }
    g->devcomm = NULL; /* one rank reaches only its own memory: no peer mapping needed */
    lsa = 1;
  }
  if (lsa != g->size) { /* every rank must be reachable by load/store (one NVLink domain) */
    const int size = g->size;
    mok_comm_devcomm_destroy(comm, g->devcomm);
    free(g);
    mok_record_error(MOK_ERR_NOT_SUPPORTED,
                     "the group spans NVLink domains (%d of its %d ranks reachable by load/store "
                     "from this one): groups across nodes are not built yet (docs/MULTINODE.md)",
                     lsa, size);
    return MOK_ERR_NOT_SUPPORTED;
  }
  *out = g;
  return MOK_SUCCESS;
}

/* The NCCL library this process loaded must be the one mok was compiled against: the device API's
 * structures differ between releases, and a mix fails late and obscurely. */
static mok_status check_nccl_version(void) {
  int v = 0;
  const ncclResult_t r = ncclGetVersion(&v);
  if (r != ncclSuccess) return nccl_failed("ncclGetVersion", r, NULL);
  if (v != NCCL_VERSION_CODE) {
    mok_record_error(MOK_ERR_NCCL, "built against NCCL %d but this process loaded NCCL %d: rebuild "
                     "with NCCL_HOME pointing at the loaded one", NCCL_VERSION_CODE, v);
    if (getenv("MOK_DEBUG")) fprintf(stderr, "mok: %s\n", mok_last_error());
    return MOK_ERR_NCCL;
  }
  return MOK_SUCCESS;
}

mok_status mok_group_create(const mok_unique_id *id, int nranks, int rank, mok_group **group) {
  if (!id || !group || nranks <= 0 || rank < 0 || rank >= nranks) return MOK_ERR_INVALID_ARGUMENT;
  *group = NULL;
  int dev;
  mok_status st = current_device(&dev);
  if (st != MOK_SUCCESS) return st;
  if ((st = check_nccl_version()) != MOK_SUCCESS) return st;
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* never NVLink multicast */
  ncclUniqueId u;
  memcpy(&u, id->internal, sizeof u);
  ncclComm_t comm;
  ncclResult_t nr = ncclCommInitRank(&comm, nranks, u, rank);
  if (nr != ncclSuccess) return nccl_failed("ncclCommInitRank", nr, NULL);
  st = finish_group(comm, 1, dev, group);
  if (st != MOK_SUCCESS) ncclCommDestroy(comm);
  return st;
}

mok_status mok_group_create_from_nccl(void *nccl_comm, mok_group **group) {
  if (!nccl_comm || !group) return MOK_ERR_INVALID_ARGUMENT;
  *group = NULL;
  int dev;
  mok_status st = current_device(&dev);
  if (st != MOK_SUCCESS) return st;
  if ((st = check_nccl_version()) != MOK_SUCCESS) return st;
  return finish_group((ncclComm_t)nccl_comm, 0, dev, group);
}

mok_status mok_group_rank(const mok_group *g, int *rank) {
  if (!g || !rank) return MOK_ERR_INVALID_ARGUMENT;
  *rank = g->rank;
  return MOK_SUCCESS;
}

mok_status mok_group_size(const mok_group *g, int *size) {
  if (!g || !size) return MOK_ERR_INVALID_ARGUMENT;
  *size = g->size;
  return MOK_SUCCESS;
}

mok_status mok_group_destroy(mok_group *g) {
  if (!g) return MOK_SUCCESS;
  mok_comm_devcomm_destroy(g->comm, g->devcomm);
  mok_status st = MOK_SUCCESS;
  if (g->owns_comm) {
    const ncclResult_t r = ncclCommDestroy(g->comm);
    if (r != ncclSuccess) st = nccl_failed("ncclCommDestroy", r, NULL);
  }
  free(g);
  return st;
}

mok_status mok_sym_alloc(mok_group *g, size_t bytes, mok_sym_buffer *b) {
  if (!g || !b || bytes == 0) return MOK_ERR_INVALID_ARGUMENT;
  memset(b, 0, sizeof *b);
  void *ptr = NULL;
  ncclWindow_t win;
  ncclResult_t r = ncclMemAlloc(&ptr, bytes);
  if (r != ncclSuccess) {
    nccl_failed("ncclMemAlloc", r, g->comm);
    return MOK_ERR_OUT_OF_MEMORY;
  }
  b->ptr = ptr;
  b->bytes = bytes;
  b->window = NULL;
  if (!g->devcomm) return MOK_SUCCESS; /* one rank without a device communicator: local only */
  r = ncclCommWindowRegister(g->comm, ptr, bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
  if (r != ncclSuccess) {
    ncclMemFree(ptr);
    memset(b, 0, sizeof *b);
    return nccl_failed("ncclCommWindowRegister", r, g->comm);
  }
  b->window = (void *)win;
  return MOK_SUCCESS;
}

mok_status mok_sym_free(mok_group *g, mok_sym_buffer *b) {
  if (!g || !b) return MOK_ERR_INVALID_ARGUMENT;
  if (!b->ptr) return MOK_SUCCESS;
  mok_status st = MOK_SUCCESS;
  ncclResult_t r;
  if (b->window && (r = ncclCommWindowDeregister(g->comm, (ncclWindow_t)b->window)) != ncclSuccess)
    st = nccl_failed("ncclCommWindowDeregister", r, g->comm);
  if ((r = ncclMemFree(b->ptr)) != ncclSuccess) st = nccl_failed("ncclMemFree", r, g->comm);
  memset(b, 0, sizeof *b);
  return st;
}
