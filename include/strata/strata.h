/* strata/strata.h — the runtime: parameters, hooks, the optimizer step, stats.
 *
 * A training loop creates a runtime from a strata_config, registers every
 * parameter (name, shape, layer, data and gradient pointers), commits, and
 * then per optimizer step:
 *
 *     for l in 0..L-1:        strata_hook_forward(rt, l);  forward of layer l
 *     for l in L-1..0:        backward of layer l;  strata_hook_backward(rt, l)
 *     strata_step(rt);
 *
 * With gradient accumulation the hooks run per micro-batch and strata_step
 * once per optimizer step (the caller accumulates into the gradient buffers).
 * With managed weights (strata_param_desc.managed: several ranks, owner
 * sharding) a rank keeps only the weights it owns; the loop reads a layer's
 * weights through strata_param_data between strata_hook_forward (or
 * strata_layer_materialize before its backward) and the layer's release
 * point ("managed weights" below).
 *
 * Routing (which optimizer updates a parameter) — one rule, printed at commit
 * when verbose:
 *   - an explicit per-parameter `optimizer` wins;
 *   - role EMBEDDING, HEAD or VECTOR, and every tensor with ndim <= 1 (or a
 *     2-D tensor with a dimension of 1 when route_degenerate_to_adamw) go to
 *     AdamW (the "tail");
 *   - every other 2-D tensor goes to cfg.matrix_optimizer; a tensor with
 *     ndim > 2 is flattened to (shape[0], prod(shape[1:])), unless it is a
 *     3-D tensor marked `stacked` (independent matrices; Muon only).
 *
 * Ranks and owners (strata_config.comm; NULL: this process alone, rank 0 of
 * 1). With owner or zero1 sharding every parameter has an owner rank, planned
 * at commit (on several ranks, rank 0 measures each update's cost, balances
 * the owners within each group of shard_group_size ranks, and broadcasts the
 * plan; "Several ranks" in README.md). The backward hook reduces the layer's
 * gradients to their owners (bucketed and non-blocking where the transport
 * allows; with HSDP to the owner in every group), the forward hook
 * materializes the layer's managed weights from their owners (zero1: the
 * owners broadcast the new weights at the step), and strata_step runs the
 * optimizer of the parameters this rank owns, the global gradient norm and
 * the non-finite veto going through the communicator's scalar allreduce so
 * that every rank takes the same decision. Gather sharding reduces to even
 * element shards instead and every rank updates everything. On one rank the
 * hooks' collectives are identities; on any number they validate the layer
 * sequence and record that the layer's gradients are final. A step that
 * finds a parameter whose layer had no backward hook since the previous step
 * counts it in stats.missing_backward_hooks and logs a warning once.
 *
 * Threading: one runtime is driven by one thread at a time. strata_step and
 * the calls that must not overlap it (strata_param_add, strata_commit,
 * strata_set_lr_scale, strata_param_set_buffers, strata_param_set_hyper,
 * strata_param_set_active, strata_save, strata_load)
 * take an atomic busy flag: one of them called while another runs on the
 * same runtime (from another thread) returns STRATA_ERR_STATE ("another
 * call on this runtime is in progress") and changes nothing.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/backend.h"
#include "strata/comm.h"
#include "strata/optim.h"
#include "strata/status.h"
#include "strata/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 2
#define STRATA_VERSION_PATCH 0
#define STRATA_VERSION_STRING "0.2.0"
#define STRATA_CONFIG_VERSION 11
#define STRATA_MAX_DIMS 4

/* Where each 2-D matrix and its optimizer state live across ranks (DESIGN.md
 * "Distributed"). */
typedef enum strata_sharding {
    STRATA_SHARD_OWNER = 0, /* owner-shaped: each matrix whole on one owner rank (the
                               planner's choice), its gradient reduced to the owner after
                               its layer's backward, its weights broadcast by the owner
                               before its layer's forward: no matrix bytes move at the
                               optimizer step */
    STRATA_SHARD_GATHER = 1, /* baseline, gather-then-compute (FSDP2 + a matrix optimizer):
                               gradients reduce-scattered to even element shards after
                               backward; at the optimizer step every rank all-gathers every
                               full gradient and computes every matrix update */
    STRATA_SHARD_ZERO1 = 2, /* baseline, ZeRO-1 owner: full weights resident everywhere,
                               the owner computes, then broadcasts the new weights at the
                               end of the optimizer step */
} strata_sharding;

