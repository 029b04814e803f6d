/* comm.h — the expert-parallel group's internals: the NCCL communicator, its device communicator,
 * every peer's address of a symmetric buffer as a device table, and the bounded flag barrier.
 * Host C; the NCCL device API stays inside the comm .cu files behind these functions. */
#ifndef MOK_COMM_H
#define MOK_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "comm/barrier_signal.h"
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

/* barrier.cu. A barrier among all ranks through flags in symmetric memory, which also exchanges
 * the sticky error words (any rank's fault reaches every rank, with the rank it was raised on).
 * Barriers are named by (call, index): the collective call they belong to (counted on the device,
 * so that a CUDA graph's replays count too) and their place in it, so that a rank never takes a
 * peer's signal from another phase for its own (docs/DESIGN.md, "Barriers and faults"). Waits end
 * after timeout_ns in all with MOK_ERR_TIMEOUT; once a rank has timed out it signals but no longer
 * waits. A signal from a phase the rank is not in, with no fault that explains it, is
 * MOK_ERR_DESYNC. */
#define MOK_BARRIER_MAX_RANKS 256 /* a signal names a rank in 8 bits */

typedef struct {
  char *const *peer_base;  /* device [ep] */
  size_t flags_off;        /* uint64 [ep]: each peer's latest signal, in the symmetric buffer */
  char *local_base;        /* this rank's address of the symmetric buffer                   */
  int rank, ep;
  mok_barrier_state *state;
  int32_t *err;            /* sticky error word                                           */
  int32_t *err_rank;       /* where it was raised: 0 this rank, r + 1 rank r               */
  int64_t timeout_ns;
  int first, last;         /* this barrier opens / closes its call (both: its only one)    */
  int32_t refuse;          /* nonzero: this rank refuses the call with this status: it
                              signals the peers that the call is over, with the status (its
                              own error word is left as it is), and waits only until every
                              peer has reached the call                                    */
} mok_barrier;

cudaError_t mok_barrier_run(const mok_barrier *b, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
