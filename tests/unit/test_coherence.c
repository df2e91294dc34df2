/* Coherence registry: the protocol's rules one by one, then a stress test
 * with worker threads of random speed (run under TSan): staleness never
 * exceeds F-1+S after the first install, versions never go backwards, and
 * nothing deadlocks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coherence/coherence.h"

static strata_coh_registry *make(int F, int start, int S, strata_coh_mode mode, int blocks)
{
    strata_coh_config c = {.precondition_frequency = F, .start = start, .staleness = S,
                           .mode = mode, .timeout_s = 5.0};
    strata_coh_registry *r;
    assert_int_equal(strata_coh_create(&c, blocks, &r), STRATA_OK);
    return r;
}

static void test_slots_and_refresh_points(void **state)
{
    (void)state;
    assert_int_equal(strata_coh_slots_needed(10, 0), 2);
    assert_int_equal(strata_coh_slots_needed(10, 1), 3);
    assert_int_equal(strata_coh_slots_needed(10, 10), 3);
    assert_int_equal(strata_coh_slots_needed(10, 11), 4);
    strata_coh_config c = {.precondition_frequency = 3, .start = 4, .staleness = 0,
                           .timeout_s = 1};
    assert_false(strata_coh_is_refresh(&c, 3));
    assert_true(strata_coh_is_refresh(&c, 4));
    assert_false(strata_coh_is_refresh(&c, 5));
    assert_true(strata_coh_is_refresh(&c, 7));
    strata_coh_registry *r;
    c.precondition_frequency = 0;
    assert_int_equal(strata_coh_create(&c, 1, &r), STRATA_ERR_INVALID_ARG);
}

/* Block offsets (staggered refresh): per-block refresh points and due
 * versions; offsets are checked and frozen once a refresh has begun. */
static void test_block_offsets(void **state)
{
    (void)state;
    strata_coh_registry *r = make(3, 2, 1, STRATA_COH_FIXED, 2); /* F 3, start 2, S 1 */
    assert_int_equal(strata_coh_set_block_offset(r, 1, 2), STRATA_OK);
    assert_int_equal(strata_coh_set_block_offset(r, 0, 3), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_coh_set_block_offset(r, 0, -1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_coh_set_block_offset(r, 2, 0), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_coh_block_start(r, 0), 2);
    assert_int_equal(strata_coh_block_start(r, 1), 4);
    assert_false(strata_coh_block_is_refresh(r, 1, 2));
    assert_true(strata_coh_block_is_refresh(r, 1, 4));
    assert_true(strata_coh_block_is_refresh(r, 1, 7));
    assert_true(strata_coh_block_is_refresh(r, 0, 5));
    assert_int_equal(strata_coh_block_due_version(r, 1, 4), -1); /* S = 1: 4 is due at 5 */
    assert_int_equal(strata_coh_block_due_version(r, 1, 5), 4);
    assert_int_equal(strata_coh_block_due_version(r, 1, 7), 4);
    assert_int_equal(strata_coh_block_due_version(r, 1, 8), 7);
    assert_int_equal(strata_coh_block_due_version(r, 0, 3), 2);
    /* Block 1's first root is due at step 5 and is waited for there only. */
    int s1, slot;
    int64_t v;
    bool now;
    assert_int_equal(strata_coh_begin_refresh(r, 1, 4, &s1), STRATA_OK);
    assert_int_equal(strata_coh_acquire(r, 1, 4, &slot, &v, &now), STRATA_OK);
    assert_int_equal(slot, -1);
    strata_coh_mark_computing(r, 1, s1);
    strata_coh_complete(r, 1, s1, true);
    assert_int_equal(strata_coh_acquire(r, 1, 5, &slot, &v, &now), STRATA_OK);
    assert_int_equal(v, 4);
    assert_true(now);
    assert_int_equal(strata_coh_set_block_offset(r, 0, 1), STRATA_ERR_STATE);
    strata_coh_destroy(r);
}

/* S = 0, fixed: the root of r is installed at r itself (the synchronous path). */
static void test_fixed_s0_installs_at_refresh(void **state)
{
    (void)state;
    strata_coh_registry *r = make(2, 2, 0, STRATA_COH_FIXED, 1);
    int slot;
    int64_t v;
    bool now;
    assert_int_equal(strata_coh_acquire(r, 0, 1, &slot, &v, &now), STRATA_OK);
    assert_int_equal(slot, -1); /* before the first refresh: fallback */
    int s2;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 2, &s2), STRATA_OK);
    strata_coh_mark_computing(r, 0, s2);
    strata_coh_complete(r, 0, s2, true);
    assert_int_equal(strata_coh_acquire(r, 0, 2, &slot, &v, &now), STRATA_OK);
    assert_int_equal(slot, s2);
    assert_int_equal(v, 2);
    assert_true(now);
    assert_int_equal(strata_coh_acquire(r, 0, 3, &slot, &v, &now), STRATA_OK);
    assert_int_equal(v, 2);
    assert_false(now);
    strata_coh_stats st;
    strata_coh_stats_get(r, &st);
    assert_int_equal(st.installs, 1);
    assert_int_equal(st.max_staleness, 1);
    strata_coh_destroy(r);
}

