/* The runtime: parameter registry, routing, and the optimizer step.
 *
 * Life of the objects: parameters are registered (descriptors copied, the
 * data/grad buffers stay the caller's), strata_commit routes each one and
 * creates its optimizer state in the device tier, strata_step updates them,
 * strata_destroy frees the state. After commit the step path allocates
 * nothing.
 *
 * Every parameter's optimizer runs through its family's table
 * (optim/precond.h) inside the refresh engine (engine/refresh.c), sync and
 * async alike; the only choice made here per optimizer kind is the routing
 * rule's (which family and which configuration a parameter gets).
 *
 * Owners: every parameter has an owner rank (plan_owners: planned by rank 0
 * at commit, broadcast; rank 0 on one rank; -1, every rank, for gather
 * sharding); the hooks move gradients to and weights from the owners, the
 * step runs the parameters this rank owns, and the global gradient norm and
 * the non-finite veto go through the communicator's scalar allreduce
 * (strata/comm.h), so that every rank takes the same decision. On one rank
 * the hooks' collectives are identities; they validate and record.
 */
#include "backend/blas.h"
#include "backend/ops.h"
#include "base/env.h"
#include "optim/family.h"
#include "runtime/runtime_internal.h"
#include "plan/plan.h"
#include "runtime/testing.h"

#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Statuses the first pass of a step may report over the ranks (strata_step). */
#define PREP_KINDS ((int)STRATA_ERR_INTERNAL + 1)

/* Does this rank update p (run its optimizer)? Its owner does; with gather
 * sharding (owner -1) every rank does. */
static inline bool updates_here(const strata_runtime *rt, const rt_param *p)
{
    return p->owner == rt->rank || p->owner < 0;
}

void strata_log(const strata_runtime *rt, strata_log_level level, const char *subsystem,
                const char *fmt, ...)
{
    if (!rt || level > rt->log.level)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    strata_logf(&rt->log, level, subsystem, "%s", buf);
}

const char *strata_version(void)
{
    return STRATA_VERSION_STRING;
}

/* The family and configuration of optimizer `o` (optim/family.h): a
 * built-in family's configuration is its member of strata_config (the
 * table's list names it; the offsets are taken here, where strata_config is
 * visible), a registered family's is its registrant's. NULL for an unknown
 * kind. */
static const strata_precond_family *family_for(const strata_config *c, strata_optimizer o,
                                               const void **cfg)
{
#define MEMBER_OFFSET(kind, fam, member) offsetof(strata_config, member),
    static const size_t member_offset[] = {STRATA_FAMILY_BUILTINS(MEMBER_OFFSET)};
#undef MEMBER_OFFSET
    const strata_family_row *r = strata_family_row_of(o);
    *cfg = !r ? NULL : r->builtin >= 0 ? (const char *)c + member_offset[r->builtin] : r->config;
    return r ? r->fam : NULL;
}

/* The strata_config member of a built-in kind ("kl_shampoo"), for messages. */
static const char *family_member_name(int builtin)
{
#define MEMBER_NAME(kind, fam, member) #member,
    static const char *const names[] = {STRATA_FAMILY_BUILTINS(MEMBER_NAME)};
#undef MEMBER_NAME
    return names[builtin];
}

strata_status strata_config_default(strata_config *cfg)
{
    if (!cfg)
        return strata_error(STRATA_ERR_INVALID_ARG, "config_default: cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    cfg->version = STRATA_CONFIG_VERSION;
    cfg->matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    for (int k = 0; k < strata_family_count(); k++) {
        const void *fc;
        const strata_precond_family *f = family_for(cfg, (strata_optimizer)k, &fc);
        if (strata_family_row_of((strata_optimizer)k)->builtin >= 0)
            f->config_default((void *)fc); /* a member of *cfg */
    }
    cfg->precondition_frequency = 0;
    cfg->max_grad_norm = 0.0f;
    cfg->route_degenerate_to_adamw = true;
    cfg->stagger_refresh = false;
    cfg->blas_threads = 0;
    cfg->step_threads = 0;
    cfg->async = false;
    cfg->staleness = 1;
    cfg->install_mode = STRATA_COH_FIXED;
    cfg->stale_correction = STRATA_STALE_CORRECTION_OFF;
    cfg->workers = 0;
    cfg->pin_workers = false;
    cfg->wait_timeout_s = 600.0;
    cfg->roots_tier = STRATA_TIER_HOST;
    cfg->host_budget = 0;
    cfg->nvme_dir = NULL;
    cfg->nvme_budget = 0;
    cfg->nvme_queue_depth = 16;
    cfg->nvme_chunk_bytes = (size_t)1 << 20;
    cfg->sharding = STRATA_SHARD_OWNER;
    cfg->average_gradients = true;
    cfg->grad_bucket_bytes = (size_t)4 << 20;
    long level; /* STRATA_LOG_LEVEL (base/env.h), read once */
    bool set;
    const strata_status st = strata_env_int(STRATA_ENV_LOG_LEVEL, STRATA_LOG_WARN, &level, &set);
    cfg->log_level = (strata_log_level)level;
    if (st != STRATA_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "config_default: %s", why);
    }
    return STRATA_OK;
}

/* The runtime's own fields, checked as the optimizers check theirs
 * (optim/optim_internal.h): the message names "strata_config.<field>". */
static strata_status cfg_int(const char *field, long long x, long long lo, long long hi)
{
    if (x >= lo && x <= hi)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "strata_config.%s = %lld: must lie in [%lld, %lld]",
                        field, x, lo, hi);
}

/* finite, and >= 0 (positive = false) or > 0 (positive = true) */
static strata_status cfg_real(const char *field, double x, bool positive)
{
    if (isfinite(x) && (positive ? x > 0.0 : x >= 0.0))
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG, "strata_config.%s = %g: must be a finite number %s",
                        field, x, positive ? "> 0" : ">= 0");
}

#define CFG_CHECK(st, expr)                                                                    \
    do {                                                                                       \
        if ((st) == STRATA_OK)                                                                 \
            (st) = (expr);                                                                     \
    } while (0)

/* The engine's schedule into the families' copies: each refreshing family's
 * precondition_frequency becomes strata_config.precondition_frequency, or the
 * family's own default period when that is 0. */
static int *family_frequency(const strata_precond_family *f, const void *fc)
{
    return f && f->has_frequency ? (int *)((char *)fc + f->frequency_offset) : NULL;
}

/* The families' default refresh period (what their config_default writes). */
static int family_default_frequency(const strata_precond_family *f)
{
    union {
        max_align_t align;
        unsigned char bytes[512];
    } scratch;
    if (!f->config_default || f->cfg_size > sizeof scratch.bytes)
        return 0;
    memset(&scratch, 0, sizeof scratch);
    f->config_default(scratch.bytes);
    return *family_frequency(f, scratch.bytes);
}

/* strata_config.state_dtype_<kind>, by STRATA_STATE_KIND_*. */
static strata_state_dtype state_dtype_of(const strata_config *c, int kind)
{
    return kind == STRATA_STATE_KIND_FACTORS ? c->state_dtype_factors
           : kind == STRATA_STATE_KIND_ROOTS ? c->state_dtype_roots
                                             : c->state_dtype_moments;
}

static const char *const state_kind_field[STRATA_STATE_KINDS] = {
    "state_dtype_factors", "state_dtype_roots", "state_dtype_moments"};

static void config_resolve(strata_config *c)
{
    const int freq = c->precondition_frequency;
    /* The storage dtypes into the matrix optimizer's family (strata.h: they
     * are its state's; a BF16 the family's own copy already holds is kept when
     * the runtime's is F32, and the other families keep their own fields, so
     * a SOAP run's bf16 factors do not make Shampoo's copy check its beta2). */
    const void *mc;
    const strata_precond_family *mf = family_for(c, c->matrix_optimizer, &mc);
    for (int k = 0; k < strata_family_count(); k++) {
        const void *fc;
        const strata_precond_family *f = family_for(c, (strata_optimizer)k, &fc);
        if (!f || f != mf || strata_family_row_of((strata_optimizer)k)->builtin < 0)
            continue;
        for (int kind = 0; kind < STRATA_STATE_KINDS; kind++) {
            const strata_state_dtype d = state_dtype_of(c, kind);
            if (f->has_state_dtype[kind] && d == STRATA_STATE_BF16)
                memcpy((char *)fc + f->state_dtype_offset[kind], &d, sizeof d);
        }
    }
    for (int k = 0; k < strata_family_count(); k++) {
        const void *fc;
        const strata_precond_family *f = family_for(c, (strata_optimizer)k, &fc);
        int *fp = strata_family_row_of((strata_optimizer)k)->builtin >= 0
                      ? family_frequency(f, fc) : NULL; /* members of *c only */
        if (fp)
            *fp = freq > 0 ? freq : family_default_frequency(f);
    }
}

/* A family's copy of F left at its default or equal to the engine's (what a
 * copy of the resolved config holds); any other value was meant as the
 * period and is refused, naming the field and the one to set. */
static strata_status cfg_family_frequency(const char *family, int given, int dflt, int resolved)
{
    if (given == dflt || given == resolved)
        return STRATA_OK;
    return strata_error(STRATA_ERR_INVALID_ARG,
                        "strata_config.%s.precondition_frequency = %d: the engine has one "
                        "refresh period, strata_config.precondition_frequency (%d here); leave "
                        "the family's copy at its default %d",
                        family, given, resolved, dflt);
}

/* Every field of the configuration, each optimizer's included (a parameter
 * may ask for any optimizer), before anything is created: NaN and +-inf are
 * refused everywhere; the message names the field ("strata_config.<field>",
 * or "<optimizer>.<field>"). The families' configs are checked as the
 * runtime will use them (config_resolve). */
static strata_status check_config(const strata_config *given)
{
    strata_status st = cfg_int("precondition_frequency", given->precondition_frequency, 0,
                               INT32_MAX);
    for (int kind = 0; kind < STRATA_STATE_KINDS; kind++)
        CFG_CHECK(st, cfg_int(state_kind_field[kind], (long long)state_dtype_of(given, kind),
                              STRATA_STATE_F32, STRATA_STATE_BF16));
    if (st != STRATA_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "strata_create: %s", why);
    }
    {
        const void *mc;
        const strata_precond_family *mf = family_for(given, given->matrix_optimizer, &mc);
        for (int kind = 0; mf && kind < STRATA_STATE_KINDS && st == STRATA_OK; kind++)
            if (state_dtype_of(given, kind) != STRATA_STATE_F32 && !mf->has_state_dtype[kind])
                st = strata_error(STRATA_ERR_UNSUPPORTED,
                                  "strata_create: strata_config.%s = bf16: the matrix optimizer "
                                  "%s cannot store that state in bfloat16 (supported: shampoo's "
                                  "factors and roots, soap's factors); leave it f32",
                                  state_kind_field[kind], mf->name);
        if (st != STRATA_OK)
            return st;
    }
    strata_config resolved = *given;
    config_resolve(&resolved);
    const strata_config *c = &resolved;
    for (int k = 0; st == STRATA_OK && k < strata_family_count(); k++) {
        const void *gc, *rc;
        const strata_precond_family *f = family_for(given, (strata_optimizer)k, &gc);
        family_for(c, (strata_optimizer)k, &rc);
        const int builtin = strata_family_row_of((strata_optimizer)k)->builtin;
        const int *g = builtin >= 0 ? family_frequency(f, gc) : NULL;
        if (g)
            CFG_CHECK(st, cfg_family_frequency(family_member_name(builtin), *g,
                                               family_default_frequency(f),
                                               *family_frequency(f, rc)));
    }
    CFG_CHECK(st, cfg_int("matrix_optimizer", (long long)c->matrix_optimizer, 0,
                          strata_family_count() - 1));
    for (int k = 0; k < strata_family_count(); k++) {
        const void *fc;
        const strata_precond_family *f = family_for(c, (strata_optimizer)k, &fc);
        if (f->config_check)
            CFG_CHECK(st, f->config_check(fc));
    }
    CFG_CHECK(st, cfg_real("max_grad_norm", c->max_grad_norm, false));
    CFG_CHECK(st, cfg_int("backend", (long long)c->backend, STRATA_BACKEND_CPU,
                          STRATA_BACKEND_CUDA));
    CFG_CHECK(st, cfg_int("blas_threads", c->blas_threads, 0, 4096));
    CFG_CHECK(st, cfg_int("step_threads", c->step_threads, 0, STRATA_WORKER_TEAM_MAX));
    CFG_CHECK(st, cfg_int("staleness", c->staleness, 0, INT32_MAX));
    CFG_CHECK(st, cfg_int("staleness_warmup", c->staleness_warmup, 0, INT32_MAX));
    CFG_CHECK(st, cfg_int("install_mode", (long long)c->install_mode, STRATA_COH_FIXED,
                          STRATA_COH_EAGER));
    CFG_CHECK(st, cfg_int("stale_correction", (long long)c->stale_correction,
                          STRATA_STALE_CORRECTION_OFF, STRATA_STALE_CORRECTION_NEWTON));
    CFG_CHECK(st, cfg_int("workers", c->workers, 0, 1024)); /* the pool's range (workers/pool.c) */
    CFG_CHECK(st, cfg_real("wait_timeout_s", c->wait_timeout_s, true));
    CFG_CHECK(st, cfg_int("roots_tier", (long long)c->roots_tier, STRATA_TIER_HOST,
                          STRATA_TIER_NVME));
    CFG_CHECK(st, cfg_int("nvme_queue_depth", c->nvme_queue_depth, 8, 4096));
    if (st == STRATA_OK && (c->nvme_chunk_bytes < 4096 || c->nvme_chunk_bytes > ((size_t)1 << 30) ||
                            c->nvme_chunk_bytes % 4096))
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "strata_config.nvme_chunk_bytes = %zu: must be a multiple of 4096 in "
                          "[4096, 1 GiB]",
                          c->nvme_chunk_bytes);
    CFG_CHECK(st, cfg_int("sharding", (long long)c->sharding, STRATA_SHARD_OWNER,
                          STRATA_SHARD_ZERO1));
    CFG_CHECK(st, cfg_int("shard_group_size", c->shard_group_size, 0, INT32_MAX));
    if (st == STRATA_OK && (c->grad_bucket_bytes < 4 || c->grad_bucket_bytes > ((size_t)1 << 30) ||
                            c->grad_bucket_bytes % 4))
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "strata_config.grad_bucket_bytes = %zu: must be a multiple of 4 in "
                          "[4, 1 GiB]",
                          c->grad_bucket_bytes);
    CFG_CHECK(st, cfg_int("log_level", (long long)c->log_level, STRATA_LOG_ERROR,
                          STRATA_LOG_DEBUG));
    long env_level; /* a bad STRATA_LOG_LEVEL is refused here too (base/env.h) */
    bool env_set;
    CFG_CHECK(st, strata_env_int(STRATA_ENV_LOG_LEVEL, 0, &env_level, &env_set));
    if (st == STRATA_OK && c->page_state &&
        (!c->async || !c->nvme_dir || c->backend != STRATA_BACKEND_CPU))
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "strata_config.page_state needs async, an nvme_dir and the CPU backend "
                          "(the paged state moves between host memory and the nvme tier%s)",
                          c->backend != STRATA_BACKEND_CPU ? "; a device's memory does not page"
                                                           : "");
    if (st == STRATA_OK && c->async && c->roots_tier == STRATA_TIER_NVME && !c->nvme_dir)
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "strata_config.roots_tier = nvme needs strata_config.nvme_dir");
    if (st != STRATA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "strata_create: %s", why);
    }
    return STRATA_OK;
}

