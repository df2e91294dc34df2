/* No optimizer dereferences backend memory on the host (issue #8 item 5).
 *
 * A "guard" backend whose device memory the host cannot touch: every DEVICE
 * allocation is its own mmap'ed range kept PROT_NONE, opened (PROT_READ |
 * PROT_WRITE) only while one of the backend's own slots runs, under one
 * lock. The slots are the CPU backend's: products and copies forward to a
 * real CPU backend, the elementwise ops are the plain C references
 * (backend/ops_ref.c). A host load or store of backend memory anywhere else
 * (a loop in optim/, a memcpy, LAPACK on a factor) faults; the SIGSEGV
 * handler names the address and fails the test.
 *
 * Every optimizer's one-tensor step (and AdamW's family apply) then runs a
 * few steps, refreshes and a refused non-finite gradient included, with its
 * state, weights and gradient in guarded memory, and the weights must come
 * out bit-identical to the same run on the plain CPU backend; so must every
 * family driven as the refresh engine drives it (snapshot into a host slot,
 * refresh, install, apply) with a refresh every step. Host memory
 * kinds (HOST, HOST_PINNED, MANAGED) stay ordinary memory: the host tier may
 * be read by the host. Batched Newton-Schulz runs with one thread (an op in
 * flight on one thread would open the memory for another). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/ops.h"
#include "backend/ops_ref.h"
#include "optim/precond.h"
#include "strata/backend.h"
#include "strata/optim.h"

/* ---- the guard backend --------------------------------------------------- */

#define GUARD_MAX_ALLOCS 256

typedef struct guard_alloc {
    void *base;
    size_t len; /* page-rounded */
} guard_alloc;

typedef struct guard_ctx {
    strata_backend *inner; /* a CPU backend: products and copies */
    pthread_mutex_t lock;
    guard_alloc allocs[GUARD_MAX_ALLOCS];
    int n_allocs;
} guard_ctx;

static size_t page_round(size_t bytes)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg;
}

static void protect_all(guard_ctx *g, int prot)
{
    for (int i = 0; i < g->n_allocs; i++)
        if (mprotect(g->allocs[i].base, g->allocs[i].len, prot) != 0)
            abort(); /* the test's own invariant */
}

/* Open the device memory for one slot's work (the lock is held throughout). */
static void guard_open(guard_ctx *g)
{
    pthread_mutex_lock(&g->lock);
    protect_all(g, PROT_READ | PROT_WRITE);
}

static void guard_close(guard_ctx *g)
{
    protect_all(g, PROT_NONE);
    pthread_mutex_unlock(&g->lock);
}

#define GUARDED(ctx, call)                                                                     \
    do {                                                                                       \
        guard_ctx *g_ = (ctx);                                                                 \
        guard_open(g_);                                                                        \
        strata_status st_ = (call);                                                            \
        guard_close(g_);                                                                       \
        return st_;                                                                            \
    } while (0)

static strata_status g_alloc(void *ctx, size_t bytes, void **out)
{
    guard_ctx *g = ctx;
    const size_t len = page_round(bytes ? bytes : 1);
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return strata_error(STRATA_ERR_NOMEM, "guard backend: mmap of %zu bytes failed", len);
    pthread_mutex_lock(&g->lock);
    if (g->n_allocs == GUARD_MAX_ALLOCS) {
        pthread_mutex_unlock(&g->lock);
        munmap(p, len);
        return strata_error(STRATA_ERR_NOMEM, "guard backend: more than %d allocations",
                            GUARD_MAX_ALLOCS);
    }
    g->allocs[g->n_allocs++] = (guard_alloc){p, len};
    pthread_mutex_unlock(&g->lock);
    *out = p; /* anonymous memory is zero-filled, as alloc promises */
    return STRATA_OK;
}

static void g_free(void *ctx, void *ptr)
{
    guard_ctx *g = ctx;
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < g->n_allocs; i++)
        if (g->allocs[i].base == ptr) {
            munmap(ptr, g->allocs[i].len);
            g->allocs[i] = g->allocs[--g->n_allocs];
            break;
        }
    pthread_mutex_unlock(&g->lock);
}

