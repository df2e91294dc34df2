#!/usr/bin/env python3
"""The race's learning-rate sweep (issue #24): the same sweep for every
optimizer of `strata race`, done the way Muon's lr 0.05 was chosen.

Per optimizer: `strata train` on the race's run (the default model, --steps,
validation every 10 steps, one BLAS thread, synchronous) at a grid of peak
learning rates, the same rule for every optimizer: the centre c (the
trainer's default before this sweep, CENTRES below), c/2 and 2c; while the
best of the grid sits on an edge, one more point past it (another factor 2),
at most --max-points in all. The lr is picked by the final validation loss,
never by wall time: a synchronous run is deterministic (the same losses on a
loaded machine), its wall time is not. AdamW runs first: its pick sets the
AdamW tail of every other optimizer's runs (--adamw-lr) and its final loss is
the target whose first reaching step is reported for every run.

Writes OUT/sweep.tsv (every run: optimizer, lr, final validation loss, step
first at or below AdamW's final loss or empty, the steps' wall seconds, the
wall seconds to that step and their ratio to the picked AdamW run's whole wall
time: noisy on a shared machine), OUT/sweep.md
(the same as a markdown table, the picks in bold) and each run's JSONL. A
run that fails (diverges, is refused) counts as an infinite loss.

The tail stage (--tails T,T,...): the AdamW tail's lr (embeddings and 1-D
tensors, --adamw-lr) swept instead, every optimizer at its lr (LRS below, the
trainer's defaults), at 3e-3 (BASE_TAIL, the trainer's tail before this
sweep) and at each T. AdamW's run at 3e-3 is the target (the race's
reference; AdamW's own tail runs keep its matrices at their lr). The pick
follows trainer.c's rule: the smallest tail whose final loss lies within
--scatter (0.35%, the scatter that kept AdamW's lr at 3e-3) of the best one
(so 3e-3 when its loss is that close), but not one at which `strata train
--optimizer X --steps 20 --adamw-lr PICK` ends less than 0.15 below the
unigram loss (tests/train/test_run_lengths.py's check; the rule is then
applied to the other tails). Writes the same sweep.tsv and sweep.md (their
tail column the swept one) into --out (default runs/race-tail-sweep).

Usage: race_lr_sweep.py STRATA [--steps N] [--optimizers a,b,...]
                        [--max-points K] [--tails T,...] [--scatter F] [--out DIR]
                        [--reuse] [-- extra train flags]
Run it niced on a shared machine: nice -n 5 bench/race_lr_sweep.py build/cli/strata
(the tail stage: ... build/cli/strata --tails 0.01,0.02,0.04,0.08)
Exit 0, or 1 if AdamW's runs all failed."""
import argparse
import json
import math
import os
import subprocess
import sys
import time

# The trainer's defaults before this sweep (trainer/trainer.c; NorMuon's and
# Dion2's were the library's family defaults, runtime/config_schema.h). The
# grid is centred here, so a rerun reproduces the same grid whatever the
# defaults are now.
CENTRES = {
    "adamw": 3e-3,
    "muon": 0.05,
    "normuon": 0.02,
    "dion2": 0.01,
    "shampoo": 3e-3,
    "soap": 3e-3,
    "kl-shampoo": 1e-2,
}
ORDER = ["adamw", "muon", "normuon", "dion2", "shampoo", "soap", "kl-shampoo"]
# The tail stage's matrix lrs: the trainer's defaults after the lr sweeps
# (trainer/trainer.c), given explicitly so that a rerun sweeps the same runs.
LRS = {
    "adamw": 3e-3,
    "muon": 0.05,
    "normuon": 0.04,
    "dion2": 0.04,
    "shampoo": 3e-3,
    "soap": 6e-3,
    "kl-shampoo": 1e-2,
}
BASE_TAIL = 3e-3


def read_run(opt, lr, path):
    """A finished run's curve, final validation loss and steps' wall time, or None."""
    curve, final, wall = [], None, float("nan")
    try:
        with open(path) as f:
            for line in f:
                j = json.loads(line)
                if j.get("type") == "summary":
                    final = j.get("final_val_loss")
                    wall = j.get("wall_s", wall)
                elif j.get("type") == "step" and j.get("val_loss") is not None:
                    curve.append((j["step"], j["val_loss"], j.get("wall_s", float("nan"))))
    except (OSError, ValueError):
        return None
    if final is None:
        return None
    if not math.isfinite(final):
        final = math.inf
    return {"opt": opt, "lr": lr, "final": final, "curve": curve, "wall": wall}


