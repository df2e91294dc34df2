/* coherence/coherence.h — the coherence registry: which preconditioner version
 * each block uses, and when a step must wait (DESIGN.md, "Coherence protocol").
 *
 * Terms. A *block* is one preconditioned matrix block with its factor pair.
 * *Refresh points* are the steps r >= start_b with (r - start_b) % F == 0,
 * where start_b = start + offset_b and offset_b (in [0, F), default 0) is the
 * block's phase (strata_coh_set_block_offset: a staggered refresh spreads
 * the blocks' refreshes over the F steps of a period). At a
 * refresh point the runtime snapshots the block's factors into a *slot* and
 * a worker computes the block's inverse roots (or eigenbasis) into that
 * slot. The *installed* version v(b) is the refresh point whose result the
 * block uses; staleness at step t is t - v(b).
 *
 * Rules (S = staleness budget):
 *  - Before block b is preconditioned at step t, let r(t) be the latest
 *    refresh point <= t - S. If v(b) < r(t), strata_coh_acquire waits for
 *    the job of r(t) (bounded by timeout_s: STRATA_ERR_TIMEOUT, never a
 *    hang) and installs it. So after the first install S <= staleness <= F-1+S
 *    in fixed mode, 0 <= staleness <= F-1+S in eager mode.
 *  - Steps t <= sync_steps (a synchronous warm start) use S = 0 in that rule:
 *    their staleness is <= F-1, below the bound.
 *  - FIXED mode (default) installs exactly r(t) at step t, even if it was
 *    ready earlier: a run is bit-reproducible whatever the workers' speed,
 *    and S = 0 reproduces the synchronous path bit for bit.
 *  - EAGER mode also installs, at acquire, the newest READY result that is
 *    newer than v(b) (fresher, not reproducible).
 *  - Results older than the installed version are dropped (counted), never
 *    installed out of order. A FAILED job leaves the previous version
 *    installed (counted).
 *  - Before the first install acquire reports no slot: the caller uses its
 *    documented fallback (the grafting direction).
 *
 * Slot life: FREE -> PENDING (begin_refresh, training thread) -> COMPUTING
 * (worker) -> READY | FAILED (complete, worker) -> INSTALLED (acquire,
 * training thread) -> FREE (when a newer version is installed, or dropped).
 * With F and S, at most ceil(S/F) + 2 slots per block are ever in use;
 * strata_coh_slots_needed() says so.
 *
 * Threads: begin_refresh and acquire from the training thread; mark_computing
 * and complete from workers. One mutex guards the registry; no callback runs
 * under it.
 */
#ifndef STRATA_COHERENCE_H
#define STRATA_COHERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum strata_coh_slot_state {
    STRATA_SLOT_FREE = 0,
    STRATA_SLOT_PENDING,
    STRATA_SLOT_COMPUTING,
    STRATA_SLOT_READY,
    STRATA_SLOT_INSTALLED,
    STRATA_SLOT_FAILED,
} strata_coh_slot_state;

typedef struct strata_coh_config {
    int precondition_frequency; /* F >= 1 */
    int64_t start;              /* first refresh point >= 1 */
    int staleness;              /* S >= 0 */
    strata_coh_mode mode;
    double timeout_s;           /* bound of every wait; default 600 */
    int slots;                  /* per block; 0 = strata_coh_slots_needed(F, S) */
    int64_t sync_steps;         /* steps t <= sync_steps run at S = 0 (the due version is the
                                   latest refresh point <= t: each waits for its own
                                   refresh), S after; 0 = none (strata_config.staleness_warmup) */
} strata_coh_config;

/* Slots a block needs so that begin_refresh never waits: ceil(S/F) + 2. */
int strata_coh_slots_needed(int precondition_frequency, int staleness);

/* True when t is a refresh point of cfg (a block with offset 0). */
bool strata_coh_is_refresh(const strata_coh_config *cfg, int64_t t);

typedef struct strata_coh_registry strata_coh_registry;

