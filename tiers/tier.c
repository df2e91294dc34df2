/* Tier handles: budget accounting shared by all tiers, and the host tier. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tier_internal.h"

#include "backend/ops.h"

const char *strata_tier_kind_name(strata_tier_kind k)
{
    switch (k) {
    case STRATA_TIER_DEVICE: return "device";
    case STRATA_TIER_HOST: return "host";
    case STRATA_TIER_NVME: return "nvme";
    }
    return "unknown";
}

strata_status strata_tier_charge(strata_tier *t, size_t bytes)
{
    size_t now = atomic_fetch_add_explicit(&t->in_use, bytes, memory_order_relaxed) + bytes;
    if (t->budget && now > t->budget) {
        atomic_fetch_sub_explicit(&t->in_use, bytes, memory_order_relaxed);
        return strata_error(STRATA_ERR_NOMEM, "%s tier: %zu bytes more would exceed its budget of %zu",
                            strata_tier_kind_name(t->kind), bytes, t->budget);
    }
    size_t peak = atomic_load_explicit(&t->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&t->peak, &peak, now,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed))
        ;
    return STRATA_OK;
}

void strata_tier_uncharge(strata_tier *t, size_t bytes)
{
    atomic_fetch_sub_explicit(&t->in_use, bytes, memory_order_relaxed);
}

void strata_tier_bytes(const strata_tier *t, size_t *in_use, size_t *peak)
{
    if (in_use)
        *in_use = t ? atomic_load_explicit(&((strata_tier *)t)->in_use, memory_order_relaxed) : 0;
    if (peak)
        *peak = t ? atomic_load_explicit(&((strata_tier *)t)->peak, memory_order_relaxed) : 0;
}

strata_tier_kind strata_tier_kind_of(const strata_tier *t)
{
    return t->kind;
}

strata_status strata_tier_alloc(strata_tier *t, size_t bytes, void **out)
{
    if (!t || !out || bytes == 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier_alloc: NULL tier/out or 0 bytes");
    *out = NULL;
    return t->ops->alloc(t, bytes, out);
}

size_t strata_tier_charge_size(const strata_tier *t, size_t bytes)
{
    return t && bytes ? t->ops->charge_size(bytes) : 0;
}

void strata_tier_free(strata_tier *t, void *p, size_t bytes)
{
    if (t && p)
        t->ops->free(t, p, bytes);
}

void strata_tier_destroy(strata_tier *t)
{
    if (!t)
        return;
    if (t->ops->destroy)
        t->ops->destroy(t);
    free(t);
}

/* ---- host tier: page-aligned, zeroed memory */

static size_t page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

/* impl: NULL (pageable) or the backend whose HOST_PINNED memory the tier
 * hands out. Page alignment (nvme reads go straight into the slots) does not
 * depend on the backend's allocator: a pinned block is one page larger than
 * asked, the pointer handed out is the first page boundary at least 16 bytes
 * in, and the block's own address sits in the 8 bytes before it. */
static size_t pinned_bytes(size_t rounded, size_t page)
{
    return rounded + page;
}

static strata_status host_alloc(strata_tier *t, size_t bytes, void **out)
{
    size_t rounded = page_round(bytes);
    strata_status st = strata_tier_charge(t, rounded);
    if (st != STRATA_OK)
        return st;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = NULL;
    if (t->impl) {
        st = strata_backend_alloc_kind(t->impl, STRATA_MEM_HOST_PINNED,
                                       pinned_bytes(rounded, page), &p);
        if (st != STRATA_OK) {
            strata_tier_uncharge(t, rounded);
            return st;
        }
        const uintptr_t a = ((uintptr_t)p + 16 + page - 1) / page * page;
        ((void **)a)[-1] = p;
        memset((void *)a, 0, rounded);
        *out = (void *)a;
        return STRATA_OK;
    }
    if (posix_memalign(&p, page, rounded) != 0) {
        strata_tier_uncharge(t, rounded);
        return strata_error(STRATA_ERR_NOMEM, "host tier: cannot allocate %zu bytes", rounded);
    }
    memset(p, 0, rounded);
    *out = p;
    return STRATA_OK;
}

static void host_free(strata_tier *t, void *p, size_t bytes)
{
    const size_t rounded = page_round(bytes);
    if (t->impl)
        strata_backend_free_kind(t->impl, STRATA_MEM_HOST_PINNED, ((void **)p)[-1],
                                 pinned_bytes(rounded, (size_t)sysconf(_SC_PAGESIZE)));
    else
        free(p);
    strata_tier_uncharge(t, rounded);
}

int strata_tier_ledger_tier(const strata_tier *t)
{
    if (t && t->kind == STRATA_TIER_NVME)
        return STRATA_LEDGER_NVME;
    return t && t->ops && t->impl && t->kind == STRATA_TIER_HOST ? STRATA_LEDGER_HOST_PINNED
                                                                 : STRATA_LEDGER_HOST;
}

static const tier_ops host_ops = {host_alloc, host_free, NULL, page_round};

strata_status strata_tier_host_create(size_t budget, strata_tier **out)
{
    if (!out)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier_host_create: out is NULL");
    strata_tier *t = calloc(1, sizeof *t);
    if (!t)
        return strata_error(STRATA_ERR_NOMEM, "tier_host_create: out of memory");
    t->kind = STRATA_TIER_HOST;
    t->ops = &host_ops;
    t->budget = budget;
    *out = t;
    return STRATA_OK;
}

strata_status strata_tier_host_create_pinned(size_t budget, strata_backend *be,
                                             strata_tier **out)
{
    if (!be)
        return strata_error(STRATA_ERR_INVALID_ARG, "tier_host_create_pinned: backend is NULL");
    strata_status st = strata_tier_host_create(budget, out);
    if (st == STRATA_OK)
        (*out)->impl = be;
    return st;
}