typedef struct strata_config {
    int version;                        /* STRATA_CONFIG_VERSION */
    strata_optimizer matrix_optimizer;  /* for 2-D matrices: shampoo (default), muon, soap,
                                           kl-shampoo or adamw */
    strata_adamw_config adamw;          /* the tail (1-D, embeddings, head), and matrices
                                           when matrix_optimizer is AdamW */
    strata_shampoo_config shampoo;
    strata_muon_config muon;
    strata_soap_config soap;
    strata_kl_shampoo_config kl_shampoo;
    strata_normuon_config normuon;
    strata_dion2_config dion2;
    int precondition_frequency; /* F, the engine's refresh period in steps: Shampoo's
                                 inverse roots, SOAP's and KL-Shampoo's eigenbases are
                                 refreshed every F steps (each family's start and lag
                                 follow from F, strata/optim.h). One F for every family of
                                 the runtime; 0 = each family's own default period
                                 (Shampoo 1, SOAP 10, KL-Shampoo 10; default 0). The
                                 runtime writes it into the families' copies at
                                 strata_create: the precondition_frequency fields of the
                                 nested shampoo, soap and kl_shampoo configs are the
                                 one-tensor API's and stay at their defaults here (another
                                 value is refused, naming the field) */
    float max_grad_norm;      /* clip the global gradient L2 norm to this; 0 = off (default) */
    bool route_degenerate_to_adamw; /* 1 x N and N x 1 matrices to AdamW; default true */
    bool stagger_refresh;     /* Shampoo, SOAP, KL-Shampoo: give each matrix parameter a
                                 refresh phase in [0, F) (the optimizer config's
                                 refresh_offset), chosen at commit so that
                                 every step of a period carries about the same inverse-root
                                 work (largest first onto the least-loaded phase; cost
                                 sum of n^3 over the factors). The same roots per period,
                                 no every-F-th-step spike; sync and async alike (S = 0
                                 async stays bit-identical to sync). default false */
    strata_backend_kind backend; /* where optimizer state lives and runs: STRATA_BACKEND_CPU
                                 (default) or STRATA_BACKEND_CUDA (STRATA_ERR_UNSUPPORTED at
                                 create when not built or no GPU) */
    int blas_threads;         /* BLAS threads for the step; 0 = the library's default
                                 (OpenBLAS: OPENBLAS_NUM_THREADS, else all cores; a
                                 -Dblas=blis build: BLIS_NUM_THREADS or OMP_NUM_THREADS,
                                 else 1), or 1 in async mode (the workers take the other
                                 cores) */
    int step_threads;         /* threads (the training thread included) that run the step's
                                 updates of parameters with nothing to refresh (Muon
                                 matrices, the AdamW tail, AdamW matrices) side by side, one
                                 parameter per thread at a time; each parameter's update
                                 runs whole on one thread with the same operations, so the
                                 results do not depend on this (bit-identical). 0 = auto
                                 (default): the online cores, at most 8, when the BLAS
                                 library runs one thread (blas_threads 1, or its default
                                 is 1), the run is synchronous (no refresh workers) and on
                                 one rank, else 1; 1 = off. An explicit value above the
                                 online cores is taken (with a warning in the log), and
                                 with blas_threads > 1 each team thread runs multi-threaded
                                 BLAS: the cores are oversubscribed. The CPU backend only
                                 (others run 1). At most 256. The value in use is
                                 strata_stats.step_threads; strata_commit returns
                                 STRATA_ERR_INTERNAL when the team's threads cannot start.
                                 The optimizer counters' seconds (e.g. precondition) are
                                 summed over the team's threads: thread time, not wall. */

    /* Asynchronous second-order state (DESIGN.md parts 2 and 3): Shampoo inverse roots,
       SOAP and KL-Shampoo eigenbasis refreshes (both forms). */
    bool async;               /* inverse roots on worker threads; default false */
    int staleness;            /* S, steps a root may be used past its refresh point's
                                 due step; the block's staleness stays <= F-1+S; default 1 */
    strata_coh_mode install_mode; /* STRATA_COH_FIXED (default, reproducible) or EAGER */
    int workers;              /* worker threads, 0..1024; 0 = online cores - 1 (at least 1,
                                 at most 1024) */
    bool pin_workers;         /* hwloc-pin workers to the last cores; default false */
    double wait_timeout_s;    /* bound of every staleness wait, seconds; default 600 */
    strata_tier_kind roots_tier; /* where inverse roots live: STRATA_TIER_HOST (default) or
                                 STRATA_TIER_NVME; blocks that do not fit host_budget go
                                 to nvme when nvme_dir is set */
    size_t host_budget;       /* host tier bytes; 0 = unlimited */
    const char *nvme_dir;     /* nvme tier directory (copied); NULL = no nvme tier */
    size_t nvme_budget;       /* nvme tier bytes; 0 = unlimited */
    int nvme_queue_depth;     /* io_uring depth (chunks in flight, one staging buffer each),
                                 8..4096; default 16 */
    size_t nvme_chunk_bytes;  /* nvme staging chunk: the largest single transfer and the size
                                 of each of the nvme_queue_depth staging buffers, a multiple
                                 of 4096 in [4096, 1 GiB]; default 1 MiB. Smaller chunks fit
                                 a low RLIMIT_MEMLOCK (queue depth x chunk is registered) */
    strata_comm *comm;        /* ranks and collectives (strata/comm.h); NULL = this process
                                 alone (a self communicator). Not owned: it must outlive
                                 the runtime. Each parameter's owner rank is planned at
                                 commit (owner, zero1 sharding; see "Ranks and owners"
                                 above); the step runs the parameters this rank owns and
                                 takes the global gradient norm and the non-finite veto
                                 through comm's scalar allreduce. */
    strata_sharding sharding; /* how matrices and their state are spread over the ranks:
                                 STRATA_SHARD_OWNER (default), GATHER or ZERO1 (baselines) */
    int shard_group_size;     /* K (hierarchical sync, HSDP): matrices are owner-sharded
                                 inside each group of K consecutive ranks and replicated
                                 across the groups (K must divide the world size; 0 = the
                                 whole world, one group). A replicated matrix's gradient is
                                 reduced within each node, then along the node leaders,
                                 then shipped to its owner in every group; weights are
                                 materialized within the group. Each preconditioner
                                 block is refreshed by one of its owners (spread over
                                 the groups) and its result shipped to the others
                                 through the node leaders when it is due, so that all
                                 install it at the same step (install_mode EAGER then
                                 runs as FIXED). Owner/zero1 sharding. */
    bool average_gradients;   /* the reduced gradient is the mean over the ranks (true,
                                 DDP's convention: sum in rank order, then times
                                 (float)(1.0 / world_size)) or the sum (false); no effect
                                 on one rank */
    size_t grad_bucket_bytes; /* cap of one gradient bucket, bytes: after a layer's
                                 backward, its gradients going to the same owner(s) travel
                                 as one non-blocking message of at most this size (a larger
                                 tensor travels alone), overlapped with the rest of the
                                 backward; strata_step waits for what is still in flight.
                                 Staging per rank: 2 x max(largest bucket, min(all
                                 gradients, 4 x this)). A multiple of 4 in [4, 1 GiB];
                                 default 4 MiB. Used with several ranks on a transport with
                                 the non-blocking slots (MPI) and the CPU backend; otherwise
                                 each tensor is reduced by a blocking call in the hook */
    strata_log_level log_level; /* default STRATA_LOG_WARN */
    strata_log_fn log_fn;     /* NULL = stderr */
    void *log_user;
    strata_stale_correction stale_correction; /* the safety valve (async only): where a
                                 step would wait for a due result still on a worker,
                                 STRATA_STALE_CORRECTION_NEWTON installs the newest ready
                                 one and corrects each inverse root toward its current
                                 factor with one Newton step (kept only when its measured
                                 residual ||I - X^p (L + eps I)||_F shrinks; else the
                                 step waits), and a refresh point whose block has no free
                                 slot is skipped. Shampoo only (SOAP and KL-Shampoo are
                                 refused: their results are eigenbases installed in
                                 order); host results tier, no nvme tier, no HSDP
                                 replicas. A run then depends on the workers' speed and
                                 its staleness may exceed F-1+S (counted:
                                 strata_stats.stale_*). Default OFF: waits, bit for bit
                                 as before. */
    /* Storage of the matrix optimizer's second-order state, per kind
     * (strata_state_dtype, strata/optim.h: F32 default, or BF16 rounded to
     * nearest even and widened to float32 when read; compute stays
     * float32/float64, eigendecompositions float64). Written into every
     * family configuration that can store that kind in bfloat16 (a family's
     * own field, e.g. shampoo.factor_dtype, is kept when this is F32).
     * Supported: shampoo factors (needs shampoo.beta2 <= 1 - 2^-8: a
     * bfloat16 running sum stops moving) and roots; soap factors (same
     * rule for its factor EMA). A kind the matrix
     * optimizer cannot store in bfloat16 is refused by strata_create
     * (STRATA_ERR_UNSUPPORTED); AdamW's state (1-D parameters) stays
     * float32. Recorded in checkpoints: resuming with other dtypes is
     * refused, never converted. */
    strata_state_dtype state_dtype_factors; /* Shampoo's L, R; SOAP's factors */
    strata_state_dtype state_dtype_roots;   /* Shampoo's inverse roots */
    strata_state_dtype state_dtype_moments; /* none supported yet */
    bool shard_gradients;     /* sharded gradients (ZeRO-2; issue #21 item 3): a rank keeps
                                 a full-size gradient buffer only for the parameters it
                                 owns (strata's, allocated at commit); a parameter it does
                                 not own gets its gradient into a buffer strata lends per
                                 layer, from strata_layer_grad_begin(layer) until
                                 strata_hook_backward(layer) has packed it into a bucket
                                 reduced to the owner (see "sharded gradients" below). In
                                 effect with STRATA_SHARD_OWNER over several ranks on the
                                 CPU backend (HSDP included); otherwise no effect. In
                                 effect, the registered strata_param_desc.grad is not read
                                 or written after commit (the caller may free it) and the
                                 ledger's gradients are strata's buffers. Bit-identical
                                 results (the sums are the same). Default false. */
    bool page_state;          /* state paging (issue #21 item 6): the whole second-order state
                                 of every matrix (Shampoo's factors, grafting and momentum;
                                 SOAP's and KL-Shampoo's factors, eigenbases and moments)
                                 lives in the nvme tier between its steps and is read back
                                 into its own memory just before its step (the next
                                 matrix's read ahead in step order), so at most two
                                 matrices' states are in host memory at once; the roots
                                 and eigenbasis slots follow roots_tier and host_budget
                                 as before. Needs async, nvme_dir and the CPU backend
                                 (STRATA_ERR_INVALID_ARG otherwise). strata_save and
                                 strata_load page each state in and out in turn (at most
                                 two resident), in the same files as a resident run's
                                 (either loads the other's). A failed read or write
                                 surfaces as STRATA_ERR_IO from strata_step (from
                                 strata_save: nothing published), never as bad values.
                                 Bit-identical results. Default false. */
    int staleness_warmup;     /* a synchronous warm start of the asynchronous runtime (issue
                                 #23): steps t <= staleness_warmup run at staleness 0 (each
                                 waits for its own refresh: through that step the run is
                                 bit-identical to the synchronous one), later steps at
                                 `staleness` (staleness <= F-1+S throughout). The one-step
                                 lag costs most while the factors and the learning rate
                                 change fastest (the learning-rate warm-up); 0 = off
                                 (default). No effect without async or with staleness 0. */
} strata_config;

/* Fields of strata_config (the nested optimizer configurations count one
 * each). strata_create checks every one (below); tests/unit/test_validation.c
 * walks each with a table row and fails when this count, the rows and the
 * struct's layout disagree: adding a field means adding its check, its row
 * and 1 here. */
#define STRATA_CONFIG_FIELDS 43

/* The library's version, "MAJOR.MINOR.PATCH" (STRATA_VERSION_STRING of the
 * build that produced the shared library; compare with the header's macro to
 * detect a header/library mismatch). Never NULL. */
STRATA_API const char *strata_version(void);

/* Fill `cfg` with the defaults above and each optimizer's defaults.
 * Environment overrides (read once per process, base/env.h's table):
 * STRATA_LOG_LEVEL (an integer 0..3, the log_level). Errors:
 * STRATA_ERR_INVALID_ARG (cfg NULL; STRATA_LOG_LEVEL not an integer in
 * [0, 3]: cfg is filled all the same, log_level WARN, and strata_create
 * refuses it too). */
STRATA_API strata_status strata_config_default(strata_config *cfg);

typedef enum strata_role {
    STRATA_ROLE_AUTO = 0,      /* decide from the shape */
    STRATA_ROLE_MATRIX = 1,    /* a hidden-layer weight matrix */
    STRATA_ROLE_EMBEDDING = 2, /* token/position embedding table */
    STRATA_ROLE_HEAD = 3,      /* output (LM head) projection */
    STRATA_ROLE_VECTOR = 4,    /* bias, norm scale/shift */
} strata_role;

typedef struct strata_param_desc {
    const char *name;               /* copied; unique within the runtime */
    int ndim;                       /* 0..STRATA_MAX_DIMS */
    int64_t shape[STRATA_MAX_DIMS]; /* row-major, each >= 1 */
    int layer;                      /* hook layer that produces/consumes it, 0..2^20-1:
                                       per-layer state is sized by the largest layer id,
                                       so ids are meant dense (0, 1, 2, ...) */
    strata_role role;
    strata_optimizer optimizer;     /* STRATA_OPTIM_DEFAULT = follow the routing rule */
    bool stacked;  /* ndim == 3 only: shape[0] independent shape[1] x shape[2] matrices
                      (per-expert or per-head weights). Muon orthogonalizes each one
                      separately (strata_muon_state_create_batched); the other matrix
                      optimizers refuse it at commit (STRATA_ERR_UNSUPPORTED). Default
                      false: a tensor with ndim > 2 is one (shape[0], prod(rest)) matrix. */
    strata_mem_kind memory;  /* where data and grad live: STRATA_MEM_DEVICE (0, the default:
                                the backend's memory; on the CPU backend ordinary host
                                memory), STRATA_MEM_HOST, HOST_PINNED or MANAGED. The CPU
                                backend reads all of them in place. */
    float *data;  /* float32 weights (float-aligned), prod(shape) elements; caller-owned, updated in place
                     (unless `managed` is in effect: then only the initial values) */
    float *grad;  /* float32 gradient, same size; caller-owned, read at strata_step */
    bool managed; /* strata manages the weights (ZeRO-3 resident memory). In effect only
                     with STRATA_SHARD_OWNER over several ranks on the CPU backend (the
                     same ranks on every rank); otherwise ignored: `data` stays the weights,
                     as without the flag. In effect: `data` holds the initial values (the
                     same on every rank) and is read by strata_commit, never after (the
                     caller may free it once commit returns OK). The owner keeps the
                     weights in a buffer strata allocates; the other ranks hold them only
                     while the parameter's layer is materialized: from
                     strata_hook_forward(layer) or strata_layer_materialize(layer) until the
                     release point (strata_layer_release(layer), strata_hook_backward(layer),
                     or the next strata_step). Find the current weights with
                     strata_param_data. Default false. */
} strata_param_desc;

