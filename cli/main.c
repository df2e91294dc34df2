/* The `strata` command: strata train | sweep-staleness | race | ckpt | help.
 *
 * train's flags, which sweep-staleness and race share, are described once, in
 * train_flag_rows: each flag's name, its argument and where the value goes, the
 * range or names it accepts, its --help group and text. A flag that sets a
 * strata_config field names the field's row of the config schema
 * (runtime/config_schema.h, CFG): the flag's name and the field's offset and
 * kind come from there, as the checkpoint's and the JSONL record's do. parse_train (strict:
 * a malformed or unknown flag is an error naming it, exit status 2) and
 * print_train_help (defaults printed from gpt_train_options_default) both
 * walk that table; the notes about flags that have no effect together are
 * checked after it, with gpt_optimizer_refresh_info deciding what an
 * optimizer refreshes, whether --async moves that work and whether
 * --stagger-refresh spreads it.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blas_core.h"
#include "settings.h"
#include "strata/strata.h"
#include "race.h"
#include "runtime/config_schema.h"
#include "sweep.h"
#include "trainer.h"

#include <json-c/json.h>

#define NVME_DIR_DEFAULT "runs/nvme"
#define SWEEP_MAX_VALUES 32

static void usage_main(FILE *f)
{
    fputs("usage: strata <command> [options]\n"
          "\n"
          "commands:\n"
          "  train            train the example byte-level GPT through the strata runtime\n"
          "  sweep-staleness  train at several staleness budgets; table, loss-vs-time plot\n"
          "  race             train with several optimizers; time to AdamW's loss, a plot\n"
          "  plan             per-rank memory by tier and kind, owner plan and refresh cost\n"
          "                   of a model (the GPT's flags or --shapes FILE) on N ranks,\n"
          "                   without running it\n"
          "  ckpt             inspect or verify a checkpoint: ckpt inspect|verify DIR\n"
          "  help [COMMAND]   show this help, or COMMAND's (as `strata COMMAND --help`)\n"
          "  --version        print the library's version\n",
          f);
}

/* The commands that parse the train flags. */
typedef enum train_cmd { CMD_TRAIN, CMD_SWEEP, CMD_RACE, CMD_PLAN } train_cmd;

/* The subcommand's word on the command line. */
static const char *cmd_word(train_cmd c)
{
    return c == CMD_SWEEP ? "sweep-staleness" : c == CMD_RACE ? "race"
           : c == CMD_PLAN ? "plan" : "train";
}

/* What the train flags fill in: the training options, plus the flags that
 * fan out to several options after parsing, plus sweep-staleness's and
 * race's own. */
typedef struct train_args {
    gpt_train_options o;
    float lr, wd;        /* --lr, --weight-decay for every matrix optimizer; < 0: each its own */
    bool nvme_wanted;    /* --tiers names the nvme tier */
    train_cmd cmd;       /* the command parsing: its own flags are allowed */
    int values[SWEEP_MAX_VALUES]; /* sweep-staleness --values, race --staleness: budgets */
    int n_values;
    const char *out_dir; /* sweep-staleness, race: output directory */
    const char *runs;    /* race: the run list (NULL: race.h's default) */
    bool deterministic;  /* --deterministic (the default) */
    int nondeterministic; /* --no-deterministic */
    /* plan only */
    const char *shapes;  /* --shapes FILE: a JSON parameter list instead of the GPT's */
    int world;           /* --world N */
    int ranks_per_node;  /* --ranks-per-node N */
    double step_ms;      /* --step-ms T: the step time the workers must keep ahead of */
    int plan_workers;    /* --plan-workers W: refresh workers per rank (0: the runtime's rule) */
    double memory_gib;   /* --memory-gib M: one rank's memory to check the plan against */
    size_t activation_bytes; /* --activation-mib N (shape files; the GPT's are computed) */
    bool json;           /* --json: one JSON object instead of the text */
    bool given[128];     /* given[i]: train_flag_rows[i] was on the command line */
} train_args;

static void train_args_default(train_args *a, train_cmd cmd)
{
    memset(a, 0, sizeof *a);
    gpt_train_options_default(&a->o);
    a->lr = -1.0f;
    a->wd = -1.0f;
    a->cmd = cmd;
    static const int values[] = {0, 1, 2, 5, 10};
    a->n_values = (int)(sizeof values / sizeof values[0]);
    memcpy(a->values, values, sizeof values);
    a->out_dir = "runs/sweep";
    a->world = 1;
    a->ranks_per_node = 0; /* 0: the world on one node */
    if (cmd == CMD_RACE) {
        /* One async run at the default budget; validation often enough to
         * time when each run reaches AdamW's final loss. */
        a->values[0] = a->o.strata.staleness;
        a->n_values = 1;
        a->out_dir = "runs/race";
        a->o.eval_every = 10;
    }
}

/* ---- the flag table */

typedef enum flag_type {
    FT_TRUE,      /* no argument: the bool at off becomes true */
    FT_SET,       /* no argument: the int at off becomes `value` */
    FT_HELP,      /* no argument: print --help */
    FT_INT,       /* int in [lo, hi] */
    FT_U64,       /* uint64_t, given as an int in [lo, hi] */
    FT_MIB,       /* size_t bytes, given in MiB as an int in [lo, hi] */
    FT_KIB,       /* size_t bytes, given in KiB as an int in [lo, hi] */
    FT_FLOAT,     /* float in [lo, hi] */
    FT_DOUBLE,    /* double, given as a float in [lo, hi] */
    FT_STRING,    /* const char *, the argument itself */
    FT_NAME,      /* an enum, spelled as one of `names` */
    FT_OPTIMIZER, /* strata_optimizer, by strata_optimizer_parse */
    FT_CUSTOM,    /* parsed and stored by `set` */
} flag_type;

typedef struct train_flag train_flag;
struct train_flag {
    const char *name;  /* without the leading "--" */
    flag_type type;
    size_t off;        /* into train_args */
    double lo, hi;     /* accepted range (numbers) */
    const gpt_enum_name *names; /* FT_NAME: NULL for a CFG row, whose schema row spells it */
    int value;         /* FT_SET */
    int (*set)(train_args *a, const train_flag *f, const char *arg); /* FT_CUSTOM: 0 or -1
                                                                         (reported) */
    void (*then)(train_args *a);  /* after a successful parse: fan the value out */
    unsigned only;     /* 0: every command; else the commands (1u << CMD_*) it belongs to */
    /* --help */
    const char *group; /* heading; NULL: not listed */
    const char *arg;   /* metavar; NULL: none (FT_NAME: the names joined by '|') */
    const char *left;  /* the whole left column instead of "--name arg" */
    const char *help;  /* '\n' continues the text on the next line; "{}" is the default */
    void (*dflt)(const train_args *d, char *buf, size_t n); /* the default, when not
                                                                 derived from type and off */
    const char *dfmt;  /* printf format of a derived numeric default; NULL: "%d" / "%g" */
    int field;         /* 1 + the config schema row (runtime/config_schema.h) of the
                          strata_config field the flag sets (CFG): the name and the offset
                          come from there; 0: a trainer flag (name and off above) */
    /* When the flag has an effect (no_effect_notes: a flag given where it has
     * none is said once, in a note; README, "exit status": it is neither
     * malformed, exit 2, nor a contradiction, exit 1) */
    unsigned opts;     /* the matrix optimizers (OPT_*) whose configuration it sets; 0: any */
    unsigned needs;    /* NEEDS_*: the mode it takes effect in */
};

/* The optimizers a flag configures (train_flag.opts). */
#define OPT(k) (1u << STRATA_OPTIM_##k)
#define OPT_REFRESH (OPT(SHAMPOO) | OPT(SOAP) | OPT(KL_SHAMPOO))
#define OPT_NS (OPT(MUON) | OPT(NORMUON) | OPT(DION2))
/* The mode a flag takes effect in (train_flag.needs). */
enum {
    NEEDS_ASYNC = 1u << 0, /* --async (and an optimizer whose refreshes it moves) */
    NEEDS_NVME = 1u << 1,  /* --tiers naming the nvme tier */
    NEEDS_RANKS = 1u << 2, /* more than one rank */
    NEEDS_LINES = 1u << 3, /* per-step output: not --quiet */
    NEEDS_SAVE = 1u << 4,  /* a checkpoint is written: --save-every or --save-after-load */
    NEEDS_RUN = 1u << 5,   /* a training run: train, sweep-staleness, race, not plan */
    NEEDS_GPT = 1u << 6,   /* the GPT's shape: not plan's --shapes */
    NEEDS_DIR = 1u << 8,   /* --data names a directory (a missing path is said later) */
    NEEDS_ONE = 1u << 7,   /* one run: train (sweep-staleness's and race's runs are quiet and
                              each writes DIR/<run>.jsonl) */
};
/* Flags of one training run (checkpoints): refused by sweep-staleness and
 * race, whose runs would all write (or read) the same checkpoints. */
#define ONLY_ONE_RUN (1u << CMD_TRAIN | 1u << CMD_PLAN)

#define OFF(member) offsetof(train_args, member)
/* A flag that sets strata_config field `id`: its name is the schema row's cli
 * column, its offset the field's inside train_args.o.strata. */
#define CFG(id) .field = 1 + STRATA_CFG_ID(id)
STRATA_CFG_TABLE(schema);

static int parse_int(const char *flag, const char *s, long lo, long hi, int *out);
static int parse_float(const char *flag, const char *s, double lo, double hi, float *out);

static int set_tiers(train_args *a, const train_flag *f, const char *arg)
{
    if (strcmp(arg, "device,host") == 0) {
        a->o.strata.roots_tier = STRATA_TIER_HOST;
        a->nvme_wanted = false;
    } else if (strcmp(arg, "device,host,nvme") == 0) {
        a->o.strata.roots_tier = STRATA_TIER_HOST;
        a->nvme_wanted = true;
    } else if (strcmp(arg, "device,nvme") == 0) {
        a->o.strata.roots_tier = STRATA_TIER_NVME;
        a->nvme_wanted = true;
    } else {
        fprintf(stderr, "strata: --%s expects device,host | device,host,nvme | device,nvme, "
                        "got '%s'\n", f->name, arg);
        return -1;
    }
    return 0;
}

/* --device: the model's forward/backward and the optimizer's backend alike. */
static int set_device(train_args *a, const train_flag *f, const char *arg)
{
    strata_backend_kind k;
    if (strata_backend_kind_parse(arg, &k) != STRATA_OK) {
        fprintf(stderr, "strata: --%s expects cpu or cuda, got '%s'\n", f->name, arg);
        return -1;
    }
    a->o.device = k;
    a->o.strata.backend = k;
    return 0;
}

static void dflt_device(const train_args *d, char *buf, size_t n)
{
    snprintf(buf, n, "%s", strata_backend_kind_name(d->o.device));
}

static int set_kl_init(train_args *a, const train_flag *f, const char *arg)
{
    if (strcmp(arg, "auto") == 0) {
        a->o.strata.kl_shampoo.init_factor = -1.0f;
        return 0;
    }
    if (parse_float("--kl-init-factor", arg, f->lo, f->hi, &a->o.strata.kl_shampoo.init_factor)) {
        fprintf(stderr, "strata: --kl-init-factor also accepts 'auto'\n");
        return -1;
    }
    return 0;
}

static int set_kl_bias(train_args *a, const train_flag *f, const char *arg)
{
    (void)f;
    const bool on = strcmp(arg, "on") == 0;
    if (!on && strcmp(arg, "off") != 0) {
        fprintf(stderr, "strata: --kl-bias-correction expects on or off, got '%s'\n", arg);
        return -1;
    }
    a->o.strata.kl_shampoo.bias_correction = on;
    return 0;
}

static int set_values(train_args *a, const train_flag *f, const char *arg)
{
    a->n_values = 0;
    for (const char *tok = arg; *tok;) {
        char *end;
        long val = strtol(tok, &end, 10);
        if (end == tok || (*end && *end != ',') || val < (long)f->lo || val > (long)f->hi ||
            a->n_values == SWEEP_MAX_VALUES) {
            fprintf(stderr, "strata: --%s expects up to %d comma-separated staleness "
                            "budgets >= 0, got '%s'\n", f->name, SWEEP_MAX_VALUES, arg);
            return -1;
        }
        a->values[a->n_values++] = (int)val;
        tok = *end ? end + 1 : end;
    }
    return 0;
}

/* --staleness: one budget for train and sweep-staleness, a list for race. */
static int set_staleness(train_args *a, const train_flag *f, const char *arg)
{
    if (a->cmd == CMD_RACE)
        return set_values(a, f, arg);
    a->o.auto_staleness = a->cmd == CMD_TRAIN && strcmp(arg, "auto") == 0;
    if (a->o.auto_staleness)
        return 0;
    if (parse_int("--staleness", arg, (long)f->lo, (long)f->hi, &a->o.strata.staleness)) {
        if (a->cmd == CMD_TRAIN)
            fprintf(stderr, "strata: --staleness also accepts 'auto' (train)\n");
        return -1;
    }
    return 0;
}

/* --precondition-frequency: N, or auto (train: planned with the staleness). */
static int set_frequency(train_args *a, const train_flag *f, const char *arg)
{
    a->o.auto_frequency = a->cmd == CMD_TRAIN && strcmp(arg, "auto") == 0;
    if (a->o.auto_frequency)
        return 0;
    if (parse_int("--precondition-frequency", arg, (long)f->lo, (long)f->hi,
                  &a->o.strata.precondition_frequency)) {
        if (a->cmd == CMD_TRAIN)
            fprintf(stderr, "strata: --precondition-frequency also accepts 'auto' (train)\n");
        return -1;
    }
    return 0;
}

static void dflt_frequency(const train_args *d, char *buf, size_t n)
{
    snprintf(buf, n, "%d", d->o.strata.precondition_frequency);
}

static void dflt_staleness(const train_args *d, char *buf, size_t n)
{
    snprintf(buf, n, "%d", d->o.strata.staleness);
}

/* --staleness-warmup N, or warmup (the run's learning-rate warm-up, resolved by
 * the trainer: each race or sweep run its own). */
static int set_staleness_warmup(train_args *a, const train_flag *f, const char *arg)
{
    a->o.staleness_warmup_is_warmup = strcmp(arg, "warmup") == 0;
    if (a->o.staleness_warmup_is_warmup)
        return 0;
    if (parse_int("--staleness-warmup", arg, (long)f->lo, (long)f->hi,
                  &a->o.strata.staleness_warmup)) {
        fprintf(stderr, "strata: --staleness-warmup also accepts 'warmup' (the run's "
                        "learning-rate warm-up)\n");
        return -1;
    }
    return 0;
}

/* --ns-steps, --ns-schedule, --ns-method, --ns-dtype set Muon's fields (their schema
 * rows) and the same fields of every Newton-Schulz family: NorMuon and
 * Dion2 (each family's default stays its own when the flag is absent). */
static void fan_ns_steps(train_args *a)
{
    strata_config *c = &a->o.strata;
    c->normuon.ns_steps = c->dion2.ns_steps = c->muon.ns_steps;
}

static void fan_ns_schedule(train_args *a)
{
    strata_config *c = &a->o.strata;
    c->normuon.ns_schedule = c->dion2.ns_schedule = c->muon.ns_schedule;
}

static void fan_ns_method(train_args *a)
{
    strata_config *c = &a->o.strata;
    c->normuon.ns_method = c->dion2.ns_method = c->muon.ns_method;
}

static void fan_ns_dtype(train_args *a)
{
    strata_config *c = &a->o.strata;
    c->normuon.ns_dtype = c->dion2.ns_dtype = c->muon.ns_dtype;
}

