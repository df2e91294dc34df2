/* The optimizer race over the GPT main job (see race.h). */
#include "race.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plot.h"
#include "settings.h"

typedef struct race_row {
    strata_race_run run;
    gpt_train_result r;
    double reach_s;  /* wall time of the first validation at or below the target; NaN: never */
    int reach_step;  /* that validation's step; -1: never */
    double lr, tail_lr; /* the run's peak lrs: its matrices' and its AdamW tail's */
} race_row;

/* Append one run to runs[*n] unless the list is full or names it twice
 * (the same optimizer, F, S, async and valve under any spelling). */
static strata_status plan_add(strata_race_run *runs, int *n, const strata_race_run *r)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(runs[i].name, r->name) == 0 ||
            (runs[i].optimizer == r->optimizer && runs[i].async == r->async &&
             runs[i].staleness == r->staleness && runs[i].frequency == r->frequency &&
             runs[i].valve == r->valve))
            return strata_error(STRATA_ERR_INVALID_ARG, "race: run '%s' is listed twice "
                                "(or once and in a preset: default and fresh list their runs "
                                "in --help)", r->name);
    if (*n == STRATA_RACE_MAX_RUNS)
        return strata_error(STRATA_ERR_INVALID_ARG, "race: more than %d runs",
                            STRATA_RACE_MAX_RUNS);
    runs[(*n)++] = *r;
    return STRATA_OK;
}

/* Strip "-" `key` (ignoring case) from the end of name[0..*len). */
static bool strip_word(char *name, size_t *len, const char *key)
{
    const size_t kl = strlen(key);
    if (*len <= kl + 1 || name[*len - kl - 1] != '-' || strcasecmp(name + *len - kl, key) != 0)
        return false;
    *len -= kl + 1;
    name[*len] = '\0';
    return true;
}

/* Strip "-" `key` DIGITS (the key ignoring case) from the end of
 * name[0..*len) into *value; -1 when the digits are too many. */
static bool strip_number(char *name, size_t *len, char key, int *value)
{
    size_t d = *len;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    if (d == *len || d < 3 || name[d - 2] != '-' || (name[d - 1] | 0x20) != key)
        return false;
    *value = *len - d > 7 ? -1 : atoi(name + d);
    *len = d - 2;
    name[*len] = '\0';
    return true;
}

