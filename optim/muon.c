/* Muon: momentum + Newton-Schulz orthogonalization (Jordan et al. 2024;
 * scale rule for matching AdamW's update RMS from Liu et al. 2025,
 * arXiv 2502.16982). Formulas in include/strata/optim.h.
 *
 * The quintic iteration runs on the wide orientation (p x q with p <= q):
 * A = X X^T is p x p (SYRK), so a tall matrix is transposed into the work
 * buffer first and transposed back at the end. */
#include "strata/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_A 3.4445f
#define NS_B (-4.7750f)
#define NS_C 2.0315f

struct strata_muon_state {
    strata_muon_config cfg;
    strata_backend *be;
    int64_t rows, cols;
    float *mom;   /* B, rows x cols */
    float *x;     /* G' then the orthogonalized update, rows x cols */
    float *work;  /* Newton-Schulz workspace */
    void *mem;
    size_t mem_bytes;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void strata_muon_config_default(strata_muon_config *c)
{
    c->lr = 0.02f;
    c->momentum = 0.95f;
    c->nesterov = true;
    c->ns_steps = 5;
    c->weight_decay = 0.0f;
    c->scale = STRATA_MUON_SCALE_SHAPE;
}

/* Layout of `work` for p = min(rows, cols), q = max(rows, cols):
 * X (p x q), Y (p x q), A (p x p), AA (p x p). */
size_t strata_newton_schulz_work_floats(int64_t rows, int64_t cols)
{
    int64_t p = rows < cols ? rows : cols, q = rows < cols ? cols : rows;
    return (size_t)(2 * p * q + 2 * p * p);
}

strata_status strata_newton_schulz(strata_backend *be, int64_t rows, int64_t cols, int steps,
                                   float *x, float *work)
{
    if (!be || !x || !work || rows < 1 || cols < 1 || steps < 0 || rows > INT32_MAX ||
        cols > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "newton_schulz: bad arguments (%lld x %lld, %d steps)",
                            (long long)rows, (long long)cols, steps);
    const bool tall = rows > cols;
    const int p = (int)(tall ? cols : rows), q = (int)(tall ? rows : cols);
    const size_t pq = (size_t)p * q;
    float *X = work, *Y = work + pq, *A = Y + pq, *AA = A + (size_t)p * p;

    double norm2 = 0.0;
    for (size_t i = 0; i < pq; i++)
        norm2 += (double)x[i] * x[i];
    const float inv = (float)(1.0 / (sqrt(norm2) + 1e-7));
    if (tall) {
        for (int i = 0; i < q; i++)
            for (int j = 0; j < p; j++)
                X[(size_t)j * q + i] = x[(size_t)i * p + j] * inv;
    } else {
        for (size_t i = 0; i < pq; i++)
            X[i] = x[i] * inv;
    }
    for (int it = 0; it < steps; it++) {
        strata_status st = strata_backend_ssyrk(be, 0, p, q, 1.0f, X, q, 0.0f, A, p);
        if (st != STRATA_OK)
            return st;
        /* AA = c A A + b A (A is symmetric, so A A = A A^T). */
        memcpy(AA, A, (size_t)p * p * sizeof(float));
        st = strata_backend_sgemm(be, 0, 0, p, p, p, NS_C, A, p, A, p, NS_B, AA, p);
        if (st != STRATA_OK)
            return st;
        /* Y = a X + AA X */
        memcpy(Y, X, pq * sizeof(float));
        st = strata_backend_sgemm(be, 0, 0, p, q, p, 1.0f, AA, p, X, q, NS_A, Y, q);
        if (st != STRATA_OK)
            return st;
        float *sw = X;
        X = Y;
        Y = sw;
    }
    if (tall) {
        for (int i = 0; i < q; i++)
            for (int j = 0; j < p; j++)
                x[(size_t)i * p + j] = X[(size_t)j * q + i];
    } else {
        memcpy(x, X, pq * sizeof(float));
    }
    return STRATA_OK;
}

strata_status strata_muon_state_create(const strata_muon_config *c, strata_backend *be,
                                       int64_t rows, int64_t cols, strata_muon_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon_state_create: NULL argument");
    *out = NULL;
    if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon: bad shape %lld x %lld",
                            (long long)rows, (long long)cols);
    if (!(c->momentum >= 0.0f && c->momentum < 1.0f) || c->ns_steps < 0 ||
        (c->scale != STRATA_MUON_SCALE_SHAPE && c->scale != STRATA_MUON_SCALE_ADAMW_RMS))
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "muon: momentum must lie in [0,1), ns_steps >= 0, scale known");
    strata_muon_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "muon: out of memory");
    s->cfg = *c;
    s->be = be;
    s->rows = rows;
    s->cols = cols;
    const size_t n = (size_t)rows * cols;
    const size_t nw = strata_newton_schulz_work_floats(rows, cols);
    const size_t n_pad = (n + 15) / 16 * 16;
    s->mem_bytes = (2 * n_pad + nw) * sizeof(float);
    strata_status st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK) {
        free(s);
        return st;
    }
    s->mom = s->mem;
    s->x = s->mom + n_pad;
    s->work = s->x + n_pad;
    *out = s;
    return STRATA_OK;
}

void strata_muon_state_destroy(strata_muon_state *s)
{
    if (!s)
        return;
    strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s);
}

size_t strata_muon_state_bytes(const strata_muon_state *s)
{
    return s ? s->mem_bytes : 0;
}

strata_status strata_muon_step(strata_muon_state *s, float lr_scale, int64_t t, float *w,
                               const float *g, strata_optim_counters *cnt)
{
    if (!s || !w || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon_step: NULL argument");
    if (t < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "muon_step: step %lld must be >= 1",
                            (long long)t);
    double t0 = now_seconds();
    const strata_muon_config *c = &s->cfg;
    const size_t n = (size_t)s->rows * s->cols;
    const float mu = c->momentum;
    for (size_t i = 0; i < n; i++) {
        float b = mu * s->mom[i] + g[i];
        s->mom[i] = b;
        s->x[i] = c->nesterov ? g[i] + mu * b : b;
    }
    strata_status st = strata_newton_schulz(s->be, s->rows, s->cols, c->ns_steps, s->x, s->work);
    if (st != STRATA_OK)
        return st;
    double scale;
    if (c->scale == STRATA_MUON_SCALE_ADAMW_RMS)
        scale = 0.2 * sqrt((double)(s->rows > s->cols ? s->rows : s->cols));
    else
        scale = sqrt(fmax(1.0, (double)s->rows / (double)s->cols));
    const float lr = c->lr * lr_scale;
    const float step = (float)(lr * scale);
    const float decay = lr * c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float wi = w[i];
        w[i] = wi - decay * wi - step * s->x[i];
    }
    if (cnt)
        cnt->seconds_precondition += now_seconds() - t0;
    return STRATA_OK;
}
