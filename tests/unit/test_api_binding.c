/* The C API as a binding calls it (issue #22 items 16-20): sizes that
 * overflow, names and paths, aliased buffers, calls from two threads at
 * once, and the consistency of the one-tensor calls with the runtime. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "strata/optim.h"
#include "strata/strata.h"

static float *filled(size_t n, float v)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = v * (float)((i % 7) + 1);
    return p;
}

static strata_param_desc desc(const char *name, float *w, float *g, int64_t r, int64_t c)
{
    return (strata_param_desc){.name = name, .ndim = 2, .shape = {r, c}, .layer = 0,
                               .role = STRATA_ROLE_AUTO, .optimizer = STRATA_OPTIM_DEFAULT,
                               .data = w, .grad = g};
}

static strata_runtime *runtime_new(strata_optimizer opt)
{
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = opt;
    cfg.precondition_frequency = 2;
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    return rt;
}

/* Item 16: element counts, sides and batch x shape whose sizes overflow are
 * refused at registration and by the one-tensor creates, never allocated. */
static void test_sizes_overflow(void **state)
{
    (void)state;
    strata_runtime *rt = runtime_new(STRATA_OPTIM_SHAMPOO);
    float *w = filled(16, 0.1f), *g = filled(16, 0.01f);
    const int64_t big[][3] = {
        {(int64_t)1 << 40, (int64_t)1 << 40, 0}, /* 2^80 elements: wraps 64 bits */
        {(int64_t)1 << 62, 4, 0},                /* 2^64 elements */
        {(int64_t)1 << 33, 2, 0},                /* a side over 2^31 */
        {(int64_t)1 << 30, (int64_t)1 << 20, (int64_t)1 << 20}, /* stacked: batch x shape */
    };
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) {
        strata_param_desc d = desc("big", w, g, big[k][0], big[k][1]);
        if (big[k][2]) {
            d.ndim = 3;
            d.stacked = true;
            d.shape[2] = big[k][2];
        }
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
        assert_non_null(strstr(strata_last_error(), "big"));
    }
    /* item 20: a layer id far above any dense numbering, a misaligned pointer */
    strata_param_desc d = desc("far", w, g, 4, 4);
    d.layer = 1 << 30; /* per-layer state of 2^30 entries */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("odd", (float *)(void *)((char *)w + 1), g, 2, 2);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "aligned"));
    d = desc("ok", w, g, 4, 4);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    strata_destroy(rt);

    strata_backend *be = NULL;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    strata_muon_config mc;
    strata_muon_config_default(&mc);
    strata_muon_state *ms = NULL;
    /* 2^40 x 2^20 x 2^20 wraps to 0 in 64 bits */
    assert_int_equal(strata_muon_state_create_batched(&mc, be, (int64_t)1 << 40, 1 << 20, 1 << 20,
                                                      &ms),
                     STRATA_ERR_INVALID_ARG);
    assert_null(ms);
    strata_kl_shampoo_config kc;
    strata_kl_shampoo_config_default(&kc);
    strata_kl_shampoo_state *ks = NULL;
    /* a factor of side 2^31 - 1: (2^31)^2 float32 = 2^64 bytes */
    assert_int_equal(strata_kl_shampoo_state_create(&kc, be, INT32_MAX, 1, &ks),
                     STRATA_ERR_INVALID_ARG);
    assert_null(ks);
    strata_shampoo_config sc;
    strata_shampoo_config_default(&sc);
    sc.max_preconditioner_dim = INT32_MAX;
    strata_shampoo_state *ss = NULL;
    assert_int_equal(strata_shampoo_state_create(&sc, be, INT32_MAX, 1, &ss),
                     STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_shampoo_state_create(&sc, be, INT32_MAX, INT32_MAX, &ss),
                     STRATA_ERR_INVALID_ARG);
    assert_null(ss);
    strata_soap_config pc;
    strata_soap_config_default(&pc);
    pc.max_precond_dim = INT32_MAX;
    pc.precondition_1d = true; /* the vector rotated by one n x n factor */
    strata_soap_state *ps = NULL;
    assert_int_equal(strata_soap_state_create(&pc, be, INT32_MAX, 1, &ps), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_soap_state_create_vector(&pc, be, INT32_MAX, &ps),
                     STRATA_ERR_INVALID_ARG);
    assert_null(ps);
    strata_backend_destroy(be);
    free(w);
    free(g);
}

