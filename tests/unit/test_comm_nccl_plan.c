/* The NCCL communicator's host-side bookkeeping (comm/comm_nccl_plan.h),
 * without a GPU: the topology (node index/rank/size, consecutive blocks),
 * split by (color, key) against a plain sort, and the deterministic
 * hierarchical reduce_to_owners executed by every emulated rank through
 * mailboxes, exactly as comm_nccl.c drives NCCL send/recv: on random
 * topologies (blocks and scattered nodes) and owner sets, every owner gets
 * the rank-ordered sum from +0 bit for bit, every message sent is received,
 * no rank is left waiting, and the bytes split intra/inter node are those of
 * the schedule (one inter-node message per node boundary, plus the
 * shipping). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm_nccl_plan.h"

enum { MAXR = 16, NV = 37 };

static void test_topology(void **state)
{
    (void)state;
    const int blocks[6] = {7, 7, 3, 3, 3, 9};   /* nodes 0,1,2 as blocks */
    const int scattered[6] = {1, 2, 1, 2, 1, 2}; /* round-robin */
    strata_nccl_topo t;
    assert_int_equal(strata_nccl_topo_init(3, 6, blocks, &t), STRATA_OK);
    assert_true(t.contiguous);
    assert_int_equal(t.n_nodes, 3);
    assert_int_equal(t.node_index, 1);
    assert_int_equal(t.node_rank, 1);
    assert_int_equal(t.node_size, 3);
    assert_int_equal(strata_nccl_topo_init(5, 6, blocks, &t), STRATA_OK);
    assert_int_equal(t.node_index, 2);
    assert_int_equal(t.node_rank, 0);
    assert_int_equal(t.node_size, 1);
    assert_int_equal(strata_nccl_topo_init(4, 6, scattered, &t), STRATA_OK);
    assert_false(t.contiguous);
    assert_int_equal(t.n_nodes, 2);
    assert_int_equal(t.node_index, 0);
    assert_int_equal(t.node_rank, 2);
    assert_int_equal(t.node_size, 3);
    assert_int_equal(strata_nccl_topo_init(5, 6, scattered, &t), STRATA_OK);
    assert_int_equal(t.node_index, 1);
    assert_int_equal(t.node_rank, 2);
    assert_int_equal(strata_nccl_topo_init(6, 6, blocks, &t), STRATA_ERR_INVALID_ARG);
}

/* split against a plain (key, rank) sort of the ranks with my color */
static void test_split(void **state)
{
    (void)state;
    srand(7);
    for (int iter = 0; iter < 300; iter++) {
        const int n = 1 + rand() % MAXR;
        int colors[MAXR], keys[MAXR];
        for (int r = 0; r < n; r++) {
            colors[r] = rand() % 4 - (rand() % 8 == 0 ? 5 : 0); /* some MPI_UNDEFINED */
            keys[r] = rand() % 3;
        }
        for (int me = 0; me < n; me++) {
            int members[MAXR], size, rank;
            assert_int_equal(
                strata_nccl_split_members(n, colors, keys, me, members, &size, &rank),
                STRATA_OK);
            if (colors[me] < 0) {
                assert_int_equal(size, 0);
                assert_int_equal(rank, -1);
                continue;
            }
            int want[MAXR], m = 0;
            for (int r = 0; r < n; r++)
                if (colors[r] == colors[me])
                    want[m++] = r;
            for (int i = 1; i < m; i++) /* insertion sort by (key, rank) */
                for (int j = i; j > 0 && (keys[want[j]] < keys[want[j - 1]] ||
                                          (keys[want[j]] == keys[want[j - 1]] &&
                                           want[j] < want[j - 1]));
                     j--) {
                    const int x = want[j];
                    want[j] = want[j - 1];
                    want[j - 1] = x;
                }
            assert_int_equal(size, m);
            assert_memory_equal(members, want, (size_t)m * sizeof(int));
            assert_int_equal(members[rank], me);
        }
    }
}

/* ---- the reduce_to_owners schedule, run by emulated ranks */

typedef struct msg {
    bool full;
    float v[NV];
} msg;

static msg box[3][MAXR][MAXR]; /* kind (0 member, 1 chain, 2 ship), src, dst */

static float val(int r, int i)
{
    return (float)(0.1 * (double)(r + 1) + 1e-3 * (double)i) * (r % 3 == 1 ? -1.0f : 1.0f);
}

static void post(int kind, int src, int dst, const float *v)
{
    assert_false(box[kind][src][dst].full); /* one message at a time per channel */
    box[kind][src][dst].full = true;
    memcpy(box[kind][src][dst].v, v, sizeof box[kind][src][dst].v);
}

static bool take(int kind, int src, int dst, float *v)
{
    if (!box[kind][src][dst].full)
        return false;
    memcpy(v, box[kind][src][dst].v, sizeof box[kind][src][dst].v);
    box[kind][src][dst].full = false;
    return true;
}

typedef struct rank_state {
    strata_nccl_r2o p;
    float buf[NV];
    int phase; /* 0 start, 1 gathered+summed, 2 shipped/received, 3 done */
    float got[MAXR][NV];
    bool have[MAXR];
    uint64_t intra, inter;
} rank_state;

