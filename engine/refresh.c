/* The refresh engine (engine/engine.h): every family's optimizer step, its
 * snapshots, refresh jobs, installs and tiers, through one path.
 *
 * Objects (created at commit, freed at destroy, nothing allocated per step):
 *  - groups: the parameters of one family with one schedule (F, start, lag)
 *    and one mode (inline or on workers), each with a coherence registry over
 *    all their blocks;
 *  - per block K = strata_coh_slots_needed(F, S) slots. A slot is a byte
 *    buffer of the family's layout: the snapshot, then the result in place.
 *      host placement: a host-tier buffer;
 *      nvme placement: an nvme-tier extent; a job reads its snapshot into
 *        its worker's scratch buffer, refreshes there and writes the result
 *        back. The installed result is read back into a buffer of the
 *        engine's resident pool ("streamed residency", below);
 *  - the worker pool (async groups), an inline workspace (inline groups),
 *    one host staging buffer for snapshots bound for nvme;
 *  - the stream seam (cfg.be): the backend's shadow stream; per slot the
 *    event of its queued snapshot (a job, or the inline refresh, waits on it
 *    before it reads the slot; the training stream waits on it before the
 *    factors change: before `after`, or the parameter's next step); per
 *    device_roots block two device buffers, the result installed from
 *    dev[dev_cur], the next one staged into the other on the shadow stream
 *    (by the forward hook once READY, else at install) with a stage event,
 *    and a release event the training stream records when it stops reading
 *    a buffer (the next stage into it waits on that). At install the
 *    training stream waits on the stage event only if it has not completed.
 *
 * Streamed residency (nvme placement): the host keeps a bounded pool of
 * resident buffers, each one the largest nvme slot, not one per block: the
 * pool holds staged due results (read by the first pass, the forward hook's
 * prefetch or ahead of the step, or at install) and installed results while
 * the family needs them. A family whose install copies the result
 * (precond.h install_copies, or a device copy) needs its buffer only until
 * install; one that lends it (precond.h rebind) needs it at apply: the step
 * makes it resident (a read when it was evicted: counted in
 * resident_reads), pins it through apply and rebinds the family when its
 * address changed; a family with neither keeps its buffer (pinned). The
 * installed slot's nvme extent always holds the complete installed result
 * (a failed part filled at install is written back), so any buffer not in
 * use may be evicted (least recently used first) and read again. The pool's
 * size comes from the host budget (what is left of it, at least one
 * entry's blocks plus one), else two entries' blocks plus two, never more
 * than two per nvme block (what a block held before).
 *
 * Invariants: a block's installed slot (or resident buffer) is never written
 * until the next install of that block (the registry keeps it INSTALLED);
 * `have` has a bit per result part that holds a valid result; a failed part
 * is filled from the previously installed result before install, so a family
 * always sees a complete result (and the failure bits).
 *
 * Lock order: none here; the registry and the pool have their own mutexes
 * and call back without holding them. Counters the workers touch are atomic.
 */
#include "engine/engine.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/ops.h"
#include "base/clock.h"
#include "coherence/coherence.h"
#include "plan/plan.h"
#include "tiers/tiers.h"
#include "workers/workers.h"

struct strata_refresh;
struct eng_block;

#define SHIP_MAX 16 /* slots per block a shipped block may have */
#define WAIT_TIMERS 16 /* timing-event pairs in flight for the training stream's waits */

typedef struct eng_job {
    strata_job job;
    struct strata_refresh *e;
    struct eng_block *blk;
    int slot;
    /* chained groups: the block's job submitted before this one (-1: none),
     * which this one waits for before it reads the chain head */
    int pred_slot;
    int64_t pred_version;
} eng_job;

typedef struct eng_slot {
    void *buf;      /* host placement */
    void *nvme;     /* nvme placement: extent handle */
    strata_io io;   /* nvme placement: the snapshot write */
    unsigned failed; /* parts whose refresh failed; set by the job */
    eng_job job;
    strata_event *ev_snap; /* stream seam: recorded after the snapshot's copies */
    bool snap_queued;      /* the snapshot went on the shadow stream (a job waits on ev_snap) */
} eng_slot;

typedef struct eng_group {
    const strata_precond_family *fam;
    strata_precond_schedule sch;
    bool inline_;
    strata_coh_config cc;
    strata_coh_registry *reg;
    int n_blocks;
    int n_slots;
    int filled;      /* blocks given a registry index so far (commit) */
    bool chain;      /* chained refreshes (precond.h chain_in): async, S >= F, and some
                        state of the group chains (precond.h chains) */
    bool deferred;   /* the first result is refresh point sch.first (precond.h
                        defer_first): async, S >= 1, F = 1 */
} eng_group;

typedef struct eng_entry {
    const strata_precond_family *fam;
    void *state;
    void *cfg;       /* copy of the family configuration */
    int offset;      /* refresh phase in [0, F) */
    int layer;
    char *name;
    eng_group *grp;  /* NULL: nothing to refresh */
    int first_block, n_blocks;
    /* state paging (cfg.page_state; "state paging" below): the page-aligned
     * part of the family's page_range (pg_bytes 0: not paged), its nvme
     * extent, where it is (PG_*), whether it changed since it last landed
     * on nvme, the next paged entry in step order, and a failed write-back
     * said at the next prepare */
    uint8_t *pg_base;
    size_t pg_bytes;
    void *pg_ext;
    int pg_where;
    bool pg_dirty, pg_write_failed;
    int pg_next;
    strata_io pg_io;
    uint64_t pg_kind[STRATA_LEDGER_KINDS];
    char pg_why[200];
} eng_entry;

enum { PG_OUT, PG_READING, PG_IN, PG_WRITING };

typedef struct eng_block {
    eng_group *grp;
    eng_entry *ent;
    int rb;          /* index in the group's registry */
    int b;           /* index within the entry's state */
    strata_precond_block info;
    bool on_nvme;
    size_t nvme_bytes;
    eng_slot *slots;
    int installed_slot;
    unsigned have;
    /* nvme placement (streamed residency): the pool buffers holding the
     * installed result and a staged due result (-1: none), how the family
     * uses the installed one (RES_*), and where the family was last pointed */
    int inst_rb, stage_rb;
    int res_mode;
    const void *lent;
    int computer;      /* HSDP: the replica that refreshes it; -1: every replica its own */
    int n_unshipped;   /* HSDP: refresh points begun and not yet shipped, ascending */
    int64_t unshipped[SHIP_MAX];
    /* stream seam, device_roots: the installed result in dev[dev_cur]; a
     * result staged (or being staged) in dev[1 - dev_cur] */
    bool on_device;
    void *dev[2];
    int dev_cur;
    int64_t dev_version[2];        /* version staged into dev[i], -1: none */
    int dev_slot[2];               /* the slot it was copied from */
    strata_event *ev_stage[2];     /* shadow: the copy into dev[i] is done */
    strata_event *ev_release[2];   /* training: dev[i] is no longer read */
    strata_event *snap_wait;       /* training must wait on it before the factors change */
    /* chained groups (precond.h chain_in): the base the next refresh
     * continues from (slot layout; valid once a job or a restore wrote it,
     * else the snapshot's copy of the installed result is the base), and
     * the job submitted last (the next one's predecessor); `chain`: this
     * block chains (its group does and its state does, precond.h `chains`) */
    bool chain;
    void *head;
    atomic_bool head_valid; /* written by the jobs (true; release) and restore (no job in
                               flight); read by the jobs and the snapshot (acquire) */
    int last_slot;
    int64_t last_version;
} eng_block;

/* The residency pool's buffers (nvme placement; training thread only). */
typedef struct eng_rbuf {
    void *mem;
    struct eng_block *owner; /* NULL: free */
    bool valid;       /* holds owner's bytes (its read landed) */
    bool pending;     /* a read into it is in flight */
    int64_t version;  /* a staged buffer: the refresh point it holds or is reading */
    strata_io io;
    uint64_t used;    /* tick of its last use (least recently used evicted first) */
    int64_t keep;     /* wanted by step `keep`: a prefetch evicts only keep < t */
    int pin;          /* in use now (not evictable) */
} eng_rbuf;

enum { RES_COPY, RES_REBIND, RES_STICKY };

struct strata_refresh {
    strata_refresh_config cfg;
    eng_rbuf *rbufs;          /* the residency pool (nvme placement) */
    int n_rbufs;
    size_t rbuf_bytes;        /* each buffer: the largest nvme slot */
    uint64_t rtick;
    int64_t resident_reads, resident_prefetches, resident_evictions, resident_writebacks;
    strata_ledger_hold held;  /* what the engine charged to cfg.ledger */
    char *nvme_dir;
    bool committed;
    eng_entry *entries;
    int n_entries, cap_entries;
    eng_group *groups;
    int n_groups;
    eng_block *blocks;
    int n_blocks;
    strata_worker_pool *pool;
    int n_workers;
    strata_tier *host, *nvme;
    void **worker_scratch; /* per worker (nvme jobs): max slot bytes */
    size_t scratch_bytes;
    void *staging;         /* snapshots bound for nvme */
    double *inline_work;
    int *inline_iwork;
    int64_t jobs_submitted;
    _Atomic int64_t refreshes, refresh_failures, refresh_retries;
    _Atomic int64_t refresh_newton, refresh_fallbacks;
    _Atomic uint64_t snapshot_bytes;
    _Atomic int64_t io_errors;
    int64_t blocks_computed, blocks_received; /* training thread */
    uint64_t ship_intra, ship_inter;
    void *ship_buf;        /* HSDP: one block's shipped result, header first (host tier) */
    size_t ship_bytes;
    /* stream seam (cfg.be) */
    strata_stream *shadow;
    strata_event *ev_factors; /* training: the factors a snapshot copies are final */
    int64_t stream_snapshots, stream_stages, stream_stages_early, stream_installs,
        stream_waits;
    uint64_t stream_wait_bytes;
    /* the training stream's blocking waits on the shadow stream, timed with
     * a ring of timing-event pairs (none: the backend has no timing events) */
    strata_event *wait_t0[WAIT_TIMERS], *wait_t1[WAIT_TIMERS];
    bool wait_pending[WAIT_TIMERS];
    int n_wait_timers;             /* 0 or WAIT_TIMERS */
    int64_t stream_blocking_waits; /* training-stream waits on incomplete shadow work */
    int64_t stream_waits_timed, stream_waits_untimed;
    double stream_wait_seconds;    /* the timed waits, summed */
    double critical_seconds; /* training thread only (strata_refresh_critical_seconds) */
    /* failed snapshots at refresh points (previous result kept), and whether
     * the first was logged */
    int64_t snapshot_failures;
    bool warned_snapshot;
    /* testing: the next inject_snapshot refresh points fail as a failed nvme
     * write would (training thread); jobs of entry `hold` (-1: every entry,
     * HOLD_NONE: none) wait before they run */
    int inject_snapshot;
    _Atomic int hold;
    /* the stale-correction valve (cfg.stale_correction; training thread) */
    float *corr_work;      /* the families' correct() workspace, backend memory */
    size_t corr_bytes;
    int64_t stale_waits_avoided, stale_corrections, stale_refused, stale_refreshes_skipped;
    int64_t stale_max_corrected;
    /* state paging (training thread) */
    int pg_first, pg_last;    /* first and last paged entry (-1: none) */
    int32_t paged_params;
    uint64_t paged_bytes;
    int64_t page_reads, page_reads_waited, page_writes;
};

#define HOLD_NONE (-2)

static size_t align4k(size_t x)
{
    return (x + 4095) / 4096 * 4096;
}

/* Wait for an nvme request whose memory is about to be reused or freed: a
 * TIMEOUT leaves it in flight (the kernel may still write into it), so keep
 * waiting, with a warning each wait_timeout_s. */
static strata_status io_wait_landed(strata_refresh *e, strata_io *io)
{
    strata_status st;
    while ((st = strata_tier_io_wait(e->nvme, io, e->cfg.wait_timeout_s)) == STRATA_ERR_TIMEOUT)
        strata_logf(e->cfg.log, STRATA_LOG_WARN, "tiers", "%s; still waiting",
                    strata_last_error());
    return st;
}

static void add_counters(strata_refresh *e, const strata_optim_counters *c)
{
    atomic_fetch_add(&e->refreshes, c->root_refreshes);
    atomic_fetch_add(&e->refresh_failures, c->root_failures);
    atomic_fetch_add(&e->refresh_retries, c->root_retries);
    atomic_fetch_add(&e->refresh_newton, c->root_newton);
    atomic_fetch_add(&e->refresh_fallbacks, c->root_fallbacks);
}

/* The training thread spent [since, now) on second-order state: add it to
 * the critical path. Returns now. */
static double critical_add(strata_refresh *e, double since)
{
    const double now = strata_now_seconds();
    e->critical_seconds += now - since;
    return now;
}

/* A family's own second-order work inside before/apply/after on the
 * training thread (SOAP's and KL-Shampoo's first eigenbasis, computed
 * synchronously at step 1, counted by the family in seconds_roots since
 * `roots_before`) is on the critical path too. */
static void family_roots_critical(strata_refresh *e, const strata_optim_counters *cnt,
                                  double roots_before)
{
    if (cnt && cnt->seconds_roots > roots_before)
        e->critical_seconds += cnt->seconds_roots - roots_before;
}

/* ---- state paging (cfg.page_state; training thread)
 *
 * A paged entry's state (the page-aligned part of its family's page_range:
 * the partial pages at either end, which the allocator may share, stay
 * resident) is in one of four places:
 *   PG_OUT      on nvme only; its pages dropped (MADV_DONTNEED: they read
 *               as zeros until the read lands); the ledger counts its bytes
 *               in the NVME tier;
 *   PG_READING  a read from its extent into its own memory in flight;
 *   PG_IN       resident (pg_dirty: changed since it last landed on nvme);
 *   PG_WRITING  a write-back in flight; still resident until it lands.
 * Life of a step t: prepare waits for the write-backs still in flight (a
 * failed one keeps the state resident and dirty, nothing lost, and is said
 * as STRATA_ERR_IO by that entry's next prepare, before anything changes);
 * the step of entry i lets every other resident state go (a clean one is
 * dropped, a write in flight waited for first), keeping i and the next
 * paged entry in step order (pg_next, wrapping to the first: the next
 * step's first), starts the read of that next one, waits for i's own read
 * (started by the step before, else now: counted in page_reads_waited; a
 * failed read is tried once more, then the step fails with STRATA_ERR_IO
 * before the family touches anything), runs the step and starts i's
 * write-back. So at most two states are resident besides a write landing.
 * The extent always holds the state's last written bytes; a state's memory
 * never moves (the families keep their pointers), and the refresh workers
 * never read it: a refresh reads only its slot, which the snapshot filled
 * on the training thread while the state was resident (precond.h). */

static strata_status nvme_open(strata_refresh *e)
{
    if (e->nvme)
        return STRATA_OK;
    strata_nvme_config nc;
    strata_nvme_config_default(&nc);
    nc.dir = e->cfg.nvme_dir;
    nc.budget = e->cfg.nvme_budget;
    nc.queue_depth = e->cfg.nvme_queue_depth;
    if (e->cfg.nvme_chunk_bytes)
        nc.chunk_bytes = e->cfg.nvme_chunk_bytes;
    nc.log = e->cfg.log;
    const strata_status st = strata_tier_nvme_create(&nc, &e->nvme);
    if (st == STRATA_OK)
        strata_ledger_hold_add(&e->held, e->cfg.ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_STAGING, (size_t)nc.queue_depth * nc.chunk_bytes);
    return st;
}

/* Move en's paged bytes, kind by kind, to the NVME tier (out) or back to
 * the DEVICE tier its family charged them to. */
static void page_ledger(strata_refresh *e, const eng_entry *en, bool out)
{
    const int from = out ? STRATA_LEDGER_DEVICE : STRATA_LEDGER_NVME;
    const int to = out ? STRATA_LEDGER_NVME : STRATA_LEDGER_DEVICE;
    for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
        if (en->pg_kind[k]) {
            strata_ledger_add(e->cfg.ledger, from, k, -(int64_t)en->pg_kind[k]);
            strata_ledger_add(e->cfg.ledger, to, k, (int64_t)en->pg_kind[k]);
        }
}

