/* Private state of the runtime (runtime.c): parameters, routing, owners,
 * the refresh engine that runs every family's step. */
#ifndef STRATA_RUNTIME_INTERNAL_H
#define STRATA_RUNTIME_INTERNAL_H

#include "base/clock.h"
#include "base/ledger.h"
#include "base/log.h"
#include "optim/precond.h"
#include "engine/engine.h"
#include "comm/comm.h"
#include "workers/workers.h"
#include "runtime/state.h"
#include "strata/comm.h"
#include "strata/strata.h"

#include <stdatomic.h>

typedef struct rt_param {
    char *name;
    int ndim;
    int64_t shape[STRATA_MAX_DIMS];
    strata_precond_shape view; /* matrix view: (shape[0], prod(shape[1:])), or slices if stacked */
    int layer;
    strata_role role;
    strata_optimizer requested;
    strata_optimizer routed;
    bool tail;              /* routed to AdamW by the routing rule */
    int owner;              /* rank that owns it (runs its optimizer); -1: every rank
                               (gather sharding) */
    size_t shard_offset, tail_offset; /* strata_param_layout */
    int64_t materialized_at; /* step whose weights this rank holds (non-owners) */
    float *data, *grad;     /* data: the weights this rank uses now (managed: strata's
                               owned buffer, a layer buffer while materialized, else NULL) */
    float *user_data;       /* the caller's strata_param_desc.data */
    float *user_grad;       /* the caller's strata_param_desc.grad (grad is strata's with
                               sharded gradients in effect) */
    bool managed;           /* strata manages the weights (strata_param_desc.managed, active
                               with owner sharding over several ranks) */
    const strata_precond_family *fam;
    void *state;            /* the family's state (owner only) */
    int entry;              /* its handle in the refresh engine */
    int refresh_offset;     /* refresh phase in [0, F) */
    int fan_slot;           /* its slot in strata_runtime.fan when its update runs on the
                               step team (plain and owned here), else -1 */
    bool hyper_set;         /* strata_param_set_hyper: lr and weight_decay below replace
                               the routed family's configured ones */
    float lr, weight_decay; /* with hyper_set: this parameter's values (every rank) */
    bool inactive;          /* strata_param_set_active(false): skipped by the steps */
} rt_param;

/* One plain parameter's update of the current step, run on the step team
 * (strata_config.step_threads): what strata_refresh_apply_plain returned
 * there, read back by the training thread in parameter order. */
typedef struct rt_fan {
    int param;                  /* index in strata_runtime.params */
    strata_optim_counters cnt;  /* this update's counters alone */
    strata_status st;
    double seconds;             /* its wall time on the thread that ran it */
    char err[256];              /* strata_last_error() of that thread when st != OK */
} rt_fan;

