/* engine/engine.h — the refresh engine: one path for every preconditioner
 * family, synchronous and asynchronous (internal).
 *
 * The engine runs each parameter's optimizer step through its family's table
 * (optim/precond.h) and owns everything around the refreshes: the coherence
 * registries (one per group of parameters sharing a family and schedule),
 * the slots that hold snapshots and results (host tier, or nvme tier past the
 * host budget), the worker pool, the jobs, the installs and the nvme
 * prefetch. It never branches on which family it runs.
 *
 * A group is *inline* when the runtime is synchronous or its family cannot
 * refresh asynchronously: its refresh runs on the
 * training thread right after the snapshot, with S = 0 and fixed install —
 * the synchronous algorithm, through the same registry, slots and install as
 * the asynchronous one. So an asynchronous run with S = 0 computes exactly
 * what a synchronous one does (bit-identical), whatever the workers' speed.
 *
 * HSDP (cfg.replicas): the G owners of a matrix (one per shard group) hold
 * bit-identical state, so each block's refresh runs on one of them, its
 * *computing replica* (blocks spread over the G replicas by the greedy LPT
 * rule on slot_bytes^1.5, about n^3), and the others take no snapshot and
 * run no job: at refresh point r they only reserve the slot. When a result
 * becomes due (the step whose acquire must install it: r + S in fixed mode,
 * r itself inline and for S = 0) the computing replica waits for its job,
 * and broadcasts on the training thread, before that step's acquire, the
 * installed result (the block's parts and aux range, precond.h) with the
 * refresh point and the failed-part bits, in one message; every
 * replica then completes the slot the way the job completed it, and the
 * same acquire installs the same bytes at the same step on every replica. So
 * results travel only when the receivers' staleness budget needs them, and
 * a receiver never installs anything the computing replica did not. Install
 * mode is FIXED for every group then (eager installs would depend on each
 * replica's own timing). A drain (checkpoints) ships every result still in
 * flight. Every replica must call step, drain and the checkpoint seams at
 * the same points (they are collectives of the replica set).
 *
 * Life: create, add every parameter (its family state already created with
 * external results), commit (registries, slots, placement, pool), then per
 * step two passes: strata_refresh_prepare for every parameter (all that can
 * fail for a reason outside the program, changing nothing), then
 * strata_refresh_step for every parameter (which then fails only for a
 * broken program or device); strata_refresh_prefetch from the forward hook; destroy stops the workers first, then frees every buffer.
 * Nothing is allocated after commit.
 *
 * Threading: every call from the training thread; workers only run jobs.
 */
#ifndef STRATA_ENGINE_ENGINE_H
#define STRATA_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "coherence/coherence.h"
#include "optim/precond.h"
#include "strata/backend.h"
#include "strata/comm.h"

/* ---- HSDP replica sets ---------------------------------------------- */
/* the replica set of an HSDP layout (internal).
 *
 * With shard groups (strata_config.shard_group_size = K, world = G x K) a
 * matrix is owned by rank g K + q in every group g: its G owners form a
 * *replica set* and hold bit-identical optimizer state. The replicas object
 * is this rank's view of its replica set: the communicator of the G ranks
 * with the same index q within their group (ordered by group), split once
 * more by node so that a broadcast goes through the node leaders:
 *
 *     root -> its node's other replicas            (intra-node)
 *          -> the leader of every other node       (one inter-node copy per node)
 *          -> the other replicas on those nodes    (intra-node)
 *
 * A node leader is the replica with the lowest group index on its node.
 * Nodes are the communicator's (MPI_COMM_TYPE_SHARED, or blocks of
 * STRATA_RANKS_PER_NODE ranks): a node is identified by its lowest world
 * rank, which holds for nodes made of consecutive ranks (what both give with
 * mpirun's default mapping); any other layout still delivers the same bytes
 * to every replica, only its node/leader routing is then not minimal.
 *
 * Life: created collectively over the world communicator (strata_create),
 * destroyed by strata_destroy. Threading: the training thread only (every
 * call is a collective of the replica set or of the world).
 */

typedef struct strata_replicas strata_replicas;

/* Collective over `world` (every rank calls it with the same K): this rank's
 * replica set, K = group_size ranks per group, G = world size / K > 1
 * groups. Errors: STRATA_ERR_INVALID_ARG (K does not divide the world, or
 * G < 2), STRATA_ERR_NOMEM, the transport's (STRATA_ERR_IO). */
