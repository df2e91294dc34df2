/* The bfloat16-input products (strata_backend_sgemm_bf16 / ssyrk_bf16,
 * backend/gemm_bf16.c) against a float64 reference written here: every
 * operand rounded to bfloat16 by double arithmetic (frexp, rint: nearest,
 * ties to even, independently of the C code's bit trick), the products
 * summed in float64. Both micro-kernels (AVX512-BF16 where the CPU has it,
 * and the portable one, forced) on shapes that cover the blocking's edges:
 * m, n not multiples of the 6 x 64 tile, odd k, k past one 768-deep block,
 * n past one 768-column block, every transpose, beta 0 (C not read: NaN in
 * C must vanish) and beta != 0, and SYRK in both orientations (full
 * symmetric C written; with beta != 0 from a symmetric C, the only C that
 * SYRK's one-triangle read and Newton-Schulz use). Also the in-place
 * rounding strata_backend_round_bf16 (Newton-Schulz's Gram matrix), exact,
 * and the lane-order sum of squares strata_backend_sumsq_lanes (bf16 NS's
 * norms).
 *
 * Tolerance, per element, a bound that cannot flake: float32 summation of
 * k products (Higham, "Accuracy and Stability of Numerical Algorithms",
 * 2nd ed., section 3.1: |error| <= gamma_k sum |a_i b_i|, gamma_k ~ k u,
 * u = 2^-24), times 2 for the alpha / beta step and the pair-wise sums:
 *   |C - ref| <= 2 (k + 2) 2^-24 (|alpha| sum_k |a b| + |beta c|) + 1e-30.
 * The test also checks that the rounding matters (the product of unrounded
 * operands is outside that bound for some element), so a kernel that
 * skipped the rounding fails. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gemm_bf16.h"
#include "backend/ops.h"
#include "strata/backend.h"

static double bf16_ref(double x)
{
    if (x == 0.0 || !isfinite(x))
        return x;
    int e;
    const double m = frexp(x, &e); /* |m| in [0.5, 1): 8 significant bits = m * 2^8 */
    return ldexp(rint(m * 256.0), e - 8);
}

static unsigned long long rng_state = 88172645463325252ull;
static double uniform(void) /* xorshift64, in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static float *rand_matrix(size_t n)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)uniform();
    return x;
}

static int failures;

/* strata_backend_sumsq_lanes against a long double sum (n up to 5000,
 * tails of every length mod 32): within n 2^-53 relative (float64 sums of
 * non-negative terms), and bit-for-bit the value of the other kernel
 * (`first`: pass 0's results, compared in pass 1). */
static void check_sumsq_lanes(strata_backend *be, const char *kernel, double *first, bool compare)
{
    static const size_t ns[] = {0, 1, 31, 32, 33, 100, 1023, 5000};
    float *x = rand_matrix(5000);
    int bad = 0;
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        double got = -1.0;
        long double want = 0.0L;
        for (size_t i = 0; i < ns[t]; i++)
            want += (long double)x[i] * x[i];
        if (strata_backend_sumsq_lanes(be, ns[t], x, &got) != STRATA_OK ||
            fabs(got - (double)want) > (double)ns[t] * 0x1p-53 * (double)want ||
            (compare && got != first[t]))
            bad++;
        first[t] = got;
    }
    free(x);
    printf("%s sumsq_lanes (against long double%s): %s\n", kernel,
           compare ? ", and bit-for-bit the other kernel" : "", bad ? "FAIL" : "PASS");
    failures += bad != 0;
}

/* strata_backend_round_bf16 (in place, kept float32) against bf16_ref on 1000
 * values (uniform of random magnitudes 2^-20 .. 2^20 plus exact ties, an
 * odd count so the vector path has a tail): every element equal. */