/* Drop a resident, clean state's pages: it is OUT. */
static void page_drop(strata_refresh *e, eng_entry *en)
{
    /* Anonymous private memory: the dropped pages read as zeros and are
     * filled again by the read, at the same addresses. */
    if (madvise(en->pg_base, en->pg_bytes, MADV_DONTNEED) != 0)
        strata_logf(e->cfg.log, STRATA_LOG_WARN, "tiers",
                    "'%s': madvise(MADV_DONTNEED) of its paged state failed: %s (it stays "
                    "resident in fact; the ledger counts it on nvme)",
                    en->name, strerror(errno));
    en->pg_where = PG_OUT;
    page_ledger(e, en, true);
}

/* A write-back in flight lands: resident and clean, or (failed) resident,
 * dirty and said at the next prepare. */
static void page_write_landed(strata_refresh *e, eng_entry *en)
{
    const strata_status st = io_wait_landed(e, &en->pg_io);
    en->pg_where = PG_IN;
    if (st == STRATA_OK) {
        en->pg_dirty = false;
        return;
    }
    atomic_fetch_add(&e->io_errors, 1);
    en->pg_write_failed = true;
    snprintf(en->pg_why, sizeof en->pg_why, "%s", strata_last_error());
}

static strata_status page_read_start(strata_refresh *e, eng_entry *en)
{
    page_ledger(e, en, false);
    const strata_status st =
        strata_tier_read_async(e->nvme, en->pg_ext, 0, en->pg_base, en->pg_bytes, &en->pg_io);
    if (st != STRATA_OK) {
        page_ledger(e, en, true);
        atomic_fetch_add(&e->io_errors, 1);
        return st;
    }
    en->pg_where = PG_READING;
    e->page_reads++;
    return STRATA_OK;
}

/* Wait for en's read: resident and clean, or back OUT (counted). */
static strata_status page_read_landed(strata_refresh *e, eng_entry *en)
{
    const strata_status st = io_wait_landed(e, &en->pg_io);
    if (st == STRATA_OK) {
        en->pg_where = PG_IN;
        en->pg_dirty = false;
        return STRATA_OK;
    }
    atomic_fetch_add(&e->io_errors, 1);
    en->pg_where = PG_OUT;
    page_ledger(e, en, true);
    return st;
}

/* Let every resident state go but keep_a's and keep_b's (-1: none), which
 * stay resident (a write in flight lands first). */
static void page_settle(strata_refresh *e, int keep_a, int keep_b)
{
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *en = &e->entries[i];
        if (!en->pg_bytes || en->pg_where == PG_OUT)
            continue;
        const bool keep = i == keep_a || i == keep_b;
        if (en->pg_where == PG_WRITING)
            page_write_landed(e, en);
        else if (en->pg_where == PG_READING && !keep)
            (void)page_read_landed(e, en); /* unwanted: a failure only leaves it OUT */
        if (!keep && en->pg_where == PG_IN && !en->pg_dirty)
            page_drop(e, en);
    }
}

/* strata_refresh_add: page a new entry's state out at once, so that at most
 * one state is resident while the runtime creates them. */
static strata_status page_add(strata_refresh *e, eng_entry *en, int id)
{
    void *data = NULL;
    uint64_t kinds[STRATA_LEDGER_KINDS];
    const size_t bytes = en->fam->page_range(en->state, &data, kinds);
    long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = ps >= 4096 ? (uintptr_t)ps : 4096;
    const uintptr_t lo = ((uintptr_t)data + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)data + bytes) / page * page;
    if (!data || bytes < 2 * page || hi <= lo)
        return STRATA_OK; /* under two pages: stays resident (the planner's rule too) */
    strata_status st = nvme_open(e);
    if (st != STRATA_OK)
        return st;
    const size_t n = hi - lo;
    char why[256];
    st = strata_tier_alloc(e->nvme, n, &en->pg_ext);
    if (st != STRATA_OK) {
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "page_state: '%s': no nvme space for its %.1f MiB of state: %s",
                            en->name, (double)n / 1048576.0, why);
    }
    st = strata_tier_write(e->nvme, en->pg_ext, 0, (void *)lo, n);
    if (st != STRATA_OK) {
        snprintf(why, sizeof why, "%s", strata_last_error());
        strata_tier_free(e->nvme, en->pg_ext, n);
        en->pg_ext = NULL;
        return strata_error(st, "page_state: '%s': writing its state to the nvme tier: %s",
                            en->name, why);
    }
    en->pg_base = (uint8_t *)lo;
    en->pg_bytes = n;
    /* The ledger moves the state's whole charge: the partial end pages
     * (under two pages) stay resident uncounted. */
    memcpy(en->pg_kind, kinds, sizeof kinds);
    en->pg_where = PG_IN;
    en->pg_next = -1;
    if (e->pg_last >= 0)
        e->entries[e->pg_last].pg_next = id;
    else
        e->pg_first = id;
    e->pg_last = id;
    e->paged_params++;
    e->paged_bytes += n;
    e->page_writes++;
    page_drop(e, en);
    return STRATA_OK;
}

/* Make entry id's state resident, keeping it and `nx` (-1: none) and
 * letting every other resident state go; nx's read is started ahead. A
 * read that fails is tried once more; STRATA_ERR_IO (the reason in why)
 * when the state is still not resident. */
static strata_status page_resident(strata_refresh *e, int id, int nx, char *why, size_t n)
{
    eng_entry *en = &e->entries[id];
    page_settle(e, id, nx);
    if (nx >= 0 && nx != id) {
        eng_entry *next = &e->entries[nx];
        if (next->pg_where == PG_OUT && page_read_start(e, next) != STRATA_OK)
            strata_error_clear(); /* counted; read again when needed */
    }
    strata_status st = STRATA_OK;
    if (en->pg_where == PG_READING)
        st = page_read_landed(e, en);
    for (int tries = 0; en->pg_where == PG_OUT && tries < 2; tries++) {
        e->page_reads_waited++;
        st = page_read_start(e, en);
        if (st == STRATA_OK)
            st = page_read_landed(e, en);
    }
    if (en->pg_where == PG_IN)
        return STRATA_OK;
    snprintf(why, n, "%s", st != STRATA_OK ? strata_last_error() : "no read");
    return STRATA_ERR_IO;
}

/* Before entry `id`'s step: keep it and the next paged entry, start reading
 * that one, and make id's state resident. */
static strata_status page_in(strata_refresh *e, int id)
{
    eng_entry *en = &e->entries[id];
    const int nx = en->pg_next >= 0 ? en->pg_next : e->pg_first;
    char why[256];
    if (page_resident(e, id, nx, why, sizeof why) != STRATA_OK)
        return strata_error(STRATA_ERR_IO,
                            "'%s': its paged state could not be read back from the nvme tier "
                            "(%s); its weights and state are untouched (the parameters before "
                            "it in this step were updated)",
                            en->name, why);
    return STRATA_OK;
}

/* After entry `id`'s step: start its write-back (it lands at the next
 * settle). A write that cannot be submitted keeps it resident and dirty. */
static void page_out(strata_refresh *e, eng_entry *en)
{
    en->pg_dirty = true;
    const strata_status st =
        strata_tier_write_async(e->nvme, en->pg_ext, 0, en->pg_base, en->pg_bytes, &en->pg_io);
    if (st != STRATA_OK) {
        atomic_fetch_add(&e->io_errors, 1);
        en->pg_write_failed = true;
        snprintf(en->pg_why, sizeof en->pg_why, "%s", strata_last_error());
        return;
    }
    en->pg_where = PG_WRITING;
    e->page_writes++;
}

/* strata_refresh_prepare: the write-backs in flight land (id's stays
 * resident: its step follows); a failed one of id is said now. */
static strata_status page_prepare(strata_refresh *e, int id)
{
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *o = &e->entries[i];
        if (o->pg_bytes && o->pg_where == PG_WRITING) {
            page_write_landed(e, o);
            if (i != id && o->pg_where == PG_IN && !o->pg_dirty && i != e->entries[id].pg_next)
                page_drop(e, o);
        }
    }
    eng_entry *en = &e->entries[id];
    if (!en->pg_write_failed)
        return STRATA_OK;
    en->pg_write_failed = false;
    return strata_error(STRATA_ERR_IO,
                        "'%s': its paged state stayed in host memory, nothing lost (its "
                        "write-back to nvme failed: %s; written again after its next step)",
                        en->name, en->pg_why);
}

/* ---- create / add */

strata_status strata_refresh_create(const strata_refresh_config *c, strata_refresh **out)
{
    if (!c || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_create: NULL argument");
    *out = NULL;
    if (c->staleness < 0 || c->sync_steps < 0 || c->workers < 0 || !(c->wait_timeout_s > 0.0) ||
        c->worker_delay_us < 0 || (c->mode != STRATA_COH_FIXED && c->mode != STRATA_COH_EAGER))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "async needs staleness >= 0, workers >= 0, wait_timeout_s > 0 and a "
                            "known install mode");
    if (c->results_tier != STRATA_TIER_HOST && c->results_tier != STRATA_TIER_NVME)
        return strata_error(STRATA_ERR_INVALID_ARG, "roots_tier must be host or nvme");
    if (c->results_tier == STRATA_TIER_NVME && !c->nvme_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "the nvme roots tier needs nvme_dir");
    if (c->page_state && !c->nvme_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "page_state needs the nvme tier (nvme_dir)");
    if (c->nvme_dir && c->nvme_queue_depth < 8)
        return strata_error(STRATA_ERR_INVALID_ARG, "nvme_queue_depth %d must be >= 8",
                            c->nvme_queue_depth);
    if (c->stale_correction && (!c->async || c->results_tier != STRATA_TIER_HOST ||
                                c->nvme_dir || c->replicas || !c->be))
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "stale_correction applies to the asynchronous runtime (async) with "
                            "results in the host tier, no nvme tier and no HSDP replica set: a "
                            "synchronous step never waits, an nvme result is read back before "
                            "use and a replica's result is shipped, so there is no installed "
                            "result to correct in place");
    strata_refresh *e = calloc(1, sizeof *e);
    if (!e)
        return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
    e->cfg = *c;
    atomic_init(&e->hold, HOLD_NONE);
    e->pg_first = e->pg_last = -1;
    if (c->nvme_dir) {
        e->nvme_dir = strdup(c->nvme_dir);
        if (!e->nvme_dir) {
            free(e);
            return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
        }
        e->cfg.nvme_dir = e->nvme_dir;
    }
    *out = e;
    return STRATA_OK;
}

strata_status strata_refresh_add(strata_refresh *e, const strata_precond_family *fam,
                                 void *state, const void *fam_cfg, int offset, int layer,
                                 const char *name, int *id)
{
    if (!e || !fam || !state || !fam_cfg || !name)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_add: NULL argument");
    if (e->committed)
        return strata_error(STRATA_ERR_STATE, "refresh_add('%s'): engine committed", name);
    if (e->n_entries == e->cap_entries) {
        int cap = e->cap_entries ? 2 * e->cap_entries : 32;
        eng_entry *ne = realloc(e->entries, (size_t)cap * sizeof *ne);
        if (!ne)
            return strata_error(STRATA_ERR_NOMEM, "refresh_add: out of memory");
        e->entries = ne;
        e->cap_entries = cap;
    }
    eng_entry *en = &e->entries[e->n_entries];
    memset(en, 0, sizeof *en);
    en->fam = fam;
    en->state = state;
    en->layer = layer;
    en->offset = offset;
    en->name = strdup(name);
    en->cfg = malloc(fam->cfg_size);
    if (!en->name || !en->cfg) {
        free(en->name);
        free(en->cfg);
        return strata_error(STRATA_ERR_NOMEM, "refresh_add: out of memory");
    }
    memcpy(en->cfg, fam_cfg, fam->cfg_size);
    const int me = e->n_entries;
    if (id)
        *id = me;
    e->n_entries++;
    if (e->cfg.page_state && fam->page_range && fam->has_refresh && fam->has_refresh(fam_cfg))
        return page_add(e, en, me);
    return STRATA_OK;
}

/* ---- jobs */

/* The refresh of (block, slot): on a worker (async) or inline. A job of an
 * nvme block reads its snapshot into the worker's scratch, refreshes there
 * and writes the result back. */
static strata_status job_compute(strata_refresh *e, eng_block *blk, int k, double *work,
                                 int *iwork, void *scratch)
{
    eng_slot *slot = &blk->slots[k];
    void *buf = slot->buf;
    const size_t bytes = blk->info.slot_bytes;
    strata_status st = STRATA_OK;
    if (blk->on_nvme) {
        st = io_wait_landed(e, &slot->io); /* submitted by the training thread */
        buf = scratch;
        if (st == STRATA_OK)
            st = strata_tier_read(e->nvme, slot->nvme, 0, buf, bytes);
        if (st != STRATA_OK) {
            atomic_fetch_add(&e->io_errors, 1);
            return st;
        }
    }
    const strata_precond_family *f = blk->ent->fam;
    const bool chain = blk->chain && blk->head;
    if (chain && atomic_load_explicit(&blk->head_valid, memory_order_acquire))
        /* continue from the refresh before this one */
        f->chain_in(blk->ent->state, blk->b, buf, blk->head);
    strata_optim_counters lc = {0};
    unsigned failed = 0;
    st = f->refresh(blk->ent->state, blk->b, buf, work, iwork, &failed, &lc);
    slot->failed = failed;
    add_counters(e, &lc);
    if (st == STRATA_OK && blk->on_nvme) {
        st = strata_tier_write(e->nvme, slot->nvme, 0, buf, bytes);
        if (st != STRATA_OK) {
            atomic_fetch_add(&e->io_errors, 1);
            return st; /* FAILED: its base stays the chain's (the head unchanged) */
        }
    }
    /* The next refresh continues from what this slot will be worth at
     * install: its result, or (every part failed: FAILED) its base. */
    if (chain && (st == STRATA_OK || st == STRATA_ERR_LINALG)) {
        f->chain_out(blk->ent->state, blk->b, buf, failed, blk->head);
        atomic_store_explicit(&blk->head_valid, true, memory_order_release);
    }
    return st;
}

/* Testing (strata_refresh_hold_jobs): is this block's job held? */
static bool job_held(strata_refresh *e, const eng_block *blk)
{
    const int h = atomic_load_explicit(&e->hold, memory_order_acquire);
    return h == -1 || (h >= 0 && h == (int)(blk->ent - e->entries));
}

static strata_status job_run(strata_job *j, strata_worker_ctx *w)
{
    eng_job *job = j->user;
    strata_refresh *e = job->e;
    while (job_held(e, job->blk))
        usleep(500);
    strata_coh_mark_computing(job->blk->grp->reg, job->blk->rb, job->slot);
    /* Chained: the predecessor was popped first (its deadline is earlier),
     * so it runs or has run; its chain_out comes before its completion. */
    if (job->pred_slot >= 0)
        while (strata_coh_wait_done(job->blk->grp->reg, job->blk->rb, job->pred_slot,
                                    job->pred_version, e->cfg.wait_timeout_s) ==
               STRATA_ERR_TIMEOUT)
            strata_logf(e->cfg.log, STRATA_LOG_WARN, "async",
                        "'%s' block %d: a refresh waits for refresh %lld, which it "
                        "continues; still waiting",
                        job->blk->ent->name, job->blk->b, (long long)job->pred_version);
    eng_slot *slot = &job->blk->slots[job->slot];
    if (slot->snap_queued) { /* the snapshot's copies on the shadow stream */
        strata_status st = strata_backend_event_synchronize(slot->ev_snap);
        if (st != STRATA_OK)
            return st;
    }
    return job_compute(e, job->blk, job->slot, w->work, w->iwork,
                       e->worker_scratch ? e->worker_scratch[w->index] : NULL);
}

static void job_done(strata_job *j, strata_status st)
{
    eng_job *job = j->user;
    strata_coh_complete(job->blk->grp->reg, job->blk->rb, job->slot, st == STRATA_OK);
}

/* ---- HSDP: one refresh per replica set, shipped (refresh.h) */

static bool receives(const strata_refresh *e, const eng_block *blk)
{
    return blk->computer >= 0 && blk->computer != strata_replicas_index(e->cfg.replicas);
}

