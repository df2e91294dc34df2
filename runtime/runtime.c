/* The runtime: parameter registry, routing, and the optimizer step.
 *
 * Life of the objects: parameters are registered (descriptors copied, the
 * data/grad buffers stay the caller's), strata_commit routes each one and
 * creates its optimizer state in the device tier, strata_step updates them,
 * strata_destroy frees the state. After commit the step path allocates
 * nothing.
 *
 * Single-process ownership: this rank owns every parameter, so the hooks'
 * owner collectives are identities; they validate and record.
 */
#include "runtime_internal.h"
#include "testing.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

strata_status strata_config_default(strata_config *cfg)
{
    if (!cfg)
        return strata_error(STRATA_ERR_INVALID_ARG, "config_default: cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    cfg->version = STRATA_CONFIG_VERSION;
    cfg->matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    strata_adamw_config_default(&cfg->adamw);
    strata_shampoo_config_default(&cfg->shampoo);
    strata_muon_config_default(&cfg->muon);
    strata_soap_config_default(&cfg->soap);
    strata_kl_shampoo_config_default(&cfg->kl_shampoo);
    cfg->max_grad_norm = 0.0f;
    cfg->route_degenerate_to_adamw = true;
    cfg->stagger_refresh = false;
    cfg->blas_threads = 0;
    cfg->async = false;
    cfg->staleness = 1;
    cfg->install_mode = STRATA_COH_FIXED;
    cfg->workers = 0;
    cfg->pin_workers = false;
    cfg->wait_timeout_s = 600.0;
    cfg->roots_tier = STRATA_TIER_HOST;
    cfg->host_budget = 0;
    cfg->nvme_dir = NULL;
    cfg->nvme_budget = 0;
    cfg->nvme_queue_depth = 16;
    cfg->log_level = STRATA_LOG_WARN;
    const char *env = getenv("STRATA_LOG_LEVEL");
    if (env && env[0] >= '0' && env[0] <= '3' && env[1] == '\0')
        cfg->log_level = (strata_log_level)(env[0] - '0');
    return STRATA_OK;
}

strata_status strata_create(const strata_config *cfg, strata_runtime **out)
{
    if (!cfg || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: NULL argument");
    *out = NULL;
    if (cfg->version != STRATA_CONFIG_VERSION)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: config version %d, expected %d "
                            "(call strata_config_default first)", cfg->version,
                            STRATA_CONFIG_VERSION);
    if (cfg->matrix_optimizer < STRATA_OPTIM_ADAMW || cfg->matrix_optimizer > STRATA_OPTIM_KL_SHAMPOO)
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: matrix_optimizer %d unknown",
                            (int)cfg->matrix_optimizer);
    if (!(cfg->max_grad_norm >= 0.0f))
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: max_grad_norm must be >= 0");
    if (!(cfg->adamw.lr >= 0.0f) || !(cfg->shampoo.lr >= 0.0f) || !(cfg->muon.lr >= 0.0f) ||
        !(cfg->soap.lr >= 0.0f) || !(cfg->kl_shampoo.lr >= 0.0f))
        return strata_error(STRATA_ERR_INVALID_ARG, "strata_create: learning rates must be >= 0");
    if (cfg->async) {
        if (cfg->staleness < 0 || cfg->workers < 0 || !(cfg->wait_timeout_s > 0.0) ||
            (cfg->install_mode != STRATA_COH_FIXED && cfg->install_mode != STRATA_COH_EAGER))
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "strata_create: async needs staleness >= 0, workers >= 0, "
                                "wait_timeout_s > 0 and a known install mode");
        if (cfg->roots_tier != STRATA_TIER_HOST && cfg->roots_tier != STRATA_TIER_NVME)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "strata_create: roots_tier must be host or nvme");
        if (cfg->roots_tier == STRATA_TIER_NVME && !cfg->nvme_dir)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "strata_create: the nvme roots tier needs nvme_dir");
        if (cfg->nvme_dir && cfg->nvme_queue_depth < 8)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "strata_create: nvme_queue_depth %d must be >= 8",
                                cfg->nvme_queue_depth);
    }
    strata_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return strata_error(STRATA_ERR_NOMEM, "strata_create: out of memory");
    rt->cfg = *cfg;
    rt->log = (strata_logger){.level = cfg->log_level, .fn = cfg->log_fn, .user = cfg->log_user};
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
    strata_status st = strata_backend_cpu_create(blas, &rt->be);
    if (st != STRATA_OK) {
        free(rt->nvme_dir);
        free(rt);
        return st;
    }
    *out = rt;
    return STRATA_OK;
}

