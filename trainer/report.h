/* report.h — what a GPT training run tells the world.
 *
 * The trainer (trainer.c) runs the steps; a gpt_report keeps the run's
 * record (each step's loss and timings) and writes it out:
 *   - to a FILE: a header, then per step a plain line or a progress bar
 *     (tty), then the summary lines ("summary: ...", "step time ms: ...",
 *     "optimizer: ...", and "async: ..." for an asynchronous run);
 *   - to the JSONL metrics file: one "config" record (its keys are described
 *     by one table in report.c), one "step" record per step, one "summary".
 * The life of a report: gpt_report_open (allocates, opens the metrics file),
 * gpt_report_begin once, gpt_report_step once per finished step,
 * gpt_report_summary once at the end of a successful run (or
 * gpt_report_diverged once when training diverged), gpt_report_close always. One thread; not reentrant across reports sharing a FILE.
 */
#ifndef STRATA_EXAMPLES_GPT_REPORT_H
#define STRATA_EXAMPLES_GPT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "strata/strata.h"
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_report gpt_report;

/* What the header and the config record say about the run besides its options. */
typedef struct gpt_run_info {
    size_t n_files, n_train, n_val; /* corpus: files read, train / val bytes */
    size_t params;                  /* model parameters */
    int n_matrix, n_tail;           /* tensors routed to the matrix optimizer / the AdamW tail */
    double unigram_val_loss;        /* nats/byte, see gpt_train_result */
    int blas_threads;               /* OpenBLAS threads the step runs with (the actual count) */
    int step_threads;               /* threads of the plain (Muon, AdamW) updates in a step
                                       (strata_stats.step_threads) */
    int workers;                    /* worker threads of an asynchronous run (actual count) */
} gpt_run_info;

/* One finished optimizer step. */
typedef struct gpt_step_record {
    int step;                  /* 1-based */
    float loss;                /* training loss of the step's batch, nats/byte */
    double step_seconds;       /* the whole step: forward, backward, strata_step */
    double opt_seconds;        /* strata_step alone */
    float lr_scale;            /* the schedule's factor at this step */
    bool evaluated;            /* a validation ran after this step */
    double val_loss;           /* its loss (nats/byte) when evaluated */
    const strata_stats *stats; /* the runtime's counters after the step */
} gpt_step_record;

/* mkdir -p of the directory part of `path` (everything before its last
 * '/'), mode 0755; a component that cannot be made is left for the caller's
 * own open or mkdir to report (with its errno). */
void gpt_make_parent_dirs(const char *path);

/* Start the report of a run with the resolved options `o` (warm-up and data
 * path filled in; copied). `out` receives the human-readable lines (NULL:
 * none); with o->quiet only the summary goes there; o->progress picks
 * plain lines (0), a progress bar (1) or decides by isatty(out) (-1). Opens
 * (creating parent directories) o->metrics_path when set.
 * Errors: STRATA_ERR_NOMEM ("gpt_train: out of memory"), STRATA_ERR_IO
 * (the metrics file cannot be written, with its path and errno text). */
strata_status gpt_report_open(const gpt_train_options *o, FILE *out, gpt_report **rep);

/* The header lines and the JSONL config record. */
void gpt_report_begin(gpt_report *rep, const gpt_run_info *info);

/* Record one step (steps in order, at most o->steps) and print / write it. */
void gpt_report_step(gpt_report *rep, const gpt_step_record *r);

/* A resumed run: the training losses of the steps before the resume (the
 * last n <= 10, oldest first), so that final_train_loss averages the same
 * steps as the uninterrupted run. Call before the first gpt_report_step. */
void gpt_report_seed_losses(gpt_report *rep, const float *losses, int n);

/* Fill res's losses and timings (final_train_loss, final_val_loss,
 * wall_seconds, tokens_per_second, step_ms_*, opt_ms_*) from the recorded
 * steps (at least one), then print the summary and write the summary record.
 * res->stats and res->unigram_val_loss must already hold the run's values. */
void gpt_report_summary(gpt_report *rep, gpt_train_result *res);

/* The staleness budget's choice (res->budget, --staleness auto) in one line,
 * written into buf (n bytes); returns buf. */
const char *gpt_budget_line(const gpt_train_result *res, char *buf, size_t n);

/* A run that diverged (STRATA_ERR_NONFINITE): fill res like
 * gpt_report_summary (from the steps recorded so far, possibly none) and
 * write the summary record with "diverged": true to the metrics file; no
 * summary lines are printed (the error says what happened). res->stats,
 * res->totals and res->unigram_val_loss must already hold the run's values. */
void gpt_report_diverged(gpt_report *rep, gpt_train_result *res);

/* End the report: after a failed run (st != STRATA_OK) end a progress bar's
 * line; close the metrics file. Returns st, or STRATA_ERR_IO when st was OK
 * and closing the metrics file failed. NULL is a no-op returning st. */
strata_status gpt_report_close(gpt_report *rep, strata_status st);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_EXAMPLES_GPT_REPORT_H */
