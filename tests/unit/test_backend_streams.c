/* Backend bookkeeping: the CPU backend's streams and events (synchronous:
 * events complete at once, waits return OK), copies in every direction,
 * memory kinds with per-kind bytes, peak and budget, the interface checks
 * (version, required slots, all-or-none stream slots), and backend kinds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "strata/backend.h"

static strata_status min_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = calloc(1, bytes);
    return *out ? STRATA_OK : STRATA_ERR_NOMEM;
}

static void min_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static strata_status min_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memmove(dst, src, bytes);
    return STRATA_OK;
}

static strata_status min_sgemm(void *ctx, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc)
{
    (void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return STRATA_OK;
}

static strata_status min_stream_create(void *ctx, strata_stream_priority p, void **out)
{
    (void)ctx, (void)p;
    *out = NULL;
    return STRATA_OK;
}

static strata_status min_alloc_kind(void *ctx, strata_mem_kind kind, size_t bytes, void **out)
{
    (void)kind;
    return min_alloc(ctx, bytes, out);
}

static void test_streams_and_events(void **state)
{
    (void)state;
    strata_backend *be;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    strata_stream *train, *shadow;
    assert_int_equal(strata_backend_stream_create(be, STRATA_STREAM_TRAINING, &train), STRATA_OK);
    assert_int_equal(strata_backend_stream_create(be, STRATA_STREAM_SHADOW, &shadow), STRATA_OK);
    assert_int_equal(strata_backend_stream_priority(shadow), STRATA_STREAM_SHADOW);
    assert_int_equal(strata_backend_stream_priority(train), STRATA_STREAM_TRAINING);
    assert_int_equal(strata_backend_stream_create(be, (strata_stream_priority)7, &train),
                     STRATA_ERR_INVALID_ARG);

    strata_event *ev;
    assert_int_equal(strata_backend_event_create(be, &ev), STRATA_OK);
    bool done = false;
    assert_int_equal(strata_backend_event_query(ev, &done), STRATA_OK);
    assert_true(done); /* never recorded: complete */

    /* Work on the shadow stream runs inline: the bytes are there on return,
     * the event recorded after it is complete, the training stream's wait
     * and every synchronize return OK. */
    enum { N = 257 };
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f - 3.0f;
    float *dev;
    void *pinned;
    assert_int_equal(strata_backend_alloc(be, sizeof host, (void **)&dev), STRATA_OK);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, sizeof host, &pinned),
                     STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, dev, host, sizeof host, STRATA_COPY_H2D, shadow),
                     STRATA_OK);
    assert_memory_equal(dev, host, sizeof host);
    assert_int_equal(strata_backend_event_record(ev, shadow), STRATA_OK);
    done = false;
    assert_int_equal(strata_backend_event_query(ev, &done), STRATA_OK);
    assert_true(done);
    assert_int_equal(strata_backend_stream_wait_event(train, ev), STRATA_OK);
    assert_int_equal(strata_backend_event_synchronize(ev), STRATA_OK);
    assert_int_equal(strata_backend_stream_synchronize(be, train), STRATA_OK);
    assert_int_equal(strata_backend_stream_synchronize(be, NULL), STRATA_OK);

    /* D2D, D2H, H2H: each moves the bytes. */
    float *dev2;
    assert_int_equal(strata_backend_alloc(be, sizeof host, (void **)&dev2), STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, dev2, dev, sizeof host, STRATA_COPY_D2D, train),
                     STRATA_OK);
    assert_int_equal(strata_backend_copy_async(be, pinned, dev2, sizeof host, STRATA_COPY_D2H,
                                               train),
                     STRATA_OK);
    memset(back, 0, sizeof back);
    assert_int_equal(strata_backend_copy_async(be, back, pinned, sizeof host, STRATA_COPY_H2H,
                                               NULL),
                     STRATA_OK);
    assert_memory_equal(back, host, sizeof host);
    assert_int_equal(strata_backend_copy_async(be, back, host, sizeof host, (strata_copy_dir)4,
                                               NULL),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_copy_async(be, NULL, host, 4, STRATA_COPY_H2D, NULL),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_copy_async(be, NULL, NULL, 0, STRATA_COPY_H2D, NULL),
                     STRATA_OK);

    /* Another backend's stream or event is refused. */
    strata_backend *other;
    assert_int_equal(strata_backend_cpu_create(0, &other), STRATA_OK);
    strata_event *ev2;
    assert_int_equal(strata_backend_event_create(other, &ev2), STRATA_OK);
    assert_int_equal(strata_backend_event_record(ev2, shadow), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_stream_wait_event(train, ev2), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_copy_async(other, back, host, 4, STRATA_COPY_H2H, train),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_event_record(NULL, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_event_query(ev, NULL), STRATA_ERR_INVALID_ARG);
    strata_backend_event_destroy(ev2);
    /* Timing events (issue #20): the cpu backend has none (its waits never
     * block), and elapsed takes only timing events. */
    strata_event *tev = (strata_event *)&tev;
    assert_int_equal(strata_backend_timing_event_create(be, &tev), STRATA_ERR_UNSUPPORTED);
    assert_null(tev);
    double sec = 42.0;
    assert_int_equal(strata_backend_event_elapsed(ev, ev, &done, &sec), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_event_elapsed(NULL, ev, &done, &sec), STRATA_ERR_INVALID_ARG);
    assert_true(sec == 42.0);
    strata_backend_destroy(other);

    strata_backend_free(be, dev, sizeof host);
    strata_backend_free(be, dev2, sizeof host);
    strata_backend_free_kind(be, STRATA_MEM_HOST_PINNED, pinned, sizeof host);
    strata_backend_event_destroy(ev);
    strata_backend_event_destroy(NULL);
    strata_backend_stream_destroy(train);
    strata_backend_stream_destroy(shadow);
    strata_backend_stream_destroy(NULL);
    strata_backend_destroy(be);
}

