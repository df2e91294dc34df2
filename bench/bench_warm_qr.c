/* bench_warm_qr — is an inverse root from a warm-started EIGENBASIS (one step
 * of orthogonal iteration from the previous step's eigenvectors) faster than
 * the float64 dsyevd root at F = 1, and how accurate is it? (issue 23, item 4;
 * follows bench_warm_root, whose warm-started Newton root failed.)
 *
 * Factor sequences as in bench_warm_root: A_t = beta2 A_{t-1} + G_t G_t^T
 * (beta2 0.95, the default model's Shampoo; beta2 = 1: the sum form), G_t =
 * C Z_t / sqrt(k), Z_t n x k Gaussian (k = 128 for n <= 512, 768 above), C = I
 * ("iso") or diag(10^(-1.5 i / n)) ("decay"). eps_eff = eps_rel lambda_max(A)
 * (eps_rel 1e-6), f(l) = (max(l, 0) + eps_eff)^(-1/p), p = 4 (Shampoo's
 * exponent 1/4 per side). Every root is X = Q diag(f(l)) Q^T, formed as W W^T
 * with W = Q diag(sqrt f) (one DSYRK), as the runtime's eigh root is.
 *
 * Methods, each keeping its own previous basis Q (n x n, float64, columns the
 * eigenvectors, column-major), started from the dsyevd basis of the first
 * factor and chained through `chain` untimed steps before the measured ones:
 *   eigh   dsyevd (the reference for every error column);
 *   qr     SOAP's eigenbasis refresh (Vyas et al. 2024, arXiv 2409.11321,
 *          Algorithm 4: one power iteration + QR): P = A Q, the eigenvalue
 *          estimates l_k = q_k^T p_k (the Rayleigh quotients of the old
 *          basis: O(n^2) from P), columns sorted by l descending (the order
 *          in which orthogonal iteration is a stable fixed point), Q' = qr(P)
 *          (dgeqrf + dorgqr); X from Q' and l. 2 + 8/3 + 1 n^3 flops. No
 *          check;
 *   qrchk  Distributed Shampoo's QR eigendecomposition
 *          (QREigendecompositionConfig, max_iterations 1; its qr_algorithm
 *          in preconditioner/matrix_functions.py): B = Q^T A Q, one step of
 *          the unshifted QR algorithm B = Q_b R, B' = R Q_b (= Q'^T A Q'),
 *          Q' = Q Q_b, eigenvalues diag(B') (exact Rayleigh quotients of the
 *          returned basis). Mathematically the same Q' as `qr`, but B' makes
 *          the check free: (a) Distributed Shampoo's criterion
 *          ||B' - diag B'||_F / ||B'||_F and (b) a first-order estimate of
 *          the root's own error: the true root is Q' f(B') Q'^T and ours is
 *          Q' f(diag B') Q'^T, whose difference to first order is the
 *          Frechet derivative of f at diag(B') applied to the off-diagonal E
 *          of B', i.e. E o D with D_ij = (f(l_i) - f(l_j)) / (l_i - l_j)
 *          (Daleckii-Krein; Higham, Functions of Matrices, 2008, Thm 3.11),
 *          so est = ||E o D||_F / ||f(l)||_2. A root with est > --tol
 *          (default 1: never, so the time is qrchk's own) is recomputed
 *          by dsyevd (its time included) and counted; the fallback's
 *          dsyevd basis becomes the next Q.
 *          2 + 2 + 8/3 + 1 + 2 + 1 n^3 flops.
 *   qr32   the runtime's float32 form (optim/phases.h strata_inv_root_warm_qr_f32,
 *          Shampoo's --root-method warm-qr-f32) on the float32 factor, its
 *          own float32 basis chained, tolerance 1 (never a fallback: the
 *          step's own time; the runtime's 0.12 would fall back to ssyevd);
 *          timed from the float32 factor to the float32 root.
 *   --iters K runs K orthogonal-iteration steps (qr) / QR-algorithm steps
 *   (qrchk) per root instead of 1.
 * Columns: ms per root (median over the measured steps; loaded machine),
 * speed-up over eigh, the relative Frobenius error ||X - X_eigh|| / ||X_eigh||
 * (max over the measured steps), for scale the error of a one-step-stale
 * exact root ||X_eigh(A_{t-1}) - X_eigh(A_t)|| / ||X_eigh(A_t)|| (what
 * S = 1 async already accepts), Distributed Shampoo's off-diagonal criterion
 * on qr's previous basis (free: O(n^2) from P), qrchk's estimate est and the
 * same criterion on its returned basis (max), and qrchk's fallbacks / steps.
 *
 * Usage: bench_warm_qr [--threads N] [--sizes n1,...] [--steps R] [--chain C]
 *                      [--warm W] [--iters K] [--tol X] [--eps-rel X] [--p 2|4]
 * Default: one thread, sizes 128,256,384,512,768,1024, R = 5 (1 at n >= 2048),
 * C = 5 (2 at n >= 2048), W = 20; --ema-only skips the sum form (beta2 = 1).
 * Measured table: README, "Warm-started eigenbases". Exit 0 (figures reported, nothing
 * enforced), 1 on a failed call. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "bench_util.h"
#include "optim/phases.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

typedef struct {
    int n, p;
    double eps;
    double *v, *lam, *lw, *f, *t1, *t2, *t3;
    lapack_int *liw, lwork, liwork;
    int *idx;
} ws;

static void mirror_lower_cm(int n, double *a) /* column-major lower -> full */
{
    for (int j = 0; j < n; j++)
        for (int i = j + 1; i < n; i++)
            a[(size_t)i * n + j] = a[(size_t)j * n + i];
}

