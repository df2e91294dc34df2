/* A training run's record and its outputs: terminal lines, JSONL, summary (report.h).
 *
 * The JSONL config record is described by one table (config_keys): each key,
 * which runs record it (matrix optimizers, or a condition such as "the run
 * is asynchronous"), and where its value comes from. A key that records a
 * strata_config field takes its name, kind and offset from the field's row of
 * the config schema (runtime/config_schema.h, SK rows). Consumers (the
 * staleness sweep, plotting scripts) read these keys by name, so a key's
 * spelling and meaning only ever change together with them.
 */
#include "report.h"

#include "backend/blas.h"
#include "blas_core.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/config_schema.h"
#include "settings.h"

struct gpt_report {
    gpt_train_options o;     /* resolved options (a copy) */
    gpt_refresh_info refresh;
    FILE *out;               /* per-step lines and header; NULL when quiet or silent */
    FILE *summary_out;       /* the summary, even when quiet */
    bool tty;                /* progress bar instead of plain lines */
    FILE *metrics;           /* JSONL, or NULL */
    int n;                   /* steps recorded */
    double *step_ms, *opt_ms;
    float *losses;
    float prior[10];         /* losses of the steps before a resume, oldest first */
    int n_prior;
    double wall_seconds;     /* sum of the recorded steps' times */
    double critical_seconds; /* sum of the recorded steps' critical paths */
    double val_loss;         /* the last validation loss, NaN before the first */
    gpt_blas_core blas;      /* the BLAS core the products run on, and why */
    int blas_threads;        /* BLAS threads (the actual count) */
    int step_threads;        /* threads of the plain updates (strata_stats.step_threads) */
};

/* ---- JSON helpers */

static json_object *json_double(double v)
{
    return isfinite(v) ? json_object_new_double(v) : json_object_new_null();
}

/* A float setting, written with the digits it was given (3e-3, not 0.0030000000260770321). */
static json_object *json_float(float v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", (double)v);
    return isfinite(v) ? json_object_new_double_s((double)v, buf) : json_object_new_null();
}

static void json_add_double(json_object *o, const char *k, double v)
{
    json_object_object_add(o, k, json_double(v));
}

static void json_add_int64(json_object *o, const char *k, int64_t v)
{
    json_object_object_add(o, k, json_object_new_int64(v));
}

static void write_json_line(FILE *f, json_object *o)
{
    if (f) {
        fputs(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), f);
        fputc('\n', f);
        fflush(f);
    }
    json_object_put(o);
}

/* ---- the config record */

typedef struct config_ctx {
    const gpt_train_options *o;
    const gpt_run_info *info;
    const gpt_refresh_info *refresh;
    bool async; /* the run is asynchronous: async asked for and the optimizer can */
} config_ctx;

typedef enum config_kind {
    CK_INT,    /* int */
    CK_U64,    /* uint64_t */
    CK_SIZE,   /* size_t */
    CK_BOOL,   /* bool */
    CK_FLOAT,  /* float, written with its given digits */
    CK_DOUBLE, /* double */
    CK_STRING, /* const char *, null when NULL */
    CK_NAME,   /* an enum, written as its name in `names` */
    CK_FN,     /* computed by `get` */
    CK_SCHEMA, /* a strata_config field: kind, offset and key from its schema row */
} config_kind;

typedef enum config_cond {
    WHEN_ALWAYS,
    WHEN_REFRESHES, /* the matrix optimizer refreshes inverse roots or eigenbases */
    WHEN_STAGGER,   /* staggering applies to it */
    WHEN_ASYNC,     /* the run is asynchronous */
} config_cond;

#define FOR(o) (1u << (o))
#define ADAMW FOR(STRATA_OPTIM_ADAMW)
#define SHAMPOO FOR(STRATA_OPTIM_SHAMPOO)
#define MUON FOR(STRATA_OPTIM_MUON)
#define NORMUON FOR(STRATA_OPTIM_NORMUON)
#define DION2 FOR(STRATA_OPTIM_DION2)
#define SOAP FOR(STRATA_OPTIM_SOAP)
#define KL FOR(STRATA_OPTIM_KL_SHAMPOO)
#define OFF(member) offsetof(gpt_train_options, member)

typedef struct config_key {
    const char *key;
    unsigned optimizers;        /* FOR(...) mask of matrix optimizers; 0 = any */
    config_cond when;
    config_kind kind;
    size_t off;                 /* into gpt_train_options */
    const gpt_enum_name *names; /* CK_NAME */
    json_object *(*get)(const config_ctx *c); /* CK_FN */
    int field; /* 1 + the strata_config schema row (runtime/config_schema.h) the key
                  records, its name, kind and offset from there (SK); 0: a trainer key */
} config_key;

/* The strata_config fields: the key, the kind and the offset come from the
 * schema row `id` (its jsonl column); names for an enum, get when computed. */
#define SK(id, opts, cond, nm, fn)                                                             \
    {NULL, opts, cond, CK_SCHEMA, 0, nm, fn, 1 + STRATA_CFG_ID(id)}
STRATA_CFG_TABLE(schema);

static json_object *get_type(const config_ctx *c)
{
    (void)c;
    return json_object_new_string("config");
}

static json_object *get_optimizer(const config_ctx *c)
{
    return json_object_new_string(strata_optimizer_name(c->o->strata.matrix_optimizer));
}

static json_object *get_params(const config_ctx *c)
{
    return json_object_new_int64((int64_t)c->info->params);
}

static json_object *get_data_format(const config_ctx *c)
{
    return json_object_new_string(c->o->data_format == GPT_TRAIN_DATA_TOKENS ? "tokens"
                                                                             : "bytes");
}

static json_object *get_world_size(const config_ctx *c)
{
    return json_object_new_int(c->o->strata.comm ? strata_comm_size(c->o->strata.comm) : 1);
}

static json_object *get_frequency(const config_ctx *c)
{
    return json_object_new_int(c->refresh->frequency);
}

/* The step the runtime starts preconditioning at (-1 means F, 0 means 1), as
 * the matrix family's schedule says. */
static json_object *get_start(const config_ctx *c)
{
    return json_object_new_int((int32_t)c->refresh->start);
}

/* "auto" (the RMS of each matrix's first nonzero gradient) or the constant. */
static json_object *get_kl_init(const config_ctx *c)
{
    const float v = c->o->strata.kl_shampoo.init_factor;
    return v < 0.0f ? json_object_new_string("auto") : json_float(v);
}

static json_object *get_kl_beta(const config_ctx *c)
{
    const strata_kl_shampoo_config *k = &c->o->strata.kl_shampoo;
    return json_float(k->shampoo_beta >= 0.0f ? k->shampoo_beta : k->beta2);
}

/* The AdamW tail's peak lr as the run resolved it (gpt_train_options.tail_lr;
 * with matrix optimizer AdamW it may differ from strata.adamw.lr, the
 * matrices'). */
static json_object *get_tail_lr(const config_ctx *c)
{
    return json_float(c->o->tail_lr >= 0.0f ? c->o->tail_lr : c->o->strata.adamw.lr);
}

static json_object *get_async(const config_ctx *c)
{
    return json_object_new_boolean(c->async);
}

/* Roots on host (with an nvme spill past the budget when nvme_dir is set) or nvme. */
static json_object *get_roots_tier(const config_ctx *c)
{
    return json_object_new_string(strata_tier_kind_name(c->o->strata.roots_tier));
}

static json_object *get_blas_threads(const config_ctx *c)
{
    return json_object_new_int(c->info->blas_threads);
}

static json_object *get_step_threads(const config_ctx *c)
{
    return json_object_new_int(c->info->step_threads);
}

/* The OpenBLAS core ("Cooperlake", "Prescott", ...) and how it was chosen. */
static json_object *get_blas_core(const config_ctx *c)
{
    (void)c;
    gpt_blas_core b;
    gpt_blas_core_get(&b);
    return json_object_new_string(b.core);
}

static json_object *get_blas_core_source(const config_ctx *c)
{
    (void)c;
    gpt_blas_core b;
    gpt_blas_core_get(&b);
    return json_object_new_string(b.source);
}

