/* Gradient buckets and the non-blocking reduction seam (comm/comm.h,
 * comm/comm.h) on a fake transport: rank 0 of 2, whose "other rank"
 * contributes +1.5 to every element, and whose requests complete only after
 * a few tests, so that posting, progress, the wait at the step, the staging
 * ring, the drain before blocking collectives and the blocking fallback are
 * all observable. The MPI transport itself runs in tests/mpi. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "strata/comm.h"
#include "strata/strata.h"

#define OTHER 1.5f  /* the other rank's contribution to every element */
#define TESTS 3     /* tests a request needs before it completes */
#define MAX_LOG 256

typedef struct fake {
    int in_flight;          /* started, not completed */
    int starts, blocking_reduces, collectives_with_in_flight;
    size_t start_n[MAX_LOG];
    int start_owner[MAX_LOG];
    float start_sum[MAX_LOG]; /* the packed contribution's sum, in order, at start */
} fake;

static int f_rank(void *ctx)
{
    (void)ctx;
    return 0;
}

static int f_size(void *ctx)
{
    (void)ctx;
    return 2;
}

static bool owns(const int *owners, int n)
{
    for (int k = 0; k < n; k++)
        if (owners[k] == 0)
            return true;
    return false;
}

/* (0 + x_0) + x_1: this rank's part, then the other's. */
static void add_other(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (0.0f + buf[i]) + OTHER;
}

static void blocking(fake *f)
{
    if (f->in_flight)
        f->collectives_with_in_flight++;
}

static strata_status f_allreduce(void *ctx, double *v, int n, strata_reduce_op op)
{
    (void)v, (void)n, (void)op;
    blocking(ctx);
    return STRATA_OK;
}

static strata_status f_reduce(void *ctx, float *buf, size_t n, int owner)
{
    fake *f = ctx;
    blocking(f);
    f->blocking_reduces++;
    if (owner == 0)
        add_other(buf, n);
    return STRATA_OK;
}

static strata_status f_bcast(void *ctx, float *buf, size_t n, int owner)
{
    (void)buf, (void)n, (void)owner;
    blocking(ctx);
    return STRATA_OK;
}

static strata_status f_gatherv(void *ctx, const float *s, float *r, const size_t *c,
                               const size_t *d)
{
    (void)s, (void)r, (void)c, (void)d;
    blocking(ctx);
    return STRATA_OK;
}

static strata_status f_barrier(void *ctx)
{
    blocking(ctx);
    return STRATA_OK;
}

static strata_status f_owners(void *ctx, float *buf, size_t n, const int *o, int no)
{
    fake *f = ctx;
    blocking(f);
    f->blocking_reduces++;
    if (owns(o, no))
        add_other(buf, n);
    return STRATA_OK;
}

static strata_status f_split(void *ctx, int color, int key, strata_comm **out)
{
    (void)ctx, (void)color, (void)key, (void)out;
    return STRATA_ERR_UNSUPPORTED;
}

static strata_status f_istart(void *ctx, strata_comm_request *r)
{
    fake *f = ctx;
    if (f->starts < MAX_LOG) {
        f->start_n[f->starts] = r->n;
        f->start_owner[f->starts] = r->owners[0];
        float sum = 0.0f;
        for (size_t i = 0; i < r->n; i++)
            sum += r->buf[i];
        f->start_sum[f->starts] = sum;
    }
    f->starts++;
    f->in_flight++;
    r->phase = 0;
    return STRATA_OK;
}

static strata_status f_itest(void *ctx, strata_comm_request *r)
{
    fake *f = ctx;
    if (++r->phase < TESTS)
        return STRATA_OK;
    if (owns(r->owners, r->n_owners))
        add_other(r->buf, r->n);
    else
        memset(r->buf, 0xff, r->n * sizeof(float)); /* "unspecified": never read back */
    memset(r->scratch, 0xff, r->n * sizeof(float));
    r->done = true;
    f->in_flight--;
    return STRATA_OK;
}

