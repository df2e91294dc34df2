/* A short training run of the GPT main job must learn: its validation loss
 * falls well below the unigram baseline (a model that ignores context), for
 * every matrix optimizer. Exit 0 pass, 1 fail, 77 skip (no corpus). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

int main(int argc, char **argv)
{
    const char *corpus = argc > 1 ? argv[1] : "/usr/share/games/fortunes";
    if (access(corpus, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", corpus);
        return 77;
    }
    const strata_optimizer opts[] = {STRATA_OPTIM_ADAMW, STRATA_OPTIM_SHAMPOO, STRATA_OPTIM_MUON};
    int failed = 0;
    for (int k = 0; k < 3; k++) {
        gpt_train_options o;
        gpt_train_options_default(&o);
        o.data_path = corpus;
        o.model.n_layer = 2;
        o.model.d_model = 64;
        o.model.n_head = 2;
        o.seq_len = 64;
        o.model.max_seq = 64;
        o.batch = 8;
        o.steps = 200;
        o.eval_every = 0;
        o.eval_batches = 8;
        o.quiet = true;
        o.strata.matrix_optimizer = opts[k];
        /* This tiny model plateaus at the unigram loss with AdamW at the
         * default 3e-3 (measured: 3.24 after 120 steps); 2e-3 learns. */
        if (opts[k] == STRATA_OPTIM_ADAMW)
            o.strata.adamw.lr = 2e-3f;
        o.strata.shampoo.precondition_frequency = 5;
        gpt_train_result r;
        strata_status st = gpt_train(&o, stdout, &r);
        if (st != STRATA_OK) {
            printf("FAIL %s: %s: %s\n", strata_optimizer_name(opts[k]), strata_status_str(st),
                   strata_last_error());
            failed++;
            continue;
        }
        /* "Well below": at least 0.5 nats/byte under the unigram cross-entropy. */
        const double margin = 0.5;
        const int ok = r.final_val_loss < r.unigram_val_loss - margin && r.steps_done == o.steps;
        printf("%s %s: val %.4f, unigram %.4f (needs < %.4f)\n", ok ? "PASS" : "FAIL",
               strata_optimizer_name(opts[k]), r.final_val_loss, r.unigram_val_loss,
               r.unigram_val_loss - margin);
        failed += !ok;
    }
    return failed ? 1 : 0;
}