/* Item 17: names the checkpoint format reserves are refused at registration. */
static void test_reserved_names(void **state)
{
    (void)state;
    strata_runtime *rt = runtime_new(STRATA_OPTIM_SHAMPOO);
    float *w = filled(16, 0.1f), *g = filled(16, 0.01f);
    const char *bad[] = {"__metadata__", "w/exp_avg", "/", "a/"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        strata_param_desc d = desc(bad[k], w, g, 4, 4);
        assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
        assert_non_null(strstr(strata_last_error(), "reserves"));
    }
    strata_param_desc d = desc("__metadata", w, g, 4, 4); /* not the key itself */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    strata_destroy(rt);
    free(w);
    free(g);
}

/* Item 18: the same buffer twice, a gradient aliasing its weights, partly
 * overlapping buffers: refused; adjacent buffers are fine. */
static void test_aliasing(void **state)
{
    (void)state;
    float *w = filled(64, 0.1f), *g = filled(64, 0.01f);
    strata_runtime *rt = runtime_new(STRATA_OPTIM_SHAMPOO);
    strata_param_desc d = desc("self", w, w, 4, 4); /* gradient = weights */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "overlaps the weights"));
    d = desc("half", w, w + 8, 4, 4); /* gradient overlaps half the weights */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("a", w, g, 4, 4);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    d = desc("tied", w, g + 16, 4, 4); /* the same weights again (tied embedding and head) */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "'a'"));
    d = desc("twice", w, g, 4, 4); /* both buffers again */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "registered twice"));
    d = desc("part", w + 15, g + 32, 4, 4); /* one element of a's weights */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("grad-on-w", w + 32, w + 4, 4, 4); /* its gradient inside a's weights */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("w-on-grad", g + 8, g + 32, 4, 4); /* its weights inside a's gradient */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("grad-part", w + 48, g + 8, 4, 4); /* its gradient partly a's */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_ERR_INVALID_ARG);
    d = desc("next", w + 16, g + 16, 4, 4); /* adjacent: fine */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    d = desc("zero-grad", w + 32, g + 16, 2, 4); /* a gradient starting where next's does */
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    strata_stats s;
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    assert_int_equal(s.n_matrix + s.n_tail, 3);
    /* item 12: a hook for a layer that does not exist is refused */
    assert_int_equal(strata_hook_forward(rt, 0), STRATA_OK);
    assert_int_equal(strata_hook_forward(rt, 1), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "does not exist"));
    assert_int_equal(strata_hook_backward(rt, 7), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_layer_materialize(rt, 1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_layer_release(rt, 1), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_hook_backward(rt, 0), STRATA_OK);
    strata_destroy(rt);
    free(w);
    free(g);
}

static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strstr(de->d_name, part) != NULL;
    closedir(d);
    return n;
}

/* Item 17: a checkpoint replaces only a checkpoint; a trailing slash names
 * the directory; user JSON with trailing content is refused. */
