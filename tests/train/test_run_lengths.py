#!/usr/bin/env python3
"""Every optimizer trains at every run length with default flags (issue #22
item 8): adamw, muon, normuon, dion2, shampoo, soap and kl-shampoo over 20 and
40 steps on the default model and over 100 and 300 steps on a smaller one (2
layers, width 64, context 64: the same defaults, ~10x cheaper steps), each
required to end with a validation loss at least MARGIN nats/byte below the
unigram baseline the run itself reports (the val split's cross-entropy under
the train split's byte frequencies, 3.32 on the fortunes). Two runs at a time
(each on one BLAS thread: deterministic, the same losses as one at a time).

Before the fixes (the default warm-up max(steps/10, min(20, steps/2))):
kl-shampoo --steps 40 spiked at step 17 (3.34 -> 9.47) and stayed at the
unigram loss (val 3.37); shampoo and adamw --steps 20 spiked at step 10
(3.80 -> 8.48: their Adam phase at the peak LR before its second-moment
horizon). The warm-up is now at least the slowest second-moment horizon in
use, or the whole run when that is longer (trainer.c, default_warmup).
kl-shampoo is bias-corrected now (--kl-bias-correction on; include/strata/
optim.h, "Bias correction": its estimates weighed their start by 0.98^16 = 72%
at step 17, so its direction was mostly scaled momentum), which helps every
length from 40 steps on; --steps 20 also needed the matrices' own warm-up (below).
Exit 0 pass, 1 fail, 77 skip (no corpus). Usage: test_run_lengths.py strata"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
CORPUS = "/usr/share/games/fortunes"
MARGIN = 0.15
if not os.path.exists(CORPUS):
    print(f"SKIP: no {CORPUS}")
    sys.exit(77)
SMALL = ["--layers", "2", "--d-model", "64", "--heads", "2", "--seq-len", "64"]
OPTIMIZERS = ["adamw", "muon", "normuon", "dion2", "shampoo", "soap", "kl-shampoo"]
# kl-shampoo --steps 20 ended at val 3.64 (bias-corrected; 3.47 without), above
# the unigram 3.32, its last steps at the peak lr 1e-2 spiking with 20-step-old
# estimates; the matrices now warm up over their horizon of 50 while the tail
# keeps 20 (trainer.c, matrices_own_warmup: lr 4e-3 at step 20): 3.14.
OPEN: set = set()
CASES = [(o, n, []) for n in (20, 40) for o in OPTIMIZERS if (o, n) not in OPEN] + \
        [(o, n, SMALL) for n in (100, 300) for o in OPTIMIZERS]
for o, n in sorted(OPEN):
    print(f"NOT CHECKED: {o} --steps {n} (open: ends above the unigram baseline)")
only = os.environ.get("RUN_LENGTHS_ONLY")  # e.g. "kl-shampoo:40" to rerun one case
if only:
    CASES = [c for c in CASES if f"{c[0]}:{c[1]}" in only.split(",")]


def run_case(tmp, opt, steps, model):
    m = os.path.join(tmp, f"{opt}-{steps}.jsonl")
    # one validation, after the last step; one BLAS thread (deterministic)
    p = subprocess.run([STRATA, "train", "--optimizer", opt, "--steps", str(steps), *model,
                        "--eval-every", str(steps), "--eval-batches", "4", "--metrics", m,
                        "--quiet"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    summary = {}
    if p.returncode == 0:
        recs = [json.loads(x) for x in open(m)]
        summary = next((r for r in recs if r["type"] == "summary"), {})
    val, uni = summary.get("final_val_loss"), summary.get("unigram_val_loss")
    ok = val is not None and uni is not None and val < uni - MARGIN
    size = "small model" if model else "default model"
    line = (f"{'PASS' if ok else 'FAIL'}: {opt} --steps {steps} ({size}): val loss {val} "
            f"(unigram {uni}, need < unigram - {MARGIN})")
    if not ok:
        line += f"\n  rc {p.returncode} {p.stderr[-600:]}"
    return ok, line


failures = 0
with tempfile.TemporaryDirectory() as tmp, \
        concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for ok, line in pool.map(lambda c: run_case(tmp, *c), CASES):
        print(line, flush=True)
        failures += not ok
sys.exit(1 if failures else 0)
