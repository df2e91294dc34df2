/* Status names and the thread-local last-error detail. */
#include "strata/status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *strata_status_str(strata_status s)
{
    switch (s) {
    case STRATA_OK: return "STRATA_OK";
    case STRATA_ERR_INVALID_ARG: return "STRATA_ERR_INVALID_ARG";
    case STRATA_ERR_NOMEM: return "STRATA_ERR_NOMEM";
    case STRATA_ERR_STATE: return "STRATA_ERR_STATE";
    case STRATA_ERR_NONFINITE: return "STRATA_ERR_NONFINITE";
    case STRATA_ERR_LINALG: return "STRATA_ERR_LINALG";
    case STRATA_ERR_IO: return "STRATA_ERR_IO";
    case STRATA_ERR_DATA: return "STRATA_ERR_DATA";
    case STRATA_ERR_UNSUPPORTED: return "STRATA_ERR_UNSUPPORTED";
    case STRATA_ERR_TIMEOUT: return "STRATA_ERR_TIMEOUT";
    case STRATA_ERR_INTERNAL: return "STRATA_ERR_INTERNAL";
    }
    return "STRATA_ERR_UNKNOWN";
}

const char *strata_last_error(void)
{
    return last_error;
}

strata_status strata_error(strata_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

void strata_error_clear(void)
{
    last_error[0] = '\0';
}
