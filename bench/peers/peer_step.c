/* peer_step: strata's side of bench/peers/peers.py. One optimizer (one-tensor
 * API, include/strata/optim.h) over a set of matrices, driven by commands on
 * stdin so that the Python driver can interleave its timing rounds with the
 * peer's (each side keeps its state between rounds, as a training run does).
 *
 * usage: peer_step OPT DIR THREADS [key=value ...]
 *   OPT      muon | shampoo | soap
 *   DIR      written by peers.py: shapes.txt ("rows cols" per matrix, row-major
 *            float32), w.f32 (the matrices, concatenated), g.f32 (one or more
 *            gradient sets of the same layout, concatenated; step t uses set
 *            (t-1) mod n_sets)
 *   THREADS  OpenBLAS threads
 *   keys     lr, freq (precondition frequency), start (Shampoo's
 *            start_preconditioning_step), eps (Shampoo epsilon), block
 *            (Shampoo max_preconditioner_dim), graft_eps, ns (auto|standard|gram),
 *            mu (Muon momentum), b1, b2 (SOAP betas), wd
 * commands (one per line; each answers one line):
 *   reset        fresh state and the matrices of w.f32        -> "ok"
 *   step K       K optimizer steps over every matrix          -> "<seconds>"
 *   dump FILE    write the matrices to FILE (float32)         -> "ok"
 *   split        seconds since the last reset in the optimizer's phases
 *                (strata_optim_counters): "<precondition> <factors> <roots>"
 *   quit
 * Errors print "error: ..." and exit 1. */
#include "strata/optim.h"
#include "strata/status.h"
#include "strata/strata.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { OPT_MUON, OPT_SHAMPOO, OPT_SOAP } opt_kind;

typedef struct driver {
    opt_kind kind;
    strata_backend *be;
    int n;                 /* matrices */
    int64_t *rows, *cols;
    size_t total;          /* floats in one set */
    float *w0, *w, *g;     /* initial, current, gradient sets */
    int n_sets;
    void **states;
    int64_t t;
    strata_optim_counters cnt; /* summed since the last reset */
    strata_muon_config muon;
    strata_shampoo_config shampoo;
    strata_soap_config soap;
} driver;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, strata_status st)
{
    printf("error: %s: %s %s\n", what, strata_status_str(st), strata_last_error());
    fflush(stdout);
    exit(1);
}

static float *read_floats(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (p && bytes > 0 && fread(p, 1, (size_t)bytes, f) != (size_t)bytes) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *count = (size_t)bytes / sizeof(float);
    return p;
}

static void free_states(driver *d)
{
    for (int i = 0; d->states && i < d->n; i++) {
        if (!d->states[i])
            continue;
        if (d->kind == OPT_MUON)
            strata_muon_state_destroy(d->states[i]);
        else if (d->kind == OPT_SHAMPOO)
            strata_shampoo_state_destroy(d->states[i]);
        else
            strata_soap_state_destroy(d->states[i]);
        d->states[i] = NULL;
    }
}

static void reset(driver *d)
{
    free_states(d);
    memcpy(d->w, d->w0, d->total * sizeof(float));
    d->t = 0;
    memset(&d->cnt, 0, sizeof d->cnt);
    for (int i = 0; i < d->n; i++) {
        strata_status st;
        if (d->kind == OPT_MUON)
            st = strata_muon_state_create(&d->muon, d->be, d->rows[i], d->cols[i],
                                          (strata_muon_state **)&d->states[i]);
        else if (d->kind == OPT_SHAMPOO)
            st = strata_shampoo_state_create(&d->shampoo, d->be, d->rows[i], d->cols[i],
                                             (strata_shampoo_state **)&d->states[i]);
        else
            st = strata_soap_state_create(&d->soap, d->be, d->rows[i], d->cols[i],
                                          (strata_soap_state **)&d->states[i]);
        if (st != STRATA_OK)
            die("state create", st);
    }
}

static void step(driver *d)
{
    d->t++;
    const float *g = d->g + (size_t)((d->t - 1) % d->n_sets) * d->total;
    size_t off = 0;
    strata_optim_counters cnt;
    memset(&cnt, 0, sizeof cnt);
    for (int i = 0; i < d->n; i++) {
        strata_status st;
        if (d->kind == OPT_MUON)
            st = strata_muon_step(d->states[i], 1.0f, d->t, d->w + off, g + off, &cnt);
        else if (d->kind == OPT_SHAMPOO)
            st = strata_shampoo_step(d->states[i], 1.0f, d->t, d->w + off, g + off, &cnt);
        else
            st = strata_soap_step(d->states[i], 1.0f, d->t, d->w + off, g + off, &cnt);
        if (st != STRATA_OK)
            die("step", st);
        off += (size_t)(d->rows[i] * d->cols[i]);
    }
    if (cnt.root_failures)
        fprintf(stderr, "peer_step: %lld root failures at step %lld\n",
                (long long)cnt.root_failures, (long long)d->t);
    d->cnt.seconds_precondition += cnt.seconds_precondition;
    d->cnt.seconds_factors += cnt.seconds_factors;
    d->cnt.seconds_roots += cnt.seconds_roots;
}

static void set_key(driver *d, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq) {
        printf("error: bad option %s\n", kv);
        exit(1);
    }
    const size_t kl = (size_t)(eq - kv);
    const char *v = eq + 1;
    const double x = atof(v);
