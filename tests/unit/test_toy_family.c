/* A matrix optimizer family added without touching anything outside optim/
 * and tests/ (issue #18 item 3): plain momentum SGD with a trivial refresh,
 * written here against the preconditioner interface (optim/precond.h) and
 * registered at run time in the family table (optim/family.h,
 * strata_family_register). It then routes, trains and runs through the
 * refresh engine like a built-in family:
 *   - the table answers for it: name, parse, strata_optimizer_info, routing;
 *   - the tiny GPT trains with it (loss falls), synchronously and
 *     asynchronously, and async S = 0 is bit-identical to sync (slow workers
 *     included), with its refreshes run on the workers.
 *
 * The toy: per matrix, momentum m = mu m + g and an RMS scale. `before`
 * folds mean(g^2) into an EMA q; at each refresh point (start F, lag 0,
 * every F steps) the snapshot packs q into the slot, the refresh turns it
 * into 1 / (sqrt(q) + 1e-8) in place (float64, any thread), and install makes
 * it the scale; apply then updates W -= lr (scale m + wd W) (scale = 1
 * before the first install).
 *
 * cmocka; exit 77 when the corpus is missing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data.h"
#include "gpt.h"
#include "optim/family.h"
#include "runtime/testing.h"
#include "strata/strata.h"

#define CHECK(cond, ...)                   \
    do {                                   \
        if (!(cond))                       \
            fail_msg(__VA_ARGS__);         \
    } while (0)

#define CORPUS "/usr/share/games/fortunes"

/* ------------------------------------------------------------ the toy family */

typedef struct toy_config {
    float lr;           /* default 0.02 */
    float momentum;     /* default 0.9 */
    float weight_decay; /* default 0 */
    int precondition_frequency; /* F >= 1; default 3 */
    int refresh_offset;         /* in [0, F); default 0 */
} toy_config;

typedef struct toy_state {
    toy_config cfg;
    size_t n;
    float *mom;
    double q;     /* EMA of mean(g^2) */
    double scale; /* the installed result */
} toy_state;

static void toy_default(void *cfg)
{
    *(toy_config *)cfg = (toy_config){.lr = 0.02f, .momentum = 0.9f, .weight_decay = 0.0f,
                                      .precondition_frequency = 3, .refresh_offset = 0};
}

static strata_status toy_check(const void *cfg)
{
    const toy_config *c = cfg;
    if (!(c->lr >= 0.0f && isfinite(c->lr)) || !(c->momentum >= 0.0f && c->momentum < 1.0f) ||
        !(c->weight_decay >= 0.0f && isfinite(c->weight_decay)) ||
        c->precondition_frequency < 1 || c->refresh_offset < 0 ||
        c->refresh_offset >= c->precondition_frequency)
        return strata_error(STRATA_ERR_INVALID_ARG, "toy-sgd: bad configuration");
    return STRATA_OK;
}

static bool toy_true(const void *cfg)
{
    (void)cfg;
    return true;
}

static void toy_schedule(const void *cfg, strata_precond_schedule *out)
{
    const toy_config *c = cfg;
    *out = (strata_precond_schedule){.frequency = c->precondition_frequency,
                                     .start = c->precondition_frequency, .lag = 0,
                                     .offset = c->refresh_offset, .max_staleness = -1};
}

static double toy_refresh_cost(const void *cfg, const strata_precond_shape *shape)
{
    (void)cfg;
    return (double)shape->numel;
}

static strata_status toy_with_offset(const void *cfg, int offset, void *out)
{
    toy_config *c = out;
    *c = *(const toy_config *)cfg;
    c->refresh_offset = offset;
    return STRATA_OK;
}

static strata_status toy_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *shape, bool external_results,
                                void **out)
{
    (void)be;
    (void)external_results;
    toy_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "toy-sgd: out of memory");
    s->cfg = *(const toy_config *)cfg;
    s->n = shape->numel;
    s->mom = calloc(s->n, sizeof *s->mom);
    s->scale = 1.0;
    if (!s->mom) {
        free(s);
        return strata_error(STRATA_ERR_NOMEM, "toy-sgd: out of memory");
    }
    *out = s;
    return STRATA_OK;
}

static void toy_destroy(void *state)
{
    toy_state *s = state;
    if (s)
        free(s->mom);
    free(s);
}

static size_t toy_bytes(const void *state)
{
    return ((const toy_state *)state)->n * sizeof(float);
}

static int toy_n_blocks(const void *state)
{
    (void)state;
    return 1;
}

static void toy_block(const void *state, int b, strata_precond_block *out)
{
    (void)state;
    (void)b;
    *out = (strata_precond_block){.slot_bytes = sizeof(double), .max_dim = 1, .n_parts = 1,
                                  .part_offset = {0}, .part_bytes = {sizeof(double)}};
}