static void dflt_ns_schedule(const train_args *d, char *buf, size_t n)
{
    const strata_config *c = &d->o.strata;
    snprintf(buf, n, "muon and normuon %s,\ndion2 %s",
             gpt_enum_name_of(strata_cfg_names_ns_schedule, (int)c->muon.ns_schedule, "?"),
             gpt_enum_name_of(strata_cfg_names_ns_schedule, (int)c->dion2.ns_schedule, "?"));
}

static void dflt_lr(const train_args *d, char *buf, size_t n)
{
    const strata_config *c = &d->o.strata;
    snprintf(buf, n, "adamw %g, shampoo %g, muon %g, soap %g,\nkl-shampoo %g, normuon %g, dion2 %g",
             (double)c->adamw.lr, (double)c->shampoo.lr, (double)c->muon.lr, (double)c->soap.lr,
             (double)c->kl_shampoo.lr, (double)c->normuon.lr, (double)c->dion2.lr);
}

/* The trainer's default tail lr per matrix optimizer (gpt_default_tail_lr):
 * those other than AdamW's, then "the others", then AdamW's rule. */
static void dflt_tail_lr(const train_args *d, char *buf, size_t n)
{
    (void)d;
    const float base = gpt_default_tail_lr(STRATA_OPTIM_ADAMW);
    size_t used = 0;
    for (int k = 0; k < 32 && used < n; k++) {
        const char *name = strata_optimizer_name((strata_optimizer)k);
        if (strcmp(name, "unknown") == 0)
            break;
        const float v = gpt_default_tail_lr((strata_optimizer)k);
        if (v != base)
            used += (size_t)snprintf(buf + used, n - used, "%s %g, ", name, (double)v);
    }
    if (used < n) /* AdamW's own run: its tail follows its --lr (resolve_tail_lr) */
        snprintf(buf + used, n - used, "%s%g; adamw: its matrices' lr", used ? "the others " : "",
                 (double)base);
}

static void dflt_weight_decay(const train_args *d, char *buf, size_t n)
{
    snprintf(buf, n, "%g", (double)d->o.strata.shampoo.weight_decay);
}

static void dflt_kl_bias(const train_args *d, char *buf, size_t n)
{
    snprintf(buf, n, "%s", d->o.strata.kl_shampoo.bias_correction ? "on" : "off");
}

static void dflt_kl_init(const train_args *d, char *buf, size_t n)
{
    const float v = d->o.strata.kl_shampoo.init_factor;
    if (v < 0.0f)
        snprintf(buf, n, "auto");
    else
        snprintf(buf, n, "%g", (double)v);
}

static void dflt_kl_beta(const train_args *d, char *buf, size_t n)
{
    const strata_kl_shampoo_config *k = &d->o.strata.kl_shampoo;
    snprintf(buf, n, "%g", (double)(k->shampoo_beta >= 0 ? k->shampoo_beta : k->beta2));
}

static const char G_DATA[] = "data and model";
static const char G_TRAIN[] = "training";
static const char G_SHAMPOO[] = "shampoo";
static const char G_MUON[] = "muon";
static const char G_KL[] = "kl-shampoo";
static const char G_DION2[] = "dion2";
static const char G_ASYNC[] = "asynchronous second-order state (shampoo inverse roots, soap and "
                              "kl-shampoo\neigenbases)";
static const char G_RANKS[] = "ranks (mpirun -np N build/cli/strata train ...)";
static const char G_OUTPUT[] = "output";
static const char G_CKPT[] = "checkpoints (strata ckpt inspect|verify DIR)";

