/* runtime/plan.c — strata_plan_estimate (strata.h "planning"): a run's
 * per-rank memory by ledger tier and kind, its owner plan and its refresh
 * round, without allocating the run.
 *
 * The memory figures follow the allocation sites one for one, so that they
 * match strata_memory_ledger_get of a real run (tests/cli/test_plan.py):
 *   - the registered weights and gradient buffers: the caller's tier, every
 *     rank (managed weights: owned ones in host memory, 64-byte rounded, and
 *     the two largest layers' others, runtime.c managed_setup / materialize,
 *     as the example trainer holds them; sharded gradients the same way,
 *     runtime.c grads_setup / grads_lend);
 *   - each family's state on the ranks that update it: its plan slot
 *     (optim/precond.h), the same sizes its create charges;
 *   - the refresh engine (engine/refresh.c place, commit): n_slots =
 *     strata_coh_slots_needed(F, S) page-rounded host slots per block (nvme:
 *     4 KiB extents, the residency pool (strata_refresh_pool_buffers), worker scratch and staging
 *     of the largest slot), the nvme tier's staging wherever the engine opens
 *     the tier (an nvme_dir with an async group, or paging), the inline workspace
 *     (the largest block's LAPACK workspace), the worker pool's workspaces;
 *   - the gradient buckets' ring (comm/grad_bucket.c: 2 x max(largest item,
 *     min(total, STRATA_GB_IN_FLIGHT buckets))), the gather baseline's
 *     reduced shards;
 *   - what the caller says its loop holds (activations).
 * Each rank's total is split into memory (every tier but nvme: what a memory
 * cap checks) and nvme (disk).
 * Costs: the fitted model of plan/plan.h (strata_cost_fit), one fit per
 * family used.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coherence/coherence.h"
#include "comm/comm.h"
#include "optim/family.h"
#include "plan/plan.h"
#include "runtime/runtime_internal.h"

typedef struct plan_param {
    strata_precond_shape view;
    const strata_precond_family *fam;
    const void *fc;
    strata_optimizer kind;
    bool tail, refreshes, inline_;
    int frequency;
    int layer;
    int owner; /* -1: every rank */
    double cost, refresh;
} plan_param;

static size_t page_round(size_t b)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (b + page - 1) / page * page;
}

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }
static size_t align4k(size_t b) { return (b + 4095) / 4096 * 4096; }

static strata_status view_of(const strata_param_desc *d, strata_precond_shape *v)
{
    if (!d->name || d->ndim < 0 || d->ndim > STRATA_MAX_DIMS || (d->stacked && d->ndim != 3))
        return strata_error(STRATA_ERR_INVALID_ARG, "plan: parameter '%s': bad name or ndim %d",
                            d->name ? d->name : "(null)", d->ndim);
    uint64_t numel = 1;
    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] < 1 || d->shape[k] > ((int64_t)1 << 31) ||
            numel > ((uint64_t)1 << 56) / (uint64_t)d->shape[k])
            return strata_error(STRATA_ERR_INVALID_ARG, "plan: parameter '%s': bad shape",
                                d->name);
        numel *= (uint64_t)d->shape[k];
    }
    v->numel = (size_t)numel;
    v->batch = d->stacked ? d->shape[0] : 1;
    v->rows = d->stacked ? d->shape[1] : d->ndim >= 1 ? d->shape[0] : 1;
    v->cols = (int64_t)(numel / (uint64_t)(v->rows * v->batch));
    return STRATA_OK;
}

/* The blocks of p's state (NULL when it has none); *nb their count. */
static strata_precond_block *blocks_of(const plan_param *p, int *nb)
{
    strata_precond_plan pl;
    *nb = p->fam->plan(p->fc, &p->view, &pl, NULL, 0);
    if (*nb <= 0)
        return NULL;
    strata_precond_block *b = calloc((size_t)*nb, sizeof *b);
    if (b)
        p->fam->plan(p->fc, &p->view, &pl, b, *nb);
    else
        *nb = -1;
    return b;
}

static void charge(strata_plan_rank *r, int tier, int kind, uint64_t bytes)
{
    r->bytes[tier][kind] += bytes;
    r->total += bytes;
    if (tier == STRATA_LEDGER_NVME)
        r->nvme += bytes;
    else
        r->memory += bytes;
}