/* One entry of the list, NAME[-fF][-async[-sS]][-valve], expanded into runs. */
static strata_status plan_entry(const strata_race_options *o, const char *tok, size_t len,
                                strata_race_run *runs, int *n)
{
    char name[40];
    if (len == 0 || len >= sizeof name)
        return strata_error(STRATA_ERR_INVALID_ARG, "race: bad run '%.*s' in the list",
                            (int)len, tok);
    memcpy(name, tok, len);
    name[len] = '\0';
    char entry[40];
    memcpy(entry, name, len + 1);
    strata_race_run r = {.staleness = -1};
    int s_only = -1;
    r.valve = strip_word(name, &len, "valve");
    const bool has_s = strip_number(name, &len, 's', &s_only);
    r.async = strip_word(name, &len, "async");
    const bool has_f = strip_number(name, &len, 'f', &r.frequency);
    if (strata_optimizer_parse(name, &r.optimizer) != STRATA_OK)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "race: unknown optimizer '%s' in the run list (adamw, muon, normuon, "
                            "dion2, shampoo, soap, kl-shampoo, each optionally "
                            "NAME[-fF][-async[-sS]][-valve]; presets default, fresh)",
                            name);
    if ((has_s && !r.async) || (r.valve && !r.async))
        return strata_error(STRATA_ERR_INVALID_ARG, "race: '%s': %s needs -async", entry,
                            r.valve ? "-valve" : "-sS");
    if (has_f && r.frequency < 1)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "race: '%s': the precondition frequency -fF needs 1 <= F <= 9999999",
                            entry);
    if (has_s && s_only < 0)
        return strata_error(STRATA_ERR_INVALID_ARG, "race: '%s': staleness -sS too large",
                            entry);
    strata_config c = o->train.strata;
    c.matrix_optimizer = r.optimizer;
    c.async = r.async;
    if (has_f)
        c.precondition_frequency = r.frequency;
    gpt_refresh_info refresh;
    gpt_optimizer_refresh_info(&c, &refresh);
    const char *oname = strata_optimizer_name(r.optimizer);
    if (has_f && !refresh.refreshes)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "race: '%s': %s refreshes nothing, so -fF has no effect", entry,
                            oname);
    if (r.valve && r.optimizer != STRATA_OPTIM_SHAMPOO)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "race: '%s': the stale-correction valve applies to Shampoo's "
                            "inverse roots only (SOAP's and KL-Shampoo's eigenbases are "
                            "installed in order)",
                            entry);
    char fpart[16] = "";
    if (has_f)
        snprintf(fpart, sizeof fpart, "-f%d", r.frequency);
    if (!r.async) {
        snprintf(r.name, sizeof r.name, "%s%s", oname, fpart);
        if (has_f)
            snprintf(r.variant, sizeof r.variant, "sync-F%d", r.frequency);
        else
            snprintf(r.variant, sizeof r.variant, "%s",
                     !refresh.refreshes                       ? "-"
                     : c.stagger_refresh && refresh.stagger  ? "sync-staggered"
                                                             : "sync");
        return plan_add(runs, n, &r);
    }
    if (!refresh.async)
        return strata_error(STRATA_ERR_INVALID_ARG,
                            "race: '%s-async': %s has no refreshes that can run on workers "
                            "(shampoo, soap and kl-shampoo have)",
                            name, oname);
    const int *budgets = has_s ? &s_only : o->staleness;
    const int n_budgets = has_s ? 1 : o->n_staleness;
    /* the first spelling for an entry of the old form, NAME-async */
    const bool plain = !has_f && !has_s && !r.valve;
    const bool staggered = refresh.frequency > 1;
    for (int k = 0; k < n_budgets; k++) {
        r.staleness = budgets[k];
        if (refresh.max_staleness >= 0 && r.staleness > refresh.max_staleness)
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "race: '%s' at staleness %d: async %s needs staleness < "
                                "precondition frequency (%d)",
                                entry, r.staleness, oname, refresh.frequency);
        snprintf(r.name, sizeof r.name, "%s%s-async-%c%d%s", oname, fpart, plain ? 'S' : 's',
                 r.staleness, r.valve ? "-valve" : "");
        char fv[16] = "";
        if (has_f)
            snprintf(fv, sizeof fv, "F%d-", r.frequency);
        /* a valve run whose epsilon the race raised says so */
        const bool raised = r.valve && !(c.shampoo.epsilon >= STRATA_RACE_VALVE_EPSILON);
        /* the synchronous warm start (--staleness-warmup W) says so: -wW */
        char wv[24] = "";
        if (o->train.staleness_warmup_is_warmup && r.staleness > 0)
            snprintf(wv, sizeof wv, "-wwarmup");
        else if (c.staleness_warmup > 0 && r.staleness > 0)
            snprintf(wv, sizeof wv, "-w%d", c.staleness_warmup);
        snprintf(r.variant, sizeof r.variant, "async-%sS%d%s%s%s%s", fv, r.staleness, wv,
                 staggered ? "-staggered" : "", r.valve ? "-valve" : "",
                 raised ? "-eps1e-4" : "");
        strata_status st = plan_add(runs, n, &r);
        if (st != STRATA_OK)
            return st;
    }
    return STRATA_OK;
}

/* Expand a comma-separated list (entries or presets) into runs. */
static strata_status plan_list(const strata_race_options *o, const char *spec, int depth,
                               strata_race_run *runs, int *n)
{
    for (const char *tok = spec;;) {
        const char *end = strchr(tok, ',');
        const size_t len = end ? (size_t)(end - tok) : strlen(tok);
        strata_status st;
        if (depth == 0 && len == 7 && strncmp(tok, "default", 7) == 0)
            st = plan_list(o, STRATA_RACE_DEFAULT_RUNS, 1, runs, n);
        else if (depth == 0 && len == 5 && strncmp(tok, "fresh", 5) == 0)
            st = plan_list(o, STRATA_RACE_FRESH_RUNS, 1, runs, n);
        else
            st = plan_entry(o, tok, len, runs, n);
        if (st != STRATA_OK)
            return st;
        if (!end)
            return STRATA_OK;
        tok = end + 1;
    }
}

