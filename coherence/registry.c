/* Coherence registry: per-block slot states and the installed version.
 *
 * Invariants (under `mu`):
 *  - per block at most one slot is INSTALLED, and installed_version equals
 *    that slot's version (or -1 with no INSTALLED slot);
 *  - versions only grow: a slot is installed only if its version is newer
 *    than installed_version; READY/FAILED slots older than the installed
 *    version are freed at once (dropped);
 *  - PENDING/COMPUTING slots are owned by an in-flight job; only that job's
 *    complete() moves them on.
 * Lock order: `mu` only. `cv` is broadcast whenever a job completes or a
 * slot is freed.
 */
#include "coherence/coherence.h"

#include "base/clock.h"
#include "base/schedule.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct coh_slot {
    strata_coh_slot_state state;
    int64_t version;
} coh_slot;

typedef struct coh_block {
    int64_t installed_version;
    int installed_slot;
    int64_t start; /* first refresh point: cfg.start + the block's offset */
} coh_block;

struct strata_coh_registry {
    strata_coh_config cfg;
    int n_blocks, n_slots;
    coh_block *blocks;
    coh_slot *slots; /* n_blocks * n_slots */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    strata_coh_stats stats;
    bool started; /* a refresh was begun: offsets are fixed from then on */
};


int strata_coh_slots_needed(int precondition_frequency, int staleness)
{
    int f = precondition_frequency < 1 ? 1 : precondition_frequency;
    int s = staleness < 0 ? 0 : staleness;
    return (s + f - 1) / f + 2;
}

bool strata_coh_is_refresh(const strata_coh_config *cfg, int64_t t)
{
    return strata_refresh_point_is(cfg->start, cfg->precondition_frequency, t);
}

/* The version due at step t: the latest refresh point <= t - S, with S = 0
 * at the steps of the synchronous warm start (t <= sync_steps). */
static int64_t due_from(int64_t start, const strata_coh_config *cfg, int64_t t)
{
    const int S = t <= cfg->sync_steps ? 0 : cfg->staleness;
    return strata_refresh_point_latest(start, cfg->precondition_frequency, t - S);
}

int64_t strata_coh_due_version(const strata_coh_config *cfg, int64_t t)
{
    return due_from(cfg->start, cfg, t);
}

strata_status strata_coh_create(const strata_coh_config *cfg, int n_blocks,
                                strata_coh_registry **out)
{
    if (!cfg || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_create: NULL argument");
    *out = NULL;
    if (cfg->precondition_frequency < 1 || cfg->start < 1 || cfg->staleness < 0 || n_blocks < 1 ||
        cfg->sync_steps < 0 ||
        cfg->slots < 0 || (cfg->mode != STRATA_COH_FIXED && cfg->mode != STRATA_COH_EAGER) ||
        !(cfg->timeout_s > 0.0))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "coh_create: need F >= 1 (%d), start >= 1 (%lld), S >= 0 (%d), "
                            "blocks >= 1 (%d), sync_steps >= 0, timeout > 0",
                            cfg->precondition_frequency, (long long)cfg->start, cfg->staleness,
                            n_blocks);
    strata_coh_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return strata_error(STRATA_ERR_NOMEM, "coh_create: out of memory");
    reg->cfg = *cfg;
    reg->n_blocks = n_blocks;
    reg->n_slots = cfg->slots ? cfg->slots
                              : strata_coh_slots_needed(cfg->precondition_frequency, cfg->staleness);
    reg->cfg.slots = reg->n_slots;
    reg->blocks = calloc((size_t)n_blocks, sizeof *reg->blocks);
    reg->slots = calloc((size_t)n_blocks * reg->n_slots, sizeof *reg->slots);
    if (!reg->blocks || !reg->slots) {
        free(reg->blocks);
        free(reg->slots);
        free(reg);
        return strata_error(STRATA_ERR_NOMEM, "coh_create: out of memory");
    }
    for (int b = 0; b < n_blocks; b++) {
        reg->blocks[b].installed_version = -1;
        reg->blocks[b].installed_slot = -1;
        reg->blocks[b].start = cfg->start;
    }
    for (size_t i = 0; i < (size_t)n_blocks * reg->n_slots; i++)
        reg->slots[i].version = -1;
    pthread_mutex_init(&reg->mu, NULL);
    pthread_cond_init(&reg->cv, NULL);
    *out = reg;
    return STRATA_OK;
}

