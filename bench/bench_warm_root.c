/* bench_warm_root — does a Newton iteration for the inverse p-th root, warm
 * started from the previous refresh's root, beat the float64 eigh root at
 * F = 1 (a refresh every step)? (issue 23, item 4; the "warm root" study.)
 *
 * Realistic factor sequences: A_t = beta2 A_{t-1} + G_t G_t^T (beta2 = 0.95,
 * the default model's Shampoo; beta2 = 1 is the sum form), G_t = C Z_t / sqrt(k)
 * with Z_t an n x k Gaussian (k = 128 for n <= 512: the default model's
 * d_model; k = 768 above: GPT-2 small's) and C = I ("iso") or
 * C = diag(10^(-1.5 i / n)) ("decay": a spectrum over ~3 decades of A).
 * B = A + eps_eff I, eps_eff = eps_rel lambda_max(A) (eps_rel 1e-6 unless
 * --eps-rel). p = 4 (Shampoo's exponent 1/4 per side) unless --p 2.
 * After `warm` accumulation steps the exact (eigh) root of A_{t-1} is kept and,
 * for each measured step t:
 *   eigh     dsyevd on a float64 copy, s_j = (max(l_j,0) + eps_eff)^(-1/2p) on
 *            the eigenvectors, root = W^T W by DSYRK (the runtime's eigh root);
 *            it is also the reference for the error column;
 *   newton   the Newton iteration of Higham, Functions of Matrices (2008),
 *            eq. (7.12) / Guo & Higham (2006), eq. (2.5), in residual form:
 *            R_k = X_k^p B - I, X_{k+1} = sym(X_k - X_k R_k / p), started at
 *            X_0 = beta2^(-1/p) X_{t-1} (the previous root rescaled for the
 *            decay of A); accepted at ||R||_F <= 1e-6 (the runtime's residual
 *            check), refused (eigh fallback, its time added) when the residual
 *            grows, is not finite, or after 6 iterations;
 *   coupled  Guo & Higham's coupled form (2006, eq. (2.9)-(2.10)) from the
 *            same X_0: M_0 = X_0^p B, T = ((p+1) I - M)/p, X <- X T,
 *            M <- T^p M, until ||M - I||_F <= 1e-12 or it stalls, then the true
 *            residual ||X^p B - I||_F <= 1e-6 checked (else fallback).
 * X^2 and X^4 of a symmetric X are DSYRKs (n^3 flops), the rest DGEMMs.
 * Columns: ms per root (median over the measured steps; loaded machine),
 * Newton iterations (max), error ||X - X_eigh||_F / ||X_eigh||_F (max over
 * the accepted roots), fallbacks / measured steps, the initial residual
 * ||X_0^p B - I||_F (how far the warm start is), the smallest residual the
 * Newton iterates reached and the coupled form's final true residual (max over
 * the steps; nan: the coupled M did not converge within the cap).
 * "1 residual" is one evaluation of X^p B - I, the floor of any warm-started
 * method (the acceptance check alone).
 *
 * Why it loses (the first-order error analysis behind the table). Let
 * Y = B^(-1/p), X = Y + D (D symmetric), and write D in B's eigenbasis
 * (eigenvalues l_a). One step X' = sym(X - X R / p) maps, to first order,
 *   D'_ab = D_ab g(l_a / l_b),  g(r) = 1 - (1/2p) sum_{i=1..p} (r^(i/p) + r^(-i/p)),
 * so g(1) = 0 (the commuting part converges quadratically) but g(r) <= 0 and
 * |g(r)| > 1 once r exceeds 6.4 (p = 4; 5.1 for p = 2): an error between
 * two eigendirections whose eigenvalues differ by more than that grows every
 * iteration. A start from c^(-1) I commutes with B (D diagonal), which is why
 * the convergence theory of Guo & Higham (2006, SIAM J. Matrix Anal. Appl.
 * 28(3) 788-804, section 3; Higham 2008, section 7.3) assumes it,
 * and why the basic iteration is numerically unstable unless the spectrum is
 * clustered (Smith, SIAM J. Matrix Anal. Appl. 24(4) 971-989, 2003; Guo &
 * Higham 2006's abstract). The previous root X_{t-1} does not commute with
 * B_t (the update G G^T turns the eigenbasis), so its error has exactly those
 * off-diagonal parts. The coupled form is stable, but from a non-commuting
 * X_0 it converges to X_0 (X_0^p B)^(-1/p), which is not B^(-1/p) (its
 * first-order error is D_ab (1 - (1/p) sum_i (l_b/l_a)^(i/p)), not reduced):
 * hence its final residual column. Cost, independently of convergence: one
 * residual X^p B - I is 4 n^3 flops (two DSYRK, one DGEMM) and each Newton
 * step 6 n^3, against the eigh root's ~(4/3 + 2 + 1) n^3 plus the divide
 * and conquer (tridiagonalization, back-transformation, DSYRK); so on this CPU even accepting the start
 * unchanged would cost the check alone, ~0.3-0.45 of an eigh root, and one
 * step plus the check already costs about one eigh root.
 *
 * Usage: bench_warm_root [--threads N] [--sizes n1,n2,...] [--steps R]
 *                        [--warm W] [--eps-rel X] [--beta2 X] [--p 2|4]
 * Default: one thread, sizes 128,384,512,768,1024, R = 3 (1 at n >= 2048),
 * W = 20. Exit 0 (figures reported, nothing enforced), 1 on a failed call. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "bench_util.h"

#define MAX_ITERS 6
#define RESID_TOL 1e-6

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static double gauss(void)
{
    return bench_gauss(&rng_state);
}

typedef struct {
    int n;
    double *v, *lam, *lw, *t1, *t2, *t3, *x;
    lapack_int *liw, lwork, liwork;
} ws;

static void mirror(int n, double *a) /* lower -> upper */
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            a[(size_t)i * n + j] = a[(size_t)j * n + i];
}

