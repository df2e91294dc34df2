/* Asynchronous Shampoo (and the SOAP and KL-Shampoo eigenbasis refreshes):
 * factor snapshots, worker jobs, coherence, tiers.
 *
 * Objects (created at commit, freed at destroy, nothing allocated per step):
 *  - one coherence registry over all Shampoo blocks of all parameters;
 *  - per block K = strata_coh_slots_needed(F, S) slots. A slot holds one
 *    snapshot of the block's factors and, once its job ran, the inverse
 *    roots computed from it, in place:
 *      host placement: a host-tier buffer [L | R] (rows^2 + cols^2 floats);
 *      nvme placement: an nvme-tier extent [L | pad | R]; the installed root
 *        is read back into one of two host-tier resident buffers per block
 *        (prefetched by strata_hook_forward when the due root is ready);
 *  - the worker pool; an nvme job reads its snapshot into the worker's
 *    scratch buffer, computes there and writes the roots back.
 *
 * The step for one Shampoo parameter at step t (training thread):
 *   1. factors absorb G (device tier);
 *   2. at a refresh point, for each block: reserve a slot (PENDING(t)),
 *      snapshot the factors into it, submit job(block, slot) with deadline t+S;
 *   3. for each block: strata_coh_acquire (waits only when the block would
 *      exceed F-1+S) and, when a new version was installed, lend its roots
 *      to the Shampoo state;
 *   4. grafting, preconditioning, momentum, weight decay, update.
 * With S = 0 in fixed mode every step uses the root computed from the same
 * factors by the same float64 code as the synchronous path: bit-identical.
 *
 * A failed root (LAPACK error or non-finite) keeps the factor's previous
 * root, as the synchronous path does: at install the previous root of that
 * factor is copied into the new slot. A failed nvme transfer keeps the
 * previous root and is counted (io_errors); the run continues.
 *
 * Shutdown: the pool is destroyed first (queued jobs cancelled, running ones
 * finished), then every buffer is released.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime_internal.h"
#include "testing.h"


/* Wait for an nvme request whose memory is about to be reused or freed: a
 * TIMEOUT leaves it in flight (the kernel may still write into it), so keep
 * waiting, with a warning each wait_timeout_s. The block layer fails an I/O
 * it cannot finish, so the wait ends. Returns STRATA_OK or STRATA_ERR_IO. */
static strata_status io_wait_landed(strata_runtime *rt, strata_io *io)
{
    strata_status st;
    while ((st = strata_tier_io_wait(rt->nvme, io, rt->cfg.wait_timeout_s)) ==
           STRATA_ERR_TIMEOUT)
        strata_log(rt, STRATA_LOG_WARN, "tiers", "%s; still waiting", strata_last_error());
    return st;
}

static size_t align4k(size_t x)
{
    return (x + 4095) / 4096 * 4096;
}

/* KL-Shampoo parameters the workers refresh: the eigenbasis form (the exact
 * form decomposes and uses its factors in the same step, and stays
 * synchronous). */
bool rt_async_kl_eligible(const strata_runtime *rt, const rt_param *p)
{
    return p->routed == STRATA_OPTIM_KL_SHAMPOO && rt->cfg.kl_shampoo.form == STRATA_KL_EIGENBASIS;
}

/* ---- worker side */

/* SOAP: one QR power-iteration step per rotated side from the snapshot of
 * its factor and of the eigenbasis in use (strata_eigenbasis_qr, sorted),
 * as strata_soap_refresh does in the synchronous path. Slot layout: per
 * rotated side [factor | q_old | q_new] (dim^2 floats each), then the
 * permutations (rows + cols ints). */
static strata_status soap_job_run(strata_runtime *rt, async_block *blk, async_slot *slot,
                                  strata_worker_ctx *w)
{
    float *p = slot->buf;
    int *perm = (int *)(slot->buf + 3 * ((size_t)blk->rows * blk->rows +
                                         (size_t)blk->cols * blk->cols));
    int ok = 0, rotated = 0;
    for (int side = 0; side < 2; side++) {
        const int d = side == 0 ? blk->rows : blk->cols;
        slot->failed[side] = false;
        if (d == 0)
            continue;
        rotated++;
        const size_t dd = (size_t)d * d;
        strata_status st = strata_eigenbasis_qr(d, p, p + dd, true, p + 2 * dd, perm, w->work,
                                                w->iwork);
        slot->failed[side] = st != STRATA_OK;
        ok += st == STRATA_OK;
        p += 3 * dd;
        perm += d;
    }
    atomic_fetch_add(&rt->root_refreshes, ok);
    atomic_fetch_add(&rt->root_failures, rotated - ok);
    return ok > 0 || rotated == 0
               ? STRATA_OK
               : strata_error(STRATA_ERR_LINALG, "soap: every eigenbasis refresh failed");
}

/* KL-Shampoo (eigenbasis form): one QR power-iteration step per side from
 * the snapshot of its factor S and of the eigenbasis Q in use, unsorted (the
 * eigenvalue estimates stay with their columns), as strata_kl_shampoo_refresh
 * does in the synchronous path. Slot layout: per side [S | Q | Q_new]. */
