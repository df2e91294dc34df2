/* trainer.h — the main job: train the byte-level GPT through the strata runtime.
 *
 * One call runs a whole training: load the corpus, build the model, register
 * its tensors with a strata runtime (the routing rule sends embeddings and
 * 1-D tensors to AdamW, the matrices to the chosen matrix optimizer), then
 * per step: sample a batch, forward with strata_hook_forward per layer,
 * backward with strata_hook_backward per layer, strata_step. Reports go to a
 * FILE (per-step lines or a progress bar on a terminal), metrics to JSONL.
 *
 * Learning-rate schedule: linear warm-up over `warmup` steps, then cosine
 * decay to `min_lr_ratio` of the peak at the last step (nanoGPT's schedule),
 * applied through strata_set_lr_scale.
 */
#ifndef STRATA_EXAMPLES_GPT_TRAINER_H
#define STRATA_EXAMPLES_GPT_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpt.h"
#include "strata/strata.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_train_options {
    const char *data_path;   /* file or directory; default the Debian fortunes corpus */
    double val_fraction;     /* default 0.1 */
    bool data_recursive;     /* a data_path directory's subdirectories too (GPT_DATA_RECURSIVE) */
    gpt_config model;        /* default 4 layers, d_model 128, 4 heads, max_seq = seq_len */
    int seq_len;             /* T, bytes per sequence; default 128 */
    int batch;               /* B, sequences per step; default 16 */
    int steps;               /* optimizer steps; default 300 */
    int warmup;              /* warm-up steps; -1: max(steps/10, min(H, steps)), H the
                                slowest second-moment horizon 1/(1-beta) in use (AdamW
                                tail 20, KL-Shampoo 50) (default -1); with -1 a run
                                shorter than the matrix optimizer's H scales the
                                matrices' lr by warmup/H (their own warm-up, H steps) */
    float min_lr_ratio;      /* cosine floor as a fraction of peak; default 0.1 */
    int eval_every;          /* steps between validation evaluations; default 50 (0 = end only) */
    int eval_batches;        /* batches per validation; default 8 */
    uint64_t seed;           /* model init and batch sampling; default 1337 */
    strata_config strata;    /* optimizer configuration (matrix_optimizer, hyperparameters);
                                with matrix optimizer AdamW, strata.adamw.lr is the
                                matrices' peak lr (--lr), the tail's is tail_lr */
    float tail_lr;           /* peak lr of the AdamW tail (embeddings and 1-D tensors) for
                                every matrix optimizer (--adamw-lr); < 0 (the default -1):
                                the trainer's default for the run's matrix optimizer,
                                gpt_default_tail_lr (AdamW's: its own strata.adamw.lr,
                                one lr for the run). gpt_train writes it into
                                strata.adamw.lr for a non-AdamW run (the tail is AdamW's
                                only use there); with AdamW a tail_lr other than
                                strata.adamw.lr goes to each tail parameter through
                                strata_param_set_hyper after the commit (and after a
                                resume's load), never called when the two are equal (then
                                bit-identical to one AdamW at one lr) */
    int grad_accum;          /* micro-batches per optimizer step on one rank (default 1):
                                each micro-batch's gradient is computed alone, the
                                gradients are summed in order from +0 and scaled by
                                (float)(1.0 / grad_accum) -- exactly what grad_accum ranks
                                compute with strata's deterministic reduction */
    const char *metrics_path; /* JSONL output, NULL = none */
    int progress;            /* 0 = plain lines, 1 = progress bar, -1 = decide by isatty */
    bool quiet;              /* only the summary */
    size_t memory_limit;     /* bytes the run may use; 0 = MemAvailable from /proc/meminfo */
    volatile sig_atomic_t *stop; /* NULL, or a flag a signal handler sets to the signal's
                                    number: the run then stops after the step in progress
                                    (or before the first), prints and writes its summary
                                    and releases everything (tier files included) */
    strata_backend_kind device; /* where the model's forward and backward run: CPU (default,
                                   gpt.h) or CUDA (the GPU model, cuda/gpt_cuda.h: parameters
                                   and gradients in managed memory; STRATA_ERR_UNSUPPORTED
                                   without CUDA or a GPU). The optimizer runs on
                                   strata.backend, which the CLI's --device sets alike. */
    /* Checkpoints (strata_save / strata_load): */
    int save_every;          /* save after every N-th step (0 = never, the default) into
                                save_dir/step-NNNNNNNN; the trainer's RNG state, step and
                                recent losses go into the checkpoint's "user" object */
    const char *save_dir;    /* parent of the step directories (created); required with
                                save_every; leftover "*.tmp-*" directories of killed saves
                                are removed at start */
    int keep;                /* keep the newest K of this run's step directories (0 = all) */
    bool overwrite;          /* a save_dir holding checkpoints of another run (every run has
                                an identity, stored in its checkpoints and carried on by a
                                resume) is refused unless this is set: then those checkpoints
                                are removed at start */
    const char *resume;      /* a checkpoint directory, or a save_dir (its newest complete
                                step-* checkpoint): continue from it. With the same options
                                every later step is bit-identical to the uninterrupted run. */
    bool save_after_load;    /* with resume: save into save_dir/step-NNNNNNNN right after the
                                load, before any step: the checkpoint as this run's ranks,
                                owners and shard groups hold it (a resharded copy) */
    /* The staleness budget (--staleness auto, --precondition-frequency auto): before
     * the runtime is created, time a few forward+backward passes, add the cost model's
     * optimizer step and plan the freshest sustainable S (and F) on the workers
     * (strata_plan_budget_auto, ceiling 80%); implies async. F is not planned on a
     * resume (the run's schedule); S is (the checkpoint accepts another staleness). */
    bool auto_staleness, auto_frequency;
    /* --staleness-warmup warmup: strata.staleness_warmup is set to the run's resolved
     * learning-rate warm-up (`warmup`) before the runtime is created */
    bool staleness_warmup_is_warmup;
    /* Token files (data.h, gpt_data_load_tokens): data_format GPT_TRAIN_DATA_AUTO (the
     * default) reads token files when data_path is a directory holding train.bin, bytes
     * otherwise; _BYTES and _TOKENS force one. With token files the model's vocabulary
     * (model.vocab, the rows of wte and of the tied head) is vocab_size, or when that is 0
     * the "vocab_size" of data_path/meta.json (make_tokens.py writes it); bytes keep 256
     * (a vocab_size other than 0 or 256 is refused). val_fraction does not apply to token
     * files: val.bin is the validation split. */
    int data_format;
    int vocab_size;
} gpt_train_options;

