/* base/env.h — every environment variable strata reads, in one table.
 *
 * NCCL's NCCL_PARAM habit: one row per variable (its name, what it holds,
 * its range, who reads it and what it does), one parser per kind, and each
 * value read once and cached: the first access snapshots every cached row
 * (pthread_once), later setenv calls are not seen. A bad value is refused
 * with STRATA_ERR_INVALID_ARG and a message naming the variable, the value
 * and what it must be; each reader decides what that means for it (the
 * runtime refuses to start, a communicator refuses to be created).
 *
 * Rows marked live (the trainer's BLAS core variables, which the trainer
 * itself sets before it re-executes) are read at each access instead.
 *
 * strata_config_default and strata_create (strata.h), the communicators
 * (comm/comm.h), the cost model's cache (plan/plan.h) and the trainer's BLAS
 * core (trainer/blas_core.h) read through here; no other getenv in the
 * library or the command (tests/unit/test_env.c greps for one). At start-up
 * the runtime logs every variable that is set, at STRATA_LOG_INFO
 * (strata_env_log).
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef STRATA_BASE_ENV_H
#define STRATA_BASE_ENV_H

#include <stdbool.h>

#include "base/log.h"
#include "strata/status.h"

typedef enum strata_env_id {
    STRATA_ENV_LOG_LEVEL,        /* STRATA_LOG_LEVEL: default log level, 0..3 */
    STRATA_ENV_RANKS_PER_NODE,   /* STRATA_RANKS_PER_NODE: ranks per node, >= 1 */
    STRATA_ENV_NCCL_TIMEOUT_S,   /* STRATA_NCCL_TIMEOUT_S: bound of an NCCL wait, seconds,
                                    1..86400 (default 600) */
    STRATA_ENV_COMM_TIMEOUT_S,   /* STRATA_COMM_TIMEOUT_S: bound of an MPI wait, seconds,
                                    0..86400 (default 600, 0 = wait forever) */
    STRATA_ENV_COST_CACHE,       /* STRATA_COST_CACHE: "0" turns the cost cache off */
    STRATA_ENV_XDG_CACHE_HOME,   /* XDG_CACHE_HOME: where the cost cache lives */
    STRATA_ENV_HOME,             /* HOME: ~/.cache when XDG_CACHE_HOME is unset */
    STRATA_ENV_OMPI_WORLD_SIZE,  /* OMPI_COMM_WORLD_SIZE: set by Open MPI's launcher */
    STRATA_ENV_PMI_SIZE,         /* PMI_SIZE: set by a PMI launcher (MPICH, Slurm) */
    STRATA_ENV_PMIX_RANK,        /* PMIX_RANK: set by a PMIx launcher */
    STRATA_ENV_OPENBLAS_CORETYPE, /* OPENBLAS_CORETYPE: OpenBLAS's kernel core (live) */
    STRATA_ENV_BLAS_CORE_FROM,   /* STRATA_BLAS_CORE_FROM: the generic core the trainer
                                    re-executed from (live) */
    STRATA_ENV_TEST_CORE_AS_DETECTED, /* STRATA_TEST_BLAS_CORETYPE_AS_DETECTED: tests only:
                                         OPENBLAS_CORETYPE counts as detected (live) */
    STRATA_ENV_COUNT
} strata_env_id;

typedef enum strata_env_kind {
    STRATA_ENV_INT,      /* a decimal integer in [lo, hi], the whole value */
    STRATA_ENV_STRING,   /* any value; empty counts as unset */
    STRATA_ENV_PRESENCE, /* set (even empty) or not; the value as given */
} strata_env_kind;

typedef struct strata_env_var {
    const char *name;   /* the variable */
    strata_env_kind kind;
    long lo, hi;        /* STRATA_ENV_INT: the accepted range */
    bool live;          /* read at each access (the process sets it itself) */
    const char *reader; /* the component that reads it */
    const char *doc;    /* what it does, its unit and what unset means */
} strata_env_var;

/* The table's row for `id` (NULL when out of range). */
const strata_env_var *strata_env_var_of(strata_env_id id);

/* Parse `value` as variable `id`'s kind: for STRATA_ENV_INT the whole
 * string must be a decimal integer in [lo, hi] (*out set); the other kinds
 * accept anything (*out untouched). No caching, no environment.
 * Errors: STRATA_ERR_INVALID_ARG ("NAME='value': must be an integer in
 * [lo, hi]"; id out of range; value or out NULL for an int). */
strata_status strata_env_parse_int(strata_env_id id, const char *value, long *out);

/* The variable's value (cached at first use, or live), NULL when unset or
 * (except STRATA_ENV_PRESENCE rows) empty. The pointer stays valid for the process (cached rows) or until the
 * next setenv (live rows). */
const char *strata_env_str(strata_env_id id);

/* Whether the variable is set: strata_env_str is not NULL. */
bool strata_env_is_set(strata_env_id id);

/* An integer variable: *out = its value and *set = true; when unset,
 * *out = dflt and *set = false. Errors: STRATA_ERR_INVALID_ARG (a value
 * strata_env_parse_int refuses, named in strata_last_error(); *out = dflt). */
strata_status strata_env_int(strata_env_id id, long dflt, long *out, bool *set);

/* Every variable that is set, one INFO line each through `lg` ("NAME=value:
 * doc"), and a refused value at WARN (in base/log.c: env.c is also linked
 * into the trainer, which has no logger). */
void strata_env_log(const strata_logger *lg);

#endif