strata_status strata_race_plan(const strata_race_options *o, strata_race_run *runs, int *n)
{
    if (!o || !runs || !n || !o->staleness || o->n_staleness < 1)
        return strata_error(STRATA_ERR_INVALID_ARG, "race: need a staleness list");
    for (int k = 0; k < o->n_staleness; k++)
        if (o->staleness[k] < 0)
            return strata_error(STRATA_ERR_INVALID_ARG, "race: staleness %d < 0",
                                o->staleness[k]);
    *n = 0;
    strata_status st = plan_list(o, o->runs ? o->runs : STRATA_RACE_DEFAULT_RUNS, 0, runs, n);
    if (st != STRATA_OK)
        return st;
    /* AdamW is the reference: it runs first. */
    for (int i = 0; i < *n; i++)
        if (runs[i].optimizer == STRATA_OPTIM_ADAMW && !runs[i].async) {
            const strata_race_run a = runs[i];
            memmove(runs + 1, runs, (size_t)i * sizeof *runs);
            runs[0] = a;
            return STRATA_OK;
        }
    return strata_error(STRATA_ERR_INVALID_ARG,
                        "race: the run list must include adamw (the reference whose final "
                        "validation loss the others race to)");
}

/* Train one run into DIR/<name>.jsonl and DIR/<name>.dat. */
static strata_status race_one(const strata_race_options *o, race_row *row, FILE *out)
{
    const strata_race_run *run = &row->run;
    gpt_train_options t = o->train;
    t.strata.matrix_optimizer = run->optimizer;
    t.strata.async = run->async;
    if (run->frequency > 0)
        t.strata.precondition_frequency = run->frequency;
    if (run->async) {
        gpt_refresh_info refresh;
        gpt_optimizer_refresh_info(&t.strata, &refresh);
        t.strata.staleness = run->staleness;
        t.strata.stagger_refresh = refresh.frequency > 1; /* nothing to spread at F = 1 */
    }
    if (run->valve) {
        t.strata.stale_correction = STRATA_STALE_CORRECTION_NEWTON;
        if (!(t.strata.shampoo.epsilon >= STRATA_RACE_VALVE_EPSILON))
            t.strata.shampoo.epsilon = STRATA_RACE_VALVE_EPSILON;
    }
    t.quiet = true;
    /* As in the staleness sweep: every run trains on one thread (it stands in
     * for the GPU); the async runs' workers take the other cores. */
    if (t.strata.blas_threads == 0)
        t.strata.blas_threads = 1;
    char path[4096], dat[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, run->name);
    snprintf(dat, sizeof dat, "%s/%s.dat", o->out_dir, run->name);
    t.metrics_path = path;
    /* its peak lrs: the matrices' and the AdamW tail's (--adamw-lr, else the
     * trainer's default for this run's matrix optimizer) */
    float *lr = NULL, *wd = NULL;
    strata_config_optimizer_lr(&t.strata, run->optimizer, &lr, &wd);
    const float tail = t.tail_lr >= 0.0f ? t.tail_lr : gpt_default_tail_lr(run->optimizer);
    row->lr = lr ? (double)*lr : NAN;
    row->tail_lr = (double)tail;
    if (out) {
        const bool plain = strcmp(run->variant, "-") == 0;
        fprintf(out, "race: running %s (%s%s%d steps, lr %g, tail lr %g)...\n", run->name,
                plain ? "" : run->variant, plain ? "" : ", ", t.steps,
                lr ? (double)*lr : NAN, (double)tail);
        if (strstr(run->variant, "-eps1e-4"))
            fprintf(out, "note: %s runs at --epsilon 1e-4, not the race's %g: the valve "
                         "refuses every correction below it (README, stale correction)\n",
                    run->name, (double)o->train.strata.shampoo.epsilon);
        fflush(out);
    }
    strata_status st = gpt_train(&t, NULL, &row->r);
    if (st != STRATA_OK) {
        char why[512]; /* strata_error must not format its own buffer into itself */
        snprintf(why, sizeof why, "%s", strata_last_error());
        return strata_error(st, "race run %s: %s", run->name, why);
    }
    if (row->r.interrupted)
        return STRATA_OK;
    st = strata_plot_jsonl_to_dat(path, dat);
    if (out && st == STRATA_OK)
        fprintf(out, "race: %s done: val loss %.4f in %.*f s\n", run->name,
                row->r.final_val_loss, row->r.wall_seconds < 1.0 ? 3 : 1, row->r.wall_seconds);
    return st;
}