/* The generic core OpenBLAS picked before strata re-executed (null otherwise). */
static json_object *get_blas_core_from(const config_ctx *c)
{
    (void)c;
    gpt_blas_core b;
    gpt_blas_core_get(&b);
    return b.from ? json_object_new_string(b.from) : json_object_new_null();
}

static json_object *get_workers(const config_ctx *c)
{
    return json_object_new_int(c->info->workers);
}

static json_object *get_unigram(const config_ctx *c)
{
    return json_double(c->info->unigram_val_loss);
}

/* The config record, key by key in the order written: the run's shape, the
 * schedule, the matrix optimizer's own settings (only those of the optimizer
 * in use), the asynchronous runtime when the run is asynchronous. */
static const config_key config_keys[] = {
    {"type", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_type, 0},
    SK(matrix_optimizer, 0, WHEN_ALWAYS, NULL, get_optimizer),
    {"data", 0, WHEN_ALWAYS, CK_STRING, OFF(data_path), NULL, NULL, 0},
    {"data_recursive", 0, WHEN_ALWAYS, CK_BOOL, OFF(data_recursive), NULL, NULL, 0},
    {"data_format", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_data_format, 0},
    {"vocab", 0, WHEN_ALWAYS, CK_INT, OFF(model.vocab), NULL, NULL, 0},
    {"layers", 0, WHEN_ALWAYS, CK_INT, OFF(model.n_layer), NULL, NULL, 0},
    {"d_model", 0, WHEN_ALWAYS, CK_INT, OFF(model.d_model), NULL, NULL, 0},
    {"heads", 0, WHEN_ALWAYS, CK_INT, OFF(model.n_head), NULL, NULL, 0},
    {"seq_len", 0, WHEN_ALWAYS, CK_INT, OFF(seq_len), NULL, NULL, 0},
    {"batch", 0, WHEN_ALWAYS, CK_INT, OFF(batch), NULL, NULL, 0},
    {"steps", 0, WHEN_ALWAYS, CK_INT, OFF(steps), NULL, NULL, 0},
    {"params", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_params, 0},
    {"seed", 0, WHEN_ALWAYS, CK_U64, OFF(seed), NULL, NULL, 0},
    {"world_size", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_world_size, 0},
    SK(sharding, 0, WHEN_ALWAYS, NULL, NULL),
    SK(shard_group_size, 0, WHEN_ALWAYS, NULL, NULL),
    SK(shard_gradients, 0, WHEN_ALWAYS, NULL, NULL),
    {"grad_accum", 0, WHEN_ALWAYS, CK_INT, OFF(grad_accum), NULL, NULL, 0},
    /* the peak learning rate of the matrix optimizer (the trainer's view: one
       key, the field of the optimizer in use) */
    {"lr", SHAMPOO, WHEN_ALWAYS, CK_FLOAT, OFF(strata.shampoo.lr), NULL, NULL, 0},
    {"lr", MUON, WHEN_ALWAYS, CK_FLOAT, OFF(strata.muon.lr), NULL, NULL, 0},
    {"lr", NORMUON, WHEN_ALWAYS, CK_FLOAT, OFF(strata.normuon.lr), NULL, NULL, 0},
    {"lr", DION2, WHEN_ALWAYS, CK_FLOAT, OFF(strata.dion2.lr), NULL, NULL, 0},
    {"lr", SOAP, WHEN_ALWAYS, CK_FLOAT, OFF(strata.soap.lr), NULL, NULL, 0},
    {"lr", KL, WHEN_ALWAYS, CK_FLOAT, OFF(strata.kl_shampoo.lr), NULL, NULL, 0},
    {"lr", ADAMW, WHEN_ALWAYS, CK_FLOAT, OFF(strata.adamw.lr), NULL, NULL, 0},
    SK(adamw_lr, 0, WHEN_ALWAYS, NULL, get_tail_lr), /* the tail's (AdamW's: its own) */
    {"warmup", 0, WHEN_ALWAYS, CK_INT, OFF(warmup), NULL, NULL, 0},
    {"min_lr_ratio", 0, WHEN_ALWAYS, CK_FLOAT, OFF(min_lr_ratio), NULL, NULL, 0},
    SK(max_grad_norm, 0, WHEN_ALWAYS, NULL, NULL),
    {"val_fraction", 0, WHEN_ALWAYS, CK_DOUBLE, OFF(val_fraction), NULL, NULL, 0},
    {"eval_every", 0, WHEN_ALWAYS, CK_INT, OFF(eval_every), NULL, NULL, 0},
    {"eval_batches", 0, WHEN_ALWAYS, CK_INT, OFF(eval_batches), NULL, NULL, 0},
    SK(blas_threads, 0, WHEN_ALWAYS, NULL, get_blas_threads),
    SK(step_threads, 0, WHEN_ALWAYS, NULL, get_step_threads),
    {"blas_core", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_blas_core, 0},
    {"blas_core_source", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_blas_core_source, 0},
    {"blas_core_from", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_blas_core_from, 0},
    /* the matrix optimizer's settings */
    {"weight_decay", SHAMPOO, WHEN_ALWAYS, CK_FLOAT, OFF(strata.shampoo.weight_decay), NULL, NULL,
     0},
    {"weight_decay", MUON, WHEN_ALWAYS, CK_FLOAT, OFF(strata.muon.weight_decay), NULL, NULL, 0},
    {"weight_decay", NORMUON, WHEN_ALWAYS, CK_FLOAT, OFF(strata.normuon.weight_decay), NULL, NULL,
     0},
    {"weight_decay", DION2, WHEN_ALWAYS, CK_FLOAT, OFF(strata.dion2.weight_decay), NULL, NULL, 0},
    {"weight_decay", SOAP, WHEN_ALWAYS, CK_FLOAT, OFF(strata.soap.weight_decay), NULL, NULL, 0},
    {"weight_decay", KL, WHEN_ALWAYS, CK_FLOAT, OFF(strata.kl_shampoo.weight_decay), NULL, NULL,
     0},
    {"weight_decay", ADAMW, WHEN_ALWAYS, CK_FLOAT, OFF(strata.adamw.weight_decay), NULL, NULL, 0},
    SK(precondition_frequency, 0, WHEN_REFRESHES, NULL, get_frequency),
    SK(shampoo_start_preconditioning_step, SHAMPOO, WHEN_ALWAYS, NULL, get_start),
    SK(shampoo_max_preconditioner_dim, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_beta2, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_epsilon, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_epsilon_rel, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_grafting, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_root_method, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(shampoo_momentum, SHAMPOO, WHEN_ALWAYS, NULL, NULL),
    SK(state_dtype_factors, 0, WHEN_ALWAYS, NULL, NULL),
    SK(state_dtype_roots, 0, WHEN_ALWAYS, NULL, NULL),
    SK(state_dtype_moments, 0, WHEN_ALWAYS, NULL, NULL),
    SK(muon_momentum, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_momentum_form, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_scale, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_ns_steps, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_ns_schedule, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_ns_method, MUON, WHEN_ALWAYS, NULL, NULL),
    SK(muon_ns_dtype, MUON, WHEN_ALWAYS, NULL, NULL),
    /* the other Newton-Schulz families' copies (--ns-* set all three) */
    SK(normuon_ns_steps, NORMUON, WHEN_ALWAYS, NULL, NULL),
    SK(normuon_ns_schedule, NORMUON, WHEN_ALWAYS, NULL, NULL),
    SK(normuon_ns_method, NORMUON, WHEN_ALWAYS, NULL, NULL),
    SK(normuon_ns_dtype, NORMUON, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_ns_steps, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_ns_schedule, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_ns_method, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_ns_dtype, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_fraction, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_ef_decay, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(dion2_adjust_lr, DION2, WHEN_ALWAYS, NULL, NULL),
    SK(kl_shampoo_form, KL, WHEN_ALWAYS, NULL, NULL),
    SK(kl_shampoo_init_factor, KL, WHEN_ALWAYS, NULL, get_kl_init),
    SK(kl_shampoo_shampoo_beta, KL, WHEN_ALWAYS, NULL, get_kl_beta),
    SK(kl_shampoo_bias_correction, KL, WHEN_ALWAYS, NULL, NULL),
    SK(stagger_refresh, 0, WHEN_STAGGER, NULL, NULL),
    /* the asynchronous runtime */
    SK(async, 0, WHEN_ALWAYS, NULL, get_async),
    SK(staleness, 0, WHEN_ASYNC, NULL, NULL),
    SK(staleness_warmup, 0, WHEN_ASYNC, NULL, NULL),
    SK(install_mode, 0, WHEN_ASYNC, NULL, NULL),
    SK(stale_correction, 0, WHEN_ASYNC, NULL, NULL),
    SK(workers, 0, WHEN_ASYNC, NULL, get_workers),
    SK(roots_tier, 0, WHEN_ASYNC, NULL, get_roots_tier),
    SK(nvme_dir, 0, WHEN_ASYNC, NULL, NULL),
    SK(host_budget, 0, WHEN_ASYNC, NULL, NULL),
    SK(page_state, 0, WHEN_ASYNC, NULL, NULL),
    {"unigram_val_loss", 0, WHEN_ALWAYS, CK_FN, 0, NULL, get_unigram, 0},
};

/* A schema row's key: its kind from the field's, its offset inside the options. */
static config_key schema_key(const config_key *k)
{
    const strata_cfg_field *f = &schema[k->field - 1];
    config_key r = *k;
    r.key = f->jsonl;
    r.off = OFF(strata) + f->off;
    if (!r.names)
        r.names = f->names; /* the schema's spellings (runtime/config_schema.h) */
    r.kind = k->get                        ? CK_FN
             : f->kind == STRATA_CFG_INT    ? CK_INT
             : f->kind == STRATA_CFG_ENUM   ? CK_NAME
             : f->kind == STRATA_CFG_BOOL   ? CK_BOOL
             : f->kind == STRATA_CFG_FLOAT  ? CK_FLOAT
             : f->kind == STRATA_CFG_DOUBLE ? CK_DOUBLE
             : f->kind == STRATA_CFG_SIZE   ? CK_SIZE
             : f->kind == STRATA_CFG_U64    ? CK_U64
                                            : CK_STRING;
    return r;
}

static json_object *config_value(const config_key *k, const config_ctx *c)
{
    const char *p = (const char *)c->o + k->off;
    switch (k->kind) {
    case CK_INT: return json_object_new_int(*(const int *)p);
    case CK_U64: return json_object_new_int64((int64_t)*(const uint64_t *)p);
    case CK_SIZE: return json_object_new_int64((int64_t)*(const size_t *)p);
    case CK_BOOL: return json_object_new_boolean(*(const bool *)p);
    case CK_FLOAT: return json_float(*(const float *)p);
    case CK_DOUBLE: return json_double(*(const double *)p);
    case CK_STRING: {
        const char *s = *(const char *const *)p;
        return s ? json_object_new_string(s) : json_object_new_null();
    }
    case CK_NAME: {
        int v;
        memcpy(&v, p, sizeof v);
        return json_object_new_string(gpt_enum_name_of(k->names, v, "unknown"));
    }
    case CK_FN: return k->get(c);
    case CK_SCHEMA: break; /* resolved by schema_key */
    }
    return json_object_new_null();
}

static bool config_applies(const config_key *k, const config_ctx *c)
{
    const strata_optimizer mopt = c->o->strata.matrix_optimizer;
    if (k->optimizers && !((unsigned)mopt < 32 && (k->optimizers & FOR(mopt))))
        return false;
    switch (k->when) {
    case WHEN_ALWAYS: return true;
    case WHEN_REFRESHES: return c->refresh->refreshes;
    case WHEN_STAGGER: return c->refresh->stagger;
    case WHEN_ASYNC: return c->async;
    }
    return false;
}

static void write_config(const gpt_report *rep, const gpt_run_info *info)
{
    const config_ctx c = {&rep->o, info, &rep->refresh, rep->o.strata.async && rep->refresh.async};
    json_object *j = json_object_new_object();
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++) {
        const config_key k = config_keys[i].field ? schema_key(&config_keys[i]) : config_keys[i];
        if (k.key && config_applies(&k, &c))
            json_object_object_add(j, k.key, config_value(&k, &c));
    }
    write_json_line(rep->metrics, j);
}

/* ---- open, begin */

void gpt_make_parent_dirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
}