static strata_status toy_before(void *state, float lr_scale, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt, bool *done)
{
    (void)lr_scale;
    (void)t;
    (void)w;
    (void)cnt;
    toy_state *s = state;
    double acc = 0.0;
    for (size_t i = 0; i < s->n; i++)
        acc += (double)g[i] * g[i];
    s->q = 0.9 * s->q + 0.1 * acc / (double)s->n;
    *done = false;
    return STRATA_OK;
}

static strata_status toy_snapshot(const void *state, int b, void *slot)
{
    (void)b;
    memcpy(slot, &((const toy_state *)state)->q, sizeof(double));
    return STRATA_OK;
}

static strata_status toy_refresh(const void *state, int b, void *slot, double *work, int *iwork,
                                 unsigned *failed, strata_optim_counters *cnt)
{
    (void)state;
    (void)b;
    (void)work;
    (void)iwork;
    double q;
    memcpy(&q, slot, sizeof q);
    q = 1.0 / (sqrt(q) + 1e-8);
    memcpy(slot, &q, sizeof q);
    *failed = 0;
    if (cnt)
        cnt->root_refreshes++;
    return STRATA_OK;
}

static size_t toy_work(int max_dim)
{
    (void)max_dim;
    return 0;
}

static strata_status toy_install(void *state, int b, const void *slot, unsigned failed,
                                 unsigned have)
{
    (void)b;
    toy_state *s = state;
    if (!(failed & 1u) && (have & 1u))
        memcpy(&s->scale, slot, sizeof s->scale);
    return STRATA_OK;
}

static strata_status toy_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    (void)t;
    (void)cnt;
    toy_state *s = state;
    const float lr = s->cfg.lr * lr_scale, mu = s->cfg.momentum, scale = (float)s->scale;
    for (size_t i = 0; i < s->n; i++) {
        s->mom[i] = mu * s->mom[i] + g[i];
        w[i] -= lr * (scale * s->mom[i] + s->cfg.weight_decay * w[i]);
    }
    return STRATA_OK;
}

static int toy_tensors(const void *state, strata_tensor_info *out, int cap)
{
    toy_state *s = (toy_state *)state;
    if (out && cap > 0)
        strata_tensor_info_set(&out[0], "momentum", -1, STRATA_F32, 1, (int64_t)s->n,
                               STRATA_TIER_DEVICE, s->mom);
    if (out && cap > 1)
        strata_tensor_info_set(&out[1], "q", -1, STRATA_F64, 0, 0, STRATA_TIER_HOST, &s->q);
    if (out && cap > 2)
        strata_tensor_info_set(&out[2], "scale", -1, STRATA_F64, 0, 0, STRATA_TIER_HOST,
                               &s->scale);
    return 3;
}

static const strata_precond_family toy_family = {
    .name = "toy-sgd",
    .refresh_noun = "RMS scales",
    .has_refresh = toy_true,
    .async_capable = toy_true,
    .schedule = toy_schedule,
    .refresh_cost = toy_refresh_cost,
    .with_offset = toy_with_offset,
    .cfg_size = sizeof(toy_config),
    .config_default = toy_default,
    .config_check = toy_check,
    .lr_offset = offsetof(toy_config, lr),
    .weight_decay_offset = offsetof(toy_config, weight_decay),
    .state_per_param = 1,
    .create = toy_create,
    .destroy = toy_destroy,
    .bytes = toy_bytes,
    .n_blocks = toy_n_blocks,
    .block = toy_block,
    .before = toy_before,
    .snapshot = toy_snapshot,
    .refresh = toy_refresh,
    .refresh_work_doubles = toy_work,
    .refresh_work_ints = toy_work,
    .install = toy_install,
    .apply = toy_apply,
    .tensors = toy_tensors,
};

static toy_config toy_cfg;
static strata_optimizer toy_kind = STRATA_OPTIM_DEFAULT;
static gpt_data corpus;

/* ------------------------------------------------------------ the tiny GPT */

typedef struct run {
    gpt_model *m;
    strata_runtime *rt;
} run;

static int fwd(void *ctx, int l) { return (int)strata_hook_forward(ctx, l); }
static int bwd(void *ctx, int l) { return (int)strata_hook_backward(ctx, l); }