typedef int32_t strata_param_id;

typedef struct strata_runtime strata_runtime;

/* Create a runtime on cfg.backend. `cfg` is copied. Every field is checked
 * here, before anything is created, each optimizer's configuration included
 * (strata_<optimizer>_config_check: a parameter may ask for any optimizer):
 * NaN and +-inf are refused everywhere, then each field's range (version,
 * known enums, max_grad_norm >= 0, blas_threads in [0, 4096], workers in
 * [0, 1024] (the worker pool's range, so commit accepts it too),
 * step_threads in [0, 256],
 * staleness and shard_group_size >= 0, wait_timeout_s > 0,
 * nvme_queue_depth in [8, 4096], nvme_chunk_bytes a multiple of 4096 in
 * [4096, 1 GiB], roots_tier host or nvme, the nvme roots tier with an
 * nvme_dir when async; precondition_frequency >= 0, the families' copies of it
 * left alone; a bad STRATA_LOG_LEVEL). At STRATA_LOG_INFO it logs every
 * environment variable strata reads that is set. Errors:
 * STRATA_ERR_INVALID_ARG (NULL, a field out of
 * range: strata_last_error() names it, "strata_config.<field> = ..." or
 * "<optimizer>.<field> = ..."; shard_group_size not dividing the world),
 * STRATA_ERR_UNSUPPORTED (the backend is not built in or has no device;
 * shard_group_size with gather sharding), STRATA_ERR_NOMEM, the
 * communicator's errors (splitting it into groups). */
STRATA_API strata_status strata_create(const strata_config *cfg, strata_runtime **out);

/* Register a parameter before strata_commit. Errors: STRATA_ERR_STATE
 * (after commit; another call in progress, see Threading), STRATA_ERR_INVALID_ARG
 * (NULL pointers, bad shape, duplicate name, negative layer; an element count
 * over 2^56 or a side over 2^31, whose state's byte counts would overflow; a
 * name the checkpoint format reserves: "__metadata__" or any name with '/';
 * buffers that overlap: the gradient with the weights, or either with a
 * registered parameter's weights or gradient -- except gradients that start
 * at the same address: one buffer of zeros for parameters without a
 * gradient, which must stay zeros, since the step scales gradients in place
 * when it clips and reduces them in place over ranks). Tied weights, e.g. a tied
 * embedding and LM head, are one parameter used by both layers: register the
 * buffer once and sum both uses' gradients into its gradient. On error
 * nothing is registered. */
STRATA_API strata_status strata_param_add(strata_runtime *rt, const strata_param_desc *d,
                                          strata_param_id *out);

/* Route parameters to optimizers and allocate all optimizer state in the
 * device tier. After commit no allocation happens on the step path.
 * On error the optimizer state, the engine and the workers commit made are
 * freed again.
 * Errors: STRATA_ERR_INVALID_ARG (rt NULL; S too large for an optimizer
 * whose strata_optimizer_info sets max_staleness, none of the built-in
 * ones since S >= F chains SOAP's and KL-Shampoo's refreshes; results
 * placed on nvme without an nvme tier), STRATA_ERR_STATE (no parameters, or
 * committed twice), STRATA_ERR_UNSUPPORTED (a stacked parameter routed to a
 * matrix optimizer other than Muon), STRATA_ERR_NOMEM (the device memory, or
 * a host budget that cannot hold the refresh slots, with the sizes),
 * STRATA_ERR_IO (the nvme tier: directory, file or io_uring), STRATA_ERR_INTERNAL
 * (the owner planner), a communicator status (the owner plan is broadcast). */
STRATA_API strata_status strata_commit(strata_runtime *rt);

/* Before layer `layer`'s forward: materialize its parameters on this rank
 * (managed ones into a layer buffer until its release point, below).
 * Errors: STRATA_ERR_STATE (before commit), STRATA_ERR_INVALID_ARG (a layer
 * < 0 or above every parameter's layer; one between them that no parameter
 * declared is fine, and does nothing), STRATA_ERR_NOMEM
 * (a managed layer's buffer), the communicator's. */
STRATA_API strata_status strata_hook_forward(strata_runtime *rt, int layer);

/* Materialize every parameter on this rank now (the owners broadcast what
 * changed since each rank last received it): call before using the weights
 * outside a forward pass's hooks (evaluation, saving). Managed parameters
 * (strata_param_desc.managed) are left alone: they are materialized per layer
 * (strata_layer_materialize). Collective: every rank calls it.
 * Errors: STRATA_ERR_STATE (before commit), the communicator's. */
STRATA_API strata_status strata_sync_weights(strata_runtime *rt);

/* ---- managed weights (strata_param_desc.managed; ZeRO-3, DESIGN.md
 * "Distributed", MatrixFSDP's owner-shaped shards)
 *
 * Lifetime of a managed parameter's weights on a rank that does not own it:
 *
 *   strata_hook_forward(rt, l) or strata_layer_materialize(rt, l)
 *       the owners broadcast layer l's managed weights into one buffer per
 *       layer on every other rank of the shard group (no broadcast when the
 *       layer is still held from earlier in the same step);
 *   strata_param_data(rt, id, &w)      w is valid from here ...
 *   ... until the layer's release point, whichever comes first:
 *       strata_layer_release(rt, l)    (the caller is done with the layer:
 *                                       e.g. after its forward, or after the
 *                                       tied LM head that reads the embedding)
 *       strata_hook_backward(rt, l)    (its backward is done)
 *       strata_step(rt)                (the weights change)
 *       strata_load(rt, ...)           (the weights change)
 *
 * A backward pass re-materializes a layer released after its forward:
 * strata_layer_materialize(rt, l) before the layer's backward (the backward
 * pre-hook). The owner's pointer stays valid from strata_commit to
 * strata_destroy and is updated in place by strata_step. Per-layer buffers
 * are allocated at materialize and freed at release, so a rank holds its
 * owned weights plus the layers it holds at once; stats.param_bytes_peak
 * measures exactly that. Gradient buffers stay the caller's (full size).
 * Unmanaged parameters (and every parameter with one rank, gather or zero1
 * sharding) keep the caller's `data`: strata_param_data returns it. */

/* Before layer `layer`'s backward (or whenever its weights are needed
 * again): materialize its managed weights on this rank, as
 * strata_hook_forward does (unmanaged ones are brought up to date too), but
 * counts no forward hook and prefetches nothing. Collective within the shard
 * group: every rank calls it for the same layers in the same order. A layer
 * no parameter declared, below the largest declared one, is fine. Errors:
 * STRATA_ERR_INVALID_ARG (NULL rt, layer < 0 or above every parameter's
 * layer), STRATA_ERR_STATE (before commit), STRATA_ERR_NOMEM (the layer
 * buffer, with its size), the communicator's. */
STRATA_API strata_status strata_layer_materialize(strata_runtime *rt, int layer);

/* Release layer `layer`'s materialized weights on this rank: its buffer is
 * freed and the pointers strata_param_data gave for its managed parameters
 * that this rank does not own become invalid. Local (no communication); a
 * layer not held is fine; unmanaged parameters are unaffected. Every rank
 * must release the same layers at the same points (the broadcasts of the
 * next materialize depend on it). Errors: STRATA_ERR_INVALID_ARG (NULL rt,
 * layer < 0 or above every parameter's layer), STRATA_ERR_STATE (before
 * commit). */
STRATA_API strata_status strata_layer_release(strata_runtime *rt, int layer);

/* The float32 weights of parameter `id` on this rank now (prod(shape)
 * elements, row-major): for a managed parameter that this rank does not own,
 * the layer buffer of the last materialize, valid until the release point
 * above; for one it owns, strata's buffer (strata_commit to strata_destroy);
 * otherwise the caller's strata_param_desc.data. The pointer is strata's:
 * read it (and for the owner, nothing else writes it but strata_step and
 * strata_load); never free it. Thread: the runtime's thread.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, bad id), STRATA_ERR_STATE (before
 * commit; a managed parameter whose layer is not materialized on this rank,
 * *out = NULL). */
STRATA_API strata_status strata_param_data(const strata_runtime *rt, strata_param_id id,
                                           float **out);

