/* A step is all or nothing (issue #12 item 3), for the errors that arise
 * in the middle of a step too. strata_step runs a first pass before it
 * changes anything (strata_refresh_prepare: the bounded waits for due
 * refresh results, nvme reads of them, HSDP shipping); after it nothing
 * fails for a reason outside the program. Checked here, through the
 * runtime, with injected faults at several parameter positions:
 *  - a refresh result that does not come in time (its jobs held on their
 *    worker, a small wait_timeout_s): STRATA_ERR_TIMEOUT, and every weight,
 *    the AdamW tail's moments, every family's state (the tensors that
 *    checkpoints enumerate), the installed results and the step counter
 *    are unchanged; once released, the same step succeeds and the run
 *    continues bit for bit as a run that never saw the fault;
 *  - an nvme read of a due result that fails (EIO): not an error; read
 *    again at install, so with the fault gone by then the run is bit for
 *    bit the fault-free one; if that read fails too, the previous result
 *    is kept, counted, and the step still completes;
 *  - a snapshot that cannot be stored at a refresh point (after the factor
 *    update, so by design not an error): the step returns STRATA_OK and is
 *    whole, the refresh point is counted and the previous root kept;
 *  - ranks (a two-rank communicator faked in one process, owner and gather
 *    sharding): another rank's first pass timing out makes this rank give
 *    up too (the agreement), and a failing collective: nothing changed,
 *    and the retried steps are the fault-free run bit for bit.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "runtime/runtime_internal.h"
#include "runtime/testing.h"
#include "strata/strata.h"

enum { NM = 3, NV = 2, MAXN = 96, NSTEPS = 12 };
static const int64_t mshape[NM][2] = {{8, 6}, {6, 6}, {10, 4}};
static const int vlen[NV] = {5, 3};
static const char *mname[NM] = {"m0", "m1", "m2"};
static char tmpdir[256];

/* Registration order: m0, v0, m1, m2, v1 (the tail between the matrices). */
typedef struct model {
    strata_runtime *rt;
    float w[NM][MAXN], g[NM][MAXN];
    float v[NV][8], gv[NV][8];
    strata_param_id mid[NM];
} model;

static strata_status model_open(model *m, const strata_config *cfg)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < MAXN; k++)
            m->w[i][k] = 0.1f * (float)((k * 7 + i) % 11) - 0.5f;
    for (int j = 0; j < NV; j++)
        for (int k = 0; k < 8; k++)
            m->v[j][k] = 0.2f * (float)k - 0.3f * (float)j;
    strata_status st = strata_create(cfg, &m->rt);
    if (st != STRATA_OK)
        return st;
    for (int i = 0; i < NM && st == STRATA_OK; i++) {
        strata_param_desc d = {.name = mname[i], .ndim = 2,
                               .shape = {mshape[i][0], mshape[i][1]}, .layer = 0,
                               .optimizer = STRATA_OPTIM_DEFAULT, .data = m->w[i],
                               .grad = m->g[i]};
        st = strata_param_add(m->rt, &d, &m->mid[i]);
        if (st == STRATA_OK && i < NV) {
            char name[8];
            snprintf(name, sizeof name, "v%d", i);
            strata_param_desc dv = {.name = name, .ndim = 1, .shape = {vlen[i]}, .layer = 0,
                                    .optimizer = STRATA_OPTIM_DEFAULT, .data = m->v[i],
                                    .grad = m->gv[i]};
            st = strata_param_add(m->rt, &dv, NULL);
        }
    }
    if (st == STRATA_OK)
        st = strata_commit(m->rt);
    return st;
}

/* The gradients of step t (smooth, O(1), full rank), then the step. */
static strata_status model_step(model *m, int t)
{
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < mshape[i][0] * mshape[i][1]; k++)
            m->g[i][k] = (float)sin(0.37 * t + 0.91 * k + 1.3 * i);
    for (int j = 0; j < NV; j++)
        for (int k = 0; k < vlen[j]; k++)
            m->gv[j][k] = (float)cos(0.5 * t + k + 0.7 * j);
    assert_int_equal(strata_hook_backward(m->rt, 0), STRATA_OK);
    return strata_step(m->rt);
}

/* Everything a step may change, as bytes: the weights, the step counter,
 * each parameter's persistent state (its family's tensor enumeration, as
 * checkpoints walk it: factors, moments, momenta, the AdamW tail's moments
 * and step), and each refresh block's installed result (slot, version,
 * valid parts). */