/* Every flag of train and sweep-staleness, in --help order. */
static const train_flag train_flag_rows[] = {
    {.name = "data", .type = FT_STRING, .off = OFF(o.data_path), .group = G_DATA, .arg = "PATH",
     .help = "text file or directory, or a directory of\ntoken files (default {})",
     .needs = NEEDS_RUN},
    {.name = "data-format", .type = FT_NAME, .off = OFF(o.data_format),
     .names = gpt_data_format_names, .group = G_DATA,
     .help = "auto: token files when --data is a directory\nholding train.bin (and val.bin: "
             "little-endian\nuint16 ids, examples/torch/make_tokens.py),\nelse bytes "
             "(default {})", .needs = NEEDS_RUN},
    {.name = "vocab-size", .type = FT_INT, .off = OFF(o.vocab_size), .lo = 2, .hi = 65536,
     .group = G_DATA, .arg = "V",
     .help = "token files' vocabulary: the rows of the\nembedding and the head (default: "
             "meta.json's\nvocab_size; bytes: 256)", .needs = NEEDS_GPT},
    {.name = "data-recursive", .type = FT_TRUE, .off = OFF(o.data_recursive), .group = G_DATA,
     .help = "read a --data directory's subdirectories too (a\nHugging Face cache: symlinks "
             "are followed, a file\nreached twice is read once)", .needs = NEEDS_RUN | NEEDS_DIR},
    {.name = "val-fraction", .type = FT_DOUBLE, .off = OFF(o.val_fraction), .lo = 1e-6,
     .hi = 0.999999, .group = G_DATA, .arg = "F", .dfmt = "%.2f",
     .help = "validation share of the corpus (default {})", .needs = NEEDS_RUN},
    {.name = "layers", .type = FT_INT, .off = OFF(o.model.n_layer), .lo = 1, .hi = 256,
     .group = G_DATA, .arg = "N", .help = "transformer blocks (default {})", .needs = NEEDS_GPT},
    {.name = "d-model", .type = FT_INT, .off = OFF(o.model.d_model), .lo = 1, .hi = 65536,
     .group = G_DATA, .arg = "N", .help = "residual width (default {})", .needs = NEEDS_GPT},
    {.name = "heads", .type = FT_INT, .off = OFF(o.model.n_head), .lo = 1, .hi = 4096,
     .group = G_DATA, .arg = "N", .help = "attention heads (default {})", .needs = NEEDS_GPT},
    {.name = "seq-len", .type = FT_INT, .off = OFF(o.seq_len), .lo = 1, .hi = 1 << 20,
     .group = G_DATA, .arg = "N", .help = "context in tokens (bytes) (default {})",
     .needs = NEEDS_GPT},
    {.name = "batch", .type = FT_INT, .off = OFF(o.batch), .lo = 1, .hi = 1 << 20,
     .group = G_DATA, .arg = "N", .help = "sequences per step (default {})", .needs = NEEDS_GPT},

    {CFG(matrix_optimizer), .type = FT_OPTIMIZER,
     .group = G_TRAIN, .arg = "NAME",
     .help = "adamw | shampoo | muon | soap | kl-shampoo | normuon |\ndion2 (default {})"},
    {.name = "steps", .type = FT_INT, .off = OFF(o.steps), .lo = 1, .hi = INT_MAX / 2,
     .group = G_TRAIN, .arg = "N", .help = "optimizer steps (default {})", .needs = NEEDS_RUN},
    {.name = "lr", .type = FT_FLOAT, .off = OFF(lr), .lo = 0.0, .hi = 100.0, .group = G_TRAIN,
     .arg = "X", .dflt = dflt_lr,
     .help = "peak learning rate of the matrix optimizer\n(default: {})", .needs = NEEDS_RUN},
    {CFG(adamw_lr), .type = FT_FLOAT, .lo = 0.0, .hi = 100.0,
     .group = G_TRAIN, .arg = "X", .dflt = dflt_tail_lr,
     .help = "peak learning rate of the AdamW tail (embeddings,\n1-D tensors), --optimizer "
             "adamw's too (--lr: its\nmatrices') (default: {})",
     .needs = NEEDS_RUN},
    {.name = "weight-decay", .type = FT_FLOAT, .off = OFF(wd), .lo = 0.0, .hi = 10.0,
     .group = G_TRAIN, .arg = "X", .dflt = dflt_weight_decay,
     .help = "decoupled weight decay for matrices (default {})", .needs = NEEDS_RUN},
    {.name = "warmup", .type = FT_INT, .off = OFF(o.warmup), .lo = 0, .hi = INT_MAX / 2,
     .group = G_TRAIN, .arg = "N",
     .help = "linear warm-up steps (default max(steps/10,\nmin(H, max(steps, 20))), H the "
             "slowest\nsecond-moment horizon 1/(1-beta) in use: 20\n(AdamW's 0.95), 50 for "
             "kl-shampoo (0.98); a\nrun under 20 steps ends before its peak)", .needs = NEEDS_RUN},
    {.name = "min-lr-ratio", .type = FT_FLOAT, .off = OFF(o.min_lr_ratio), .lo = 0.0, .hi = 1.0,
     .group = G_TRAIN, .arg = "X", .dfmt = "%.2f",
     .help = "cosine floor, fraction of peak (default {})", .needs = NEEDS_RUN},
    {CFG(max_grad_norm), .type = FT_FLOAT, .lo = 0.0,
     .hi = 1e30, .group = G_TRAIN, .arg = "X",
     .help = "clip the global gradient norm; 0 = off (default {})", .needs = NEEDS_RUN},
    {CFG(backend), .type = FT_CUSTOM, .set = set_device, .group = G_TRAIN, .arg = "cpu|cuda",
     .dflt = dflt_device,
     .help = "where the model and the optimizer run; cuda: the GPU\nmodel and the CUDA backend "
             "(default {})"},
    {.name = "seed", .type = FT_U64, .off = OFF(o.seed), .lo = 0, .hi = INT_MAX,
     .group = G_TRAIN, .arg = "N", .help = "init and sampling seed (default {})",
     .needs = NEEDS_RUN},

    {CFG(precondition_frequency), .type = FT_CUSTOM, .set = set_frequency, .lo = 1,
     .hi = INT_MAX / 2, .dflt = dflt_frequency, .group = G_SHAMPOO, .arg = "N|auto",
     .help = "steps between inverse-root (shampoo) or eigenbasis\n(soap, kl-shampoo) refreshes "
             "(default {}); auto (train): the\nsmallest the workers sustain, with --staleness",
     .opts = OPT_REFRESH},
    {CFG(shampoo_start_preconditioning_step), .type = FT_INT, .lo = -1, .hi = INT_MAX / 2,
     .group = G_SHAMPOO, .arg = "N",
     .help = "first refresh step, 1-based; -1 = frequency\n(default), 0 = 1", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_max_preconditioner_dim), .type = FT_INT, .lo = 1, .hi = 65536,
     .group = G_SHAMPOO, .arg = "N", .help = "block size (default {})", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_beta2), .type = FT_FLOAT, .lo = 1e-6, .hi = 1.0,
     .group = G_SHAMPOO, .arg = "X", .help = "factor EMA, 1 = sum (default {})",
     .opts = OPT(SHAMPOO)},
    {CFG(shampoo_epsilon), .type = FT_FLOAT, .lo = 0.0,
     .hi = 1e6, .group = G_SHAMPOO, .arg = "X",
     .help = "added to factor eigenvalues (default {})", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_epsilon_rel), .type = FT_FLOAT, .lo = 0.0, .hi = 1.0, .group = G_SHAMPOO,
     .arg = "X",
     .help = "relative regularizer: eps_eff = max(epsilon, X lambda_max)\n(default {}); "
             "--root-method newton-f32 needs about 1e-5\n(float32 roots of factors of "
             "condition above ~1e6 fall back)", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_grafting), .type = FT_NAME,
     .group = G_SHAMPOO, .help = "(default {})", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_root_method), .type = FT_NAME, .group = G_SHAMPOO,
     .help = "inverse roots: eigh, newton (eigh-free, eigh fallback counted), auto or "
             "warm-qr (one QR step from the last eigenbasis, eigh fallback counted) or\n"
             "newton-f32 (Newton in float32 on the backend: the GPU with\n--device cuda; "
             "eigh fallback counted) or warm-qr-f32 (warm-qr in float32,\nssyevd fallback "
             "counted) (default {})", .opts = OPT(SHAMPOO)},
    {CFG(shampoo_warm_qr_tolerance), .type = FT_FLOAT, .lo = 0.0, .hi = 1.0,
     .group = G_SHAMPOO, .arg = "X",
     .help = "--root-method warm-qr, warm-qr-f32: the last eigenbasis Q is refined while "
             "||Q^T A Q - diag||_F <= X ||Q^T A Q||_F, else eigh (default {})",
     .opts = OPT(SHAMPOO)},
    {CFG(state_dtype_factors), .type = FT_NAME, .group = G_SHAMPOO,
     .help = "storage of the factors: f32 or bf16 (round to nearest\neven, widened when "
             "read; shampoo (--beta2 <= 0.996) and soap)\n(default {})"},
    {CFG(state_dtype_roots), .type = FT_NAME, .group = G_SHAMPOO, .help = "storage of the inverse roots: f32 or bf16 (shampoo)\n(default {})"},
    {CFG(state_dtype_moments), .type = FT_NAME, .group = G_SHAMPOO, .help = "storage of the moments: f32 (bf16: no family yet)\n(default {})"},
    {CFG(shampoo_momentum), .type = FT_FLOAT, .lo = 0.0,
     .hi = 0.999999, .group = G_SHAMPOO, .arg = "X",
     .help = "heavy-ball momentum after grafting (default {})", .opts = OPT(SHAMPOO)},
    {CFG(stagger_refresh), .type = FT_TRUE,
     .group = G_SHAMPOO,
     .help = "spread the matrices' root (shampoo) or eigenbasis\n(soap, kl-shampoo) refreshes "
             "over the F steps of a\nperiod (each step ~1/F of the work, no spike)"},

    {CFG(muon_momentum), .type = FT_FLOAT, .lo = 0.0,
     .hi = 0.999999, .group = G_MUON, .arg = "X", .help = "(default {})", .opts = OPT(MUON)},
    {CFG(muon_scale), .type = FT_NAME,
     .group = G_MUON, .arg = "RULE",
     .help = "shape: sqrt(max(1,m/n)) (default) | adamw:\n0.2*sqrt(max(m,n)) | spectral: "
             "sqrt(m/n) | none", .opts = OPT(MUON)},
    {CFG(muon_momentum_form), .type = FT_NAME,
     .group = G_MUON,
     .help = "B = mu B + G (default) or mu B + (1-mu) G", .opts = OPT(MUON)},
    {CFG(muon_ns_schedule), .type = FT_NAME,
     .group = G_MUON, .then = fan_ns_schedule,
     .dflt = dflt_ns_schedule,
     .help = "Newton-Schulz coefficients of muon, normuon and\ndion2 (default {})", .opts = OPT_NS},
    {CFG(muon_ns_method), .type = FT_NAME, .then = fan_ns_method,
     .group = G_MUON, .arg = "standard|gram|auto",
     .help = "Gram Newton-Schulz for wide matrices, muon, normuon\nand dion2 (default {}; auto "
             "picks gram by aspect\nratio)", .opts = OPT_NS},
    {CFG(muon_ns_dtype), .type = FT_NAME, .then = fan_ns_dtype,
     .group = G_MUON, .arg = "f32|bf16",
     .help = "Newton-Schulz products of muon, normuon and dion2:\nbf16 rounds their operands "
             "to bfloat16, float32\nsums (the reference codes' precision; default {})",
     .opts = OPT_NS},
    {CFG(muon_ns_steps), .type = FT_INT, .lo = 0, .hi = 100, .then = fan_ns_steps,
     .group = G_MUON, .arg = "N",
     .help = "Newton-Schulz iterations of muon, normuon and dion2\n(default {})", .opts = OPT_NS},

    {CFG(dion2_fraction), .type = FT_FLOAT, .lo = 1e-6, .hi = 1.0, .group = G_DION2, .arg = "X",
     .help = "share of the rows (or columns: the shorter side)\northonormalized each step "
             "(default {})", .opts = OPT(DION2)},
    {CFG(dion2_ef_decay), .type = FT_FLOAT, .lo = 0.0, .hi = 1.0, .group = G_DION2, .arg = "X",
     .help = "error-feedback decay of the selected slices (default {})", .opts = OPT(DION2)},
    {CFG(dion2_adjust_lr), .type = FT_NAME, .group = G_DION2, .arg = "RULE",
     .help = "spectral-norm: sqrt(m/n) (default) | rms-norm:\n0.2*sqrt(max(m,n)) | none",
     .opts = OPT(DION2)},

    {CFG(kl_shampoo_form), .type = FT_NAME,
     .group = G_KL,
     .help = "the reference code's eigenbasis form (default) or the\npaper's exact factor update",
     .opts = OPT(KL_SHAMPOO)},
    {CFG(kl_shampoo_init_factor), .type = FT_CUSTOM, .set = set_kl_init, .lo = 1e-30, .hi = 1e30,
     .group = G_KL, .arg = "X|auto", .dflt = dflt_kl_init,
     .help = "initial eigenvalue estimate; auto: RMS of the first\nnonzero gradient (default {})",
     .opts = OPT(KL_SHAMPOO)},
    {CFG(kl_shampoo_shampoo_beta), .type = FT_FLOAT, .lo = 0.0,
     .hi = 0.999999, .group = G_KL, .arg = "X", .dflt = dflt_kl_beta,
     .help = "factor and eigenvalue EMA (default: {})", .opts = OPT(KL_SHAMPOO)},
    {CFG(kl_shampoo_bias_correction), .type = FT_CUSTOM, .set = set_kl_bias, .group = G_KL,
     .arg = "on|off", .dflt = dflt_kl_bias,
     .help = "bias-corrected eigenvalue estimates (the EMA's start\nweighted out, as Adam's "
             "v_hat; eigenbasis form) (default {})", .opts = OPT(KL_SHAMPOO)},

    {CFG(async), .type = FT_TRUE, .group = G_ASYNC,
     .help = "inverse roots / eigenbasis refreshes on CPU worker\nthreads"},
    {CFG(staleness), .type = FT_CUSTOM, .set = set_staleness, .lo = 0, .hi = 1000000,
     .dflt = dflt_staleness, .group = G_ASYNC, .arg = "S|auto",
     .help = "steps a root may lag its due point (default {});\nstaleness stays <= "
             "precondition-frequency - 1 + S; auto (train):\nthe smallest the workers sustain "
             "at the measured\nstep time (80% busy at most; implies --async)",
     .needs = NEEDS_ASYNC},
    {CFG(staleness_warmup), .type = FT_CUSTOM, .set = set_staleness_warmup, .lo = 0,
     .hi = 1000000000, .group = G_ASYNC, .arg = "N|warmup",
     .help = "a synchronous warm start: steps 1..N run at\nstaleness 0 (each waits for its own "
             "refresh,\nbit-identical to the synchronous run), --staleness\nafter; warmup: "
             "N = the learning-rate warm-up's\nsteps (default 0: off)",
     .needs = NEEDS_ASYNC},
    {CFG(workers), .type = FT_INT, .lo = 1, .hi = 1024,
     .group = G_ASYNC, .arg = "K", .help = "worker threads (default: cores - 1)",
     .needs = NEEDS_ASYNC},
    {CFG(install_mode), .type = FT_NAME,
     .group = G_ASYNC,
     .help = "fixed: reproducible (default); eager: fresher", .needs = NEEDS_ASYNC},
    {CFG(stale_correction), .type = FT_NAME,
     .group = G_ASYNC,
     .help = "when a step would wait for a root still on a worker:\noff: wait (default); "
             "newton: correct the newest ready\nroot toward the current factor (one Newton "
             "step;\nShampoo; timing-dependent runs; needs --async)",
     .needs = NEEDS_ASYNC},
    {CFG(roots_tier), .type = FT_CUSTOM, .set = set_tiers, .group = G_ASYNC, .arg = "LIST",
     .help = "device,host (default) | device,host,nvme (spill to nvme\npast --host-budget-mib) | "
             "device,nvme (roots on nvme)", .needs = NEEDS_ASYNC},
    {CFG(nvme_dir), .type = FT_STRING, .group = G_ASYNC,
     .arg = "DIR", .help = "nvme tier directory, created with its parents\n(default " NVME_DIR_DEFAULT ")",
     .needs = NEEDS_ASYNC | NEEDS_NVME},
    {CFG(nvme_queue_depth), .type = FT_INT, .lo = 8,
     .hi = 4096, .group = G_ASYNC, .arg = "N",
     .help = "nvme chunks in flight, one staging chunk each;\nregistered when "
             "RLIMIT_MEMLOCK holds them (default {})", .needs = NEEDS_ASYNC | NEEDS_NVME},
    {CFG(nvme_chunk_bytes), .type = FT_KIB, .lo = 4,
     .hi = 1 << 20, .group = G_ASYNC, .arg = "N",
     .help = "nvme staging chunk per queue entry, a multiple of 4\n(default {})",
     .needs = NEEDS_ASYNC | NEEDS_NVME},
    {CFG(host_budget), .type = FT_MIB, .lo = 1,
     .hi = INT_MAX, .group = G_ASYNC, .arg = "N", .help = "host tier budget (default unlimited)",
     .needs = NEEDS_ASYNC},
    {CFG(page_state), .type = FT_TRUE, .group = G_ASYNC,
     .help = "page every matrix's factors, grafting and moments\nto the nvme tier between its "
             "steps (needs --async and\n--tiers device,nvme or device,host,nvme)", .needs = NEEDS_ASYNC | NEEDS_NVME},
    {CFG(pin_workers), .type = FT_TRUE, .group = G_ASYNC,
     .help = "pin workers to the last cores (hwloc)", .needs = NEEDS_ASYNC},

    {CFG(sharding), .type = FT_NAME,
     .group = G_RANKS,
     .help = "owner: each matrix whole on one rank (default);\ngather, zero1: baselines to "
             "compare with", .needs = NEEDS_RANKS},
    {.name = "deterministic", .type = FT_TRUE, .off = OFF(deterministic), .group = G_RANKS,
     .left = "--deterministic / --no-deterministic",
     .help = "sum gradients over ranks in rank order, bit-identical\nto one rank with "
             "--grad-accum N (default on)", .needs = NEEDS_RUN},
    {.name = "no-deterministic", .type = FT_SET, .off = OFF(nondeterministic), .value = 1,
     .needs = NEEDS_RANKS | NEEDS_RUN},
    {CFG(shard_group_size), .type = FT_INT, .lo = 0,
     .hi = 1 << 20, .group = G_RANKS, .arg = "K",
     .help = "hierarchical sync (HSDP): owner-shard inside groups\nof K ranks, replicate across "
             "groups (default: all ranks)", .needs = NEEDS_RANKS},
    {CFG(shard_gradients), .type = FT_TRUE, .group = G_RANKS,
     .help = "sharded gradients (ZeRO-2): full-size gradient buffers\nonly for the owned "
             "tensors, the rest one layer at a time", .needs = NEEDS_RANKS},
    {CFG(grad_bucket_bytes), .type = FT_KIB, .lo = 1,
     .hi = 1 << 20, .group = G_RANKS, .arg = "N",
     .help = "cap of one gradient bucket reduced to its owner\nwithout blocking (default {})",
     .needs = NEEDS_RANKS},
    {.name = "grad-accum", .type = FT_INT, .off = OFF(o.grad_accum), .lo = 1, .hi = 64,
     .group = G_RANKS, .arg = "N",
     .help = "micro-batches per step on one rank (default {}); the\nsame numbers as N ranks",
     .needs = NEEDS_RUN},

    {.name = "save-every", .type = FT_INT, .off = OFF(o.save_every), .lo = 0, .hi = INT_MAX,
     .group = G_CKPT, .arg = "N",
     .help = "save a checkpoint after every N-th step (default 0: never)\ninto "
             "--save-dir/step-NNNNNNNN (crash-safe: temporary name,\nfsync, rename)",
     .needs = NEEDS_RUN, .only = ONLY_ONE_RUN},
    {.name = "save-dir", .type = FT_STRING, .off = OFF(o.save_dir), .group = G_CKPT,
     .arg = "DIR", .help = "where --save-every writes (created)",
     .needs = NEEDS_SAVE | NEEDS_RUN, .only = ONLY_ONE_RUN},
    {.name = "keep", .type = FT_INT, .off = OFF(o.keep), .lo = 0, .hi = INT_MAX,
     .group = G_CKPT, .arg = "K",
     .help = "keep the newest K checkpoints (default 0: all); needs\n--save-every or "
             "--save-after-load", .needs = NEEDS_RUN, .only = ONLY_ONE_RUN},
    {.name = "overwrite", .type = FT_TRUE, .off = OFF(o.overwrite), .group = G_CKPT,
     .help = "remove another run's checkpoints from --save-dir at start\n(without it such a "
             "directory is refused)", .needs = NEEDS_SAVE | NEEDS_RUN, .only = ONLY_ONE_RUN},
    {.name = "resume", .type = FT_STRING, .off = OFF(o.resume), .group = G_CKPT, .arg = "DIR",
     .help = "continue from a checkpoint (or the newest in a --save-dir);\nwith the same "
             "options every later step is bit-identical", .needs = NEEDS_RUN, .only = ONLY_ONE_RUN},
    {.name = "save-after-load", .type = FT_TRUE, .off = OFF(o.save_after_load),
     .group = G_CKPT,
     .help = "with --resume: save into --save-dir right after the load,\nbefore any step (a "
             "checkpoint resharded to this run's\nranks and layout)",
     .needs = NEEDS_RUN, .only = ONLY_ONE_RUN},

    {.name = "eval-every", .type = FT_INT, .off = OFF(o.eval_every), .lo = 0, .hi = INT_MAX,
     .group = G_OUTPUT, .arg = "N",
     .help = "steps between validation losses (default {}; 0 = end)", .needs = NEEDS_RUN},
    {.name = "eval-batches", .type = FT_INT, .off = OFF(o.eval_batches), .lo = 1, .hi = 100000,
     .group = G_OUTPUT, .arg = "N", .help = "batches per validation (default {})",
     .needs = NEEDS_RUN},
    {.name = "metrics", .type = FT_STRING, .off = OFF(o.metrics_path), .group = G_OUTPUT,
     .arg = "FILE", .help = "write JSONL metrics (config, per step, summary)",
     .needs = NEEDS_RUN | NEEDS_ONE},
    {CFG(blas_threads), .type = FT_INT, .lo = 1, .hi = 1024,
     .group = G_OUTPUT, .arg = "N", .help = "BLAS threads (default: OpenBLAS: OPENBLAS_NUM_THREADS or\nall cores; BLIS: BLIS_NUM_THREADS, OMP_NUM_THREADS or 1)"},
    {CFG(step_threads), .type = FT_INT, .lo = 0,
     .hi = 256, .group = G_OUTPUT, .arg = "N",
     .help = "threads running the step's plain updates (Muon,\n"
             "AdamW) side by side (bit-identical; default 0: the\ncores when BLAS runs one thread and the run is\nsync, else 1)"},
    {.name = "progress", .type = FT_SET, .off = OFF(o.progress), .value = 1, .group = G_OUTPUT,
     .left = "--progress / --no-progress",
     .help = "progress bar (default: when stdout is a terminal)",
     .needs = NEEDS_LINES | NEEDS_RUN | NEEDS_ONE},
    /* --no-progress and --deterministic ask for what happens anyway where
       they have no effect (--quiet, race, one rank): not said */
    {.name = "no-progress", .type = FT_SET, .off = OFF(o.progress), .value = 0,
     .needs = NEEDS_RUN},
    {.name = "quiet", .type = FT_TRUE, .off = OFF(o.quiet), .group = G_OUTPUT,
     .help = "print only the summary", .needs = NEEDS_RUN | NEEDS_ONE},
    {.name = "memory-limit-mib", .type = FT_MIB, .off = OFF(o.memory_limit), .lo = 1,
     .hi = INT_MAX, .group = G_OUTPUT, .arg = "N",
     .help = "refuse models needing more (default: MemAvailable)", .needs = NEEDS_RUN},

    {.name = "help", .type = FT_HELP},
    {.name = "version", .type = FT_HELP, .value = 1},
    /* sweep-staleness and race only (their usage lines list them) */
    {.name = "values", .type = FT_CUSTOM, .set = set_values, .lo = 0, .hi = 100000,
     .only = 1u << CMD_SWEEP},
    {.name = "out", .type = FT_STRING, .off = OFF(out_dir),
     .only = 1u << CMD_SWEEP | 1u << CMD_RACE},
    {.name = "runs", .type = FT_STRING, .off = OFF(runs), .only = 1u << CMD_RACE},
    /* plan only (print_plan_help lists them) */
    {.name = "shapes", .type = FT_STRING, .off = OFF(shapes), .only = 1u << CMD_PLAN},
    {.name = "world", .type = FT_INT, .off = OFF(world), .lo = 1, .hi = 65536,
     .only = 1u << CMD_PLAN},
    {.name = "ranks-per-node", .type = FT_INT, .off = OFF(ranks_per_node), .lo = 1,
     .hi = 65536, .only = 1u << CMD_PLAN},
    {.name = "step-ms", .type = FT_DOUBLE, .off = OFF(step_ms), .lo = 0, .hi = 1e9,
     .only = 1u << CMD_PLAN},
    {.name = "plan-workers", .type = FT_INT, .off = OFF(plan_workers), .lo = 0, .hi = 1024,
     .only = 1u << CMD_PLAN},
    {.name = "memory-gib", .type = FT_DOUBLE, .off = OFF(memory_gib), .lo = 0, .hi = 1e9,
     .only = 1u << CMD_PLAN},
    {.name = "activation-mib", .type = FT_MIB, .off = OFF(activation_bytes), .lo = 0,
     .hi = INT_MAX, .only = 1u << CMD_PLAN},
    {.name = "json", .type = FT_TRUE, .off = OFF(json), .only = 1u << CMD_PLAN},
};

#define N_FLAGS (sizeof train_flag_rows / sizeof train_flag_rows[0])
_Static_assert(N_FLAGS <= sizeof ((train_args *)0)->given, "train_args.given holds every flag");

/* train_flag_rows with the schema rows' names and offsets filled in. */
static train_flag train_flags[N_FLAGS];

/* Whether flag type t can set a field of schema kind k. */
static bool flag_fits(flag_type t, strata_cfg_kind k)
{
    switch (t) {
    case FT_TRUE: return k == STRATA_CFG_BOOL;
    case FT_INT: return k == STRATA_CFG_INT;
    case FT_U64: return k == STRATA_CFG_U64;
    case FT_MIB:
    case FT_KIB: return k == STRATA_CFG_SIZE;
    case FT_FLOAT: return k == STRATA_CFG_FLOAT;
    case FT_DOUBLE: return k == STRATA_CFG_DOUBLE;
    case FT_STRING: return k == STRATA_CFG_STRING;
    case FT_NAME:
    case FT_OPTIMIZER: return k == STRATA_CFG_ENUM;
    case FT_CUSTOM: return true;
    default: return false;
    }
}

/* The optimizer whose configuration member holds schema field `path`
 * ("kl_shampoo.form": kl-shampoo), found through the member of its lr
 * (strata_config_optimizer_lr); -1 for a field of strata_config itself or of
 * the AdamW tail (which every run has). */