static void symmetrize(int n, double *a)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const double m = 0.5 * (a[(size_t)i * n + j] + a[(size_t)j * n + i]);
            a[(size_t)i * n + j] = a[(size_t)j * n + i] = m;
        }
}

static double frob(size_t nn, const double *a)
{
    double s = 0.0;
    for (size_t i = 0; i < nn; i++)
        s += a[i] * a[i];
    return sqrt(s);
}

/* lambda_max(A) by dsyevd (untimed setup). */
static double lmax_of(ws *w, const double *a)
{
    const int n = w->n;
    memcpy(w->v, a, (size_t)n * n * sizeof(double));
    if (LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'N', 'L', n, w->v, n, w->lam, w->lw, w->lwork,
                            w->liw, w->liwork))
        return NAN;
    return w->lam[n - 1];
}

/* The eigh root of A + eps I into out. */
static int eigh_root(ws *w, const double *a, double eps, int p, double *out)
{
    const int n = w->n;
    memcpy(w->v, a, (size_t)n * n * sizeof(double));
    if (LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, w->v, n, w->lam, w->lw, w->lwork,
                            w->liw, w->liwork))
        return -1;
    for (int j = 0; j < n; j++) /* row j: eigenvector j */
        cblas_dscal(n, pow(fmax(w->lam[j], 0.0) + eps, -0.5 / p), w->v + (size_t)j * n, 1);
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, n, 1.0, w->v, n, 0.0, out, n);
    mirror(n, out);
    return 0;
}

/* r = X^p B - I (X symmetric); returns ||r||_F. Uses t1, t2. */
static double residual(ws *w, const double *x, const double *b, int p, double *r)
{
    const int n = w->n;
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, n, 1.0, x, n, 0.0, w->t1, n);
    mirror(n, w->t1); /* X^2 */
    const double *xp = w->t1;
    if (p == 4) {
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, n, 1.0, w->t1, n, 0.0, w->t2, n);
        mirror(n, w->t2); /* X^4 */
        xp = w->t2;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, xp, n, b, n, 0.0, r, n);
    for (int i = 0; i < n; i++)
        r[(size_t)i * n + i] -= 1.0;
    return frob((size_t)n * n, r);
}

/* Uncoupled warm Newton: x in (start) and out. Returns iterations, or -1 on
 * refusal; *r0 the start's residual. */
static int newton_warm(ws *w, double *x, const double *b, int p, double *r0, double *rbest)
{
    const int n = w->n;
    double prev = INFINITY;
    for (int k = 0;; k++) {
        const double r = residual(w, x, b, p, w->t3);
        if (k == 0)
            *r0 = r;
        *rbest = k == 0 || r < *rbest ? r : *rbest;
        if (r <= RESID_TOL)
            return k;
        if (!isfinite(r) || r >= prev || k == MAX_ITERS)
            return -1;
        prev = r;
        /* X <- sym(X - X R / p) */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, -1.0 / p, x, n, w->t3, n,
                    1.0, x, n);
        symmetrize(n, x);
    }
}

/* Coupled warm Newton (Guo & Higham 2006). Returns iterations or -1; *rend
 * the true residual at the end. */
