/* base/clock.h — the monotonic clock every component times itself with. */
#ifndef STRATA_BASE_CLOCK_H
#define STRATA_BASE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin; only differences mean
 * anything). Never goes backwards; unaffected by wall-clock changes. */
static inline double strata_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An absolute CLOCK_REALTIME deadline `seconds` from now, for
 * pthread_cond_timedwait (which measures against CLOCK_REALTIME). */
static inline struct timespec strata_deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (seconds < 0)
        seconds = 0;
    time_t whole = (time_t)seconds;
    long nsec = ts.tv_nsec + (long)((seconds - (double)whole) * 1e9);
    ts.tv_sec += whole + nsec / 1000000000L;
    ts.tv_nsec = nsec % 1000000000L;
    return ts;
}

#endif