/* The byte ranges of a block's installed result (parts, then aux) and
 * their total; *n gets the count. */
static size_t ship_ranges(const strata_precond_block *bi, size_t off[], size_t len[], int *n)
{
    size_t total = 0;
    int m = 0;
    for (int p = 0; p < bi->n_parts; p++)
        if (bi->part_bytes[p]) {
            off[m] = bi->part_offset[p];
            len[m] = bi->part_bytes[p];
            total += len[m++];
        }
    if (bi->aux_bytes) {
        off[m] = bi->aux_offset;
        len[m] = bi->aux_bytes;
        total += len[m++];
    }
    *n = m;
    return total;
}

/* The computing replica of every block: greedy LPT over the G replicas on
 * slot_bytes^1.5 (the refresh is O(n^3) in a side of n, the slot O(n^2)).
 * Every replica has the same blocks in the same order, so every replica
 * computes the same assignment. A block whose result the transport cannot
 * move as float32 words, or that needs more than SHIP_MAX slots, keeps
 * being refreshed by every replica. */
/* strata_tier_alloc, charged to the ledger as `kind` at what the tier
 * charges its budget (page- or block-rounded); destroy releases it. */
static strata_status tier_alloc_charged(strata_refresh *e, strata_tier *t, size_t bytes, int kind,
                                        void **out)
{
    strata_status st = strata_tier_alloc(t, bytes, out);
    if (st == STRATA_OK)
        strata_ledger_hold_add(&e->held, e->cfg.ledger, strata_tier_ledger_tier(t), kind,
                               strata_tier_charge_size(t, bytes));
    return st;
}

static strata_status assign_computers(strata_refresh *e)
{
    const int G = strata_replicas_count(e->cfg.replicas);
    for (int i = 0; i < e->n_blocks; i++)
        e->blocks[i].computer = -1;
    if (!e->cfg.replicas || G < 2 || e->n_blocks == 0)
        return STRATA_OK;
    double *cost = malloc((size_t)e->n_blocks * sizeof *cost);
    int *idx = malloc((size_t)e->n_blocks * sizeof *idx);
    int *assign = malloc((size_t)e->n_blocks * sizeof *assign);
    strata_status st = cost && idx && assign
                           ? STRATA_OK
                           : strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
    int n = 0;
    for (int i = 0; i < e->n_blocks && st == STRATA_OK; i++) {
        const eng_block *blk = &e->blocks[i];
        size_t off[STRATA_PRECOND_MAX_PARTS + 1], len[STRATA_PRECOND_MAX_PARTS + 1];
        int nr;
        const size_t ship = 16 + ship_ranges(&blk->info, off, len, &nr);
        if (ship % 4 != 0 || blk->grp->n_slots > SHIP_MAX)
            continue;
        e->ship_bytes = ship > e->ship_bytes ? ship : e->ship_bytes;
        idx[n] = i;
        cost[n] = pow((double)blk->info.slot_bytes, 1.5);
        n++;
    }
    if (st == STRATA_OK && n > 0)
        st = strata_plan_lpt(cost, n, G, assign, NULL);
    for (int j = 0; j < n && st == STRATA_OK; j++)
        e->blocks[idx[j]].computer = assign[j];
    if (st == STRATA_OK && n > 0) /* the broadcast buffer of one block's result */
        st = tier_alloc_charged(e, e->host, e->ship_bytes, STRATA_LEDGER_COMM, &e->ship_buf);
    free(cost);
    free(idx);
    free(assign);
    return st;
}

/* Refresh point `version` of a shipped block began (slot reserved): it is
 * shipped when due. */
static strata_status ship_note(eng_block *blk, int64_t version, int k)
{
    if (blk->n_unshipped == SHIP_MAX) {
        strata_coh_abort_refresh(blk->grp->reg, blk->rb, k);
        return strata_error(STRATA_ERR_INTERNAL,
                            "'%s' block %d: %d refreshes in flight, none shipped",
                            blk->ent->name, blk->b, SHIP_MAX);
    }
    blk->unshipped[blk->n_unshipped++] = version;
    return STRATA_OK;
}

/* Ship the oldest unshipped refresh of `blk` (collective of the replica
 * set): one broadcast of [refresh point (lo, hi), ok, failed-part bits |
 * the installed result's ranges]. The computing replica waits for its job
 * first; a receiver fills its reserved slot and completes it as the job
 * completed (READY or FAILED), so the next acquire does the same on every
 * replica. The computing replica broadcasts even after its own wait failed,
 * so that no receiver waits forever: a wait that ran out (or, not patient,
 * a failed nvme read) puts the refresh back on every replica's unshipped
 * list and every replica returns that error; any other failure ships
 * ok = 0 (every replica keeps its previous result).
 * `patient` (a result the step's second pass needs, refreshed in this very
 * step: the factors already absorbed G) waits on past wait_timeout_s, with
 * a warning each time, as io_wait_landed does. */
#define SHIP_LATER 100u /* hdr[2]: not shipped now (plus the computing replica's status) */

/* Put refresh point v back at the head of the block's unshipped list. */
static void ship_requeue(eng_block *blk, int64_t v)
{
    memmove(blk->unshipped + 1, blk->unshipped, (size_t)blk->n_unshipped * sizeof *blk->unshipped);
    blk->unshipped[0] = v;
    blk->n_unshipped++;
}

static strata_status ship_one(strata_refresh *e, eng_block *blk, bool patient)
{
    const int64_t v = blk->unshipped[0];
    blk->n_unshipped--;
    memmove(blk->unshipped, blk->unshipped + 1, (size_t)blk->n_unshipped * sizeof *blk->unshipped);
    strata_coh_registry *reg = blk->grp->reg;
    const strata_precond_block *bi = &blk->info;
    size_t off[STRATA_PRECOND_MAX_PARTS + 1], len[STRATA_PRECOND_MAX_PARTS + 1];
    int nr;
    const size_t bytes = 16 + ship_ranges(bi, off, len, &nr);
    uint32_t *hdr = e->ship_buf;
    char *payload = (char *)e->ship_buf + 16;
    strata_coh_slot_state state = STRATA_SLOT_FREE;
    const int k = strata_coh_find(reg, blk->rb, v, &state);
    strata_status st = STRATA_OK;
    if (!receives(e, blk)) {
        while (k >= 0 && (st = strata_coh_wait_slot(reg, blk->rb, k, &state)) ==
                             STRATA_ERR_TIMEOUT &&
               patient)
            strata_logf(e->cfg.log, STRATA_LOG_WARN, "async", "%s; still waiting",
                        strata_last_error());
        /* Not patient (a step's first pass, a drain): a result not ready in
         * time, or not readable, is shipped again later, on every replica
         * alike (hdr[2] = SHIP_LATER + the status), and nothing changes. */
        bool later = st == STRATA_ERR_TIMEOUT;
        bool ok = st == STRATA_OK && k >= 0 && state == STRATA_SLOT_READY;
        const char *src = ok ? blk->slots[k].buf : NULL;
        if (ok && blk->on_nvme) {
            src = e->staging;
            st = strata_tier_read(e->nvme, blk->slots[k].nvme, 0, e->staging, bi->slot_bytes);
            if (st != STRATA_OK) {
                atomic_fetch_add(&e->io_errors, 1);
                ok = false;
                later = !patient;
                if (patient) { /* every replica keeps its previous result, this one too */
                    strata_coh_complete(reg, blk->rb, k, false);
                    st = STRATA_OK;
                }
            }
        }
        hdr[0] = (uint32_t)((uint64_t)v & 0xffffffffu);
        hdr[1] = (uint32_t)((uint64_t)v >> 32);
        hdr[2] = later ? SHIP_LATER + (uint32_t)st : ok;
        hdr[3] = k >= 0 ? blk->slots[k].failed : 0;
        size_t at = 0;
        for (int r = 0; r < nr; r++) {
            if (ok)
                memcpy(payload + at, src + off[r], len[r]);
            else
                memset(payload + at, 0, len[r]);
            at += len[r];
        }
        const strata_status sb = strata_replicas_broadcast(
            e->cfg.replicas, e->ship_buf, bytes, blk->computer, &e->ship_intra, &e->ship_inter);
        if (later)
            ship_requeue(blk, v);
        return st != STRATA_OK ? st : sb;
    }
    st = strata_replicas_broadcast(e->cfg.replicas, e->ship_buf, bytes, blk->computer,
                                   &e->ship_intra, &e->ship_inter);
    if (st != STRATA_OK)
        return st;
    const int64_t got = (int64_t)((uint64_t)hdr[0] | (uint64_t)hdr[1] << 32);
    if (k < 0 || state != STRATA_SLOT_PENDING || got != v)
        return strata_error(STRATA_ERR_INTERNAL,
                            "'%s' block %d: shipped refresh %lld, this replica expected %lld "
                            "(slot %d)",
                            blk->ent->name, blk->b, (long long)got, (long long)v, k);
    if (hdr[2] >= SHIP_LATER) {
        ship_requeue(blk, v);
        return strata_error((strata_status)(hdr[2] - SHIP_LATER),
                            "'%s' block %d: replica %d, which refreshes it, could not ship "
                            "refresh %lld in time (%s); shipped later",
                            blk->ent->name, blk->b, blk->computer, (long long)v,
                            strata_status_str((strata_status)(hdr[2] - SHIP_LATER)));
    }
    bool ok = hdr[2] != 0;
    if (ok) {
        char *dst = blk->on_nvme ? e->staging : blk->slots[k].buf;
        size_t at = 0;
        for (int r = 0; r < nr; r++) {
            memcpy(dst + off[r], payload + at, len[r]);
            at += len[r];
        }
        /* The rest of an nvme slot image is never read (install reads the ranges). */
        if (blk->on_nvme &&
            strata_tier_write(e->nvme, blk->slots[k].nvme, 0, dst, bi->slot_bytes) != STRATA_OK) {
            atomic_fetch_add(&e->io_errors, 1); /* counted as a failed refresh: previous kept */
            ok = false;
        }
    }
    blk->slots[k].failed = hdr[3];
    strata_coh_mark_computing(reg, blk->rb, k);
    strata_coh_complete(reg, blk->rb, k, ok);
    e->blocks_received += ok;
    return STRATA_OK;
}

/* Before the acquire of step t: ship every refresh of the entry's blocks
 * that step t's acquire may install (refresh points up to the due one; only
 * those already begun: the step's first pass ships all but the one that
 * step t itself begins, which the second pass ships, `patient`). */
static strata_status ship_due(strata_refresh *e, eng_entry *en, int64_t t, bool patient)
{
    strata_status st = STRATA_OK;
    for (int b = 0; b < en->n_blocks && st == STRATA_OK; b++) {
        eng_block *blk = &e->blocks[en->first_block + b];
        if (blk->computer < 0 || blk->n_unshipped == 0)
            continue;
        const int64_t due = strata_coh_block_due_version(blk->grp->reg, blk->rb, t);
        while (st == STRATA_OK && blk->n_unshipped > 0 && blk->unshipped[0] <= due)
            st = ship_one(e, blk, patient);
    }
    return st;
}

/* Every refresh still unshipped (a drain): in block order, oldest first. */
static strata_status ship_all(strata_refresh *e)
{
    strata_status st = STRATA_OK;
    for (int i = 0; i < e->n_blocks && st == STRATA_OK; i++)
        while (st == STRATA_OK && e->blocks[i].computer >= 0 && e->blocks[i].n_unshipped > 0)
            st = ship_one(e, &e->blocks[i], false);
    return st;
}

/* ---- commit */

static strata_status make_groups(strata_refresh *e)
{
    e->groups = calloc((size_t)e->n_entries + 1, sizeof *e->groups);
    if (!e->groups)
        return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *en = &e->entries[i];
        const strata_precond_family *f = en->fam;
        en->n_blocks = f->n_blocks(en->state);
        if (!f->has_refresh || !f->has_refresh(en->cfg) || en->n_blocks == 0)
            continue;
        strata_precond_schedule sch;
        f->schedule(en->cfg, &sch);
        const bool inl = !e->cfg.async || !f->async_capable(en->cfg);
        eng_group *g = NULL;
        for (int k = 0; k < e->n_groups && !g; k++) {
            eng_group *c = &e->groups[k];
            if (c->fam == f && c->inline_ == inl && c->sch.frequency == sch.frequency &&
                c->sch.start == sch.start && c->sch.lag == sch.lag)
                g = c;
        }
        if (!g) {
            g = &e->groups[e->n_groups++];
            g->fam = f;
            g->sch = sch;
            g->inline_ = inl;
            if (!inl && sch.max_staleness >= 0 && e->cfg.staleness > sch.max_staleness)
                return strata_error(STRATA_ERR_INVALID_ARG,
                                    "async %s needs staleness (%d) < precondition frequency (%d): "
                                    "%s",
                                    f->name, e->cfg.staleness, sch.frequency,
                                    sch.why_max ? sch.why_max : "");
        }
        en->grp = g;
        en->first_block = e->n_blocks;
        g->n_blocks += en->n_blocks;
        e->n_blocks += en->n_blocks;
    }
    return STRATA_OK;
}

/* How the family uses an nvme block's installed result (precond.h rebind). */
static int res_mode_of(const strata_refresh *e, const eng_block *blk)
{
    const strata_precond_family *f = blk->ent->fam;
    if ((e->cfg.be && e->cfg.device_roots && f->install_device) || f->install_copies)
        return RES_COPY; /* the family (or the device copy) keeps its own copy */
    return f->rebind ? RES_REBIND : RES_STICKY;
}

/* The residency pool's smallest size for a set of nvme blocks: every
 * sticky block's buffer, then one entry's buffers pinned through its apply
 * (lent results) and one more for the block being installed, at least two
 * (a staged result and the installed one it fills a failed part from). */
static int pool_min(int sticky, int max_entry)
{
    const int n = sticky + max_entry + 1;
    return n < sticky + 2 ? sticky + 2 : n;
}

int strata_refresh_pool_buffers(int sticky, int max_entry, int n_nvme, bool budgeted,
                                size_t spare)
{
    const int lo = pool_min(sticky, max_entry);
    const size_t cap = 2 * (size_t)(n_nvme > 0 ? n_nvme : 0);
    size_t n = budgeted ? (size_t)lo + (spare < cap ? spare : cap)
                        : (size_t)sticky + 2 * (size_t)max_entry + 2;
    n = n < cap ? n : cap;
    return n < (size_t)lo ? lo : (int)n;
}

strata_status strata_refresh_place_blocks(strata_place_block *b, int n, size_t budget,
                                          size_t fixed, bool host_results, bool have_nvme,
                                          size_t *planned)
{
    /* heads[i]: the chain heads of the async blocks from i on, were they all
     * on nvme (a head stays on host); remaining[i]: async blocks from i on */
    size_t *heads = calloc((size_t)n + 1, sizeof *heads);
    int *remaining = calloc((size_t)n + 1, sizeof *remaining);
    if (!heads || !remaining) {
        free(heads);
        free(remaining);
        return strata_error(STRATA_ERR_NOMEM, "placement: out of memory");
    }
    for (int i = n - 1; i >= 0; i--) {
        heads[i] = heads[i + 1] + (!b[i].inline_ && b[i].chain ? b[i].charge : 0);
        remaining[i] = remaining[i + 1] + !b[i].inline_;
    }
    size_t sum = 0;
    bool any_nvme = false;
    strata_status st = STRATA_OK;
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        const size_t head = b[i].chain ? b[i].charge : 0; /* the chain head, host always */
        const size_t k_slots = (size_t)b[i].n_slots * b[i].charge + head;
        b[i].on_nvme = false;
        if (b[i].inline_) {
            sum += k_slots;
            continue;
        }
        const bool host_ok =
            host_results &&
            (budget == 0 || !have_nvme ||
             sum + k_slots + heads[i + 1] + (any_nvme || remaining[i + 1] ? fixed : 0) <= budget);
        b[i].on_nvme = !host_ok;
        if (b[i].on_nvme && !have_nvme)
            st = strata_error(STRATA_ERR_INVALID_ARG, "async: results on nvme need an nvme tier");
        sum += b[i].on_nvme ? head : k_slots;
        any_nvme |= b[i].on_nvme;
    }
    free(heads);
    free(remaining);
    if (st != STRATA_OK)
        return st;
    if (any_nvme)
        sum += fixed;
    *planned = sum;
    if (budget && sum > budget && !have_nvme)
        return strata_error(STRATA_ERR_NOMEM,
                            "host budget of %.1f MiB cannot hold the preconditioner roots: they "
                            "need %.1f MiB, and there is no nvme tier to spill them to "
                            "(strata_config.nvme_dir unset)",
                            budget / 1048576.0, sum / 1048576.0);
    if (budget && sum > budget)
        return strata_error(STRATA_ERR_NOMEM,
                            "host budget of %.1f MiB cannot hold the preconditioner roots: they "
                            "need %.1f MiB even with every spillable block on nvme",
                            budget / 1048576.0, sum / 1048576.0);
    return STRATA_OK;
}

