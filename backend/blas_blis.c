/* backend/blas.h over BLIS (-Dblas=blis; Debian's libblis, OpenMP build). */
#include "blas.h"

#include <blis.h>
#include <pthread.h>
#include <stdio.h>

static char g_version[64];
static pthread_once_t g_version_once = PTHREAD_ONCE_INIT;

static void version_init(void)
{
    snprintf(g_version, sizeof g_version, "BLIS %s", bli_info_get_version_str());
}

const char *strata_blas_name(void)
{
    return "BLIS";
}

const char *strata_blas_version(void)
{
    pthread_once(&g_version_once, version_init);
    return g_version;
}

const char *strata_blas_core(void)
{
    return bli_arch_string(bli_arch_query_id());
}

const char *strata_blas_core_env(void)
{
    return NULL;
}

void strata_blas_threads_set(int n)
{
    if (n > 0)
        bli_thread_set_num_threads((dim_t)n);
}

int strata_blas_threads(void)
{
    const dim_t n = bli_thread_get_num_threads();
    return n > 0 ? (int)n : 1;
}