strata_status strata_rt_busy_enter(strata_runtime *rt, const char *call)
{
    int idle = 0;
    if (!atomic_compare_exchange_strong(&rt->busy, &idle, 1))
        return strata_error(STRATA_ERR_STATE, "%s: another call on this runtime is in progress "
                            "(strata_step, param_add, commit, set_lr_scale, param_set_buffers, "
                            "save and load must not overlap: one thread at a time)", call);
    return STRATA_OK;
}

void strata_rt_busy_leave(strata_runtime *rt)
{
    atomic_store(&rt->busy, 0);
}

/* Return `body` (an entry point's unguarded body) run under the busy flag. */
#define BUSY_CALL(rt, call, body)                                                              \
    do {                                                                                       \
        strata_status busy_st_ = strata_rt_busy_enter(rt, call);                               \
        if (busy_st_ != STRATA_OK)                                                             \
            return busy_st_;                                                                   \
        busy_st_ = body;                                                                       \
        strata_rt_busy_leave(rt);                                                              \
        return busy_st_;                                                                       \
    } while (0)

strata_status strata_create(const strata_config *cfg, strata_runtime **out)
{
    if (!cfg || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: NULL argument");
    *out = NULL;
    if (cfg->version != STRATA_CONFIG_VERSION)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: strata_config.version = %d, "
                            "expected %d (call strata_config_default first)", cfg->version,
                            STRATA_CONFIG_VERSION);
    strata_status st = check_config(cfg);
    if (st != STRATA_OK)
        return st;
    strata_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return strata_error(STRATA_ERR_NOMEM, "strata_create: out of memory");
    rt->cfg = *cfg;
    config_resolve(&rt->cfg);
    rt->log = (strata_logger){.level = cfg->log_level, .fn = cfg->log_fn, .user = cfg->log_user};
    strata_env_log(&rt->log); /* the environment overrides in effect, when verbose */
    if (cfg->nvme_dir) {
        rt->nvme_dir = strdup(cfg->nvme_dir);
        if (!rt->nvme_dir) {
            free(rt);
            return strata_error(STRATA_ERR_NOMEM, "strata_create: out of memory");
        }
        rt->cfg.nvme_dir = rt->nvme_dir;
    }
    int blas = cfg->blas_threads;
    if (cfg->async && blas == 0)
        blas = 1; /* the training thread keeps one core, the workers the rest */
    rt->lr_scale = 1.0f;
    rt->max_layer = -1;
    strata_ledger_init(&rt->ledger);
    st = strata_backend_create_kind(cfg->backend, blas, &rt->be);
    if (st == STRATA_OK)
        strata_backend_ledger_set(rt->be, &rt->ledger);
    if (st == STRATA_OK && !cfg->comm) {
        st = strata_comm_self_create(&rt->comm);
        rt->own_comm = st == STRATA_OK;
    } else {
        rt->comm = cfg->comm;
    }
    rt->rank = strata_comm_rank(rt->comm);
    rt->world = strata_comm_size(rt->comm);
    rt->group_size = cfg->shard_group_size > 0 ? cfg->shard_group_size : rt->world;
    rt->n_groups = rt->world / rt->group_size;
    rt->group = rt->comm;
    if (st == STRATA_OK && (cfg->shard_group_size < 0 || rt->world % rt->group_size != 0))
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "strata_create: shard_group_size %d must divide the world size %d",
                          cfg->shard_group_size, rt->world);
    if (st == STRATA_OK && rt->n_groups > 1 && cfg->sharding == STRATA_SHARD_GATHER)
        st = strata_error(STRATA_ERR_UNSUPPORTED,
                          "strata_create: shard_group_size needs owner or zero1 sharding");
    if (st == STRATA_OK && rt->n_groups > 1) {
        st = strata_comm_split(rt->comm, rt->rank / rt->group_size, rt->rank, &rt->group);
        rt->own_group = st == STRATA_OK;
    }
    /* Replicated across groups: each refresh runs once per replica set. */
    if (st == STRATA_OK && rt->n_groups > 1)
        st = strata_replicas_create(rt->comm, rt->group_size, &rt->replica_set);
    rt->replicas = st == STRATA_OK ? malloc((size_t)rt->n_groups * sizeof *rt->replicas) : NULL;
    if (st == STRATA_OK && !rt->replicas)
        st = strata_error(STRATA_ERR_NOMEM, "strata_create: out of memory");
    if (st != STRATA_OK) {
        strata_replicas_destroy(rt->replica_set);
        if (rt->own_group)
            strata_comm_destroy(rt->group);
        if (rt->own_comm)
            strata_comm_destroy(rt->comm);
        strata_backend_destroy(rt->be);
        free(rt->nvme_dir);
        free(rt);
        return st;
    }
    *out = rt;
    return STRATA_OK;
}

/* Bounds of one parameter's size: 2^56 elements (every family's state is a
 * few copies of it plus its factors: under 2^64 bytes), each side 2^31 (a
 * factor of side d holds d^2 doubles: under 2^64 bytes). */
#define PARAM_MAX_NUMEL_LOG2 56
#define PARAM_MAX_NUMEL ((uint64_t)1 << PARAM_MAX_NUMEL_LOG2)
#define PARAM_MAX_SIDE ((uint64_t)1 << 31)
#define PARAM_MAX_LAYERS (1 << 20) /* per-layer arrays: max layer + 1 entries */

static bool spans_overlap(const void *a, const void *b, size_t bytes)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bytes && y < x + bytes;
}

/* A parameter's buffers are its own: its weights and gradient do not
 * overlap each other nor any registered parameter's (the same buffer
 * registered twice would be updated twice per step; a gradient aliasing
 * weights is overwritten by the update). One exception: gradients that
 * start at the same address, a shared buffer of zeros for parameters that
 * have no gradient (the Python door registers them so). Tied weights are
 * one parameter used by two layers (strata.h, strata_param_add). */
static strata_status check_aliasing(const strata_runtime *rt, const strata_param_desc *d,
                                    size_t numel)
{
    const size_t bytes = numel * sizeof(float);
    if (spans_overlap(d->data, d->grad, bytes))
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): the gradient buffer "
                            "overlaps the weights", d->name);
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *q = &rt->params[i];
        const size_t qb = q->view.numel * sizeof(float);
        const void *mine[2] = {d->data, d->grad}, *theirs[2] = {q->user_data, q->grad};
        static const char *const what[2] = {"weights", "gradient"};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                const uintptr_t x = (uintptr_t)mine[a], y = (uintptr_t)theirs[b];
                if (a == 1 && b == 1 && x == y)
                    continue; /* one gradient buffer of zeros for parameters without one */
                if (x < y + qb && y < x + bytes)
                    return strata_error(STRATA_ERR_INVALID_ARG,
                                        "param_add('%s'): its %s overlap the %s of parameter "
                                        "'%s'%s", d->name, what[a], what[b], q->name,
                                        a == 0 && b == 0 && x == y && bytes == qb
                                            ? " (the same buffer registered twice; tied weights "
                                              "are one parameter, used by both layers)"
                                            : "");
            }
    }
    return STRATA_OK;
}

static strata_status param_add_unguarded(strata_runtime *rt, const strata_param_desc *d,
                                         strata_param_id *out)
{
    if (!rt || !d)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add: NULL argument");
    if (rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_add('%s'): runtime already committed",
                            d->name ? d->name : "?");
    if (!d->name || !d->name[0] || !d->data || !d->grad)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add: name, data and grad are required");
    if (d->ndim < 0 || d->ndim > STRATA_MAX_DIMS)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): ndim %d not in 0..%d",
                            d->name, d->ndim, STRATA_MAX_DIMS);
    if (d->layer < 0 || d->layer >= PARAM_MAX_LAYERS)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): layer %d not in 0..%d "
                            "(per-layer state is sized by the largest id: ids are dense)",
                            d->name, d->layer, PARAM_MAX_LAYERS - 1);
    if ((uintptr_t)d->data % _Alignof(float) || (uintptr_t)d->grad % _Alignof(float))
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): the %s pointer is not "
                            "aligned to a float (%zu bytes)", d->name,
                            (uintptr_t)d->data % _Alignof(float) ? "data" : "grad",
                            (size_t)_Alignof(float));
    if ((int)d->memory < 0 || (int)d->memory >= STRATA_MEM_KINDS)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): unknown memory kind %d",
                            d->name, (int)d->memory);
    if (d->role < STRATA_ROLE_AUTO || d->role > STRATA_ROLE_VECTOR ||
        d->optimizer < STRATA_OPTIM_DEFAULT || (int)d->optimizer >= strata_family_count())
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): unknown role or optimizer",
                            d->name);
    size_t numel = 1;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 1)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): shape[%d] = %lld < 1",
                                d->name, i, (long long)d->shape[i]);
        if ((uint64_t)d->shape[i] > PARAM_MAX_NUMEL / numel)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): the shape's element "
                                "count overflows (over 2^%d elements: the state of any family "
                                "would not fit in 64-bit byte counts)", d->name,
                                PARAM_MAX_NUMEL_LOG2);
        numel *= (size_t)d->shape[i];
    }
    for (int i = 0; i < d->ndim; i++)
        if ((uint64_t)d->shape[i] > PARAM_MAX_SIDE)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): shape[%d] = %lld "
                                "exceeds 2^31 (a preconditioner factor of that side overflows "
                                "64-bit byte counts)", d->name, i, (long long)d->shape[i]);
    if (strcmp(d->name, "__metadata__") == 0 || strchr(d->name, '/'))
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): the checkpoint format "
                            "reserves this name ('__metadata__' is the safetensors header's "
                            "key, '/' separates a parameter's name from its state tensors')",
                            d->name);
    for (int i = 0; i < rt->n_params; i++)
        if (strcmp(rt->params[i].name, d->name) == 0)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add: duplicate name '%s'", d->name);
    strata_status alias = check_aliasing(rt, d, numel);
    if (alias != STRATA_OK)
        return alias;
    if (d->stacked && d->ndim != 3)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): stacked needs ndim 3, not %d",
                            d->name, d->ndim);
    if (rt->n_params == rt->cap_params) {
        int cap = rt->cap_params ? 2 * rt->cap_params : 32;
        rt_param *np = realloc(rt->params, (size_t)cap * sizeof *np);
        if (!np)
            return strata_error(STRATA_ERR_NOMEM, "param_add: out of memory");
        rt->params = np;
        rt->cap_params = cap;
    }
    rt_param *p = &rt->params[rt->n_params];
    memset(p, 0, sizeof *p);
    p->name = strdup(d->name);
    if (!p->name)
        return strata_error(STRATA_ERR_NOMEM, "param_add: out of memory");
    p->ndim = d->ndim;
    memcpy(p->shape, d->shape, sizeof p->shape);
    p->view.numel = numel;
    p->view.batch = d->stacked ? d->shape[0] : 1;
    p->view.rows = d->stacked ? d->shape[1] : d->ndim >= 1 ? d->shape[0] : 1;
    p->view.cols = (int64_t)(numel / (size_t)(p->view.rows * p->view.batch));
    p->layer = d->layer;
    p->role = d->role;
    p->requested = d->optimizer;
    p->data = d->data;
    p->user_data = d->data;
    p->managed = d->managed;
    p->grad = d->grad;
    p->user_grad = d->grad;
    if (d->layer > rt->max_layer)
        rt->max_layer = d->layer;
    if (out)
        *out = rt->n_params;
    rt->n_params++;
    return STRATA_OK;
}

