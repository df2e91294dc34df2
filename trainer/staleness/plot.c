/* Loss curves and the loss-vs-time figure (plot.h). */
#include "plot.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

strata_status strata_plot_make_dir(const char *dir)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return strata_error(STRATA_ERR_IO, "directory name too long: %s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return strata_error(STRATA_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    return STRATA_OK;
}

strata_status strata_plot_read(const char *jsonl, strata_plot_point **points, int *n)
{
    *points = NULL;
    *n = 0;
    FILE *in = fopen(jsonl, "r");
    if (!in)
        return strata_error(STRATA_ERR_IO, "cannot read %s: %s", jsonl, strerror(errno));
    strata_status st = STRATA_OK;
    int cap = 0;
    char line[8192];
    while (st == STRATA_OK && fgets(line, sizeof line, in)) {
        json_object *j = json_tokener_parse(line), *v;
        if (!j)
            continue;
        if (json_object_object_get_ex(j, "type", &v) &&
            strcmp(json_object_get_string(v), "step") == 0) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 256;
                strata_plot_point *np = realloc(*points, (size_t)cap * sizeof *np);
                if (!np) {
                    st = strata_error(STRATA_ERR_NOMEM, "reading %s: out of memory", jsonl);
                    json_object_put(j);
                    break;
                }
                *points = np;
            }
            json_object *s, *w, *l, *vl;
            strata_plot_point *p = &(*points)[(*n)++];
            p->step = json_object_object_get_ex(j, "step", &s) ? json_object_get_int(s) : *n;
            p->wall_s = json_object_object_get_ex(j, "wall_s", &w) ? json_object_get_double(w)
                                                                    : NAN;
            p->loss = json_object_object_get_ex(j, "loss", &l) ? json_object_get_double(l) : NAN;
            p->val_loss = json_object_object_get_ex(j, "val_loss", &vl)
                              ? json_object_get_double(vl)
                              : NAN;
        }
        json_object_put(j);
    }
    fclose(in);
    if (st != STRATA_OK) {
        free(*points);
        *points = NULL;
        *n = 0;
    }
    return st;
}

strata_status strata_plot_print_val_table(const char *dir, const strata_plot_curve *curves,
                                          const int *ref, int n, FILE *out)
{
    enum { MAX_COLS = 10 };
    strata_plot_point **pts = calloc((size_t)(n > 0 ? n : 1), sizeof *pts);
    int *np = calloc((size_t)(n > 0 ? n : 1), sizeof *np);
    strata_status st = pts && np ? STRATA_OK : strata_error(STRATA_ERR_NOMEM, "out of memory");
    char path[4096];
    for (int i = 0; i < n && st == STRATA_OK; i++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", dir, curves[i].file);
        st = strata_plot_read(path, &pts[i], &np[i]);
    }
    if (st == STRATA_OK && n > 0) {
        /* the columns: the first curve's validation steps, thinned to MAX_COLS */
        int steps[4096], ns = 0;
        for (int k = 0; k < np[0] && ns < 4096; k++)
            if (!isnan(pts[0][k].val_loss))
                steps[ns++] = pts[0][k].step;
        const int every = ns > MAX_COLS ? (ns + MAX_COLS - 2) / (MAX_COLS - 1) : 1;
        int cols[MAX_COLS], nc = 0;
        for (int k = 0; k < ns && nc < MAX_COLS; k++)
            if (k % every == 0 || k == ns - 1)
                cols[nc++] = steps[k];
        if (nc > 0 && cols[nc - 1] != steps[ns - 1])
            cols[nc - 1] = steps[ns - 1];
        fprintf(out, "\nvalidation loss at step\n%-28s", "run");
        for (int c = 0; c < nc; c++)
            fprintf(out, " %7d", cols[c]);
        bool any_ref = false; /* the header only over a column some run fills */
        for (int i = 0; ref && i < n; i++)
            any_ref = any_ref || (ref[i] >= 0 && ref[i] < n && ref[i] != i);
        if (any_ref)
            fputs("  largest gap to", out);
        fputc('\n', out);
        for (int i = 0; i < n; i++) {
            fprintf(out, "%-28s", curves[i].file);
            for (int c = 0; c < nc; c++) {
                double v = NAN;
                for (int k = 0; k < np[i]; k++)
                    if (pts[i][k].step == cols[c])
                        v = pts[i][k].val_loss;
                if (isnan(v))
                    fprintf(out, " %7s", "-");
                else
                    fprintf(out, " %7.4f", v);
            }
            const int j = ref ? ref[i] : -1;
            if (j >= 0 && j < n && j != i) {
                double gap = NAN;
                for (int k = 0; k < np[i]; k++) {
                    if (isnan(pts[i][k].val_loss))
                        continue;
                    for (int q = 0; q < np[j]; q++)
                        if (pts[j][q].step == pts[i][k].step && !isnan(pts[j][q].val_loss)) {
                            const double g =
                                (pts[i][k].val_loss - pts[j][q].val_loss) / pts[j][q].val_loss;
                            if (isnan(gap) || fabs(g) > fabs(gap))
                                gap = g;
                        }
                }
                if (!isnan(gap))
                    fprintf(out, "  %+.2f%% %s", 100.0 * gap, curves[j].file);
            }
            fputc('\n', out);
        }
    }
    for (int i = 0; pts && i < n; i++)
        free(pts[i]);
    free(pts);
    free(np);
    return st;
}

strata_status strata_plot_jsonl_to_dat(const char *jsonl, const char *dat)
{
    strata_plot_point *pts;
    int n;
    strata_status st = strata_plot_read(jsonl, &pts, &n);
    if (st != STRATA_OK)
        return st;
    FILE *out = fopen(dat, "w");
    if (!out) {
        free(pts);
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", dat, strerror(errno));
    }
    for (int i = 0; i < n; i++) {
        if (isnan(pts[i].val_loss))
            fprintf(out, "%.6f %.6f NaN\n", pts[i].wall_s, pts[i].loss);
        else
            fprintf(out, "%.6f %.6f %.6f\n", pts[i].wall_s, pts[i].loss, pts[i].val_loss);
    }
    free(pts);
    return fclose(out) == 0 ? STRATA_OK : strata_error(STRATA_ERR_IO, "writing %s failed", dat);
}

strata_status strata_plot_loss_vs_time(const char *dir, const char *title,
                                       const strata_plot_curve *curves, int n, FILE *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/loss_vs_time.gp", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return strata_error(STRATA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(f,
            "set terminal pngcairo size 1000,650\n"
            "set output '%s/loss_vs_time.png'\n"
            "set title '%s'\n"
            "set xlabel 'wall time (s)'\nset ylabel 'loss (nats/byte)'\nset grid\n"
            "set key top right\nset datafile missing 'NaN'\n"
            "plot ",
            dir, title);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s'%s/%s.dat' using 1:3 with linespoints lw 2 title '%s'", i ? ", \\\n     " : "",
                dir, curves[i].file, curves[i].title);
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
