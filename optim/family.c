/* Optimizer names and parsing, the family table, and the helpers the
 * families share (optim/precond.h). */
#include "strata/optim.h"
#include "precond.h"

#include <stdio.h>
#include <string.h>

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

void strata_tensor_info_set(strata_tensor_info *ti, const char *name, int index,
                            strata_dtype dtype, int64_t rows, int64_t cols,
                            strata_tier_kind where, void *data)
{
    memset(ti, 0, sizeof *ti);
    if (index >= 0)
        snprintf(ti->name, sizeof ti->name, "%s.%d", name, index);
    else
        snprintf(ti->name, sizeof ti->name, "%s", name);
    ti->dtype = dtype;
    ti->ndim = rows == 0 && cols == 0 ? 0 : rows == 1 ? 1 : 2;
    ti->shape[0] = ti->ndim == 1 ? cols : rows;
    ti->shape[1] = ti->ndim == 2 ? cols : 0;
    ti->where = where;
    ti->data = data;
}