static strata_status g_alloc_kind(void *ctx, strata_mem_kind kind, size_t bytes, void **out)
{
    if (kind == STRATA_MEM_DEVICE)
        return g_alloc(ctx, bytes, out);
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        return strata_error(STRATA_ERR_NOMEM, "guard backend: host allocation failed");
    memset(p, 0, bytes);
    *out = p;
    return STRATA_OK;
}

static void g_free_kind(void *ctx, strata_mem_kind kind, void *ptr)
{
    if (kind == STRATA_MEM_DEVICE)
        g_free(ctx, ptr);
    else
        free(ptr);
}

static strata_status g_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    guard_ctx *g = ctx;
    GUARDED(g, strata_backend_copy(g->inner, dst, src, bytes));
}

static strata_status g_copy_async(void *ctx, void *dst, const void *src, size_t bytes,
                                  strata_copy_dir dir, void *stream)
{
    (void)dir, (void)stream;
    return g_copy(ctx, dst, src, bytes);
}

static strata_status g_sgemm(void *ctx, int ta, int tb, int m, int n, int k, float alpha,
                             const float *a, int lda, const float *b, int ldb, float beta,
                             float *c, int ldc)
{
    guard_ctx *g = ctx;
    GUARDED(g, strata_backend_sgemm(g->inner, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                    ldc));
}

static strata_status g_ssyrk(void *ctx, int trans, int n, int k, float alpha, const float *a,
                             int lda, float beta, float *c, int ldc)
{
    guard_ctx *g = ctx;
    GUARDED(g, strata_backend_ssyrk(g->inner, trans, n, k, alpha, a, lda, beta, c, ldc));
}

/* The ops: the C reference with the memory opened. */
static strata_status g_adamw_update(void *ctx, void *s, size_t n, float *w, const float *gr,
                                    float *m, float *v, strata_op_adamw a)
{
    GUARDED(ctx, strata_ref_adamw_update(ctx, s, n, w, gr, m, v, a));
}

static strata_status g_ema(void *ctx, void *s, size_t n, float *m, const float *x, float beta,
                           float *out, float out_scale)
{
    GUARDED(ctx, strata_ref_ema(ctx, s, n, m, x, beta, out, out_scale));
}

static strata_status g_adam_moments(void *ctx, void *s, size_t n, float *m, const float *gr,
                                    float *v, const float *gv, float b1, float b2)
{
    GUARDED(ctx, strata_ref_adam_moments(ctx, s, n, m, gr, v, gv, b1, b2));
}

static strata_status g_graft(void *ctx, void *s, size_t n, float *acc, const float *gr,
                             const float *num, float *dir, float beta, float alpha, float bc,
                             float eps)
{
    GUARDED(ctx, strata_ref_graft(ctx, s, n, acc, gr, num, dir, beta, alpha, bc, eps));
}

static strata_status g_rms_div(void *ctx, void *s, size_t n, float *out, const float *num,
                               const float *den2, float eps)
{
    GUARDED(ctx, strata_ref_rms_div(ctx, s, n, out, num, den2, eps));
}

static strata_status g_momentum(void *ctx, void *s, size_t n, float *buf, const float *x,
                                float *out, float mu, float gw, int nesterov)
{
    GUARDED(ctx, strata_ref_momentum(ctx, s, n, buf, x, out, mu, gw, nesterov));
}

static strata_status g_apply_update(void *ctx, void *s, size_t n, float *w, const float *p,
                                    float lr, float decay, int form)
{
    GUARDED(ctx, strata_ref_apply_update(ctx, s, n, w, p, lr, decay, form));
}

static strata_status g_scale_2d(void *ctx, void *s, int64_t r, int64_t c, float *x, int64_t ld,
                                float v)
{
    GUARDED(ctx, strata_ref_scale_2d(ctx, s, r, c, x, ld, v));
}

static strata_status g_scale_rc(void *ctx, void *s, int64_t r, int64_t c, float *x, int64_t ld,
                                const float *rs, const float *cs)
{
    GUARDED(ctx, strata_ref_scale_rc(ctx, s, r, c, x, ld, rs, cs));
}

