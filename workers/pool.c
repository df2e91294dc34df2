/* Worker pool: pthreads draining a deadline-ordered binary heap of jobs.
 *
 * Invariants: `heap` holds exactly the queued (not yet running) jobs, ordered
 * by (deadline, seq); `running` counts jobs between being popped and their
 * done callback returning. `stopping` is set once, by destroy; after it no
 * job is popped and submit fails.
 * Lock order: one mutex (`mu`) guards everything above; callbacks run with it
 * released.
 */
#include "workers/workers.h"

#include "base/clock.h"

#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct worker {
    struct strata_worker_pool *pool;
    pthread_t thread;
    strata_worker_ctx ctx;
    uint64_t rng;
} worker;

struct strata_worker_pool {
    strata_worker_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a job was queued, or stopping */
    pthread_cond_t idle_cv; /* a job finished */
    strata_job **heap;
    int heap_len, heap_cap;
    int running;
    bool stopping;
    uint64_t next_seq;
    worker *workers;
    int n_started;
    hwloc_topology_t topo;
    bool have_topo;
    strata_worker_stats stats;
};


void strata_worker_config_default(strata_worker_config *c)
{
    memset(c, 0, sizeof *c);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->n_workers = cores > 1 ? (cores > 1025 ? 1024 : (int)cores - 1) : 1; /* the range below */
    c->pin = false;
}

static bool job_before(const strata_job *a, const strata_job *b)
{
    return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq_ < b->seq_);
}

static void heap_swap(strata_worker_pool *p, int i, int j)
{
    strata_job *t = p->heap[i];
    p->heap[i] = p->heap[j];
    p->heap[j] = t;
    p->heap[i]->heap_index_ = i;
    p->heap[j]->heap_index_ = j;
}

static void heap_push(strata_worker_pool *p, strata_job *job)
{
    int i = p->heap_len++;
    p->heap[i] = job;
    job->heap_index_ = i;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!job_before(p->heap[i], p->heap[parent]))
            break;
        heap_swap(p, i, parent);
        i = parent;
    }
}

static strata_job *heap_pop(strata_worker_pool *p)
{
    strata_job *top = p->heap[0];
    p->heap_len--;
    if (p->heap_len > 0) {
        p->heap[0] = p->heap[p->heap_len];
        p->heap[0]->heap_index_ = 0;
        int i = 0;
        for (;;) {
            int l = 2 * i + 1, r = l + 1, m = i;
            if (l < p->heap_len && job_before(p->heap[l], p->heap[m]))
                m = l;
            if (r < p->heap_len && job_before(p->heap[r], p->heap[m]))
                m = r;
            if (m == i)
                break;
            heap_swap(p, i, m);
            i = m;
        }
    }
    top->heap_index_ = -1;
    return top;
}