static strata_comm_iface fake_iface(bool nonblocking)
{
    strata_comm_iface i = {
        .version = STRATA_COMM_IFACE_VERSION, .name = "fake", .rank = f_rank, .size = f_size,
        .node_rank = f_rank, .node_size = f_size, .allreduce_f64 = f_allreduce,
        .reduce_to_owner = f_reduce, .broadcast_from_owner = f_bcast,
        .allgatherv_f32 = f_gatherv, .reduce_scatter_f32 = f_gatherv, .barrier = f_barrier,
        .reduce_to_owners = f_owners, .split = f_split,
    };
    if (nonblocking) {
        i.ireduce_start = f_istart;
        i.ireduce_test = f_itest;
    }
    return i;
}

static float value(int t, size_t i)
{
    return 0.125f * (float)((t * 7 + (int)i) % 11) - 0.5f;
}

/* The module alone: buckets per (layer, owners) under the cap, post order,
 * results, the ring's waits when it is small, a second post of a layer. */
static void test_buckets_module(void **state)
{
    (void)state;
    fake f = {0};
    strata_comm_iface fi = fake_iface(true);
    strata_comm *c = NULL;
    strata_backend *be = NULL;
    assert_int_equal(strata_comm_create(&fi, &f, &c), STRATA_OK);
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    /* layer 0: owner 0 (8, 8, 8 floats), owner 1 (4); layer 1: owner 0 (40: over the cap),
     * owner 0 (8); layer 2: none. HSDP-like owners {0, 1} for item 6. */
    enum { NI = 7 };
    const int o0 = 0, o1 = 1, o01[2] = {0, 1};
    const size_t sz[NI] = {8, 8, 4, 8, 40, 8, 6};
    const int layer[NI] = {0, 0, 0, 0, 1, 1, 3};
    const int *own[NI] = {&o0, &o0, &o1, &o0, &o0, &o0, o01};
    const int nown[NI] = {1, 1, 1, 1, 1, 1, 2};
    float *g[NI], *x[NI];
    strata_gb_item it[NI];
    for (int t = 0; t < NI; t++) {
        g[t] = malloc(sz[t] * sizeof(float));
        x[t] = malloc(sz[t] * sizeof(float));
        for (size_t i = 0; i < sz[t]; i++)
            g[t][i] = x[t][i] = value(t, i);
        it[t] = (strata_gb_item){.layer = layer[t], .grad = g[t], .n = sz[t], .owners = own[t],
                                 .n_owners = nown[t], .receives = owns(own[t], nown[t]),
                                 .average = t != 1};
    }
    /* cap 16 floats: layer 0 owner 0 -> [8 + 8] and [8]; owner 1 -> [4];
     * layer 1 -> [40] alone, [8]; layer 3 -> [6]. */
    const strata_gb_config gc = {.comm = c, .be = be, .bucket_bytes = 16 * sizeof(float),
                                 .scale = 0.5f};
    strata_grad_buckets *gb = NULL;
    assert_int_equal(strata_gb_create(&gc, it, NI, &gb), STRATA_OK);
    strata_gb_stats gs;
    strata_gb_stats_get(gb, &gs);
    assert_int_equal(gs.n_buckets, 6);
    /* ring: 2 x max(largest 40, min(all 82, 4 x 16)) floats */
    assert_int_equal(gs.staging_bytes, 2 * 64 * sizeof(float));

    assert_int_equal(strata_gb_post_layer(gb, 3), STRATA_OK);
    assert_int_equal(strata_gb_post_layer(gb, 2), STRATA_OK); /* no parameters: nothing */
    assert_int_equal(strata_gb_post_layer(gb, 1), STRATA_OK);
    /* [6] went in first; [40] + [8] need 96 of the 128 floats, [6] holds 12: fits */
    assert_int_equal(f.starts, 3);
    assert_true(strata_gb_in_flight(gb) > 0); /* the hooks returned before completion */
    assert_int_equal(strata_gb_post_layer(gb, 0), STRATA_OK);
    assert_int_equal(f.starts, 6);
    const size_t want_n[6] = {6, 40, 8, 16, 4, 8};
    const int want_owner[6] = {0, 0, 0, 0, 1, 0};
    for (int k = 0; k < 6; k++) {
        assert_int_equal(f.start_n[k], want_n[k]);
        assert_int_equal(f.start_owner[k], want_owner[k]);
    }
    strata_gb_stats_get(gb, &gs);
    assert_true(gs.ring_waits > 0); /* 128 floats cannot hold 164 */
    double waited = -1.0;
    assert_int_equal(strata_gb_finish_all(gb, &waited), STRATA_OK);
    assert_true(waited >= 0.0);
    assert_int_equal(strata_gb_in_flight(gb), 0);
    assert_int_equal(f.in_flight, 0);
    assert_int_equal(strata_comm_in_flight(c), 0);
    for (int t = 0; t < NI; t++)
        for (size_t i = 0; i < sz[t]; i++) {
            float want = x[t][i];
            if (it[t].receives) {
                want = (0.0f + want) + OTHER;
                if (it[t].average)
                    want *= 0.5f;
            }
            assert_true(memcmp(&g[t][i], &want, sizeof want) == 0);
        }
    /* A layer posted twice before the wait: the first completes first, so the
     * second carries the first's result (as a blocking reduction would). */
    for (size_t i = 0; i < sz[2]; i++)
        g[2][i] = x[2][i];
    assert_int_equal(strata_gb_post_layer(gb, 0), STRATA_OK);
    assert_int_equal(strata_gb_post_layer(gb, 0), STRATA_OK);
    assert_int_equal(strata_gb_finish_all(gb, NULL), STRATA_OK);
    for (size_t i = 0; i < sz[2]; i++)
        assert_true(g[2][i] == x[2][i]); /* owner 1's: never written here */
    for (size_t i = 0; i < sz[1]; i++) {
        const float once = (0.0f + x[1][i]) + OTHER, twice = (0.0f + once) + OTHER;
        const float want = (0.0f + twice) + OTHER; /* three posts, no averaging */
        assert_true(g[1][i] == want);
    }
    strata_gb_stats_get(gb, &gs);
    assert_int_equal(gs.posted, 12);
    strata_gb_destroy(gb);
    strata_gb_destroy(NULL);
    /* bad arguments */
    strata_gb_config bad = gc;
    bad.bucket_bytes = 2;
    assert_int_equal(strata_gb_create(&bad, it, NI, &gb), STRATA_ERR_INVALID_ARG);
    for (int t = 0; t < NI; t++) {
        free(g[t]);
        free(x[t]);
    }
    strata_backend_destroy(be);
    strata_comm_destroy(c);
}

