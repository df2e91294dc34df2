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

#include <stdint.h>

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

/* The asynchronous runtime's safety valve (strata_config.stale_correction,
 * issue #23 item 5): what a step does when its due preconditioner result is
 * still on a worker and the staleness budget would make it wait. */
typedef enum strata_stale_correction {
    STRATA_STALE_CORRECTION_OFF = 0,    /* wait, bounded (default; DESIGN.md rule 3) */
    STRATA_STALE_CORRECTION_NEWTON = 1, /* install the newest ready result and correct it
                                           toward the current factors with one Newton step of
                                           the inverse root instead (Shampoo only) */
} strata_stale_correction;

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


/* The memory ledger (strata_memory_ledger_get in strata/strata.h): every byte
 * strata holds, by tier and by kind. Tiers: the backend's memory (on the CPU
 * backend plain host memory the backend counts), pinned host memory, plain
 * host memory, managed (unified) memory, nvme file space. */
typedef enum strata_ledger_tier {
    STRATA_LEDGER_DEVICE = 0,
    STRATA_LEDGER_HOST_PINNED = 1,
    STRATA_LEDGER_HOST = 2,
    STRATA_LEDGER_MANAGED = 3,
    STRATA_LEDGER_NVME = 4,
} strata_ledger_tier;
#define STRATA_LEDGER_TIERS 5

/* What the bytes are. WORKSPACE: scratch a state keeps between steps (a
 * family's full-size direction buffers, LAPACK workspaces of the refreshes);
 * STAGING: copies in flight between tiers (factor snapshots, the nvme
 * tier's staging); COMM: a transport's buffers; ACTIVATIONS: what an
 * embedder charges (strata_memory_ledger_charge; the example trainer's). */
typedef enum strata_ledger_kind {
    STRATA_LEDGER_WEIGHTS = 0,        /* parameters' weights resident on this rank */
    STRATA_LEDGER_MASTER_WEIGHTS = 1, /* float32 copies of lower-precision weights */
    STRATA_LEDGER_GRADIENTS = 2,      /* gradient buffers (registered, reduced shards) */
    STRATA_LEDGER_GRAD_BUCKETS = 3,   /* the bucketed reduce-to-owner's buffers */
    STRATA_LEDGER_FACTORS = 4,        /* Kronecker factors (Shampoo L, R; SOAP's) */
    STRATA_LEDGER_ROOTS = 5,          /* inverse roots, eigenbases, their result slots */
    STRATA_LEDGER_MOMENTS = 6,        /* first/second moments, momentum */
    STRATA_LEDGER_GRAFTING = 7,       /* grafting accumulators */
    STRATA_LEDGER_STAGING = 8,
    STRATA_LEDGER_COMM = 9,
    STRATA_LEDGER_WORKSPACE = 10,
    STRATA_LEDGER_ACTIVATIONS = 11,
} strata_ledger_kind;
#define STRATA_LEDGER_KINDS 12

/* Bytes now and the peak of each since the runtime was created (a cell's,
 * a tier's and the total's peaks are each their own high-water mark: the
 * total's peak is the most held at once, not a sum of cell peaks). */
typedef struct strata_memory_ledger {
    uint64_t bytes[STRATA_LEDGER_TIERS][STRATA_LEDGER_KINDS];
    uint64_t peak[STRATA_LEDGER_TIERS][STRATA_LEDGER_KINDS];
    uint64_t tier_bytes[STRATA_LEDGER_TIERS], tier_peak[STRATA_LEDGER_TIERS];
    uint64_t total_bytes, total_peak;
} strata_memory_ledger;

/* "device", "host-pinned", "host", "managed", "nvme" / "weights",
 * "master_weights", "gradients", "grad_buckets", "factors", "roots",
 * "moments", "grafting", "staging", "comm", "workspace", "activations"
 * ("?" for an unknown value). */
STRATA_API const char *strata_ledger_tier_name(int tier);
STRATA_API const char *strata_ledger_kind_name(int kind);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TYPES_H */