/* Longest-processing-time makespan of `n` costs on `bins` bins. */
static double lpt_makespan(const double *cost, int n, int bins, strata_status *st)
{
    if (n == 0)
        return 0.0;
    int *assign = malloc((size_t)n * sizeof *assign);
    double *load = calloc((size_t)bins, sizeof *load);
    double m = 0.0;
    if (!assign || !load)
        *st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
    else
        *st = strata_plan_lpt(cost, n, bins, assign, load);
    for (int b = 0; *st == STRATA_OK && b < bins; b++)
        m = load[b] > m ? load[b] : m;
    free(assign);
    free(load);
    return m;
}

/* One rank's memory and refresh round (the owner plan made). */
static strata_status plan_rank(const strata_config *c, const strata_param_desc *d,
                               const plan_param *pp, int n, const strata_plan_options *opt,
                               int rank, int workers, strata_plan_rank *r)
{
    memset(r, 0, sizeof *r);
    const int W = opt->world_size;
    const int ct = c->backend == STRATA_BACKEND_CPU ? STRATA_LEDGER_HOST : STRATA_LEDGER_DEVICE;
    const int host = c->backend == STRATA_BACKEND_CUDA ? STRATA_LEDGER_HOST_PINNED
                                                       : STRATA_LEDGER_HOST;
    const bool managed = opt->managed && W > 1 && c->sharding == STRATA_SHARD_OWNER &&
                         c->backend == STRATA_BACKEND_CPU;
    /* Sharded gradients (runtime.c grads_setup): owned ones in strata's host
     * buffers, 64-byte rounded; the others lent per layer, as the example
     * trainer holds them: layer 0's (the tied embedding) and the largest
     * other layer's at once (below). */
    const bool sharded = c->shard_gradients && W > 1 && c->sharding == STRATA_SHARD_OWNER &&
                         c->backend == STRATA_BACKEND_CPU;
    const bool nvme = c->async && c->roots_tier == STRATA_TIER_NVME;
    int max_layer = 0;
    for (int i = 0; i < n; i++)
        max_layer = pp[i].layer > max_layer ? pp[i].layer : max_layer;
    uint64_t *layer_other = calloc((size_t)max_layer + 1, sizeof *layer_other);
    double *jobs = NULL;
    int n_jobs = 0, cap_jobs = 0;
    if (!layer_other)
        return strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
    size_t wd_inline = 0, wi_inline = 0, wd_async = 0, wi_async = 0, max_slot = 0;
    int n_nvme = 0, sticky = 0, max_entry = 0; /* the streamed-residency pool's inputs */
    size_t pool_spare = 0;
    /* the result blocks in the engine's order, placed after the loop as
     * the engine places them (strata_refresh_place_blocks) */
    strata_place_block *pb = NULL;
    typedef struct { size_t sb, nvme; bool sticky; int nb; } pb_more;
    pb_more *pm = NULL;
    int n_pb = 0, cap_pb = 0;
    uint64_t step_scratch = 0; /* the runtime's shared step scratch: the largest need */
    uint64_t transient = 0;    /* the largest one-call host workspace */
    bool any_inline = false, any_async = false;
    size_t total_floats = 0, largest = 0;
    /* State paging (engine/refresh.c "state paging"): the paged states' bytes
     * by kind in step order; each kind's DEVICE peak is the largest sum of
     * two that follow each other (cyclic), the NVME tier holds them all. */
    const bool paging = c->page_state && c->async && c->nvme_dir &&
                        c->backend == STRATA_BACKEND_CPU;
    const size_t sys_page = (size_t)sysconf(_SC_PAGESIZE) > 4096 ? (size_t)sysconf(_SC_PAGESIZE)
                                                                 : 4096;
    uint64_t (*paged)[STRATA_LEDGER_KINDS] = NULL;
    int n_paged = 0, cap_paged = 0;
    strata_status st = STRATA_OK;
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        const plan_param *p = &pp[i];
        const size_t wb = p->view.numel * sizeof(float);
        total_floats += p->view.numel;
        largest = p->view.numel > largest ? p->view.numel : largest;
        const bool here = p->owner < 0 || p->owner == rank;
        if (!managed)
            charge(r, ct, STRATA_LEDGER_WEIGHTS, wb);
        else if (here)
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_WEIGHTS, round64(wb));
        if (!here)
            layer_other[p->layer] += wb;
        bool seen = sharded; /* one gradient buffer per distinct pointer (the runtime's rule) */
        for (int j = 0; j < i && !seen; j++)
            seen = d[j].grad && d[j].grad == d[i].grad;
        if (!seen)
            charge(r, ct, STRATA_LEDGER_GRADIENTS, wb);
        if (sharded && here)
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_GRADIENTS, round64(wb));
        if (c->sharding == STRATA_SHARD_GATHER && W > 1) {
            const size_t base = p->view.numel / (size_t)W, extra = p->view.numel % (size_t)W;
            const size_t cnt = base + ((size_t)rank < extra ? 1 : 0);
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_GRADIENTS,
                   (cnt ? cnt : 1) * sizeof(float));
        }
        if (!here)
            continue;
        r->owned_params++;
        r->optimizer_seconds += p->cost;
        strata_precond_plan pl;
        p->fam->plan(p->fc, &p->view, &pl, NULL, 0);
        uint64_t dev_bytes = 0;
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
            dev_bytes += pl.device[k];
        const bool pages = paging && p->refreshes && p->fam->page_range &&
                           dev_bytes >= 2 * sys_page;
        if (pages && n_paged == cap_paged) {
            cap_paged = cap_paged ? 2 * cap_paged : 64;
            void *np = realloc(paged, (size_t)cap_paged * sizeof *paged);
            if (!np) {
                st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
                break;
            }
            paged = np;
        }
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
            if (pages) {
                paged[n_paged][k] = pl.device[k];
                charge(r, STRATA_LEDGER_NVME, k, pl.device[k]);
            } else {
                charge(r, STRATA_LEDGER_DEVICE, k, pl.device[k]);
            }
            charge(r, STRATA_LEDGER_HOST, k, pl.host[k]);
        }
        n_paged += pages;
        step_scratch = pl.step_scratch > step_scratch ? pl.step_scratch : step_scratch;
        transient = pl.host_transient > transient ? pl.host_transient : transient;
        if (!p->refreshes)
            continue;
        int nb = 0;
        strata_precond_block *blk = blocks_of(p, &nb);
        if (nb < 0) {
            st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
            break;
        }
        const int S = c->async && !p->inline_ ? c->staleness : 0;
        const int slots = strata_coh_slots_needed(p->frequency, S);
        for (int b = 0; b < nb; b++) {
            const size_t sb = blk[b].slot_bytes;
            const size_t wd = p->fam->refresh_work_doubles(blk[b].max_dim);
            const size_t wi = p->fam->refresh_work_ints(blk[b].max_dim);
            if (p->inline_) {
                any_inline = true;
                wd_inline = wd > wd_inline ? wd : wd_inline;
                wi_inline = wi > wi_inline ? wi : wi_inline;
            } else {
                any_async = true;
                wd_async = wd > wd_async ? wd : wd_async;
                wi_async = wi > wi_async ? wi : wi_async;
            }
            if (n_pb == cap_pb) {
                cap_pb = cap_pb ? 2 * cap_pb : 256;
                strata_place_block *nb2 = realloc(pb, (size_t)cap_pb * sizeof *nb2);
                pb_more *nm = nb2 ? realloc(pm, (size_t)cap_pb * sizeof *nm) : NULL;
                if (nb2)
                    pb = nb2;
                if (!nm) {
                    st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
                    break;
                }
                pm = nm;
            }
            const bool copies = p->fam->install_copies ||
                                (c->backend == STRATA_BACKEND_CUDA && p->fam->install_device);
            pb[n_pb] = (strata_place_block){.charge = page_round(sb), .n_slots = slots,
                                            .inline_ = p->inline_};
            pm[n_pb++] = (pb_more){.sb = sb, .nvme = (size_t)slots * align4k(sb),
                                   .sticky = !copies && !p->fam->rebind, .nb = nb};
            if (n_jobs == cap_jobs) {
                cap_jobs = cap_jobs ? 2 * cap_jobs : 256;
                double *nj = realloc(jobs, (size_t)cap_jobs * sizeof *nj);
                if (!nj) {
                    st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
                    break;
                }
                jobs = nj;
            }
            jobs[n_jobs++] = p->refresh * strata_cost_block_refresh(&blk[b]);
            r->owned_blocks++;
        }
        free(blk);
    }
    if (st == STRATA_OK && n_pb > 0) {
        /* Placement: every async block on nvme (roots_tier NVME), spilled
         * past the host budget (an nvme tier and a budget), or on host. */
        size_t amax = 0;
        int asticky = 0, aentry = 0;
        for (int i = 0; i < n_pb; i++)
            if (!pb[i].inline_) {
                amax = pm[i].sb > amax ? pm[i].sb : amax;
                asticky += pm[i].sticky;
                aentry = pm[i].nb > aentry ? pm[i].nb : aentry;
            }
        const size_t buf = page_round(amax);
        const size_t lo = (size_t)strata_refresh_pool_buffers(asticky, aentry, 0, true, 0);
        const size_t fixed = ((size_t)workers + 1 + lo) * buf;
        const bool spill = c->async && c->nvme_dir && c->host_budget;
        size_t planned = 0;
        if ((nvme || spill) &&
            strata_refresh_place_blocks(pb, n_pb, c->host_budget, fixed, !nvme, true, &planned) !=
                STRATA_OK) {
            /* the run is refused (the budget cannot hold even the spill
             * layout): planned as the layout it would need */
            for (int i = 0; i < n_pb; i++)
                pb[i].on_nvme = !pb[i].inline_;
            planned = 0;
        }
        for (int i = 0; i < n_pb; i++) {
            if (!pb[i].on_nvme) {
                charge(r, host, STRATA_LEDGER_ROOTS, (uint64_t)pb[i].n_slots * pb[i].charge);
                continue;
            }
            charge(r, STRATA_LEDGER_NVME, STRATA_LEDGER_ROOTS, pm[i].nvme);
            max_slot = amax;
            n_nvme++;
            sticky += pm[i].sticky;
            max_entry = pm[i].nb > max_entry ? pm[i].nb : max_entry;
        }
        r->blocks_on_nvme = n_nvme;
        /* the pool takes what the budget leaves (the engine's rule) */
        if (n_nvme && c->host_budget && c->host_budget > planned)
            pool_spare = (c->host_budget - planned) / buf;
        sticky = asticky;
        max_entry = aentry;
    }
    free(pb);
    free(pm);
    for (int k = 0; st == STRATA_OK && k < STRATA_LEDGER_KINDS; k++) {
        uint64_t most = 0;
        for (int i = 0; i < n_paged; i++) {
            const uint64_t two = n_paged == 1 ? paged[i][k]
                                              : paged[i][k] + paged[(i + 1) % n_paged][k];
            most = two > most ? two : most;
        }
        charge(r, STRATA_LEDGER_DEVICE, k, most);
    }
    free(paged);
    r->paged_params = n_paged;
    /* The nvme tier's staging (queue depth x chunk, tiers/nvme.c): the engine
     * opens the tier, and charges it, whenever it has an nvme_dir (async
     * only, runtime.c create_engine) and an async group (refresh.c commit),
     * or a state pages (refresh.c page_add): whether or not a root lands
     * there (--tiers device,host,nvme without a host budget keeps every
     * root on host). */
    if (st == STRATA_OK && c->async && c->nvme_dir && (any_async || n_paged > 0)) {
        const size_t qd = c->nvme_queue_depth > 0 ? (size_t)c->nvme_queue_depth : 16;
        const size_t chunk = c->nvme_chunk_bytes ? c->nvme_chunk_bytes : (size_t)1 << 20;
        charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_STAGING, qd * chunk);
    }
    if (st == STRATA_OK) {
        charge(r, STRATA_LEDGER_DEVICE, STRATA_LEDGER_WORKSPACE, step_scratch);
        charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE, transient);
        if (managed || sharded) {
            /* The example trainer holds two layers at once at most (the
             * head with the tied embedding; a layer and the next around a
             * hook): the two largest layers' others. */
            uint64_t big = 0, second = 0;
            for (int l = 0; l <= max_layer; l++) {
                if (layer_other[l] > big) {
                    second = big;
                    big = layer_other[l];
                } else if (layer_other[l] > second) {
                    second = layer_other[l];
                }
            }
            if (managed)
                charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_WEIGHTS,
                       round64(big) + round64(second));
            /* Gradients: layer 0's (the tied embedding, lent from the head's
             * backward to its own hook) with one other layer's at a time. */
            uint64_t other = 0;
            for (int l = 1; l <= max_layer; l++)
                other = layer_other[l] > other ? layer_other[l] : other;
            if (sharded)
                charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_GRADIENTS,
                       round64(layer_other[0]) + round64(other));
        }
        if (max_slot > 0) /* the residency pool */
            charge(r, host, STRATA_LEDGER_ROOTS,
                   (uint64_t)strata_refresh_pool_buffers(sticky, max_entry, n_nvme,
                                                         c->host_budget != 0, pool_spare) *
                       page_round(max_slot));
        if (max_slot > 0) { /* the nvme tier's scratch, staging and ring staging */
            charge(r, host, STRATA_LEDGER_WORKSPACE,
                   (uint64_t)workers * page_round(max_slot));
            charge(r, host, STRATA_LEDGER_STAGING, page_round(max_slot));
        }
        if (any_inline || wd_inline || wi_inline)
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE,
                   (wd_inline ? wd_inline : 1) * sizeof(double) +
                       (wi_inline ? wi_inline : 1) * sizeof(int));
        if (any_async)
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_WORKSPACE,
                   (uint64_t)workers * (wd_async * sizeof(double) + wi_async * sizeof(int)));
        if (W > 1 && c->sharding != STRATA_SHARD_GATHER && c->backend == STRATA_BACKEND_CPU) {
            const size_t cap = c->grad_bucket_bytes / sizeof(float);
            size_t want = STRATA_GB_IN_FLIGHT * cap;
            want = want < total_floats ? want : total_floats;
            want = want > largest ? want : largest;
            charge(r, STRATA_LEDGER_HOST, STRATA_LEDGER_GRAD_BUCKETS, 2 * want * sizeof(float));
        }
        charge(r, ct, STRATA_LEDGER_ACTIVATIONS, opt->activation_bytes);
        double serial = 0.0;
        for (int j = 0; j < n_jobs; j++)
            serial += jobs[j];
        r->refresh_serial_seconds = serial;
        r->refresh_round_seconds = lpt_makespan(jobs, n_jobs, workers, &st);
    }
    free(jobs);
    free(layer_other);
    return st;
}

