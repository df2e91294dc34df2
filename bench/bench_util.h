/* Small helpers the benchmarks share: a monotonic clock and a median. */
#ifndef STRATA_BENCH_UTIL_H
#define STRATA_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Benchmarks that take positional arguments: -h, --help (or any argument
 * starting with '-') prints `usage` and asks the caller to exit 0. */
static inline int bench_wants_help(int argc, char **argv, const char *usage)
{
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1] != '\0' && strspn(argv[i] + 1, "0123456789.") == 0) {
            printf("%s", usage);
            return 1;
        }
    return 0;
}

/* A standard normal deviate from *state (xorshift64* and Box-Muller): a
 * fixed, portable problem for the root benchmarks. */
static inline double bench_gauss(uint64_t *state)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        u[i] = ((double)((*state * 2685821657736338717ull) >> 11) + 1.0) * 0x1.0p-53;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* ||x - ref||_F / ||ref||_F over nn float64 entries: the root benchmarks'
 * error against their float64 eigh reference. */
static inline double bench_rel_err(size_t nn, const double *x, const double *ref)
{
    double d = 0.0, s = 0.0;
    for (size_t i = 0; i < nn; i++) {
        d += (x[i] - ref[i]) * (x[i] - ref[i]);
        s += ref[i] * ref[i];
    }
    return sqrt(d / s);
}

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of x[0..n) (n >= 1); sorts x in place. */
static inline double bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, bench_cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#endif