/* race.tsv (every validation of every run) and each run's reach_s. */
static strata_status write_curves(const strata_race_options *o, race_row *rows, int n,
                                  double target)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/race.tsv", o->out_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fputs("optimizer\tvariant\tstep\twall_s\tval_loss\n", f);
    strata_status st = STRATA_OK;
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        race_row *row = &rows[i];
        row->reach_s = NAN;
        row->reach_step = -1;
        snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, row->run.name);
        strata_plot_point *pts;
        int np;
        st = strata_plot_read(path, &pts, &np);
        for (int k = 0; st == STRATA_OK && k < np; k++) {
            if (isnan(pts[k].val_loss))
                continue;
            fprintf(f, "%s\t%s\t%d\t%.6f\t%.17g\n", strata_optimizer_name(row->run.optimizer),
                    row->run.variant, pts[k].step, pts[k].wall_s, pts[k].val_loss);
            if (isnan(row->reach_s) && pts[k].val_loss <= target) {
                row->reach_s = pts[k].wall_s;
                row->reach_step = pts[k].step;
            }
        }
        free(pts);
    }
    if (fclose(f) != 0 && st == STRATA_OK)
        st = strata_error(STRATA_ERR_IO, "writing %s/race.tsv failed", o->out_dir);
    return st;
}

/* ratios.tsv and the table on `out`. */
static strata_status write_ratios(const strata_race_options *o, const race_row *rows, int n,
                                  FILE *out)
{
    const double target = rows[0].r.final_val_loss, base = rows[0].r.wall_seconds;
    char path[4096];
    snprintf(path, sizeof path, "%s/ratios.tsv", o->out_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fputs("optimizer\tvariant\tfinal_val_loss\twall_s\treach_s\tratio_to_adamw\t"
          "critical_path_fraction\tstep_max_over_median\treach_step\twaits\twait_s\tlr\t"
          "tail_lr\n",
          f);
    if (out)
        fprintf(out,
                "\ntarget: AdamW's final validation loss %.4f, reached in %.2f s of training\n"
                "%-28s %-32s %9s %8s %8s %7s %6s %7s %8s %8s\n",
                target, base, "run", "variant", "val_loss", "wall_s", "reach_s", "ratio", "step",
                "crit%", "max/p50", "wait_s");
    for (int i = 0; i < n; i++) {
        const race_row *row = &rows[i];
        const gpt_train_result *r = &row->r;
        const double spike = r->step_ms_p50 > 0.0 ? r->step_ms_max / r->step_ms_p50 : 0.0;
        char reach[32] = "-", ratio[32] = "-", rstep[16] = "-";
        if (!isnan(row->reach_s)) {
            snprintf(reach, sizeof reach, "%.6f", row->reach_s);
            snprintf(ratio, sizeof ratio, "%.6f", row->reach_s / base);
            snprintf(rstep, sizeof rstep, "%d", row->reach_step);
        }
        fprintf(f, "%s\t%s\t%.17g\t%.6f\t%s\t%s\t%.6f\t%.4f\t%s\t%lld\t%.6f\t%g\t%g\n",
                strata_optimizer_name(row->run.optimizer), row->run.variant, r->final_val_loss,
                r->wall_seconds, reach, ratio, r->critical_path_fraction, spike, rstep,
                (long long)r->stats.coh_waits, r->stats.coh_wait_seconds, row->lr, row->tail_lr);
        if (out) {
            if (!isnan(row->reach_s)) {
                snprintf(reach, sizeof reach, "%.2f", row->reach_s);
                snprintf(ratio, sizeof ratio, "%.3f", row->reach_s / base);
            } else {
                snprintf(reach, sizeof reach, "never");
            }
            fprintf(out, "%-28s %-32s %9.4f %8.2f %8s %7s %6s %7.2f %8.2f %8.2f\n",
                    row->run.name, row->run.variant, r->final_val_loss, r->wall_seconds, reach,
                    ratio, rstep, 100.0 * r->critical_path_fraction, spike,
                    r->stats.coh_wait_seconds);
        }
    }
    if (out)
        fputs("reach_s: training seconds to the first validation at or below the target "
              "(validations only: every --eval-every steps, so a short race's runs reach it at "
              "the same few steps); ratio: reach_s / AdamW's (< 1: faster); step: that "
              "validation's step; crit%: the training thread's time in snapshots, waits, "
              "installs and inline refreshes; max/p50: the slowest step over the median; "
              "wait_s: time waiting for due results\n",
              out);
    if (fclose(f) != 0)
        return strata_error(STRATA_ERR_IO, "writing %s failed", path);
    return STRATA_OK;
}

/* The run that run i's validation losses are compared with in the printed
 * table, -1 for none: a valve run's is the same run without the valve, an
 * async run's the synchronous one of its optimizer and F, a synchronous -fF
 * run's the synchronous one at the default F. */
static int race_reference(const strata_race_run *runs, int n, int i)
{
    const strata_race_run *r = &runs[i];
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < n; j++) {
            const strata_race_run *q = &runs[j];
            if (j == i || q->optimizer != r->optimizer || q->valve)
                continue;
            if (pass == 0 && r->valve && q->async && q->frequency == r->frequency &&
                q->staleness == r->staleness)
                return j;
            if (pass == 1 && r->async && !q->async && q->frequency == r->frequency)
                return j;
            if (pass == 1 && !r->async && r->frequency > 0 && !q->async && q->frequency == 0)
                return j;
        }
    return -1;
}