static strata_status run_open(run *r, const strata_config *cfg, int worker_delay_us)
{
    gpt_config mc = {.vocab = 256, .max_seq = 32, .n_layer = 2, .n_head = 2, .d_model = 32};
    if (gpt_create(&mc, 7, &r->m) != 0)
        return STRATA_ERR_INTERNAL;
    strata_status st = strata_create(cfg, &r->rt);
    if (st == STRATA_OK)
        st = strata_testing_set_worker_delay(r->rt, worker_delay_us);
    for (int i = 0; i < gpt_num_tensors(r->m) && st == STRATA_OK; i++) {
        const gpt_tensor *t = gpt_tensor_at(r->m, i);
        strata_param_desc d = {.name = t->name, .ndim = t->ndim,
                               .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 1},
                               .layer = t->layer,
                               .role = t->role == GPT_ROLE_EMBEDDING ? STRATA_ROLE_EMBEDDING
                                       : t->role == GPT_ROLE_MATRIX  ? STRATA_ROLE_MATRIX
                                                                     : STRATA_ROLE_VECTOR,
                               .optimizer = STRATA_OPTIM_DEFAULT, .data = t->data, .grad = t->grad};
        st = strata_param_add(r->rt, &d, NULL);
    }
    return st == STRATA_OK ? strata_commit(r->rt) : st;
}

static void run_close(run *r)
{
    strata_destroy(r->rt);
    gpt_destroy(r->m);
}

/* `steps` steps on the same batches for every run; mean loss of the first
 * and of the last 10 steps. */
static strata_status run_steps(run *r, int steps, double *first, double *last)
{
    uint8_t x[4 * 32], y[4 * 32];
    uint64_t rng = 99;
    *first = *last = 0.0;
    for (int s = 0; s < steps; s++) {
        gpt_data_batch(&corpus, 0, 4, 32, &rng, x, y);
        gpt_zero_grad(r->m);
        float l;
        int rc = gpt_forward(r->m, x, y, 4, 32, fwd, r->rt, &l);
        if (!rc)
            rc = gpt_backward(r->m, bwd, r->rt);
        if (rc)
            return (strata_status)rc;
        strata_status st = strata_step(r->rt);
        if (st != STRATA_OK)
            return st;
        if (s < 10)
            *first += l / 10.0;
        if (s >= steps - 10)
            *last += l / 10.0;
    }
    return STRATA_OK;
}

static int weights_equal(const run *a, const run *b)
{
    for (int i = 0; i < gpt_num_tensors(a->m); i++) {
        const gpt_tensor *ta = gpt_tensor_at(a->m, i), *tb = gpt_tensor_at(b->m, i);
        size_t n = (size_t)ta->shape[0] * (ta->ndim == 2 ? (size_t)ta->shape[1] : 1);
        if (memcmp(ta->data, tb->data, n * sizeof(float)) != 0) {
            print_message("  first difference in %s\n", ta->name);
            return 0;
        }
    }
    return 1;
}

static strata_config toy_run_config(void)
{
    strata_config c;
    strata_config_default(&c);
    c.matrix_optimizer = toy_kind;
    c.adamw.lr = 3e-3f;
    c.max_grad_norm = 1.0f;
    c.blas_threads = 1;
    c.log_level = STRATA_LOG_ERROR;
    return c;
}

/* ------------------------------------------------------------ the tests */

static void test_table(void **state)
{
    (void)state;
    CHECK((int)toy_kind == 7 && strata_family_count() == 8, "kind %d, %d families",
          (int)toy_kind, strata_family_count());
    CHECK(strcmp(strata_optimizer_name(toy_kind), "toy-sgd") == 0, "name %s",
          strata_optimizer_name(toy_kind));
    strata_optimizer k = STRATA_OPTIM_DEFAULT;
    CHECK(strata_optimizer_parse("toy-sgd", &k) == STRATA_OK && k == toy_kind, "parse");
    CHECK(strata_optimizer_parse("nope", &k) == STRATA_ERR_INVALID_ARG &&
              strstr(strata_last_error(), "normuon, dion2 or toy-sgd"),
          "the parse error lists the table: %s", strata_last_error());
    strata_optimizer again;
    CHECK(strata_family_register(&toy_family, &toy_cfg, &again) == STRATA_ERR_INVALID_ARG,
          "a name is registered once");
    const strata_family_row *r = strata_family_row_of(toy_kind);
    CHECK(r && r->fam == &toy_family && r->builtin < 0 && r->config == &toy_cfg, "row");
    CHECK(strata_family_row_of((strata_optimizer)8) == NULL, "no row past the table");

    strata_config c = toy_run_config();
    strata_optimizer_info info;
    CHECK(strata_optimizer_info_get(&c, toy_kind, &info) == STRATA_OK, "info: %s",
          strata_last_error());
    CHECK(info.has_refresh && info.async_capable && info.precondition_frequency == 3 &&
              info.first_refresh == 3 && info.state_per_param == 1 &&
              strcmp(info.refresh_noun, "RMS scales") == 0,
          "info from the toy's slots");
    float *lr = &c.adamw.lr, *wd = &c.adamw.weight_decay;
    CHECK(strata_config_optimizer_lr(&c, toy_kind, &lr, &wd) == STRATA_OK && !lr && !wd,
          "a registered family's lr is not in strata_config");
    CHECK(strata_config_optimizer_lr(&c, STRATA_OPTIM_MUON, &lr, &wd) == STRATA_OK &&
              lr == &c.muon.lr && wd == &c.muon.weight_decay,
          "a built-in family's lr is its member's");

    /* its configuration check runs at strata_create, as the built-ins' do */
    strata_runtime *rt = NULL;
    toy_cfg.momentum = 1.5f;
    CHECK(strata_create(&c, &rt) == STRATA_ERR_INVALID_ARG && !rt &&
              strstr(strata_last_error(), "toy-sgd"),
          "a bad toy configuration is refused: %s", strata_last_error());
    toy_default(&toy_cfg);

    /* routing: matrices to the toy, the tail to AdamW */
    run a = {0};
    CHECK(run_open(&a, &c, 0) == STRATA_OK, "open: %s", strata_last_error());
    int to_toy = 0, to_tail = 0;
    for (int i = 0; i < gpt_num_tensors(a.m); i++) {
        strata_optimizer o;
        CHECK(strata_param_optimizer(a.rt, i, &o) == STRATA_OK, "param_optimizer");
        to_toy += o == toy_kind;
        to_tail += o == strata_family_tail_kind();
    }
    CHECK(to_toy > 0 && to_tail > 0 && to_toy + to_tail == gpt_num_tensors(a.m),
          "%d to the toy, %d to the tail", to_toy, to_tail);
    run_close(&a);
}