typedef struct image {
    unsigned char *b;
    size_t n, cap;
} image;

static void put(image *im, const void *p, size_t n)
{
    if (im->n + n > im->cap) {
        im->cap = 2 * (im->n + n);
        im->b = realloc(im->b, im->cap);
        assert_non_null(im->b);
    }
    memcpy(im->b + im->n, p, n);
    im->n += n;
}

static size_t dtype_bytes(strata_dtype d)
{
    return d == STRATA_F64 || d == STRATA_I64 ? 8 : d == STRATA_BOOL ? 1 : 4;
}

static void image_take(const model *m, image *im)
{
    im->n = 0;
    put(im, m->w, sizeof m->w);
    put(im, m->v, sizeof m->v);
    strata_stats s;
    assert_int_equal(strata_stats_get(m->rt, &s), STRATA_OK);
    put(im, &s.step, sizeof s.step);
    put(im, &m->rt->t, sizeof m->rt->t);
    strata_tensor_info ti[32];
    for (int i = 0; i < m->rt->n_params; i++) {
        const rt_param *p = &m->rt->params[i];
        if (!p->state)
            continue; /* another rank owns it */
        const int n = p->fam->tensors(p->state, ti, 32);
        assert_true(n > 0 && n <= 32);
        for (int k = 0; k < n; k++) {
            size_t numel = 1;
            for (int d = 0; d < ti[k].ndim; d++)
                numel *= (size_t)ti[k].shape[d];
            put(im, ti[k].name, sizeof ti[k].name);
            put(im, ti[k].data, numel * dtype_bytes(ti[k].dtype));
        }
    }
    strata_refresh *e = m->rt->engine;
    for (int i = 0; i < strata_refresh_block_count(e); i++) {
        strata_refresh_block_desc bd;
        assert_int_equal(strata_refresh_block_describe(e, i, &bd), STRATA_OK);
        int64_t version = -1;
        if (bd.installed_slot >= 0)
            assert_int_equal(strata_refresh_slot_get(e, i, bd.installed_slot, NULL, &version,
                                                     NULL),
                             STRATA_OK);
        put(im, &bd.installed_slot, sizeof bd.installed_slot);
        put(im, &version, sizeof version);
        put(im, &bd.have, sizeof bd.have);
    }
}

static bool image_equal(const image *a, const image *b)
{
    return a->n == b->n && memcmp(a->b, b->b, a->n) == 0;
}

static bool weights_finite(const model *m)
{
    for (int i = 0; i < NM; i++)
        for (int k = 0; k < MAXN; k++)
            if (!isfinite(m->w[i][k]))
                return false;
    return true;
}

static void base_config(strata_config *c, strata_optimizer opt, bool async)
{
    strata_config_default(c);
    c->matrix_optimizer = opt;
    c->precondition_frequency = 2;
    c->async = async;
    c->staleness = 1;
    c->workers = NM; /* a held job keeps only its own worker */
    c->log_level = STRATA_LOG_ERROR;
}

/* The fault-free run's image after NSTEPS steps. */
static void reference(const strata_config *c, image *out)
{
    model m;
    assert_int_equal(model_open(&m, c), STRATA_OK);
    for (int t = 1; t <= NSTEPS; t++)
        assert_int_equal(model_step(&m, t), STRATA_OK);
    image_take(&m, out);
    strata_destroy(m.rt);
}

typedef struct pos_case {
    strata_optimizer opt;
    int pos;  /* the matrix whose refresh jobs are held, or the count of faults */
    strata_tier_kind tier;
    bool async;
} pos_case;

