/* runtime/costmodel.h — what one optimizer step of a parameter costs on this
 * machine: the planner's input (owners of matrices). */
#ifndef STRATA_RUNTIME_COSTMODEL_H
#define STRATA_RUNTIME_COSTMODEL_H

#include <stdbool.h>

#include "optim/precond.h"

/* Seconds of one optimizer step of family `f` (configuration cfg) on a
 * parameter of `shape` on backend `be`, its refreshes amortized over the
 * precondition frequency: measured once per machine (CPU model, OpenBLAS core
 * and threads, family, shape, F) and cached on disk (costmodel.c says where;
 * STRATA_COST_CACHE=0: no cache). *cached says whether the cache answered.
 * Errors: STRATA_ERR_INVALID_ARG, the family's (e.g. STRATA_ERR_NOMEM). */
strata_status strata_cost_step_seconds(strata_backend *be, const strata_precond_family *f,
                                       const void *cfg, const strata_precond_shape *shape,
                                       double *seconds, bool *cached);

#endif
