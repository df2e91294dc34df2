/* The replica set of an HSDP layout (engine/engine.h): three
 * sub-communicators of the world and the tables that route a broadcast
 * through the node leaders.
 *
 * Objects: `set` (the G replicas, ordered by group), `node` (the replicas on
 * this rank's node, ordered by group: its leader is index 0), `leaders` (the
 * node leaders, ordered by group; the non-leaders share another
 * communicator of the same split that is never used). The tables are the
 * same on every replica (built from one allreduce), so every replica picks
 * the same roots for the three stages of a broadcast.
 */
#include "engine/engine.h"

#include <stdlib.h>

#include "comm/comm.h"

struct strata_replicas {
    strata_comm *world;
    strata_comm *set, *node, *leaders;
    int g, G;
    int *leader;   /* per replica: the group index of its node's leader */
    int *node_idx; /* per replica: its index in its node communicator */
    int *lead_idx; /* per replica: its node leader's index in the leaders communicator */
};

strata_status strata_replicas_create(strata_comm *world, int group_size, strata_replicas **out)
{
    if (!world || !out || group_size < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "replicas_create: bad arguments");
    *out = NULL;
    const int N = strata_comm_size(world), w = strata_comm_rank(world), K = group_size;
    if (N % K != 0 || N / K < 2)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "replicas_create: group size %d must divide the world (%d) at least "
                            "twice", K, N);
    strata_replicas *r = calloc(1, sizeof *r);
    double *keys = calloc((size_t)N, sizeof *keys);
    if (!r || !keys) {
        free(r);
        free(keys);
        return strata_error(STRATA_ERR_NOMEM, "replicas_create: out of memory");
    }
    r->world = world;
    r->G = N / K;
    r->g = w / K;
    const int q = w % K, G = r->G;
    r->leader = calloc((size_t)G, sizeof *r->leader);
    r->node_idx = calloc((size_t)G, sizeof *r->node_idx);
    r->lead_idx = calloc((size_t)G, sizeof *r->lead_idx);
    strata_status st = r->leader && r->node_idx && r->lead_idx
                           ? STRATA_OK
                           : strata_error(STRATA_ERR_NOMEM, "replicas_create: out of memory");
    /* Every rank's node, named by its lowest world rank (consecutive nodes). */
    keys[w] = (double)(w - strata_comm_node_rank(world));
    if (st == STRATA_OK)
        st = strata_comm_allreduce_f64(world, keys, N, STRATA_REDUCE_SUM);
    if (st == STRATA_OK) {
        for (int g = 0; g < G; g++) {
            const double nk = keys[g * K + q];
            int lead = g, idx = 0;
            for (int h = g - 1; h >= 0; h--)
                if (keys[h * K + q] == nk) {
                    lead = h;
                    idx++;
                }
            r->leader[g] = lead;
            r->node_idx[g] = idx;
        }
        for (int g = 0; g < G; g++) {
            int li = 0;
            for (int l = 0; l < r->leader[g]; l++)
                li += r->leader[l] == l;
            r->lead_idx[g] = li;
        }
    }
    free(keys);
    if (st == STRATA_OK)
        st = strata_comm_split(world, q, w, &r->set);
    if (st == STRATA_OK)
        st = strata_comm_split(r->set, r->leader[r->g], r->g, &r->node);
    if (st == STRATA_OK)
        st = strata_comm_split(r->set, r->leader[r->g] == r->g ? 0 : 1, r->g, &r->leaders);
    if (st != STRATA_OK) {
        strata_replicas_destroy(r);
        return st;
    }
    *out = r;
    return STRATA_OK;
}

int strata_replicas_index(const strata_replicas *r)
{
    return r ? r->g : 0;
}

int strata_replicas_count(const strata_replicas *r)
{
    return r ? r->G : 1;
}

strata_status strata_replicas_broadcast(strata_replicas *r, void *buf, size_t bytes, int root,
                                        uint64_t *intra_node, uint64_t *inter_node)
{
    if (!r || (!buf && bytes) || root < 0 || root >= r->G || bytes % 4 != 0)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "replicas_broadcast: bad arguments (root %d of %d, %zu bytes)", root,
                            r ? r->G : 0, bytes);
    uint64_t i0, e0;
    strata_comm_bytes(r->world, &i0, &e0);
    const size_t n = bytes / 4;
    const int me = r->g, lc = r->leader[root];
    strata_status st = STRATA_OK;
    /* 1. the root's node; 2. the leaders; 3. every other node from its leader. */
    if (r->leader[me] == lc)
        st = strata_comm_broadcast_from_owner(r->node, buf, n, r->node_idx[root]);
    if (st == STRATA_OK && r->leader[me] == me)
        st = strata_comm_broadcast_from_owner(r->leaders, buf, n, r->lead_idx[root]);
    if (st == STRATA_OK && r->leader[me] != lc)
        st = strata_comm_broadcast_from_owner(r->node, buf, n, 0);
    uint64_t i1, e1;
    strata_comm_bytes(r->world, &i1, &e1);
    if (intra_node)
        *intra_node += i1 - i0;
    if (inter_node)
        *inter_node += e1 - e0;
    return st;
}

void strata_replicas_destroy(strata_replicas *r)
{
    if (!r)
        return;
    strata_comm_destroy(r->leaders);
    strata_comm_destroy(r->node);
    strata_comm_destroy(r->set);
    free(r->leader);
    free(r->node_idx);
    free(r->lead_idx);
    free(r);
}
