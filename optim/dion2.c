/* Dion2: Newton-Schulz orthonormalization of a selected submatrix of the
 * accumulated gradient, with error feedback on the selected part (Ahn et
 * al. 2025, arXiv 2512.16928; the reference code is dion/dion2.py of
 * Microsoft's Dion repository). Formulas in include/strata/optim.h
 * ("Dion2").
 *
 * Object life: one strata_dion2_state per matrix parameter (or stack of
 * `batch` same-shape matrices). Every buffer comes from one backend
 * allocation made at creation (M, the scratch (below), the submatrices,
 * the Newton-Schulz workspace, the slice norms, the selected columns, the
 * permutation and the decay vector) and one host allocation (the norms
 * read back, the slice order, the permutations of the batch); nothing is
 * allocated per step. With ns_batch_threads = T > 1 (clamped to the batch)
 * the state owns a worker team of T threads for the batch's Newton-Schulz,
 * as Muon's.
 *
 * Where the work runs: the selection reads back num float64 slice norms per
 * matrix and sorts them on the host. On the "cpu" backend (host_ops: the
 * cpu-only ops of backend/ops.h) the passes over a matrix are: the overflow
 * rule's quick bound (G's Frobenius norm by sumsq_lanes, see quick_fit), M
 * = M + G fused with the slice norms (add_abs_sums: one pass), the gather
 * of the selected part with its error feedback, Newton-Schulz on the
 * submatrix, and the update W = W - decay W - step P in one pass over W.
 * Rows selected (rows <= cols): the gather and the error feedback are 2-D
 * copies and scalings of the runs of consecutive selected rows, and the
 * update is applied run by run (the selected rows from O, the others
 * against +0 by apply_update_cols with no column listed: no zero buffer).
 * Columns selected: gather_cols copies the selected columns (in index
 * order) into the submatrix and scales them in M by ef_decay in the same
 * pass, and apply_update_cols applies O at the selected columns and +0
 * elsewhere in one pass over W; no whole-matrix scratch. On any other
 * backend the same values come from the table's ops: M + G and abs_sums in
 * two passes, the rows' zeros a whole zero matrix (one update call per
 * run), and for columns the backend's permute of the whole matrix by a
 * permutation the host uploads (the selected columns first, in index
 * order), a 2-D copy of the first k, scale_rc by a vector holding ef_decay
 * at the selected columns and 1 elsewhere (x * 1 is exact), and after
 * Newton-Schulz [O | 0] permuted back into a zero-filled scatter for
 * apply_update (tests/unit/test_dion2_paths.c: both ways bit for bit). The
 * overflow rule first tries a bound from L1 norms (G's column sums, or its
 * lane-summed Frobenius norm with host_ops; M's from the last step's slice
 * norms) and computes the exact Frobenius norms only when that bound does
 * not fit; either way G is read before M is touched. Every path computes
 * the same per-element expressions as a scatter into a whole zero matrix
 * would (bit for bit). The host never touches a matrix (the cpu-only ops
 * are the backend's). */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"
#include "workers/workers.h"

