/* Newton-Schulz orthogonalization for Muon: the standard iteration and Gram
 * Newton-Schulz, the classic quintic and the Polar Express schedules, over a
 * batch of same-shape matrices. Formulas, sources and costs are in
 * include/strata/optim.h ("Newton-Schulz").
 *
 * Every matrix is worked on in its wide orientation (p = min(m,n) rows,
 * q = max(m,n) columns) in the workspace: a tall input is transposed on the
 * way in and on the way out, so NS(G^T) = NS(G)^T holds exactly (the same
 * products run on the same numbers).
 *
 * Workspace layout (floats), one matrix at a time:
 *   STANDARD  X (pq), Y (pq), A (p^2), B (p^2)             = 2pq + 2p^2
 *   GRAM      X (pq), Y (pq), R, P, T, Q, Q2 (p^2 each)    = 2pq + 5p^2
 * strata_ns_work_floats sizes it for the method the configuration picks for
 * the shape.
 *
 * Batches run matrix after matrix in the calling thread, or, with
 * batch_threads = T > 1, in T contiguous chunks, each with its own workspace
 * slice, that are the items of one batch of the caller's worker team
 * (workers/workers.h; NULL team: the chunks one after another here); chunks
 * touch disjoint memory, and each matrix gets exactly the same operations
 * whichever thread runs it, so the result depends neither on T nor on the
 * team.
 *
 * Products go through the backend (SYRK where the result is a symmetric
 * X X^T or a square of a symmetric matrix, GEMM otherwise), and so does the
 * elementwise work (norm, scaling, transposes, the diagonal shift, copies:
 * backend/ops.h): the host never touches a matrix, only the norm it gets
 * back.
 *
 * Precision (strata_ns_config.dtype): F32 runs every product in float32
 * (SGEMM / SSYRK); BF16 runs the same products with their operands rounded
 * to bfloat16 and float32 sums (strata_backend_sgemm_bf16 / ssyrk_bf16,
 * backend/gemm_bf16.c) and the Gram matrix rounded to bfloat16 once formed
 * (round_gram_bf16), everything else unchanged. BF16 needs the cpu backend
 * (refused at strata_ns_run). */
#include "strata/optim.h"
#include "backend/ops.h"
#include "optim/phases.h"
#include "optim_internal.h"
#include "workers/workers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_MAX_STEPS 100000
#define NS_MAX_BATCH_THREADS STRATA_NS_MAX_BATCH_THREADS

/* Jordan's quintic (github.com/KellerJordan/Muon). */
static const double quintic_abc[3] = {3.4445, -4.7750, 2.0315};

/* Polar Express, arXiv 2505.16932, Algorithm 1 (also the authors' repository
 * github.com/NoahAmsel/PolarExpress): the optimal degree-5 polynomials for
 * iterations 0..7; the last one is the limit and repeats. The safety factor
 * 1.01 divides a, b, c of all but the last by 1.01, 1.01^3, 1.01^5. */
static const double polar_express_abc[8][3] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};
#define PE_SAFETY 1.01

void strata_ns_config_default(strata_ns_config *c)
{
    c->steps = 5;
    c->schedule = STRATA_NS_QUINTIC;
    c->method = STRATA_NS_STANDARD;
    c->gram_min_aspect = STRATA_NS_GRAM_MIN_ASPECT_DEFAULT;
    c->gram_restarts = 1;
    c->gram_restart_mask = 0;
    c->batch_threads = 1;
    c->dtype = STRATA_STATE_F32;
}

void strata_ns_coefficients(strata_ns_schedule s, int t, double abc[3])
{
    if (s == STRATA_NS_POLAR_EXPRESS) {
        const int last = 7;
        const int i = t < 0 ? 0 : t > last ? last : t;
        const double f = i == last ? 1.0 : PE_SAFETY;
        abc[0] = polar_express_abc[i][0] / f;
        abc[1] = polar_express_abc[i][1] / (f * f * f);
        abc[2] = polar_express_abc[i][2] / (f * f * f * f * f);
        return;
    }
    memcpy(abc, quintic_abc, sizeof quintic_abc);
}

double strata_ns_norm_factor(strata_ns_schedule s)
{
    return s == STRATA_NS_POLAR_EXPRESS ? PE_SAFETY : 1.0;
}

