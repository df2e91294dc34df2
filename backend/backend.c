/* Backend handle: the vtable wrapper, byte accounting per memory kind,
 * streams and events, and the documented fallbacks.
 *
 * Invariants: bytes_in_use[k] is the sum of sizes of live allocations of
 * kind k made through strata_backend_alloc(_kind); bytes_peak[k] >=
 * bytes_in_use[k] at all times. Both are updated with atomics so products
 * and allocations may come from several threads (the training thread and
 * worker threads). A strata_stream / strata_event wraps the backend's own
 * handle (NULL on a synchronous backend, which has no stream slots) and
 * remembers its backend, so work is never queued on another backend's
 * stream. The elementwise ops live in ops.c.
 */
#include "backend_internal.h"
#include "gemm_bf16.h"
#include "ops.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct strata_backend {
    const strata_backend_iface *iface;
    void *ctx;
    _Atomic size_t bytes_budget[STRATA_MEM_KINDS];
    _Atomic size_t bytes_in_use[STRATA_MEM_KINDS];
    _Atomic size_t bytes_peak[STRATA_MEM_KINDS];
    strata_ledger *ledger; /* the runtime's (strata_backend_ledger_set), NULL: none */
};

struct strata_stream {
    strata_backend *be;
    void *impl;
    strata_stream_priority prio;
};

struct strata_event {
    strata_backend *be;
    void *impl;
    bool timing; /* made by timing_event_create */
};

const strata_backend_iface *backend_iface(const strata_backend *be)
{
    return be->iface;
}

void *backend_ctx(const strata_backend *be)
{
    return be->ctx;
}

strata_status backend_stream_impl(const strata_backend *be, const strata_stream *s, void **impl,
                                  const char *who)
{
    *impl = NULL;
    if (!be)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL backend", who);
    if (!s)
        return STRATA_OK;
    if (s->be != be)
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: stream belongs to backend '%s', not '%s'",
                            who, s->be->iface->name, be->iface->name);
    *impl = s->impl;
    return STRATA_OK;
}

static bool has_streams(const strata_backend_iface *i)
{
    return i->stream_create != NULL;
}

/* The nine stream/event slots: all set or all NULL. */
static bool streams_consistent(const strata_backend_iface *i)
{
    const bool set[9] = {i->stream_create != NULL,     i->stream_destroy != NULL,
                         i->stream_synchronize != NULL, i->event_create != NULL,
                         i->event_destroy != NULL,      i->event_record != NULL,
                         i->event_query != NULL,        i->event_synchronize != NULL,
                         i->stream_wait_event != NULL};
    for (int k = 1; k < 9; k++)
        if (set[k] != set[0])
            return false;
    return true;
}

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
    if (!streams_consistent(iface))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "backend '%s': the stream and event slots must be all set or all NULL",
                            iface->name ? iface->name : "?");
    if (!iface->timing_event_create != !iface->event_elapsed ||
        (iface->timing_event_create && !iface->stream_create))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "backend '%s': timing_event_create and event_elapsed must be both set "
                            "or both NULL, and only with the stream and event slots",
                            iface->name ? iface->name : "?");
    if (!iface->alloc_kind != !iface->free_kind)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "backend '%s': alloc_kind and free_kind must be both set or both NULL",
                            iface->name ? iface->name : "?");
    strata_backend *be = calloc(1, sizeof *be);
    if (!be)
        return strata_error(STRATA_ERR_NOMEM, "backend_create: out of memory");
    be->iface = iface;
    be->ctx = ctx;
    for (int k = 0; k < STRATA_MEM_KINDS; k++) {
        atomic_init(&be->bytes_budget[k], k == STRATA_MEM_DEVICE ? bytes_budget : 0);
        atomic_init(&be->bytes_in_use[k], 0);
        atomic_init(&be->bytes_peak[k], 0);
    }
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
    strata_backend_bytes_kind(be, STRATA_MEM_DEVICE, in_use, peak);
}

static bool kind_ok(strata_mem_kind kind)
{
    return (unsigned)kind < STRATA_MEM_KINDS;
}

void strata_backend_bytes_kind(const strata_backend *be, strata_mem_kind kind, size_t *in_use,
                               size_t *peak)
{
    const bool ok = be && kind_ok(kind);
    if (in_use)
        *in_use = ok ? atomic_load_explicit(&be->bytes_in_use[kind], memory_order_relaxed) : 0;
    if (peak)
        *peak = ok ? atomic_load_explicit(&be->bytes_peak[kind], memory_order_relaxed) : 0;
}