/* ---- sharded gradients (strata_config.shard_gradients; ZeRO-2/3)
 *
 * In effect (owner sharding, several ranks, the CPU backend), a rank holds:
 *   - for each parameter it owns, a gradient buffer strata allocates at
 *     commit (prod(shape) float32, strata_commit to strata_destroy): the
 *     caller's backward accumulates this rank's gradient into it, and the
 *     reduction lands the mean over ranks there (what strata_step reads);
 *   - for the parameters of layer l it does not own, one buffer per layer,
 *     allocated zeroed by strata_layer_grad_begin(rt, l) and freed by
 *     strata_hook_backward(rt, l) once it has packed them into the buckets
 *     that reduce them to their owners (the buckets copy at post).
 * So a rank's gradients take its owned bytes plus the layers whose backward
 * is in progress at once (a tied embedding written by the LM head's backward
 * keeps its layer begun from the head to its own hook), plus the buckets'
 * staging ring. Find the current buffer with strata_param_grad. A layer
 * whose hook comes without a begin posts zeros for its non-owned gradients
 * (logged once). Each hook posts what the lent buffer holds then: to
 * accumulate micro-batches on a rank, run their backwards between one
 * begin and one hook of the layer. Not in effect, strata_param_grad returns
 * the registered buffer and strata_layer_grad_begin does nothing. */

/* Lend this rank the buffers of layer `layer`'s gradients that it does not
 * own (zeroed), valid until strata_hook_backward(rt, layer) (or the next
 * strata_step, or uncommit). A layer already lent is left as it is. Local (no
 * communication); call it before the layer's backward writes its gradients.
 * Errors: STRATA_ERR_INVALID_ARG (NULL rt, layer < 0 or above every
 * parameter's layer), STRATA_ERR_STATE (before commit), STRATA_ERR_NOMEM
 * (the layer's buffer, with its size). */
STRATA_API strata_status strata_layer_grad_begin(strata_runtime *rt, int layer);

/* The float32 gradient buffer of parameter `id` on this rank now
 * (prod(shape) elements, row-major), into which the caller's backward
 * writes (accumulates) the gradient: with sharded gradients in effect,
 * strata's owned buffer or the layer's lent one (see above); otherwise the
 * caller's registered strata_param_desc.grad. Never free it. Thread: the
 * runtime's thread. Errors: STRATA_ERR_INVALID_ARG (NULL, bad id),
 * STRATA_ERR_STATE (before commit; a non-owned gradient whose layer is not
 * lent now, *out = NULL). */
STRATA_API strata_status strata_param_grad(const strata_runtime *rt, strata_param_id id,
                                           float **out);

/* Re-point registered parameter `id` at new caller-owned buffers: `data`
 * (float32 weights, prod(shape) elements, row-major) and `grad` (its float32
 * gradient, the same size); NULL keeps that buffer as it is. For bindings
 * whose framework moves storage (PyTorch frees .grad at
 * zero_grad(set_to_none=True) and backward allocates a new one; model.to()
 * and load_state_dict can replace a weight's storage). Nothing is copied:
 * the new `data` must already hold the current weights (strata keeps no
 * other copy of an unmanaged parameter's weights), and from the next
 * strata_step on strata reads and updates the new buffers in place; the old
 * ones are never touched again and may be freed. Sizes and dtypes cannot be
 * checked here (the pointers are the caller's): the caller checks them, as
 * for strata_param_desc. Before or after strata_commit; call between steps,
 * from the runtime's thread (the runtime is driven by one thread at a time,
 * so it cannot be inside strata_step then; a binding holds a lock around
 * every call).
 * Errors: STRATA_ERR_INVALID_ARG (NULL rt, bad id), STRATA_ERR_UNSUPPORTED
 * (a new `data` for a managed parameter in effect, whose weights are
 * strata's: see strata_param_data; a new `grad` under gradient buckets,
 * several ranks over MPI, whose items keep the registered buffer, or with
 * sharded gradients in effect, whose buffers are strata's),
 * STRATA_ERR_STATE (another call on this runtime in progress). On error
 * nothing changed. */
STRATA_API strata_status strata_param_set_buffers(strata_runtime *rt, strata_param_id id,
                                                  float *data, float *grad);

/* After layer `layer`'s backward: its gradients are final for this
 * micro-batch; reduce them to their owners and record their squared norm.
 * Releases the layer's managed weights on this rank first (above).
 * With several ranks on a transport with non-blocking reductions (MPI) and
 * the CPU backend, the layer's gradients going to the same owner(s) are
 * packed into buckets of at most cfg.grad_bucket_bytes and posted without
 * waiting (earlier buckets advance at each hook); strata_step waits for what
 * is still in flight (stats.seconds_grad_wait) before reading any gradient.
 * The hook copies the gradients it posts; an owner's buffers receive the sum
 * (the mean) at the latest when strata_step starts, overwriting anything
 * written to them after the hook. Otherwise each tensor is
 * reduced here by a blocking call. Collective: every rank calls the hooks in
 * the same order. Errors: as strata_hook_forward, the communicator's. */
STRATA_API strata_status strata_hook_backward(strata_runtime *rt, int layer);

/* Scale every learning rate by `scale` (>= 0) from the next step on; for
 * warm-up and decay schedules. Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status strata_set_lr_scale(strata_runtime *rt, float scale);

/* Per-parameter learning rate and decoupled weight decay (torch's param
 * groups): from the next step on, parameter `id` uses `lr` and
 * `weight_decay` (float32, both finite and >= 0) INSTEAD OF its routed
 * optimizer's configured ones (cfg.<family>.lr / .weight_decay, e.g.
 * cfg.shampoo.lr for a matrix, cfg.adamw.lr for a tail parameter): they
 * replace, not multiply, so a group's lr is the value used.
 * strata_set_lr_scale's global scale still multiplies `lr` (leave it at 1
 * to give absolute values). Every use of the family's lr and weight decay
 * takes them (AdamW's step and decay, Shampoo's, SOAP's and KL-Shampoo's
 * step, Muon's and NorMuon's step and decay "times the unadjusted lr",
 * grafting included). Never
 * called: bit-identical to a runtime without the call. strata_save records
 * them in the manifest's parameter table ("lr", "weight_decay", only for a
 * parameter given values) and strata_load restores them (a checkpoint
 * without them resets every parameter to the configured values). After
 * strata_commit; with several ranks every rank makes the same calls (only
 * the owner's state uses them). Errors: STRATA_ERR_INVALID_ARG (bad id, a
 * value negative or not finite), STRATA_ERR_STATE (before strata_commit,
 * from inside strata_step, or another call on this runtime in progress),
 * STRATA_ERR_UNSUPPORTED (a family registered through the internal API
 * without per-parameter values, optim/precond.h set_hyper; no built-in
 * family: values other than the configured ones); on error nothing
 * changed. */
STRATA_API strata_status strata_param_set_hyper(strata_runtime *rt, strata_param_id id,
                                                float lr, float weight_decay);

/* Parameter `id`'s lr and weight decay as its next step uses them (before
 * strata_set_lr_scale's scale): strata_param_set_hyper's, else its routed
 * family's configured ones. Errors: STRATA_ERR_INVALID_ARG (bad id, NULL
 * output), STRATA_ERR_STATE (before strata_commit). */
STRATA_API strata_status strata_param_get_hyper(const strata_runtime *rt, strata_param_id id,
                                                float *lr, float *weight_decay);

/* The skip mask (torch's `.grad is None`): while parameter `id` is
 * inactive, strata_step leaves it alone: no update of its weights, no
 * change of its state (moments, momentum, factors; no weight decay), its
 * gradient buffer not read (not in the global norm, not clipped, not
 * checked for NaN/Inf, no missing-hook warning). The step counter t stays
 * global: bias corrections (AdamW, Adam grafting, SOAP) use the global t
 * on the parameter's next active step, where torch counts steps per
 * parameter; the refresh schedule (base/schedule.h) counts global steps,
 * so a refresh point (Shampoo's roots, SOAP's and KL-Shampoo's eigenbasis)
 * that falls on a step where the parameter is inactive is missed: no factor
 * update and no snapshot at that step, it keeps its current result until
 * its next refresh point; a result begun earlier (async) and due at a
 * skipped step is installed at the parameter's next active step (the
 * newest such, waited for when still computing, so a run is deterministic;
 * coherence/registry.c strata_coh_acquire). With several ranks
 * every rank makes the same calls (the gradient is still reduced by the
 * hooks: its buffer must stay valid). Not saved by strata_save (like the
 * gradients: a transient input). Active is the default; the mask stays
 * until changed. After strata_commit. Errors: STRATA_ERR_INVALID_ARG (bad
 * id), STRATA_ERR_STATE (before strata_commit, or from inside
 * strata_step), STRATA_ERR_UNSUPPORTED (inactive with HSDP, several shard
 * groups, for a family with refreshes: they ship results every step). */
STRATA_API strata_status strata_param_set_active(strata_runtime *rt, strata_param_id id,
                                                 bool active);