#define GPT_TRAIN_DATA_AUTO 0
#define GPT_TRAIN_DATA_BYTES 1
#define GPT_TRAIN_DATA_TOKENS 2

/* Per-rank figures of a multi-rank run (gpt_train_result.ranks[r]). */
typedef struct gpt_rank_figures {
    double resident_bytes;     /* param_bytes_peak + optimizer state (device tier) */
    double param_bytes_peak;   /* peak float32 weights resident on the rank: its owned
                                  ones plus the layers it held at once (managed weights,
                                  several ranks with owner sharding), else every weight
                                  (strata_stats.param_bytes_peak) */
    double largest_layer_bytes; /* the largest layer's weights it materializes (not owned) */
    double step_scratch_bytes; /* strata_stats.step_scratch_bytes (in resident_bytes) */
    double owned_param_bytes;  /* weights of the parameters it owns */
    double step_matrix_bytes;  /* matrix bytes moved inside strata_step, per step */
    double intra_node_bytes, inter_node_bytes; /* sent + received, per step */
    double opt_ms_mean;        /* strata_step wall time */
    double owned_params;
    double largest_item_bytes; /* the largest owned parameter's weights + state */
    double max_staleness;      /* largest staleness of this rank's owned blocks (async) */
    double staleness_bound_exceeded; /* coherence: times the bound F-1+S was exceeded */
    double refreshes_computed; /* preconditioner block refreshes this rank ran (whole run) */
    double refreshes_received; /* HSDP: block results shipped to it by another replica */
    double refresh_ship_intra_bytes, refresh_ship_inter_bytes; /* those shipments, sent +
                                  received, per step (part of intra/inter_node_bytes) */
    double bwd_hook_ms;        /* per step: time inside strata_hook_backward (reductions) */
    double grad_wait_ms;       /* per step: time strata_step waited for gradient reductions */
    double grad_bytes_peak;    /* the memory ledger's gradients, all tiers, at their peak
                                  (--shard-gradients: owned + lent layers) */
    double ledger_peak;        /* the memory ledger's total peak on this rank */
    double blocks_on_nvme;     /* its result blocks whose roots live in the nvme tier
                                  (strata_stats.blocks_on_nvme: ranks own different blocks,
                                  so one may spill past --host-budget-mib and another not) */
    double paged_params;       /* its matrices whose state pages to nvme (--page-state) */
} gpt_rank_figures;