#include "optim_internal.h"
#include "precond.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct strata_dion2_state {
    strata_dion2_config cfg;
    strata_ns_config ns; /* from cfg, restart mask resolved */
    strata_backend *be;
    int64_t batch, rows, cols;
    bool sel_rows;           /* the slices are rows (rows <= cols), else columns */
    int64_t num, len, k;     /* slices, their length, selected per step */
    int64_t sub_rows, sub_cols; /* the submatrix: k x cols or rows x k */
    float *mom;   /* M, batch x rows x cols */
    /* host_ops: the backend runs the cpu-only ops of backend/ops.h (the
     * fused M + G and slice norms, the column gather and scattered update);
     * otherwise the same values come from the table's ops. */
    bool host_ops;
    /* rows x cols scratch, without host_ops only (with host_ops neither is
     * allocated). Rows selected: z is not allocated and z2 stays all zero
     * (the update of the unselected rows). Columns selected: z2 takes the
     * permuted M, z holds [O | 0] in permuted order (its last num - k
     * columns stay zero). */
    float *z, *z2;
    float *sub;   /* batch submatrices, sub_rows x sub_cols each */
    float *work;  /* Newton-Schulz workspace */
    double *dnorm; /* num slice norms (backend) */
    double *dcol;  /* cols column L1 sums (backend): the overflow rule's quick bound */
    int *dperm;    /* num (backend) */
    float *dscale; /* num (backend) */
    int *didx;     /* k (backend): one matrix's selected columns (host_ops) */
    strata_worker_team *team;
    void *mem;
    size_t mem_bytes;
    /* host */
    double *hnorm;  /* num */
    int64_t *order; /* num */
    int *hperm;     /* num: selected first, each group in index order */
    int *hinv;      /* batch * num: the inverse permutation of every matrix */
    int *hsel;      /* batch * k: every matrix's selected slices, in index order */
    float *hscale;  /* num */
    double *hcol;   /* cols */
    /* An upper bound of ||M||_F: the L1 norm sum_ij |M_ij| (>= ||M||_F) of
     * M after the last step's M + G, summed from its slice norms; the error
     * feedback only shrinks it. Valid only after a completed step of this
     * state: creation, an error and any enumeration of the tensors (a
     * checkpoint may write M) drop it. */
    double m_l1;
    bool m_l1_valid;
};

void strata_dion2_config_default(strata_dion2_config *c)
{
    strata_ns_config ns;
    strata_ns_config_default(&ns);
    c->lr = 0.01f;
    c->fraction = 0.25f;
    c->ef_decay = 0.95f;
    c->weight_decay = 0.01f;
    c->adjust_lr = STRATA_DION2_ADJUST_SPECTRAL_NORM;
    c->ns_steps = ns.steps;
    c->ns_schedule = STRATA_NS_POLAR_EXPRESS;
    c->ns_method = STRATA_NS_STANDARD;
    c->ns_gram_min_aspect = ns.gram_min_aspect;
    c->ns_gram_restarts = ns.gram_restarts;
    c->ns_gram_restart_mask = ns.gram_restart_mask;
    c->ns_batch_threads = ns.batch_threads;
    c->ns_dtype = ns.dtype;
}

static void dion2_ns_config(const strata_dion2_config *c, strata_ns_config *out)
{
    out->steps = c->ns_steps;
    out->schedule = c->ns_schedule;
    out->method = c->ns_method;
    out->gram_min_aspect = c->ns_gram_min_aspect;
    out->gram_restarts = c->ns_gram_restarts;
    out->gram_restart_mask = c->ns_gram_restart_mask;
    out->batch_threads = c->ns_batch_threads;
    out->dtype = c->ns_dtype;
}

strata_status strata_dion2_config_check(const strata_dion2_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "dion2_config_check: NULL config");
    strata_status st = optim_check_nonneg("dion2", "lr", c->lr);
    OPTIM_CHECK(st, optim_check_float("dion2", "fraction", c->fraction, 0.0, false, 1.0, true));
    OPTIM_CHECK(st, optim_check_float("dion2", "ef_decay", c->ef_decay, 0.0, true, 1.0, true));
    OPTIM_CHECK(st, optim_check_nonneg("dion2", "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int("dion2", "adjust_lr", (long long)c->adjust_lr,
                                    STRATA_DION2_ADJUST_SPECTRAL_NORM, STRATA_DION2_ADJUST_NONE));
    if (st == STRATA_OK) {
        strata_ns_config ns;
        dion2_ns_config(c, &ns);
        st = strata_ns_config_check_as(&ns, "dion2", "ns_");
    }
    return st;
}

/* k: the smallest count >= 1 whose share of num, rounded to float, reaches
 * fraction (ceil(fraction num) up to fraction's float rounding). */
