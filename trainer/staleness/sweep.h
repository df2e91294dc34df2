/* sweep.h — staleness experiments: how stale may a preconditioner get?
 *
 * Trains the example GPT with synchronous Shampoo and with asynchronous
 * Shampoo at each staleness budget S (same model, data, seed and steps),
 * and writes, in out_dir:
 *   sweep.tsv          one row per run: final validation loss, wall time
 *                      (seconds), p50/p99/max step time (ms), waits, wait
 *                      time (s), max staleness seen (steps), critical-path
 *                      fraction; the same and the validation loss per step
 *                      (each async run's largest gap to sync) on `out`;
 *   <run>.jsonl        each run's metrics (sync.jsonl, S0.jsonl, S1.jsonl...);
 *   <run>.dat          wall time vs train loss and validation loss;
 *   loss_vs_time.gp    the gnuplot script, and
 *   loss_vs_time.png   validation loss against wall time per run (when
 *                      gnuplot is installed; otherwise a warning).
 */
#ifndef STRATA_EXAMPLES_SWEEP_H
#define STRATA_EXAMPLES_SWEEP_H

#include <stdio.h>

#include "trainer.h"

typedef struct strata_sweep_options {
    gpt_train_options train; /* the base run: its optimizer when it can run async (SOAP,
                                KL-Shampoo), otherwise Shampoo */
    const int *values;       /* staleness budgets S >= 0 */
    int n_values;
    const char *out_dir;     /* created if missing */
} strata_sweep_options;

/* Check `o` before any run: 1..64 budgets, each S >= 0 and, for an
 * optimizer whose asynchronous refreshes bound S (its max_staleness, as
 * strata_commit requires; no built-in optimizer bounds it), within that bound. strata_sweep_staleness calls it first, so a bad budget
 * fails before the synchronous run. Errors: STRATA_ERR_INVALID_ARG (the
 * budget named). */
strata_status strata_sweep_check(const strata_sweep_options *o);

/* Run the sweep, printing one line per finished run and the table to `out`.
 * A run stopped by a signal (train.stop) ends the sweep without a table and
 * returns STRATA_OK; the caller knows from its flag. Errors: STRATA_ERR_INVALID_ARG, STRATA_ERR_IO (out_dir), and any status of
 * gpt_train (the run that failed is named). */
strata_status strata_sweep_staleness(const strata_sweep_options *o, FILE *out);

#endif
