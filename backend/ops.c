/* The strata_backend_<op> wrappers: argument checks, the stream handle, and
 * dispatch to the backend's slot or, when the slot is NULL, to the C
 * reference (ops_ref.c). Semantics in include/strata/backend.h. */
#include "backend_internal.h"
#include "ops.h"
#include "ops_ref.h"

#include <math.h>
#include <string.h>

/* The backend's slot for `op`, or the reference. */
#define SLOT(be, op) (backend_iface(be)->ops.op ? backend_iface(be)->ops.op : strata_ref_##op)

/* Stream handle into `impl`, then `bad` refused with a message naming `who`. */
#define PROLOGUE(who, bad)                                                                    \
    void *impl;                                                                               \
    strata_status st_ = backend_stream_impl(be, s, &impl, who);                               \
    if (st_ != STRATA_OK)                                                                     \
        return st_;                                                                           \
    if (bad)                                                                                  \
        return strata_error(STRATA_ERR_INVALID_ARG, "%s: NULL buffer or bad shape", who)

/* A 2-D block is well formed when rows, cols >= 0 and ld >= cols. */
static bool shape_bad(int64_t rows, int64_t cols, int64_t ld)
{
    return rows < 0 || cols < 0 || ld < cols;
}

static bool empty2(int64_t rows, int64_t cols)
{
    return rows == 0 || cols == 0;
}

strata_status strata_backend_adamw_update(strata_backend *be, strata_stream *s, size_t n, float *w,
                                          const float *g, float *m, float *v, strata_op_adamw a)
{
    PROLOGUE("adamw_update", n && (!w || !g || !m || !v));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, adamw_update)(backend_ctx(be), impl, n, w, g, m, v, a);
}

strata_status strata_backend_ema(strata_backend *be, strata_stream *s, size_t n, float *m,
                                 const float *x, float beta, float *out, float out_scale)
{
    PROLOGUE("ema", n && (!m || !x));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, ema)(backend_ctx(be), impl, n, m, x, beta, out, out_scale);
}

strata_status strata_backend_adam_moments(strata_backend *be, strata_stream *s, size_t n, float *m,
                                          const float *g, float *v, const float *gv, float beta1,
                                          float beta2)
{
    PROLOGUE("adam_moments", n && (!m || !g || !v || !gv));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, adam_moments)(backend_ctx(be), impl, n, m, g, v, gv, beta1, beta2);
}

strata_status strata_backend_graft(strata_backend *be, strata_stream *s, size_t n, float *acc,
                                   const float *g, const float *num, float *dir, float beta,
                                   float alpha, float bc_sqrt, float eps)
{
    PROLOGUE("graft", n && (!acc || !g || !num || !dir));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, graft)(backend_ctx(be), impl, n, acc, g, num, dir, beta, alpha, bc_sqrt, eps);
}

strata_status strata_backend_rms_div(strata_backend *be, strata_stream *s, size_t n, float *out,
                                     const float *num, const float *den2, float eps)
{
    PROLOGUE("rms_div", n && (!out || !num || !den2));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, rms_div)(backend_ctx(be), impl, n, out, num, den2, eps);
}

strata_status strata_backend_momentum(strata_backend *be, strata_stream *s, size_t n, float *buf,
                                      const float *x, float *out, float mu, float gw,
                                      bool nesterov)
{
    PROLOGUE("momentum", n && (!buf || !x || !out));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, momentum)(backend_ctx(be), impl, n, buf, x, out, mu, gw, nesterov ? 1 : 0);
}

strata_status strata_backend_apply_update(strata_backend *be, strata_stream *s, size_t n,
                                          float *w, const float *p, float lr, float decay,
                                          strata_apply_form form)
{
    PROLOGUE("apply_update", (n && (!w || !p)) || (unsigned)form > STRATA_APPLY_STEP_SHRINK);
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, apply_update)(backend_ctx(be), impl, n, w, p, lr, decay, (int)form);
}

