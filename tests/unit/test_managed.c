/* Managed weights (strata.h, "managed weights"; issue #9 item 3, ZeRO-3):
 * strata_param_desc.managed, strata_param_data, strata_layer_materialize /
 * strata_layer_release and the release points, and stats.param_bytes(_peak)
 * and largest_layer_bytes, on one process pretending to be rank R of 2.
 *
 * The pretend communicator: rank R of 2, every reduction the identity (so
 * the owner plan that rank 0 would broadcast arrives as zeros: every
 * parameter is rank 0's), and a broadcast from another rank writes a known
 * pattern (what that owner would have sent) and is counted. The multi-rank
 * run itself (bit-identity, measured peaks) is tests/mpi/test_mpi_train.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strata/comm.h"
#include "strata/strata.h"

typedef struct fake {
    int rank;
    int broadcasts;       /* broadcasts this rank received */
    int sends;            /* broadcasts this rank sent (its owned parameters) */
} fake;

static int f_rank(void *ctx) { return ((fake *)ctx)->rank; }
static int f_size(void *ctx) { (void)ctx; return 2; }
static int f_zero(void *ctx) { (void)ctx; return 0; }

static strata_status f_allreduce(void *ctx, double *v, int n, strata_reduce_op op)
{
    (void)ctx, (void)v, (void)n, (void)op;
    return STRATA_OK;
}

static strata_status f_reduce(void *ctx, float *buf, size_t n, int owner)
{
    (void)ctx, (void)buf, (void)n, (void)owner;
    return STRATA_OK;
}

/* What owner `owner` "sends": 1000 (owner + 1) + i. */
static strata_status f_bcast(void *ctx, float *buf, size_t n, int owner)
{
    fake *f = ctx;
    if (owner == f->rank) {
        f->sends++;
        return STRATA_OK;
    }
    f->broadcasts++;
    for (size_t i = 0; i < n; i++)
        buf[i] = 1000.0f * (float)(owner + 1) + (float)i;
    return STRATA_OK;
}

static strata_status f_gatherv(void *ctx, const float *s, float *r, const size_t *c,
                               const size_t *d)
{
    (void)ctx, (void)s, (void)r, (void)c, (void)d;
    return STRATA_ERR_UNSUPPORTED;
}

static strata_status f_owners(void *ctx, float *buf, size_t n, const int *o, int no)
{
    (void)ctx, (void)buf, (void)n, (void)o, (void)no;
    return STRATA_OK;
}

static strata_status f_barrier(void *ctx)
{
    (void)ctx;
    return STRATA_OK;
}

static strata_status f_split(void *ctx, int color, int key, strata_comm **out)
{
    (void)ctx, (void)color, (void)key, (void)out;
    return STRATA_ERR_UNSUPPORTED;
}

static const strata_comm_iface fake_iface = {
    .version = STRATA_COMM_IFACE_VERSION, .name = "fake", .rank = f_rank, .size = f_size,
    .node_rank = f_zero, .node_size = f_size, .allreduce_f64 = f_allreduce,
    .reduce_to_owner = f_reduce, .broadcast_from_owner = f_bcast, .allgatherv_f32 = f_gatherv,
    .reduce_scatter_f32 = f_gatherv, .barrier = f_barrier, .reduce_to_owners = f_owners,
    .split = f_split,
};

/* Three parameters: a (4 x 4) and b (4) in layer 0, c (8 x 4) in layer 1. */
enum { NA = 16, NB = 4, NC = 32 };

typedef struct setup {
    fake f;
    strata_comm *comm;
    strata_runtime *rt;
    float w[NA + NB + NC], g[NA + NB + NC];
} setup;

static void setup_create(setup *s, int rank, strata_sharding sharding, bool self)
{
    memset(s, 0, sizeof *s);
    s->f.rank = rank;
    if (self)
        assert_int_equal(strata_comm_self_create(&s->comm), STRATA_OK);
    else
        assert_int_equal(strata_comm_create(&fake_iface, &s->f, &s->comm), STRATA_OK);
    strata_config cfg;
    assert_int_equal(strata_config_default(&cfg), STRATA_OK);
    cfg.matrix_optimizer = STRATA_OPTIM_MUON;
    cfg.comm = s->comm;
    cfg.sharding = sharding;
    assert_int_equal(strata_create(&cfg, &s->rt), STRATA_OK);
    for (int i = 0; i < NA + NB + NC; i++) {
        s->w[i] = 0.01f * (float)(i + 1);
        s->g[i] = 0.001f * (float)((i % 7) - 3);
    }
    const strata_param_desc d[3] = {
        {.name = "a", .ndim = 2, .shape = {4, 4}, .layer = 0, .data = s->w, .grad = s->g,
         .managed = true},
        {.name = "b", .ndim = 1, .shape = {4}, .layer = 0, .data = s->w + NA,
         .grad = s->g + NA, .managed = true},
        {.name = "c", .ndim = 2, .shape = {8, 4}, .layer = 1, .data = s->w + NA + NB,
         .grad = s->g + NA + NB, .managed = true},
    };
    for (int i = 0; i < 3; i++)
        assert_int_equal(strata_param_add(s->rt, &d[i], NULL), STRATA_OK);
}