static int64_t selected_count(float fraction, int64_t num)
{
    int64_t k = (int64_t)ceil((double)fraction * (double)num);
    if (k < 1)
        k = 1;
    if (k > num)
        k = num;
    while (k > 1 && (float)((double)(k - 1) / (double)num) >= fraction)
        k--;
    while (k < num && (float)((double)k / (double)num) < fraction)
        k++;
    return k;
}

strata_status strata_dion2_state_create(const strata_dion2_config *c, strata_backend *be,
                                        int64_t batch, int64_t rows, int64_t cols,
                                        strata_dion2_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "dion2_state_create: NULL argument");
    *out = NULL;
    /* As Muon's: rows x cols < 2^40 elements, then batch against what is left. */
    if (batch < 1 || rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX ||
        (uint64_t)rows * (uint64_t)cols > ((uint64_t)1 << 40) ||
        (uint64_t)batch > ((uint64_t)1 << 40) / ((uint64_t)rows * (uint64_t)cols))
        return strata_error(STRATA_ERR_INVALID_ARG, "dion2: bad shape %lld x %lld x %lld",
                            (long long)batch, (long long)rows, (long long)cols);
    strata_status st = strata_dion2_config_check(c);
    if (st != STRATA_OK)
        return st;
    strata_dion2_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "dion2: out of memory");
    s->cfg = *c;
    s->be = be;
    s->batch = batch;
    s->rows = rows;
    s->cols = cols;
    s->sel_rows = rows <= cols; /* the reference: rows when num_rows <= num_cols */
    s->num = s->sel_rows ? rows : cols;
    s->len = s->sel_rows ? cols : rows;
    s->k = selected_count(c->fraction, s->num);
    s->sub_rows = s->sel_rows ? s->k : rows;
    s->sub_cols = s->sel_rows ? cols : s->k;

    dion2_ns_config(c, &s->ns);
    /* The submatrix shape against the Newton-Schulz limits (a zero batch
     * touches nothing). */
    st = strata_ns_run(be, &s->ns, NULL, 0, s->sub_rows, s->sub_cols, NULL, NULL);
    if (st != STRATA_OK)
        goto fail;
    s->ns.gram_restart_mask = strata_ns_restart_mask(&s->ns);
    if (!s->ns.gram_restart_mask)
        s->ns.gram_restarts = 0;
    if (s->ns.batch_threads > batch)
        s->ns.batch_threads = (int)batch;

    const size_t mn = (size_t)rows * (size_t)cols;
    const size_t n_mom = (size_t)batch * mn;
    const size_t n_sub = (size_t)batch * (size_t)s->sub_rows * (size_t)s->sub_cols;
    const size_t n_work = strata_ns_work_floats(&s->ns, s->sub_rows, s->sub_cols);
    const size_t num = (size_t)s->num;
    /* In float units, each piece padded to 64 bytes: the doubles take 2
     * floats each, the ints 1. */
    size_t total = 0;
#define PAD(n) (((n) + 15) / 16 * 16)
    s->host_ops = strata_backend_has_host_ops(be);
    const size_t n_z = s->sel_rows || s->host_ops ? 0 : mn; /* z: columns only */
    const size_t n_z2 = s->host_ops ? 0 : mn;
    total += PAD(n_mom) + PAD(n_z) + PAD(n_z2) + PAD(n_sub) + PAD(n_work) + PAD(2 * num) +
             PAD(2 * (size_t)cols) + PAD(num) + PAD(num) + PAD((size_t)s->k);
    s->mem_bytes = total * sizeof(float);
    st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto fail;
    float *p = s->mem;
    s->mom = optim_carve(&p, n_mom);
    s->z = n_z ? optim_carve(&p, n_z) : NULL;
    s->z2 = n_z2 ? optim_carve(&p, n_z2) : NULL;
    s->sub = optim_carve(&p, n_sub);
    s->work = optim_carve(&p, n_work);
    s->dnorm = (double *)(void *)optim_carve(&p, 2 * num);
    s->dcol = (double *)(void *)optim_carve(&p, 2 * (size_t)cols);
    s->dperm = (int *)(void *)optim_carve(&p, num);
    s->dscale = optim_carve(&p, num);
    s->didx = (int *)(void *)optim_carve(&p, (size_t)s->k);
