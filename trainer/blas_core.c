/* The OpenBLAS core in use and the re-execution that replaces a generic
 * fallback core (blas_core.h). The library's calls go through
 * backend/blas.h; on a BLAS without a core override (BLIS) the re-execution
 * and the warning do nothing and the core is the library's arch. */
#include "blas_core.h"

#include "backend/blas.h"
#include "base/env.h"

#include <cblas.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

bool gpt_blas_core_is_generic(const char *core)
{
    static const char *const generic[] = {"Prescott", "Core2",    "Penryn", "Dunnington",
                                          "Katmai",   "Coppermine", "Northwood", "Banias",
                                          "Atom",     "armv8"};
    if (!core)
        return false;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (strcasecmp(core, generic[i]) == 0)
            return true;
    return false;
}

const char *gpt_blas_core_better(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
    return NULL;
#elif defined(__aarch64__)
    const unsigned long hw = getauxval(AT_HWCAP);
#ifdef HWCAP_SVE
    if (hw & HWCAP_SVE)
        return "NeoverseV1";
#endif
#ifdef HWCAP_ASIMD
    if (hw & HWCAP_ASIMD)
        return "NeoverseN1";
#endif
    return NULL;
#else
    return NULL;
#endif
}

/* OPENBLAS_CORETYPE counts as the user's choice unless strata set it or the
 * test knob says to treat it as detected. */
static bool user_chose_core(void)
{
    const char *env = strata_blas_core_env();
    const char *ct = env ? strata_env_str(STRATA_ENV_OPENBLAS_CORETYPE) : NULL;
    if (!ct)
        return false;
    return !strata_env_is_set(STRATA_ENV_BLAS_CORE_FROM) &&
           !strata_env_is_set(STRATA_ENV_TEST_CORE_AS_DETECTED);
}

static int core_rank(const char *c);

/* The probe's findings (gpt_blas_core_probe_forced; the CLI's thread). */
static char probed_core[64];
static double probed_gflops_core, probed_gflops_detected;

void gpt_blas_core_get(gpt_blas_core *out)
{
    memset(out, 0, sizeof *out);
    if (probed_core[0]) {
        out->detected = probed_core;
        out->gflops_core = probed_gflops_core;
        out->gflops_detected = probed_gflops_detected;
    }
    out->core = strata_blas_core();
    const char *env = strata_blas_core_env();
    if (!env) {
        out->source = "blis";
        return;
    }
    const char *from = strata_env_str(STRATA_ENV_BLAS_CORE_FROM);
    if (from && *from && strata_env_is_set(STRATA_ENV_OPENBLAS_CORETYPE)) {
        out->source = "strata";
        out->from = from;
    } else {
        out->source = user_chose_core() ? "user" : "openblas";
    }
    if (gpt_blas_core_is_generic(out->core)) {
        const char *b = gpt_blas_core_better();
        if (b && strcasecmp(b, out->core) != 0)
            out->better = b;
    }
    if (strcmp(out->source, "user") == 0) {
        const int have = core_rank(out->core), can = core_rank(gpt_blas_core_better());
        if (have >= 0 && can >= 0 && have < can)
            out->supports = gpt_blas_core_better();
    }
}

void gpt_blas_core_reexec(char **argv)
{
    if (!strata_blas_core_env() || user_chose_core() || strata_env_is_set(STRATA_ENV_BLAS_CORE_FROM))
        return;
    const char *core = strata_blas_core();
    const char *better = gpt_blas_core_better();
    if (!gpt_blas_core_is_generic(core) || !better)
        return;
    if (setenv(GPT_BLAS_CORE_FROM_ENV, core, 1) != 0 ||
        setenv("OPENBLAS_CORETYPE", better, 1) != 0)
        return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* still here: go on with the generic core, and say how to get the fast one */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(GPT_BLAS_CORE_FROM_ENV);
    fprintf(stderr, "strata: warning: could not re-execute with OPENBLAS_CORETYPE=%s; running "
                    "on OpenBLAS's generic %s kernels\n", better, core);
}