strata_status strata_param_add(strata_runtime *rt, const strata_param_desc *d,
                               strata_param_id *out)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add: NULL argument");
    BUSY_CALL(rt, "param_add", param_add_unguarded(rt, d, out));
}

static bool is_tail_by_rule(const strata_runtime *rt, const rt_param *p);

static strata_optimizer route(const strata_runtime *rt, const rt_param *p)
{
    if (p->requested != STRATA_OPTIM_DEFAULT)
        return p->requested;
    return is_tail_by_rule(rt, p) ? strata_family_tail_kind() : rt->cfg.matrix_optimizer;
}

/* The tail: what the rule sends to the tail family (AdamW) whatever the
 * matrix optimizer is. */
static bool is_tail_by_rule(const strata_runtime *rt, const rt_param *p)
{
    return strata_rt_is_tail_rule(&rt->cfg, p->role, p->ndim, p->view.rows, p->view.cols);
}

strata_status strata_optimizer_info_get(const strata_config *cfg, strata_optimizer opt,
                                        strata_optimizer_info *out)
{
    if (!cfg || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "optimizer_info_get: NULL argument");
    strata_config resolved = *cfg; /* the schedule as strata_create resolves it */
    config_resolve(&resolved);
    const void *fc;
    const strata_precond_family *f = family_for(&resolved, opt, &fc);
    if (!f)
        return strata_error(STRATA_ERR_INVALID_ARG, "optimizer_info_get: unknown optimizer %d",
                            (int)opt);
    memset(out, 0, sizeof *out);
    out->refresh_noun = "";
    out->max_staleness = -1;
    out->state_per_param = f->state_per_param;
    out->ema_horizon = f->ema_horizon ? f->ema_horizon(fc) : 0.0;
    out->has_refresh = f->has_refresh && f->has_refresh(fc);
    if (!out->has_refresh)
        return STRATA_OK;
    strata_precond_schedule sch;
    f->schedule(fc, &sch);
    out->async_capable = f->async_capable(fc);
    out->precondition_frequency = sch.frequency;
    out->first_refresh = sch.start;
    out->staggers = sch.frequency > 1;
    out->max_staleness = sch.max_staleness;
    out->refresh_noun = f->refresh_noun ? f->refresh_noun : "refreshes";
    return STRATA_OK;
}

strata_status strata_config_optimizer_lr(strata_config *cfg, strata_optimizer opt, float **lr,
                                         float **weight_decay)
{
    if (!cfg || !lr || !weight_decay)
        return strata_error(STRATA_ERR_INVALID_ARG, "config_optimizer_lr: NULL argument");
    *lr = *weight_decay = NULL;
    const void *fc;
    const strata_precond_family *f = family_for(cfg, opt, &fc);
    if (!f)
        return strata_error(STRATA_ERR_INVALID_ARG, "config_optimizer_lr: unknown optimizer %d",
                            (int)opt);
    if (strata_family_row_of(opt)->builtin < 0)
        return STRATA_OK; /* its configuration is not in strata_config */
    char *base = (char *)cfg + ((const char *)fc - (const char *)cfg);
    *lr = (float *)(void *)(base + f->lr_offset);
    *weight_decay = (float *)(void *)(base + f->weight_decay_offset);
    return STRATA_OK;
}

static void free_state(rt_param *p)
{
    if (p->fam && p->state)
        p->fam->destroy(p->state);
    p->state = NULL;
}

/* Staggered refresh: each family's parameters spread over its F phases by
 * the planner's longest-processing-time rule (cost from the family: n^3 per
 * factor). Without stagger_refresh every parameter keeps its
 * configuration's own phase. */
static strata_status assign_refresh_offsets(strata_runtime *rt)
{
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        const void *fc;
        family_for(&rt->cfg, p->routed, &fc);
        p->refresh_offset = 0;
        if (p->fam->has_refresh && p->fam->has_refresh(fc)) {
            strata_precond_schedule sch;
            p->fam->schedule(fc, &sch);
            p->refresh_offset = sch.offset;
        }
    }
    if (!rt->cfg.stagger_refresh)
        return STRATA_OK;
    const strata_precond_family *done[8];
    int n_done = 0;
    double *cost = malloc((size_t)rt->n_params * sizeof *cost);
    int *idx = malloc((size_t)rt->n_params * sizeof *idx);
    int *phase = malloc((size_t)rt->n_params * sizeof *phase);
    strata_status st = cost && idx && phase ? STRATA_OK
                                            : strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        const strata_precond_family *f = rt->params[i].fam;
        const void *fc;
        family_for(&rt->cfg, rt->params[i].routed, &fc);
        bool seen = false;
        for (int k = 0; k < n_done; k++)
            seen |= done[k] == f;
        if (seen || !f->has_refresh || !f->has_refresh(fc) || n_done == 8)
            continue;
        done[n_done++] = f;
        strata_precond_schedule sch;
        f->schedule(fc, &sch);
        if (sch.frequency <= 1)
            continue;
        int n = 0;
        for (int k = i; k < rt->n_params; k++)
            if (rt->params[k].fam == f) {
                idx[n] = k;
                cost[n] = f->refresh_cost(fc, &rt->params[k].view);
                n++;
            }
        /* With n < F parameters only n phases are ever chosen (an empty phase
         * always wins): the planner's table needs min(F, n) bins. */
        const int bins = sch.frequency < n ? sch.frequency : n;
        double load[64];
        double *ld = bins <= 64 ? load : NULL;
        st = strata_plan_lpt(cost, n, bins, phase, ld);
        for (int k = 0; k < n && st == STRATA_OK; k++)
            rt->params[idx[k]].refresh_offset = phase[k];
        if (st == STRATA_OK && ld) {
            double lo = bins < sch.frequency ? 0.0 : ld[0], hi = ld[0], sum = 0;
            for (int b = 0; b < bins; b++) {
                lo = ld[b] < lo ? ld[b] : lo;
                hi = ld[b] > hi ? ld[b] : hi;
                sum += ld[b];
            }
            strata_log(rt, STRATA_LOG_INFO, "stagger",
                       "%d %s parameters over %d refresh phases: heaviest phase %.2f of the "
                       "mean, lightest %.2f",
                       n, f->name, sch.frequency, sum > 0 ? hi * sch.frequency / sum : 0.0,
                       sum > 0 ? lo * sch.frequency / sum : 0.0);
        }
    }
    free(cost);
    free(idx);
    free(phase);
    return st;
}

/* Tensor-granular even split of n elements over `world` ranks (gather
 * sharding): rank r gets count elements from offset. */
static void even_shard(size_t n, int world, int r, size_t *count, size_t *offset)
{
    const size_t base = n / (size_t)world, extra = n % (size_t)world;
    *count = base + ((size_t)r < extra ? 1 : 0);
    *offset = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra);
}

/* Owners (owner and zero1 sharding): rank 0 measures each parameter's step
 * cost on this machine (costmodel.h, cached), plans the owners inside a
 * group of K ranks (greedy LPT, then the exact MILP when small enough;
 * resident bytes capped at 1.1 x the group's even share), and sends the
 * plan to every rank (one allreduce; other ranks contribute zeros, so the
 * plan arrives exactly). Each rank's owner of a parameter is its own group's
 * replica. Gather sharding: every rank computes everything (owner -1). One
 * rank: everything is rank 0's, nothing measured. Then the layout: shard and
 * tail offsets. */
static strata_status plan_owners(strata_runtime *rt)
{
    const int K = rt->group_size, n = rt->n_params;
    const int group_base = (rt->rank / K) * K;
    strata_stats *s = &rt->stats;
    strata_status st = STRATA_OK;
    if (rt->world > 1 && rt->cfg.sharding == STRATA_SHARD_GATHER) {
        for (int i = 0; i < n; i++)
            rt->params[i].owner = -1;
    } else if (rt->world > 1) {
        /* [owner of each parameter | makespan | lower bound | milp] from rank 0 */
        double *plan = calloc((size_t)n + 3, sizeof *plan);
        double *cost = malloc(((size_t)n + 1) * sizeof *cost);
        double *bytes = malloc(((size_t)n + 1) * sizeof *bytes);
        int *assign = malloc(((size_t)n + 1) * sizeof *assign);
        st = plan && cost && bytes && assign ? STRATA_OK
                                             : strata_error(STRATA_ERR_NOMEM, "out of memory");
        if (st == STRATA_OK && rt->rank == 0) {
            double total = 0.0, t0 = strata_now_seconds();
            int measured = 0;
            for (int i = 0; i < n && st == STRATA_OK; i++) {
                const rt_param *p = &rt->params[i];
                const void *fc;
                family_for(&rt->cfg, p->routed, &fc);
                bool cached = false;
                st = strata_cost_step_seconds(rt->be, p->fam, fc, &p->view, &cost[i], &cached);
                measured += !cached;
                bytes[i] = (double)p->view.numel * 4.0;
                total += bytes[i];
            }
            strata_plan_result pr = {0};
            if (st == STRATA_OK)
                st = strata_plan_owners(cost, bytes, n, K, 1.1 * total / K, 2.0, assign, &pr);
            for (int i = 0; i < n && st == STRATA_OK; i++)
                plan[i] = assign[i];
            plan[n] = pr.makespan;
            plan[n + 1] = pr.lower_bound;
            plan[n + 2] = pr.milp ? (pr.milp_optimal ? 2 : 1) : 0;
            if (st == STRATA_OK)
                strata_log(rt, STRATA_LOG_INFO, "planner",
                           "%d parameters over %d owners per group (%d measured, %.2f s): "
                           "makespan %.3g s, lower bound %.3g s (ratio %.3f), %s",
                           n, K, measured, strata_now_seconds() - t0, pr.makespan,
                           pr.lower_bound, pr.lower_bound > 0 ? pr.makespan / pr.lower_bound : 1,
                           pr.milp ? (pr.milp_optimal ? "exact MILP (optimal)" : "MILP (time limit)")
                                   : "greedy LPT");
        }
        /* Every rank joins the broadcast, even after rank 0 failed (a NaN
         * plan says so), so that nobody waits. */
        if (st != STRATA_OK && rt->rank == 0)
            plan[n] = NAN;
        strata_status sb = strata_comm_allreduce_f64(rt->comm, plan, n + 3, STRATA_REDUCE_SUM);
        if (st == STRATA_OK)
            st = sb;
        if (st == STRATA_OK && !isfinite(plan[n]))
            st = strata_error(STRATA_ERR_INTERNAL, "planner: rank 0 could not plan the owners");
        for (int i = 0; i < n && st == STRATA_OK; i++)
            rt->params[i].owner = group_base + (int)plan[i];
        s->planned_makespan = plan[n];
        s->planned_lower_bound = plan[n + 1];
        free(plan);
        free(cost);
        free(bytes);
        free(assign);
    }
    size_t tail_off = 0;
    size_t *shard_off = calloc((size_t)K, sizeof *shard_off);
    if (st == STRATA_OK && !shard_off)
        st = strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        const size_t b = p->view.numel * sizeof(float);
        const int o = p->owner < 0 ? 0 : p->owner - group_base;
        p->shard_offset = shard_off[o];
        shard_off[o] += b;
        p->tail_offset = p->tail ? tail_off : SIZE_MAX;
        if (p->tail)
            tail_off += b;
        p->materialized_at = 0;
    }
    free(shard_off);
    return st;
}

