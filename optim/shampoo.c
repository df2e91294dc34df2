/* Shampoo with Adam/AdaGrad grafting, blocking, momentum and decoupled weight
 * decay. Formulas in include/strata/optim.h (Gupta et al. 2018; Shi et al.
 * 2023, Distributed Shampoo).
 *
 * Object life: one strata_shampoo_state per matrix parameter. All buffers
 * are carved from one backend allocation made at creation (device tier) plus
 * host allocations for the float64 eigen workspace and a float32 staging
 * matrix (synchronous roots: factor in, root out); nothing is allocated per
 * step. The host never dereferences the backend buffers, the weights or the
 * gradient: elementwise work and norms are backend ops (backend/ops.h), and
 * the synchronous roots copy a factor to the staging matrix and back.
 * Blocks tile W row-major in tiles of at most d x d (d =
 * max_preconditioner_dim); block b has factors L_b (r_b x r_b) and R_b
 * (c_b x c_b) and their inverse roots.
 *
 * Roots: strata_shampoo_factor_root turns the configuration into
 * strata_inv_root_ex options (regularized or pseudo-inverse, exponent per
 * factor); compute_roots and the asynchronous runtime's workers both call it,
 * so both compute bit-identical roots from the same factor.
 *
 * Parallel roots (strata_shampoo_state_set_root_threads, T > 1): the
 * factors of a refresh are jobs taken, largest first, from a shared counter
 * by T takers, the items of one batch of the state's worker team (T threads:
 * the caller and T - 1 helpers, workers/workers.h; started by
 * set_root_threads), taker k with workspace and staging matrix k (allocated
 * by set_root_threads).
 * During the call OpenBLAS's process-wide thread count is 1 and then restored:
 * every root comes from single-threaded LAPACK, so the result does not depend
 * on T, on which thread took which job, or on the count the caller had set.
 *
 * bfloat16 storage (factor_dtype, root_dtype BF16; strata/optim.h
 * strata_state_dtype): the factors and/or roots are kept as bfloat16 in the
 * same carve (half the floats) and widened, one panel of
 * OPTIM_BF16_PANEL_FLOATS floats at a time, into `wide` (float32 workspace,
 * small next to a factor) each time a product reads them: the factor update
 * computes a row panel of L (R) by sgemm on the widened panel, G_i G^T
 * (G_:j^T G), and rounds it back (round to nearest even; twice ssyrk's
 * flops), the preconditioning multiplies row panels of L_inv, then column
 * panels of R_inv. A refresh widens its slot part into a float32 stage,
 * computes the root in float64 as always and rounds it back. With
 * root_dtype BF16 the slot (the snapshot the refresh reads, then the root)
 * is bfloat16, so the root is computed from the factor rounded to bfloat16,
 * in both the runtime's refreshes and the one-tensor compute_roots (the
 * same arithmetic). The conversions are host loops over backend memory:
 * bf16 needs the cpu backend.
 *
 * Device roots (root_method NEWTON_F32): block_factor_root, the one entry
 * of the synchronous roots, the one-tensor compute_roots and the runtime's
 * refresh workers (fam_refresh), takes an entry of the state's dev_pool
 * (below: a stream and backend buffers), copies the float32 factor from
 * its host slot or stage to backend memory on that stream, runs the float32
 * coupled Newton iteration there (strata_inv_root_newton_f32_on; a rejected
 * root is recomputed by float64 eigh on the host) and copies the root back,
 * then returns the entry. The same function in every path, so async S = 0
 * stays bit-identical to synchronous. Lock order: a pool's mutex is a leaf
 * (held only to pop or push an entry; no backend call under it).
 *
 * Invariant: a block's `has_root[f]` becomes true only after a successful,
 * finite root of factor f; failures leave the previous root in place.
 * Every public entry that takes a gradient scans it for NaN/Inf before it
 * touches any state (STRATA_ERR_NONFINITE), so a refused step can be retried
 * or skipped with the state exactly as before.
 */
#include "strata/optim.h"
#include "backend/blas.h"
#include "backend/ops.h"
#include "optim/phases.h"

#include "optim_internal.h"
#include "precond.h"
#include "workers/workers.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shampoo_block {
    int64_t r0, c0;   /* top-left corner in W */
    int rows, cols;   /* r_b, c_b */
    float *L, *R;     /* factor matrices (bfloat16 data when factor_dtype is BF16) */
    const float *L_inv, *R_inv; /* inverse 4th roots (own, or lent when external;
                                   bfloat16 data when root_dtype is BF16) */
    float *L_inv_own, *R_inv_own;
    bool has_root[2]; /* L_inv, R_inv computed at least once */
} shampoo_block;

/* root_method WARM_QR: each factor's previous eigenbasis (host float32, n x n,
 * strata_inv_root_warm_qr's layout) is part of the refresh result, as
 * SOAP's and KL-Shampoo's eigenbases are (optim/soap.c). The state keeps
 * the *installed* bases (warm_basis, here); the runtime's slot carries a
 * basis next to the factors (fam_block: the slot's aux range, after the
 * parts, [Q_L | Q_R | have_L, have_R as float 0/1]): the snapshot copies
 * the installed bases into the slot, the refresh (any thread; it reads
 * only the slot) continues from the slot's basis and writes the new one
 * into it, and install copies it back into the state, failed parts
 * included (a failed warm root leaves the basis it started from; a failed
 * dsyevd root clears `have`). So the basis sequence is the refresh
 * sequence, whichever worker runs which refresh: with S < F a result is
 * installed before the next snapshot; with S >= F the engine chains the
 * block's refreshes in refresh order (fam_chain_in/out, precond.h), and
 * only for WARM_QR states (fam_chains: the eigh and Newton roots start
 * from nothing, so their refreshes stay independent). Under HSDP the aux
 * range is shipped with the roots (engine/refresh.c ship_one), so every
 * replica installs the same bases. The synchronous one-tensor path
 * (compute_roots, root_job) refines the state's bases in place: each
 * (block, factor) is one root job, so even its parallel form touches a
 * basis from one thread.
 * In the checkpoint (fam_tensors: "warm_basis_L.b", "warm_basis_R.b" and
 * the flags "has_warm_basis.b", host tier), so that a resumed run refines
 * the bases the uninterrupted one would and stays bit-identical to it
 * (the engine's saved slots carry the bases of results not installed yet).
 * The three are optional tensors: a checkpoint without them (another root
 * method, or a strata before them) loads with zeros, i.e. have = false,
 * and each factor's first root after the resume is a dsyevd root, as in a
 * fresh run; such a checkpoint's slots lack the aux range, which loads as
 * zeros (precond.h tail_bytes). Zeroed at create, so that a basis not
 * computed yet is saved as zeros, not as whatever the allocator left.
 * Lent bases (precond.h lend_results: every block's result in a host slot
 * that stays put until the block's next install): install points q at the
 * slot's bases instead of copying them (n^2 floats per factor and step at
 * F = 1: the default GPT's 12 MB a step on the training thread); the
 * one-tensor path and fam_tensors (a checkpoint reads or writes the bases)
 * first copy them back into `own` (warm_unlend). */
typedef struct warm_basis {
    float *q[2];  /* L's (rows x rows) and R's (cols x cols): own[f], or lent */
    float *own[2]; /* the state's memory for them */
    bool have[2];
} warm_basis;

/* Host scratch of one root thread: float64 eigen workspace and a float32
 * staging matrix (maxdim x maxdim: a factor, then its root). */
typedef struct root_ws {
    double *work;
    int *iwork;
    float *stage;
} root_ws;

/* root_method NEWTON_F32: what one device root in flight needs, for
 * factors up to the state's maxdim d: a stream of its own (SHADOW priority:
 * it yields to the training stream), one backend allocation carved into
 * the factor `a` (d^2 floats), the root `out` (d^2) and the iteration's
 * workspace (strata_inv_root_newton_f32_work_floats(d) = 5 d^2 + 2 d), so
 * (7 d^2 + 2 d) * 4 bytes of device memory per entry (28 MiB at d = 1024,
 * 16 MiB at d = 768), plus a host stage of d^2 floats for the eigh fallback.
 * Entries are made on first use, by the thread that finds the free list
 * empty, so a state holds as many as refreshes of it ran at once (one per
 * concurrent worker at most, one in the synchronous paths), and are reused
 * after; nothing is allocated once that concurrency has been reached. The
 * device bytes are charged to the ledger (device workspace) through the
 * pool's hold, under its mutex. Freed at destroy (no refresh in flight
 * then: the runtime drains its workers before it destroys states). */
typedef struct dev_root {
    struct dev_root *next;     /* free list */
    struct dev_root *next_all; /* every entry, for destroy */
    strata_stream *stream;
    float *a, *out, *dwork;    /* carved from mem */
    void *mem;
    size_t mem_bytes;
    float *host;               /* d^2 floats, host */
} dev_root;

typedef struct dev_pool {
    pthread_mutex_t mu;
    dev_root *free;
    dev_root *all;
    int count;                 /* entries made */
    strata_ledger_hold held;   /* their device bytes (mutated under mu) */
} dev_pool;

struct strata_shampoo_state {
    strata_ledger_hold held; /* what the state charged to the runtime's ledger */
    strata_shampoo_config cfg;
    strata_backend *be;
    int64_t rows, cols;
    int nblocks;
    shampoo_block *blocks;
    float *filtered; /* M, rows x cols (NULL when beta1 == 0) */
    float *graft;    /* A, rows x cols (NULL when grafting == NONE) */
    float *mom;      /* B, rows x cols (NULL when momentum == 0) */
    float *m_hat;    /* scratch rows x cols: the filtered gradient (used when beta1 > 0) */
    float *dir;      /* scratch rows x cols: grafting direction D */
    float *pre;      /* scratch rows x cols: preconditioned direction P */
    float *tmp;      /* scratch d x d */
    /* m_hat, dir, pre, tmp: step scratch, read and written inside one step
     * only. The one-tensor API's state carves them from its own allocation;
     * a runtime-driven state (external roots) borrows them from the
     * runtime's step scratch, shared by every parameter (the family's
     * set_step_scratch; its steps run one after another on the training
     * thread or stream), so n floats x 3 are paid once, not per matrix. */
    size_t scratch_bytes;
    float *wide;     /* scratch optim_bf16_panel_floats(maxdim): a widened panel of a
                        bfloat16 factor or root (NULL when both dtypes are F32) */
    bool external_roots;
    bool lend_warm;   /* install points the warm bases at the engine's host slot
                         (fam_lend_results; warm_basis) */
    void *mem;       /* the one device allocation */
    size_t mem_bytes;
    int maxdim;       /* largest factor dimension */
    root_ws *ws;      /* root_threads workspaces; ws[0] is the calling thread's */
    int root_threads; /* threads compute_roots uses (set_root_threads; default 1) */
    strata_worker_team *team; /* root_threads threads (NULL when 1) */
    int *root_order;  /* 2 * nblocks root jobs, largest factor first (root_threads > 1) */
    strata_status *root_status; /* per root job, of the last parallel compute_roots */
    bool skip;        /* this step's gradient could overflow the state: the step is
                         skipped (set by `before`, consumed by apply; optim_internal.h) */
    warm_basis *warm; /* nblocks (root_method WARM_QR), else NULL */
    dev_pool *dev;    /* root_method NEWTON_F32, else NULL */
};

void strata_shampoo_config_default(strata_shampoo_config *c)
{
    c->lr = 1e-2f;
    c->beta1 = 0.9f;
    c->beta2 = 1.0f;
    c->epsilon = 1e-12f;
    c->momentum = 0.0f;
    c->nesterov = false;
    c->weight_decay = 0.0f;
    c->precondition_frequency = 1;
    c->start_preconditioning_step = -1;
    c->refresh_offset = 0;
    c->max_preconditioner_dim = 1024;
    c->grafting = STRATA_GRAFT_ADAM;
    c->grafting_beta2 = 0.999f;
    c->grafting_epsilon = 1e-8f;
    c->epsilon_rel = 0.0f;
    c->use_pseudo_inverse = false;
    c->pseudo_inverse_rtol = -1.0f;
    c->pseudo_inverse_atol = 0.0f;
    c->inverse_exponent_override[0] = -1.0f;
    c->inverse_exponent_override[1] = -1.0f;
    c->root_method = STRATA_ROOT_EIGH;
    c->warm_qr_tolerance = 0.12f;
    c->factor_dtype = STRATA_STATE_F32;
    c->root_dtype = STRATA_STATE_F32;
}