static int member_optimizer(const char *path)
{
    const char *dot = strchr(path, '.');
    if (!dot)
        return -1;
    strata_config c;
    strata_config_default(&c);
    for (int k = 0; k < 32; k++) {
        float *lr = NULL, *wd = NULL;
        if (strata_config_optimizer_lr(&c, (strata_optimizer)k, &lr, &wd) != STRATA_OK)
            break; /* past the last family */
        if (!lr || k == STRATA_OPTIM_ADAMW)
            continue;
        const size_t off = (size_t)((char *)lr - (char *)&c);
        for (int r = 0; r < STRATA_CFG_ROWS; r++)
            if (schema[r].off == off && schema[r].kind == STRATA_CFG_FLOAT &&
                strncmp(schema[r].name, path, (size_t)(dot - path) + 1) == 0)
                return k;
    }
    return -1;
}

static void resolve_flags(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    for (size_t i = 0; i < N_FLAGS; i++) {
        train_flag *f = &train_flags[i];
        *f = train_flag_rows[i];
        if (!f->field)
            continue;
        const strata_cfg_field *s = &schema[f->field - 1];
        f->name = s->cli;
        f->off = OFF(o.strata) + s->off;
        if (f->type == FT_NAME && !f->names)
            f->names = s->names; /* the schema's spellings (runtime/config_schema.h) */
        if (!f->name || !flag_fits(f->type, s->kind) ||
            (f->type == FT_NAME && (!f->names || !f->names->name))) { /* a broken table: a program error */
            fprintf(stderr, "strata: internal error: the flag row of strata_config.%s does not "
                            "fit its schema row\n", s->name);
            abort();
        }
        const int k = member_optimizer(s->name);
        if (k >= 0 && !(f->opts & 1u << k)) { /* a family's flag without its OPT() bit */
            fprintf(stderr, "strata: internal error: --%s sets strata_config.%s, but its flag "
                            "row's .opts lacks %s\n", f->name, s->name,
                    strata_optimizer_name((strata_optimizer)k));
            abort();
        }
    }
}

/* ---- parsing */

static bool flag_given(const struct train_args *a, const char *name);

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

/* "a, b or c" from a names table. */
static void join_names(const gpt_enum_name *names, const char *sep, const char *last, char *buf,
                       size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const gpt_enum_name *e = names; e->name && used < n; e++) {
        const char *s = e == names ? "" : e[1].name ? sep : last;
        used += (size_t)snprintf(buf + used, n - used, "%s%s", s, e->name);
    }
}

/* Parse `arg` for flag `f` into `a`. Returns 0, or -1 after reporting. */
static int set_flag(train_args *a, const train_flag *f, const char *arg)
{
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", f->name);
    char *p = (char *)a + f->off;
    int v;
    float x;
    switch (f->type) {
    case FT_TRUE: *(bool *)p = true; return 0;
    case FT_SET: *(int *)p = f->value; return 0;
    case FT_HELP: return 0;
    case FT_INT: return parse_int(flag, arg, (long)f->lo, (long)f->hi, (int *)p);
    case FT_U64:
        if (parse_int(flag, arg, (long)f->lo, (long)f->hi, &v))
            return -1;
        *(uint64_t *)p = (uint64_t)v;
        return 0;
    case FT_MIB:
        if (parse_int(flag, arg, (long)f->lo, (long)f->hi, &v))
            return -1;
        *(size_t *)p = (size_t)v << 20;
        return 0;
    case FT_KIB:
        if (parse_int(flag, arg, (long)f->lo, (long)f->hi, &v))
            return -1;
        *(size_t *)p = (size_t)v << 10;
        return 0;
    case FT_FLOAT: return parse_float(flag, arg, f->lo, f->hi, (float *)p);
    case FT_DOUBLE:
        if (parse_float(flag, arg, f->lo, f->hi, &x))
            return -1;
        *(double *)p = x;
        return 0;
    case FT_STRING: *(const char **)p = arg; return 0;
    case FT_NAME:
        if (!gpt_enum_parse(f->names, arg, &v)) {
            char list[128];
            join_names(f->names, ", ", " or ", list, sizeof list);
            fprintf(stderr, "strata: %s expects %s, got '%s'\n", flag, list, arg);
            return -1;
        }
        memcpy(p, &v, sizeof v);
        return 0;
    case FT_OPTIMIZER: {
        strata_optimizer o;
        if (strata_optimizer_parse(arg, &o) != STRATA_OK) {
            fprintf(stderr, "strata: %s\n", strata_last_error());
            return -1;
        }
        memcpy(p, &o, sizeof o);
        return 0;
    }
    case FT_CUSTOM: return f->set(a, f, arg);
    }
    return -1;
}

/* ---- --help */

/* The default of `f` as --help prints it, from the defaults `d`. */
static void flag_default(const train_flag *f, const train_args *d, char *buf, size_t n)
{
    const char *p = (const char *)d + f->off;
    int v;
    buf[0] = '\0';
    if (f->dflt) {
        f->dflt(d, buf, n);
        return;
    }
    switch (f->type) {
    case FT_INT: snprintf(buf, n, f->dfmt ? f->dfmt : "%d", *(const int *)p); break;
    case FT_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case FT_KIB: snprintf(buf, n, "%zu", *(const size_t *)p >> 10); break;
    case FT_FLOAT: snprintf(buf, n, f->dfmt ? f->dfmt : "%g", (double)*(const float *)p); break;
    case FT_DOUBLE: snprintf(buf, n, f->dfmt ? f->dfmt : "%g", *(const double *)p); break;
    case FT_STRING: {
        const char *str = *(const char *const *)p;
        snprintf(buf, n, "%s", str ? str : "");
        break;
    }
    case FT_NAME:
        memcpy(&v, p, sizeof v);
        snprintf(buf, n, "%s", gpt_enum_name_of(f->names, v, "?"));
        break;
    case FT_OPTIMIZER:
        snprintf(buf, n, "%s", strata_optimizer_name(*(const strata_optimizer *)p));
        break;
    default: break;
    }
}

/* "  --name ARG                  help text", the text (its "{}" replaced by
 * the default; a '\n' in it is a space) wrapped at HELP_WIDTH columns, each
 * continuation line indented to the text's column. */
enum { HELP_WIDTH = 80 };
static void print_flag_help(FILE *out, const train_flag *f, const train_args *d)
{
    enum { TEXT_COLUMN = 30 };
    char left[96], dflt[160], text[1024];
    if (f->left)
        snprintf(left, sizeof left, "%s", f->left);
    else if (f->arg)
        snprintf(left, sizeof left, "--%s %s", f->name, f->arg);
    else if (f->type == FT_NAME) {
        char list[80];
        join_names(f->names, "|", "|", list, sizeof list);
        snprintf(left, sizeof left, "--%s %s", f->name, list);
    } else
        snprintf(left, sizeof left, "--%s", f->name);
    const int len = (int)strlen(left) + 2;
    fprintf(out, "  %s%*s", left, len <= TEXT_COLUMN - 2 ? TEXT_COLUMN - len : 2, "");
    flag_default(f, d, dflt, sizeof dflt);
    size_t n = 0;
    for (const char *s = f->help; *s && n + 1 < sizeof text; s++) {
        if (s[0] == '{' && s[1] == '}') {
            for (const char *t = dflt; *t && n + 1 < sizeof text; t++)
                text[n++] = *t == '\n' ? ' ' : *t;
            s++;
        } else {
            text[n++] = *s == '\n' ? ' ' : *s;
        }
    }
    text[n] = '\0';
    int col = len <= TEXT_COLUMN - 2 ? TEXT_COLUMN : len + 2;
    bool line_start = true;
    for (const char *w = text; *w;) {
        while (*w == ' ')
            w++;
        const size_t wl = strcspn(w, " ");
        if (!wl)
            break;
        if (!line_start && col + 1 + (int)wl > HELP_WIDTH) {
            fprintf(out, "\n%*s", TEXT_COLUMN, "");
            col = TEXT_COLUMN;
            line_start = true;
        }
        if (!line_start) {
            fputc(' ', out);
            col++;
        }
        fwrite(w, 1, wl, out);
        col += (int)wl;
        line_start = false;
        w += wl;
    }
    fputc('\n', out);
}

static void print_race_help(FILE *out, const train_args *d)
{
    /* the fresh preset, wrapped after a comma past column 60 */
    char fresh[320];
    size_t fu = (size_t)snprintf(fresh, sizeof fresh, "  ");
    int col = 2;
    for (const char *p = STRATA_RACE_FRESH_RUNS; *p && fu + 4 < sizeof fresh; p++) {
        fresh[fu++] = *p;
        col++;
        if (*p == ',' && col > 60) {
            fresh[fu++] = '\n';
            fresh[fu++] = ' ';
            fresh[fu++] = ' ';
            col = 2;
        }
    }
    fresh[fu++] = '\n';
    fresh[fu] = '\0';
    char values[160] = "";
    size_t used = 0;
    for (int i = 0; i < d->n_values && used < sizeof values; i++)
        used += (size_t)snprintf(values + used, sizeof values - used, "%s%d", i ? "," : "",
                                 d->values[i]);
    fprintf(out,
            "usage: strata race [--runs LIST] [--staleness S,S,...] [--out DIR]\n"
            "                   [train options]\n"
            "\n"
            "Train the GPT once per run of LIST, one run after another, with the same model,\n"
            "data, seed, steps and validation schedule (--eval-every), each on one BLAS\n"
            "thread unless --threads says otherwise (the async runs' workers take the other\n"
            "cores). A run is an optimizer name (adamw, muon, normuon, dion2, shampoo, soap,\n"
            "kl-shampoo: synchronous, as `strata train` runs it) or NAME-async (its refreshes\n"
            "on worker threads, staggered over the period: one run per staleness budget in\n"
            "--staleness), in full NAME[-fF][-async[-sS]][-valve]: -fF refreshes every F\n"
            "steps (--precondition-frequency F for that run), -sS one async run at staleness\n"
            "S, -valve (shampoo, async) with --stale-correction newton at --epsilon 1e-4 or\n"
            "more (at 1e-10 it refuses every correction). LIST may name a preset:\n"
            "default (the list below) or fresh, a refresh every step, sync and one step\n"
            "behind, against each family's default F:\n"
            "%s"
            "AdamW runs first: its final validation loss is the target. Then write\n"
            "  DIR/race.tsv        every validation: optimizer, variant, step, wall_s,\n"
            "                      val_loss\n"
            "  DIR/ratios.tsv      per run: the wall time at which its validation loss\n"
            "                      first reached AdamW's final one, as a ratio of AdamW's\n"
            "                      wall time, and that validation's step; its\n"
            "                      critical-path fraction, step time max/median and\n"
            "                      waits (count, seconds)\n"
            "  DIR/loss_vs_time.png  validation loss against wall time (gnuplot), and\n"
            "  DIR/<run>.jsonl     each run's metrics,\n"
            "and print the ratios, the wait time, and the validation loss per step with each\n"
            "run's largest gap to its reference (an async run: the sync run of its optimizer\n"
            "and F; -valve: the same run without it; a sync -fF run: the default F's).\n"
            "Wall time is the steps' time (validation excluded).\n"
            "Defaults: --runs %s\n"
            "          --staleness %s --out %s --eval-every %d --steps %d.\n\n",
            fresh, STRATA_RACE_DEFAULT_RUNS, values, d->out_dir,
            d->o.eval_every, d->o.steps);
}

static void print_plan_help(FILE *out)
{
    fputs("usage: strata plan [--shapes FILE] [--world N] [--ranks-per-node N]\n"
          "                   [--step-ms T] [--plan-workers W] [--memory-gib M]\n"
          "                   [--activation-mib N] [--json] [train options]\n\n"
          "Plan a run without running it (strata_plan_estimate): per-rank bytes by tier and\n"
          "kind at the run's peak (what the memory ledger of the same run reports), the\n"
          "owner plan's makespan and balance, one refresh round per rank on W workers, and\n"
          "the smallest --precondition-frequency and --staleness that keep the workers\n"
          "ahead of a step of T ms. The model: the GPT of the train flags (--layers,\n"
          "--d-model, --heads, --seq-len, --batch; its activations included), or --shapes\n"
          "FILE, a JSON parameter list (plan/shapes/*.json: GPT-2, Llama, OLMo);\n"
          "--activation-mib adds a shape file's activations per rank. --world ranks,\n"
          "--ranks-per-node per node (default: all on one), --memory-gib one rank's memory\n"
          "to check against. Costs come from a model fitted on this machine (measured once,\n"
          "cached). The optimizer and tier flags are the train flags below.\n\n",
          out);
}

static void print_train_help(FILE *out, train_cmd cmd)
{
    resolve_flags();
    train_args d;
    train_args_default(&d, cmd);
    if (cmd == CMD_RACE)
        print_race_help(out, &d);
    if (cmd == CMD_PLAN)
        print_plan_help(out);
    if (cmd == CMD_SWEEP) {
        char values[160] = "";
        size_t used = 0;
        for (int i = 0; i < d.n_values && used < sizeof values; i++)
            used += (size_t)snprintf(values + used, sizeof values - used, "%s%d", i ? "," : "",
                                     d.values[i]);
        fprintf(out,
                "usage: strata sweep-staleness [--values %s] [--out DIR] [train options]\n\n"
                "Train the GPT with a synchronous matrix optimizer (shampoo, or --optimizer\n"
                "soap or kl-shampoo) and with the asynchronous runtime\n"
                "at each staleness budget S (same model, data, seed and steps), then write\n"
                "DIR/sweep.tsv (final validation loss, wall time, p50/p99/max step time,\n"
                "waits, critical-path fraction), DIR/<run>.jsonl metrics and\n"
                "DIR/loss_vs_time.png (gnuplot), and print the table and the validation\n"
                "loss per step (--precondition-frequency 1: a refresh every step).\n"
                "Defaults: --values %s --out %s, --steps %d.\n\n",
                values, values, d.out_dir, d.o.steps);
    }
    fputs("usage: strata train [options]\n"
          "\n"
          "Train a byte-level GPT on a text file or directory with a matrix optimizer.\n"
          "Embeddings and 1-D tensors always use AdamW; the 2-D matrices use --optimizer.\n",
          out);
    const char *group = NULL;
    for (size_t i = 0; i < N_FLAGS; i++) {
        const train_flag *f = &train_flags[i];
        if (!f->group)
            continue;
        if (!group || strcmp(group, f->group) != 0)
            fprintf(out, "\n%s:\n", f->group);
        group = f->group;
        print_flag_help(out, f, &d);
    }
}

/* ---- train's options */

/* Parse the training flags (train, sweep-staleness, race) into *a. Returns
 * 0 to go on, 2 for a usage error (already reported), 100 when help was
 * printed. Another command's own flags are refused. */