static void test_memory_kinds(void **state)
{
    (void)state;
    strata_backend *be;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    const strata_mem_kind kinds[] = {STRATA_MEM_DEVICE, STRATA_MEM_HOST, STRATA_MEM_HOST_PINNED,
                                     STRATA_MEM_MANAGED};
    void *p[4][2];
    for (int k = 0; k < 4; k++) {
        const size_t a = 100 * (size_t)(k + 1), b = 1000 + (size_t)k;
        assert_int_equal(strata_backend_alloc_kind(be, kinds[k], a, &p[k][0]), STRATA_OK);
        assert_int_equal(strata_backend_alloc_kind(be, kinds[k], b, &p[k][1]), STRATA_OK);
        assert_int_equal((uintptr_t)p[k][1] % 64, 0);
        const unsigned char *z = p[k][1];
        for (size_t i = 0; i < b; i++)
            assert_int_equal(z[i], 0);
    }
    for (int k = 0; k < 4; k++) {
        size_t in_use, peak;
        strata_backend_bytes_kind(be, kinds[k], &in_use, &peak);
        assert_int_equal(in_use, 100 * (size_t)(k + 1) + 1000 + (size_t)k);
        assert_int_equal(peak, in_use);
        strata_backend_free_kind(be, kinds[k], p[k][1], 1000 + (size_t)k);
        strata_backend_bytes_kind(be, kinds[k], &in_use, &peak);
        assert_int_equal(in_use, 100 * (size_t)(k + 1));
        assert_int_equal(peak, 100 * (size_t)(k + 1) + 1000 + (size_t)k);
    }
    size_t dev_in_use, dev_peak;
    strata_backend_bytes(be, &dev_in_use, &dev_peak);
    assert_int_equal(dev_in_use, 100);
    assert_int_equal(dev_peak, 1100);

    /* Budget per kind: over it -> NOMEM, nothing counted; other kinds unaffected. */
    assert_int_equal(strata_backend_set_budget(be, STRATA_MEM_HOST_PINNED, 1024), STRATA_OK);
    void *q;
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, 1024 - 300 + 1, &q),
                     STRATA_ERR_NOMEM);
    assert_null(q);
    size_t in_use;
    strata_backend_bytes_kind(be, STRATA_MEM_HOST_PINNED, &in_use, NULL);
    assert_int_equal(in_use, 300);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, 1024 - 300, &q),
                     STRATA_OK);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_MANAGED, 1 << 20, &p[3][1]),
                     STRATA_OK);
    strata_backend_free_kind(be, STRATA_MEM_MANAGED, p[3][1], 1 << 20);
    strata_backend_free_kind(be, STRATA_MEM_HOST_PINNED, q, 1024 - 300);
    assert_int_equal(strata_backend_alloc_kind(be, (strata_mem_kind)9, 8, &q),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_set_budget(be, (strata_mem_kind)9, 8), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST, 0, &q), STRATA_ERR_INVALID_ARG);
    for (int k = 0; k < 4; k++)
        strata_backend_free_kind(be, kinds[k], p[k][0], 100 * (size_t)(k + 1));
    for (int k = 0; k < 4; k++) {
        strata_backend_bytes_kind(be, kinds[k], &in_use, NULL);
        assert_int_equal(in_use, 0);
    }
    strata_backend_destroy(be);

    /* A backend without alloc_kind: HOST from the heap, pinned/managed unsupported;
     * the device budget given at create is enforced. */
    static const strata_backend_iface mi = {.version = STRATA_BACKEND_IFACE_VERSION,
                                            .name = "min", .alloc = min_alloc, .free = min_free,
                                            .copy = min_copy, .sgemm = min_sgemm};
    assert_int_equal(strata_backend_create(&mi, NULL, 4096, &be), STRATA_OK);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST, 10, &q), STRATA_OK);
    strata_backend_free_kind(be, STRATA_MEM_HOST, q, 10);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_HOST_PINNED, 10, &q),
                     STRATA_ERR_UNSUPPORTED);
    assert_int_equal(strata_backend_alloc_kind(be, STRATA_MEM_MANAGED, 10, &q),
                     STRATA_ERR_UNSUPPORTED);
    strata_backend_bytes_kind(be, STRATA_MEM_MANAGED, &in_use, NULL);
    assert_int_equal(in_use, 0);
    assert_int_equal(strata_backend_alloc(be, 4097, &q), STRATA_ERR_NOMEM);
    assert_int_equal(strata_backend_alloc(be, 4096, &q), STRATA_OK);
    strata_backend_free(be, q, 4096);
    strata_backend_destroy(be);
}