#undef PAD

    s->hnorm = malloc(num * sizeof *s->hnorm);
    s->order = malloc(num * sizeof *s->order);
    s->hperm = malloc(num * sizeof *s->hperm);
    s->hinv = malloc((size_t)batch * num * sizeof *s->hinv);
    s->hsel = malloc((size_t)batch * (size_t)s->k * sizeof *s->hsel);
    s->hscale = malloc(num * sizeof *s->hscale);
    s->hcol = malloc((size_t)cols * sizeof *s->hcol);
    if (!s->hnorm || !s->order || !s->hperm || !s->hinv || !s->hsel || !s->hscale || !s->hcol) {
        st = strata_error(STRATA_ERR_NOMEM, "dion2: out of memory");
        goto fail;
    }
    /* The zero parts the step relies on (see z, z2 above). */
    if (s->z2 && s->sel_rows)
        st = strata_backend_fill_2d(be, NULL, rows, cols, s->z2, cols, 0.0f);
    else if (s->z)
        st = strata_backend_fill_2d(be, NULL, rows, cols, s->z, cols, 0.0f);
    if (st != STRATA_OK)
        goto fail;
    if (s->ns.batch_threads > 1) {
        st = strata_worker_team_create(s->ns.batch_threads, &s->team);
        if (st != STRATA_OK)
            goto fail;
    }
    *out = s;
    return STRATA_OK;

fail:
    strata_dion2_state_destroy(s);
    return st;
}

void strata_dion2_state_destroy(strata_dion2_state *s)
{
    if (!s)
        return;
    strata_worker_team_destroy(s->team);
    if (s->mem)
        strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s->hnorm);
    free(s->order);
    free(s->hperm);
    free(s->hinv);
    free(s->hsel);
    free(s->hscale);
    free(s->hcol);
    free(s);
}

size_t strata_dion2_state_bytes(const strata_dion2_state *s)
{
    return s ? s->mem_bytes : 0;
}

int64_t strata_dion2_selected(const strata_dion2_state *s)
{
    return s ? s->k : 0;
}

/* The learning-rate ratio of adjust_lr (the reference's adjust_lr_* on the
 * whole matrix's shape). */
static double adjust_ratio(strata_dion2_adjust_lr a, int64_t rows, int64_t cols)
{
    const double m = (double)rows, n = (double)cols;
    switch (a) {
    case STRATA_DION2_ADJUST_RMS_NORM:
        return 0.2 * sqrt(m > n ? m : n);
    case STRATA_DION2_ADJUST_NONE:
        return 1.0;
    case STRATA_DION2_ADJUST_SPECTRAL_NORM:
    default:
        return sqrt(m / n);
    }
}

/* qsort's comparator reads the norms through this: one state's step runs
 * on one thread at a time, and several states may step on several threads
 * (the runtime's step team), hence thread-local. */
static _Thread_local const double *sort_norms;

