/* Private state of the runtime, shared by runtime.c (registry, routing,
 * step) and async.c (workers, coherence, tiers). */
#ifndef STRATA_RUNTIME_INTERNAL_H
#define STRATA_RUNTIME_INTERNAL_H

#include <stdatomic.h>

#include "base/clock.h"
#include "base/log.h"
#include "coherence/coherence.h"
#include "strata/strata.h"
#include "tiers/tiers.h"
#include "workers/workers.h"

typedef struct rt_param {
    char *name;
    int ndim;
    int64_t shape[STRATA_MAX_DIMS];
    int64_t rows, cols; /* matrix view: (shape[0], prod(shape[1:])), or one slice if stacked */
    int64_t batch;      /* stacked: number of slices; else 1 */
    size_t numel;
    int layer;
    strata_role role;
    strata_optimizer requested;
    strata_optimizer routed;
    float *data, *grad;
    float *adam_m, *adam_v; /* AdamW moments (one device allocation, 2*numel) */
    strata_shampoo_state *shampoo;
    strata_muon_state *muon;
    strata_soap_state *soap;
    strata_kl_shampoo_state *kl;
    int first_block;        /* async: index of its first block in rt->blocks */
    int refresh_offset;     /* Shampoo refresh phase in [0, F) (stagger_refresh) */
} rt_param;

struct strata_runtime;

/* A root job: the inverse roots of one block from one snapshot (slot). */
typedef struct root_job {
    strata_job job;
    struct strata_runtime *rt;
    int block, slot;
} root_job;

typedef struct async_slot {
    float *buf;      /* host placement: snapshot [L | R], then the roots in place */
    void *nvme;      /* nvme placement: extent holding snapshot, then roots */
    strata_io io, io_r; /* nvme placement: the snapshot writes of L and R */
    bool failed[2];  /* the root of L / R failed; set by the worker */
    root_job job;
} async_slot;

typedef enum async_kind { ASYNC_SHAMPOO = 0, ASYNC_SOAP = 1, ASYNC_KL = 2 } async_kind;

typedef struct async_block {
    async_kind kind;
    strata_coh_registry *reg; /* the registry of its kind */
    int rb;                   /* its index in that registry */
    bool soap_ready;          /* SOAP, KL: the synchronous first call (full eigh) is done */
    rt_param *p;
    int b;           /* block index within p's Shampoo state */
    int rows, cols;  /* Shampoo: block shape; SOAP: rotated side dims (0 = unrotated) */
    size_t floats;   /* Shampoo: rows^2 + cols^2; SOAP: 3 (rows^2 + cols^2) + rows + cols;
                        KL: 3 (rows^2 + cols^2) */
    size_t r_offset; /* byte offset of R in an nvme extent (4 KiB aligned) */
    size_t nvme_bytes;
    bool on_nvme;
    async_slot *slots;
    int installed_slot; /* mirrors the registry, for failure fix-ups */
    /* nvme placement: the installed root lives in resident[cur]. */
    float *resident[2];
    int cur;
    bool have_root[2];
    strata_io io;       /* prefetch of a root into resident[1 - cur] */
    bool io_pending;
    int64_t io_version;
} async_block;

struct strata_runtime {
    strata_config cfg;
    strata_logger log;     /* from cfg: the sink every component writes through */
    int testing_worker_delay_us; /* runtime/testing.h */
    char *nvme_dir;
    strata_backend *be;
    rt_param *params;
    int n_params, cap_params;
    bool committed;
    int max_layer;
    int64_t t; /* steps taken */
    float lr_scale;
    unsigned char *layer_reduced; /* per layer: backward hook seen since the last step */
    bool warned_missing_hook;
    strata_stats stats;
    /* async */
    strata_worker_pool *pool;
    strata_coh_registry *coh;      /* Shampoo blocks */
    strata_coh_config coh_cfg;
    strata_coh_registry *coh_soap; /* SOAP parameters (one block each) */
    strata_coh_config coh_soap_cfg;
    strata_coh_registry *coh_kl;   /* KL-Shampoo (eigenbasis form) parameters, one block each */
    strata_coh_config coh_kl_cfg;
    strata_tier *host, *nvme;
    async_block *blocks;
    int n_blocks, n_slots;
    float **worker_scratch; /* per worker, nvme jobs: max block floats */
    size_t scratch_floats;
    _Atomic int64_t root_refreshes, root_failures, root_retries;
    _Atomic uint64_t d2h_bytes;
    _Atomic int64_t io_errors;
};

/* async.c */
strata_status rt_async_commit(struct strata_runtime *rt);
void rt_async_destroy(struct strata_runtime *rt);
strata_status rt_async_prefetch(struct strata_runtime *rt, int layer);
strata_status rt_async_shampoo_step(struct strata_runtime *rt, rt_param *p, int64_t t,
                                    strata_optim_counters *cnt);
bool rt_async_kl_eligible(const struct strata_runtime *rt, const rt_param *p);
strata_status rt_async_kl_step(struct strata_runtime *rt, rt_param *p, int64_t t,
                               strata_optim_counters *cnt);
strata_status rt_async_soap_step(struct strata_runtime *rt, rt_param *p, int64_t t,
                                 strata_optim_counters *cnt);
void rt_async_stats(struct strata_runtime *rt, strata_stats *s);

#endif