#define GPT_MAX_RANKS 64
/* Steps the after-warm-up step-time figures leave out (step_ms_*_warm). */
#define GPT_WARMUP_STEPS 10

/* The run's totals over its ranks (gpt_train_result.totals): counters summed
 * over the `ranks` ranks, byte figures the sum of each rank's, staleness the
 * largest. One rank: its own strata_stats figures. */
typedef struct gpt_run_totals {
    int ranks;                      /* ranks summed: world_size, or 1 (this rank's alone,
                                       e.g. a run that diverged on one rank) */
    int64_t root_refreshes, root_failures; /* strata_stats, summed */
    int64_t root_newton, root_fallbacks;   /* eigh-free roots, and those that fell back */
    int64_t coh_waits, coh_installs, coh_dropped; /* async coherence counters, summed */
    double coh_wait_seconds;        /* the ranks' waits for roots, summed (s) */
    int64_t max_staleness;          /* the largest over the ranks (steps) */
    double device_bytes;            /* optimizer state in the device tier at the end, summed */
    double step_scratch_bytes;      /* the ranks' shared step scratch (in device_bytes), summed */
    double host_bytes_peak, nvme_bytes_peak; /* each rank's peak, summed (bytes) */
    /* the safety valve (--stale-correction), strata_stats.stale_*, summed (the
     * corrected staleness: the largest) */
    int64_t stale_waits_avoided, stale_corrections, stale_refused, stale_refreshes_skipped;
    int64_t stale_max_corrected;
} gpt_run_totals;