static void test_timeout_changes_nothing(void **state)
{
    const pos_case *k = *state;
    strata_config c;
    base_config(&c, k->opt, true);
    c.wait_timeout_s = 1.0;
    image ref = {0}, before = {0}, after = {0};
    reference(&c, &ref);

    model m;
    assert_int_equal(model_open(&m, &c), STRATA_OK);
    int held_timeouts = 0;
    for (int t = 1; t <= NSTEPS; t++) {
        if (t == 3) /* from here on, this matrix's refreshes never finish */
            assert_int_equal(strata_testing_hold_refreshes(m.rt, m.mid[k->pos]), STRATA_OK);
        image_take(&m, &before);
        strata_status st = model_step(&m, t);
        /* A timeout changes nothing, whichever job it waited for (a slow
         * machine may time out on one that is not held: the same holds). */
        while (st == STRATA_ERR_TIMEOUT) {
            print_message("%s, %s held: step %d: %s: %s\n", strata_optimizer_name(k->opt),
                          mname[k->pos], t, strata_status_str(st), strata_last_error());
            const bool named = strstr(strata_last_error(), mname[k->pos]) != NULL;
            image_take(&m, &after);
            assert_true(image_equal(&before, &after)); /* nothing changed */
            strata_stats s;
            assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
            assert_int_equal(s.step, t - 1);
            if (named) { /* the fault goes; the same step (same gradients) succeeds */
                held_timeouts++;
                assert_int_equal(strata_testing_hold_refreshes(m.rt, -2), STRATA_OK);
            }
            st = model_step(&m, t);
        }
        assert_int_equal(st, STRATA_OK);
    }
    assert_int_equal(held_timeouts, 1);
    image_take(&m, &after);
    assert_true(image_equal(&ref, &after)); /* bit for bit the fault-free run */
    strata_destroy(m.rt);
    free(ref.b);
    free(before.b);
    free(after.b);
}

/* nvme placement: k->pos reads fail at step 5 (the due result of refresh
 * point 4 of m0, m1, m2 in the first pass, then m0's again at install). */
static void test_nvme_read_error(void **state)
{
    const pos_case *k = *state;
    strata_config c;
    base_config(&c, k->opt, true);
    c.roots_tier = STRATA_TIER_NVME;
    c.nvme_dir = tmpdir;
    image ref = {0}, got = {0};
    model m;
    const strata_status so = model_open(&m, &c);
    if (so != STRATA_OK) {
        print_message("SKIP: no nvme tier here: %s: %s\n", strata_status_str(so),
                      strata_last_error());
        strata_destroy(m.rt);
        skip();
    }
    reference(&c, &ref);
    strata_stats s;
    for (int t = 1; t <= NSTEPS; t++) {
        if (t == 5) {
            /* No job or transfer in flight: the faults hit the step's reads. */
            assert_int_equal(strata_refresh_drain(m.rt->engine, NULL), STRATA_OK);
            assert_int_equal(strata_testing_inject_io_errors(m.rt, k->pos, EIO), STRATA_OK);
        }
        assert_int_equal(model_step(&m, t), STRATA_OK);
        if (t == 5) {
            assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
            assert_int_equal(s.io_errors, k->pos);
            assert_int_equal(s.step, 5);
        }
    }
    image_take(&m, &got);
    assert_true(weights_finite(&m));
    /* Up to one read per matrix fails: each is read again at install. */
    if (k->pos <= NM)
        assert_true(image_equal(&ref, &got));
    else
        assert_false(image_equal(&ref, &got)); /* m0 kept its previous root */
    strata_destroy(m.rt);
    free(ref.b);
    free(got.b);
}

/* k->pos snapshots fail at the first refresh point after step 2. */
static void test_snapshot_error(void **state)
{
    const pos_case *k = *state;
    strata_config c;
    base_config(&c, k->opt, k->async);
    if (k->tier == STRATA_TIER_NVME) {
        c.roots_tier = STRATA_TIER_NVME;
        c.nvme_dir = tmpdir;
    }
    image ref = {0}, got = {0};
    model m;
    const strata_status so = model_open(&m, &c);
    if (so != STRATA_OK) {
        print_message("SKIP: %s: %s\n", strata_status_str(so), strata_last_error());
        strata_destroy(m.rt);
        skip();
    }
    reference(&c, &ref);
    strata_stats s;
    int failed_at = 0;
    for (int t = 1; t <= NSTEPS; t++) {
        if (t == 3)
            assert_int_equal(strata_testing_inject_snapshot_errors(m.rt, k->pos), STRATA_OK);
        assert_int_equal(model_step(&m, t), STRATA_OK);
        assert_int_equal(strata_stats_get(m.rt, &s), STRATA_OK);
        assert_int_equal(s.step, t); /* every step whole */
        if (!failed_at && s.snapshot_failures > 0) {
            failed_at = t;
            assert_int_equal(s.snapshot_failures, k->pos);
            if (k->tier == STRATA_TIER_NVME)
                assert_int_equal(s.io_errors, k->pos);
        }
    }
    assert_int_equal(s.snapshot_failures, k->pos);
    if (k->async)
        assert_int_equal(s.coh_failed, k->pos); /* the refresh points count as failed */
    print_message("%s %s %s: %d snapshot(s) failed at step %d; coh_failed %lld\n",
                  strata_optimizer_name(k->opt), k->async ? "async" : "sync",
                  strata_tier_kind_name(k->tier), k->pos, failed_at, (long long)s.coh_failed);
    assert_true(failed_at > 0);
    assert_true(weights_finite(&m));
    image_take(&m, &got);
    assert_false(image_equal(&ref, &got)); /* a previous root was used: a real fault */
    strata_destroy(m.rt);
    free(ref.b);
    free(got.b);
}