struct strata_runtime {
    strata_config cfg;
    atomic_int busy;       /* 1 while a call that must not overlap a step runs
                              (strata_rt_busy_enter) */
    strata_logger log;     /* from cfg: the sink every component writes through */
    int testing_worker_delay_us; /* runtime/testing.h */
    /* runtime/testing.h: checkpoint I/O fault injection. Every file-system
     * call of strata_save (mkdtemp, open, write, fsync, close, rename) counts
     * one; call number ckpt_fail_at (1-based; 0: none) fails with ckpt_errno. */
    int64_t testing_ckpt_calls, testing_ckpt_fail_at;
    int testing_ckpt_errno;
    bool testing_device_roots;   /* runtime/testing.h */
    char *nvme_dir;
    strata_backend *be;
    strata_comm *comm;     /* cfg.comm, or an owned self communicator */
    bool own_comm;
    rt_param *params;
    int n_params, cap_params;
    bool committed;
    int max_layer;
    int64_t t; /* steps taken */
    float lr_scale;
    bool stepping;         /* inside strata_step (a log callback calling back in) */
    unsigned char *layer_reduced; /* per layer: backward hook seen since the last step */
    bool warned_missing_hook;
    bool warned_overflow, warned_direction, warned_root_failure; /* each logged once */
    strata_stats stats;
    strata_stats stats_base;   /* state.c: counters restored by strata_load
                                  (strata_rt_stats_resume), added by strata_stats_get */
    double critical_mark;   /* the engine's critical path at the end of the last step */
    strata_refresh *engine;
    /* The step team (strata_config.step_threads > 1 resolved, at least two plain
       parameters owned here): the plain parameters' updates run on it before the
       other parameters' steps; NULL: every update in the parameter loop. */
    strata_worker_team *team;
    rt_fan *fan;               /* n_fan slots, costliest update first */
    int n_fan;
    int64_t fan_t;             /* the step the team is running */
    int rank, world;
    int group_size, n_groups;  /* shard groups (HSDP): K ranks each */
    strata_comm *group;        /* this rank's group (the world when one group) */
    bool own_group;
    strata_replicas *replica_set; /* HSDP (n_groups > 1): this rank's replica set, over which
                                  the refresh engine ships each block's result */
    int *replicas;             /* scratch: the owners of one parameter in every group */
    size_t *shard_counts;  /* 2 world: counts and displacements of one collective (commit) */
    double *norm_parts;    /* per parameter: [sum of squares, non-finite] (2 n_params) */
    /* Managed weights (strata_param_desc.managed): per layer, the step whose
       weights this rank's layer buffer holds (-1: released; the same on every
       rank), the buffer (NULL when released or when this rank owns all of the
       layer), and its bytes (the layer's managed parameters this rank does not
       own). */
    bool managed;
    int64_t *layer_held_at;
    float **layer_buf;
    size_t *layer_bytes;
    size_t param_bytes_now; /* weights resident on this rank: owned or caller-held + layer
                               buffers */
    /* Sharded gradients (strata_config.shard_gradients in effect): an owned
       parameter's grad is strata's buffer from commit to uncommit; the ones
       this rank does not own point into their layer's lent buffer
       (grad_buf[layer], grad_layer_bytes[layer] bytes: the layer's
       non-owned gradients) from strata_layer_grad_begin until the layer's
       backward hook, else NULL. */
    bool shard_grads;
    float **grad_buf;
    size_t *grad_layer_bytes;
    bool warned_grad_unlent;
    float **gather_stage;  /* gather sharding: per parameter, this rank's shard of the
                              reduced gradient */
    strata_grad_buckets *buckets; /* non-blocking bucketed reduce-to-owner (grad_bucket.h);
                              NULL: the blocking per-tensor path (one rank, gather
                              sharding, a transport without the non-blocking slots, a
                              non-CPU backend) */
    /* The memory ledger (strata_memory_ledger_get): the backend, the engine
       and the families' states charge it; `held` is what commit charged here
       (the weights and gradients registered, owned managed weights, the
       gather stage, the gradient buckets), released by uncommit. */
    strata_ledger ledger;
    strata_ledger_hold held;
    /* The step scratch every runtime-driven state borrows (the family
       table's step_scratch / set_step_scratch): one backend buffer of the
       largest parameter's need, set at commit, freed by uncommit after the
       states. */
    void *step_scratch;
    size_t step_scratch_bytes;
};

/* runtime.c, for plan.c: the family of kind `o` under *c and its
 * configuration (*cfg; NULL for an unknown kind); the routing rule's tail
 * test for a parameter of this role and view; the configuration as
 * strata_create resolves it; strata_create's configuration check. */
const strata_precond_family *strata_rt_family_for(const strata_config *c, strata_optimizer o,
                                                  const void **cfg);
bool strata_rt_is_tail_rule(const strata_config *c, strata_role role, int ndim, int64_t rows,
                            int64_t cols);
void strata_rt_config_resolve(strata_config *c);
strata_status strata_rt_check_config(const strata_config *c);

/* state.c: add the counters a load restored (rt->stats_base, set by
 * strata_rt_stats_resume) to `out`, a strata_stats_get result. */
void strata_rt_stats_base_add(const strata_runtime *rt, strata_stats *out);

#endif
