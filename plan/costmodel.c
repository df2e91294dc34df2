/* The planner's cost model (costmodel.h): one optimizer step of a family on
 * a shape, measured on this machine and cached.
 *
 * Measurement: a scratch state of the family on the parameter's shape, a
 * fixed pseudo-random gradient; one warm-up step, one refresh of every block
 * (snapshot + refresh + install, so that the timed steps precondition), then
 * the median of three timed steps (before + apply + after) plus the refresh
 * time divided by the precondition frequency; a keyed variant whose
 * refreshes chain (Shampoo's warm-qr forms) times a second refresh instead,
 * the warm step that follows a factor's first root.
 *
 * Cache: one line per measurement in $XDG_CACHE_HOME/strata/costs-v1.tsv
 * (default ~/.cache/strata/...): CPU model, BLAS core (OpenBLAS's name, or
 * "BLIS/<arch>"), BLAS threads,
 * family (with its cost variant, "shampoo/newton-f32", and "@cuda" when the
 * backend is not the CPU's: those are measured as they run, on the backend),
 * batch, rows, cols, F, seconds. A machine measures a shape once;
 * STRATA_COST_CACHE=0 turns the cache off (measure every time).
 */
#include "plan/plan.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/blas.h"
#include "base/clock.h"
#include "base/env.h"

/* The CPU model, read from /proc/cpuinfo once per process. */
static char g_cpu_model[256];
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void read_cpu_model(void)
{
    char *out = g_cpu_model;
    const size_t n = sizeof g_cpu_model;
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "CPU part", 8) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ' || *v == '\t')
                    v++;
                snprintf(out, n, "%s", v);
                out[strcspn(out, "\n\t")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

static const char *cpu_model(void)
{
    pthread_once(&g_cpu_once, read_cpu_model);
    return g_cpu_model;
}

static bool cache_path(char *out, size_t n)
{
    const char *off = strata_env_str(STRATA_ENV_COST_CACHE);
    if (off && strcmp(off, "0") == 0)
        return false;
    const char *xdg = strata_env_str(STRATA_ENV_XDG_CACHE_HOME);
    const char *home = strata_env_str(STRATA_ENV_HOME);
    char dir[4096];
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/strata", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/strata", home);
    else
        return false;
    /* mkdir -p of the last two levels (the parent of .cache usually exists) */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = '\0';
        mkdir(parent, 0755);
    }
    mkdir(dir, 0755);
    snprintf(out, n, "%s/costs-v1.tsv", dir);
    return true;
}

static void key_of(strata_backend *be, const strata_precond_family *f, const void *cfg,
                   const strata_precond_shape *sh, int F, char *out, size_t n)
{
    /* The family's name, with its cost variant (a refresh that runs on the
     * backend: Shampoo's newton_f32) and a backend other than the CPU's (its
     * measurements are the device's), so that neither is priced from a CPU
     * eigh measurement; the CPU's plain keys keep their old form. */
    char fam[160];
    const char *v = f->cost_variant ? f->cost_variant(cfg) : NULL;
    const char *bn = strata_backend_name(be);
    const bool other_be = bn && strcmp(bn, "cpu") != 0;
    snprintf(fam, sizeof fam, "%s%s%s%s%s", f->name, v && *v ? "/" : "", v && *v ? v : "",
             other_be ? "@" : "", other_be ? bn : "");
    /* OpenBLAS's keys keep their old form (its core names alone); another
     * BLAS's core is prefixed with the library's name, so that one cache
     * file never mixes two libraries' timings */
    const char *lib = strata_blas_core_env() ? "" : strata_blas_name();
    snprintf(out, n, "%s\t%s%s%s\t%d\t%s\t%lld\t%lld\t%lld\t%d", cpu_model(), lib,
             *lib ? "/" : "", strata_blas_core(), strata_blas_threads(), fam, (long long)sh->batch, (long long)sh->rows,
             (long long)sh->cols, F);
}

/* The cache file, read once per process into memory (the planner asks for
 * every parameter; a commit should not rescan the file each time). Guarded
 * by g_cache_mu: runtimes may commit from several threads. */