void strata_coh_destroy(strata_coh_registry *reg)
{
    if (!reg)
        return;
    pthread_cond_destroy(&reg->cv);
    pthread_mutex_destroy(&reg->mu);
    free(reg->blocks);
    free(reg->slots);
    free(reg);
}

static coh_slot *slot_at(strata_coh_registry *reg, int b, int s)
{
    return &reg->slots[(size_t)b * reg->n_slots + s];
}

strata_status strata_coh_set_block_offset(strata_coh_registry *reg, int b, int offset)
{
    if (!reg || b < 0 || b >= reg->n_blocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_set_block_offset: bad block %d", b);
    if (offset < 0 || offset >= reg->cfg.precondition_frequency)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "coh_set_block_offset: offset %d outside [0, F = %d)", offset,
                            reg->cfg.precondition_frequency);
    pthread_mutex_lock(&reg->mu);
    const bool started = reg->started;
    if (!started)
        reg->blocks[b].start = reg->cfg.start + offset;
    pthread_mutex_unlock(&reg->mu);
    if (started)
        return strata_error(STRATA_ERR_STATE,
                            "coh_set_block_offset: refreshes have begun; offsets are fixed");
    return STRATA_OK;
}

int64_t strata_coh_block_start(strata_coh_registry *reg, int b)
{
    if (!reg || b < 0 || b >= reg->n_blocks)
        return -1;
    pthread_mutex_lock(&reg->mu);
    int64_t start = reg->blocks[b].start;
    pthread_mutex_unlock(&reg->mu);
    return start;
}

bool strata_coh_block_is_refresh(strata_coh_registry *reg, int b, int64_t t)
{
    int64_t start = strata_coh_block_start(reg, b);
    return start >= 1 && strata_refresh_point_is(start, reg->cfg.precondition_frequency, t);
}

int64_t strata_coh_block_due_version(strata_coh_registry *reg, int b, int64_t t)
{
    int64_t start = strata_coh_block_start(reg, b);
    if (start < 1)
        return -1;
    return due_from(start, &reg->cfg, t);
}

static void slot_free(strata_coh_registry *reg, coh_slot *s)
{
    s->state = STRATA_SLOT_FREE;
    s->version = -1;
    pthread_cond_broadcast(&reg->cv);
}