strata_status strata_replicas_create(strata_comm *world, int group_size, strata_replicas **out);

/* This rank's group index g in [0, G), and G. */
int strata_replicas_index(const strata_replicas *r);
int strata_replicas_count(const strata_replicas *r);

/* Collective over the replica set: `bytes` of replica `root`'s buf to every
 * replica's buf, through the node leaders (above). bytes must be a multiple
 * of 4 (the transport moves float32 words; the bytes are copied bit for bit,
 * so any content travels). Adds the bytes this rank sent + received to
 * *intra_node / *inter_node (may be NULL). Errors: STRATA_ERR_INVALID_ARG
 * (bad root, bytes % 4 != 0), the transport's (STRATA_ERR_IO). */
strata_status strata_replicas_broadcast(strata_replicas *r, void *buf, size_t bytes, int root,
                                        uint64_t *intra_node, uint64_t *inter_node);

/* NULL is a no-op. Frees the sub-communicators. */
void strata_replicas_destroy(strata_replicas *r);

/* ---- the refresh engine ---------------------------------------------- */

typedef struct strata_refresh_config {
    bool async;              /* refreshes of async-capable families on worker threads */
    int staleness;           /* S >= 0 (async groups) */
    int64_t sync_steps;      /* async groups: steps t <= sync_steps run at S = 0 (a
                                synchronous warm start; strata_config.staleness_warmup) */
    strata_coh_mode mode;    /* install mode (async groups; inline groups are FIXED) */
    int workers;             /* 0 = online cores - 1, at least 1 */
    bool pin_workers;        /* hwloc-pin the workers */
    int worker_delay_us;     /* testing: random 0..N us before each job */
    double wait_timeout_s;   /* bound of every wait, seconds (> 0) */
    strata_tier_kind results_tier; /* HOST (spill to nvme past host_budget when nvme_dir
                                      is set) or NVME (every async block on nvme) */
    size_t host_budget;      /* host tier bytes, 0 = unlimited */
    const char *nvme_dir;    /* nvme tier directory, NULL = none */
    size_t nvme_budget;      /* nvme tier bytes, 0 = unlimited */
    int nvme_queue_depth;    /* >= 8 */
    size_t nvme_chunk_bytes; /* staging chunk (strata_nvme_config.chunk_bytes); 0 = its default */
    const strata_logger *log; /* must outlive the engine */
    strata_replicas *replicas; /* HSDP: this rank's replica set (must outlive the engine;
                                  every replica registers the same parameters in the same
                                  order): each block is refreshed by one replica and its
                                  result shipped to the others; NULL = every owner refreshes
                                  its own blocks */
    /* The stream seam (NULL: none; every copy is the families' synchronous
     * one). With a backend, snapshots of families with snapshot_async are
     * queued on the backend's shadow stream (low priority) after an event
     * on the training stream (the default stream), a job waits for its
     * snapshot's event before it reads the slot, and the training stream
     * waits for it before the factors change again. Must outlive the
     * engine. */
    strata_backend *be;
    /* With `be`: results of families with install_device are installed from
     * device memory: two device buffers per block, the due result copied
     * host -> device on the shadow stream (staged early by
     * strata_refresh_prefetch once it is READY, else at its install), an
     * event recorded per copy; at install the training stream waits on that
     * event only when it has not completed (counted: stream_waits). The
     * runtime sets it for backends whose memory the host cannot address
     * (CUDA). Host-placed blocks are staged early; nvme blocks at install. */
    bool device_roots;
    /* With `be`: the host tier (slots, resident results, staging, worker
     * scratch) is `be`'s STRATA_MEM_HOST_PINNED memory, so the seam's
     * snapshots and stages are asynchronous copies (review C3). The runtime
     * sets it for the CUDA backend. */
    bool host_pinned;
    /* The runtime's memory ledger (base/ledger.h): the engine charges its
     * result slots (roots), nvme extents, staging, worker scratch and
     * workspaces, the HSDP ship buffer (comm) there, all released at
     * destroy. NULL: none. Must outlive the engine. */
    struct strata_ledger *ledger;
    /* The stale-correction valve (strata_config.stale_correction, issue #23
     * item 5): where a step would wait for a due result still on a worker,
     * the newest ready result is installed and the family corrects the
     * installed one toward its current factors (precond.h `correct`)
     * instead; a refresh point whose block has no free slot is skipped
     * instead of waiting for one. Async only, host results tier only, no
     * HSDP replicas; every async family must have `correct`
     * (STRATA_ERR_UNSUPPORTED at commit otherwise). Runs depend on the
     * workers' speed, as EAGER installs do. */
    bool stale_correction;
    /* State paging (strata_config.page_state, issue #21 item 6): the whole
     * persistent second-order state of every parameter whose family has a
     * page_range (precond.h: Shampoo's factors, grafting and momentum,
     * SOAP's and KL-Shampoo's factors, eigenbases and moments) lives in the
     * nvme tier between the parameter's steps: written there when the
     * parameter is added (its pages dropped, so at most one state is
     * resident while the states are created), read back (io_uring) into the
     * state's own memory before its step, the next paged parameter's read
     * ahead in step order while this one steps, written back after the
     * step and its pages dropped once the write has landed. So at most two
     * parameters' states are resident at once (the step's and the one read
     * ahead). The ledger moves a paged state's bytes by kind between the
     * DEVICE and NVME tiers as it comes and goes. Needs nvme_dir and the CPU
     * backend (the state's memory must be host memory); results are bit
     * for bit those of a resident run. */
    bool page_state;
} strata_refresh_config;

