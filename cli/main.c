/* The `strata` command: strata train | strata help. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "strata/strata.h"
#include "sweep.h"
#include "trainer.h"

static void usage_main(FILE *f)
{
    fputs("usage: strata <command> [options]\n"
          "\n"
          "commands:\n"
          "  train            train the example byte-level GPT through the strata runtime\n"
          "  sweep-staleness  train at several staleness budgets; table and loss-vs-time plot\n"
          "  help             show this help (or `strata train --help`)\n",
          f);
}

static void usage_train(FILE *f, const gpt_train_options *d)
{
    char kl_init[32] = "auto";
    if (d->strata.kl_shampoo.init_factor >= 0.0f)
        snprintf(kl_init, sizeof kl_init, "%g", (double)d->strata.kl_shampoo.init_factor);
    fprintf(f,
            "usage: strata train [options]\n"
            "\n"
            "Train a byte-level GPT on a text file or directory with a matrix optimizer.\n"
            "Embeddings and 1-D tensors always use AdamW; the 2-D matrices use --optimizer.\n"
            "\n"
            "data and model:\n"
            "  --data PATH                 text file or directory (default %s)\n"
            "  --val-fraction F            validation share of the corpus (default %.2f)\n"
            "  --layers N                  transformer blocks (default %d)\n"
            "  --d-model N                 residual width (default %d)\n"
            "  --heads N                   attention heads (default %d)\n"
            "  --seq-len N                 context in bytes (default %d)\n"
            "  --batch N                   sequences per step (default %d)\n"
            "\n"
            "training:\n"
            "  --optimizer NAME            adamw | shampoo | muon | soap | kl-shampoo (default %s)\n"
            "  --steps N                   optimizer steps (default %d)\n"
            "  --lr X                      peak learning rate of the matrix optimizer\n"
            "                              (default: adamw %g, shampoo %g, muon %g, soap %g,\n"
            "                              kl-shampoo %g)\n"
            "  --adamw-lr X                peak learning rate of the AdamW tail (default %g)\n"
            "  --weight-decay X            decoupled weight decay for matrices (default 0)\n"
            "  --warmup N                  linear warm-up steps (default steps/10)\n"
            "  --min-lr-ratio X            cosine floor, fraction of peak (default %.2f)\n"
            "  --max-grad-norm X           clip the global gradient norm; 0 = off (default %g)\n"
            "  --seed N                    init and sampling seed (default %llu)\n"
            "\n"
            "shampoo:\n"
            "  --precondition-frequency N  steps between inverse-root (shampoo) or eigenbasis\n"
            "                              (soap, kl-shampoo) refreshes (default %d)\n"
            "  --start-preconditioning-step N  first refresh step, 1-based; -1 = frequency\n"
            "                              (default), 0 = 1\n"
            "  --max-preconditioner-dim N  block size (default %d)\n"
            "  --beta2 X                   factor EMA, 1 = sum (default %g)\n"
            "  --epsilon X                 added to factor eigenvalues (default %g)\n"
            "  --grafting adam|adagrad|none  (default adam)\n"
            "  --momentum X                heavy-ball momentum after grafting (default 0)\n"
            "  --stagger-refresh           spread the matrices' root (shampoo) or eigenbasis\n"
            "                              (soap, kl-shampoo) refreshes over the F steps of a\n"
            "                              period (each step ~1/F of the work, no spike)\n"
            "\n"
            "muon:\n"
            "  --muon-momentum X           (default %g)\n"
            "  --muon-scale RULE           shape: sqrt(max(1,m/n)) (default) | adamw:\n"
            "                              0.2*sqrt(max(m,n)) | spectral: sqrt(m/n) | none\n"
            "  --muon-momentum-form sum|ema  B = mu B + G (default) or mu B + (1-mu) G\n"
            "  --ns-schedule quintic|polar-express  Newton-Schulz coefficients (default quintic)\n"
            "  --ns-method standard|gram|auto  Gram Newton-Schulz for wide matrices (default\n"
            "                              standard; auto picks gram by aspect ratio)\n"
            "  --ns-steps N                Newton-Schulz iterations (default %d)\n"
            "kl-shampoo:\n"
            "  --kl-form eigenbasis|exact  the reference code's eigenbasis form (default) or the\n"
            "                              paper's exact factor update\n"
            "  --kl-init-factor X|auto     initial eigenvalue estimate; auto: RMS of the first\n"
            "                              nonzero gradient (default %s)\n"
            "  --kl-beta X                 factor and eigenvalue EMA (default: %g)\n"
            "\n"
            "asynchronous second-order state (shampoo inverse roots, soap and kl-shampoo\n"
            "eigenbases):\n"
            "  --async                     inverse roots / eigenbasis refreshes on CPU worker\n"
            "                              threads (kl-shampoo: eigenbasis form only)\n"
            "  --staleness S               steps a root may lag its due point (default 1);\n"
            "                              staleness stays <= precondition-frequency - 1 + S\n"
            "  --workers K                 worker threads (default: cores - 1)\n"
            "  --install-mode fixed|eager  fixed: reproducible (default); eager: fresher\n"
            "  --tiers LIST                device,host (default) | device,host,nvme (spill to nvme\n"
            "                              past --host-budget-mib) | device,nvme (roots on nvme)\n"
            "  --nvme-dir DIR              nvme tier directory (default runs/nvme)\n"
            "  --host-budget-mib N         host tier budget (default unlimited)\n"
            "  --pin-workers               pin workers to the last cores (hwloc)\n"
            "\n"
            "output:\n"
            "  --eval-every N              steps between validation losses (default %d; 0 = end)\n"
            "  --eval-batches N            batches per validation (default %d)\n"
            "  --metrics FILE              write JSONL metrics (config, per step, summary)\n"
            "  --threads N                 OpenBLAS threads (default: all cores)\n"
            "  --progress / --no-progress  progress bar (default: when stdout is a terminal)\n"
            "  --quiet                     print only the summary\n"
            "  --memory-limit-mib N        refuse models needing more (default: MemAvailable)\n",
            d->data_path, d->val_fraction, d->model.n_layer, d->model.d_model, d->model.n_head,
            d->seq_len, d->batch, strata_optimizer_name(d->strata.matrix_optimizer), d->steps,
            (double)d->strata.adamw.lr, (double)d->strata.shampoo.lr, (double)d->strata.muon.lr,
            (double)d->strata.soap.lr, (double)d->strata.kl_shampoo.lr, (double)d->strata.adamw.lr, (double)d->min_lr_ratio, (double)d->strata.max_grad_norm,
            (unsigned long long)d->seed, d->strata.shampoo.precondition_frequency,
            d->strata.shampoo.max_preconditioner_dim, (double)d->strata.shampoo.beta2,
            (double)d->strata.shampoo.epsilon, (double)d->strata.muon.momentum,
            d->strata.muon.ns_steps, kl_init,
            (double)(d->strata.kl_shampoo.shampoo_beta >= 0 ? d->strata.kl_shampoo.shampoo_beta : d->strata.kl_shampoo.beta2),
            d->eval_every, d->eval_batches);
}

/* Strict number parsing: the whole argument must be a number in range. */
static int parse_int(const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "strata: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_float(const char *flag, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "strata: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi,
                s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

enum {
    OPT_DATA = 256, OPT_VAL_FRACTION, OPT_LAYERS, OPT_DMODEL, OPT_HEADS, OPT_SEQ, OPT_BATCH,
    OPT_OPTIMIZER, OPT_STEPS, OPT_LR, OPT_ADAMW_LR, OPT_WD, OPT_WARMUP, OPT_MIN_LR, OPT_CLIP,
    OPT_SEED, OPT_FREQ, OPT_START, OPT_MAXDIM, OPT_BETA2, OPT_EPS, OPT_GRAFT, OPT_MOMENTUM,
    OPT_MUON_MOM, OPT_MUON_SCALE, OPT_NS, OPT_EVAL_EVERY, OPT_EVAL_BATCHES, OPT_METRICS,
    OPT_THREADS, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_QUIET, OPT_MEMLIMIT, OPT_HELP,
    OPT_ASYNC, OPT_STALENESS, OPT_WORKERS, OPT_INSTALL, OPT_TIERS, OPT_NVME_DIR, OPT_HOST_BUDGET,
    OPT_PIN, OPT_VALUES, OPT_OUT, OPT_KL_FORM, OPT_MUON_FORM, OPT_NS_SCHEDULE, OPT_NS_METHOD,
    OPT_KL_INIT, OPT_KL_BETA, OPT_STAGGER,
};

typedef struct sweep_opts {
    int values[32];
    int n_values;
    const char *out_dir;
} sweep_opts;

/* Parse the training flags (shared by train and sweep-staleness) into *out.
 * Returns 0 to go on, 2 for a usage error (already reported), 100 when help
 * was printed. `sw` is NULL for `train` (then the sweep flags are refused). */
static int parse_train(int argc, char **argv, gpt_train_options *out, sweep_opts *sw)
{
    gpt_train_options o;
    gpt_train_options_default(&o);
    static const struct option longopts[] = {
        {"data", required_argument, 0, OPT_DATA},
        {"val-fraction", required_argument, 0, OPT_VAL_FRACTION},
        {"layers", required_argument, 0, OPT_LAYERS},
        {"d-model", required_argument, 0, OPT_DMODEL},
        {"heads", required_argument, 0, OPT_HEADS},
        {"seq-len", required_argument, 0, OPT_SEQ},
        {"batch", required_argument, 0, OPT_BATCH},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER},
        {"steps", required_argument, 0, OPT_STEPS},
        {"lr", required_argument, 0, OPT_LR},
        {"adamw-lr", required_argument, 0, OPT_ADAMW_LR},
        {"weight-decay", required_argument, 0, OPT_WD},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"min-lr-ratio", required_argument, 0, OPT_MIN_LR},
        {"max-grad-norm", required_argument, 0, OPT_CLIP},
        {"seed", required_argument, 0, OPT_SEED},
        {"precondition-frequency", required_argument, 0, OPT_FREQ},
        {"start-preconditioning-step", required_argument, 0, OPT_START},
        {"max-preconditioner-dim", required_argument, 0, OPT_MAXDIM},
        {"beta2", required_argument, 0, OPT_BETA2},
        {"epsilon", required_argument, 0, OPT_EPS},
        {"grafting", required_argument, 0, OPT_GRAFT},
        {"momentum", required_argument, 0, OPT_MOMENTUM},
        {"muon-momentum", required_argument, 0, OPT_MUON_MOM},
        {"muon-scale", required_argument, 0, OPT_MUON_SCALE},
        {"ns-steps", required_argument, 0, OPT_NS},
        {"eval-every", required_argument, 0, OPT_EVAL_EVERY},
        {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
        {"metrics", required_argument, 0, OPT_METRICS},
        {"threads", required_argument, 0, OPT_THREADS},
        {"progress", no_argument, 0, OPT_PROGRESS},
        {"no-progress", no_argument, 0, OPT_NO_PROGRESS},
        {"quiet", no_argument, 0, OPT_QUIET},
        {"memory-limit-mib", required_argument, 0, OPT_MEMLIMIT},
        {"help", no_argument, 0, OPT_HELP},
        {"async", no_argument, 0, OPT_ASYNC},
        {"staleness", required_argument, 0, OPT_STALENESS},
        {"workers", required_argument, 0, OPT_WORKERS},
        {"install-mode", required_argument, 0, OPT_INSTALL},
        {"tiers", required_argument, 0, OPT_TIERS},
        {"nvme-dir", required_argument, 0, OPT_NVME_DIR},
        {"host-budget-mib", required_argument, 0, OPT_HOST_BUDGET},
        {"pin-workers", no_argument, 0, OPT_PIN},
        {"stagger-refresh", no_argument, 0, OPT_STAGGER},
        {"values", required_argument, 0, OPT_VALUES},
        {"kl-form", required_argument, 0, OPT_KL_FORM},
        {"kl-init-factor", required_argument, 0, OPT_KL_INIT},
        {"kl-beta", required_argument, 0, OPT_KL_BETA},
        {"muon-momentum-form", required_argument, 0, OPT_MUON_FORM},
        {"ns-schedule", required_argument, 0, OPT_NS_SCHEDULE},
        {"ns-method", required_argument, 0, OPT_NS_METHOD},
        {"out", required_argument, 0, OPT_OUT},
        {0, 0, 0, 0},
    };
    float lr = -1.0f, wd = -1.0f, f;
    int v, seq_set = 0, nvme_wanted = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case OPT_DATA: o.data_path = optarg; break;
        case OPT_VAL_FRACTION:
            rc = parse_float("--val-fraction", optarg, 1e-6, 0.999999, &f);
            o.val_fraction = f;
            break;
        case OPT_LAYERS: rc = parse_int("--layers", optarg, 1, 256, &o.model.n_layer); break;
        case OPT_DMODEL: rc = parse_int("--d-model", optarg, 1, 65536, &o.model.d_model); break;
        case OPT_HEADS: rc = parse_int("--heads", optarg, 1, 4096, &o.model.n_head); break;
        case OPT_SEQ: rc = parse_int("--seq-len", optarg, 1, 1 << 20, &o.seq_len); seq_set = 1; break;
        case OPT_BATCH: rc = parse_int("--batch", optarg, 1, 1 << 20, &o.batch); break;
        case OPT_OPTIMIZER:
            if (strata_optimizer_parse(optarg, &o.strata.matrix_optimizer) != STRATA_OK) {
                fprintf(stderr, "strata: %s\n", strata_last_error());
                rc = -1;
            }
            break;
        case OPT_STEPS: rc = parse_int("--steps", optarg, 1, INT_MAX / 2, &o.steps); break;
        case OPT_LR: rc = parse_float("--lr", optarg, 0.0, 100.0, &lr); break;
        case OPT_ADAMW_LR: rc = parse_float("--adamw-lr", optarg, 0.0, 100.0, &o.strata.adamw.lr); break;
        case OPT_WD: rc = parse_float("--weight-decay", optarg, 0.0, 10.0, &wd); break;
        case OPT_WARMUP: rc = parse_int("--warmup", optarg, 0, INT_MAX / 2, &o.warmup); break;
        case OPT_MIN_LR: rc = parse_float("--min-lr-ratio", optarg, 0.0, 1.0, &o.min_lr_ratio); break;
        case OPT_CLIP: rc = parse_float("--max-grad-norm", optarg, 0.0, 1e30, &o.strata.max_grad_norm); break;
        case OPT_SEED: rc = parse_int("--seed", optarg, 0, INT_MAX, &v); o.seed = (uint64_t)v; break;
        case OPT_FREQ:
            rc = parse_int("--precondition-frequency", optarg, 1, INT_MAX / 2,
                           &o.strata.shampoo.precondition_frequency);
            o.strata.soap.precondition_frequency = o.strata.shampoo.precondition_frequency;
            o.strata.kl_shampoo.precondition_frequency = o.strata.shampoo.precondition_frequency;
            break;
        case OPT_START:
            rc = parse_int("--start-preconditioning-step", optarg, -1, INT_MAX / 2,
                           &o.strata.shampoo.start_preconditioning_step);
            break;
        case OPT_MAXDIM:
            rc = parse_int("--max-preconditioner-dim", optarg, 1, 65536,
                           &o.strata.shampoo.max_preconditioner_dim);
            break;
        case OPT_BETA2: rc = parse_float("--beta2", optarg, 1e-6, 1.0, &o.strata.shampoo.beta2); break;
        case OPT_EPS: rc = parse_float("--epsilon", optarg, 0.0, 1e6, &o.strata.shampoo.epsilon); break;
        case OPT_GRAFT:
            if (strcmp(optarg, "adam") == 0)
                o.strata.shampoo.grafting = STRATA_GRAFT_ADAM;
            else if (strcmp(optarg, "adagrad") == 0)
                o.strata.shampoo.grafting = STRATA_GRAFT_ADAGRAD;
            else if (strcmp(optarg, "none") == 0)
                o.strata.shampoo.grafting = STRATA_GRAFT_NONE;
            else {
                fprintf(stderr, "strata: --grafting expects adam, adagrad or none, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_MOMENTUM: rc = parse_float("--momentum", optarg, 0.0, 0.999999, &o.strata.shampoo.momentum); break;
        case OPT_MUON_MOM: rc = parse_float("--muon-momentum", optarg, 0.0, 0.999999, &o.strata.muon.momentum); break;
        case OPT_MUON_SCALE:
            if (strcmp(optarg, "shape") == 0)
                o.strata.muon.scale = STRATA_MUON_SCALE_SHAPE;
            else if (strcmp(optarg, "adamw") == 0)
                o.strata.muon.scale = STRATA_MUON_SCALE_ADAMW_RMS;
            else if (strcmp(optarg, "spectral") == 0)
                o.strata.muon.scale = STRATA_MUON_SCALE_SPECTRAL;
            else if (strcmp(optarg, "none") == 0)
                o.strata.muon.scale = STRATA_MUON_SCALE_NONE;
            else {
                fprintf(stderr, "strata: --muon-scale expects shape, adamw, spectral or none, "
                                "got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_NS: rc = parse_int("--ns-steps", optarg, 0, 100, &o.strata.muon.ns_steps); break;
        case OPT_EVAL_EVERY: rc = parse_int("--eval-every", optarg, 0, INT_MAX, &o.eval_every); break;
        case OPT_EVAL_BATCHES: rc = parse_int("--eval-batches", optarg, 1, 100000, &o.eval_batches); break;
        case OPT_METRICS: o.metrics_path = optarg; break;
        case OPT_THREADS: rc = parse_int("--threads", optarg, 1, 1024, &o.strata.blas_threads); break;
        case OPT_PROGRESS: o.progress = 1; break;
        case OPT_NO_PROGRESS: o.progress = 0; break;
        case OPT_QUIET: o.quiet = true; break;
        case OPT_MEMLIMIT:
            rc = parse_int("--memory-limit-mib", optarg, 1, INT_MAX, &v);
            o.memory_limit = (size_t)v << 20;
            break;
        case OPT_ASYNC: o.strata.async = true; break;
        case OPT_STALENESS: rc = parse_int("--staleness", optarg, 0, 1000000, &o.strata.staleness); break;
        case OPT_WORKERS: rc = parse_int("--workers", optarg, 1, 1024, &o.strata.workers); break;
        case OPT_INSTALL:
            if (strcmp(optarg, "fixed") == 0)
                o.strata.install_mode = STRATA_COH_FIXED;
            else if (strcmp(optarg, "eager") == 0)
                o.strata.install_mode = STRATA_COH_EAGER;
            else {
                fprintf(stderr, "strata: --install-mode expects fixed or eager, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_TIERS:
            if (strcmp(optarg, "device,host") == 0) {
                o.strata.roots_tier = STRATA_TIER_HOST;
                nvme_wanted = 0;
            } else if (strcmp(optarg, "device,host,nvme") == 0) {
                o.strata.roots_tier = STRATA_TIER_HOST;
                nvme_wanted = 1;
            } else if (strcmp(optarg, "device,nvme") == 0) {
                o.strata.roots_tier = STRATA_TIER_NVME;
                nvme_wanted = 1;
            } else {
                fprintf(stderr, "strata: --tiers expects device,host | device,host,nvme | "
                                "device,nvme, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_NVME_DIR: o.strata.nvme_dir = optarg; break;
        case OPT_HOST_BUDGET:
            rc = parse_int("--host-budget-mib", optarg, 1, INT_MAX, &v);
            o.strata.host_budget = (size_t)v << 20;
            break;
        case OPT_PIN: o.strata.pin_workers = true; break;
        case OPT_STAGGER: o.strata.stagger_refresh = true; break;
        case OPT_MUON_FORM:
            if (strcmp(optarg, "sum") == 0)
                o.strata.muon.momentum_form = STRATA_MUON_MOMENTUM_SUM;
            else if (strcmp(optarg, "ema") == 0)
                o.strata.muon.momentum_form = STRATA_MUON_MOMENTUM_EMA;
            else {
                fprintf(stderr, "strata: --muon-momentum-form expects sum or ema, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_NS_SCHEDULE:
            if (strcmp(optarg, "quintic") == 0)
                o.strata.muon.ns_schedule = STRATA_NS_QUINTIC;
            else if (strcmp(optarg, "polar-express") == 0)
                o.strata.muon.ns_schedule = STRATA_NS_POLAR_EXPRESS;
            else {
                fprintf(stderr, "strata: --ns-schedule expects quintic or polar-express, got '%s'\n",
                        optarg);
                rc = -1;
            }
            break;
        case OPT_NS_METHOD:
            if (strcmp(optarg, "auto") == 0)
                o.strata.muon.ns_method = STRATA_NS_AUTO;
            else if (strcmp(optarg, "standard") == 0)
                o.strata.muon.ns_method = STRATA_NS_STANDARD;
            else if (strcmp(optarg, "gram") == 0)
                o.strata.muon.ns_method = STRATA_NS_GRAM;
            else {
                fprintf(stderr, "strata: --ns-method expects auto, standard or gram, got '%s'\n",
                        optarg);
                rc = -1;
            }
            break;
        case OPT_KL_INIT:
            if (strcmp(optarg, "auto") == 0)
                o.strata.kl_shampoo.init_factor = -1.0f;
            else if (parse_float("--kl-init-factor", optarg, 1e-30, 1e30,
                                 &o.strata.kl_shampoo.init_factor) != 0) {
                fprintf(stderr, "strata: --kl-init-factor also accepts 'auto'\n");
                rc = -1;
            }
            break;
        case OPT_KL_BETA:
            rc = parse_float("--kl-beta", optarg, 0.0, 0.999999, &o.strata.kl_shampoo.shampoo_beta);
            break;
        case OPT_KL_FORM:
            if (strcmp(optarg, "eigenbasis") == 0)
                o.strata.kl_shampoo.form = STRATA_KL_EIGENBASIS;
            else if (strcmp(optarg, "exact") == 0)
                o.strata.kl_shampoo.form = STRATA_KL_EXACT;
            else {
                fprintf(stderr, "strata: --kl-form expects eigenbasis or exact, got '%s'\n", optarg);
                rc = -1;
            }
            break;
        case OPT_VALUES:
        case OPT_OUT:
            if (!sw) {
                fprintf(stderr, "strata: --values and --out belong to sweep-staleness\n");
                return 2;
            }
            if (c == OPT_OUT) {
                sw->out_dir = optarg;
                break;
            }
            sw->n_values = 0;
            for (char *tok = optarg, *end; *tok; tok = *end ? end + 1 : end) {
                long val = strtol(tok, &end, 10);
                if (end == tok || (*end && *end != ',') || val < 0 || val > 100000 ||
                    sw->n_values == 32) {
                    fprintf(stderr, "strata: --values expects up to 32 comma-separated "
                                    "staleness budgets >= 0, got '%s'\n", optarg);
                    return 2;
                }
                sw->values[sw->n_values++] = (int)val;
            }
            break;
        case 'h':
        case OPT_HELP: {
            gpt_train_options d;
            gpt_train_options_default(&d);
            if (sw)
                fputs("usage: strata sweep-staleness [--values 0,1,2,5,10] [--out DIR] [train "
                      "options]\n\n"
                      "Train the GPT with synchronous Shampoo (or --optimizer soap) and with the\n"
                      "asynchronous runtime at\n"
                      "each staleness budget S (same model, data, seed and steps), then write\n"
                      "DIR/sweep.tsv (final validation loss, wall time, p50/p99/max step time,\n"
                      "waits), DIR/<run>.jsonl metrics and DIR/loss_vs_time.png (gnuplot).\n"
                      "Defaults: --values 0,1,2,5,10 --out runs/sweep, --steps 300.\n\n",
                      stdout);
            usage_train(stdout, &d);
            return 100;
        }
        default:
            fprintf(stderr, "strata: unknown or incomplete option '%s' (see strata train --help)\n",
                    argv[optind - 1]);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "strata: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (nvme_wanted && !o.strata.nvme_dir)
        o.strata.nvme_dir = "runs/nvme";
    if (!nvme_wanted)
        o.strata.nvme_dir = NULL;
    if (nvme_wanted && mkdir("runs", 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "strata: cannot create runs/: %s\n", strerror(errno));
        return 2;
    }
    if (o.strata.async && o.strata.matrix_optimizer != STRATA_OPTIM_SHAMPOO &&
        o.strata.matrix_optimizer != STRATA_OPTIM_SOAP &&
        !(o.strata.matrix_optimizer == STRATA_OPTIM_KL_SHAMPOO &&
          o.strata.kl_shampoo.form == STRATA_KL_EIGENBASIS))
        fprintf(stderr, "strata: note: --async moves Shampoo's inverse roots and the SOAP and "
                        "KL-Shampoo (eigenbasis form) eigenbases to workers; it has no effect "
                        "with --optimizer %s%s\n",
                strata_optimizer_name(o.strata.matrix_optimizer),
                o.strata.matrix_optimizer == STRATA_OPTIM_KL_SHAMPOO ? " --kl-form exact" : "");
    if (o.strata.async && o.strata.staleness >= o.steps)
        fprintf(stderr, "strata: note: --staleness %d >= --steps %d: no asynchronous root will be "
                        "installed in this run\n",
                o.strata.staleness, o.steps);
    if (o.strata.stagger_refresh && (o.strata.matrix_optimizer == STRATA_OPTIM_MUON ||
                                     o.strata.matrix_optimizer == STRATA_OPTIM_ADAMW))
        fprintf(stderr, "strata: note: --stagger-refresh spreads the inverse-root and eigenbasis "
                        "refreshes of shampoo, soap and kl-shampoo; it has no effect with "
                        "--optimizer %s\n",
                strata_optimizer_name(o.strata.matrix_optimizer));
    if (o.strata.stagger_refresh && o.strata.shampoo.precondition_frequency == 1 &&
        o.strata.matrix_optimizer != STRATA_OPTIM_MUON &&
        o.strata.matrix_optimizer != STRATA_OPTIM_ADAMW)
        fprintf(stderr, "strata: note: --stagger-refresh has nothing to spread with "
                        "--precondition-frequency 1\n");
    if ((o.strata.staleness != 1 || o.strata.workers || nvme_wanted ||
         o.strata.install_mode != STRATA_COH_FIXED) && !o.strata.async)
        fprintf(stderr, "strata: note: --staleness/--workers/--tiers/--install-mode take "
                        "effect with --async\n");
    if (seq_set || o.model.max_seq < o.seq_len)
        o.model.max_seq = o.seq_len;
    if (lr >= 0.0f) {
        o.strata.shampoo.lr = lr;
        o.strata.muon.lr = lr;
        o.strata.soap.lr = lr;
        o.strata.kl_shampoo.lr = lr;
        if (o.strata.matrix_optimizer == STRATA_OPTIM_ADAMW)
            o.strata.adamw.lr = lr;
    }
    if (wd >= 0.0f) {
        o.strata.shampoo.weight_decay = wd;
        o.strata.muon.weight_decay = wd;
        o.strata.soap.weight_decay = wd;
        o.strata.kl_shampoo.weight_decay = wd;
        if (o.strata.matrix_optimizer == STRATA_OPTIM_ADAMW)
            o.strata.adamw.weight_decay = wd;
    }
    *out = o;
    return 0;
}

static int cmd_train(int argc, char **argv)
{
    gpt_train_options o;
    int rc = parse_train(argc, argv, &o, NULL);
    if (rc)
        return rc == 100 ? 0 : rc;
    gpt_train_result r;
    strata_status st = gpt_train(&o, stdout, &r);
    if (st != STRATA_OK) {
        fflush(stdout);
        fprintf(stderr, "strata: %s: %s\n", strata_status_str(st), strata_last_error());
        return 1;
    }
    return 0;
}

static int cmd_sweep(int argc, char **argv)
{
    gpt_train_options o;
    sweep_opts sw = {.values = {0, 1, 2, 5, 10}, .n_values = 5, .out_dir = "runs/sweep"};
    int rc = parse_train(argc, argv, &o, &sw);
    if (rc)
        return rc == 100 ? 0 : rc;
    if (o.strata.matrix_optimizer != STRATA_OPTIM_SHAMPOO &&
        o.strata.matrix_optimizer != STRATA_OPTIM_SOAP &&
        !(o.strata.matrix_optimizer == STRATA_OPTIM_KL_SHAMPOO &&
          o.strata.kl_shampoo.form == STRATA_KL_EIGENBASIS)) {
        fprintf(stderr, "strata sweep-staleness: the staleness budget applies to shampoo, soap and "
                        "kl-shampoo (eigenbasis form), not --optimizer %s%s\n",
                strata_optimizer_name(o.strata.matrix_optimizer),
                o.strata.matrix_optimizer == STRATA_OPTIM_KL_SHAMPOO ? " --kl-form exact" : "");
        return 2;
    }
    if (o.strata.async)
        fprintf(stderr, "strata sweep-staleness: note: each run sets --async and --staleness "
                        "itself\n");
    strata_sweep_options so = {.train = o, .values = sw.values, .n_values = sw.n_values,
                               .out_dir = sw.out_dir};
    strata_status st = strata_sweep_staleness(&so, stdout);
    if (st != STRATA_OK) {
        fflush(stdout);
        fprintf(stderr, "strata sweep-staleness: %s: %s\n", strata_status_str(st),
                strata_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage_main(stderr);
        return 2;
    }
    if (strcmp(argv[1], "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "sweep-staleness") == 0)
        return cmd_sweep(argc - 1, argv + 1);
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage_main(stdout);
        return 0;
    }
    fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage_main(stderr);
    return 2;
}