static int64_t start_step(const strata_shampoo_config *c)
{
    /* Steps are 1-based: a start of 0 means the first step (as the async
     * runtime's registry, whose refresh points are >= 1, reads it too). */
    return c->start_preconditioning_step < 0   ? c->precondition_frequency
           : c->start_preconditioning_step < 1 ? 1
                                               : c->start_preconditioning_step;
}

static void fam_schedule(const void *cfg, strata_precond_schedule *out);

/* The family's schedule answers (lag 0: step t takes its own refresh). */
bool strata_shampoo_is_refresh_step(const strata_shampoo_config *c, int64_t t)
{
    strata_precond_schedule sch;
    fam_schedule(c, &sch);
    return strata_precond_is_refresh(&sch, t);
}

strata_status strata_shampoo_config_check(const strata_shampoo_config *c)
{
    if (!c)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_config_check: NULL config");
    const char *n = "shampoo";
    strata_status st = optim_check_nonneg(n, "lr", c->lr);
    OPTIM_CHECK(st, optim_check_beta(n, "beta1", c->beta1));
    OPTIM_CHECK(st, optim_check_float(n, "beta2", c->beta2, 0.0, false, 1.0, true));
    OPTIM_CHECK(st, optim_check_nonneg(n, "epsilon", c->epsilon));
    OPTIM_CHECK(st, optim_check_beta(n, "momentum", c->momentum));
    OPTIM_CHECK(st, optim_check_nonneg(n, "weight_decay", c->weight_decay));
    OPTIM_CHECK(st, optim_check_int(n, "precondition_frequency", c->precondition_frequency, 1,
                                    INT32_MAX));
    OPTIM_CHECK(st, optim_check_int(n, "start_preconditioning_step",
                                    c->start_preconditioning_step, -1, INT32_MAX));
    OPTIM_CHECK(st, optim_check_int(n, "refresh_offset", c->refresh_offset, 0,
                                    (long long)c->precondition_frequency - 1));
    OPTIM_CHECK(st, optim_check_int(n, "max_preconditioner_dim", c->max_preconditioner_dim, 1,
                                    INT32_MAX));
    OPTIM_CHECK(st, optim_check_int(n, "grafting", (long long)c->grafting, STRATA_GRAFT_NONE,
                                    STRATA_GRAFT_ADAGRAD));
    OPTIM_CHECK(st, optim_check_float(n, "grafting_beta2", c->grafting_beta2, 0.0, false, 1.0,
                                      false));
    OPTIM_CHECK(st, optim_check_pos(n, "grafting_epsilon", c->grafting_epsilon));
    OPTIM_CHECK(st, optim_check_nonneg(n, "epsilon_rel", c->epsilon_rel));
    OPTIM_CHECK(st, optim_check_finite(n, "pseudo_inverse_rtol", c->pseudo_inverse_rtol));
    OPTIM_CHECK(st, optim_check_nonneg(n, "pseudo_inverse_atol", c->pseudo_inverse_atol));
    OPTIM_CHECK(st, optim_check_finite(n, "inverse_exponent_override[0]",
                                       c->inverse_exponent_override[0]));
    OPTIM_CHECK(st, optim_check_finite(n, "inverse_exponent_override[1]",
                                       c->inverse_exponent_override[1]));
    OPTIM_CHECK(st, optim_check_int(n, "root_method", (long long)c->root_method,
                                    STRATA_ROOT_EIGH, STRATA_ROOT_WARM_QR_F32));
    OPTIM_CHECK(st, optim_check_float(n, "warm_qr_tolerance", c->warm_qr_tolerance, 0.0, true,
                                      1.0, true));
    if (st == STRATA_OK && STRATA_ROOT_METHOD_WARM(c->root_method) && c->use_pseudo_inverse)
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "shampoo.root_method = %s has no pseudo-inverse mode "
                          "(shampoo.use_pseudo_inverse); use eigh",
                          c->root_method == STRATA_ROOT_WARM_QR ? "warm_qr" : "warm_qr_f32");
    if (st == STRATA_OK &&
        (c->root_method == STRATA_ROOT_NEWTON || c->root_method == STRATA_ROOT_NEWTON_F32)) {
        /* the coupled iteration is written for p = 2, 4 and computes the
         * regularized root only */
        const char *m = c->root_method == STRATA_ROOT_NEWTON ? "newton" : "newton_f32";
        const char *alt = c->root_method == STRATA_ROOT_NEWTON ? "eigh or auto" : "eigh";
        for (int f = 0; f < 2 && st == STRATA_OK; f++) {
            const float e = c->inverse_exponent_override[f];
            if (!(e < 0.0f || e == 0.0f || e == 0.25f || e == 0.5f))
                st = strata_error(STRATA_ERR_INVALID_ARG,
                                  "shampoo.root_method = %s computes exponents 1/4 and 1/2 only "
                                  "(shampoo.inverse_exponent_override[%d] = %g); use %s",
                                  m, f, (double)e, alt);
        }
        if (st == STRATA_OK && c->use_pseudo_inverse)
            st = strata_error(STRATA_ERR_INVALID_ARG,
                              "shampoo.root_method = %s has no pseudo-inverse mode "
                              "(shampoo.use_pseudo_inverse); use %s", m, alt);
    }
    OPTIM_CHECK(st, optim_check_state_dtype(n, "factor_dtype", c->factor_dtype));
    OPTIM_CHECK(st, optim_check_state_dtype(n, "root_dtype", c->root_dtype));
    OPTIM_CHECK(st, optim_check_bf16_ema(n, "factor_dtype", c->factor_dtype, "beta2", c->beta2));
    if (st == STRATA_OK && c->use_pseudo_inverse && (c->epsilon != 0.0f || c->epsilon_rel != 0.0f))
        st = strata_error(STRATA_ERR_INVALID_ARG,
                          "shampoo.use_pseudo_inverse needs shampoo.epsilon = "
                          "shampoo.epsilon_rel = 0 (got %g, %g), as Distributed Shampoo's "
                          "PseudoInverseConfig",
                          (double)c->epsilon, (double)c->epsilon_rel);
    return st;
}

static strata_status check_config(const strata_shampoo_config *c)
{
    return strata_shampoo_config_check(c);
}

/* Refuse a gradient with a NaN or Inf before anything is touched. */
static strata_status check_finite(const strata_shampoo_state *s, const float *g,
                                  strata_optim_counters *cnt, const char *who)
{
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    size_t i = n;
    strata_status st = strata_backend_find_nonfinite(s->be, NULL, n, g, &i);
    if (st != STRATA_OK || i == n)
        return st;
    if (cnt)
        cnt->nonfinite_rejected++;
    float gi = NAN; /* the offending value, for the message */
    st = strata_backend_copy(s->be, &gi, g + i, sizeof gi);
    (void)st; /* the refusal is the error to report */
    return strata_error(STRATA_ERR_NONFINITE,
                        "%s: gradient element %zu (row %zu, col %zu) is %g; "
                        "nothing was updated",
                        who, i, i / (size_t)s->cols, i % (size_t)s->cols, (double)gi);
}

/* The overflow rule (optim_internal.h) for one step, before anything
 * changes: with gamma = ||G||_F^2, the factors (EMA: gamma; running sum,
 * beta2 = 1: each factor's diagonal bound + gamma), the filtered gradient
 * and M_hat (sqrt(gamma) / (1 - beta1)), the grafting accumulator (Adam:
 * gamma; AdaGrad: its norm + gamma) must stay below OPTIM_STATE_LIMIT.
 * Also refuses a non-finite gradient (counted, nothing touched). Sets
 * s->skip. */
static strata_status decide(strata_shampoo_state *s, const float *g, strata_optim_counters *cnt,
                            const char *who)
{
    const strata_shampoo_config *c = &s->cfg;
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    double gamma = 0.0;
    bool finite = false;
    strata_status st = optim_gamma(s->be, g, n, &gamma, &finite);
    if (st != STRATA_OK)
        return st;
    if (!finite)
        return check_finite(s, g, cnt, who); /* names the element */
    double bound = gamma;
    if (c->beta2 == 1.0f)
        for (int i = 0; i < s->nblocks && st == STRATA_OK; i++) {
            double bl = 0.0, br = 0.0;
            st = optim_psd_bound(s->be, s->blocks[i].L, s->blocks[i].rows, &bl);
            if (st == STRATA_OK)
                st = optim_psd_bound(s->be, s->blocks[i].R, s->blocks[i].cols, &br);
            bound = fmax(bound, fmax(bl, br) + gamma);
        }
    bound = fmax(bound, sqrt(gamma) / (1.0 - (double)c->beta1));
    if (st == STRATA_OK && c->grafting == STRATA_GRAFT_ADAGRAD) {
        double a2 = 0.0;
        st = strata_backend_sumsq(s->be, NULL, n, s->graft, &a2);
        bound = fmax(bound, sqrt(a2) + gamma);
    }
    if (st != STRATA_OK)
        return st;
    s->skip = !optim_state_absorbs(bound, cnt);
    return STRATA_OK;
}

static double root_exponent(const strata_shampoo_config *c, int factor)
{
    const float e = c->inverse_exponent_override[factor];
    return e < 0.0f ? 0.25 : (double)e;
}

/* One root's counters (root_retries, root_fallbacks, root_newton,
 * root_refreshes, root_failures) from its info and status; cnt may be NULL. */
static void count_root(strata_optim_counters *cnt, const strata_inv_root_info *info,
                       strata_status st)
{
    if (!cnt)
        return;
    cnt->root_retries += info->retries;
    cnt->root_fallbacks += info->fallback;
    if (st == STRATA_OK && info->method == STRATA_ROOT_NEWTON)
        cnt->root_newton++;
    if (st == STRATA_OK)
        cnt->root_refreshes++;
    else if (st == STRATA_ERR_LINALG)
        cnt->root_failures++;
}

/* strata_shampoo_factor_root with the factor's warm basis (WARM_QR; NULL:
 * none kept, a dsyevd root). */
static strata_status factor_root_warm(const strata_shampoo_config *c, int factor, int n,
                                      const float *a, float *out, double *work, int *iwork,
                                      strata_optim_counters *cnt, float *basis,
                                      bool *have_basis);

strata_status strata_shampoo_factor_root(const strata_shampoo_config *c, int factor, int n,
                                         const float *a, float *out, double *work, int *iwork,
                                         strata_optim_counters *cnt)
{
    return factor_root_warm(c, factor, n, a, out, work, iwork, cnt, NULL, NULL);
}