static strata_status g_scale_f64(void *ctx, void *s, size_t n, float *dst, const float *src,
                                 double v)
{
    GUARDED(ctx, strata_ref_scale_f64(ctx, s, n, dst, src, v));
}

static strata_status g_scale_rc_damped(void *ctx, void *s, int64_t r, int64_t c, float *x,
                                       int64_t ld, const float *sa, const float *sb, float eps)
{
    GUARDED(ctx, strata_ref_scale_rc_damped(ctx, s, r, c, x, ld, sa, sb, eps));
}

static strata_status g_eigen_ema_clamp(void *ctx, void *s, size_t n, float *sv, const double *diag,
                                       float beta, float clamp)
{
    GUARDED(ctx, strata_ref_eigen_ema_clamp(ctx, s, n, sv, diag, beta, clamp));
}

static strata_status g_row_col_sq_means(void *ctx, void *s, int64_t r, int64_t c, const float *x,
                                        int64_t ld, const float *sa, const float *sb, double *rm,
                                        double *cm)
{
    GUARDED(ctx, strata_ref_row_col_sq_means(ctx, s, r, c, x, ld, sa, sb, rm, cm));
}

static strata_status g_row_ms_normalize(void *ctx, void *s, int64_t r, int64_t c, float *x,
                                        int64_t ld, float *v, float beta, float eps)
{
    GUARDED(ctx, strata_ref_row_ms_normalize(ctx, s, r, c, x, ld, v, beta, eps));
}

static strata_status g_abs_sums(void *ctx, void *s, int64_t r, int64_t c, const float *x,
                                int64_t ld, int axis, double *out)
{
    GUARDED(ctx, strata_ref_abs_sums(ctx, s, r, c, x, ld, axis, out));
}

static strata_status g_fill_2d(void *ctx, void *s, int64_t r, int64_t c, float *x, int64_t ld,
                               float v)
{
    GUARDED(ctx, strata_ref_fill_2d(ctx, s, r, c, x, ld, v));
}

static strata_status g_diag_update(void *ctx, void *s, int64_t n, float *a, int64_t lda, float v,
                                   int acc)
{
    GUARDED(ctx, strata_ref_diag_update(ctx, s, n, a, lda, v, acc));
}

static strata_status g_copy_2d(void *ctx, void *s, int64_t r, int64_t c, float *dst, int64_t ldd,
                               const float *src, int64_t lds)
{
    GUARDED(ctx, strata_ref_copy_2d(ctx, s, r, c, dst, ldd, src, lds));
}

static strata_status g_transpose(void *ctx, void *s, int64_t r, int64_t c, const float *src,
                                 float *dst)
{
    GUARDED(ctx, strata_ref_transpose(ctx, s, r, c, src, dst));
}

static strata_status g_permute(void *ctx, void *s, int64_t r, int64_t c, int axis,
                               const int *perm, const float *src, float *dst)
{
    GUARDED(ctx, strata_ref_permute(ctx, s, r, c, axis, perm, src, dst));
}

static strata_status g_sumsq_2d(void *ctx, void *s, int64_t r, int64_t c, const float *x,
                                int64_t ld, double *out)
{
    GUARDED(ctx, strata_ref_sumsq_2d(ctx, s, r, c, x, ld, out));
}

static strata_status g_find_nonfinite(void *ctx, void *s, size_t n, const float *x, size_t *first)
{
    GUARDED(ctx, strata_ref_find_nonfinite(ctx, s, n, x, first));
}