typedef struct strata_refresh strata_refresh;

typedef struct strata_refresh_stats {
    /* coherence, async groups only (inline groups never wait or go stale past F-1) */
    int64_t installs, waits, dropped, failed, bound_exceeded, max_staleness;
    double wait_seconds;
    int64_t jobs_submitted, jobs_cancelled;
    /* every group */
    int64_t refreshes, refresh_failures, refresh_retries; /* per part (factor / side) */
    int64_t refresh_newton, refresh_fallbacks; /* eigh-free roots, and those that fell back */
    uint64_t snapshot_bytes;  /* bytes packed into slots (device -> host) */
    int64_t io_errors;        /* nvme transfers that failed (previous result kept) */
    int32_t blocks, blocks_on_nvme;
    size_t host_bytes, host_bytes_peak, nvme_bytes, nvme_bytes_peak;
    uint64_t nvme_bytes_written, nvme_bytes_read;
    /* refreshes (per block) this rank ran, and (HSDP) results it received from the
     * replica that ran them; the shipped results' bytes, sent + received */
    int64_t blocks_computed, blocks_received;
    uint64_t ship_bytes_intra_node, ship_bytes_inter_node;
    /* the stream seam (config.be): copies queued on the shadow stream, and
     * installs whose staged result was not complete, so that the training
     * stream waited on its event (device_roots) */
    int64_t stream_snapshots;     /* snapshots queued on the shadow stream */
    int64_t stream_stages;        /* results copied host -> device on the shadow stream */
    int64_t stream_stages_early;  /* of those, staged before their install step */
    int64_t stream_installs;      /* installs from device memory */
    int64_t stream_waits;         /* installs where the training stream waited on the event */
    uint64_t stream_wait_bytes;   /* bytes of those results */
    /* every wait of the training stream on incomplete shadow-stream work
     * (installs' stages and snapshots' copies), timed with the backend's
     * timing events where it has them (issue #20): seconds the training
     * stream stood still, summed over the completed timed waits */
    int64_t stream_blocking_waits;
    int64_t stream_waits_timed;   /* measured with a timing-event pair */
    int64_t stream_waits_untimed; /* no timing events, or all pairs in flight */
    int64_t stream_waits_pending; /* timed, not yet complete (not in the seconds yet) */
    double stream_wait_seconds;
    double critical_seconds;  /* the critical path, cumulative (strata_refresh_critical_seconds) */
    /* refresh points whose snapshot could not be taken or stored (an nvme
     * write, no free slot, a job not accepted): previous result kept */
    int64_t snapshot_failures;
    /* the stale-correction valve (config.stale_correction): block acquires
     * whose wait the valve replaced by a correction (waits_avoided), the
     * roots (parts) it corrected, acquires where it could not correct and
     * waited (no result yet, or no part improved), refresh points skipped
     * because the block had no free slot, and the largest staleness t - v
     * of a corrected acquire (the base result's; it may exceed F-1+S, which
     * bound_exceeded does not count) */
    int64_t stale_waits_avoided, stale_corrections, stale_refused, stale_refreshes_skipped;
    int64_t stale_max_corrected;
    /* streamed residency (nvme placement, engine/refresh.c): the pool of
     * host buffers the installed and staged results of nvme blocks pass
     * through; reads of an installed result the step needed and did not
     * find resident (the step waited for each), reads started ahead
     * (forward hook, the step's lookahead), buffers taken from another
     * block, and results completed at install and written back */
    int32_t resident_buffers;
    size_t resident_bytes;
    int64_t resident_reads, resident_prefetches, resident_evictions, resident_writebacks;
    /* state paging (config.page_state): parameters whose state pages, their
     * paged bytes, reads of a state (read ahead or not), reads the step had
     * to start itself (not read ahead: it waited for the whole read), and
     * write-backs */
    int32_t paged_params;
    uint64_t paged_bytes;
    int64_t page_reads, page_reads_waited, page_writes;
} strata_refresh_stats;