static strata_status create_engine(strata_runtime *rt)
{
    const strata_config *c = &rt->cfg;
    /* Several ranks: each its own nvme subdirectory, and by default its share
     * of the node's cores for workers (cores / ranks on the node - 1, >= 1). */
    char nvme_dir[4096];
    const char *nvme = c->async ? c->nvme_dir : NULL;
    if (nvme && rt->world > 1) {
        snprintf(nvme_dir, sizeof nvme_dir, "%s/rank-%d", nvme, rt->rank);
        nvme = nvme_dir;
    }
    int workers = c->workers;
    if (workers == 0 && rt->world > 1) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const int per_node = strata_comm_node_size(rt->comm);
        workers = (int)(cores / (per_node > 0 ? per_node : 1)) - 1;
        workers = workers < 1 ? 1 : workers;
    }
    strata_refresh_config rc = {
        .async = c->async,
        .staleness = c->async ? c->staleness : 0,
        .sync_steps = c->async ? c->staleness_warmup : 0,
        .mode = c->async ? c->install_mode : STRATA_COH_FIXED,
        .workers = workers,
        .pin_workers = c->pin_workers,
        .worker_delay_us = rt->testing_worker_delay_us,
        .wait_timeout_s = c->wait_timeout_s > 0.0 ? c->wait_timeout_s : 600.0,
        .results_tier = c->async ? c->roots_tier : STRATA_TIER_HOST,
        .host_budget = c->async ? c->host_budget : 0,
        .nvme_dir = nvme,
        .nvme_budget = c->nvme_budget,
        .nvme_queue_depth = c->nvme_queue_depth,
        .nvme_chunk_bytes = c->nvme_chunk_bytes,
        .log = &rt->log,
        .replicas = rt->replica_set,
        /* The stream seam: snapshots on the shadow stream always (inline on
         * the CPU backend); results into device memory where the host
         * cannot address it. */
        .be = rt->be,
        .ledger = &rt->ledger,
        .device_roots = c->backend == STRATA_BACKEND_CUDA || rt->testing_device_roots,
        /* pinned slots where copies to and from them are DMA (review C3) */
        .host_pinned = c->backend == STRATA_BACKEND_CUDA,
        .stale_correction = c->stale_correction == STRATA_STALE_CORRECTION_NEWTON,
        .page_state = c->async && c->page_state,
    };
    return strata_refresh_create(&rc, &rt->engine);
}

static void managed_free(strata_runtime *rt);

/* The gradient buckets (grad_bucket.h), when the transport can reduce
 * without blocking: every parameter with its owners (its owner; with HSDP
 * its replica's owner in every group) and whether this rank gets the sum
 * back and takes the mean, exactly as the blocking path below decides.
 * The CPU backend only: packing reads the gradients on the host. */
static strata_status create_buckets(strata_runtime *rt)
{
    if (rt->world == 1 || rt->cfg.sharding == STRATA_SHARD_GATHER ||
        !strata_comm_has_ireduce(rt->comm) || rt->cfg.backend != STRATA_BACKEND_CPU)
        return STRATA_OK;
    const int G = rt->n_groups > 1 ? rt->n_groups : 1;
    strata_gb_item *items = calloc((size_t)rt->n_params, sizeof *items);
    int *owners = calloc((size_t)rt->n_params * (size_t)G, sizeof *owners);
    strata_status st = items && owners ? STRATA_OK
                                       : strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        const rt_param *p = &rt->params[i];
        int *o = owners + (size_t)i * G;
        bool receives = false;
        if (rt->n_groups > 1)
            for (int g = 0; g < G; g++) {
                o[g] = g * rt->group_size + p->owner % rt->group_size;
                receives |= o[g] == rt->rank;
            }
        else
            receives = (o[0] = p->owner) == rt->rank;
        items[i] = (strata_gb_item){.layer = p->layer, .grad = p->grad, .n = p->view.numel,
                                    .owners = o, .n_owners = G, .receives = receives,
                                    .average = p->owner == rt->rank &&
                                               rt->cfg.average_gradients};
    }
    const strata_gb_config gc = {.comm = rt->comm, .be = rt->be,
                                 .bucket_bytes = rt->cfg.grad_bucket_bytes,
                                 .scale = (float)(1.0 / rt->world)};
    if (st == STRATA_OK)
        st = strata_gb_create(&gc, items, rt->n_params, &rt->buckets);
    free(items);
    free(owners);
    if (st == STRATA_OK) {
        strata_gb_stats gs;
        strata_gb_stats_get(rt->buckets, &gs);
        rt->stats.grad_staging_bytes = gs.staging_bytes;
        strata_ledger_hold_add(&rt->held, &rt->ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_GRAD_BUCKETS, gs.staging_bytes);
        strata_log(rt, STRATA_LOG_INFO, "comm",
                   "gradients: %d buckets per backward (cap %zu bytes), %zu bytes of staging, "
                   "non-blocking reduce to owners over '%s'",
                   gs.n_buckets, rt->cfg.grad_bucket_bytes, gs.staging_bytes,
                   strata_comm_name(rt->comm));
    }
    return st;
}

/* ---- the step team (strata_config.step_threads)
 *
 * Plain parameters (strata_refresh_plain: Muon, AdamW; nothing to refresh)
 * owned by this rank have their updates run by a team of threads at the
 * start of the step's update phase, each update whole on one thread, with
 * exactly the operations the parameter loop would run (OpenBLAS
 * single-threaded per call), so the weights are bit-identical whatever the
 * thread count. The slots are ordered costliest first (a Newton-Schulz
 * iteration costs ~numel x min(rows, cols), an elementwise update ~numel),
 * so that the team's dynamic claiming balances the threads. The training
 * thread then reads each slot back in parameter order: counters, warnings
 * and the first error come out as the sequential loop gives them; the one
 * difference is that an error no longer keeps later plain parameters from
 * being updated in that step. */

/* Threads for the plain updates: strata_config.step_threads, 0 = auto. */
static int step_threads_resolve(const strata_runtime *rt)
{
    const strata_config *c = &rt->cfg;
    if (c->backend != STRATA_BACKEND_CPU)
        return 1; /* a device backend orders its work on streams */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (c->step_threads > 0) {
        if (c->step_threads > 1 && cores >= 1 && c->step_threads > cores)
            strata_log(rt, STRATA_LOG_WARN, "step",
                       "step_threads %d exceeds the %ld online cores: the threads share them",
                       c->step_threads, cores);
        return c->step_threads;
    }
    /* The BLAS library's actual count (blas_threads 0 leaves its default:
     * OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS, ...), read after the backend
     * set it. */
    if (strata_blas_threads() != 1 || c->async || rt->world > 1)
        return 1; /* BLAS, the refresh workers or other ranks take the cores */
    return cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
}

/* The family's step cost (numel when it states none). */
static double fan_cost(const rt_param *p)
{
    return p->fam->step_cost ? p->fam->step_cost(&p->view) : (double)p->view.numel;
}

static strata_status team_setup(strata_runtime *rt)
{
    const int want = step_threads_resolve(rt);
    rt->stats.step_threads = 1;
    int n = 0;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        p->fan_slot = -1;
        if (p->state && updates_here(rt, p) &&
            strata_refresh_plain(rt->engine, p->entry))
            n++;
    }
    if (want < 2 || n < 2)
        return STRATA_OK;
    rt->fan = calloc((size_t)n, sizeof *rt->fan);
    if (!rt->fan)
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (!(p->state && updates_here(rt, p) &&
              strata_refresh_plain(rt->engine, p->entry)))
            continue;
        /* insertion by cost, descending; ties keep parameter order */
        int k = rt->n_fan++;
        while (k > 0 && fan_cost(&rt->params[rt->fan[k - 1].param]) < fan_cost(p)) {
            rt->fan[k] = rt->fan[k - 1];
            k--;
        }
        rt->fan[k] = (rt_fan){.param = i};
    }
    for (int k = 0; k < rt->n_fan; k++)
        rt->params[rt->fan[k].param].fan_slot = k;
    const int threads = want < n ? want : n;
    strata_status st = strata_worker_team_create(threads, &rt->team);
    if (st != STRATA_OK)
        return st;
    rt->stats.step_threads = threads;
    strata_log(rt, STRATA_LOG_INFO, "step",
               "%d plain parameter updates (Muon, AdamW) per step on %d threads", rt->n_fan,
               threads);
    return STRATA_OK;
}

static void team_free(strata_runtime *rt)
{
    strata_worker_team_destroy(rt->team);
    rt->team = NULL;
    free(rt->fan);
    rt->fan = NULL;
    rt->n_fan = 0;
    for (int i = 0; i < rt->n_params; i++)
        rt->params[i].fan_slot = -1;
}

/* One team item: the update of slot k (any thread). */
static void fan_one(void *user, int k)
{
    strata_runtime *rt = user;
    rt_fan *f = &rt->fan[k];
    rt_param *p = &rt->params[f->param];
    const double t0 = strata_now_seconds();
    memset(&f->cnt, 0, sizeof f->cnt);
    f->st = STRATA_OK;
    f->seconds = 0.0;
    if (p->inactive)
        return; /* strata_param_set_active(false): no update this step */
    f->st = strata_refresh_apply_plain(rt->engine, p->entry, rt->fan_t, rt->lr_scale, p->data,
                                       p->grad, &f->cnt);
    f->seconds = strata_now_seconds() - t0;
    if (f->st != STRATA_OK)
        snprintf(f->err, sizeof f->err, "%s", strata_last_error());
}

static void counters_add(strata_optim_counters *to, const strata_optim_counters *c)
{
    to->root_refreshes += c->root_refreshes;
    to->root_failures += c->root_failures;
    to->root_retries += c->root_retries;
    to->root_newton += c->root_newton;
    to->root_fallbacks += c->root_fallbacks;
    to->nonfinite_rejected += c->nonfinite_rejected;
    to->overflow_skipped += c->overflow_skipped;
    to->nonfinite_directions += c->nonfinite_directions;
    to->seconds_factors += c->seconds_factors;
    to->seconds_roots += c->seconds_roots;
    to->seconds_precondition += c->seconds_precondition;
}

/* The step scratch (strata_precond_family.step_scratch): the states this
 * rank steps borrow one buffer of the largest need instead of each keeping
 * its own; their steps run one after another (engine families step on the
 * training thread, in stream order on a device). Charged as device
 * workspace, once. */
static strata_status share_step_scratch(strata_runtime *rt)
{
    size_t need = 0;
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (p->state && p->fam->step_scratch) {
            const size_t b = p->fam->step_scratch(p->state);
            need = b > need ? b : need;
        }
    }
    if (need == 0)
        return STRATA_OK;
    strata_status st = strata_backend_alloc(rt->be, need, &rt->step_scratch);
    if (st != STRATA_OK)
        return st;
    rt->step_scratch_bytes = need;
    strata_ledger_hold_add(&rt->held, &rt->ledger, STRATA_LEDGER_DEVICE, STRATA_LEDGER_WORKSPACE,
                           need);
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->state && p->fam->set_step_scratch)
            p->fam->set_step_scratch(p->state, rt->step_scratch);
    }
    return STRATA_OK;
}

static void uncommit(strata_runtime *rt)
{
    strata_ledger_hold_release(&rt->held);
    team_free(rt);
    strata_gb_destroy(rt->buckets);
    rt->buckets = NULL;
    strata_refresh_destroy(rt->engine); /* stops the workers before any state goes */
    rt->engine = NULL;
    managed_free(rt);
    for (int i = 0; i < rt->n_params; i++)
        free_state(&rt->params[i]);
    if (rt->step_scratch)
        strata_backend_free(rt->be, rt->step_scratch, rt->step_scratch_bytes);
    rt->step_scratch = NULL;
    rt->step_scratch_bytes = 0;
    free(rt->layer_reduced);
    rt->layer_reduced = NULL;
    memset(&rt->stats, 0, sizeof rt->stats);
}

/* Managed weights (strata.h, "managed weights"). Invariants: a managed
 * parameter's `data` is strata's own buffer on its owner, a slice of its
 * layer's buffer on the other ranks while layer_held_at[layer] >= 0, else
 * NULL; layer_held_at is the same on every rank of a shard group (every rank
 * makes the same materialize/release calls), so every rank agrees on which
 * materialize broadcasts; param_bytes_now counts the buffers that exist. */
static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

/* The ledger tier of the caller's buffers (weights, gradients): host memory
 * with the CPU backend, the device's with the others. */
static int caller_tier(const strata_runtime *rt)
{
    return rt->cfg.backend == STRATA_BACKEND_CPU ? STRATA_LEDGER_HOST : STRATA_LEDGER_DEVICE;
}

static void note_param_bytes(strata_runtime *rt)
{
    rt->stats.param_bytes = rt->param_bytes_now;
    if (rt->param_bytes_now > rt->stats.param_bytes_peak)
        rt->stats.param_bytes_peak = rt->param_bytes_now;
}

/* ---- sharded gradients (strata.h, "sharded gradients"; ZeRO-2). An owned
 * parameter's gradient is strata's buffer from commit to uncommit; a
 * non-owned one's is a slice of its layer's lent buffer from
 * strata_layer_grad_begin to the layer's backward hook, which packs it into
 * the buckets (they copy at post) and frees it; else NULL. The buckets'
 * items follow the lent pointers (strata_gb_set_grad). The reductions are
 * the same calls on the same values, so results are bit-identical. */
static void grads_point(strata_runtime *rt, int layer, float *base)
{
    size_t off = 0;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->layer != layer || p->owner == rt->rank)
            continue;
        p->grad = base ? base + off : NULL;
        off += p->view.numel;
        if (rt->buckets)
            (void)strata_gb_set_grad(rt->buckets, i, p->grad); /* a non-receiving item */
    }
}

static void grads_release(strata_runtime *rt, int layer)
{
    if (!rt->shard_grads || !rt->grad_buf[layer])
        return;
    free(rt->grad_buf[layer]);
    rt->grad_buf[layer] = NULL;
    strata_ledger_add(&rt->ledger, STRATA_LEDGER_HOST, STRATA_LEDGER_GRADIENTS,
                      -(int64_t)round64(rt->grad_layer_bytes[layer]));
    grads_point(rt, layer, NULL);
}

