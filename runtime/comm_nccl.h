/* runtime/comm_nccl.h — the NCCL communicator behind strata_comm_iface
 * (built only with CUDA, NCCL and MPI: meson's 'nccl' feature).
 *
 * Bootstrap: every rank of `mpi_comm` calls strata_comm_nccl_create
 * collectively; rank 0 makes an ncclUniqueId and broadcasts it with
 * MPI_Bcast; each rank picks GPU (node rank mod visible devices) and joins
 * with ncclCommInitRank. A second NCCL communicator spans the node (ranks of
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or groups of
 * STRATA_RANKS_PER_NODE consecutive ranks when that variable is set) for the
 * hierarchical sync. Collectives run on a communication stream; the
 * interface's buffers are host memory, staged through device buffers that
 * grow to the largest message (no allocation once warm).
 *
 * Determinism (`deterministic`, the MPI backend's switch):
 *  - broadcast_from_owner and allgatherv_f32 move bytes only: always exact.
 *  - deterministic = true: every sum (allreduce_f64, reduce_to_owner,
 *    reduce_scatter_f32) gathers the contributions (ncclAllGather, or
 *    grouped ncclSend/ncclRecv to the owner) and adds them on the host in
 *    rank order 0, 1, ..., size-1, in double for allreduce_f64 and in float
 *    for the f32 ops. Bit-identical across runs, topologies, NCCL versions
 *    and algorithms (the sequential rank-order sum an MPI backend's
 *    deterministic mode would also give). Cost: size times the traffic to
 *    the owner.
 *  - deterministic = false: ncclAllReduce / ncclReduce. NCCL guarantees the
 *    same result for the same input only while the communicator size, the
 *    GPU topology, the NCCL version and the chosen algorithm/protocol (ring
 *    vs tree, LL/LL128/Simple; pin them with NCCL_ALGO and NCCL_PROTO) stay
 *    the same; the summation order is the algorithm's (a ring's order
 *    depends on each rank's position), so results differ from the
 *    sequential rank-order sum in the last bits and may change when any of
 *    those change. MAX is exact in both modes.
 *
 * Thread-safety: one thread per communicator (strata/comm.h's rule).
 */
#ifndef STRATA_RUNTIME_COMM_NCCL_H
#define STRATA_RUNTIME_COMM_NCCL_H

#include <stdbool.h>

#include "strata/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create the NCCL communicator over `mpi_comm` (a pointer to an MPI_Comm,
 * MPI initialized by the caller; the communicator is duplicated, so the
 * caller keeps its own). Collective over mpi_comm. Errors:
 * STRATA_ERR_INVALID_ARG (NULL), STRATA_ERR_UNSUPPORTED (no CUDA device),
 * STRATA_ERR_NOMEM, STRATA_ERR_INTERNAL (an NCCL, CUDA or MPI failure, with
 * the call, file and line). */
STRATA_API strata_status strata_comm_nccl_create(const void *mpi_comm, bool deterministic,
                                                 strata_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_RUNTIME_COMM_NCCL_H */