/* Errors: STRATA_ERR_INVALID_ARG (F < 1, start < 1, S < 0, blocks < 1),
 * STRATA_ERR_NOMEM. */
strata_status strata_coh_create(const strata_coh_config *cfg, int n_blocks,
                                           strata_coh_registry **out);
void strata_coh_destroy(strata_coh_registry *reg);

/* Phase of block b: its refresh points become start + offset + k F
 * (k >= 0). Call after create and before the first begin_refresh.
 * Errors: STRATA_ERR_INVALID_ARG (bad block, offset outside [0, F)),
 * STRATA_ERR_STATE (a refresh has already begun: offsets are fixed). */
strata_status strata_coh_set_block_offset(strata_coh_registry *reg, int b, int offset);

/* First refresh point of block b (start + its offset; steps), or -1 for a
 * bad argument. Thread-safe. */
int64_t strata_coh_block_start(strata_coh_registry *reg, int b);

/* Per-block forms of strata_coh_is_refresh and strata_coh_due_version that
 * honour the block's offset (false / -1 for a bad argument). Thread-safe. */
bool strata_coh_block_is_refresh(strata_coh_registry *reg, int b, int64_t t);
int64_t strata_coh_block_due_version(strata_coh_registry *reg, int b, int64_t t);

/* Refresh point r of block b: reserve a FREE slot (PENDING(r)) for the
 * snapshot and the job. Waits (bounded) only if every slot is busy.
 * Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_TIMEOUT. */
strata_status strata_coh_begin_refresh(strata_coh_registry *reg, int b, int64_t r,
                                                  int *slot);

/* Undo a begin_refresh whose job could not be submitted (slot -> FREE). */
void strata_coh_abort_refresh(strata_coh_registry *reg, int b, int slot);

/* Worker: the job of (b, slot) started. */
void strata_coh_mark_computing(strata_coh_registry *reg, int b, int slot);

/* Worker: the job of (b, slot) finished (ok: READY, else FAILED). */
void strata_coh_complete(strata_coh_registry *reg, int b, int slot, bool ok);

/* Training thread, before block b is preconditioned at step t: apply the
 * rules above. On return *slot is the installed slot (-1 before the first
 * install) and *version its refresh point (-1 if none). `installed_now` (may
 * be NULL) is set when this call changed the installed slot.
 * Errors: STRATA_ERR_TIMEOUT (the job of r(t) did not finish in timeout_s;
 * nothing changed), STRATA_ERR_INVALID_ARG. */
strata_status strata_coh_acquire(strata_coh_registry *reg, int b, int64_t t, int *slot,
                                            int64_t *version, bool *installed_now);

/* The stale-correction valve (strata_config.stale_correction): as
 * strata_coh_acquire, but never waits. Where acquire would wait for a job
 * still in flight, this installs instead the newest READY result of the
 * block newer than the installed one and not newer than the due version
 * (none: the installed one stays), sets *would_wait and returns STRATA_OK;
 * the caller then corrects the installed result, or, when it cannot, calls
 * strata_coh_acquire, which waits. An acquire that returns *would_wait is
 * not counted in the staleness statistics (its staleness may exceed
 * F-1+S: the caller counts it); one that does not is counted as acquire's.
 * Installs out of the fixed schedule, so a run with the valve depends on
 * the workers' speed (as EAGER mode does). Errors: as acquire's, never
 * STRATA_ERR_TIMEOUT. */
strata_status strata_coh_acquire_nowait(strata_coh_registry *reg, int b, int64_t t, int *slot,
                                        int64_t *version, bool *installed_now, bool *would_wait);

/* The valve, before a refresh point that found no free slot: install the
 * newest READY result of block b not newer than `upto` and newer than the
 * installed one (freeing the slots it supersedes); *slot gets the installed
 * slot, or -1 when none was installed. Not counted in the staleness
 * statistics (the step's acquire counts them). Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_coh_install_ready(strata_coh_registry *reg, int b, int64_t upto, int *slot);

/* As strata_coh_begin_refresh without waiting: *slot = -1 when every slot
 * of block b is busy (the valve skips that refresh point). Errors:
 * STRATA_ERR_INVALID_ARG. */
