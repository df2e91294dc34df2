/* workers/workers.h — CPU threads: a worker pool with a deadline-ordered job
 * queue, and a worker team for fork-join batches (below). Every thread strata
 * starts for parallel work is one of these (the refresh workers, the step
 * team, the one-tensor API's Shampoo roots and Newton-Schulz chunks), so a
 * thread count, core pinning or a core-class policy is set here.
 *
 * Workers are pthreads that run jobs in order of deadline (the step by which
 * the result is needed; ties in submission order). A job is a caller-owned,
 * caller-visible struct (no allocation on submit): the pool calls job->run on
 * a worker, then job->done on the same worker with run's status. libuv's
 * rule holds: if strata_worker_submit fails, neither callback ever fires.
 *
 * Each worker owns a float64 workspace sized at pool creation (for the largest
 * inverse root it will compute: LAPACK workspaces are queried once and kept),
 * and runs OpenBLAS single-threaded (the pool is meant to be used with the
 * process's OpenBLAS thread count at 1 while workers exist, so calls from the
 * training thread and the workers run side by side rather than queueing on
 * OpenBLAS's own thread pool).
 *
 * Shutdown (strata_worker_pool_destroy): jobs still queued are cancelled
 * (done is called with STRATA_ERR_STATE, on the destroying thread), jobs
 * running finish, then the threads are joined. Nothing leaks.
 */
#ifndef STRATA_WORKERS_H
#define STRATA_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a job sees of the worker running it. */
typedef struct strata_worker_ctx {
    int index;          /* 0..n_workers-1 */
    double *work;       /* work_doubles float64s, this worker's alone */
    int *iwork;         /* work_ints ints */
    size_t work_doubles, work_ints;
} strata_worker_ctx;

typedef struct strata_job strata_job;
struct strata_job {
    int64_t deadline;  /* smaller runs first */
    strata_status (*run)(strata_job *job, strata_worker_ctx *w); /* on a worker */
    void (*done)(strata_job *job, strata_status st);            /* after run, same thread */
    void *user;
    /* private to the pool */
    uint64_t seq_;
    int heap_index_;
};

typedef struct strata_worker_config {
    int n_workers;        /* >= 1; default: online cores minus 1, at least 1 */
    size_t work_doubles;  /* per-worker float64 workspace (e.g. strata_inv_root_work_doubles); 0 */
    size_t work_ints;     /* per-worker int workspace; 0 */
    bool pin;             /* pin worker i to the i-th core from the end (hwloc); default false */
    int max_delay_us;     /* testing: sleep a uniform random 0..max_delay_us before each job; 0 */
    uint64_t delay_seed;  /* seed of that delay */
} strata_worker_config;

void strata_worker_config_default(strata_worker_config *c);

typedef struct strata_worker_pool strata_worker_pool;

/* Start the workers. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_NOMEM
 * (workspaces), STRATA_ERR_INTERNAL (pthread_create failed; the threads
 * already started are stopped and joined). */
strata_status strata_worker_pool_create(const strata_worker_config *c,
                                                   strata_worker_pool **out);

/* Queue a job. The job struct must stay valid until its done callback
 * returns. Thread-safe. Errors: STRATA_ERR_INVALID_ARG (NULL job/run),
 * STRATA_ERR_STATE (pool shutting down). */
strata_status strata_worker_submit(strata_worker_pool *p, strata_job *job);

/* Number of jobs queued or running. Thread-safe. */
int strata_worker_pending(strata_worker_pool *p);

/* Wait until no job is queued or running, at most timeout_s seconds.
 * Errors: STRATA_ERR_TIMEOUT. */
strata_status strata_worker_drain(strata_worker_pool *p, double timeout_s);

/* Counters: jobs completed, jobs failed (run returned non-OK), seconds busy. */
typedef struct strata_worker_stats {
    int64_t completed, failed, cancelled;
    double busy_seconds;
} strata_worker_stats;
void strata_worker_stats_get(strata_worker_pool *p, strata_worker_stats *out);

/* Cancel queued jobs (their done callback sees STRATA_ERR_STATE), let
 * running ones finish, join the threads; the stats stay readable until
 * destroy. Idempotent; NULL is a no-op. */
void strata_worker_pool_stop(strata_worker_pool *p);

/* Stop (as strata_worker_pool_stop) and free (NULL ok). */
void strata_worker_pool_destroy(strata_worker_pool *p);

/* ---- team: fork-join over one batch of independent items ----------------
 *
 * A team is the calling thread plus n_threads - 1 helper threads that sleep
 * between batches. strata_worker_team_run(team, n, fn, user) calls fn(user,
 * i) exactly once for every i in [0, n), items claimed in index order by
 * whichever thread is free first (so list the costliest items first), and
 * returns when every call has returned. The items must be independent of
 * each other; which thread runs an item is not determined, so an item's
 * result must not depend on it (each runs whole on one thread; an item that
 * needs a workspace of its own indexes one by `i`, not by thread). Threads
 * calling OpenBLAS should run it single-threaded, as the pool's workers do.
 * One batch at a time: calls to run, create and destroy never overlap (one
 * owner at a time; ownership may pass between threads that are ordered, as
 * a one-tensor optimizer state stepped by whichever step-team thread claims
 * it). fn's own failures are fn's to record (per item); the team has none.
 * Owners: the runtime's step team (strata_config.step_threads), and each
 * one-tensor Shampoo state with root threads > 1 and Muon state with
 * ns_batch_threads > 1 (include/strata/optim.h).
 */
#define STRATA_WORKER_TEAM_MAX 256

typedef struct strata_worker_team strata_worker_team;

/* Start n_threads - 1 helpers (n_threads = 1: none, run is a plain loop).
 * Errors: STRATA_ERR_INVALID_ARG (n_threads outside [1,
 * STRATA_WORKER_TEAM_MAX], NULL out), STRATA_ERR_NOMEM, STRATA_ERR_INTERNAL
 * (pthread_create failed; the helpers already started are joined). */
strata_status strata_worker_team_create(int n_threads, strata_worker_team **out);

/* Threads of the team, the caller included (1 for NULL). */
int strata_worker_team_threads(const strata_worker_team *t);

/* Run fn(user, i) for i in [0, n_items) on the caller and the helpers; back
 * when all returned. NULL team or n_items == 1: inline, in order. */
void strata_worker_team_run(strata_worker_team *t, int n_items, void (*fn)(void *user, int item),
                            void *user);

/* Join the helpers (they finish no batch: none is running when the owner
 * calls this) and free; NULL is a no-op. */
void strata_worker_team_destroy(strata_worker_team *t);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_WORKERS_H */