strata_status strata_param_add(strata_runtime *rt, const strata_param_desc *d,
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
    if (d->layer < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): layer %d < 0", d->name,
                            d->layer);
    if (d->role < STRATA_ROLE_AUTO || d->role > STRATA_ROLE_VECTOR ||
        d->optimizer < STRATA_OPTIM_DEFAULT || d->optimizer > STRATA_OPTIM_KL_SHAMPOO)
        return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): unknown role or optimizer",
                            d->name);
    size_t numel = 1;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 1)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add('%s'): shape[%d] = %lld < 1",
                                d->name, i, (long long)d->shape[i]);
        numel *= (size_t)d->shape[i];
    }
    for (int i = 0; i < rt->n_params; i++)
        if (strcmp(rt->params[i].name, d->name) == 0)
            return strata_error(STRATA_ERR_INVALID_ARG, "param_add: duplicate name '%s'", d->name);
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
    p->numel = numel;
    p->batch = d->stacked ? d->shape[0] : 1;
    p->rows = d->stacked ? d->shape[1] : d->ndim >= 1 ? d->shape[0] : 1;
    p->cols = (int64_t)(numel / (size_t)(p->rows * p->batch));
    p->layer = d->layer;
    p->role = d->role;
    p->requested = d->optimizer;
    p->data = d->data;
    p->grad = d->grad;
    if (d->layer > rt->max_layer)
        rt->max_layer = d->layer;
    if (out)
        *out = rt->n_params;
    rt->n_params++;
    return STRATA_OK;
}

static bool is_tail_by_rule(const strata_runtime *rt, const rt_param *p);

static strata_optimizer route(const strata_runtime *rt, const rt_param *p)
{
    if (p->requested != STRATA_OPTIM_DEFAULT)
        return p->requested;
    return is_tail_by_rule(rt, p) ? STRATA_OPTIM_ADAMW : rt->cfg.matrix_optimizer;
}

/* The tail: what the rule sends to AdamW whatever the matrix optimizer is. */
static bool is_tail_by_rule(const strata_runtime *rt, const rt_param *p)
{
    return p->role == STRATA_ROLE_EMBEDDING || p->role == STRATA_ROLE_HEAD ||
           p->role == STRATA_ROLE_VECTOR || p->ndim <= 1 ||
           (rt->cfg.route_degenerate_to_adamw && (p->rows == 1 || p->cols == 1));
}

static void free_state(strata_runtime *rt, rt_param *p)
{
    if (p->adam_m)
        strata_backend_free(rt->be, p->adam_m, 2 * p->numel * sizeof(float));
    p->adam_m = p->adam_v = NULL;
    strata_shampoo_state_destroy(p->shampoo);
    p->shampoo = NULL;
    strata_muon_state_destroy(p->muon);
    p->muon = NULL;
    strata_soap_state_destroy(p->soap);
    p->soap = NULL;
    strata_kl_shampoo_state_destroy(p->kl);
    p->kl = NULL;
}

/* Inverse-root cost of one Shampoo parameter: sum of n^3 over the factors
 * of its blocks (max_preconditioner_dim pieces), the eigendecomposition's
 * order. Only compared with other parameters' costs. */
static double shampoo_root_cost(int64_t rows, int64_t cols, int block)
{
    double c = 0;
    const int64_t B = block > 0 ? block : (rows > cols ? rows : cols);
    const int64_t nr = (rows + B - 1) / B, nc = (cols + B - 1) / B;
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
        double r = (double)(rows - r0 < B ? rows - r0 : B);
        c += (double)nc * r * r * r;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
        double k = (double)(cols - c0 < B ? cols - c0 : B);
        c += (double)nr * k * k * k;
    }
    return c;
}

/* Staggered refresh: longest-processing-time-first list scheduling (Graham
 * 1969) of the parameters routed to `opt` onto its F phases. Deterministic:
 * ties go to the lower parameter index and the lower phase. Without
 * stagger_refresh every such parameter gets the configured offset `user`
 * (checked when its state is created). The cost of a parameter is that of
 * its decompositions, n^3 per factor (per Shampoo block). */