static const strata_backend_iface guard_iface = {
    .version = STRATA_BACKEND_IFACE_VERSION,
    .name = "guard",
    .alloc = g_alloc,
    .free = g_free,
    .copy = g_copy,
    .sgemm = g_sgemm,
    .ssyrk = g_ssyrk,
    .alloc_kind = g_alloc_kind,
    .free_kind = g_free_kind,
    .copy_async = g_copy_async,
    .ops = {
        .adamw_update = g_adamw_update,
        .ema = g_ema,
        .adam_moments = g_adam_moments,
        .graft = g_graft,
        .rms_div = g_rms_div,
        .momentum = g_momentum,
        .apply_update = g_apply_update,
        .scale_2d = g_scale_2d,
        .scale_rc = g_scale_rc,
        .scale_f64 = g_scale_f64,
        .scale_rc_damped = g_scale_rc_damped,
        .eigen_ema_clamp = g_eigen_ema_clamp,
        .row_col_sq_means = g_row_col_sq_means,
        .row_ms_normalize = g_row_ms_normalize,
        .abs_sums = g_abs_sums,
        .fill_2d = g_fill_2d,
        .diag_update = g_diag_update,
        .copy_2d = g_copy_2d,
        .transpose = g_transpose,
        .permute = g_permute,
        .sumsq_2d = g_sumsq_2d,
        .find_nonfinite = g_find_nonfinite,
    },
};

static guard_ctx the_guard;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    char msg[160];
    int len = snprintf(msg, sizeof msg,
                       "FAIL: host dereference of guarded backend memory at %p "
                       "(a loop or memcpy outside the backend ops)\n",
                       si->si_addr);
    if (len > 0)
        (void)!write(2, msg, (size_t)len);
    _exit(1);
}

/* backend 0: plain CPU; 1: guard. */
static strata_backend *make_backend(int guarded)
{
    strata_backend *be = NULL;
    if (!guarded) {
        assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
        return be;
    }
    memset(&the_guard, 0, sizeof the_guard);
    pthread_mutex_init(&the_guard.lock, NULL);
    assert_int_equal(strata_backend_cpu_create(1, &the_guard.inner), STRATA_OK);
    assert_int_equal(strata_backend_create(&guard_iface, &the_guard, 0, &be), STRATA_OK);
    return be;
}

static void destroy_backend(strata_backend *be, int guarded)
{
    strata_backend_destroy(be);
    if (guarded) {
        assert_int_equal(the_guard.n_allocs, 0); /* every state freed its memory */
        strata_backend_destroy(the_guard.inner);
        pthread_mutex_destroy(&the_guard.lock);
    }
}

/* ---- the optimizers, one-tensor calls ----------------------------------- */

typedef struct opt_case {
    const char *name;
    strata_status (*create)(const struct opt_case *c, strata_backend *be, void **out);
    strata_status (*step)(void *st, int64_t t, float *w, const float *g,
                          strata_optim_counters *cnt);
    void (*destroy)(void *st);
    int64_t rows, cols;
    int steps;
    int zero_first; /* the first gradient is all zeros */
    union {
        strata_muon_config muon;
        strata_normuon_config normuon;
        strata_dion2_config dion2;
        strata_shampoo_config shampoo;
        strata_soap_config soap;
        strata_kl_shampoo_config kl;
        strata_adamw_config adamw;
    } cfg;
} opt_case;

static strata_status muon_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_muon_state_create(&c->cfg.muon, be, c->rows, c->cols,
                                    (strata_muon_state **)out);
}
static strata_status muon_step(void *s, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_muon_step(s, 1.0f, t, w, g, cnt);
}
static void muon_destroy(void *s) { strata_muon_state_destroy(s); }

static strata_status normuon_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_normuon_state_create(&c->cfg.normuon, be, 1, c->rows, c->cols,
                                       (strata_normuon_state **)out);
}
static strata_status normuon_step(void *s, int64_t t, float *w, const float *g,
                                  strata_optim_counters *cnt)
{
    return strata_normuon_step(s, 1.0f, t, w, g, cnt);
}
static void normuon_destroy(void *s) { strata_normuon_state_destroy(s); }

static strata_status dion2_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_dion2_state_create(&c->cfg.dion2, be, 1, c->rows, c->cols,
                                     (strata_dion2_state **)out);
}
static strata_status dion2_step(void *s, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt)
{
    return strata_dion2_step(s, 1.0f, t, w, g, cnt);
}
static void dion2_destroy(void *s) { strata_dion2_state_destroy(s); }

static strata_status shampoo_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_shampoo_state_create(&c->cfg.shampoo, be, c->rows, c->cols,
                                       (strata_shampoo_state **)out);
}
static strata_status shampoo_step(void *s, int64_t t, float *w, const float *g,
                                  strata_optim_counters *cnt)
{
    return strata_shampoo_step(s, 1.0f, t, w, g, cnt);
}
static void shampoo_destroy(void *s) { strata_shampoo_state_destroy(s); }

