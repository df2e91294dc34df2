/* The NCCL communicator's host-side bookkeeping (comm_nccl_plan.h). */
#include "comm/comm_nccl_plan.h"

#include <stdlib.h>

strata_status strata_nccl_topo_init(int rank, int size, const int *node_of,
                                    strata_nccl_topo *out)
{
    if (!node_of || !out || size < 1 || rank < 0 || rank >= size)
        return strata_error(STRATA_ERR_INVALID_ARG, "nccl topo: bad rank %d of %d", rank, size);
    *out = (strata_nccl_topo){.rank = rank, .size = size, .contiguous = true};
    int my_first = rank; /* the lowest rank of my node */
    while (my_first > 0) {
        int q = my_first - 1;
        while (q >= 0 && node_of[q] != node_of[rank])
            q--;
        if (q < 0)
            break;
        my_first = q;
    }
    for (int r = 0; r < size; r++) {
        bool first = true; /* r is the lowest rank of its node */
        for (int q = 0; q < r && first; q++)
            first = node_of[q] != node_of[r];
        out->n_nodes += first;
        out->node_index += first && r < my_first;
        /* a node seen before, but not right before r: not a block */
        if (!first && node_of[r - 1] != node_of[r])
            out->contiguous = false;
        if (node_of[r] == node_of[rank]) {
            out->node_rank += r < rank;
            out->node_size++;
        }
    }
    return STRATA_OK;
}

strata_status strata_nccl_split_members(int size, const int *colors, const int *keys, int me,
                                        int *members, int *new_size, int *new_rank)
{
    if (!colors || !keys || !new_size || !new_rank || size < 1 || me < 0 || me >= size)
        return strata_error(STRATA_ERR_INVALID_ARG, "nccl split: bad arguments");
    *new_size = 0;
    *new_rank = -1;
    if (colors[me] < 0)
        return STRATA_OK;
    /* insertion by (key, rank): small communicators, no allocation */
    int n = 0;
    for (int r = 0; r < size; r++) {
        if (colors[r] != colors[me])
            continue;
        int before = 0; /* members that sort before r */
        for (int q = 0; q < size; q++)
            if (q != r && colors[q] == colors[me] &&
                (keys[q] < keys[r] || (keys[q] == keys[r] && q < r)))
                before++;
        if (members)
            members[before] = r;
        if (r == me)
            *new_rank = before;
        n++;
    }
    *new_size = n;
    return STRATA_OK;
}

strata_status strata_nccl_r2o_plan(const strata_nccl_topo *t, const int *node_of,
                                   const int *owners, int n_owners, strata_nccl_r2o *out)
{
    if (!t || !node_of || !owners || !out || n_owners < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "nccl reduce_to_owners: no owners");
    for (int k = 0; k < n_owners; k++)
        if (owners[k] < 0 || owners[k] >= t->size)
            return strata_error(STRATA_ERR_INVALID_ARG, "nccl reduce_to_owners: owner %d of %d",
                                owners[k], t->size);
    if (n_owners > STRATA_NCCL_MAX_GATHER)
        return strata_error(STRATA_ERR_UNSUPPORTED, "nccl reduce_to_owners: %d owners",
                            n_owners);
    const int me = t->rank, N = t->size;
    strata_nccl_r2o *p = out;
    *p = (strata_nccl_r2o){.send_to = -1, .recv_prev = -1, .send_next = -1, .ship_from = -1};
    if (!t->contiguous || t->n_nodes == 1) {
        p->holder = owners[0];
        p->gatherer = p->holder;
        p->block_a = 0;
        p->block_b = N;
    } else {
        int a = me, b = me + 1;
        while (a > 0 && node_of[a - 1] == node_of[me])
            a--;
        while (b < N && node_of[b] == node_of[me])
            b++;
        int last_a = N - 1;
        while (last_a > 0 && node_of[last_a - 1] == node_of[N - 1])
            last_a--;
        p->holder = last_a;
        p->gatherer = a;
        p->block_a = a;
        p->block_b = b;
        if (me == a && a > 0) {
            int pa = a - 1;
            while (pa > 0 && node_of[pa - 1] == node_of[a - 1])
                pa--;
            p->recv_prev = pa;
        }
        if (me == a && b < N)
            p->send_next = b;
    }
    if (p->block_b - p->block_a - 1 > STRATA_NCCL_MAX_GATHER)
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "nccl reduce_to_owners: %d ranks in one gather (at most %d)",
                            p->block_b - p->block_a, STRATA_NCCL_MAX_GATHER + 1);
    if (me == p->gatherer) {
        for (int r = p->block_a; r < p->block_b; r++)
            if (r != me)
                p->gather_from[p->n_gather++] = r;
    } else if (me >= p->block_a && me < p->block_b) {
        p->send_to = p->gatherer;
    }
    for (int k = 0; k < n_owners; k++) {
        const int o = owners[k];
        bool dup = o == p->holder;
        for (int j = 0; j < k && !dup; j++)
            dup = owners[j] == o;
        if (dup)
            continue;
        if (me == p->holder)
            p->ship_to[p->n_ship++] = o;
        else if (me == o)
            p->ship_from = p->holder;
    }
    return STRATA_OK;
}

void strata_nccl_sum_block(float *out, size_t n, const float *prev, const float *const *c, int k)
{
    for (size_t i = 0; i < n; i++) {
        float s = prev ? prev[i] : 0.0f;
        for (int j = 0; j < k; j++)
            s += c[j][i];
        out[i] = s;
    }
}

void strata_nccl_count(const int *node_of, int me, int peer, uint64_t bytes, uint64_t *intra,
                       uint64_t *inter)
{
    if (node_of[peer] == node_of[me])
        *intra += bytes;
    else
        *inter += bytes;
}
