/* comm/comm_nccl_plan.h — the host-side bookkeeping of the NCCL
 * communicator (internal; plain C, built and tested without CUDA or NCCL:
 * tests/unit/test_comm_nccl_plan.c).
 *
 * What lives here is everything comm_nccl.c decides on the host, so that a
 * machine without a GPU checks it:
 *  - the topology: each rank's node (MPI_COMM_TYPE_SHARED or blocks of
 *    STRATA_RANKS_PER_NODE), whether nodes are blocks of consecutive ranks,
 *    the node index, rank and size (what the node-local and cross-node NCCL
 *    communicators are split by);
 *  - split: the members, new rank and size of a communicator split by
 *    (color, key), MPI_Comm_split's rule (ncclCommSplit follows it too);
 *  - the deterministic hierarchical reduce_to_owners: which rank sends its
 *    contribution to which, the chain of node leaders, the final shipping to
 *    the owners, and the rank-ordered sum itself;
 *  - the byte counters, split by whether the peer is on this rank's node.
 */
#ifndef STRATA_COMM_COMM_NCCL_PLAN_H
#define STRATA_COMM_COMM_NCCL_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

/* Most ranks one rank gathers from in one reduce_to_owners (a node's
 * members, or every rank when nodes are not consecutive blocks). */
#define STRATA_NCCL_MAX_GATHER 256

typedef struct strata_nccl_topo {
    int rank, size;
    int node_rank, node_size; /* within my node, ordered by rank */
    int n_nodes;
    int node_index;           /* my node, numbered 0.. in order of its lowest rank */
    bool contiguous;          /* every node is a block of consecutive ranks */
} strata_nccl_topo;

/* The topology of `rank` among `size` ranks whose node ids are node_of[0..size)
 * (any ints: equal id, same node). Errors: STRATA_ERR_INVALID_ARG (NULL,
 * size < 1, rank out of range). */
strata_status strata_nccl_topo_init(int rank, int size, const int *node_of,
                                    strata_nccl_topo *out);

/* Split by (color, key) as MPI_Comm_split does: the ranks with my color,
 * ordered by (key, rank). members[0..*new_size) gets their ranks (members may
 * be NULL), *new_rank my position. color < 0 (MPI_UNDEFINED) gives
 * *new_size = 0 and *new_rank = -1. Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_nccl_split_members(int size, const int *colors, const int *keys, int me,
                                        int *members, int *new_size, int *new_rank);

/* One rank's part of the deterministic reduce_to_owners (sum over every
 * rank, in rank order from +0, delivered to each owner):
 *  - nodes are consecutive blocks (and there are several): each node's
 *    leader (its lowest rank) gathers its members, receives the running sum
 *    from the previous node's leader (one inter-node message per node
 *    boundary), adds its block in rank order and passes the sum to the next
 *    node's leader; the last leader holds the total;
 *  - otherwise one block of every rank, gathered by owners[0], the holder;
 *  - the holder ships the total to every other owner.
 * The same schedule and the same float additions as the MPI backend's
 * (comm/comm_mpi.c), so both give the same bits. */
typedef struct strata_nccl_r2o {
    int holder;                /* the rank that ends with the total */
    int gatherer;              /* my block's gatherer (me when I gather) */
    int send_to;               /* -1, or the gatherer I send my contribution to */
    int n_gather;              /* gatherer: ranks it receives from, ascending */
    int gather_from[STRATA_NCCL_MAX_GATHER];
    int block_a, block_b;      /* my block [a, b): the ranks summed, in order */
    int recv_prev;             /* gatherer: -1 or the previous block's gatherer */
    int send_next;             /* gatherer: -1 or the next block's gatherer */
    int ship_from;             /* an owner other than the holder: the holder; else -1 */
    int n_ship;                /* the holder: the other owners it ships to */
    int ship_to[STRATA_NCCL_MAX_GATHER];
} strata_nccl_r2o;

/* Errors: STRATA_ERR_INVALID_ARG (NULL, an owner out of range, no owner),
 * STRATA_ERR_UNSUPPORTED (a block or the owner list larger than
 * STRATA_NCCL_MAX_GATHER). */
strata_status strata_nccl_r2o_plan(const strata_nccl_topo *t, const int *node_of,
                                   const int *owners, int n_owners, strata_nccl_r2o *out);

/* The gatherer's sum over its block: out[i] = ((prev ? prev[i] : +0) +
 * c[0][i]) + c[1][i] + ..., c[j] the contribution of rank block_a + j
 * (float additions in that order). out may alias one of the inputs only if
 * it is c[0] or prev. */
void strata_nccl_sum_block(float *out, size_t n, const float *prev, const float *const *c, int k);

/* Count `bytes` exchanged with `peer` as intra-node (same node id as `me`)
 * or inter-node. */
void strata_nccl_count(const int *node_of, int me, int peer, uint64_t bytes, uint64_t *intra,
                       uint64_t *inter);

#endif
