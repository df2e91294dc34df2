/* Optimizer names and parsing, the family table (optim/family.h), and the
 * helpers the families share (optim/precond.h). */
#include "strata/optim.h"
#include "family.h"
#include "precond.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define BUILTIN_INDEX(kind, fam, member) BUILTIN_##member,
enum { STRATA_FAMILY_BUILTINS(BUILTIN_INDEX) N_BUILTIN };
#undef BUILTIN_INDEX

/* A built-in row's index is its kind. */
#define BUILTIN_CHECK(kind, fam, member)                                                       \
    _Static_assert((int)(kind) == BUILTIN_##member, #kind " out of order");
STRATA_FAMILY_BUILTINS(BUILTIN_CHECK)
#undef BUILTIN_CHECK

#define BUILTIN_ROW(kind, fam, member) {kind, &fam, BUILTIN_##member, NULL},
static const strata_family_row builtin_rows[] = {STRATA_FAMILY_BUILTINS(BUILTIN_ROW)};
#undef BUILTIN_ROW

/* Registered rows: written under reg_mu, published by the release store of
 * n_registered (readers load it with acquire, then read only rows below it). */
static strata_family_row registered[STRATA_FAMILY_REGISTERED_MAX];
static atomic_int n_registered;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

int strata_family_count(void)
{
    return N_BUILTIN + atomic_load_explicit(&n_registered, memory_order_acquire);
}

const strata_family_row *strata_family_row_of(strata_optimizer kind)
{
    const int k = (int)kind;
    if (k >= 0 && k < N_BUILTIN)
        return &builtin_rows[k];
    if (k >= N_BUILTIN && k < strata_family_count())
        return &registered[k - N_BUILTIN];
    return NULL;
}

strata_optimizer strata_family_tail_kind(void)
{
    return STRATA_OPTIM_ADAMW;
}

strata_status strata_family_register(const strata_precond_family *fam, const void *cfg,
                                     strata_optimizer *kind)
{
    if (!fam || !cfg || !kind || !fam->name || !fam->has_refresh || !fam->async_capable ||
        !fam->create || !fam->destroy || !fam->bytes || !fam->n_blocks || !fam->apply ||
        !fam->tensors)
        return strata_error(STRATA_ERR_INVALID_ARG, "family_register: NULL argument or a "
                            "required slot missing");
    if (fam->cfg_size == 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "family_register('%s'): cfg_size 0",
                            fam->name);
    pthread_mutex_lock(&reg_mu);
    strata_status st = STRATA_OK;
    const int n = atomic_load_explicit(&n_registered, memory_order_relaxed);
    for (int k = 0; k < N_BUILTIN + n && st == STRATA_OK; k++)
        if (strcmp(strata_family_row_of((strata_optimizer)k)->fam->name, fam->name) == 0)
            st = strata_error(STRATA_ERR_INVALID_ARG, "family_register: the name '%s' is "
                              "taken", fam->name);
    if (st == STRATA_OK && n == STRATA_FAMILY_REGISTERED_MAX)
        st = strata_error(STRATA_ERR_NOMEM, "family_register('%s'): %d families registered "
                          "already", fam->name, STRATA_FAMILY_REGISTERED_MAX);
    if (st == STRATA_OK) {
        registered[n] = (strata_family_row){(strata_optimizer)(N_BUILTIN + n), fam, -1, cfg};
        *kind = registered[n].kind;
        atomic_store_explicit(&n_registered, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&reg_mu);
    return st;
}

const char *strata_optimizer_name(strata_optimizer o)
{
    if (o == STRATA_OPTIM_DEFAULT)
        return "default";
    const strata_family_row *r = strata_family_row_of(o);
    return r ? r->fam->name : "unknown";
}

strata_status strata_optimizer_parse(const char *name, strata_optimizer *out)
{
    if (!name || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "optimizer_parse: NULL argument");
    const int n = strata_family_count();
    char expected[256] = "";
    size_t len = 0;
    for (int k = 0; k < n; k++) {
        const char *nk = strata_optimizer_name((strata_optimizer)k);
        if (strcmp(name, nk) == 0) {
            *out = (strata_optimizer)k;
            return STRATA_OK;
        }
        if (len < sizeof expected)
            len += (size_t)snprintf(expected + len, sizeof expected - len, "%s%s",
                                    k == 0 ? "" : k == n - 1 ? " or " : ", ", nk);
    }
    return strata_error(STRATA_ERR_INVALID_ARG, "unknown optimizer '%s' (expected %s)", name,
                        expected);
}