def run_one(strata, opt, lr, adamw_lr, steps, out, extra, reuse=False, tail_stage=False):
    """One `strata train` run. The lr stage: AdamW's matrices and tail both at
    lr, every other optimizer's tail at adamw_lr. The tail stage: the matrices
    at lr, the tail at adamw_lr, AdamW's too."""
    name = f"{opt}-lr{lr:g}-tail{adamw_lr:g}" if tail_stage else f"{opt}-lr{lr:g}"
    path = os.path.join(out, name + ".jsonl")
    tail = adamw_lr if tail_stage or opt != "adamw" else lr
    if reuse:
        r = read_run(opt, lr, path)
        if r is not None:
            r["tail"] = tail
            return r
    cmd = [strata, "train", "--optimizer", opt, "--lr", repr(lr), "--steps", str(steps),
           "--eval-every", "10", "--threads", "1", "--step-threads", "1",
           "--metrics", path, "--quiet", "--no-progress", "--adamw-lr", repr(tail)]
    cmd += extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    failed = {"opt": opt, "lr": lr, "tail": tail, "final": math.inf, "curve": [],
              "wall": time.time() - t0}
    if p.returncode != 0:
        sys.stderr.write(f"{name}: exit {p.returncode}: "
                         f"{(p.stdout + p.stderr).strip()[-400:]}\n")
        return failed
    r = read_run(opt, lr, path)
    if r is None:
        return failed
    r["tail"] = tail
    return r


def short_run_trains(strata, opt, lr, tail, out, extra):
    """`strata train --optimizer opt --steps 20` at these rates ends at least
    0.15 below the unigram loss, as tests/train/test_run_lengths.py runs and
    checks every run length (one validation of 4 batches, one BLAS thread)."""
    path = os.path.join(out, f"short20-{opt}-lr{lr:g}-tail{tail:g}.jsonl")
    cmd = [strata, "train", "--optimizer", opt, "--lr", repr(lr), "--adamw-lr", repr(tail),
           "--steps", "20", "--eval-every", "20", "--eval-batches", "4", "--metrics", path,
           "--quiet", "--no-progress"] + extra
    if subprocess.run(cmd, capture_output=True, text=True,
                      env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}).returncode != 0:
        return False
    summary = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if j.get("type") == "summary":
                summary = j
    final, unigram = summary.get("final_val_loss"), summary.get("unigram_val_loss")
    return unigram is not None and final is not None and final < unigram - 0.15


def reach(r, target):
    """(step, wall seconds) of the first validation at or below target, or (None, None)."""
    for step, v, w in r["curve"]:
        if v is not None and v <= target:
            return step, w
    return None, None


def sweep(strata, opt, adamw_lr, a, extra, log):
    c = CENTRES[opt]
    grid = {}
    for lr in (c / 2, c, 2 * c):
        grid[lr] = run_one(strata, opt, lr, adamw_lr, a.steps, a.out, extra, a.reuse)
        log(grid[lr])
    while len(grid) < a.max_points:
        lrs = sorted(grid)
        best = min(lrs, key=lambda x: (grid[x]["final"], x))
        if best == lrs[0]:
            nxt = lrs[0] / 2
        elif best == lrs[-1]:
            nxt = lrs[-1] * 2
        else:
            break
        grid[nxt] = run_one(strata, opt, nxt, adamw_lr, a.steps, a.out, extra, a.reuse)
        log(grid[nxt])
    lrs = sorted(grid)
    best = min(lrs, key=lambda x: (grid[x]["final"], x))
    return [grid[x] for x in lrs], best


