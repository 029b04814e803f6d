/* comm.h — the expert-parallel group's internals: the NCCL communicator, its device communicator,
 * every peer's address of a symmetric buffer as a device table, and the bounded flag barrier.
 * Host C; the NCCL device API stays inside the comm .cu files behind these functions. */
#ifndef MOK_COMM_H
#define MOK_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "mok.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mok_group {
  ncclComm_t comm;
  int owns_comm;  /* created by mok_group_create: destroyed with the group */
  int rank, size;
  int device;
  void *devcomm;  /* ncclDevComm, heap; opaque to C */
};

/* nccl_dev.cu. Creates the device communicator (no multicast) and reports the size of the team of
 * ranks that reach each other by load/store (all of them must). */
mok_status mok_comm_devcomm_create(ncclComm_t comm, void **devcomm, int *lsa_size);
void mok_comm_devcomm_destroy(ncclComm_t comm, void *devcomm);

/* Fills peer_base[r] (device array of group-size pointers) with rank r's address of the symmetric
 * buffer registered as window, as seen from this GPU (ncclGetLsaPointer). A one-rank group without
 * a device communicator or window gets local_ptr. Enqueued on stream (capturable). */
cudaError_t mok_comm_peer_table(const void *devcomm, void *window, void *local_ptr, int size,
                                char **peer_base, cudaStream_t stream);

/* barrier.cu. A barrier among all ranks through flags in symmetric memory; it also exchanges the
 * sticky error words (any rank's fault reaches every rank). Every rank must run the same sequence
 * of barriers on a workspace. Waits end after timeout_ns with MOK_ERR_TIMEOUT in the error word;
 * once a rank has timed out it signals but no longer waits. */
typedef struct {
  char *const *peer_base;  /* device [ep] */
  size_t flags_off;        /* uint64 [ep] epochs, in the symmetric buffer  */
  size_t perr_off;         /* int32 [ep] peers' error words                */
  char *local_base;        /* this rank's address of the symmetric buffer  */
  int rank, ep;
  uint64_t *epoch;         /* device counter, this rank                    */
  int32_t *err;            /* sticky error word                            */
  int64_t timeout_ns;
} mok_barrier;

cudaError_t mok_barrier_run(const mok_barrier *b, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