/* Placement (Asteria's asymmetric policy): results in the host tier; when
 * the host budget cannot hold a block's K slots, that block's slots go to the
 * nvme tier and its installed result streams through the residency pool
 * (the host pays the pool once, every worker a scratch buffer, the engine
 * one staging buffer). Decided up front so that the blocks placed later
 * still find room. Inline blocks stay on host. */
static strata_status place(strata_refresh *e)
{
    /* Host bytes as the host tier charges them (whole pages: 64 KiB on a
     * 64 KiB-page arm64 kernel), so that a plan that fits the budget never
     * fails at allocation. */
    size_t max_slot = 0;
    int sticky = 0, max_entry = 0;
    for (int i = 0; i < e->n_blocks; i++) {
        eng_block *blk = &e->blocks[i];
        blk->inst_rb = blk->stage_rb = -1;
        if (!blk->grp->inline_) {
            blk->res_mode = res_mode_of(e, blk);
            sticky += blk->res_mode == RES_STICKY;
            if (blk->info.slot_bytes > max_slot)
                max_slot = blk->info.slot_bytes;
        }
    }
    for (int i = 0; i < e->n_entries; i++)
        if (e->entries[i].grp && !e->entries[i].grp->inline_ &&
            e->entries[i].n_blocks > max_entry)
            max_entry = e->entries[i].n_blocks;
    /* Once any block is on nvme: every worker's scratch and the staging
     * buffer of snapshots bound for nvme, one largest slot each, and the
     * residency pool's smallest size (counted for every async block: the
     * placement is not known yet), charged in the host tier's pages. */
    const size_t buf = strata_tier_charge_size(e->host, max_slot);
    const size_t fixed =
        ((size_t)e->n_workers + 1 + (size_t)pool_min(sticky, max_entry)) * buf;
    const size_t budget = e->cfg.host_budget;
    strata_place_block *pb = calloc((size_t)e->n_blocks + 1, sizeof *pb);
    if (!pb)
        return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
    for (int i = 0; i < e->n_blocks; i++) {
        const eng_block *blk = &e->blocks[i];
        pb[i] = (strata_place_block){
            .charge = strata_tier_charge_size(e->host, blk->info.slot_bytes),
            .n_slots = blk->grp->n_slots, .chain = blk->chain,
            .inline_ = blk->grp->inline_};
    }
    size_t planned = 0;
    strata_status pst =
        strata_refresh_place_blocks(pb, e->n_blocks, budget, fixed,
                                    e->cfg.results_tier == STRATA_TIER_HOST, e->nvme != NULL,
                                    &planned);
    bool any_nvme = false;
    for (int i = 0; i < e->n_blocks; i++) {
        e->blocks[i].on_nvme = pb[i].on_nvme;
        any_nvme |= pb[i].on_nvme;
    }
    free(pb);
    if (pst != STRATA_OK)
        return pst;
    strata_status st = STRATA_OK;
    int n_nvme = 0;
    for (int i = 0; i < e->n_blocks && st == STRATA_OK; i++) {
        eng_block *blk = &e->blocks[i];
        const size_t bytes = blk->info.slot_bytes;
        if (!blk->on_nvme) {
            for (int k = 0; k < blk->grp->n_slots && st == STRATA_OK; k++)
                st = tier_alloc_charged(e, e->host, bytes, STRATA_LEDGER_ROOTS, &blk->slots[k].buf);
        } else {
            n_nvme++;
            blk->nvme_bytes = align4k(bytes);
            for (int k = 0; k < blk->grp->n_slots && st == STRATA_OK; k++)
                st = tier_alloc_charged(e, e->nvme, blk->nvme_bytes, STRATA_LEDGER_ROOTS,
                                        &blk->slots[k].nvme);
        }
        if (st == STRATA_OK && blk->chain)
            st = strata_tier_alloc(e->host, bytes, &blk->head);
    }
    if (st == STRATA_OK && any_nvme) {
        e->scratch_bytes = max_slot;
        e->worker_scratch = calloc((size_t)e->n_workers, sizeof *e->worker_scratch);
        if (!e->worker_scratch)
            return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
        for (int w = 0; w < e->n_workers && st == STRATA_OK; w++)
            st = tier_alloc_charged(e, e->host, max_slot, STRATA_LEDGER_WORKSPACE,
                                    &e->worker_scratch[w]);
        if (st == STRATA_OK)
            st = tier_alloc_charged(e, e->host, max_slot, STRATA_LEDGER_STAGING, &e->staging);
        /* planned <= budget (above): what it leaves goes to the pool */
        const int n = strata_refresh_pool_buffers(sticky, max_entry, n_nvme, budget != 0,
                                                  budget ? (budget - planned) / buf : 0);
        e->rbufs = calloc((size_t)n, sizeof *e->rbufs);
        if (!e->rbufs && st == STRATA_OK)
            return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
        e->rbuf_bytes = max_slot;
        for (int r = 0; r < n && st == STRATA_OK; r++) {
            st = tier_alloc_charged(e, e->host, max_slot, STRATA_LEDGER_ROOTS, &e->rbufs[r].mem);
            if (st == STRATA_OK)
                e->n_rbufs++;
        }
    }
    return st;
}

/* The stream seam (cfg.be): the shadow stream, the training stream's
 * factors event, a snapshot event per slot, and for device_roots blocks two
 * device result buffers with their stage/release events. */
static strata_status seam_create(strata_refresh *e)
{
    strata_backend *be = e->cfg.be;
    if (!be)
        return STRATA_OK;
    strata_status st = strata_backend_stream_create(be, STRATA_STREAM_SHADOW, &e->shadow);
    if (st == STRATA_OK)
        st = strata_backend_event_create(be, &e->ev_factors);
    /* timing pairs for the training stream's waits, where the backend has them */
    if (st == STRATA_OK) {
        strata_event *probe = NULL;
        if (strata_backend_timing_event_create(be, &probe) == STRATA_OK) {
            strata_backend_event_destroy(probe);
            for (int k = 0; k < WAIT_TIMERS && st == STRATA_OK; k++) {
                st = strata_backend_timing_event_create(be, &e->wait_t0[k]);
                if (st == STRATA_OK)
                    st = strata_backend_timing_event_create(be, &e->wait_t1[k]);
            }
            if (st == STRATA_OK)
                e->n_wait_timers = WAIT_TIMERS;
        }
    }
    for (int i = 0; i < e->n_blocks && st == STRATA_OK; i++) {
        eng_block *blk = &e->blocks[i];
        for (int k = 0; k < blk->grp->n_slots && st == STRATA_OK; k++)
            st = strata_backend_event_create(be, &blk->slots[k].ev_snap);
        blk->on_device = e->cfg.device_roots && blk->ent->fam->install_device;
        blk->dev_version[0] = blk->dev_version[1] = -1;
        blk->dev_slot[0] = blk->dev_slot[1] = -1;
        for (int d = 0; d < 2 && st == STRATA_OK && blk->on_device; d++) {
            st = strata_backend_alloc(be, blk->info.slot_bytes, &blk->dev[d]);
            if (st == STRATA_OK)
                strata_ledger_hold_add(&e->held, e->cfg.ledger, STRATA_LEDGER_DEVICE,
                                       STRATA_LEDGER_ROOTS, blk->info.slot_bytes);
            if (st == STRATA_OK)
                st = strata_backend_event_create(be, &blk->ev_stage[d]);
            if (st == STRATA_OK)
                st = strata_backend_event_create(be, &blk->ev_release[d]);
        }
    }
    return st;
}

/* Completed timing pairs into stream_wait_seconds; with `block`, wait for
 * the pending ones first (drain, destroy). */
static void wait_timers_harvest(strata_refresh *e, bool block)
{
    for (int k = 0; k < e->n_wait_timers; k++) {
        if (!e->wait_pending[k])
            continue;
        if (block)
            (void)strata_backend_event_synchronize(e->wait_t1[k]);
        bool done = false;
        double sec = 0.0;
        if (strata_backend_event_elapsed(e->wait_t0[k], e->wait_t1[k], &done, &sec) !=
            STRATA_OK) {
            e->wait_pending[k] = false; /* not measured: counted untimed */
            e->stream_waits_timed--;
            e->stream_waits_untimed++;
            continue;
        }
        if (done) {
            e->stream_wait_seconds += sec > 0.0 ? sec : 0.0;
            e->wait_pending[k] = false;
        }
    }
}

/* The training stream waits for shadow-stream event `ev` that has not
 * completed (issue #20: measured with events, not estimated from bytes):
 * timing events before and after the wait on the training stream give the
 * time the stream stood still. Without a free pair (all in flight) the wait
 * is counted untimed. */
static strata_status training_wait(strata_refresh *e, strata_event *ev)
{
    e->stream_blocking_waits++;
    int k = -1;
    if (e->n_wait_timers) {
        wait_timers_harvest(e, false);
        for (int j = 0; j < e->n_wait_timers && k < 0; j++)
            if (!e->wait_pending[j])
                k = j;
    }
    strata_status st = STRATA_OK;
    if (k >= 0)
        st = strata_backend_event_record(e->wait_t0[k], NULL);
    if (st == STRATA_OK)
        st = strata_backend_stream_wait_event(NULL, ev);
    if (st == STRATA_OK && k >= 0)
        st = strata_backend_event_record(e->wait_t1[k], NULL);
    if (k >= 0 && st == STRATA_OK) {
        e->wait_pending[k] = true;
        e->stream_waits_timed++;
    } else {
        e->stream_waits_untimed++;
    }
    return st;
}

/* Before the training stream changes a block's factors again: the
 * snapshot's copies of them on the shadow stream come first. */
static strata_status seam_wait_snapshots(strata_refresh *e, eng_entry *en)
{
    strata_status st = STRATA_OK;
    for (int b = 0; b < en->n_blocks && st == STRATA_OK; b++) {
        eng_block *blk = &e->blocks[en->first_block + b];
        if (blk->snap_wait) {
            bool done = false;
            st = strata_backend_event_query(blk->snap_wait, &done);
            if (st == STRATA_OK && !done)
                st = training_wait(e, blk->snap_wait);
            blk->snap_wait = NULL;
        }
    }
    return st;
}

/* Queue the copy of a result (host memory `src`, version, slot k) into the
 * spare device buffer on the shadow stream, after the training stream has
 * released that buffer; record its event. */
static strata_status seam_stage(strata_refresh *e, eng_block *blk, int k, const void *src,
                                int64_t version, bool early)
{
    const int d = 1 - blk->dev_cur;
    strata_status st = strata_backend_stream_wait_event(e->shadow, blk->ev_release[d]);
    if (st == STRATA_OK)
        st = strata_backend_copy_async(e->cfg.be, blk->dev[d], src, blk->info.slot_bytes,
                                       STRATA_COPY_H2D, e->shadow);
    if (st == STRATA_OK)
        st = strata_backend_event_record(blk->ev_stage[d], e->shadow);
    blk->dev_version[d] = st == STRATA_OK ? version : -1;
    blk->dev_slot[d] = k;
    if (st == STRATA_OK) {
        e->stream_stages++;
        e->stream_stages_early += early;
    }
    return st;
}

/* A host slot about to be written again (a new snapshot into slot k): a
 * stage still copying from it must finish first. */
static strata_status seam_slot_reused(eng_block *blk, int k)
{
    strata_status st = STRATA_OK;
    for (int d = 0; d < 2 && blk->on_device && st == STRATA_OK; d++)
        if (blk->dev_slot[d] == k && blk->dev_version[d] >= 0)
            st = strata_backend_event_synchronize(blk->ev_stage[d]);
    return st;
}

/* Install from device memory: the staged copy of (slot k, version) in the
 * spare buffer, staged now when it was not staged early; the training
 * stream waits on its event only when the copy has not completed. The
 * buffer left is released after the work queued so far. *out: the device
 * result to hand to the family. */
static strata_status seam_install(strata_refresh *e, eng_block *blk, int k, const void *src,
                                  int64_t version, const void **out)
{
    const int d = 1 - blk->dev_cur;
    strata_status st = STRATA_OK;
    if (blk->dev_version[d] != version || blk->dev_slot[d] != k)
        st = seam_stage(e, blk, k, src, version, false);
    bool done = false;
    if (st == STRATA_OK)
        st = strata_backend_event_query(blk->ev_stage[d], &done);
    if (st == STRATA_OK && !done) {
        st = training_wait(e, blk->ev_stage[d]);
        e->stream_waits++;
        e->stream_wait_bytes += blk->info.slot_bytes;
    }
    if (st == STRATA_OK && blk->installed_slot >= 0)
        st = strata_backend_event_record(blk->ev_release[blk->dev_cur], NULL);
    if (st != STRATA_OK)
        return st;
    blk->dev_version[blk->dev_cur] = -1;
    blk->dev_cur = d;
    e->stream_installs++;
    *out = blk->dev[d];
    return STRATA_OK;
}