static double fval(const ws *w, double l) { return pow(fmax(l, 0.0) + w->eps, -1.0 / w->p); }

/* X = Q diag(f(l)) Q^T (Q column-major, columns scaled in t1). */
static void root_from(ws *w, const double *q, const double *l, double *x)
{
    const int n = w->n;
    for (int k = 0; k < n; k++) {
        const double s = sqrt(fval(w, l[k]));
        const double *src = q + (size_t)k * n;
        double *dst = w->t1 + (size_t)k * n;
        for (int i = 0; i < n; i++)
            dst[i] = s * src[i];
    }
    cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, w->t1, n, 0.0, x, n);
    mirror_lower_cm(n, x);
}

/* dsyevd basis of a into q (descending order), eigenvalues into l. */
static int eigh_basis(ws *w, const double *a, double *q, double *l)
{
    const int n = w->n;
    memcpy(w->v, a, (size_t)n * n * sizeof(double));
    if (LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, w->v, n, w->lam, w->lw, w->lwork,
                            w->liw, w->liwork))
        return -1;
    for (int k = 0; k < n; k++) {
        memcpy(q + (size_t)k * n, w->v + (size_t)(n - 1 - k) * n, (size_t)n * sizeof(double));
        l[k] = w->lam[n - 1 - k];
    }
    return 0;
}

/* Indices sorted by key descending (insertion sort on a nearly sorted key). */
static void sort_desc(int n, const double *key, int *idx)
{
    for (int k = 0; k < n; k++)
        idx[k] = k;
    for (int k = 1; k < n; k++) {
        int v = idx[k], j = k - 1;
        while (j >= 0 && key[idx[j]] < key[v]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

/* In-place Q factor of column-major m (dgeqrf + dorgqr); R's upper triangle
 * copied to r first when r != NULL. */
static int qr_q(ws *w, double *m, double *r)
{
    const int n = w->n;
    if (LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, m, n, w->lam, w->lw, w->lwork))
        return -1;
    if (r) {
        memset(r, 0, (size_t)n * n * sizeof(double));
        for (int j = 0; j < n; j++)
            memcpy(r + (size_t)j * n, m + (size_t)j * n, (size_t)(j + 1) * sizeof(double));
    }
    return LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, m, n, w->lam, w->lw, w->lwork) ? -1 : 0;
}

/* SOAP-style: q (in/out), l out; *off Distributed Shampoo's criterion on
 * the previous basis, exact in O(n^2) from P = A Q (Q orthonormal: column k
 * of Q^T A Q has squared norm ||p_k||^2 and diagonal l_k = q_k^T p_k). */
static int warm_qr(ws *w, const double *a, double *q, double *l, int iters, double *off)
{
    const int n = w->n;
    for (int it = 0; it < iters; it++) {
        double *p = w->t2, *m = w->t3;
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, q, n, 0.0, p,
                    n);
        double tot = 0.0, dia = 0.0;
        for (int k = 0; k < n; k++) {
            l[k] = cblas_ddot(n, q + (size_t)k * n, 1, p + (size_t)k * n, 1);
            const double pk = cblas_dnrm2(n, p + (size_t)k * n, 1);
            tot += pk * pk;
            dia += l[k] * l[k];
        }
        if (it == 0)
            *off = sqrt(fmax(tot - dia, 0.0) / tot);
        sort_desc(n, l, w->idx);
        for (int k = 0; k < n; k++) {
            memcpy(m + (size_t)k * n, p + (size_t)w->idx[k] * n, (size_t)n * sizeof(double));
            w->f[k] = l[w->idx[k]];
        }
        memcpy(l, w->f, (size_t)n * sizeof(double));
        if (qr_q(w, m, NULL))
            return -1;
        memcpy(q, m, (size_t)n * n * sizeof(double));
    }
    return 0;
}

