/* plot.h — loss curves of GPT runs from their JSONL metrics, and the
 * gnuplot figure of validation loss against wall time that the staleness
 * sweep (sweep.h) and the optimizer race (race.h) both draw.
 */
#ifndef STRATA_EXAMPLES_PLOT_H
#define STRATA_EXAMPLES_PLOT_H

#include <stdio.h>

#include "strata/strata.h"

/* One training step of a run's JSONL "step" records. */
typedef struct strata_plot_point {
    int step;        /* 1-based */
    double wall_s;   /* cumulative step time at its end (evaluations excluded), seconds */
    double loss;     /* training loss of its batch, nats/byte */
    double val_loss; /* validation loss after it, nats/byte; NaN when not evaluated */
} strata_plot_point;

/* mkdir -p `dir` (mode 0755). Errors: STRATA_ERR_IO (with the path and the
 * errno text). */
strata_status strata_plot_make_dir(const char *dir);

/* Read the "step" records of the JSONL file `jsonl` (gpt_train's metrics)
 * into *points (malloc'd, the caller frees; NULL when there are none) and
 * their count into *n. Errors: STRATA_ERR_IO (cannot read, with the path),
 * STRATA_ERR_NOMEM. */
strata_status strata_plot_read(const char *jsonl, strata_plot_point **points, int *n);

/* `jsonl` -> `dat`: one line per step, "wall_s train_loss val_loss" (val
 * "NaN" off evaluation), the data file strata_plot_loss_vs_time plots.
 * Errors: STRATA_ERR_IO (either file, named), STRATA_ERR_NOMEM. */
strata_status strata_plot_jsonl_to_dat(const char *jsonl, const char *dat);

/* One curve of the figure: DIR/<file>.dat, titled `title` in the key. */
typedef struct strata_plot_curve {
    const char *file;  /* file name stem in the directory */
    const char *title; /* the key's text (no single quotes) */
} strata_plot_curve;

/* Print the validation loss per step of each curve (DIR/<file>.jsonl), one
 * row per curve, one column per validation step of the first curve (at
 * most 10: every k-th and the last), then, where ref[i] >= 0, row i's
 * largest gap (val - ref) / ref over the validations both curves share, in
 * percent, and the name of curve ref[i] (ref may be NULL: no gaps).
 * Errors: those of strata_plot_read. */
strata_status strata_plot_print_val_table(const char *dir, const strata_plot_curve *curves,
                                          const int *ref, int n, FILE *out);

/* Write DIR/loss_vs_time.gp (validation loss, column 3, against wall time,
 * column 1, one line per curve, figure title `title`) and run gnuplot on it
 * to draw DIR/loss_vs_time.png. A missing or failing gnuplot is a warning
 * on `out` (may be NULL), not an error: the script stays for later.
 * Errors: STRATA_ERR_IO (the script cannot be written). */
strata_status strata_plot_loss_vs_time(const char *dir, const char *title,
                                       const strata_plot_curve *curves, int n, FILE *out);

#endif