strata_status strata_backend_scale_2d(strata_backend *be, strata_stream *s, int64_t rows,
                                      int64_t cols, float *x, int64_t ld, float scale)
{
    PROLOGUE("scale_2d", shape_bad(rows, cols, ld) || (!empty2(rows, cols) && !x));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, scale_2d)(backend_ctx(be), impl, rows, cols, x, ld, scale);
}

strata_status strata_backend_scale(strata_backend *be, strata_stream *s, size_t n, float *x,
                                   float scale)
{
    return strata_backend_scale_2d(be, s, n ? 1 : 0, (int64_t)n, x, (int64_t)n, scale);
}

strata_status strata_backend_scale_rc(strata_backend *be, strata_stream *s, int64_t rows,
                                      int64_t cols, float *x, int64_t ld, const float *row_s,
                                      const float *col_s)
{
    PROLOGUE("scale_rc", shape_bad(rows, cols, ld) || (!empty2(rows, cols) && !x));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, scale_rc)(backend_ctx(be), impl, rows, cols, x, ld, row_s, col_s);
}

strata_status strata_backend_scale_f64(strata_backend *be, strata_stream *s, size_t n, float *dst,
                                       const float *src, double scale)
{
    PROLOGUE("scale_f64", n && (!dst || !src));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, scale_f64)(backend_ctx(be), impl, n, dst, src, scale);
}

strata_status strata_backend_scale_rc_damped(strata_backend *be, strata_stream *s, int64_t rows,
                                             int64_t cols, float *x, int64_t ld, const float *sa,
                                             const float *sb, float eps)
{
    PROLOGUE("scale_rc_damped",
             shape_bad(rows, cols, ld) || (!empty2(rows, cols) && (!x || !sa || !sb)));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, scale_rc_damped)(backend_ctx(be), impl, rows, cols, x, ld, sa, sb, eps);
}

strata_status strata_backend_eigen_ema_clamp(strata_backend *be, strata_stream *s, size_t n,
                                             float *sv, const double *diag, float beta,
                                             float clamp)
{
    PROLOGUE("eigen_ema_clamp", n && (!sv || !diag));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, eigen_ema_clamp)(backend_ctx(be), impl, n, sv, diag, beta, clamp);
}

strata_status strata_backend_row_col_sq_means(strata_backend *be, strata_stream *s, int64_t rows,
                                              int64_t cols, const float *x, int64_t ld,
                                              const float *sa, const float *sb, double *row_mean,
                                              double *col_mean)
{
    /* Means over an empty side are undefined: both sides must be >= 1. */
    PROLOGUE("row_col_sq_means", rows < 1 || cols < 1 || ld < cols || !x || !sa || !sb ||
                                  !row_mean || !col_mean);
    return SLOT(be, row_col_sq_means)(backend_ctx(be), impl, rows, cols, x, ld, sa, sb, row_mean,
                                      col_mean);
}

strata_status strata_backend_row_ms_normalize(strata_backend *be, strata_stream *s, int64_t rows,
                                              int64_t cols, float *x, int64_t ld, float *v,
                                              float beta, float eps)
{
    PROLOGUE("row_ms_normalize", rows < 1 || cols < 1 || ld < cols || !x || !v);
    return SLOT(be, row_ms_normalize)(backend_ctx(be), impl, rows, cols, x, ld, v, beta, eps);
}

strata_status strata_backend_abs_sums(strata_backend *be, strata_stream *s, int64_t rows,
                                      int64_t cols, const float *x, int64_t ld, int axis,
                                      double *out)
{
    PROLOGUE("abs_sums", rows < 1 || cols < 1 || ld < cols || (axis != 0 && axis != 1) || !x ||
                             !out);
    return SLOT(be, abs_sums)(backend_ctx(be), impl, rows, cols, x, ld, axis, out);
}

