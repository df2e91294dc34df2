/* The environment table (env.h).
 *
 * The cache: one pthread_once copies every cached row's value (strdup; kept
 * for the process, read-only afterwards), so that concurrent readers see
 * one snapshot and a later setenv cannot invalidate a pointer handed out.
 */
#include "base/env.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const strata_env_var g_vars[STRATA_ENV_COUNT] = {
    [STRATA_ENV_LOG_LEVEL] = {"STRATA_LOG_LEVEL", STRATA_ENV_INT, 0, 3, false, "runtime",
                              "strata_config_default's log_level: 0 error, 1 warn, 2 info, "
                              "3 debug (unset: 1)"},
    [STRATA_ENV_RANKS_PER_NODE] = {"STRATA_RANKS_PER_NODE", STRATA_ENV_INT, 1, INT_MAX, false,
                                   "comm", "ranks per node for the MPI and NCCL communicators: "
                                   "rank r is on node r / N (unset: the shared-memory groups)"},
    [STRATA_ENV_NCCL_TIMEOUT_S] = {"STRATA_NCCL_TIMEOUT_S", STRATA_ENV_INT, 1, 86400, false,
                                   "comm", "seconds an NCCL collective may wait before it "
                                   "fails with STRATA_ERR_TIMEOUT (default 600)"},
    [STRATA_ENV_COMM_TIMEOUT_S] = {"STRATA_COMM_TIMEOUT_S", STRATA_ENV_INT, 0, 86400, false,
                                   "comm", "seconds an MPI collective or message may wait "
                                   "before every rank still running reports the ranks it "
                                   "waited for and fails with STRATA_ERR_TIMEOUT (default "
                                   "600; 0 waits forever, for debugging)"},
    [STRATA_ENV_COST_CACHE] = {"STRATA_COST_CACHE", STRATA_ENV_STRING, 0, 0, false, "plan",
                               "0 turns the planner's measured-cost cache off (unset: on)"},
    [STRATA_ENV_XDG_CACHE_HOME] = {"XDG_CACHE_HOME", STRATA_ENV_STRING, 0, 0, false, "plan",
                                   "the cost cache is $XDG_CACHE_HOME/strata/costs-v1.tsv"},
    [STRATA_ENV_HOME] = {"HOME", STRATA_ENV_STRING, 0, 0, false, "plan",
                         "without XDG_CACHE_HOME, the cost cache is under $HOME/.cache/strata"},
    [STRATA_ENV_OMPI_WORLD_SIZE] = {"OMPI_COMM_WORLD_SIZE", STRATA_ENV_PRESENCE, 0, 0, false,
                                    "comm", "set: launched by Open MPI's mpirun "
                                    "(strata_comm_mpi_launched)"},
    [STRATA_ENV_PMI_SIZE] = {"PMI_SIZE", STRATA_ENV_PRESENCE, 0, 0, false, "comm",
                             "set: launched by a PMI launcher (MPICH's mpiexec, srun)"},
    [STRATA_ENV_PMIX_RANK] = {"PMIX_RANK", STRATA_ENV_PRESENCE, 0, 0, false, "comm",
                              "set: launched by a PMIx launcher"},
    [STRATA_ENV_OPENBLAS_CORETYPE] = {"OPENBLAS_CORETYPE", STRATA_ENV_STRING, 0, 0, true,
                                      "trainer", "OpenBLAS's kernel core; set by the user, or "
                                      "by the trainer before it re-executes off a generic "
                                      "core"},
    [STRATA_ENV_BLAS_CORE_FROM] = {"STRATA_BLAS_CORE_FROM", STRATA_ENV_PRESENCE, 0, 0, true,
                                   "trainer", "the generic core the trainer re-executed from "
                                   "(set by the trainer itself)"},
    [STRATA_ENV_TEST_CORE_AS_DETECTED] = {"STRATA_TEST_BLAS_CORETYPE_AS_DETECTED",
                                          STRATA_ENV_PRESENCE, 0, 0, true, "trainer",
                                          "tests only: OPENBLAS_CORETYPE counts as OpenBLAS's "
                                          "own choice, not the user's"},
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const char *g_cached[STRATA_ENV_COUNT];

static void snapshot(void)
{
    for (int i = 0; i < STRATA_ENV_COUNT; i++) {
        if (g_vars[i].live)
            continue;
        const char *v = getenv(g_vars[i].name);
        g_cached[i] = v ? strdup(v) : NULL; /* NULL also when strdup fails: unset */
    }
}

const strata_env_var *strata_env_var_of(strata_env_id id)
{
    return (int)id >= 0 && id < STRATA_ENV_COUNT ? &g_vars[id] : NULL;
}

strata_status strata_env_parse_int(strata_env_id id, const char *value, long *out)
{
    const strata_env_var *v = strata_env_var_of(id);
    if (!v)
        return strata_error(STRATA_ERR_INVALID_ARG, "env: unknown variable %d", (int)id);
    if (v->kind != STRATA_ENV_INT)
        return STRATA_OK;
    if (!value || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "env: %s: NULL argument", v->name);
    char *end;
    errno = 0;
    const long x = strtol(value, &end, 10);
    if (errno || end == value || *end != '\0' || x < v->lo || x > v->hi)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s='%s': must be an integer in [%ld, %ld]",
                            v->name, value, v->lo, v->hi);
    *out = x;
    return STRATA_OK;
}

const char *strata_env_str(strata_env_id id)
{
    const strata_env_var *v = strata_env_var_of(id);
    if (!v)
        return NULL;
    const char *s;
    if (v->live) {
        s = getenv(v->name);
    } else {
        pthread_once(&g_once, snapshot);
        s = g_cached[id];
    }
    return s && (*s || v->kind == STRATA_ENV_PRESENCE) ? s : NULL;
}

bool strata_env_is_set(strata_env_id id)
{
    return strata_env_str(id) != NULL;
}

strata_status strata_env_int(strata_env_id id, long dflt, long *out, bool *set)
{
    if (!out || !set)
        return strata_error(STRATA_ERR_INVALID_ARG, "env: NULL argument");
    *out = dflt;
    *set = false;
    const char *s = strata_env_str(id);
    if (!s)
        return STRATA_OK;
    long x = dflt; /* a kind other than an integer keeps the default */
    strata_status st = strata_env_parse_int(id, s, &x);
    if (st != STRATA_OK)
        return st;
    *out = x;
    *set = true;
    return STRATA_OK;
}