static strata_status kl_job_run(strata_runtime *rt, async_block *blk, async_slot *slot,
                                strata_worker_ctx *w)
{
    float *p = slot->buf;
    int ok = 0;
    for (int side = 0; side < 2; side++) {
        const int d = side == 0 ? blk->rows : blk->cols;
        const size_t dd = (size_t)d * d;
        strata_status st = strata_eigenbasis_qr(d, p, p + dd, false, p + 2 * dd, NULL, w->work,
                                                w->iwork);
        slot->failed[side] = st != STRATA_OK;
        ok += st == STRATA_OK;
        p += 3 * dd;
    }
    atomic_fetch_add(&rt->root_refreshes, ok);
    atomic_fetch_add(&rt->root_failures, 2 - ok);
    return ok > 0 ? STRATA_OK
                  : strata_error(STRATA_ERR_LINALG, "kl_shampoo: both eigenbasis refreshes failed");
}

static strata_status root_job_run(strata_job *j, strata_worker_ctx *w)
{
    root_job *job = (root_job *)j;
    strata_runtime *rt = job->rt;
    async_block *blk = &rt->blocks[job->block];
    async_slot *slot = &blk->slots[job->slot];
    strata_coh_mark_computing(blk->reg, blk->rb, job->slot);
    if (blk->kind == ASYNC_SOAP)
        return soap_job_run(rt, blk, slot, w);
    if (blk->kind == ASYNC_KL)
        return kl_job_run(rt, blk, slot, w);
    float *buf = slot->buf;
    strata_status st;
    if (blk->on_nvme) {
        /* The snapshot write was submitted by the training thread. */
        st = io_wait_landed(rt, &slot->io);
        strata_status st_r = io_wait_landed(rt, &slot->io_r);
        if (st == STRATA_OK)
            st = st_r;
        buf = rt->worker_scratch[w->index];
        if (st == STRATA_OK)
            st = strata_tier_read(rt->nvme, slot->nvme, 0, buf,
                                  (size_t)blk->rows * blk->rows * sizeof(float));
        if (st == STRATA_OK)
            st = strata_tier_read(rt->nvme, slot->nvme, blk->r_offset,
                                  buf + (size_t)blk->rows * blk->rows,
                                  (size_t)blk->cols * blk->cols * sizeof(float));
        if (st != STRATA_OK) {
            atomic_fetch_add(&rt->io_errors, 1);
            return st;
        }
    }
    float *L = buf, *R = buf + (size_t)blk->rows * blk->rows;
    strata_optim_counters lc = {0}; /* this job's, summed atomically below */
    strata_status sl = strata_shampoo_factor_root(&rt->cfg.shampoo, 0, blk->rows, L, L, w->work,
                                                  w->iwork, &lc);
    strata_status sr = strata_shampoo_factor_root(&rt->cfg.shampoo, 1, blk->cols, R, R, w->work,
                                                  w->iwork, &lc);
    slot->failed[0] = sl != STRATA_OK;
    slot->failed[1] = sr != STRATA_OK;
    atomic_fetch_add(&rt->root_refreshes, lc.root_refreshes);
    atomic_fetch_add(&rt->root_failures, lc.root_failures);
    atomic_fetch_add(&rt->root_retries, lc.root_retries);
    if (sl != STRATA_OK && sr != STRATA_OK)
        return strata_error(STRATA_ERR_LINALG, "block %d: both inverse roots failed", job->block);
    if (blk->on_nvme) {
        st = strata_tier_write(rt->nvme, slot->nvme, 0, L,
                               (size_t)blk->rows * blk->rows * sizeof(float));
        if (st == STRATA_OK)
            st = strata_tier_write(rt->nvme, slot->nvme, blk->r_offset, R,
                                   (size_t)blk->cols * blk->cols * sizeof(float));
        if (st != STRATA_OK) {
            atomic_fetch_add(&rt->io_errors, 1);
            return st;
        }
    }
    return STRATA_OK;
}

static void root_job_done(strata_job *j, strata_status st)
{
    root_job *job = (root_job *)j;
    const async_block *blk = &job->rt->blocks[job->block];
    strata_coh_complete(blk->reg, blk->rb, job->slot, st == STRATA_OK);
}

/* ---- commit / destroy */

/* The registry of the SOAP or KL-Shampoo blocks. Both refresh their
 * eigenbases after the steps k = F, 2F, ... of the optimizer, i.e. at the end
 * of runtime steps t = k + 1 (the first call only initializes, with a full
 * eigendecomposition); the synchronous path first uses that basis at t + 1,
 * which is therefore the refresh point ("version"): start F + 2. The QR step
 * continues the basis in use at the snapshot, so only one refresh per
 * parameter may be in flight: S < F. */
static strata_status eigenbasis_registry(strata_runtime *rt, const char *name, int F, int n,
                                         strata_coh_config *cfg, strata_coh_registry **reg)
{
    if (rt->cfg.staleness >= F)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "async %s needs staleness (%d) < precondition frequency (%d): each QR "
                            "refresh continues the eigenbasis installed before it",
                            name, rt->cfg.staleness, F);
    *cfg = (strata_coh_config){
        .precondition_frequency = F,
        .start = F + 2,
        .staleness = rt->cfg.staleness,
        .mode = rt->cfg.install_mode,
        .timeout_s = rt->cfg.wait_timeout_s,
    };
    strata_status st = strata_coh_create(cfg, n, reg);
    int k = strata_coh_slots_needed(F, rt->cfg.staleness);
    if (k > rt->n_slots)
        rt->n_slots = k;
    return st;
}

