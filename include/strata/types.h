/* strata/types.h — small public types shared by the runtime's configuration
 * and strata's components: memory tiers, root install modes, log levels and
 * the log sink.
 *
 * These are plain enums and a function-pointer type; the components that use
 * them (tiers/, coherence/, base/) include this header, never the runtime's.
 */
#ifndef STRATA_TYPES_H
#define STRATA_TYPES_H

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where bytes live (DESIGN.md "Backends and tiers"). */
typedef enum strata_tier_kind {
    STRATA_TIER_DEVICE = 0, /* the backend's memory */
    STRATA_TIER_HOST = 1,   /* host memory (pinned on a GPU machine) */
    STRATA_TIER_NVME = 2,   /* a file in a directory, O_DIRECT, io_uring */
} strata_tier_kind;

/* "device", "host", "nvme" ("?" for an unknown value). */
STRATA_API const char *strata_tier_kind_name(strata_tier_kind k);

/* How a finished preconditioner refresh is installed (DESIGN.md, coherence
 * protocol rule 4). */
typedef enum strata_coh_mode {
    STRATA_COH_FIXED = 0, /* install the result of refresh point r exactly at step r + S:
                             bit-reproducible whatever the workers' speed (default) */
    STRATA_COH_EAGER = 1, /* install any newer ready result at the start of a step */
} strata_coh_mode;

typedef enum strata_log_level {
    STRATA_LOG_ERROR = 0,
    STRATA_LOG_WARN = 1,
    STRATA_LOG_INFO = 2,
    STRATA_LOG_DEBUG = 3,
} strata_log_level;

/* Log sink: receives every message at or below the configured level, with
 * the subsystem that wrote it ("route", "async", "tiers", ...). The default
 * sink writes "strata[subsystem] level: message" lines to stderr. */
typedef void (*strata_log_fn)(void *user, strata_log_level level, const char *subsystem,
                              const char *msg);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TYPES_H */