/* The seam: a blocking collective completes what is in flight first (the
 * broadcast only advances it); the
 * fallback without the slots is the blocking reduction; half the slots is
 * refused. */
static void test_seam(void **state)
{
    (void)state;
    fake f = {0};
    strata_comm_iface fi = fake_iface(true);
    strata_comm *c = NULL;
    assert_int_equal(strata_comm_create(&fi, &f, &c), STRATA_OK);
    assert_true(strata_comm_has_ireduce(c));
    float a[4] = {1, 2, 3, 4}, sa[4], b[3] = {5, 6, 7}, sb[3];
    const int o0 = 0, o1 = 1;
    strata_comm_request ra = {.buf = a, .scratch = sa, .n = 4, .owners = &o0, .n_owners = 1};
    strata_comm_request rb = {.buf = b, .scratch = sb, .n = 3, .owners = &o1, .n_owners = 1};
    assert_int_equal(strata_comm_ireduce_start(c, &ra), STRATA_OK);
    assert_int_equal(strata_comm_ireduce_start(c, &rb), STRATA_OK);
    assert_int_equal(strata_comm_in_flight(c), 2);
    assert_int_equal(strata_comm_progress(c), STRATA_OK);
    assert_int_equal(strata_comm_in_flight(c), 2); /* TESTS > 1: still going */
    double v = 1.0;
    assert_int_equal(strata_comm_allreduce_f64(c, &v, 1, STRATA_REDUCE_SUM), STRATA_OK);
    assert_int_equal(f.collectives_with_in_flight, 0);
    assert_true(ra.done && rb.done);
    assert_int_equal(strata_comm_in_flight(c), 0);
    assert_true(a[0] == 2.5f && a[3] == 5.5f);
    /* The broadcast (managed weights between backward hooks) advances what is
     * in flight but does not drain it: the overlap goes on. */
    a[0] = 1.0f, a[3] = 4.0f;
    assert_int_equal(strata_comm_ireduce_start(c, &ra), STRATA_OK);
    float w[2] = {0};
    assert_int_equal(strata_comm_broadcast_from_owner(c, w, 2, 0), STRATA_OK);
    assert_int_equal(f.collectives_with_in_flight, 1);
    assert_int_equal(strata_comm_in_flight(c), 1);
    assert_int_equal(strata_comm_drain(c), STRATA_OK);
    assert_true(ra.done && a[0] == 2.5f && a[3] == 5.5f);
    f.collectives_with_in_flight = 0;
    const int bad_owner = 2;
    strata_comm_request rc = {.buf = a, .scratch = sa, .n = 4, .owners = &bad_owner,
                              .n_owners = 1};
    assert_int_equal(strata_comm_ireduce_start(c, &rc), STRATA_ERR_INVALID_ARG);
    strata_comm_destroy(c);

    fake g = {0};
    strata_comm_iface gi = fake_iface(false);
    assert_int_equal(strata_comm_create(&gi, &g, &c), STRATA_OK);
    assert_false(strata_comm_has_ireduce(c));
    float d[2] = {1, -1}, sd[2];
    strata_comm_request rd = {.buf = d, .scratch = sd, .n = 2, .owners = &o0, .n_owners = 1};
    assert_int_equal(strata_comm_ireduce_start(c, &rd), STRATA_OK);
    assert_true(rd.done);
    assert_int_equal(g.blocking_reduces, 1);
    assert_true(d[0] == 2.5f && d[1] == 0.5f);
    strata_comm_destroy(c);

    strata_comm_iface half = fake_iface(true);
    half.ireduce_test = NULL;
    assert_int_equal(strata_comm_create(&half, &g, &c), STRATA_ERR_INVALID_ARG);
}