/* Larger norm first, ties to the lower index. */
static int by_norm(const void *a, const void *b)
{
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    const double x = sort_norms[i], y = sort_norms[j];
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

static int by_index(const void *a, const void *b)
{
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return i < j ? -1 : i > j;
}

/* Matrix b's selection: the norms of M_b's slices (with host_ops, M_b =
 * M_b + G_b first, in the same pass; otherwise M + G is done), the k
 * largest, the permutation that puts them first (hperm), its inverse (hinv
 * of b), the selected slices in index order (hsel of b), the decay vector;
 * for columns, the selected columns are uploaded (didx, host_ops) or the
 * permutation and the decay vector (dperm, dscale). *l1 += the sum of the
 * norms (M_b's L1 norm). */
static strata_status select_slices(strata_dion2_state *s, int64_t b, const float *g, double *l1)
{
    const size_t mn = (size_t)s->rows * (size_t)s->cols;
    float *mb = s->mom + (size_t)b * mn;
    const size_t num = (size_t)s->num;
    const int axis = s->sel_rows ? 1 : 0;
    strata_status st =
        s->host_ops
            ? strata_backend_add_abs_sums(s->be, NULL, s->rows, s->cols, mb, g + (size_t)b * mn,
                                          axis, s->dnorm)
            : strata_backend_abs_sums(s->be, NULL, s->rows, s->cols, mb, s->cols, axis, s->dnorm);
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, s->hnorm, s->dnorm, num * sizeof(double));
    if (st != STRATA_OK)
        return st;
    double sum = 0.0;
    for (size_t i = 0; i < num; i++) {
        s->order[i] = (int64_t)i;
        sum += s->hnorm[i];
    }
    *l1 += sum;
    sort_norms = s->hnorm;
    qsort(s->order, num, sizeof *s->order, by_norm);
    /* Each group in index order: the selected, then the rest. */
    qsort(s->order, (size_t)s->k, sizeof *s->order, by_index);
    qsort(s->order + s->k, num - (size_t)s->k, sizeof *s->order, by_index);
    int *inv = s->hinv + (size_t)b * num;
    int *sel = s->hsel + (size_t)b * (size_t)s->k;
    for (size_t j = 0; j < num; j++) {
        s->hperm[j] = (int)s->order[j];
        inv[s->order[j]] = (int)j;
        s->hscale[s->order[j]] = j < (size_t)s->k ? s->cfg.ef_decay : 1.0f;
        if (j < (size_t)s->k)
            sel[j] = (int)s->order[j];
    }
    if (s->sel_rows)
        return STRATA_OK;
    if (s->host_ops)
        return strata_backend_copy(s->be, s->didx, sel, (size_t)s->k * sizeof(int));
    st = strata_backend_copy(s->be, s->dperm, s->hperm, num * sizeof(int));
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, s->dscale, s->hscale, num * sizeof(float));
    return st;
}

/* The length of the run of consecutive indices starting at sel[j] (sel
 * increasing, k entries). */
static int64_t run_length(const int *sel, int64_t j, int64_t k)
{
    int64_t e = j + 1;
    while (e < k && sel[e] == sel[e - 1] + 1)
        e++;
    return e - j;
}

/* Rows selected, matrix b: S = M[sel] (row runs copied), then the error
 * feedback on those rows (the unselected rows' factor is 1: untouched). */
static strata_status gather_rows(strata_dion2_state *s, int64_t b)
{
    const int64_t n = s->cols, k = s->k;
    float *mb = s->mom + (size_t)b * (size_t)s->rows * (size_t)n;
    float *sb = s->sub + (size_t)b * (size_t)k * (size_t)n;
    const int *sel = s->hsel + (size_t)b * (size_t)k;
    strata_status st = STRATA_OK;
    for (int64_t j = 0; j < k && st == STRATA_OK;) {
        const int64_t len = run_length(sel, j, k);
        float *src = mb + (size_t)sel[j] * (size_t)n;
        st = strata_backend_copy_2d(s->be, NULL, len, n, sb + (size_t)j * (size_t)n, n, src, n);
        if (st == STRATA_OK)
            st = strata_backend_scale_2d(s->be, NULL, len, n, src, n, s->cfg.ef_decay);
        j += len;
    }
    return st;
}

/* Rows selected, matrix b: W = W - decay W - step P, run by run: the
 * selected rows take O's rows, the unselected ones zeros (z2's, or with
 * host_ops apply_update_cols with no column listed: +0 without a buffer;
 * the same per-element expression as on a scattered P, bit for bit). */