strata_status strata_backend_fill_2d(strata_backend *be, strata_stream *s, int64_t rows,
                                     int64_t cols, float *x, int64_t ld, float value)
{
    PROLOGUE("fill_2d", shape_bad(rows, cols, ld) || (!empty2(rows, cols) && !x));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, fill_2d)(backend_ctx(be), impl, rows, cols, x, ld, value);
}

strata_status strata_backend_diag_update(strata_backend *be, strata_stream *s, int64_t n,
                                         float *a, int64_t lda, float value, bool accumulate)
{
    PROLOGUE("diag_update", shape_bad(n, n, lda) || (n && !a));
    if (n == 0)
        return STRATA_OK;
    return SLOT(be, diag_update)(backend_ctx(be), impl, n, a, lda, value, accumulate ? 1 : 0);
}

strata_status strata_backend_copy_2d(strata_backend *be, strata_stream *s, int64_t rows,
                                     int64_t cols, float *dst, int64_t ldd, const float *src,
                                     int64_t lds)
{
    PROLOGUE("copy_2d", shape_bad(rows, cols, ldd) || lds < cols ||
                            (!empty2(rows, cols) && (!dst || !src)));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, copy_2d)(backend_ctx(be), impl, rows, cols, dst, ldd, src, lds);
}

strata_status strata_backend_transpose(strata_backend *be, strata_stream *s, int64_t rows,
                                       int64_t cols, const float *src, float *dst)
{
    PROLOGUE("transpose", rows < 0 || cols < 0 || (!empty2(rows, cols) && (!src || !dst)));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, transpose)(backend_ctx(be), impl, rows, cols, src, dst);
}

strata_status strata_backend_permute(strata_backend *be, strata_stream *s, int64_t rows,
                                     int64_t cols, int axis, const int *perm, const float *src,
                                     float *dst)
{
    PROLOGUE("permute", rows < 0 || cols < 0 || (axis != 0 && axis != 1) ||
                            (!empty2(rows, cols) && (!perm || !src || !dst)));
    if (empty2(rows, cols))
        return STRATA_OK;
    return SLOT(be, permute)(backend_ctx(be), impl, rows, cols, axis, perm, src, dst);
}

strata_status strata_backend_sumsq_2d(strata_backend *be, strata_stream *s, int64_t rows,
                                      int64_t cols, const float *x, int64_t ld, double *out)
{
    PROLOGUE("sumsq_2d", !out || shape_bad(rows, cols, ld) || (!empty2(rows, cols) && !x));
    if (empty2(rows, cols)) {
        *out = 0.0;
        return STRATA_OK;
    }
    return SLOT(be, sumsq_2d)(backend_ctx(be), impl, rows, cols, x, ld, out);
}

strata_status strata_backend_sumsq(strata_backend *be, strata_stream *s, size_t n, const float *x,
                                   double *out)
{
    return strata_backend_sumsq_2d(be, s, n ? 1 : 0, (int64_t)n, x, (int64_t)n, out);
}

strata_status strata_backend_frob_norm(strata_backend *be, strata_stream *s, int64_t rows,
                                       int64_t cols, const float *x, int64_t ld, double *out)
{
    strata_status st = strata_backend_sumsq_2d(be, s, rows, cols, x, ld, out);
    if (st == STRATA_OK)
        *out = sqrt(*out);
    return st;
}

strata_status strata_backend_global_sumsq(strata_backend *be, strata_stream *s, int count,
                                          const float *const *xs, const size_t *ns,
                                          double *norm_sq, int *bad)
{
    PROLOGUE("global_sumsq", count < 0 || !norm_sq || !bad || (count && (!xs || !ns)));
    double total = 0.0;
    *bad = -1;
    for (int i = 0; i < count; i++) {
        double acc;
        strata_status st = strata_backend_sumsq(be, s, ns[i], xs[i], &acc);
        if (st != STRATA_OK)
            return st;
        if (!isfinite(acc)) {
            *bad = i;
            break;
        }
        total += acc;
    }
    *norm_sq = total;
    return STRATA_OK;
}