/* The runtime on the fake transport (world 2): the backward hook posts and
 * returns with reductions in flight, strata_step waits for them before the
 * optimizer, the owners' gradients are the mean ((0 + x) + other) * 1/2,
 * bit-exact; without the slots, one blocking reduction per tensor gives the
 * same gradients. */
static void run_runtime(bool nonblocking, float out[3][64], int *in_flight_after_hook,
                        int *starts, int *blocking_reduces, int owner_of[3])
{
    fake f = {0};
    strata_comm_iface fi = fake_iface(nonblocking);
    strata_comm *c = NULL;
    assert_int_equal(strata_comm_create(&fi, &f, &c), STRATA_OK);
    strata_config cfg;
    assert_int_equal(strata_config_default(&cfg), STRATA_OK);
    cfg.matrix_optimizer = STRATA_OPTIM_MUON;
    cfg.comm = c;
    cfg.grad_bucket_bytes = 256; /* 64 floats: a (64) alone, b (32) next, c (32) */
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    static float data[3][64], grad[3][64];
    const int64_t shape[3][2] = {{8, 8}, {4, 8}, {8, 4}};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 64; i++) {
            data[t][i] = 0.01f * (float)i;
            grad[t][i] = value(t, (size_t)i);
        }
        strata_param_desc d = {.name = t == 0 ? "a" : t == 1 ? "b" : "c", .ndim = 2,
                               .shape = {shape[t][0], shape[t][1]}, .layer = t == 2 ? 1 : 0,
                               .role = STRATA_ROLE_MATRIX, .data = data[t], .grad = grad[t]};
        strata_param_id id;
        assert_int_equal(strata_param_add(rt, &d, &id), STRATA_OK);
    }
    assert_int_equal(strata_commit(rt), STRATA_OK);
    for (int t = 0; t < 3; t++) {
        strata_param_layout lay;
        assert_int_equal(strata_param_layout_get(rt, t, &lay), STRATA_OK);
        owner_of[t] = lay.owner;
    }
    strata_stats s;
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    assert_true(nonblocking ? s.grad_staging_bytes > 0 : s.grad_staging_bytes == 0);
    assert_int_equal(strata_hook_forward(rt, 0), STRATA_OK);
    assert_int_equal(strata_hook_forward(rt, 1), STRATA_OK);
    assert_int_equal(strata_hook_backward(rt, 1), STRATA_OK);
    assert_int_equal(strata_hook_backward(rt, 0), STRATA_OK);
    *in_flight_after_hook = f.in_flight;
    assert_int_equal(strata_step(rt), STRATA_OK);
    assert_int_equal(f.in_flight, 0);
    assert_int_equal(f.collectives_with_in_flight, 0);
    *starts = f.starts;
    *blocking_reduces = f.blocking_reduces;
    memcpy(out, grad, sizeof grad);
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    assert_int_equal(s.grad_buckets, f.starts);
    assert_int_equal(s.grad_bucket_ring_waits, 0); /* all fit: the step completed them */
    strata_destroy(rt);
    strata_comm_destroy(c);
}