static strata_status grads_lend(strata_runtime *rt, int layer)
{
    const size_t need = rt->grad_layer_bytes[layer];
    if (!rt->shard_grads || need == 0 || rt->grad_buf[layer])
        return STRATA_OK;
    float *b = calloc(1, round64(need)); /* zeroed: backward passes accumulate */
    if (!b)
        return strata_error(STRATA_ERR_NOMEM, "layer_grad_begin: cannot allocate %zu bytes for "
                            "layer %d's non-owned gradients", need, layer);
    rt->grad_buf[layer] = b;
    strata_ledger_add(&rt->ledger, STRATA_LEDGER_HOST, STRATA_LEDGER_GRADIENTS,
                      (int64_t)round64(need));
    grads_point(rt, layer, b);
    return STRATA_OK;
}

static void grads_free(strata_runtime *rt)
{
    for (int l = 0; rt->grad_buf && l <= rt->max_layer; l++)
        grads_release(rt, l);
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (rt->shard_grads && p->owner == rt->rank && p->grad != p->user_grad)
            free(p->grad); /* its bytes are in rt->held */
        p->grad = p->user_grad;
    }
    free(rt->grad_buf);
    free(rt->grad_layer_bytes);
    rt->grad_buf = NULL;
    rt->grad_layer_bytes = NULL;
    rt->shard_grads = false;
}

/* At commit, before the buckets (their items take the pointers set here). */
static strata_status grads_setup(strata_runtime *rt)
{
    rt->shard_grads = rt->cfg.shard_gradients && rt->world > 1 &&
                      rt->cfg.sharding == STRATA_SHARD_OWNER &&
                      rt->cfg.backend == STRATA_BACKEND_CPU;
    if (!rt->shard_grads)
        return STRATA_OK;
    const size_t L = (size_t)rt->max_layer + 1;
    rt->grad_buf = calloc(L, sizeof *rt->grad_buf);
    rt->grad_layer_bytes = calloc(L, sizeof *rt->grad_layer_bytes);
    if (!rt->grad_buf || !rt->grad_layer_bytes)
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        const size_t b = p->view.numel * sizeof(float);
        if (p->owner != rt->rank) {
            p->grad = NULL;
            rt->grad_layer_bytes[p->layer] += b;
            continue;
        }
        float *g = calloc(1, round64(b));
        if (!g)
            return strata_error(STRATA_ERR_NOMEM, "commit: cannot allocate %zu bytes for the "
                                "gradient of '%s'", b, p->name);
        p->grad = g;
        strata_ledger_hold_add(&rt->held, &rt->ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_GRADIENTS, round64(b));
    }
    return STRATA_OK;
}

static void managed_free(strata_runtime *rt)
{
    grads_free(rt);
    for (int l = 0; rt->layer_buf && l <= rt->max_layer; l++)
        if (rt->layer_buf[l]) {
            strata_ledger_add(&rt->ledger, STRATA_LEDGER_HOST, STRATA_LEDGER_WEIGHTS,
                              -(int64_t)round64(rt->layer_bytes[l]));
            free(rt->layer_buf[l]);
        }
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (rt->managed && p->managed && p->owner == rt->rank && p->data != p->user_data)
            free(p->data);
        p->data = p->user_data;
    }
    free(rt->layer_buf);
    free(rt->layer_held_at);
    free(rt->layer_bytes);
    rt->layer_buf = NULL;
    rt->layer_held_at = NULL;
    rt->layer_bytes = NULL;
    rt->managed = false;
}

/* At commit, after planning: copy each managed parameter's initial values
 * into a buffer on its owner; the other ranks drop the caller's pointer. */
static strata_status managed_setup(strata_runtime *rt)
{
    const bool active = rt->world > 1 && rt->cfg.sharding == STRATA_SHARD_OWNER;
    rt->param_bytes_now = 0;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        p->managed = p->managed && active;
        rt->managed = rt->managed || p->managed;
        if (!p->managed) {
            rt->param_bytes_now += p->view.numel * sizeof(float);
            strata_ledger_hold_add(&rt->held, &rt->ledger, caller_tier(rt),
                                   STRATA_LEDGER_WEIGHTS, p->view.numel * sizeof(float));
        }
        /* The gradient buffers registered, each once (the Python door
         * registers one buffer of zeros for every parameter without one);
         * with sharded gradients strata's own (grads_setup) instead. */
        bool seen = rt->shard_grads;
        for (int j = 0; j < i && !seen; j++)
            seen = rt->params[j].grad == p->grad;
        if (!seen)
            strata_ledger_hold_add(&rt->held, &rt->ledger, caller_tier(rt),
                                   STRATA_LEDGER_GRADIENTS, p->view.numel * sizeof(float));
    }
    if (!rt->managed) {
        note_param_bytes(rt);
        return STRATA_OK;
    }
    if (rt->cfg.backend != STRATA_BACKEND_CPU)
        return strata_error(STRATA_ERR_UNSUPPORTED, "commit: managed weights need the CPU "
                            "backend in this version");
    const size_t L = (size_t)rt->max_layer + 1;
    rt->layer_buf = calloc(L, sizeof *rt->layer_buf);
    rt->layer_held_at = malloc(L * sizeof *rt->layer_held_at);
    rt->layer_bytes = calloc(L, sizeof *rt->layer_bytes);
    if (!rt->layer_buf || !rt->layer_held_at || !rt->layer_bytes)
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    for (size_t l = 0; l < L; l++)
        rt->layer_held_at[l] = -1;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (!p->managed)
            continue;
        const size_t b = p->view.numel * sizeof(float);
        if (p->owner != rt->rank) {
            p->data = NULL;
            rt->layer_bytes[p->layer] += b;
            continue;
        }
        float *w = aligned_alloc(64, round64(b));
        if (!w) {
            p->data = p->user_data;
            return strata_error(STRATA_ERR_NOMEM, "commit: cannot allocate %zu bytes for '%s'",
                                b, p->name);
        }
        memcpy(w, p->user_data, b);
        p->data = w;
        rt->param_bytes_now += b;
        strata_ledger_hold_add(&rt->held, &rt->ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_WEIGHTS, round64(b));
    }
    for (size_t l = 0; l < L; l++)
        if (rt->layer_bytes[l] > rt->stats.largest_layer_bytes)
            rt->stats.largest_layer_bytes = rt->layer_bytes[l];
    note_param_bytes(rt);
    return STRATA_OK;
}

void strata_rt_layer_release(strata_runtime *rt, int layer)
{
    if (!rt->managed || layer > rt->max_layer ||
        (rt->layer_held_at[layer] < 0 && !rt->layer_buf[layer]))
        return;
    if (rt->layer_buf[layer]) {
        free(rt->layer_buf[layer]);
        strata_ledger_add(&rt->ledger, STRATA_LEDGER_HOST, STRATA_LEDGER_WEIGHTS,
                          -(int64_t)round64(rt->layer_bytes[layer]));
        rt->layer_buf[layer] = NULL;
        rt->param_bytes_now -= rt->layer_bytes[layer];
        note_param_bytes(rt);
    }
    rt->layer_held_at[layer] = -1;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->managed && p->layer == layer && p->owner != rt->rank)
            p->data = NULL;
    }
}

static void release_all(strata_runtime *rt)
{
    for (int l = 0; rt->managed && l <= rt->max_layer; l++)
        strata_rt_layer_release(rt, l);
}

/* Collective in the shard group: every rank holds the same layers. The
 * broadcasts go in registration order, as materialize's do. */
strata_status strata_rt_layer_materialize(strata_runtime *rt, int layer)
{
    if (!rt->managed || layer > rt->max_layer || rt->layer_held_at[layer] == rt->t)
        return STRATA_OK;
    const size_t need = rt->layer_bytes[layer];
    if (need && !rt->layer_buf[layer]) {
        rt->layer_buf[layer] = aligned_alloc(64, round64(need));
        if (!rt->layer_buf[layer])
            return strata_error(STRATA_ERR_NOMEM, "materialize: cannot allocate %zu bytes for "
                                "layer %d's weights", need, layer);
        rt->param_bytes_now += need;
        strata_ledger_add(&rt->ledger, STRATA_LEDGER_HOST, STRATA_LEDGER_WEIGHTS,
                          (int64_t)round64(need));
        note_param_bytes(rt);
    }
    strata_status st = STRATA_OK;
    size_t off = 0;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        if (!p->managed || p->layer != layer)
            continue;
        if (p->owner != rt->rank) {
            p->data = rt->layer_buf[layer] + off;
            off += p->view.numel;
        }
        st = strata_comm_broadcast_from_owner(rt->group, p->data, p->view.numel,
                                              p->owner % rt->group_size);
    }
    if (st == STRATA_OK)
        rt->layer_held_at[layer] = rt->t;
    else
        strata_rt_layer_release(rt, layer);
    return st;
}

static strata_status commit_unguarded(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "commit: NULL runtime");
    if (rt->committed)
        return strata_error(STRATA_ERR_STATE, "commit: already committed");
    if (rt->n_params == 0)
        return strata_error(STRATA_ERR_STATE, "commit: no parameters registered");
    rt->layer_reduced = calloc((size_t)rt->max_layer + 1, 1);
    if (!rt->layer_reduced)
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    strata_stats *s = &rt->stats;
    const int rank = rt->rank;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        const void *fc;
        p->routed = route(rt, p);
        p->fam = family_for(&rt->cfg, p->routed, &fc);
        p->tail = p->routed == strata_family_tail_kind() && is_tail_by_rule(rt, p);
        p->owner = 0;
        p->fan_slot = -1;
    }
    strata_status st = plan_owners(rt);
    if (st == STRATA_OK)
        st = assign_refresh_offsets(rt);
    if (st == STRATA_OK)
        st = create_engine(rt);
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        const void *fc;
        family_for(&rt->cfg, p->routed, &fc);
        void *own = NULL; /* the configuration with this parameter's refresh phase */
        if (p->fam->with_offset) {
            own = malloc(p->fam->cfg_size);
            st = own ? p->fam->with_offset(fc, p->refresh_offset, own)
                     : strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
            fc = own;
        }
        if (st == STRATA_OK && updates_here(rt, p))
            st = p->fam->create(fc, rt->be, &p->view, true, &p->state);
        if (st == STRATA_OK && p->state) /* the engine keeps its own copy of fc */
            st = strata_refresh_add(rt->engine, p->fam, p->state, fc, p->refresh_offset,
                                    p->layer, p->name, &p->entry);
        free(own);
        if (st != STRATA_OK)
            break;
        if (p->tail) {
            s->n_tail++;
            s->tail_elements += (int64_t)p->view.numel;
        } else {
            s->n_matrix++;
            s->matrix_elements += (int64_t)p->view.numel;
        }
        strata_log(rt, STRATA_LOG_INFO, "route", "%-28s %6lld x %-6lld layer %2d -> %s%s",
                   p->name, (long long)p->view.rows, (long long)p->view.cols, p->layer,
                   strata_optimizer_name(p->routed), p->tail ? " (tail)" : "");
    }
    if (st == STRATA_OK)
        st = share_step_scratch(rt);
    if (st == STRATA_OK)
        st = strata_refresh_commit(rt->engine);
    if (st != STRATA_OK) {
        uncommit(rt);
        return st;
    }
    strata_refresh_stats es;
    strata_refresh_stats_get(rt->engine, &es);
    s->preconditioner_blocks = es.blocks;
    s->n_params = rt->n_params;
    s->world_size = rt->world;
    s->rank = rank;
    rt->norm_parts = calloc(2 * (size_t)rt->n_params + PREP_KINDS, sizeof *rt->norm_parts);
    rt->shard_counts = calloc(2 * (size_t)rt->world, sizeof *rt->shard_counts);
    if (!rt->norm_parts || !rt->shard_counts) {
        uncommit(rt);
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    }
    if (rt->cfg.sharding == STRATA_SHARD_GATHER && rt->world > 1) {
        rt->gather_stage = calloc((size_t)rt->n_params, sizeof *rt->gather_stage);
        st = rt->gather_stage ? STRATA_OK : strata_error(STRATA_ERR_NOMEM, "out of memory");
        for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
            size_t cnt, off;
            even_shard(rt->params[i].view.numel, rt->world, rank, &cnt, &off);
            rt->gather_stage[i] = malloc((cnt ? cnt : 1) * sizeof(float));
            if (!rt->gather_stage[i])
                st = strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
            else
                strata_ledger_hold_add(&rt->held, &rt->ledger, STRATA_LEDGER_HOST,
                                       STRATA_LEDGER_GRADIENTS, (cnt ? cnt : 1) * sizeof(float));
        }
        if (st != STRATA_OK) {
            uncommit(rt);
            return st;
        }
    }
    st = grads_setup(rt);
    if (st == STRATA_OK)
        st = managed_setup(rt);
    if (st == STRATA_OK)
        st = create_buckets(rt);
    if (st == STRATA_OK)
        st = team_setup(rt);
    if (st != STRATA_OK) {
        uncommit(rt);
        return st;
    }
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (updates_here(rt, p)) {
            s->owned_params++;
            s->owned_param_bytes += p->view.numel * sizeof(float);
            const size_t item = p->view.numel * sizeof(float) + p->fam->bytes(p->state);
            s->largest_owned_bytes = item > s->largest_owned_bytes ? item : s->largest_owned_bytes;
        }
    }
    rt->committed = true;
    return STRATA_OK;
}