strata_status strata_backend_set_budget(strata_backend *be, strata_mem_kind kind, size_t bytes)
{
    if (!be || !kind_ok(kind))
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_set_budget: NULL backend or kind %d",
                            (int)kind);
    atomic_store_explicit(&be->bytes_budget[kind], bytes, memory_order_relaxed);
    return STRATA_OK;
}

static const char *kind_name(strata_mem_kind kind)
{
    static const char *const names[STRATA_MEM_KINDS] = {"device", "host", "host-pinned",
                                                        "managed"};
    return kind_ok(kind) ? names[kind] : "?";
}

/* Memory of a non-device kind from a backend without alloc_kind: HOST only. */
static strata_status heap_alloc(strata_mem_kind kind, size_t bytes, void **out)
{
    if (kind != STRATA_MEM_HOST)
        return strata_error(STRATA_ERR_UNSUPPORTED, "backend: no %s memory on this backend",
                            kind_name(kind));
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "backend: cannot allocate %zu bytes of host memory",
                            bytes);
    memset(p, 0, rounded);
    *out = p;
    return STRATA_OK;
}

strata_status strata_backend_alloc_kind(strata_backend *be, strata_mem_kind kind, size_t bytes,
                                        void **out)
{
    if (!be || !out || bytes == 0 || !kind_ok(kind))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "backend_alloc: NULL handle/out, 0 bytes or unknown kind %d", (int)kind);
    *out = NULL;
    size_t now = atomic_fetch_add_explicit(&be->bytes_in_use[kind], bytes, memory_order_relaxed) +
                 bytes;
    const size_t budget = atomic_load_explicit(&be->bytes_budget[kind], memory_order_relaxed);
    if (budget && now > budget) {
        atomic_fetch_sub_explicit(&be->bytes_in_use[kind], bytes, memory_order_relaxed);
        return strata_error(STRATA_ERR_NOMEM,
                            "backend '%s': %zu bytes more of %s memory would exceed the budget of "
                            "%zu bytes",
                            be->iface->name, bytes, kind_name(kind), budget);
    }
    strata_status st = kind == STRATA_MEM_DEVICE ? be->iface->alloc(be->ctx, bytes, out)
                       : be->iface->alloc_kind   ? be->iface->alloc_kind(be->ctx, kind, bytes, out)
                                                 : heap_alloc(kind, bytes, out);
    if (st != STRATA_OK) {
        atomic_fetch_sub_explicit(&be->bytes_in_use[kind], bytes, memory_order_relaxed);
        return st;
    }
    size_t peak = atomic_load_explicit(&be->bytes_peak[kind], memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&be->bytes_peak[kind], &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    return STRATA_OK;
}

void strata_backend_ledger_set(strata_backend *be, strata_ledger *l)
{
    if (be)
        be->ledger = l;
}

strata_ledger *strata_backend_ledger(const strata_backend *be)
{
    return be ? be->ledger : NULL;
}

int strata_ledger_tier_of_mem(strata_mem_kind kind)
{
    switch (kind) {
    case STRATA_MEM_HOST: return STRATA_LEDGER_HOST;
    case STRATA_MEM_HOST_PINNED: return STRATA_LEDGER_HOST_PINNED;
    case STRATA_MEM_MANAGED: return STRATA_LEDGER_MANAGED;
    default: return STRATA_LEDGER_DEVICE;
    }
}

strata_status strata_backend_alloc(strata_backend *be, size_t bytes, void **out)
{
    return strata_backend_alloc_kind(be, STRATA_MEM_DEVICE, bytes, out);
}

void strata_backend_free_kind(strata_backend *be, strata_mem_kind kind, void *ptr, size_t bytes)
{
    if (!be || !ptr || !kind_ok(kind))
        return;
    if (kind == STRATA_MEM_DEVICE)
        be->iface->free(be->ctx, ptr);
    else if (be->iface->free_kind)
        be->iface->free_kind(be->ctx, kind, ptr);
    else
        free(ptr);
    atomic_fetch_sub_explicit(&be->bytes_in_use[kind], bytes, memory_order_relaxed);
}

