/* optim/precond.h — the per-family preconditioner interface (internal).
 *
 * Every optimizer family (Shampoo, SOAP, KL-Shampoo, and trivially Muon and
 * AdamW, which have nothing to refresh) fills one strata_precond_family
 * table. The runtime's refresh engine (engine/refresh.c) drives every
 * family through it and never branches on which family it runs; the kind ->
 * family table (optim/family.h) is the one place that names the families:
 * adding a family touches its file and its row there (a built-in one also
 * its enum value and its strata_config member).
 *
 * A parameter's state is split into *blocks* (a Shampoo block after
 * max_preconditioner_dim blocking; one block for SOAP and KL-Shampoo). A
 * block's second-order state is refreshed at its family's *refresh points*
 * (the schedule below) from a *snapshot*: the family packs what the refresh
 * needs into a slot (a byte buffer the engine owns, in the host or nvme
 * tier), the refresh turns the slot into a result in place (a pure function
 * of the slot, float64 inside, callable from any thread), and the family
 * installs the result when the coherence registry says it is due.
 *
 * One optimizer step of a parameter at (1-based) step t, as the engine runs
 * it:
 *     before(t, g)                    e.g. Shampoo's factors absorb G; a family
 *                                     may finish the whole step here (*done)
 *     lag 0: if t is a refresh point: snapshot every block (version t)
 *     for every block: acquire(t) -> install the due result, if new
 *     apply(t, w, g)                  precondition, graft, update the weights
 *     after(g)                        e.g. SOAP's factors absorb G
 *     lag 1: if t+1 is a refresh point: snapshot every block (version t+1)
 * `lag` is the number of steps between a snapshot and the step that first
 * uses its result in the synchronous algorithm (Shampoo 0, SOAP 1).
 *
 * Results that failed (LAPACK error, non-finite values) are reported per
 * *part* (a bit per part in `failed`); the engine keeps the previous result
 * of a failed part (it copies the installed slot's part into the new slot
 * before install), so a family sees a complete result and may decide to skip
 * failed parts (SOAP must: its install permutes the moments).
 *
 * Threading: create/destroy/before/apply/after/snapshot/install run on the
 * training thread. `refresh` runs on a worker thread (or inline) and may read
 * only what is immutable after create (configuration, shapes); `snapshot`
 * copies everything else it needs into the slot.
 */
#ifndef STRATA_OPTIM_PRECOND_H
#define STRATA_OPTIM_PRECOND_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/schedule.h"
#include "strata/backend.h"
#include "strata/optim.h"
#include "strata/status.h"
#include "strata/types.h"

#define STRATA_PRECOND_MAX_PARTS 4
#define STRATA_TENSOR_NAME_MAX 32

/* One refreshable block of a parameter's state. */
typedef struct strata_precond_block {
    size_t slot_bytes;  /* bytes of one snapshot/result slot */
    int max_dim;        /* largest matrix side the refresh decomposes (sizes workspaces) */
    int n_parts;        /* result parts (<= STRATA_PRECOND_MAX_PARTS) */
    size_t part_offset[STRATA_PRECOND_MAX_PARTS]; /* byte range of each part in the slot */
    size_t part_bytes[STRATA_PRECOND_MAX_PARTS];
    /* Bytes of the slot besides the parts that install reads (SOAP: the
     * permutations its refresh writes after the bases; Shampoo warm-qr: the
     * eigenbases its roots came from); aux_bytes = 0: none.
     * The parts and this range are the installed result: what an HSDP
     * replica set ships from the replica that refreshed the block. */
    size_t aux_offset, aux_bytes;
    /* Bytes at the end of the slot (the aux range, and any padding before
     * it) that a checkpoint of an older layout may lack (0: none): such a
     * checkpoint's slot of slot_bytes - tail_bytes loads with the tail
     * zeroed, which the family reads as "none" (Shampoo's warm-qr
     * eigenbases with their flags: a checkpoint of another root method, or
     * of a strata before the bases were part of the result, loads into a
     * warm-qr run). */
    size_t tail_bytes;
} strata_precond_block;

/* Refresh schedule in runtime steps: refresh points are
 * start + offset + k F (k >= 0), offset in [0, F) per parameter; the result
 * of refresh point r is first used at step r (lag 0: snapshot taken at step r
 * before apply) or r (lag 1: snapshot taken at the end of step r - 1). */
