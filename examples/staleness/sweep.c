/* Staleness sweep over the GPT main job (see sweep.h). */
#include "sweep.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "settings.h"

typedef struct sweep_row {
    char name[32];
    int staleness; /* -1 = sync */
    gpt_train_result r;
} sweep_row;

/* <run>.jsonl -> <run>.dat: "wall_s train_loss val_loss" (val "NaN" off-eval). */
static strata_status jsonl_to_dat(const char *jsonl, const char *dat)
{
    FILE *in = fopen(jsonl, "r");
    if (!in)
        return strata_error(STRATA_ERR_IO, "cannot read %s: %s", jsonl, strerror(errno));
    FILE *out = fopen(dat, "w");
    if (!out) {
        fclose(in);
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", dat, strerror(errno));
    }
    char line[8192];
    while (fgets(line, sizeof line, in)) {
        json_object *j = json_tokener_parse(line), *v;
        if (!j)
            continue;
        if (json_object_object_get_ex(j, "type", &v) &&
            strcmp(json_object_get_string(v), "step") == 0) {
            json_object *w, *l, *vl;
            json_object_object_get_ex(j, "wall_s", &w);
            json_object_object_get_ex(j, "loss", &l);
            bool has_val = json_object_object_get_ex(j, "val_loss", &vl);
            if (has_val)
                fprintf(out, "%.6f %.6f %.6f\n", json_object_get_double(w), json_object_get_double(l),
                        json_object_get_double(vl));
            else
                fprintf(out, "%.6f %.6f NaN\n", json_object_get_double(w), json_object_get_double(l));
        }
        json_object_put(j);
    }
    fclose(in);
    return fclose(out) == 0 ? STRATA_OK : strata_error(STRATA_ERR_IO, "writing %s failed", dat);
}

static strata_status write_plot(const char *dir, const char *optimizer, const sweep_row *rows,
                                int n, FILE *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/loss_vs_time.gp", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(f,
            "set terminal pngcairo size 1000,650\n"
            "set output '%s/loss_vs_time.png'\n"
            "set title 'GPT on the corpus: validation loss vs wall time, %s sync and async "
            "(staleness budget S)'\n"
            "set xlabel 'wall time (s)'\nset ylabel 'loss (nats/byte)'\nset grid\n"
            "set key top right\nset datafile missing 'NaN'\n"
            "plot ",
            dir, optimizer);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s'%s/%s.dat' using 1:3 with linespoints lw 2 title '%s'", i ? ", \\\n     " : "",
                dir, rows[i].name, rows[i].staleness < 0 ? "sync" : rows[i].name);
    fprintf(f, "\n");
    if (fclose(f) != 0)
        return strata_error(STRATA_ERR_IO, "writing %s failed", path);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null", path);
    int rc = system(cmd);
    if (rc != 0 && out)
        fprintf(out, "warning: gnuplot failed or is not installed (exit %d); the plot script is %s\n",
                rc, path);
    return STRATA_OK;
}

strata_status strata_sweep_staleness(const strata_sweep_options *o, FILE *out)
{
    if (!o || !o->values || o->n_values < 1 || o->n_values > 64 || !o->out_dir)
        return strata_error(STRATA_ERR_INVALID_ARG, "sweep: need 1..64 staleness values and out_dir");
    {
        /* mkdir -p: the default runs/sweep, or any --out with missing parents. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->out_dir);
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                mkdir(dir, 0755);
                *p = '/';
            }
        if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST)
            return strata_error(STRATA_ERR_IO, "sweep: cannot create %s: %s", o->out_dir,
                                strerror(errno));
    }
    const int n = o->n_values + 1;
    sweep_row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows)
        return strata_error(STRATA_ERR_NOMEM, "sweep: out of memory");
    strata_status st = STRATA_OK;
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
        st = jsonl_to_dat(path, dat);
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
                              "max_over_median\twaits\twait_s\tmax_staleness\n";
            fputs(hdr, f);
            if (out)
                fprintf(out, "\n%-6s %4s %9s %8s %8s %8s %8s %8s %6s %7s %9s\n", "run", "S",
                        "val_loss", "wall_s", "p50_ms", "p99_ms", "max_ms", "max/p50", "waits",
                        "wait_s", "max_stale");
            for (int i = 0; i < n; i++) {
                const gpt_train_result *r = &rows[i].r;
                char s_txt[16];
                snprintf(s_txt, sizeof s_txt, "%d", rows[i].staleness);
                const char *s_col = rows[i].staleness < 0 ? "-" : s_txt;
                char stale[24];
                snprintf(stale, sizeof stale, "%lld", (long long)r->stats.max_staleness);
                fprintf(f, "%s\t%s\t%.4f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%lld\t%.3f\t%s\n",
                        rows[i].name, s_col, r->final_val_loss, r->wall_seconds, r->step_ms_p50,
                        r->step_ms_p99, r->step_ms_max, r->step_ms_max / r->step_ms_p50,
                        (long long)r->stats.coh_waits, r->stats.coh_wait_seconds,
                        rows[i].staleness < 0 ? "-" : stale);
                if (out)
                    fprintf(out, "%-6s %4s %9.4f %8.1f %8.1f %8.1f %8.1f %8.2f %6lld %7.2f %9s\n",
                            rows[i].name, s_col, r->final_val_loss, r->wall_seconds,
                            r->step_ms_p50, r->step_ms_p99, r->step_ms_max,
                            r->step_ms_max / r->step_ms_p50, (long long)r->stats.coh_waits,
                            r->stats.coh_wait_seconds, rows[i].staleness < 0 ? "-" : stale);
            }
            if (fclose(f) != 0)
                st = strata_error(STRATA_ERR_IO, "writing %s failed", path);
        }
    }
    if (st == STRATA_OK)
        st = write_plot(o->out_dir, strata_optimizer_name(swept), rows, n, out);
    if (st == STRATA_OK && out)
        fprintf(out, "\nwrote %s/sweep.tsv and %s/loss_vs_time.png\n", o->out_dir, o->out_dir);
    free(rows);
    return st;
}