static strata_status soap_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_soap_state_create(&c->cfg.soap, be, c->rows, c->cols,
                                    (strata_soap_state **)out);
}
static strata_status soap_step(void *s, int64_t t, float *w, const float *g,
                               strata_optim_counters *cnt)
{
    return strata_soap_step(s, 1.0f, t, w, g, cnt);
}
static void soap_destroy(void *s) { strata_soap_state_destroy(s); }

static strata_status kl_create(const opt_case *c, strata_backend *be, void **out)
{
    return strata_kl_shampoo_state_create(&c->cfg.kl, be, c->rows, c->cols,
                                          (strata_kl_shampoo_state **)out);
}
static strata_status kl_step(void *s, int64_t t, float *w, const float *g,
                             strata_optim_counters *cnt)
{
    return strata_kl_shampoo_step(s, 1.0f, t, w, g, cnt);
}
static void kl_destroy(void *s) { strata_kl_shampoo_state_destroy(s); }

/* AdamW through its family (the public strata_adamw_update is host memory). */
static strata_status adamw_create(const opt_case *c, strata_backend *be, void **out)
{
    const strata_precond_shape sh = {.batch = 1, .rows = c->rows, .cols = c->cols,
                                     .numel = (size_t)(c->rows * c->cols)};
    return strata_family_adamw.create(&c->cfg.adamw, be, &sh, false, out);
}
static strata_status adamw_step(void *s, int64_t t, float *w, const float *g,
                                strata_optim_counters *cnt)
{
    return strata_family_adamw.apply(s, 1.0f, t, w, g, cnt);
}
static void adamw_destroy(void *s) { strata_family_adamw.destroy(s); }

/* Deterministic gradient of step t (LCG; some rows larger). */
static void make_grad(float *g, size_t n, int t, int64_t cols)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const float u = (float)((x >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
        g[i] = u * (1.0f + (float)((int64_t)i / cols % 3));
    }
}

/* Run the case on backend `guarded`, return the final weights (host). */
static void run_case(const opt_case *c, int guarded, float *w_out, strata_optim_counters *cnt)
{
    strata_backend *be = make_backend(guarded);
    const size_t n = (size_t)(c->rows * c->cols);
    float *host = malloc(n * sizeof(float));
    assert_non_null(host);
    void *st = NULL;
    assert_int_equal(c->create(c, be, &st), STRATA_OK);
    float *w = NULL, *g = NULL;
    assert_int_equal(strata_backend_alloc(be, n * sizeof(float), (void **)&w), STRATA_OK);
    assert_int_equal(strata_backend_alloc(be, n * sizeof(float), (void **)&g), STRATA_OK);
    make_grad(host, n, -1, c->cols);
    assert_int_equal(strata_backend_copy(be, w, host, n * sizeof(float)), STRATA_OK);
    for (int t = 1; t <= c->steps; t++) {
        make_grad(host, n, t, c->cols);
        if (t == 1 && c->zero_first)
            memset(host, 0, n * sizeof(float));
        assert_int_equal(strata_backend_copy(be, g, host, n * sizeof(float)), STRATA_OK);
        assert_int_equal(c->step(st, t, w, g, cnt), STRATA_OK);
        if (t == 3) {
            /* A refused gradient: found by the op, reported, nothing touched. */
            host[n / 2] = NAN;
            assert_int_equal(strata_backend_copy(be, g, host, n * sizeof(float)), STRATA_OK);
            if (c->step != adamw_step) /* AdamW has no finite check */
                assert_int_equal(c->step(st, t + 1, w, g, cnt), STRATA_ERR_NONFINITE);
        }
    }
    assert_int_equal(strata_backend_copy(be, w_out, w, n * sizeof(float)), STRATA_OK);
    strata_backend_free(be, w, n * sizeof(float));
    strata_backend_free(be, g, n * sizeof(float));
    c->destroy(st);
    free(host);
    destroy_backend(be, guarded);
}

static void install_segv_report(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
}