/* One optimizer step over every registered parameter (but the inactive ones,
 * strata_param_set_active). All or nothing: when
 * it returns an error, nothing changed (no weight, moment, factor,
 * installed root or step counter; diagnostic counters such as coh_waits and
 * io_errors record what happened) and the same step may be called again.
 *
 * Order, in two passes:
 *  1. Everything that can fail for a reason outside the program, before
 *     anything changes: the bounded waits (wait_timeout_s) for the refresh
 *     results this step installs (those begun in earlier steps), reading
 *     them from the nvme tier, HSDP shipping them between replicas; then
 *     every reduced gradient is checked for NaN/Inf. All ranks agree on the
 *     outcome through the communicator (one reduction), so every rank
 *     returns an error together.
 *  2. The gradients are clipped (max_grad_norm, in place), the step counter
 *     advances and each parameter this rank owns is updated by its
 *     optimizer, in registration order. Gradients are not zeroed. Nothing
 *     in this pass fails but a broken program or device (below), or, with
 *     roots on nvme, a read of an installed root evicted from the host
 *     pool that fails twice (STRATA_ERR_IO: the parameters before it were
 *     updated).
 *
 * Events of one parameter are not errors of the step: the step returns
 * STRATA_OK, the other parameters are updated, and each event is counted
 * and its first occurrence logged at WARN with the parameter's name:
 *   - a finite gradient that could overflow the parameter's float32 state
 *     (optim/optim_internal.h): that parameter keeps its weights and its
 *     whole state (stats.overflow_skipped);
 *   - an update direction that came out NaN/Inf from finite state: its
 *     weights (and Shampoo's momentum) are kept, its moments and factors
 *     absorbed the gradient, as the reference implementations' would
 *     (stats.nonfinite_directions);
 *   - a refresh (inverse root, eigenbasis) that failed: the previous result
 *     is kept (stats.root_failures; the warning gives the reason);
 *   - a refresh point whose snapshot could not be stored (an nvme write,
 *     no free slot within wait_timeout_s): it comes after the factor
 *     update, so the block keeps its previous result
 *     (stats.snapshot_failures, stats.coh_failed, stats.io_errors);
 *   - an nvme read of a due root that fails twice (first pass, install):
 *     the previous root is kept (stats.io_errors).
 * With staleness S = 0 on workers (async) a root refreshed at this very
 * step is due at this very step: pass 1 cannot wait for it (its factors
 * absorb this step's gradient first), so pass 2 waits for it past
 * wait_timeout_s, logging a WARN each wait_timeout_s (S = 0 promises the
 * synchronous root, bit for bit).
 *
 * Errors (each: nothing changed):
 *   STRATA_ERR_INVALID_ARG  rt is NULL.
 *   STRATA_ERR_STATE        before strata_commit.
 *   STRATA_ERR_NONFINITE    a gradient holds NaN/Inf (only
 *                           stats.nonfinite_rejected counts the refusal;
 *                           gather sharding's byte counters count the
 *                           gather).
 *   STRATA_ERR_TIMEOUT      a refresh result this step installs did not
 *                           come within wait_timeout_s (async; on this or
 *                           another rank); its job goes on, and a later
 *                           call waits for it again.
 *   STRATA_ERR_IO           HSDP: the replica that refreshed a root could
 *                           not read it from its nvme tier to ship it.
 *   STRATA_ERR_NOMEM        gather sharding could not allocate its transfer
 *                           table.
 *   a communicator's status a collective of pass 1 failed (the gather, the
 *                           agreement, HSDP shipping).
 * Programming or device errors (STRATA_ERR_INTERNAL, a backend op that
 * fails, STRATA_ERR_UNSUPPORTED) may still stop pass 2 part-way: the
 * parameters before the failing one (registration order) took the step and
 * the counter advanced. So may a collective of pass 2, which exists only in
 * two baselines: ZeRO-1's broadcast of the new weights, and HSDP shipping
 * with S = 0 of a root refreshed at this step. A collective that fails on
 * one rank fails on all; restore from a checkpoint then. */
STRATA_API strata_status strata_step(strata_runtime *rt);

typedef struct strata_stats {
    int64_t step;               /* optimizer steps taken */
    int32_t n_params;           /* registered tensors */
    int32_t n_matrix;           /* tensors updated by the matrix optimizer */
    int32_t n_tail;             /* tensors updated by AdamW */
    int64_t matrix_elements, tail_elements;
    int32_t preconditioner_blocks; /* Shampoo blocks over all matrices */
    size_t device_bytes;        /* optimizer state in the device tier now */
    size_t device_bytes_peak;
    double grad_norm;           /* global L2 norm of the last step's gradient (before clipping) */
    double last_step_seconds;   /* wall time of the last strata_step */
    double seconds_steps;       /* wall time inside strata_step, cumulative (its collectives
                                   included: the gather and zero1 baselines move matrices
                                   there) */
    double last_seconds_factors, last_seconds_roots, last_seconds_precondition,
        last_seconds_tail;      /* its split */
    double seconds_factors, seconds_roots, seconds_precondition, seconds_tail; /* cumulative */
    double last_seconds_critical; /* the critical path of second-order state in the last step
                                   (seconds, measured on the training thread only): time the
                                   training thread spent on snapshots, job submission, inline
                                   refreshes (a synchronous run's whole inverse-root /
                                   eigenbasis computation), waits for results, installs and
                                   tier reads, from the end of the previous strata_step to the
                                   end of this one (so the forward hooks' nvme prefetches
                                   count); factor updates and preconditioning do not count.
                                   Asynchronous runs hide their refreshes when it stays a small
                                   fraction of the step time (Asteria) */
    double seconds_critical;    /* cumulative: the sum of every step's last_seconds_critical */
    int64_t root_refreshes;     /* successful inverse-root computations (per factor) */
    int64_t root_failures;      /* failed ones (previous root kept) */
    int64_t root_retries;       /* decompositions redone in float64 with a second LAPACK
                                   driver after a failure or non-orthonormal eigenvectors */
    int64_t nonfinite_rejected; /* steps refused for NaN/Inf gradients */
    int64_t overflow_skipped;   /* parameter steps skipped because a finite gradient could
                                   overflow that parameter's float32 optimizer state
                                   (Kronecker factors, second moments, eigenvalue estimates,
                                   momentum sums): the parameter kept its weights and state,
                                   the rest of the step ran; the first is logged at WARN with
                                   the parameter's name */
    int64_t nonfinite_directions; /* parameter steps whose update direction came out NaN/Inf
                                   (from finite state: e.g. a tiny epsilon, an enormous
                                   learning rate) and was not applied: its weights kept their
                                   values, its moments and factors absorbed the gradient; the
                                   first is logged at WARN with the parameter's name */
    int64_t forward_hooks, backward_hooks;
    int64_t missing_backward_hooks; /* parameters stepped without their layer's backward hook */
    /* asynchronous runtime (zero when cfg.async is false) */
    int64_t coh_installs, coh_waits, coh_dropped, coh_failed, coh_bound_exceeded;
    double coh_wait_seconds;    /* time the step spent waiting for roots */
    double last_wait_seconds;   /* ... in the last step */
    int64_t max_staleness;      /* largest staleness seen (steps) */
    int64_t jobs_submitted, jobs_cancelled;
    int32_t blocks_on_nvme;     /* blocks whose roots live in the nvme tier */
    size_t host_bytes, host_bytes_peak; /* host tier */
    size_t nvme_bytes, nvme_bytes_peak; /* nvme tier (file space) */
    uint64_t bytes_device_to_host;      /* factor snapshots copied to host staging */
    uint64_t nvme_bytes_written, nvme_bytes_read;
    int64_t io_errors;          /* nvme transfers that failed (previous root kept) */
    int64_t snapshot_failures;  /* refresh points whose snapshot could not be taken or
                                   stored (an nvme write, no free slot in time): that
                                   block kept its previous root; not an error of the
                                   step (also in coh_failed when asynchronous) */
    /* ranks (strata/comm.h) */
    int32_t world_size, rank;
    int32_t step_threads;       /* threads that ran the plain parameters' updates
                                   (strata_config.step_threads, resolved at commit; 1: the
                                   training thread alone) */
    int32_t owned_params;       /* parameters whose optimizer runs on this rank */
    size_t owned_param_bytes;   /* their weights (the rank's persistent shard) */
    size_t largest_owned_bytes; /* the largest owned parameter's weights + optimizer state */
    uint64_t step_matrix_bytes; /* matrix bytes this rank moved inside strata_step (the
                                   optimizer step), cumulative; 0 for owner sharding */
    uint64_t comm_bytes_intra_node, comm_bytes_inter_node; /* sent + received, cumulative */
    size_t param_bytes;         /* float32 weights resident on this rank now: the
                                   caller's buffers of unmanaged parameters (all of them,
                                   on every rank), strata's buffers of the managed ones it
                                   owns, and the layer buffers it holds */
    size_t param_bytes_peak;    /* the largest param_bytes since commit (the initial values
                                   the caller passed to a managed parameter not counted) */
    size_t largest_layer_bytes; /* the largest layer buffer this rank can hold (a layer's
                                   managed weights it does not own); 0 unmanaged */
    double planned_makespan;    /* the planner's predicted per-rank optimizer work, and */
    double planned_lower_bound; /* its lower bound: max(total / N, the largest item, the N-th
                                   plus the (N+1)-th largest item) (seconds) */
    /* HSDP (shard_group_size < world): each preconditioner block is refreshed by one of
     * its replicas (one owner per shard group) and its result (the family's slot: roots
     * or eigenbases) shipped to the others through the node leaders when due */
    int64_t refresh_blocks_computed; /* block refreshes this rank ran (every layout) */
    int64_t refresh_blocks_received; /* block results received from another replica */
    uint64_t refresh_ship_bytes_intra_node, refresh_ship_bytes_inter_node; /* of those
                                   shipments, sent + received, cumulative (also counted in
                                   comm_bytes_*) */
    /* the stream seam: factor snapshots (device -> host) and results (host ->
     * device) copied on the backend's low-priority shadow stream; results are
     * installed from device memory on the CUDA backend (the CPU backend's
     * streams are inline: stages and installs stay 0 there) */
    int64_t stream_snapshots;    /* snapshots queued on the shadow stream */
    int64_t stream_stages;       /* results copied host -> device */
    int64_t stream_stages_early; /* ... of them before the step that installs them */
    int64_t stream_installs;     /* installs from device memory */
    int64_t stream_waits;        /* installs whose copy had not completed, so the training
                                    stream waited on its event */
    uint64_t stream_wait_bytes;  /* bytes of those copies */
    /* gradient reductions (several ranks) */
    double seconds_backward_hooks; /* wall time inside strata_hook_backward, cumulative: the
                                   blocking reductions, or packing and posting the buckets
                                   and advancing those in flight */
    double seconds_grad_wait;   /* wall time strata_step waited for gradient reductions
                                   still in flight (included in seconds_steps), cumulative */
    double last_grad_wait_seconds; /* ... in the last step */
    int64_t grad_buckets;       /* gradient buckets posted (non-blocking messages), cumulative */
    int64_t grad_bucket_ring_waits; /* posts that first waited for an older bucket because
                                   the staging was full */
    size_t grad_staging_bytes;  /* this rank's bucket staging (0: blocking per tensor) */
    int64_t root_newton;        /* inverse roots computed eigh-free by the coupled Newton
                                   iteration (shampoo.root_method newton or auto; also in
                                   root_refreshes) */
    int64_t root_fallbacks;     /* Newton roots rejected by their residual check (or not
                                   converged within the iteration cap) and computed by the
                                   float64 eigendecomposition instead */
    /* the training stream's waits on the shadow stream (result stages and
     * snapshot copies not yet complete), measured with the backend's timing
     * events (CUDA: cudaEventElapsedTime between events recorded on the
     * training stream just before and after the wait): the time the training
     * stream stood still for second-order state, the figure the device check
     * reports as the wait fraction (issue #20). The cpu backend's streams are
     * inline: all 0 there. */
    int64_t stream_blocking_waits; /* waits on incomplete shadow-stream work */
    int64_t stream_waits_timed;    /* of them, measured */
    int64_t stream_waits_untimed;  /* of them, not measured (no timing events, or 16 pairs
                                      already in flight) */
    double stream_wait_seconds;    /* the measured waits, summed, seconds (completed ones: a
                                      drain or strata_save counts every one) */
    /* the safety valve (strata_config.stale_correction), cumulative; a
     * resumed run continues them from the checkpoint (an older checkpoint
     * without them: from zero) */
    int64_t stale_waits_avoided;   /* block acquires whose wait was replaced by a correction */
    int64_t stale_corrections;     /* inverse roots corrected (a block has two) */
    int64_t stale_refused;         /* acquires the valve could not correct (no root yet, or
                                      the Newton step did not shrink the residual): waited */
    int64_t stale_refreshes_skipped; /* refresh points skipped: the block had no free slot */
    int64_t stale_max_corrected;   /* largest staleness t - v of a corrected acquire (the
                                      base root's version; may exceed F-1+S) */
    size_t step_scratch_bytes;     /* the step scratch every owned matrix borrows (in
                                      device_bytes): one buffer of the largest need, so a
                                      rank's device_bytes is its states plus this once */
    /* streamed nvme residency (async, roots on nvme): blocks' installed roots
     * live in the nvme tier and pass through a bounded pool of host buffers
     * (in host_bytes; sized by host_budget, else two parameters' blocks plus
     * two), cumulative counts this process */
    int32_t nvme_resident_buffers; /* the pool's buffers (0: no block on nvme) */
    size_t nvme_resident_bytes;    /* their host bytes */
    int64_t nvme_resident_reads;   /* reads of an installed root the step needed and did
                                      not find resident: the step waited for each */
    int64_t nvme_resident_prefetches; /* reads started ahead (forward hook, next parameters) */
    int64_t nvme_resident_evictions;  /* buffers taken from another block */
    /* state paging (strata_config.page_state): matrices whose whole state
     * pages to the nvme tier between their steps, their paged bytes (where
     * they are now: the memory ledger), cumulative counts this process */
    int32_t paged_params;
    uint64_t paged_bytes;
    int64_t page_reads;            /* states read back (ahead of their step, or at it) */
    int64_t page_reads_waited;     /* of those, started by the step itself (not read
                                      ahead: the step waited for the whole read) */
    int64_t page_writes;           /* states written to nvme (after each step, and once
                                      at commit) */
} strata_stats;