static strata_status factor_root_warm(const strata_shampoo_config *c, int factor, int n,
                                      const float *a, float *out, double *work, int *iwork,
                                      strata_optim_counters *cnt, float *basis,
                                      bool *have_basis)
{
    if (!c || (factor != 0 && factor != 1) || n <= 0 || !a || !out || !work || !iwork)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_factor_root: bad arguments "
                            "(factor %d, n %d)", factor, n);
    const double e = root_exponent(c, factor);
    if (e == 0.0) {
        /* That side is not preconditioned (Distributed Shampoo's override 0). */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                out[(size_t)i * n + j] = i == j ? 1.0f : 0.0f;
        if (cnt)
            cnt->root_refreshes++;
        return STRATA_OK;
    }
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.exponent = e;
    if (c->use_pseudo_inverse) {
        o.mode = STRATA_ROOT_PSEUDO_INVERSE;
        o.rank_rtol = c->pseudo_inverse_rtol;
        o.rank_atol = c->pseudo_inverse_atol;
    } else {
        o.eps = c->epsilon;
        o.eps_rel = c->epsilon_rel;
    }
    if (c->root_method == STRATA_ROOT_NEWTON_F32)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "shampoo_factor_root: root_method newton_f32 runs on a state's "
                            "backend (block_factor_root), not on a bare configuration");
    strata_inv_root_info info = {0};
    strata_status st;
    if (STRATA_ROOT_METHOD_WARM(c->root_method)) {
        if (basis && c->root_method == STRATA_ROOT_WARM_QR_F32) /* float32 (ssyevd first) */
            st = strata_inv_root_warm_qr_f32(n, a, &o, (double)c->warm_qr_tolerance, basis,
                                             have_basis, out, work, iwork, &info);
        else if (basis)
            st = strata_inv_root_warm_qr(n, a, &o, (double)c->warm_qr_tolerance, basis,
                                         have_basis, out, work, iwork, &info);
        else /* no basis kept (the one-factor entry): a dsyevd root, as warm-qr's */
            st = strata_inv_root_ex(n, a, &o, out, work, iwork, &info);
    } else {
        o.method = c->root_method;
        st = strata_inv_root_ex(n, a, &o, out, work, iwork, &info);
    }
    count_root(cnt, &info, st);
    return st;
}

/* 64-byte aligned host memory (below). */
static void *host_alloc(size_t bytes);

static void dev_root_free(strata_backend *be, dev_root *e)
{
    if (!e)
        return;
    if (e->stream) {
        (void)strata_backend_stream_synchronize(be, e->stream);
        strata_backend_stream_destroy(e->stream);
    }
    strata_backend_free(be, e->mem, e->mem_bytes);
    free(e->host);
    free(e);
}