/* Every field of a Newton-Schulz configuration, named "<cfg>.<prefix><field>"
 * (a Muon configuration's ns_* fields, or a strata_ns_config's own). */
strata_status strata_ns_config_check_as(const strata_ns_config *c, const char *cfg,
                                        const char *prefix)
{
    char f[64];
#define NAME(x) (snprintf(f, sizeof f, "%s%s", prefix, x), f)
    strata_status st = optim_check_int(cfg, NAME("steps"), c->steps, 0, NS_MAX_STEPS);
    OPTIM_CHECK(st, optim_check_int(cfg, NAME("schedule"), (long long)c->schedule,
                                    STRATA_NS_QUINTIC, STRATA_NS_POLAR_EXPRESS));
    OPTIM_CHECK(st, optim_check_int(cfg, NAME("method"), (long long)c->method, STRATA_NS_AUTO,
                                    STRATA_NS_GRAM));
    OPTIM_CHECK(st, optim_check_float(cfg, NAME("gram_min_aspect"), c->gram_min_aspect, 1.0,
                                      true, INFINITY, false));
    OPTIM_CHECK(st, optim_check_int(cfg, NAME("gram_restarts"), c->gram_restarts, 0, 63));
    if (st == STRATA_OK) {
        /* Restarts go before iterations 1 .. min(steps, 64) - 1. */
        const int top = c->steps < 64 ? c->steps : 64;
        const uint64_t valid =
            top <= 1 ? 0 : (top == 64 ? ~(uint64_t)0 : ((uint64_t)1 << top) - 1) & ~(uint64_t)1;
        if (c->gram_restart_mask & ~valid)
            st = strata_error(STRATA_ERR_INVALID_ARG,
                              "%s.%sgram_restart_mask = 0x%llx: bits must lie in 1..%d "
                              "(restarts before iterations 1 .. steps - 1)",
                              cfg, prefix, (unsigned long long)c->gram_restart_mask, top - 1);
    }
    OPTIM_CHECK(st, optim_check_int(cfg, NAME("batch_threads"), c->batch_threads, 1,
                                    NS_MAX_BATCH_THREADS));
    OPTIM_CHECK(st, optim_check_int(cfg, NAME("dtype"), (long long)c->dtype, STRATA_STATE_F32,
                                    STRATA_STATE_BF16));
#undef NAME
    return st;
}

strata_status strata_ns_config_check(const strata_ns_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "ns_config_check: NULL config");
    return strata_ns_config_check_as(c, "ns", "");
}

static strata_status check_config(const strata_ns_config *c)
{
    return strata_ns_config_check(c);
}

strata_ns_method strata_ns_method_for(const strata_ns_config *c, int64_t rows, int64_t cols)
{
    if (c->method != STRATA_NS_AUTO)
        return c->method;
    const double p = (double)(rows < cols ? rows : cols), q = (double)(rows < cols ? cols : rows);
    return q >= (double)c->gram_min_aspect * p ? STRATA_NS_GRAM : STRATA_NS_STANDARD;
}

uint64_t strata_ns_restart_mask(const strata_ns_config *c)
{
    const int top = c->steps < 64 ? c->steps : 64; /* positions 1 .. top-1 */
    const uint64_t valid = top <= 1 ? 0 : (top == 64 ? ~(uint64_t)0 : ((uint64_t)1 << top) - 1) &
                                              ~(uint64_t)1;
    if (c->gram_restart_mask)
        return c->gram_restart_mask & valid;
    /* k restarts evenly spaced, rounded up: before iteration ceil(j * steps / (k + 1)). */
    uint64_t mask = 0;
    const int64_t k = c->gram_restarts;
    for (int64_t j = 1; j <= k; j++) {
        const int64_t pos = (j * c->steps + k) / (k + 1);
        if (pos >= 1 && pos < top)
            mask |= (uint64_t)1 << pos;
    }
    return mask & valid;
}

static size_t work_standard(int64_t p, int64_t q) { return (size_t)(2 * p * q + 2 * p * p); }
static size_t work_gram(int64_t p, int64_t q) { return (size_t)(2 * p * q + 5 * p * p); }