#define KEY(s) (kl == strlen(s) && strncmp(kv, s, kl) == 0)
    if (KEY("lr"))
        d->muon.lr = d->shampoo.lr = d->soap.lr = (float)x;
    else if (KEY("freq"))
        d->shampoo.precondition_frequency = d->soap.precondition_frequency = atoi(v);
    else if (KEY("start"))
        d->shampoo.start_preconditioning_step = atoi(v);
    else if (KEY("eps"))
        d->shampoo.epsilon = (float)x;
    else if (KEY("block"))
        d->shampoo.max_preconditioner_dim = atoi(v);
    else if (KEY("graft_eps"))
        d->shampoo.grafting_epsilon = (float)x;
    else if (KEY("mu"))
        d->muon.momentum = (float)x;
    else if (KEY("b1"))
        d->soap.beta1 = (float)x;
    else if (KEY("b2"))
        d->soap.beta2 = (float)x;
    else if (KEY("wd"))
        d->muon.weight_decay = d->shampoo.weight_decay = d->soap.weight_decay = (float)x;
    else if (KEY("ns"))
        d->muon.ns_method = strcmp(v, "auto") == 0   ? STRATA_NS_AUTO
                            : strcmp(v, "gram") == 0 ? STRATA_NS_GRAM
                                                     : STRATA_NS_STANDARD;
    else {
        printf("error: unknown option %s\n", kv);
        exit(1);
    }
#undef KEY
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: peer_step muon|shampoo|soap DIR THREADS [key=value ...]\n");
        return 2;
    }
    driver d;
    memset(&d, 0, sizeof d);
    d.kind = strcmp(argv[1], "muon") == 0      ? OPT_MUON
             : strcmp(argv[1], "shampoo") == 0 ? OPT_SHAMPOO
             : strcmp(argv[1], "soap") == 0    ? OPT_SOAP
                                               : (opt_kind)-1;
    if ((int)d.kind < 0) {
        fprintf(stderr, "peer_step: unknown optimizer %s\n", argv[1]);
        return 2;
    }
    /* Settings peers.py matches on the peer's side; keys override them. */
    strata_muon_config_default(&d.muon);
    d.muon.momentum_form = STRATA_MUON_MOMENTUM_EMA; /* optax's form */
    strata_shampoo_config_default(&d.shampoo);
    d.shampoo.beta1 = 0.0f;
    d.shampoo.beta2 = 1.0f;
    d.shampoo.grafting = STRATA_GRAFT_ADAGRAD;
    d.shampoo.grafting_epsilon = 1e-10f;
    strata_soap_config_default(&d.soap);
    for (int i = 4; i < argc; i++)
        set_key(&d, argv[i]);
    strata_status st = strata_backend_cpu_create(atoi(argv[3]), &d.be);
    if (st != STRATA_OK)
        die("backend", st);
    char path[4096];
    snprintf(path, sizeof path, "%s/shapes.txt", argv[2]);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("error: cannot read %s\n", path);
        return 1;
    }
    long long r, c;
    while (fscanf(f, "%lld %lld", &r, &c) == 2) {
        d.rows = realloc(d.rows, sizeof(int64_t) * (size_t)(d.n + 1));
        d.cols = realloc(d.cols, sizeof(int64_t) * (size_t)(d.n + 1));
        d.rows[d.n] = r, d.cols[d.n] = c;
        d.total += (size_t)(r * c);
        d.n++;
    }
    fclose(f);
    size_t nw = 0, ng = 0;
    snprintf(path, sizeof path, "%s/w.f32", argv[2]);
    d.w0 = read_floats(path, &nw);
    snprintf(path, sizeof path, "%s/g.f32", argv[2]);
    d.g = read_floats(path, &ng);
    if (!d.n || !d.w0 || !d.g || nw != d.total || ng % d.total != 0) {
        printf("error: %s: shapes, w.f32 and g.f32 disagree\n", argv[2]);
        return 1;
    }
    d.n_sets = (int)(ng / d.total);
    d.w = malloc(d.total * sizeof(float));
    d.states = calloc((size_t)d.n, sizeof(void *));
    if (!d.w || !d.states) {
        printf("error: out of memory\n");
        return 1;
    }
    reset(&d);
    printf("ready %d matrices, %zu floats, %d gradient sets, OpenBLAS %s, %d threads\n", d.n,
           d.total, d.n_sets, openblas_get_corename(), openblas_get_num_threads());
    fflush(stdout);
    char line[4200];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[16] = "", arg[4096] = "";
        if (sscanf(line, "%15s %4095s", cmd, arg) < 1)
            continue;
        if (strcmp(cmd, "reset") == 0) {
            reset(&d);
            printf("ok\n");
        } else if (strcmp(cmd, "step") == 0) {
            int k = atoi(arg);
            double t0 = now_s();
            for (int i = 0; i < k; i++)
                step(&d);
            printf("%.9f\n", now_s() - t0);
        } else if (strcmp(cmd, "dump") == 0) {
            FILE *o = fopen(arg, "wb");
            if (!o || fwrite(d.w, sizeof(float), d.total, o) != d.total) {
                printf("error: cannot write %s\n", arg);
                return 1;
            }
            fclose(o);
            printf("ok\n");
        } else if (strcmp(cmd, "split") == 0) {
            printf("%.9f %.9f %.9f\n", d.cnt.seconds_precondition, d.cnt.seconds_factors,
                   d.cnt.seconds_roots);
        } else if (strcmp(cmd, "quit") == 0) {
            break;
        } else {
            printf("error: unknown command %s\n", cmd);
        }
        fflush(stdout);
    }
    free_states(&d);
    free(d.states), free(d.w), free(d.w0), free(d.g), free(d.rows), free(d.cols);
    strata_backend_destroy(d.be);
    return 0;
}
