/* comm/comm_nccl.h — the NCCL communicator behind strata_comm_iface
 * (built only with CUDA, NCCL and MPI: meson's 'nccl' feature).
 *
 * Bootstrap: every rank of `mpi_comm` calls strata_comm_nccl_create
 * collectively; rank 0 makes an ncclUniqueId and broadcasts it with
 * MPI_Bcast; each rank picks GPU (node rank mod visible devices) and joins
 * with ncclCommInitRank. Nodes: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED),
 * or blocks of STRATA_RANKS_PER_NODE consecutive ranks when that variable is
 * set (emulated nodes); every rank learns every rank's node
 * (comm_nccl_plan.h). Two more NCCL communicators come from ncclCommSplit:
 * the node-local one (the ranks of my node) and the cross-node one (the
 * ranks with my node rank; for node rank 0, the node leaders). split() makes
 * a communicator the same way (MPI_Comm_split + ncclCommSplit, with its own
 * two levels), sharing the parent's byte counters. Collectives run on a
 * communication stream; the interface's buffers are host memory, staged
 * through device buffers that grow to the largest message (no allocation
 * once warm).
 *
 * reduce_to_owners (the HSDP gradient sum): nodes that are blocks of
 * consecutive ranks make it hierarchical: node-local first, then one
 * message per node boundary between the leaders, then the total shipped to
 * the owners (the schedule and its tests: comm_nccl_plan.h). Bytes are
 * counted per message of that schedule, intra- or inter-node by the peer's
 * node (bytes(): what the algorithm moves; NCCL's rings and trees move their
 * own chunks on the wire). Only reduce_to_owners is counted.
 *
 * Determinism (`deterministic`, the MPI backend's switch):
 *  - broadcast_from_owner and allgatherv_f32 move bytes only: always exact.
 *  - deterministic = true: every sum gathers the contributions with
 *    ncclSend/ncclRecv (or ncclAllGather) and adds them on the host in rank
 *    order from +0, in double for allreduce_f64 and in float for the f32
 *    ops; reduce_to_owners chains the running sum through the node leaders
 *    in the same order, with the same float additions as the MPI backend
 *    (comm/comm_mpi.c). Bit-identical across runs, node layouts, NCCL
 *    versions and algorithms, and to the MPI backend and one rank
 *    accumulating the same contributions. Cost: the owner (or each leader)
 *    holds every contribution of its block; sums on the host.
 *  - deterministic = false: ncclAllReduce / ncclReduce (reduce_to_owners:
 *    ncclReduce on the node communicator, then on the leaders'). NCCL
 *    guarantees the same bits for the same inputs only while the
 *    communicator sizes, the GPU topology, the NCCL version, the number of
 *    channels and the chosen algorithm/protocol (ring vs tree, LL/LL128/
 *    Simple; pin them with NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS)
 *    stay the same. It does not guarantee any particular summation order: a
 *    ring's order depends on each rank's position and the chunking on the
 *    message size, so results differ from the rank-order sum in the last
 *    bits, differ between the flat and the hierarchical path, and may change
 *    when any of those change. MAX is exact in both modes.
 *
 * Thread-safety: one thread per communicator (strata/comm.h's rule).
 */
#ifndef STRATA_COMM_COMM_NCCL_H
#define STRATA_COMM_COMM_NCCL_H

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
 * the call, file and line). Collectives never wait blindly: the stream is
 * polled with every communicator's ncclCommGetAsyncError, and a wait past
 * STRATA_NCCL_TIMEOUT_S seconds (default 600) fails with STRATA_ERR_TIMEOUT;
 * after either, destroy aborts the NCCL communicators (ncclCommAbort) instead
 * of waiting in ncclCommDestroy, and the comm's abort aborts them before
 * MPI_Abort. A failure inside an NCCL group closes the group first. */
STRATA_API strata_status strata_comm_nccl_create(const void *mpi_comm, bool deterministic,
                                                 strata_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_COMM_COMM_NCCL_H */
