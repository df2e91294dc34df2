/* strata/comm.h — the communication seam: ranks, owners and the collectives
 * the runtime needs (DESIGN.md "Distributed").
 *
 * A strata_comm is an interface struct of function pointers (as the backend
 * is) over some transport: the single-process backend here; MPI and NCCL
 * backends plug in behind the same table. The runtime never calls a
 * transport directly: every parameter has an owner rank, the step runs the
 * optimizer of the parameters this rank owns, and the global gradient norm
 * and the non-finite veto are scalar allreduces through this interface, so
 * every rank takes the same decision.
 *
 * Interface rules:
 *  - `iface->version` must equal STRATA_COMM_IFACE_VERSION; every slot not
 *    marked optional below is required (the self backend shows the trivial
 *    forms). The optional slots were appended at the end of the struct, so a
 *    table written with designated initializers before they existed leaves
 *    them NULL (the interface version is unchanged).
 *  - Buffers are host float32 (double for scalars); counts in elements.
 *  - Collectives are blocking and called by every rank in the same order
 *    (MPI's rule); a failure on any rank surfaces as an error on every rank.
 *  - Optional slots (NULL = absent, documented fallback): bytes, abort,
 *    destroy, and the non-blocking reduction ireduce_start/ireduce_test
 *    (both or neither; absent, the runtime reduces with the blocking
 *    reduce_to_owner / reduce_to_owners, as before these slots existed).
 *    A non-blocking reduction is posted by every rank in the same order as
 *    every other collective; a blocking collective on a communicator (or on
 *    one split from it) first completes every reduction still in flight, so
 *    no rank can sit in a blocking call while another waits for its part.
 *
 * Thread-safety: one thread per communicator at a time (the training thread).
 */
#ifndef STRATA_COMM_H
#define STRATA_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_COMM_IFACE_VERSION 1

typedef enum strata_reduce_op {
    STRATA_REDUCE_SUM = 0,
    STRATA_REDUCE_MAX = 1,
} strata_reduce_op;

typedef struct strata_comm strata_comm;

/* One non-blocking reduction (a caller-visible descriptor, so the hot path
 * never allocates): the sum over all ranks of buf[0..n), in the same order
 * as the blocking reduce_to_owners (deterministic transports: rank order
 * from +0), delivered into the buf of every rank listed in owners. The
 * caller fills the first block, hands the descriptor to
 * strata_comm_ireduce_start and must not touch buf, scratch, owners or the
 * descriptor until `done` (or strata_comm_request_wait) says it completed;
 * then the owners' buf holds the sum, other ranks' buf is unspecified. */
typedef struct strata_comm_request {
    /* caller */
    float *buf;          /* n floats: this rank's contribution; the owners' result */
    float *scratch;      /* n floats the transport may use until completion */
    size_t n;
    const int *owners;   /* n_owners >= 1 ranks that receive the sum */
    int n_owners;
    /* transport and communicator (read `done`; leave the rest alone) */
    bool done;
    int phase, tag, next_owner;
    void *impl[4];       /* transport state (e.g. two MPI requests) */
    strata_comm *comm;   /* the communicator it was started on */
    struct strata_comm_request *next; /* the communicator's in-flight list */
} strata_comm_request;

typedef struct strata_comm_iface {
    int version;      /* STRATA_COMM_IFACE_VERSION */
    const char *name; /* "self", "mpi", "nccl" */
    int (*rank)(void *ctx);       /* 0..size-1 */
    int (*size)(void *ctx);       /* >= 1 */
    int (*node_rank)(void *ctx);  /* rank within its node (shared-memory group) */
    int (*node_size)(void *ctx);  /* ranks on its node */
    /* vals[0..n) := op over ranks of vals[0..n), on every rank. */
    strata_status (*allreduce_f64)(void *ctx, double *vals, int n, strata_reduce_op op);
    /* Sum buf[0..n) over ranks into `owner`'s buf (others' buf unspecified after). */
    strata_status (*reduce_to_owner)(void *ctx, float *buf, size_t n, int owner);
    /* owner's buf[0..n) to every rank's buf. */
    strata_status (*broadcast_from_owner)(void *ctx, float *buf, size_t n, int owner);
    /* The tail: rank r contributes counts[r] floats at send; recv (size sum of
     * counts) gets them in rank order at displs[r], on every rank. */
    strata_status (*allgatherv_f32)(void *ctx, const float *send, float *recv,
                                    const size_t *counts, const size_t *displs);
    /* Sum send[0..sum counts) over ranks; rank r receives its piece
     * [displs[r], displs[r] + counts[r]) in recv. */
    strata_status (*reduce_scatter_f32)(void *ctx, const float *send, float *recv,
                                        const size_t *counts, const size_t *displs);
    strata_status (*barrier)(void *ctx);
    /* Sum buf[0..n) over ALL ranks; the sum lands in the buf of every rank
     * listed in owners[0..n_owners) (others' buf unspecified after). A
     * hierarchical transport reduces within each node first, then along the
     * node leaders, then ships the sum to the owners on other nodes. */
    strata_status (*reduce_to_owners)(void *ctx, float *buf, size_t n, const int *owners,
                                      int n_owners);
    /* A communicator over the ranks with the same `color`, ordered by `key`
     * (MPI_Comm_split). */
    strata_status (*split)(void *ctx, int color, int key, strata_comm **out);
    /* Optional: bytes this rank sent + received with peers on its node / on
     * other nodes since creation. NULL = not counted (reported as 0). */
    strata_status (*bytes)(void *ctx, uint64_t *intra_node, uint64_t *inter_node);
    /* Optional: end every rank of the job with exit status `code` (after an
     * error on this rank, so that no rank waits forever in a collective). */
    void (*abort)(void *ctx, int code);
    void (*destroy)(void *ctx);   /* may be NULL */
    /* Optional, both or neither: a non-blocking reduce_to_owners (see
     * strata_comm_request). ireduce_start posts `req` (req->done false, or
     * true when it completed at once) and never waits for another rank;
     * ireduce_test advances it as far as it can without blocking (the
     * communicator calls it from every progress and wait) and sets
     * req->done when this rank's part is complete: its buffers are free and,
     * on an owner, buf holds the sum. n > 0, owners valid (checked by the
     * caller). Errors: the transport's (STRATA_ERR_IO), STRATA_ERR_INVALID_ARG. */
    strata_status (*ireduce_start)(void *ctx, strata_comm_request *req);
    strata_status (*ireduce_test)(void *ctx, strata_comm_request *req);
} strata_comm_iface;