static int coupled_warm(ws *w, double *x, const double *b, int p, double *rend)
{
    const int n = w->n;
    const size_t nn = (size_t)n * n;
    double *m = w->t3, *t = w->v, *tp = w->lw; /* lw holds >= 2 n^2 doubles */
    double *tmp = tp + nn;
    residual(w, x, b, p, m);
    for (int i = 0; i < n; i++)
        m[(size_t)i * n + i] += 1.0; /* M_0 = X_0^p B */
    double prev = INFINITY;
    int k = 0;
    for (;; k++) {
        for (int i = 0; i < n; i++)
            m[(size_t)i * n + i] -= 1.0;
        const double d = frob(nn, m);
        for (int i = 0; i < n; i++)
            m[(size_t)i * n + i] += 1.0;
        if (d <= 1e-12 || (k > 0 && d >= 0.5 * prev))
            break;
        if (!isfinite(d) || k == MAX_ITERS) {
            *rend = NAN;
            return -1;
        }
        prev = d;
        for (size_t i = 0; i < nn; i++)
            t[i] = -m[i] / p;
        for (int i = 0; i < n; i++)
            t[(size_t)i * n + i] += (p + 1.0) / p;
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, x, n, t, n, 0.0, tmp,
                    n);
        memcpy(x, tmp, nn * sizeof(double));
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, t, n, t, n, 0.0, tp,
                    n); /* T^2 */
        const double *tpp = tp;
        if (p == 4) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, tp, n, tp, n,
                        0.0, t, n); /* T^4 */
            tpp = t;
        }
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, tpp, n, m, n, 0.0,
                    tmp, n);
        memcpy(m, tmp, nn * sizeof(double));
    }
    symmetrize(n, x);
    const double r = residual(w, x, b, p, w->t3);
    *rend = r;
    return r <= RESID_TOL ? k : -1;
}

static int run(int n, int decay, double beta2, int steps, int warm, double eps_rel, int p)
{
    const int k = n <= 512 ? (n < 128 ? n : 128) : 768;
    const size_t nn = (size_t)n * n;
    ws w = {.n = n, .lwork = 1 + 6 * n + 2 * (lapack_int)nn, .liwork = 3 + 5 * n};
    double *a = malloc(nn * sizeof(double)), *b = malloc(nn * sizeof(double)),
           *g = malloc((size_t)n * k * sizeof(double)), *c = malloc((size_t)n * sizeof(double)),
           *prev = malloc(nn * sizeof(double)), *ref = malloc(nn * sizeof(double)),
           *x = malloc(nn * sizeof(double));
    w.v = malloc(nn * sizeof(double));
    w.lam = malloc((size_t)n * sizeof(double));
    w.lw = malloc((size_t)w.lwork * sizeof(double));
    w.t1 = malloc(nn * sizeof(double));
    w.t2 = malloc(nn * sizeof(double));
    w.t3 = malloc(nn * sizeof(double));
    w.liw = malloc((size_t)w.liwork * sizeof(lapack_int));
    double *te = calloc((size_t)steps, sizeof(double)), *tn = calloc((size_t)steps, sizeof(double)),
           *tc = calloc((size_t)steps, sizeof(double));
    int rc = 1;
    if (!a || !b || !g || !c || !prev || !ref || !x || !w.v || !w.lam || !w.lw || !w.t1 ||
        !w.t2 || !w.t3 || !w.liw || !te || !tn || !tc) {
        fprintf(stderr, "bench_warm_root: out of memory at n=%d\n", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        c[i] = decay ? pow(10.0, -1.5 * i / n) : 1.0;
    memset(a, 0, nn * sizeof(double));
    int it_n = 0, it_c = 0, fb_n = 0, fb_c = 0;
    double err_n = 0.0, err_c = 0.0, r0max = 0.0, rbest = 0.0, rend = 0.0, eps = 0.0;
    for (int t = 0; t <= warm + steps; t++) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++)
                g[(size_t)i * k + j] = c[i] * gauss() / sqrt((double)k);
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, n, k, 1.0, g, k, beta2, a, n);
        mirror(n, a);
        if (t < warm)
            continue;
        eps = eps_rel * lmax_of(&w, a);
        memcpy(b, a, nn * sizeof(double));
        for (int i = 0; i < n; i++)
            b[(size_t)i * n + i] += eps;
        double t0 = bench_now_seconds();
        if (eigh_root(&w, a, eps, p, ref)) {
            fprintf(stderr, "bench_warm_root: dsyevd failed at n=%d\n", n);
            goto out;
        }
        const double t_eigh = bench_now_seconds() - t0;
        if (t == warm) { /* the first refresh: eigh only */
            memcpy(prev, ref, nn * sizeof(double));
            continue;
        }
        const int s = t - warm - 1;
        te[s] = t_eigh;
        const double scale = pow(beta2, -1.0 / p);
        double r0 = 0.0, rb = 0.0, re = 0.0;
        for (int q = 0; q < 2; q++) {
            for (size_t i = 0; i < nn; i++)
                x[i] = scale * prev[i];
            t0 = bench_now_seconds();
            const int it = q == 0 ? newton_warm(&w, x, b, p, &r0, &rb) : coupled_warm(&w, x, b, p, &re);
            double dt = bench_now_seconds() - t0;
            if (it < 0) {
                t0 = bench_now_seconds();
                eigh_root(&w, a, eps, p, x);
                dt += bench_now_seconds() - t0;
            }
            const double e = bench_rel_err(nn, x, ref);
            if (q == 0) {
                tn[s] = dt;
                if (it < 0)
                    fb_n++;
                else {
                    it_n = it > it_n ? it : it_n;
                    err_n = fmax(err_n, e);
                }
            } else {
                tc[s] = dt;
                if (it < 0)
                    fb_c++;
                else {
                    it_c = it > it_c ? it : it_c;
                    err_c = fmax(err_c, e);
                }
            }
        }
        r0max = fmax(r0max, r0);
        rbest = fmax(rbest, rb);
        rend = isnan(re) || isnan(rend) ? NAN : fmax(rend, re);
        memcpy(prev, ref, nn * sizeof(double));
    }
    /* The floor of any warm start: one residual X^p B - I (the acceptance
     * check alone, as if the start were taken unchanged). */
    double t0 = bench_now_seconds();
    residual(&w, prev, b, p, w.t3);
    const double floor_ms = 1e3 * (bench_now_seconds() - t0);
    const double me = 1e3 * bench_median(te, steps), mn = 1e3 * bench_median(tn, steps),
                 mc = 1e3 * bench_median(tc, steps);
    char itn[16] = "-", itc[16] = "-", ern[16] = "-", erc[16] = "-", form[24];
    if (fb_n < steps) {
        snprintf(itn, sizeof itn, "%d", it_n);
        snprintf(ern, sizeof ern, "%.1e", err_n);
    }
    if (fb_c < steps) {
        snprintf(itc, sizeof itc, "%d", it_c);
        snprintf(erc, sizeof erc, "%.1e", err_c);
    }
    if (beta2 == 1.0)
        snprintf(form, sizeof form, "sum");
    else
        snprintf(form, sizeof form, "ema %g", beta2);
    printf("| %d | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx | %s/%s | %s/%s | %d/%d | "
           "%d/%d | %.1e | %.1e | %.1e |\n",
           n, decay ? "decay" : "iso", form, me, floor_ms, mn, mc, me / mn, me / mc, itn, itc, ern,
           erc, fb_n, steps, fb_c, steps, r0max, rbest, rend);
    fflush(stdout);
    rc = 0;