strata_status strata_refresh_commit(strata_refresh *e)
{
    if (!e)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_commit: NULL engine");
    if (e->committed)
        return strata_error(STRATA_ERR_STATE, "refresh_commit: already committed");
    e->committed = true;
    strata_status st = make_groups(e);
    if (st != STRATA_OK || e->n_blocks == 0)
        return st;

    for (int k = 0; k < e->n_groups; k++) {
        const eng_group *g = &e->groups[k];
        if (e->cfg.stale_correction && !g->inline_ && !g->fam->correct)
            return strata_error(STRATA_ERR_UNSUPPORTED,
                                "stale_correction newton: %s has no stale correction (%s)",
                                g->fam->name,
                                g->fam->no_correct_why ? g->fam->no_correct_why
                                                       : "no correct slot");
    }
    bool any_async = false;
    for (int k = 0; k < e->n_groups; k++) {
        eng_group *g = &e->groups[k];
        const int S = g->inline_ ? 0 : e->cfg.staleness;
        /* S >= F: a refresh point comes before the result of the one before
         * it is installed (several in flight: a ring of slots). */
        g->chain = !g->inline_ && g->fam->chain_in && g->fam->chain_out && S >= g->sch.frequency;
        /* ... and some state of it chains (precond.h `chains`: Shampoo's
         * warm-qr roots do, its eigh roots do not) */
        bool any_chains = false;
        for (int i = 0; g->chain && i < e->n_entries && !any_chains; i++)
            any_chains = e->entries[i].grp == g &&
                         (!g->fam->chains || g->fam->chains(e->entries[i].state));
        g->chain = g->chain && any_chains;
        /* The family's first result on a worker too (precond.h defer_first):
         * at F = 1 its point is the grid's first (every offset is 0); it is
         * due at once (S = 0 through step `first`, as synchronous). */
        g->deferred = !g->inline_ && S >= 1 && g->sch.frequency == 1 && g->sch.lag == 1 &&
                      g->fam->defer_first && g->sch.first >= 1 && g->sch.first < g->sch.start;
        if (g->deferred)
            strata_logf(e->cfg.log, STRATA_LOG_INFO, "async",
                        "%s: the first result is refresh point %lld on the workers, due at "
                        "step %lld (S = 0 for it, as synchronous)",
                        g->fam->name, (long long)g->sch.first, (long long)g->sch.first);
        g->cc = (strata_coh_config){
            .precondition_frequency = g->sch.frequency,
            .start = g->deferred ? g->sch.first : g->sch.start < 1 ? 1 : g->sch.start,
            .staleness = S,
            .sync_steps = g->inline_                                    ? 0
                          : g->deferred && e->cfg.sync_steps < g->sch.first ? g->sch.first
                                                                            : e->cfg.sync_steps,
            .mode = g->inline_ || e->cfg.replicas || (g->chain && g->fam->chain_ordered)
                        ? STRATA_COH_FIXED
                        : e->cfg.mode,
            .timeout_s = e->cfg.wait_timeout_s,
        };
        if (g->chain)
            strata_logf(e->cfg.log, STRATA_LOG_INFO, "async",
                        "%s: S = %d >= F = %d: %d refreshes per block in flight, each "
                        "continuing the one before it%s",
                        g->fam->name, S, g->sch.frequency, (S + g->sch.frequency - 1) /
                        g->sch.frequency + 1,
                        g->fam->chain_ordered && e->cfg.mode == STRATA_COH_EAGER
                            ? " (installed in order: eager runs as fixed)"
                            : "");
        g->n_slots = strata_coh_slots_needed(g->sch.frequency, S);
        st = strata_coh_create(&g->cc, g->n_blocks, &g->reg);
        if (st != STRATA_OK)
            return st;
        any_async |= !g->inline_;
    }
    e->blocks = calloc((size_t)e->n_blocks, sizeof *e->blocks);
    if (!e->blocks)
        return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
    size_t wd_inline = 0, wi_inline = 0, wd_async = 0, wi_async = 0;
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *en = &e->entries[i];
        if (!en->grp)
            continue;
        if (en->grp->deferred)
            en->fam->defer_first(en->state);
        for (int b = 0; b < en->n_blocks; b++) {
            eng_block *blk = &e->blocks[en->first_block + b];
            blk->grp = en->grp;
            blk->ent = en;
            blk->b = b;
            blk->rb = en->grp->filled++;
            blk->installed_slot = -1;
            blk->inst_rb = blk->stage_rb = -1;
            blk->last_slot = -1;
            blk->last_version = -1;
            blk->chain = en->grp->chain && (!en->fam->chains || en->fam->chains(en->state));
            en->fam->block(en->state, b, &blk->info);
            blk->slots = calloc((size_t)en->grp->n_slots, sizeof *blk->slots);
            if (!blk->slots)
                return strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
            for (int k = 0; k < en->grp->n_slots; k++) {
                eng_job *job = &blk->slots[k].job;
                job->e = e;
                job->blk = blk;
                job->slot = k;
                job->pred_slot = -1;
                job->job.run = job_run;
                job->job.done = job_done;
                job->job.user = job;
            }
            const size_t wd = en->fam->refresh_work_doubles(blk->info.max_dim);
            const size_t wi = en->fam->refresh_work_ints(blk->info.max_dim);
            size_t *pd = en->grp->inline_ ? &wd_inline : &wd_async;
            size_t *pi = en->grp->inline_ ? &wi_inline : &wi_async;
            *pd = wd > *pd ? wd : *pd;
            *pi = wi > *pi ? wi : *pi;
        }
    }
    /* The refresh phase of every block is its parameter's. */
    for (int i = 0; i < e->n_blocks && st == STRATA_OK; i++)
        st = strata_coh_set_block_offset(e->blocks[i].grp->reg, e->blocks[i].rb,
                                         e->blocks[i].ent->offset);
    if (st != STRATA_OK)
        return st;

    st = e->cfg.be && e->cfg.host_pinned
             ? strata_tier_host_create_pinned(e->cfg.host_budget, e->cfg.be, &e->host)
             : strata_tier_host_create(e->cfg.host_budget, &e->host);
    if (st != STRATA_OK)
        return st;
    if (e->cfg.nvme_dir && any_async) {
        st = nvme_open(e); /* state paging may have opened it in add */
        if (st != STRATA_OK)
            return st;
    }
    strata_worker_config wc;
    strata_worker_config_default(&wc);
    if (e->cfg.workers > 0)
        wc.n_workers = e->cfg.workers;
    e->n_workers = any_async ? wc.n_workers : 0;
    st = place(e);
    if (st == STRATA_OK)
        st = assign_computers(e);
    if (st == STRATA_OK)
        st = seam_create(e);
    if (st != STRATA_OK)
        return st;
    if (wd_inline > 0 || wi_inline > 0) {
        e->inline_work = malloc((wd_inline ? wd_inline : 1) * sizeof(double));
        e->inline_iwork = malloc((wi_inline ? wi_inline : 1) * sizeof(int));
        if (!e->inline_work || !e->inline_iwork)
            return strata_error(STRATA_ERR_NOMEM, "refresh engine: cannot allocate the inline "
                                "workspace (%zu doubles)", wd_inline);
        strata_ledger_hold_add(&e->held, e->cfg.ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_WORKSPACE,
                               (wd_inline ? wd_inline : 1) * sizeof(double) +
                                   (wi_inline ? wi_inline : 1) * sizeof(int));
    }
    if (any_async) {
        wc.pin = e->cfg.pin_workers;
        wc.max_delay_us = e->cfg.worker_delay_us;
        wc.delay_seed = 12345;
        wc.work_doubles = wd_async;
        wc.work_ints = wi_async;
        st = strata_worker_pool_create(&wc, &e->pool);
        if (st != STRATA_OK)
            return st;
        strata_ledger_hold_add(&e->held, e->cfg.ledger, STRATA_LEDGER_HOST,
                               STRATA_LEDGER_WORKSPACE,
                               (size_t)wc.n_workers * (wd_async * sizeof(double) +
                                                       wi_async * sizeof(int)));
    }
    if (e->cfg.stale_correction) {
        /* One workspace for every block's correction, sized for the largest. */
        size_t floats = 0;
        for (int i = 0; i < e->n_blocks; i++) {
            const eng_block *blk = &e->blocks[i];
            if (blk->grp->inline_ || !blk->ent->fam->correct_work_floats)
                continue;
            const size_t f = blk->ent->fam->correct_work_floats(blk->info.max_dim);
            floats = f > floats ? f : floats;
        }
        if (floats > 0) {
            st = strata_backend_alloc(e->cfg.be, floats * sizeof(float), (void **)&e->corr_work);
            if (st != STRATA_OK)
                return st;
            e->corr_bytes = floats * sizeof(float);
            strata_ledger_hold_add(&e->held, e->cfg.ledger, STRATA_LEDGER_DEVICE,
                                   STRATA_LEDGER_WORKSPACE, e->corr_bytes);
        }
    }
    /* Results the family may point at instead of copying (precond.h
     * lend_results): every block in a host slot that stays put. */
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *en = &e->entries[i];
        bool put = en->grp && en->fam->lend_results && !en->pg_bytes;
        for (int b = 0; put && b < en->n_blocks; b++)
            put = !e->blocks[en->first_block + b].on_nvme &&
                  !e->blocks[en->first_block + b].on_device;
        if (put)
            en->fam->lend_results(en->state);
    }
    int on_nvme = 0;
    for (int i = 0; i < e->n_blocks; i++)
        on_nvme += e->blocks[i].on_nvme;
    strata_logf(e->cfg.log, STRATA_LOG_INFO, "async",
                "%d blocks in %d groups, %d workers, S=%d (%s), %d blocks on nvme", e->n_blocks,
                e->n_groups, e->n_workers, e->cfg.staleness,
                e->cfg.mode == STRATA_COH_FIXED || e->cfg.replicas ? "fixed" : "eager", on_nvme);
    if (e->cfg.replicas) {
        int mine = 0, shipped = 0;
        for (int i = 0; i < e->n_blocks; i++) {
            shipped += e->blocks[i].computer >= 0;
            mine += e->blocks[i].computer == strata_replicas_index(e->cfg.replicas);
        }
        strata_logf(e->cfg.log, STRATA_LOG_INFO, "async",
                    "replica %d of %d refreshes %d of %d shipped blocks%s",
                    strata_replicas_index(e->cfg.replicas), strata_replicas_count(e->cfg.replicas),
                    mine, shipped,
                    e->cfg.async && e->cfg.mode == STRATA_COH_EAGER
                        ? " (eager install mode runs as fixed: replicas install together)"
                        : "");
    }
    return STRATA_OK;
}

/* ---- the step */

/* ---- streamed residency (nvme placement; training thread) */

static int due_ready_slot(const eng_block *blk, int64_t t, int64_t *due);

/* Finish a read in flight into pool buffer r (its memory is about to be
 * read or reused): a failed one is counted and leaves it invalid. */
static void rb_land(strata_refresh *e, eng_rbuf *r)
{
    if (!r->pending)
        return;
    r->pending = false;
    if (io_wait_landed(e, &r->io) == STRATA_OK) {
        r->valid = true;
    } else {
        r->valid = false;
        atomic_fetch_add(&e->io_errors, 1);
    }
}

/* Take pool buffer i away from its owner (landing its read, and, for a
 * result copied to the device from it, that copy first). */
static void rb_detach(strata_refresh *e, int i)
{
    eng_rbuf *r = &e->rbufs[i];
    eng_block *o = r->owner;
    if (!o)
        return;
    rb_land(e, r);
    for (int d = 0; d < 2 && o->on_device; d++)
        if (o->dev_version[d] >= 0)
            (void)strata_backend_event_synchronize(o->ev_stage[d]);
    if (o->inst_rb == i)
        o->inst_rb = -1;
    if (o->stage_rb == i)
        o->stage_rb = -1;
    r->owner = NULL;
    r->valid = false;
    r->pin = 0;
    r->version = -1;
}

/* A buffer for `blk`, wanted by step `keep`: a free one, else the least
 * recently used one not pinned; `soft` (a prefetch) evicts only buffers no
 * step from `keep` on still wants. -1: none (only soft, or a pool too
 * small: the caller reports it). */
static int rb_take(strata_refresh *e, eng_block *blk, int64_t keep, bool soft)
{
    int best = -1;
    for (int i = 0; i < e->n_rbufs && best < 0; i++)
        if (!e->rbufs[i].owner)
            best = i;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int i = 0; i < e->n_rbufs; i++) {
            const eng_rbuf *r = &e->rbufs[i];
            if (r->pin || (r->keep >= keep && (soft || pass == 0)))
                continue;
            if (best < 0 || r->used < e->rbufs[best].used)
                best = i;
        }
    if (best < 0)
        return -1;
    if (e->rbufs[best].owner) {
        rb_detach(e, best);
        e->resident_evictions++;
    }
    eng_rbuf *r = &e->rbufs[best];
    r->owner = blk;
    r->valid = false;
    r->pending = false;
    r->version = -1;
    r->used = ++e->rtick;
    r->keep = keep;
    r->pin = 0;
    return best;
}

static strata_status pool_exhausted(const strata_refresh *e, const eng_block *blk)
{
    return strata_error(STRATA_ERR_INTERNAL,
                        "'%s' block %d: every one of the %d resident buffers is in use",
                        blk->ent->name, blk->b, e->n_rbufs);
}

/* Make blk's staged buffer hold the result of slot k (refresh point
 * `want`): a landed prefetch of it, an earlier read of it (the step's first
 * pass), or a read now (a buffer taken for step `t`; `soft`: only if one is
 * free of wanted results, else nothing is read and install reads it).
 * Errors: STRATA_ERR_IO (counted in io_errors; the caller keeps the
 * previous result). */
static strata_status nvme_stage(strata_refresh *e, eng_block *blk, int k, int64_t want,
                                int64_t t, bool soft)
{
    if (blk->stage_rb >= 0) {
        eng_rbuf *r = &e->rbufs[blk->stage_rb];
        rb_land(e, r); /* a failed prefetch: counted, then read again below */
        r->used = ++e->rtick;
        r->keep = r->keep > t ? r->keep : t;
        if (r->valid && r->version == want)
            return STRATA_OK;
    } else {
        const int i = rb_take(e, blk, t, soft);
        if (i < 0)
            return soft ? STRATA_OK : pool_exhausted(e, blk);
        blk->stage_rb = i;
    }
    eng_rbuf *r = &e->rbufs[blk->stage_rb];
    r->version = want;
    r->valid = false;
    strata_status st =
        strata_tier_read(e->nvme, blk->slots[k].nvme, 0, r->mem, blk->info.slot_bytes);
    if (st != STRATA_OK) {
        atomic_fetch_add(&e->io_errors, 1);
        return st;
    }
    r->valid = true;
    return STRATA_OK;
}

/* Make blk's installed result resident (for step t): *out its buffer's
 * memory, NULL when nothing is installed. A read when it is not (counted:
 * resident_reads, the step waits for it). Errors: STRATA_ERR_IO (counted
 * in io_errors), STRATA_ERR_INTERNAL (no buffer). */
static strata_status nvme_resident(strata_refresh *e, eng_block *blk, int64_t t, void **out)
{
    *out = NULL;
    if (blk->installed_slot < 0)
        return STRATA_OK;
    if (blk->inst_rb >= 0) {
        eng_rbuf *r = &e->rbufs[blk->inst_rb];
        rb_land(e, r);
        r->used = ++e->rtick;
        r->keep = r->keep > t ? r->keep : t;
        if (r->valid) {
            *out = r->mem;
            return STRATA_OK;
        }
    } else {
        const int i = rb_take(e, blk, t, false);
        if (i < 0)
            return pool_exhausted(e, blk);
        blk->inst_rb = i;
    }
    eng_rbuf *r = &e->rbufs[blk->inst_rb];
    e->resident_reads++;
    strata_status st = strata_tier_read(e->nvme, blk->slots[blk->installed_slot].nvme, 0, r->mem,
                                        blk->info.slot_bytes);
    if (st != STRATA_OK) {
        atomic_fetch_add(&e->io_errors, 1);
        return st;
    }
    r->valid = true;
    *out = r->mem;
    return STRATA_OK;
}

/* Start reading, without waiting, what `blk` needs at step t into a free
 * (or no longer wanted) buffer: its due result when READY, else its
 * installed result when the family reads it at apply. */
static void nvme_prefetch(strata_refresh *e, eng_block *blk, int64_t t)
{
    int64_t due;
    const int k = due_ready_slot(blk, t, &due);
    int *which = NULL;
    int slot = -1;
    if (k >= 0) {
        if (blk->stage_rb >= 0 && e->rbufs[blk->stage_rb].version == due &&
            (e->rbufs[blk->stage_rb].pending || e->rbufs[blk->stage_rb].valid))
            return; /* already read, or being read */
        which = &blk->stage_rb;
        slot = k;
    } else if (blk->res_mode == RES_REBIND && blk->installed_slot >= 0 && blk->inst_rb < 0) {
        which = &blk->inst_rb;
        slot = blk->installed_slot;
    } else {
        return;
    }
    if (*which >= 0) {
        rb_land(e, &e->rbufs[*which]);
    } else {
        const int i = rb_take(e, blk, t, true);
        if (i < 0)
            return;
        *which = i;
    }
    eng_rbuf *r = &e->rbufs[*which];
    r->version = which == &blk->stage_rb ? due : -1;
    r->valid = false;
    r->keep = t;
    if (strata_tier_read_async(e->nvme, blk->slots[slot].nvme, 0, r->mem, blk->info.slot_bytes,
                               &r->io) == STRATA_OK) {
        r->pending = true;
        e->resident_prefetches++;
    }
}

/* nvme placement, at install: the staged result of slot k (read now if it
 * is not) in *dst, the installed one in *prev when a failed part needs it.
 * false: keep the previous result (a read failed: counted, logged). */
static bool nvme_install_buffers(strata_refresh *e, eng_block *blk, int k, int64_t t,
                                 char **dst, const void **prev, strata_status *st)
{
    int64_t want = -1;
    strata_coh_slot_get(blk->grp->reg, blk->rb, k, &want);
    *st = nvme_stage(e, blk, k, want, t, false);
    void *pv = NULL;
    if (*st == STRATA_OK && blk->slots[k].failed && blk->have) {
        e->rbufs[blk->stage_rb].pin++; /* not the buffer the installed result takes */
        *st = nvme_resident(e, blk, t, &pv);
        e->rbufs[blk->stage_rb].pin--;
    }
    if (*st == STRATA_ERR_INTERNAL)
        return false;
    if (*st != STRATA_OK) {
        /* Keep using the previous result: stale but intact. */
        strata_logf(e->cfg.log, STRATA_LOG_WARN, "tiers",
                    "'%s' block %d: reading its result failed (%s); keeping the previous one",
                    blk->ent->name, blk->b, strata_last_error());
        *st = STRATA_OK;
        return false;
    }
    *dst = e->rbufs[blk->stage_rb].mem;
    *prev = pv;
    return true;
}