static void pin_self(strata_worker_pool *p, int index)
{
    if (!p->have_topo)
        return;
    int ncores = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE);
    if (ncores <= 0)
        return;
    /* Workers take cores from the end; the training thread keeps core 0. */
    hwloc_obj_t core = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_CORE,
                                             (unsigned)((ncores - 1 - index % ncores + ncores) % ncores));
    if (core)
        hwloc_set_cpubind(p->topo, core->cpuset, HWLOC_CPUBIND_THREAD);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    strata_worker_pool *p = w->pool;
    if (p->cfg.pin)
        pin_self(p, w->ctx.index);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->heap_len == 0)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stopping)
            break;
        strata_job *job = heap_pop(p);
        p->running++;
        pthread_mutex_unlock(&p->mu);

        if (p->cfg.max_delay_us > 0) {
            w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
            useconds_t us = (useconds_t)((w->rng >> 33) % ((uint64_t)p->cfg.max_delay_us + 1));
            usleep(us);
        }
        double t0 = strata_now_seconds();
        strata_status st = job->run(job, &w->ctx);
        double busy = strata_now_seconds() - t0;
        if (job->done)
            job->done(job, st);

        pthread_mutex_lock(&p->mu);
        p->running--;
        p->stats.busy_seconds += busy;
        if (st == STRATA_OK)
            p->stats.completed++;
        else
            p->stats.failed++;
        pthread_cond_broadcast(&p->idle_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void stop_and_join(strata_worker_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    /* Cancel what never started: its done callback learns it. */
    while (p->heap_len > 0) {
        strata_job *job = heap_pop(p);
        p->stats.cancelled++;
        pthread_mutex_unlock(&p->mu);
        if (job->done)
            job->done(job, strata_error(STRATA_ERR_STATE, "worker pool shut down; job cancelled"));
        pthread_mutex_lock(&p->mu);
    }
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
    p->n_started = 0;
}

static void free_pool(strata_worker_pool *p)
{
    if (p->workers)
        for (int i = 0; i < p->cfg.n_workers; i++) {
            free(p->workers[i].ctx.work);
            free(p->workers[i].ctx.iwork);
        }
    free(p->workers);
    free(p->heap);
    if (p->have_topo)
        hwloc_topology_destroy(p->topo);
    pthread_cond_destroy(&p->idle_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

strata_status strata_worker_pool_create(const strata_worker_config *c, strata_worker_pool **out)
{
    if (!c || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "worker_pool_create: NULL argument");
    *out = NULL;
    if (c->n_workers < 1 || c->n_workers > 1024 || c->max_delay_us < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "worker_pool_create: n_workers %d not in 1..1024",
                            c->n_workers);
    strata_worker_pool *p = calloc(1, sizeof *p);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "worker pool: out of memory");
    p->cfg = *c;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->idle_cv, NULL);
    p->heap_cap = 64;
    p->heap = malloc((size_t)p->heap_cap * sizeof *p->heap);
    p->workers = calloc((size_t)c->n_workers, sizeof *p->workers);
    if (!p->heap || !p->workers) {
        free_pool(p);
        return strata_error(STRATA_ERR_NOMEM, "worker pool: out of memory");
    }
    for (int i = 0; i < c->n_workers; i++) {
        worker *w = &p->workers[i];
        w->pool = p;
        w->ctx.index = i;
        w->rng = c->delay_seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        w->ctx.work_doubles = c->work_doubles;
        w->ctx.work_ints = c->work_ints;
        if (c->work_doubles && !(w->ctx.work = malloc(c->work_doubles * sizeof(double)))) {
            free_pool(p);
            return strata_error(STRATA_ERR_NOMEM, "worker pool: cannot allocate %zu workspace doubles",
                                c->work_doubles);
        }
        if (c->work_ints && !(w->ctx.iwork = malloc(c->work_ints * sizeof(int)))) {
            free_pool(p);
            return strata_error(STRATA_ERR_NOMEM, "worker pool: out of memory");
        }
    }
    if (c->pin && hwloc_topology_init(&p->topo) == 0) {
        if (hwloc_topology_load(p->topo) == 0)
            p->have_topo = true;
        else
            hwloc_topology_destroy(p->topo);
    }
    for (int i = 0; i < c->n_workers; i++) {
        int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            stop_and_join(p);
            free_pool(p);
            return strata_error(STRATA_ERR_INTERNAL, "worker pool: pthread_create failed: %s",
                                strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return STRATA_OK;
}

strata_status strata_worker_submit(strata_worker_pool *p, strata_job *job)
{
    if (!p || !job || !job->run)
        return strata_error(STRATA_ERR_INVALID_ARG, "worker_submit: NULL pool, job or run");
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return strata_error(STRATA_ERR_STATE, "worker_submit: pool is shutting down");
    }
    if (p->heap_len == p->heap_cap) {
        strata_job **nh = realloc(p->heap, (size_t)p->heap_cap * 2 * sizeof *nh);
        if (!nh) {
            pthread_mutex_unlock(&p->mu);
            return strata_error(STRATA_ERR_NOMEM, "worker_submit: out of memory");
        }
        p->heap = nh;
        p->heap_cap *= 2;
    }
    job->seq_ = p->next_seq++;
    heap_push(p, job);
    pthread_cond_signal(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    return STRATA_OK;
}

int strata_worker_pending(strata_worker_pool *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    int n = p->heap_len + p->running;
    pthread_mutex_unlock(&p->mu);
    return n;
}

strata_status strata_worker_drain(strata_worker_pool *p, double timeout_s)
{
    if (!p)
        return strata_error(STRATA_ERR_INVALID_ARG, "worker_drain: NULL pool");
    struct timespec dl = strata_deadline_after(timeout_s);
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    while ((p->heap_len > 0 || p->running > 0) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&p->idle_cv, &p->mu, &dl);
    bool busy = p->heap_len > 0 || p->running > 0;
    pthread_mutex_unlock(&p->mu);
    return busy ? strata_error(STRATA_ERR_TIMEOUT, "worker_drain: jobs still pending after %.1f s",
                               timeout_s)
                : STRATA_OK;
}

void strata_worker_stats_get(strata_worker_pool *p, strata_worker_stats *out)
{
    if (!p || !out)
        return;
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}

void strata_worker_pool_stop(strata_worker_pool *p)
{
    if (p)
        stop_and_join(p);
}

void strata_worker_pool_destroy(strata_worker_pool *p)
{
    if (!p)
        return;
    stop_and_join(p);
    free_pool(p);
}
