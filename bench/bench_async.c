/* Benchmark: does the asynchronous runtime hide the inverse roots?
 *
 * Same model, data and seed, precondition frequency 10, the training itself
 * on one thread in every variant (it stands in for the GPU), the workers on
 * the remaining core(s):
 *   sync Shampoo | sync Shampoo with staggered refresh | async Shampoo S=1
 *   (plain, staggered, staggered with the worker pinned by hwloc to the last
 *   core) | AdamW
 * The variants run interleaved, `rounds` times (A B C .. A B C ..), so that
 * slow drifts of a shared machine hit every variant alike; each figure is the
 * median over rounds (per round for the ratios, then the median).
 *
 * Prints per variant p50/p99/max/mean step time, max/median, final
 * validation loss and the optimizer bytes in the device tier; then:
 *   async max/median step time                      (target <= 1.3)
 *   async mean step / sync median step              (target <= 1.05: roots hidden;
 *                                                    the plain sync median, whose
 *                                                    steps compute no roots)
 *   async val loss / sync val loss                  (target within 2%; against the
 *                                                    sync run of the same schedule)
 *   device-tier optimizer bytes async / sync        (async holds no inverse roots)
 * and the machine's jitter floor: AdamW's own mean / median step time, which
 * no optimizer can beat on this machine (a mean over a median counts every
 * scheduler hiccup).
 *
 * usage: bench_async [steps (default 100)] [rounds (default 3)] [corpus]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "bench_util.h"
#include "blas_core.h"
#include "trainer.h"

enum { MAX_ROUNDS = 16 };

typedef struct variant {
    const char *name;
    strata_optimizer opt;
    bool async;
    int staleness;
    bool pin;
    bool stagger;
    int sync_ref; /* the synchronous variant with the same refresh schedule */
    gpt_train_result r[MAX_ROUNDS];
} variant;

/* Median over rounds of f(result of variant i, result of variant j). */
typedef double (*pair_fn)(const gpt_train_result *a, const gpt_train_result *s);

static double med_pair(const variant *v, int i, int j, int rounds, pair_fn f)
{
    double x[MAX_ROUNDS];
    for (int k = 0; k < rounds; k++)
        x[k] = f(&v[i].r[k], &v[j].r[k]);
    return bench_median(x, rounds);
}