typedef struct cost_entry {
    char *key;
    double seconds;
} cost_entry;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static cost_entry *g_cache;
static size_t g_cache_n, g_cache_cap;
static bool g_cache_loaded;

/* Caller holds g_cache_mu. A later line for the same key wins (as before). */
static void cache_remember(const char *key, size_t kl, double seconds)
{
    for (size_t i = 0; i < g_cache_n; i++)
        if (strlen(g_cache[i].key) == kl && memcmp(g_cache[i].key, key, kl) == 0) {
            g_cache[i].seconds = seconds;
            return;
        }
    if (g_cache_n == g_cache_cap) {
        size_t cap = g_cache_cap ? 2 * g_cache_cap : 64;
        cost_entry *grown = realloc(g_cache, cap * sizeof *grown);
        if (!grown)
            return; /* a cache miss later: measured again */
        g_cache = grown;
        g_cache_cap = cap;
    }
    char *k = malloc(kl + 1);
    if (!k)
        return;
    memcpy(k, key, kl);
    k[kl] = '\0';
    g_cache[g_cache_n++] = (cost_entry){k, seconds};
}

/* Caller holds g_cache_mu. */
static void cache_load(const char *path)
{
    g_cache_loaded = true;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *tab = strrchr(line, '\t');
        if (!tab)
            continue;
        char *end;
        double v = strtod(tab + 1, &end);
        if (end != tab + 1 && v > 0)
            cache_remember(line, (size_t)(tab - line), v);
    }
    fclose(f);
}

static bool cache_get(const char *key, double *seconds)
{
    char path[4200];
    if (!cache_path(path, sizeof path))
        return false;
    bool found = false;
    pthread_mutex_lock(&g_cache_mu);
    if (!g_cache_loaded)
        cache_load(path);
    for (size_t i = 0; i < g_cache_n && !found; i++)
        if (strcmp(g_cache[i].key, key) == 0) {
            *seconds = g_cache[i].seconds;
            found = true;
        }
    pthread_mutex_unlock(&g_cache_mu);
    return found;
}