static bool shape_ok(int64_t rows, int64_t cols)
{
    return rows >= 1 && cols >= 1 && rows <= INT32_MAX && cols <= INT32_MAX &&
           (uint64_t)rows * (uint64_t)cols <= (uint64_t)INT64_MAX / 64;
}

static size_t work_for(strata_ns_method m, int64_t rows, int64_t cols)
{
    const int64_t p = rows < cols ? rows : cols, q = rows < cols ? cols : rows;
    return m == STRATA_NS_GRAM ? work_gram(p, q) : work_standard(p, q);
}

size_t strata_ns_work_floats(const strata_ns_config *c, int64_t rows, int64_t cols)
{
    if (!c || !shape_ok(rows, cols) || c->batch_threads < 1 ||
        c->batch_threads > NS_MAX_BATCH_THREADS)
        return 0;
    return (size_t)c->batch_threads * work_for(strata_ns_method_for(c, rows, cols), rows, cols);
}

size_t strata_newton_schulz_work_floats(int64_t rows, int64_t cols)
{
    if (!shape_ok(rows, cols))
        return 0;
    const int64_t p = rows < cols ? rows : cols, q = rows < cols ? cols : rows;
    return work_standard(p, q);
}

/* The iteration's products in the configuration's precision: float32
 * (SGEMM / SSYRK) or bfloat16-rounded operands with float32 sums
 * (strata_backend_sgemm_bf16 / ssyrk_bf16). */
static strata_status ns_gemm(strata_backend *be, const strata_ns_config *c, int m, int n, int k,
                             const float *a, int lda, const float *b, int ldb, float *out,
                             int ldc)
{
    if (c->dtype == STRATA_STATE_BF16)
        return strata_backend_sgemm_bf16(be, 0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, ldc);
    return strata_backend_sgemm(be, 0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out, ldc);
}

static strata_status ns_syrk(strata_backend *be, const strata_ns_config *c, int n, int k,
                             float alpha, const float *a, int lda, float beta, float *out, int ldc)
{
    if (c->dtype == STRATA_STATE_BF16)
        return strata_backend_ssyrk_bf16(be, 0, n, k, alpha, a, lda, beta, out, ldc);
    return strata_backend_ssyrk(be, 0, n, k, alpha, a, lda, beta, out, ldc);
}

/* bfloat16 products: the Gram matrix (A = X X^T, Gram NS's R) rounded to
 * bfloat16 in place once it is formed, so that every later use of it sees
 * the same matrix: the product A A rounds its operands to bfloat16 anyway,
 * and without this the b A term would take the float32 A beside c bf(A)
 * bf(A), so B = b A + c bf(A)^2 would be no polynomial of one matrix. The
 * iteration X' = p(X X^T) X keeps the singular vectors of the matrix it is
 * a polynomial of; with the mixed A the rounding error enters B
 * uncorrelated with bf(A) and is multiplied by |b| ~ 4.8 (quintic), and
 * the bf16 update measured about twice as far from float64 (NorMuon, a
 * GPT-2-small layer, step 1, bench/peers/normuon_step.py: standard 1.54e-2
 * -> 8.5e-3, Gram on the 768 x 3072 pair 1.79e-2 -> 9.9e-3; pytorch_optimizer's
 * own bfloat16 step 9.6e-3).
 * Float32 products: untouched. */
static strata_status round_gram_bf16(strata_backend *be, const strata_ns_config *c, float *a,
                                     size_t n)
{
    return c->dtype == STRATA_STATE_BF16 ? strata_backend_round_bf16(be, n, a) : STRATA_OK;
}

/* ||x||_F^2 of the input: float32 products, strata_backend_sumsq's
 * index-order float64 chain (the contract the f32 results of every family
 * using Newton-Schulz are pinned to); bf16 products, the same sum in 32
 * interleaved lanes (strata_backend_sumsq_lanes: the last bits differ, a
 * memory pass instead of a latency-bound chain; ~5% of a bf16 NorMuon step
 * went to these chains, perf). Either is finite exactly when x is and 0
 * exactly when x is all zeros. */
static strata_status ns_sumsq(strata_backend *be, const strata_ns_config *c, size_t n,
                              const float *x, double *out)
{
    if (c->dtype == STRATA_STATE_BF16)
        return strata_backend_sumsq_lanes(be, n, x, out);
    return strata_backend_sumsq(be, NULL, n, x, out);
}