strata_status gpt_report_open(const gpt_train_options *o, FILE *out, gpt_report **rep)
{
    gpt_report *r = calloc(1, sizeof *r);
    if (!r)
        return strata_error(STRATA_ERR_NOMEM, "gpt_train: out of memory");
    r->o = *o;
    gpt_optimizer_refresh_info(&o->strata, &r->refresh);
    r->tty = o->progress < 0 ? (out && isatty(fileno(out))) : o->progress == 1;
    r->summary_out = out;
    r->out = o->quiet ? NULL : out;
    r->val_loss = NAN;
    r->step_ms = malloc((size_t)o->steps * sizeof *r->step_ms);
    r->opt_ms = malloc((size_t)o->steps * sizeof *r->opt_ms);
    r->losses = malloc((size_t)o->steps * sizeof *r->losses);
    strata_status st = STRATA_OK;
    if (!r->step_ms || !r->opt_ms || !r->losses) {
        st = strata_error(STRATA_ERR_NOMEM, "gpt_train: out of memory");
        goto out_free;
    }
    if (o->metrics_path) {
        gpt_make_parent_dirs(o->metrics_path);
        r->metrics = fopen(o->metrics_path, "w");
        if (!r->metrics) {
            st = strata_error(STRATA_ERR_IO, "cannot write metrics to '%s': %s", o->metrics_path,
                              strerror(errno));
            goto out_free;
        }
    }
    *rep = r;
    return STRATA_OK;

out_free:
    free(r->losses);
    free(r->opt_ms);
    free(r->step_ms);
    free(r);
    return st;
}

/* "blas: OpenBLAS core X (how it was chosen), N threads", or on a BLIS
 * build "blas: BLIS 0.9.0 arch X (detected by BLIS), N threads"; then
 * "; plain updates (Muon, AdamW) on T threads" when the step fans them out. */
static void blas_line(const gpt_report *rep, char *buf, size_t n)
{
    const gpt_blas_core *b = &rep->blas;
    char how[96];
    if (!strata_blas_core_env()) {
        snprintf(buf, n, "blas: %s arch %s (detected by %s), %d thread%s", strata_blas_version(),
                 b->core ? b->core : "?", strata_blas_name(), rep->blas_threads,
                 rep->blas_threads == 1 ? "" : "s");
    } else {
        if (b->from)
            snprintf(how, sizeof how, "chosen by strata over OpenBLAS's generic %s", b->from);
        else if (strcmp(b->source, "user") == 0)
            snprintf(how, sizeof how, "OPENBLAS_CORETYPE");
        else
            snprintf(how, sizeof how, "detected by OpenBLAS");
        snprintf(buf, n, "blas: OpenBLAS core %s (%s%s%s), %d thread%s", b->core ? b->core : "?",
                 how, b->better ? "; generic, this CPU supports " : "",
                 b->better ? b->better : "", rep->blas_threads,
                 rep->blas_threads == 1 ? "" : "s");
        if (b->supports) { /* the user forced a weaker core: both probes */
            char more[320];
            if (b->detected)
                snprintf(more, sizeof more, "; forced weaker than this CPU's %s (OpenBLAS's "
                         "pick without it; unset OPENBLAS_CORETYPE to use it): SGEMM probe "
                         "0.1 s each, %s %.1f GFLOP/s, %s %.1f GFLOP/s", b->detected, b->core ? b->core : "?", b->gflops_core,
                         b->detected, b->gflops_detected);
            else
                snprintf(more, sizeof more, "; forced weaker than this CPU's kernels (it "
                         "supports %s; unset OPENBLAS_CORETYPE to use them; GEMM probed only in "
                         "runs of %d steps or more)",
                         b->supports, GPT_BLAS_PROBE_MIN_STEPS);
            const size_t used = strlen(buf);
            if (used < n)
                snprintf(buf + used, n - used, "%s", more);
        }
    }
    if (rep->step_threads > 1) {
        const size_t used = strlen(buf);
        if (used < n)
            snprintf(buf + used, n - used, "; plain updates (Muon, AdamW) on %d threads",
                     rep->step_threads);
    }
}

