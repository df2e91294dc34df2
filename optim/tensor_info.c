/* strata_tensor_info_set (optim/precond.h): the helper every family calls
 * to describe its persistent tensors, and the slots of families without
 * refreshes (strata_family_never, strata_family_no_blocks). Kept apart from the family table
 * (family.c), which points at every family: the families call down into
 * this file, and nothing here calls a family, so optim/ has no call circle. */
#include <stdio.h>
#include <string.h>

#include "optim/precond.h"

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

bool strata_family_never(const void *cfg)
{
    (void)cfg;
    return false;
}

int strata_family_no_blocks(const void *state)
{
    (void)state;
    return 0;
}