strata_status strata_commit(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "commit: NULL runtime");
    BUSY_CALL(rt, "commit", commit_unguarded(rt));
}

static strata_status check_hook(const strata_runtime *rt, int layer, const char *what)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL runtime", what);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "%s: call strata_commit first", what);
    if (layer < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: layer %d < 0", what, layer);
    if (layer > rt->max_layer) /* a typo'd layer would otherwise do nothing, silently */
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: layer %d does not exist (the "
                            "parameters' layers are 0..%d)", what, layer, rt->max_layer);
    return STRATA_OK;
}

/* Broadcast every parameter of `layer` (all layers: -1) whose owner updated it
 * since this rank last received it. Collective: every rank calls it alike. */
static strata_status materialize(strata_runtime *rt, int layer)
{
    if (rt->world == 1 || rt->cfg.sharding != STRATA_SHARD_OWNER)
        return STRATA_OK;
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        if (p->managed || (layer >= 0 && p->layer != layer) || p->materialized_at >= rt->t)
            continue;
        st = strata_comm_broadcast_from_owner(rt->group, p->data, p->view.numel,
                                              p->owner % rt->group_size);
        p->materialized_at = rt->t;
    }
    return st;
}

strata_status strata_hook_forward(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "hook_forward");
    if (st != STRATA_OK)
        return st;
    rt->stats.forward_hooks++;
    st = materialize(rt, layer);
    if (st == STRATA_OK)
        st = strata_rt_layer_materialize(rt, layer);
    if (st != STRATA_OK)
        return st;
    strata_refresh_prefetch(rt->engine, layer, rt->t + 1);
    return STRATA_OK;
}

strata_status strata_layer_materialize(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "layer_materialize");
    if (st == STRATA_OK)
        st = materialize(rt, layer);
    if (st == STRATA_OK)
        st = strata_rt_layer_materialize(rt, layer);
    return st;
}

strata_status strata_layer_release(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "layer_release");
    if (st == STRATA_OK)
        strata_rt_layer_release(rt, layer);
    return st;
}

strata_status strata_param_data(const strata_runtime *rt, strata_param_id id, float **out)
{
    if (out)
        *out = NULL;
    if (!rt || !out || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_data: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_data: call strata_commit first");
    const rt_param *p = &rt->params[id];
    if (!p->data)
        return strata_error(STRATA_ERR_STATE, "param_data('%s'): layer %d is not materialized "
                            "on rank %d (strata_hook_forward or strata_layer_materialize first)",
                            p->name, p->layer, rt->rank);
    *out = p->data;
    return STRATA_OK;
}

static strata_status set_buffers_unguarded(strata_runtime *rt, strata_param_id id, float *data,
                                           float *grad)
{
    if (!rt || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_buffers: bad id %d", (int)id);
    rt_param *p = &rt->params[id];
    if (data && rt->managed && p->managed)
        return strata_error(STRATA_ERR_UNSUPPORTED, "param_set_buffers('%s'): the weights are "
                            "managed by strata (strata_param_desc.managed with owner sharding "
                            "over several ranks); only the gradient can be re-pointed",
                            p->name);
    if (grad && rt->shard_grads)
        return strata_error(STRATA_ERR_UNSUPPORTED, "param_set_buffers('%s'): with sharded "
                            "gradients (strata_config.shard_gradients) the gradient buffers are "
                            "strata's (strata_param_grad)", p->name);
    if (grad && rt->buckets && grad != p->grad)
        return strata_error(STRATA_ERR_UNSUPPORTED, "param_set_buffers('%s'): gradient buckets "
                            "(several ranks over MPI) keep the registered gradient buffer; it "
                            "cannot be re-pointed in this version", p->name);
    if (data) {
        p->user_data = data;
        if (!(rt->managed && p->managed))
            p->data = data;
    }
    if (grad)
        p->grad = p->user_grad = grad;
    return STRATA_OK;
}

strata_status strata_param_set_buffers(strata_runtime *rt, strata_param_id id, float *data,
                                       float *grad)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_buffers: NULL runtime");
    BUSY_CALL(rt, "param_set_buffers", set_buffers_unguarded(rt, id, data, grad));
}

strata_status strata_sync_weights(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "sync_weights: NULL runtime");
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "sync_weights: call strata_commit first");
    return materialize(rt, -1);
}

/* Scale the rank-ordered sum into the mean over ranks (DDP's convention). */
static strata_status average(const strata_runtime *rt, float *g, size_t n)
{
    if (rt->world == 1 || !rt->cfg.average_gradients)
        return STRATA_OK;
    return strata_backend_scale(rt->be, NULL, n, g, (float)(1.0 / rt->world));
}

strata_status strata_hook_backward(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "hook_backward");
    if (st != STRATA_OK)
        return st;
    rt->stats.backward_hooks++;
    strata_rt_layer_release(rt, layer); /* its weights are done with for this pass */
    /* Record that this layer's gradients are final for the step, and reduce
     * them: to their owner (owner, zero1), or to even element shards (gather). */
    if (layer <= rt->max_layer)
        rt->layer_reduced[layer] = 1;
    if (rt->world == 1)
        return STRATA_OK;
    const double t0 = strata_now_seconds();
    if (rt->shard_grads && layer <= rt->max_layer && rt->grad_layer_bytes[layer] &&
        !rt->grad_buf[layer]) {
        /* Every rank posts the same buckets: this rank's part is zero. */
        if (!rt->warned_grad_unlent) {
            rt->warned_grad_unlent = true;
            strata_log(rt, STRATA_LOG_WARN, "hooks", "hook_backward(%d): the layer's non-owned "
                       "gradients were not lent (strata_layer_grad_begin): this rank "
                       "contributes zeros", layer);
        }
        st = grads_lend(rt, layer);
        if (st != STRATA_OK)
            return st;
    }
    if (rt->buckets) {
        /* Bucketed and non-blocking: post this layer's buckets and advance
         * the ones in flight; strata_step waits for the rest. The buckets
         * copied the non-owned gradients: their lent buffer goes. */
        st = strata_gb_post_layer(rt->buckets, layer);
        if (layer <= rt->max_layer)
            grads_release(rt, layer);
        rt->stats.seconds_backward_hooks += strata_now_seconds() - t0;
        return st;
    }
    const int N = rt->world;
    size_t *counts = rt->shard_counts, *displs = rt->shard_counts + N;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        if (p->layer != layer)
            continue;
        if (rt->cfg.sharding == STRATA_SHARD_GATHER) {
            for (int r = 0; r < N; r++)
                even_shard(p->view.numel, N, r, &counts[r], &displs[r]);
            st = strata_comm_reduce_scatter_f32(rt->comm, p->grad, rt->gather_stage[i], counts,
                                                displs);
            if (st == STRATA_OK)
                st = average(rt, rt->gather_stage[i], counts[rt->rank]);
        } else if (rt->n_groups > 1) {
            /* Replicated across groups: the sum reaches this matrix's owner in
             * every group, through the node leaders. */
            const int q = p->owner % rt->group_size;
            for (int g = 0; g < rt->n_groups; g++)
                rt->replicas[g] = g * rt->group_size + q;
            st = strata_comm_reduce_to_owners(rt->comm, p->grad, p->view.numel, rt->replicas,
                                              rt->n_groups);
            if (st == STRATA_OK && p->owner == rt->rank)
                st = average(rt, p->grad, p->view.numel);
        } else {
            st = strata_comm_reduce_to_owner(rt->comm, p->grad, p->view.numel, p->owner);
            if (st == STRATA_OK && p->owner == rt->rank)
                st = average(rt, p->grad, p->view.numel);
        }
    }
    if (layer <= rt->max_layer)
        grads_release(rt, layer);
    rt->stats.seconds_backward_hooks += strata_now_seconds() - t0;
    return st;
}

strata_status strata_layer_grad_begin(strata_runtime *rt, int layer)
{
    const strata_status st = check_hook(rt, layer, "layer_grad_begin");
    return st == STRATA_OK ? grads_lend(rt, layer) : st;
}

strata_status strata_param_grad(const strata_runtime *rt, strata_param_id id, float **out)
{
    if (out)
        *out = NULL;
    if (!rt || !out || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_grad: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_grad: call strata_commit first");
    const rt_param *p = &rt->params[id];
    if (!p->grad)
        return strata_error(STRATA_ERR_STATE, "param_grad('%s'): rank %d does not own it and "
                            "layer %d's gradients are not lent now (strata_layer_grad_begin "
                            "first)", p->name, rt->rank, p->layer);
    *out = p->grad;
    return STRATA_OK;
}

static strata_status set_lr_scale_unguarded(strata_runtime *rt, float scale)
{
    if (!rt || !(scale >= 0.0f) || !isfinite(scale))
        return strata_error(STRATA_ERR_INVALID_ARG, "set_lr_scale: scale must be finite and >= 0");
    rt->lr_scale = scale;
    return STRATA_OK;
}

strata_status strata_set_lr_scale(strata_runtime *rt, float scale)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "set_lr_scale: NULL runtime");
    BUSY_CALL(rt, "set_lr_scale", set_lr_scale_unguarded(rt, scale));
}

/* The configured lr and weight decay of parameter p's routed family. */
static void configured_hyper(const strata_runtime *rt, const rt_param *p, float *lr, float *wd)
{
    const void *fc;
    family_for(&rt->cfg, p->routed, &fc);
    *lr = *(const float *)(const void *)((const char *)fc + p->fam->lr_offset);
    *wd = *(const float *)(const void *)((const char *)fc + p->fam->weight_decay_offset);
}

strata_status strata_rt_param_hyper(strata_runtime *rt, int id, bool set, float lr,
                                    float weight_decay)
{
    rt_param *p = &rt->params[id];
    if (!set)
        configured_hyper(rt, p, &lr, &weight_decay);
    if (!p->fam->set_hyper) {
        float clr, cwd;
        configured_hyper(rt, p, &clr, &cwd);
        if (set && (lr != clr || weight_decay != cwd))
            return strata_error(STRATA_ERR_UNSUPPORTED,
                                "param_set_hyper('%s'): the %s family has no per-parameter "
                                "lr and weight decay", p->name, p->fam->name);
    } else if (p->state) {
        p->fam->set_hyper(p->state, lr, weight_decay);
    }
    p->hyper_set = set;
    p->lr = set ? lr : 0.0f;
    p->weight_decay = set ? weight_decay : 0.0f;
    return STRATA_OK;
}

static strata_status set_hyper_unguarded(strata_runtime *rt, strata_param_id id, float lr,
                                         float weight_decay)
{
    if (!rt || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_hyper: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_set_hyper: call strata_commit first");
    if (rt->stepping)
        return strata_error(STRATA_ERR_STATE, "param_set_hyper: called during strata_step");
    if (!(lr >= 0.0f) || !isfinite(lr) || !(weight_decay >= 0.0f) || !isfinite(weight_decay))
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_hyper('%s'): lr %g and "
                            "weight_decay %g must be finite and >= 0", rt->params[id].name,
                            (double)lr, (double)weight_decay);
    return strata_rt_param_hyper(rt, id, true, lr, weight_decay);
}

strata_status strata_param_get_hyper(const strata_runtime *rt, strata_param_id id, float *lr,
                                     float *weight_decay)
{
    if (!rt || id < 0 || id >= rt->n_params || !lr || !weight_decay)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_get_hyper: bad id %d or NULL",
                            (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_get_hyper: call strata_commit first");
    const rt_param *p = &rt->params[id];
    if (p->hyper_set) {
        *lr = p->lr;
        *weight_decay = p->weight_decay;
    } else {
        configured_hyper(rt, p, lr, weight_decay);
    }
    return STRATA_OK;
}

static strata_status set_active_unguarded(strata_runtime *rt, strata_param_id id, bool active)
{
    if (!rt || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_active: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_set_active: call strata_commit first");
    if (rt->stepping)
        return strata_error(STRATA_ERR_STATE, "param_set_active: called during strata_step");
    rt_param *p = &rt->params[id];
    if (!active && rt->n_groups > 1 && p->fam->has_refresh) {
        const void *fc;
        family_for(&rt->cfg, p->routed, &fc);
        if (p->fam->has_refresh(fc))
            return strata_error(STRATA_ERR_UNSUPPORTED,
                                "param_set_active('%s'): skipping a %s parameter with HSDP "
                                "(several shard groups ship its refreshes every step) is not "
                                "supported", p->name, p->fam->name);
    }
    p->inactive = !active;
    return STRATA_OK;
}

strata_status strata_param_set_hyper(strata_runtime *rt, strata_param_id id, float lr,
                                     float weight_decay)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_hyper: NULL runtime");
    BUSY_CALL(rt, "param_set_hyper", set_hyper_unguarded(rt, id, lr, weight_decay));
}

strata_status strata_param_set_active(strata_runtime *rt, strata_param_id id, bool active)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_set_active: NULL runtime");
    BUSY_CALL(rt, "param_set_active", set_active_unguarded(rt, id, active));
}