/* Where one parameter lives across ranks (valid after commit): the layout the
 * planner wrote, the collectives read and a checkpoint stores. Shards are
 * tensor-granular (veScale's RaggedShard idea: padding only between tensors,
 * never inside one). */
typedef struct strata_param_layout {
    bool tail;               /* routed to AdamW by the routing rule */
    int owner;               /* the rank that holds its master copy and optimizer state */
    size_t bytes;            /* float32 bytes of the whole tensor */
    size_t shard_offset;     /* byte offset in its owner's shard (the owner's tensors in
                                registration order) */
    size_t tail_offset;      /* byte offset in the packed tail (tail tensors in registration
                                order); SIZE_MAX for a matrix */
} strata_param_layout;

/* Errors: STRATA_ERR_INVALID_ARG (bad id), STRATA_ERR_STATE (before commit). */
STRATA_API strata_status strata_param_layout_get(const strata_runtime *rt, strata_param_id id,
                                                 strata_param_layout *out);

/* What an optimizer refreshes and how, as its family answers it for a
 * configuration (the one place that decides it; CLIs and trainers ask here). */
typedef struct strata_optimizer_info {
    bool has_refresh;       /* it refreshes second-order state (roots, eigenbases) */
    bool async_capable;     /* cfg.async moves those refreshes to worker threads */
    bool staggers;          /* cfg.stagger_refresh spreads them (has_refresh and F > 1) */
    int precondition_frequency; /* F (0 when nothing is refreshed) */
    int max_staleness;      /* largest S async accepts; -1 = any */
    const char *refresh_noun; /* "inverse roots", "eigenbasis refreshes"; "" if none */
    int64_t first_refresh;  /* the first refresh point (step, >= 1; refresh phase 0), e.g.
                               Shampoo's start_preconditioning_step as the runtime reads it
                               (-1 = F, 0 = 1); 0 when nothing is refreshed */
    int state_per_param;    /* rough bytes of optimizer state per byte of parameter (for
                               estimates before anything is allocated): Shampoo 8, others 4 */
    double ema_horizon;     /* steps: the horizon 1/(1 - beta) of the slowest second-moment,
                               factor or eigenvalue-estimate EMA of its configuration
                               (Shampoo: beta2 and Adam grafting's; SOAP: beta2 and the
                               factor EMA; KL-Shampoo: its estimates'; NorMuon: beta2);
                               0 when it keeps none (Muon, Dion2; AdamW: see
                               cfg.adamw.beta2) */
} strata_optimizer_info;

/* Fill *out for optimizer `opt` under `cfg` (its hyperparameters decide).
 * Errors:
 * STRATA_ERR_INVALID_ARG (NULL, unknown optimizer). */
STRATA_API strata_status strata_optimizer_info_get(const strata_config *cfg, strata_optimizer opt,
                                                   strata_optimizer_info *out);

/* Where optimizer `opt`'s learning rate and decoupled weight decay live in
 * *cfg: *lr and *weight_decay point at the two float fields of its
 * configuration member (e.g. &cfg->muon.lr, &cfg->muon.weight_decay), so
 * that a CLI's --lr and --weight-decay set the optimizer's own values
 * without naming it. Both NULL (and STRATA_OK) for a family whose
 * configuration lives outside strata_config (one registered at run time).
 * Errors: STRATA_ERR_INVALID_ARG (NULL, unknown optimizer). */
STRATA_API strata_status strata_config_optimizer_lr(strata_config *cfg, strata_optimizer opt,
                                                    float **lr, float **weight_decay);

/* Copy the current counters. Errors: STRATA_ERR_INVALID_ARG. */
STRATA_API strata_status strata_stats_get(const strata_runtime *rt, strata_stats *out);

/* The memory ledger of this rank (strata/types.h strata_memory_ledger):
 * every byte the runtime holds, by tier and kind, now and at its peaks since
 * strata_create, as the allocating code charged it (sizes as allocated:
 * page-rounded host-tier slots, 4 KiB nvme extents). What it counts: the
 * registered weights and gradient buffers (the caller's, each gradient
 * buffer once; managed weights strata owns and its layer buffers), every
 * family's state (factors, roots/eigenbases, moments, grafting, the
 * full-size workspaces a family keeps, its LAPACK workspaces), the refresh
 * engine's result slots, nvme extents, staging and worker workspaces, the
 * gradient buckets' ring, the HSDP ship buffer, and what the caller charged
 * (strata_memory_ledger_charge). Not counted: per-parameter bookkeeping
 * (names, tables: O(parameters) bytes), thread stacks, the BLAS library's
 * own buffers, an MPI/NCCL transport's internal buffers. Thread-safe
 * (relaxed atomic counters). Errors: STRATA_ERR_INVALID_ARG (NULL). */
STRATA_API strata_status strata_memory_ledger_get(const strata_runtime *rt,
                                                  strata_memory_ledger *out);