/* The streamed-residency pool's buffer count (engine/refresh.c): for
 * `n_nvme` blocks on nvme, `sticky` of them of a family whose install
 * neither copies nor rebinds (precond.h), `max_entry` the most blocks of one
 * parameter; budgeted: the smallest pool (sticky + max_entry + 1, at least
 * sticky + 2) plus `spare` buffers the host budget leaves, else sticky +
 * 2 * max_entry + 2 (two parameters' working sets); never more than
 * 2 * n_nvme nor less than the smallest. Pure (the planner uses it too). */
int strata_refresh_pool_buffers(int sticky, int max_entry, int n_nvme, bool budgeted,
                                size_t spare);

/* The engine's placement of result blocks between the host and nvme tiers
 * (engine/refresh.c place; the planner runs it too), in block order: a
 * block stays on host while its n_slots slots (and its chain head), the
 * blocks after it were they all on nvme, and `fixed` (the nvme layout's
 * host bytes: worker scratch, staging, the residency pool's smallest size)
 * fit `budget` (0: no budget); host_results false puts every async block on
 * nvme. Inline blocks stay on host. Sets b[i].on_nvme and *planned (host
 * bytes). Errors: STRATA_ERR_INVALID_ARG (a block for nvme, have_nvme
 * false), STRATA_ERR_NOMEM (the budget cannot hold even the spill layout;
 * *planned says what it needs), both with the engine's messages. */
typedef struct strata_place_block {
    size_t charge; /* the host tier's charge of one slot (strata_tier_charge_size) */
    int n_slots;
    bool chain, inline_;
    bool on_nvme;  /* out */
} strata_place_block;
strata_status strata_refresh_place_blocks(strata_place_block *b, int n, size_t budget,
                                          size_t fixed, bool host_results, bool have_nvme,
                                          size_t *planned);

/* Errors: STRATA_ERR_INVALID_ARG (bad config), STRATA_ERR_NOMEM. */
strata_status strata_refresh_create(const strata_refresh_config *c, strata_refresh **out);

/* Register a parameter (before commit): its family, its state (created with
 * external_results = true), the family configuration the state was created
 * with (copied), its refresh phase `offset` in [0, F), its forward-hook layer and name (for messages). *id is its
 * handle for strata_refresh_step. Errors: STRATA_ERR_STATE (after commit),
 * STRATA_ERR_NOMEM, STRATA_ERR_INVALID_ARG. */
strata_status strata_refresh_add(strata_refresh *e, const strata_precond_family *fam,
                                 void *state, const void *fam_cfg, int offset, int layer,
                                 const char *name, int *id);

/* Groups, registries, slots (placement in the host/nvme tiers), workers.
 * A group whose family chains its refreshes (precond.h chain_in: SOAP's and
 * KL-Shampoo's QR steps) runs them chained when S >= F: ceil(S/F) + 2 slots
 * per block (a ring: several refreshes of a block in flight), one chain
 * head per block in the host tier, the block's jobs one after the other,
 * each continuing the one before it; installed in FIXED mode when the
 * family says chain_ordered. S < F runs as before (no head, no chaining).
 * Errors: STRATA_ERR_INVALID_ARG (S too large for a family whose schedule
 * sets max_staleness), STRATA_ERR_NOMEM (a tier budget cannot hold the slots, with the
 * sizes), STRATA_ERR_IO (the nvme tier). On error the engine is unusable
 * (destroy it). */