/* S = 2, fixed: a ready root is NOT installed before r + S. */
static void test_fixed_waits_for_due_point(void **state)
{
    (void)state;
    strata_coh_registry *r = make(3, 3, 2, STRATA_COH_FIXED, 1);
    int s3, slot;
    int64_t v;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 3, &s3), STRATA_OK);
    strata_coh_complete(r, 0, s3, true);
    for (int t = 3; t <= 4; t++) {
        assert_int_equal(strata_coh_acquire(r, 0, t, &slot, &v, NULL), STRATA_OK);
        assert_int_equal(slot, -1);
    }
    assert_int_equal(strata_coh_acquire(r, 0, 5, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 3);
    strata_coh_destroy(r);
}

/* Eager installs any newer ready root at once. */
static void test_eager_installs_early(void **state)
{
    (void)state;
    strata_coh_registry *r = make(3, 3, 2, STRATA_COH_EAGER, 1);
    int s3, slot;
    int64_t v;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 3, &s3), STRATA_OK);
    strata_coh_complete(r, 0, s3, true);
    assert_int_equal(strata_coh_acquire(r, 0, 3, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 3);
    strata_coh_destroy(r);
}

/* A failed job keeps the previous version; an older result finishing after a
 * newer one is installed is dropped, never installed. */
static void test_failure_and_drop(void **state)
{
    (void)state;
    strata_coh_registry *r = make(1, 1, 3, STRATA_COH_EAGER, 1);
    int sa, sb, sc, slot;
    int64_t v;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 1, &sa), STRATA_OK);
    assert_int_equal(strata_coh_begin_refresh(r, 0, 2, &sb), STRATA_OK);
    assert_int_equal(strata_coh_begin_refresh(r, 0, 3, &sc), STRATA_OK);
    strata_coh_complete(r, 0, sb, true);
    assert_int_equal(strata_coh_acquire(r, 0, 3, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 2);                 /* eager: newest ready */
    strata_coh_complete(r, 0, sa, true);     /* older than installed: dropped */
    assert_int_equal(strata_coh_slot_get(r, 0, sa, NULL), STRATA_SLOT_FREE);
    strata_coh_complete(r, 0, sc, false);    /* failed */
    assert_int_equal(strata_coh_acquire(r, 0, 6, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 2);                 /* previous kept */
    strata_coh_stats st;
    strata_coh_stats_get(r, &st);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.bound_exceeded, 1); /* staleness 4 > F-1+S = 3, after a failure */
    strata_coh_destroy(r);
}

/* wait_slot (HSDP's computing replica before it ships): waits for the job,
 * installs nothing, times out as an error, and reports FAILED and dropped
 * results as they are. */
typedef struct late_job {
    strata_coh_registry *r;
    int slot;
    bool ok;
} late_job;

static void *complete_late(void *arg)
{
    late_job *j = arg;
    usleep(50000);
    strata_coh_mark_computing(j->r, 0, j->slot);
    strata_coh_complete(j->r, 0, j->slot, j->ok);
    return NULL;
}

