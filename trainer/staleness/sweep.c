/* Staleness sweep over the GPT main job (see sweep.h). */
#include "sweep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "settings.h"

typedef struct sweep_row {
    char name[32];
    int staleness; /* -1 = sync */
    gpt_train_result r;
} sweep_row;

static strata_status write_plot(const char *dir, const char *optimizer, const sweep_row *rows,
                                int n, FILE *out)
{
    char title[160];
    snprintf(title, sizeof title,
             "GPT on the corpus: validation loss vs wall time, %s sync and async (staleness "
             "budget S)", optimizer);
    strata_plot_curve curves[65];
    for (int i = 0; i < n; i++)
        curves[i] = (strata_plot_curve){.file = rows[i].name,
                                        .title = rows[i].staleness < 0 ? "sync" : rows[i].name};
    return strata_plot_loss_vs_time(dir, title, curves, n, out);
}

strata_status strata_sweep_check(const strata_sweep_options *o)
{
    if (!o || !o->values || o->n_values < 1 || o->n_values > 64 || !o->out_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "sweep: need 1..64 staleness values and out_dir");
    gpt_refresh_info refresh;
    gpt_optimizer_refresh_info(&o->train.strata, &refresh);
    if (!refresh.async)
        return STRATA_OK; /* the sweep falls back to Shampoo, which accepts any budget */
    for (int i = 0; i < o->n_values; i++)
        if (o->values[i] < 0 ||
            (refresh.max_staleness >= 0 && o->values[i] > refresh.max_staleness))
            return strata_error(STRATA_ERR_INVALID_ARG,
                                "sweep-staleness: staleness %d: async %s needs 0 <= staleness < "
                                "precondition frequency (%d)",
                                o->values[i],
                                strata_optimizer_name(o->train.strata.matrix_optimizer),
                                refresh.frequency);
    return STRATA_OK;
}

