/* Private layout shared by the tier implementations. */
#ifndef STRATA_TIER_INTERNAL_H
#define STRATA_TIER_INTERNAL_H

#include <stdatomic.h>

#include "strata/tiers.h"

typedef struct tier_ops {
    strata_status (*alloc)(strata_tier *t, size_t bytes, void **out);
    void (*free)(strata_tier *t, void *p, size_t bytes);
    void (*destroy)(strata_tier *t);
} tier_ops;

struct strata_tier {
    strata_tier_kind kind;
    const tier_ops *ops;
    size_t budget;
    _Atomic size_t in_use;
    _Atomic size_t peak;
    void *impl;
};

/* Account `bytes` against the budget; STRATA_ERR_NOMEM if it would pass it. */
strata_status strata_tier_charge(strata_tier *t, size_t bytes);
void strata_tier_uncharge(strata_tier *t, size_t bytes);

#endif