static void test_save_paths(void **state)
{
    (void)state;
    char root[] = "/tmp/strata_api_binding_XXXXXX";
    assert_non_null(mkdtemp(root));
    float *w = filled(16, 0.1f), *g = filled(16, 0.01f);
    strata_runtime *rt = runtime_new(STRATA_OPTIM_SHAMPOO);
    strata_param_desc d = desc("w", w, g, 4, 4);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    assert_int_equal(strata_step(rt), STRATA_OK);

    char user_dir[256], file[300], ck[256], ck_slash[260];
    snprintf(user_dir, sizeof user_dir, "%s/mine", root);
    assert_int_equal(mkdir(user_dir, 0755), 0);
    snprintf(file, sizeof file, "%s/precious.txt", user_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("the user's file\n", f);
    fclose(f);
    assert_int_equal(strata_save(rt, user_dir, NULL, NULL), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "not a strata checkpoint"));
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(count_entries(root, ".tmp-"), 0);
    assert_int_equal(strata_save(rt, file, NULL, NULL), STRATA_ERR_INVALID_ARG); /* a file */
    assert_int_equal(stat(file, &sb), 0);

    /* a trailing slash: the checkpoint is ck itself, nothing inside it is temporary */
    snprintf(ck, sizeof ck, "%s/ck", root);
    snprintf(ck_slash, sizeof ck_slash, "%s/", ck);
    assert_int_equal(strata_save(rt, ck_slash, "{\"a\": 1}", NULL), STRATA_OK);
    assert_int_equal(count_entries(ck, ".tmp-"), 0);
    assert_int_equal(count_entries(ck, "manifest.json"), 1);
    assert_int_equal(count_entries(root, ".tmp-"), 0);
    /* replacing a checkpoint is fine; an empty directory too */
    assert_int_equal(strata_save(rt, ck, "{\"a\": 2}  \n", NULL), STRATA_OK);
    char empty[256];
    snprintf(empty, sizeof empty, "%s/empty", root);
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(strata_save(rt, empty, NULL, NULL), STRATA_OK);
    /* trailing content after the object */
    assert_int_equal(strata_save(rt, ck, "{\"a\": 3} {\"b\": 4}", NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_save(rt, ck, "{\"a\": 3} junk", NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_save(rt, ck, "[1]", NULL), STRATA_ERR_INVALID_ARG);
    char *user = NULL;
    assert_int_equal(strata_load(rt, ck_slash, &user, NULL), STRATA_OK);
    assert_non_null(user);
    assert_non_null(strstr(user, "2"));
    free(user);
    strata_destroy(rt);
    free(w);
    free(g);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* Item 19: two threads calling into one runtime at once. */
typedef struct racer {
    strata_runtime *rt;
    atomic_int *go, *done;
    atomic_int *refusals; /* either thread's refused calls so far */
    int which;          /* 0: steps; 1: set_lr_scale, param_set_buffers, save */
    const char *dir;
    float *w, *g;
    int ok, refused, other, steps; /* steps: strata_step calls that ran */
} racer;

static void *race_main(void *arg)
{
    racer *r = arg;
    while (!atomic_load(r->go))
        ;
    /* a: until 10 of its steps ran and either thread saw a call refused (b
     * may not have started before a's 10 steps on a loaded machine: seen
     * once under ASan), or 120 s passed (a count of tries ran out while b's
     * save waited on a slow fsync); b: until a is done */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; r->which == 0 ? r->steps < 10 || !atomic_load(r->refusals)
                                  : !atomic_load(r->done);
         i++) {
        if (r->which == 0 && (i & 1023) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec > 120)
                break;
        }
        strata_status st;
        bool step = false;
        if (r->which == 0)
            st = strata_step(r->rt), step = true;
        else if (i % 3 == 0)
            st = strata_set_lr_scale(r->rt, 1.0f);
        else if (i % 3 == 1)
            st = strata_param_set_buffers(r->rt, 0, r->w, r->g);
        else if (i % 300 == 2)
            st = strata_save(r->rt, r->dir, NULL, NULL);
        else
            st = strata_step(r->rt), step = true;
        if (st == STRATA_OK) {
            r->ok++;
            r->steps += step;
        }
        else if (st == STRATA_ERR_STATE && strstr(strata_last_error(), "in progress")) {
            r->refused++;
            atomic_fetch_add(r->refusals, 1);
        }
        else
            r->other++;
    }
    if (r->which == 0)
        atomic_store(r->done, 1);
    return NULL;
}

static void test_two_threads(void **state)
{
    (void)state;
    char root[] = "/tmp/strata_api_race_XXXXXX";
    assert_non_null(mkdtemp(root));
    char dir[256];
    snprintf(dir, sizeof dir, "%s/ck", root);
    const int64_t R = 96, C = 64;
    float *w = filled((size_t)(R * C), 0.01f), *g = filled((size_t)(R * C), 0.001f);
    strata_config cfg;
    strata_config_default(&cfg);
    cfg.matrix_optimizer = STRATA_OPTIM_SHAMPOO;
    cfg.precondition_frequency = 1; /* a root every step: a step takes a while */
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    strata_param_desc d = desc("w", w, g, R, C);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    atomic_int go = 0, done = 0, refusals = 0;
    racer a = {rt, &go, &done, &refusals, 0, dir, w, g, 0, 0, 0, 0};
    racer b = {rt, &go, &done, &refusals, 1, dir, w, g, 0, 0, 0, 0};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, race_main, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, race_main, &b), 0);
    atomic_store(&go, 1);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    /* every call either ran alone or was refused, and some were refused */
    assert_int_equal(a.other + b.other, 0);
    assert_true(a.refused + b.refused > 0);
    strata_stats s;
    assert_int_equal(strata_stats_get(rt, &s), STRATA_OK);
    /* the steps that ran are the steps counted: none lost, none doubled */
    assert_int_equal(s.step, a.steps + b.steps);
    assert_true(a.steps >= 10);
    for (int64_t i = 0; i < R * C; i++)
        assert_true(isfinite(w[i]));
    strata_destroy(rt);

    /* The weights are those of s.step steps run one after another. */
    float *w2 = filled((size_t)(R * C), 0.01f), *g2 = filled((size_t)(R * C), 0.001f);
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    d = desc("w", w2, g2, R, C);
    assert_int_equal(strata_param_add(rt, &d, NULL), STRATA_OK);
    assert_int_equal(strata_commit(rt), STRATA_OK);
    for (int64_t k = 0; k < s.step; k++)
        assert_int_equal(strata_step(rt), STRATA_OK);
    assert_memory_equal(w, w2, (size_t)(R * C) * sizeof *w);
    strata_destroy(rt);
    free(w);
    free(g);
    free(w2);
    free(g2);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* Item 20: the one-tensor steps refuse a NaN or negative lr scale as the
 * runtime does; SOAP and KL-Shampoo count the non-finite gradients they
 * refuse as the other families do; the worker range is the same at create
 * as at commit. */