void gpt_blas_core_warn(const gpt_blas_core *c, FILE *f)
{
    if (!c->better || !f)
        return;
    fprintf(f,
            "strata: warning: OpenBLAS runs its generic %s kernels (about half the GEMM speed) "
            "on a CPU that supports %s's; set OPENBLAS_CORETYPE=%s%s\n",
            c->core, c->better, c->better,
            strcmp(c->source, "user") == 0 ? " (you set OPENBLAS_CORETYPE yourself, so strata "
                                             "kept it)"
                                           : "");
}

/* Kernel sets by strength, within one architecture; -1: not ranked. */
static int core_rank(const char *c)
{
    static const struct {
        const char *name;
        int rank;
    } t[] = {{"Sandybridge", 1}, {"Haswell", 2},    {"Zen", 2},        {"SkylakeX", 3},
             {"Cooperlake", 4},  {"SapphireRapids", 5}, {"NeoverseN1", 1}, {"NeoverseV1", 2}};
    if (!c)
        return -1;
    if (gpt_blas_core_is_generic(c))
        return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcasecmp(c, t[i].name) == 0)
            return t[i].rank;
    return -1;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double gpt_blas_gemm_probe(double seconds)
{
    enum { N = 256 };
    float *a = malloc(3 * sizeof(float) * N * N);
    if (!a)
        return 0.0;
    float *b = a + N * N, *c = b + N * N;
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c,
                N); /* warm-up: thread start, page faults */
    long iters = 0;
    const double t0 = seconds_now();
    double dt = 0.0;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f,
                    c, N);
        iters++;
        dt = seconds_now() - t0;
    } while (dt < seconds || iters < 2);
    free(a);
    return 2.0 * N * N * (double)N * (double)iters / dt * 1e-9;
}

int gpt_blas_core_probe_main(void)
{
    const double g = gpt_blas_gemm_probe(0.1);
    printf("%s %.3f\n", strata_blas_core() ? strata_blas_core() : "?", g);
    return 0;
}

extern char **environ;

void gpt_blas_core_probe_forced(void)
{
    if (!strata_blas_core_env() || !user_chose_core())
        return;
    const char *core = strata_blas_core();
    const int have = core_rank(core), can = core_rank(gpt_blas_core_better());
    if (have < 0 || can < 0 || have >= can)
        return;
    /* the child's environment: ours without OPENBLAS_CORETYPE */
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env)
        return;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) != 0)
            env[k++] = environ[i];
    int fd[2];
    if (pipe(fd) != 0) {
        free(env);
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    char *args[] = {"strata", "__blas-probe", NULL};
    pid_t pid;
    fflush(NULL);
    const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(fd[1]);
    if (rc != 0) {
        close(fd[0]);
        return;
    }
    /* this process's probe while the child runs would share the cores: after */
    char buf[128] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    char name[64];
    double g = 0.0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(buf, "%63s %lf", name, &g) != 2 || !(g > 0.0))
        return;
    probed_gflops_core = gpt_blas_gemm_probe(0.1);
    probed_gflops_detected = g;
    snprintf(probed_core, sizeof probed_core, "%s", name);
}

void gpt_blas_core_print(FILE *f)
{
    gpt_blas_core c;
    gpt_blas_core_get(&c);
    fprintf(f, "%s core: %s", strata_blas_name(), c.core ? c.core : "?");
    if (c.detected)
        fprintf(f, "; forced weaker than this CPU's %s (unset OPENBLAS_CORETYPE to use it): "
                   "SGEMM probe 0.1 s each, %s %.1f GFLOP/s, %s %.1f GFLOP/s", c.detected, c.core ? c.core : "?", c.gflops_core,
                c.detected, c.gflops_detected);
    fputc('\n', f);
}
