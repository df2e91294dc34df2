/* backend/blas.h over OpenBLAS (-Dblas=openblas). */
#include "blas.h"

#include <cblas.h>

const char *strata_blas_name(void)
{
    return "OpenBLAS";
}

const char *strata_blas_version(void)
{
    return openblas_get_config();
}

const char *strata_blas_core(void)
{
    return openblas_get_corename();
}

const char *strata_blas_core_env(void)
{
    return "OPENBLAS_CORETYPE";
}

void strata_blas_threads_set(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}

int strata_blas_threads(void)
{
    const int n = openblas_get_num_threads();
    return n > 0 ? n : 1;
}
