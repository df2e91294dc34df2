/* race.h — the optimizer race: which matrix optimizer reaches a loss first,
 * in wall-clock time?
 *
 * Trains the example GPT once per run of a list (same model, data, seed,
 * step budget and validation schedule; one run after another, never two at
 * once) and writes, in out_dir:
 *   race.tsv           one row per validation: optimizer, variant, step,
 *                      wall seconds (the steps' time so far, evaluations
 *                      excluded), validation loss;
 *   ratios.tsv         one row per run: final validation loss, wall time,
 *                      the wall time at which its validation loss first
 *                      reached AdamW's final one and that time as a ratio
 *                      of AdamW's whole wall time (empty when never reached),
 *                      critical-path fraction, step time max/median, the
 *                      step of that first validation (reach_step), and the
 *                      waits for refreshes (count, seconds);
 *   <run>.jsonl        each run's metrics; <run>.dat its curve;
 *   loss_vs_time.gp    the gnuplot script, and
 *   loss_vs_time.png   validation loss against wall time per run (when
 *                      gnuplot is installed; otherwise a warning).
 * The reference, AdamW, runs first whatever its place in the list.
 */
#ifndef STRATA_EXAMPLES_RACE_H
#define STRATA_EXAMPLES_RACE_H

#include <stdbool.h>
#include <stdio.h>

#include "trainer.h"

#define STRATA_RACE_MAX_RUNS 64

/* The run list's default: AdamW, Muon, NorMuon, Dion2, synchronous Shampoo,
 * asynchronous staggered Shampoo (one run per staleness budget), SOAP,
 * KL-Shampoo. The list may name it as "default". */
#define STRATA_RACE_DEFAULT_RUNS \
    "adamw,muon,normuon,dion2,shampoo,shampoo-async,soap,kl-shampoo"

/* The preset "fresh" (issue #23 item 2): a refresh every step, synchronous
 * (F = 1) and one step behind on the workers (F = 1, S = 1), against each
 * family's default F, for Shampoo, SOAP and KL-Shampoo, and Shampoo's
 * stale-correction valve at F = 1, S = 1. Seven of its eleven runs refresh
 * every step: about 2x the default list's time per step. */
#define STRATA_RACE_FRESH_RUNS                                                        \
    "adamw,shampoo,shampoo-f1,shampoo-f1-async-s1,shampoo-f1-async-s1-valve,soap,"   \
    "soap-f1,soap-f1-async-s1,kl-shampoo,kl-shampoo-f1,kl-shampoo-f1-async-s1"

/* The epsilon of a -valve run when the options' is smaller: with the default
 * 1e-10 the valve refuses every correction (README, the valve). */
#define STRATA_RACE_VALVE_EPSILON 1e-4f

typedef struct strata_race_options {
    gpt_train_options train; /* the model, data, steps, validation and hyperparameters of
                                every run; each run sets its optimizer, async, staleness
                                and (async runs) stagger_refresh itself */
    const char *runs;        /* comma-separated entries NAME[-fF][-async[-sS]][-valve]: an
                                optimizer name (synchronous, as `train` runs it); -fF its
                                precondition frequency F (default: the options'); -async
                                its refreshes on workers, staggered over the period when
                                F > 1, one run per staleness budget of `staleness`, or at
                                S alone with -sS; -valve (Shampoo, async) the stale-
                                correction valve (newton) at epsilon >=
                                STRATA_RACE_VALVE_EPSILON; or a preset, "default" or
                                "fresh". NULL: the default list. Must name adamw (the
                                reference). */
    const int *staleness;    /* budgets S >= 0 of the -async runs */
    int n_staleness;         /* >= 1 */
    const char *out_dir;     /* created if missing */
} strata_race_options;

/* One run of the race, as the list expands. */
typedef struct strata_race_run {
    strata_optimizer optimizer;
    bool async;              /* refreshes on workers, staggered when F > 1 */
    int staleness;           /* S of an async run; -1 otherwise */
    int frequency;           /* F of a -fF entry; 0: the options' */
    bool valve;              /* --stale-correction newton (epsilon >= STRATA_RACE_VALVE_EPSILON) */
    char name[48];           /* file stem: "shampoo", "shampoo-async-S2", "soap-f1-async-s1" */
    char variant[40];        /* "sync", "async-S2-staggered", "sync-F1", "async-F1-S1-valve"
                                ("...-valve-eps1e-4" where the race raised epsilon), "-"
                                (nothing to refresh) */
} strata_race_run;

/* Expand o->runs into runs[0..*n) (AdamW first, then the list's order).
 * Errors: STRATA_ERR_INVALID_ARG, naming the entry: an unknown optimizer,
 * NAME-async for an optimizer whose refreshes cannot run on workers (adamw,
 * muon, kl-shampoo's exact form), -fF for one without refreshes or F < 1,
 * -sS or -valve without -async, -valve for another family than Shampoo, no
 * adamw, a repeated run, more than STRATA_RACE_MAX_RUNS runs, a bad
 * staleness list. */
strata_status strata_race_plan(const strata_race_options *o, strata_race_run *runs, int *n);

/* Run the race, printing one line per finished run and then, per run, the
 * time to AdamW's final validation loss and its ratio to AdamW's wall time,
 * and the validation loss per step with each run's largest gap to its
 * reference run (strata_plot_print_val_table) to `out`. A run stopped by a signal (train.stop) ends the race without the
 * tables and returns STRATA_OK; the caller knows from its flag. Errors:
 * those of strata_race_plan, STRATA_ERR_IO (out_dir and its files), and any
 * status of gpt_train (the run that failed is named). */
strata_status strata_race(const strata_race_options *o, FILE *out);

#endif