strata_status strata_race(const strata_race_options *o, FILE *out)
{
    if (!o || !o->out_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "race: need options and out_dir");
    strata_race_run runs[STRATA_RACE_MAX_RUNS];
    int n = 0;
    strata_status st = strata_race_plan(o, runs, &n);
    if (st != STRATA_OK)
        return st;
    st = strata_plot_make_dir(o->out_dir);
    if (st != STRATA_OK)
        return st;
    race_row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows)
        return strata_error(STRATA_ERR_NOMEM, "race: out of memory");
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        rows[i].run = runs[i];
        st = race_one(o, &rows[i], out);
        if (st == STRATA_OK && rows[i].r.interrupted) { /* a signal: no tables from part of a race */
            if (out)
                fprintf(out, "race: interrupted during run %s; %s/race.tsv not written\n",
                        runs[i].name, o->out_dir);
            free(rows);
            return STRATA_OK;
        }
    }
    if (st == STRATA_OK)
        st = write_curves(o, rows, n, rows[0].r.final_val_loss);
    if (st == STRATA_OK)
        st = write_ratios(o, rows, n, out);
    strata_plot_curve curves[STRATA_RACE_MAX_RUNS];
    for (int i = 0; i < n; i++)
        curves[i] = (strata_plot_curve){.file = rows[i].run.name, .title = rows[i].run.name};
    if (st == STRATA_OK && out) {
        int ref[STRATA_RACE_MAX_RUNS];
        for (int i = 0; i < n; i++)
            ref[i] = race_reference(runs, n, i);
        st = strata_plot_print_val_table(o->out_dir, curves, ref, n, out);
    }
    if (st == STRATA_OK) {
        st = strata_plot_loss_vs_time(o->out_dir,
                                      "GPT on the corpus: validation loss vs wall time per "
                                      "optimizer (same steps)",
                                      curves, n, out);
    }
    if (st == STRATA_OK && out)
        fprintf(out, "\nwrote %s/race.tsv, %s/ratios.tsv and %s/loss_vs_time.png\n", o->out_dir,
                o->out_dir, o->out_dir);
    free(rows);
    return st;
}