/* Distributed-Shampoo-style with the checks: q (in/out), l out; *est the
 * first-order root error estimate, *off the relative off-diagonal norm. */
static int warm_qr_checked(ws *w, const double *a, double *q, double *l, int iters, double *est,
                           double *off)
{
    const int n = w->n;
    const size_t nn = (size_t)n * n;
    double *b = w->t2, *qb = w->t3, *r = w->v, *tmp = w->t1;
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, q, n, 0.0, tmp,
                n);
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, n, n, n, 1.0, q, n, tmp, n, 0.0, qb, n);
    /* sort by the diagonal, descending: B <- P^T B P, Q <- Q P */
    for (int k = 0; k < n; k++)
        l[k] = qb[(size_t)k * n + k];
    sort_desc(n, l, w->idx);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            b[(size_t)j * n + i] = qb[(size_t)w->idx[j] * n + w->idx[i]];
    for (int k = 0; k < n; k++)
        memcpy(tmp + (size_t)k * n, q + (size_t)w->idx[k] * n, (size_t)n * sizeof(double));
    memcpy(q, tmp, nn * sizeof(double));
    for (int it = 0; it < iters; it++) {
        memcpy(qb, b, nn * sizeof(double));
        if (qr_q(w, qb, r))
            return -1;
        /* B' = R Q_b */
        memcpy(b, qb, nn * sizeof(double));
        cblas_dtrmm(CblasColMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, n, n, 1.0,
                    r, n, b, n);
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, q, n, qb, n, 0.0,
                    tmp, n);
        memcpy(q, tmp, nn * sizeof(double));
    }
    double tot = 0.0, dia = 0.0, e2 = 0.0, f2 = 0.0;
    for (int k = 0; k < n; k++) {
        l[k] = b[(size_t)k * n + k];
        w->f[k] = fval(w, l[k]);
        f2 += w->f[k] * w->f[k];
        dia += l[k] * l[k];
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            const double e = 0.5 * (b[(size_t)j * n + i] + b[(size_t)i * n + j]);
            tot += e * e;
            if (i == j)
                continue;
            const double li = fmax(l[i], 0.0) + w->eps, lj = fmax(l[j], 0.0) + w->eps;
            double d;
            if (fabs(li - lj) > 1e-9 * fmax(li, lj))
                d = (w->f[i] - w->f[j]) / (li - lj);
            else /* f'(l) = -(1/p) l^(-1/p - 1) */
                d = -w->f[i] / (w->p * li);
            e2 += e * e * d * d;
        }
    *off = sqrt(fmax(tot - dia, 0.0) / tot);
    *est = sqrt(e2 / f2);
    return 0;
}