static void test_consistency(void **state)
{
    (void)state;
    strata_adamw_config ac;
    strata_adamw_config_default(&ac);
    float *w = filled(16, 0.1f), *g = filled(16, 0.01f), *m = filled(16, 0.0f),
          *v = filled(16, 0.0f), *w0 = filled(16, 0.1f);
    const float bad[] = {NAN, INFINITY, -1.0f};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(strata_adamw_update(&ac, bad[k], 1, 16, w, g, m, v),
                         STRATA_ERR_INVALID_ARG);
        assert_memory_equal(w, w0, 16 * sizeof *w);
    }
    assert_int_equal(strata_adamw_update(&ac, 0.5f, 1, 16, w, g, m, v), STRATA_OK);

    strata_backend *be = NULL;
    assert_int_equal(strata_backend_cpu_create(1, &be), STRATA_OK);
    strata_soap_config pc;
    strata_soap_config_default(&pc);
    strata_soap_state *ps = NULL;
    assert_int_equal(strata_soap_state_create(&pc, be, 4, 4, &ps), STRATA_OK);
    strata_kl_shampoo_config kc;
    strata_kl_shampoo_config_default(&kc);
    strata_kl_shampoo_state *ks = NULL;
    assert_int_equal(strata_kl_shampoo_state_create(&kc, be, 4, 4, &ks), STRATA_OK);
    strata_muon_config mc;
    strata_muon_config_default(&mc);
    strata_muon_state *ms = NULL;
    assert_int_equal(strata_muon_state_create(&mc, be, 4, 4, &ms), STRATA_OK);
    memcpy(w, w0, 16 * sizeof *w);
    assert_int_equal(strata_soap_step(ps, NAN, 1, w, g, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_kl_shampoo_step(ks, NAN, 1, w, g, NULL), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_muon_step(ms, NAN, 1, w, g, NULL), STRATA_ERR_INVALID_ARG);
    assert_memory_equal(w, w0, 16 * sizeof *w);
    g[5] = NAN;
    strata_optim_counters cs = {0}, ck = {0}, cm = {0};
    assert_int_equal(strata_soap_step(ps, 1.0f, 1, w, g, &cs), STRATA_ERR_NONFINITE);
    assert_int_equal(strata_kl_shampoo_step(ks, 1.0f, 1, w, g, &ck), STRATA_ERR_NONFINITE);
    assert_int_equal(strata_muon_step(ms, 1.0f, 1, w, g, &cm), STRATA_ERR_NONFINITE);
    assert_int_equal(cm.nonfinite_rejected, 1);
    assert_int_equal(cs.nonfinite_rejected, 1);
    assert_int_equal(ck.nonfinite_rejected, 1);
    strata_soap_state_destroy(ps);
    strata_kl_shampoo_state_destroy(ks);
    strata_muon_state_destroy(ms);
    strata_backend_destroy(be);

    strata_config cfg;
    strata_config_default(&cfg);
    cfg.async = true;
    cfg.workers = 1025; /* over the worker pool's 1024: refused at create, not at commit */
    strata_runtime *rt = NULL;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_ERR_INVALID_ARG);
    assert_null(rt);
    cfg.workers = 1024;
    assert_int_equal(strata_create(&cfg, &rt), STRATA_OK);
    strata_destroy(rt);
    free(w);
    free(g);
    free(m);
    free(v);
    free(w0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_overflow),
        cmocka_unit_test(test_reserved_names),
        cmocka_unit_test(test_aliasing),
        cmocka_unit_test(test_save_paths),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_consistency),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