void strata_backend_free(strata_backend *be, void *ptr, size_t bytes)
{
    strata_backend_free_kind(be, STRATA_MEM_DEVICE, ptr, bytes);
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

/* The host fallback reads the operands directly: only the CPU backend's
 * memory is known to be host memory. */
static strata_status bf16_refused(const strata_backend *be, const char *who)
{
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "%s: the %s backend has no bfloat16-input product and its memory is not "
                        "known to be host memory; use float32 Newton-Schulz there",
                        who, be->iface->name);
}

strata_status strata_backend_sgemm_bf16(strata_backend *be, int trans_a, int trans_b, int m,
                                        int n, int k, float alpha, const float *a, int lda,
                                        const float *b, int ldb, float beta, float *c, int ldc)
{
    if (!be || m < 0 || n < 0 || k < 0 || (m && n && (!c || (k && (!a || !b)))))
        return strata_error(STRATA_ERR_INVALID_ARG, "sgemm_bf16: bad arguments m=%d n=%d k=%d", m,
                            n, k);
    if (m == 0 || n == 0)
        return STRATA_OK;
    if (be->iface->sgemm_bf16)
        return be->iface->sgemm_bf16(be->ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                                     beta, c, ldc);
    if (strcmp(be->iface->name, "cpu") != 0)
        return bf16_refused(be, "sgemm_bf16");
    return strata_cpu_sgemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

strata_status strata_backend_ssyrk_bf16(strata_backend *be, int trans, int n, int k, float alpha,
                                        const float *a, int lda, float beta, float *c, int ldc)
{
    if (!be || n < 0 || k < 0 || (n && (!c || (k && !a))))
        return strata_error(STRATA_ERR_INVALID_ARG, "ssyrk_bf16: bad arguments n=%d k=%d", n, k);
    if (n == 0)
        return STRATA_OK;
    if (be->iface->ssyrk_bf16)
        return be->iface->ssyrk_bf16(be->ctx, trans, n, k, alpha, a, lda, beta, c, ldc);
    if (be->iface->sgemm_bf16)
        return be->iface->sgemm_bf16(be->ctx, trans ? 1 : 0, trans ? 0 : 1, n, n, k, alpha, a,
                                     lda, a, lda, beta, c, ldc);
    if (strcmp(be->iface->name, "cpu") != 0)
        return bf16_refused(be, "ssyrk_bf16");
    return strata_cpu_ssyrk_bf16(trans, n, k, alpha, a, lda, beta, c, ldc);
}

strata_status strata_backend_round_bf16(strata_backend *be, size_t n, float *x)
{
    if (!be || (n && !x))
        return strata_error(STRATA_ERR_INVALID_ARG, "round_bf16: NULL argument");
    if (strcmp(be->iface->name, "cpu") != 0)
        return bf16_refused(be, "round_bf16");
    strata_cpu_round_bf16(n, x);
    return STRATA_OK;
}

strata_status strata_backend_sumsq_lanes(strata_backend *be, size_t n, const float *x,
                                         double *out)
{
    if (!be || !out || (n && !x))
        return strata_error(STRATA_ERR_INVALID_ARG, "sumsq_lanes: NULL argument");
    if (strcmp(be->iface->name, "cpu") != 0)
        return bf16_refused(be, "sumsq_lanes");
    *out = strata_cpu_sumsq_lanes(n, x);
    return STRATA_OK;
}

strata_status strata_backend_synchronize(strata_backend *be)
{
    if (!be)
        return strata_error(STRATA_ERR_INVALID_ARG, "synchronize: NULL backend");
    return be->iface->synchronize ? be->iface->synchronize(be->ctx) : STRATA_OK;
}

strata_status strata_backend_sgemm_strided_batched(
    strata_backend *be, strata_stream *s, int trans_a, int trans_b, int m, int n, int k,
    float alpha, const float *a, int lda, int64_t stride_a, const float *b, int ldb,
    int64_t stride_b, float beta, float *c, int ldc, int64_t stride_c, int batch)
{
    void *impl;
    strata_status st = backend_stream_impl(be, s, &impl, "sgemm_strided_batched");
    if (st != STRATA_OK)
        return st;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || (batch && m && n && (!c || (k && (!a || !b)))))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "sgemm_strided_batched: bad arguments m=%d n=%d k=%d batch=%d", m, n,
                            k, batch);
    if (batch == 0 || m == 0 || n == 0)
        return STRATA_OK;
    if (be->iface->sgemm_strided_batched)
        return be->iface->sgemm_strided_batched(be->ctx, impl, trans_a, trans_b, m, n, k, alpha, a,
                                                lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                                                stride_c, batch);
    /* Fallback: one product at a time through sgemm, which runs on the
     * default stream: order it after the work queued on s, and finish it
     * before later work on s. */
    if (has_streams(be->iface))
        st = be->iface->stream_synchronize(be->ctx, impl);
    for (int i = 0; i < batch && st == STRATA_OK; i++)
        st = be->iface->sgemm(be->ctx, trans_a, trans_b, m, n, k, alpha,
                              k ? a + i * stride_a : a, lda, k ? b + i * stride_b : b, ldb, beta,
                              c + i * stride_c, ldc);
    if (st == STRATA_OK && be->iface->synchronize)
        st = be->iface->synchronize(be->ctx);
    return st;
}