static void cache_put(const char *key, double seconds)
{
    char path[4200];
    if (!cache_path(path, sizeof path))
        return;
    pthread_mutex_lock(&g_cache_mu);
    cache_remember(key, strlen(key), seconds);
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%s\t%.9g\n", key, seconds);
        fclose(f);
    }
    pthread_mutex_unlock(&g_cache_mu);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static strata_status measure(strata_backend *be, const strata_precond_family *f, const void *cfg,
                             const strata_precond_shape *sh, int F, double *seconds)
{
    void *state = NULL;
    float *w = NULL, *g = NULL;
    void **slots = NULL;
    int nb = 0;
    double *work = NULL;
    int *iwork = NULL;
    strata_status st = f->create(cfg, be, sh, true, &state);
    if (st != STRATA_OK)
        return st;
    /* A runtime-driven state borrows the runtime's step scratch (precond.h). */
    void *scratch = NULL;
    const size_t scratch_bytes = f->step_scratch ? f->step_scratch(state) : 0;
    if (scratch_bytes) {
        st = strata_backend_alloc(be, scratch_bytes, &scratch);
        if (st != STRATA_OK) {
            f->destroy(state);
            return st;
        }
        f->set_step_scratch(state, scratch);
    }
    w = calloc(sh->numel, sizeof *w);
    g = malloc(sh->numel * sizeof *g);
    if (!w || !g) {
        st = strata_error(STRATA_ERR_NOMEM, "cost model: out of memory");
        goto out;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sh->numel; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        g[i] = 1e-3f * ((float)(x >> 40) / (float)(1u << 24) - 0.5f);
    }
    strata_optim_counters cnt = {0};
    double refresh = 0.0;
    int64_t t = 1;
    bool done = false;
    if (f->before)
        st = f->before(state, 1.0f, t, w, g, &cnt, &done);
    if (st == STRATA_OK && !done)
        st = f->apply(state, 1.0f, t, w, g, &cnt);
    if (st == STRATA_OK && !done && f->after)
        st = f->after(state, g, &cnt);
    const bool refreshes = f->has_refresh && f->has_refresh(cfg);
    nb = refreshes ? f->n_blocks(state) : 0;
    slots = calloc((size_t)nb + 1, sizeof *slots);
    if (!slots)
        st = strata_error(STRATA_ERR_NOMEM, "cost model: out of memory");
    for (int b = 0; st == STRATA_OK && b < nb; b++) {
        strata_precond_block bi;
        f->block(state, b, &bi);
        free(work);
        free(iwork);
        slots[b] = malloc(bi.slot_bytes);
        work = malloc((f->refresh_work_doubles(bi.max_dim) + 1) * sizeof *work);
        iwork = malloc((f->refresh_work_ints(bi.max_dim) + 1) * sizeof *iwork);
        if (!slots[b] || !work || !iwork) {
            st = strata_error(STRATA_ERR_NOMEM, "cost model: out of memory");
            break;
        }
        const double t0 = strata_now_seconds();
        unsigned failed = 0;
        st = f->snapshot(state, b, slots[b]);
        if (st == STRATA_OK)
            st = f->refresh(state, b, slots[b], work, iwork, &failed, &cnt);
        refresh += strata_now_seconds() - t0;
        if (st == STRATA_OK) /* lent until destroy: the timed steps precondition */
            st = f->install(state, b, slots[b], failed, ~failed & ((1u << bi.n_parts) - 1));
        if (st == STRATA_ERR_LINALG)
            st = STRATA_OK;
    }
    double times[3];
    for (int k = 0; k < 3 && st == STRATA_OK; k++) {
        t = 1000 + k; /* past any start step */
        const double t0 = strata_now_seconds();
        done = false;
        if (f->before)
            st = f->before(state, 1.0f, t, w, g, &cnt, &done);
        if (st == STRATA_OK && !done)
            st = f->apply(state, 1.0f, t, w, g, &cnt);
        if (st == STRATA_ERR_NONFINITE)
            st = STRATA_OK;
        if (st == STRATA_OK && !done && f->after)
            st = f->after(state, g, &cnt);
        times[k] = strata_now_seconds() - t0;
    }
    /* A keyed configuration whose refreshes continue the one before them
     * (precond.h chains: Shampoo's warm-qr forms) is priced from a second
     * refresh of every block, which continues the first's basis, as every
     * refresh after a factor's first does in a run; the first is an eigh
     * root. (The factors moved by the timed steps' fixed gradient, so the
     * basis still diagonalizes them: the warm step, not a fallback.) */
    const char *variant = f->cost_variant ? f->cost_variant(cfg) : NULL;
    if (st == STRATA_OK && nb > 0 && variant && *variant && f->chains && f->chains(state)) {
        refresh = 0.0;
        for (int b = 0; st == STRATA_OK && b < nb; b++) {
            strata_precond_block bi;
            f->block(state, b, &bi);
            free(work);
            free(iwork);
            work = malloc((f->refresh_work_doubles(bi.max_dim) + 1) * sizeof *work);
            iwork = malloc((f->refresh_work_ints(bi.max_dim) + 1) * sizeof *iwork);
            if (!work || !iwork) {
                st = strata_error(STRATA_ERR_NOMEM, "cost model: out of memory");
                break;
            }
            const double t0 = strata_now_seconds();
            unsigned failed = 0;
            st = f->snapshot(state, b, slots[b]);
            if (st == STRATA_OK)
                st = f->refresh(state, b, slots[b], work, iwork, &failed, &cnt);
            refresh += strata_now_seconds() - t0;
            if (st == STRATA_OK)
                st = f->install(state, b, slots[b], failed, ~failed & ((1u << bi.n_parts) - 1));
            if (st == STRATA_ERR_LINALG)
                st = STRATA_OK;
        }
    }
    if (st == STRATA_OK) {
        qsort(times, 3, sizeof times[0], cmp_double);
        *seconds = times[1] + refresh / (F > 0 ? F : 1);
    }
out:
    f->destroy(state); /* before the slots and the scratch it may borrow */
    if (scratch)
        strata_backend_free(be, scratch, scratch_bytes);
    for (int b = 0; slots && b < nb; b++)
        free(slots[b]);
    free(slots);
    free(work);
    free(iwork);
    free(w);
    free(g);
    return st;
}