static void run_case(int n, const int *node_of, const int *owners, int n_owners,
                     uint64_t *intra_all, uint64_t *inter_all)
{
    static rank_state rs[MAXR];
    memset(box, 0, sizeof box);
    memset(rs, 0, sizeof rs);
    const uint64_t B = NV * sizeof(float);
    for (int r = 0; r < n; r++) {
        strata_nccl_topo t;
        assert_int_equal(strata_nccl_topo_init(r, n, node_of, &t), STRATA_OK);
        assert_int_equal(strata_nccl_r2o_plan(&t, node_of, owners, n_owners, &rs[r].p),
                         STRATA_OK);
        for (int i = 0; i < NV; i++)
            rs[r].buf[i] = val(r, i);
    }
    /* rounds: each rank does what it can; a round without progress with a
     * rank unfinished is a deadlock */
    int done = 0;
    for (int round = 0; done < n; round++) {
        assert_true(round < 4 * n + 8);
        bool progress = false;
        for (int r = 0; r < n; r++) {
            rank_state *s = &rs[r];
            const strata_nccl_r2o *p = &s->p;
            if (s->phase == 0) {
                if (p->send_to >= 0) {
                    post(0, r, p->send_to, s->buf);
                    strata_nccl_count(node_of, r, p->send_to, B, &s->intra, &s->inter);
                    s->phase = 1;
                    progress = true;
                } else if (p->gatherer == r) {
                    for (int k = 0; k < p->n_gather; k++) {
                        const int q = p->gather_from[k];
                        if (!s->have[q] && take(0, q, r, s->got[q])) {
                            s->have[q] = true;
                            strata_nccl_count(node_of, r, q, B, &s->intra, &s->inter);
                            progress = true;
                        }
                    }
                    bool all = true;
                    for (int k = 0; k < p->n_gather; k++)
                        all &= s->have[p->gather_from[k]];
                    float prev[NV];
                    if (!all || (p->recv_prev >= 0 && !take(1, p->recv_prev, r, prev)))
                        continue;
                    if (p->recv_prev >= 0)
                        strata_nccl_count(node_of, r, p->recv_prev, B, &s->intra, &s->inter);
                    const float *c[MAXR];
                    for (int q = p->block_a; q < p->block_b; q++)
                        c[q - p->block_a] = q == r ? s->buf : s->got[q];
                    strata_nccl_sum_block(s->buf, NV, p->recv_prev >= 0 ? prev : NULL, c,
                                          p->block_b - p->block_a);
                    if (p->send_next >= 0) {
                        post(1, r, p->send_next, s->buf);
                        strata_nccl_count(node_of, r, p->send_next, B, &s->intra, &s->inter);
                    }
                    s->phase = 1;
                    progress = true;
                } else {
                    s->phase = 1; /* not in any block: cannot happen */
                    fail_msg("rank %d is in no block", r);
                }
            } else if (s->phase == 1) {
                if (r == p->holder) {
                    for (int k = 0; k < p->n_ship; k++) {
                        post(2, r, p->ship_to[k], s->buf);
                        strata_nccl_count(node_of, r, p->ship_to[k], B, &s->intra, &s->inter);
                    }
                } else if (p->ship_from >= 0) {
                    if (!take(2, p->ship_from, r, s->buf))
                        continue;
                    strata_nccl_count(node_of, r, p->ship_from, B, &s->intra, &s->inter);
                }
                s->phase = 3;
                done++;
                progress = true;
            }
        }
        assert_true(progress);
    }
    /* every message was received */
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++)
                assert_false(box[k][a][b].full);
    for (int k = 0; k < n_owners; k++) {
        const int o = owners[k];
        for (int i = 0; i < NV; i++) {
            float want = 0.0f;
            for (int r = 0; r < n; r++)
                want += val(r, i);
            assert_memory_equal(&rs[o].buf[i], &want, sizeof want);
        }
    }
    *intra_all = *inter_all = 0;
    for (int r = 0; r < n; r++) {
        *intra_all += rs[r].intra;
        *inter_all += rs[r].inter;
    }
}

static void test_reduce_to_owners(void **state)
{
    (void)state;
    srand(11);
    int cases = 0, hier = 0;
    for (int iter = 0; iter < 400; iter++) {
        const int n = 1 + rand() % MAXR;
        int node_of[MAXR];
        const bool blocks = rand() % 3 != 0;
        if (blocks) { /* consecutive blocks of random sizes */
            int node = 0;
            for (int r = 0; r < n; r++) {
                if (r > 0 && rand() % 3 == 0)
                    node++;
                node_of[r] = 10 * node + 5;
            }
        } else {
            for (int r = 0; r < n; r++)
                node_of[r] = rand() % 3;
        }
        int owners[MAXR], n_owners = 1 + rand() % 3;
        for (int k = 0; k < n_owners; k++)
            owners[k] = rand() % n; /* duplicates allowed */
        uint64_t intra, inter;
        run_case(n, node_of, owners, n_owners, &intra, &inter);
        /* the expected inter-node bytes (sent + received, both ends) */
        strata_nccl_topo t;
        assert_int_equal(strata_nccl_topo_init(0, n, node_of, &t), STRATA_OK);
        const uint64_t B = NV * sizeof(float);
        uint64_t want_inter = 0;
        strata_nccl_r2o p;
        assert_int_equal(strata_nccl_r2o_plan(&t, node_of, owners, n_owners, &p), STRATA_OK);
        const int holder = p.holder;
        if (t.contiguous && t.n_nodes > 1) {
            want_inter += 2 * B * (uint64_t)(t.n_nodes - 1); /* the leaders' chain */
            hier++;
        } else {
            for (int r = 0; r < n; r++)
                if (r != holder && node_of[r] != node_of[holder])
                    want_inter += 2 * B;
        }
        for (int k = 0; k < n_owners; k++) {
            bool dup = owners[k] == holder;
            for (int j = 0; j < k && !dup; j++)
                dup = owners[j] == owners[k];
            if (!dup && node_of[owners[k]] != node_of[holder])
                want_inter += 2 * B;
        }
        assert_int_equal(inter, want_inter);
        cases++;
    }
    print_message("%d schedules (%d hierarchical) ran to the rank-ordered sum on every owner\n",
                  cases, hier);
    assert_true(hier > 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_reduce_to_owners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
