/* Spellings of the trainer's enumerated settings and the refresh rule (settings.h). */
#include "settings.h"
#include "trainer.h"

#include <stddef.h>
#include <string.h>

/* The strata_config enums' spellings are the config schema's
 * (runtime/config_schema.h, strata_cfg_names_*); this is the trainer's own. */
const gpt_enum_name gpt_data_format_names[] = {
    {"auto", GPT_TRAIN_DATA_AUTO}, {"bytes", GPT_TRAIN_DATA_BYTES},
    {"tokens", GPT_TRAIN_DATA_TOKENS}, {NULL, 0},
};

const char *gpt_enum_name_of(const gpt_enum_name *names, int value, const char *fallback)
{
    for (; names->name; names++)
        if (names->value == value)
            return names->name;
    return fallback;
}

bool gpt_enum_parse(const gpt_enum_name *names, const char *name, int *value)
{
    for (; names->name; names++)
        if (strcmp(names->name, name) == 0) {
            *value = names->value;
            return true;
        }
    return false;
}

void gpt_optimizer_refresh_info(const strata_config *c, gpt_refresh_info *out)
{
    /* The library's families answer it (strata_optimizer_info_get). */
    *out = (gpt_refresh_info){.max_staleness = -1};
    strata_optimizer_info info;
    if (strata_optimizer_info_get(c, c->matrix_optimizer, &info) != STRATA_OK ||
        !info.has_refresh)
        return;
    *out = (gpt_refresh_info){.refreshes = true, .what = info.refresh_noun,
                              .async = info.async_capable, .stagger = true,
                              .frequency = info.precondition_frequency,
                              .start = info.first_refresh,
                              .max_staleness = info.max_staleness};
}