static void test_wait_slot(void **state)
{
    (void)state;
    strata_coh_config c = {.precondition_frequency = 1, .start = 1, .staleness = 1,
                           .mode = STRATA_COH_FIXED, .timeout_s = 0.02};
    strata_coh_registry *r;
    assert_int_equal(strata_coh_create(&c, 1, &r), STRATA_OK);
    int s1, s2, slot;
    int64_t v;
    strata_coh_slot_state st;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 1, &s1), STRATA_OK);
    assert_int_equal(strata_coh_wait_slot(r, 0, s1, &st), STRATA_ERR_TIMEOUT);
    assert_int_equal(st, STRATA_SLOT_PENDING);
    strata_coh_destroy(r);

    c.timeout_s = 5.0;
    assert_int_equal(strata_coh_create(&c, 1, &r), STRATA_OK);
    assert_int_equal(strata_coh_begin_refresh(r, 0, 1, &s1), STRATA_OK);
    late_job j = {r, s1, true};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, complete_late, &j), 0);
    assert_int_equal(strata_coh_wait_slot(r, 0, s1, &st), STRATA_OK);
    assert_int_equal(st, STRATA_SLOT_READY);
    pthread_join(th, NULL);
    /* Nothing installed by the wait: fixed mode installs version 1 at step 2,
     * without waiting again. */
    strata_coh_stats cs0, cs;
    strata_coh_stats_get(r, &cs0);
    assert_int_equal(strata_coh_acquire(r, 0, 1, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(slot, -1);
    assert_int_equal(strata_coh_acquire(r, 0, 2, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 1);
    strata_coh_stats_get(r, &cs);
    assert_int_equal(cs.waits, cs0.waits);
    assert_int_equal(cs.installs, 1);
    /* A failed job: FAILED, and the installed version stays. */
    assert_int_equal(strata_coh_begin_refresh(r, 0, 2, &s2), STRATA_OK);
    j = (late_job){r, s2, false};
    assert_int_equal(pthread_create(&th, NULL, complete_late, &j), 0);
    assert_int_equal(strata_coh_wait_slot(r, 0, s2, &st), STRATA_OK);
    assert_int_equal(st, STRATA_SLOT_FAILED);
    pthread_join(th, NULL);
    assert_int_equal(strata_coh_acquire(r, 0, 3, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 1);
    strata_coh_stats_get(r, &cs);
    assert_int_equal(cs.failed, 1);
    assert_int_equal(strata_coh_wait_slot(r, 0, 99, &st), STRATA_ERR_INVALID_ARG);
    strata_coh_destroy(r);
}

/* The stale-correction valve's registry calls (F = 1, S = 0, 2 slots):
 * acquire_nowait never waits on a busy due job, installs the newest READY
 * result instead and counts no staleness for that acquire; try_begin
 * reports a full block instead of waiting; install_ready frees a slot. */
static void test_valve_nowait(void **state)
{
    (void)state;
    strata_coh_registry *r = make(1, 1, 0, STRATA_COH_FIXED, 1);
    int s1, s2, s3, slot;
    int64_t v;
    bool now, would_wait;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 1, &s1), STRATA_OK);
    strata_coh_complete(r, 0, s1, true);
    assert_int_equal(strata_coh_acquire(r, 0, 1, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 1);
    /* step 2: its job is in flight: no wait, the installed version stays */
    assert_int_equal(strata_coh_try_begin_refresh(r, 0, 2, &s2), STRATA_OK);
    assert_true(s2 >= 0);
    assert_int_equal(strata_coh_acquire_nowait(r, 0, 2, &slot, &v, &now, &would_wait),
                     STRATA_OK);
    assert_true(would_wait);
    assert_false(now);
    assert_int_equal(v, 1);
    /* step 3: both slots busy (installed 1, computing 2): try_begin skips */
    strata_coh_mark_computing(r, 0, s2);
    assert_int_equal(strata_coh_try_begin_refresh(r, 0, 3, &s3), STRATA_OK);
    assert_int_equal(s3, -1);
    assert_int_equal(strata_coh_acquire_nowait(r, 0, 3, &slot, &v, &now, &would_wait),
                     STRATA_OK);
    assert_true(would_wait);
    assert_int_equal(v, 1);
    strata_coh_stats st;
    strata_coh_stats_get(r, &st);
    assert_int_equal(st.waits, 0);
    assert_int_equal(st.max_staleness, 0); /* the corrected acquires are the caller's to count */
    assert_int_equal(st.bound_exceeded, 0);
    /* step 4: 2 is READY; install_ready frees the old slot for refresh 4 */
    strata_coh_complete(r, 0, s2, true);
    assert_int_equal(strata_coh_try_begin_refresh(r, 0, 4, &s3), STRATA_OK);
    assert_int_equal(s3, -1);
    assert_int_equal(strata_coh_install_ready(r, 0, 4, &slot), STRATA_OK);
    assert_int_equal(slot, s2);
    assert_int_equal(strata_coh_try_begin_refresh(r, 0, 4, &s3), STRATA_OK);
    assert_int_equal(s3, s1);
    /* refresh 3 was skipped: the skip branch finds 4 busy, installs nothing newer */
    assert_int_equal(strata_coh_acquire_nowait(r, 0, 4, &slot, &v, &now, &would_wait),
                     STRATA_OK);
    assert_true(would_wait);
    assert_int_equal(v, 2);
    /* 4 done: a plain acquire installs it, staleness 0 counted */
    strata_coh_complete(r, 0, s3, true);
    assert_int_equal(strata_coh_acquire_nowait(r, 0, 4, &slot, &v, &now, &would_wait),
                     STRATA_OK);
    assert_false(would_wait);
    assert_true(now);
    assert_int_equal(v, 4);
    strata_coh_stats_get(r, &st);
    assert_int_equal(st.waits, 0);
    assert_int_equal(st.installs, 3);
    assert_int_equal(st.max_staleness, 0);
    strata_coh_destroy(r);
}

static void test_timeout_is_an_error(void **state)
{
    (void)state;
    strata_coh_config c = {.precondition_frequency = 1, .start = 1, .staleness = 0,
                           .mode = STRATA_COH_FIXED, .timeout_s = 0.05};
    strata_coh_registry *r;
    assert_int_equal(strata_coh_create(&c, 1, &r), STRATA_OK);
    int s1, slot;
    int64_t v;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 1, &s1), STRATA_OK);
    assert_int_equal(strata_coh_acquire(r, 0, 1, &slot, &v, NULL), STRATA_ERR_TIMEOUT);
    strata_coh_complete(r, 0, s1, true);
    assert_int_equal(strata_coh_acquire(r, 0, 1, &slot, &v, NULL), STRATA_OK);
    assert_int_equal(v, 1);
    /* Every slot busy: begin_refresh times out instead of hanging. */
    int a, b2;
    assert_int_equal(strata_coh_begin_refresh(r, 0, 2, &a), STRATA_OK);
    assert_int_equal(strata_coh_begin_refresh(r, 0, 3, &b2), STRATA_ERR_TIMEOUT);
    strata_coh_complete(r, 0, a, true);
    assert_int_equal(strata_coh_quiesce(r, 1.0), STRATA_OK);
    strata_coh_destroy(r);
}