/* The matrix optimizer's peak lr as the run resolved it (the family table's
 * lr field, through strata_config_optimizer_lr; NaN if it has none). */
static float matrix_lr(const gpt_train_options *o)
{
    strata_config c = o->strata; /* the lookup hands out pointers into a config */
    float *lr = NULL, *wd = NULL;
    if (strata_config_optimizer_lr(&c, c.matrix_optimizer, &lr, &wd) != STRATA_OK || !lr)
        return NAN;
    return *lr;
}

void gpt_report_begin(gpt_report *rep, const gpt_run_info *info)
{
    const gpt_train_options *o = &rep->o;
    const strata_optimizer mopt = o->strata.matrix_optimizer;
    const char *name = strata_optimizer_name(mopt);
    gpt_blas_core_get(&rep->blas);
    rep->blas_threads = info->blas_threads;
    rep->step_threads = info->step_threads;
    if (rep->out) {
        char async_note[64] = "";
        if (o->strata.async && rep->refresh.async)
            snprintf(async_note, sizeof async_note, " | async %s", rep->refresh.what);
        const bool tok = o->data_format == GPT_TRAIN_DATA_TOKENS;
        char unit[48] = "bytes";
        if (tok)
            snprintf(unit, sizeof unit, "tokens, vocab %d", o->model.vocab);
        fprintf(rep->out,
                "strata train: %s%s | data %s (%zu file%s, %zu train / %zu val %s)\n"
                "model: %d layer%s, d_model %d, %d head%s, seq %d, batch %d | %zu params "
                "(%d matrices -> %s, %d tail tensors -> adamw)\n"
                "routing: embeddings, 1-D tensors and 1xN/Nx1 matrices -> adamw; other 2-D "
                "matrices -> %s\n"
                "lr: %g (%s matrices), %g (adamw tail), peak before the schedule\n"
                "unigram baseline: %.4f nats/%s (val)%s\n",
                name,
                mopt == STRATA_OPTIM_KL_SHAMPOO && o->strata.kl_shampoo.form == STRATA_KL_EXACT
                    ? " (exact form)"
                    : "",
                o->data_path, info->n_files, info->n_files == 1 ? "" : "s", info->n_train,
                info->n_val, unit, o->model.n_layer,
                o->model.n_layer == 1 ? "" : "s", o->model.d_model, o->model.n_head,
                o->model.n_head == 1 ? "" : "s", o->seq_len, o->batch, info->params,
                info->n_matrix, name, info->n_tail, name, (double)matrix_lr(o), name,
                (double)(o->tail_lr >= 0.0f ? o->tail_lr : o->strata.adamw.lr),
                info->unigram_val_loss,
                tok ? "token" : "byte", async_note);
        char blas[400];
        blas_line(rep, blas, sizeof blas);
        fprintf(rep->out, "%s\n", blas);
        fflush(rep->out);
    }
    if (rep->metrics)
        write_config(rep, info);
}

/* ---- steps */

static void print_step(const gpt_report *rep, const gpt_step_record *r, double step_ms,
                       double tps)
{
    FILE *out = rep->out;
    const int steps = rep->o.steps;
    if (rep->tty) {
        const int width = 30, filled = (int)((double)r->step / steps * width);
        fprintf(out, "\r[%.*s%*s] %d/%d loss %.4f | %.1f ms | %.0f tok/s ", filled,
                "##############################", width - filled, "", r->step, steps,
                (double)r->loss, step_ms, tps);
        if (r->evaluated)
            fprintf(out, "\n  val %d/%d | val loss %.4f\n", r->step, steps, r->val_loss);
    } else {
        fprintf(out, "step %d/%d | loss %.4f | %.1f ms | %.0f tok/s\n", r->step, steps,
                (double)r->loss, step_ms, tps);
        if (r->evaluated)
            fprintf(out, "val  %d/%d | val loss %.4f\n", r->step, steps, r->val_loss);
    }
    fflush(out);
}

static void write_step(const gpt_report *rep, const gpt_step_record *r, double step_ms,
                       double opt_ms, double tps)
{
    const strata_stats *s = r->stats;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "type", json_object_new_string("step"));
    json_object_object_add(j, "step", json_object_new_int(r->step));
    json_add_double(j, "loss", r->loss);
    json_add_double(j, "step_ms", step_ms);
    json_add_double(j, "opt_ms", opt_ms);
    json_add_double(j, "factors_ms", 1e3 * s->last_seconds_factors);
    json_add_double(j, "roots_ms", 1e3 * s->last_seconds_roots);
    json_add_double(j, "precondition_ms", 1e3 * s->last_seconds_precondition);
    json_add_double(j, "tail_ms", 1e3 * s->last_seconds_tail);
    json_add_double(j, "critical_ms", 1e3 * s->last_seconds_critical);
    json_add_double(j, "tokens_per_s", tps);
    json_add_double(j, "lr_scale", r->lr_scale);
    json_add_double(j, "grad_norm", s->grad_norm);
    json_add_double(j, "wall_s", rep->wall_seconds);
    json_add_int64(j, "device_bytes", (int64_t)s->device_bytes);
    if (rep->o.strata.async) {
        json_add_double(j, "wait_ms", 1e3 * s->last_wait_seconds);
        json_add_int64(j, "waits", s->coh_waits);
        json_add_int64(j, "installs", s->coh_installs);
        json_add_int64(j, "max_staleness", s->max_staleness);
        json_add_int64(j, "dropped", s->coh_dropped);
        if (rep->o.strata.stale_correction != STRATA_STALE_CORRECTION_OFF) {
            json_add_int64(j, "stale_waits_avoided", s->stale_waits_avoided);
            json_add_int64(j, "stale_corrections", s->stale_corrections);
        }
        json_add_int64(j, "host_bytes", (int64_t)s->host_bytes);
        json_add_int64(j, "nvme_bytes", (int64_t)s->nvme_bytes);
        json_add_int64(j, "bytes_device_to_host", (int64_t)s->bytes_device_to_host);
        json_add_int64(j, "nvme_bytes_written", (int64_t)s->nvme_bytes_written);
        json_add_int64(j, "nvme_bytes_read", (int64_t)s->nvme_bytes_read);
        json_add_int64(j, "io_errors", s->io_errors);
        if (s->blocks_on_nvme > 0) {
            json_add_int64(j, "nvme_resident_reads", s->nvme_resident_reads);
            json_add_int64(j, "nvme_resident_prefetches", s->nvme_resident_prefetches);
        }
    }
    if (r->evaluated)
        json_add_double(j, "val_loss", r->val_loss);
    write_json_line(rep->metrics, j);
}

void gpt_report_seed_losses(gpt_report *rep, const float *losses, int n)
{
    if (!rep || n < 0)
        return;
    rep->n_prior = n < 10 ? n : 10;
    memcpy(rep->prior, losses + (n - rep->n_prior), (size_t)rep->n_prior * sizeof *losses);
}

void gpt_report_step(gpt_report *rep, const gpt_step_record *r)
{
    const int i = rep->n++;
    rep->wall_seconds += r->step_seconds;
    rep->critical_seconds += r->stats->last_seconds_critical;
    rep->step_ms[i] = 1e3 * r->step_seconds;
    rep->opt_ms[i] = 1e3 * r->opt_seconds;
    rep->losses[i] = r->loss;
    if (r->evaluated)
        rep->val_loss = r->val_loss;
    const double tps = (double)rep->o.batch * rep->o.seq_len / r->step_seconds;
    if (rep->out)
        print_step(rep, r, rep->step_ms[i], tps);
    if (rep->metrics)
        write_step(rep, r, rep->step_ms[i], rep->opt_ms[i], tps);
}

