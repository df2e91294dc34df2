/* The environment table (base/env.h): every row well formed, the integer
 * parser strict (the whole value, in range; a bad value refused with
 * STRATA_ERR_INVALID_ARG naming the variable and the value), each value read
 * once (a later setenv is not seen), and the runtime refusing a bad
 * STRATA_LOG_LEVEL. The variables are set in main, before any access. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/env.h"
#include "strata/strata.h"

static void test_rows_well_formed(void **state)
{
    (void)state;
    for (int i = 0; i < STRATA_ENV_COUNT; i++) {
        const strata_env_var *v = strata_env_var_of((strata_env_id)i);
        assert_non_null(v);
        assert_non_null(v->name);
        assert_non_null(v->doc);
        assert_non_null(v->reader);
        assert_true(strlen(v->doc) > 10);
        if (v->kind == STRATA_ENV_INT)
            assert_true(v->lo <= v->hi);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(v->name, strata_env_var_of((strata_env_id)j)->name);
    }
    assert_null(strata_env_var_of(STRATA_ENV_COUNT));
    assert_null(strata_env_var_of((strata_env_id)-1));
}

static void refused(strata_env_id id, const char *value)
{
    long x = 12345;
    strata_error_clear();
    assert_int_equal(strata_env_parse_int(id, value, &x), STRATA_ERR_INVALID_ARG);
    assert_int_equal(x, 12345); /* untouched */
    char want[128];
    snprintf(want, sizeof want, "%s='%s': must be an integer in [",
             strata_env_var_of(id)->name, value);
    if (!strstr(strata_last_error(), want))
        fail_msg("'%s' for %s: \"%s\"", value, strata_env_var_of(id)->name, strata_last_error());
}

static void test_int_parser_strict(void **state)
{
    (void)state;
    long x = 0;
    assert_int_equal(strata_env_parse_int(STRATA_ENV_RANKS_PER_NODE, "2", &x), STRATA_OK);
    assert_int_equal(x, 2);
    assert_int_equal(strata_env_parse_int(STRATA_ENV_RANKS_PER_NODE, "2147483647", &x),
                     STRATA_OK);
    assert_int_equal(x, 2147483647);
    /* what comm_nccl.c's atoi took silently: 0, negatives, trailing junk, overflow */
    static const char *const bad_rpn[] = {"0", "-1", "2x", "x2", "", " ", "1.5", "2147483648",
                                          "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad_rpn / sizeof bad_rpn[0]; i++)
        refused(STRATA_ENV_RANKS_PER_NODE, bad_rpn[i]);
    for (int lvl = 0; lvl <= 3; lvl++) {
        char s[4];
        snprintf(s, sizeof s, "%d", lvl);
        assert_int_equal(strata_env_parse_int(STRATA_ENV_LOG_LEVEL, s, &x), STRATA_OK);
        assert_int_equal(x, lvl);
    }
    static const char *const bad_level[] = {"4", "-1", "debug", "1 ", "01x"};
    for (size_t i = 0; i < sizeof bad_level / sizeof bad_level[0]; i++)
        refused(STRATA_ENV_LOG_LEVEL, bad_level[i]);
    /* the other kinds take any value */
    assert_int_equal(strata_env_parse_int(STRATA_ENV_COST_CACHE, "whatever", &x), STRATA_OK);
    assert_int_equal(strata_env_parse_int(STRATA_ENV_COUNT, "1", &x), STRATA_ERR_INVALID_ARG);
}

/* main set STRATA_RANKS_PER_NODE=0, STRATA_LOG_LEVEL=7, STRATA_COST_CACHE=0, HOME="". */
static void test_read_once_and_refused(void **state)
{
    (void)state;
    long per = 99;
    bool set = true;
    assert_int_equal(strata_env_int(STRATA_ENV_RANKS_PER_NODE, 0, &per, &set),
                     STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "STRATA_RANKS_PER_NODE='0'"));
    assert_int_equal(per, 0);
    assert_false(set);
    setenv("STRATA_RANKS_PER_NODE", "4", 1); /* cached: not seen */
    assert_int_equal(strata_env_int(STRATA_ENV_RANKS_PER_NODE, 0, &per, &set),
                     STRATA_ERR_INVALID_ARG);
    assert_string_equal(strata_env_str(STRATA_ENV_COST_CACHE), "0");
    assert_null(strata_env_str(STRATA_ENV_HOME)); /* empty is unset */
    assert_false(strata_env_is_set(STRATA_ENV_HOME));
    /* live rows are read at each access */
    unsetenv("STRATA_BLAS_CORE_FROM");
    assert_false(strata_env_is_set(STRATA_ENV_BLAS_CORE_FROM));
    setenv("STRATA_BLAS_CORE_FROM", "", 1);
    assert_true(strata_env_is_set(STRATA_ENV_BLAS_CORE_FROM)); /* presence, even empty */
    unsetenv("STRATA_BLAS_CORE_FROM");
    assert_false(strata_env_is_set(STRATA_ENV_BLAS_CORE_FROM));
}

static void test_runtime_refuses_bad_log_level(void **state)
{
    (void)state;
    strata_config cfg;
    strata_error_clear();
    assert_int_equal(strata_config_default(&cfg), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "STRATA_LOG_LEVEL='7'"));
    assert_int_equal(cfg.version, STRATA_CONFIG_VERSION); /* filled all the same */
    assert_int_equal(cfg.log_level, STRATA_LOG_WARN);
    strata_runtime *rt = (strata_runtime *)0x1;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_INVALID_ARG);
    assert_null(rt);
    assert_non_null(strstr(strata_last_error(), "STRATA_LOG_LEVEL='7'"));
}

int main(void)
{
    setenv("STRATA_RANKS_PER_NODE", "0", 1);
    setenv("STRATA_LOG_LEVEL", "7", 1);
    setenv("STRATA_COST_CACHE", "0", 1);
    setenv("HOME", "", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_well_formed),
        cmocka_unit_test(test_int_parser_strict),
        cmocka_unit_test(test_read_once_and_refused),
        cmocka_unit_test(test_runtime_refuses_bad_log_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
