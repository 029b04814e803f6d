/* nccl_dev.cu — the only file that includes NCCL's device API (C++-only headers): creates the
 * device communicator and turns a registered window into a table of every rank's address, behind
 * the C functions of comm/comm.h. NVLink multicast is never requested. */
#include <stdlib.h>
#include <string.h>
#include <nccl.h>
#include <nccl_device.h>
#include "comm/comm.h"

extern "C" mok_status mok_comm_devcomm_create(ncclComm_t comm, void **devcomm, int *lsa_size) {
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof reqs); /* lsaMultimem stays false: no multicast */
  /* mok synchronizes with its own bounded flag barriers (comm/barrier.cu, one CTA); NCCL's LSA
   * barriers are not used, so one is requested only to keep the device communicator complete. */
  reqs.lsaBarrierCount = 1;
  ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof(ncclDevComm));
  if (!dc) return MOK_ERR_OUT_OF_MEMORY;
  if (ncclDevCommCreate(comm, &reqs, dc) != ncclSuccess) {
    free(dc);
    return MOK_ERR_NCCL;
  }
  *devcomm = dc;
  *lsa_size = dc->lsaSize;
  return MOK_SUCCESS;
}

extern "C" void mok_comm_devcomm_destroy(ncclComm_t comm, void *devcomm) {
  if (!devcomm) return;
  ncclDevCommDestroy(comm, (ncclDevComm *)devcomm);
  free(devcomm);
}

__global__ void peer_table_kernel(ncclDevComm dc, ncclWindow_t win, int size, char **out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= size) return;
  out[r] = (char *)ncclGetLsaPointer(win, 0, r - dc.rank + dc.lsaRank);
}

__global__ void local_table_kernel(char *local, char **out) { out[0] = local; }

extern "C" cudaError_t mok_comm_peer_table(const void *devcomm, void *window, void *local_ptr,
                                           int size, char **peer_base, cudaStream_t stream) {
  if (!devcomm || !window) {
    if (size != 1) return cudaErrorInvalidValue;
    local_table_kernel<<<1, 1, 0, stream>>>((char *)local_ptr, peer_base);
    return cudaGetLastError();
  }
  const ncclDevComm *dc = (const ncclDevComm *)devcomm;
  peer_table_kernel<<<(size + 127) / 128, 128, 0, stream>>>(*dc, (ncclWindow_t)window, size,
                                                            peer_base);
  return cudaGetLastError();
}