typedef struct strata_precond_schedule {
    int frequency;   /* F >= 1 */
    int64_t start;   /* first refresh point (offset 0), >= 1 */
    int lag;         /* 0 or 1 */
    int offset;      /* the configuration's own refresh phase (refresh_offset) */
    int max_staleness; /* largest S the family accepts asynchronously; -1 = any */
    const char *why_max; /* the reason, when max_staleness >= 0 */
    /* The refresh point of the family's first result, which `before`
     * computes on the training thread at the first step (SOAP's and
     * KL-Shampoo's first eigenbasis, a full eigh: 2, the end of step 1,
     * first used at step 2); 0: none. With defer_first the engine may take
     * it as a refresh point instead (precond.h defer_first). */
    int64_t first;
} strata_precond_schedule;

/* Is step t a refresh point of s (start + offset + k F)? The one rule
 * (base/schedule.h); a family's one-tensor path asks it with the step whose
 * refresh it takes now (the current step plus the lag). */
static inline bool strata_precond_is_refresh(const strata_precond_schedule *s, int64_t t)
{
    return strata_refresh_point_is(s->start + s->offset, s->frequency, t);
}

/* One persistent tensor of a state (checkpoints walk these). */
/* STRATA_BOOL: a C bool (one byte, 0 or 1), for the flags a state keeps
 * (SOAP's has_basis): they are persistent state too. STRATA_BF16: bfloat16
 * storage (strata_state_dtype BF16), two bytes an element, saved as stored
 * (safetensors "BF16"). */
typedef enum strata_dtype {
    STRATA_F32 = 0, STRATA_F64 = 1, STRATA_I32 = 2, STRATA_I64 = 3, STRATA_BOOL = 4,
    STRATA_BF16 = 5
} strata_dtype;

typedef struct strata_tensor_info {
    char name[STRATA_TENSOR_NAME_MAX]; /* e.g. "L.0", "exp_avg" (unique within the state) */
    strata_dtype dtype;
    int ndim;                /* 0..2 */
    int64_t shape[2];
    strata_tier_kind where;  /* DEVICE (backend memory) or HOST */
    void *data;              /* the tensor's memory (read/write for a restore) */
    /* Host tensors only (strata_tensor_info_set leaves it false): a
     * checkpoint without it still loads, and the loader then fills it with
     * zeros, so the family keeps it where zeros mean "none yet" (Shampoo's
     * warm eigenbases with their has_warm_basis flags: a checkpoint of
     * another root method, or of a strata before them). A checkpoint that
     * holds it loads it as any other tensor. With the same layout each rank
     * loads its own file's copy; on another layout the parameter owner's
     * (Shampoo's bases are part of the refresh result, shipped to every
     * HSDP replica with it, so the replicas' copies agree). */
    bool optional;
} strata_tensor_info;

/* Kinds of second-order state with a storage dtype (strata_config.
 * state_dtype_factors, _roots, _moments). */
enum {
    STRATA_STATE_KIND_FACTORS = 0, STRATA_STATE_KIND_ROOTS = 1, STRATA_STATE_KIND_MOMENTS = 2,
    STRATA_STATE_KINDS = 3
};

/* A state's bytes by ledger kind (strata_precond_family.plan). */
typedef struct strata_precond_plan {
    uint64_t device[STRATA_LEDGER_KINDS]; /* the backend's memory */
    uint64_t host[STRATA_LEDGER_KINDS];   /* plain host memory */
    uint64_t step_scratch; /* bytes of the runtime's shared step scratch this parameter
                              needs (the family's step_scratch; not in device[]: the
                              runtime allocates the largest once, as device workspace) */
    uint64_t host_transient; /* host workspace held only inside one call on the training
                                thread (SOAP's first eigenbasis), one parameter at a
                                time: the planner charges the largest once */
} strata_precond_plan;

/* A parameter's matrix view, as the runtime routes it. */
typedef struct strata_precond_shape {
    int64_t batch; /* stacked matrices (Muon), else 1 */
    int64_t rows, cols;
    size_t numel;
} strata_precond_shape;