static void setup_destroy(setup *s)
{
    strata_destroy(s->rt);
    strata_comm_destroy(s->comm);
}

static strata_stats stats(const setup *s)
{
    strata_stats st;
    assert_int_equal(strata_stats_get(s->rt, &st), STRATA_OK);
    return st;
}

/* A rank that owns nothing: nothing resident until a layer is materialized,
 * one buffer per held layer, each release point drops it. */
static void test_non_owner_lifetime(void **state)
{
    (void)state;
    setup s;
    setup_create(&s, 1, STRATA_SHARD_OWNER, false);
    float *p = (float *)0x1;
    assert_int_equal(strata_param_data(s.rt, 0, &p), STRATA_ERR_STATE); /* before commit */
    assert_null(p);
    assert_int_equal(strata_commit(s.rt), STRATA_OK);
    float before[NA + NB + NC];
    memcpy(before, s.w, sizeof before);
    strata_param_layout lo;
    assert_int_equal(strata_param_layout_get(s.rt, 2, &lo), STRATA_OK);
    assert_int_equal(lo.owner, 0);
    strata_stats st = stats(&s);
    assert_int_equal(st.param_bytes, 0);
    assert_int_equal(st.largest_layer_bytes, NC * sizeof(float));
    assert_int_equal(strata_param_data(s.rt, 0, &p), STRATA_ERR_STATE); /* not materialized */
    assert_null(p);

    /* Forward of layer 0: both of its parameters arrive from rank 0. */
    assert_int_equal(strata_hook_forward(s.rt, 0), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 2);
    float *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(strata_param_data(s.rt, 0, &a), STRATA_OK);
    assert_int_equal(strata_param_data(s.rt, 1, &b), STRATA_OK);
    assert_true(a != s.w && b != s.w + NA && (b >= a + NA || a >= b + NB));
    for (int i = 0; i < NA; i++)
        assert_true(a[i] == 1000.0f + (float)i);
    for (int i = 0; i < NB; i++)
        assert_true(b[i] == 1000.0f + (float)i);
    assert_int_equal(stats(&s).param_bytes, (NA + NB) * sizeof(float));
    /* Held: asking again (the backward pre-hook) moves nothing. */
    assert_int_equal(strata_layer_materialize(s.rt, 0), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 2);

    /* Two layers at once, then release the first. */
    assert_int_equal(strata_hook_forward(s.rt, 1), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 3);
    assert_int_equal(strata_param_data(s.rt, 2, &c), STRATA_OK);
    assert_int_equal(stats(&s).param_bytes, (NA + NB + NC) * sizeof(float));
    assert_int_equal(strata_layer_release(s.rt, 0), STRATA_OK);
    assert_int_equal(strata_param_data(s.rt, 0, &a), STRATA_ERR_STATE);
    assert_int_equal(strata_layer_release(s.rt, 0), STRATA_OK); /* not held: fine */
    assert_int_equal(stats(&s).param_bytes, NC * sizeof(float));

    /* Backward: layer 1 is still held; its backward hook releases it; layer
     * 0 comes back for its backward (a second broadcast). */
    assert_int_equal(strata_layer_materialize(s.rt, 1), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 3);
    assert_int_equal(strata_hook_backward(s.rt, 1), STRATA_OK);
    assert_int_equal(strata_param_data(s.rt, 2, &c), STRATA_ERR_STATE);
    assert_int_equal(strata_layer_materialize(s.rt, 0), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 5);
    assert_int_equal(strata_hook_backward(s.rt, 0), STRATA_OK);
    st = stats(&s);
    assert_int_equal(st.param_bytes, 0);
    assert_int_equal(st.param_bytes_peak, (NA + NB + NC) * sizeof(float));

    /* A layer held across strata_step is released by it, and the next
     * forward receives it again (the owner's weights changed). */
    assert_int_equal(strata_hook_forward(s.rt, 1), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 6);
    assert_int_equal(strata_hook_backward(s.rt, 0), STRATA_OK);
    assert_int_equal(strata_step(s.rt), STRATA_OK);
    assert_int_equal(strata_param_data(s.rt, 2, &c), STRATA_ERR_STATE);
    assert_int_equal(stats(&s).param_bytes, 0);
    assert_int_equal(strata_layer_materialize(s.rt, 1), STRATA_OK);
    assert_int_equal(s.f.broadcasts, 7);
    assert_int_equal(s.f.sends, 0);

    /* The caller's initial values were read, never written. */
    assert_memory_equal(before, s.w, sizeof before);
    assert_int_equal(strata_layer_materialize(s.rt, -1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_layer_release(s.rt, -1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_data(s.rt, 3, &p), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_param_data(s.rt, 0, NULL), STRATA_ERR_INVALID_ARG);
    setup_destroy(&s);
}

/* Rank 0 plans for real (the pretend allreduce keeps its plan): each
 * parameter it owns gets strata's own copy of the initial values, resident
 * throughout and updated by the step; the caller's buffer is left alone
 * after commit. The ones it does not own behave as above. */
static void test_owner_copy(void **state)
{
    (void)state;
    setup s;
    setup_create(&s, 0, STRATA_SHARD_OWNER, false);
    assert_int_equal(strata_commit(s.rt), STRATA_OK);
    const size_t off[3] = {0, NA, NA + NB}, num[3] = {NA, NB, NC};
    const int layer[3] = {0, 0, 1};
    float init[NA + NB + NC];
    memcpy(init, s.w, sizeof init);
    float *mine[3] = {NULL, NULL, NULL};
    size_t owned = 0, layer_bytes[2] = {0, 0};
    int n_owned = 0;
    for (int i = 0; i < 3; i++) {
        strata_param_layout lo;
        assert_int_equal(strata_param_layout_get(s.rt, i, &lo), STRATA_OK);
        if (lo.owner != 0) {
            assert_int_equal(strata_param_data(s.rt, i, &mine[i]), STRATA_ERR_STATE);
            layer_bytes[layer[i]] += num[i] * sizeof(float);
            continue;
        }
        assert_int_equal(strata_param_data(s.rt, i, &mine[i]), STRATA_OK);
        assert_true(mine[i] != s.w + off[i]);
        assert_memory_equal(mine[i], s.w + off[i], num[i] * sizeof(float));
        owned += num[i] * sizeof(float);
        n_owned++;
    }
    assert_true(n_owned > 0);
    memset(s.w, 0, sizeof s.w); /* the caller may drop its copy after commit */
    strata_stats st = stats(&s);
    assert_int_equal(st.param_bytes, owned);
    assert_int_equal(st.largest_layer_bytes,
                     layer_bytes[0] > layer_bytes[1] ? layer_bytes[0] : layer_bytes[1]);
    for (int l = 0; l < 2; l++)
        assert_int_equal(strata_hook_forward(s.rt, l), STRATA_OK);
    assert_int_equal(s.f.sends, n_owned);
    assert_int_equal(s.f.broadcasts, 3 - n_owned);
    for (int l = 1; l >= 0; l--)
        assert_int_equal(strata_hook_backward(s.rt, l), STRATA_OK);
    assert_int_equal(strata_step(s.rt), STRATA_OK);
    bool moved = false;
    for (int i = 0; i < 3; i++) {
        if (!mine[i])
            continue;
        float *again = NULL;
        assert_int_equal(strata_param_data(s.rt, i, &again), STRATA_OK);
        assert_ptr_equal(again, mine[i]);
        moved = moved || memcmp(mine[i], init + off[i], num[i] * sizeof(float)) != 0;
    }
    assert_true(moved); /* the step updated the owner's copies */
    for (int i = 0; i < NA + NB + NC; i++)
        assert_true(s.w[i] == 0.0f);
    st = stats(&s);
    assert_int_equal(st.param_bytes, owned);
    assert_int_equal(st.param_bytes_peak, owned + layer_bytes[0] + layer_bytes[1]);
    setup_destroy(&s);
}

/* Where the flag is not in effect (one rank; the zero1 baseline keeps every
 * weight on every rank) `data` stays the weights. */
static void test_ignored(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        setup s;
        setup_create(&s, 1, k == 0 ? STRATA_SHARD_OWNER : STRATA_SHARD_ZERO1, k == 0);
        assert_int_equal(strata_commit(s.rt), STRATA_OK);
        float *c = NULL;
        assert_int_equal(strata_param_data(s.rt, 2, &c), STRATA_OK);
        assert_ptr_equal(c, s.w + NA + NB);
        strata_stats st = stats(&s);
        assert_int_equal(st.param_bytes, (NA + NB + NC) * sizeof(float));
        assert_int_equal(st.largest_layer_bytes, 0);
        assert_int_equal(strata_layer_materialize(s.rt, 1), STRATA_OK);
        assert_int_equal(strata_layer_release(s.rt, 1), STRATA_OK);
        assert_int_equal(strata_param_data(s.rt, 2, &c), STRATA_OK);
        assert_ptr_equal(c, s.w + NA + NB);
        setup_destroy(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_non_owner_lifetime),
        cmocka_unit_test(test_owner_copy),
        cmocka_unit_test(test_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