static void test_runtime_overlap(void **state)
{
    (void)state;
    static float nb[3][64], bl[3][64];
    int in_flight, starts, reduces, owner[3], in_flight_b, starts_b, reduces_b, owner_b[3];
    run_runtime(true, nb, &in_flight, &starts, &reduces, owner);
    run_runtime(false, bl, &in_flight_b, &starts_b, &reduces_b, owner_b);
    /* Non-blocking: posted in the hooks, still in flight when they returned;
     * a and b (64 + 32 floats) do not share a 64-float bucket. */
    assert_true(in_flight > 0);
    assert_int_equal(starts, 3);
    assert_int_equal(reduces, 0);
    /* Blocking fallback: one reduction per tensor, nothing in flight. */
    assert_int_equal(in_flight_b, 0);
    assert_int_equal(starts_b, 0);
    assert_int_equal(reduces_b, 3);
    for (int t = 0; t < 3; t++) {
        assert_int_equal(owner[t], owner_b[t]);
        const int n = t == 0 ? 64 : 32;
        for (int i = 0; i < n; i++) {
            float want = value(t, (size_t)i);
            if (owner[t] == 0)
                want = ((0.0f + want) + OTHER) * 0.5f;
            assert_true(memcmp(&nb[t][i], &want, sizeof want) == 0);
            assert_true(memcmp(&bl[t][i], &want, sizeof want) == 0);
        }
    }
}

/* Sharded gradients (strata_config.shard_gradients) on the same runtime:
 * owned gradients in strata's buffers (not the registered ones), non-owned
 * ones lent per layer from strata_layer_grad_begin (zeroed) to the hook,
 * which posts exactly what was written there and frees it; the owners' sums
 * are the unsharded run's bit for bit; the ledger's gradients are the owned
 * ones (64-byte rounded) plus the layer lent; a hook without a begin posts
 * zeros; re-pointing a gradient is refused. */