static strata_status assign_offsets_for(strata_runtime *rt, strata_optimizer opt, int F, int user)
{
    int n = 0;
    for (int i = 0; i < rt->n_params; i++)
        if (rt->params[i].routed == opt) {
            rt->params[i].refresh_offset = user;
            n++;
        }
    if (!rt->cfg.stagger_refresh || F <= 1 || n == 0)
        return STRATA_OK;
    /* With n < F parameters only n phases are ever chosen (an empty phase
     * always wins): keep the load table at min(F, n). */
    const int phases = F < n ? F : n;
    int *order = malloc((size_t)n * sizeof *order);
    double *cost = malloc((size_t)rt->n_params * sizeof *cost);
    double *load = calloc((size_t)phases, sizeof *load);
    if (!order || !cost || !load) {
        free(order);
        free(cost);
        free(load);
        return strata_error(STRATA_ERR_NOMEM, "commit: out of memory");
    }
    n = 0;
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (p->routed != opt)
            continue;
        cost[i] = shampoo_root_cost(p->rows, p->cols,
                                    opt == STRATA_OPTIM_SHAMPOO
                                        ? rt->cfg.shampoo.max_preconditioner_dim
                                        : 0);
        /* insertion sort, cost descending, index ascending among equals */
        int k = n++;
        while (k > 0 && cost[order[k - 1]] < cost[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int f = 1; f < phases; f++)
            if (load[f] < load[best])
                best = f;
        rt->params[order[k]].refresh_offset = best;
        load[best] += cost[order[k]];
    }
    double lo = phases < F ? 0.0 : load[0], hi = load[0], sum = 0;
    for (int f = 0; f < phases; f++) {
        lo = load[f] < lo ? load[f] : lo;
        hi = load[f] > hi ? load[f] : hi;
        sum += load[f];
    }
    strata_log(rt, STRATA_LOG_INFO, "stagger",
               "%d %s parameters over %d refresh phases: heaviest phase %.2f of the mean, "
               "lightest %.2f",
               n, strata_optimizer_name(opt), F, sum > 0 ? hi * F / sum : 0.0,
               sum > 0 ? lo * F / sum : 0.0);
    free(order);
    free(cost);
    free(load);
    return STRATA_OK;
}

static strata_status assign_refresh_offsets(strata_runtime *rt)
{
    const strata_config *c = &rt->cfg;
    strata_status st = assign_offsets_for(rt, STRATA_OPTIM_SHAMPOO,
                                          c->shampoo.precondition_frequency,
                                          c->shampoo.refresh_offset);
    if (st == STRATA_OK)
        st = assign_offsets_for(rt, STRATA_OPTIM_SOAP, c->soap.precondition_frequency,
                                c->soap.refresh_offset);
    if (st == STRATA_OK)
        st = assign_offsets_for(rt, STRATA_OPTIM_KL_SHAMPOO, c->kl_shampoo.precondition_frequency,
                                c->kl_shampoo.refresh_offset);
    return st;
}

