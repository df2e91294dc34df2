/* base/log.h — the one log sink every component writes through.
 *
 * A strata_logger is a level and a sink (function + user pointer). The
 * runtime fills one from strata_config and hands a pointer to it to every
 * component it creates (tiers, workers, the refresh engine); a component
 * created without one (NULL) logs to stderr at WARN. The library never writes
 * to stdout.
 *
 * Thread-safety: strata_logf may be called from any thread; the sink must be
 * thread-safe (the default one is: one fprintf per message).
 */
#ifndef STRATA_BASE_LOG_H
#define STRATA_BASE_LOG_H

#include "strata/types.h"

typedef struct strata_logger {
    strata_log_level level; /* messages above this level are dropped */
    strata_log_fn fn;       /* NULL = stderr */
    void *user;             /* passed to fn */
} strata_logger;

/* Log a printf-style message at `level` for `subsystem` through `lg` (NULL:
 * stderr at WARN). Messages are cut at 1 KiB. */
void strata_logf(const strata_logger *lg, strata_log_level level, const char *subsystem,
                 const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* The default sink: "strata[subsystem] level: message\n" on stderr. */
void strata_log_stderr(void *user, strata_log_level level, const char *subsystem,
                       const char *msg);

#endif