static void check_case(const opt_case *c)
{
    install_segv_report(); /* after cmocka's own handler: name the address */
    const size_t n = (size_t)(c->rows * c->cols);
    float *plain = malloc(n * sizeof(float)), *guarded = malloc(n * sizeof(float));
    assert_non_null(plain);
    assert_non_null(guarded);
    strata_optim_counters cp = {0}, cg = {0};
    run_case(c, 0, plain, &cp);
    run_case(c, 1, guarded, &cg);
    if (memcmp(plain, guarded, n * sizeof(float)) != 0)
        fail_msg("%s: weights differ between the cpu and the guard backend", c->name);
    assert_int_equal(cp.root_refreshes, cg.root_refreshes);
    assert_int_equal(cp.root_failures, cg.root_failures);
    free(plain);
    free(guarded);
}

/* ---- cases --------------------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    opt_case c = {.name = "adamw", .create = adamw_create, .step = adamw_step,
                  .destroy = adamw_destroy, .rows = 7, .cols = 5, .steps = 6};
    strata_adamw_config_default(&c.cfg.adamw);
    check_case(&c);
}

static void test_muon(void **state)
{
    (void)state;
    opt_case c = {.name = "muon tall", .create = muon_create, .step = muon_step,
                  .destroy = muon_destroy, .rows = 24, .cols = 10, .steps = 6,
                  .zero_first = 1};
    strata_muon_config_default(&c.cfg.muon);
    c.cfg.muon.weight_decay = 0.01f;
    check_case(&c);
    c.name = "muon gram wide";
    c.rows = 8;
    c.cols = 40;
    c.cfg.muon.ns_method = STRATA_NS_GRAM;
    c.cfg.muon.ns_schedule = STRATA_NS_POLAR_EXPRESS;
    c.cfg.muon.momentum_form = STRATA_MUON_MOMENTUM_EMA;
    check_case(&c);
    c.name = "muon gram tall";
    c.rows = 40;
    c.cols = 8;
    c.cfg.muon.nesterov = false;
    check_case(&c);
}

static void test_normuon(void **state)
{
    (void)state;
    opt_case c = {.name = "normuon tall", .create = normuon_create, .step = normuon_step,
                  .destroy = normuon_destroy, .rows = 24, .cols = 10, .steps = 6,
                  .zero_first = 1};
    strata_normuon_config_default(&c.cfg.normuon);
    c.cfg.normuon.weight_decay = 0.01f;
    check_case(&c);
    c.name = "normuon gram wide match_rms";
    c.rows = 8;
    c.cols = 40;
    c.cfg.normuon.ns_method = STRATA_NS_GRAM;
    c.cfg.normuon.update_scale = STRATA_NORMUON_MATCH_RMS;
    check_case(&c);
}

/* Dion2: rows selected (wide) and columns selected (tall), Gram on the
 * submatrix. */
static void test_dion2(void **state)
{
    (void)state;
    opt_case c = {.name = "dion2 tall", .create = dion2_create, .step = dion2_step,
                  .destroy = dion2_destroy, .rows = 24, .cols = 10, .steps = 6,
                  .zero_first = 1};
    strata_dion2_config_default(&c.cfg.dion2);
    check_case(&c);
    c.name = "dion2 gram wide";
    c.rows = 8;
    c.cols = 40;
    c.cfg.dion2.ns_method = STRATA_NS_GRAM;
    c.cfg.dion2.fraction = 0.5f;
    check_case(&c);
}

static void test_shampoo(void **state)
{
    (void)state;
    opt_case c = {.name = "shampoo adam", .create = shampoo_create, .step = shampoo_step,
                  .destroy = shampoo_destroy, .rows = 20, .cols = 12, .steps = 7};
    strata_shampoo_config_default(&c.cfg.shampoo);
    c.cfg.shampoo.precondition_frequency = 2;
    c.cfg.shampoo.epsilon = 1e-6f;
    check_case(&c);
    c.name = "shampoo blocked adagrad momentum";
    c.cfg.shampoo.max_preconditioner_dim = 8;
    c.cfg.shampoo.grafting = STRATA_GRAFT_ADAGRAD;
    c.cfg.shampoo.momentum = 0.9f;
    c.cfg.shampoo.nesterov = true;
    c.cfg.shampoo.weight_decay = 0.01f;
    check_case(&c);
    c.name = "shampoo no grafting, identity right root";
    c.cfg.shampoo.grafting = STRATA_GRAFT_NONE;
    c.cfg.shampoo.beta1 = 0.0f;
    c.cfg.shampoo.inverse_exponent_override[1] = 0.0f;
    check_case(&c);
}

