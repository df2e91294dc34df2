/* The CUDA backend's entry points in a build without CUDA (meson
 * -Dcuda=disabled, or no nvcc found): both say so, so that
 * strata_backend_create_kind(STRATA_BACKEND_CUDA) and `strata train
 * --device cuda` fail cleanly with STRATA_ERR_UNSUPPORTED. */
#include "../backend_internal.h"

static strata_status not_built(void)
{
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "backend 'cuda': this strata library was built without the CUDA "
                        "backend (reconfigure with meson -Dcuda=enabled on a machine with "
                        "the CUDA toolkit), use backend 'cpu'");
}

strata_status strata_backend_cuda_available(int *count)
{
    *count = 0;
    return not_built();
}

strata_status strata_backend_cuda_create(strata_backend **out)
{
    *out = NULL;
    return not_built();
}