strata_status strata_commit(strata_runtime *rt)
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
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params; i++)
        rt->params[i].routed = route(rt, &rt->params[i]);
    st = assign_refresh_offsets(rt);
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        if (p->batch > 1 && p->routed != STRATA_OPTIM_MUON && p->routed != STRATA_OPTIM_ADAMW) {
            st = strata_error(STRATA_ERR_UNSUPPORTED,
                              "commit: '%s' is stacked; only muon treats stacked matrices "
                              "separately (route it to muon, or register it unstacked)",
                              p->name);
            break;
        }
        switch (p->routed) {
        case STRATA_OPTIM_ADAMW: {
            void *mem = NULL;
            st = strata_backend_alloc(rt->be, 2 * p->numel * sizeof(float), &mem);
            if (st == STRATA_OK) {
                p->adam_m = mem;
                p->adam_v = p->adam_m + p->numel;
            }
            break;
        }
        case STRATA_OPTIM_SHAMPOO: {
            strata_shampoo_config sc = rt->cfg.shampoo;
            sc.refresh_offset = p->refresh_offset;
            st = strata_shampoo_state_create_ex(&sc, rt->be, p->rows, p->cols, rt->cfg.async,
                                                &p->shampoo);
            if (st == STRATA_OK)
                s->preconditioner_blocks += strata_shampoo_state_blocks(p->shampoo);
            break;
        }
        case STRATA_OPTIM_MUON:
            st = strata_muon_state_create_batched(&rt->cfg.muon, rt->be, p->batch, p->rows,
                                                  p->cols, &p->muon);
            break;
        case STRATA_OPTIM_SOAP: {
            strata_soap_config sc = rt->cfg.soap;
            sc.refresh_offset = p->refresh_offset;
            st = strata_soap_state_create(&sc, rt->be, p->rows, p->cols, &p->soap);
            break;
        }
        case STRATA_OPTIM_KL_SHAMPOO: {
            strata_kl_shampoo_config kc = rt->cfg.kl_shampoo;
            kc.refresh_offset = p->refresh_offset;
            st = strata_kl_shampoo_state_create(&kc, rt->be, p->rows, p->cols, &p->kl);
            break;
        }
        default:
            st = strata_error(STRATA_ERR_INTERNAL, "commit: bad route %d", (int)p->routed);
        }
        if (st != STRATA_OK)
            break;
        const bool tail = p->routed == STRATA_OPTIM_ADAMW && is_tail_by_rule(rt, p);
        if (tail) {
            s->n_tail++;
            s->tail_elements += (int64_t)p->numel;
        } else {
            s->n_matrix++;
            s->matrix_elements += (int64_t)p->numel;
        }
        strata_log(rt, STRATA_LOG_INFO, "route", "%-28s %6lld x %-6lld layer %2d -> %s%s",
                   p->name, (long long)p->rows, (long long)p->cols, p->layer,
                   strata_optimizer_name(p->routed), tail ? " (tail)" : "");
    }
    if (st == STRATA_OK && rt->cfg.async)
        st = rt_async_commit(rt);
    if (st != STRATA_OK) {
        rt_async_destroy(rt);
        for (int i = 0; i < rt->n_params; i++)
            free_state(rt, &rt->params[i]);
        free(rt->layer_reduced);
        rt->layer_reduced = NULL;
        memset(s, 0, sizeof *s);
        return st;
    }
    s->n_params = rt->n_params;
    rt->committed = true;
    return STRATA_OK;
}

static strata_status check_hook(const strata_runtime *rt, int layer, const char *what)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL runtime", what);
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "%s: call strata_commit first", what);
    if (layer < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: layer %d < 0", what, layer);
    return STRATA_OK;
}

strata_status strata_hook_forward(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "hook_forward");
    if (st != STRATA_OK)
        return st;
    rt->stats.forward_hooks++;
    return rt->cfg.async ? rt_async_prefetch(rt, layer) : STRATA_OK;
}

strata_status strata_hook_backward(strata_runtime *rt, int layer)
{
    strata_status st = check_hook(rt, layer, "hook_backward");
    if (st != STRATA_OK)
        return st;
    rt->stats.backward_hooks++;
    /* One process owns everything: the reduce to the owner is the identity.
     * Record that this layer's gradients are final for the step. */
    if (layer <= rt->max_layer)
        rt->layer_reduced[layer] = 1;
    return STRATA_OK;
}

strata_status strata_set_lr_scale(strata_runtime *rt, float scale)
{
    if (!rt || !(scale >= 0.0f) || !isfinite(scale))
        return strata_error(STRATA_ERR_INVALID_ARG, "set_lr_scale: scale must be finite and >= 0");
    rt->lr_scale = scale;
    return STRATA_OK;
}