static void dev_pool_destroy(strata_backend *be, dev_pool *p)
{
    if (!p)
        return;
    for (dev_root *e = p->all, *next; e; e = next) {
        next = e->next_all;
        dev_root_free(be, e);
    }
    strata_ledger_hold_release(&p->held);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* An idle entry, or a new one when every entry is busy (see dev_pool). */
static strata_status dev_root_acquire(const strata_shampoo_state *s, dev_root **out)
{
    dev_pool *p = s->dev;
    pthread_mutex_lock(&p->mu);
    dev_root *e = p->free;
    if (e)
        p->free = e->next;
    pthread_mutex_unlock(&p->mu);
    if (e) {
        *out = e;
        return STRATA_OK;
    }
    const int d = s->maxdim;
    const size_t dd = (size_t)d * d;
    const size_t floats = 2 * ((dd + 15) / 16 * 16) + strata_inv_root_newton_f32_work_floats(d);
    e = calloc(1, sizeof *e);
    if (!e)
        return strata_error(STRATA_ERR_NOMEM, "shampoo: out of memory (device root entry)");
    e->mem_bytes = floats * sizeof(float);
    e->host = host_alloc(dd * sizeof(float));
    strata_status st = e->host ? STRATA_OK
                               : strata_error(STRATA_ERR_NOMEM,
                                              "shampoo: cannot allocate a device root's host "
                                              "stage (dim %d)", d);
    if (st == STRATA_OK)
        st = strata_backend_alloc(s->be, e->mem_bytes, &e->mem);
    if (st == STRATA_OK)
        st = strata_backend_stream_create(s->be, STRATA_STREAM_SHADOW, &e->stream);
    if (st != STRATA_OK) {
        dev_root_free(s->be, e);
        return st;
    }
    float *q = e->mem;
    e->a = optim_carve(&q, dd);
    e->out = optim_carve(&q, dd);
    e->dwork = q;
    pthread_mutex_lock(&p->mu);
    e->next_all = p->all;
    p->all = e;
    p->count++;
    strata_ledger_hold_add(&p->held, strata_backend_ledger(s->be), STRATA_LEDGER_DEVICE,
                           STRATA_LEDGER_WORKSPACE, e->mem_bytes);
    pthread_mutex_unlock(&p->mu);
    *out = e;
    return STRATA_OK;
}

static void dev_root_release(const strata_shampoo_state *s, dev_root *e)
{
    dev_pool *p = s->dev;
    pthread_mutex_lock(&p->mu);
    e->next = p->free;
    p->free = e;
    pthread_mutex_unlock(&p->mu);
}

/* root_method NEWTON_F32: factor f's root (n x n, host float32 `a` ->
 * host `out`, which may alias) on the backend, counted as
 * factor_root_warm counts (root_newton, root_fallbacks). */
static strata_status factor_root_dev(const strata_shampoo_state *s, int f, int n,
                                     const float *a, float *out, double *work, int *iwork,
                                     strata_optim_counters *cnt)
{
    const strata_shampoo_config *c = &s->cfg;
    strata_inv_root_opts o;
    strata_inv_root_opts_default(&o);
    o.exponent = root_exponent(c, f);
    o.eps = c->epsilon;
    o.eps_rel = c->epsilon_rel;
    o.method = STRATA_ROOT_NEWTON;
    /* float32 iterates: the stopping error's floor is near sqrt(n) 1e-6
     * (optim/root_newton_f32.c), and the acceptance residual the float32
     * bound of optim/phases.h */
    o.newton_tol = 1e-5;
    o.newton_residual_tol = STRATA_ROOT_F32_RESIDUAL_TOL;
    dev_root *e = NULL;
    strata_status st = dev_root_acquire(s, &e);
    if (st != STRATA_OK)
        return st;
    const size_t bytes = (size_t)n * n * sizeof(float);
    strata_inv_root_info info = {0};
    st = strata_backend_copy_async(s->be, e->a, a, bytes, STRATA_COPY_H2D, e->stream);
    if (st == STRATA_OK)
        st = strata_inv_root_newton_f32_on(s->be, e->stream, n, e->a, &o, e->out, e->dwork,
                                           e->host, work, iwork, &info);
    if (st == STRATA_OK)
        st = strata_backend_copy_async(s->be, out, e->out, bytes, STRATA_COPY_D2H, e->stream);
    if (st == STRATA_OK)
        st = strata_backend_stream_synchronize(s->be, e->stream);
    else
        (void)strata_backend_stream_synchronize(s->be, e->stream);
    dev_root_release(s, e);
    count_root(cnt, &info, st);
    return st;
}

static void warm_unlend(const strata_shampoo_state *s, int b);

/* Factor f of block b's root: in the one-tensor path (compute_roots) with
 * the state's warm basis when it keeps bases (WARM_QR: one root job per
 * (block, factor), so no other thread touches that basis meanwhile); on the
 * backend for NEWTON_F32 in every path (an exponent of 0, the identity,
 * stays factor_root_warm's). */
static strata_status block_factor_root(const strata_shampoo_state *s, int b, int f, int n,
                                       const float *a, float *out, double *work, int *iwork,
                                       strata_optim_counters *cnt)
{
    if (s->dev && root_exponent(&s->cfg, f) != 0.0)
        return factor_root_dev(s, f, n, a, out, work, iwork, cnt);
    if (s->dev) { /* the identity side: no backend work, as eigh's config would give it */
        strata_shampoo_config ce = s->cfg;
        ce.root_method = STRATA_ROOT_EIGH;
        return strata_shampoo_factor_root(&ce, f, n, a, out, work, iwork, cnt);
    }
    if (!s->warm)
        return strata_shampoo_factor_root(&s->cfg, f, n, a, out, work, iwork, cnt);
    warm_basis *wb = &s->warm[b];
    warm_unlend(s, b); /* the refinement writes the basis in place */
    return factor_root_warm(&s->cfg, f, n, a, out, work, iwork, cnt, wb->q[f], &wb->have[f]);
}

/* Block b's bases back into the state's own memory when lent (warm_basis).
 * The state is logically const here: the bases' values do not change. */
static void warm_unlend(const strata_shampoo_state *s, int b)
{
    warm_basis *wb = &s->warm[b];
    const shampoo_block *blk = &s->blocks[b];
    for (int f = 0; f < 2; f++) {
        if (wb->q[f] == wb->own[f])
            continue;
        const size_t d = (size_t)(f == 0 ? blk->rows : blk->cols);
        memcpy(wb->own[f], wb->q[f], d * d * sizeof(float));
        wb->q[f] = wb->own[f];
    }
}

/* precond.h lend_results: every block's result stays in a host slot. */
static void fam_lend_results(void *state)
{
    strata_shampoo_state *s = state;
    s->lend_warm = s->warm != NULL;
}

static void warm_free(warm_basis *w, int nblocks)
{
    for (int i = 0; w && i < nblocks; i++)
        for (int f = 0; f < 2; f++)
            free(w[i].own[f]);
    free(w);
}

/* 64-byte aligned host memory, so that every root thread's LAPACK sees
 * its workspace at the same alignment (NULL on failure). */
static void *host_alloc(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
}

static void ws_free(root_ws *ws, int count)
{
    for (int i = 0; ws && i < count; i++) {
        free(ws[i].stage);
        free(ws[i].work);
        free(ws[i].iwork);
    }
    free(ws);
}

/* Replace s->ws by `count` workspaces for factors up to s->maxdim. On
 * failure the state keeps its old workspaces. */
static strata_status ws_alloc(strata_shampoo_state *s, int count)
{
    root_ws *ws = calloc((size_t)count, sizeof *ws);
    if (!ws)
        return strata_error(STRATA_ERR_NOMEM, "shampoo: out of memory");
    const int d = s->maxdim;
    for (int i = 0; i < count; i++) {
        ws[i].work = host_alloc(strata_inv_root_work_doubles(d) * sizeof(double));
        ws[i].iwork = host_alloc(strata_inv_root_work_ints(d) * sizeof(int));
        ws[i].stage = host_alloc((size_t)d * d * sizeof(float));
        if (!ws[i].work || !ws[i].iwork || !ws[i].stage) {
            ws_free(ws, i + 1);
            return strata_error(STRATA_ERR_NOMEM,
                                "shampoo: cannot allocate eigen workspace %d of %d (dim %d)",
                                i + 1, count, d);
        }
    }
    ws_free(s->ws, s->root_threads);
    s->ws = ws;
    s->root_threads = count;
    return STRATA_OK;
}

strata_status strata_shampoo_state_create(const strata_shampoo_config *c, strata_backend *be,
                                          int64_t rows, int64_t cols, strata_shampoo_state **out)
{
    return strata_shampoo_state_create_ex(c, be, rows, cols, false, out);
}

strata_status strata_shampoo_state_create_ex(const strata_shampoo_config *c, strata_backend *be,
                                             int64_t rows, int64_t cols, bool external_roots,
                                             strata_shampoo_state **out)
{
    if (!c || !be || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_state_create: NULL argument");
    *out = NULL;
    strata_status st = optim_check_shape("shampoo", rows, cols);
    if (st == STRATA_OK)
        st = check_config(c);
    if (st == STRATA_OK) /* the largest block's factors */
        st = optim_check_factor("shampoo", rows < c->max_preconditioner_dim
                                               ? rows : c->max_preconditioner_dim);
    if (st == STRATA_OK)
        st = optim_check_factor("shampoo", cols < c->max_preconditioner_dim
                                               ? cols : c->max_preconditioner_dim);
    const strata_state_dtype fd = c->factor_dtype, rd = c->root_dtype;
    const bool any_bf16 = fd == STRATA_STATE_BF16 || rd == STRATA_STATE_BF16;
    if (st == STRATA_OK)
        st = optim_check_bf16_backend("shampoo", be, any_bf16);
    if (st != STRATA_OK)
        return st;

    strata_shampoo_state *s = calloc(1, sizeof *s);
    if (!s)
        return strata_error(STRATA_ERR_NOMEM, "shampoo: out of memory");
    s->cfg = *c;
    s->be = be;
    s->external_roots = external_roots;
    s->rows = rows;
    s->cols = cols;
    const int64_t d = c->max_preconditioner_dim;
    const int64_t nbr = (rows + d - 1) / d, nbc = (cols + d - 1) / d;
    s->nblocks = (int)(nbr * nbc);
    s->blocks = calloc((size_t)s->nblocks, sizeof *s->blocks);
    if (!s->blocks) {
        st = strata_error(STRATA_ERR_NOMEM, "shampoo: out of memory");
        goto out_free_state;
    }

    /* Size the one device allocation: per block 2 factors + 2 roots, then the
     * full-size buffers and the d x d scratch. */
    const size_t n = (size_t)rows * (size_t)cols;
    size_t floats = 0;
    int maxdim = 1;
    for (int64_t bi = 0; bi < nbr; bi++)
        for (int64_t bj = 0; bj < nbc; bj++) {
            shampoo_block *b = &s->blocks[bi * nbc + bj];
            b->r0 = bi * d;
            b->c0 = bj * d;
            b->rows = (int)((rows - b->r0) < d ? rows - b->r0 : d);
            b->cols = (int)((cols - b->c0) < d ? cols - b->c0 : d);
            const size_t nl = (size_t)b->rows * b->rows, nr = (size_t)b->cols * b->cols;
            floats += optim_state_floats(fd, nl) + optim_state_floats(fd, nr);
            if (!external_roots)
                floats += optim_state_floats(rd, nl) + optim_state_floats(rd, nr);
            if (b->rows > maxdim)
                maxdim = b->rows;
            if (b->cols > maxdim)
                maxdim = b->cols;
        }
    const bool need_m = c->beta1 > 0.0f, need_a = c->grafting != STRATA_GRAFT_NONE,
               need_b = c->momentum > 0.0f;
    floats += n * ((size_t)need_m + (size_t)need_a + (size_t)need_b);
    size_t tmp_floats = 0;
    for (int i = 0; i < s->nblocks; i++) {
        size_t f = (size_t)s->blocks[i].rows * s->blocks[i].cols;
        if (f > tmp_floats)
            tmp_floats = f;
    }
    /* The step scratch (m_hat, dir, pre, tmp), each piece padded to 16 floats. */
    s->scratch_bytes = (3 * ((n + 15) / 16 * 16) + (tmp_floats + 15) / 16 * 16) * sizeof(float);
    if (!external_roots)
        floats += s->scratch_bytes / sizeof(float);
    const size_t wide_floats = any_bf16 ? optim_bf16_panel_floats(maxdim) : 0;
    floats += wide_floats;
    /* Each carved buffer starts 64-byte aligned: pad every piece to 16 floats. */
    floats += 16 * (size_t)(4 * s->nblocks + 5);
    s->mem_bytes = floats * sizeof(float);
    st = strata_backend_alloc(be, s->mem_bytes, &s->mem);
    if (st != STRATA_OK)
        goto out_free_blocks;

    float *p = s->mem;
    for (int i = 0; i < s->nblocks; i++) {
        shampoo_block *b = &s->blocks[i];
        b->L = optim_carve(&p, optim_state_floats(fd, (size_t)b->rows * b->rows));
        b->R = optim_carve(&p, optim_state_floats(fd, (size_t)b->cols * b->cols));
        if (!external_roots) {
            b->L_inv_own = optim_carve(&p, optim_state_floats(rd, (size_t)b->rows * b->rows));
            b->R_inv_own = optim_carve(&p, optim_state_floats(rd, (size_t)b->cols * b->cols));
            b->L_inv = b->L_inv_own;
            b->R_inv = b->R_inv_own;
        }
    }
    if (need_m)
        s->filtered = optim_carve(&p, n);
    if (need_a)
        s->graft = optim_carve(&p, n);
    if (need_b)
        s->mom = optim_carve(&p, n);
    if (!external_roots) {
        s->m_hat = optim_carve(&p, n);
        s->dir = optim_carve(&p, n);
        s->pre = optim_carve(&p, n);
        s->tmp = optim_carve(&p, tmp_floats);
    }
    s->wide = wide_floats ? optim_carve(&p, wide_floats) : NULL;
    {
        /* The ledger: factors, own roots (the engine charges lent ones),
         * grafting, momentum / filtered gradient; the rest (the step
         * scratch when own, padding) is workspace. */
        strata_ledger *lg = strata_backend_ledger(be);
        size_t fb = 0, rb = 0;
        for (int i = 0; i < s->nblocks; i++) {
            const size_t e = (size_t)s->blocks[i].rows * s->blocks[i].rows +
                             (size_t)s->blocks[i].cols * s->blocks[i].cols;
            fb += e * optim_state_elem(fd);
            rb += external_roots ? 0 : e * optim_state_elem(rd);
        }
        const size_t gb = need_a ? n * sizeof(float) : 0;
        const size_t mb = ((size_t)need_m + (size_t)need_b) * n * sizeof(float);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_FACTORS, fb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_ROOTS, rb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_GRAFTING, gb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_MOMENTS, mb);
        strata_ledger_hold_add(&s->held, lg, STRATA_LEDGER_DEVICE, STRATA_LEDGER_WORKSPACE,
                               s->mem_bytes - fb - rb - gb - mb);
    }

    s->maxdim = maxdim;
    if (!external_roots) {
        st = ws_alloc(s, 1);
        if (st != STRATA_OK)
            goto out_free_mem;
    }
    if (STRATA_ROOT_METHOD_WARM(c->root_method)) {
        /* The previous eigenbases (host), charged to the ledger as roots. */
        s->warm = calloc((size_t)s->nblocks, sizeof *s->warm);
        size_t qb = 0;
        for (int i = 0; s->warm && i < s->nblocks; i++) {
            for (int f = 0; f < 2; f++) {
                const size_t fd_n = (size_t)(f == 0 ? s->blocks[i].rows : s->blocks[i].cols);
                s->warm[i].q[f] = s->warm[i].own[f] = host_alloc(fd_n * fd_n * sizeof(float));
                qb += fd_n * fd_n * sizeof(float);
                if (!s->warm[i].q[f]) {
                    warm_free(s->warm, i + 1);
                    s->warm = NULL;
                    break;
                }
                memset(s->warm[i].q[f], 0, fd_n * fd_n * sizeof(float));
            }
        }
        if (!s->warm) {
            ws_free(s->ws, s->root_threads);
            st = strata_error(STRATA_ERR_NOMEM, "shampoo: cannot allocate the warm eigenbases");
            goto out_free_mem;
        }
        strata_ledger_hold_add(&s->held, strata_backend_ledger(be), STRATA_LEDGER_HOST,
                               STRATA_LEDGER_ROOTS, qb);
    }
    if (c->root_method == STRATA_ROOT_NEWTON_F32) {
        /* The pool only: its entries are made on first use (dev_pool). */
        s->dev = calloc(1, sizeof *s->dev);
        if (!s->dev || pthread_mutex_init(&s->dev->mu, NULL) != 0) {
            free(s->dev);
            s->dev = NULL;
            warm_free(s->warm, s->nblocks);
            ws_free(s->ws, s->root_threads);
            st = strata_error(STRATA_ERR_NOMEM, "shampoo: cannot create the device root pool");
            goto out_free_mem;
        }
    }
    *out = s;
    return STRATA_OK;

out_free_mem:
    strata_ledger_hold_release(&s->held);
    strata_backend_free(be, s->mem, s->mem_bytes);
out_free_blocks:
    free(s->blocks);
out_free_state:
    free(s);
    return st;
}

void strata_shampoo_state_destroy(strata_shampoo_state *s)
{
    if (!s)
        return;
    strata_worker_team_destroy(s->team);
    ws_free(s->ws, s->root_threads);
    warm_free(s->warm, s->nblocks);
    dev_pool_destroy(s->be, s->dev);
    free(s->root_order);
    free(s->root_status);
    strata_ledger_hold_release(&s->held);
    strata_backend_free(s->be, s->mem, s->mem_bytes);
    free(s->blocks);
    free(s);
}

size_t strata_shampoo_state_bytes(const strata_shampoo_state *s)
{
    return s ? s->mem_bytes : 0;
}

int strata_shampoo_state_blocks(const strata_shampoo_state *s)
{
    return s ? s->nblocks : 0;
}

static strata_status update_factors(strata_shampoo_state *s, const float *g,
                                    strata_optim_counters *cnt);

strata_status strata_shampoo_update_factors(strata_shampoo_state *s, const float *g,
                                            strata_optim_counters *cnt)
{
    if (!s || !g)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_update_factors: NULL argument");
    strata_status st = check_finite(s, g, cnt, "shampoo_update_factors");
    if (st != STRATA_OK)
        return st;
    return update_factors(s, g, cnt);
}

static strata_status update_factors(strata_shampoo_state *s, const float *g,
                                    strata_optim_counters *cnt)
{
    double t0 = strata_now_seconds();
    const float b2 = s->cfg.beta2;
    const float alpha = b2 == 1.0f ? 1.0f : 1.0f - b2;
    const int ld = (int)s->cols;
    for (int i = 0; i < s->nblocks; i++) {
        shampoo_block *b = &s->blocks[i];
        const float *gb = g + b->r0 * s->cols + b->c0;
        if (s->cfg.factor_dtype == STRATA_STATE_BF16) {
            /* The sum in float32 on widened row panels, stored rounded
             * (optim_bf16_syrk). */
            strata_status st = optim_bf16_syrk(s->be, 0, b->rows, b->cols, alpha, gb, ld, b2,
                                               b->L, s->wide);
            if (st == STRATA_OK)
                st = optim_bf16_syrk(s->be, 1, b->cols, b->rows, alpha, gb, ld, b2, b->R,
                                     s->wide);
            if (st != STRATA_OK)
                return st;
            continue;
        }
        strata_status st = strata_backend_ssyrk(s->be, 0, b->rows, b->cols, alpha, gb, ld, b2,
                                                b->L, b->rows);
        if (st == STRATA_OK)
            st = strata_backend_ssyrk(s->be, 1, b->cols, b->rows, alpha, gb, ld, b2, b->R,
                                      b->cols);
        if (st != STRATA_OK)
            return st;
    }
    if (cnt)
        cnt->seconds_factors += strata_now_seconds() - t0;
    return STRATA_OK;
}

/* Root job j is factor j % 2 (0: L, 1: R) of block j / 2. */
static int job_dim(const strata_shampoo_state *s, int job)
{
    const shampoo_block *b = &s->blocks[job / 2];
    return job % 2 == 0 ? b->rows : b->cols;
}

strata_status strata_shampoo_state_set_root_threads(strata_shampoo_state *s, int threads)
{
    if (!s || threads < 1 || threads > STRATA_SHAMPOO_MAX_ROOT_THREADS)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "shampoo_state_set_root_threads: %s (threads %d, 1..%d)",
                            s ? "threads out of range" : "NULL state", threads,
                            STRATA_SHAMPOO_MAX_ROOT_THREADS);
    if (s->external_roots)
        return strata_error(STRATA_ERR_STATE, "shampoo_state_set_root_threads: roots are external");
    /* More threads than factors would only hold idle workspaces. */
    const int jobs = 2 * s->nblocks;
    if (threads > jobs)
        threads = jobs;
    if (threads == s->root_threads)
        return STRATA_OK;
    if (!s->root_order) {
        int *ord = malloc((size_t)jobs * sizeof *ord);
        strata_status *status = malloc((size_t)jobs * sizeof *status);
        if (!ord || !status) {
            free(ord);
            free(status);
            return strata_error(STRATA_ERR_NOMEM, "shampoo: out of memory");
        }
        /* Largest factor first (insertion sort, stable), so that the last
         * job to start is a small one; results do not depend on the order. */
        for (int i = 0; i < jobs; i++) {
            const int dj = job_dim(s, i);
            int k = i;
            for (; k > 0 && job_dim(s, ord[k - 1]) < dj; k--)
                ord[k] = ord[k - 1];
            ord[k] = i;
        }
        s->root_order = ord;
        s->root_status = status;
    }
    strata_worker_team *team = NULL;
    strata_status st = threads > 1 ? strata_worker_team_create(threads, &team) : STRATA_OK;
    if (st == STRATA_OK)
        st = ws_alloc(s, threads);
    if (st != STRATA_OK) {
        strata_worker_team_destroy(team);
        return st;
    }
    strata_worker_team_destroy(s->team);
    s->team = team;
    return STRATA_OK;
}