static void check_round(strata_backend *be, const char *kernel)
{
    enum { N = 1003 };
    float x[N];
    double want[N];
    for (int i = 0; i < N; i++) {
        float v = (float)ldexp(uniform(), (int)(40 * (uniform() + 1) / 2) - 20);
        if (i % 7 == 0) /* a tie: halfway between two bfloat16 (spacing 2^-7 in [1, 2)) */
            v = (float)ldexp(1.0 + (2 * (i % 128) + 1) / 256.0, i % 9 - 4) * (i & 1 ? -1 : 1);
        x[i] = v;
        want[i] = bf16_ref(v);
    }
    int bad = strata_backend_round_bf16(be, N, x) != STRATA_OK;
    for (int i = 0; i < N && !bad; i++)
        bad = (double)x[i] != want[i];
    printf("%s round_bf16 n=%d (ties included): %s\n", kernel, N, bad ? "FAIL" : "PASS");
    failures += bad;
}

/* op(X)(i, j) of a row-major X with leading dimension ld */
static double at(const float *x, int ld, int trans, int i, int j)
{
    return trans ? x[(size_t)j * ld + i] : x[(size_t)i * ld + j];
}

/* One GEMM case (syrk: C = alpha op(A) op(A)^T, op by `ta`, B unused). */
static void check(strata_backend *be, const char *kernel, bool syrk, int m, int n, int k, int ta,
                  int tb, float alpha, float beta)
{
    const int lda = syrk ? (ta ? m : k) : (ta ? m : k), ldb = tb ? k : n, ldc = n + 3;
    const size_t asz = (size_t)(ta ? k : m) * lda, bsz = (size_t)(tb ? n : k) * ldb;
    float *a = rand_matrix(asz), *b = rand_matrix(bsz), *c = rand_matrix((size_t)m * ldc);
    float *c0 = malloc((size_t)m * ldc * sizeof(float));
    if (beta == 0.0f)
        for (size_t i = 0; i < (size_t)m * ldc; i++)
            c[i] = NAN; /* beta 0: C must not be read */
    else if (syrk) /* SYRK reads one triangle of C (BLAS): a symmetric C, as NS passes */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < i; j++)
                c[(size_t)j * ldc + i] = c[(size_t)i * ldc + j];
    memcpy(c0, c, (size_t)m * ldc * sizeof(float));
    strata_status st =
        syrk ? strata_backend_ssyrk_bf16(be, ta, n, k, alpha, a, lda, beta, c, ldc)
             : strata_backend_sgemm_bf16(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double worst = 0.0; /* |C - ref| / bound */
    bool rounding_seen = false;
    for (int i = 0; i < m && st == STRATA_OK; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0.0, raw = 0.0, mag = 0.0;
            for (int p = 0; p < k; p++) {
                const double x = at(a, lda, ta, i, p);
                /* SYRK: op(A)^T(p, j) = op(A)(j, p) */
                const double y = syrk ? at(a, lda, ta, j, p) : at(b, ldb, tb, p, j);
                sum += bf16_ref(x) * bf16_ref(y);
                raw += x * y;
                mag += fabs(bf16_ref(x) * bf16_ref(y));
            }
            const double cin = beta == 0.0f ? 0.0 : (double)c0[(size_t)i * ldc + j];
            const double ref = (double)alpha * sum + (double)beta * cin;
            const double bound = 2.0 * (k + 2) * ldexp(1.0, -24) *
                                     (fabs(alpha) * mag + fabs(beta * cin)) + 1e-30;
            const double got = c[(size_t)i * ldc + j];
            const double r = isfinite(got) ? fabs(got - ref) / bound : INFINITY;
            worst = r > worst ? r : worst;
            if (fabs((double)alpha * raw + (double)beta * cin - ref) > bound)
                rounding_seen = true;
        }
    /* columns past n are untouched */
    bool pad_ok = true;
    for (int i = 0; i < m && st == STRATA_OK; i++)
        for (int j = n; j < ldc; j++)
            if (memcmp(&c[(size_t)i * ldc + j], &c0[(size_t)i * ldc + j], sizeof(float)))
                pad_ok = false;
    const bool ok = st == STRATA_OK && worst <= 1.0 && pad_ok && rounding_seen;
    printf("%-9s %s m=%d n=%d k=%d ta=%d tb=%d alpha=%g beta=%g: worst |err|/bound %.3g%s%s "
           "%s\n",
           kernel, syrk ? "ssyrk" : "sgemm", m, n, k, ta, tb, alpha, beta, worst,
           pad_ok ? "" : " (padding written)", rounding_seen ? "" : " (rounding not seen)",
           ok ? "PASS" : "FAIL");
    if (!ok)
        failures++;
    free(a);
    free(b);
    free(c);
    free(c0);
}