/* ---- stress: random worker speed, several blocks, F and S combinations */

typedef struct stress_job {
    strata_coh_registry *reg;
    int block, slot;
    unsigned delay_us;
    bool fail;
    /* chained (a ring of results whose refreshes continue each other, as
     * the engine runs SOAP's at S >= F): the block's job begun before this
     * one, waited for with strata_coh_wait_done before this one runs */
    int pred_slot;
    int64_t pred_version, version;
} stress_job;

/* chained stress: per block the version of the job that finished last, and
 * the jobs that found their predecessor unfinished after the wait */
static _Atomic int64_t chain_done[8];
static _Atomic int chain_out_of_order;

typedef struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stress_job items[4096];
    int head, tail;
    bool stop;
} queue;

static void *stress_worker(void *arg)
{
    queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (q->head == q->tail && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->head == q->tail && q->stop) {
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        stress_job j = q->items[q->head++ % 4096];
        pthread_mutex_unlock(&q->mu);
        strata_coh_mark_computing(j.reg, j.block, j.slot);
        if (j.pred_slot >= 0) {
            while (strata_coh_wait_done(j.reg, j.block, j.pred_slot, j.pred_version, 5.0) !=
                   STRATA_OK)
                ;
            if (atomic_load(&chain_done[j.block]) != j.pred_version)
                atomic_fetch_add(&chain_out_of_order, 1);
        }
        usleep(j.delay_us);
        if (j.pred_slot >= 0 || j.pred_version == -2)
            atomic_store(&chain_done[j.block], j.version);
        strata_coh_complete(j.reg, j.block, j.slot, !j.fail);
    }
}