/* Install the result in slot k of `blk` (acquire said it is due at step t). */
static strata_status install(strata_refresh *e, eng_block *blk, int k, int64_t t)
{
    const strata_precond_block *bi = &blk->info;
    const void *prev = NULL;
    char *dst = NULL;
    if (blk->on_nvme) {
        strata_status st = STRATA_OK;
        if (!nvme_install_buffers(e, blk, k, t, &dst, &prev, &st))
            return st;
    } else {
        if (blk->installed_slot >= 0)
            prev = blk->slots[blk->installed_slot].buf;
        dst = blk->slots[k].buf;
    }
    const unsigned failed = blk->slots[k].failed;
    unsigned have = 0;
    bool filled = false;
    for (int p = 0; p < bi->n_parts; p++) {
        const unsigned bit = 1u << p;
        if (!(failed & bit)) {
            have |= bit;
        } else if (prev && (blk->have & bit)) {
            memcpy(dst + bi->part_offset[p], (const char *)prev + bi->part_offset[p],
                   bi->part_bytes[p]);
            have |= bit;
            filled = true;
        }
    }
    if (blk->on_nvme) {
        /* The installed slot's extent holds the complete result (so that
         * the buffer may be evicted and read again): write back what was
         * filled. A failed write keeps the previous result. */
        if (filled) {
            e->resident_writebacks++;
            if (strata_tier_write(e->nvme, blk->slots[k].nvme, 0, dst, bi->slot_bytes) !=
                STRATA_OK) {
                atomic_fetch_add(&e->io_errors, 1);
                strata_logf(e->cfg.log, STRATA_LOG_WARN, "tiers",
                            "'%s' block %d: writing its completed result failed (%s); keeping "
                            "the previous one",
                            blk->ent->name, blk->b, strata_last_error());
                rb_detach(e, blk->stage_rb);
                return STRATA_OK;
            }
        }
        if (blk->inst_rb >= 0)
            rb_detach(e, blk->inst_rb);
        blk->inst_rb = blk->stage_rb;
        blk->stage_rb = -1;
        eng_rbuf *r = &e->rbufs[blk->inst_rb];
        r->version = -1;
        r->pin = blk->res_mode == RES_STICKY; /* sticky: its own buffer from now on */
        if (blk->res_mode == RES_COPY)
            r->keep = t - 1; /* copied at install: free for the next prefetch */
        blk->lent = dst;
    }
    const void *res = dst;
    if (blk->on_device) {
        /* The device copy must hold the result as completed above. */
        int64_t version = -1;
        strata_coh_slot_get(blk->grp->reg, blk->rb, k, &version);
        const int d = 1 - blk->dev_cur;
        if (failed)
            blk->dev_version[d] = -1; /* staged (if at all) before the fill */
        strata_status st = seam_install(e, blk, k, dst, version, &res);
        if (st != STRATA_OK)
            return st;
    }
    blk->have = have;
    blk->installed_slot = k;
    return blk->ent->fam->install(blk->ent->state, blk->b, res, failed, have);
}

/* Refresh point `version` of `blk`: reserve a slot, snapshot into it, then
 * refresh inline or submit the job (deadline version + S). */
static strata_status snapshot_submit(strata_refresh *e, eng_block *blk, int64_t version)
{
    eng_group *g = blk->grp;
    int k;
    strata_status st;
    if (e->cfg.stale_correction && !g->inline_) {
        /* The valve: no waiting for a slot; the block skips this refresh
         * point (its next one starts from fresher factors anyway). */
        st = strata_coh_try_begin_refresh(g->reg, blk->rb, version, &k);
        if (st == STRATA_OK && k < 0) {
            /* A ready result not yet due holds a slot: install it now (the
             * valve is not reproducible anyway) and try again. */
            int ready;
            st = strata_coh_install_ready(g->reg, blk->rb, version, &ready);
            if (st == STRATA_OK && ready >= 0)
                st = install(e, blk, ready, version);
            if (st == STRATA_OK)
                st = strata_coh_try_begin_refresh(g->reg, blk->rb, version, &k);
        }
        if (st == STRATA_OK && k < 0) {
            e->stale_refreshes_skipped++;
            return STRATA_OK;
        }
    } else {
        st = strata_coh_begin_refresh(g->reg, blk->rb, version, &k);
    }
    if (st == STRATA_OK && blk->computer >= 0) {
        st = ship_note(blk, version, k);
        if (st == STRATA_OK && receives(e, blk))
            return STRATA_OK; /* no snapshot, no job: the result is shipped when due */
    }
    if (st != STRATA_OK)
        return st;
    e->blocks_computed++;
    eng_slot *slot = &blk->slots[k];
    const strata_precond_family *f = blk->ent->fam;
    slot->snap_queued = false;
    st = seam_slot_reused(blk, k);
    if (st == STRATA_OK && e->inject_snapshot > 0) { /* testing: as a failed nvme write */
        e->inject_snapshot--;
        st = strata_error(STRATA_ERR_IO, "'%s' block %d: snapshot of refresh %lld failed "
                          "(injected)", blk->ent->name, blk->b, (long long)version);
    } else if (st == STRATA_OK && e->shadow && f->snapshot_async && !blk->on_nvme) {
        /* The stream seam: after the training stream's factor updates, on
         * the shadow stream; the job (or the inline refresh) waits on
         * ev_snap, the training stream before it changes the factors. */
        st = strata_backend_event_record(e->ev_factors, NULL);
        if (st == STRATA_OK)
            st = strata_backend_stream_wait_event(e->shadow, e->ev_factors);
        if (st == STRATA_OK)
            st = f->snapshot_async(blk->ent->state, blk->b, slot->buf, e->shadow);
        if (st == STRATA_OK)
            st = strata_backend_event_record(slot->ev_snap, e->shadow);
        if (st == STRATA_OK) {
            slot->snap_queued = true;
            blk->snap_wait = slot->ev_snap;
            e->stream_snapshots++;
        }
    } else if (st == STRATA_OK && blk->on_nvme) {
        /* write_async copies into registered staging before it returns, so the
         * staging buffer may be packed again at once; the job waits. */
        st = f->snapshot(blk->ent->state, blk->b, e->staging);
        if (st == STRATA_OK)
            st = strata_tier_write_async(e->nvme, slot->nvme, 0, e->staging,
                                         blk->info.slot_bytes, &slot->io);
    } else if (st == STRATA_OK) {
        /* Chained with a valid head (it stays valid: only the jobs set it,
         * and a restore, with none in flight): the job's chain_in replaces
         * the snapshot's base, which is then not copied. */
        const bool headed = blk->chain && blk->head && f->snapshot_chained &&
                            atomic_load_explicit(&blk->head_valid, memory_order_acquire);
        st = headed ? f->snapshot_chained(blk->ent->state, blk->b, slot->buf)
                    : f->snapshot(blk->ent->state, blk->b, slot->buf);
    }
    if (st == STRATA_OK)
        atomic_fetch_add(&e->snapshot_bytes, blk->info.slot_bytes);
    slot->failed = 0;
    if (st != STRATA_OK) { /* the refresh of `version` failed: FAILED, counted */
        strata_coh_mark_computing(g->reg, blk->rb, k);
        strata_coh_complete(g->reg, blk->rb, k, false);
        return st;
    }
    if (g->inline_) {
        strata_coh_mark_computing(g->reg, blk->rb, k);
        if (slot->snap_queued)
            st = strata_backend_event_synchronize(slot->ev_snap);
        if (st == STRATA_OK)
            st = job_compute(e, blk, k, e->inline_work, e->inline_iwork, NULL);
        strata_coh_complete(g->reg, blk->rb, k, st == STRATA_OK);
        return st == STRATA_ERR_LINALG ? STRATA_OK : st; /* counted; the previous result stays */
    }
    slot->job.job.deadline = version + (version <= g->cc.sync_steps ? 0 : g->cc.staleness);
    slot->job.pred_slot = blk->chain ? blk->last_slot : -1;
    slot->job.pred_version = blk->last_version;
    st = strata_worker_submit(e->pool, &slot->job.job);
    if (st != STRATA_OK) { /* no callback fires: the refresh of `version` failed */
        strata_coh_mark_computing(g->reg, blk->rb, k);
        strata_coh_complete(g->reg, blk->rb, k, false);
        return st;
    }
    e->jobs_submitted++;
    if (blk->chain) {
        blk->last_slot = k;
        blk->last_version = version;
    }
    return STRATA_OK;
}

/* Refresh point `version` of every block of `en`. It comes after the
 * step's factor update (lag 0) or its whole update (lag 1), so a snapshot
 * that cannot be taken or stored (an nvme write, no free slot in time, the
 * job not accepted) is not an error of the step: the refresh point counts
 * as failed (stats coh_failed for async groups; io_errors for nvme writes;
 * snapshot_failures), the block keeps its previous result, as when its
 * decomposition fails (STRATA_ERR_LINALG), and the first is logged at
 * WARN. Other errors (a backend's, a broken invariant) are returned. */
static strata_status refresh_point(strata_refresh *e, eng_entry *en, int64_t version)
{
    eng_block *first = &e->blocks[en->first_block];
    /* All blocks of a parameter share its refresh phase. */
    if (!strata_coh_block_is_refresh(en->grp->reg, first->rb, version))
        return STRATA_OK;
    strata_status st = STRATA_OK;
    for (int b = 0; b < en->n_blocks && st == STRATA_OK; b++) {
        eng_block *blk = &e->blocks[en->first_block + b];
        st = snapshot_submit(e, blk, version);
        if (st != STRATA_ERR_IO && st != STRATA_ERR_TIMEOUT && st != STRATA_ERR_NOMEM)
            continue;
        if (st == STRATA_ERR_IO && blk->on_nvme)
            atomic_fetch_add(&e->io_errors, 1);
        e->snapshot_failures++;
        strata_logf(e->cfg.log, e->warned_snapshot ? STRATA_LOG_DEBUG : STRATA_LOG_WARN,
                    "async",
                    "'%s' block %d: refresh %lld could not start (%s: %s); it keeps its "
                    "previous result%s",
                    en->name, blk->b, (long long)version, strata_status_str(st),
                    strata_last_error(),
                    e->warned_snapshot ? "" : " (later ones are logged at DEBUG)");
        e->warned_snapshot = true;
        st = STRATA_OK;
    }
    return st;
}

/* The first pass of one block: wait for its due result if it was begun
 * before step t, and read it from the nvme tier into the spare resident
 * buffer (a failed read is counted and retried at install, which then keeps
 * the previous result). */
static strata_status prepare_block(strata_refresh *e, eng_block *blk, int64_t t)
{
    strata_coh_registry *reg = blk->grp->reg;
    const int64_t due = strata_coh_block_due_version(reg, blk->rb, t);
    if (due < 0)
        return STRATA_OK;
    int64_t installed = -1;
    if (blk->installed_slot >= 0)
        strata_coh_slot_get(reg, blk->rb, blk->installed_slot, &installed);
    if (installed >= due)
        return STRATA_OK;
    strata_coh_slot_state state;
    const int k = strata_coh_find(reg, blk->rb, due, &state);
    if (k < 0)
        return STRATA_OK; /* begun by step t itself (lag 0), or dropped/failed: no wait */
    strata_status st = STRATA_OK;
    if ((state == STRATA_SLOT_PENDING || state == STRATA_SLOT_COMPUTING) &&
        e->cfg.stale_correction && !blk->grp->inline_ && t > e->cfg.sync_steps)
        return STRATA_OK; /* the valve: the step's acquire corrects instead of waiting */
    if (state == STRATA_SLOT_PENDING || state == STRATA_SLOT_COMPUTING)
        st = strata_coh_wait_slot(reg, blk->rb, k, &state);
    if (st != STRATA_OK) {
        char why[256]; /* the detail lives in the buffer strata_error writes */
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "'%s': %s", blk->ent->name, why);
    }
    if (st == STRATA_OK && state == STRATA_SLOT_READY && blk->on_nvme &&
        nvme_stage(e, blk, k, due, t, true) != STRATA_OK)
        strata_logf(e->cfg.log, STRATA_LOG_DEBUG, "tiers",
                    "'%s' block %d: reading result %lld failed (%s); read again at install",
                    blk->ent->name, blk->b, (long long)due, strata_last_error());
    return st;
}

strata_status strata_refresh_prepare(strata_refresh *e, int id, int64_t t, double *wait_seconds)
{
    if (!e || id < 0 || id >= e->n_entries || !e->committed)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_prepare: bad parameter %d", id);
    eng_entry *en = &e->entries[id];
    if (en->pg_bytes) {
        const double t0 = strata_now_seconds();
        const strata_status st = page_prepare(e, id);
        critical_add(e, t0);
        if (st != STRATA_OK)
            return st;
    }
    if (!en->grp)
        return STRATA_OK;
    const double t0 = strata_now_seconds();
    strata_status st = ship_due(e, en, t, false);
    for (int b = 0; b < en->n_blocks && st == STRATA_OK; b++)
        st = prepare_block(e, &e->blocks[en->first_block + b], t);
    const double t1 = critical_add(e, t0); /* waits and reads on the training thread */
    if (!en->grp->inline_ && wait_seconds)
        *wait_seconds += t1 - t0;
    return st;
}

bool strata_refresh_plain(const strata_refresh *e, int id)
{
    if (!e || id < 0 || id >= e->n_entries || !e->committed)
        return false;
    const eng_entry *en = &e->entries[id];
    return !en->grp && !en->fam->before && !en->fam->after;
}

strata_status strata_refresh_apply_plain(strata_refresh *e, int id, int64_t t, float lr_scale,
                                         float *w, const float *g, strata_optim_counters *cnt)
{
    if (!strata_refresh_plain(e, id))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "refresh_apply_plain: parameter %d is not plain (or bad)", id);
    const eng_entry *en = &e->entries[id];
    return en->fam->apply(en->state, lr_scale, t, w, g, cnt);
}

/* The stale-correction valve at block `blk`'s acquire of step t: acquire
 * without waiting; where the due result is still on a worker, the newest
 * ready one is installed and the family corrects the installed result in
 * place (precond.h `correct`). *done: the block is acquired (nothing was
 * in flight, or the installed result was corrected); false: the caller
 * acquires as without the valve, and waits (no result yet to correct, or
 * no part improved). */
static strata_status valve_acquire(strata_refresh *e, eng_block *blk, int64_t t, bool *done)
{
    int slot;
    int64_t version;
    bool now = false, would_wait = false;
    *done = false;
    strata_status st = strata_coh_acquire_nowait(blk->grp->reg, blk->rb, t, &slot, &version,
                                                 &now, &would_wait);
    if (st == STRATA_OK && now && slot >= 0)
        st = install(e, blk, slot, t);
    if (st != STRATA_OK || !would_wait) {
        *done = true; /* nothing due was in flight: acquired (and counted) as acquire does */
        return st;
    }
    unsigned parts = 0;
    if (blk->installed_slot >= 0 && blk->have) {
        void *res = blk->on_device ? blk->dev[blk->dev_cur] : blk->slots[blk->installed_slot].buf;
        st = blk->ent->fam->correct(blk->ent->state, blk->b, res, blk->have, e->corr_work,
                                    &parts);
        if (st != STRATA_OK)
            return st;
    }
    if (!parts) {
        e->stale_refused++;
        return STRATA_OK;
    }
    e->stale_waits_avoided++;
    for (unsigned m = parts; m; m &= m - 1)
        e->stale_corrections++;
    if (version >= 0 && t - version > e->stale_max_corrected)
        e->stale_max_corrected = t - version;
    *done = true;
    return STRATA_OK;
}

/* Streamed residency: every lent installed result of entry `en` resident
 * (a read when it was evicted; one retry) and pinned through apply, the
 * family pointed at it where it moved. Errors: STRATA_ERR_IO (read twice
 * and failed: the step stops before this parameter's apply). */
static bool lent_block(const eng_block *blk)
{
    return blk->on_nvme && blk->res_mode == RES_REBIND && blk->installed_slot >= 0;
}