static int parse_train(int argc, char **argv, train_cmd cmd, train_args *a)
{
    resolve_flags();
    train_args_default(a, cmd);
    struct option longopts[N_FLAGS + 1];
    for (size_t i = 0; i < N_FLAGS; i++) {
        const flag_type t = train_flags[i].type;
        longopts[i] = (struct option){
            .name = train_flags[i].name,
            .has_arg = t == FT_TRUE || t == FT_SET || t == FT_HELP ? no_argument
                                                                   : required_argument,
            .flag = NULL,
            .val = 256 + (int)i,
        };
    }
    longopts[N_FLAGS] = (struct option){0};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == ':') { /* a known flag at the end of the line, without its value */
            const bool known = optopt >= 256 && optopt < 256 + (int)N_FLAGS;
            fprintf(stderr, "strata: %s%s needs a value (see strata %s --help)\n",
                    known ? "--" : "", known ? train_flags[optopt - 256].name : argv[optind - 1],
                    cmd_word(cmd));
            return 2;
        }
        const train_flag *f = c >= 256 && c < 256 + (int)N_FLAGS ? &train_flags[c - 256] : NULL;
        if (f && f->type == FT_HELP && f->value == 1) {
            printf("strata %s\n", strata_version());
            return 100;
        }
        if (c == 'h' || (f && f->type == FT_HELP)) {
            print_train_help(stdout, cmd);
            return 100;
        }
        if (!f) {
            fprintf(stderr, "strata: unknown or incomplete option '%s' (see strata %s --help)\n",
                    argv[optind - 1], cmd_word(cmd));
            return 2;
        }
        if (f->only && !(f->only & 1u << cmd)) {
            fprintf(stderr, "strata: --%s belongs to %s\n", f->name,
                    f->only == 1u << CMD_RACE    ? "race"
                    : f->only == 1u << CMD_SWEEP ? "sweep-staleness"
                    : f->only == 1u << CMD_PLAN  ? "plan"
                    : f->only == ONLY_ONE_RUN    ? "train (the runs of sweep-staleness and race "
                                                   "would all write or read the same "
                                                   "checkpoints)"
                                                 : "sweep-staleness and race");
            return 2;
        }
        if (set_flag(a, f, optarg))
            return 2;
        if (f->then)
            f->then(a);
        a->given[c - 256] = true;
    }
    if (optind < argc) {
        fprintf(stderr, "strata: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }

    /* Flags that fan out to several options, or that take effect together. */
    gpt_train_options *o = &a->o;
    if (a->nvme_wanted && !o->strata.nvme_dir)
        o->strata.nvme_dir = NVME_DIR_DEFAULT;
    if (!a->nvme_wanted)
        o->strata.nvme_dir = NULL;
    /* --page-state pages to the nvme tier between the async runtime's steps:
     * without either it contradicts them (exit 1, README "exit status"),
     * said here with the flags' names rather than by strata_create after a
     * note. A race (its adamw run) and a sweep (its synchronous run) always
     * hold a synchronous run, which strata_create would refuse it. */
    if (o->strata.page_state && (cmd == CMD_SWEEP || cmd == CMD_RACE)) {
        fprintf(stderr, "strata %s: STRATA_ERR_INVALID_ARG: --page-state needs --async, and "
                        "%s is synchronous: page the state with strata train --async "
                        "--page-state\n", cmd_word(cmd),
                cmd == CMD_RACE ? "the race's adamw run" : "the sweep's baseline run, sync,");
        return 1;
    }
    if (o->strata.page_state &&
        (!a->nvme_wanted || (!o->strata.async && (cmd == CMD_TRAIN || cmd == CMD_PLAN)))) {
        fprintf(stderr, "strata%s%s: STRATA_ERR_INVALID_ARG: --page-state needs --async and an "
                        "nvme tier (--tiers device,nvme or device,host,nvme)\n",
                cmd == CMD_TRAIN ? "" : " ", cmd == CMD_TRAIN ? "" : cmd_word(cmd));
        return 1;
    }
    if (o->strata.page_state && o->strata.backend != STRATA_BACKEND_CPU) {
        fprintf(stderr, "strata%s%s: STRATA_ERR_INVALID_ARG: --page-state moves the state between "
                        "host memory and the nvme tier: it needs --device cpu (a device's "
                        "memory does not page)\n",
                cmd == CMD_TRAIN ? "" : " ", cmd == CMD_TRAIN ? "" : cmd_word(cmd));
        return 1;
    }
    if (o->strata.nvme_chunk_bytes % 4096) {
        fprintf(stderr, "strata: --nvme-staging-kib expects a multiple of 4, got %zu\n",
                o->strata.nvme_chunk_bytes >> 10);
        return 2;
    }
    /* A synchronous step never waits for a root, so --stale-correction has
     * nothing to correct without --async: a note (no_effect_notes), as
     * --staleness, and the runtime is not asked for it (it refuses it
     * outside the asynchronous runtime). */
    if (!o->strata.async && (cmd == CMD_TRAIN || cmd == CMD_PLAN))
        o->strata.stale_correction = STRATA_STALE_CORRECTION_OFF;
    /* The trainer's bias-corrected KL-Shampoo estimates belong to the eigenbasis
     * form: --kl-form exact runs without them, unless asked (then refused). */
    bool kl_bias_given = false;
    for (size_t i = 0; i < N_FLAGS; i++)
        kl_bias_given |= a->given[i] && strcmp(train_flags[i].name, "kl-bias-correction") == 0;
    if (o->strata.kl_shampoo.form == STRATA_KL_EXACT && !kl_bias_given)
        o->strata.kl_shampoo.bias_correction = false;
    const strata_optimizer mopt = o->strata.matrix_optimizer;
    gpt_refresh_info refresh;
    gpt_optimizer_refresh_info(&o->strata, &refresh);
    if (o->strata.async && !refresh.async)
        fprintf(stderr, "strata: note: --async moves Shampoo's inverse roots and the SOAP and "
                        "KL-Shampoo eigenbases to workers; it has no effect with --optimizer "
                        "%s\n",
                strata_optimizer_name(mopt));
    if (cmd == CMD_TRAIN && o->strata.async && refresh.async && refresh.max_staleness >= 0 &&
        o->strata.staleness > refresh.max_staleness) {
        /* Two flags that contradict each other: exit 1, as every contradiction
         * (README, "exit status"). */
        fprintf(stderr, "strata: STRATA_ERR_INVALID_ARG: --staleness %d: async %s needs "
                        "staleness < --precondition-frequency (%d)\n",
                o->strata.staleness, strata_optimizer_name(mopt), refresh.frequency);
        return 1;
    }
    if (o->keep > 0 && o->save_every == 0 && !o->save_after_load) {
        fprintf(stderr, "strata: STRATA_ERR_INVALID_ARG: --keep %d prunes the checkpoints that "
                        "--save-every (or --save-after-load) writes; give one of them\n",
                o->keep);
        return 1; /* a contradiction, as --save-every without --save-dir */
    }
    if (o->strata.async && refresh.async && o->strata.staleness >= o->steps)
        fprintf(stderr, "strata: note: --staleness %d >= --steps %d: no asynchronous root will be "
                        "installed in this run\n",
                o->strata.staleness, o->steps);
    if (o->strata.stagger_refresh && !refresh.stagger)
        fprintf(stderr, "strata: note: --stagger-refresh spreads the inverse-root and eigenbasis "
                        "refreshes of shampoo, soap and kl-shampoo; it has no effect with "
                        "--optimizer %s\n",
                strata_optimizer_name(mopt));
    if (o->strata.shard_gradients && o->strata.sharding != STRATA_SHARD_OWNER)
        fprintf(stderr, "strata: note: --shard-gradients shards owner sharding's gradients; it "
                        "has no effect with --sharding %s (every rank keeps full-size "
                        "gradients)\n",
                o->strata.sharding == STRATA_SHARD_GATHER ? "gather" : "zero1");
    if (a->nvme_wanted && o->strata.roots_tier == STRATA_TIER_HOST && !o->strata.host_budget &&
        o->strata.async && !o->strata.page_state)
        fprintf(stderr, "strata: note: --tiers device,host,nvme spills past --host-budget-mib; "
                        "without a budget every root stays in the host tier (nothing reaches "
                        "nvme)\n");
    if (o->strata.shard_gradients && o->strata.sharding == STRATA_SHARD_OWNER &&
        o->strata.shard_group_size == 1)
        fprintf(stderr, "strata: note: --shard-gradients has no effect with --shard-group-size 1 "
                        "(every rank is its own shard group and owns every matrix: full-size "
                        "gradients)\n");
    if (mopt == STRATA_OPTIM_SHAMPOO && flag_given(a, "warm-qr-tolerance") &&
        !STRATA_ROOT_METHOD_WARM(o->strata.shampoo.root_method)) {
        const char *rm = "?"; /* the schema's spelling (runtime/config_schema.h) */
        for (const strata_cfg_name *e = strata_cfg_names_root_method; e->name; e++)
            if (e->value == (int)o->strata.shampoo.root_method)
                rm = e->name;
        fprintf(stderr, "strata: note: --warm-qr-tolerance sets --root-method warm-qr's (and "
                        "warm-qr-f32's) check; it has no effect with --root-method %s\n", rm);
    }
    if (mopt == STRATA_OPTIM_SHAMPOO &&
        o->strata.shampoo.root_method == STRATA_ROOT_NEWTON_F32 &&
        o->strata.shampoo.epsilon_rel < 1e-5f)
        fprintf(stderr, "strata: note: --root-method newton-f32 accepts a float32 root only when "
                        "its residual is under 3e-2, which needs factors of condition below "
                        "~1e5: with --epsilon-rel %g most roots will fall back to eigh (the "
                        "summary's roots: line counts them); --epsilon-rel 1e-4 bounds it\n",
                (double)o->strata.shampoo.epsilon_rel);
    if (o->strata.stagger_refresh && refresh.stagger && refresh.frequency == 1)
        fprintf(stderr, "strata: note: --stagger-refresh has nothing to spread with "
                        "--precondition-frequency 1\n");
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->strata.async && cores > 0 && o->strata.workers > cores)
        fprintf(stderr, "strata: warning: --workers %d exceeds the %ld online cores; the workers "
                        "will share them with each other and with the training thread\n",
                o->strata.workers, cores);
    if (cores > 0 && o->strata.blas_threads > cores)
        fprintf(stderr, "strata: warning: --threads %d exceeds the %ld online cores\n",
                o->strata.blas_threads, cores);
    o->model.max_seq = o->seq_len; /* the model's context is the training context */
    /* --lr and --weight-decay set the matrix optimizer's own values only (the
     * others are not used by this run; a resumed checkpoint compares them). */
    /* --adamw-lr is the tail's lr for every matrix optimizer (AdamW's too, whose
     * matrices take --lr); without it each run's tail takes the trainer's
     * default for its matrix optimizer (gpt_train_options.tail_lr -1: the
     * race's runs each their own). The flag wrote strata.adamw.lr: it moves
     * to tail_lr, and AdamW's matrices keep their default unless --lr (without
     * --adamw-lr AdamW's tail follows its matrices' lr: one lr for the run). */
    if (flag_given(a, "adamw-lr")) {
        gpt_train_options dflt;
        gpt_train_options_default(&dflt);
        o->tail_lr = o->strata.adamw.lr;
        o->strata.adamw.lr = dflt.strata.adamw.lr;
    }
    float *lr = NULL, *wd = NULL;
    strata_config_optimizer_lr(&o->strata, mopt, &lr, &wd); /* NULLs for an unknown one */
    if (a->lr >= 0.0f && lr)
        *lr = a->lr;
    if (a->wd >= 0.0f && wd)
        *wd = a->wd;
    if (cmd == CMD_RACE) { /* each run its own matrix optimizer: every one of them */
        if (a->lr >= 0.0f) {
            o->strata.shampoo.lr = a->lr;
            o->strata.muon.lr = a->lr;
            o->strata.soap.lr = a->lr;
            o->strata.kl_shampoo.lr = a->lr;
            o->strata.normuon.lr = a->lr;
            o->strata.dion2.lr = a->lr;
        }
        if (a->wd >= 0.0f) {
            o->strata.shampoo.weight_decay = a->wd;
            o->strata.muon.weight_decay = a->wd;
            o->strata.soap.weight_decay = a->wd;
            o->strata.kl_shampoo.weight_decay = a->wd;
            o->strata.normuon.weight_decay = a->wd;
            o->strata.dion2.weight_decay = a->wd;
        }
    }
    return 0;
}

/* ---- flags given where they have no effect */

/* Where a command's flags take effect (train_flag.opts and .needs). */
typedef struct effect_ctx {
    unsigned opts;         /* the matrix optimizers of the run(s): OPT_* */
    const char *opts_what; /* "--optimizer muon", "the runs of --runs" */
    bool async;            /* some run's refreshes are asynchronous */
    const char *async_why; /* why not, after "take effect with ..." */
    bool nvme, lines, save, run, one, gpt, dir;
    int world;             /* ranks */
    const char *ranks_how; /* how to get more than one */
} effect_ctx;

static bool flag_given(const struct train_args *a, const char *name)
{
    for (size_t i = 0; i < N_FLAGS; i++)
        if (a->given[i] && strcmp(train_flags[i].name, name) == 0)
            return true;
    return false;
}

/* "a, b and c" of the optimizers in mask m. */
static void opts_names(unsigned m, char *buf, size_t n)
{
    size_t used = 0;
    int left = __builtin_popcount(m);
    buf[0] = '\0';
    for (int k = 0; k < 32 && used < n; k++)
        if (m & 1u << k) {
            left--;
            used += (size_t)snprintf(buf + used, n - used, "%s%s",
                                     strata_optimizer_name((strata_optimizer)k),
                                     left > 1 ? ", " : left == 1 ? " and " : "");
        }
}

/* The first reason flag f has no effect under e: a NEEDS_* bit, NEEDS_OPT
 * for its optimizers, 0 when it has one. */
#define NEEDS_OPT (1u << 31)
static unsigned no_effect(const train_flag *f, const effect_ctx *e)
{
    static const unsigned order[] = {NEEDS_RUN, NEEDS_ONE, NEEDS_GPT, NEEDS_OPT, NEEDS_ASYNC,
                                     NEEDS_NVME, NEEDS_RANKS, NEEDS_LINES, NEEDS_SAVE,
                                     NEEDS_DIR};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const unsigned r = order[i];
        const bool missing = r == NEEDS_OPT ? f->opts && !(f->opts & e->opts)
                             : !(f->needs & r)  ? false
                             : r == NEEDS_RUN   ? !e->run
                             : r == NEEDS_ONE   ? !e->one
                             : r == NEEDS_GPT   ? !e->gpt
                             : r == NEEDS_ASYNC ? !e->async
                             : r == NEEDS_NVME  ? !e->nvme
                             : r == NEEDS_RANKS ? e->world < 2
                             : r == NEEDS_LINES ? !e->lines
                             : r == NEEDS_SAVE  ? !e->save
                                                : !e->dir;
        if (missing)
            return r;
    }
    return 0;
}

/* A flag whose value the runtime will refuse in this run: its refusal is
 * said alone, not after a note that the flag has no effect. --shard-group-size
 * K must divide the world size (strata_create): on one rank only 0 and 1 are
 * legal, and they are the no-effect case. */
static bool refused_later(const train_flag *f, const train_args *a, const effect_ctx *e)
{
    const int k = a->o.strata.shard_group_size;
    return strcmp(f->name, "shard-group-size") == 0 && k > 0 && e->world > 0 && e->world % k;
}

/* Every flag on the command line that has no effect in this run, said once:
 * one note per reason (per set of optimizers) naming the flags. A note, not
 * a refusal: such a flag is neither malformed (exit 2) nor a contradiction
 * (exit 1); README, "exit status". A value that is refused later gets no
 * note (refused_later). */