static strata_status update_rows(strata_dion2_state *s, int64_t b, float *w, float step,
                                 float decay)
{
    const int64_t m = s->rows, n = s->cols, k = s->k;
    float *wb = w + (size_t)b * (size_t)m * (size_t)n;
    const float *ob = s->sub + (size_t)b * (size_t)k * (size_t)n;
    const int *sel = s->hsel + (size_t)b * (size_t)k;
    strata_status st = STRATA_OK;
    int64_t r = 0, j = 0;
    while (r < m && st == STRATA_OK) {
        int64_t len;
        const float *p;
        if (j < k && sel[j] == r) {
            len = run_length(sel, j, k);
            p = ob + (size_t)j * (size_t)n;
            j += len;
        } else {
            len = (j < k ? sel[j] : m) - r;
            p = NULL;
        }
        float *wr = wb + (size_t)r * (size_t)n;
        if (p || !s->host_ops)
            st = strata_backend_apply_update(s->be, NULL, (size_t)len * (size_t)n, wr,
                                             p ? p : s->z2, step, decay, STRATA_APPLY_DECAY_STEP);
        else /* the zeros without a zero buffer: no column listed */
            st = strata_backend_apply_update_cols(s->be, NULL, len, n, wr, n, 0, NULL, NULL, 0,
                                                  step, decay, STRATA_APPLY_DECAY_STEP);
        r += len;
    }
    return st;
}

/* G's term of quick_fit's bound (see there). */
static strata_status g_bound(strata_dion2_state *s, const float *g, double *out)
{
    const int64_t n = s->cols, r = s->batch * s->rows;
    strata_status st;
    if (s->host_ops) {
        double sq = 0.0;
        st = strata_backend_sumsq_lanes(s->be, (size_t)r * (size_t)n, g, &sq);
        *out = sqrt(sq) * (1.0 + (double)r * (double)n * 0x1p-50);
        return st;
    }
    st = strata_backend_abs_sums(s->be, NULL, r, n, g, n, 0, s->dcol);
    if (st == STRATA_OK)
        st = strata_backend_copy(s->be, s->hcol, s->dcol, (size_t)n * sizeof(double));
    double l1 = 0.0;
    for (int64_t j = 0; j < n && st == STRATA_OK; j++)
        l1 += s->hcol[j];
    *out = l1;
    return st;
}

/* The overflow rule's quick pass: L1 norms bound the Frobenius norms
 * (||x||_F <= sum |x_ij|), and a column-sum pass vectorizes where the
 * exact float64 sum of squares is one chain of dependent adds. With
 * host_ops G's term is instead its Frobenius norm from
 * strata_backend_sumsq_lanes (32 interleaved float64 sums, memory-bound),
 * widened by N 2^-50 (N elements: the rounding of either order of the sum
 * of N squares is within N 2^-53 relative), so it is at least the exact
 * rule's sqrt(gamma). *fits: the bound (1 + 1e-9 for the L1 sums'
 * rounding) is finite and within the limit, so the exact rule (below)
 * would let the step through too; otherwise the exact rule decides. The
 * outcome, and the counters, are the exact rule's either way: the quick
 * pass only saves its work. */
static strata_status quick_fit(strata_dion2_state *s, const float *g, bool *fits)
{
    *fits = false;
    const int64_t n = s->cols, r = s->batch * s->rows;
    double gl1 = 0.0, ml1 = s->m_l1;
    strata_status st = g_bound(s, g, &gl1);
    if (st != STRATA_OK)
        return st;
    if (!isfinite(gl1))
        return STRATA_OK;
    if (!s->m_l1_valid) {
        st = strata_backend_abs_sums(s->be, NULL, r, n, s->mom, n, 0, s->dcol);
        if (st == STRATA_OK)
            st = strata_backend_copy(s->be, s->hcol, s->dcol, (size_t)n * sizeof(double));
        if (st != STRATA_OK)
            return st;
        ml1 = 0.0;
        for (int64_t j = 0; j < n; j++)
            ml1 += s->hcol[j];
    }
    *fits = (ml1 + gl1) * (1.0 + 1e-9) <= OPTIM_STATE_LIMIT;
    return STRATA_OK;
}

