/* strata/status.h — the one status enum every strata function returns.
 *
 * Every fallible public function returns a strata_status. strata_status_str()
 * names it; strata_last_error() gives a thread-local human-readable detail
 * (which argument, which file, which LAPACK info code) for the last failure
 * on the calling thread.
 */
#ifndef STRATA_STATUS_H
#define STRATA_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STRATA_BUILDING) && defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_ERR_INVALID_ARG = 1,   /* a NULL pointer, a bad shape, a value out of range */
    STRATA_ERR_NOMEM = 2,         /* an allocation failed or a budget would be exceeded */
    STRATA_ERR_STATE = 3,         /* call out of order (e.g. param_add after commit) */
    STRATA_ERR_NONFINITE = 4,     /* NaN/Inf in a gradient; nothing was updated */
    STRATA_ERR_LINALG = 5,        /* an eigendecomposition failed (LAPACK info != 0) */
    STRATA_ERR_IO = 6,            /* a read/write/open failed; detail has errno text */
    STRATA_ERR_DATA = 7,          /* input data unusable (empty, too short, corrupt) */
    STRATA_ERR_UNSUPPORTED = 8,   /* feature not built in or not available here */
    STRATA_ERR_TIMEOUT = 9,       /* a bounded wait ran out */
    STRATA_ERR_INTERNAL = 10,     /* a broken invariant: a bug, please report */
} strata_status;

/* Name of a status, e.g. "STRATA_ERR_NONFINITE". Never NULL; unknown values
 * give "STRATA_ERR_UNKNOWN". Thread-safe. */
STRATA_API const char *strata_status_str(strata_status s);

/* Detail of the last error recorded on the calling thread ("" if none).
 * The pointer stays valid until the next strata call on this thread. */
STRATA_API const char *strata_last_error(void);

/* Record a detail message for the calling thread and return `s`, so that
 * `return strata_error(STRATA_ERR_INVALID_ARG, "rows=%d", m);` reads well.
 * Used by strata's components and by the examples built on it. */
STRATA_API strata_status strata_error(strata_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clear the calling thread's last-error detail. */
STRATA_API void strata_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_STATUS_H */