/* One factor's root on the host: factor -> staging matrix, root in place,
 * root -> the state's buffer. LINALG failures are counted in `cnt` and leave
 * the previous root (the caller keeps has_root as it was). */
static strata_status root_job(strata_shampoo_state *s, int job, const root_ws *ws,
                              strata_optim_counters *cnt)
{
    shampoo_block *b = &s->blocks[job / 2];
    const int f = job % 2;
    const int dim = f == 0 ? b->rows : b->cols;
    const size_t ne = (size_t)dim * dim, bytes = ne * sizeof(float);
    const float *fac = f == 0 ? b->L : b->R;
    float *root = f == 0 ? b->L_inv_own : b->R_inv_own;
    strata_status st = STRATA_OK;
    if (s->cfg.factor_dtype == STRATA_STATE_BF16)
        optim_bf16_widen_n(ws->stage, fac, ne);
    else
        st = strata_backend_copy(s->be, ws->stage, fac, bytes);
    if (st == STRATA_OK && s->cfg.root_dtype == STRATA_STATE_BF16 &&
        s->cfg.factor_dtype != STRATA_STATE_BF16) {
        /* What the runtime's bfloat16 slot would carry to the refresh. */
        optim_bf16_round_n(ws->stage, ws->stage, ne);
        optim_bf16_widen_n(ws->stage, ws->stage, ne);
    }
    if (st == STRATA_OK)
        st = block_factor_root(s, job / 2, f, dim, ws->stage, ws->stage, ws->work, ws->iwork,
                               cnt);
    if (st == STRATA_OK && s->cfg.root_dtype == STRATA_STATE_BF16)
        optim_bf16_round_n(root, ws->stage, ne);
    else if (st == STRATA_OK)
        st = strata_backend_copy(s->be, root, ws->stage, bytes);
    return st;
}

/* Shared by the threads of one parallel compute_roots. */
typedef struct root_batch {
    strata_shampoo_state *s;
    const int *order;        /* jobs (2 * block + factor), largest factor first */
    int n_jobs;
    atomic_int next;         /* next index into order */
    strata_status *status;   /* per job */
} root_batch;

typedef struct root_thread {
    root_batch *batch;
    const root_ws *ws;
    strata_optim_counters cnt; /* this thread's counts, summed by the caller */
    char error[256];           /* strata_last_error() of the first non-LINALG failure */
} root_thread;

/* Team item k: taker k takes jobs until none is left (any thread). */
static void root_taker(void *arg, int k)
{
    root_thread *t = (root_thread *)arg + k;
    root_batch *bt = t->batch;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&bt->next, 1, memory_order_relaxed);
        if (i >= bt->n_jobs)
            break;
        const int job = bt->order[i];
        const strata_status st = root_job(bt->s, job, t->ws, &t->cnt);
        bt->status[job] = st;
        if (st != STRATA_OK && st != STRATA_ERR_LINALG && !t->error[0])
            snprintf(t->error, sizeof t->error, "%s", strata_last_error());
    }
}

static void counters_add(strata_optim_counters *to, const strata_optim_counters *from)
{
    to->root_refreshes += from->root_refreshes;
    to->root_failures += from->root_failures;
    to->root_retries += from->root_retries;
    to->root_newton += from->root_newton;
    to->root_fallbacks += from->root_fallbacks;
}

/* compute_roots with root_threads > 1 (see the prose block at the top). */
static strata_status compute_roots_parallel(strata_shampoo_state *s, strata_optim_counters *cnt)
{
    const int n_jobs = 2 * s->nblocks;
    int *ord = s->root_order;
    strata_status *status = s->root_status;
    root_batch bt = {.s = s, .order = ord, .n_jobs = n_jobs, .status = status};
    atomic_init(&bt.next, 0);
    root_thread th[STRATA_SHAMPOO_MAX_ROOT_THREADS];
    const int T = s->root_threads < n_jobs ? s->root_threads : n_jobs;
    /* The BLAS thread count is process-wide: one thread per root while the
     * roots run, the caller's count afterwards. */
    const int blas = strata_blas_threads();
    strata_blas_threads_set(1);
    for (int k = 0; k < T; k++)
        th[k] = (root_thread){.batch = &bt, .ws = &s->ws[k]};
    strata_worker_team_run(s->team, T, root_taker, th);
    strata_blas_threads_set(blas);

    strata_status st = STRATA_OK;
    for (int k = 0; k < T; k++)
        if (cnt)
            counters_add(cnt, &th[k].cnt);
    for (int job = 0; job < n_jobs; job++) {
        shampoo_block *b = &s->blocks[job / 2];
        if (status[job] == STRATA_OK)
            b->has_root[job % 2] = true;
        else if (status[job] != STRATA_ERR_LINALG && st == STRATA_OK)
            st = status[job];
    }
    if (st != STRATA_OK) {
        /* Name the failure on the caller's thread (the first thread's note). */
        for (int k = 0; k < T; k++)
            if (th[k].error[0]) {
                st = strata_error(st, "%s", th[k].error);
                break;
            }
    }
    return st;
}

strata_status strata_shampoo_compute_roots(strata_shampoo_state *s, strata_optim_counters *cnt)
{
    if (!s)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_compute_roots: NULL state");
    if (s->external_roots)
        return strata_error(STRATA_ERR_STATE, "shampoo_compute_roots: roots are external");
    double t0 = strata_now_seconds();
    if (s->root_threads > 1) {
        strata_status st = compute_roots_parallel(s, cnt);
        if (st != STRATA_OK)
            return st;
    } else {
        for (int job = 0; job < 2 * s->nblocks; job++) {
            /* The root runs on the host in float64: the factor goes to the
             * staging matrix, the root (written in place) comes back. */
            strata_status st = root_job(s, job, &s->ws[0], cnt);
            if (st == STRATA_OK)
                s->blocks[job / 2].has_root[job % 2] = true;
            else if (st != STRATA_ERR_LINALG)
                return st; /* LINALG: counted, the previous root is kept */
        }
    }
    if (cnt)
        cnt->seconds_roots += strata_now_seconds() - t0;
    return STRATA_OK;
}

