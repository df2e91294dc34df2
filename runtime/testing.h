/* runtime/testing.h — fault injection and timing knobs for strata's own
 * tests. Not installed; tests include it from the source tree and link the
 * internal library. */
#ifndef STRATA_RUNTIME_TESTING_H
#define STRATA_RUNTIME_TESTING_H

#include "strata/strata.h"

/* Make every worker job sleep a random 0..max_us microseconds before it runs
 * (deterministic seed), so that tests see jobs finish out of order and late.
 * Call before strata_commit. Errors: STRATA_ERR_INVALID_ARG (NULL, max_us <
 * 0), STRATA_ERR_STATE (after commit). */
strata_status strata_testing_set_worker_delay(strata_runtime *rt, int max_us);

/* Make the next `n` nvme-tier transfers of this runtime fail with errno
 * `errno_value`. Errors: STRATA_ERR_STATE (the runtime has no nvme tier). */
strata_status strata_testing_inject_io_errors(strata_runtime *rt, int n, int errno_value);

/* Install results from device memory through the stream seam
 * (strata_refresh_config.device_roots) whatever the backend, as the CUDA
 * backend does: on the CPU backend the copies are inline, so the path is
 * exercised without a GPU. Call before strata_commit. Errors:
 * STRATA_ERR_INVALID_ARG (NULL), STRATA_ERR_STATE (after commit). */
strata_status strata_testing_set_device_roots(strata_runtime *rt, bool on);

#endif