/* What every block shares: its kind, registry and index there (rb), owner,
 * phase (the owner's refresh_offset) and its slots with their jobs. The
 * slots' buffers come with the placement. */
static strata_status block_init(strata_runtime *rt, int g, async_kind kind,
                                strata_coh_registry *reg, int rb, rt_param *p, int b)
{
    async_block *blk = &rt->blocks[g];
    blk->kind = kind;
    blk->reg = reg;
    blk->rb = rb;
    blk->p = p;
    blk->b = b;
    blk->installed_slot = -1;
    strata_status st = strata_coh_set_block_offset(reg, rb, p->refresh_offset);
    if (st != STRATA_OK)
        return st;
    blk->slots = calloc((size_t)rt->n_slots, sizeof *blk->slots);
    if (!blk->slots)
        return strata_error(STRATA_ERR_NOMEM, "async: out of memory");
    for (int k = 0; k < rt->n_slots; k++) {
        root_job *job = &blk->slots[k].job;
        job->rt = rt;
        job->block = g;
        job->slot = k;
        job->job.run = root_job_run;
        job->job.done = root_job_done;
        job->job.user = job;
    }
    return STRATA_OK;
}

strata_status rt_async_commit(strata_runtime *rt)
{
    const strata_shampoo_config *sc = &rt->cfg.shampoo;
    int n_sh = 0, n_soap = 0, n_kl = 0;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->routed == STRATA_OPTIM_SHAMPOO) {
            p->first_block = n_sh;
            n_sh += strata_shampoo_state_blocks(p->shampoo);
        }
    }
    for (int i = 0; i < rt->n_params; i++)
        if (rt->params[i].routed == STRATA_OPTIM_SOAP)
            rt->params[i].first_block = n_sh + n_soap++;
    for (int i = 0; i < rt->n_params; i++)
        if (rt_async_kl_eligible(rt, &rt->params[i]))
            rt->params[i].first_block = n_sh + n_soap + n_kl++;
    const int n_blocks = n_sh + n_soap + n_kl;
    if (n_blocks == 0)
        return STRATA_OK; /* nothing to precondition asynchronously */

    strata_status st = STRATA_OK;
    rt->n_slots = 2;
    if (n_sh > 0) {
        rt->coh_cfg = (strata_coh_config){
            .precondition_frequency = sc->precondition_frequency,
            .start = sc->start_preconditioning_step < 0 ? sc->precondition_frequency
                                                        : sc->start_preconditioning_step,
            .staleness = rt->cfg.staleness,
            .mode = rt->cfg.install_mode,
            .timeout_s = rt->cfg.wait_timeout_s,
        };
        if (rt->coh_cfg.start < 1)
            rt->coh_cfg.start = 1;
        st = strata_coh_create(&rt->coh_cfg, n_sh, &rt->coh);
        if (st != STRATA_OK)
            return st;
        rt->n_slots = strata_coh_slots_needed(rt->coh_cfg.precondition_frequency,
                                              rt->coh_cfg.staleness);
    }
    if (st == STRATA_OK && n_soap > 0)
        st = eigenbasis_registry(rt, "SOAP", rt->cfg.soap.precondition_frequency, n_soap,
                                 &rt->coh_soap_cfg, &rt->coh_soap);
    if (st == STRATA_OK && n_kl > 0)
        st = eigenbasis_registry(rt, "KL-Shampoo", rt->cfg.kl_shampoo.precondition_frequency, n_kl,
                                 &rt->coh_kl_cfg, &rt->coh_kl);
    if (st != STRATA_OK)
        return st;
    st = strata_tier_host_create(rt->cfg.host_budget, &rt->host);
    if (st != STRATA_OK)
        return st;
    if (rt->cfg.nvme_dir) {
        strata_nvme_config nc;
        strata_nvme_config_default(&nc);
        nc.dir = rt->cfg.nvme_dir;
        nc.budget = rt->cfg.nvme_budget;
        nc.queue_depth = rt->cfg.nvme_queue_depth;
        st = strata_tier_nvme_create(&nc, &rt->nvme);
        if (st != STRATA_OK)
            return st;
    }
    rt->blocks = calloc((size_t)n_blocks, sizeof *rt->blocks);
    if (!rt->blocks)
        return strata_error(STRATA_ERR_NOMEM, "async: out of memory");
    rt->n_blocks = n_blocks;

    int max_dim = 1;
    size_t max_floats = 0;
    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->routed != STRATA_OPTIM_SHAMPOO)
            continue;
        int nb = strata_shampoo_state_blocks(p->shampoo);
        for (int b = 0; b < nb; b++) {
            const int g = p->first_block + b;
            st = block_init(rt, g, ASYNC_SHAMPOO, rt->coh, g, p, b);
            if (st != STRATA_OK)
                return st;
            async_block *blk = &rt->blocks[g];
            strata_shampoo_block_factors(p->shampoo, b, &blk->rows, &blk->cols, NULL, NULL);
            blk->floats = (size_t)blk->rows * blk->rows + (size_t)blk->cols * blk->cols;
            blk->r_offset = align4k((size_t)blk->rows * blk->rows * sizeof(float));
            blk->nvme_bytes = blk->r_offset + (size_t)blk->cols * blk->cols * sizeof(float);
            if (blk->rows > max_dim)
                max_dim = blk->rows;
            if (blk->cols > max_dim)
                max_dim = blk->cols;
            if (blk->floats > max_floats)
                max_floats = blk->floats;
        }
    }

    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (p->routed != STRATA_OPTIM_SOAP)
            continue;
        st = block_init(rt, p->first_block, ASYNC_SOAP, rt->coh_soap, p->first_block - n_sh, p, 0);
        if (st != STRATA_OK)
            return st;
        async_block *blk = &rt->blocks[p->first_block];
        int dims[2];
        for (int side = 0; side < 2; side++) {
            const float *factor = NULL;
            strata_soap_side(p->soap, side, &dims[side], &factor, NULL, NULL);
            if (!factor)
                dims[side] = 0; /* unrotated side */
            if (dims[side] > max_dim)
                max_dim = dims[side];
        }
        blk->rows = dims[0];
        blk->cols = dims[1];
        blk->floats = 3 * ((size_t)dims[0] * dims[0] + (size_t)dims[1] * dims[1]) +
                      (size_t)dims[0] + (size_t)dims[1] + 1;
    }

    for (int i = 0; i < rt->n_params; i++) {
        rt_param *p = &rt->params[i];
        if (!rt_async_kl_eligible(rt, p))
            continue;
        st = block_init(rt, p->first_block, ASYNC_KL, rt->coh_kl, p->first_block - n_sh - n_soap,
                        p, 0);
        if (st != STRATA_OK)
            return st;
        async_block *blk = &rt->blocks[p->first_block];
        blk->rows = (int)p->rows;
        blk->cols = (int)p->cols;
        for (int side = 0; side < 2; side++) {
            const int d = side == 0 ? blk->rows : blk->cols;
            if (d > max_dim)
                max_dim = d;
        }
        blk->floats = 3 * ((size_t)blk->rows * blk->rows + (size_t)blk->cols * blk->cols);
    }

    strata_worker_config wc;
    strata_worker_config_default(&wc);
    if (rt->cfg.workers > 0)
        wc.n_workers = rt->cfg.workers;

    /* Placement (Asteria's asymmetric policy): roots in the host tier; when
     * the host budget cannot hold a block's K slots, that block's slots go
     * to the nvme tier and the host keeps only its two resident buffers (and
     * the workers a scratch buffer each). Decided up front so that the
     * blocks placed later still find room for their resident buffers. */
    const size_t page = 4096;
    size_t nvme_need = 0; /* host bytes if every remaining block went to nvme */
    for (int g = 0; g < n_blocks; g++)
        if (rt->blocks[g].kind == ASYNC_SHAMPOO)
            nvme_need += 2 * align4k(rt->blocks[g].floats * sizeof(float));
    const size_t scratch = (size_t)wc.n_workers * align4k(max_floats * sizeof(float));
    const size_t budget = rt->cfg.host_budget;
    size_t planned = 0;
    bool any_nvme = false;
    for (int g = 0; g < n_blocks; g++) {
        async_block *blk = &rt->blocks[g];
        const size_t one = align4k(blk->floats * sizeof(float));
        if (blk->kind == ASYNC_SHAMPOO)
            nvme_need -= 2 * one;
        /* SOAP and KL eigenbases stay in the host tier. */
        bool host_ok = blk->kind != ASYNC_SHAMPOO || (rt->cfg.roots_tier == STRATA_TIER_HOST &&
                       (budget == 0 || !rt->nvme ||
                        planned + (size_t)rt->n_slots * one + nvme_need +
                                (any_nvme || nvme_need ? scratch : 0) <= budget));
        blk->on_nvme = !host_ok;
        if (blk->on_nvme && !rt->nvme)
            return strata_error(STRATA_ERR_INVALID_ARG, "async: roots on nvme need an nvme tier");
        planned += blk->on_nvme ? 2 * one : (size_t)rt->n_slots * one;
        any_nvme |= blk->on_nvme;
    }
    if (any_nvme)
        planned += scratch;
    if (budget && planned > budget)
        return strata_error(STRATA_ERR_NOMEM,
                            "host budget of %.1f MiB cannot hold the preconditioner roots: they "
                            "need %.1f MiB even with every spillable block on nvme",
                            budget / 1048576.0, planned / 1048576.0);
    (void)page;
    for (int g = 0; g < n_blocks && st == STRATA_OK; g++) {
        async_block *blk = &rt->blocks[g];
        const size_t bytes = blk->floats * sizeof(float);
        if (!blk->on_nvme) {
            for (int k = 0; k < rt->n_slots && st == STRATA_OK; k++)
                st = strata_tier_alloc(rt->host, bytes, (void **)&blk->slots[k].buf);
        } else {
            for (int k = 0; k < rt->n_slots && st == STRATA_OK; k++)
                st = strata_tier_alloc(rt->nvme, blk->nvme_bytes, &blk->slots[k].nvme);
            for (int r = 0; r < 2 && st == STRATA_OK; r++)
                st = strata_tier_alloc(rt->host, bytes, (void **)&blk->resident[r]);
            rt->stats.blocks_on_nvme++;
        }
    }
    if (st != STRATA_OK)
        return st;
    wc.pin = rt->cfg.pin_workers;
    wc.max_delay_us = rt->testing_worker_delay_us;
    wc.delay_seed = 12345;
    wc.work_doubles = strata_inv_root_work_doubles(max_dim);
    wc.work_ints = strata_inv_root_work_ints(max_dim);
    if (n_soap > 0 || n_kl > 0) {
        if (strata_eigenbasis_work_doubles(max_dim) > wc.work_doubles)
            wc.work_doubles = strata_eigenbasis_work_doubles(max_dim);
        if (strata_eigenbasis_work_ints(max_dim) > wc.work_ints)
            wc.work_ints = strata_eigenbasis_work_ints(max_dim);
    }
    if (rt->stats.blocks_on_nvme > 0) {
        rt->scratch_floats = max_floats;
        rt->worker_scratch = calloc((size_t)wc.n_workers, sizeof *rt->worker_scratch);
        if (!rt->worker_scratch)
            return strata_error(STRATA_ERR_NOMEM, "async: out of memory");
        for (int w = 0; w < wc.n_workers; w++) {
            st = strata_tier_alloc(rt->host, max_floats * sizeof(float),
                                   (void **)&rt->worker_scratch[w]);
            if (st != STRATA_OK)
                return st;
        }
    }
    st = strata_worker_pool_create(&wc, &rt->pool);
    if (st != STRATA_OK)
        return st;
    strata_log(rt, STRATA_LOG_INFO, "async",
               "%d blocks, %d slots each, %d workers, S=%d (%s), %d blocks on nvme", n_blocks,
               rt->n_slots, wc.n_workers, rt->cfg.staleness,
               rt->cfg.install_mode == STRATA_COH_FIXED ? "fixed" : "eager",
               rt->stats.blocks_on_nvme);
    return STRATA_OK;
}