/* `steps` standard iterations on the p x q matrix in *X (Y scratch); the
 * result is left in *X (the pointers are swapped as the iteration
 * ping-pongs). With `out` (p x q, outside the workspace, not read), the last
 * product writes there and *X = out: no copy back. */
static strata_status iterate_standard(strata_backend *be, const strata_ns_config *c, int p, int q,
                                      float **X, float **Y, float *A, float *B, float *out)
{
    const size_t pp = (size_t)p * p;
    for (int t = 0; t < c->steps; t++) {
        double abc[3];
        strata_ns_coefficients(c->schedule, t, abc);
        strata_status st = ns_syrk(be, c, p, q, 1.0f, *X, q, 0.0f, A, p);
        if (st != STRATA_OK)
            return st;
        st = round_gram_bf16(be, c, A, pp);
        if (st != STRATA_OK)
            return st;
        /* B = c A A + b A; A is symmetric, so A A = A A^T (a SYRK). */
        st = strata_backend_copy(be, B, A, pp * sizeof(float));
        if (st == STRATA_OK)
            st = ns_syrk(be, c, p, p, (float)abc[2], A, p, (float)abc[1], B, p);
        /* Y = (a I + B) X: the a X term folded into B's diagonal saves a
         * p x q copy per iteration. */
        if (st == STRATA_OK)
            st = strata_backend_diag_update(be, NULL, p, B, p, (float)abc[0], true);
        if (st != STRATA_OK)
            return st;
        float *dst = out && t + 1 == c->steps ? out : *Y;
        st = ns_gemm(be, c, p, q, p, B, p, *X, q, dst, q);
        if (st != STRATA_OK)
            return st;
        float *sw = *X;
        *X = dst;
        *Y = sw;
    }
    return STRATA_OK;
}

/* Gram Newton-Schulz on the p x q matrix in X (Y scratch). The result Q X
 * goes to `out` (p x q, outside the workspace) or, when `out` is NULL, to
 * the workspace, and *res tells where. */
static strata_status iterate_gram(strata_backend *be, const strata_ns_config *c, uint64_t mask,
                                  int p, int q, float *X, float *Y, float *pp_buf, float *out,
                                  float **res)
{
    const size_t pp = (size_t)p * p;
    /* bfloat16 products with Polar Express: the p x p iteration (P, R = P R P,
     * Q = Q P) in float32 and R not rounded, only the p x q products (X X^T,
     * the restarts' Q X, the last Q X) in bfloat16 (optim.h, "bfloat16 Gram
     * with Polar Express"): with it all in bfloat16 the Gram matrix's
     * rounding, grown by the schedule's first coefficients, diverged on
     * low-rank inputs. */
    strata_ns_config c32 = *c;
    if (c->dtype == STRATA_STATE_BF16 && c->schedule == STRATA_NS_POLAR_EXPRESS)
        c32.dtype = STRATA_STATE_F32;
    const strata_ns_config *ci = &c32;
    float *R = pp_buf, *P = R + pp, *T = P + pp, *Q = T + pp, *Q2 = Q + pp;
    bool q_identity = true;
    strata_status st = ns_syrk(be, c, p, q, 1.0f, X, q, 0.0f, R, p);
    if (st == STRATA_OK)
        st = round_gram_bf16(be, ci, R, pp);
    for (int t = 0; t < c->steps && st == STRATA_OK; t++) {
        if (t > 0 && t < 64 && (mask >> t & 1) && !q_identity) {
            /* Restart: fold Q into X and re-form the Gram matrix from it. */
            st = ns_gemm(be, c, p, q, p, Q, p, X, q, Y, q);
            if (st == STRATA_OK)
                st = ns_syrk(be, c, p, q, 1.0f, Y, q, 0.0f, R, p);
            if (st == STRATA_OK)
                st = round_gram_bf16(be, ci, R, pp);
            if (st != STRATA_OK)
                break;
            float *sw = X;
            X = Y;
            Y = sw;
            q_identity = true;
        }
        double abc[3];
        strata_ns_coefficients(c->schedule, t, abc);
        /* P = a I + b R + c R^2 (R symmetric: R^2 = R R^T, a SYRK). */
        st = strata_backend_copy(be, P, R, pp * sizeof(float));
        if (st == STRATA_OK)
            st = ns_syrk(be, ci, p, p, (float)abc[2], R, p, (float)abc[1], P, p);
        if (st == STRATA_OK)
            st = strata_backend_diag_update(be, NULL, p, P, p, (float)abc[0], true);
        if (st != STRATA_OK)
            break;
        /* R = P R P, unless the next iteration restarts or there is none. */
        const bool last = t + 1 >= c->steps;
        const bool restart_next = t + 1 < 64 && (mask >> (t + 1) & 1);
        if (!last && !restart_next) {
            st = ns_gemm(be, ci, p, p, p, R, p, P, p, T, p);
            if (st == STRATA_OK)
                st = ns_gemm(be, ci, p, p, p, P, p, T, p, R, p);
            if (st == STRATA_OK)
                st = round_gram_bf16(be, ci, R, pp);
            if (st != STRATA_OK)
                break;
        }
        if (q_identity) {
            float *sw = Q; /* Q = P: take P's buffer */
            Q = P;
            P = sw;
            q_identity = false;
        } else {
            st = ns_gemm(be, ci, p, p, p, Q, p, P, p, Q2, p);
            float *sw = Q;
            Q = Q2;
            Q2 = sw;
        }
    }
    if (st != STRATA_OK)
        return st;
    *res = out ? out : q_identity ? X : Y;
    if (q_identity)
        return out ? strata_backend_copy(be, out, X, (size_t)p * q * sizeof(float)) : STRATA_OK;
    return ns_gemm(be, c, p, q, p, Q, p, X, q, *res, q);
}

