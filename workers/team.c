/* Worker team: a fixed set of helper threads that join the calling thread
 * on one batch of independent items at a time (fork-join), for work that
 * must finish before the caller goes on (the optimizer step's per-parameter
 * updates), where the deadline-ordered pool (pool.c) is for work that
 * overlaps the step.
 *
 * Invariants: `gen` counts batches; a helper has joined batch `gen` once it
 * saw it under `mu`; `busy` counts the helpers that have not yet left the
 * current batch, and the caller returns from strata_worker_team_run only
 * when it is 0, so no helper ever touches a batch's items or callback after
 * the call returned. Items are claimed through the atomic `next`, so each
 * runs exactly once, on whichever thread claims it first.
 * Lock order: one mutex (`mu`); the items run with it released.
 * Memory order: the batch (fn, user, n) is written under `mu` before `gen`
 * moves and read by a helper after it took `mu` and saw the new `gen`; what
 * the items write is seen by the caller after it took `mu` and saw
 * busy == 0 (each helper decrements it under `mu` after its last item).
 */
#include "workers/workers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct strata_worker_team {
    pthread_mutex_t mu;
    pthread_cond_t start_cv; /* a batch began, or stopping */
    pthread_cond_t done_cv;  /* busy reached 0 */
    pthread_t *threads;
    int n_helpers, n_started;
    uint64_t gen;
    int busy;
    bool stopping;
    void (*fn)(void *user, int item);
    void *user;
    int n_items;
    atomic_int next;
};

static void claim_items(strata_worker_team *t, void (*fn)(void *, int), void *user, int n)
{
    for (;;) {
        const int i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (i >= n)
            return;
        fn(user, i);
    }
}

static void *helper_main(void *arg)
{
    strata_worker_team *t = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stopping && t->gen == seen)
            pthread_cond_wait(&t->start_cv, &t->mu);
        if (t->stopping)
            break;
        seen = t->gen;
        void (*fn)(void *, int) = t->fn;
        void *user = t->user;
        const int n = t->n_items;
        pthread_mutex_unlock(&t->mu);
        claim_items(t, fn, user, n);
        pthread_mutex_lock(&t->mu);
        if (--t->busy == 0)
            pthread_cond_signal(&t->done_cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void stop_and_join(strata_worker_team *t)
{
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    pthread_cond_broadcast(&t->start_cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_started; i++)
        pthread_join(t->threads[i], NULL);
    t->n_started = 0;
}

strata_status strata_worker_team_create(int n_threads, strata_worker_team **out)
{
    if (!out || n_threads < 1 || n_threads > STRATA_WORKER_TEAM_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "worker_team_create: n_threads %d outside [1, %d] or NULL out",
                            n_threads, STRATA_WORKER_TEAM_MAX);
    *out = NULL;
    strata_worker_team *t = calloc(1, sizeof *t);
    if (!t)
        return strata_error(STRATA_ERR_NOMEM, "worker team: out of memory");
    t->n_helpers = n_threads - 1;
    if (t->n_helpers > 0 && !(t->threads = calloc((size_t)t->n_helpers, sizeof *t->threads))) {
        free(t);
        return strata_error(STRATA_ERR_NOMEM, "worker team: out of memory");
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->start_cv, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    atomic_init(&t->next, 0);
    for (int i = 0; i < t->n_helpers; i++) {
        const int rc = pthread_create(&t->threads[i], NULL, helper_main, t);
        if (rc != 0) {
            strata_worker_team_destroy(t);
            return strata_error(STRATA_ERR_INTERNAL, "worker team: pthread_create failed: %s",
                                strerror(rc));
        }
        t->n_started++;
    }
    *out = t;
    return STRATA_OK;
}

int strata_worker_team_threads(const strata_worker_team *t)
{
    return t ? t->n_helpers + 1 : 1;
}

void strata_worker_team_run(strata_worker_team *t, int n_items, void (*fn)(void *user, int item),
                            void *user)
{
    if (n_items <= 0 || !fn)
        return;
    if (!t || t->n_helpers == 0 || n_items == 1) {
        for (int i = 0; i < n_items; i++)
            fn(user, i);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->user = user;
    t->n_items = n_items;
    atomic_store_explicit(&t->next, 0, memory_order_relaxed);
    t->busy = t->n_helpers;
    t->gen++;
    pthread_cond_broadcast(&t->start_cv);
    pthread_mutex_unlock(&t->mu);
    claim_items(t, fn, user, n_items);
    pthread_mutex_lock(&t->mu);
    while (t->busy > 0)
        pthread_cond_wait(&t->done_cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void strata_worker_team_destroy(strata_worker_team *t)
{
    if (!t)
        return;
    stop_and_join(t);
    pthread_cond_destroy(&t->done_cv);
    pthread_cond_destroy(&t->start_cv);
    pthread_mutex_destroy(&t->mu);
    free(t->threads);
    free(t);
}
