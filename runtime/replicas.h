/* runtime/replicas.h — the replica set of an HSDP layout (internal).
 *
 * With shard groups (strata_config.shard_group_size = K, world = G x K) a
 * matrix is owned by rank g K + q in every group g: its G owners form a
 * *replica set* and hold bit-identical optimizer state. The replicas object
 * is this rank's view of its replica set: the communicator of the G ranks
 * with the same index q within their group (ordered by group), split once
 * more by node so that a broadcast goes through the node leaders:
 *
 *     root -> its node's other replicas            (intra-node)
 *          -> the leader of every other node       (one inter-node copy per node)
 *          -> the other replicas on those nodes    (intra-node)
 *
 * A node leader is the replica with the lowest group index on its node.
 * Nodes are the communicator's (MPI_COMM_TYPE_SHARED, or blocks of
 * STRATA_RANKS_PER_NODE ranks): a node is identified by its lowest world
 * rank, which holds for nodes made of consecutive ranks (what both give with
 * mpirun's default mapping); any other layout still delivers the same bytes
 * to every replica, only its node/leader routing is then not minimal.
 *
 * Life: created collectively over the world communicator (strata_create),
 * destroyed by strata_destroy. Threading: the training thread only (every
 * call is a collective of the replica set or of the world).
 */
#ifndef STRATA_RUNTIME_REPLICAS_H
#define STRATA_RUNTIME_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/comm.h"

typedef struct strata_replicas strata_replicas;

/* Collective over `world` (every rank calls it with the same K): this rank's
 * replica set, K = group_size ranks per group, G = world size / K > 1
 * groups. Errors: STRATA_ERR_INVALID_ARG (K does not divide the world, or
 * G < 2), STRATA_ERR_NOMEM, the transport's (STRATA_ERR_IO). */
strata_status strata_replicas_create(strata_comm *world, int group_size, strata_replicas **out);

/* This rank's group index g in [0, G), and G. */
int strata_replicas_index(const strata_replicas *r);
int strata_replicas_count(const strata_replicas *r);

/* Collective over the replica set: `bytes` of replica `root`'s buf to every
 * replica's buf, through the node leaders (above). bytes must be a multiple
 * of 4 (the transport moves float32 words; the bytes are copied bit for bit,
 * so any content travels). Adds the bytes this rank sent + received to
 * *intra_node / *inter_node (may be NULL). Errors: STRATA_ERR_INVALID_ARG
 * (bad root, bytes % 4 != 0), the transport's (STRATA_ERR_IO). */
strata_status strata_replicas_broadcast(strata_replicas *r, void *buf, size_t bytes, int root,
                                        uint64_t *intra_node, uint64_t *inter_node);

/* NULL is a no-op. Frees the sub-communicators. */
void strata_replicas_destroy(strata_replicas *r);

#endif
