/* Built without the NCCL communicator (meson's 'nccl' feature needs CUDA,
 * libnccl and MPI): strata_comm_nccl_create says so, so that every build
 * exports the same symbols (runtime/strata.map). */
#include "strata/comm.h"

strata_status strata_comm_nccl_create(const void *mpi_comm, bool deterministic, strata_comm **out)
{
    (void)mpi_comm;
    (void)deterministic;
    if (out)
        *out = NULL;
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "strata was built without the NCCL communicator (it needs CUDA, libnccl "
                        "and MPI; rebuild with -Dnccl=enabled)");
}
