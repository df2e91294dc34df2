/* Backend handle: the vtable wrapper, byte accounting and documented fallbacks.
 *
 * Invariants: bytes_in_use is the sum of sizes of live allocations made
 * through strata_backend_alloc; bytes_peak >= bytes_in_use at all times.
 * Both are updated with atomics so products and allocations may come from
 * several threads (the training thread and worker threads).
 */
#include "strata/backend.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct strata_backend {
    const strata_backend_iface *iface;
    void *ctx;
    size_t bytes_budget;
    _Atomic size_t bytes_in_use;
    _Atomic size_t bytes_peak;
};

strata_status strata_backend_create(const strata_backend_iface *iface, void *ctx,
                                    size_t bytes_budget, strata_backend **out)
{
    if (!out || !iface)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_create: NULL iface or out");
    *out = NULL;
    if (iface->version != STRATA_BACKEND_IFACE_VERSION)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend '%s': interface version %d, expected %d",
                            iface->name ? iface->name : "?", iface->version,
                            STRATA_BACKEND_IFACE_VERSION);
    if (!iface->alloc || !iface->free || !iface->copy || !iface->sgemm)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend '%s': a required slot is NULL",
                            iface->name ? iface->name : "?");
    strata_backend *be = calloc(1, sizeof *be);
    if (!be)
        return strata_error(STRATA_ERR_NOMEM, "backend_create: out of memory");
    be->iface = iface;
    be->ctx = ctx;
    be->bytes_budget = bytes_budget;
    atomic_init(&be->bytes_in_use, 0);
    atomic_init(&be->bytes_peak, 0);
    *out = be;
    return STRATA_OK;
}

void strata_backend_destroy(strata_backend *be)
{
    if (!be)
        return;
    if (be->iface->destroy)
        be->iface->destroy(be->ctx);
    free(be);
}

const char *strata_backend_name(const strata_backend *be)
{
    return be ? be->iface->name : "(null)";
}

void strata_backend_bytes(const strata_backend *be, size_t *in_use, size_t *peak)
{
    if (in_use)
        *in_use = be ? atomic_load_explicit(&be->bytes_in_use, memory_order_relaxed) : 0;
    if (peak)
        *peak = be ? atomic_load_explicit(&be->bytes_peak, memory_order_relaxed) : 0;
}

strata_status strata_backend_alloc(strata_backend *be, size_t bytes, void **out)
{
    if (!be || !out || bytes == 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_alloc: NULL handle/out or 0 bytes");
    *out = NULL;
    size_t now = atomic_fetch_add_explicit(&be->bytes_in_use, bytes, memory_order_relaxed) + bytes;
    if (be->bytes_budget && now > be->bytes_budget) {
        atomic_fetch_sub_explicit(&be->bytes_in_use, bytes, memory_order_relaxed);
        return strata_error(STRATA_ERR_NOMEM,
                            "backend '%s': %zu bytes more would exceed the budget of %zu bytes",
                            be->iface->name, bytes, be->bytes_budget);
    }
    strata_status st = be->iface->alloc(be->ctx, bytes, out);
    if (st != STRATA_OK) {
        atomic_fetch_sub_explicit(&be->bytes_in_use, bytes, memory_order_relaxed);
        return st;
    }
    size_t peak = atomic_load_explicit(&be->bytes_peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&be->bytes_peak, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    return STRATA_OK;
}

void strata_backend_free(strata_backend *be, void *ptr, size_t bytes)
{
    if (!be || !ptr)
        return;
    be->iface->free(be->ctx, ptr);
    atomic_fetch_sub_explicit(&be->bytes_in_use, bytes, memory_order_relaxed);
}

strata_status strata_backend_copy(strata_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!be || (bytes && (!dst || !src)))
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_copy: NULL argument");
    if (bytes == 0)
        return STRATA_OK;
    return be->iface->copy(be->ctx, dst, src, bytes);
}

strata_status strata_backend_sgemm(strata_backend *be, int trans_a, int trans_b, int m, int n,
                                   int k, float alpha, const float *a, int lda, const float *b,
                                   int ldb, float beta, float *c, int ldc)
{
    if (!be || m < 0 || n < 0 || k < 0 || (m && n && (!c || (k && (!a || !b)))))
        return strata_error(STRATA_ERR_INVALID_ARG, "sgemm: bad arguments m=%d n=%d k=%d", m, n, k);
    if (m == 0 || n == 0)
        return STRATA_OK;
    return be->iface->sgemm(be->ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                            ldc);
}

strata_status strata_backend_ssyrk(strata_backend *be, int trans, int n, int k, float alpha,
                                   const float *a, int lda, float beta, float *c, int ldc)
{
    if (!be || n < 0 || k < 0 || (n && (!c || (k && !a))))
        return strata_error(STRATA_ERR_INVALID_ARG, "ssyrk: bad arguments n=%d k=%d", n, k);
    if (n == 0)
        return STRATA_OK;
    if (be->iface->ssyrk)
        return be->iface->ssyrk(be->ctx, trans, n, k, alpha, a, lda, beta, c, ldc);
    /* Fallback: a full GEMM with the operand twice. */
    return be->iface->sgemm(be->ctx, trans ? 1 : 0, trans ? 0 : 1, n, n, k, alpha, a, lda, a, lda,
                            beta, c, ldc);
}

strata_status strata_backend_synchronize(strata_backend *be)
{
    if (!be)
        return strata_error(STRATA_ERR_INVALID_ARG, "synchronize: NULL backend");
    return be->iface->synchronize ? be->iface->synchronize(be->ctx) : STRATA_OK;
}
