/* Built without MPI: the MPI communicator is not available. */
#include "strata/comm.h"

strata_status strata_comm_mpi_create(const void *mpi_comm, bool deterministic, strata_comm **out)
{
    (void)mpi_comm;
    (void)deterministic;
    if (out)
        *out = NULL;
    return strata_error(STRATA_ERR_UNSUPPORTED,
                        "strata was built without MPI (install libopenmpi-dev and rebuild with "
                        "-Dmpi=enabled)");
}