static void test_soap(void **state)
{
    (void)state;
    opt_case c = {.name = "soap", .create = soap_create, .step = soap_step,
                  .destroy = soap_destroy, .rows = 12, .cols = 9, .steps = 9};
    strata_soap_config_default(&c.cfg.soap);
    c.cfg.soap.precondition_frequency = 2;
    check_case(&c);
    c.name = "soap normalize_grads";
    c.cfg.soap.normalize_grads = true;
    c.cfg.soap.correct_bias = false;
    check_case(&c);
}

static void test_kl_shampoo(void **state)
{
    (void)state;
    opt_case c = {.name = "kl-shampoo", .create = kl_create, .step = kl_step,
                  .destroy = kl_destroy, .rows = 10, .cols = 14, .steps = 9};
    strata_kl_shampoo_config_default(&c.cfg.kl);
    c.cfg.kl.precondition_frequency = 2;
    c.cfg.kl.lr = 1e-2f;
    check_case(&c);
    c.name = "kl-shampoo normalize, auto init";
    c.cfg.kl.normalize_grads = true;
    c.cfg.kl.init_factor = -1.0f;
    c.zero_first = 1;
    check_case(&c);
    c.name = "kl-shampoo exact";
    c.cfg.kl.form = STRATA_KL_EXACT;
    check_case(&c);
}

/* ---- the families, as the refresh engine drives them --------------------- */

/* before, then every block snapshot -> refresh -> install (every step: the
 * glue the engine runs, with host slots), apply, after. Final weights out. */
static void run_family(const strata_precond_family *fam, const void *cfg, bool external,
                       int64_t rows, int64_t cols, int steps, int guarded, float *w_out)
{
    strata_backend *be = make_backend(guarded);
    const size_t n = (size_t)(rows * cols);
    const strata_precond_shape sh = {.batch = 1, .rows = rows, .cols = cols, .numel = n};
    void *st = NULL;
    assert_int_equal(fam->create(cfg, be, &sh, external, &st), STRATA_OK);
    /* The runtime's shared step scratch (precond.h), in the backend's memory. */
    const size_t scratch_bytes = fam->step_scratch ? fam->step_scratch(st) : 0;
    void *scratch = NULL;
    if (scratch_bytes) {
        assert_int_equal(strata_backend_alloc(be, scratch_bytes, &scratch), STRATA_OK);
        fam->set_step_scratch(st, scratch);
    }
    const int nb = fam->n_blocks(st);
    void *slots[16] = {0};
    assert_true(nb <= 16);
    int max_dim = 1;
    for (int b = 0; b < nb; b++) {
        strata_precond_block blk;
        fam->block(st, b, &blk);
        slots[b] = calloc(1, blk.slot_bytes);
        assert_non_null(slots[b]);
        max_dim = blk.max_dim > max_dim ? blk.max_dim : max_dim;
    }
    double *work = nb ? malloc(fam->refresh_work_doubles(max_dim) * sizeof(double)) : NULL;
    int *iwork = nb ? malloc(fam->refresh_work_ints(max_dim) * sizeof(int)) : NULL;
    float *host = malloc(n * sizeof(float)), *w = NULL, *g = NULL;
    assert_non_null(host);
    assert_int_equal(strata_backend_alloc(be, n * sizeof(float), (void **)&w), STRATA_OK);
    assert_int_equal(strata_backend_alloc(be, n * sizeof(float), (void **)&g), STRATA_OK);
    make_grad(host, n, -1, cols);
    assert_int_equal(strata_backend_copy(be, w, host, n * sizeof(float)), STRATA_OK);
    strata_optim_counters cnt = {0};
    for (int t = 1; t <= steps; t++) {
        make_grad(host, n, t, cols);
        assert_int_equal(strata_backend_copy(be, g, host, n * sizeof(float)), STRATA_OK);
        bool done = false;
        if (fam->before)
            assert_int_equal(fam->before(st, 1.0f, t, w, g, &cnt, &done), STRATA_OK);
        if (done)
            continue;
        for (int b = 0; b < nb; b++) {
            unsigned failed = 0;
            assert_int_equal(fam->snapshot(st, b, slots[b]), STRATA_OK);
            assert_int_equal(fam->refresh(st, b, slots[b], work, iwork, &failed, &cnt),
                             STRATA_OK);
            strata_precond_block blk;
            fam->block(st, b, &blk);
            const unsigned all = (1u << blk.n_parts) - 1;
            assert_int_equal(fam->install(st, b, slots[b], failed, all & ~failed), STRATA_OK);
        }
        assert_int_equal(fam->apply(st, 1.0f, t, w, g, &cnt), STRATA_OK);
        if (fam->after)
            assert_int_equal(fam->after(st, g, &cnt), STRATA_OK);
    }
    assert_int_equal(strata_backend_copy(be, w_out, w, n * sizeof(float)), STRATA_OK);
    strata_backend_free(be, w, n * sizeof(float));
    strata_backend_free(be, g, n * sizeof(float));
    fam->destroy(st);
    if (scratch)
        strata_backend_free(be, scratch, scratch_bytes);
    for (int b = 0; b < nb; b++)
        free(slots[b]);
    free(work);
    free(iwork);
    free(host);
    destroy_backend(be, guarded);
}