void rt_async_destroy(strata_runtime *rt)
{
    /* Workers first: after this no job touches a buffer. */
    strata_worker_pool_destroy(rt->pool);
    rt->pool = NULL;
    for (int i = 0; i < rt->n_blocks; i++) {
        async_block *blk = &rt->blocks[i];
        if (blk->io_pending)
            io_wait_landed(rt, &blk->io);
        for (int k = 0; blk->slots && k < rt->n_slots; k++) {
            if (blk->on_nvme) {
                /* A cancelled job never waited for its snapshot writes. */
                io_wait_landed(rt, &blk->slots[k].io);
                io_wait_landed(rt, &blk->slots[k].io_r);
            }
            strata_tier_free(rt->host, blk->slots[k].buf, blk->floats * sizeof(float));
            strata_tier_free(rt->nvme, blk->slots[k].nvme, blk->nvme_bytes);
        }
        for (int r = 0; r < 2; r++)
            strata_tier_free(rt->host, blk->resident[r], blk->floats * sizeof(float));
        free(blk->slots);
    }
    if (rt->worker_scratch) {
        size_t n = 0;
        strata_worker_config wc;
        strata_worker_config_default(&wc);
        n = rt->cfg.workers > 0 ? (size_t)rt->cfg.workers : (size_t)wc.n_workers;
        for (size_t w = 0; w < n; w++)
            strata_tier_free(rt->host, rt->worker_scratch[w], rt->scratch_floats * sizeof(float));
        free(rt->worker_scratch);
        rt->worker_scratch = NULL;
    }
    free(rt->blocks);
    rt->blocks = NULL;
    rt->n_blocks = 0;
    strata_tier_destroy(rt->nvme);
    rt->nvme = NULL;
    strata_tier_destroy(rt->host);
    rt->host = NULL;
    strata_coh_destroy(rt->coh);
    rt->coh = NULL;
    strata_coh_destroy(rt->coh_soap);
    rt->coh_soap = NULL;
    strata_coh_destroy(rt->coh_kl);
    rt->coh_kl = NULL;
}