strata_status strata_dion2_step(strata_dion2_state *s, float lr_scale, int64_t t, float *w,
                                const float *g, strata_optim_counters *cnt)
{
    strata_status st = optim_check_step("dion2_step", s, w, g, t);
    if (st == STRATA_OK)
        st = optim_check_lr_scale("dion2_step", lr_scale);
    if (st != STRATA_OK)
        return st;
    const double t0 = strata_now_seconds();
    const strata_dion2_config *c = &s->cfg;
    const int64_t m = s->rows, n = s->cols;
    const size_t mn = (size_t)m * (size_t)n;
    const size_t all = (size_t)s->batch * mn;
    const size_t sub_n = (size_t)s->sub_rows * (size_t)s->sub_cols;

    bool fits = false;
    st = quick_fit(s, g, &fits);
    if (st != STRATA_OK)
        return st;
    if (!fits) {
        /* Reject before touching M: one bad element would poison it. */
        double gamma = 0.0;
        bool finite = false;
        st = optim_gamma(s->be, g, all, &gamma, &finite);
        if (st != STRATA_OK)
            return st;
        if (!finite) {
            size_t bad = all;
            st = strata_backend_find_nonfinite(s->be, NULL, all, g, &bad);
            if (st != STRATA_OK)
                return st;
            if (cnt)
                cnt->nonfinite_rejected++;
            return strata_error(STRATA_ERR_NONFINITE, "dion2_step: non-finite gradient at %zu",
                                bad);
        }
        /* The overflow rule (optim_internal.h): M is a running sum (the
         * error feedback only shrinks it), |M + G| <= ||M||_F + ||G||_F. */
        double b2 = 0.0;
        st = strata_backend_sumsq(s->be, NULL, all, s->mom, &b2);
        if (st != STRATA_OK)
            return st;
        if (!optim_state_absorbs(sqrt(b2) + sqrt(gamma), cnt))
            return STRATA_OK;
    }

    /* M = M + G (1 * M + 1 * G: exact products); with host_ops in
     * select_slices, matrix by matrix, with the slice norms. */
    s->m_l1_valid = false;
    double l1 = 0.0;
    if (!s->host_ops)
        st = strata_backend_momentum(s->be, NULL, all, s->mom, g, s->mom, 1.0f, 1.0f, false);
    for (int64_t b = 0; b < s->batch && st == STRATA_OK; b++) {
        float *mb = s->mom + (size_t)b * mn;
        float *sb = s->sub + (size_t)b * sub_n;
        st = select_slices(s, b, g, &l1);
        if (st == STRATA_OK && s->sel_rows) {
            st = gather_rows(s, b);
            continue;
        }
        /* Columns, host_ops: S = M[:, sel], then M[:, sel] *= ef_decay, one
         * pass. */
        if (st == STRATA_OK && s->host_ops) {
            st = strata_backend_gather_cols(s->be, NULL, m, n, mb, n, s->k, s->didx, sb,
                                            s->sub_cols, c->ef_decay);
            continue;
        }
        /* Columns: the selected columns first (into z2), then the first k
         * of them; the error feedback on the selected columns of M. */
        if (st == STRATA_OK)
            st = strata_backend_permute(s->be, NULL, m, n, 1, s->dperm, mb, s->z2);
        if (st == STRATA_OK)
            st = strata_backend_copy_2d(s->be, NULL, s->sub_rows, s->sub_cols, sb, s->sub_cols,
                                        s->z2, n);
        if (st == STRATA_OK)
            st = strata_backend_scale_rc(s->be, NULL, m, n, mb, n, NULL, s->dscale);
    }
    if (st == STRATA_OK)
        st = strata_ns_run(s->be, &s->ns, s->team, s->batch, s->sub_rows, s->sub_cols, s->sub,
                           s->work);
    const float lr = c->lr * lr_scale;
    const float decay = lr * c->weight_decay;
    const float step = (float)((double)lr * adjust_ratio(c->adjust_lr, m, n));
    for (int64_t b = 0; b < s->batch && st == STRATA_OK; b++) {
        if (s->sel_rows) {
            st = update_rows(s, b, w, step, decay);
            continue;
        }
        /* Columns, host_ops: W = W - decay W - step P with P's selected
         * columns O's and the others zero, one pass (the selected columns
         * of the last matrix are still in didx). */
        if (s->host_ops) {
            if (s->batch > 1)
                st = strata_backend_copy(s->be, s->didx, s->hsel + (size_t)b * (size_t)s->k,
                                         (size_t)s->k * sizeof(int));
            if (st == STRATA_OK)
                st = strata_backend_apply_update_cols(
                    s->be, NULL, m, n, w + (size_t)b * mn, n, s->k, s->didx,
                    s->sub + (size_t)b * sub_n, s->sub_cols, step, decay, STRATA_APPLY_DECAY_STEP);
            continue;
        }
        /* Columns otherwise: O into the first k columns of z (the rest are
         * zero), then every column back to its place; the unselected ones
         * are zero. */
        st = strata_backend_copy_2d(s->be, NULL, s->sub_rows, s->sub_cols, s->z, n,
                                    s->sub + (size_t)b * sub_n, s->sub_cols);
        if (st == STRATA_OK)
            st = strata_backend_copy(s->be, s->dperm, s->hinv + (size_t)b * (size_t)s->num,
                                     (size_t)s->num * sizeof(int));
        if (st == STRATA_OK)
            st = strata_backend_permute(s->be, NULL, m, n, 1, s->dperm, s->z, s->z2);
        if (st == STRATA_OK)
            st = strata_backend_apply_update(s->be, NULL, mn, w + (size_t)b * mn, s->z2, step,
                                             decay, STRATA_APPLY_DECAY_STEP);
    }
    if (st == STRATA_OK) {
        s->m_l1 = l1;
        s->m_l1_valid = true;
        if (cnt)
            cnt->seconds_precondition += strata_now_seconds() - t0;
    }
    return st;
}