strata_status strata_cost_step_seconds(strata_backend *be, const strata_precond_family *f,
                                       const void *cfg, const strata_precond_shape *shape,
                                       double *seconds, bool *cached)
{
    if (!be || !f || !cfg || !shape || !seconds)
        return strata_error(STRATA_ERR_INVALID_ARG, "cost_step_seconds: NULL argument");
    int F = 1;
    if (f->has_refresh && f->has_refresh(cfg)) {
        strata_precond_schedule sch;
        f->schedule(cfg, &sch);
        F = sch.frequency;
    }
    char key[1024];
    key_of(be, f, cfg, shape, F, key, sizeof key);
    if (cached)
        *cached = false;
    if (cache_get(key, seconds)) {
        if (cached)
            *cached = true;
        return STRATA_OK;
    }
    strata_status st = measure(be, f, cfg, shape, F, seconds);
    if (st == STRATA_OK)
        cache_put(key, *seconds);
    return st;
}

/* ---- the fitted model (plan.h: strata_cost_fit) */

static double side_of(size_t part_bytes)
{
    return sqrt((double)part_bytes / sizeof(float));
}

double strata_cost_block_refresh(const strata_precond_block *b)
{
    double r = 0.0;
    for (int k = 0; k < b->n_parts && k < STRATA_PRECOND_MAX_PARTS; k++) {
        const double d = side_of(b->part_bytes[k]);
        r += d * d * d;
    }
    return r;
}

void strata_cost_features(const strata_precond_family *f, const void *cfg,
                          const strata_precond_shape *sh, double *products, double *refresh)
{
    *products = 0.0;
    *refresh = 0.0;
    strata_precond_plan pl;
    const int nb = f->plan ? f->plan(cfg, sh, &pl, NULL, 0) : 0;
    if (nb <= 0) {
        const double m = (double)sh->rows, n = (double)sh->cols;
        *products = (double)sh->numel * (m < n ? m : n);
        return;
    }
    strata_precond_block stack[64], *blocks = nb <= 64 ? stack : malloc((size_t)nb * sizeof *blocks);
    if (!blocks)
        return;
    f->plan(cfg, sh, &pl, blocks, nb);
    const bool refreshes = f->has_refresh && f->has_refresh(cfg);
    for (int b = 0; b < nb; b++) {
        const double r = side_of(blocks[b].part_bytes[0]), c = side_of(blocks[b].part_bytes[1]);
        /* an unrotated side (SOAP) has no factor: its product is the other's */
        const double rr = r > 0 ? r : 1.0, cc = c > 0 ? c : 1.0;
        *products += rr * cc * ((r > 0 ? r : 0.0) + (c > 0 ? c : 0.0));
        if (refreshes)
            *refresh += strata_cost_block_refresh(&blocks[b]);
    }
    if (blocks != stack)
        free(blocks);
}

/* cfg with its refresh period set to F (a copy in `buf`), or cfg itself
 * when the family has no period. */
static const void *with_frequency(const strata_precond_family *f, const void *cfg, int F,
                                  void *buf)
{
    if (!f->has_frequency)
        return cfg;
    memcpy(buf, cfg, f->cfg_size);
    memcpy((char *)buf + f->frequency_offset, &F, sizeof F);
    return buf;
}

/* One anchor of the fit: the minimum of three measurements (a shared
 * machine's load only ever adds time), cached under its own key. */
static strata_status fit_point(strata_backend *be, const strata_precond_family *f,
                               const void *cfg, const strata_precond_shape *sh,
                               double *seconds, bool *cached)
{
    int F = 1;
    if (f->has_refresh && f->has_refresh(cfg)) {
        strata_precond_schedule sch;
        f->schedule(cfg, &sch);
        F = sch.frequency;
    }
    char key[1100];
    key_of(be, f, cfg, sh, F, key, sizeof key - 8);
    strcat(key, "\tmin3");
    *cached = cache_get(key, seconds);
    if (*cached)
        return STRATA_OK;
    double best = INFINITY;
    for (int k = 0; k < 3; k++) {
        double t = 0.0;
        strata_status st = measure(be, f, cfg, sh, F, &t);
        if (st != STRATA_OK)
            return st;
        best = t < best ? t : best;
    }
    *seconds = best;
    cache_put(key, best);
    return STRATA_OK;
}