static void no_effect_notes(const train_args *a, const effect_ctx *e)
{
    bool said[N_FLAGS] = {false};
    for (size_t i = 0; i < N_FLAGS; i++)
        said[i] = a->given[i] && refused_later(&train_flags[i], a, e);
    for (size_t i = 0; i < N_FLAGS; i++) {
        const train_flag *f = &train_flags[i];
        const unsigned r = a->given[i] ? no_effect(f, e) : 0;
        if (!r || said[i])
            continue;
        char list[512];
        size_t used = 0;
        int n = 0;
        for (size_t j = i; j < N_FLAGS; j++) { /* the flags of the same reason */
            const train_flag *g = &train_flags[j];
            if (!a->given[j] || said[j] || no_effect(g, e) != r ||
                (r == NEEDS_OPT && g->opts != f->opts))
                continue;
            said[j] = true;
            n++;
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0,
                                     "%s--%s", n > 1 ? ", " : "", g->name);
        }
        const char *has = n == 1 ? "has" : "have", *takes = n == 1 ? "takes" : "take";
        fprintf(stderr, "strata%s%s: note: %s ", a->cmd == CMD_TRAIN ? "" : " ",
                a->cmd == CMD_TRAIN ? "" : cmd_word(a->cmd), list);
        if (r == NEEDS_OPT) {
            char names[160];
            opts_names(f->opts, names, sizeof names);
            fprintf(stderr, "%s %s's configuration; %s no effect with %s\n",
                    n == 1 ? "sets" : "set", names, n == 1 ? "it has" : "they have",
                    e->opts_what);
        } else if (r == NEEDS_ONE) {
            fprintf(stderr, "%s no effect on %s (each run prints only its summary and writes "
                            "its metrics to --out DIR/<run>.jsonl)\n", has, cmd_word(a->cmd));
        } else if (r == NEEDS_RUN) {
            fprintf(stderr, "%s no effect on a plan (it trains nothing)\n", has);
        } else if (r == NEEDS_GPT) {
            fprintf(stderr, "%s no effect with --shapes (the model is the shape file's)\n", has);
        } else if (r == NEEDS_ASYNC) {
            fprintf(stderr, "%s effect with %s\n", takes, e->async_why);
        } else if (r == NEEDS_NVME) {
            fprintf(stderr, "%s effect with --tiers device,host,nvme or device,nvme\n", takes);
        } else if (r == NEEDS_RANKS) {
            fprintf(stderr, "%s effect with more than one rank (%s); this run has one\n", takes,
                    e->ranks_how);
        } else if (r == NEEDS_LINES) {
            fprintf(stderr, "%s no effect with --quiet (it prints only the summary)\n", has);
        } else if (r == NEEDS_SAVE) {
            fprintf(stderr, "%s effect with --save-every or --save-after-load\n", takes);
        } else {
            fprintf(stderr, "%s effect with a --data directory; %s is a file\n", takes,
                    a->o.data_path);
        }
    }
}

/* The context of train, sweep-staleness and plan: one matrix optimizer. */
static effect_ctx effect_of(const train_args *a, int world)
{
    const gpt_train_options *o = &a->o;
    gpt_refresh_info refresh;
    gpt_optimizer_refresh_info(&o->strata, &refresh);
    static char what[64];
    struct stat st;
    snprintf(what, sizeof what, "--optimizer %s",
             strata_optimizer_name(o->strata.matrix_optimizer));
    effect_ctx e = {
        .opts = 1u << o->strata.matrix_optimizer,
        .opts_what = what,
        .async = refresh.async && (o->strata.async || o->auto_staleness || a->cmd == CMD_SWEEP),
        .async_why = !refresh.async ? "--async, which has none with this --optimizer" : "--async",
        .nvme = a->nvme_wanted,
        .lines = !o->quiet,
        .save = o->save_every > 0 || o->save_after_load,
        .run = a->cmd != CMD_PLAN,
        .one = a->cmd != CMD_SWEEP && a->cmd != CMD_RACE,
        .dir = !o->data_path || stat(o->data_path, &st) != 0 || S_ISDIR(st.st_mode),
        .gpt = !(a->cmd == CMD_PLAN && a->shapes),
        .world = world,
        .ranks_how = a->cmd == CMD_PLAN ? "--world N" : a->cmd == CMD_TRAIN
                                                          ? "mpirun -np N strata train"
                                                          : "only train runs on several ranks",
    };
    return e;
}

/* ---- commands */

/* SIGINT and SIGTERM: the first asks the run to stop after the step in
 * progress (it then prints and writes its summary and removes its tier
 * files; the command exits 128 + the signal's number: 130, 143); a second
 * one ends the process at once (the nvme tier's file has no name, so
 * nothing is left behind either way). A second signal counts only when it
 * comes STOP_GRACE_S or more after the first: `timeout -s TERM`, `kill --
 * -PGID` and a terminal's Ctrl-C deliver one signal to every process of the
 * group, and a wrapper (timeout, a shell, a launcher) that forwards its own
 * copy makes two arrive within microseconds; those are one request (issue
 * #22 item 9). clock_gettime is async-signal-safe (POSIX.1-2008, signal-
 * safety(7)). */
#define STOP_GRACE_S 0.5
static volatile sig_atomic_t stop_signal;
static struct timespec stop_first; /* written once, before stop_signal */

static void on_stop_signal(int sig)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (stop_signal) {
        const double since = (double)(now.tv_sec - stop_first.tv_sec) +
                             1e-9 * (double)(now.tv_nsec - stop_first.tv_nsec);
        if (since < STOP_GRACE_S)
            return; /* a copy of the first (a process-group signal) */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_first = now;
    stop_signal = sig;
    static const char msg[] = "\nstrata: stopping after this step (again to stop at once)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void catch_stop_signals(gpt_train_options *o)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT); /* the handler never interrupts itself */
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    o->stop = &stop_signal;
}

/* main's argv, for the re-execution with a better OpenBLAS core. */
static char **main_argv;

/* What a successful parse printed under an MPI launcher (its notes), held
 * until the communicator gives the rank: rank 0 says it (say_held). */
static FILE *held_notes;

static void say_held(int rank)
{
    if (!held_notes)
        return;
    if (rank == 0) {
        char buf[4096];
        size_t got;
        rewind(held_notes);
        while ((got = fread(buf, 1, sizeof buf, held_notes)) > 0)
            fwrite(buf, 1, got, stderr);
    }
    fclose(held_notes);
    held_notes = NULL;
}

/* parse_train under an MPI launcher: every rank parses the same flags, so a
 * refusal is said once, by rank 0 (a communicator is created only to learn
 * the rank); what parsing printed is held in a temporary file meanwhile,
 * and after a successful parse until the run's communicator exists
 * (say_held: notes once, not once per rank). Issue #22 item 10. */
static int parse_train_once(int argc, char **argv, train_cmd cmd, train_args *a)
{
    if (!strata_comm_mpi_launched())
        return parse_train(argc, argv, cmd, a);
    fflush(stderr);
    FILE *hold = tmpfile();
    const int saved = hold ? dup(STDERR_FILENO) : -1;
    if (saved < 0 || dup2(fileno(hold), STDERR_FILENO) < 0) {
        if (saved >= 0)
            close(saved);
        if (hold)
            fclose(hold);
        return parse_train(argc, argv, cmd, a);
    }
    const int rc = parse_train(argc, argv, cmd, a);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    held_notes = hold;
    if (rc == 0)
        return rc; /* said by rank 0 once the communicator is made */
    int rank = 0;
    if (rc != 100) {
        strata_comm *c = NULL;
        if (strata_comm_mpi_create(NULL, true, &c) == STRATA_OK)
            rank = strata_comm_rank(c);
        strata_comm_destroy(c);
    }
    say_held(rank);
    return rc;
}

/* Under an MPI launcher every process is a rank: the communicator spans
 * them, rank 0 prints and writes the metrics, and an error on any rank ends
 * every rank (MPI_Abort) after printing its message, so that none waits
 * forever in a collective. */
static int cmd_train(int argc, char **argv)
{
    /* OpenBLAS's generic fallback core on a CPU with faster kernels: run
     * again with them (never when the user set OPENBLAS_CORETYPE), before
     * anything is parsed or printed. */
    gpt_blas_core_reexec(main_argv);
    train_args a;
    int rc = parse_train_once(argc, argv, CMD_TRAIN, &a);
    if (rc)
        return rc == 100 ? 0 : rc;
    strata_comm *comm = NULL;
    if (strata_comm_mpi_launched()) {
        strata_status st = strata_comm_mpi_create(NULL, !a.nondeterministic, &comm);
        if (st != STRATA_OK) {
            say_held(0);
            fprintf(stderr, "strata: %s: %s\n", strata_status_str(st), strata_last_error());
            return 1;
        }
        a.o.strata.comm = comm;
        say_held(strata_comm_rank(comm));
        /* mpirun hands ranks a pseudo-terminal even when its own output goes
         * to a file: plain lines unless --progress asks for the bar. */
        if (strata_comm_size(comm) > 1 && a.o.progress < 0)
            a.o.progress = 0;
    }
    const int rank = comm ? strata_comm_rank(comm) : 0;
    if (rank == 0) {
        const effect_ctx e = effect_of(&a, comm ? strata_comm_size(comm) : 1);
        no_effect_notes(&a, &e);
        if (a.o.steps >= GPT_BLAS_PROBE_MIN_STEPS) /* a forced weaker core: measured */
            gpt_blas_core_probe_forced();
        gpt_blas_core bc;
        gpt_blas_core_get(&bc);
        gpt_blas_core_warn(&bc, stderr);
    }
    catch_stop_signals(&a.o);
    gpt_train_result r;
    strata_status st = gpt_train(&a.o, rank == 0 ? stdout : NULL, &r);
    if (st != STRATA_OK && r.config_refused && comm) {
        /* Every rank refused the same options before any collective: said
         * once, by rank 0, and no rank aborts (none waits for another). */
        if (rank == 0)
            fprintf(stderr, "strata: %s: %s\n", strata_status_str(st), strata_last_error());
        strata_comm_destroy(comm);
        return 1;
    }
    if (st != STRATA_OK) {
        fflush(stdout);
        if (comm && strata_comm_size(comm) > 1)
            fprintf(stderr, "strata: rank %d: %s: %s\n", rank, strata_status_str(st),
                    strata_last_error());
        else
            fprintf(stderr, "strata: %s: %s\n", strata_status_str(st), strata_last_error());
        if (st == STRATA_ERR_NOMEM && a.o.strata.host_budget && !a.nvme_wanted && rank == 0 &&
            strstr(strata_last_error(), "no nvme tier"))
            fprintf(stderr, "strata: raise --host-budget-mib, or spill to nvme with --tiers "
                            "device,host,nvme\n");
        fflush(stderr);
        strata_comm_abort(comm, 1); /* ends every rank; returns with one process */
        strata_comm_destroy(comm);
        return 1;
    }
    strata_comm_destroy(comm);
    return r.interrupted ? 128 + r.interrupted : 0;
}

static int cmd_sweep(int argc, char **argv)
{
    train_args a;
    int rc = parse_train(argc, argv, CMD_SWEEP, &a);
    if (rc)
        return rc == 100 ? 0 : rc;
    const strata_optimizer mopt = a.o.strata.matrix_optimizer;
    gpt_refresh_info refresh;
    gpt_optimizer_refresh_info(&a.o.strata, &refresh);
    if (!refresh.async) {
        fprintf(stderr, "strata sweep-staleness: the staleness budget applies to shampoo, soap and "
                        "kl-shampoo, not --optimizer %s\n",
                strata_optimizer_name(mopt));
        return 2;
    }
    if (a.o.strata.async || flag_given(&a, "staleness"))
        fprintf(stderr, "strata sweep-staleness: note: each run sets --async and --staleness "
                        "itself (--values)\n");
    const effect_ctx e = effect_of(&a, 1);
    no_effect_notes(&a, &e);
    strata_sweep_options so = {.train = a.o, .values = a.values, .n_values = a.n_values,
                               .out_dir = a.out_dir};
    if (strata_sweep_check(&so) != STRATA_OK) { /* before the synchronous run */
        fprintf(stderr, "strata %s\n", strata_last_error());
        return 2;
    }
    catch_stop_signals(&a.o);
    so.train = a.o;
    strata_status st = strata_sweep_staleness(&so, stdout);
    if (st == STRATA_OK && stop_signal)
        return 128 + stop_signal;
    if (st != STRATA_OK) {
        fflush(stdout);
        fprintf(stderr, "strata sweep-staleness: %s: %s\n", strata_status_str(st),
                strata_last_error());
        return 1;
    }
    return 0;
}

/* Every run of the race one after another (race.h); a usage error in the
 * run list is reported before any training starts. */
static int cmd_race(int argc, char **argv)
{
    train_args a;
    int rc = parse_train(argc, argv, CMD_RACE, &a);
    if (rc)
        return rc == 100 ? 0 : rc;
    if (a.o.strata.async)
        fprintf(stderr, "strata race: note: each run sets --async itself (NAME-async runs are "
                        "asynchronous and staggered)\n");
    strata_race_options ro = {.train = a.o, .runs = a.runs, .staleness = a.values,
                              .n_staleness = a.n_values, .out_dir = a.out_dir};
    strata_race_run plan[STRATA_RACE_MAX_RUNS];
    int n_plan;
    if (strata_race_plan(&ro, plan, &n_plan) != STRATA_OK) {
        fprintf(stderr, "strata %s\n", strata_last_error());
        return 2;
    }
    effect_ctx e = effect_of(&a, 1);
    e.opts = 0;
    e.async = false;
    for (int i = 0; i < n_plan; i++) {
        e.opts |= 1u << plan[i].optimizer;
        e.async = e.async || plan[i].async;
    }
    static char runs[200];
    char names[160];
    opts_names(e.opts, names, sizeof names);
    snprintf(runs, sizeof runs, "the race's runs (%s)", names);
    e.opts_what = runs;
    e.async_why = "an asynchronous run (NAME-async in --runs)";
    no_effect_notes(&a, &e);
    catch_stop_signals(&a.o);
    ro.train = a.o;
    strata_status st = strata_race(&ro, stdout);
    if (st == STRATA_OK && stop_signal)
        return 128 + stop_signal;
    if (st != STRATA_OK) {
        fflush(stdout);
        fprintf(stderr, "strata race: %s: %s\n", strata_status_str(st), strata_last_error());
        return 1;
    }
    return 0;
}

/* ---- strata ckpt inspect|verify DIR */

/* --hash: one line per logical tensor, "weights NAME" from model.safetensors
 * and "state NAME" from whichever rank's file holds it (replicas of shard
 * groups must agree), sorted by name: two checkpoints of the same state,
 * written by different numbers of ranks or layouts, print the same lines. */
typedef struct hash_line {
    char *key;  /* "weights NAME" or "state NAME" */
    char *rest; /* dtype, shape, step, digest */
} hash_line;

typedef struct ckpt_view {
    bool table, hash;
    bool header; /* the table's header is printed (at its first row) */
    int tensors, bad;
    uint64_t bytes;
    hash_line *lines;
    int n_lines, cap_lines;
    bool oom;
} ckpt_view;

static void hash_add(ckpt_view *v, const strata_ckpt_entry *e)
{
    if (v->n_lines == v->cap_lines) {
        const int cap = v->cap_lines ? 2 * v->cap_lines : 256;
        hash_line *nl = realloc(v->lines, (size_t)cap * sizeof *nl);
        if (!nl) {
            v->oom = true;
            return;
        }
        v->lines = nl;
        v->cap_lines = cap;
    }
    const bool weights = strcmp(e->file, "model.safetensors") == 0;
    char *key = malloc(strlen(e->tensor) + 9), *rest = malloc(strlen(e->shape) + 128);
    if (!key || !rest) {
        free(key);
        free(rest);
        v->oom = true;
        return;
    }
    sprintf(key, "%s %s", weights ? "weights" : "state", e->tensor);
    sprintf(rest, "%s %s step %lld %s", e->dtype, e->shape, (long long)e->step, e->sha256);
    v->lines[v->n_lines++] = (hash_line){key, rest};
}