out:
    free(a), free(b), free(g), free(c), free(prev), free(ref), free(x), free(w.v), free(w.lam);
    free(w.lw), free(w.t1), free(w.t2), free(w.t3), free(w.liw), free(te), free(tn), free(tc);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = 1, steps = 0, warm = 20, p = 4, sizes[16], ns = 0;
    double eps_rel = 1e-6, beta2 = 0.95;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--p") && i + 1 < argc)
            p = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--beta2") && i + 1 < argc)
            beta2 = atof(argv[++i]);
        else if (!strcmp(argv[i], "--eps-rel") && i + 1 < argc)
            eps_rel = atof(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            for (char *s = strtok(argv[++i], ","); s && ns < 16; s = strtok(NULL, ","))
                sizes[ns++] = atoi(s);
        } else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--sizes n1,n2,...] [--steps R] [--warm W] "
                    "[--eps-rel X] [--beta2 X] [--p 2|4]\n",
                    argv[0]);
            return argv[i][1] == 'h' || !strcmp(argv[i], "--help") ? 0 : 1;
        }
    }
    if (ns == 0) {
        const int d[] = {128, 384, 512, 768, 1024};
        for (ns = 0; ns < 5; ns++)
            sizes[ns] = d[ns];
    }
    if ((p != 2 && p != 4) || warm < 1 || steps < 0 || threads < 1 || !(beta2 > 0.0) ||
        beta2 >= 1.0) {
        fprintf(stderr, "bench_warm_root: --p 2|4, --warm >= 1, --steps >= 0, --threads >= 1, "
                        "0 < --beta2 < 1\n");
        return 1;
    }
    strata_blas_threads_set(threads);
    const char *core_env = strata_blas_core_env();
    printf("bench_warm_root: %s %s, core %s, %d thread(s); p = %d, eps_rel %g, %d warm-up "
           "steps; loaded machine\n\n",
           strata_blas_name(), strata_blas_version(), core_env ? core_env : "(default)", threads,
           p, eps_rel, warm);
    printf("| n | C | A | eigh ms | 1 residual ms | newton ms | coupled ms | eigh/newton | "
           "eigh/coupled | iters n/c | err n/c | fallback n | fallback c | start residual | newton best | coupled end |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < ns; i++)
        for (int decay = 0; decay < 2; decay++)
            for (int form = 0; form < 2; form++) {
                const int r = steps ? steps : (sizes[i] >= 2048 ? 1 : 3);
                if (run(sizes[i], decay, form ? 1.0 : beta2, r, warm, eps_rel, p))
                    return 1;
            }
    return 0;
}
