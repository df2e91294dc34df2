/* Spellings of the trainer's enumerated settings and the refresh rule (settings.h). */
#include "settings.h"
#include "trainer.h"

#include <stddef.h>
#include <string.h>

const gpt_enum_name gpt_grafting_names[] = {
    {"adam", STRATA_GRAFT_ADAM}, {"adagrad", STRATA_GRAFT_ADAGRAD}, {"none", STRATA_GRAFT_NONE},
    {NULL, 0},
};

const gpt_enum_name gpt_root_method_names[] = {
    {"eigh", STRATA_ROOT_EIGH}, {"newton", STRATA_ROOT_NEWTON}, {"auto", STRATA_ROOT_AUTO},
    {"warm-qr", STRATA_ROOT_WARM_QR}, {"newton-f32", STRATA_ROOT_NEWTON_F32},
    {NULL, 0},
};

const gpt_enum_name gpt_muon_scale_names[] = {
    {"shape", STRATA_MUON_SCALE_SHAPE}, {"adamw", STRATA_MUON_SCALE_ADAMW_RMS},
    {"spectral", STRATA_MUON_SCALE_SPECTRAL}, {"none", STRATA_MUON_SCALE_NONE},
    {NULL, 0},
};

const gpt_enum_name gpt_muon_momentum_form_names[] = {
    {"sum", STRATA_MUON_MOMENTUM_SUM}, {"ema", STRATA_MUON_MOMENTUM_EMA}, {NULL, 0},
};

const gpt_enum_name gpt_ns_schedule_names[] = {
    {"quintic", STRATA_NS_QUINTIC}, {"polar-express", STRATA_NS_POLAR_EXPRESS}, {NULL, 0},
};

const gpt_enum_name gpt_ns_method_names[] = {
    {"auto", STRATA_NS_AUTO}, {"standard", STRATA_NS_STANDARD}, {"gram", STRATA_NS_GRAM},
    {NULL, 0},
};

const gpt_enum_name gpt_dion2_adjust_lr_names[] = {
    {"spectral-norm", STRATA_DION2_ADJUST_SPECTRAL_NORM}, {"rms-norm", STRATA_DION2_ADJUST_RMS_NORM},
    {"none", STRATA_DION2_ADJUST_NONE}, {NULL, 0},
};

const gpt_enum_name gpt_kl_form_names[] = {
    {"eigenbasis", STRATA_KL_EIGENBASIS}, {"exact", STRATA_KL_EXACT}, {NULL, 0},
};

const gpt_enum_name gpt_install_mode_names[] = {
    {"fixed", STRATA_COH_FIXED}, {"eager", STRATA_COH_EAGER}, {NULL, 0},
};

const gpt_enum_name gpt_stale_correction_names[] = {
    {"off", STRATA_STALE_CORRECTION_OFF}, {"newton", STRATA_STALE_CORRECTION_NEWTON}, {NULL, 0},
};

const gpt_enum_name gpt_sharding_names[] = {
    {"owner", STRATA_SHARD_OWNER}, {"gather", STRATA_SHARD_GATHER}, {"zero1", STRATA_SHARD_ZERO1},
    {NULL, 0},
};

const gpt_enum_name gpt_data_format_names[] = {
    {"auto", GPT_TRAIN_DATA_AUTO}, {"bytes", GPT_TRAIN_DATA_BYTES},
    {"tokens", GPT_TRAIN_DATA_TOKENS}, {NULL, 0},
};

const gpt_enum_name gpt_state_dtype_names[] = {
    {"f32", STRATA_STATE_F32}, {"bf16", STRATA_STATE_BF16}, {NULL, 0},
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