strata_status strata_plan_estimate(const strata_config *cfg, const strata_param_desc *params,
                                   int n, const strata_plan_options *opt,
                                   strata_plan_rank *ranks, strata_plan_summary *out)
{
    if (!cfg || !params || n < 1 || !opt || !ranks || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_estimate: NULL argument or n < 1");
    const int W = opt->world_size, rpn = opt->ranks_per_node;
    if (W < 1 || rpn < 1 || W % rpn != 0 || opt->workers < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_estimate: world size %d, %d ranks "
                            "per node (>= 1, dividing it), %d workers (>= 0)", W, rpn,
                            opt->workers);
    strata_config c = *cfg;
    strata_rt_config_resolve(&c);
    strata_status st = strata_rt_check_config(&c);
    if (st != STRATA_OK)
        return st;
    if (c.shard_group_size > 0 && c.shard_group_size != W)
        return strata_error(STRATA_ERR_UNSUPPORTED, "plan: HSDP (shard_group_size %d of %d "
                            "ranks) is not modelled", c.shard_group_size, W);
    memset(out, 0, sizeof *out);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = opt->workers > 0 ? opt->workers
                  : c.workers > 0  ? c.workers
                                   : (int)(cores / rpn) - 1;
    workers = workers < 1 ? 1 : workers;
    out->workers = workers;

    plan_param *pp = calloc((size_t)n, sizeof *pp);
    double *cost = malloc((size_t)n * sizeof *cost), *bytes = malloc((size_t)n * sizeof *bytes);
    int *assign = malloc((size_t)n * sizeof *assign);
    strata_cost_fit fit[32];
    bool have_fit[32] = {false};
    strata_backend *be = NULL;
    if (!pp || !cost || !bytes || !assign) {
        st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
        goto out;
    }
    /* One BLAS thread: a refresh worker's (OpenBLAS runs single-threaded
     * inside worker threads), and the steps of one rank per core. */
    st = strata_backend_create_kind(STRATA_BACKEND_CPU, 1, &be);
    const double t0 = strata_now_seconds();
    double total_bytes = 0.0;
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        plan_param *p = &pp[i];
        const strata_param_desc *d = &params[i];
        st = view_of(d, &p->view);
        if (st != STRATA_OK)
            break;
        p->layer = d->layer < 0 ? 0 : d->layer;
        p->tail = strata_rt_is_tail_rule(&c, d->role, d->ndim, p->view.rows, p->view.cols);
        p->kind = d->optimizer != STRATA_OPTIM_DEFAULT ? d->optimizer
                  : p->tail                            ? strata_family_tail_kind()
                                                       : c.matrix_optimizer;
        p->tail = p->tail && p->kind == strata_family_tail_kind();
        p->fam = strata_rt_family_for(&c, p->kind, &p->fc);
        if (!p->fam) {
            st = strata_error(STRATA_ERR_INVALID_ARG, "plan: '%s': unknown optimizer %d",
                              d->name, (int)p->kind);
            break;
        }
        if (!p->fam->plan) {
            st = strata_error(STRATA_ERR_UNSUPPORTED, "plan: '%s': the %s family cannot be "
                              "planned", d->name, p->fam->name);
            break;
        }
        p->refreshes = p->fam->has_refresh && p->fam->has_refresh(p->fc);
        if (p->refreshes) {
            strata_precond_schedule sch;
            p->fam->schedule(p->fc, &sch);
            p->frequency = sch.frequency;
            p->inline_ = !c.async || !p->fam->async_capable(p->fc);
            if (!p->tail) {
                out->frequency = sch.frequency;
                out->max_staleness = sch.max_staleness;
            }
        }
        const int k = (int)p->kind;
        if (k < 0 || k >= 32) {
            st = strata_error(STRATA_ERR_UNSUPPORTED, "plan: optimizer kind %d", k);
            break;
        }
        if (!have_fit[k]) {
            st = strata_cost_fit_family(be, p->fam, p->fc, &fit[k]);
            if (st != STRATA_OK)
                break;
            have_fit[k] = true;
            out->cost_measured += fit[k].measured;
        }
        double P, R;
        strata_cost_features(p->fam, p->fc, &p->view, &P, &R);
        p->refresh = fit[k].refresh_s;
        cost[i] = fit[k].product_s * P + fit[k].element_s * (double)p->view.numel +
                  (p->refreshes ? fit[k].refresh_s * R / p->frequency : 0.0);
        p->cost = cost[i];
        bytes[i] = (double)p->view.numel * 4.0;
        total_bytes += bytes[i];
        out->n_params++;
        out->elements += (int64_t)p->view.numel;
        if (p->tail) {
            out->n_tail++;
        } else {
            out->n_matrix++;
            out->matrix_elements += (int64_t)p->view.numel;
        }
    }
    out->cost_seconds = strata_now_seconds() - t0;
    if (st != STRATA_OK)
        goto out;
    /* Owners as plan_owners (runtime.c) makes them. */
    double total_cost = 0.0, largest = 0.0;
    for (int i = 0; i < n; i++) {
        total_cost += cost[i];
        largest = cost[i] > largest ? cost[i] : largest;
    }
    if (W == 1) {
        for (int i = 0; i < n; i++)
            pp[i].owner = 0;
        out->makespan = out->lower_bound = total_cost;
    } else if (c.sharding == STRATA_SHARD_GATHER) {
        for (int i = 0; i < n; i++)
            pp[i].owner = -1;
        out->makespan = out->lower_bound = total_cost;
    } else {
        strata_plan_result pr = {0};
        st = strata_plan_owners(cost, bytes, n, W, 1.1 * total_bytes / W, 1.0, assign, &pr);
        if (st != STRATA_OK)
            goto out;
        for (int i = 0; i < n; i++)
            pp[i].owner = assign[i];
        out->makespan = pr.makespan;
        out->lower_bound = pr.lower_bound;
        out->milp = pr.milp;
    }
    for (int r = 0; r < W && st == STRATA_OK; r++) {
        st = plan_rank(&c, params, pp, n, opt, r, workers, &ranks[r]);
        out->n_blocks += ranks[r].owned_blocks;
        out->max_total = ranks[r].total > out->max_total ? ranks[r].total : out->max_total;
        out->max_memory = ranks[r].memory > out->max_memory ? ranks[r].memory : out->max_memory;
        out->max_nvme = ranks[r].nvme > out->max_nvme ? ranks[r].nvme : out->max_nvme;
        if (ranks[r].refresh_round_seconds > out->refresh_round_seconds)
            out->refresh_round_seconds = ranks[r].refresh_round_seconds;
        if (c.sharding == STRATA_SHARD_GATHER && W > 1)
            out->n_blocks = ranks[r].owned_blocks; /* the same blocks on every rank */
    }
    if (st == STRATA_OK && opt->step_seconds > 0 && out->refresh_round_seconds > 0) {
        const double R = out->refresh_round_seconds, T = opt->step_seconds;
        const double need = ceil(R / T - 1e-9);
        out->min_frequency = need < 1 ? 1 : need > 1e9 ? 1000000000 : (int32_t)need;
        const int S = need < 0 ? 0 : need > 1e9 ? 1000000000 : (int)need;
        out->min_staleness = out->frequency > 0 && R > out->frequency * T ? -1
                             : out->max_staleness >= 0 && S > out->max_staleness ? -1
                                                                                 : S;
    }
out:
    strata_backend_destroy(be);
    free(pp);
    free(cost);
    free(bytes);
    free(assign);
    return st;
}