strata_status strata_coh_try_begin_refresh(strata_coh_registry *reg, int b, int64_t r, int *slot);

/* Training thread: wait (bounded by timeout_s) until the job of slot `slot`
 * of block b has finished (the slot is no longer PENDING or COMPUTING),
 * without installing anything; counted as a wait, as acquire's are. *state
 * gets the slot's state then (READY, FAILED, or FREE when the result was
 * dropped). Used where a finished result must be read before acquire (an
 * HSDP replica set ships it to the other replicas). Errors:
 * STRATA_ERR_INVALID_ARG, STRATA_ERR_TIMEOUT (*state: still in flight). */
strata_status strata_coh_wait_slot(strata_coh_registry *reg, int b, int slot,
                                   strata_coh_slot_state *state);

/* Worker: wait (bounded by timeout_s) until the job of refresh point
 * `version` in slot `slot` of block b has finished (the slot no longer holds
 * `version` PENDING or COMPUTING). Not counted as a wait (the training
 * thread's waits are the stats'). Used by a refresh that continues the one
 * before it (engine/refresh.c, chained refreshes). Errors:
 * STRATA_ERR_INVALID_ARG, STRATA_ERR_TIMEOUT (still in flight). */
strata_status strata_coh_wait_done(strata_coh_registry *reg, int b, int slot, int64_t version,
                                   double timeout_s);

/* The refresh point whose result step t must use: the latest refresh point
 * <= t - S, or -1 when there is none yet (a block with offset 0). */
int64_t strata_coh_due_version(const strata_coh_config *cfg, int64_t t);

/* The slot of block b holding `version` (any state but FREE), or -1; its
 * state in *state. Thread-safe. */
int strata_coh_find(strata_coh_registry *reg, int b, int64_t version,
                               strata_coh_slot_state *state);

/* Slot state and version (for tests and stats). */
strata_coh_slot_state strata_coh_slot_get(strata_coh_registry *reg, int b, int slot,
                                                     int64_t *version);

typedef struct strata_coh_stats {
    int64_t installs;        /* versions installed */
    int64_t waits;           /* acquires that had to wait */
    double wait_seconds;     /* total time waited */
    int64_t max_staleness;   /* largest t - v(b) seen at acquire (after first install) */
    int64_t dropped;         /* results never installed because a newer one was */
    int64_t failed;          /* jobs that failed (previous version kept) */
    int64_t bound_exceeded;  /* acquires with staleness > F-1+S (only after failures) */
} strata_coh_stats;

void strata_coh_stats_get(strata_coh_registry *reg, strata_coh_stats *out);

/* Wait until no slot of any block is PENDING or COMPUTING (bounded).
 * Errors: STRATA_ERR_TIMEOUT. */
strata_status strata_coh_quiesce(strata_coh_registry *reg, double timeout_s);

/* Checkpoint restore: set block b's n slots to states[k] / versions[k] (FREE,
 * READY, INSTALLED or FAILED; at most one INSTALLED, which becomes the
 * installed version; a FREE slot's version is ignored), as a drained
 * registry had them at save time. Marks the registry started (offsets fixed).
 * Errors: STRATA_ERR_INVALID_ARG (bad block, n != the registry's slots per
 * block, a PENDING/COMPUTING state, two INSTALLED slots, a READY/FAILED slot
 * not newer than the installed version, a negative version), STRATA_ERR_STATE
 * (a job of the block is in flight). Nothing changes on error. */
strata_status strata_coh_restore_block(strata_coh_registry *reg, int b, int n,
                                       const strata_coh_slot_state *states,
                                       const int64_t *versions);

/* Slots per block of this registry (cfg.slots, resolved). */
int strata_coh_slots_per_block(const strata_coh_registry *reg);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_COHERENCE_H */