static int run(int n, int decay, double beta2, int steps, int chain, int warm, double eps_rel,
               int p, int iters, double tol)
{
    const int k = n <= 512 ? (n < 128 ? n : 128) : 768;
    const size_t nn = (size_t)n * n;
    ws w = {.n = n, .p = p, .liwork = 3 + 5 * n};
    double qq = 0.0, qo = 0.0, dummy = 0.0;
    LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, n, n, &dummy, n, &dummy, &qq, -1);
    LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, n, n, n, &dummy, n, &dummy, &qo, -1);
    w.lwork = 1 + 6 * n + 2 * (lapack_int)nn;
    if ((lapack_int)qq > w.lwork)
        w.lwork = (lapack_int)qq;
    if ((lapack_int)qo > w.lwork)
        w.lwork = (lapack_int)qo;
    double *a = malloc(nn * sizeof(double)), *g = malloc((size_t)n * k * sizeof(double)),
           *c = malloc((size_t)n * sizeof(double)), *ref = malloc(nn * sizeof(double)),
           *refprev = malloc(nn * sizeof(double)), *x = malloc(nn * sizeof(double)),
           *qa = malloc(nn * sizeof(double)), *qc = malloc(nn * sizeof(double)),
           *qe = malloc(nn * sizeof(double)), *l = malloc((size_t)n * sizeof(double));
    w.v = malloc(nn * sizeof(double));
    w.lam = malloc((size_t)n * sizeof(double));
    w.f = malloc((size_t)n * sizeof(double));
    w.lw = malloc((size_t)w.lwork * sizeof(double));
    w.t1 = malloc(nn * sizeof(double));
    w.t2 = malloc(nn * sizeof(double));
    w.t3 = malloc(nn * sizeof(double));
    w.liw = malloc((size_t)w.liwork * sizeof(lapack_int));
    w.idx = malloc((size_t)n * sizeof(int));
    double *te = calloc((size_t)steps, sizeof(double)), *ta = calloc((size_t)steps, sizeof(double)),
           *tc = calloc((size_t)steps, sizeof(double)), *t32 = calloc((size_t)steps,
                                                                        sizeof(double));
    float *a32 = malloc(nn * sizeof(float)), *q32 = malloc(nn * sizeof(float)),
          *x32 = malloc(nn * sizeof(float));
    double *work32 = malloc(strata_inv_root_work_doubles(n) * sizeof(double)),
           *x64 = malloc(nn * sizeof(double));
    int *iwork32 = malloc(strata_inv_root_work_ints(n) * sizeof(int));
    bool have32 = true;
    double err_32 = 0.0;
    strata_inv_root_opts o32;
    strata_inv_root_opts_default(&o32);
    o32.exponent = 1.0 / p;
    o32.eps_rel = eps_rel;
    int rc = 1;
    if (!a || !g || !c || !ref || !refprev || !x || !qa || !qc || !qe || !l || !w.v || !w.lam ||
        !w.f || !w.lw || !w.t1 || !w.t2 || !w.t3 || !w.liw || !w.idx || !te || !ta || !tc ||
        !t32 || !a32 || !q32 || !x32 || !work32 || !x64 || !iwork32) {
        fprintf(stderr, "bench_warm_qr: out of memory at n=%d\n", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        c[i] = decay ? pow(10.0, -1.5 * i / n) : 1.0;
    memset(a, 0, nn * sizeof(double));
    int fb = 0;
    double err_a = 0.0, err_c = 0.0, err_s = 0.0, est_max = 0.0, off_max = 0.0, offa_max = 0.0;
    const int first = warm - chain; /* the step whose dsyevd basis starts both chains */
    for (int t = 0; t <= warm + steps; t++) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++) /* column-major n x k: row i scaled by c_i */
                g[(size_t)j * n + i] = c[i] * bench_gauss(&rng_state) / sqrt((double)k);
        cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, k, 1.0, g, n, beta2, a, n);
        mirror_lower_cm(n, a);
        if (t < first)
            continue;
        memcpy(refprev, ref, nn * sizeof(double));
        double t0 = bench_now_seconds();
        if (eigh_basis(&w, a, qe, l))
            goto lapack_fail;
        w.eps = eps_rel * l[0];
        root_from(&w, qe, l, ref);
        const double t_eigh = bench_now_seconds() - t0;
        for (size_t i = 0; i < nn; i++)
            a32[i] = (float)a[i];
        if (t == first) {
            memcpy(qa, qe, nn * sizeof(double));
            memcpy(qc, qe, nn * sizeof(double));
            for (size_t i = 0; i < nn; i++)
                q32[i] = (float)qe[i];
            continue;
        }
        const int s = t - warm - 1; /* < 0: chained, untimed */
        t0 = bench_now_seconds();
        double off_a = 0.0;
        if (warm_qr(&w, a, qa, l, iters, &off_a))
            goto lapack_fail;
        root_from(&w, qa, l, x);
        const double t_a = bench_now_seconds() - t0;
        const double ea = bench_rel_err(nn, x, ref);
        t0 = bench_now_seconds();
        double est = 0.0, off = 0.0;
        if (warm_qr_checked(&w, a, qc, l, iters, &est, &off))
            goto lapack_fail;
        const int fell = !(est <= tol);
        if (fell) {
            if (eigh_basis(&w, a, qc, l))
                goto lapack_fail;
        }
        root_from(&w, qc, l, x);
        const double t_c = bench_now_seconds() - t0;
        t0 = bench_now_seconds();
        if (strata_inv_root_warm_qr_f32(n, a32, &o32, 1.0, q32, &have32, x32, work32, iwork32,
                                        NULL) != STRATA_OK)
            goto lapack_fail;
        const double t_32 = bench_now_seconds() - t0;
        if (s < 0)
            continue;
        t32[s] = t_32;
        for (size_t i = 0; i < nn; i++)
            x64[i] = x32[i];
        err_32 = fmax(err_32, bench_rel_err(nn, x64, ref));
        fb += fell;
        te[s] = t_eigh;
        ta[s] = t_a;
        tc[s] = t_c;
        err_a = fmax(err_a, ea);
        err_c = fmax(err_c, bench_rel_err(nn, x, ref));
        err_s = fmax(err_s, bench_rel_err(nn, refprev, ref));
        est_max = fmax(est_max, est);
        offa_max = fmax(offa_max, off_a);
        off_max = fmax(off_max, off);
    }
    const double me = 1e3 * bench_median(te, steps), ma = 1e3 * bench_median(ta, steps),
                 mc = 1e3 * bench_median(tc, steps), m32 = 1e3 * bench_median(t32, steps);
    char form[24];
    if (beta2 == 1.0)
        snprintf(form, sizeof form, "sum");
    else
        snprintf(form, sizeof form, "ema %g", beta2);
    printf("| %d | %s | %s | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.1e | %.1e | %.1e | %.1e | "
           "%.1e | %.1e | %d/%d | %.1f | %.2fx | %.1e |\n",
           n, decay ? "decay" : "iso", form, me, ma, mc, me / ma, me / mc, err_a, err_c, err_s,
           offa_max, est_max, off_max, fb, steps, m32, me / m32, err_32);
    fflush(stdout);
    rc = 0;
    goto out;
