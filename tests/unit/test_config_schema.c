/* The config schema (runtime/config_schema.h) covers strata_config: one row
 * per field (the nested optimizer configurations field by field), in struct
 * order, tiling the struct (gaps only alignment padding), so that a field
 * added without a row fails here; names, flags and keys unique; checkpoint
 * rows of a kind the manifest writes; every checkpointed field in a saved
 * manifest's config under its name is covered by tests/ckpt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/config_schema.h"

STRATA_CFG_TABLE(schema);

static void test_rows_tile_the_struct(void **state)
{
    (void)state;
    assert_int_equal(STRATA_CFG_ROWS, STRATA_CONFIG_FIELDS - 7 + STRATA_ADAMW_CONFIG_FIELDS +
                                          STRATA_SHAMPOO_CONFIG_FIELDS +
                                          STRATA_MUON_CONFIG_FIELDS + STRATA_SOAP_CONFIG_FIELDS +
                                          STRATA_KL_SHAMPOO_CONFIG_FIELDS +
                                          STRATA_NORMUON_CONFIG_FIELDS +
                                          STRATA_DION2_CONFIG_FIELDS);
    size_t end = 0;
    int bad = 0;
    for (int i = 0; i < STRATA_CFG_ROWS; i++) {
        const strata_cfg_field *f = &schema[i];
        if (f->off < end || f->off - end >= 8) {
            print_message("FAIL '%s' at offset %zu, the previous row ends at %zu: a field "
                          "without a row, or rows out of order\n", f->name, f->off, end);
            bad++;
        }
        end = f->off + f->size;
    }
    if (sizeof(strata_config) < end || sizeof(strata_config) - end >= 8) {
        print_message("FAIL the rows end at %zu, strata_config is %zu bytes\n", end,
                      sizeof(strata_config));
        bad++;
    }
    assert_int_equal(bad, 0);
}

static void test_names_unique_kinds_sound(void **state)
{
    (void)state;
    int ckpt = 0;
    for (int i = 0; i < STRATA_CFG_ROWS; i++) {
        const strata_cfg_field *f = &schema[i];
        assert_non_null(f->name);
        assert_non_null(f->unit);
        assert_non_null(f->doc);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(f->name, schema[j].name);
            if (f->cli && schema[j].cli)
                assert_string_not_equal(f->cli, schema[j].cli);
            if (f->jsonl && schema[j].jsonl)
                assert_string_not_equal(f->jsonl, schema[j].jsonl);
        }
        if (f->ckpt) {
            ckpt++;
            assert_true(f->kind != STRATA_CFG_STRING && f->kind != STRATA_CFG_PTR);
        }
        if (f->kind == STRATA_CFG_INT || f->kind == STRATA_CFG_ENUM)
            assert_int_equal(f->size, sizeof(int));
        if (f->kind == STRATA_CFG_FLOAT)
            assert_int_equal(f->size, sizeof(float));
        if (f->kind == STRATA_CFG_BOOL)
            assert_int_equal(f->size, sizeof(bool));
        if (f->kind == STRATA_CFG_PTR || f->kind == STRATA_CFG_STRING)
            assert_int_equal(f->size, sizeof(void *));
    }
    print_message("%d rows, %d recorded in checkpoints\n", STRATA_CFG_ROWS, ckpt);
    assert_true(ckpt > 0);
    /* ids and names agree */
    assert_string_equal(schema[STRATA_CFG_ID(shampoo_beta2)].name, "shampoo.beta2");
    assert_int_equal(schema[STRATA_CFG_ID(staleness)].off, offsetof(strata_config, staleness));
}

/* Every ENUM row recorded in checkpoints or set by a CLI flag spells its
 * values (the names column): the CLI parses those names and a resume's
 * config-change warning prints them; other kinds have none; within a table
 * names and values are unique; strata_cfg_value_name answers each value
 * with its name and an unknown one with NULL. */
static void test_enum_rows_spelled(void **state)
{
    (void)state;
    int spelled = 0;
    for (int i = 0; i < STRATA_CFG_ROWS; i++) {
        const strata_cfg_field *f = &schema[i];
        if (f->kind != STRATA_CFG_ENUM) {
            if (f->names)
                print_message("FAIL '%s' is not an enum but has names\n", f->name);
            assert_null(f->names);
            continue;
        }
        if (f->ckpt && !f->names)
            print_message("FAIL enum '%s' is checkpointed without names\n", f->name);
        assert_true(!f->ckpt || f->names);
        if (!f->names)
            continue;
        spelled++;
        for (const strata_cfg_name *e = f->names; e->name; e++) {
            for (const strata_cfg_name *d = f->names; d != e; d++) {
                assert_string_not_equal(d->name, e->name);
                assert_int_not_equal(d->value, e->value);
            }
            assert_string_equal(strata_cfg_value_name(f, e->value), e->name);
        }
        if (f->names[0].name)
            assert_null(strata_cfg_value_name(f, 12345));
    }
    print_message("%d enum rows spelled\n", spelled);
    const strata_cfg_field *rm = &schema[STRATA_CFG_ID(shampoo_root_method)];
    assert_string_equal(strata_cfg_value_name(rm, STRATA_ROOT_WARM_QR), "warm-qr");
    assert_string_equal(strata_cfg_value_name(rm, STRATA_ROOT_WARM_QR_F32), "warm-qr-f32");
    assert_string_equal(strata_cfg_value_name(rm, STRATA_ROOT_EIGH), "eigh");
    const strata_cfg_field *mo = &schema[STRATA_CFG_ID(matrix_optimizer)];
    assert_string_equal(strata_cfg_value_name(mo, STRATA_OPTIM_SOAP), "soap");
    assert_null(strata_cfg_value_name(mo, 12345));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_tile_the_struct),
        cmocka_unit_test(test_names_unique_kinds_sound),
        cmocka_unit_test(test_enum_rows_spelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