static strata_status resident_for_apply(strata_refresh *e, eng_entry *en, int64_t t)
{
    strata_status st = STRATA_OK;
    int b = 0;
    for (; b < en->n_blocks && st == STRATA_OK; b++) {
        eng_block *blk = &e->blocks[en->first_block + b];
        if (!lent_block(blk))
            continue;
        void *m = NULL;
        st = nvme_resident(e, blk, t, &m);
        if (st == STRATA_ERR_IO)
            st = nvme_resident(e, blk, t, &m);
        if (st != STRATA_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", strata_last_error());
            st = strata_error(st, "'%s' block %d: its installed result could not be made "
                              "resident: %s", en->name, blk->b, why);
            break;
        }
        e->rbufs[blk->inst_rb].pin++;
        if (m != blk->lent) {
            st = en->fam->rebind(en->state, blk->b, m, blk->have);
            blk->lent = st == STRATA_OK ? m : NULL;
        }
    }
    if (st != STRATA_OK) /* no apply: the pins taken so far go */
        for (int j = 0; j < b; j++) {
            eng_block *blk = &e->blocks[en->first_block + j];
            if (lent_block(blk) && blk->inst_rb >= 0 && e->rbufs[blk->inst_rb].pin > 0)
                e->rbufs[blk->inst_rb].pin--;
        }
    return st;
}

/* After apply: the entry's buffers unpinned and no longer wanted by step t;
 * then start reading what the next two entries need (ahead of the step). */
static void resident_after_apply(strata_refresh *e, eng_entry *en, int64_t t)
{
    for (int b = 0; b < en->n_blocks; b++) {
        eng_block *blk = &e->blocks[en->first_block + b];
        if (!blk->on_nvme || blk->inst_rb < 0)
            continue;
        eng_rbuf *r = &e->rbufs[blk->inst_rb];
        if (blk->res_mode == RES_REBIND && r->pin > 0)
            r->pin--;
        r->keep = t - 1;
    }
    const int id = (int)(en - e->entries);
    for (int j = id + 1; j <= id + 2 && j < e->n_entries; j++) {
        const eng_entry *nx = &e->entries[j];
        for (int b = 0; nx->grp && b < nx->n_blocks; b++)
            if (e->blocks[nx->first_block + b].on_nvme)
                nvme_prefetch(e, &e->blocks[nx->first_block + b], t);
    }
}

static strata_status step_body(strata_refresh *e, int id, int64_t t, float lr_scale, float *w,
                               const float *g, strata_optim_counters *cnt, double *wait_seconds);

strata_status strata_refresh_step(strata_refresh *e, int id, int64_t t, float lr_scale, float *w,
                                  const float *g, strata_optim_counters *cnt,
                                  double *wait_seconds)
{
    if (!e || id < 0 || id >= e->n_entries || !e->committed)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_step: bad parameter %d", id);
    eng_entry *en = &e->entries[id];
    if (!en->pg_bytes)
        return step_body(e, id, t, lr_scale, w, g, cnt, wait_seconds);
    /* State paging: resident for the step, written back after it (reads and
     * waits on the training thread are on the critical path). */
    double t0 = strata_now_seconds();
    strata_status st = page_in(e, id);
    critical_add(e, t0);
    if (st != STRATA_OK)
        return st;
    st = step_body(e, id, t, lr_scale, w, g, cnt, wait_seconds);
    t0 = strata_now_seconds();
    page_out(e, en);
    critical_add(e, t0);
    return st;
}

static strata_status step_body(strata_refresh *e, int id, int64_t t, float lr_scale, float *w,
                               const float *g, strata_optim_counters *cnt, double *wait_seconds)
{
    eng_entry *en = &e->entries[id];
    const strata_precond_family *f = en->fam;
    strata_status st = STRATA_OK;
    if (en->grp && e->shadow) {
        const double t0 = strata_now_seconds();
        st = seam_wait_snapshots(e, en); /* the training stream waits: critical path */
        critical_add(e, t0);
        if (st != STRATA_OK)
            return st;
    }
    if (f->before) {
        bool done = false;
        const double r0 = cnt ? cnt->seconds_roots : 0.0;
        st = f->before(en->state, lr_scale, t, w, g, cnt, &done);
        family_roots_critical(e, cnt, r0);
        if (st == STRATA_OK && done && en->grp && en->grp->deferred && en->grp->sch.lag == 1) {
            /* The deferred first result (precond.h defer_first): its refresh
             * point follows the first step's absorb. */
            const double t0 = strata_now_seconds();
            st = refresh_point(e, en, t + 1);
            const double t1 = critical_add(e, t0);
            if (cnt)
                cnt->seconds_roots += t1 - t0;
        }
        if (st != STRATA_OK || done)
            return st;
    }
    eng_group *grp = en->grp;
    if (grp) {
        const double t0 = strata_now_seconds();
        if (grp->sch.lag == 0)
            st = refresh_point(e, en, t);
        const double t1 = strata_now_seconds();
        if (st == STRATA_OK)
            st = ship_due(e, en, t, true);
        for (int b = 0; b < en->n_blocks && st == STRATA_OK; b++) {
            eng_block *blk = &e->blocks[en->first_block + b];
            int slot;
            int64_t version;
            bool now;
            /* The first pass (strata_refresh_prepare) waited for every due
             * result begun before this step; only one begun in this step
             * (lag 0, S = 0 on workers) is left, and the factors already
             * absorbed G: wait on, warning each wait_timeout_s. */
            /* (not in the synchronous warm start: its steps wait) */
            if (e->cfg.stale_correction && !grp->inline_ && t > e->cfg.sync_steps) {
                bool done = false;
                st = valve_acquire(e, blk, t, &done);
                if (st != STRATA_OK || done)
                    continue;
            }
            while ((st = strata_coh_acquire(grp->reg, blk->rb, t, &slot, &version, &now)) ==
                   STRATA_ERR_TIMEOUT)
                strata_logf(e->cfg.log, STRATA_LOG_WARN, "async", "'%s': %s; still waiting",
                            en->name, strata_last_error());
            if (st == STRATA_OK && now && slot >= 0)
                st = install(e, blk, slot, t);
        }
        const double t2 = critical_add(e, t0);
        if (!grp->inline_ && wait_seconds)
            *wait_seconds += t2 - t1;
        if (cnt)
            cnt->seconds_roots += t2 - t0;
        if (st != STRATA_OK)
            return st;
    }
    if (grp && e->n_rbufs) {
        const double t0 = strata_now_seconds();
        st = resident_for_apply(e, en, t);
        critical_add(e, t0);
        if (st != STRATA_OK)
            return st;
    }
    /* A non-finite direction (STRATA_ERR_NONFINITE from apply) left the
     * weights alone; the rest of the step still runs, as the reference does. */
    const double r_apply = cnt ? cnt->seconds_roots : 0.0;
    const strata_status st_apply = f->apply(en->state, lr_scale, t, w, g, cnt);
    family_roots_critical(e, cnt, r_apply);
    if (grp && e->n_rbufs)
        resident_after_apply(e, en, t);
    if (st_apply != STRATA_OK && st_apply != STRATA_ERR_NONFINITE)
        return st_apply;
    if (f->after && grp && e->shadow) { /* after may change what a snapshot copies */
        const double t0 = strata_now_seconds();
        st = seam_wait_snapshots(e, en);
        critical_add(e, t0);
    }
    if (f->after && st == STRATA_OK) {
        const double r0 = cnt ? cnt->seconds_roots : 0.0;
        st = f->after(en->state, g, cnt);
        family_roots_critical(e, cnt, r0);
    }
    if (st == STRATA_OK && grp && grp->sch.lag == 1) {
        const double t0 = strata_now_seconds();
        st = refresh_point(e, en, t + 1);
        const double t1 = critical_add(e, t0);
        if (cnt)
            cnt->seconds_roots += t1 - t0;
    }
    return st != STRATA_OK ? st : st_apply;
}

/* Stream seam: stage the due results of `layer` that are READY (and
 * complete: no failed part to fill at install) into the spare device
 * buffer, so that the copy overlaps the forward and backward passes. A
 * failed stage is retried at install. */
/* The slot holding the result block `blk` must install at step t when it is
 * READY and newer than the installed one (*due: its version), else -1: the
 * prefetches (nvme read, device stage) start only for such results. */
static int due_ready_slot(const eng_block *blk, int64_t t, int64_t *due)
{
    strata_coh_registry *reg = blk->grp->reg;
    *due = strata_coh_block_due_version(reg, blk->rb, t);
    if (*due < 0)
        return -1;
    int64_t installed = -1;
    if (blk->installed_slot >= 0)
        strata_coh_slot_get(reg, blk->rb, blk->installed_slot, &installed);
    if (installed >= *due)
        return -1;
    strata_coh_slot_state state;
    const int k = strata_coh_find(reg, blk->rb, *due, &state);
    return k >= 0 && state == STRATA_SLOT_READY ? k : -1;
}

static void seam_prefetch(strata_refresh *e, int layer, int64_t t)
{
    for (int i = 0; i < e->n_blocks; i++) {
        eng_block *blk = &e->blocks[i];
        if (!blk->on_device || blk->on_nvme || blk->ent->layer != layer)
            continue;
        int64_t due;
        const int k = due_ready_slot(blk, t, &due);
        if (k < 0 || blk->dev_version[1 - blk->dev_cur] == due || blk->slots[k].failed)
            continue;
        (void)seam_stage(e, blk, k, blk->slots[k].buf, due, true);
    }
}

void strata_refresh_prefetch(strata_refresh *e, int layer, int64_t t)
{
    if (e && e->shadow && e->cfg.device_roots)
        seam_prefetch(e, layer, t);
    if (!e || !e->n_rbufs)
        return;
    const double t0 = strata_now_seconds();
    for (int i = 0; i < e->n_blocks; i++) {
        eng_block *blk = &e->blocks[i];
        if (blk->on_nvme && blk->ent->layer == layer)
            nvme_prefetch(e, blk, t);
    }
    critical_add(e, t0);
}

double strata_refresh_critical_seconds(const strata_refresh *e)
{
    return e ? e->critical_seconds : 0.0;
}

void strata_refresh_stats_get(strata_refresh *e, strata_refresh_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!e)
        return;
    for (int k = 0; k < e->n_groups; k++) {
        if (e->groups[k].inline_ || !e->groups[k].reg)
            continue;
        strata_coh_stats c;
        strata_coh_stats_get(e->groups[k].reg, &c);
        s->installs += c.installs;
        s->waits += c.waits;
        s->wait_seconds += c.wait_seconds;
        s->dropped += c.dropped;
        s->failed += c.failed;
        s->bound_exceeded += c.bound_exceeded;
        if (c.max_staleness > s->max_staleness)
            s->max_staleness = c.max_staleness;
    }
    if (e->pool) {
        strata_worker_stats w;
        strata_worker_stats_get(e->pool, &w);
        s->jobs_cancelled = w.cancelled;
    }
    s->jobs_submitted = e->jobs_submitted;
    s->refreshes = atomic_load(&e->refreshes);
    s->refresh_failures = atomic_load(&e->refresh_failures);
    s->refresh_retries = atomic_load(&e->refresh_retries);
    s->refresh_newton = atomic_load(&e->refresh_newton);
    s->refresh_fallbacks = atomic_load(&e->refresh_fallbacks);
    s->snapshot_bytes = atomic_load(&e->snapshot_bytes);
    s->stale_waits_avoided = e->stale_waits_avoided;
    s->stale_corrections = e->stale_corrections;
    s->stale_refused = e->stale_refused;
    s->stale_refreshes_skipped = e->stale_refreshes_skipped;
    s->stale_max_corrected = e->stale_max_corrected;
    s->io_errors = atomic_load(&e->io_errors);
    s->blocks_computed = e->blocks_computed;
    s->blocks_received = e->blocks_received;
    s->ship_bytes_intra_node = e->ship_intra;
    s->ship_bytes_inter_node = e->ship_inter;
    s->stream_snapshots = e->stream_snapshots;
    s->stream_stages = e->stream_stages;
    s->stream_stages_early = e->stream_stages_early;
    s->stream_installs = e->stream_installs;
    s->stream_waits = e->stream_waits;
    s->stream_wait_bytes = e->stream_wait_bytes;
    wait_timers_harvest(e, false);
    s->stream_blocking_waits = e->stream_blocking_waits;
    s->stream_waits_timed = e->stream_waits_timed;
    s->stream_waits_untimed = e->stream_waits_untimed;
    s->stream_wait_seconds = e->stream_wait_seconds;
    s->stream_waits_pending = 0;
    for (int k = 0; k < e->n_wait_timers; k++)
        s->stream_waits_pending += e->wait_pending[k];
    s->critical_seconds = e->critical_seconds;
    s->snapshot_failures = e->snapshot_failures;
    s->blocks = e->n_blocks;
    for (int i = 0; i < e->n_blocks; i++)
        s->blocks_on_nvme += e->blocks[i].on_nvme;
    strata_tier_bytes(e->host, &s->host_bytes, &s->host_bytes_peak);
    strata_tier_bytes(e->nvme, &s->nvme_bytes, &s->nvme_bytes_peak);
    if (e->nvme) {
        strata_tier_io_stats io;
        strata_tier_io_stats_get(e->nvme, &io);
        s->nvme_bytes_written = io.bytes_written;
        s->nvme_bytes_read = io.bytes_read;
        s->resident_buffers = e->n_rbufs;
        s->resident_bytes = (size_t)e->n_rbufs * strata_tier_charge_size(e->host, e->rbuf_bytes);
        s->resident_reads = e->resident_reads;
        s->resident_prefetches = e->resident_prefetches;
        s->resident_evictions = e->resident_evictions;
        s->resident_writebacks = e->resident_writebacks;
    }
    s->paged_params = e->paged_params;
    s->paged_bytes = e->paged_bytes;
    s->page_reads = e->page_reads;
    s->page_reads_waited = e->page_reads_waited;
    s->page_writes = e->page_writes;
}

strata_status strata_refresh_inject_snapshot_errors(strata_refresh *e, int n)
{
    if (!e || n < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "inject_snapshot_errors: bad argument");
    e->inject_snapshot = n;
    return STRATA_OK;
}

strata_status strata_refresh_hold_jobs(strata_refresh *e, int id)
{
    if (!e || id < -2 || id >= e->n_entries)
        return strata_error(STRATA_ERR_INVALID_ARG, "hold_jobs: bad parameter %d", id);
    atomic_store_explicit(&e->hold, id, memory_order_release);
    return STRATA_OK;
}

strata_status strata_refresh_inject_io_errors(strata_refresh *e, int n, int errno_value)
{
    if (!e || !e->nvme)
        return strata_error(STRATA_ERR_STATE, "inject_io_errors: the runtime has no nvme tier");
    strata_tier_inject_io_errors(e->nvme, n, errno_value);
    return STRATA_OK;
}

/* ---- checkpoint seams */

int strata_refresh_block_count(const strata_refresh *e)
{
    return e && e->committed ? e->n_blocks : 0;
}

static eng_block *block_at(const strata_refresh *e, int i)
{
    return e && e->committed && i >= 0 && i < e->n_blocks ? &e->blocks[i] : NULL;
}