static void check_family(const strata_precond_family *fam, const void *cfg, bool external,
                         int64_t rows, int64_t cols)
{
    install_segv_report();
    const size_t n = (size_t)(rows * cols);
    float *plain = malloc(n * sizeof(float)), *guarded = malloc(n * sizeof(float));
    assert_non_null(plain);
    assert_non_null(guarded);
    run_family(fam, cfg, external, rows, cols, 6, 0, plain);
    run_family(fam, cfg, external, rows, cols, 6, 1, guarded);
    if (memcmp(plain, guarded, n * sizeof(float)) != 0)
        fail_msg("%s: weights differ between the cpu and the guard backend", fam->name);
    free(plain);
    free(guarded);
}

static void test_families(void **state)
{
    (void)state;
    strata_shampoo_config sh;
    strata_shampoo_config_default(&sh);
    sh.max_preconditioner_dim = 8;
    sh.epsilon = 1e-6f;
    sh.precondition_frequency = 1;
    check_family(&strata_family_shampoo, &sh, false, 12, 10);
    check_family(&strata_family_shampoo, &sh, true, 12, 10);
    strata_soap_config so;
    strata_soap_config_default(&so);
    check_family(&strata_family_soap, &so, false, 9, 7);
    strata_kl_shampoo_config kl;
    strata_kl_shampoo_config_default(&kl);
    kl.lr = 1e-2f;
    check_family(&strata_family_kl_shampoo, &kl, false, 7, 11);
    kl.form = STRATA_KL_EXACT;
    check_family(&strata_family_kl_shampoo, &kl, false, 7, 11);
    strata_muon_config mu;
    strata_muon_config_default(&mu);
    check_family(&strata_family_muon, &mu, false, 9, 13);
}

/* The guard itself: a host store into device memory must fault. Run in a
 * child so the fault ends only the child. */
static void test_guard_faults(void **state)
{
    (void)state;
    strata_backend *be = make_backend(1);
    float *d = NULL;
    assert_int_equal(strata_backend_alloc(be, 64, (void **)&d), STRATA_OK);
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        volatile float *vd = d;
        vd[0] = 1.0f; /* must fault */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    strata_backend_free(be, d, 64);
    destroy_backend(be, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_faults), cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_muon),         cmocka_unit_test(test_normuon),
        cmocka_unit_test(test_dion2),
        cmocka_unit_test(test_shampoo),
        cmocka_unit_test(test_soap),         cmocka_unit_test(test_kl_shampoo),
        cmocka_unit_test(test_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