/* ---- a communicator of two ranks in one process: this is rank 0, and
 * rank 1 contributes nothing (zeros to sums, its own pieces untouched), so
 * the step runs as it would on rank 0. A call can be made to fail, and
 * rank 1 can report that its first pass failed. */
typedef struct fake2 {
    int calls;        /* allreduce calls so far */
    int fail_at;      /* that call fails with STRATA_ERR_IO (0: none) */
    int other_status; /* rank 1's first pass failed with it (0: it did not) */
} fake2;

/* The first pass's outcome travels as a count per status after the
 * gradient sums of strata_step's reduction (runtime.c, PREP_KINDS). */
enum { PREP_KINDS_SEEN = (int)STRATA_ERR_INTERNAL + 1 };

static int f_rank(void *ctx) { (void)ctx; return 0; }
static int f_size(void *ctx) { (void)ctx; return 2; }
static strata_status f_allreduce(void *ctx, double *vals, int n, strata_reduce_op op)
{
    (void)op;
    fake2 *f = ctx;
    if (++f->calls == f->fail_at)
        return strata_error(STRATA_ERR_IO, "fake comm: allreduce %d failed (injected)", f->calls);
    if (f->other_status && n >= PREP_KINDS_SEEN) {
        vals[n - PREP_KINDS_SEEN + f->other_status] += 1.0;
        f->other_status = 0;
    }
    return STRATA_OK;
}
static strata_status f_to_owner(void *ctx, float *buf, size_t n, int owner)
{
    (void)ctx, (void)buf, (void)n, (void)owner;
    return STRATA_OK;
}
static strata_status f_allgatherv(void *ctx, const float *send, float *recv,
                                  const size_t *counts, const size_t *displs)
{
    (void)ctx;
    memset(recv, 0, (displs[1] + counts[1]) * sizeof *recv);
    memcpy(recv + displs[0], send, counts[0] * sizeof *recv);
    return STRATA_OK;
}
static strata_status f_reduce_scatter(void *ctx, const float *send, float *recv,
                                      const size_t *counts, const size_t *displs)
{
    (void)ctx;
    memcpy(recv, send + displs[0], counts[0] * sizeof *recv);
    return STRATA_OK;
}
static strata_status f_barrier(void *ctx) { (void)ctx; return STRATA_OK; }
static strata_status f_to_owners(void *ctx, float *buf, size_t n, const int *owners, int k)
{
    (void)ctx, (void)buf, (void)n, (void)owners, (void)k;
    return STRATA_OK;
}
static strata_status f_split(void *ctx, int color, int key, strata_comm **out)
{
    (void)ctx, (void)color, (void)key;
    return strata_comm_self_create(out);
}
static const strata_comm_iface fake2_iface = {
    .version = STRATA_COMM_IFACE_VERSION, .name = "fake2", .rank = f_rank, .size = f_size,
    .node_rank = f_rank, .node_size = f_size, .allreduce_f64 = f_allreduce,
    .reduce_to_owner = f_to_owner, .broadcast_from_owner = f_to_owner,
    .allgatherv_f32 = f_allgatherv, .reduce_scatter_f32 = f_reduce_scatter,
    .barrier = f_barrier, .reduce_to_owners = f_to_owners, .split = f_split,
};

/* Rank 0 of two: rank 1's first pass times out (the agreement makes this
 * rank give up too), then the step's collective fails: each changes
 * nothing, and the retried steps give the fault-free run bit for bit. */
