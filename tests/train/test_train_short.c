/* A short training run of the GPT main job must learn, for every matrix
 * optimizer: its validation loss falls well below the unigram baseline (a
 * model that ignores context), at least 0.5 nats/byte under it.
 *
 * The run is `strata train --layers 2 --d-model 64 --heads 2 --seq-len 64
 * --batch 8 --steps 200 --eval-every 0 --precondition-frequency 5
 * --optimizer X` with the trainer's learning rates (shampoo 6e-3, muon 0.05,
 * soap 6e-3, kl-shampoo 1e-2), except AdamW as the matrix optimizer, which
 * plateaus near the unigram loss at the default 3e-3 on this tiny model and
 * runs at 2e-3. Measured margins below unigram (3.3218 nats/byte) at 200
 * steps: adamw (2e-3) 0.56 (0.24 at 3e-3), shampoo 0.73 (0.72 at 3e-3), muon 0.72
 * (0.74 at 0.02), soap 0.74 (0.70 at 3e-3), kl-shampoo 0.72; about 21 s for all
 * five on two cores (2026-12-02: 37 s, loaded). With the trainer's default
 * tail lrs since the tail sweep (trainer.c: shampoo 2e-2, muon 4e-2, soap and
 * kl-shampoo 1e-2; AdamW's tail at its 2e-3 here): adamw 0.56, shampoo 0.71,
 * muon 0.78, soap 0.75, kl-shampoo 0.76 (2026-12-02).
 *
 * cmocka; exit 77 when the corpus is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trainer.h"

#define CORPUS "/usr/share/games/fortunes"

static void test_learns(void **state)
{
    const strata_optimizer opt = *(const strata_optimizer *)*state;
    gpt_train_options o;
    gpt_train_options_default(&o);
    o.data_path = CORPUS;
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
    o.progress = 0;
    o.strata.matrix_optimizer = opt;
    if (opt == STRATA_OPTIM_ADAMW) /* one AdamW at one lr: its matrices and its tail */
        o.strata.adamw.lr = o.tail_lr = 2e-3f;
    o.strata.precondition_frequency = 5;
    gpt_train_result r;
    strata_status st = gpt_train(&o, NULL, &r);
    if (st != STRATA_OK)
        fail_msg("%s: %s: %s", strata_optimizer_name(opt), strata_status_str(st),
                 strata_last_error());
    const double margin = 0.5;
    print_message("%s: val %.4f, unigram %.4f (needs < %.4f), %.1f s\n",
                  strata_optimizer_name(opt), r.final_val_loss, r.unigram_val_loss,
                  r.unigram_val_loss - margin, r.wall_seconds);
    assert_int_equal(r.steps_done, o.steps);
    if (!(r.final_val_loss < r.unigram_val_loss - margin))
        fail_msg("%s: validation loss %.4f is not %.1f below the unigram %.4f",
                 strata_optimizer_name(opt), r.final_val_loss, margin, r.unigram_val_loss);
}

static const strata_optimizer opts[] = {STRATA_OPTIM_ADAMW, STRATA_OPTIM_SHAMPOO,
                                        STRATA_OPTIM_MUON, STRATA_OPTIM_SOAP,
                                        STRATA_OPTIM_KL_SHAMPOO};

int main(void)
{
    if (access(CORPUS, R_OK) != 0) {
        printf("SKIP: corpus %s not found\n", CORPUS);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        {"adamw", test_learns, NULL, NULL, (void *)&opts[0]},
        {"shampoo", test_learns, NULL, NULL, (void *)&opts[1]},
        {"muon", test_learns, NULL, NULL, (void *)&opts[2]},
        {"soap", test_learns, NULL, NULL, (void *)&opts[3]},
        {"kl_shampoo", test_learns, NULL, NULL, (void *)&opts[4]},
    };
    return cmocka_run_group_tests_name("train_short", tests, NULL, NULL) ? 1 : 0;
}