/* The engine's critical path since the last step ended (this step's forward
 * hooks' prefetches included) becomes the step's; the cumulative figure is
 * the sum of the steps' figures. */
static void step_critical_path(strata_runtime *rt)
{
    const double now = strata_refresh_critical_seconds(rt->engine);
    rt->stats.last_seconds_critical = now - rt->critical_mark;
    rt->stats.seconds_critical += rt->stats.last_seconds_critical;
    rt->critical_mark = now;
}

/* The first pass of step t (strata_refresh_prepare per parameter this rank
 * owns, in registration order): everything of the step that can fail for
 * a reason outside the program (a bounded wait for a due refresh result,
 * HSDP shipping, nvme reads) runs here, before any weight, moment, factor
 * or counter changes. It goes through every parameter even after a
 * failure (HSDP shipping is a collective of each replica set: every rank
 * makes the same calls) and returns the first failure, with its message. */
static strata_status step_prepare(strata_runtime *rt, int64_t t, double *wait)
{
    strata_status first = STRATA_OK;
    char why[256] = "";
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (!updates_here(rt, p) || p->inactive)
            continue;
        const strata_status st = strata_refresh_prepare(rt->engine, p->entry, t, wait);
        if (st != STRATA_OK && first == STRATA_OK) {
            first = st;
            snprintf(why, sizeof why, "%s", strata_last_error());
        }
    }
    if (first != STRATA_OK)
        return strata_error(first, "step %lld: %s; nothing changed", (long long)t, why);
    return STRATA_OK;
}

/* ---- the step, phase by phase (strata_step reads them in order) */

/* Gradient reductions still in flight complete first: the owners' sums
 * land (and are scaled to the mean) before anything reads them. */
static strata_status step_finish_buckets(strata_runtime *rt)
{
    if (!rt->buckets)
        return STRATA_OK;
    double waited = 0.0;
    const strata_status st = strata_gb_finish_all(rt->buckets, &waited);
    rt->stats.last_grad_wait_seconds = waited;
    rt->stats.seconds_grad_wait += waited;
    strata_gb_stats gs;
    strata_gb_stats_get(rt->buckets, &gs);
    rt->stats.grad_buckets = gs.posted;
    rt->stats.grad_bucket_ring_waits = gs.ring_waits;
    return st;
}

/* Gather sharding: every rank assembles every full reduced gradient now
 * (the gather-then-compute baseline moves them at the optimizer step). */
static strata_status step_gather(strata_runtime *rt)
{
    if (rt->world == 1 || rt->cfg.sharding != STRATA_SHARD_GATHER)
        return STRATA_OK;
    const int N = rt->world;
    size_t *counts = rt->shard_counts, *displs = rt->shard_counts + N;
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        for (int r = 0; r < N; r++)
            even_shard(p->view.numel, N, r, &counts[r], &displs[r]);
        st = strata_comm_allgatherv_f32(rt->comm, rt->gather_stage[i], p->grad, counts, displs);
        if (!p->tail)
            rt->stats.step_matrix_bytes += (p->view.numel - counts[rt->rank]) * sizeof(float) +
                                           (uint64_t)(N - 1) * counts[rt->rank] * sizeof(float);
    }
    return st;
}

/* Validate every reduced gradient before touching any state: each rank
 * scans the ones it holds (its owned parameters), and the per-parameter
 * sums of squares and non-finite flags are summed over the ranks (one
 * nonzero contribution per parameter, so exactly), so that every rank sees
 * the single-rank norm and takes the same decision. The first pass's
 * outcome `st_prep` travels in the same reduction (a count per status after
 * the 2 n_params sums), so that every rank gives up together. *norm gets the
 * global gradient norm; the per-parameter sums of squares stay in
 * rt->norm_parts for the step's warnings. */
static strata_status step_norm_and_veto(strata_runtime *rt, strata_status st_prep, double *norm)
{
    const int rank = rt->rank, n = rt->n_params;
    double *parts = rt->norm_parts;
    strata_status st = STRATA_OK;
    memset(parts, 0, (2 * (size_t)n + PREP_KINDS) * sizeof *parts);
    if (st_prep != STRATA_OK)
        parts[2 * n + ((int)st_prep < PREP_KINDS ? (int)st_prep : PREP_KINDS - 1)] = 1.0;
    for (int i = 0; i < n; i++) {
        const rt_param *p = &rt->params[i];
        if (!((p->owner == rank && rank < rt->group_size) || (p->owner < 0 && rank == 0)))
            continue; /* one copy of each reduced gradient: group 0's owner */
        if (p->inactive)
            continue; /* no gradient this step: not in the norm, not checked */
        /* The gradient is backend memory: the squares are summed there. */
        double acc = 0.0;
        st = strata_backend_sumsq(rt->be, NULL, p->view.numel, p->grad, &acc);
        if (st != STRATA_OK)
            return st;
        if (isfinite(acc))
            parts[2 * i] = acc;
        else
            parts[2 * i + 1] = 1.0;
    }
    if (rt->world > 1 && st_prep == STRATA_OK) {
        st = strata_comm_allreduce_f64(rt->comm, parts, 2 * n + PREP_KINDS, STRATA_REDUCE_SUM);
    } else if (rt->world > 1) { /* keep this rank's first-pass message */
        char why[512];
        snprintf(why, sizeof why, "%s", strata_last_error());
        st = strata_comm_allreduce_f64(rt->comm, parts, 2 * n + PREP_KINDS, STRATA_REDUCE_SUM);
        strata_error(st_prep, "%s", why);
    }
    if (st_prep != STRATA_OK)
        return st_prep; /* nothing changed (step_prepare) */
    if (st != STRATA_OK)
        return st;
    for (int k = 1; k < PREP_KINDS; k++)
        if (parts[2 * n + k] > 0.0)
            return strata_error((strata_status)k,
                                "step %lld: the first pass failed on %.0f other rank(s) (%s); "
                                "nothing changed",
                                (long long)rt->t + 1, parts[2 * n + k],
                                strata_status_str((strata_status)k));
    double norm_sq = 0.0;
    int bad = -1;
    for (int i = 0; i < n; i++) {
        if (parts[2 * i + 1] > 0.0 && bad < 0)
            bad = i;
        norm_sq += parts[2 * i];
    }
    if (bad >= 0) {
        rt->stats.nonfinite_rejected++;
        return strata_error(STRATA_ERR_NONFINITE,
                            "step %lld: gradient of '%s' has NaN/Inf; no parameter updated",
                            (long long)rt->t + 1, rt->params[bad].name);
    }
    *norm = sqrt(norm_sq);
    return STRATA_OK;
}

/* A layer whose backward hook never ran would, with several ranks, hold an
 * unreduced gradient: say so once (single-process results are unaffected). */
static void step_check_hooks(strata_runtime *rt)
{
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (!rt->layer_reduced[p->layer] && !p->inactive) {
            rt->stats.missing_backward_hooks++;
            if (!rt->warned_missing_hook) {
                rt->warned_missing_hook = true;
                strata_log(rt, STRATA_LOG_WARN, "hooks",
                           "step %lld: no strata_hook_backward for layer %d ('%s') since the "
                           "last step", (long long)rt->t + 1, p->layer, p->name);
            }
        }
    }
    memset(rt->layer_reduced, 0, (size_t)rt->max_layer + 1);
}

/* Clip to max_grad_norm in place, like torch.nn.utils.clip_grad_norm_. */
static strata_status step_clip(strata_runtime *rt, double norm)
{
    rt->stats.grad_norm = norm;
    if (!(rt->cfg.max_grad_norm > 0.0f && norm > rt->cfg.max_grad_norm))
        return STRATA_OK;
    const float c = (float)(rt->cfg.max_grad_norm / (norm + 1e-6));
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (!updates_here(rt, p) || p->inactive)
            continue; /* only the owner's copy is reduced and used */
        const strata_status st = strata_backend_scale(rt->be, NULL, p->view.numel, p->grad, c);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

/* The numerical events of parameter i in this step (optim/optim_internal.h):
 * counted in the stats, the first of each kind logged. */
static void step_warn_numerics(strata_runtime *rt, int i, int64_t t,
                               const strata_optim_counters *cnt, int64_t skipped0, int64_t dirs0)
{
    const rt_param *p = &rt->params[i];
    if (cnt->overflow_skipped > skipped0 && !rt->warned_overflow) {
        rt->warned_overflow = true;
        strata_log(rt, STRATA_LOG_WARN, "optim",
                   "step %lld: '%s' was not updated: its gradient (norm %.3g) could overflow "
                   "its float32 %s state (factors, moments, estimates); its weights and "
                   "state were kept. Later ones are counted in stats.overflow_skipped",
                   (long long)t, p->name, sqrt(rt->norm_parts[2 * i]),
                   strata_optimizer_name(p->routed));
    }
    if (cnt->nonfinite_directions > dirs0 && !rt->warned_direction) {
        rt->warned_direction = true;
        strata_log(rt, STRATA_LOG_WARN, "optim",
                   "step %lld: '%s': the %s update direction came out NaN/Inf from finite "
                   "state and was not applied (its weights were kept; its moments and "
                   "factors absorbed the gradient). Later ones are counted in "
                   "stats.nonfinite_directions",
                   (long long)t, p->name, strata_optimizer_name(p->routed));
    }
}

/* Update every parameter this rank owns, in registration order: the plain
 * ones (Muon, AdamW) side by side on the step team first (team_setup), then
 * each through the engine; the team's results are read back in order.
 * Counters go to *cnt, the tail family's time to *tail_seconds, waits for
 * refresh results to *wait. Returns the first failure. */
static strata_status step_params(strata_runtime *rt, int64_t t, strata_optim_counters *cnt,
                                 double *tail_seconds, double *wait)
{
    if (rt->team) {
        rt->fan_t = t;
        strata_worker_team_run(rt->team, rt->n_fan, fan_one, rt);
    }
    const strata_optimizer tail = strata_family_tail_kind();
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        if (!updates_here(rt, p) || p->inactive)
            continue;
        const double t0 = strata_now_seconds();
        const int64_t skipped0 = cnt->overflow_skipped, dirs0 = cnt->nonfinite_directions;
        if (p->fan_slot >= 0) {
            const rt_fan *f = &rt->fan[p->fan_slot];
            counters_add(cnt, &f->cnt);
            st = f->st;
            if (st != STRATA_OK)
                strata_error(st, "%s", f->err); /* the detail, on this thread */
            if (p->routed == tail)
                *tail_seconds += f->seconds;
        } else {
            st = strata_refresh_step(rt->engine, p->entry, t, rt->lr_scale, p->data, p->grad,
                                     cnt, wait);
            if (p->routed == tail)
                *tail_seconds += strata_now_seconds() - t0;
        }
        step_warn_numerics(rt, i, t, cnt, skipped0, dirs0);
    }
    return st;
}

/* Refresh failures are warned about once per run: the engine's counters
 * before the updates (and a clean error slot: a synchronous refresh's
 * failure leaves its detail there) ... */
static void step_failures_mark(strata_runtime *rt, strata_refresh_stats *before)
{
    if (rt->warned_root_failure)
        return;
    strata_refresh_stats_get(rt->engine, before);
    strata_error_clear();
}

/* ... and after: the first failure is logged with the reason, the matrix
 * family's own (failure_hint) when its configuration explains it. */
static void step_failures_warn(strata_runtime *rt, int64_t t, const strata_refresh_stats *before)
{
    if (rt->warned_root_failure)
        return;
    strata_refresh_stats now;
    strata_refresh_stats_get(rt->engine, &now);
    const int64_t failed = now.refresh_failures - before->refresh_failures;
    if (failed <= 0)
        return;
    rt->warned_root_failure = true;
    const void *fc;
    const strata_precond_family *f = family_for(&rt->cfg, rt->cfg.matrix_optimizer, &fc);
    const char *why = strata_last_error();
    char hint[400], reason[512];
    if (f->failure_hint && f->failure_hint(fc, hint, sizeof hint))
        snprintf(reason, sizeof reason, "%s%s%s", hint, why[0] ? "; " : "", why);
    else
        snprintf(reason, sizeof reason, "%s",
                 why[0] ? why : "the decomposition failed on a worker thread (LAPACK "
                                "error, non-finite values or non-orthonormal vectors)");
    strata_log(rt, STRATA_LOG_WARN, "optim",
               "step %lld: %lld refresh%s failed (each keeps its previous result; "
               "later ones are counted in stats.root_failures): %s",
               (long long)t, (long long)failed, failed == 1 ? "" : "es", reason);
}

/* ZeRO-1 baseline: the owners broadcast the new weights now, inside the
 * optimizer step. */
static strata_status step_zero1_broadcast(strata_runtime *rt)
{
    if (rt->world == 1 || rt->cfg.sharding != STRATA_SHARD_ZERO1)
        return STRATA_OK;
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        st = strata_comm_broadcast_from_owner(rt->group, p->data, p->view.numel,
                                              p->owner % rt->group_size);
        if (!p->tail)
            rt->stats.step_matrix_bytes += (uint64_t)(p->owner == rt->rank ? rt->group_size - 1 : 1) *
                                           p->view.numel * sizeof(float);
    }
    return st;
}

