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

Usage: race_lr_sweep.py STRATA [--steps N] [--optimizers a,b,...]
                        [--max-points K] [--out DIR] [--reuse] [-- extra train flags]
Run it niced on a shared machine: nice -n 5 bench/race_lr_sweep.py build/cli/strata
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


def run_one(strata, opt, lr, adamw_lr, steps, out, extra, reuse=False):
    path = os.path.join(out, f"{opt}-lr{lr:g}.jsonl")
    if reuse:
        r = read_run(opt, lr, path)
        if r is not None:
            return r
    cmd = [strata, "train", "--optimizer", opt, "--lr", repr(lr), "--steps", str(steps),
           "--eval-every", "10", "--threads", "1", "--step-threads", "1",
           "--metrics", path, "--quiet", "--no-progress"]
    if opt != "adamw":
        cmd += ["--adamw-lr", repr(adamw_lr)]
    cmd += extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"{opt} lr {lr:g}: exit {p.returncode}: "
                         f"{(p.stdout + p.stderr).strip()[-400:]}\n")
        return {"opt": opt, "lr": lr, "final": math.inf, "curve": [], "wall": time.time() - t0}
    r = read_run(opt, lr, path)
    return r if r is not None else {"opt": opt, "lr": lr, "final": math.inf, "curve": [],
                                    "wall": time.time() - t0}


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("strata")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--optimizers", default=",".join(ORDER))
    ap.add_argument("--max-points", type=int, default=4)
    ap.add_argument("--out", default="runs/race-lr-sweep")
    ap.add_argument("--reuse", action="store_true",
                    help="take a run whose JSONL in OUT is complete instead of rerunning it "
                         "(resume, or rebuild the tables)")
    ap.add_argument("extra", nargs="*", help="more `strata train` flags (after --)")
    a = ap.parse_args()
    opts = a.optimizers.split(",")
    for o in opts:
        if o not in CENTRES:
            sys.exit(f"race_lr_sweep: unknown optimizer {o} ({', '.join(ORDER)})")
    if "adamw" not in opts:
        opts = ["adamw"] + opts
    opts = ["adamw"] + [o for o in opts if o != "adamw"]
    os.makedirs(a.out, exist_ok=True)

    def log(r):
        print(f"{r['opt']:<11} lr {r['lr']:<8g} final {r['final']:.4f} wall {r['wall']:.1f} s",
              flush=True)

    results, picks = {}, {}
    adamw_lr = CENTRES["adamw"]
    for o in opts:
        rows, best = sweep(a.strata, o, adamw_lr, a, a.extra, log)
        results[o], picks[o] = rows, best
        if o == "adamw":
            adamw_lr = best
    target = min(r["final"] for r in results["adamw"])
    if not math.isfinite(target):
        sys.stderr.write("race_lr_sweep: every AdamW run failed\n")
        return 1
    base = next(r["wall"] for r in results["adamw"] if r["lr"] == picks["adamw"])

    def ratio(w):  # wall time to the target over AdamW's whole wall time (noisy: load)
        return "" if w is None or not base > 0 else f"{w / base:.3f}"

    with open(os.path.join(a.out, "sweep.tsv"), "w") as f:
        f.write("optimizer\tlr\tfinal_val_loss\treach_step\twall_s\treach_s\t"
                "ratio_to_adamw\tpicked\n")
        for o in opts:
            for r in results[o]:
                st, w = reach(r, target)
                f.write(f"{o}\t{r['lr']:g}\t{r['final']:.6f}\t{'' if st is None else st}\t"
                        f"{r['wall']:.1f}\t{'' if w is None else f'{w:.1f}'}\t{ratio(w)}\t"
                        f"{int(r['lr'] == picks[o])}\n")
    with open(os.path.join(a.out, "sweep.md"), "w") as f:
        f.write(f"AdamW's final validation loss (the target): {target:.4f}; "
                f"{a.steps} steps; AdamW tail lr {adamw_lr:g}; picks in bold\n\n")
        f.write("| optimizer | lr | final val loss | step reaching AdamW's final loss | "
                "wall s | ratio to AdamW's wall time |\n")
        f.write("|---|---|---|---|---|---|\n")
        for o in opts:
            for r in results[o]:
                st, w = reach(r, target)
                b = "**" if r["lr"] == picks[o] else ""
                fin = "failed" if not math.isfinite(r["final"]) else f"{r['final']:.4f}"
                f.write(f"| {o} | {b}{r['lr']:g}{b} | {b}{fin}{b} | "
                        f"{'never' if st is None else st} | {r['wall']:.1f} | "
                        f"{ratio(w) or '-'} |\n")
    print(f"\ntarget {target:.4f}; picks: " +
          ", ".join(f"{o} {picks[o]:g}" for o in opts))
    print(f"wrote {a.out}/sweep.tsv and {a.out}/sweep.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
