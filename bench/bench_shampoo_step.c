/* Benchmark: where the synchronous Shampoo step spends its time, and how
 * spiky it is. Trains the default GPT (same model, data and seed) with
 * synchronous Shampoo at precondition frequency 10 and, side by side in the
 * same run, with AdamW, then prints per-step averages of the optimizer
 * phases and the spike ratio max/median of the whole step time.
 *
 * This is the baseline the asynchronous runtime (DESIGN.md part 2) must beat:
 * the inverse roots are the spikes at every 10th step.
 *
 * usage: bench_shampoo_step [steps (default 60)] [corpus path]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/blas.h"
#include "trainer.h"
#include "bench_util.h"
#include "blas_core.h"

static int run(strata_optimizer opt, int steps, const char *corpus, gpt_train_result *r)
{
    gpt_train_options o;
    gpt_train_options_default(&o);
    if (corpus)
        o.data_path = corpus;
    o.steps = steps;
    o.eval_every = 0;
    o.eval_batches = 2;
    o.quiet = true;
    o.strata.matrix_optimizer = opt;
    o.strata.precondition_frequency = 10;
    strata_status st = gpt_train(&o, NULL, r);
    if (st != STRATA_OK) {
        fprintf(stderr, "bench: %s: %s\n", strata_status_str(st), strata_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "__blas-probe") == 0) /* gpt_blas_core_probe_forced's child */
        return gpt_blas_core_probe_main();
    gpt_blas_core_probe_forced();
    if (bench_wants_help(argc, argv, "usage: bench_shampoo_step [steps (default 60)] [corpus]\n"))
        return 0;
    int steps = argc > 1 ? atoi(argv[1]) : 60;
    const char *corpus = argc > 2 ? argv[2] : NULL;
    if (steps < 10) {
        fprintf(stderr, "usage: bench_shampoo_step [steps >= 10] [corpus]\n");
        return 2;
    }
    gpt_train_result sh, ad;
    if (run(STRATA_OPTIM_SHAMPOO, steps, corpus, &sh) || run(STRATA_OPTIM_ADAMW, steps, corpus, &ad))
        return 1;
    const strata_stats *s = &sh.stats;
    const double n = sh.steps_done;
    const double opt_total = s->seconds_factors + s->seconds_roots + s->seconds_precondition +
                             s->seconds_tail;
    printf("synchronous Shampoo, precondition frequency 10, default GPT, %d steps\n", steps);
    gpt_blas_core_print(stdout); /* with both cores' GEMM probes when one is forced */
    printf("%-34s %10s %8s\n", "optimizer phase", "ms/step", "share");
    printf("%-34s %10.2f %7.1f%%\n", "factor update (L,R += G G^T ...)", 1e3 * s->seconds_factors / n,
           100 * s->seconds_factors / opt_total);
    printf("%-34s %10.2f %7.1f%%\n", "inverse roots (float64 eigh)", 1e3 * s->seconds_roots / n,
           100 * s->seconds_roots / opt_total);
    printf("%-34s %10.2f %7.1f%%\n", "grafting+precondition+apply", 1e3 * s->seconds_precondition / n,
           100 * s->seconds_precondition / opt_total);
    printf("%-34s %10.2f %7.1f%%\n", "AdamW tail", 1e3 * s->seconds_tail / n,
           100 * s->seconds_tail / opt_total);
    printf("inverse roots per refresh step: %.0f ms (%lld roots in %lld refreshes)\n",
           1e3 * s->seconds_roots / (n / 10), (long long)s->root_refreshes,
           (long long)(steps / 10));
    printf("\n%-10s %9s %9s %9s %9s %11s\n", "optimizer", "p50 ms", "p99 ms", "max ms", "mean ms",
           "max/median");
    printf("%-10s %9.1f %9.1f %9.1f %9.1f %11.2f\n", "shampoo", sh.step_ms_p50, sh.step_ms_p99,
           sh.step_ms_max, sh.step_ms_mean, sh.step_ms_max / sh.step_ms_p50);
    printf("%-10s %9.1f %9.1f %9.1f %9.1f %11.2f\n", "adamw", ad.step_ms_p50, ad.step_ms_p99,
           ad.step_ms_max, ad.step_ms_mean, ad.step_ms_max / ad.step_ms_p50);
    printf("\nspike ratio max/median (shampoo, F=10): %.2f\n", sh.step_ms_max / sh.step_ms_p50);
    printf("shampoo mean step / adamw median step: %.2f\n", sh.step_ms_mean / ad.step_ms_p50);
    return 0;
}