strata_status strata_refresh_commit(strata_refresh *e);

/* The first pass of step t (1-based) of parameter `id`, before anything of
 * the step changes: everything of the step that can fail for a reason
 * outside the program. For each block whose due result (the one step t's
 * acquire installs) was begun before step t: HSDP, ship it from the
 * replica that refreshed it (a collective of the replica set); wait for
 * its job (bounded by wait_timeout_s); nvme placement, read it into a
 * buffer of the residency pool when one is not wanted by this step (a
 * failed read is counted in io_errors and retried
 * at install, which keeps the previous result if it fails again: not an
 * error). It changes no weight, moment, factor or installed result, only
 * what the next call of the step would otherwise do itself (a wait, a read,
 * a shipped result's slot), so a failed first pass may be retried, and
 * strata_refresh_step for the same t then finds nothing left to wait for
 * but a result begun in step t itself (lag 0 with S = 0 on workers). Adds
 * the time spent to *wait_seconds (async groups). Errors: STRATA_ERR_TIMEOUT
 * (a wait ran out; HSDP: on every replica of the block, the result stays
 * unshipped), STRATA_ERR_IO (HSDP: the refreshing replica could not read
 * it), a communicator's status (HSDP), STRATA_ERR_INVALID_ARG. Every
 * replica of an HSDP set must call it for the same parameters in the same
 * order, whatever an earlier call returned. */
strata_status strata_refresh_prepare(strata_refresh *e, int id, int64_t t, double *wait_seconds);

/* One optimizer step (1-based t) of parameter `id`, after
 * strata_refresh_prepare(id, t) returned STRATA_OK: before, snapshot (lag
 * 0), acquire + install, apply, after, snapshot (lag 1). Adds the phase
 * timings to *cnt (the refresh's share, snapshot + wait + inline compute,
 * to cnt->seconds_roots) and the time spent waiting on workers to
 * *wait_seconds. Nothing here fails for a reason outside the program:
 *  - a refresh point whose snapshot cannot be taken or stored (an nvme
 *    write, no free slot in time, the job refused) keeps the previous
 *    result, counted (snapshot_failures, io_errors, the registry's failed)
 *    and logged once at WARN, as a failed decomposition is;
 *  - an nvme read of the due result that fails keeps the previous result
 *    (io_errors);
 *  - the wait for a result begun in this very step (lag 0, S = 0 on
 *    workers; HSDP: its shipping) is not bounded: the factors have already
 *    absorbed G and S = 0 promises the synchronous root, so it waits on,
 *    logging a WARN each wait_timeout_s.
 * Errors: the family's (STRATA_ERR_NONFINITE: a non-finite direction left
 * the weights untouched, the rest of the step ran), a backend's or
 * communicator's status (HSDP shipping of a result begun in this step),
 * STRATA_ERR_INTERNAL, STRATA_ERR_INVALID_ARG. */
strata_status strata_refresh_step(strata_refresh *e, int id, int64_t t, float lr_scale, float *w,
                                  const float *g, strata_optim_counters *cnt,
                                  double *wait_seconds);

/* Whether parameter `id`'s step is its family's apply alone: no refresh
 * group (nothing to snapshot, acquire or install), no before/after phase
 * (Muon, AdamW). Such a step touches only the parameter's own state, weights
 * and gradient, so the steps of different plain parameters may run side by
 * side (strata_refresh_apply_plain). False for a bad id or before commit. */
bool strata_refresh_plain(const strata_refresh *e, int id);

/* The step of a plain parameter (strata_refresh_plain): exactly what
 * strata_refresh_step does for it (the family's apply), but it touches no
 * engine state, so any thread may call it, concurrently for distinct ids
 * (the training thread waits for all of them before it goes on). A plain
 * family does no second-order work, so nothing counts on the critical path.
 * Adds the family's counters to *cnt. Errors: the family's apply's
 * (STRATA_ERR_NONFINITE: a non-finite direction left the weights alone),
 * STRATA_ERR_INVALID_ARG (bad id, not plain, before commit). */
