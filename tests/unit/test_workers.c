/* Worker pool: deadline order, completion on the worker, failure reports,
 * shutdown with jobs queued and running (run under TSan/ASan/valgrind). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "workers/workers.h"

typedef struct record {
    pthread_mutex_t mu;
    int order[64];
    int n;
    int done_ok, done_err, cancelled;
    int started;       /* jobs that entered run (atomic) */
    volatile int gate; /* jobs spin-wait while 1 */
} record;

typedef struct my_job {
    strata_job job;
    record *rec;
    int id;
    bool fail;
} my_job;

static strata_status run_job(strata_job *j, strata_worker_ctx *w)
{
    my_job *m = (my_job *)j;
    assert_non_null(w->work);
    w->work[0] = m->id; /* the workspace is this worker's alone */
    __atomic_add_fetch(&m->rec->started, 1, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&m->rec->gate, __ATOMIC_ACQUIRE))
        usleep(100);
    pthread_mutex_lock(&m->rec->mu);
    m->rec->order[m->rec->n++] = m->id;
    pthread_mutex_unlock(&m->rec->mu);
    return m->fail ? strata_error(STRATA_ERR_LINALG, "job %d failed on purpose", m->id) : STRATA_OK;
}

static void done_job(strata_job *j, strata_status st)
{
    my_job *m = (my_job *)j;
    pthread_mutex_lock(&m->rec->mu);
    if (st == STRATA_OK)
        m->rec->done_ok++;
    else if (st == STRATA_ERR_STATE)
        m->rec->cancelled++;
    else
        m->rec->done_err++;
    pthread_mutex_unlock(&m->rec->mu);
}

static void test_deadline_order(void **state)
{
    (void)state;
    record rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
    strata_worker_config c;
    strata_worker_config_default(&c);
    c.n_workers = 1;
    c.work_doubles = 16;
    c.work_ints = 4;
    strata_worker_pool *p;
    assert_int_equal(strata_worker_pool_create(&c, &p), STRATA_OK);
    /* Block the single worker on a first job, queue the rest out of order. */
    my_job jobs[8];
    rec.gate = 1;
    const int64_t deadlines[8] = {0, 50, 10, 40, 10, 30, 20, 5};
    for (int i = 0; i < 8; i++) {
        jobs[i] = (my_job){.job = {.deadline = deadlines[i], .run = run_job, .done = done_job},
                           .rec = &rec, .id = i, .fail = i == 3};
        assert_int_equal(strata_worker_submit(p, &jobs[i].job), STRATA_OK);
    }
    usleep(20000);
    __atomic_store_n(&rec.gate, 0, __ATOMIC_RELEASE);
    assert_int_equal(strata_worker_drain(p, 10.0), STRATA_OK);
    assert_int_equal(rec.n, 8);
    /* Job 0 has the earliest deadline, so it runs first whenever the worker
     * wakes; the rest by (deadline, submission order). */
    const int expect[8] = {0, 7, 2, 4, 6, 5, 3, 1};
    for (int i = 0; i < 8; i++)
        assert_int_equal(rec.order[i], expect[i]);
    assert_int_equal(rec.done_ok, 7);
    assert_int_equal(rec.done_err, 1);
    strata_worker_stats s;
    strata_worker_stats_get(p, &s);
    assert_int_equal(s.completed, 7);
    assert_int_equal(s.failed, 1);
    strata_worker_pool_destroy(p);
}

/* Opens the gate 50 ms after it starts, while the main thread is inside
 * strata_worker_pool_destroy waiting for the running jobs. */
static void *open_gate_later(void *p)
{
    record *rec = p;
    usleep(50000);
    __atomic_store_n(&rec->gate, 0, __ATOMIC_RELEASE);
    return NULL;
}