/* ---- the step */

/* Lend block `g` the roots of its freshly installed slot. A factor whose
 * root failed keeps the previous root (copied in from the slot or resident
 * buffer that held it), or none if it never had one. */
static strata_status install_roots(strata_runtime *rt, int g, int slot)
{
    async_block *blk = &rt->blocks[g];
    const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
    const float *prev[2] = {NULL, NULL};
    float *dst;
    if (blk->on_nvme) {
        const int spare = 1 - blk->cur;
        const int64_t version = blk->io_version;
        strata_status st = STRATA_OK;
        int64_t want;
        strata_coh_slot_get(blk->reg, blk->rb, slot, &want);
        /* The prefetch (if any, and for this version) brought L; R follows. */
        if (blk->io_pending) {
            st = io_wait_landed(rt, &blk->io); /* resident[spare] is reused below */
            blk->io_pending = false;
            if (st != STRATA_OK) /* the prefetch failed: counted, then read again below */
                atomic_fetch_add(&rt->io_errors, 1);
        }
        if (st != STRATA_OK || version != want)
            st = strata_tier_read(rt->nvme, blk->slots[slot].nvme, 0, blk->resident[spare],
                                  nl * sizeof(float));
        if (st == STRATA_OK)
            st = strata_tier_read(rt->nvme, blk->slots[slot].nvme, blk->r_offset,
                                  blk->resident[spare] + nl, nr * sizeof(float));
        if (st != STRATA_OK) {
            /* Keep using the previous root: stale but intact. */
            atomic_fetch_add(&rt->io_errors, 1);
            strata_log(rt, STRATA_LOG_WARN, "tiers", "block %d: reading its root failed (%s); "
                       "keeping the previous root", g, strata_last_error());
            return STRATA_OK;
        }
        prev[0] = blk->have_root[0] ? blk->resident[blk->cur] : NULL;
        prev[1] = blk->have_root[1] ? blk->resident[blk->cur] + nl : NULL;
        dst = blk->resident[spare];
        blk->cur = spare;
    } else {
        if (blk->installed_slot >= 0) {
            float *pb = blk->slots[blk->installed_slot].buf;
            prev[0] = blk->have_root[0] ? pb : NULL;
            prev[1] = blk->have_root[1] ? pb + nl : NULL;
        }
        dst = blk->slots[slot].buf;
    }
    const async_slot *s = &blk->slots[slot];
    bool have[2] = {!s->failed[0], !s->failed[1]};
    if (s->failed[0] && prev[0]) {
        memcpy(dst, prev[0], nl * sizeof(float));
        have[0] = true;
    }
    if (s->failed[1] && prev[1]) {
        memcpy(dst + nl, prev[1], nr * sizeof(float));
        have[1] = true;
    }
    blk->have_root[0] = have[0];
    blk->have_root[1] = have[1];
    blk->installed_slot = slot;
    return strata_shampoo_block_set_roots(blk->p->shampoo, blk->b, have[0] ? dst : NULL,
                                          have[1] ? dst + nl : NULL);
}