strata_status strata_backend_find_nonfinite(strata_backend *be, strata_stream *s, size_t n,
                                            const float *x, size_t *first)
{
    PROLOGUE("find_nonfinite", !first || (n && !x));
    if (n == 0) {
        *first = 0;
        return STRATA_OK;
    }
    return SLOT(be, find_nonfinite)(backend_ctx(be), impl, n, x, first);
}

/* ---- cpu-only ops (ops.h): the host loops of ops_ref.c */

static strata_status host_ops_refused(const strata_backend *be, const char *who)
{
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "%s: the %s backend's memory is not known to be host memory (a "
                        "cpu-backend op; compose it from the table's ops there)",
                        who, backend_iface(be)->name);
}

bool strata_backend_has_host_ops(const strata_backend *be)
{
    return be && strcmp(backend_iface(be)->name, "cpu") == 0;
}

strata_status strata_backend_add_abs_sums(strata_backend *be, strata_stream *s, int64_t rows,
                                          int64_t cols, float *m, const float *g, int axis,
                                          double *out)
{
    PROLOGUE("add_abs_sums", rows < 1 || cols < 1 || (axis != 0 && axis != 1) || !m || !g ||
                                 !out);
    (void)impl;
    if (!strata_backend_has_host_ops(be))
        return host_ops_refused(be, "add_abs_sums");
    return strata_host_add_abs_sums(rows, cols, m, g, axis, out);
}

/* idx: k strictly increasing indices in [0, cols). */
static bool idx_bad(int64_t k, const int *idx, int64_t cols)
{
    for (int64_t t = 0; t < k; t++)
        if (idx[t] < 0 || idx[t] >= cols || (t > 0 && idx[t] <= idx[t - 1]))
            return true;
    return false;
}

strata_status strata_backend_gather_cols(strata_backend *be, strata_stream *s, int64_t rows,
                                         int64_t cols, float *x, int64_t ld, int64_t k,
                                         const int *idx, float *dst, int64_t ldd, float scale)
{
    PROLOGUE("gather_cols", shape_bad(rows, cols, ld) || k < 0 || k > cols || ldd < k ||
                                (!empty2(rows, k) && (!x || !idx || !dst)));
    (void)impl;
    if (!strata_backend_has_host_ops(be))
        return host_ops_refused(be, "gather_cols");
    if (empty2(rows, k))
        return STRATA_OK;
    if (idx_bad(k, idx, cols))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "gather_cols: the column indices are not increasing in [0, %lld)",
                            (long long)cols);
    return strata_host_gather_cols(rows, x, ld, k, idx, dst, ldd, scale);
}

strata_status strata_backend_apply_update_cols(strata_backend *be, strata_stream *s,
                                               int64_t rows, int64_t cols, float *w, int64_t ld,
                                               int64_t k, const int *idx, const float *p,
                                               int64_t ldp, float lr, float decay,
                                               strata_apply_form form)
{
    PROLOGUE("apply_update_cols",
             shape_bad(rows, cols, ld) || k < 0 || k > cols || ldp < k ||
                 (unsigned)form > STRATA_APPLY_STEP_SHRINK ||
                 (!empty2(rows, cols) && (!w || (k && (!idx || !p)))));
    (void)impl;
    if (!strata_backend_has_host_ops(be))
        return host_ops_refused(be, "apply_update_cols");
    if (empty2(rows, cols))
        return STRATA_OK;
    if (idx_bad(k, idx, cols))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "apply_update_cols: the column indices are not increasing in [0, "
                            "%lld)",
                            (long long)cols);
    return strata_host_apply_update_cols(rows, cols, w, ld, k, idx, p, ldp, lr, decay, (int)form);
}