/* ------------------------------------------------ preconditioner family */

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    (void)external;
    return strata_dion2_state_create(cfg, be, sh->batch, sh->rows, sh->cols,
                                     (strata_dion2_state **)out);
}

static void fam_destroy(void *s)
{
    strata_dion2_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_dion2_state_bytes(s);
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_dion2_step(state, lr_scale, t, w, g, cnt);
}

/* M is the whole state (the selection is recomputed from it every step). */
static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    /* Whoever enumerates M may write it (a checkpoint's load): the cached
     * bound of its norm goes (the state is the family's own, handed out
     * as const only by this interface). */
    strata_dion2_state *s = (strata_dion2_state *)(uintptr_t)state;
    s->m_l1_valid = false;
    if (out && cap > 0)
        strata_tensor_info_set(&out[0], "momentum", -1, STRATA_F32, s->batch * s->rows, s->cols,
                               STRATA_TIER_DEVICE, s->mom);
    return 1;
}

static void fam_config_default(void *cfg)
{
    strata_dion2_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_dion2_config_check(cfg);
}

/* Newton-Schulz on the k x len submatrix: ~numel x k (Muon's numel x
 * min(m, n), shrunk by the fraction; the default fraction: the cost sees
 * only the shape), plus O(numel) for the gather and the scatter. */
static double fam_step_cost(const strata_precond_shape *sh)
{
    const double m = (double)sh->rows, n = (double)sh->cols;
    const double num = m < n ? m : n;
    strata_dion2_config d;
    strata_dion2_config_default(&d);
    const double k = ceil((double)d.fraction * num);
    return (double)sh->numel * (k > 1.0 ? k : 1.0);
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_dion2_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

const strata_precond_family strata_family_dion2 = {
    .name = "dion2",
    .has_refresh = strata_family_never, /* nothing to refresh: the family creates, */
    .async_capable = strata_family_never, /* applies and enumerates */
    .cfg_size = sizeof(strata_dion2_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_dion2_config, lr),
    .weight_decay_offset = offsetof(strata_dion2_config, weight_decay),
    .state_per_param = 4,
    .step_cost = fam_step_cost,
    .create = fam_create,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .n_blocks = strata_family_no_blocks,
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .tensors = fam_tensors,
};