static strata_status snapshot_and_submit(strata_runtime *rt, int g, int64_t t)
{
    async_block *blk = &rt->blocks[g];
    const float *L, *R;
    strata_shampoo_block_factors(blk->p->shampoo, blk->b, NULL, NULL, &L, &R);
    int k;
    strata_status st = strata_coh_begin_refresh(blk->reg, blk->rb, t, &k);
    if (st != STRATA_OK)
        return st;
    async_slot *s = &blk->slots[k];
    const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
    if (blk->on_nvme) {
        /* The write copies into registered staging before returning, so the
         * factors may change afterwards; the job waits for completion. */
        st = strata_tier_write_async(rt->nvme, s->nvme, 0, L, nl * sizeof(float), &s->io);
        if (st == STRATA_OK) {
            st = strata_tier_write_async(rt->nvme, s->nvme, blk->r_offset, R, nr * sizeof(float),
                                         &s->io_r);
            if (st != STRATA_OK) /* the L write is in flight: let it land before reuse */
                io_wait_landed(rt, &s->io);
        }
    } else {
        memcpy(s->buf, L, nl * sizeof(float));
        memcpy(s->buf + nl, R, nr * sizeof(float));
    }
    atomic_fetch_add(&rt->d2h_bytes, (nl + nr) * sizeof(float));
    if (st == STRATA_OK) {
        s->failed[0] = s->failed[1] = false;
        s->job.job.deadline = t + rt->cfg.staleness;
        st = strata_worker_submit(rt->pool, &s->job.job);
    }
    if (st != STRATA_OK) {
        strata_coh_abort_refresh(blk->reg, blk->rb, k);
        return st;
    }
    rt->stats.jobs_submitted++;
    return STRATA_OK;
}

strata_status rt_async_shampoo_step(strata_runtime *rt, rt_param *p, int64_t t,
                                    strata_optim_counters *cnt)
{
    strata_status st = strata_shampoo_update_factors(p->shampoo, p->grad, cnt);
    if (st != STRATA_OK)
        return st;
    const int nb = strata_shampoo_state_blocks(p->shampoo);
    const double t0 = strata_now_seconds();
    /* All blocks of a parameter share its refresh phase (refresh_offset). */
    if (strata_coh_block_is_refresh(rt->coh, p->first_block, t))
        for (int b = 0; b < nb && st == STRATA_OK; b++)
            st = snapshot_and_submit(rt, p->first_block + b, t);
    if (st != STRATA_OK)
        return st;
    const double t1 = strata_now_seconds();
    for (int b = 0; b < nb; b++) {
        const int g = p->first_block + b;
        int slot;
        int64_t version;
        bool now;
        st = strata_coh_acquire(rt->blocks[g].reg, rt->blocks[g].rb, t, &slot, &version, &now);
        if (st != STRATA_OK)
            return st;
        if (now && slot >= 0) {
            st = install_roots(rt, g, slot);
            if (st != STRATA_OK)
                return st;
        }
    }
    const double t2 = strata_now_seconds();
    rt->stats.last_wait_seconds += t2 - t1;
    if (cnt)
        cnt->seconds_roots += t2 - t0; /* snapshot + any wait: what the step pays for roots */
    return strata_shampoo_apply(p->shampoo, rt->lr_scale, t, p->data, p->grad, cnt);
}

/* SOAP and KL-Shampoo at the end of step t: snapshot each rotated side's
 * factor and eigenbasis in use (a NULL factor is an unrotated side) into a
 * slot of version t + 1 ([S | Q | Q_new] per side) and submit its QR job with
 * deadline t + 1 + S. */
