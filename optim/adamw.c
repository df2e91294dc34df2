/* AdamW (Loshchilov & Hutter, ICLR 2019), PyTorch torch.optim.AdamW semantics. */
#include "strata/optim.h"

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

strata_status strata_adamw_update(const strata_adamw_config *c, float lr_scale, int64_t t, size_t n,
                                  float *w, const float *g, float *m, float *v)
{
    if (!c || (n && (!w || !g || !m || !v)))
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_update: NULL argument");
    if (t < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw_update: step t=%lld must be >= 1",
                            (long long)t);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f && c->beta2 < 1.0f))
        return strata_error(STRATA_ERR_INVALID_ARG, "adamw: betas (%g, %g) must lie in [0, 1)",
                            (double)c->beta1, (double)c->beta2);
    const float lr = c->lr * lr_scale;
    const float b1 = c->beta1, b2 = c->beta2;
    /* Bias corrections in double: 1 - b^t loses digits in float for small t. */
    const float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
    const float step = lr / bc1;
    const float decay = lr * c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float wi = w[i];
        w[i] = wi - step * mi / (sqrtf(vi) / bc2_sqrt + c->eps) - decay * wi;
    }
    return STRATA_OK;
}

const char *strata_optimizer_name(strata_optimizer o)
{
    switch (o) {
    case STRATA_OPTIM_ADAMW: return "adamw";
    case STRATA_OPTIM_SHAMPOO: return "shampoo";
    case STRATA_OPTIM_MUON: return "muon";
    case STRATA_OPTIM_SOAP: return "soap";
    case STRATA_OPTIM_KL_SHAMPOO: return "kl-shampoo";
    case STRATA_OPTIM_DEFAULT: return "default";
    }
    return "unknown";
}

strata_status strata_optimizer_parse(const char *name, strata_optimizer *out)
{
    if (!name || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "optimizer_parse: NULL argument");
    static const strata_optimizer all[] = {STRATA_OPTIM_ADAMW, STRATA_OPTIM_SHAMPOO,
                                           STRATA_OPTIM_MUON, STRATA_OPTIM_SOAP,
                                           STRATA_OPTIM_KL_SHAMPOO};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, strata_optimizer_name(all[i])) == 0) {
            *out = all[i];
            return STRATA_OK;
        }
    return strata_error(STRATA_ERR_INVALID_ARG,
                        "unknown optimizer '%s' (expected adamw, shampoo, muon, soap or "
                        "kl-shampoo)",
                        name);
}