/* The step's counters and times into the stats. */
static void step_stats(strata_runtime *rt, int64_t t, const strata_optim_counters *cnt,
                       double tail_seconds, double wait, double t_start)
{
    strata_stats *s = &rt->stats;
    s->step = t;
    s->last_wait_seconds = wait;
    s->root_refreshes += cnt->root_refreshes;
    s->root_failures += cnt->root_failures;
    s->root_retries += cnt->root_retries;
    s->root_newton += cnt->root_newton;
    s->root_fallbacks += cnt->root_fallbacks;
    s->overflow_skipped += cnt->overflow_skipped;
    s->nonfinite_directions += cnt->nonfinite_directions;
    s->last_seconds_factors = cnt->seconds_factors;
    s->last_seconds_roots = cnt->seconds_roots;
    s->last_seconds_precondition = cnt->seconds_precondition;
    s->last_seconds_tail = tail_seconds;
    s->seconds_factors += cnt->seconds_factors;
    s->seconds_roots += cnt->seconds_roots;
    s->seconds_precondition += cnt->seconds_precondition;
    s->seconds_tail += tail_seconds;
    step_critical_path(rt);
    s->last_step_seconds = strata_now_seconds() - t_start;
    s->seconds_steps += s->last_step_seconds;
}

/* One optimizer step (strata.h): all or nothing until the updates begin.
 * Everything that can fail for a reason outside the program (reductions,
 * the first pass, the norm's allreduce, the veto) runs before any weight,
 * moment, factor or counter changes. */
static strata_status step_run(strata_runtime *rt);

static strata_status step_unguarded(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "step: NULL runtime");
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "step: call strata_commit first");
    if (rt->stepping)
        return strata_error(STRATA_ERR_STATE, "step: called during strata_step");
    rt->stepping = true;
    const strata_status st = step_run(rt);
    rt->stepping = false;
    return st;
}

static strata_status step_run(strata_runtime *rt)
{
    const double t_start = strata_now_seconds();
    rt->stats.last_wait_seconds = 0.0;
    release_all(rt); /* the weights are about to change (strata.h, managed weights) */
    for (int l = 0; rt->shard_grads && l <= rt->max_layer; l++)
        grads_release(rt, l); /* lent and never posted: nothing reads them now */

    strata_status st = step_finish_buckets(rt);
    if (st == STRATA_OK)
        st = step_gather(rt);
    if (st != STRATA_OK)
        return st;
    double wait = 0.0, norm = 0.0;
    const strata_status st_prep = step_prepare(rt, rt->t + 1, &wait);
    st = step_norm_and_veto(rt, st_prep, &norm);
    if (st != STRATA_OK)
        return st;
    step_check_hooks(rt);
    st = step_clip(rt, norm);
    if (st != STRATA_OK)
        return st;

    const int64_t t = ++rt->t;
    strata_optim_counters cnt = {0};
    double tail_seconds = 0.0;
    strata_refresh_stats failures_before = {0};
    step_failures_mark(rt, &failures_before);
    st = step_params(rt, t, &cnt, &tail_seconds, &wait);
    step_failures_warn(rt, t, &failures_before);
    if (st == STRATA_OK)
        st = step_zero1_broadcast(rt);
    step_stats(rt, t, &cnt, tail_seconds, wait, t_start);
    return st;
}

strata_status strata_step(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "step: NULL runtime");
    BUSY_CALL(rt, "step", step_unguarded(rt));
}

strata_status strata_memory_ledger_get(const strata_runtime *rt, strata_memory_ledger *out)
{
    if (!rt || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "memory_ledger_get: NULL argument");
    strata_ledger_read(&rt->ledger, out);
    return STRATA_OK;
}

strata_status strata_memory_ledger_charge(strata_runtime *rt, int tier, int kind, int64_t delta)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "memory_ledger_charge: NULL runtime");
    if (tier < 0 || tier >= STRATA_LEDGER_TIERS || kind < 0 || kind >= STRATA_LEDGER_KINDS)
        return strata_error(STRATA_ERR_INVALID_ARG, "memory_ledger_charge: tier %d or kind %d "
                            "out of range ([0, %d), [0, %d))", tier, kind, STRATA_LEDGER_TIERS,
                            STRATA_LEDGER_KINDS);
    strata_ledger_add(&rt->ledger, tier, kind, delta);
    return STRATA_OK;
}

strata_status strata_stats_get(const strata_runtime *rt, strata_stats *out)
{
    if (!rt || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "stats_get: NULL argument");
    *out = rt->stats;
    strata_backend_bytes(rt->be, &out->device_bytes, &out->device_bytes_peak);
    out->step_scratch_bytes = rt->step_scratch_bytes;
    strata_comm_bytes(rt->comm, &out->comm_bytes_intra_node, &out->comm_bytes_inter_node);
    strata_refresh_stats e;
    strata_refresh_stats_get(rt->engine, &e);
    out->root_refreshes += e.refreshes;
    out->root_failures += e.refresh_failures;
    out->root_retries += e.refresh_retries;
    out->root_newton += e.refresh_newton;
    out->root_fallbacks += e.refresh_fallbacks;
    {
        out->coh_installs = e.installs;
        out->coh_waits = e.waits;
        out->coh_wait_seconds = e.wait_seconds;
        out->coh_dropped = e.dropped;
        out->coh_failed = e.failed;
        out->coh_bound_exceeded = e.bound_exceeded;
        out->max_staleness = e.max_staleness;
        out->jobs_submitted = e.jobs_submitted;
        out->jobs_cancelled = e.jobs_cancelled;
        out->blocks_on_nvme = e.blocks_on_nvme;
        out->nvme_resident_buffers = e.resident_buffers;
        out->nvme_resident_bytes = e.resident_bytes;
        out->paged_params = e.paged_params;
        out->paged_bytes = e.paged_bytes;
        out->page_reads = e.page_reads;
        out->page_reads_waited = e.page_reads_waited;
        out->page_writes = e.page_writes;
        out->nvme_resident_reads = e.resident_reads;
        out->nvme_resident_prefetches = e.resident_prefetches;
        out->nvme_resident_evictions = e.resident_evictions;
        out->host_bytes = e.host_bytes;
        out->host_bytes_peak = e.host_bytes_peak;
        out->nvme_bytes = e.nvme_bytes;
        out->nvme_bytes_peak = e.nvme_bytes_peak;
        out->bytes_device_to_host = e.snapshot_bytes;
        out->nvme_bytes_written = e.nvme_bytes_written;
        out->nvme_bytes_read = e.nvme_bytes_read;
        out->io_errors = e.io_errors;
        out->snapshot_failures = e.snapshot_failures;
        out->stale_waits_avoided = e.stale_waits_avoided;
        out->stale_corrections = e.stale_corrections;
        out->stale_refused = e.stale_refused;
        out->stale_refreshes_skipped = e.stale_refreshes_skipped;
        out->stale_max_corrected = e.stale_max_corrected;
        out->refresh_blocks_computed = e.blocks_computed;
        out->refresh_blocks_received = e.blocks_received;
        out->refresh_ship_bytes_intra_node = e.ship_bytes_intra_node;
        out->refresh_ship_bytes_inter_node = e.ship_bytes_inter_node;
        out->stream_snapshots = e.stream_snapshots;
        out->stream_stages = e.stream_stages;
        out->stream_stages_early = e.stream_stages_early;
        out->stream_installs = e.stream_installs;
        out->stream_waits = e.stream_waits;
        out->stream_wait_bytes = e.stream_wait_bytes;
        out->stream_blocking_waits = e.stream_blocking_waits;
        out->stream_waits_timed = e.stream_waits_timed;
        out->stream_waits_untimed = e.stream_waits_untimed;
        out->stream_wait_seconds = e.stream_wait_seconds;
    }
    strata_rt_stats_base_add(rt, out);
    return STRATA_OK;
}

strata_status strata_rt_stats_resume(strata_runtime *rt, const double *totals)
{
    memset(&rt->stats_base, 0, sizeof rt->stats_base);
    strata_stats now;
    strata_status st = strata_stats_get(rt, &now);
    if (st != STRATA_OK)
        return st;
    strata_rt_stats_base_from(&rt->stats_base, totals, &now);
    return STRATA_OK;
}

strata_status strata_param_optimizer(const strata_runtime *rt, strata_param_id id,
                                     strata_optimizer *out)
{
    if (!rt || !out || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_optimizer: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_optimizer: call strata_commit first");
    *out = rt->params[id].routed;
    return STRATA_OK;
}

strata_status strata_param_layout_get(const strata_runtime *rt, strata_param_id id,
                                      strata_param_layout *out)
{
    if (!rt || !out || id < 0 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_layout_get: bad id %d", (int)id);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "param_layout_get: call strata_commit first");
    const rt_param *p = &rt->params[id];
    *out = (strata_param_layout){.tail = p->tail, .owner = p->owner,
                                 .bytes = p->view.numel * sizeof(float),
                                 .shard_offset = p->shard_offset, .tail_offset = p->tail_offset};
    return STRATA_OK;
}

void strata_destroy(strata_runtime *rt)
{
    if (!rt)
        return;
    strata_refresh_destroy(rt->engine); /* stops the workers before any state goes */
    team_free(rt);
    managed_free(rt);
    for (int i = 0; i < rt->n_params; i++) {
        free_state(&rt->params[i]);
        free(rt->params[i].name);
    }
    if (rt->step_scratch) /* after the states that borrowed it */
        strata_backend_free(rt->be, rt->step_scratch, rt->step_scratch_bytes);
    free(rt->params);
    free(rt->layer_reduced);
    free(rt->norm_parts);
    free(rt->shard_counts);
    if (rt->gather_stage)
        for (int i = 0; i < rt->n_params; i++)
            free(rt->gather_stage[i]);
    free(rt->gather_stage);
    strata_gb_destroy(rt->buckets);
    strata_backend_destroy(rt->be);
    strata_replicas_destroy(rt->replica_set);
    if (rt->own_group)
        strata_comm_destroy(rt->group);
    free(rt->replicas);
    if (rt->own_comm)
        strata_comm_destroy(rt->comm);
    free(rt->nvme_dir);
    free(rt);
}

strata_status strata_testing_set_worker_delay(strata_runtime *rt, int max_us)
{
    if (!rt || max_us < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "testing_set_worker_delay: bad arguments");
    if (rt->committed)
        return strata_error(STRATA_ERR_STATE, "testing_set_worker_delay: call before commit");
    rt->testing_worker_delay_us = max_us;
    return STRATA_OK;
}

strata_status strata_testing_set_device_roots(strata_runtime *rt, bool on)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "testing_set_device_roots: NULL runtime");
    if (rt->committed)
        return strata_error(STRATA_ERR_STATE, "testing_set_device_roots: call before commit");
    rt->testing_device_roots = on;
    return STRATA_OK;
}

strata_status strata_testing_inject_io_errors(strata_runtime *rt, int n, int errno_value)
{
    if (!rt || !rt->engine)
        return strata_error(STRATA_ERR_STATE, "inject_io_errors: the runtime has no nvme tier");
    return strata_refresh_inject_io_errors(rt->engine, n, errno_value);
}

strata_status strata_testing_inject_ckpt_fault(strata_runtime *rt, int64_t nth, int errno_value)
{
    if (!rt || nth < 0 || errno_value <= 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "testing_inject_ckpt_fault: bad arguments");
    rt->testing_ckpt_calls = 0;
    rt->testing_ckpt_fail_at = nth;
    rt->testing_ckpt_errno = errno_value;
    return STRATA_OK;
}

int64_t strata_testing_ckpt_calls(const strata_runtime *rt)
{
    return rt ? rt->testing_ckpt_calls : -1;
}

strata_status strata_testing_hold_refreshes(strata_runtime *rt, strata_param_id id)
{
    if (!rt || id < -2 || id >= rt->n_params)
        return strata_error(STRATA_ERR_INVALID_ARG, "testing_hold_refreshes: bad arguments");
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "testing_hold_refreshes: call after commit");
    return strata_refresh_hold_jobs(rt->engine, id >= 0 ? rt->params[id].entry : id);
}

strata_status strata_testing_inject_snapshot_errors(strata_runtime *rt, int n)
{
    if (!rt || n < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "testing_inject_snapshot_errors: bad arguments");
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "testing_inject_snapshot_errors: call after commit");
    return strata_refresh_inject_snapshot_errors(rt->engine, n);
}

/* ---- for plan.c (runtime_internal.h) */

const strata_precond_family *strata_rt_family_for(const strata_config *c, strata_optimizer o,
                                                  const void **cfg)
{
    return family_for(c, o, cfg);
}

bool strata_rt_is_tail_rule(const strata_config *c, strata_role role, int ndim, int64_t rows,
                            int64_t cols)
{
    return role == STRATA_ROLE_EMBEDDING || role == STRATA_ROLE_HEAD ||
           role == STRATA_ROLE_VECTOR || ndim <= 1 ||
           (c->route_degenerate_to_adamw && (rows == 1 || cols == 1));
}

void strata_rt_config_resolve(strata_config *c)
{
    config_resolve(c);
}

strata_status strata_rt_check_config(const strata_config *c)
{
    return check_config(c);
}