static void test_shutdown_with_jobs_in_flight(void **state)
{
    (void)state;
    record rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
    strata_worker_config c;
    strata_worker_config_default(&c);
    c.n_workers = 2;
    c.work_doubles = 8;
    strata_worker_pool *p;
    assert_int_equal(strata_worker_pool_create(&c, &p), STRATA_OK);
    my_job jobs[32];
    rec.gate = 1;
    for (int i = 0; i < 32; i++) {
        jobs[i] = (my_job){.job = {.deadline = i, .run = run_job, .done = done_job},
                           .rec = &rec, .id = i};
        assert_int_equal(strata_worker_submit(p, &jobs[i].job), STRATA_OK);
    }
    /* Both workers hold a job behind the gate; 30 are queued. */
    for (int waited = 0; __atomic_load_n(&rec.started, __ATOMIC_ACQUIRE) < 2; waited++) {
        assert_true(waited < 10000); /* 10 s */
        usleep(1000);
    }
    assert_int_equal(strata_worker_pending(p), 32);
    /* Destroy with the gate still closed: it must cancel the 30 queued jobs
     * and wait for the two running ones, which finish once the gate opens. */
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_later, &rec), 0);
    strata_worker_pool_destroy(p);
    pthread_join(opener, NULL);
    assert_int_equal(rec.started, 2);
    assert_int_equal(rec.done_ok, 2);
    assert_int_equal(rec.cancelled, 30);
    assert_int_equal(rec.done_err, 0);
    assert_int_equal(rec.n, 2);
}

static void test_bad_args(void **state)
{
    (void)state;
    strata_worker_config c;
    strata_worker_config_default(&c);
    assert_true(c.n_workers >= 1);
    strata_worker_pool *p;
    c.n_workers = 0;
    assert_int_equal(strata_worker_pool_create(&c, &p), STRATA_ERR_INVALID_ARG);
    c.n_workers = 1;
    c.pin = true; /* pinning must work or be a no-op */
    assert_int_equal(strata_worker_pool_create(&c, &p), STRATA_OK);
    strata_job j = {0};
    assert_int_equal(strata_worker_submit(p, &j), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_worker_drain(p, 1.0), STRATA_OK);
    strata_worker_pool_destroy(p);
    strata_worker_pool_destroy(NULL);
}

/* Team: every item of every batch runs exactly once, on the caller and the
 * helpers side by side; NULL and one-thread teams run inline. */
typedef struct team_rec {
    int n;
    int *count;        /* per item: times run (atomic) */
    int started1;      /* item 1 began (atomic) */
    int overlapped;    /* item 0 saw item 1 begin before it returned */
    bool wait;         /* item 0 waits (up to 1 s) for item 1 to begin */
} team_rec;

static void team_item(void *user, int i)
{
    team_rec *r = user;
    __atomic_add_fetch(&r->count[i], 1, __ATOMIC_RELAXED);
    if (i == 1)
        __atomic_store_n(&r->started1, 1, __ATOMIC_RELEASE);
    if (i == 0 && r->wait) /* with 2+ threads, another thread claims item 1 while this one waits */
        for (int k = 0; k < 20000 && !__atomic_load_n(&r->started1, __ATOMIC_ACQUIRE); k++)
            usleep(50);
    if (i == 0 && __atomic_load_n(&r->started1, __ATOMIC_ACQUIRE))
        r->overlapped = 1;
}

static void test_team(void **state)
{
    (void)state;
    static const int sizes[] = {0, 1, 2, 3, 7, 64, 257};
    static const int threads[] = {1, 2, 3, 5};
    int count[257];
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        strata_worker_team *t;
        assert_int_equal(strata_worker_team_create(threads[k], &t), STRATA_OK);
        assert_int_equal(strata_worker_team_threads(t), threads[k]);
        for (int rep = 0; rep < 5; rep++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                /* a batch of one runs inline: item 0 has no item 1 to wait for */
                team_rec r = {.n = sizes[s], .count = count,
                              .wait = threads[k] > 1 && sizes[s] >= 2};
                memset(count, 0, sizeof count);
                strata_worker_team_run(t, sizes[s], team_item, &r);
                for (int i = 0; i < sizes[s]; i++)
                    assert_int_equal(count[i], 1);
                /* items ran side by side (one thread never could: item 0
                 * would wait its whole second for an item 1 that only
                 * begins after it) */
                if (sizes[s] >= 2 && threads[k] > 1)
                    assert_int_equal(r.overlapped, 1);
            }
        strata_worker_team_destroy(t);
    }
    /* NULL team: inline */
    team_rec r = {.n = 3, .count = count};
    memset(count, 0, sizeof count);
    strata_worker_team_run(NULL, 3, team_item, &r);
    assert_int_equal(count[0] + count[1] + count[2], 3);
    assert_int_equal(strata_worker_team_threads(NULL), 1);
    strata_worker_team *t;
    assert_int_equal(strata_worker_team_create(0, &t), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_worker_team_create(STRATA_WORKER_TEAM_MAX + 1, &t),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_worker_team_create(2, NULL), STRATA_ERR_INVALID_ARG);
    strata_worker_team_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_order),
        cmocka_unit_test(test_shutdown_with_jobs_in_flight),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_team),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