/* Charge (delta > 0) or release (delta < 0) bytes the caller holds for this
 * training run to the ledger's cell (tier, kind): what a training loop adds
 * (its activations: STRATA_LEDGER_ACTIVATIONS), so that one ledger covers
 * the run. A release past what was charged reads as 0. Thread-safe. Errors:
 * STRATA_ERR_INVALID_ARG (NULL runtime, tier not in [0, STRATA_LEDGER_TIERS),
 * kind not in [0, STRATA_LEDGER_KINDS)). */
STRATA_API strata_status strata_memory_ledger_charge(strata_runtime *rt, int tier, int kind,
                                                     int64_t delta);

/* ---- planning (runtime/plan.c; the `strata plan` command)
 *
 * What a run of `cfg` over `params` would hold and cost on each of
 * world_size ranks, without allocating any of it: per-rank bytes by ledger
 * tier and kind (the figures strata_memory_ledger_get would report at the
 * run's peak: the same sizes as the allocation sites, from each family's
 * plan slot and the refresh engine's slot, staging and workspace rules),
 * the owner plan (the runtime's: greedy LPT, resident bytes capped at
 * 1.1 x the even share; the exact MILP when n x ranks <= 2048), one
 * refresh round per rank on its workers (LPT over the blocks it owns), and
 * the smallest precondition frequency and staleness that keep the workers
 * ahead of a given step time. Costs come from a model fitted to
 * measurements on this machine (plan/plan.h strata_cost_fit: measured once
 * per family and configuration, cached), so a 7B model plans in seconds.
 * Roots placed as the engine places them: every async block's slots on nvme
 * with roots_tier NVME, spilled past host_budget when nvme_dir is set (the
 * engine's greedy rule, engine/refresh.c), the residency pool on host. Not
 * modelled: HSDP (shard_group_size), the CUDA backend's pinned memory
 * (planned as the CPU backend's). */
typedef struct strata_plan_options {
    int world_size;          /* ranks (>= 1) */
    int ranks_per_node;      /* ranks per node (>= 1, divides world_size): the default
                                worker count is this machine's cores / ranks_per_node - 1 */
    int workers;             /* refresh workers per rank for the round's cost (>= 0; 0: as
                                the runtime chooses: strata_config.workers, else the
                                default above; at least 1) */
    double step_seconds;     /* the training step's wall time the workers must keep ahead
                                of (s); <= 0: no frequency or staleness answer */
    uint64_t activation_bytes; /* per rank: what the training loop's forward and backward
                                  hold (charged as ACTIVATIONS in the caller's tier) */
    bool managed;            /* parameters registered managed (ZeRO-3 weights, in effect
                                with owner sharding over several ranks on the CPU
                                backend): a rank holds its owned weights and the two
                                largest layers' others (the example trainer's peak) */
} strata_plan_options;

/* One rank's planned figures. */
typedef struct strata_plan_rank {
    uint64_t bytes[STRATA_LEDGER_TIERS][STRATA_LEDGER_KINDS]; /* at the run's peak */
    uint64_t total;
    double optimizer_seconds;     /* its parameters' steps per optimizer step, refreshes
                                     amortized over F (the owner plan's bin load) */
    double refresh_round_seconds; /* one refresh of every block it owns, on its workers */
    double refresh_serial_seconds; /* ... on one worker */
    int32_t owned_params, owned_blocks;
    int32_t blocks_on_nvme;       /* result blocks placed in the nvme tier (roots_tier NVME,
                                     or spilled past host_budget with an nvme_dir), their
                                     roots streamed through the residency pool */
    int32_t paged_params;         /* matrices whose whole state pages to the nvme tier
                                     between their steps (strata_config.page_state): their
                                     bytes are in the NVME row, and the DEVICE row holds
                                     the largest two that follow each other in step order */
    uint64_t memory;              /* the bytes of total in memory: the device, host-pinned,
                                     host and managed tiers (what --memory-gib checks) */
    uint64_t nvme;                /* the bytes of total in the nvme tier (on disk):
                                     total = memory + nvme */
} strata_plan_rank;

typedef struct strata_plan_summary {
    int32_t n_params, n_matrix, n_tail, n_blocks;
    int64_t elements, matrix_elements;
    double makespan, lower_bound; /* the owner plan over the ranks (s per step) */
    bool milp;                    /* the MILP's answer was taken */
    int32_t workers;              /* per rank */
    double refresh_round_seconds; /* the slowest rank's round on its workers */
    int32_t frequency;            /* the configuration's precondition frequency F */
    int32_t max_staleness;        /* the family's limit on S (-1: none) */
    int32_t min_frequency;        /* smallest F whose refresh period covers the round:
                                     round <= F x step_seconds; 0 when step_seconds <= 0 or
                                     nothing refreshes */
    int32_t min_staleness;        /* smallest S at the configuration's F whose budget covers
                                     the round (round <= S x step_seconds: every block's
                                     result ready when due, no wait); -1 when the workers
                                     fall behind at this F (round > F x step) or S would
                                     pass max_staleness; 0 as min_frequency */
    uint64_t max_total;           /* the largest rank's total bytes, every tier (the nvme
                                     tier's disk bytes included) */
    int32_t cost_measured;        /* cost-model anchors measured now (0: cached) */
    double cost_seconds;          /* wall time of the cost model */
    uint64_t max_memory;          /* the largest rank's memory (strata_plan_rank.memory):
                                     what fits under a memory cap */
    uint64_t max_nvme;            /* the largest rank's nvme-tier bytes */
} strata_plan_summary;

/* Plan `n` parameters (strata_param_add's descriptors; data, grad and
 * memory are not read, managed is taken from opt->managed) under `cfg`.
 * `ranks` receives world_size entries. Errors: STRATA_ERR_INVALID_ARG (NULL,
 * n < 1, a bad descriptor as strata_param_add would refuse it, world_size <
 * 1, ranks_per_node not dividing it, a bad configuration as strata_create
 * would refuse it), STRATA_ERR_UNSUPPORTED (a family without a plan, HSDP),
 * STRATA_ERR_NOMEM. Measuring the cost model runs a few optimizer steps on
 * the calling thread (about a second, once per machine and family). */
STRATA_API strata_status strata_plan_estimate(const strata_config *cfg,
                                              const strata_param_desc *params, int n,
                                              const strata_plan_options *opt,
                                              strata_plan_rank *ranks,
                                              strata_plan_summary *out);

/* The staleness budget of a run (--staleness auto, --precondition-frequency
 * auto): the freshest precondition frequency F and staleness S the refresh
 * workers sustain, planned by plan/plan.h's strata_plan_budget (its rule and
 * reference are there) from each block's refresh cost (the fitted cost model
 * of strata_plan_estimate) and the step time. */
typedef struct strata_budget_choice {
    bool feasible;           /* some (F, S) within the limits sustains (else F is the
                                configuration's or 1000, S the smallest whose deadline
                                covers one result's latency: the workers fall behind and
                                steps wait; see sustainable_frequency) */
    int32_t frequency;       /* F chosen (or the configuration's when not planned) */
    int32_t staleness;       /* S chosen (>= 1: asynchronous) */
    int32_t bound;           /* F - 1 + S: the staleness the choice guarantees */
    int32_t workers;         /* refresh workers planned for */
    int32_t blocks;          /* preconditioner blocks that refresh */
    double step_seconds;     /* T planned for: loop_seconds + optimizer_seconds */
    double optimizer_seconds; /* the modelled optimizer step, refreshes excluded (s) */
    double period_seconds;   /* one refresh of every block on one worker (s) */
    double largest_block_seconds; /* the longest single refresh (s) */
    double latency_seconds;  /* the bound on a result's arrival after its refresh point (s) */
    double utilization;      /* period_seconds / (workers F T) */
    double ceiling;          /* the utilization ceiling used */
    int32_t workers_for_frequency; /* workers that would sustain (F - 1, S); 0: F is 1 or
                                      was not planned; -1: no count up to 4096 */
    int32_t workers_for_staleness; /* ... (F, S - 1); 0: S is 1 or was not planned */
    int32_t sustainable_frequency; /* the smallest F the workers sustain (= frequency when
                                      feasible; 0: none up to 1000) */
} strata_budget_choice;

/* Plan the budget of `n` parameters (strata_param_add's descriptors, as
 * strata_plan_estimate reads them) under `cfg` on one rank: loop_seconds is
 * the training loop's measured time per step outside strata_step (forward
 * and backward, s, > 0); the optimizer's own step is added from the cost
 * model. ceiling in (0, 1] is the workers' utilization ceiling (<= 0: 0.8).
 * plan_frequency: choose F (else cfg's, resolved); plan_staleness: choose S
 * >= 1 (else cfg->staleness). Workers: cfg->workers, else online cores - 1.
 * Errors: STRATA_ERR_INVALID_ARG (NULL, n < 1, loop_seconds <= 0, neither
 * planned, a bad descriptor or configuration as strata_plan_estimate),
 * STRATA_ERR_UNSUPPORTED (several ranks, a family without a plan or without
 * refreshes: nothing to plan), STRATA_ERR_NOMEM. Measuring the cost model
 * runs a few optimizer steps on the calling thread (once per machine and
 * family; cached). */
STRATA_API strata_status strata_plan_budget_auto(const strata_config *cfg,
                                                 const strata_param_desc *params, int n,
                                                 double loop_seconds, double ceiling,
                                                 bool plan_frequency, bool plan_staleness,
                                                 strata_budget_choice *out);

/* Which optimizer a registered parameter was routed to (valid after commit). */
STRATA_API strata_status strata_param_optimizer(const strata_runtime *rt, strata_param_id id,
                                                strata_optimizer *out);