static void test_runtime_shard_gradients(void **state)
{
    (void)state;
    static float ref[3][64];
    int in_flight, starts, reduces, owner[3];
    run_runtime(true, ref, &in_flight, &starts, &reduces, owner);
    fake f = {0};
    strata_comm_iface fi = fake_iface(true);
    strata_comm *c = NULL;
    assert_int_equal(strata_comm_create(&fi, &f, &c), STRATA_OK);
    strata_config cfg;
    assert_int_equal(strata_config_default(&cfg), STRATA_OK);
    cfg.matrix_optimizer = STRATA_OPTIM_MUON;
    cfg.comm = c;
    cfg.grad_bucket_bytes = 256;
    cfg.shard_gradients = true;
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    assert_int_equal(strata_layer_grad_begin(rt, 0), STRATA_ERR_STATE); /* before commit */
    static float data[3][64], grad[3][64];
    const int64_t shape[3][2] = {{8, 8}, {4, 8}, {8, 4}};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 64; i++)
            data[t][i] = 0.01f * (float)i;
        strata_param_desc d = {.name = t == 0 ? "a" : t == 1 ? "b" : "c", .ndim = 2,
                               .shape = {shape[t][0], shape[t][1]}, .layer = t == 2 ? 1 : 0,
                               .role = STRATA_ROLE_MATRIX, .data = data[t], .grad = grad[t]};
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    }
    assert_int_equal(strata_commit(rt), STRATA_OK);
    size_t owned = 0, other[2] = {0, 0};
    float *g[3];
    for (int t = 0; t < 3; t++) {
        strata_param_layout lay;
        assert_int_equal(strata_param_layout_get(rt, t, &lay), STRATA_OK);
        assert_int_equal(lay.owner, owner[t]); /* the same plan as the unsharded run */
        const size_t n = t == 0 ? 64 : 32;
        strata_status st = strata_param_grad(rt, t, &g[t]);
        if (owner[t] == 0) {
            assert_int_equal(st, STRATA_OK);
            assert_true(g[t] != grad[t]);
            owned += (n * sizeof(float) + 63) / 64 * 64;
        } else {
            assert_int_equal(st, STRATA_ERR_STATE);
            assert_null(g[t]);
            other[t == 2] += n * sizeof(float);
        }
    }
    assert_true(other[0] + other[1] > 0); /* rank 0 of 2 does not own everything */
    strata_memory_ledger led;
    assert_int_equal(strata_memory_ledger_get(rt, &led), STRATA_OK);
    assert_int_equal(led.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_GRADIENTS], owned);
    assert_int_equal(strata_param_set_buffers(rt, 0, NULL, grad[0]), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_layer_grad_begin(rt, 2), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_hook_forward(rt, 0), STRATA_OK);
    assert_int_equal(strata_hook_forward(rt, 1), STRATA_OK);
    /* Layer 1 lent and written; layer 0's hook comes without a begin. */
    assert_int_equal(strata_layer_grad_begin(rt, 1), STRATA_OK);
    assert_int_equal(strata_param_grad(rt, 2, &g[2]), STRATA_OK);
    for (int i = 0; i < 32; i++) {
        assert_true(g[2][i] == 0.0f); /* lent zeroed: backward passes accumulate */
        g[2][i] = value(2, (size_t)i);
    }
    for (int t = 0; t < 2; t++)
        if (owner[t] == 0)
            for (int i = 0; i < 64; i++)
                g[t][i] = value(t, (size_t)i);
    assert_int_equal(strata_memory_ledger_get(rt, &led), STRATA_OK);
    assert_int_equal(led.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_GRADIENTS],
                     owned + (other[1] ? (other[1] + 63) / 64 * 64 : 0));
    assert_int_equal(strata_hook_backward(rt, 1), STRATA_OK);
    float *gone = NULL;
    if (owner[2] != 0)
        assert_int_equal(strata_param_grad(rt, 2, &gone), STRATA_ERR_STATE);
    assert_int_equal(strata_hook_backward(rt, 0), STRATA_OK);
    assert_int_equal(strata_memory_ledger_get(rt, &led), STRATA_OK);
    assert_int_equal(led.bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_GRADIENTS], owned);
    assert_true(led.peak[STRATA_LEDGER_HOST][STRATA_LEDGER_GRADIENTS] < 3 * 64 * sizeof(float));
    assert_int_equal(starts, f.starts); /* the same buckets */
    for (int k = 0; k < f.starts; k++) {
        /* What a non-owner posted: layer 1's written values; layer 0's zeros. */
        if (f.start_owner[k] == 0)
            continue;
        float want = 0.0f;
        if (f.start_n[k] == 32 && owner[2] != 0 && k == 0)
            for (int i = 0; i < 32; i++)
                want += value(2, (size_t)i);
        assert_true(f.start_sum[k] == want);
    }
    assert_int_equal(strata_step(rt), STRATA_OK);
    for (int t = 0; t < 3; t++)
        if (owner[t] == 0) {
            const size_t n = t == 0 ? 64 : 32;
            assert_true(memcmp(g[t], ref[t], n * sizeof(float)) == 0);
        }
    strata_destroy(rt);
    strata_comm_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_module),
        cmocka_unit_test(test_seam),
        cmocka_unit_test(test_runtime_overlap),
        cmocka_unit_test(test_runtime_shard_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