static int hash_cmp(const void *a, const void *b)
{
    const hash_line *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->rest, y->rest);
}

/* Print the sorted lines; 1 when two replicas of one tensor differ. */
static int hash_print(ckpt_view *v)
{
    int bad = 0;
    if (v->n_lines > 0) /* lines is NULL when nothing was read */
        qsort(v->lines, (size_t)v->n_lines, sizeof *v->lines, hash_cmp);
    for (int i = 0; i < v->n_lines; i++) {
        const bool dup = i > 0 && strcmp(v->lines[i].key, v->lines[i - 1].key) == 0;
        if (dup && strcmp(v->lines[i].rest, v->lines[i - 1].rest) != 0) {
            fprintf(stderr, "strata ckpt inspect: the replicas of %s differ\n", v->lines[i].key);
            bad = 1;
        }
        if (!dup)
            printf("%s %s\n", v->lines[i].key, v->lines[i].rest);
    }
    for (int i = 0; i < v->n_lines; i++) {
        free(v->lines[i].key);
        free(v->lines[i].rest);
    }
    free(v->lines);
    return bad;
}

static void ckpt_row(void *user, const strata_ckpt_entry *e)
{
    ckpt_view *v = user;
    v->tensors += e->tensor[0] != '\0';
    v->bad += e->status != STRATA_OK;
    v->bytes += e->bytes;
    if (v->hash) {
        if (e->status == STRATA_OK && e->tensor[0])
            hash_add(v, e);
        else if (e->status != STRATA_OK)
            fprintf(stderr, "strata ckpt inspect: %s%s%s: %s: %s\n", e->file,
                    e->tensor[0] ? " tensor " : "", e->tensor, strata_status_str(e->status),
                    e->message);
    } else if (v->table) {
        /* No manifest: nothing to tabulate, the error is said once (stderr). */
        if (!v->header && e->status != STRATA_OK && !e->tensor[0] &&
            strcmp(e->file, "manifest.json") == 0)
            return;
        if (!v->header)
            printf("%-44s %-24s %-5s %5s %-6s %8s %12s  %s\n", "tensor", "file", "dtype",
                   "owner", "tier", "step", "bytes", "checksum");
        v->header = true;
        char owner[16];
        snprintf(owner, sizeof owner, "%d", e->owner);
        printf("%-44s %-24s %-5s %5s %-6s %8lld %12llu  %s%s%s\n",
               e->tensor[0] ? e->tensor : "(file)", e->file, e->dtype, e->owner < 0 ? "-" : owner,
               e->tier[0] ? e->tier : "-", (long long)e->step, (unsigned long long)e->bytes,
               e->status == STRATA_OK ? "ok" : strata_status_str(e->status),
               e->message && e->message[0] ? ": " : "", e->message ? e->message : "");
    } else if (e->status != STRATA_OK) {
        fprintf(stderr, "strata ckpt verify: %s%s%s: %s: %s\n", e->file,
                e->tensor[0] ? " tensor " : "", e->tensor, strata_status_str(e->status),
                e->message);
    }
}

static void ckpt_usage(FILE *f)
{
    fputs("usage: strata ckpt inspect DIR   table of tensors: owner, tier, step, bytes,\n"
          "                                 checksum status\n"
          "       strata ckpt inspect --hash DIR  (or inspect DIR --hash)\n"
          "                                 one line per logical tensor (weights, and\n"
          "                                 optimizer state from whichever rank holds\n"
          "                                 it): dtype, shape, step, SHA-256; sorted by\n"
          "                                 name, the same for any number of ranks or\n"
          "                                 layout that saved it\n"
          "       strata ckpt verify DIR    exit 0 only when every file and checksum is\n"
          "                                 sound\n"
          "       DIR: a checkpoint, or a save folder (--save-dir): its newest\n"
          "       step-* checkpoint, as --resume DIR\n"
          "       (-- before a DIR that starts with '-')\n",
          f);
}

static int cmd_ckpt(int argc, char **argv)
{
    /* --help (or -h, or help) anywhere asks for the usage, never names a
     * directory; an option is --hash (inspect's) or refused, never taken for
     * a directory (exit 2, as every malformed command line). */
    bool help = argc >= 2 && strcmp(argv[1], "help") == 0, hash = false, options = true;
    for (int i = 1; i < argc; i++)
        help = help || strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
    if (help) {
        ckpt_usage(stdout);
        return 0;
    }
    const bool known = argc >= 2 && (strcmp(argv[1], "inspect") == 0 ||
                                     strcmp(argv[1], "verify") == 0);
    if (!known) {
        if (argc >= 2)
            fprintf(stderr, "strata ckpt: unknown subcommand '%s'\n", argv[1]);
        ckpt_usage(stderr);
        return 2;
    }
    const char *dir = NULL;
    int dirs = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (options && strcmp(arg, "--") == 0) {
            options = false;
        } else if (options && strcmp(arg, "--hash") == 0 && strcmp(argv[1], "inspect") == 0) {
            hash = true;
        } else if (options && arg[0] == '-' && arg[1]) {
            fprintf(stderr, "strata ckpt %s: unknown option '%s'%s (see strata ckpt --help)\n",
                    argv[1], arg,
                    strcmp(arg, "--hash") == 0 ? ": --hash belongs to inspect" : "");
            return 2;
        } else {
            dir = arg;
            dirs++;
        }
    }
    if (dirs != 1) {
        fprintf(stderr, "strata ckpt %s: expects one checkpoint directory%s\n", argv[1],
                dirs > 1 ? ", got several" : "");
        ckpt_usage(stderr);
        return 2;
    }
    /* A save folder (step-* checkpoints, no manifest of its own): its newest
     * checkpoint, as --resume DIR reads it, and said which. */
    char newest[4096];
    bool picked = false;
    if (gpt_checkpoint_resolve(dir, newest, sizeof newest, &picked) == STRATA_OK && picked) {
        fprintf(stderr, "strata ckpt %s: %s is a save folder: its newest checkpoint, %s\n",
                argv[1], dir, newest);
        dir = newest;
    }
    const char *hash_dir = dir;
    if (hash) {
        ckpt_view v = {.hash = true};
        strata_status st = strata_ckpt_verify(hash_dir, ckpt_row, &v);
        const int bad = hash_print(&v);
        if (st != STRATA_OK || v.oom) {
            fprintf(stderr, "strata ckpt inspect: %s: %s\n", strata_status_str(st),
                    v.oom ? "out of memory" : strata_last_error());
            return 1;
        }
        return bad;
    }
    ckpt_view v = {.table = strcmp(argv[1], "inspect") == 0};
    strata_status st = strata_ckpt_verify(dir, ckpt_row, &v);
    if (st != STRATA_OK && !v.table && v.bad > 0)
        return 1; /* each problem was reported once, by ckpt_row */
    if (st != STRATA_OK) {
        fprintf(stderr, "strata ckpt %s: %s: %s\n", argv[1], strata_status_str(st),
                strata_last_error());
        return 1;
    }
    printf("%s: %d tensors, %.1f MiB, every file and checksum sound\n", dir, v.tensors,
           v.bytes / 1048576.0);
    return 0;
}


/* ---- plan */

static strata_role role_parse(const char *s, bool *ok)
{
    static const struct { const char *n; strata_role r; } roles[] = {
        {"auto", STRATA_ROLE_AUTO},     {"matrix", STRATA_ROLE_MATRIX},
        {"embedding", STRATA_ROLE_EMBEDDING}, {"head", STRATA_ROLE_HEAD},
        {"vector", STRATA_ROLE_VECTOR}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(s, roles[i].n) == 0) {
            *ok = true;
            return roles[i].r;
        }
    *ok = false;
    return STRATA_ROLE_AUTO;
}

/* A shape file: {"model": NAME, "source": URL, "params": [{"name", "shape":
 * [..], "role", "layer"}, ...]}. *descs and *names are the caller's to free. */
static int shapes_load(const char *path, strata_param_desc **descs, int *n, char **model,
                       json_object **root)
{
    *root = json_object_from_file(path);
    if (!*root) {
        fprintf(stderr, "strata: plan: cannot read the shape file %s: %s\n", path,
                json_util_get_last_err());
        return 1;
    }
    json_object *params = NULL, *m = NULL;
    if (!json_object_object_get_ex(*root, "params", &params) ||
        !json_object_is_type(params, json_type_array) || json_object_array_length(params) == 0) {
        fprintf(stderr, "strata: plan: %s has no \"params\" list\n", path);
        return 1;
    }
    *model = json_object_object_get_ex(*root, "model", &m) ? (char *)json_object_get_string(m)
                                                           : (char *)path;
    const int count = (int)json_object_array_length(params);
    *descs = calloc((size_t)count, sizeof **descs);
    if (!*descs)
        return 1;
    for (int i = 0; i < count; i++) {
        json_object *p = json_object_array_get_idx(params, (size_t)i), *v = NULL;
        strata_param_desc *d = &(*descs)[i];
        d->optimizer = STRATA_OPTIM_DEFAULT;
        if (json_object_object_get_ex(p, "name", &v))
            d->name = json_object_get_string(v);
        json_object *shape = NULL;
        const bool has_shape = json_object_object_get_ex(p, "shape", &shape) &&
                               json_object_is_type(shape, json_type_array);
        const int nd = has_shape ? (int)json_object_array_length(shape) : -1;
        if (!d->name || nd < 1 || nd > STRATA_MAX_DIMS) {
            fprintf(stderr, "strata: plan: %s: parameter %d needs a name and a shape of 1 to %d "
                            "sides\n", path, i, STRATA_MAX_DIMS);
            return 1;
        }
        d->ndim = nd;
        for (int k = 0; k < nd; k++)
            d->shape[k] = json_object_get_int64(json_object_array_get_idx(shape, (size_t)k));
        bool ok = true;
        if (json_object_object_get_ex(p, "role", &v))
            d->role = role_parse(json_object_get_string(v), &ok);
        if (!ok) {
            fprintf(stderr, "strata: plan: %s: '%s': unknown role '%s' (auto, matrix, "
                            "embedding, head, vector)\n", path, d->name, json_object_get_string(v));
            return 1;
        }
        if (json_object_object_get_ex(p, "layer", &v))
            d->layer = json_object_get_int(v);
    }
    *n = count;
    return 0;
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void plan_print_rank(const strata_plan_rank *r, int rank)
{
    if (r->nvme)
        printf("rank %d: %.1f MiB of memory (%.2f GiB) + %.1f MiB on nvme (%.2f GiB)\n", rank,
               mib(r->memory), (double)r->memory / 1073741824.0, mib(r->nvme),
               (double)r->nvme / 1073741824.0);
    else
        printf("rank %d: %.1f MiB (%.2f GiB)\n", rank, mib(r->total),
               (double)r->total / 1073741824.0);
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        uint64_t tier = 0;
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
            tier += r->bytes[t][k];
        if (!tier)
            continue;
        printf("  %-11s %10.1f |", strata_ledger_tier_name(t), mib(tier));
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
            if (r->bytes[t][k])
                printf(" %s %.1f", strata_ledger_kind_name(k), mib(r->bytes[t][k]));
        printf("\n");
    }
}

static json_object *plan_rank_json(const strata_plan_rank *r)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "total", json_object_new_int64((int64_t)r->total));
    json_object_object_add(j, "memory", json_object_new_int64((int64_t)r->memory));
    json_object_object_add(j, "nvme_bytes", json_object_new_int64((int64_t)r->nvme));
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        json_object *jt = NULL;
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
            if (!r->bytes[t][k])
                continue;
            if (!jt)
                jt = json_object_new_object();
            json_object_object_add(jt, strata_ledger_kind_name(k),
                                   json_object_new_int64((int64_t)r->bytes[t][k]));
        }
        if (jt)
            json_object_object_add(j, strata_ledger_tier_name(t), jt);
    }
    json_object_object_add(j, "optimizer_s", json_object_new_double(r->optimizer_seconds));
    json_object_object_add(j, "refresh_round_s", json_object_new_double(r->refresh_round_seconds));
    json_object_object_add(j, "refresh_serial_s",
                           json_object_new_double(r->refresh_serial_seconds));
    json_object_object_add(j, "owned_params", json_object_new_int(r->owned_params));
    json_object_object_add(j, "owned_blocks", json_object_new_int(r->owned_blocks));
    json_object_object_add(j, "blocks_on_nvme", json_object_new_int(r->blocks_on_nvme));
    json_object_object_add(j, "paged_params", json_object_new_int(r->paged_params));
    return j;
}

static uint64_t plan_host_roots(const strata_plan_rank *r)
{
    return r->bytes[STRATA_LEDGER_HOST][STRATA_LEDGER_ROOTS] +
           r->bytes[STRATA_LEDGER_HOST_PINNED][STRATA_LEDGER_ROOTS];
}

/* The ranks of the plan whose `key` equals rank r0's and are not yet in
 * done[] (marked now), as "rank 3" or "ranks 0-2,5" into buf; their count. */
static int plan_rank_group(const strata_plan_rank *ranks, int W, int r0,
                           int (*key)(const strata_plan_rank *), bool *done, char *buf, size_t n)
{
    int count = 0, used = 0;
    buf[0] = '\0';
    for (int r = r0; r < W; r++) {
        if (done[r] || key(&ranks[r]) != key(&ranks[r0]))
            continue;
        done[r] = true;
        count++;
        int e = r; /* the run r..e of consecutive members */
        while (e + 1 < W && !done[e + 1] && key(&ranks[e + 1]) == key(&ranks[r0]))
            done[++e] = true, count++;
        if (used < (int)n)
            used += snprintf(buf + used, n - (size_t)used, "%s%d", used ? "," : "", r);
        if (e > r && used < (int)n)
            used += snprintf(buf + used, n - (size_t)used, "-%d", e);
        r = e;
    }
    /* "rank 3" / "ranks 0-2,5" */
    char list[256];
    snprintf(list, sizeof list, "%s", buf);
    snprintf(buf, n, "%s %s", count == 1 ? "rank" : "ranks", list);
    return count;
}

/* A placement: the blocks on nvme and the blocks owned, as one key. */
static int plan_key_placement(const strata_plan_rank *r)
{
    return r->blocks_on_nvme * (1 << 20) + r->owned_blocks;
}

static int plan_key_paged(const strata_plan_rank *r)
{
    return r->paged_params;
}

/* At most this many distinct placements (paging counts) are printed, one line
 * each; --json lists every rank's. */
#define PLAN_GROUPS_SHOWN 6

