/* The numerical guards' counters (strata_stats.overflow_skipped and
 * nonfinite_directions) reach the printed summary and the JSONL summary
 * record (issue #12, item 3). The report is fed one step and a result whose
 * counters are set, and both outputs are read back; a run whose counters are
 * zero prints no "numerics:" line and writes zeros.
 * Exit 0 pass, 1 fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report.h"
#include "trainer.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *buf = calloc(1, (size_t)n + 1);
    rewind(f);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    return buf;
}

/* One report with the given counters; returns the printed text and the
 * JSONL file's last line (both malloc'd). */
static void report_once(int64_t skipped, int64_t dirs, char **text, char **jsonl)
{
    char path[] = "/tmp/strata-report-XXXXXX";
    const int fd = mkstemp(path);
    close(fd);
    gpt_train_options o;
    gpt_train_options_default(&o);
    o.steps = 1;
    o.warmup = 0;
    o.progress = 0;
    o.metrics_path = path;
    FILE *out = tmpfile();
    gpt_report *rep = NULL;
    *text = *jsonl = NULL;
    if (!out || gpt_report_open(&o, out, &rep) != STRATA_OK) {
        CHECK(0, "gpt_report_open failed");
        return;
    }
    strata_stats st;
    memset(&st, 0, sizeof st);
    st.overflow_skipped = skipped;
    st.nonfinite_directions = dirs;
    st.snapshot_failures = skipped + dirs;
    gpt_report_begin(rep, &(gpt_run_info){.n_files = 1, .n_train = 1000, .n_val = 100,
                                          .params = 10, .n_matrix = 1, .n_tail = 1,
                                          .unigram_val_loss = 3.0});
    gpt_report_step(rep, &(gpt_step_record){.step = 1, .loss = 3.5f, .step_seconds = 0.01,
                                            .opt_seconds = 0.005, .lr_scale = 1.0f,
                                            .stats = &st});
    gpt_train_result res;
    memset(&res, 0, sizeof res);
    res.stats = st;
    res.unigram_val_loss = 3.0;
    res.world_size = 1;
    gpt_report_summary(rep, &res);
    CHECK(gpt_report_close(rep, STRATA_OK) == STRATA_OK, "close");
    *text = slurp(out);
    fclose(out);
    FILE *m = fopen(path, "r");
    char line[8192] = "", last[8192] = "";
    while (m && fgets(line, sizeof line, m))
        memcpy(last, line, sizeof last);
    if (m)
        fclose(m);
    unlink(path);
    *jsonl = strdup(last);
}

/* Review D6: step 1's first-use cost stays out of the after-warm-up figures.
 * 20 steps of 10 ms, step 1 100 ms and step 15 12 ms: whole-run max/p50 10,
 * after the 10 warm-up steps max 12, p50 10, ratio 1.2. */
static void spike_after_warmup(void)
{
    gpt_train_options o;
    gpt_train_options_default(&o);
    o.steps = 20;
    o.warmup = 0;
    o.progress = 0;
    FILE *out = tmpfile();
    gpt_report *rep = NULL;
    if (!out || gpt_report_open(&o, out, &rep) != STRATA_OK) {
        CHECK(0, "gpt_report_open failed");
        return;
    }
    strata_stats st;
    memset(&st, 0, sizeof st);
    gpt_report_begin(rep, &(gpt_run_info){.n_files = 1, .n_train = 1000, .n_val = 100,
                                          .params = 10, .n_matrix = 1, .n_tail = 1,
                                          .unigram_val_loss = 3.0});
    for (int t = 1; t <= 20; t++)
        gpt_report_step(rep, &(gpt_step_record){.step = t, .loss = 3.5f,
                                                .step_seconds = t == 1    ? 0.1
                                                                : t == 15 ? 0.012
                                                                          : 0.01,
                                                .opt_seconds = 0.005, .lr_scale = 1.0f,
                                                .stats = &st});
    gpt_train_result res;
    memset(&res, 0, sizeof res);
    res.stats = st;
    res.unigram_val_loss = 3.0;
    res.world_size = 1;
    gpt_report_summary(rep, &res);
    CHECK(gpt_report_close(rep, STRATA_OK) == STRATA_OK, "close");
    fclose(out);
    CHECK(fabs(res.step_ms_max - 100.0) < 1e-9 && fabs(res.step_ms_max_warm - 12.0) < 1e-9 &&
              fabs(res.step_ms_p50_warm - 10.0) < 1e-9 && fabs(res.step_spike_warm - 1.2) < 1e-9,
          "after warm-up: max %g (whole %g), p50 %g, spike %g", res.step_ms_max_warm,
          res.step_ms_max, res.step_ms_p50_warm, res.step_spike_warm);
}

int main(void)
{
    spike_after_warmup();
    char *text, *jsonl;
    report_once(3, 2, &text, &jsonl);
    CHECK(text && strstr(text, "numerics: 3 parameter steps skipped") &&
              strstr(text, "| 2 non-finite directions not applied"),
          "printed summary lacks the counters:\n%s", text ? text : "");
    CHECK(jsonl && strstr(jsonl, "\"type\":\"summary\"") &&
              strstr(jsonl, "\"overflow_skipped\":3") &&
              strstr(jsonl, "\"nonfinite_directions\":2") &&
              strstr(jsonl, "\"snapshot_failures\":5"),
          "JSONL summary lacks the counters: %s", jsonl ? jsonl : "");
    free(text);
    free(jsonl);

    report_once(0, 0, &text, &jsonl);
    CHECK(text && !strstr(text, "numerics:"), "a clean run printed a numerics line:\n%s",
          text ? text : "");
    CHECK(jsonl && strstr(jsonl, "\"overflow_skipped\":0") &&
              strstr(jsonl, "\"nonfinite_directions\":0"),
          "JSONL summary of a clean run: %s", jsonl ? jsonl : "");
    free(text);
    free(jsonl);
    if (failures == 0)
        printf("report numerics: pass\n");
    return failures ? 1 : 0;
}