/* ---- the staleness budget (strata.h strata_plan_budget_auto) */

strata_status strata_plan_budget_auto(const strata_config *cfg, const strata_param_desc *params,
                                      int n, double loop_seconds, double ceiling,
                                      bool plan_frequency, bool plan_staleness,
                                      strata_budget_choice *out)
{
    if (!cfg || !params || n < 1 || !out || !(loop_seconds > 0) || !isfinite(loop_seconds) ||
        ceiling > 1 || (!plan_frequency && !plan_staleness))
        return strata_error(STRATA_ERR_INVALID_ARG, "plan_budget_auto: NULL, n < 1, loop "
                            "%g s (> 0), ceiling %g (<= 1) or nothing to plan",
                            loop_seconds, ceiling);
    if (cfg->comm && strata_comm_size(cfg->comm) > 1)
        return strata_error(STRATA_ERR_UNSUPPORTED, "the staleness budget is planned for one "
                            "rank only (give --staleness and --precondition-frequency)");
    strata_config c = *cfg;
    strata_rt_config_resolve(&c);
    strata_status st = strata_rt_check_config(&c);
    if (st != STRATA_OK)
        return st;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = c.workers > 0 ? c.workers : (int)cores - 1;
    workers = workers < 1 ? 1 : workers;
    plan_param *pp = calloc((size_t)n, sizeof *pp);
    double *jobs = NULL;
    int *group = NULL, n_jobs = 0, cap_jobs = 0, n_groups = 0;
    strata_cost_fit fit[32];
    bool have_fit[32] = {false};
    strata_backend *be = NULL;
    int frequency = 0, max_staleness = -1;
    bool chained = false;
    double optimizer = 0;
    if (!pp) {
        st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
        goto out;
    }
    st = strata_backend_create_kind(STRATA_BACKEND_CPU, 1, &be);
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        plan_param *p = &pp[i];
        const strata_param_desc *d = &params[i];
        st = view_of(d, &p->view);
        if (st != STRATA_OK)
            break;
        p->tail = strata_rt_is_tail_rule(&c, d->role, d->ndim, p->view.rows, p->view.cols);
        p->kind = d->optimizer != STRATA_OPTIM_DEFAULT ? d->optimizer
                  : p->tail                            ? strata_family_tail_kind()
                                                       : c.matrix_optimizer;
        p->fam = strata_rt_family_for(&c, p->kind, &p->fc);
        const int k = (int)p->kind;
        if (!p->fam || k < 0 || k >= 32) {
            st = strata_error(STRATA_ERR_INVALID_ARG, "plan: '%s': unknown optimizer %d",
                              d->name, k);
            break;
        }
        if (!p->fam->plan) {
            st = strata_error(STRATA_ERR_UNSUPPORTED, "plan: '%s': the %s family cannot be "
                              "planned", d->name, p->fam->name);
            break;
        }
        if (!have_fit[k]) {
            st = strata_cost_fit_family(be, p->fam, p->fc, &fit[k]);
            if (st != STRATA_OK)
                break;
            have_fit[k] = true;
        }
        double P, R;
        strata_cost_features(p->fam, p->fc, &p->view, &P, &R);
        optimizer += fit[k].product_s * P + fit[k].element_s * (double)p->view.numel;
        p->refreshes = p->fam->has_refresh && p->fam->has_refresh(p->fc) &&
                       c.async && p->fam->async_capable(p->fc);
        if (!p->refreshes)
            continue;
        strata_precond_schedule sch;
        p->fam->schedule(p->fc, &sch);
        frequency = sch.frequency;
        max_staleness = sch.max_staleness;
        chained = chained || p->fam->chain_in != NULL;
        int nb = 0;
        strata_precond_block *blk = blocks_of(p, &nb);
        for (int b = 0; b < nb && st == STRATA_OK; b++) {
            if (n_jobs == cap_jobs) {
                cap_jobs = cap_jobs ? 2 * cap_jobs : 256;
                double *nj = realloc(jobs, (size_t)cap_jobs * sizeof *nj);
                int *ng = nj ? realloc(group, (size_t)cap_jobs * sizeof *ng) : NULL;
                if (nj)
                    jobs = nj;
                if (ng)
                    group = ng;
                if (!nj || !ng) {
                    st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
                    break;
                }
            }
            jobs[n_jobs] = fit[k].refresh_s * strata_cost_block_refresh(&blk[b]);
            group[n_jobs++] = n_groups;
        }
        if (nb < 0)
            st = strata_error(STRATA_ERR_NOMEM, "plan: out of memory");
        free(blk);
        n_groups++;
    }
    if (st != STRATA_OK)
        goto out;
    if (n_jobs == 0) {
        st = strata_error(STRATA_ERR_UNSUPPORTED, "the staleness budget: no parameter refreshes "
                          "asynchronously (%s%s): nothing to plan",
                          strata_optimizer_name(c.matrix_optimizer),
                          c.async ? "" : ", not --async");
        goto out;
    }
    strata_budget_input in = {.block_seconds = jobs, .n_blocks = n_jobs, .group = group,
                              .n_groups = n_groups, .workers = workers,
                              .step_seconds = loop_seconds + optimizer, .ceiling = ceiling,
                              .staggered = c.stagger_refresh,
                              .chained = chained,
                              .min_staleness = plan_staleness ? 1 : c.staleness,
                              .max_staleness = plan_staleness ? max_staleness : c.staleness,
                              .fixed_frequency = plan_frequency ? 0 : frequency};
    if (in.max_staleness >= 0 && in.max_staleness < in.min_staleness) {
        st = strata_error(STRATA_ERR_UNSUPPORTED, "the staleness budget: %s accepts S <= %d "
                          "asynchronously", strata_optimizer_name(c.matrix_optimizer),
                          in.max_staleness);
        goto out;
    }
    strata_budget_plan bp;
    st = strata_plan_budget(&in, &bp);
    if (st != STRATA_OK)
        goto out;
    *out = (strata_budget_choice){
        .feasible = bp.feasible, .frequency = bp.frequency, .staleness = bp.staleness,
        .bound = bp.bound, .workers = workers, .blocks = n_jobs,
        .step_seconds = in.step_seconds, .optimizer_seconds = optimizer,
        .period_seconds = bp.period_work, .largest_block_seconds = bp.largest_block,
        .latency_seconds = bp.latency_seconds, .utilization = bp.utilization,
        .ceiling = ceiling > 0 ? ceiling : 0.8, .workers_for_frequency = bp.workers_for_f,
        .workers_for_staleness = plan_staleness ? bp.workers_for_s : 0,
        .sustainable_frequency = bp.sustainable_frequency};
out:
    strata_backend_destroy(be);
    free(pp);
    free(jobs);
    free(group);
    return st;
}