strata_status strata_refresh_block_describe(const strata_refresh *e, int i,
                                            strata_refresh_block_desc *out)
{
    const eng_block *blk = block_at(e, i);
    if (!blk || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_block_describe: bad block %d", i);
    const eng_group *g = blk->grp;
    *out = (strata_refresh_block_desc){
        .entry = (int)(blk->ent - e->entries),
        .block = blk->b,
        .slot_bytes = blk->info.slot_bytes,
        .tail_bytes = blk->info.tail_bytes,
        .n_slots = g->n_slots,
        .on_nvme = blk->on_nvme,
        .inline_ = g->inline_,
        .frequency = g->sch.frequency,
        .start = g->cc.start,
        .lag = g->sch.lag,
        .offset = blk->ent->offset,
        .staleness = g->cc.staleness,
        .mode = g->cc.mode,
        .installed_slot = blk->installed_slot,
        .have = blk->have,
    };
    return STRATA_OK;
}

strata_status strata_refresh_drain(strata_refresh *e, int64_t *in_flight)
{
    if (!e)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_drain: NULL engine");
    wait_timers_harvest(e, true); /* the timed waits so far, all counted */
    int64_t busy = 0;
    for (int i = 0; i < e->n_blocks; i++) {
        eng_block *blk = &e->blocks[i];
        for (int k = 0; k < blk->grp->n_slots; k++) {
            const strata_coh_slot_state s = strata_coh_slot_get(blk->grp->reg, blk->rb, k, NULL);
            busy += s == STRATA_SLOT_PENDING || s == STRATA_SLOT_COMPUTING;
        }
    }
    if (in_flight)
        *in_flight = busy;
    /* HSDP: every result in flight reaches every replica first (a receiver's
     * reserved slot completes only so); shipped even after an error, so that
     * no replica waits for another. */
    strata_status st = ship_all(e);
    for (int k = 0; k < e->n_groups && st == STRATA_OK; k++)
        if (!e->groups[k].inline_ && e->groups[k].reg)
            st = strata_coh_quiesce(e->groups[k].reg, e->cfg.wait_timeout_s);
    if (st == STRATA_OK && e->shadow) /* snapshots and stages in flight */
        st = strata_backend_stream_synchronize(e->cfg.be, e->shadow);
    /* A prefetch lands in a resident buffer; finish it so that nothing
     * writes host memory while it is saved (a failed one is counted, and
     * read again when needed). */
    for (int r = 0; r < e->n_rbufs && st == STRATA_OK; r++)
        rb_land(e, &e->rbufs[r]);
    return st;
}

strata_status strata_refresh_slot_get(strata_refresh *e, int i, int k,
                                      strata_coh_slot_state *state, int64_t *version,
                                      unsigned *failed)
{
    eng_block *blk = block_at(e, i);
    if (!blk || k < 0 || k >= blk->grp->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_slot_get: bad block %d slot %d", i,
                            k);
    int64_t v = -1;
    const strata_coh_slot_state s = strata_coh_slot_get(blk->grp->reg, blk->rb, k, &v);
    if (state)
        *state = s;
    if (version)
        *version = v;
    if (failed)
        *failed = blk->slots[k].failed;
    return STRATA_OK;
}

strata_status strata_refresh_slot_read(strata_refresh *e, int i, int k, void *buf)
{
    eng_block *blk = block_at(e, i);
    if (!blk || !buf || k < 0 || k >= blk->grp->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_slot_read: bad block %d slot %d",
                            i, k);
    const size_t bytes = blk->info.slot_bytes;
    strata_status st = STRATA_OK;
    if (blk->on_nvme && k == blk->installed_slot && blk->inst_rb >= 0 &&
        e->rbufs[blk->inst_rb].valid && !e->rbufs[blk->inst_rb].pending) {
        memcpy(buf, e->rbufs[blk->inst_rb].mem, bytes); /* the extent holds the same */
    } else if (blk->on_nvme) {
        st = strata_tier_read(e->nvme, blk->slots[k].nvme, 0, buf, bytes);
        if (st != STRATA_OK)
            atomic_fetch_add(&e->io_errors, 1);
    } else {
        memcpy(buf, blk->slots[k].buf, bytes);
    }
    if (st != STRATA_OK)
        return st;
    /* The result only: the snapshot's inputs around it (factors, the old
     * basis) are zeroed. An HSDP replica that received the result holds
     * nothing else there, so the replicas' slots read the same (issue #22
     * item 7); an install reads only the parts and aux. */
    size_t off[STRATA_PRECOND_MAX_PARTS + 1], len[STRATA_PRECOND_MAX_PARTS + 1];
    int nr = 0;
    ship_ranges(&blk->info, off, len, &nr);
    for (int a = 1; a < nr; a++) /* in offset order (a few ranges) */
        for (int b = a; b > 0 && off[b - 1] > off[b]; b--) {
            const size_t o = off[b], l = len[b];
            off[b] = off[b - 1];
            len[b] = len[b - 1];
            off[b - 1] = o;
            len[b - 1] = l;
        }
    size_t at = 0;
    for (int r = 0; r <= nr; r++) {
        const size_t next = r < nr ? off[r] : bytes;
        if (next > at)
            memset((char *)buf + at, 0, next - at);
        if (r < nr && off[r] + len[r] > at)
            at = off[r] + len[r];
    }
    return STRATA_OK;
}

/* ---- state paging for checkpoints (ckpt/checkpoint.c; engine.h) */

bool strata_refresh_paged(const strata_refresh *e, int id)
{
    return e && id >= 0 && id < e->n_entries && e->entries[id].pg_bytes > 0;
}

strata_status strata_refresh_page_pin(strata_refresh *e, int id, int ahead)
{
    if (!e || id < 0 || id >= e->n_entries || !e->committed)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_page_pin: bad parameter %d", id);
    eng_entry *en = &e->entries[id];
    if (!en->pg_bytes)
        return STRATA_OK;
    const int nx = strata_refresh_paged(e, ahead) ? ahead : -1;
    char why[256];
    if (page_resident(e, id, nx, why, sizeof why) != STRATA_OK)
        return strata_error(STRATA_ERR_IO,
                            "'%s': its paged state could not be read back from the nvme tier "
                            "(%s)", en->name, why);
    return STRATA_OK;
}

void strata_refresh_page_changed(strata_refresh *e, int id)
{
    if (!strata_refresh_paged(e, id))
        return;
    eng_entry *en = &e->entries[id];
    if (en->pg_where == PG_IN) /* else not pinned: nothing of it changed here */
        page_out(e, en);
}

void strata_refresh_page_release(strata_refresh *e)
{
    if (!e || e->pg_first < 0)
        return;
    /* The next step's first state stays, or is read ahead, as after a step. */
    page_settle(e, e->pg_first, -1);
    eng_entry *f = &e->entries[e->pg_first];
    if (f->pg_where == PG_OUT && page_read_start(e, f) != STRATA_OK)
        strata_error_clear(); /* counted; read again at its step */
}

static strata_status block_restore(strata_refresh *e, int i,
                                   const strata_refresh_slot_image *slots, int n, unsigned have);

/* An older layout's images (bytes = slot_bytes - tail_bytes) are padded
 * with zeros to slot_bytes first (precond.h tail_bytes). */
strata_status strata_refresh_block_restore(strata_refresh *e, int i,
                                           const strata_refresh_slot_image *slots, int n,
                                           unsigned have)
{
    eng_block *blk = block_at(e, i);
    if (!blk || !slots || n < 1 || n > 16)
        return block_restore(e, i, slots, n, have); /* its errors */
    const size_t full = blk->info.slot_bytes;
    strata_refresh_slot_image im[16];
    void *pad[16] = {NULL};
    strata_status st = STRATA_OK;
    for (int k = 0; k < n; k++) {
        im[k] = slots[k];
        if (!im[k].data || !im[k].bytes || im[k].bytes == full)
            continue;
        if (im[k].bytes != full - blk->info.tail_bytes) {
            st = strata_error(STRATA_ERR_INVALID_ARG,
                              "refresh_block_restore: '%s' block %d slot %d has %zu bytes, "
                              "not %zu", blk->ent->name, blk->b, k, im[k].bytes, full);
            break;
        }
        pad[k] = calloc(1, full);
        if (!pad[k]) {
            st = strata_error(STRATA_ERR_NOMEM, "refresh engine: out of memory");
            break;
        }
        memcpy(pad[k], im[k].data, im[k].bytes);
        im[k].data = pad[k];
        im[k].bytes = full;
    }
    if (st == STRATA_OK)
        st = block_restore(e, i, im, n, have);
    for (int k = 0; k < n; k++)
        free(pad[k]);
    return st;
}

static strata_status block_restore(strata_refresh *e, int i,
                                   const strata_refresh_slot_image *slots, int n, unsigned have)
{
    eng_block *blk = block_at(e, i);
    if (!blk || !slots || n != blk->grp->n_slots)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "refresh_block_restore: bad block %d or slot count %d", i, n);
    strata_coh_slot_state states[16] = {0};
    int64_t versions[16] = {0};
    if (n > 16)
        return strata_error(STRATA_ERR_INVALID_ARG, "refresh_block_restore: %d slots", n);
    int installed = -1;
    for (int k = 0; k < n; k++) {
        states[k] = slots[k].state;
        versions[k] = slots[k].version;
        const bool data = states[k] == STRATA_SLOT_READY || states[k] == STRATA_SLOT_INSTALLED;
        if (data && !slots[k].data)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "refresh_block_restore: '%s' block %d slot %d has no data",
                                blk->ent->name, blk->b, k);
        if (states[k] == STRATA_SLOT_INSTALLED)
            installed = k;
    }
    /* The registry checks the table (and that nothing is in flight) first. */
    strata_status st = strata_coh_restore_block(blk->grp->reg, blk->rb, n, states, versions);
    const size_t bytes = blk->info.slot_bytes;
    for (int r = 0; st == STRATA_OK && blk->on_nvme && r < e->n_rbufs; r++)
        if (e->rbufs[r].owner == blk)
            rb_detach(e, r); /* the old residency is gone */
    for (int k = 0; k < n && st == STRATA_OK; k++) {
        blk->slots[k].failed = slots[k].failed;
        if (states[k] != STRATA_SLOT_READY && states[k] != STRATA_SLOT_INSTALLED)
            continue;
        if (blk->on_nvme)
            st = strata_tier_write(e->nvme, blk->slots[k].nvme, 0, slots[k].data, bytes);
        else
            memcpy(blk->slots[k].buf, slots[k].data, bytes);
    }
    if (st != STRATA_OK)
        return st;
    blk->installed_slot = installed;
    blk->have = installed >= 0 ? have : 0;
    if (blk->head) {
        /* Chained: the next refresh continues from the newest restored
         * result that is not installed yet (a FAILED one after it continued
         * from it too), else from the installed one (its snapshot copies it). */
        int newest = -1;
        for (int k = 0; k < n; k++)
            if (states[k] == STRATA_SLOT_READY &&
                (newest < 0 || versions[k] > versions[newest]))
                newest = k;
        atomic_store_explicit(&blk->head_valid, newest >= 0, memory_order_release);
        if (newest >= 0)
            blk->ent->fam->chain_out(blk->ent->state, blk->b, slots[newest].data,
                                     slots[newest].failed, blk->head);
        blk->last_slot = -1;
        blk->last_version = -1;
    }
    blk->n_unshipped = 0; /* restored slots are complete on every replica */
    if (installed < 0)
        return STRATA_OK;
    void *dst = blk->slots[installed].buf;
    if (blk->on_nvme) {
        const int r = rb_take(e, blk, -1, false);
        if (r < 0)
            return pool_exhausted(e, blk);
        blk->inst_rb = r;
        e->rbufs[r].valid = true;
        e->rbufs[r].pin = blk->res_mode == RES_STICKY;
        dst = e->rbufs[r].mem;
        memcpy(dst, slots[installed].data, bytes);
        blk->lent = dst;
    }
    const void *res = dst;
    if (blk->on_device) { /* the result in device memory before install */
        blk->dev_version[0] = blk->dev_version[1] = -1;
        blk->dev_slot[0] = blk->dev_slot[1] = -1;
        st = strata_backend_stream_synchronize(e->cfg.be, e->shadow);
        if (st == STRATA_OK)
            st = seam_stage(e, blk, installed, dst, versions[installed], false);
        if (st == STRATA_OK)
            st = strata_backend_event_synchronize(blk->ev_stage[1 - blk->dev_cur]);
        if (st != STRATA_OK)
            return st;
        blk->dev_cur = 1 - blk->dev_cur;
        res = blk->dev[blk->dev_cur];
    }
    return blk->ent->fam->install(blk->ent->state, blk->b, res, slots[installed].failed,
                                  blk->have);
}

void strata_refresh_destroy(strata_refresh *e)
{
    if (!e)
        return;
    /* The shadow stream's copies land first (they read and write the slots
     * and device buffers freed below). */
    if (e->shadow && strata_backend_stream_synchronize(e->cfg.be, e->shadow) != STRATA_OK)
        strata_logf(e->cfg.log, STRATA_LOG_WARN, "async", "shadow stream: %s",
                    strata_last_error());
    /* Workers first: after this no job touches a buffer. Every submitted job
     * either ran (completed or failed) or was cancelled: say so. */
    atomic_store_explicit(&e->hold, HOLD_NONE, memory_order_release);
    if (e->pool) {
        strata_worker_pool_stop(e->pool);
        strata_worker_stats w;
        strata_worker_stats_get(e->pool, &w);
        strata_logf(e->cfg.log, STRATA_LOG_INFO, "async",
                    "workers stopped: %lld submitted, %lld completed, %lld failed, %lld "
                    "cancelled",
                    (long long)e->jobs_submitted, (long long)w.completed, (long long)w.failed,
                    (long long)w.cancelled);
        strata_worker_pool_destroy(e->pool);
    }
    /* e->blocks is NULL when commit failed before allocating it */
    for (int i = 0; e->blocks && i < e->n_blocks; i++) {
        eng_block *blk = &e->blocks[i];
        for (int k = 0; blk->slots && k < blk->grp->n_slots; k++) {
            if (blk->on_nvme && blk->slots[k].nvme) {
                /* A cancelled job never waited for its snapshot write. */
                io_wait_landed(e, &blk->slots[k].io);
            }
            strata_tier_free(e->host, blk->slots[k].buf, blk->info.slot_bytes);
            strata_tier_free(e->nvme, blk->slots[k].nvme, blk->nvme_bytes);
        }
        strata_tier_free(e->host, blk->head, blk->info.slot_bytes);
        for (int k = 0; blk->slots && k < blk->grp->n_slots; k++)
            strata_backend_event_destroy(blk->slots[k].ev_snap);
        for (int d = 0; d < 2; d++) {
            strata_backend_event_destroy(blk->ev_stage[d]);
            strata_backend_event_destroy(blk->ev_release[d]);
            if (blk->dev[d])
                strata_backend_free(e->cfg.be, blk->dev[d], blk->info.slot_bytes);
        }
        free(blk->slots);
    }
    for (int r = 0; r < e->n_rbufs; r++) {
        if (e->rbufs[r].pending)
            io_wait_landed(e, &e->rbufs[r].io);
        strata_tier_free(e->host, e->rbufs[r].mem, e->rbuf_bytes);
    }
    free(e->rbufs);
    if (e->corr_work)
        strata_backend_free(e->cfg.be, e->corr_work, e->corr_bytes);
    if (e->worker_scratch) {
        for (int w = 0; w < e->n_workers; w++)
            strata_tier_free(e->host, e->worker_scratch[w], e->scratch_bytes);
        free(e->worker_scratch);
    }
    strata_tier_free(e->host, e->staging, e->scratch_bytes);
    strata_tier_free(e->host, e->ship_buf, e->ship_bytes);
    free(e->blocks);
    wait_timers_harvest(e, true);
    for (int k = 0; k < WAIT_TIMERS; k++) {
        strata_backend_event_destroy(e->wait_t0[k]);
        strata_backend_event_destroy(e->wait_t1[k]);
    }
    strata_backend_event_destroy(e->ev_factors);
    strata_backend_stream_destroy(e->shadow);
    /* Paged states: transfers land (they use the states' memory), and the
     * ledger gets back what the families will release from the DEVICE tier. */
    for (int i = 0; i < e->n_entries; i++) {
        eng_entry *en = &e->entries[i];
        if (!en->pg_bytes)
            continue;
        if (en->pg_where == PG_READING || en->pg_where == PG_WRITING)
            (void)io_wait_landed(e, &en->pg_io);
        else if (en->pg_where == PG_OUT)
            page_ledger(e, en, false);
        strata_tier_free(e->nvme, en->pg_ext, en->pg_bytes);
    }
    strata_tier_destroy(e->nvme);
    strata_tier_destroy(e->host);
    for (int k = 0; k < e->n_groups; k++)
        strata_coh_destroy(e->groups[k].reg);
    free(e->groups);
    for (int i = 0; i < e->n_entries; i++) {
        free(e->entries[i].name);
        free(e->entries[i].cfg);
    }
    free(e->entries);
    free(e->inline_work);
    free(e->inline_iwork);
    free(e->nvme_dir);
    strata_ledger_hold_release(&e->held);
    free(e);
}