typedef struct gpt_train_result {
    int world_size;           /* ranks of the run (1 without MPI) */
    uint64_t weights_hash;    /* FNV-1a 64 over every tensor's float32 bytes after the last
                                 step (identical weights <=> identical hash, in practice) */
    gpt_rank_figures ranks[GPT_MAX_RANKS]; /* rank 0 gets everyone's; first world_size */
    int steps_done;
    double final_train_loss;  /* mean of the last min(10, steps) steps' losses */
    double final_val_loss;    /* validation loss after the last step */
    double unigram_val_loss;  /* cross-entropy of val under the train split's byte frequencies */
    double wall_seconds;      /* the whole training loop, evaluations excluded */
    double step_ms_p50, step_ms_p99, step_ms_max, step_ms_mean; /* whole step: fwd+bwd+opt */
    /* The same after GPT_WARMUP_STEPS (10) warm-up steps (review D6: step 1
     * pays first-use costs, on a GPU lazy module loading, cuBLAS setup, pool
     * growth, page migration): over steps 11.. when there are more than 10,
     * else over all steps. step_spike_warm = max / p50 over those steps. */
    double step_ms_p50_warm, step_ms_p99_warm, step_ms_max_warm, step_spike_warm;
    double opt_ms_p50, opt_ms_max; /* strata_step alone */
    double tokens_per_second;
    double critical_path_seconds;  /* the training thread's time on second-order state
                                      (strata_stats.last_seconds_critical summed over the
                                      recorded steps) */
    double critical_path_fraction; /* ... as a fraction of wall_seconds (the steps' time) */
    strata_stats stats;       /* the runtime's counters at the end (this rank's) */
    strata_memory_ledger ledger; /* this rank's memory ledger at the end (peaks since
                                    the runtime's creation; strata_memory_ledger_get) */
    gpt_run_totals totals;    /* the counters of `stats` the summary reports, over all ranks */
    bool config_refused;      /* the options were refused before anything ran (no data,
                                 no collective): every rank of a job finds the same */
    bool diverged;            /* the run stopped because training diverged (its summary
                                 record says so; the run returns STRATA_ERR_NONFINITE) */
    int interrupted;          /* the signal that stopped the run early (*o->stop), 0 = none */
    int resumed_from;         /* the step of the checkpoint the run resumed from (0 = none) */
    int ckpt_saves;           /* checkpoints written */
    double ckpt_pause_max_s, ckpt_pause_total_s; /* training paused for them (strata_save) */
    double ckpt_bytes;        /* bytes of the last checkpoint (this rank) */
    double ckpt_save_mib_s;   /* the last save's throughput (bytes / its pause) */
    double ckpt_load_s, ckpt_load_mib_s; /* the resume's load (0 without --resume) */
    bool budget_planned;      /* auto_staleness / auto_frequency: the choice below */
    strata_budget_choice budget;
    double budget_loop_s;     /* forward+backward per step measured for it (s) */
    double budget_drift_step_s; /* a warm step's measured time when it drifted more than
                                   1.5x from budget.step_seconds (0: no drift seen) */
    int budget_drift_staleness; /* ... and the S planned for it (S is fixed once the runtime
                                   is committed: apply it by resuming with --staleness) */
} gpt_train_result;

/* Defaults as documented on each field (matrix optimizer: Shampoo with Adam
 * grafting, precondition frequency 10, lr 3e-3; tail AdamW lr: tail_lr -1, the
 * matrix optimizer's default below). */
void gpt_train_options_default(gpt_train_options *o);

/* The example trainer's default peak lr of the AdamW tail for matrix
 * optimizer `opt` (the tail sweep in trainer.c; 3e-3 where the sweep gave
 * no reason to move it, and for an unknown optimizer): what a run with
 * tail_lr < 0 uses. Not the library's default (strata_config_default's
 * adamw.lr). */
float gpt_default_tail_lr(strata_optimizer opt);

/* The checkpoint that `path` names, as --resume reads it: `path` itself when
 * it holds a manifest.json (*picked false), else the newest complete
 * step-NNNNNNNN checkpoint of the save folder `path` (*picked true), into
 * out (n bytes). Errors: STRATA_ERR_IO when `path` is neither; the message
 * starts with `path` and names the step-* checkpoints of its parent folder,
 * if any (a pruned or mistyped step). */
strata_status gpt_checkpoint_resolve(const char *path, char *out, size_t n, bool *picked);

/* Run a training. `out` receives human-readable progress (may be NULL for
 * silence). A run stopped through o->stop returns STRATA_OK with
 * res->interrupted set, its summary printed and written. Errors: STRATA_ERR_INVALID_ARG (a bad option, named),
 * STRATA_ERR_IO / STRATA_ERR_DATA (corpus), STRATA_ERR_NOMEM (the model
 * does not fit `memory_limit`, with the sizes in the message), any status
 * of the runtime (STRATA_ERR_NONFINITE when the loss diverges). */
strata_status gpt_train(const gpt_train_options *o, FILE *out, gpt_train_result *res);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_TRAINER_H */