static int cmd_plan(int argc, char **argv)
{
    train_args a;
    int rc = parse_train(argc, argv, CMD_PLAN, &a);
    if (rc)
        return rc == 100 ? 0 : rc;
    const int W = a.world, rpn = a.ranks_per_node ? a.ranks_per_node : a.world;
    if (W % rpn != 0) {
        fprintf(stderr, "strata: plan: --ranks-per-node %d must divide --world %d\n", rpn, W);
        return 2;
    }
    const effect_ctx e = effect_of(&a, W);
    no_effect_notes(&a, &e);
    strata_param_desc *descs = NULL;
    gpt_tensor *tensors = NULL;
    char *names = NULL, *model = NULL;
    json_object *root = NULL;
    strata_plan_rank *ranks = NULL;
    int n = 0;
    rc = 1;
    char gpt_name[160];
    strata_plan_options opt = {.world_size = W, .ranks_per_node = rpn,
                               .workers = a.plan_workers, .step_seconds = a.step_ms / 1e3,
                               .activation_bytes = a.activation_bytes};
    /* The trainer registers its weights managed over several owner-sharded ranks. */
    opt.managed = W > 1 && a.o.strata.sharding == STRATA_SHARD_OWNER &&
                  a.o.strata.backend == STRATA_BACKEND_CPU;
    if (a.shapes) {
        if (shapes_load(a.shapes, &descs, &n, &model, &root) != 0)
            goto out;
        opt.managed = false; /* a shape file's loop is the caller's */
    } else {
        if (a.o.vocab_size > 0) /* the rows of wte and the tied head */
            a.o.model.vocab = a.o.vocab_size;
        const int count = gpt_describe(&a.o.model, NULL, NULL, 0);
        if (count < 1) {
            fprintf(stderr, "strata: plan: invalid model (--layers, --d-model, --heads)\n");
            goto out;
        }
        tensors = calloc((size_t)count, sizeof *tensors);
        names = calloc((size_t)count, GPT_DESCRIBE_NAME_LEN);
        descs = calloc((size_t)count, sizeof *descs);
        if (!tensors || !names || !descs)
            goto out;
        gpt_describe(&a.o.model, tensors, names, count);
        for (int i = 0; i < count; i++) {
            const gpt_tensor *t = &tensors[i];
            descs[i] = (strata_param_desc){
                .name = t->name, .ndim = t->ndim,
                .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1},
                .layer = t->layer,
                .role = t->role == GPT_ROLE_EMBEDDING ? STRATA_ROLE_EMBEDDING
                        : t->role == GPT_ROLE_MATRIX  ? STRATA_ROLE_MATRIX
                                                      : STRATA_ROLE_VECTOR,
                .optimizer = STRATA_OPTIM_DEFAULT,
            };
        }
        n = count;
        /* What the trainer holds besides strata's: the activations of one
         * (B, T) batch (gpt_activation_bytes, as the trainer charges them). */
        if (!a.activation_bytes)
            opt.activation_bytes = gpt_activation_bytes(&a.o.model, a.o.batch, a.o.seq_len);
        snprintf(gpt_name, sizeof gpt_name, "example GPT (%d layers, d_model %d, %d heads, seq %d, "
                 "batch %d)", a.o.model.n_layer, a.o.model.d_model, a.o.model.n_head,
                 a.o.seq_len, a.o.batch);
        model = gpt_name;
    }
    ranks = calloc((size_t)W, sizeof *ranks);
    if (!ranks)
        goto out;
    strata_plan_summary sum;
    const double t0 = wall_seconds();
    strata_status st = strata_plan_estimate(&a.o.strata, descs, n, &opt, ranks, &sum);
    const double elapsed = wall_seconds() - t0;
    if (st != STRATA_OK) {
        fprintf(stderr, "strata: plan: %s: %s\n", strata_status_str(st), strata_last_error());
        goto out;
    }
    const char *mopt = strata_optimizer_name(a.o.strata.matrix_optimizer);
    uint64_t tmin = UINT64_MAX, tsum = 0;
    for (int r = 0; r < W; r++) {
        tmin = ranks[r].total < tmin ? ranks[r].total : tmin;
        tsum += ranks[r].total;
    }
    const double tmean = (double)tsum / W;
    if (a.json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "model", json_object_new_string(model));
        json_object_object_add(j, "world", json_object_new_int(W));
        json_object_object_add(j, "ranks_per_node", json_object_new_int(rpn));
        json_object_object_add(j, "optimizer", json_object_new_string(mopt));
        json_object_object_add(j, "params", json_object_new_int(sum.n_params));
        json_object_object_add(j, "elements", json_object_new_int64(sum.elements));
        json_object_object_add(j, "matrices", json_object_new_int(sum.n_matrix));
        json_object_object_add(j, "blocks", json_object_new_int(sum.n_blocks));
        json_object_object_add(j, "makespan_s", json_object_new_double(sum.makespan));
        json_object_object_add(j, "lower_bound_s", json_object_new_double(sum.lower_bound));
        json_object_object_add(j, "workers", json_object_new_int(sum.workers));
        json_object_object_add(j, "refresh_round_s",
                               json_object_new_double(sum.refresh_round_seconds));
        json_object_object_add(j, "frequency", json_object_new_int(sum.frequency));
        json_object_object_add(j, "min_frequency", json_object_new_int(sum.min_frequency));
        json_object_object_add(j, "min_staleness", json_object_new_int(sum.min_staleness));
        json_object_object_add(j, "max_total", json_object_new_int64((int64_t)sum.max_total));
        json_object_object_add(j, "max_memory", json_object_new_int64((int64_t)sum.max_memory));
        json_object_object_add(j, "max_nvme", json_object_new_int64((int64_t)sum.max_nvme));
        if (a.memory_gib > 0) /* the verdict on memory alone, as the text's */
            json_object_object_add(j, "fits",
                                   json_object_new_boolean((double)sum.max_memory <=
                                                           a.memory_gib * 1073741824.0));
        json_object_object_add(j, "plan_s", json_object_new_double(elapsed));
        json_object *jr = json_object_new_array();
        for (int r = 0; r < W; r++)
            json_object_array_add(jr, plan_rank_json(&ranks[r]));
        json_object_object_add(j, "ranks", jr);
        printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
        json_object_put(j);
        rc = 0;
        goto out;
    }
    printf("model: %s | %d tensors, %.1fM parameters: %d matrices (%.1fM) -> %s, %d tail -> "
           "adamw\n", model, sum.n_params, sum.elements / 1e6, sum.n_matrix,
           sum.matrix_elements / 1e6, mopt, sum.n_tail);
    printf("run: %d rank%s (%d per node), sharding %s, %s, F = %d%s\n", W, W == 1 ? "" : "s", rpn,
           gpt_enum_name_of(strata_cfg_names_sharding, (int)a.o.strata.sharding, "?"),
           a.o.strata.async ? "async" : "sync", sum.frequency,
           opt.managed ? ", managed weights" : "");
    printf("per-rank bytes at the peak (MiB), as the memory ledger counts them:\n");
    const int shown = W <= 2 ? W : 1;
    for (int r = 0; r < shown; r++)
        plan_print_rank(&ranks[r], r);
    if (W > 1)
        printf("ranks: total min %.1f, mean %.1f, max %.1f MiB (max/mean %.3f)\n", mib(tmin),
               tmean / 1048576.0, mib(sum.max_total), sum.max_total / (tmean > 0 ? tmean : 1));
    /* Every rank's placement (ranks own different blocks, so one may spill to
     * nvme while rank 0 does not): one line per distinct placement. */
    bool any_nvme = false, any_paged = false;
    for (int r = 0; r < W; r++) {
        any_nvme |= ranks[r].blocks_on_nvme > 0;
        any_paged |= ranks[r].paged_params > 0;
    }
    bool *done = calloc((size_t)W, sizeof *done);
    if (!done) {
        fprintf(stderr, "strata: plan: out of memory\n");
        rc = 1;
        goto out;
    }
    if (a.o.strata.async && any_nvme) {
        int groups = 0, left = 0;
        for (int r = 0; r < W; r++) {
            if (done[r])
                continue;
            char who[320];
            if (groups == PLAN_GROUPS_SHOWN) {
                left += plan_rank_group(ranks, W, r, plan_key_placement, done, who, sizeof who);
                continue;
            }
            const int m = plan_rank_group(ranks, W, r, plan_key_placement, done, who, sizeof who);
            groups++;
            uint64_t lo = UINT64_MAX, hi = 0;
            for (int q = 0; q < W; q++)
                if (plan_key_placement(&ranks[q]) == plan_key_placement(&ranks[r])) {
                    const uint64_t b = plan_host_roots(&ranks[q]);
                    lo = b < lo ? b : lo;
                    hi = b > hi ? b : hi;
                }
            printf("placement: %s %s %d of %d result blocks on nvme%s; host-tier roots %.1f",
                   who, m == 1 ? "has" : "have", ranks[r].blocks_on_nvme, ranks[r].owned_blocks,
                   ranks[r].blocks_on_nvme ? " (roots streamed through the residency pool)" : "",
                   mib(lo));
            if (hi > lo)
                printf("-%.1f", mib(hi));
            printf(" MiB%s\n", m > 1 && hi == lo ? " each" : "");
        }
        if (left)
            printf("placement: %d more rank%s with other placements (--json: "
                   "ranks[].blocks_on_nvme)\n", left, left == 1 ? "" : "s");
    }
    if (a.o.strata.async && a.o.strata.host_budget) {
        int over = 0, worst = -1;
        for (int r = 0; r < W; r++)
            if (plan_host_roots(&ranks[r]) > a.o.strata.host_budget) {
                over++;
                if (worst < 0 || plan_host_roots(&ranks[r]) > plan_host_roots(&ranks[worst]))
                    worst = r;
            }
        char who[64];
        if (over == 1)
            snprintf(who, sizeof who, "rank %d's host-tier roots (%.1f MiB)", worst,
                     mib(plan_host_roots(&ranks[worst])));
        else
            snprintf(who, sizeof who, "%d ranks' host-tier roots (rank %d's %.1f MiB the most)",
                     over, worst, mib(plan_host_roots(&ranks[worst])));
        if (over)
            printf("note: %s exceed --host-budget-mib %.0f: the run is refused (%s)\n", who,
                   mib(a.o.strata.host_budget),
                   a.o.strata.nvme_dir ? "even the spill layout does not fit"
                                       : "--tiers device,host,nvme would spill to nvme");
    }
    memset(done, 0, (size_t)W * sizeof *done);
    if (any_paged) {
        int groups = 0, left = 0;
        for (int r = 0; r < W; r++) {
            if (done[r])
                continue;
            char who[320];
            if (groups == PLAN_GROUPS_SHOWN) {
                left += plan_rank_group(ranks, W, r, plan_key_paged, done, who, sizeof who);
                continue;
            }
            const int m = plan_rank_group(ranks, W, r, plan_key_paged, done, who, sizeof who);
            groups++;
            /* the figures of the group's rank with the most on nvme */
            int big = r;
            uint64_t most = 0;
            for (int q = 0; q < W; q++) {
                if (ranks[q].paged_params != ranks[r].paged_params)
                    continue;
                uint64_t on = 0;
                for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
                    if (k != STRATA_LEDGER_ROOTS)
                        on += ranks[q].bytes[STRATA_LEDGER_NVME][k];
                if (on >= most && (on > most || q == r))
                    most = on, big = q;
            }
            const strata_plan_rank *b = &ranks[big];
            if (!b->paged_params) {
                printf("paging: %s %s no matrix's state\n", who, m == 1 ? "pages" : "page");
                continue;
            }
            printf("paging: %s %s %d matrices' state to nvme between their steps (%.1f MiB",
                   who, m == 1 ? "pages" : "page", b->paged_params, mib(most));
            if (m > 1)
                printf(" on rank %d, the most", big);
            printf(": factors %.1f, moments %.1f, grafting %.1f), two at most resident\n",
                   mib(b->bytes[STRATA_LEDGER_NVME][STRATA_LEDGER_FACTORS]),
                   mib(b->bytes[STRATA_LEDGER_NVME][STRATA_LEDGER_MOMENTS]),
                   mib(b->bytes[STRATA_LEDGER_NVME][STRATA_LEDGER_GRAFTING]));
        }
        if (left)
            printf("paging: %d more rank%s with other counts (--json: ranks[].paged_params)\n",
                   left, left == 1 ? "" : "s");
    }
    free(done);
    if (a.memory_gib > 0) {
        /* memory only: the nvme tier is disk, not memory */
        const double cap = a.memory_gib * 1073741824.0;
        printf("memory: the largest rank needs %.2f GiB of memory", sum.max_memory / 1073741824.0);
        if (sum.max_nvme)
            printf(" (+ %.2f GiB on nvme)", sum.max_nvme / 1073741824.0);
        printf(" of %.1f GiB: %s\n", a.memory_gib,
               (double)sum.max_memory <= cap ? "fits" : "does NOT fit");
    }
    printf("owner plan: makespan %.4g s per step, lower bound %.4g s (ratio %.3f), %s\n",
           sum.makespan, sum.lower_bound,
           sum.lower_bound > 0 ? sum.makespan / sum.lower_bound : 1.0,
           W == 1 ? "one rank" : sum.milp ? "exact MILP" : "greedy LPT");
    if (sum.n_blocks > 0) {
        double serial = 0;
        for (int r = 0; r < W; r++)
            serial = ranks[r].refresh_serial_seconds > serial ? ranks[r].refresh_serial_seconds
                                                              : serial;
        printf("refresh round: %d blocks; the slowest rank's round %.3g s on %d worker%s "
               "(%.3g s on one)\n", sum.n_blocks, sum.refresh_round_seconds, sum.workers,
               sum.workers == 1 ? "" : "s", serial);
        if (opt.step_seconds > 0) {
            printf("at %.1f ms per step: smallest precondition frequency %d", a.step_ms,
                   sum.min_frequency);
            if (sum.min_staleness >= 0)
                printf(", smallest staleness at F = %d: %d (--async --staleness %d)\n",
                       sum.frequency, sum.min_staleness, sum.min_staleness);
            else
                printf("; at F = %d the workers fall behind%s (raise "
                       "--precondition-frequency to %d)\n", sum.frequency,
                       sum.max_staleness >= 0 ? " or S passes the family's limit" : "",
                       sum.min_frequency);
        } else {
            printf("(give --step-ms for the smallest frequency and staleness)\n");
        }
    }
    printf("cost model: fitted on this machine (%d anchor%s measured now, %.2f s); plan %.2f s\n",
           sum.cost_measured, sum.cost_measured == 1 ? "" : "s", sum.cost_seconds, elapsed);
    /* a plan that does not fit the --memory-gib cap is a finding a script
     * checks: exit 1 (everything above is still printed) */
    rc = a.memory_gib > 0 && (double)sum.max_memory > a.memory_gib * 1073741824.0 ? 1 : 0;
out:
    free(ranks);
    free(descs);
    free(tensors);
    free(names);
    if (root)
        json_object_put(root);
    return rc;
}

int main(int argc, char **argv)
{
    main_argv = argv;
    if (argc < 2) {
        usage_main(stderr);
        return 2;
    }
    if (strcmp(argv[1], "__blas-probe") == 0) /* internal: gpt_blas_core_probe_forced */
        return gpt_blas_core_probe_main();
    if (strcmp(argv[1], "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "sweep-staleness") == 0)
        return cmd_sweep(argc - 1, argv + 1);
    if (strcmp(argv[1], "race") == 0)
        return cmd_race(argc - 1, argv + 1);
    if (strcmp(argv[1], "ckpt") == 0)
        return cmd_ckpt(argc - 1, argv + 1);
    if (strcmp(argv[1], "plan") == 0)
        return cmd_plan(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("strata %s\n", strata_version());
        return 0;
    }
    if (strcmp(argv[1], "help") == 0 && argc >= 3) { /* strata help COMMAND */
        char help_flag[] = "--help";
        char *hargv[] = {argv[2], help_flag, NULL};
        if (strcmp(argv[2], "train") == 0)
            return cmd_train(2, hargv);
        if (strcmp(argv[2], "sweep-staleness") == 0)
            return cmd_sweep(2, hargv);
        if (strcmp(argv[2], "race") == 0)
            return cmd_race(2, hargv);
        if (strcmp(argv[2], "ckpt") == 0)
            return cmd_ckpt(2, hargv);
        if (strcmp(argv[2], "plan") == 0)
            return cmd_plan(2, hargv);
        if (strcmp(argv[2], "help") != 0) {
            fprintf(stderr, "strata: unknown command '%s'\n", argv[2]);
            usage_main(stderr);
            return 2;
        }
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        usage_main(stdout);
        return 0;
    }
    fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage_main(stderr);
    return 2;
}