int main(void)
{
    strata_backend *be = NULL;
    if (strata_backend_cpu_create(1, &be) != STRATA_OK) {
        fprintf(stderr, "no cpu backend\n");
        return 1;
    }
    static const struct {
        int m, n, k, ta, tb;
        float alpha, beta;
    } g[] = {
        {6, 64, 2, 0, 0, 1.0f, 0.0f},      {7, 65, 3, 0, 0, 1.5f, 0.5f},
        {37, 70, 33, 0, 0, 1.0f, 0.0f},    {13, 150, 1030, 0, 0, -0.75f, 2.0f},
        {9, 800, 40, 0, 0, 1.0f, 1.0f},    {33, 17, 9, 1, 0, 1.0f, 0.0f},
        {33, 17, 9, 0, 1, 1.0f, -1.0f},    {20, 21, 22, 1, 1, 2.0f, 0.25f},
        {70, 129, 515, 0, 1, 1.0f, 0.0f}, {1, 1, 1, 0, 0, 1.0f, 0.0f},
    };
    static const struct {
        int n, k, trans;
        float alpha, beta;
    } s[] = {
        {70, 1030, 0, 1.0f, 0.0f}, {70, 45, 1, -4.775f, 3.4445f}, {130, 66, 0, 2.0315f, 0.5f},
        {5, 3, 0, 1.0f, 0.0f},     {800, 9, 0, 1.0f, 0.5f}, /* several row and column blocks */
    };
    double lanes[8];
    for (int pass = 0; pass < 2; pass++) {
        strata_gemm_bf16_force_portable(pass == 1);
        const char *kernel = strata_gemm_bf16_kernel();
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
            check(be, kernel, false, g[i].m, g[i].n, g[i].k, g[i].ta, g[i].tb, g[i].alpha,
                  g[i].beta);
        for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
            check(be, kernel, true, s[i].n, s[i].n, s[i].k, s[i].trans, 0, s[i].alpha, s[i].beta);
        check_round(be, kernel);
        rng_state = 88172645463325252ull; /* the same x for both kernels */
        check_sumsq_lanes(be, kernel, lanes, pass == 1);
        if (pass == 0 && strcmp(kernel, "portable") == 0)
            break; /* no AVX512-BF16 here: the portable pass was the first */
    }
    strata_gemm_bf16_force_portable(false);
    /* Bad arguments: refused, C untouched. */
    float c = 7.0f;
    const bool refused =
        strata_backend_sgemm_bf16(be, 0, 0, -1, 1, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1) ==
            STRATA_ERR_INVALID_ARG &&
        strata_backend_ssyrk_bf16(be, 0, 1, 1, 1.0f, NULL, 1, 0.0f, &c, 1) ==
            STRATA_ERR_INVALID_ARG &&
        strata_backend_round_bf16(be, 1, NULL) == STRATA_ERR_INVALID_ARG &&
        strata_backend_sumsq_lanes(be, 1, &c, NULL) == STRATA_ERR_INVALID_ARG &&
        c == 7.0f;
    printf("bad arguments refused: %s\n", refused ? "PASS" : "FAIL");
    failures += !refused;
    strata_backend_destroy(be);
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