/* ---- backend kinds ---------------------------------------------------- */

const char *strata_backend_kind_name(strata_backend_kind kind)
{
    switch (kind) {
    case STRATA_BACKEND_CPU: return "cpu";
    case STRATA_BACKEND_CUDA: return "cuda";
    }
    return "unknown";
}

strata_status strata_backend_kind_parse(const char *name, strata_backend_kind *out)
{
    if (!name || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_kind_parse: NULL argument");
    if (strcmp(name, "cpu") == 0)
        *out = STRATA_BACKEND_CPU;
    else if (strcmp(name, "cuda") == 0)
        *out = STRATA_BACKEND_CUDA;
    else
        return strata_error(STRATA_ERR_INVALID_ARG, "unknown backend '%s' (expected cpu or cuda)",
                            name);
    return STRATA_OK;
}

strata_status strata_backend_create_kind(strata_backend_kind kind, int blas_threads,
                                         strata_backend **out)
{
    if (!out)
        return strata_error(STRATA_ERR_INVALID_ARG, "backend_create_kind: out is NULL");
    *out = NULL;
    switch (kind) {
    case STRATA_BACKEND_CPU:
        return strata_backend_cpu_create(blas_threads, out);
    case STRATA_BACKEND_CUDA:
        return strata_backend_cuda_create(out);
    }
    return strata_error(STRATA_ERR_INVALID_ARG, "backend_create_kind: unknown kind %d", (int)kind);
}

/* ---- streams and events ---------------------------------------------- */

bool strata_backend_is_synchronous(const strata_backend *be)
{
    return !be || !has_streams(be->iface);
}

strata_status strata_backend_stream_create(strata_backend *be, strata_stream_priority prio,
                                           strata_stream **out)
{
    if (!be || !out || (prio != STRATA_STREAM_TRAINING && prio != STRATA_STREAM_SHADOW))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "stream_create: NULL backend/out or unknown priority %d", (int)prio);
    *out = NULL;
    strata_stream *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "stream_create: out of memory");
    s->be = be;
    s->prio = prio;
    if (has_streams(be->iface)) {
        strata_status st = be->iface->stream_create(be->ctx, prio, &s->impl);
        if (st != STRATA_OK) {
            free(s);
            return st;
        }
    }
    *out = s;
    return STRATA_OK;
}

void strata_backend_stream_destroy(strata_stream *s)
{
    if (!s)
        return;
    if (has_streams(s->be->iface))
        s->be->iface->stream_destroy(s->be->ctx, s->impl);
    free(s);
}

strata_stream_priority strata_backend_stream_priority(const strata_stream *s)
{
    return s ? s->prio : STRATA_STREAM_TRAINING;
}

strata_status strata_backend_stream_synchronize(strata_backend *be, strata_stream *s)
{
    void *impl;
    strata_status st = backend_stream_impl(be, s, &impl, "stream_synchronize");
    if (st != STRATA_OK || !has_streams(be->iface))
        return st;
    return be->iface->stream_synchronize(be->ctx, impl);
}

strata_status strata_backend_event_create(strata_backend *be, strata_event **out)
{
    if (!be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "event_create: NULL argument");
    *out = NULL;
    strata_event *e = calloc(1, sizeof *e);
    if (!e)
        return strata_error(STRATA_ERR_NOMEM, "event_create: out of memory");
    e->be = be;
    if (has_streams(be->iface)) {
        strata_status st = be->iface->event_create(be->ctx, &e->impl);
        if (st != STRATA_OK) {
            free(e);
            return st;
        }
    }
    *out = e;
    return STRATA_OK;
}

