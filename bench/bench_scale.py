#!/usr/bin/env python3
"""The example GPT at several sizes (issue #21 item 8): per size, a few
synchronous Shampoo steps of `strata train` and the same model's `strata
plan`, then how each cost grows with the parameter count.

Per size: parameters; mean step time split into forward+backward (step -
optimizer) and the optimizer, of which the inverse roots on the training
thread (the refresh step's `roots_ms`: a synchronous run computes a whole
refresh round there); the planned refresh round on one worker (`strata plan`,
the fitted cost model); the ledger's peak by kind (JSONL summary "memory")
against the plan's total. Then the exponent b of cost ~ params^b for each
column (least squares on log-log over the sizes).

Usage: bench_scale.py STRATA [--sizes L:D:H,...] [--steps N] [--seq-len T]
                     [--batch B] [--out FILE.md]
Default sizes 4:128:4 (the default GPT, 0.8M), 6:256:4, 8:512:8, 24:1024:16
(~300M: tens of GB and minutes per step on a small machine). Exit 0, or 1 if a
run failed."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-1500:] + p.stderr[-1500:])
        return None
    return p.stdout


def slope(xs, ys):
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("--sizes", default="4:128:4,6:256:4,8:512:8,24:1024:16")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--frequency", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in a.sizes.split(","):
            L, D, H = (int(v) for v in spec.split(":"))
            model = ["--layers", str(L), "--d-model", str(D), "--heads", str(H), "--seq-len",
                     str(a.seq_len), "--batch", str(a.batch), "--optimizer", "shampoo",
                     "--precondition-frequency", str(a.frequency)]
            metrics = os.path.join(tmp, f"{L}x{D}.jsonl")
            if run([a.strata, "train", *model, "--steps", str(a.steps), "--eval-every", "0",
                    "--eval-batches", "1", "--quiet", "--no-progress",
                    "--metrics", metrics]) is None:
                return 1
            plan = run([a.strata, "plan", *model, "--json", "--plan-workers", "1"])
            if plan is None:
                return 1
            plan = json.loads(plan)
            recs = [json.loads(l) for l in open(metrics)]
            steps = [r for r in recs if r.get("type") == "step"]
            summ = recs[-1]
            step = sum(r["step_ms"] for r in steps) / len(steps)
            opt = sum(r["opt_ms"] for r in steps) / len(steps)
            roots = max(r.get("roots_ms", 0.0) for r in steps)
            mem = summ["memory"]
            kinds = {}
            for tier, cells in mem.items():
                if isinstance(cells, dict):
                    for k, v in cells.items():
                        if isinstance(v, dict):
                            kinds[k] = kinds.get(k, 0) + v["peak"]
            rows.append(dict(size=f"{L} x {D}", params=plan["elements"], step=step,
                             fwd_bwd=step - opt, opt=opt, roots=roots,
                             round_plan=1e3 * plan["ranks"][0]["refresh_serial_s"],
                             peak=mem["total_peak"], plan_total=plan["ranks"][0]["total"],
                             kinds=kinds))
            print(f"{L}x{D}: {plan['elements'] / 1e6:.1f}M params, step {step:.0f} ms", flush=True)
    lines = ["| GPT (layers x d_model) | params | step ms | fwd+bwd ms | optimizer ms | "
             "roots on the training thread ms (refresh step) | planned round ms (1 worker) | "
             "ledger peak MiB | plan MiB | factors / roots / moments / grafting / workspace / "
             "activations MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        k = r["kinds"]
        kk = " / ".join(f"{k.get(n, 0) / 2**20:.1f}" for n in
                        ("factors", "roots", "moments", "grafting", "workspace", "activations"))
        lines.append(f"| {r['size']} | {r['params'] / 1e6:.1f}M | {r['step']:.0f} | "
                     f"{r['fwd_bwd']:.0f} | {r['opt']:.0f} | {r['roots']:.0f} | "
                     f"{r['round_plan']:.0f} | {r['peak'] / 2**20:.1f} | "
                     f"{r['plan_total'] / 2**20:.1f} | {kk} |")
    xs = [r["params"] for r in rows]
    ex = {c: slope(xs, [r[c] for r in rows]) for c in
          ("step", "fwd_bwd", "opt", "roots", "round_plan", "peak")}
    lines.append("")
    lines.append("exponent b of cost ~ params^b: " +
                 ", ".join(f"{c} {v:.2f}" for c, v in ex.items()))
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