static void stress_run(int F, int S, strata_coh_mode mode, int fail_every, bool stagger,
                       bool chained)
{
    enum { BLOCKS = 5, STEPS = 120, WORKERS = 2 };
    strata_coh_config c = {.precondition_frequency = F, .start = F, .staleness = S, .mode = mode,
                           .timeout_s = 30.0};
    strata_coh_registry *reg;
    assert_int_equal(strata_coh_create(&c, BLOCKS, &reg), STRATA_OK);
    int64_t start[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        if (stagger)
            assert_int_equal(strata_coh_set_block_offset(reg, b, (b * 7) % F), STRATA_OK);
        start[b] = strata_coh_block_start(reg, b);
        assert_int_equal(start[b], c.start + (stagger ? (b * 7) % F : 0));
    }
    queue *q = calloc(1, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&th[i], NULL, stress_worker, q);
    unsigned seed = (unsigned)(F * 131 + S * 7 + mode);
    int64_t last_v[BLOCKS], last_version[BLOCKS];
    int last_slot[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        last_v[b] = -1;
        last_slot[b] = -1;
        last_version[b] = -1;
        atomic_store(&chain_done[b], -1);
    }
    atomic_store(&chain_out_of_order, 0);
    int njobs = 0;
    for (int64_t t = 1; t <= STEPS; t++) {
        for (int b = 0; b < BLOCKS; b++) {
            if (strata_coh_block_is_refresh(reg, b, t)) {
                int slot;
                assert_int_equal(strata_coh_begin_refresh(reg, b, t, &slot), STRATA_OK);
                seed = seed * 1103515245u + 12345u;
                stress_job j = {reg, b, slot, (seed >> 16) % 3000,
                                fail_every && (++njobs % fail_every == 0), -1, -1, t};
                if (chained) { /* -2: the block's first job, no predecessor */
                    j.pred_slot = last_slot[b];
                    j.pred_version = last_slot[b] >= 0 ? last_version[b] : -2;
                    last_slot[b] = slot;
                    last_version[b] = t;
                }
                pthread_mutex_lock(&q->mu);
                q->items[q->tail++ % 4096] = j;
                pthread_cond_signal(&q->cv);
                pthread_mutex_unlock(&q->mu);
            }
            int slot;
            int64_t v;
            assert_int_equal(strata_coh_acquire(reg, b, t, &slot, &v, NULL), STRATA_OK);
            assert_true(v >= last_v[b]); /* never backwards */
            last_v[b] = v;
            if (t - S >= start[b] && !fail_every) {
                assert_true(v >= 0);
                assert_true(t - v <= F - 1 + S);
                if (mode == STRATA_COH_FIXED)
                    assert_true(t - v >= S);
            }
        }
        if (t % 7 == 0)
            usleep(500); /* the "forward/backward" of the step */
    }
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(strata_coh_quiesce(reg, 5.0), STRATA_OK);
    strata_coh_stats st;
    strata_coh_stats_get(reg, &st);
    if (!fail_every)
        assert_true(st.max_staleness <= F - 1 + S);
    assert_int_equal(atomic_load(&chain_out_of_order), 0);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
    strata_coh_destroy(reg);
}

static void stress(int F, int S, strata_coh_mode mode, int fail_every, bool stagger)
{
    stress_run(F, S, mode, fail_every, stagger, false);
}

static void test_stress_random_delays(void **state)
{
    (void)state;
    const int Fs[] = {1, 3, 10};
    const int Ss[] = {0, 1, 2, 5, 10};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 5; k++) {
            stress(Fs[i], Ss[k], STRATA_COH_FIXED, 0, false);
            stress(Fs[i], Ss[k], STRATA_COH_EAGER, 0, false);
            stress(Fs[i], Ss[k], k % 2 ? STRATA_COH_EAGER : STRATA_COH_FIXED, 0, true);
        }
    stress(2, 3, STRATA_COH_FIXED, 4, false); /* with failed jobs: monotone, no deadlock */
    stress(3, 1, STRATA_COH_FIXED, 4, true);
    /* Rings of chained results (issue 23): F = 1, S = 1..3, each job waiting
     * for the one before it; the bound holds and no job runs before its
     * predecessor finished. */
    for (int S = 1; S <= 3; S++)
        stress_run(1, S, S == 2 ? STRATA_COH_EAGER : STRATA_COH_FIXED, 0, false, true);
    stress_run(3, 5, STRATA_COH_FIXED, 0, true, true);
    stress_run(1, 2, STRATA_COH_FIXED, 4, false, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_and_refresh_points),
        cmocka_unit_test(test_fixed_s0_installs_at_refresh),
        cmocka_unit_test(test_block_offsets),
        cmocka_unit_test(test_fixed_waits_for_due_point),
        cmocka_unit_test(test_eager_installs_early),
        cmocka_unit_test(test_failure_and_drop),
        cmocka_unit_test(test_timeout_is_an_error),
        cmocka_unit_test(test_wait_slot),
        cmocka_unit_test(test_valve_nowait),
        cmocka_unit_test(test_stress_random_delays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
