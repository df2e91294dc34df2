#!/usr/bin/env python3
"""Owner-shaped sharding against the gather-then-compute and ZeRO-1 baselines.

One run, side by side: the example GPT trained for a few steps under
`mpirun -np RANKS` (oversubscribed on a small machine) with Muon and with
Shampoo, for --sharding owner, gather and zero1, in interleaved rounds. For
each it reports, from the runs' JSONL summaries (per-rank figures):
  * the optimizer step's time (strata_step, mean over ranks and steps, then the
    median over rounds) and its ratio to owner sharding;
  * matrix bytes moved inside the optimizer step per rank and step;
  * intra-node and inter-node bytes per rank and step (all collectives);
  * the whole step (forward + backward + optimizer step, rank 0's mean), the
    time inside the backward hooks (the gradient reductions: blocking, or
    posting buckets) and the time strata_step waited for gradient reductions
    still in flight (means over ranks; '-' from a build without them);
and the planner's predicted makespan / lower bound on the GPT's parameters at
4 and 8 ranks (from the owner runs' summaries).
Every run must end with the same weights hash as the single-rank
--grad-accum RANKS run (the same work, three layouts).

Usage: bench_sharding.py STRATA_EXE [--ranks 4] [--steps 6] [--rounds 3]
       [--layers 4 --d-model 128 ...]  (further flags go to strata train)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def run(exe, n, args, metrics):
    cmd = [exe, "train"] + args + ["--metrics", metrics, "--quiet"]
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(n)] + cmd
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f][-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exe")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    a, extra = ap.parse_known_args()
    base = ["--steps", str(a.steps), "--eval-every", "0", "--eval-batches", "1", "--threads",
            "1"] + extra
    cores = os.cpu_count()
    print(f"bench_sharding: {a.ranks} ranks on {cores} cores (oversubscribed: times include "
          f"waiting for a core), {a.steps} steps, {a.rounds} interleaved rounds")
    with tempfile.TemporaryDirectory() as tmp:
        for opt in ("muon", "shampoo"):
            args = base + ["--optimizer", opt]
            ref = run(a.exe, 1, args + ["--grad-accum", str(a.ranks)],
                      os.path.join(tmp, "ref.jsonl"))
            res = {m: [] for m in ("owner", "gather", "zero1")}
            for _ in range(a.rounds):
                for mode in res:
                    s = run(a.exe, a.ranks, args + ["--sharding", mode],
                            os.path.join(tmp, f"{mode}.jsonl"))
                    if s["weights_hash"] != ref["weights_hash"]:
                        sys.exit(f"{opt} {mode}: weights differ from --grad-accum {a.ranks}")
                    res[mode].append(s)
            print(f"\n{opt} (weights identical to one rank with --grad-accum {a.ranks}: "
                  f"{ref['weights_hash']})")
            print(f"{'sharding':8} {'opt ms':>8} {'vs owner':>8} {'step MiB/rank':>14} "
                  f"{'intra MiB':>10} {'inter MiB':>10} {'resident MiB max':>16} "
                  f"{'step ms':>8} {'bwd hook ms':>11} {'grad wait ms':>12}")
            owner_ms = None
            for mode, runs in res.items():
                ms = statistics.median(statistics.mean(r["opt_ms"] for r in s["ranks"])
                                       for s in runs)
                step_b = statistics.mean(r["step_matrix_bytes"] for r in runs[0]["ranks"])
                intra = statistics.mean(r["intra_node_bytes"] for r in runs[0]["ranks"])
                inter = statistics.mean(r["inter_node_bytes"] for r in runs[0]["ranks"])
                resident = max(r["resident_bytes"] for r in runs[0]["ranks"])
                owner_ms = owner_ms or ms
                step_ms = statistics.median(s["step_ms_mean"] for s in runs)

                def per_rank(key):
                    if key not in runs[0]["ranks"][0]:
                        return f"{'-':>{len(key) - 1}}"
                    return f"{statistics.median(statistics.mean(r[key] for r in s['ranks']) for s in runs):.2f}"
                print(f"{mode:8} {ms:8.2f} {ms / owner_ms:8.2f} {step_b / 2**20:14.3f} "
                      f"{intra / 2**20:10.3f} {inter / 2**20:10.3f} {resident / 2**20:16.2f} "
                      f"{step_ms:8.2f} {per_rank('bwd_hook_ms'):>11} "
                      f"{per_rank('grad_wait_ms'):>12}")
        print("\nplanner (owner sharding, shampoo): predicted makespan / lower bound")
        for n in (4, 8):
            s = run(a.exe, n, base[:0] + ["--steps", "1", "--eval-every", "0", "--eval-batches",
                                          "1", "--threads", "1", "--optimizer", "shampoo"] + extra,
                    os.path.join(tmp, f"plan{n}.jsonl"))
            print(f"  {n} ranks: {s['planned_makespan'] / s['planned_lower_bound']:.3f} "
                  f"(makespan {s['planned_makespan'] * 1e3:.2f} ms, lower bound "
                  f"{s['planned_lower_bound'] * 1e3:.2f} ms; target <= 1.05)")


if __name__ == "__main__":
    main()
