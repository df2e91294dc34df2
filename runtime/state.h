/* runtime/state.h — the runtime's state as the checkpoint sees it
 * (internal; implemented in runtime/state.c).
 *
 * ckpt/ saves and restores a runtime through this header alone, never
 * through runtime_internal.h: a read-only view of the scalars it records
 * (step, lr scale, ranks, configuration) and of the handles it works with
 * (communicator, backend, refresh engine), a view of each parameter (name,
 * shape, routing, owner layout, refresh phase, weights, family and state),
 * the managed-weights calls, and four setters for what a load restores (the
 * step counter, the statistics counters) or a save counts (test fault
 * injection). The engine's own state goes through the engine's checkpoint
 * seam (engine/engine.h: strata_refresh_block_describe, _slot_get,
 * _slot_read, _block_restore) on the engine handle of the view.
 *
 * Threading: the caller's thread, between steps (as strata_save and
 * strata_load are); nothing here locks. */
#ifndef STRATA_RUNTIME_STATE_H
#define STRATA_RUNTIME_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "optim/precond.h"
#include "strata/backend.h"
#include "strata/comm.h"
#include "strata/strata.h"

/* The runtime's scalars and handles, as of the call. */
typedef struct strata_rt_view {
    const strata_config *cfg; /* the configuration it was created with (owned by rt) */
    bool committed;           /* strata_commit has run */
    int64_t t;                /* steps taken (strata_stats.step) */
    float lr_scale;           /* strata_set_lr_scale's factor */
    int rank, world;          /* this rank and the world size (1 without a communicator) */
    int n_params;             /* registered parameters (strata_param_id 0..n_params-1) */
    int managed_layers;       /* layers 0..managed_layers-1 to materialize around a save
                                 or a load: max layer + 1 with managed weights (several
                                 ranks, owner sharding, strata_param_desc.managed), else 0 */
    strata_comm *comm;        /* the world communicator (collectives of a save) */
    strata_backend *be;       /* the backend that holds weights and device-tier state */
    strata_refresh *engine;   /* the refresh engine (its checkpoint seam) */
} strata_rt_view;

/* The runtime's busy flag (one atomic): strata_step and every call that must
 * not overlap it (param_add, commit, set_lr_scale, param_set_buffers,
 * strata_save, strata_load) take it on entry and give it back on return.
 * A call made while another holds it (another thread) is refused with
 * STRATA_ERR_STATE naming `call`, and changes nothing. */
strata_status strata_rt_busy_enter(strata_runtime *rt, const char *call);
void strata_rt_busy_leave(strata_runtime *rt);

/* Fill `out` (non-NULL) for `rt` (non-NULL). */
void strata_rt_view_get(const strata_runtime *rt, strata_rt_view *out);

/* One parameter, as of the call (after strata_commit: routed, owned,
 * phased). Pointers are the runtime's and stay valid until the next step,
 * materialize or release. */
typedef struct strata_rt_param_view {
    const char *name;
    int ndim;                        /* 0..STRATA_MAX_DIMS */
    int64_t shape[STRATA_MAX_DIMS];  /* row-major */
    size_t numel;                    /* product of shape */
    int layer;
    strata_role role;
    strata_optimizer routed;         /* the optimizer the routing rule chose */
    bool tail;                       /* routed to AdamW by the routing rule */
    int owner;                       /* owner rank; -1: every rank (gather sharding) */
    size_t shard_offset, tail_offset; /* strata_param_layout */
    int refresh_offset;              /* refresh phase in [0, F) */
    bool managed;                    /* strata manages the weights */
    float *data;                     /* float32 weights in backend memory as this rank
                                        sees them now; NULL for a managed parameter this
                                        rank does not own while its layer is released */
    const strata_precond_family *fam; /* the routed family */
    void *state;                     /* the family's state; NULL: not owned here */
    int entry;                       /* its handle in the refresh engine (owned only) */
    bool hyper_set;                  /* strata_param_set_hyper was called: lr and
                                        weight_decay replace the family's configured */
    float lr, weight_decay;          /* with hyper_set */
} strata_rt_param_view;

/* Fill `out` for parameter `i` in [0, n_params) (not checked). */
void strata_rt_param_get(const strata_runtime *rt, int i, strata_rt_param_view *out);

/* Managed weights (runtime.c): make layer `layer`'s managed weights
 * available on this rank (the owners broadcast; a no-op while held for this
 * step; collective in the shard group), and release a layer's buffer
 * (local). Errors: STRATA_ERR_NOMEM (the layer buffer), the broadcast's. */
strata_status strata_rt_layer_materialize(strata_runtime *rt, int layer);
void strata_rt_layer_release(strata_runtime *rt, int layer);

/* A load's step counter: steps taken t >= 0 (also strata_stats.step), the
 * lr scale, and every parameter's weights marked as those of step t (every
 * rank read every weight). */
void strata_rt_restore_step(strata_runtime *rt, int64_t t, float lr_scale);

/* A load's per-parameter hyperparameters (runtime.c): parameter `id`'s lr
 * and weight decay become (lr, weight_decay) when `set` (as
 * strata_param_set_hyper, values not checked), else its family's configured
 * ones again. Committed runtime, between steps. Errors:
 * STRATA_ERR_UNSUPPORTED (set, values other than the configured, and a
 * family without per-parameter values; nothing changed). */
strata_status strata_rt_param_hyper(strata_runtime *rt, int id, bool set, float lr,
                                    float weight_decay);

/* ---- the statistics counters a resumed run continues
 *
 * Each is a strata_stats member of type 'i' (int64_t), 'u' (uint64_t) or
 * 'd' (double) and of kind 'c' (an event count), 'm' (a maximum) or 'r' (a
 * per-rank resource: bytes moved, seconds). The checkpoint records them by
 * name and chooses how they combine over ranks from the kind. */
typedef struct strata_rt_stat_field {
    const char *name; /* the strata_stats member's name */
    size_t off;       /* its offset in strata_stats */
    char type;        /* 'i', 'u', 'd' */
    char kind;        /* 'c', 'm', 'r' */
} strata_rt_stat_field;

#define STRATA_RT_N_STATS 37 /* the table's rows (checked where it is defined) */

/* Counter k in [0, STRATA_RT_N_STATS) (not checked). */
const strata_rt_stat_field *strata_rt_stat_field_at(int k);

/* Counter k of `s` as a double (integers converted). */
double strata_rt_stat_read(const strata_stats *s, int k);

/* Continue the counters from `totals` (STRATA_RT_N_STATS values, by
 * strata_rt_stat_field_at; integers are truncated): right after this call
 * strata_stats_get reads them (a maximum: the larger of it and the current
 * one), and what happens from here adds to them. Replaces an earlier call's
 * totals. Errors: strata_stats_get's. */
strata_status strata_rt_stats_resume(strata_runtime *rt, const double *totals);

/* The base that makes strata_stats_get read `totals` (STRATA_RT_N_STATS
 * values) when the counters of this process read `now` (a strata_stats_get
 * result with a zero base): what strata_rt_stats_resume stores. runtime.c
 * defines strata_rt_stats_resume; this file keeps the table, so the runtime
 * calls state.c and never the other way. */
void strata_rt_stats_base_from(strata_stats *base, const double *totals,
                               const strata_stats *now);

/* Test fault injection (runtime/testing.h): counts one file-system call of
 * a save; returns the errno value it must fail with when it is the call
 * armed by strata_testing_inject_ckpt_fault, else 0. */
int strata_rt_ckpt_io_fault(strata_runtime *rt);

#endif