static void test_comm_failures(void **state)
{
    const strata_sharding *sharding = *state;
    fake2 f = {0};
    strata_comm *comm = NULL;
    assert_int_equal(strata_comm_create(&fake2_iface, &f, &comm), STRATA_OK);
    strata_config c;
    base_config(&c, STRATA_OPTIM_SHAMPOO, true);
    c.comm = comm;
    c.sharding = *sharding;
    image ref = {0}, before = {0}, after = {0};
    reference(&c, &ref);

    model m;
    assert_int_equal(model_open(&m, &c), STRATA_OK);
    int owned = 0;
    for (int i = 0; i < m.rt->n_params; i++)
        owned += m.rt->params[i].state != NULL;
    assert_true(owned > 0); /* this rank updates something */
    int faults = 0;
    for (int t = 1; t <= NSTEPS; t++) {
        if (t == 5)
            f.other_status = STRATA_ERR_TIMEOUT;
        if (t == 7)
            f.fail_at = f.calls + 1;
        image_take(&m, &before);
        const strata_status st = model_step(&m, t);
        if (t != 5 && t != 7) {
            assert_int_equal(st, STRATA_OK);
            continue;
        }
        print_message("%s sharding, step %d: %s: %s\n",
                      *sharding == STRATA_SHARD_GATHER ? "gather" : "owner", t,
                      strata_status_str(st), strata_last_error());
        assert_int_equal(st, t == 5 ? STRATA_ERR_TIMEOUT : STRATA_ERR_IO);
        image_take(&m, &after);
        assert_true(image_equal(&before, &after));
        faults++;
        assert_int_equal(model_step(&m, t), STRATA_OK);
    }
    assert_int_equal(faults, 2);
    image_take(&m, &after);
    assert_true(image_equal(&ref, &after));
    strata_destroy(m.rt);
    strata_comm_destroy(comm);
    free(ref.b);
    free(before.b);
    free(after.b);
}

static const strata_sharding shard_owner = STRATA_SHARD_OWNER, shard_gather = STRATA_SHARD_GATHER;

static const pos_case timeout_cases[] = {
    {STRATA_OPTIM_SHAMPOO, 0, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SHAMPOO, 1, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SHAMPOO, 2, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SOAP, 0, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SOAP, 2, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_KL_SHAMPOO, 1, STRATA_TIER_HOST, true},
};
static const pos_case read_cases[] = {
    {STRATA_OPTIM_SHAMPOO, 1, STRATA_TIER_NVME, true},
    {STRATA_OPTIM_SHAMPOO, 3, STRATA_TIER_NVME, true},
    {STRATA_OPTIM_SHAMPOO, 4, STRATA_TIER_NVME, true},
};
static const pos_case snap_cases[] = {
    {STRATA_OPTIM_SHAMPOO, 1, STRATA_TIER_HOST, false},
    {STRATA_OPTIM_SHAMPOO, 2, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SHAMPOO, 3, STRATA_TIER_NVME, true},
    {STRATA_OPTIM_SOAP, 1, STRATA_TIER_HOST, true},
    {STRATA_OPTIM_SOAP, 2, STRATA_TIER_HOST, false},
};

#define CASE(name, fn, p) {name, fn, NULL, NULL, (void *)(p)}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/strata-test-atomic-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("cannot create %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        CASE("timeout_shampoo_m0", test_timeout_changes_nothing, &timeout_cases[0]),
        CASE("timeout_shampoo_m1", test_timeout_changes_nothing, &timeout_cases[1]),
        CASE("timeout_shampoo_m2", test_timeout_changes_nothing, &timeout_cases[2]),
        CASE("timeout_soap_m0", test_timeout_changes_nothing, &timeout_cases[3]),
        CASE("timeout_soap_m2", test_timeout_changes_nothing, &timeout_cases[4]),
        CASE("timeout_kl_shampoo_m1", test_timeout_changes_nothing, &timeout_cases[5]),
        CASE("nvme_read_1", test_nvme_read_error, &read_cases[0]),
        CASE("nvme_read_3", test_nvme_read_error, &read_cases[1]),
        CASE("nvme_read_4", test_nvme_read_error, &read_cases[2]),
        CASE("snapshot_shampoo_sync_1", test_snapshot_error, &snap_cases[0]),
        CASE("snapshot_shampoo_async_2", test_snapshot_error, &snap_cases[1]),
        CASE("snapshot_shampoo_nvme_3", test_snapshot_error, &snap_cases[2]),
        CASE("snapshot_soap_async_1", test_snapshot_error, &snap_cases[3]),
        CASE("snapshot_soap_sync_2", test_snapshot_error, &snap_cases[4]),
        CASE("comm_owner", test_comm_failures, &shard_owner),
        CASE("comm_gather", test_comm_failures, &shard_gather),
    };
    const int failed = cmocka_run_group_tests_name("step_atomic", tests, NULL, NULL);
    rmdir(tmpdir);
    return failed ? 1 : 0;
}