strata_status strata_sweep_staleness(const strata_sweep_options *o, FILE *out)
{
    if (!o || !o->values || o->n_values < 1 || o->n_values > 64 || !o->out_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "sweep: need 1..64 staleness values and out_dir");
    strata_status st = strata_sweep_check(o);
    if (st != STRATA_OK)
        return st;
    st = strata_plot_make_dir(o->out_dir);
    if (st != STRATA_OK)
        return st;
    const int n = o->n_values + 1;
    sweep_row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows)
        return strata_error(STRATA_ERR_NOMEM, "sweep: out of memory");
    char path[4096], dat[4096];
    /* The optimizer every run uses: the one asked for when it has a staleness
     * budget to sweep, else Shampoo. */
    strata_optimizer swept = o->train.strata.matrix_optimizer;
    {
        gpt_refresh_info refresh;
        gpt_optimizer_refresh_info(&o->train.strata, &refresh);
        if (!refresh.async)
            swept = STRATA_OPTIM_SHAMPOO;
    }
    if (out) {
        strata_config c = o->train.strata;
        c.matrix_optimizer = swept;
        gpt_refresh_info refresh;
        gpt_optimizer_refresh_info(&c, &refresh);
        fprintf(out, "sweep: %s, precondition frequency F = %d, staleness bound F - 1 + S\n",
                strata_optimizer_name(swept), refresh.frequency);
        if (o->train.staleness_warmup_is_warmup)
            fprintf(out, "sweep: every async run at S = 0 through the learning-rate warm-up "
                         "(--staleness-warmup warmup)\n");
        else if (c.staleness_warmup > 0)
            fprintf(out, "sweep: every async run at S = 0 through step %d (--staleness-warmup)\n",
                    c.staleness_warmup);
    }
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        sweep_row *row = &rows[i];
        gpt_train_options t = o->train;
        t.strata.matrix_optimizer = swept;
        t.quiet = true;
        /* Every run trains on one thread (it stands in for the GPU); the
         * async runs' workers take the other cores. */
        if (t.strata.blas_threads == 0)
            t.strata.blas_threads = 1;
        if (i == 0) {
            row->staleness = -1;
            snprintf(row->name, sizeof row->name, "sync");
            t.strata.async = false;
        } else {
            row->staleness = o->values[i - 1];
            snprintf(row->name, sizeof row->name, "S%d", row->staleness);
            t.strata.async = true;
            t.strata.staleness = row->staleness;
        }
        snprintf(path, sizeof path, "%s/%s.jsonl", o->out_dir, row->name);
        t.metrics_path = path;
        if (out) {
            fprintf(out, "sweep: running %s (%d steps)...\n", row->name, t.steps);
            fflush(out);
        }
        st = gpt_train(&t, NULL, &row->r);
        if (st != STRATA_OK) {
            char why[512]; /* strata_error must not format its own buffer into itself */
            snprintf(why, sizeof why, "%s", strata_last_error());
            strata_error(st, "sweep run %s: %s", row->name, why);
            break;
        }
        if (row->r.interrupted) { /* a signal: no table from a partial sweep */
            if (out)
                fprintf(out, "sweep: interrupted during run %s; %s/sweep.tsv not written\n",
                         row->name, o->out_dir);
            free(rows);
            return STRATA_OK;
        }
        snprintf(dat, sizeof dat, "%s/%s.dat", o->out_dir, row->name);
        st = strata_plot_jsonl_to_dat(path, dat);
        if (out && st == STRATA_OK)
            fprintf(out, "sweep: %s done: val loss %.4f in %.1f s\n", row->name,
                    row->r.final_val_loss, row->r.wall_seconds);
    }
    if (st == STRATA_OK) {
        snprintf(path, sizeof path, "%s/sweep.tsv", o->out_dir);
        FILE *f = fopen(path, "w");
        if (!f) {
            st = strata_error(STRATA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        } else {
            const char *hdr = "run\tS\tval_loss\twall_s\tstep_ms_p50\tstep_ms_p99\tstep_ms_max\t"
                              "max_over_median\twaits\twait_s\tmax_staleness\tcritical_path_fraction\n";
            fputs(hdr, f);
            if (out)
                fprintf(out, "\n%-6s %4s %9s %8s %8s %8s %8s %8s %6s %7s %9s %7s\n", "run", "S",
                        "val_loss", "wall_s", "p50_ms", "p99_ms", "max_ms", "max/p50", "waits",
                        "wait_s", "max_stale", "crit%");
            for (int i = 0; i < n; i++) {
                const gpt_train_result *r = &rows[i].r;
                char s_txt[16];
                snprintf(s_txt, sizeof s_txt, "%d", rows[i].staleness);
                const char *s_col = rows[i].staleness < 0 ? "-" : s_txt;
                char stale[24];
                snprintf(stale, sizeof stale, "%lld", (long long)r->stats.max_staleness);
                fprintf(f, "%s\t%s\t%.4f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%lld\t%.3f\t%s\t%.6f\n",
                        rows[i].name, s_col, r->final_val_loss, r->wall_seconds, r->step_ms_p50,
                        r->step_ms_p99, r->step_ms_max, r->step_ms_max / r->step_ms_p50,
                        (long long)r->stats.coh_waits, r->stats.coh_wait_seconds,
                        rows[i].staleness < 0 ? "-" : stale, r->critical_path_fraction);
                if (out)
                    fprintf(out,
                            "%-6s %4s %9.4f %8.1f %8.1f %8.1f %8.1f %8.2f %6lld %7.2f %9s %7.2f\n",
                            rows[i].name, s_col, r->final_val_loss, r->wall_seconds,
                            r->step_ms_p50, r->step_ms_p99, r->step_ms_max,
                            r->step_ms_max / r->step_ms_p50, (long long)r->stats.coh_waits,
                            r->stats.coh_wait_seconds, rows[i].staleness < 0 ? "-" : stale,
                            100.0 * r->critical_path_fraction);
            }
            if (fclose(f) != 0)
                st = strata_error(STRATA_ERR_IO, "writing %s failed", path);
        }
    }
    if (st == STRATA_OK && out) {
        /* every async run's validation losses against the synchronous run's */
        strata_plot_curve curves[65];
        int ref[65];
        for (int i = 0; i < n; i++) {
            curves[i] = (strata_plot_curve){.file = rows[i].name, .title = rows[i].name};
            ref[i] = i == 0 ? -1 : 0;
        }
        st = strata_plot_print_val_table(o->out_dir, curves, ref, n, out);
    }
    if (st == STRATA_OK)
        st = write_plot(o->out_dir, strata_optimizer_name(swept), rows, n, out);
    if (st == STRATA_OK && out)
        fprintf(out, "\nwrote %s/sweep.tsv and %s/loss_vs_time.png\n", o->out_dir, o->out_dir);
    free(rows);
    return st;
}
