/* Private layout shared by the tier implementations. */
#ifndef STRATA_TIER_INTERNAL_H
#define STRATA_TIER_INTERNAL_H

#include <stdatomic.h>

#include "tiers/tiers.h"

typedef struct tier_ops {
    strata_status (*alloc)(strata_tier *t, size_t bytes, void **out);
    void (*free)(strata_tier *t, void *p, size_t bytes);
    void (*destroy)(strata_tier *t);
    size_t (*charge_size)(size_t bytes); /* what alloc(bytes) charges the budget */
} tier_ops;

struct strata_tier {
    strata_tier_kind kind;
    const tier_ops *ops;
    size_t budget;
    _Atomic size_t in_use;
    _Atomic size_t peak;
    void *impl;
};

/* The kernel orders an io_uring submission before its completion; tell
 * ThreadSanitizer, which cannot see that edge, so that the handoff of a chunk
 * descriptor and its staging buffer between the submitting thread and the
 * completion thread is not reported as a race. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TIER_HANDOFF_RELEASE(p) __tsan_release(p)
#define TIER_HANDOFF_ACQUIRE(p) __tsan_acquire(p)
#else
#define TIER_HANDOFF_RELEASE(p) ((void)(p))
#define TIER_HANDOFF_ACQUIRE(p) ((void)(p))
#endif

/* Account `bytes` against the budget; STRATA_ERR_NOMEM if it would pass it. */
strata_status strata_tier_charge(strata_tier *t, size_t bytes);
void strata_tier_uncharge(strata_tier *t, size_t bytes);

#endif