strata_status strata_shampoo_block_factors(const strata_shampoo_state *s, int b, int *rows,
                                           int *cols, const float **L, const float **R)
{
    if (!s || b < 0 || b >= s->nblocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_block_factors: bad block %d", b);
    if (s->cfg.factor_dtype != STRATA_STATE_F32)
        return strata_error(STRATA_ERR_UNSUPPORTED, "shampoo_block_factors: the factors are "
                            "stored as bfloat16 (factor_dtype), not float32");
    const shampoo_block *blk = &s->blocks[b];
    if (rows)
        *rows = blk->rows;
    if (cols)
        *cols = blk->cols;
    if (L)
        *L = blk->L;
    if (R)
        *R = blk->R;
    return STRATA_OK;
}

strata_status strata_shampoo_block_set_roots(strata_shampoo_state *s, int b, const float *L_inv,
                                             const float *R_inv)
{
    if (!s || b < 0 || b >= s->nblocks)
        return strata_error(STRATA_ERR_INVALID_ARG, "shampoo_block_set_roots: bad block %d", b);
    if (!s->external_roots)
        return strata_error(STRATA_ERR_STATE, "shampoo_block_set_roots: state owns its roots");
    shampoo_block *blk = &s->blocks[b];
    blk->L_inv = L_inv;
    blk->R_inv = R_inv;
    blk->has_root[0] = L_inv != NULL;
    blk->has_root[1] = R_inv != NULL;
    return STRATA_OK;
}

static strata_status apply(strata_shampoo_state *s, float lr_scale, int64_t t, float *w,
                           const float *g, strata_optim_counters *cnt);

strata_status strata_shampoo_apply(strata_shampoo_state *s, float lr_scale, int64_t t, float *w,
                                   const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("shampoo_apply", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("shampoo_apply", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    strata_status st = check_finite(s, g, cnt, "shampoo_apply");
    if (st != STRATA_OK)
        return st;
    return apply(s, lr_scale, t, w, g, cnt);
}

/* P = L_inv M R_inv with bfloat16 roots: tmp = L_inv M by row panels of
 * L_inv (contiguous), then P by column panels of R_inv (gathered into a
 * dim x k panel). Host loops over backend memory (bf16: host-addressable). */
static strata_status precondition_bf16(strata_shampoo_state *s, const shampoo_block *b,
                                       const float *mb, int ld, float *pb)
{
    const unsigned char *li = (const unsigned char *)b->L_inv;
    const int r = b->rows, q = b->cols;
    const int kr = optim_bf16_panel_rows(r);
    for (int i = 0; i < r; i += kr) {
        const int kk = r - i < kr ? r - i : kr;
        optim_bf16_widen_n(s->wide, li + (size_t)i * r * 2, (size_t)kk * r);
        strata_status st = strata_backend_sgemm(s->be, 0, 0, kk, q, r, 1.0f, s->wide, r, mb, ld,
                                                0.0f, s->tmp + (size_t)i * q, q);
        if (st != STRATA_OK)
            return st;
    }
    const unsigned char *ri = (const unsigned char *)b->R_inv;
    const int kc = optim_bf16_panel_rows(q);
    for (int j = 0; j < q; j += kc) {
        const int kk = q - j < kc ? q - j : kc;
        for (int p = 0; p < q; p++)
            optim_bf16_widen_n(s->wide + (size_t)p * kk, ri + ((size_t)p * q + j) * 2,
                               (size_t)kk);
        strata_status st = strata_backend_sgemm(s->be, 0, 0, r, kk, q, 1.0f, s->tmp, q, s->wide,
                                                kk, 0.0f, pb + j, ld);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

static strata_status apply(strata_shampoo_state *s, float lr_scale, int64_t t, float *w,
                           const float *g, strata_optim_counters *cnt)
{
    if (!s->dir) /* a runtime-driven state before set_step_scratch */
        return strata_error(STRATA_ERR_STATE, "shampoo: the step scratch is not set");
    double t0 = strata_now_seconds();
    const strata_shampoo_config *c = &s->cfg;
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    const int64_t ld = s->cols;

    /* Filtered gradient M_hat (Distributed Shampoo's betas[0], bias-corrected);
     * without filtering (beta1 = 0) M_hat is g itself, read in place. */
    strata_status st = STRATA_OK;
    const float *m_hat = g;
    if (s->filtered) {
        const float b1 = c->beta1;
        const float inv_bc = (float)(1.0 / (1.0 - pow((double)b1, (double)t)));
        st = strata_backend_ema(s->be, NULL, n, s->filtered, g, b1, s->m_hat, inv_bc);
        m_hat = s->m_hat;
    }
    if (st != STRATA_OK)
        return st;

    /* Grafting direction D (its state absorbs the raw gradient); AdaGrad is
     * the op with beta = alpha = bc_sqrt = 1 (exact). */
    if (c->grafting == STRATA_GRAFT_ADAM) {
        const float bg = c->grafting_beta2;
        const float bc_sqrt = (float)sqrt(1.0 - pow((double)bg, (double)t));
        st = strata_backend_graft(s->be, NULL, n, s->graft, g, m_hat, s->dir, bg, 1.0f - bg,
                                  bc_sqrt, c->grafting_epsilon);
    } else if (c->grafting == STRATA_GRAFT_ADAGRAD) {
        st = strata_backend_graft(s->be, NULL, n, s->graft, g, m_hat, s->dir, 1.0f, 1.0f, 1.0f,
                                  c->grafting_epsilon);
    } else {
        st = strata_backend_copy(s->be, s->dir, m_hat, n * sizeof(float));
    }
    if (st != STRATA_OK)
        return st;

    /* Preconditioned direction per block, rescaled to the grafting norm. A
     * block whose direction is not finite (huge roots, a tiny epsilon) stops
     * the update before momentum and weights change. */
    bool finite_dir = true;
    for (int i = 0; i < s->nblocks && finite_dir; i++) {
        shampoo_block *b = &s->blocks[i];
        float *pb = s->pre + b->r0 * ld + b->c0;
        const float *db = s->dir + b->r0 * ld + b->c0;
        const bool ready = b->has_root[0] && b->has_root[1] &&
                           t >= start_step(c) + c->refresh_offset;
        if (!ready) {
            st = strata_backend_copy_2d(s->be, NULL, b->rows, b->cols, pb, ld, db, ld);
            if (st != STRATA_OK)
                return st;
            continue;
        }
        const float *mb = m_hat + b->r0 * ld + b->c0;
        if (c->root_dtype == STRATA_STATE_BF16)
            st = precondition_bf16(s, b, mb, (int)ld, pb);
        else {
            st = strata_backend_sgemm(s->be, 0, 0, b->rows, b->cols, b->rows, 1.0f, b->L_inv,
                                      b->rows, mb, (int)ld, 0.0f, s->tmp, b->cols);
            if (st == STRATA_OK)
                st = strata_backend_sgemm(s->be, 0, 0, b->rows, b->cols, b->cols, 1.0f, s->tmp,
                                          b->cols, b->R_inv, b->cols, 0.0f, pb, (int)ld);
        }
        if (st != STRATA_OK)
            return st;
        if (c->grafting != STRATA_GRAFT_NONE) {
            double pn = 0.0, dn = 0.0;
            st = strata_backend_frob_norm(s->be, NULL, b->rows, b->cols, pb, ld, &pn);
            if (st == STRATA_OK)
                st = strata_backend_frob_norm(s->be, NULL, b->rows, b->cols, db, ld, &dn);
            finite_dir = isfinite(pn) && isfinite(dn);
            const float scale = pn > 0.0 ? (float)(dn / pn) : 0.0f;
            if (st == STRATA_OK && finite_dir)
                st = strata_backend_scale_2d(s->be, NULL, b->rows, b->cols, pb, ld, scale);
            if (st != STRATA_OK)
                return st;
        } else {
            double pn = 0.0;
            st = strata_backend_frob_norm(s->be, NULL, b->rows, b->cols, pb, ld, &pn);
            if (st != STRATA_OK)
                return st;
            finite_dir = isfinite(pn);
        }
    }
    if (!finite_dir) {
        if (cnt)
            cnt->nonfinite_directions++;
        return strata_error(STRATA_ERR_NONFINITE,
                            "shampoo: step %lld: non-finite preconditioned direction (weights "
                            "and momentum kept)",
                            (long long)t);
    }

    /* Momentum, then decoupled weight decay and the update. */
    const float lr = c->lr * lr_scale;
    const float decay = lr * c->weight_decay;
    if (s->mom)
        st = strata_backend_momentum(s->be, NULL, n, s->mom, s->pre, s->pre, c->momentum, 1.0f,
                                     c->nesterov);
    if (st == STRATA_OK)
        st = strata_backend_apply_update(s->be, NULL, n, w, s->pre, lr, decay,
                                         STRATA_APPLY_STEP_DECAY);
    if (st != STRATA_OK)
        return st;
    if (cnt)
        cnt->seconds_precondition += strata_now_seconds() - t0;
    return STRATA_OK;
}

strata_status strata_shampoo_step(strata_shampoo_state *s, float lr_scale, int64_t t, float *w,
                                  const float *g, strata_optim_counters *cnt)
{
    strata_status st_args = optim_check_step("shampoo_step", s, w, g, t);
    if (st_args == STRATA_OK)
        st_args = optim_check_lr_scale("shampoo_step", lr_scale);
    if (st_args != STRATA_OK)
        return st_args;
    /* One scan up front: once the factors absorbed g, apply must not refuse
     * it; a gradient the state cannot absorb skips the step. */
    strata_status st = decide(s, g, cnt, "shampoo_step");
    if (st == STRATA_OK && s->skip) {
        s->skip = false;
        return STRATA_OK;
    }
    if (st == STRATA_OK)
        st = update_factors(s, g, cnt);
    if (st == STRATA_OK && strata_shampoo_is_refresh_step(&s->cfg, t))
        st = strata_shampoo_compute_roots(s, cnt);
    if (st == STRATA_OK)
        st = apply(s, lr_scale, t, w, g, cnt);
    return st;
}

/* ------------------------------------------------ preconditioner family */

/* Inverse-root cost of one parameter: sum of n^3 over the factors of its
 * blocks (the eigendecomposition's order). Only compared with other
 * parameters' costs. */
static double fam_refresh_cost(const void *cfg, const strata_precond_shape *sh)
{
    const strata_shampoo_config *c = cfg;
    const int64_t rows = sh->rows, cols = sh->cols;
    const int64_t B = c->max_preconditioner_dim > 0 ? c->max_preconditioner_dim
                                                     : (rows > cols ? rows : cols);
    const int64_t nr = (rows + B - 1) / B, nc = (cols + B - 1) / B;
    double cost = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
        double r = (double)(rows - r0 < B ? rows - r0 : B);
        cost += (double)nc * r * r * r;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
        double k = (double)(cols - c0 < B ? cols - c0 : B);
        cost += (double)nr * k * k * k;
    }
    return cost;
}

static bool fam_true(const void *cfg)
{
    (void)cfg;
    return true;
}

static void fam_schedule(const void *cfg, strata_precond_schedule *out)
{
    const strata_shampoo_config *c = cfg;
    *out = (strata_precond_schedule){.frequency = c->precondition_frequency,
                                     .start = start_step(c), .lag = 0,
                                     .offset = c->refresh_offset, .max_staleness = -1};
}

static strata_status fam_with_offset(const void *cfg, int offset, void *out)
{
    strata_shampoo_config *c = out;
    *c = *(const strata_shampoo_config *)cfg;
    c->refresh_offset = offset;
    return STRATA_OK;
}

static strata_status fam_create(const void *cfg, strata_backend *be,
                                const strata_precond_shape *sh, bool external, void **out)
{
    if (sh->batch > 1)
        return strata_error(STRATA_ERR_UNSUPPORTED,
                            "shampoo: a stacked parameter (%lld matrices) is not supported; "
                            "route it to muon or register it unstacked",
                            (long long)sh->batch);
    return strata_shampoo_state_create_ex(cfg, be, sh->rows, sh->cols, external,
                                          (strata_shampoo_state **)out);
}

static void fam_destroy(void *s)
{
    strata_shampoo_state_destroy(s);
}

static size_t fam_bytes(const void *s)
{
    return strata_shampoo_state_bytes(s);
}

static int fam_n_blocks(const void *s)
{
    return strata_shampoo_state_blocks(s);
}

/* Slot: [L | R] (rows^2 + cols^2 elements of the root dtype), the roots in
 * place; parts L, R. With root_method WARM_QR, then (64-byte aligned) the
 * aux range [Q_L (rows^2 floats) | Q_R (cols^2 floats) | have_L, have_R
 * (floats 0 or 1)]: the bases the refresh continues from and writes
 * (warm_basis). Floats throughout, so that HSDP ships it as float32 words;
 * the tail a checkpoint of the older [L | R] layout lacks is all of it. */
static strata_precond_block slot_layout(const strata_shampoo_config *c, size_t r, size_t q)
{
    const size_t res = optim_state_elem(c->root_dtype);
    const size_t nl = r * r * res, nr = q * q * res;
    strata_precond_block out = {
        .slot_bytes = nl + nr,
        .max_dim = (int)(r > q ? r : q),
        .n_parts = 2,
        .part_offset = {0, nl},
        .part_bytes = {nl, nr},
    };
    if (STRATA_ROOT_METHOD_WARM(c->root_method)) {
        out.aux_offset = (nl + nr + 63) / 64 * 64;
        out.aux_bytes = (r * r + q * q + 2) * sizeof(float);
        out.slot_bytes = out.aux_offset + out.aux_bytes;
        out.tail_bytes = out.slot_bytes - (nl + nr);
    }
    return out;
}

/* The warm-qr bases of a slot of block blk (slot_layout's aux range):
 * q[0], q[1] and the two flags after them. */
static float *slot_warm(const strata_shampoo_state *s, const shampoo_block *blk,
                        const void *slot)
{
    const strata_precond_block l = slot_layout(&s->cfg, (size_t)blk->rows, (size_t)blk->cols);
    return (float *)(void *)((const unsigned char *)slot + l.aux_offset);
}

/* The sizes create_ex(external_roots = true) allocates and charges (its
 * carve, padding included), without a state. */
static int fam_plan(const void *cfg, const strata_precond_shape *sh, strata_precond_plan *out,
                    strata_precond_block *blocks, int cap)
{
    const strata_shampoo_config *c = cfg;
    memset(out, 0, sizeof *out);
    const int64_t rows = sh->rows, cols = sh->cols, d = c->max_preconditioner_dim;
    const int64_t nbr = (rows + d - 1) / d, nbc = (cols + d - 1) / d;
    const size_t n = (size_t)rows * (size_t)cols;
    const strata_state_dtype fd = c->factor_dtype, rd = c->root_dtype;
    size_t factors = 0, factor_floats = 0, tmp = 0, maxdim = 1;
    int nb = 0;
    for (int64_t bi = 0; bi < nbr; bi++)
        for (int64_t bj = 0; bj < nbc; bj++) {
            const size_t r = (size_t)((rows - bi * d) < d ? rows - bi * d : d);
            const size_t q = (size_t)((cols - bj * d) < d ? cols - bj * d : d);
            factors += (r * r + q * q) * optim_state_elem(fd);
            factor_floats += optim_state_floats(fd, r * r) + optim_state_floats(fd, q * q);
            tmp = r * q > tmp ? r * q : tmp;
            maxdim = r > maxdim ? r : maxdim;
            maxdim = q > maxdim ? q : maxdim;
            if (blocks && nb < cap)
                blocks[nb] = slot_layout(c, r, q);
            if (STRATA_ROOT_METHOD_WARM(c->root_method)) /* the installed bases (host) */
                out->host[STRATA_LEDGER_ROOTS] += (r * r + q * q) * sizeof(float);
            nb++;
        }
    const bool need_m = c->beta1 > 0.0f, need_a = c->grafting != STRATA_GRAFT_NONE,
               need_b = c->momentum > 0.0f;
    const bool any_bf16 = fd == STRATA_STATE_BF16 || rd == STRATA_STATE_BF16;
    const size_t floats = factor_floats +
                          n * ((size_t)need_m + (size_t)need_a + (size_t)need_b) +
                          (any_bf16 ? optim_bf16_panel_floats((int)maxdim) : 0) +
                          16 * (size_t)(4 * nb + 5);
    out->step_scratch = (3 * ((n + 15) / 16 * 16) + (tmp + 15) / 16 * 16) * sizeof(float);
    out->device[STRATA_LEDGER_FACTORS] = factors;
    out->device[STRATA_LEDGER_GRAFTING] = need_a ? n * sizeof(float) : 0;
    out->device[STRATA_LEDGER_MOMENTS] = ((size_t)need_m + (size_t)need_b) * n * sizeof(float);
    out->device[STRATA_LEDGER_WORKSPACE] = floats * sizeof(float) - factors -
                                           out->device[STRATA_LEDGER_GRAFTING] -
                                           out->device[STRATA_LEDGER_MOMENTS];
    return nb;
}

static size_t fam_step_scratch(const void *state)
{
    const strata_shampoo_state *s = state;
    return s->external_roots ? s->scratch_bytes : 0;
}

static void fam_set_step_scratch(void *state, void *buf)
{
    strata_shampoo_state *s = state;
    if (!s->external_roots)
        return;
    float *p = buf;
    const size_t n = (size_t)s->rows * (size_t)s->cols;
    size_t tmp_floats = 0;
    for (int i = 0; i < s->nblocks; i++) {
        const size_t f = (size_t)s->blocks[i].rows * s->blocks[i].cols;
        tmp_floats = f > tmp_floats ? f : tmp_floats;
    }
    s->m_hat = optim_carve(&p, n);
    s->dir = optim_carve(&p, n);
    s->pre = optim_carve(&p, n);
    s->tmp = optim_carve(&p, tmp_floats);
}

static void fam_block(const void *state, int b, strata_precond_block *out)
{
    const strata_shampoo_state *s = state;
    const shampoo_block *blk = &s->blocks[b];
    *out = slot_layout(&s->cfg, (size_t)blk->rows, (size_t)blk->cols);
}

static strata_status fam_before(void *state, float lr_scale, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt, bool *done)
{
    (void)lr_scale;
    (void)t;
    (void)w;
    strata_shampoo_state *s = state;
    *done = false;
    strata_status st = decide(s, g, cnt, "shampoo_step");
    if (st != STRATA_OK || s->skip)
        return st; /* skipped: the refresh schedule runs on, apply does nothing */
    return update_factors(s, g, cnt);
}

/* The slot holds the factors in the root dtype (fam_block): copied as
 * stored, or converted (host loops: bf16 runs on host-addressable backends
 * only). */
static strata_status snapshot_part(const strata_shampoo_state *s, unsigned char *dst,
                                   const float *fac, size_t ne)
{
    const strata_state_dtype fd = s->cfg.factor_dtype, rd = s->cfg.root_dtype;
    if (fd == rd)
        return strata_backend_copy(s->be, dst, fac, ne * optim_state_elem(fd));
    if (rd == STRATA_STATE_BF16)
        optim_bf16_round_n(dst, fac, ne);
    else
        optim_bf16_widen_n((float *)(void *)dst, fac, ne);
    return STRATA_OK;
}

/* WARM_QR: the installed bases (host) into the slot's aux range, the base
 * of this refresh (warm_basis). */
static void snapshot_warm(const strata_shampoo_state *s, int b, void *slot)
{
    const shampoo_block *blk = &s->blocks[b];
    const warm_basis *wb = &s->warm[b];
    float *q = slot_warm(s, blk, slot);
    const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
    memcpy(q, wb->q[0], nl * sizeof(float));
    memcpy(q + nl, wb->q[1], nr * sizeof(float));
    q[nl + nr] = wb->have[0] ? 1.0f : 0.0f;
    q[nl + nr + 1] = wb->have[1] ? 1.0f : 0.0f;
}

/* The factors, and (base, WARM_QR) the installed bases. */
static strata_status snapshot_into(const strata_shampoo_state *s, int b, void *slot, bool base)
{
    const shampoo_block *blk = &s->blocks[b];
    const size_t nl = (size_t)blk->rows * blk->rows;
    unsigned char *dst = slot;
    strata_status st = snapshot_part(s, dst, blk->L, nl);
    if (st == STRATA_OK)
        st = snapshot_part(s, dst + nl * optim_state_elem(s->cfg.root_dtype), blk->R,
                           (size_t)blk->cols * blk->cols);
    if (st == STRATA_OK && base && s->warm)
        snapshot_warm(s, b, slot);
    return st;
}

static strata_status fam_snapshot(const void *state, int b, void *slot)
{
    return snapshot_into(state, b, slot, true);
}

/* Chained (precond.h; WARM_QR only): the base comes from the chain head. */
static strata_status fam_snapshot_chained(const void *state, int b, void *slot)
{
    return snapshot_into(state, b, slot, false);
}

/* fam_snapshot's copies, queued on stream `st` (device factors -> host slot). */
static strata_status fam_snapshot_async(const void *state, int b, void *slot, strata_stream *st)
{
    const strata_shampoo_state *s = state;
    if (s->cfg.factor_dtype != s->cfg.root_dtype)
        return fam_snapshot(state, b, slot); /* a conversion: host-addressable memory */
    const shampoo_block *blk = &s->blocks[b];
    const size_t e = optim_state_elem(s->cfg.root_dtype);
    const size_t nl = (size_t)blk->rows * blk->rows;
    unsigned char *dst = slot;
    strata_status r =
        strata_backend_copy_async(s->be, dst, blk->L, nl * e, STRATA_COPY_D2H, st);
    if (r == STRATA_OK)
        r = strata_backend_copy_async(s->be, dst + nl * e, blk->R,
                                      (size_t)blk->cols * blk->cols * e, STRATA_COPY_D2H, st);
    if (r == STRATA_OK && s->warm) /* host to host, now: install changes them, not the stream */
        snapshot_warm(s, b, slot);
    return r;
}

/* Doubles of a float32 n x n stage, rounded up to 64 bytes. */
static size_t stage_doubles(int n)
{
    return ((size_t)n * n / 2 + 1 + 7) / 8 * 8;
}

/* Factor f's root in a refresh: WARM_QR continues from the slot's basis
 * (`q`, slot_warm; NULL otherwise) and leaves the new one there. */
static strata_status slot_factor_root(const strata_shampoo_state *s, const shampoo_block *blk,
                                      float *q, int f, const float *a, float *out,
                                      double *work, int *iwork, strata_optim_counters *cnt)
{
    const int n = f == 0 ? blk->rows : blk->cols;
    if (!q) /* eigh, newton, auto; newton_f32 on the backend */
        return block_factor_root(s, (int)(blk - s->blocks), f, n, a, out, work, iwork, cnt);
    const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
    float *basis = f == 0 ? q : q + nl, *flag = q + nl + nr + f;
    bool have = *flag != 0.0f;
    const strata_status st =
        factor_root_warm(&s->cfg, f, n, a, out, work, iwork, cnt, basis, &have);
    *flag = have ? 1.0f : 0.0f;
    return st;
}

static strata_status fam_refresh(const void *state, int b, void *slot, double *work, int *iwork,
                                 unsigned *failed, strata_optim_counters *cnt)
{
    const strata_shampoo_state *s = state;
    const shampoo_block *blk = &s->blocks[b];
    float *q = s->warm ? slot_warm(s, blk, slot) : NULL;
    strata_status sl, sr;
    if (s->cfg.root_dtype == STRATA_STATE_BF16) {
        /* A bfloat16 slot: each part widened into the float32 stage at the
         * start of work (fam_work_doubles), its root rounded back. */
        const int md = blk->rows > blk->cols ? blk->rows : blk->cols;
        float *stage = (float *)(void *)work;
        double *w2 = work + stage_doubles(md);
        unsigned char *part = slot;
        strata_status r[2];
        for (int f = 0; f < 2; f++) {
            const int dim = f == 0 ? blk->rows : blk->cols;
            const size_t ne = (size_t)dim * dim;
            optim_bf16_widen_n(stage, part, ne);
            r[f] = slot_factor_root(s, blk, q, f, stage, stage, w2, iwork, cnt);
            if (r[f] == STRATA_OK)
                optim_bf16_round_n(part, stage, ne);
            part += ne * 2;
        }
        sl = r[0];
        sr = r[1];
    } else {
        float *L = slot, *R = L + (size_t)blk->rows * blk->rows;
        sl = slot_factor_root(s, blk, q, 0, L, L, work, iwork, cnt);
        sr = slot_factor_root(s, blk, q, 1, R, R, work, iwork, cnt);
    }
    *failed = (sl != STRATA_OK ? 1u : 0u) | (sr != STRATA_OK ? 2u : 0u);
    if (sl != STRATA_OK && sr != STRATA_OK)
        return strata_error(STRATA_ERR_LINALG, "shampoo: both inverse roots of block %d failed", b);
    return STRATA_OK;
}

/* Chained refreshes (precond.h; WARM_QR states only, fam_chains): the base
 * is the slot's aux range (the bases and their flags); the next base is
 * what this refresh left there, failed parts included (a failed warm root
 * leaves the basis it started from, a failed dsyevd root clears its flag),
 * as install keeps it. */
static void fam_chain_in(const void *state, int b, void *slot, const void *head)
{
    const strata_shampoo_state *s = state;
    const shampoo_block *blk = &s->blocks[b];
    const strata_precond_block l = slot_layout(&s->cfg, (size_t)blk->rows, (size_t)blk->cols);
    memcpy(slot_warm(s, blk, slot), slot_warm(s, blk, head), l.aux_bytes);
}

static void fam_chain_out(const void *state, int b, const void *slot, unsigned failed,
                          void *head)
{
    (void)failed;
    const strata_shampoo_state *s = state;
    const shampoo_block *blk = &s->blocks[b];
    const strata_precond_block l = slot_layout(&s->cfg, (size_t)blk->rows, (size_t)blk->cols);
    memcpy(slot_warm(s, blk, head), slot_warm(s, blk, slot), l.aux_bytes);
}

/* Only warm-qr roots continue the refresh before them. */
static bool fam_chains(const void *state)
{
    return ((const strata_shampoo_state *)state)->warm != NULL;
}

static size_t fam_work_doubles(int n)
{
    /* The table's slot cannot see the configuration: every configuration
     * gets the bfloat16 refresh's float32 stage (stage_doubles). */
    return stage_doubles(n) + strata_inv_root_work_doubles(n);
}

static size_t fam_work_ints(int n)
{
    return strata_inv_root_work_ints(n);
}

/* External roots are lent (the slot stays until the next install); own roots
 * are copied into the state's buffers (a failed part keeps the old root). */
static strata_status fam_install(void *state, int b, const void *slot, unsigned failed,
                                 unsigned have)
{
    strata_shampoo_state *s = state;
    shampoo_block *blk = &s->blocks[b];
    const size_t res = optim_state_elem(s->cfg.root_dtype);
    const float *L = slot;
    const float *R = (const float *)(const void *)((const unsigned char *)slot +
                                                   (size_t)blk->rows * blk->rows * res);
    strata_status st = STRATA_OK;
    if (s->warm && s->lend_warm) {
        /* The bases this result left, pointed at (warm_basis: lent; the slot
         * is host memory that stays put until the next install). */
        const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
        float *q = slot_warm(s, blk, (void *)(uintptr_t)slot);
        s->warm[b].q[0] = q;
        s->warm[b].q[1] = q + nl;
        s->warm[b].have[0] = q[nl + nr] != 0.0f;
        s->warm[b].have[1] = q[nl + nr + 1] != 0.0f;
    } else if (s->warm) {
        /* The bases this result left (warm_basis), failed parts included;
         * `slot` may be device memory (install_device): backend copies. */
        const size_t nl = (size_t)blk->rows * blk->rows, nr = (size_t)blk->cols * blk->cols;
        const float *q = slot_warm(s, blk, slot);
        float flag[2] = {0.0f, 0.0f};
        warm_unlend(s, b);
        st = strata_backend_copy(s->be, s->warm[b].q[0], q, nl * sizeof(float));
        if (st == STRATA_OK)
            st = strata_backend_copy(s->be, s->warm[b].q[1], q + nl, nr * sizeof(float));
        if (st == STRATA_OK)
            st = strata_backend_copy(s->be, flag, q + nl + nr, sizeof flag);
        if (st != STRATA_OK)
            return st;
        s->warm[b].have[0] = flag[0] != 0.0f;
        s->warm[b].have[1] = flag[1] != 0.0f;
    }
    if (s->external_roots)
        return strata_shampoo_block_set_roots(s, b, (have & 1u) ? L : NULL,
                                              (have & 2u) ? R : NULL);
    if (!(failed & 1u)) {
        st = strata_backend_copy(s->be, blk->L_inv_own, L, (size_t)blk->rows * blk->rows * res);
        blk->has_root[0] = st == STRATA_OK;
    }
    if (st == STRATA_OK && !(failed & 2u)) {
        st = strata_backend_copy(s->be, blk->R_inv_own, R, (size_t)blk->cols * blk->cols * res);
        blk->has_root[1] = st == STRATA_OK;
    }
    return st;
}

/* The installed roots moved (precond.h `rebind`: streamed nvme residency):
 * lent roots point at their new home; own roots were copied at install. */
static strata_status fam_rebind(void *state, int b, const void *slot, unsigned have)
{
    strata_shampoo_state *s = state;
    if (!s->external_roots)
        return STRATA_OK;
    const shampoo_block *blk = &s->blocks[b];
    const float *L = slot;
    const float *R = (const float *)(const void *)((const unsigned char *)slot +
                                                   (size_t)blk->rows * blk->rows *
                                                       optim_state_elem(s->cfg.root_dtype));
    return strata_shampoo_block_set_roots(s, b, (have & 1u) ? L : NULL, (have & 2u) ? R : NULL);
}

/* The stale-root correction (precond.h `correct`; optim/phases.h
 * strata_inv_root_correct): one Newton step of each installed inverse root
 * toward the root of its current factor L + epsilon I (R likewise). A root
 * is left alone (its bit not set) when the step cannot apply: its exponent
 * is not 1/4 or 1/2 (an override), the pseudo-inverse mode or a relative
 * epsilon (whose eps_eff needs lambda_max, which only the refresh knows),
 * no root yet, or the Newton step did not shrink the measured residual. */
static strata_status fam_correct(void *state, int b, void *res, unsigned have, float *work,
                                 unsigned *parts)
{
    strata_shampoo_state *s = state;
    shampoo_block *blk = &s->blocks[b];
    *parts = 0;
    if (s->cfg.use_pseudo_inverse || s->cfg.epsilon_rel != 0.0f)
        return STRATA_OK;
    /* Lent roots are the installed result itself; own roots were copied from it. */
    float *root[2] = {res, (float *)res + (size_t)blk->rows * blk->rows};
    if (!s->external_roots) {
        root[0] = blk->L_inv_own;
        root[1] = blk->R_inv_own;
    }
    const float *factor[2] = {blk->L, blk->R};
    const int dim[2] = {blk->rows, blk->cols};
    for (int f = 0; f < 2; f++) {
        const double e = root_exponent(&s->cfg, f);
        const int p = e == 0.25 ? 4 : e == 0.5 ? 2 : 0;
        if (!p || !(have & (1u << f)) || !blk->has_root[f])
            continue;
        strata_status st = strata_inv_root_correct(s->be, dim[f], p, factor[f], s->cfg.epsilon,
                                                   root[f], work, NULL, NULL);
        if (st == STRATA_OK)
            *parts |= 1u << f;
        else if (st != STRATA_ERR_LINALG)
            return st;
    }
    return STRATA_OK;
}

static size_t fam_correct_work_floats(int n)
{
    return strata_inv_root_correct_work_floats(n);
}

static strata_status fam_apply(void *state, float lr_scale, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    strata_shampoo_state *s = state;
    strata_status st = optim_check_step("shampoo_step", state, w, g, t);
    if (st != STRATA_OK)
        return st;
    if (s->skip) {
        s->skip = false;
        return STRATA_OK;
    }
    const int64_t n0 = cnt ? cnt->nonfinite_directions : 0;
    return optim_direction_skipped(apply(s, lr_scale, t, w, g, cnt), n0, cnt);
}

static size_t fam_page_range(const void *state, void **data,
                             uint64_t kind_bytes[STRATA_LEDGER_KINDS])
{
    const strata_shampoo_state *s = state;
    return optim_page_range(&s->held, s->mem, s->mem_bytes, data, kind_bytes);
}

static int fam_tensors(const void *state, strata_tensor_info *out, int cap)
{
    const strata_shampoo_state *s = state;
    int n = 0;
    for (int b = 0; out && s->warm && b < s->nblocks; b++)
        warm_unlend(s, b); /* a checkpoint reads or writes the state's own bases */
#define PUT_AS(name, idx, dt, r, c, where, ptr)                                                \
    do {                                                                                       \
        if (out && n < cap)                                                                    \
            strata_tensor_info_set(&out[n], name, idx, dt, r, c, where, (void *)(ptr));        \
        n++;                                                                                   \
    } while (0)
#define PUT(name, idx, r, c, ptr) PUT_AS(name, idx, STRATA_F32, r, c, STRATA_TIER_DEVICE, ptr)
    for (int b = 0; b < s->nblocks; b++) {
        const shampoo_block *blk = &s->blocks[b];
        const strata_dtype fdt = s->cfg.factor_dtype == STRATA_STATE_BF16 ? STRATA_BF16
                                                                              : STRATA_F32;
        const strata_dtype rdt = s->cfg.root_dtype == STRATA_STATE_BF16 ? STRATA_BF16
                                                                          : STRATA_F32;
        PUT_AS("L", b, fdt, blk->rows, blk->rows, STRATA_TIER_DEVICE, blk->L);
        PUT_AS("R", b, fdt, blk->cols, blk->cols, STRATA_TIER_DEVICE, blk->R);
        if (!s->external_roots) {
            PUT_AS("L_inv", b, rdt, blk->rows, blk->rows, STRATA_TIER_DEVICE, blk->L_inv_own);
            PUT_AS("R_inv", b, rdt, blk->cols, blk->cols, STRATA_TIER_DEVICE, blk->R_inv_own);
        }
        PUT_AS("has_root", b, STRATA_BOOL, 1, 2, STRATA_TIER_HOST, blk->has_root);
        if (s->warm) { /* root_method WARM_QR: the previous eigenbases (warm_basis) */
            const int n0 = n;
            PUT_AS("warm_basis_L", b, STRATA_F32, blk->rows, blk->rows, STRATA_TIER_HOST,
                   s->warm[b].q[0]);
            PUT_AS("warm_basis_R", b, STRATA_F32, blk->cols, blk->cols, STRATA_TIER_HOST,
                   s->warm[b].q[1]);
            PUT_AS("has_warm_basis", b, STRATA_BOOL, 1, 2, STRATA_TIER_HOST, s->warm[b].have);
            for (int k = n0; out && k < n && k < cap; k++)
                out[k].optional = true; /* absent: zeros, have = false */
        }
    }
    if (s->filtered)
        PUT("filtered", -1, s->rows, s->cols, s->filtered);
    if (s->graft)
        PUT("graft", -1, s->rows, s->cols, s->graft);
    if (s->mom)
        PUT("momentum", -1, s->rows, s->cols, s->mom);
#undef PUT
#undef PUT_AS
    return n;
}

/* A warm_qr run's checkpoint resumed under another root method: refused
 * (as SOAP refuses the other form's moment), not silently dropped, so
 * that the switch is the user's choice. Block 0 always exists, so its
 * flags' name stands for the bases. */
static const char *const fam_retired_warm[] = {
    "has_warm_basis.0",
    "it holds root_method = warm_qr's (or warm_qr_f32's) eigenbases (a run with --root-method "
    "warm-qr or warm-qr-f32); this run computes its roots with a root method that keeps none: "
    "resume with --root-method warm-qr or warm-qr-f32, or restart the run",
    NULL};

static const char *const *fam_retired(const void *state)
{
    return ((const strata_shampoo_state *)state)->warm ? NULL : fam_retired_warm;
}

static void fam_config_default(void *cfg)
{
    strata_shampoo_config_default(cfg);
}

static strata_status fam_config_check(const void *cfg)
{
    return strata_shampoo_config_check(cfg);
}

/* epsilon = epsilon_rel = 0 without the pseudo-inverse: a zero eigenvalue
 * has no inverse root. */
static bool fam_failure_hint(const void *cfg, char *buf, size_t cap)
{
    const strata_shampoo_config *c = cfg;
    if (c->use_pseudo_inverse || c->epsilon != 0.0f || c->epsilon_rel != 0.0f)
        return false;
    snprintf(buf, cap, "shampoo.epsilon = shampoo.epsilon_rel = 0, so a factor with a zero "
                       "eigenvalue (a rank-deficient gradient history: the first steps, or a "
                       "block wider than the data behind it) has no inverse root "
                       "((0 + 0)^(-1/4)); set epsilon > 0 (default 1e-12), epsilon_rel > 0 or "
                       "use_pseudo_inverse");
    return true;
}

static void fam_set_hyper(void *state, float lr, float weight_decay)
{
    strata_shampoo_state *s = state;
    s->cfg.lr = lr;
    s->cfg.weight_decay = weight_decay;
}

/* The factor EMA, and Adam grafting's second moment. */
/* newton_f32's roots run on the backend, warm_qr_f32's in float32: costs of their own
 * (precond.h). */
static const char *fam_cost_variant(const void *cfg)
{
    /* The warm-qr forms: their warm step, not an eigh root (plan/costmodel.c
     * times a chained variant's second refresh); warm-qr-f32's costs about
     * 0.5x warm-qr's (float32 BLAS). */
    const strata_root_method m = ((const strata_shampoo_config *)cfg)->root_method;
    return m == STRATA_ROOT_NEWTON_F32    ? "newton-f32"
           : m == STRATA_ROOT_WARM_QR_F32 ? "warm-qr-f32"
           : m == STRATA_ROOT_WARM_QR     ? "warm-qr"
                                          : "";
}

static double fam_ema_horizon(const void *cfg)
{
    const strata_shampoo_config *c = cfg;
    return fmax(strata_ema_horizon(c->beta2),
                c->grafting == STRATA_GRAFT_ADAM ? strata_ema_horizon(c->grafting_beta2) : 0.0);
}

const strata_precond_family strata_family_shampoo = {
    .name = "shampoo",
    .refresh_noun = "inverse roots",
    .has_refresh = fam_true,
    .async_capable = fam_true,
    .schedule = fam_schedule,
    .refresh_cost = fam_refresh_cost,
    .with_offset = fam_with_offset,
    .cfg_size = sizeof(strata_shampoo_config),
    .config_default = fam_config_default,
    .config_check = fam_config_check,
    .lr_offset = offsetof(strata_shampoo_config, lr),
    .has_frequency = true,
    .frequency_offset = offsetof(strata_shampoo_config, precondition_frequency),
    .weight_decay_offset = offsetof(strata_shampoo_config, weight_decay),
    .state_per_param = 8,
    .failure_hint = fam_failure_hint,
    .ema_horizon = fam_ema_horizon,
    .cost_variant = fam_cost_variant,
    .has_state_dtype = {[STRATA_STATE_KIND_FACTORS] = true, [STRATA_STATE_KIND_ROOTS] = true},
    .state_dtype_offset = {[STRATA_STATE_KIND_FACTORS] = offsetof(strata_shampoo_config,
                                                                  factor_dtype),
                           [STRATA_STATE_KIND_ROOTS] = offsetof(strata_shampoo_config,
                                                                root_dtype)},
    .create = fam_create,
    .destroy = fam_destroy,
    .bytes = fam_bytes,
    .plan = fam_plan,
    .step_scratch = fam_step_scratch,
    .set_step_scratch = fam_set_step_scratch,
    .n_blocks = fam_n_blocks,
    .block = fam_block,
    .before = fam_before,
    .snapshot = fam_snapshot,
    .snapshot_async = fam_snapshot_async,
    .refresh = fam_refresh,
    .chain_in = fam_chain_in,
    .chain_out = fam_chain_out,
    .chains = fam_chains,
    .snapshot_chained = fam_snapshot_chained,
    .refresh_work_doubles = fam_work_doubles,
    .refresh_work_ints = fam_work_ints,
    .install = fam_install,
    .lend_results = fam_lend_results,
    .install_device = true, /* lends the roots to products, or copies them with the backend */
    .rebind = fam_rebind,
    .correct = fam_correct,
    .correct_work_floats = fam_correct_work_floats,
    .apply = fam_apply,
    .set_hyper = fam_set_hyper,
    .after = NULL,
    .tensors = fam_tensors,
    .retired_tensors = fam_retired,
    .page_range = fam_page_range,
};