static void test_iface_checks(void **state)
{
    (void)state;
    strata_backend *be = (strata_backend *)&be;
    strata_backend_iface i = {.version = STRATA_BACKEND_IFACE_VERSION, .name = "t",
                              .alloc = min_alloc, .free = min_free, .copy = min_copy,
                              .sgemm = min_sgemm};
    assert_int_equal(strata_backend_create(&i, NULL, 0, &be), STRATA_OK);
    strata_backend_destroy(be);
    i.version = 1; /* the old interface */
    assert_int_equal(strata_backend_create(&i, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
    assert_null(be);
    i.version = STRATA_BACKEND_IFACE_VERSION;
    strata_backend_iface j = i;
    j.sgemm = NULL;
    assert_int_equal(strata_backend_create(&j, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
    j = i;
    j.copy = NULL;
    assert_int_equal(strata_backend_create(&j, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
    j = i;
    j.stream_create = min_stream_create; /* one of nine */
    assert_int_equal(strata_backend_create(&j, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
    j = i;
    j.alloc_kind = min_alloc_kind; /* without free_kind */
    assert_int_equal(strata_backend_create(&j, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
    j = i;
    j.free_kind = NULL;
    j.alloc_kind = NULL;
    j.copy_async = NULL;
    assert_int_equal(strata_backend_create(&j, NULL, 0, &be), STRATA_OK); /* optional slots */
    strata_backend_destroy(be);
    assert_int_equal(strata_backend_create(NULL, NULL, 0, &be), STRATA_ERR_INVALID_ARG);
}

static void test_backend_kinds(void **state)
{
    (void)state;
    strata_backend *be = NULL;
    assert_int_equal(strata_backend_create_kind(STRATA_BACKEND_CPU, 1, &be), STRATA_OK);
    assert_string_equal(strata_backend_name(be), "cpu");
    strata_backend_destroy(be);
    /* CUDA: a backend where built with CUDA and a GPU is present, otherwise
     * UNSUPPORTED saying which of the two is missing
     * (tests/cuda/test_cuda_unavailable.c checks that path in full). */
    const strata_status cst = strata_backend_create_kind(STRATA_BACKEND_CUDA, 1, &be);
    if (cst == STRATA_OK) {
        assert_string_equal(strata_backend_name(be), "cuda");
        strata_backend_destroy(be);
    } else {
        assert_int_equal(cst, STRATA_ERR_UNSUPPORTED);
        assert_null(be);
        assert_true(strstr(strata_last_error(), "without the CUDA backend") != NULL ||
                    strstr(strata_last_error(), "no CUDA device") != NULL);
    }
    be = NULL;
    assert_int_equal(strata_backend_create_kind((strata_backend_kind)5, 1, &be),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_backend_create_kind(STRATA_BACKEND_CPU, 1, NULL),
                     STRATA_ERR_INVALID_ARG);
    strata_backend_kind k;
    assert_int_equal(strata_backend_kind_parse("cuda", &k), STRATA_OK);
    assert_int_equal(k, STRATA_BACKEND_CUDA);
    assert_int_equal(strata_backend_kind_parse("cpu", &k), STRATA_OK);
    assert_int_equal(k, STRATA_BACKEND_CPU);
    assert_int_equal(strata_backend_kind_parse("tpu", &k), STRATA_ERR_INVALID_ARG);
    assert_string_equal(strata_backend_kind_name(STRATA_BACKEND_CUDA), "cuda");
    assert_string_equal(strata_backend_kind_name((strata_backend_kind)5), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streams_and_events),
        cmocka_unit_test(test_memory_kinds),
        cmocka_unit_test(test_iface_checks),
        cmocka_unit_test(test_backend_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