strata_status strata_refresh_apply_plain(strata_refresh *e, int id, int64_t t, float lr_scale,
                                         float *w, const float *g, strata_optim_counters *cnt);

/* Forward hook of `layer` for step t: start reading its due results from the
 * nvme tier while the forward and backward passes run. Never fails (a failed
 * read is retried at install). */
void strata_refresh_prefetch(strata_refresh *e, int layer, int64_t t);

void strata_refresh_stats_get(strata_refresh *e, strata_refresh_stats *out);

/* The critical path of second-order state, cumulative, in seconds: the time
 * the training thread has spent inside this engine on anything but the
 * family's own step math (before / apply / after), that is taking
 * snapshots, submitting jobs, running inline refreshes (the whole refresh of
 * a synchronous run), acquiring results (the bounded waits included),
 * installing them (nvme tier reads included) and starting nvme prefetches.
 * Measured on the training thread only, so the workers' time never counts
 * and a busy machine stretches it only as much as it stretches the step
 * itself. Cheap (one load); 0 for NULL. Training thread only. */
double strata_refresh_critical_seconds(const strata_refresh *e);

/* Testing: the next `n` nvme transfers fail with errno_value.
 * Errors: STRATA_ERR_STATE (no nvme tier). */
strata_status strata_refresh_inject_io_errors(strata_refresh *e, int n, int errno_value);

/* Testing: the snapshots of the next `n` refresh points (per block, any
 * parameter, training thread) fail as a failed nvme write would
 * (STRATA_ERR_IO inside the step: counted, previous result kept).
 * Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_refresh_inject_snapshot_errors(strata_refresh *e, int n);

/* Testing: refresh jobs of parameter `id` (-1: every parameter; -2: none,
 * the default) wait on their worker before they run, until released by
 * another call; destroy releases them. Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_refresh_hold_jobs(strata_refresh *e, int id);

/* ---- checkpoint seams (ckpt/checkpoint.c): enumerate and restore the
 * engine's state. Blocks are numbered 0..strata_refresh_block_count()-1 in
 * registration order of their parameters. Training thread only. */

typedef struct strata_refresh_block_desc {
    int entry;            /* the parameter's handle (strata_refresh_add's *id) */
    int block;            /* block index within the parameter's state */
    size_t slot_bytes;    /* bytes of one slot (the family's layout) */
    size_t tail_bytes;    /* of them, the tail an older layout's checkpoint may lack
                             (precond.h strata_precond_block.tail_bytes) */
    int n_slots;          /* slots of the block (strata_coh_slots_needed(F, S)) */
    bool on_nvme;         /* slots in the nvme tier, installed result through the residency pool */
    bool inline_;         /* refreshed on the training thread (sync, or not async-capable) */
    int frequency;        /* F of its group */
    int64_t start;        /* first refresh point of offset 0 */
    int lag;              /* 0 or 1 (precond.h) */
    int offset;           /* the parameter's refresh phase */
    int staleness;        /* S of its group (0 when inline) */
    strata_coh_mode mode; /* install mode of its group */
    int installed_slot;   /* -1 before the first install */
    unsigned have;        /* result parts of the installed result that hold a valid result */
} strata_refresh_block_desc;

int strata_refresh_block_count(const strata_refresh *e);

/* Errors: STRATA_ERR_INVALID_ARG (bad index). */
strata_status strata_refresh_block_describe(const strata_refresh *e, int i,
                                            strata_refresh_block_desc *out);

/* Wait until no refresh job is queued or running in any group and no nvme
 * prefetch is in flight (each wait bounded by wait_timeout_s). *in_flight
 * (may be NULL) gets the number of jobs that were still in flight when the
 * call began: their results are READY (or FAILED) afterwards and, in fixed
 * mode, are installed at exactly the step they would have been.
 * Errors: STRATA_ERR_TIMEOUT, STRATA_ERR_IO (a prefetch failed; counted). */
strata_status strata_refresh_drain(strata_refresh *e, int64_t *in_flight);

/* State, version and failed-part bits of slot k of block i (after a drain).
 * Errors: STRATA_ERR_INVALID_ARG. */
strata_status strata_refresh_slot_get(strata_refresh *e, int i, int k,
                                      strata_coh_slot_state *state, int64_t *version,
                                      unsigned *failed);