strata_status strata_coh_begin_refresh(strata_coh_registry *reg, int b, int64_t r, int *slot)
{
    if (!reg || !slot || b < 0 || b >= reg->n_blocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_begin_refresh: bad block %d", b);
    struct timespec dl = strata_deadline_after(reg->cfg.timeout_s);
    pthread_mutex_lock(&reg->mu);
    reg->started = true;
    for (;;) {
        for (int i = 0; i < reg->n_slots; i++) {
            coh_slot *s = slot_at(reg, b, i);
            if (s->state == STRATA_SLOT_FREE) {
                s->state = STRATA_SLOT_PENDING;
                s->version = r;
                *slot = i;
                pthread_mutex_unlock(&reg->mu);
                return STRATA_OK;
            }
        }
        if (pthread_cond_timedwait(&reg->cv, &reg->mu, &dl) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&reg->mu);
    return strata_error(STRATA_ERR_TIMEOUT,
                        "coherence: block %d has no free slot for refresh %lld after %.1f s", b,
                        (long long)r, reg->cfg.timeout_s);
}

void strata_coh_abort_refresh(strata_coh_registry *reg, int b, int slot)
{
    pthread_mutex_lock(&reg->mu);
    slot_free(reg, slot_at(reg, b, slot));
    pthread_mutex_unlock(&reg->mu);
}

void strata_coh_mark_computing(strata_coh_registry *reg, int b, int slot)
{
    pthread_mutex_lock(&reg->mu);
    coh_slot *s = slot_at(reg, b, slot);
    if (s->state == STRATA_SLOT_PENDING)
        s->state = STRATA_SLOT_COMPUTING;
    pthread_mutex_unlock(&reg->mu);
}

void strata_coh_complete(strata_coh_registry *reg, int b, int slot, bool ok)
{
    pthread_mutex_lock(&reg->mu);
    coh_slot *s = slot_at(reg, b, slot);
    if (!ok)
        reg->stats.failed++;
    if (s->version <= reg->blocks[b].installed_version) {
        /* A newer version is already in use: never install out of order. */
        if (ok)
            reg->stats.dropped++;
        slot_free(reg, s);
    } else {
        s->state = ok ? STRATA_SLOT_READY : STRATA_SLOT_FAILED;
        pthread_cond_broadcast(&reg->cv);
    }
    pthread_mutex_unlock(&reg->mu);
}

/* Install slot `i` of block b (READY, newer than installed); free the old
 * one and every READY/FAILED slot older than the new version. */
static void install(strata_coh_registry *reg, int b, int i)
{
    coh_block *blk = &reg->blocks[b];
    coh_slot *s = slot_at(reg, b, i);
    if (blk->installed_slot >= 0)
        slot_free(reg, slot_at(reg, b, blk->installed_slot));
    s->state = STRATA_SLOT_INSTALLED;
    blk->installed_slot = i;
    blk->installed_version = s->version;
    reg->stats.installs++;
    for (int k = 0; k < reg->n_slots; k++) {
        coh_slot *o = slot_at(reg, b, k);
        if (k != i && o->version < s->version &&
            (o->state == STRATA_SLOT_READY || o->state == STRATA_SLOT_FAILED)) {
            if (o->state == STRATA_SLOT_READY)
                reg->stats.dropped++;
            slot_free(reg, o);
        }
    }
}

static bool slot_busy(const coh_slot *s)
{
    return s->state == STRATA_SLOT_PENDING || s->state == STRATA_SLOT_COMPUTING;
}

/* Wait (caller holds reg->mu) until slot `s` is no longer PENDING/COMPUTING
 * or reg->cfg.timeout_s passes; counted in stats.waits/wait_seconds. The slot
 * cannot change hands while busy. False: still busy (timed out). */
static bool wait_while_busy(strata_coh_registry *reg, const coh_slot *s)
{
    struct timespec dl = strata_deadline_after(reg->cfg.timeout_s);
    const double t0 = strata_now_seconds();
    reg->stats.waits++;
    int rc = 0;
    while (slot_busy(s) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&reg->cv, &reg->mu, &dl);
    reg->stats.wait_seconds += strata_now_seconds() - t0;
    return !slot_busy(s);
}

static int find_version(strata_coh_registry *reg, int b, int64_t v)
{
    for (int k = 0; k < reg->n_slots; k++) {
        coh_slot *s = slot_at(reg, b, k);
        if (s->state != STRATA_SLOT_FREE && s->version == v)
            return k;
    }
    return -1;
}

/* The stale-correction valve's way out of a wait (caller holds reg->mu):
 * install the newest READY result of block b newer than the installed one
 * and not newer than `due`, if any. True when one was installed. */
static bool install_newest_ready(strata_coh_registry *reg, int b, int64_t due)
{
    coh_block *blk = &reg->blocks[b];
    int best = -1;
    for (int k = 0; k < reg->n_slots; k++) {
        coh_slot *s = slot_at(reg, b, k);
        if (s->state == STRATA_SLOT_READY && s->version > blk->installed_version &&
            s->version <= due && (best < 0 || s->version > slot_at(reg, b, best)->version))
            best = k;
    }
    if (best >= 0)
        install(reg, b, best);
    return best >= 0;
}

static strata_status acquire_impl(strata_coh_registry *reg, int b, int64_t t, bool no_wait,
                                  int *slot, int64_t *version, bool *installed_now,
                                  bool *would_wait)
{
    if (!reg || !slot || !version || b < 0 || b >= reg->n_blocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_acquire: bad block %d", b);
    coh_block *blk = &reg->blocks[b];
    bool changed = false;
    strata_status st = STRATA_OK;
    pthread_mutex_lock(&reg->mu);
    const int64_t due =
        due_from(blk->start, &reg->cfg, t);

    if (reg->cfg.mode == STRATA_COH_EAGER) {
        int best = -1;
        for (int k = 0; k < reg->n_slots; k++) {
            coh_slot *s = slot_at(reg, b, k);
            if (s->state == STRATA_SLOT_READY && s->version > blk->installed_version &&
                s->version <= t && (best < 0 || s->version > slot_at(reg, b, best)->version))
                best = k;
        }
        if (best >= 0) {
            install(reg, b, best);
            changed = true;
        }
    }

    if (due >= 0 && blk->installed_version < due) {
        int k = find_version(reg, b, due);
        if (k >= 0) {
            coh_slot *s = slot_at(reg, b, k);
            if (slot_busy(s) && no_wait) {
                changed = install_newest_ready(reg, b, due) || changed;
                *would_wait = true;
                goto out;
            }
            if (slot_busy(s)) {
                if (!wait_while_busy(reg, s)) {
                    st = strata_error(STRATA_ERR_TIMEOUT,
                                      "coherence: block %d waited %.1f s for the root of step "
                                      "%lld at step %lld",
                                      b, reg->cfg.timeout_s, (long long)due, (long long)t);
                    goto out;
                }
            }
            if (s->state == STRATA_SLOT_READY && s->version == due) {
                install(reg, b, k);
                changed = true;
            } else if (s->state == STRATA_SLOT_FAILED && s->version == due) {
                slot_free(reg, s); /* keep the previous version */
            }
        } else {
            /* No refresh of version `due` was begun: its parameter was
             * skipped at that refresh point (strata_param_set_active). The
             * newest READY result between the installed one and `due` (due
             * at a step the parameter skipped) is installed now, so that
             * its slot is not held forever. Without skips every result is
             * installed or dropped at its own due step: none is found. */
            int best = -1;
            for (int j = 0; j < reg->n_slots; j++) {
                const coh_slot *o = slot_at(reg, b, j);
                if (o->state != STRATA_SLOT_FREE && o->state != STRATA_SLOT_INSTALLED &&
                    o->version > blk->installed_version && o->version < due &&
                    (best < 0 || o->version > slot_at(reg, b, best)->version))
                    best = j;
            }
            coh_slot *o = best >= 0 ? slot_at(reg, b, best) : NULL;
            if (o && slot_busy(o) && no_wait) {
                changed = install_newest_ready(reg, b, due) || changed;
                *would_wait = true;
                goto out;
            }
            if (o && slot_busy(o) && !wait_while_busy(reg, o)) { /* the same for every run */
                st = strata_error(STRATA_ERR_TIMEOUT,
                                  "coherence: block %d waited %.1f s for the root of step "
                                  "%lld at step %lld",
                                  b, reg->cfg.timeout_s, (long long)o->version, (long long)t);
                goto out;
            }
            if (o && o->state == STRATA_SLOT_READY) {
                install(reg, b, best);
                changed = true;
            } else if (o && o->state == STRATA_SLOT_FAILED) {
                slot_free(reg, o);
            }
        }
    }
    if (blk->installed_version >= 0) {
        int64_t stale = t - blk->installed_version;
        if (stale > reg->stats.max_staleness)
            reg->stats.max_staleness = stale;
        if (stale > reg->cfg.precondition_frequency - 1 + reg->cfg.staleness)
            reg->stats.bound_exceeded++;
    }
out:
    *slot = blk->installed_slot;
    *version = blk->installed_version;
    if (installed_now)
        *installed_now = changed;
    pthread_mutex_unlock(&reg->mu);
    return st;
}

strata_status strata_coh_acquire(strata_coh_registry *reg, int b, int64_t t, int *slot,
                                 int64_t *version, bool *installed_now)
{
    bool would_wait = false;
    return acquire_impl(reg, b, t, false, slot, version, installed_now, &would_wait);
}

strata_status strata_coh_acquire_nowait(strata_coh_registry *reg, int b, int64_t t, int *slot,
                                        int64_t *version, bool *installed_now, bool *would_wait)
{
    if (!would_wait)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_acquire_nowait: NULL would_wait");
    *would_wait = false;
    return acquire_impl(reg, b, t, true, slot, version, installed_now, would_wait);
}

strata_status strata_coh_install_ready(strata_coh_registry *reg, int b, int64_t upto, int *slot)
{
    if (!reg || !slot || b < 0 || b >= reg->n_blocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_install_ready: bad block %d", b);
    *slot = -1;
    pthread_mutex_lock(&reg->mu);
    if (install_newest_ready(reg, b, upto))
        *slot = reg->blocks[b].installed_slot;
    pthread_mutex_unlock(&reg->mu);
    return STRATA_OK;
}

strata_status strata_coh_try_begin_refresh(strata_coh_registry *reg, int b, int64_t r, int *slot)
{
    if (!reg || !slot || b < 0 || b >= reg->n_blocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_try_begin_refresh: bad block %d", b);
    *slot = -1;
    pthread_mutex_lock(&reg->mu);
    reg->started = true;
    for (int i = 0; i < reg->n_slots; i++) {
        coh_slot *s = slot_at(reg, b, i);
        if (s->state == STRATA_SLOT_FREE) {
            s->state = STRATA_SLOT_PENDING;
            s->version = r;
            *slot = i;
            break;
        }
    }
    pthread_mutex_unlock(&reg->mu);
    return STRATA_OK;
}

strata_status strata_coh_wait_slot(strata_coh_registry *reg, int b, int slot,
                                   strata_coh_slot_state *state)
{
    if (!reg || !state || b < 0 || b >= reg->n_blocks || slot < 0 || slot >= reg->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_wait_slot: bad block %d slot %d", b,
                            slot);
    strata_status st = STRATA_OK;
    pthread_mutex_lock(&reg->mu);
    coh_slot *s = slot_at(reg, b, slot);
    if (slot_busy(s)) {
        if (!wait_while_busy(reg, s))
            st = strata_error(STRATA_ERR_TIMEOUT,
                              "coherence: block %d waited %.1f s for the refresh of step %lld",
                              b, reg->cfg.timeout_s, (long long)s->version);
    }
    *state = s->state;
    pthread_mutex_unlock(&reg->mu);
    return st;
}

strata_status strata_coh_wait_done(strata_coh_registry *reg, int b, int slot, int64_t version,
                                   double timeout_s)
{
    if (!reg || b < 0 || b >= reg->n_blocks || slot < 0 || slot >= reg->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG, "coh_wait_done: bad block %d slot %d", b,
                            slot);
    struct timespec dl = strata_deadline_after(timeout_s);
    pthread_mutex_lock(&reg->mu);
    const coh_slot *s = slot_at(reg, b, slot);
    int rc = 0;
    while (s->version == version && slot_busy(s) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&reg->cv, &reg->mu, &dl);
    const bool busy = s->version == version && slot_busy(s);
    pthread_mutex_unlock(&reg->mu);
    return busy ? strata_error(STRATA_ERR_TIMEOUT,
                               "coherence: block %d: the refresh of step %lld still runs after "
                               "%.1f s", b, (long long)version, timeout_s)
                : STRATA_OK;
}

int strata_coh_find(strata_coh_registry *reg, int b, int64_t version, strata_coh_slot_state *state)
{
    pthread_mutex_lock(&reg->mu);
    int k = find_version(reg, b, version);
    if (state)
        *state = k >= 0 ? slot_at(reg, b, k)->state : STRATA_SLOT_FREE;
    pthread_mutex_unlock(&reg->mu);
    return k;
}

strata_coh_slot_state strata_coh_slot_get(strata_coh_registry *reg, int b, int slot,
                                          int64_t *version)
{
    pthread_mutex_lock(&reg->mu);
    coh_slot *s = slot_at(reg, b, slot);
    strata_coh_slot_state st = s->state;
    if (version)
        *version = s->version;
    pthread_mutex_unlock(&reg->mu);
    return st;
}

void strata_coh_stats_get(strata_coh_registry *reg, strata_coh_stats *out)
{
    pthread_mutex_lock(&reg->mu);
    *out = reg->stats;
    pthread_mutex_unlock(&reg->mu);
}

strata_status strata_coh_quiesce(strata_coh_registry *reg, double timeout_s)
{
    struct timespec dl = strata_deadline_after(timeout_s);
    pthread_mutex_lock(&reg->mu);
    int rc = 0;
    for (;;) {
        bool busy = false;
        for (size_t i = 0; i < (size_t)reg->n_blocks * reg->n_slots && !busy; i++)
            busy = reg->slots[i].state == STRATA_SLOT_PENDING ||
                   reg->slots[i].state == STRATA_SLOT_COMPUTING;
        if (!busy || rc == ETIMEDOUT) {
            pthread_mutex_unlock(&reg->mu);
            return busy ? strata_error(STRATA_ERR_TIMEOUT, "coherence: jobs still in flight after %.1f s",
                                       timeout_s)
                        : STRATA_OK;
        }
        rc = pthread_cond_timedwait(&reg->cv, &reg->mu, &dl);
    }
}

int strata_coh_slots_per_block(const strata_coh_registry *reg)
{
    return reg ? reg->n_slots : 0;
}

strata_status strata_coh_restore_block(strata_coh_registry *reg, int b, int n,
                                       const strata_coh_slot_state *states,
                                       const int64_t *versions)
{
    if (!reg || !states || !versions || b < 0 || b >= reg->n_blocks || n != reg->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "coh_restore_block: bad block %d or %d slots (registry has %d)", b, n,
                            reg ? reg->n_slots : 0);
    int installed = -1;
    for (int k = 0; k < n; k++) {
        if (states[k] == STRATA_SLOT_FREE)
            continue;
        if (states[k] != STRATA_SLOT_READY && states[k] != STRATA_SLOT_INSTALLED &&
            states[k] != STRATA_SLOT_FAILED)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "coh_restore_block: block %d slot %d: state %d cannot be restored "
                                "(only free, ready, installed, failed)", b, k, (int)states[k]);
        if (versions[k] < 0)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "coh_restore_block: block %d slot %d: version %lld < 0", b, k,
                                (long long)versions[k]);
        if (states[k] == STRATA_SLOT_INSTALLED) {
            if (installed >= 0)
                return strata_error(STRATA_ERR_INVALID_ARG,
                                    "coh_restore_block: block %d: two installed slots", b);
            installed = k;
        }
    }
    for (int k = 0; k < n; k++)
        if (installed >= 0 && states[k] != STRATA_SLOT_FREE && k != installed &&
            versions[k] <= versions[installed])
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "coh_restore_block: block %d slot %d: version %lld is not newer "
                                "than the installed %lld", b, k, (long long)versions[k],
                                (long long)versions[installed]);
    pthread_mutex_lock(&reg->mu);
    for (int k = 0; k < n; k++) {
        const strata_coh_slot_state s = slot_at(reg, b, k)->state;
        if (s == STRATA_SLOT_PENDING || s == STRATA_SLOT_COMPUTING) {
            pthread_mutex_unlock(&reg->mu);
            return strata_error(STRATA_ERR_STATE,
                                "coh_restore_block: block %d has a job in flight", b);
        }
    }
    for (int k = 0; k < n; k++) {
        coh_slot *s = slot_at(reg, b, k);
        s->state = states[k];
        s->version = states[k] == STRATA_SLOT_FREE ? -1 : versions[k];
    }
    reg->blocks[b].installed_slot = installed;
    reg->blocks[b].installed_version = installed >= 0 ? versions[installed] : -1;
    reg->started = true;
    pthread_cond_broadcast(&reg->cv);
    pthread_mutex_unlock(&reg->mu);
    return STRATA_OK;
}