/* Wrap an implementation (backend authors). `iface` must outlive the handle;
 * `ctx` goes to every slot and to iface->destroy at strata_comm_destroy.
 * Errors: STRATA_ERR_INVALID_ARG (a missing slot, wrong version),
 * STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_comm_create(const strata_comm_iface *iface, void *ctx,
                                            strata_comm **out);

/* The single-process communicator: rank 0 of 1; every collective is the
 * identity (a copy where send and recv differ). Errors: STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_comm_self_create(strata_comm **out);

/* The MPI communicator over MPI_COMM_WORLD (initializing MPI, funneled
 * threads, if nobody did; strata_comm_destroy then finalizes it) or over a
 * caller's communicator (`mpi_comm` points to an MPI_Comm; strata duplicates
 * it). Nodes: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or blocks of
 * STRATA_RANKS_PER_NODE consecutive ranks when that variable is set (a
 * decimal integer >= 1, read once per process; the NCCL communicator parses
 * it alike).
 * deterministic: reductions sum in rank order (bit-identical to one rank
 * accumulating the same contributions); false: MPI's own reductions.
 * Errors: STRATA_ERR_UNSUPPORTED (built without MPI), STRATA_ERR_IO (an MPI
 * call failed, with its message), STRATA_ERR_INVALID_ARG (NULL;
 * STRATA_RANKS_PER_NODE not an integer >= 1, "STRATA_RANKS_PER_NODE='0':
 * must be an integer in [1, 2147483647]"), STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_comm_mpi_create(const void *mpi_comm, bool deterministic,
                                                strata_comm **out);

/* The NCCL communicator over `mpi_comm` (a pointer to an MPI_Comm, MPI
 * initialized by the caller; strata duplicates it, so the caller keeps its
 * own): collectives through NCCL (the interface's host buffers staged
 * through device buffers), each rank's GPU = node rank mod visible devices,
 * nodes as for
 * strata_comm_mpi_create, hierarchical node-local/leader sums when nodes are
 * blocks of consecutive ranks. deterministic: every sum in rank order on the
 * host, bit-identical to the MPI backend and to one rank; false: NCCL's own
 * reductions (same bits only for the same topology, NCCL version and
 * algorithm). Collective over mpi_comm. The full contract: comm/comm_nccl.h.
 * Only in builds with CUDA, libnccl and MPI (meson's 'nccl' feature); other
 * builds export it too and it returns STRATA_ERR_UNSUPPORTED.
 * Errors: STRATA_ERR_UNSUPPORTED (built without NCCL, or no CUDA device),
 * STRATA_ERR_INVALID_ARG (NULL), STRATA_ERR_NOMEM, STRATA_ERR_INTERNAL (an
 * NCCL, CUDA or MPI failure, with the call, file and line). */
STRATA_API strata_status strata_comm_nccl_create(const void *mpi_comm, bool deterministic,
                                                 strata_comm **out);

/* True when this process was started by an MPI launcher (mpirun sets
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK). */
STRATA_API bool strata_comm_mpi_launched(void);

/* Bytes sent + received with peers on this node and on other nodes (0 when
 * the transport does not count). */
STRATA_API void strata_comm_bytes(const strata_comm *c, uint64_t *intra_node,
                                  uint64_t *inter_node);

/* End the whole job with exit status `code` when the transport can (MPI:
 * MPI_Abort); a single process just returns. Use after an error on one rank
 * so that the others never hang in a collective. */
STRATA_API void strata_comm_abort(strata_comm *c, int code);

/* vals[0..n) := op over the ranks of vals[0..n), on every rank (a trainer's
 * losses and counters; the runtime's norms). Deterministic communicators sum
 * in rank order from +0. Collective. Errors: STRATA_ERR_INVALID_ARG, the
 * transport's (STRATA_ERR_IO). */
STRATA_API strata_status strata_comm_allreduce_f64(strata_comm *c, double *vals, int n,
                                                   strata_reduce_op op);

/* Wait for every rank. Collective. Errors: the transport's. */
STRATA_API strata_status strata_comm_barrier(strata_comm *c);

/* NULL is a no-op. */
STRATA_API void strata_comm_destroy(strata_comm *c);

STRATA_API const char *strata_comm_name(const strata_comm *c);
STRATA_API int strata_comm_rank(const strata_comm *c);
STRATA_API int strata_comm_size(const strata_comm *c);
STRATA_API int strata_comm_node_rank(const strata_comm *c);
STRATA_API int strata_comm_node_size(const strata_comm *c);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_COMM_H */