lapack_fail:
    fprintf(stderr, "bench_warm_qr: LAPACK failed at n=%d\n", n);
out:
    free(a), free(g), free(c), free(ref), free(refprev), free(x), free(qa), free(qc), free(qe);
    free(l), free(w.v), free(w.lam), free(w.f), free(w.lw), free(w.t1), free(w.t2), free(w.t3);
    free(w.liw), free(w.idx), free(te), free(ta), free(tc), free(t32);
    free(a32), free(q32), free(x32), free(work32), free(x64), free(iwork32);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = 1, steps = 0, chain = -1, warm = 20, p = 4, iters = 1, sizes[16], ns = 0;
    double eps_rel = 1e-6, beta2 = 0.95, tol = 1.0;
    int forms = 3; /* bit 0: ema, bit 1: sum */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chain") && i + 1 < argc)
            chain = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warm") && i + 1 < argc)
            warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--p") && i + 1 < argc)
            p = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--beta2") && i + 1 < argc)
            beta2 = atof(argv[++i]);
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc)
            tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--eps-rel") && i + 1 < argc)
            eps_rel = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ema-only"))
            forms = 1;
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            for (char *s = strtok(argv[++i], ","); s && ns < 16; s = strtok(NULL, ","))
                sizes[ns++] = atoi(s);
        } else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--sizes n1,n2,...] [--steps R] [--chain C] "
                    "[--warm W] [--iters K] [--tol X] [--eps-rel X] [--beta2 X] [--p 2|4] "
                    "[--ema-only]\n",
                    argv[0]);
            return argv[i][1] == 'h' || !strcmp(argv[i], "--help") ? 0 : 1;
        }
    }
    if (ns == 0) {
        const int d[] = {128, 256, 384, 512, 768, 1024};
        for (ns = 0; ns < 6; ns++)
            sizes[ns] = d[ns];
    }
    if ((p != 2 && p != 4) || warm < 2 || steps < 0 || threads < 1 || iters < 1 ||
        !(beta2 > 0.0) || beta2 >= 1.0 || !(tol > 0.0) || chain >= warm) {
        fprintf(stderr, "bench_warm_qr: --p 2|4, --warm >= 2, --steps >= 0, --threads >= 1, "
                        "--iters >= 1, 0 < --beta2 < 1, --tol > 0, --chain < --warm\n");
        return 1;
    }
    strata_blas_threads_set(threads);
    const char *core_env = strata_blas_core_env();
    printf("bench_warm_qr: %s %s, core %s, %d thread(s); p = %d, eps_rel %g, %d warm-up "
           "steps, %d QR step(s) per root, tol %g; loaded machine\n\n",
           strata_blas_name(), strata_blas_version(), core_env ? core_env : "(default)", threads,
           p, eps_rel, warm, iters, tol);
    printf("| n | C | A | eigh ms | qr ms | qrchk ms | eigh/qr | eigh/qrchk | err qr | "
           "err qrchk | err stale-1 eigh | offdiag qr (old basis) | est qrchk | offdiag qrchk | "
           "fallback qrchk | qr32 ms | eigh/qr32 | err qr32 |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < ns; i++)
        for (int decay = 0; decay < 2; decay++)
            for (int form = 0; form < 2; form++) {
                if (!(forms & (1 << form)))
                    continue;
                const int big = sizes[i] >= 2048;
                const int r = steps ? steps : (big ? 1 : 5);
                const int ch = chain >= 0 ? chain : (big ? 2 : 5);
                if (run(sizes[i], decay, form ? 1.0 : beta2, r, ch, warm, eps_rel, p, iters, tol))
                    return 1;
            }
    return 0;
}
