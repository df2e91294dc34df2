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

/* Make call number `nth` (1-based, counted from this call) among the
 * file-system calls of this runtime's strata_save fail with errno
 * `errno_value` (EIO, ENOSPC, ...). Counted calls, in the order a save makes
 * them: mkdtemp of the temporary directory, and per file open, every
 * write(2), fsync, close; then the directory's open and fsync, the rename
 * (and the exchange with an existing checkpoint), the parent's open and
 * fsync. nth = 0 disarms and only resets the count. The call stays armed
 * until it is reached (a later save may hit it). Single-threaded, like
 * strata_save. Errors: STRATA_ERR_INVALID_ARG (NULL, nth < 0, errno_value <= 0). */
strata_status strata_testing_inject_ckpt_fault(strata_runtime *rt, int64_t nth, int errno_value);

/* The number of counted checkpoint file-system calls since the last
 * strata_testing_inject_ckpt_fault (or since create): a clean save's count
 * bounds the `nth` worth trying. -1 for NULL. */
int64_t strata_testing_ckpt_calls(const strata_runtime *rt);

/* Install results from device memory through the stream seam
 * (strata_refresh_config.device_roots) whatever the backend, as the CUDA
 * backend does: on the CPU backend the copies are inline, so the path is
 * exercised without a GPU. Call before strata_commit. Errors:
 * STRATA_ERR_INVALID_ARG (NULL), STRATA_ERR_STATE (after commit). */
strata_status strata_testing_set_device_roots(strata_runtime *rt, bool on);

/* Hold the refresh jobs of parameter `id` (-1: of every parameter) on their
 * worker threads until released (id = -2), so that a step that needs one of
 * their results waits for it and, with a small wait_timeout_s, times out
 * (strata_step's first pass: STRATA_ERR_TIMEOUT, nothing changed).
 * Synchronous refreshes are not affected. strata_destroy releases them.
 * Call after strata_commit. Errors: STRATA_ERR_INVALID_ARG (NULL, id out of
 * range), STRATA_ERR_STATE (before commit). */
strata_status strata_testing_hold_refreshes(strata_runtime *rt, strata_param_id id);

/* Make the snapshots of the next `n` refresh points (counted per block, in
 * the order the step reaches them) fail as a failed nvme write would, inside
 * the step after the factor update: each such refresh point keeps the
 * previous result and is counted (stats.snapshot_failures; also
 * stats.coh_failed for asynchronous blocks, stats.io_errors for nvme blocks); the step returns STRATA_OK. Call after
 * strata_commit. Errors: STRATA_ERR_INVALID_ARG (NULL, n < 0),
 * STRATA_ERR_STATE (before commit). */
strata_status strata_testing_inject_snapshot_errors(strata_runtime *rt, int n);

#endif