typedef struct strata_precond_family {
    const char *name; /* "shampoo", ... */
    const char *refresh_noun; /* what one refresh of a part is called, plural
                                 ("inverse roots", "eigenbasis refreshes"); NULL if none */

    /* ---- configuration-level questions (cfg is the family's config struct) */
    /* Does the family refresh anything? (false: Muon, AdamW) */
    bool (*has_refresh)(const void *cfg);
    /* May its refreshes run on worker threads? */
    bool (*async_capable)(const void *cfg);
    void (*schedule)(const void *cfg, strata_precond_schedule *out);
    /* Relative cost of one parameter's refreshes (stagger and planner). */
    double (*refresh_cost)(const void *cfg, const strata_precond_shape *shape);
    /* A copy of cfg with the refresh phase set (cfg_out has the config's size). */
    strata_status (*with_offset)(const void *cfg, int offset, void *cfg_out);
    size_t cfg_size;
    /* The configuration's defaults and its validation (the runtime fills and
     * checks every family's configuration through these; the public
     * strata_<family>_config_default/_check behind them). */
    void (*config_default)(void *cfg);
    strata_status (*config_check)(const void *cfg);
    /* Byte offsets inside the configuration of the learning rate and the
     * decoupled weight decay (both float): what a CLI's --lr and
     * --weight-decay set (strata_config_optimizer_lr). */
    size_t lr_offset, weight_decay_offset;
    /* Does the configuration carry a refresh period, and where (an int, the
     * byte offset inside it)? The runtime writes strata_config.
     * precondition_frequency there (its one refresh period). */
    bool has_frequency;
    size_t frequency_offset;
    /* Rough bytes of optimizer state per byte of parameter, for estimates
     * made before anything is allocated (strata_optimizer_info). */
    int state_per_param;
    /* Optional (NULL: numel): relative cost of one step of a parameter
     * without refreshes (the step team orders its work costliest first). */
    double (*step_cost)(const strata_precond_shape *shape);
    /* Optional (NULL: none): after a refresh failed, the reason the
     * configuration itself gives (e.g. Shampoo with epsilon = epsilon_rel =
     * 0), written into buf (cap bytes); false when it explains nothing. */
    bool (*failure_hint)(const void *cfg, char *buf, size_t cap);
    /* Optional (NULL: 0): the horizon 1/(1 - beta), in steps, of the
     * slowest second-moment, factor or eigenvalue-estimate EMA of this
     * configuration (strata_optimizer_info.ema_horizon; a trainer's default
     * warm-up covers it). strata_ema_horizon gives one EMA's. */
    double (*ema_horizon)(const void *cfg);
    /* Optional (NULL, or "": none): a short name for a configuration whose
     * refreshes run elsewhere or cost otherwise than the family's default
     * (Shampoo's root_method newton_f32: float32 roots on the backend, not
     * float64 eigendecompositions on a CPU worker). The cost model
     * (plan/costmodel.c) keys its cached measurements by it, so that such a
     * configuration is measured as it runs, never priced from another's. */
    const char *(*cost_variant)(const void *cfg);
    /* Optional (false: F32 only): which kinds of second-order state
     * (STRATA_STATE_KIND_*) the configuration can store in bfloat16, and
     * where its strata_state_dtype field for each is (a byte offset inside
     * it). The runtime writes strata_config.state_dtype_<kind> there and
     * refuses a kind the matrix optimizer's family has no field for. */
    bool has_state_dtype[STRATA_STATE_KINDS];
    size_t state_dtype_offset[STRATA_STATE_KINDS];

    /* ---- state life */
    /* external_results: the engine owns the results (Shampoo's roots are lent
     * from the engine's slots instead of allocated in the state). */
    strata_status (*create)(const void *cfg, strata_backend *be, const strata_precond_shape *shape,
                            bool external_results, void **out);
    void (*destroy)(void *state);
    size_t (*bytes)(const void *state);
    int (*n_blocks)(const void *state);
    void (*block)(const void *state, int b, strata_precond_block *out);

    /* ---- the step (training thread) */
    strata_status (*before)(void *state, float lr_scale, int64_t t, float *w, const float *g,
                            strata_optim_counters *cnt, bool *done);
    strata_status (*snapshot)(const void *state, int b, void *slot);
    /* Optional (NULL: the engine calls `snapshot`). The same bytes as
     * snapshot, queued as copies (device -> host slot) on stream `s`: the
     * slot holds the snapshot once an event recorded on `s` after the call
     * has completed, and the state's factors must not change before then
     * (the engine orders both; engine/refresh.c "stream seam"). */
    strata_status (*snapshot_async)(const void *state, int b, void *slot, strata_stream *s);
    /* Any thread; reads the slot, writes the result in place. `*failed` gets a
     * bit per failed part; counts refreshes/failures/retries in *cnt. Returns
     * STRATA_ERR_LINALG when every part failed. */
    strata_status (*refresh)(const void *state, int b, void *slot, double *work, int *iwork,
                             unsigned *failed, strata_optim_counters *cnt);
    /* Optional (NULL: every refresh starts from what its snapshot holds).
     * Chained refreshes: a family whose refresh continues the result of
     * the refresh before it (SOAP's and KL-Shampoo's QR power step starts
     * from the previous eigenbasis, which its snapshot copies from the
     * installed one). With S < F that result is installed before the next
     * snapshot, so the snapshot holds it. With S >= F several refreshes of
     * a block are in flight (a ring of slots) and the result before a
     * snapshot's is not installed yet: the engine then keeps a per-block
     * *chain head* (a buffer of the slot's layout, slot_bytes), runs the
     * block's jobs one after the other in refresh order, and calls, on the
     * worker, chain_in before refresh (copy the head's base into the slot,
     * replacing the snapshot's copy of the installed result) and chain_out
     * after it (write into the head the base the next refresh continues
     * from: this result's parts that did not fail, the slot's own base for
     * those that did). So every refresh continues from the one before it,
     * as with S < F. Both may read only what is immutable after create. */
    void (*chain_in)(const void *state, int b, void *slot, const void *head);
    void (*chain_out)(const void *state, int b, const void *slot, unsigned failed, void *head);
    /* Optional (NULL: every state of a family with chain_in chains). Does
     * this state's refresh continue the one before it? A family whose
     * states chain only in some configurations (Shampoo: root_method
     * WARM_QR, whose orthogonal-iteration step starts from the previous
     * eigenbasis; its eigh roots start from nothing) answers per state
     * (training thread, after create; immutable). A state answering false
     * is refreshed as without chain_in: no chain head, its block's jobs
     * are not serialized, snapshot is always taken. */
    bool (*chains)(const void *state);
    /* Optional (NULL: snapshot always), with chain_in: snapshot without
     * what chain_in replaces (the copy of the installed base; the factors
     * only). The engine takes it instead of snapshot when the block's head
     * already holds a base, so the job's chain_in is certain to run; it
     * saves the training thread a copy of the base at every refresh point. */
    strata_status (*snapshot_chained)(const void *state, int b, void *slot);
    /* With chain_in: install must see the chained results one after the
     * other, none skipped (SOAP's permutation of V is relative to the basis
     * before it), so the engine installs such a group in FIXED mode. Not
     * covered: a parameter skipped (strata_param_set_active) past a refresh
     * point with two results of a block ready at once installs the newer
     * and drops the older (coherence.h), so SOAP's V is then reordered
     * relative to a basis it never had, until its EMA forgets it. */
    bool chain_ordered;
    /* Optional (NULL: the first result is always `before`'s, on the
     * training thread). The first result as a refresh point (issue #23):
     * the engine calls it once, after create and before the first step, for
     * an asynchronous group with S >= 1 at F = 1 whose schedule has `first`
     * (which then lies on the period's grid: the group's refresh points
     * become first, first + 1, ...). From then on the state's first
     * `before` only absorbs the gradient into the factors (done = true, no
     * update, as before) and marks its state as holding a result (SOAP's
     * and KL-Shampoo's initial basis I, never used: see below); the engine
     * snapshots refresh point `first` after it, `snapshot` marks that slot
     * as the first (it may tell from the state), `refresh` computes there
     * what `before` would have (the full eigh), and install takes it as the
     * synchronous path would (no permutation of V). That result is due at
     * step `first` itself (S = 0 for it: the group's warm start covers step
     * `first`), so the run is the synchronous-first-result run bit for bit;
     * what moves is where the work runs: on a worker, overlapping the rest
     * of step first - 1 and the forward and backward passes of step
     * `first`, instead of inside step first - 1 on the training thread. */
    void (*defer_first)(void *state);
    size_t (*refresh_work_doubles)(int max_dim);
    size_t (*refresh_work_ints)(int max_dim);
    /* Install a result (complete: failed parts hold the previous result, or
     * zeros before the first). `have` has a bit per part that holds a valid
     * result; the slot stays untouched until the next install of the block. */
    strata_status (*install)(void *state, int b, const void *slot, unsigned failed,
                             unsigned have);
    /* true: install only hands the slot to backend operations (copies,
     * products) and never reads it on the host, so the engine may pass a
     * device-memory copy of the result (staged on the shadow stream) instead
     * of the host slot. false: install gets the host slot (SOAP's and
     * KL-Shampoo's permutations are read on the host). */
    bool install_device;
    /* Residency of an installed result that is read back from the nvme
     * tier (engine/refresh.c "streamed residency"): the engine keeps a
     * bounded pool of host buffers for those results, so an installed
     * result may leave host memory between steps and come back at another
     * address. install_copies: install copies what it needs out of the slot
     * (SOAP's and KL-Shampoo's eigenbases), so the buffer may be released
     * right after install. rebind (optional): install lends the slot (the
     * family reads it in apply until the next install), and the same
     * bytes now live at `slot`: point the state there (no other change:
     * calling it twice is calling it once; `have` as install's). The engine
     * calls it, when the address changed, before the parameter's apply (a
     * family's `before` must not read a lent result). A family with
     * neither keeps its installed result resident in a host buffer of its
     * own (not streamed). */
    bool install_copies;
    strata_status (*rebind)(void *state, int b, const void *slot, unsigned have);
    /* Optional (NULL: as install_copies says). The engine calls it once at
     * commit, before the first step, for a state every block of which is
     * held in a host slot that stays put (host placement, no device copy of
     * the result, no state paging): from then on the slot install is given
     * stays at its address, untouched, until the block's next install (its
     * failed parts filled from the result before, precond.h install), so
     * install may point the state at the result in the slot instead of
     * copying it (issue #23: SOAP's and KL-Shampoo's eigenbases on the CPU
     * backend). A family that does must point at the new slot (or its own
     * memory) at every install, failed parts included, and its `tensors`
     * (given out != NULL) must hand out its own memory, holding the result,
     * never the slot (a checkpoint's load writes there). */
    void (*lend_results)(void *state);
    /* Optional (NULL: no stale correction; the runtime refuses
     * stale_correction for the family, with no_correct_why). The safety
     * valve of the asynchronous runtime (issue #23 item 5): block b's due
     * result is still being computed and the step would wait for it;
     * instead, correct the installed result `res` in place toward the
     * state's current factors with one cheap step, on the training thread.
     * `res` is the pointer the last install was given (writable: the engine
     * owns it and writes nothing into it until the next install of b), in
     * the memory install_device says; `have` as install's; `work` is
     * correct_work_floats(max_dim) floats of the backend's memory. *parts
     * gets a bit per part changed. STRATA_OK with *parts != 0: use the
     * corrected result now; STRATA_OK with *parts == 0: nothing could be
     * improved (the engine then waits, as without the valve); other
     * statuses are errors of the step. */
    strata_status (*correct)(void *state, int b, void *res, unsigned have, float *work,
                             unsigned *parts);
    size_t (*correct_work_floats)(int max_dim);
    const char *no_correct_why; /* why a family with refreshes has no `correct` */
    strata_status (*apply)(void *state, float lr_scale, int64_t t, float *w, const float *g,
                           strata_optim_counters *cnt);
    strata_status (*after)(void *state, const float *g, strata_optim_counters *cnt);
    /* Optional (NULL: the parameter keeps its configuration's values, and
     * strata_param_set_hyper is refused with STRATA_ERR_UNSUPPORTED): replace
     * this parameter's learning rate and decoupled weight decay, the fields
     * at lr_offset and weight_decay_offset of the state's own copy of the
     * configuration (both finite and >= 0, checked by the caller). Training
     * thread, between steps; refreshes never read them. */
    void (*set_hyper)(void *state, float lr, float weight_decay);

    /* Optional (NULL: the state keeps its own scratch): the step scratch a
     * runtime-driven state (create with external_results = true) borrows
     * instead of allocating: device-memory buffers read and written only
     * inside one before/apply/after of this parameter, so one buffer of the
     * largest step_scratch serves every parameter (their steps run one after
     * another on the training thread, in stream order on a device).
     * step_scratch: the bytes it needs (0: none); set_step_scratch: use buf
     * (at least that many bytes, 64-byte aligned, the runtime's, alive until
     * destroy) from now on; the runtime calls it after create and before the
     * first step, and apply refuses with STRATA_ERR_STATE without it. */
    size_t (*step_scratch)(const void *state);
    void (*set_step_scratch)(void *state, void *buf);

    /* ---- state enumeration: persistent tensors only (no scratch); returns
     * the count (fills at most cap entries of out, which may be NULL). */
    int (*tensors)(const void *state, strata_tensor_info *out, int cap);
    /* Optional (NULL: none): tensor names this state cannot load (an older
     * strata's whose meaning has changed, or another form's of the same
     * family), as NULL-terminated pairs {name, why}, static. A checkpoint
     * holding one is refused with the why (strata_load:
     * STRATA_ERR_INVALID_ARG) instead of a bare "no tensor" message. */
    const char *const *(*retired_tensors)(const void *state);

    /* ---- planning (optional: NULL, the family cannot be planned; `strata
     * plan` says so). What create(cfg, be, shape, external_results = true)
     * allocates, computed without allocating: bytes by ledger kind
     * (strata/types.h) in the backend's memory (`device`) and in plain host
     * memory (`host`), exactly as create charges the ledger; and its blocks
     * (slot_bytes and max_dim filled, as `block` would return them).
     * Returns the number of blocks (fills at most cap of `blocks`, which
     * may be NULL). The plan-versus-ledger test (tests/cli/test_plan.py)
     * holds it to the ledger of real runs. */
    int (*plan)(const void *cfg, const strata_precond_shape *shape, strata_precond_plan *out,
                strata_precond_block *blocks, int cap);

    /* Optional (NULL: the state stays resident). State paging (issue #21
     * item 6; strata_refresh_config.page_state): the state's persistent
     * second-order memory as one range of host-addressable memory (the
     * family's one backend allocation: factors, grafting, moments, the
     * eigenbases it keeps, and the bits of scratch carved with them), with
     * the ledger bytes the state charged for that range, by ledger kind
     * (its STRATA_LEDGER_DEVICE cells; zeros without a ledger). Returns the
     * range's bytes and sets *data. The engine writes the range to the nvme
     * tier after the parameter's step and drops its pages, and reads it back
     * before the next, so the family touches the range only inside create,
     * destroy, before, snapshot, install, rebind, correct, apply, after and
     * tensors, never in refresh, chain_in or chain_out (which read only the
     * slot: a worker's refresh sees the snapshot copied on the training
     * thread, never the paged memory). The range's address never changes. */
    size_t (*page_range)(const void *state, void **data,
                         uint64_t kind_bytes[STRATA_LEDGER_KINDS]);
} strata_precond_family;

extern const strata_precond_family strata_family_adamw;
extern const strata_precond_family strata_family_muon;
extern const strata_precond_family strata_family_shampoo;
extern const strata_precond_family strata_family_soap;
extern const strata_precond_family strata_family_kl_shampoo;
extern const strata_precond_family strata_family_normuon;
extern const strata_precond_family strata_family_dion2;

/* Slots of a family without refreshes (Muon, NorMuon): has_refresh and
 * async_capable answering false, n_blocks answering 0. */
bool strata_family_never(const void *cfg);
int strata_family_no_blocks(const void *state);

/* Set one tensor_info entry (helper for the families' `tensors`). */
void strata_tensor_info_set(strata_tensor_info *ti, const char *name, int index,
                            strata_dtype dtype, int64_t rows, int64_t cols,
                            strata_tier_kind where, void *data);

/* Horizon 1/(1 - b) of an EMA with factor b, rounded, in steps (0: b not
 * in (0, 1), not an EMA). */
static inline double strata_ema_horizon(float b)
{
    return b > 0.0f && b < 1.0f ? round(1.0 / (1.0 - (double)b)) : 0.0;
}

#endif
