/* The log sink shared by every component (base/log.h). */
#include "log.h"
#include "env.h"

#include <stdarg.h>
#include <stdio.h>

void strata_log_stderr(void *user, strata_log_level level, const char *subsystem,
                       const char *msg)
{
    (void)user;
    static const char *names[] = {"error", "warn", "info", "debug"};
    const int l = (int)level;
    fprintf(stderr, "strata[%s] %s: %s\n", subsystem, l >= 0 && l <= 3 ? names[l] : "?", msg);
}

void strata_logf(const strata_logger *lg, strata_log_level level, const char *subsystem,
                 const char *fmt, ...)
{
    const strata_log_level max = lg ? lg->level : STRATA_LOG_WARN;
    if (level > max)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    strata_log_fn fn = lg && lg->fn ? lg->fn : strata_log_stderr;
    fn(lg ? lg->user : NULL, level, subsystem, buf);
}

/* The environment overrides in effect (base/env.h), one line each. */
void strata_env_log(const strata_logger *lg)
{
    for (int i = 0; i < STRATA_ENV_COUNT; i++) {
        const char *s = strata_env_str((strata_env_id)i);
        if (!s)
            continue;
        long x = 0;
        if (strata_env_parse_int((strata_env_id)i, s, &x) != STRATA_OK)
            strata_logf(lg, STRATA_LOG_WARN, "env", "%s", strata_last_error());
        else
            strata_logf(lg, STRATA_LOG_INFO, "env", "%s=%s: %s",
                        strata_env_var_of((strata_env_id)i)->name, s,
                        strata_env_var_of((strata_env_id)i)->doc);
    }
}