/* A contiguous part of a batch, run by one thread with its own workspace. */
typedef struct ns_chunk {
    strata_backend *be;
    const strata_ns_config *c;
    strata_ns_method m;
    uint64_t mask;
    int rows, cols;
    float *x;
    int64_t count;
    float *work;
    strata_status st;
    char error[256]; /* strata_last_error() of a failure on this thread */
} ns_chunk;

static strata_status ns_one(strata_backend *be, const strata_ns_config *c, strata_ns_method m,
                            uint64_t mask, int rows, int cols, float *x, float *work);

/* Team item `item`: that chunk of the batch (any thread). */
static void ns_chunk_item(void *arg, int item)
{
    ns_chunk *k = (ns_chunk *)arg + item;
    const size_t n = (size_t)k->rows * (size_t)k->cols;
    for (int64_t i = 0; i < k->count && k->st == STRATA_OK; i++)
        k->st = ns_one(k->be, k->c, k->m, k->mask, k->rows, k->cols, k->x + (size_t)i * n, k->work);
    if (k->st != STRATA_OK)
        snprintf(k->error, sizeof k->error, "%s", strata_last_error());
}

/* One matrix: normalize into the workspace (transposed if tall), iterate,
 * write back. */
static strata_status ns_one(strata_backend *be, const strata_ns_config *c, strata_ns_method m,
                            uint64_t mask, int rows, int cols, float *x, float *work)
{
    const bool tall = rows > cols;
    const int p = tall ? cols : rows, q = tall ? rows : cols;
    const size_t pq = (size_t)p * q;
    float *X = work, *Y = work + pq, *rest = Y + pq;

    /* ||x||_F^2 in float64: for finite float32 entries it neither
     * underflows nor overflows, so it is finite exactly when x is, and 0
     * exactly when x is all zeros. */
    double sum = 0.0;
    strata_status st = ns_sumsq(be, c, pq, x, &sum);
    if (st != STRATA_OK)
        return st;
    if (!isfinite(sum))
        return strata_error(STRATA_ERR_NONFINITE, "newton_schulz: NaN or Inf in a %d x %d input",
                            rows, cols);
    if (sum == 0.0) {
        /* G = 0: the polar factor of 0 is 0, exactly, for every method. */
        return strata_backend_fill_2d(be, NULL, 1, (int64_t)pq, x, (int64_t)pq, 0.0f);
    }
    const double inv = 1.0 / (strata_ns_norm_factor(c->schedule) * sqrt(sum));
    if (tall) {
        st = strata_backend_transpose(be, NULL, rows, cols, x, X);
        if (st == STRATA_OK)
            st = strata_backend_scale_f64(be, NULL, pq, X, X, inv);
    } else {
        st = strata_backend_scale_f64(be, NULL, pq, X, x, inv);
    }
    if (st != STRATA_OK)
        return st;
    if (m == STRATA_NS_GRAM) {
        /* Wide: the last product writes x directly; tall: into the
         * workspace, then transposed back. */
        float *res = NULL;
        st = iterate_gram(be, c, mask, p, q, X, Y, rest, tall ? NULL : x, &res);
        if (st == STRATA_OK && tall)
            st = strata_backend_transpose(be, NULL, p, q, res, x);
        return st;
    }
    /* Wide: the last product writes x directly (as Gram's); tall: into the
     * workspace, then transposed back. */
    st = iterate_standard(be, c, p, q, &X, &Y, rest, rest + (size_t)p * p, tall ? NULL : x);
    if (st != STRATA_OK)
        return st;
    if (tall)
        return strata_backend_transpose(be, NULL, p, q, X, x);
    return X == x ? STRATA_OK : strata_backend_copy(be, x, X, pq * sizeof(float));
}