/* ---- checkpoints (ckpt/checkpoint.c, format in ckpt/ckpt.h)
 *
 * A checkpoint is a directory: manifest.json (strata and format versions,
 * step, learning-rate scale, configuration and hyperparameters, the
 * parameter table with shapes, routing, owners and refresh phases, the
 * drain record, every other file's size and SHA-256, and the caller's JSON
 * object), model.safetensors (every parameter's float32 weights under its
 * registered name: `safetensors.numpy.load_file` and the PyTorch/JAX
 * loaders open it), and per rank rank-NNNNN.safetensors (its owned
 * parameters' optimizer state as its family enumerates it: moments,
 * momentum, factors, eigenbases, permutations, step counters, flags; and
 * the refresh engine's results with the step of the snapshot each came
 * from, whether they lived in the host or the nvme tier) with
 * rank-NNNNN.json (the engine's slot table: state, version, failed parts,
 * installed slot; and the tensors' owner, tier and step).
 *
 * In-flight refreshes are drained, not recorded: strata_save first waits
 * until no refresh job is queued or running (the count is in
 * strata_save_info.drained_jobs and the manifest). Their results are saved
 * as READY with their versions; in fixed install mode (the default, and
 * every synchronous run) the registry installs a result of refresh point r
 * exactly at step r + S whatever the workers' speed, so a resumed run
 * installs each drained result at exactly the step the uninterrupted run
 * did: with the same configuration every step after a resume is
 * bit-identical. In eager mode a drain can change which results are ready
 * at a step, as worker speed does; eager runs are not reproducible anyway.
 */

typedef struct strata_save_info {
    double seconds;        /* wall time of strata_save: the pause a training loop sees */
    double drain_seconds;  /* of which waiting for in-flight refreshes */
    uint64_t bytes;        /* bytes this rank wrote (rank 0: with the manifest and weights) */
    int64_t drained_jobs;  /* refresh jobs in flight when the save began (all ranks) */
} strata_save_info;

/* Save everything that determines the rest of the trajectory into
 * directory `dir` (created; its parent must exist). Crash-safe: the files
 * are written into a fresh sibling "<dir>.tmp-XXXXXX", each fsynced, then
 * the directory is fsynced and renamed to `dir` (an existing `dir` is
 * swapped out atomically with renameat2(RENAME_EXCHANGE) and then
 * removed), and the parent directory is fsynced: a save that fails or is
 * killed leaves `dir` as it was (the old checkpoint, or absent) and at most
 * a "*.tmp-*" directory behind. `user_json` is the caller's state as the
 * text of one JSON object (the trainer's RNG and data position, ...), or
 * NULL; it comes back from strata_load. `info` may be NULL.
 * Collective: with several ranks every rank calls it with the same `dir`
 * (a file system they share); rank 0 writes the manifest and the weights,
 * each rank its own shard. Call between steps, after commit. Managed
 * weights (strata_param_desc.managed): rank 0 writes the weights file while
 * the layers stream past, each materialized (broadcast from its owners) just
 * before its tensors are written and released after them, so no rank holds
 * more than its shard plus one layer (stats.param_bytes_peak); afterwards no
 * layer is held. strata_load likewise keeps only this rank's weights of the
 * weights file in memory (it streams the file through a 4 MiB buffer to
 * check its SHA-256).
 * A trailing '/' in `dir` names the same directory. An existing `dir` is
 * replaced only when it is a strata checkpoint (its manifest.json says so)
 * or an empty directory.
 * Errors: STRATA_ERR_INVALID_ARG (NULL rt/dir, user_json not one JSON
 * object with nothing but white space after it, `dir` an existing file or a
 * non-empty directory that is not a checkpoint: nothing is touched),
 * STRATA_ERR_STATE (before commit; another call in progress), STRATA_ERR_IO (a write, fsync
 * or rename failed, with the path and errno text; `dir` is left as it
 * was and no "*.tmp-*" directory remains), STRATA_ERR_TIMEOUT (the
 * drain), STRATA_ERR_NOMEM. */
STRATA_API strata_status strata_save(strata_runtime *rt, const char *dir, const char *user_json,
                                     strata_save_info *info);

typedef struct strata_load_info {
    int64_t step;          /* the step the checkpoint was taken after */
    double seconds;        /* wall time of strata_load */
    uint64_t bytes;        /* bytes this rank read and verified */
} strata_load_info;

/* Restore a checkpoint written by strata_save into `rt` (committed, with the
 * same parameters registered in the same order, routed to the same
 * optimizers with the same refresh phases, precondition frequencies, first
 * refresh steps and block sizes; world size and owners may differ). The
 * engine's runtime settings may differ (async or inline, staleness S,
 * install mode, workers, tiers): each block keeps its installed result and
 * the finished newer ones its new slot table holds with a slot free (the
 * others dropped, their refresh points skipped; logged), and continues
 * under the new settings. A
 * runtime that never stepped gets every state back: weights (into each
 * parameter's data buffer; a managed parameter's into its owner's buffer,
 * and every materialized layer is released), optimizer state, engine results and their
 * versions, the step counter and the learning-rate scale; the nvme tier's
 * results are written back into this runtime's nvme files, so the old
 * scratch directory is not needed. Files are hostile input: every size is
 * checked against the manifest, shapes and the file, every checksum is
 * verified, all before any state changes. With `user_json` non-NULL,
 * *user_json receives a malloc'd copy of the caller's JSON object (free()
 * it). Collective, like strata_save. `info` may be NULL.
 * Errors: STRATA_ERR_INVALID_ARG (NULL arguments; a mismatch with this
 * runtime: parameter name/shape/routing/phase, a state tensor's dtype or
 * shape, a block's frequency, start, phase or result size; the message
 * names the file and the tensor or field with both values), STRATA_ERR_DATA (corrupt: truncated file, checksum
 * mismatch, unparsable manifest or header, naming file and tensor),
 * STRATA_ERR_IO (a missing or unreadable file), STRATA_ERR_STATE (before
 * commit), STRATA_ERR_NOMEM.
 * Resharding: a checkpoint written by another number of ranks (or owner
 * layout, or shard group size) loads too: every parameter this rank owns now
 * is read, by name, from the file of the rank that owned it at save (each
 * logical tensor whole: shards are tensor-granular), its refresh blocks and
 * their registry state likewise. Each rank reads the weights file and the
 * files of the ranks whose parameters it now owns.
 * Statistics: strata_stats_get's cumulative counters continue from the
 * save (right after the load they read what they read at the save; what the
 * load itself did is not counted): refreshes, failures, retries, installs,
 * waits, dropped, jobs, hooks, non-finite and overflow counts, I/O errors,
 * max staleness, seconds and bytes moved. At the same world size each rank
 * continues its own; at another, event counts summed over the old ranks go
 * to rank 0, max staleness is the old maximum on every rank, seconds and
 * bytes the old ranks' mean (so per-step means stay per-rank figures).
 * Checkpoints written before the counters were recorded restore none.
 * After a validation error nothing changed; after any other the runtime's
 * state is unspecified (destroy it). */
STRATA_API strata_status strata_load(strata_runtime *rt, const char *dir, char **user_json,
                                     strata_load_info *info);

/* One tensor of a checkpoint, as strata_ckpt_verify sees it. */
typedef struct strata_ckpt_entry {
    const char *file;      /* file inside the checkpoint */
    const char *tensor;    /* tensor name in that file ("" for a file-level problem) */
    const char *dtype;     /* safetensors dtype ("F32", "U8", ...; "" when unknown) */
    int owner;             /* rank whose shard holds it (weights: the parameter's owner) */
    const char *tier;      /* where it lived when saved: "device", "host" or "nvme" */
    int64_t step;          /* step of the snapshot it came from (engine results), else
                              the checkpoint's step */
    uint64_t bytes;        /* its data bytes */
    strata_status status;  /* STRATA_OK, or what is wrong with it or its file */
    const char *message;   /* "" or the detail of status */
    const char *sha256;    /* the tensor's data bytes' SHA-256, 64 lowercase hex digits
                              ("" for a file-level entry): equal tensors of two checkpoints
                              have equal digests, whichever rank's file holds them */
    const char *shape;     /* its shape as "[d0,d1,...]" ("" for a file-level entry) */
} strata_ckpt_entry;

typedef void (*strata_ckpt_visit_fn)(void *user, const strata_ckpt_entry *e);

/* Check a checkpoint without a runtime: the manifest parses, every file it
 * lists exists with its size and SHA-256, every safetensors header parses
 * and covers its file, every tensor the rank tables list is present. `fn`
 * (may be NULL) is called once per tensor (with its SHA-256), and once per
 * file-level problem. The strings of an entry live until `fn` returns.
 * Returns STRATA_OK only when everything is sound, else the first error
 * (STRATA_ERR_DATA, STRATA_ERR_IO, STRATA_ERR_NOMEM) with its detail. */
STRATA_API strata_status strata_ckpt_verify(const char *dir, strata_ckpt_visit_fn fn, void *user);

/* Destroy (NULL is a no-op); stops the workers (cancelling queued jobs,
 * finishing running ones), then frees all optimizer state. */
STRATA_API void strata_destroy(strata_runtime *rt);

/* Log through the runtime's sink (used by strata's own components). */
STRATA_API void strata_log(const strata_runtime *rt, strata_log_level level,
                           const char *subsystem, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* STRATA_H */