static strata_status eigenbasis_snapshot_submit(strata_runtime *rt, async_block *blk, int64_t t,
                                                const int dims[2], const float *const factor[2],
                                                const float *const q[2],
                                                strata_optim_counters *cnt)
{
    const double t0 = strata_now_seconds();
    int k;
    strata_status st = strata_coh_begin_refresh(blk->reg, blk->rb, t + 1, &k);
    if (st != STRATA_OK)
        return st;
    async_slot *sl = &blk->slots[k];
    float *buf = sl->buf;
    size_t bytes = 0;
    for (int side = 0; side < 2; side++) {
        if (!factor[side])
            continue;
        const size_t dd = (size_t)dims[side] * dims[side];
        memcpy(buf, factor[side], dd * sizeof(float));
        memcpy(buf + dd, q[side], dd * sizeof(float));
        buf += 3 * dd;
        bytes += 2 * dd * sizeof(float);
    }
    atomic_fetch_add(&rt->d2h_bytes, bytes);
    sl->job.job.deadline = t + 1 + rt->cfg.staleness;
    st = strata_worker_submit(rt->pool, &sl->job.job);
    if (st != STRATA_OK) {
        strata_coh_abort_refresh(blk->reg, blk->rb, k);
        return st;
    }
    rt->stats.jobs_submitted++;
    if (cnt)
        cnt->seconds_roots += strata_now_seconds() - t0;
    return STRATA_OK;
}

/* SOAP at step t: install the eigenbasis due now (waiting only past the
 * staleness budget), the Adam step in it, the factor update, and at a
 * refresh the snapshot + QR job. The first call is SOAP's initialization (a
 * full eigendecomposition) and stays synchronous. */
strata_status rt_async_soap_step(strata_runtime *rt, rt_param *p, int64_t t,
                                 strata_optim_counters *cnt)
{
    async_block *blk = &rt->blocks[p->first_block];
    strata_soap_state *s = p->soap;
    if (!blk->soap_ready) {
        strata_status st = strata_soap_step(s, rt->lr_scale, t, p->data, p->grad, cnt);
        if (st == STRATA_OK)
            blk->soap_ready = true;
        return st;
    }
    const double t0 = strata_now_seconds();
    int slot;
    int64_t version;
    bool now;
    strata_status st = strata_coh_acquire(blk->reg, blk->rb, t, &slot, &version, &now);
    if (st != STRATA_OK)
        return st;
    if (now && slot >= 0) {
        const async_slot *sl = &blk->slots[slot];
        const float *q = sl->buf;
        const int *perm = (const int *)(sl->buf + 3 * ((size_t)blk->rows * blk->rows +
                                                       (size_t)blk->cols * blk->cols));
        for (int side = 0; side < 2; side++) {
            const int d = side == 0 ? blk->rows : blk->cols;
            if (d == 0)
                continue;
            const size_t dd = (size_t)d * d;
            if (!sl->failed[side]) /* a failed side keeps its basis and V's order */
                st = strata_soap_install_eigenbasis(s, side, q + 2 * dd, perm);
            if (st != STRATA_OK)
                return st;
            q += 3 * dd;
            perm += d;
        }
        blk->installed_slot = slot;
    }
    const double t1 = strata_now_seconds();
    rt->stats.last_wait_seconds += t1 - t0;
    if (cnt)
        cnt->seconds_roots += t1 - t0;
    strata_status st_apply = strata_soap_apply(s, rt->lr_scale, t, p->data, p->grad, cnt);
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    st = strata_soap_update_factors(s, p->grad, cnt);
    if (st != STRATA_OK)
        return st;
    if (strata_soap_refresh_due(s)) {
        int dims[2];
        const float *factor[2], *q[2];
        for (int side = 0; side < 2; side++)
            strata_soap_side(s, side, &dims[side], &factor[side], &q[side], NULL);
        st = eigenbasis_snapshot_submit(rt, blk, t, dims, factor, q, cnt);
    }
    if (st != STRATA_OK)
        return st;
    return st_apply;
}

/* KL-Shampoo (eigenbasis form) at step t, the synchronous step's order
 * (strata_kl_shampoo_step): install the eigenbasis due now (waiting only
 * past the staleness budget), precondition with it, absorb G into the
 * factors and eigenvalue estimates, and at a refresh snapshot S and Q for
 * the QR job. The first call initializes (full eigh) and stays synchronous. */