strata_status strata_ns_run(strata_backend *be, const strata_ns_config *c,
                            strata_worker_team *team, int64_t batch, int64_t rows, int64_t cols,
                            float *x, float *work)
{
    if (!be || !c || batch < 0 || (batch > 0 && (!x || !work)))
        return strata_error(STRATA_ERR_INVALID_ARG, "ns_run: NULL argument or batch < 0");
    if (!shape_ok(rows, cols))
        return strata_error(STRATA_ERR_INVALID_ARG, "ns_run: bad shape %lld x %lld",
                            (long long)rows, (long long)cols);
    strata_status st = check_config(c);
    if (st != STRATA_OK)
        return st;
    if (c->dtype == STRATA_STATE_BF16 && strcmp(strata_backend_name(be), "cpu") != 0)
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "ns_run: bf16 Newton-Schulz needs the cpu backend (this one is %s); "
                            "use ns dtype f32 there", strata_backend_name(be));
    const strata_ns_method m = strata_ns_method_for(c, rows, cols);
    const uint64_t mask = m == STRATA_NS_GRAM ? strata_ns_restart_mask(c) : 0;
    const size_t n = (size_t)rows * (size_t)cols;
    const int64_t threads = batch < c->batch_threads ? batch : c->batch_threads;
    if (threads <= 1) {
        for (int64_t i = 0; i < batch && st == STRATA_OK; i++)
            st = ns_one(be, c, m, mask, (int)rows, (int)cols, x + (size_t)i * n, work);
        return st;
    }
    /* Split the batch into `threads` contiguous chunks: the team's items. */
    ns_chunk chunk[NS_MAX_BATCH_THREADS];
    const size_t per_work = work_for(m, rows, cols);
    const int64_t per = (batch + threads - 1) / threads;
    for (int64_t k = 0; k < threads; k++) {
        const int64_t first = k * per, last = first + per < batch ? first + per : batch;
        chunk[k] = (ns_chunk){.be = be, .c = c, .m = m, .mask = mask, .rows = (int)rows,
                              .cols = (int)cols, .x = x + (size_t)first * n,
                              .count = last > first ? last - first : 0,
                              .work = work + (size_t)k * per_work, .st = STRATA_OK};
    }
    strata_worker_team_run(team, (int)threads, ns_chunk_item, chunk);
    st = STRATA_OK;
    for (int64_t k = 0; k < threads && st == STRATA_OK; k++)
        if (chunk[k].st != STRATA_OK) /* the detail was recorded on the chunk's thread */
            st = strata_error(chunk[k].st, "%s", chunk[k].error);
    return st;
}

strata_status strata_newton_schulz(strata_backend *be, int64_t rows, int64_t cols, int steps,
                                   float *x, float *work)
{
    if (!be || !x || !work || rows < 1 || cols < 1 || steps < 0 || rows > INT32_MAX ||
        cols > INT32_MAX)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "newton_schulz: bad arguments (%lld x %lld, %d steps)",
                            (long long)rows, (long long)cols, steps);
    strata_ns_config c;
    strata_ns_config_default(&c);
    c.steps = steps;
    c.method = STRATA_NS_STANDARD;
    return strata_ns_run(be, &c, NULL, 1, rows, cols, x, work);
}
