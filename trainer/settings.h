/* settings.h — what the trainer's settings are called and what they imply.
 *
 * Two things the command line, the trainer and its reports must agree on,
 * kept here once:
 *   - the spelling of the trainer's own enumerated settings (--data-format;
 *     strata_config's enums, grafting, Muon's scale rule, ..., are spelled
 *     by the config schema, runtime/config_schema.h): the CLI parses these
 *     names, lists them in its errors and --help, and the JSONL config
 *     record writes them;
 *   - what the matrix optimizer refreshes periodically, whether --async can
 *     move that work to worker threads and whether --stagger-refresh can
 *     spread it (gpt_optimizer_refresh_info).
 */
#ifndef STRATA_EXAMPLES_GPT_SETTINGS_H
#define STRATA_EXAMPLES_GPT_SETTINGS_H

#include <stdbool.h>

#include "runtime/config_schema.h"
#include "strata/strata.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One spelling of an enumerated setting: the config schema's entry
 * (runtime/config_schema.h), whose strata_cfg_names_* tables spell every
 * strata_config enum (the CLI, the JSONL record and a checkpoint's
 * config-change warnings read the same table). Tables end with {NULL, 0};
 * their order is the order the CLI lists the names in. */
typedef strata_cfg_name gpt_enum_name;

extern const gpt_enum_name gpt_data_format_names[];    /* GPT_TRAIN_DATA_* (trainer.h) */

/* Code that reads or writes one of these enums through an int (a table of
 * settings with offsets) relies on this. */
#ifndef __cplusplus
_Static_assert(sizeof(strata_grafting) == sizeof(int) && sizeof(strata_muon_scale) == sizeof(int) &&
                   sizeof(strata_muon_momentum_form) == sizeof(int) &&
                   sizeof(strata_ns_schedule) == sizeof(int) &&
                   sizeof(strata_ns_method) == sizeof(int) &&
                   sizeof(strata_kl_form) == sizeof(int) && sizeof(strata_coh_mode) == sizeof(int),
               "enumerated settings are int-sized");
#endif

/* The name of `value` in `names`, or `fallback` when it has none. */
const char *gpt_enum_name_of(const gpt_enum_name *names, int value, const char *fallback);

/* The value spelled `name` (exact match) into *value; false when unknown. */
bool gpt_enum_parse(const gpt_enum_name *names, const char *name, int *value);

/* What a configuration's matrix optimizer refreshes every F steps:
 *   shampoo            inverse roots;        async yes; stagger yes
 *   soap               eigenbasis refreshes; async yes; stagger yes
 *   kl-shampoo         eigenbasis refreshes (both forms); async yes; stagger yes
 * (any S for async SOAP and KL-Shampoo: at S >= F the engine chains their QR
 * refreshes, each continuing the eigenbasis of the one before it)
 *   muon, adamw        nothing (no async, no stagger). */
typedef struct gpt_refresh_info {
    bool refreshes;      /* the optimizer computes inverse roots or eigenbases at all */
    const char *what;    /* "inverse roots" or "eigenbasis refreshes"; NULL when !refreshes */
    bool async;          /* strata_config.async moves these refreshes to worker threads
                            (and the staleness budget S applies) */
    bool stagger;        /* strata_config.stagger_refresh spreads them over a period;
                            it has something to spread only when frequency > 1 */
    int frequency;       /* F, the optimizer's steps between refreshes; 0 when !refreshes */
    int64_t start;       /* the first refresh point (refresh phase 0), as the runtime
                            reads the configuration; 0 when !refreshes */
    int max_staleness;   /* the largest staleness budget S the asynchronous refreshes
                            accept (SOAP, KL-Shampoo: F - 1); -1 = any */
} gpt_refresh_info;

/* The one answer to "what does this optimizer refresh, can it run async,
 * does staggering apply" for `c`'s matrix optimizer (see the table above);
 * every caller in cli/ and the GPT trainer asks here. `c` and `out` must not
 * be NULL. */
void gpt_optimizer_refresh_info(const strata_config *c, gpt_refresh_info *out);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_SETTINGS_H */