strata_status rt_async_kl_step(strata_runtime *rt, rt_param *p, int64_t t,
                               strata_optim_counters *cnt)
{
    async_block *blk = &rt->blocks[p->first_block];
    strata_kl_shampoo_state *s = p->kl;
    if (!blk->soap_ready) {
        strata_status st = strata_kl_shampoo_step(s, rt->lr_scale, t, p->data, p->grad, cnt);
        if (st == STRATA_OK)
            blk->soap_ready = true;
        return st;
    }
    const double t0 = strata_now_seconds();
    int slot;
    int64_t version;
    bool now;
    strata_status st = strata_coh_acquire(blk->reg, blk->rb, t, &slot, &version, &now);
    if (st != STRATA_OK)
        return st;
    if (now && slot >= 0) {
        const float *q = blk->slots[slot].buf;
        for (int side = 0; side < 2; side++) {
            const int d = side == 0 ? blk->rows : blk->cols;
            const size_t dd = (size_t)d * d;
            if (!blk->slots[slot].failed[side]) /* a failed side keeps its basis */
                st = strata_kl_shampoo_install_eigenbasis(s, side, q + 2 * dd, NULL);
            if (st != STRATA_OK)
                return st;
            q += 3 * dd;
        }
        blk->installed_slot = slot;
    }
    const double t1 = strata_now_seconds();
    rt->stats.last_wait_seconds += t1 - t0;
    if (cnt)
        cnt->seconds_roots += t1 - t0;
    /* As strata_kl_shampoo_step: a non-finite direction leaves w alone and
     * the estimates still absorb G; a non-finite G is refused by both calls
     * before they touch anything. */
    strata_status st_apply = strata_kl_shampoo_apply(s, rt->lr_scale, t, p->data, p->grad, cnt);
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    st = strata_kl_shampoo_update_factors(s, p->grad, cnt);
    if (st != STRATA_OK)
        return st;
    if (strata_kl_shampoo_refresh_due(s)) {
        int dims[2];
        const float *factor[2], *q[2];
        for (int side = 0; side < 2; side++)
            strata_kl_shampoo_side(s, side, &dims[side], &factor[side], &q[side], NULL);
        st = eigenbasis_snapshot_submit(rt, blk, t, dims, factor, q, cnt);
    }
    if (st != STRATA_OK)
        return st;
    return st_apply;
}

/* Forward hook: start reading layer `layer`'s due roots from nvme while the
 * forward and backward passes run (the cpu backend's shadow stream is the
 * nvme tier's completion thread). */
strata_status rt_async_prefetch(strata_runtime *rt, int layer)
{
    if (!rt->nvme || rt->stats.blocks_on_nvme == 0)
        return STRATA_OK;
    const int64_t t = rt->t + 1; /* the step this forward belongs to */
    for (int g = 0; g < rt->n_blocks; g++) {
        async_block *blk = &rt->blocks[g];
        if (blk->kind != ASYNC_SHAMPOO || !blk->on_nvme || blk->p->layer != layer ||
            blk->io_pending)
            continue;
        const int64_t due = strata_coh_block_due_version(blk->reg, blk->rb, t);
        if (due < 0)
            continue;
        int64_t installed = -1;
        if (blk->installed_slot >= 0)
            strata_coh_slot_get(blk->reg, blk->rb, blk->installed_slot, &installed);
        if (installed >= due)
            continue;
        strata_coh_slot_state state;
        int k = strata_coh_find(blk->reg, blk->rb, due, &state);
        if (k < 0 || state != STRATA_SLOT_READY)
            continue; /* not ready yet: acquire will wait and read */
        const size_t nl = (size_t)blk->rows * blk->rows;
        if (strata_tier_read_async(rt->nvme, blk->slots[k].nvme, 0, blk->resident[1 - blk->cur],
                                   nl * sizeof(float), &blk->io) == STRATA_OK) {
            blk->io_pending = true;
            blk->io_version = due;
        }
    }
    return STRATA_OK;
}

void rt_async_stats(strata_runtime *rt, strata_stats *s)
{
    strata_coh_registry *regs[3] = {rt->coh, rt->coh_soap, rt->coh_kl};
    for (int i = 0; i < 3; i++) {
        if (!regs[i])
            continue;
        strata_coh_stats c;
        strata_coh_stats_get(regs[i], &c);
        s->coh_installs += c.installs;
        s->coh_waits += c.waits;
        s->coh_wait_seconds += c.wait_seconds;
        s->coh_dropped += c.dropped;
        s->coh_failed += c.failed;
        s->coh_bound_exceeded += c.bound_exceeded;
        if (c.max_staleness > s->max_staleness)
            s->max_staleness = c.max_staleness;
    }
    if (rt->pool) {
        strata_worker_stats w;
        strata_worker_stats_get(rt->pool, &w);
        s->jobs_cancelled = w.cancelled;
    }
    s->root_refreshes += atomic_load(&rt->root_refreshes);
    s->root_failures += atomic_load(&rt->root_failures);
    s->root_retries += atomic_load(&rt->root_retries);
    s->bytes_device_to_host = atomic_load(&rt->d2h_bytes);
    s->io_errors = atomic_load(&rt->io_errors);
    strata_tier_bytes(rt->host, &s->host_bytes, &s->host_bytes_peak);
    strata_tier_bytes(rt->nvme, &s->nvme_bytes, &s->nvme_bytes_peak);
    if (rt->nvme) {
        strata_tier_io_stats io;
        strata_tier_io_stats_get(rt->nvme, &io);
        s->nvme_bytes_written = io.bytes_written;
        s->nvme_bytes_read = io.bytes_read;
    }
}

strata_status strata_testing_inject_io_errors(strata_runtime *rt, int n, int errno_value)
{
    if (!rt || !rt->nvme)
        return strata_error(STRATA_ERR_STATE, "inject_io_errors: the runtime has no nvme tier");
    strata_tier_inject_io_errors(rt->nvme, n, errno_value);
    return STRATA_OK;
}