/* ---- summary */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double q)
{
    if (n <= 0)
        return 0.0;
    double pos = q * (n - 1);
    int lo = (int)floor(pos), hi = (int)ceil(pos);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

static void summarize(gpt_report *rep, gpt_train_result *res)
{
    const int n = rep->n;
    res->final_val_loss = rep->val_loss;
    res->wall_seconds = rep->wall_seconds;
    res->critical_path_seconds = rep->critical_seconds;
    res->critical_path_fraction =
        rep->wall_seconds > 0.0 ? rep->critical_seconds / rep->wall_seconds : 0.0;
    if (n == 0) { /* stopped before the first step: nothing to summarize */
        res->final_train_loss = NAN;
        return;
    }
    /* The last 10 steps, counting those before a resume, summed oldest first. */
    const int all = n + rep->n_prior;
    const int last = all < 10 ? all : 10;
    double acc = 0.0;
    for (int i = all - last; i < all; i++)
        acc += i < rep->n_prior ? rep->prior[i] : rep->losses[i - rep->n_prior];
    res->final_train_loss = acc / last;
    res->tokens_per_second = (double)n * rep->o.batch * rep->o.seq_len / rep->wall_seconds;
    double mean = 0.0;
    for (int i = 0; i < n; i++)
        mean += rep->step_ms[i];
    res->step_ms_mean = mean / n;
    /* after the warm-up (the records are in step order until sorted below) */
    const int skip = n > GPT_WARMUP_STEPS ? GPT_WARMUP_STEPS : 0;
    qsort(rep->step_ms + skip, (size_t)(n - skip), sizeof *rep->step_ms, cmp_double);
    res->step_ms_p50_warm = percentile(rep->step_ms + skip, n - skip, 0.5);
    res->step_ms_p99_warm = percentile(rep->step_ms + skip, n - skip, 0.99);
    res->step_ms_max_warm = rep->step_ms[n - 1];
    res->step_spike_warm =
        res->step_ms_p50_warm > 0.0 ? res->step_ms_max_warm / res->step_ms_p50_warm : 0.0;
    qsort(rep->step_ms, (size_t)n, sizeof *rep->step_ms, cmp_double);
    qsort(rep->opt_ms, (size_t)n, sizeof *rep->opt_ms, cmp_double);
    res->step_ms_p50 = percentile(rep->step_ms, n, 0.5);
    res->step_ms_p99 = percentile(rep->step_ms, n, 0.99);
    res->step_ms_max = rep->step_ms[n - 1];
    res->opt_ms_p50 = percentile(rep->opt_ms, n, 0.5);
    res->opt_ms_max = rep->opt_ms[n - 1];
}

/* The name of a stopping signal. */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

/* A byte count with its unit: "0 B", "512 B", "2.84 MiB" (binary units). */
static void human_bytes(double b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, n, u == 0 ? "%.0f %s" : "%.2f %s", b, unit[u]);
}

/* The memory ledger (strata_memory_ledger_get), this rank's: the total's
 * peak, then each tier's peak and its kinds' peaks (nonzero ones). */
static void print_ledger(FILE *f, const strata_memory_ledger *l, int world)
{
    fprintf(f, "memory%s: %.1f MiB peak (%.1f MiB now)", world > 1 ? " (rank 0)" : "",
            l->total_peak / 1048576.0, l->total_bytes / 1048576.0);
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        if (!l->tier_peak[t])
            continue;
        fprintf(f, " | %s %.1f:", strata_ledger_tier_name(t), l->tier_peak[t] / 1048576.0);
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++)
            if (l->peak[t][k])
                fprintf(f, " %s %.1f", strata_ledger_kind_name(k), l->peak[t][k] / 1048576.0);
    }
    fprintf(f, " (MiB)\n");
}

/* The ledger as JSON: {"total_bytes", "total_peak", "<tier>": {"bytes",
 * "peak", "<kind>": {"bytes", "peak"}}} with zero cells left out. */
static json_object *ledger_json(const strata_memory_ledger *l)
{
    json_object *j = json_object_new_object();
    json_object_object_add(j, "total_bytes", json_object_new_int64((int64_t)l->total_bytes));
    json_object_object_add(j, "total_peak", json_object_new_int64((int64_t)l->total_peak));
    for (int t = 0; t < STRATA_LEDGER_TIERS; t++) {
        if (!l->tier_peak[t])
            continue;
        json_object *jt = json_object_new_object();
        json_object_object_add(jt, "bytes", json_object_new_int64((int64_t)l->tier_bytes[t]));
        json_object_object_add(jt, "peak", json_object_new_int64((int64_t)l->tier_peak[t]));
        for (int k = 0; k < STRATA_LEDGER_KINDS; k++) {
            if (!l->peak[t][k])
                continue;
            json_object *jk = json_object_new_object();
            json_object_object_add(jk, "bytes", json_object_new_int64((int64_t)l->bytes[t][k]));
            json_object_object_add(jk, "peak", json_object_new_int64((int64_t)l->peak[t][k]));
            json_object_object_add(jt, strata_ledger_kind_name(k), jk);
        }
        json_object_object_add(j, strata_ledger_tier_name(t), jt);
    }
    return j;
}