strata_status strata_cost_fit_family(strata_backend *be, const strata_precond_family *f,
                                     const void *cfg, strata_cost_fit *out)
{
    if (!be || !f || !cfg || !out)
        return strata_error(STRATA_ERR_INVALID_ARG, "cost_fit_family: NULL argument");
    if (!f->plan)
        return strata_error(STRATA_ERR_UNSUPPORTED, "cost model: family '%s' cannot be planned "
                            "(no plan slot)", f->name);
    memset(out, 0, sizeof *out);
    const double t0 = strata_now_seconds();
    enum { N = 3 };
    static const int anchors[N] = {128, 256, 384};
    const bool refreshes = f->has_refresh && f->has_refresh(cfg) && f->has_frequency;
    unsigned char *b1 = malloc(f->cfg_size), *binf = malloc(f->cfg_size);
    if (!b1 || !binf) {
        free(b1);
        free(binf);
        return strata_error(STRATA_ERR_NOMEM, "cost model: out of memory");
    }
    double P[N], E[N], R[N], step[N], refresh[N];
    strata_status st = STRATA_OK;
    for (int i = 0; i < N && st == STRATA_OK; i++) {
        const int d = anchors[i];
        const strata_precond_shape sh = {.batch = 1, .rows = d, .cols = d,
                                         .numel = (size_t)d * (size_t)d};
        strata_cost_features(f, cfg, &sh, &P[i], &R[i]);
        E[i] = (double)sh.numel;
        bool cached = false;
        double c_inf = 0.0, c_1 = 0.0;
        st = fit_point(be, f, with_frequency(f, cfg, 1 << 20, binf), &sh, &c_inf, &cached);
        out->measured += !cached;
        if (st == STRATA_OK && refreshes) {
            st = fit_point(be, f, with_frequency(f, cfg, 1, b1), &sh, &c_1, &cached);
            out->measured += !cached;
        }
        step[i] = c_inf;
        refresh[i] = refreshes && c_1 > c_inf ? c_1 - c_inf : 0.0;
    }
    free(b1);
    free(binf);
    if (st != STRATA_OK)
        return st;
    /* step = a P + e E: the 2 x 2 normal equations; a negative coefficient
     * (noise at small anchors) falls back to the one-term fit. */
    double pp = 0, pe = 0, ee = 0, ps = 0, es = 0, rr = 0, rs = 0;
    for (int i = 0; i < N; i++) {
        pp += P[i] * P[i];
        pe += P[i] * E[i];
        ee += E[i] * E[i];
        ps += P[i] * step[i];
        es += E[i] * step[i];
        rr += R[i] * R[i];
        rs += R[i] * refresh[i];
    }
    const double det = pp * ee - pe * pe;
    double a = det > 0 ? (ps * ee - es * pe) / det : 0.0;
    double e = det > 0 ? (pp * es - pe * ps) / det : 0.0;
    if (a < 0 || e < 0 || det <= 0) {
        a = pp > 0 ? ps / pp : 0.0;
        e = 0.0;
        if (a <= 0) {
            a = 0.0;
            e = ee > 0 ? es / ee : 0.0;
        }
    }
    out->product_s = a;
    out->element_s = e;
    /* The refresh's coefficient: the median of the anchors' ratios (one
     * anchor slowed by a loaded machine does not move it). */
    double ratio[N];
    int nr = 0;
    for (int i = 0; i < N; i++)
        if (R[i] > 0)
            ratio[nr++] = refresh[i] / R[i];
    qsort(ratio, (size_t)nr, sizeof ratio[0], cmp_double);
    out->refresh_s = nr ? ratio[nr / 2] : 0.0;
    (void)rr;
    (void)rs;
    out->measure_seconds = strata_now_seconds() - t0;
    return STRATA_OK;
}