strata_status strata_backend_timing_event_create(strata_backend *be, strata_event **out)
{
    if (!be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "timing_event_create: NULL argument");
    *out = NULL;
    if (!be->iface->timing_event_create)
        return strata_error(STRATA_ERR_UNSUPPORTED, "backend '%s' has no timing events",
                            be->iface->name);
    strata_event *e = calloc(1, sizeof *e);
    if (!e)
        return strata_error(STRATA_ERR_NOMEM, "timing_event_create: out of memory");
    e->be = be;
    e->timing = true;
    strata_status st = be->iface->timing_event_create(be->ctx, &e->impl);
    if (st != STRATA_OK) {
        free(e);
        return st;
    }
    *out = e;
    return STRATA_OK;
}

strata_status strata_backend_event_elapsed(strata_event *start, strata_event *end, bool *done,
                                           double *seconds)
{
    if (!start || !end || !done || !seconds || !start->timing || !end->timing ||
        start->be != end->be)
        return strata_error(STRATA_ERR_INVALID_ARG, "event_elapsed: NULL argument, not timing "
                            "events, or events of two backends");
    int d = 0;
    strata_status st = start->be->iface->event_elapsed(start->be->ctx, start->impl, end->impl,
                                                       &d, seconds);
    *done = st == STRATA_OK && d != 0;
    return st;
}

void strata_backend_event_destroy(strata_event *e)
{
    if (!e)
        return;
    if (has_streams(e->be->iface))
        e->be->iface->event_destroy(e->be->ctx, e->impl);
    free(e);
}

strata_status strata_backend_event_record(strata_event *e, strata_stream *s)
{
    if (!e)
        return strata_error(STRATA_ERR_INVALID_ARG, "event_record: NULL event");
    void *impl;
    strata_status st = backend_stream_impl(e->be, s, &impl, "event_record");
    if (st != STRATA_OK || !has_streams(e->be->iface))
        return st; /* synchronous: all earlier work is done, the event is complete */
    return e->be->iface->event_record(e->be->ctx, e->impl, impl);
}

strata_status strata_backend_event_query(strata_event *e, bool *done)
{
    if (!e || !done)
        return strata_error(STRATA_ERR_INVALID_ARG, "event_query: NULL argument");
    *done = true;
    if (!has_streams(e->be->iface))
        return STRATA_OK;
    int d = 0;
    strata_status st = e->be->iface->event_query(e->be->ctx, e->impl, &d);
    *done = st == STRATA_OK && d != 0;
    return st;
}

strata_status strata_backend_event_synchronize(strata_event *e)
{
    if (!e)
        return strata_error(STRATA_ERR_INVALID_ARG, "event_synchronize: NULL event");
    if (!has_streams(e->be->iface))
        return STRATA_OK;
    return e->be->iface->event_synchronize(e->be->ctx, e->impl);
}

strata_status strata_backend_stream_wait_event(strata_stream *s, strata_event *e)
{
    if (!e)
        return strata_error(STRATA_ERR_INVALID_ARG, "stream_wait_event: NULL event");
    void *impl;
    strata_status st = backend_stream_impl(e->be, s, &impl, "stream_wait_event");
    if (st != STRATA_OK || !has_streams(e->be->iface))
        return st;
    return e->be->iface->stream_wait_event(e->be->ctx, impl, e->impl);
}

strata_status strata_backend_copy_async(strata_backend *be, void *dst, const void *src,
                                        size_t bytes, strata_copy_dir dir, strata_stream *s)
{
    void *impl;
    strata_status st = backend_stream_impl(be, s, &impl, "copy_async");
    if (st != STRATA_OK)
        return st;
    if ((unsigned)dir > STRATA_COPY_H2H || (bytes && (!dst || !src)))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "copy_async: NULL buffer or unknown direction %d", (int)dir);
    if (bytes == 0)
        return STRATA_OK;
    if (be->iface->copy_async)
        return be->iface->copy_async(be->ctx, dst, src, bytes, dir, impl);
    return be->iface->copy(be->ctx, dst, src, bytes);
}