static void print_summary(const gpt_report *rep, const gpt_train_result *res)
{
    FILE *f = rep->summary_out;
    const gpt_train_options *o = &rep->o;
    const strata_stats *s = &res->stats;
    const gpt_run_totals *t = &res->totals;
    /* Several ranks: the counters and bytes are summed over them (said). */
    char over[48] = "";
    if (t->ranks > 1)
        snprintf(over, sizeof over, " (sum over %d ranks)", t->ranks);
    /* Muon and AdamW compute neither roots nor eigenbases: no count. */
    char refreshes[96] = "";
    if (rep->refresh.refreshes)
        snprintf(refreshes, sizeof refreshes, "%lld %s (%lld failed), ",
                 (long long)t->root_refreshes, rep->refresh.what, (long long)t->root_failures);
    /* A run stopped before its first validation has no val loss: said so,
     * not "nan". */
    char val[32] = "not measured";
    /* Several ranks each train their own batch: the job's tokens/s is the
     * ranks' sum (issue #22 item 10). */
    char tok[96];
    if (res->world_size > 1)
        snprintf(tok, sizeof tok, "%.0f tok/s per rank, %.0f tok/s the job (%d ranks)",
                 res->tokens_per_second, res->tokens_per_second * res->world_size,
                 res->world_size);
    else
        snprintf(tok, sizeof tok, "%.0f tok/s", res->tokens_per_second);
    if (!isnan(res->final_val_loss))
        snprintf(val, sizeof val, "%.4f", res->final_val_loss);
    fprintf(f,
            "summary: %s | %d step%s in %.*f s | train loss %.4f | val loss %s "
            "(unigram %.4f)\n"
            "step time ms: p50 %.1f  p99 %.1f  max %.1f  mean %.1f | optimizer p50 %.1f "
            "max %.1f | %s\n"
            "optimizer: %s%.1f MiB state in the device tier%s%s%s\n",
            strata_optimizer_name(o->strata.matrix_optimizer), rep->n, rep->n == 1 ? "" : "s",
            res->wall_seconds < 1.0 ? 3 : 1, res->wall_seconds, res->final_train_loss,
            val, res->unigram_val_loss, res->step_ms_p50, res->step_ms_p99,
            res->step_ms_max, res->step_ms_mean, res->opt_ms_p50, res->opt_ms_max,
            tok, refreshes, t->device_bytes / 1048576.0,
            o->strata.backend == STRATA_BACKEND_CPU ? " (host memory: the cpu backend's)" : "",
            s->paged_params > 0 ? " (paged to nvme between steps: see 'paged state')" : "", over);
    /* Eigh-free roots (shampoo.root_method newton/auto): said when tried, so a
     * fallback to the eigendecomposition is never silent. */
    if (o->strata.matrix_optimizer == STRATA_OPTIM_SHAMPOO &&
        STRATA_ROOT_METHOD_WARM(o->strata.shampoo.root_method)) {
        const bool f32 = o->strata.shampoo.root_method == STRATA_ROOT_WARM_QR_F32;
        fprintf(f, "roots: warm-started eigenbases (one QR step from the last basis%s; the first "
                "root of each factor by %s, not counted below): %lld of the %lld roots fell "
                "back to %s (off-diagonal criterion over --warm-qr-tolerance)\n",
                f32 ? ", float32" : "", f32 ? "ssyevd" : "eigh", (long long)t->root_fallbacks,
                (long long)t->root_refreshes, f32 ? "ssyevd" : "eigh");
    }
    else if (o->strata.matrix_optimizer == STRATA_OPTIM_SHAMPOO &&
             (o->strata.shampoo.root_method == STRATA_ROOT_NEWTON ||
              o->strata.shampoo.root_method == STRATA_ROOT_AUTO ||
              o->strata.shampoo.root_method == STRATA_ROOT_NEWTON_F32) &&
             (t->root_newton > 0 || t->root_fallbacks > 0))
        fprintf(f, "roots: %lld by the Newton iteration%s, %lld fell back to eigh (residual "
                "check or iteration cap)\n",
                (long long)t->root_newton,
                o->strata.shampoo.root_method == STRATA_ROOT_NEWTON_F32
                    ? " (float32 on the backend)" : "",
                (long long)t->root_fallbacks);
    print_ledger(f, &res->ledger, res->world_size);
    /* The numerical guards (strata_stats): said only when they acted. */
    if (s->overflow_skipped > 0 || s->nonfinite_directions > 0)
        fprintf(f,
                "numerics: %lld parameter step%s skipped (the gradient could overflow the "
                "float32 optimizer state) | %lld non-finite direction%s not applied\n",
                (long long)s->overflow_skipped, s->overflow_skipped == 1 ? "" : "s",
                (long long)s->nonfinite_directions, s->nonfinite_directions == 1 ? "" : "s");
    if (rep->refresh.refreshes && rep->n > 0)
        fprintf(f, "critical path: %.2f%% of step time (%.3f s of %.*f s on the training "
                "thread: snapshots, waits, installs%s) | step time max/median %.2f "
                "(%.2f after %d warm-up steps)\n",
                100.0 * res->critical_path_fraction, res->critical_path_seconds,
                res->wall_seconds < 1.0 ? 3 : 1, res->wall_seconds,
                o->strata.async && rep->refresh.async ? "" : ", inline refreshes",
                res->step_ms_p50 > 0.0 ? res->step_ms_max / res->step_ms_p50 : 0.0,
                res->step_spike_warm, rep->n > GPT_WARMUP_STEPS ? GPT_WARMUP_STEPS : 0);
    char blas[400];
    blas_line(rep, blas, sizeof blas);
    fprintf(f, "%s\n", blas);
    if (res->interrupted)
        fprintf(f, "interrupted: %s after step %d of %d\n", signal_name(res->interrupted),
                rep->n, o->steps);
    if (res->resumed_from > 0 && o->quiet) /* else said at start-up, once */
        fprintf(f, "resumed: %s at step %d (%.1f MiB in %.1f ms, %.0f MiB/s); the summary's "
                "counters (roots, refreshes, waits) include the checkpoint's %d steps\n",
                o->resume ? o->resume : "?", res->resumed_from,
                res->ckpt_load_mib_s * res->ckpt_load_s, 1e3 * res->ckpt_load_s,
                res->ckpt_load_mib_s, res->resumed_from);
    if (res->ckpt_saves > 0)
        fprintf(f, "checkpoints: %d saved | pause max %.1f ms, total %.1f ms | last %.1f MiB at "
                "%.0f MiB/s\n", res->ckpt_saves, 1e3 * res->ckpt_pause_max_s,
                1e3 * res->ckpt_pause_total_s, res->ckpt_bytes / 1048576.0,
                res->ckpt_save_mib_s);
    char warm[48] = "";
    if (o->strata.staleness_warmup > 0 && o->strata.staleness > 0)
        snprintf(warm, sizeof warm, " (S=0 through step %d)", o->strata.staleness_warmup);
    if (o->strata.async && rep->refresh.async)
        fprintf(f,
                "async: S=%d%s %s | %lld wait%s (%.2f s) | max staleness %lld (bound %d) | "
                "%lld installs, %lld dropped | host tier %.1f MiB, nvme tier %.1f MiB%s\n",
                o->strata.staleness, warm,
                gpt_enum_name_of(strata_cfg_names_install_mode, (int)o->strata.install_mode, "eager"),
                (long long)t->coh_waits, t->coh_waits == 1 ? "" : "s", t->coh_wait_seconds,
                (long long)t->max_staleness, rep->refresh.frequency - 1 + o->strata.staleness,
                (long long)t->coh_installs, (long long)t->coh_dropped,
                t->host_bytes_peak / 1048576.0, t->nvme_bytes_peak / 1048576.0, over);
    if (o->strata.async && rep->refresh.async &&
        o->strata.stale_correction != STRATA_STALE_CORRECTION_OFF)
        fprintf(f,
                "stale correction: %s | %lld wait%s avoided, %lld roots corrected, %lld "
                "refused (waited) | %lld refresh points skipped (no free slot) | max corrected "
                "staleness %lld\n",
                gpt_enum_name_of(strata_cfg_names_stale_correction, (int)o->strata.stale_correction,
                                 "?"),
                (long long)t->stale_waits_avoided, t->stale_waits_avoided == 1 ? "" : "s",
                (long long)t->stale_corrections, (long long)t->stale_refused,
                (long long)t->stale_refreshes_skipped, (long long)t->stale_max_corrected);
    if (s->blocks_on_nvme > 0) /* streamed residency (engine/refresh.c), this rank's */
        fprintf(f,
                "nvme roots%s: %d block%s on nvme | %d resident buffer%s (%.1f MiB host) | %lld "
                "read%s at the step (waited), %lld ahead, %lld eviction%s\n",
                res->world_size > 1 ? " (rank 0; every rank's: the ranks' lines)" : "",
                s->blocks_on_nvme, s->blocks_on_nvme == 1 ? "" : "s", s->nvme_resident_buffers,
                s->nvme_resident_buffers == 1 ? "" : "s", s->nvme_resident_bytes / 1048576.0,
                (long long)s->nvme_resident_reads, s->nvme_resident_reads == 1 ? "" : "s",
                (long long)s->nvme_resident_prefetches, (long long)s->nvme_resident_evictions,
                s->nvme_resident_evictions == 1 ? "" : "s");
    if (s->paged_params > 0) /* state paging (engine/refresh.c), this rank's */
        fprintf(f,
                "paged state%s: %d matri%s, %.1f MiB on nvme between steps | %lld read%s "
                "(%lld waited at the step, the rest ahead), %lld write%s\n",
                res->world_size > 1 ? " (rank 0; every rank's: the ranks' lines)" : "",
                s->paged_params, s->paged_params == 1 ? "x" : "ces", s->paged_bytes / 1048576.0,
                (long long)s->page_reads, s->page_reads == 1 ? "" : "s",
                (long long)s->page_reads_waited, (long long)s->page_writes,
                s->page_writes == 1 ? "" : "s");
    if (res->budget_planned) {
        char line[512];
        fprintf(f, "budget: %s%s\n", gpt_budget_line(res, line, sizeof line),
                res->budget_drift_step_s > 0 ? " | drifted: see the budget note" : "");
    }
    if (res->world_size > 1) {
        fprintf(f, "ranks: %d, sharding %s (planned makespan / lower bound %.3f)\n",
                res->world_size,
                gpt_enum_name_of(strata_cfg_names_sharding, (int)o->strata.sharding, "?"),
                s->planned_lower_bound > 0 ? s->planned_makespan / s->planned_lower_bound : 1.0);
        /* where each rank's roots and state live, when any rank's are on nvme
         * (the lines above are rank 0's: another rank may spill and it not) */
        bool nvme_roots = false, paged = false;
        for (int r = 0; r < res->world_size && r < GPT_MAX_RANKS; r++) {
            nvme_roots |= res->ranks[r].blocks_on_nvme > 0;
            paged |= res->ranks[r].paged_params > 0;
        }
        for (int r = 0; r < res->world_size && r < GPT_MAX_RANKS; r++) {
            const gpt_rank_figures *g = &res->ranks[r];
            char matrix[32], intra[32], inter[32];
            human_bytes(g->step_matrix_bytes, matrix, sizeof matrix);
            human_bytes(g->intra_node_bytes, intra, sizeof intra);
            human_bytes(g->inter_node_bytes, inter, sizeof inter);
            fprintf(f,
                    "  rank %d: %.0f params, resident %.2f MiB | per step: optimizer %.1f ms, "
                    "matrix bytes at the step %s, intra-node %s, inter-node %s | "
                    "refreshes computed %.0f, received %.0f | ledger peak %.2f MiB "
                    "(gradients %.2f)",
                    r, g->owned_params, g->resident_bytes / 1048576.0, g->opt_ms_mean, matrix,
                    intra, inter, g->refreshes_computed, g->refreshes_received,
                    g->ledger_peak / 1048576.0, g->grad_bytes_peak / 1048576.0);
            if (nvme_roots)
                fprintf(f, " | %.0f root block%s on nvme", g->blocks_on_nvme,
                        g->blocks_on_nvme == 1 ? "" : "s");
            if (paged)
                fprintf(f, " | %.0f paged matri%s", g->paged_params,
                        g->paged_params == 1 ? "x" : "ces");
            fprintf(f, "\n");
        }
    }
}

