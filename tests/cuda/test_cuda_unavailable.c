/* The CUDA path on a machine without a GPU (or a build without CUDA): the
 * backend, a runtime asking for it, and the device query all fail cleanly
 * with STRATA_ERR_UNSUPPORTED and a message that says why and what to use
 * instead, leave their out-parameters NULL, and can be retried. Exit 77
 * (skipped) where a GPU is present: tests/cuda/test_cuda_ops.c covers that. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend_internal.h"
#include "strata/strata.h"

static void says_why(void)
{
    const char *msg = strata_last_error();
    assert_non_null(strstr(msg, "cuda"));
    assert_true(strstr(msg, "no CUDA device") != NULL || strstr(msg, "built without") != NULL);
    assert_non_null(strstr(msg, "'cpu'"));
}

static void test_backend_unsupported(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < 2; attempt++) {
        strata_backend *be = (strata_backend *)&be; /* must be reset to NULL */
        assert_int_equal(strata_backend_create_kind(STRATA_BACKEND_CUDA, 0, &be),
                         STRATA_ERR_UNSUPPORTED);
        assert_null(be);
        says_why();
    }
    int count = -1;
    assert_int_equal(strata_backend_cuda_available(&count), STRATA_ERR_UNSUPPORTED);
    assert_int_equal(count, 0);
    /* the CPU backend is unaffected by the failed CUDA attempts */
    strata_backend *cpu = NULL;
    assert_int_equal(strata_backend_create_kind(STRATA_BACKEND_CPU, 1, &cpu), STRATA_OK);
    assert_string_equal(strata_backend_name(cpu), "cpu");
    strata_backend_destroy(cpu);
}

static void test_runtime_unsupported(void **state)
{
    (void)state;
    strata_config cfg;
    assert_int_equal(strata_config_default(&cfg), STRATA_OK);
    cfg.backend = STRATA_BACKEND_CUDA;
    strata_runtime *rt = (strata_runtime *)&rt;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_UNSUPPORTED);
    assert_null(rt);
    says_why();
    cfg.backend = STRATA_BACKEND_CPU;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    strata_destroy(rt);
}

int main(void)
{
    int count = 0;
    if (strata_backend_cuda_available(&count) == STRATA_OK) {
        printf("skipped: %d CUDA device(s) present; test_cuda_ops covers them\n", count);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_unsupported),
        cmocka_unit_test(test_runtime_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