strata_status strata_step(strata_runtime *rt)
{
    if (!rt)
        return strata_error(STRATA_ERR_INVALID_ARG, "step: NULL runtime");
    if (!rt->committed)
        return strata_error(STRATA_ERR_STATE, "step: call strata_commit first");
    const double t_start = strata_now_seconds();
    rt->stats.last_wait_seconds = 0.0;

    /* Validate every gradient before touching any state. */
    double norm_sq = 0.0;
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        double acc = 0.0;
        for (size_t k = 0; k < p->numel; k++)
            acc += (double)p->grad[k] * p->grad[k];
        if (!isfinite(acc)) {
            rt->stats.nonfinite_rejected++;
            return strata_error(STRATA_ERR_NONFINITE,
                                "step %lld: gradient of '%s' has NaN/Inf; no parameter updated",
                                (long long)rt->t + 1, p->name);
        }
        norm_sq += acc;
    }
    /* A layer whose backward hook never ran would, with several ranks, hold an
     * unreduced gradient: say so once (single-process results are unaffected). */
    for (int i = 0; i < rt->n_params; i++) {
        const rt_param *p = &rt->params[i];
        if (!rt->layer_reduced[p->layer]) {
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
    const double norm = sqrt(norm_sq);
    rt->stats.grad_norm = norm;
    if (rt->cfg.max_grad_norm > 0.0f && norm > rt->cfg.max_grad_norm) {
        /* In place, like torch.nn.utils.clip_grad_norm_. */
        const float c = (float)(rt->cfg.max_grad_norm / (norm + 1e-6));
        for (int i = 0; i < rt->n_params; i++) {
            rt_param *p = &rt->params[i];
            for (size_t k = 0; k < p->numel; k++)
                p->grad[k] *= c;
        }
    }

    const int64_t t = ++rt->t;
    strata_optim_counters cnt = {0};
    double tail_seconds = 0.0;
    strata_status st = STRATA_OK;
    for (int i = 0; i < rt->n_params && st == STRATA_OK; i++) {
        rt_param *p = &rt->params[i];
        switch (p->routed) {
        case STRATA_OPTIM_ADAMW: {
            double t0 = strata_now_seconds();
            st = strata_adamw_update(&rt->cfg.adamw, rt->lr_scale, t, p->numel, p->data, p->grad,
                                     p->adam_m, p->adam_v);
            tail_seconds += strata_now_seconds() - t0;
            break;
        }
        case STRATA_OPTIM_SHAMPOO:
            if (rt->cfg.async)
                st = rt_async_shampoo_step(rt, p, t, &cnt);
            else
                st = strata_shampoo_step(p->shampoo, rt->lr_scale, t, p->data, p->grad, &cnt);
            break;
        case STRATA_OPTIM_MUON:
            st = strata_muon_step(p->muon, rt->lr_scale, t, p->data, p->grad, &cnt);
            break;
        case STRATA_OPTIM_SOAP:
            if (rt->cfg.async)
                st = rt_async_soap_step(rt, p, t, &cnt);
            else
                st = strata_soap_step(p->soap, rt->lr_scale, t, p->data, p->grad, &cnt);
            break;
        case STRATA_OPTIM_KL_SHAMPOO:
            if (rt->cfg.async && rt_async_kl_eligible(rt, p))
                st = rt_async_kl_step(rt, p, t, &cnt);
            else
                st = strata_kl_shampoo_step(p->kl, rt->lr_scale, t, p->data, p->grad, &cnt);
            break;
        default:
            st = strata_error(STRATA_ERR_INTERNAL, "step: bad route");
        }
    }
    strata_stats *s = &rt->stats;
    s->step = t;
    s->root_refreshes += cnt.root_refreshes;
    s->root_failures += cnt.root_failures;
    s->root_retries += cnt.root_retries;
    s->last_seconds_factors = cnt.seconds_factors;
    s->last_seconds_roots = cnt.seconds_roots;
    s->last_seconds_precondition = cnt.seconds_precondition;
    s->last_seconds_tail = tail_seconds;
    s->seconds_factors += cnt.seconds_factors;
    s->seconds_roots += cnt.seconds_roots;
    s->seconds_precondition += cnt.seconds_precondition;
    s->seconds_tail += tail_seconds;
    s->last_step_seconds = strata_now_seconds() - t_start;
    return st;
}

strata_status strata_stats_get(const strata_runtime *rt, strata_stats *out)
{
    if (!rt || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "stats_get: NULL argument");
    *out = rt->stats;
    strata_backend_bytes(rt->be, &out->device_bytes, &out->device_bytes_peak);
    if (rt->cfg.async)
        rt_async_stats((strata_runtime *)rt, out);
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

void strata_destroy(strata_runtime *rt)
{
    if (!rt)
        return;
    rt_async_destroy(rt); /* stops the workers before any buffer goes */
    for (int i = 0; i < rt->n_params; i++) {
        free_state(rt, &rt->params[i]);
        free(rt->params[i].name);
    }
    free(rt->params);
    free(rt->layer_reduced);
    strata_backend_destroy(rt->be);
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
