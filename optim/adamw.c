/* AdamW (Loshchilov & Hutter, ICLR 2019), PyTorch torch.optim.AdamW semantics. */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"
#include "optim_internal.h"
#include "precond.h"

#include <stdlib.h>

#include <math.h>
#include <string.h>

void strata_adamw_config_default(strata_adamw_config *c)
{
    c->lr = 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
}

strata_status strata_adamw_config_check(const strata_adamw_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_config_check: NULL config");
    strata_status st = optim_check_nonneg("adamw", "lr", c->lr);
    OPTIM_CHECK(st, optim_check_beta("adamw", "beta1", c->beta1));
    OPTIM_CHECK(st, optim_check_beta("adamw", "beta2", c->beta2));
    OPTIM_CHECK(st, optim_check_pos("adamw", "eps", c->eps));
    OPTIM_CHECK(st, optim_check_nonneg("adamw", "weight_decay", c->weight_decay));
    return st;
}

/* The step's checks (the configuration was checked at creation; the host
 * API checks both on every call). */
static strata_status check_step(int64_t t)
{
    if (t < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_update: step t=%lld must be >= 1",
                            (long long)t);
    return STRATA_OK;
}

/* The per-step scalars of the update, rounded from double exactly as the
 * loop below uses them. */
static strata_op_adamw step_scalars(const strata_adamw_config *c, float lr_scale, int64_t t)
{
    const float lr = c->lr * lr_scale;
    const float b1 = c->beta1, b2 = c->beta2;
    /* Bias corrections in double: 1 - b^t loses digits in float for small t. */
    const float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    return (strata_op_adamw){.beta1 = b1,
                             .beta2 = b2,
                             .step = lr / bc1,
                             .bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t)),
                             .eps = c->eps,
                             .decay = lr * c->weight_decay};
}

/* Host memory (the public one-tensor call has no backend): the per-element
 * expression of strata_backend_adamw_update (backend/ops_math.h). */
strata_status strata_adamw_update(const strata_adamw_config *c, float lr_scale, int64_t t, size_t n,
                                  float *w, const float *g, float *m, float *v)
{
    if (!c || (n && (!w || !g || !m || !v)))
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_update: NULL argument");
    strata_status st = strata_adamw_config_check(c);
    OPTIM_CHECK(st, check_step(t));
    OPTIM_CHECK(st, optim_check_lr_scale("adamw_update", lr_scale));
    if (st != STRATA_OK)
        return st;
    const strata_op_adamw a = step_scalars(c, lr_scale, t);
    const float b1 = a.beta1, b2 = a.beta2, step = a.step, bc2_sqrt = a.bc2_sqrt,
                decay = a.decay;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float wi = w[i];
        w[i] = wi - step * mi / (sqrtf(vi) / bc2_sqrt + a.eps) - decay * wi;
    }
    return STRATA_OK;
}

/* ------------------------------------------------ preconditioner family */

/* AdamW as a family with nothing to refresh: its state is the two moments,
 * one backend allocation of 2 numel floats. */
typedef struct adamw_state {
    strata_adamw_config cfg;
    strata_backend *be;
    size_t numel;
    float *m, *v;
    strata_ledger_hold held; /* the moments, in the runtime's ledger */
} adamw_state;

static bool fam_false(const void *cfg)
{
    (void)cfg;
    return false;
}

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    (void)external;
    strata_status st = strata_adamw_config_check(cfg);
    if (st != STRATA_OK)
        return st;
    adamw_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "adamw: out of memory");
    s->cfg = *(const strata_adamw_config *)cfg;
    s->be = be;
    s->numel = sh->numel;
    void *mem = NULL;
    st = strata_backend_alloc(be, 2 * sh->numel * sizeof(float), &mem);
    if (st != STRATA_OK) {
        free(s);
        return st;
    }
    s->m = mem;
    s->v = s->m + sh->numel;
    strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_DEVICE,
                           STRATA_LEDGER_MOMENTS, 2 * sh->numel * sizeof(float));
    *out = s;
    return STRATA_OK;
}

static void fam_destroy(void *state)
{
    adamw_state *s = state;
    if (!s)
        return;
    strata_ledger_hold_release(&s->held);
    strata_backend_free(s->be, s->m, 2 * s->numel * sizeof(float));
    free(s);
}

static size_t fam_bytes(const void *state)
{
    return 2 * ((const adamw_state *)state)->numel * sizeof(float);
}

static int fam_n_blocks(const void *s)
{
    (void)s;
    return 0;
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    adamw_state *s = state;
    if (!w || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_update: NULL argument");
    strata_status st = check_step(t);
    if (st != STRATA_OK)
        return st;
    /* The overflow rule (optim_internal.h): m and v are EMAs (convex), so
     * v stays below gamma = ||g||^2 >= max g^2. */
    double gamma = 0.0;
    bool finite = false;
    st = optim_gamma(s->be, g, s->numel, &gamma, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite)
        return strata_error(STRATA_ERR_NONFINITE, "adamw: non-finite gradient (nothing updated)");
    if (!optim_state_absorbs(gamma, cnt))
        return STRATA_OK;
    return strata_backend_adamw_update(s->be, NULL, s->numel, w, g, s->m, s->v,
                                       step_scalars(&s->cfg, lr_scale, t));
}

static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const adamw_state *s = state;
    if (out && cap > 0)
        strata_tensor_info_set(&out[0], "exp_avg", -1, STRATA_F32, 1, (int64_t)s->numel,
                               STRATA_TIER_DEVICE, s->m);
    if (out && cap > 1)
        strata_tensor_info_set(&out[1], "exp_avg_sq", -1, STRATA_F32, 1, (int64_t)s->numel,
                               STRATA_TIER_DEVICE, s->v);
    return 2;
}

static void fam_config_default(void *cfg)
{
    strata_adamw_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_adamw_config_check(cfg);
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    adamw_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

/* The two moments fam_create allocates and charges. */
static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    (void)cfg;
    (void)blocks;
    (void)cap;
    memset(out, 0, sizeof *out);
    out->device[STRATA_LEDGER_MOMENTS] = 2 * sh->numel * sizeof(float);
    return 0;
}

const strata_precond_family strata_family_adamw = {
    .name = "adamw",
    .has_refresh = fam_false,
    .async_capable = fam_false,
    .cfg_size = sizeof(strata_adamw_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_adamw_config, lr),
    .weight_decay_offset = offsetof(strata_adamw_config, weight_decay),
    .state_per_param = 4,
    .create = fam_create,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .plan = fam_plan,
    .n_blocks = fam_n_blocks,
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .tensors = fam_tensors,
};