const char *gpt_budget_line(const gpt_train_result *res, char *buf, size_t n)
{
    const strata_budget_choice *b = &res->budget;
    char fresher[160] = "";
    int k = 0;
    if (!b->feasible)
        k += snprintf(fresher + k, sizeof fresher - (size_t)k, "; %s",
                      b->sustainable_frequency > 0 ? "" : "no F up to 1000 sustains");
    if (!b->feasible && b->sustainable_frequency > 0)
        k += snprintf(fresher + k, sizeof fresher - (size_t)k,
                      "F >= %d sustains (--precondition-frequency auto)",
                      b->sustainable_frequency);
    if (b->workers_for_frequency != 0)
        k += snprintf(fresher + k, sizeof fresher - (size_t)k, "; F = %d needs %s%d workers",
                      b->frequency - 1, b->workers_for_frequency < 0 ? "more than " : "",
                      b->workers_for_frequency < 0 ? 4096 : b->workers_for_frequency);
    if (b->workers_for_staleness != 0 && k < (int)sizeof fresher)
        snprintf(fresher + k, sizeof fresher - (size_t)k, "; S = %d needs %s%d workers",
                 b->staleness - 1, b->workers_for_staleness < 0 ? "more than " : "",
                 b->workers_for_staleness < 0 ? 4096 : b->workers_for_staleness);
    snprintf(buf, n,
             "%sF = %d, S = %d (staleness <= %d) for a %.1f ms step (forward+backward %.1f "
             "ms measured, optimizer %.1f ms modelled) | %d blocks, %.3g s of refreshes per "
             "period on %d worker%s: %.0f%% busy (ceiling %.0f%%), results within %.3g s%s",
             b->feasible ? "" : "NOT SUSTAINABLE (steps will wait): ", b->frequency,
             b->staleness, b->bound, 1e3 * b->step_seconds, 1e3 * res->budget_loop_s,
             1e3 * b->optimizer_seconds, b->blocks, b->period_seconds, b->workers,
             b->workers == 1 ? "" : "s", 100.0 * b->utilization, 100.0 * b->ceiling,
             b->latency_seconds, fresher);
    return buf;
}

static json_object *budget_json(const gpt_train_result *res)
{
    const strata_budget_choice *b = &res->budget;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "feasible", json_object_new_boolean(b->feasible));
    json_object_object_add(j, "frequency", json_object_new_int(b->frequency));
    json_object_object_add(j, "staleness", json_object_new_int(b->staleness));
    json_object_object_add(j, "bound", json_object_new_int(b->bound));
    json_object_object_add(j, "workers", json_object_new_int(b->workers));
    json_object_object_add(j, "blocks", json_object_new_int(b->blocks));
    json_add_double(j, "step_s", b->step_seconds);
    json_add_double(j, "loop_s", res->budget_loop_s);
    json_add_double(j, "optimizer_s", b->optimizer_seconds);
    json_add_double(j, "period_s", b->period_seconds);
    json_add_double(j, "largest_block_s", b->largest_block_seconds);
    json_add_double(j, "latency_s", b->latency_seconds);
    json_add_double(j, "utilization", b->utilization);
    json_add_double(j, "ceiling", b->ceiling);
    json_object_object_add(j, "workers_for_frequency",
                           json_object_new_int(b->workers_for_frequency));
    json_object_object_add(j, "workers_for_staleness",
                           json_object_new_int(b->workers_for_staleness));
    json_object_object_add(j, "sustainable_frequency",
                           json_object_new_int(b->sustainable_frequency));
    if (res->budget_drift_step_s > 0) {
        json_add_double(j, "drift_step_s", res->budget_drift_step_s);
        json_object_object_add(j, "drift_staleness",
                               json_object_new_int(res->budget_drift_staleness));
    }
    return j;
}

