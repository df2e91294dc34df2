/* The OpenBLAS core in use and the re-execution that replaces a generic
 * fallback core (blas_core.h). The library's calls go through
 * backend/blas.h; on a BLAS without a core override (BLIS) the re-execution
 * and the warning do nothing and the core is the library's arch. */
#include "blas_core.h"

#include "backend/blas.h"
#include "base/env.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

void gpt_blas_core_get(gpt_blas_core *out)
{
    memset(out, 0, sizeof *out);
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