def tail_sweep(strata, opt, tails, a, log):
    """Every tail of the grid at opt's lr; the rows and the pick (trainer.c's rule)."""
    lr = LRS[opt]
    rows = []
    for t in [BASE_TAIL] + [t for t in tails if t != BASE_TAIL]:
        rows.append(run_one(strata, opt, lr, t, a.steps, a.out, a.extra, a.reuse, True))
        log(rows[-1])
    left = [r for r in rows if math.isfinite(r["final"])]
    while left:
        best = min(r["final"] for r in left)
        # the smallest tail within the scatter of the best: 3e-3 when it is there
        pick = min((r for r in left if r["final"] <= best * (1.0 + a.scatter)),
                   key=lambda r: r["tail"])
        if pick["tail"] == BASE_TAIL or short_run_trains(strata, opt, lr, pick["tail"], a.out,
                                                         a.extra):
            return sorted(rows, key=lambda r: r["tail"]), pick["tail"]
        print(f"{opt} tail {pick['tail']:g}: the 20-step run ends above the unigram loss",
              flush=True)
        left.remove(pick)
    return sorted(rows, key=lambda r: r["tail"]), BASE_TAIL


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("strata")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--optimizers", default=",".join(ORDER))
    ap.add_argument("--max-points", type=int, default=4)
    ap.add_argument("--tails", default=None,
                    help="the tail stage: these AdamW tail lrs (and 3e-3), every optimizer "
                         "at its lr (LRS)")
    ap.add_argument("--scatter", type=float, default=0.0035,
                    help="the tail stage: the smallest tail within this fraction of the "
                         "best final loss is picked")
    ap.add_argument("--out", default=None,
                    help="default runs/race-lr-sweep (runs/race-tail-sweep with --tails)")
    ap.add_argument("--reuse", action="store_true",
                    help="take a run whose JSONL in OUT is complete instead of rerunning it "
                         "(resume, or rebuild the tables)")
    # more `strata train` flags after "--" (split here: argparse hands a "*"
    # positional after another positional nothing, and refuses the flags)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.extra = extra
    tails = None
    if a.tails is not None:
        try:
            tails = [float(t) for t in a.tails.split(",")]
        except ValueError:
            sys.exit(f"race_lr_sweep: --tails {a.tails}: a comma-separated list of lrs")
        if not tails or any(not (t >= 0 and math.isfinite(t)) for t in tails):
            sys.exit(f"race_lr_sweep: --tails {a.tails}: every lr must be finite and >= 0")
    if a.out is None:
        a.out = "runs/race-tail-sweep" if tails is not None else "runs/race-lr-sweep"
    opts = a.optimizers.split(",")
    for o in opts:
        if o not in CENTRES:
            sys.exit(f"race_lr_sweep: unknown optimizer {o} ({', '.join(ORDER)})")
    if "adamw" not in opts:
        opts = ["adamw"] + opts
    opts = ["adamw"] + [o for o in opts if o != "adamw"]
    os.makedirs(a.out, exist_ok=True)

    def log(r):
        print(f"{r['opt']:<11} lr {r['lr']:<8g} tail {r['tail']:<8g} final {r['final']:.4f} "
              f"wall {r['wall']:.1f} s", flush=True)

    results, picks = {}, {}
    adamw_lr = CENTRES["adamw"]
    key = "tail" if tails is not None else "lr"  # the swept column
    for o in opts:
        if tails is not None:
            rows, best = tail_sweep(a.strata, o, tails, a, log)
        else:
            rows, best = sweep(a.strata, o, adamw_lr, a, a.extra, log)
        results[o], picks[o] = rows, best
        if o == "adamw" and tails is None:
            adamw_lr = best
    if tails is not None:  # the race's reference: AdamW at its lr, the tail 3e-3
        target = next(r["final"] for r in results["adamw"] if r["tail"] == BASE_TAIL)
        pick_row = next(r for r in results["adamw"] if r["tail"] == BASE_TAIL)
    else:
        target = min(r["final"] for r in results["adamw"])
        pick_row = next(r for r in results["adamw"] if r["lr"] == picks["adamw"])
    if not math.isfinite(target):
        sys.stderr.write("race_lr_sweep: every AdamW run failed\n")
        return 1
    base = pick_row["wall"]

    def ratio(w):  # wall time to the target over AdamW's whole wall time (noisy: load)
        return "" if w is None or not base > 0 else f"{w / base:.3f}"

    with open(os.path.join(a.out, "sweep.tsv"), "w") as f:
        f.write("optimizer\tlr\ttail_lr\tfinal_val_loss\treach_step\twall_s\treach_s\t"
                "ratio_to_adamw\tpicked\n")
        for o in opts:
            for r in results[o]:
                st, w = reach(r, target)
                f.write(f"{o}\t{r['lr']:g}\t{r['tail']:g}\t{r['final']:.6f}\t"
                        f"{'' if st is None else st}\t"
                        f"{r['wall']:.1f}\t{'' if w is None else f'{w:.1f}'}\t{ratio(w)}\t"
                        f"{int(r[key] == picks[o])}\n")
    with open(os.path.join(a.out, "sweep.md"), "w") as f:
        if tails is not None:
            f.write(f"AdamW's final validation loss at its lr {LRS['adamw']:g} and the tail "
                    f"{BASE_TAIL:g} (the target): {target:.4f}; {a.steps} steps; the AdamW "
                    f"tail's lr swept, each optimizer at its lr; picks in bold (the smallest "
                    f"tail within {100 * a.scatter:g}% of the best)\n\n")
        else:
            f.write(f"AdamW's final validation loss (the target): {target:.4f}; "
                    f"{a.steps} steps; AdamW tail lr {adamw_lr:g}; picks in bold\n\n")
        f.write("| optimizer | lr | tail lr | final val loss | step reaching AdamW's final "
                "loss | wall s | ratio to AdamW's wall time |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for o in opts:
            for r in results[o]:
                st, w = reach(r, target)
                b = "**" if r[key] == picks[o] else ""
                fin = "failed" if not math.isfinite(r["final"]) else f"{r['final']:.4f}"
                lr_s = f"{b}{r['lr']:g}{b}" if key == "lr" else f"{r['lr']:g}"
                tail_s = f"{b}{r['tail']:g}{b}" if key == "tail" else f"{r['tail']:g}"
                f.write(f"| {o} | {lr_s} | {tail_s} | {b}{fin}{b} | "
                        f"{'never' if st is None else st} | {r['wall']:.1f} | "
                        f"{ratio(w) or '-'} |\n")
    print(f"\ntarget {target:.4f}; {'tail ' if tails is not None else ''}picks: " +
          ", ".join(f"{o} {picks[o]:g}" for o in opts))
    print(f"wrote {a.out}/sweep.tsv and {a.out}/sweep.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