static void write_summary(const gpt_report *rep, const gpt_train_result *res)
{
    const bool async = rep->o.strata.async;
    const strata_stats *s = &res->stats;
    const gpt_run_totals *t = &res->totals;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "type", json_object_new_string("summary"));
    json_object_object_add(j, "memory", ledger_json(&res->ledger));
    const char *name = strata_optimizer_name(rep->o.strata.matrix_optimizer);
    json_object_object_add(j, "optimizer", json_object_new_string(name));
    json_object_object_add(j, "steps", json_object_new_int(rep->n));
    json_add_double(j, "final_train_loss", res->final_train_loss);
    json_add_double(j, "final_val_loss", res->final_val_loss);
    json_add_double(j, "unigram_val_loss", res->unigram_val_loss);
    json_add_double(j, "wall_s", res->wall_seconds);
    json_add_double(j, "step_ms_p50", res->step_ms_p50);
    json_add_double(j, "step_ms_p99", res->step_ms_p99);
    json_add_double(j, "step_ms_max", res->step_ms_max);
    json_add_double(j, "step_ms_mean", res->step_ms_mean);
    json_add_double(j, "opt_ms_p50", res->opt_ms_p50);
    json_add_double(j, "opt_ms_max", res->opt_ms_max);
    json_add_double(j, "tokens_per_s", res->tokens_per_second);
    json_add_double(j, "tokens_per_s_job",
                    res->tokens_per_second * (res->world_size > 1 ? res->world_size : 1));
    json_add_double(j, "critical_path_s", res->critical_path_seconds);
    json_add_double(j, "critical_path_fraction", res->critical_path_fraction);
    json_add_double(j, "step_max_over_median",
                    res->step_ms_p50 > 0.0 ? res->step_ms_max / res->step_ms_p50 : 0.0);
    json_add_double(j, "step_ms_p50_warm", res->step_ms_p50_warm);
    json_add_double(j, "step_ms_p99_warm", res->step_ms_p99_warm);
    json_add_double(j, "step_ms_max_warm", res->step_ms_max_warm);
    json_add_double(j, "step_max_over_median_warm", res->step_spike_warm);
    json_object_object_add(j, "warmup_steps_excluded",
                           json_object_new_int(rep->n > GPT_WARMUP_STEPS ? GPT_WARMUP_STEPS : 0));
    if (res->diverged)
        json_object_object_add(j, "diverged", json_object_new_boolean(true));
    /* Counters and bytes below: summed over totals_ranks ranks (max_staleness the largest). */
    json_object_object_add(j, "totals_ranks", json_object_new_int(t->ranks));
    json_add_int64(j, "root_refreshes", t->root_refreshes);
    json_add_int64(j, "root_failures", t->root_failures);
    json_add_int64(j, "root_newton", t->root_newton);
    json_add_int64(j, "root_fallbacks", t->root_fallbacks);
    json_add_int64(j, "overflow_skipped", s->overflow_skipped);
    json_add_int64(j, "nonfinite_directions", s->nonfinite_directions);
    json_add_int64(j, "snapshot_failures", s->snapshot_failures);
    json_add_int64(j, "device_bytes", (int64_t)t->device_bytes);
    json_add_int64(j, "step_scratch_bytes", (int64_t)t->step_scratch_bytes);
    json_object_object_add(j, "blas_core", json_object_new_string(rep->blas.core ? rep->blas.core : "?"));
    if (rep->blas.detected) {
        json_object_object_add(j, "blas_core_cpu", json_object_new_string(rep->blas.detected));
        json_add_double(j, "blas_gflops_core", rep->blas.gflops_core);
        json_add_double(j, "blas_gflops_cpu", rep->blas.gflops_detected);
    }
    json_object_object_add(j, "blas_threads", json_object_new_int(rep->blas_threads));
    json_object_object_add(j, "step_threads", json_object_new_int(rep->step_threads));
    if (res->interrupted)
        json_object_object_add(j, "interrupted", json_object_new_string(signal_name(res->interrupted)));
    if (res->budget_planned)
        json_object_object_add(j, "budget", budget_json(res));
    json_object_object_add(j, "async", json_object_new_boolean(async));
    if (async) {
        json_object_object_add(j, "staleness", json_object_new_int(rep->o.strata.staleness));
        json_add_int64(j, "waits", t->coh_waits);
        json_add_double(j, "wait_s", t->coh_wait_seconds);
        json_add_int64(j, "max_staleness", t->max_staleness);
        json_add_int64(j, "staleness_bound", rep->refresh.frequency - 1 + rep->o.strata.staleness);
        json_add_int64(j, "installs", t->coh_installs);
        json_add_int64(j, "dropped", t->coh_dropped);
        if (rep->o.strata.stale_correction != STRATA_STALE_CORRECTION_OFF) {
            json_add_int64(j, "stale_waits_avoided", t->stale_waits_avoided);
            json_add_int64(j, "stale_corrections", t->stale_corrections);
            json_add_int64(j, "stale_refused", t->stale_refused);
            json_add_int64(j, "stale_refreshes_skipped", t->stale_refreshes_skipped);
            json_add_int64(j, "stale_max_corrected", t->stale_max_corrected);
        }
        json_add_int64(j, "host_bytes_peak", (int64_t)t->host_bytes_peak);
        json_add_int64(j, "nvme_bytes_peak", (int64_t)t->nvme_bytes_peak);
        if (s->blocks_on_nvme > 0) { /* this rank's streamed residency */
            json_add_int64(j, "blocks_on_nvme", s->blocks_on_nvme);
            json_add_int64(j, "nvme_resident_buffers", s->nvme_resident_buffers);
            json_add_int64(j, "nvme_resident_bytes", (int64_t)s->nvme_resident_bytes);
            json_add_int64(j, "nvme_resident_reads", s->nvme_resident_reads);
            json_add_int64(j, "nvme_resident_prefetches", s->nvme_resident_prefetches);
            json_add_int64(j, "nvme_resident_evictions", s->nvme_resident_evictions);
        }
    }
    if (s->stream_installs > 0) { /* results installed from device memory (CUDA) */
        json_add_int64(j, "stream_snapshots", s->stream_snapshots);
        json_add_int64(j, "stream_stages", s->stream_stages);
        json_add_int64(j, "stream_stages_early", s->stream_stages_early);
        json_add_int64(j, "stream_installs", s->stream_installs);
        json_add_int64(j, "stream_waits", s->stream_waits);
        json_add_int64(j, "stream_wait_bytes", (int64_t)s->stream_wait_bytes);
    }
    if (s->stream_blocking_waits > 0) { /* the training stream's waits, timed (CUDA) */
        json_add_int64(j, "stream_blocking_waits", s->stream_blocking_waits);
        json_add_int64(j, "stream_waits_timed", s->stream_waits_timed);
        json_add_int64(j, "stream_waits_untimed", s->stream_waits_untimed);
        json_add_double(j, "stream_wait_s", s->stream_wait_seconds);
    }
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)res->weights_hash);
    json_object_object_add(j, "weights_hash", json_object_new_string(hash));
    json_object_object_add(j, "world_size", json_object_new_int(res->world_size));
    if (res->resumed_from > 0) {
        json_object_object_add(j, "resumed_from", json_object_new_int(res->resumed_from));
        json_add_double(j, "ckpt_load_s", res->ckpt_load_s);
        json_add_double(j, "ckpt_load_mib_s", res->ckpt_load_mib_s);
    }
    if (res->ckpt_saves > 0) {
        json_object_object_add(j, "ckpt_saves", json_object_new_int(res->ckpt_saves));
        json_add_double(j, "ckpt_pause_max_s", res->ckpt_pause_max_s);
        json_add_double(j, "ckpt_pause_total_s", res->ckpt_pause_total_s);
        json_add_double(j, "ckpt_bytes", res->ckpt_bytes);
        json_add_double(j, "ckpt_save_mib_s", res->ckpt_save_mib_s);
    }
    if (res->world_size > 1) {
        json_object_object_add(
            j, "sharding",
            json_object_new_string(
                gpt_enum_name_of(strata_cfg_names_sharding, (int)rep->o.strata.sharding, "?")));
        json_add_double(j, "planned_makespan", s->planned_makespan);
        json_add_double(j, "planned_lower_bound", s->planned_lower_bound);
        json_object *ranks = json_object_new_array();
        for (int r = 0; r < res->world_size && r < GPT_MAX_RANKS; r++) {
            const gpt_rank_figures *g = &res->ranks[r];
            json_object *o = json_object_new_object();
            json_object_object_add(o, "rank", json_object_new_int(r));
            json_add_int64(o, "owned_params", (int64_t)g->owned_params);
            json_add_int64(o, "resident_bytes", (int64_t)g->resident_bytes);
            json_add_double(o, "step_matrix_bytes", g->step_matrix_bytes);
            json_add_double(o, "intra_node_bytes", g->intra_node_bytes);
            json_add_double(o, "inter_node_bytes", g->inter_node_bytes);
            json_add_double(o, "opt_ms", g->opt_ms_mean);
            json_add_double(o, "bwd_hook_ms", g->bwd_hook_ms);
            json_add_double(o, "grad_wait_ms", g->grad_wait_ms);
            json_add_int64(o, "largest_item_bytes", (int64_t)g->largest_item_bytes);
            json_add_int64(o, "owned_param_bytes", (int64_t)g->owned_param_bytes);
            json_add_int64(o, "param_bytes_peak", (int64_t)g->param_bytes_peak);
            json_add_int64(o, "largest_layer_bytes", (int64_t)g->largest_layer_bytes);
            json_add_int64(o, "step_scratch_bytes", (int64_t)g->step_scratch_bytes);
            json_add_int64(o, "grad_bytes_peak", (int64_t)g->grad_bytes_peak);
            json_add_int64(o, "ledger_peak", (int64_t)g->ledger_peak);
            json_add_int64(o, "blocks_on_nvme", (int64_t)g->blocks_on_nvme);
            json_add_int64(o, "paged_params", (int64_t)g->paged_params);
            json_add_int64(o, "max_staleness", (int64_t)g->max_staleness);
            json_add_int64(o, "staleness_bound_exceeded", (int64_t)g->staleness_bound_exceeded);
            json_add_int64(o, "refreshes_computed", (int64_t)g->refreshes_computed);
            json_add_int64(o, "refreshes_received", (int64_t)g->refreshes_received);
            json_add_double(o, "refresh_ship_intra_node_bytes", g->refresh_ship_intra_bytes);
            json_add_double(o, "refresh_ship_inter_node_bytes", g->refresh_ship_inter_bytes);
            json_object_array_add(ranks, o);
        }
        json_object_object_add(j, "ranks", ranks);
    }
    write_json_line(rep->metrics, j);
}

void gpt_report_summary(gpt_report *rep, gpt_train_result *res)
{
    summarize(rep, res);
    if (rep->summary_out)
        print_summary(rep, res);
    if (rep->metrics)
        write_summary(rep, res);
}

void gpt_report_diverged(gpt_report *rep, gpt_train_result *res)
{
    res->diverged = true;
    summarize(rep, res);
    if (rep->metrics)
        write_summary(rep, res);
}

strata_status gpt_report_close(gpt_report *rep, strata_status st)
{
    if (!rep)
        return st;
    if (st != STRATA_OK && rep->out && rep->tty)
        fputc('\n', rep->out);
    if (rep->metrics && fclose(rep->metrics) != 0 && st == STRATA_OK)
        st = strata_error(STRATA_ERR_IO, "writing metrics '%s' failed", rep->o.metrics_path);
    free(rep->losses);
    free(rep->opt_ms);
    free(rep->step_ms);
    free(rep);
    return st;
}