/* Copy slot k's result (slot_bytes) into host memory `buf`: for the
 * installed slot, the result as installed (failed parts filled from the
 * previous result; for an nvme block its extent holds it too, written back at
 * install); for another slot,
 * its bytes (read back from the nvme tier when it lives there). Only the
 * result's bytes (the block's parts and aux) are kept; the rest of the slot
 * (the snapshot's inputs) reads as zeros, so HSDP replicas, one of which
 * computed the result and the others received it, read the same bytes. Call
 * after a drain. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_IO (nvme read). */
strata_status strata_refresh_slot_read(strata_refresh *e, int i, int k, void *buf);

typedef struct strata_refresh_slot_image {
    strata_coh_slot_state state; /* FREE, READY, INSTALLED or FAILED */
    int64_t version;             /* its refresh point */
    unsigned failed;             /* failed-part bits of its refresh */
    const void *data;            /* slot_bytes of host memory (READY/INSTALLED), else NULL */
    size_t bytes;                /* bytes at data: slot_bytes (0 reads as slot_bytes), or
                                    slot_bytes - tail_bytes, the tail then zeroed (an older
                                    layout's checkpoint) */
} strata_refresh_slot_image;

/* Restore block i from a checkpoint: every slot's bytes (into the host or
 * nvme tier), the registry's slot states and installed version, the block's
 * `have` bits, and, when a slot is installed, the family's install of it
 * (which lends Shampoo's roots again; state the install also touches, e.g.
 * SOAP's moments, is then overwritten by the caller from the checkpoint).
 * n must equal the block's n_slots. Call on a committed engine with nothing
 * in flight (a fresh one, or after a drain). Errors: STRATA_ERR_INVALID_ARG
 * (bad index/count, an impossible slot table), STRATA_ERR_STATE (a job in
 * flight), STRATA_ERR_IO (nvme write), the family's install errors. */
strata_status strata_refresh_block_restore(strata_refresh *e, int i,
                                           const strata_refresh_slot_image *slots, int n,
                                           unsigned have);

/* State paging (config.page_state) for checkpoints: strata_save and
 * strata_load reach a paged parameter's state (its family tensors, and an
 * install's replay) only while it is pinned, one parameter after another,
 * as the step does, so that at most two states are resident (besides a
 * write-back landing) whatever the model's size.
 *
 * strata_refresh_paged: whether entry id's state pages (false for a bad id,
 * an unpaged entry or a run without page_state).
 *
 * strata_refresh_page_pin: make entry id's paged state resident (read back
 * from the nvme tier and waited for; a failed read is tried once more)
 * until the next pin, release or step; every other resident state is let
 * go (a write-back in flight lands first; a clean state's pages are
 * dropped), but `ahead` (-1: none), the paged entry the caller pins next,
 * whose read is started now. A no-op for an unpaged entry. Call on the
 * training thread with nothing else stepping. Errors: STRATA_ERR_INVALID_ARG
 * (bad id, not committed), STRATA_ERR_IO (the state could not be read: its
 * memory is untouched, still on nvme).
 *
 * strata_refresh_page_changed: the caller wrote into pinned entry id's
 * state: its write-back starts (it lands at the next pin, release or
 * step; a failed one keeps the state resident and dirty, nothing lost, and
 * is said as STRATA_ERR_IO by that entry's next strata_refresh_prepare, as
 * after a step). A no-op for an entry that is not paged or not pinned.
 *
 * strata_refresh_page_release: every pinned or read-ahead state goes back
 * to nvme only (write-backs land; clean pages dropped) but the first paged
 * entry in step order, which stays resident or is read ahead for the next
 * step, as after a step. A no-op without paging. */
bool strata_refresh_paged(const strata_refresh *e, int id);
strata_status strata_refresh_page_pin(strata_refresh *e, int id, int ahead);
void strata_refresh_page_changed(strata_refresh *e, int id);
void strata_refresh_page_release(strata_refresh *e);

/* NULL is a no-op. Stops the workers (queued jobs cancelled, running ones
 * finished), waits for in-flight nvme transfers, frees every buffer. The
 * families' states stay the caller's. */
void strata_refresh_destroy(strata_refresh *e);

#endif