static void test_trains_sync_async(void **state)
{
    (void)state;
    const int steps = 60;
    strata_config sync = toy_run_config(), as = toy_run_config();
    as.async = true;
    as.staleness = 0;
    as.workers = 1;
    run a = {0}, b = {0}, c = {0};
    CHECK(run_open(&a, &sync, 0) == STRATA_OK, "sync open: %s", strata_last_error());
    CHECK(run_open(&b, &as, 0) == STRATA_OK, "async open: %s", strata_last_error());
    CHECK(run_open(&c, &as, 2000) == STRATA_OK, "async open: %s", strata_last_error());
    double fa, la, fb, lb, fc, lc;
    CHECK(run_steps(&a, steps, &fa, &la) == STRATA_OK, "sync: %s", strata_last_error());
    CHECK(run_steps(&b, steps, &fb, &lb) == STRATA_OK, "async: %s", strata_last_error());
    CHECK(run_steps(&c, steps, &fc, &lc) == STRATA_OK, "async, slow workers: %s",
          strata_last_error());
    strata_stats sa, sb, sc;
    strata_stats_get(a.rt, &sa);
    strata_stats_get(b.rt, &sb);
    strata_stats_get(c.rt, &sc);
    const int eq_b = weights_equal(&a, &b), eq_c = weights_equal(&a, &c);
    print_message("toy-sgd over %d steps: loss %.4f -> %.4f (sync), %.4f -> %.4f (async S=0), "
                  "%.4f -> %.4f (async S=0, slow workers); S=0 %s / %s; refreshes %lld sync, "
                  "%lld async (%lld jobs, %lld installs)\n",
                  steps, fa, la, fb, lb, fc, lc, eq_b ? "bit-identical" : "DIFFERENT",
                  eq_c ? "bit-identical" : "DIFFERENT", (long long)sa.root_refreshes,
                  (long long)sb.root_refreshes, (long long)sb.jobs_submitted,
                  (long long)sb.coh_installs);
    CHECK(la < fa - 0.3, "sync: loss %.4f -> %.4f does not fall", fa, la);
    CHECK(eq_b && eq_c && la == lb && la == lc, "async S = 0 must be bit-identical to sync");
    /* the refreshes ran: inline in sync, on the workers in async */
    CHECK(sa.root_refreshes > 0 && sa.jobs_submitted == 0, "sync: %lld refreshes, %lld jobs",
          (long long)sa.root_refreshes, (long long)sa.jobs_submitted);
    CHECK(sb.jobs_submitted > 0 && sb.root_refreshes > 0 && sb.coh_installs > 0 &&
              sc.jobs_submitted > 0,
          "async: %lld jobs, %lld refreshes, %lld installs", (long long)sb.jobs_submitted,
          (long long)sb.root_refreshes, (long long)sb.coh_installs);
    run_close(&a);
    run_close(&b);
    run_close(&c);
}

int main(void)
{
    if (access(CORPUS, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", CORPUS);
        return 77;
    }
    if (gpt_data_load(CORPUS, 0.1, 33, &corpus) != 0) {
        printf("cannot load %s: %s\n", CORPUS, strata_last_error());
        return 1;
    }
    toy_default(&toy_cfg);
    if (strata_family_register(&toy_family, &toy_cfg, &toy_kind) != STRATA_OK) {
        printf("register: %s\n", strata_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_trains_sync_async),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gpt_data_free(&corpus);
    return rc;
}