static double f_p50(const gpt_train_result *a, const gpt_train_result *s) { (void)s; return a->step_ms_p50; }
static double f_p99(const gpt_train_result *a, const gpt_train_result *s) { (void)s; return a->step_ms_p99; }
static double f_max(const gpt_train_result *a, const gpt_train_result *s) { (void)s; return a->step_ms_max; }
static double f_mean(const gpt_train_result *a, const gpt_train_result *s) { (void)s; return a->step_ms_mean; }
static double f_val(const gpt_train_result *a, const gpt_train_result *s) { (void)s; return a->final_val_loss; }
static double f_spike(const gpt_train_result *a, const gpt_train_result *s)
{
    (void)s;
    return a->step_ms_max / a->step_ms_p50;
}
static double f_jitter(const gpt_train_result *a, const gpt_train_result *s)
{
    (void)s;
    return a->step_ms_mean / a->step_ms_p50;
}
static double f_hidden(const gpt_train_result *a, const gpt_train_result *s)
{
    return a->step_ms_mean / s->step_ms_p50;
}
static double f_loss(const gpt_train_result *a, const gpt_train_result *s)
{
    return a->final_val_loss / s->final_val_loss;
}
static double f_waits(const gpt_train_result *a, const gpt_train_result *s)
{
    (void)s;
    return (double)a->stats.coh_waits;
}
static double f_wait_s(const gpt_train_result *a, const gpt_train_result *s)
{
    (void)s;
    return a->stats.coh_wait_seconds;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "__blas-probe") == 0) /* gpt_blas_core_probe_forced's child */
        return gpt_blas_core_probe_main();
    gpt_blas_core_probe_forced();
    if (bench_wants_help(argc, argv, "usage: bench_async [steps (default 100)] [rounds (default 3)] [corpus]\n"))
        return 0;
    const int steps = argc > 1 ? atoi(argv[1]) : 100;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const char *corpus = argc > 3 ? argv[3] : NULL;
    if (steps < 20 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_async [steps >= 20] [rounds 1..%d] [corpus]\n", MAX_ROUNDS);
        return 2;
    }
    static variant v[] = {
        {"sync shampoo", STRATA_OPTIM_SHAMPOO, false, 0, false, false, 0, {{0}}},
        {"sync staggered", STRATA_OPTIM_SHAMPOO, false, 0, false, true, 1, {{0}}},
        {"async S=1", STRATA_OPTIM_SHAMPOO, true, 1, false, false, 0, {{0}}},
        {"async S=1 stagger", STRATA_OPTIM_SHAMPOO, true, 1, false, true, 1, {{0}}},
        {"async S=1 stag+pin", STRATA_OPTIM_SHAMPOO, true, 1, true, true, 1, {{0}}},
        {"adamw", STRATA_OPTIM_ADAMW, false, 0, false, false, 5, {{0}}},
    };
    const int nv = (int)(sizeof v / sizeof v[0]);
    const int adamw = nv - 1;
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < nv; i++) {
            gpt_train_options o;
            gpt_train_options_default(&o);
            if (corpus)
                o.data_path = corpus;
            o.steps = steps;
            o.eval_every = 0;
            o.quiet = true;
            o.strata.blas_threads = 1;
            o.strata.matrix_optimizer = v[i].opt;
            o.strata.precondition_frequency = 10;
            o.strata.async = v[i].async;
            o.strata.staleness = v[i].staleness;
            o.strata.workers = 1;
            o.strata.pin_workers = v[i].pin;
            o.strata.stagger_refresh = v[i].stagger;
            fprintf(stderr, "bench_async: round %d/%d: %s...\n", k + 1, rounds, v[i].name);
            strata_status st = gpt_train(&o, NULL, &v[i].r[k]);
            if (st != STRATA_OK) {
                fprintf(stderr, "bench_async: %s: %s: %s\n", v[i].name, strata_status_str(st),
                        strata_last_error());
                return 1;
            }
        }
    printf("default GPT, %d steps, precondition frequency 10, training on 1 thread, 1 worker;\n"
           "%d interleaved round%s, medians over rounds\n\n",
           steps, rounds, rounds == 1 ? "" : "s");
    gpt_blas_core_print(stdout); /* with both cores' GEMM probes when one is forced */
    printf("%-19s %8s %8s %8s %8s %8s %9s %12s\n", "variant", "p50 ms", "p99 ms", "max ms",
           "mean ms", "max/p50", "val loss", "device MiB");
    for (int i = 0; i < nv; i++)
        printf("%-19s %8.1f %8.1f %8.1f %8.1f %8.2f %9.4f %12.2f\n", v[i].name,
               med_pair(v, i, i, rounds, f_p50), med_pair(v, i, i, rounds, f_p99),
               med_pair(v, i, i, rounds, f_max), med_pair(v, i, i, rounds, f_mean),
               med_pair(v, i, i, rounds, f_spike), med_pair(v, i, i, rounds, f_val),
               v[i].r[0].stats.device_bytes_peak / 1048576.0);
    printf("\njitter floor: adamw mean / adamw median step time %.3f (no roots at all)\n",
           med_pair(v, adamw, adamw, rounds, f_jitter));
    for (int i = 0; i < nv; i++) {
        if (!v[i].async)
            continue;
        const int ref = v[i].sync_ref;
        const gpt_train_result *a = &v[i].r[0], *s = &v[ref].r[0];
        printf("\n%s:\n", v[i].name);
        printf("  async max/median step time:             %.3f (target <= 1.3; sync %.3f, "
               "sync staggered %.3f)\n",
               med_pair(v, i, i, rounds, f_spike), med_pair(v, 0, 0, rounds, f_spike),
               med_pair(v, 1, 1, rounds, f_spike));
        printf("  async mean step / sync median step:     %.3f (target <= 1.05; adamw's own "
               "mean/median %.3f)\n",
               med_pair(v, i, 0, rounds, f_hidden), med_pair(v, adamw, adamw, rounds, f_jitter));
        printf("    per round:");
        for (int k = 0; k < rounds; k++)
            printf(" %.3f", f_hidden(&v[i].r[k], &v[0].r[k]));
        printf("\n");
        printf("  async val loss / sync val loss:         %.4f (target within 2%%; vs %s)\n",
               med_pair(v, i, ref, rounds, f_loss), v[ref].name);
        printf("  device-tier optimizer bytes async/sync: %.3f (%zu / %zu bytes; roots in the "
               "host tier: %.2f MiB)\n",
               (double)a->stats.device_bytes_peak / (double)s->stats.device_bytes_peak,
               a->stats.device_bytes_peak, s->stats.device_bytes_peak,
               a->stats.host_bytes_peak / 1048576.0);
        printf("  waits per run %.0f (%.3f s), max staleness %lld (bound %d)\n",
               med_pair(v, i, i, rounds, f_waits), med_pair(v, i, i, rounds, f_wait_s),
               (long long)a->stats.max_staleness, 10 - 1 + v[i].staleness);
    }
    return 0;
}
