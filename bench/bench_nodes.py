#!/usr/bin/env python3
"""Owner sharding against gather-then-compute and ZeRO-1 across emulated hosts
with shaped links, and hierarchical against flat sync (issue #25 item 3).

Needs root: the hosts are scripts/nodes.sh's network namespaces (TCP between
hosts through links of --rate, shared memory within one). For each host
count H in --hosts:
  * 1 rank per host, --sharding owner, gather and zero1 (Muon by default):
    the optimizer step's time (mean over ranks of the median-free per-rank
    mean, strata's own opt_ms), the whole step (rank 0's mean), matrix bytes
    moved inside the step, inter-node bytes per rank and step, and the ratio
    of each baseline's optimizer step to owner's;
  * 2 ranks per host (H <= 4), Shampoo, flat against --shard-group-size 2
    (HSDP: reduce-to-owner inside the replica set, refreshes shipped to the
    other replicas): inter-node and intra-node bytes per step summed over
    ranks, and the whole step.
Each row checks the link-rate bound: a rank's inter-node bytes per step
(sent + received, each direction through its own shaped link) need at least
bytes / (2 x rate) seconds, so its step time must not be shorter; rows where
it would be are marked '!' (the counters or the shaping are wrong). Every
run must end with the single-rank --grad-accum run's weights hash.

The machine's cores are shared by all ranks (2 cores run 8 ranks
oversubscribed): compute time grows with the host count as well as the
traffic; the ratios, not the absolute times, are the figures to read.

Usage: bench_nodes.py STRATA_EXE [--hosts 2,4,8] [--rate 1gbit] [--steps 6]
       [--layers 2 --d-model 128 ...]  (further flags go to strata train)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NODES = os.path.join(HERE, "..", "scripts", "nodes.sh")
ENV = dict(os.environ, STRATA_NODES_STATE="/run/strata-nodes-bench", STRATA_NODES_PREFIX="stb")


def rate_bytes(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        sys.exit(f"--rate {rate}: expected e.g. 100mbit, 1gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def nodes(*args):
    p = subprocess.run([NODES] + list(args), env=ENV, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"nodes.sh {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def train(exe, tmp, tag, n, args, mpi=()):
    metrics = os.path.join(tmp, tag + ".jsonl")
    cmd = [exe, "train"] + args + ["--metrics", metrics, "--quiet"]
    if n > 1:
        cmd = [NODES, "run", "-np", str(n), "--oversubscribe"] + list(mpi) + cmd
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    if p.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f][-1]


def bound_ok(s, rate):
    """Every rank's mean step is at least its inter-node bytes / (2 x rate)."""
    return all(s["step_ms_mean"] / 1e3 >= r["inter_node_bytes"] / (2 * rate) for r in s["ranks"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exe")
    ap.add_argument("--hosts", default="2,4,8")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--delay", default="50us")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--optimizer", default="muon")
    a, extra = ap.parse_known_args()
    exe = os.path.abspath(a.exe)
    rate = rate_bytes(a.rate)
    base = ["--steps", str(a.steps), "--eval-every", "0", "--eval-batches", "1", "--threads",
            "1", "--layers", "2", "--d-model", "128", "--heads", "4", "--seq-len", "64",
            "--batch", "4"] + extra
    hosts = [int(h) for h in a.hosts.split(",")]
    print(f"bench_nodes: hosts {a.hosts}, links {a.rate} (delay {a.delay} where netem "
          f"exists), {a.steps} steps, {os.cpu_count()} cores shared by every rank")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for H in hosts:
                up = nodes("up", str(H), "--slots", "2", "--rate", a.rate, "--delay", a.delay)
                if "not emulated" in up.stderr and H == hosts[0]:
                    print("note:", up.stderr.strip().replace("nodes.sh: ", ""))
                opt = ["--optimizer", a.optimizer]
                ref = train(exe, tmp, f"ref-{H}", 1, base + opt + ["--grad-accum", str(H)])
                res = {}
                for mode in ("owner", "gather", "zero1"):
                    s = train(exe, tmp, f"{mode}-{H}", H, base + opt + ["--sharding", mode],
                              ["--map-by", "node"])  # one rank on each host
                    if s["weights_hash"] != ref["weights_hash"]:
                        sys.exit(f"{mode} at {H} hosts: weights differ from --grad-accum {H}")
                    res[mode] = s
                o = res["owner"]
                for mode, s in res.items():
                    rk = s["ranks"]
                    opt_ms = sum(r["opt_ms"] for r in rk) / len(rk)
                    rows.append((H, 1, mode, opt_ms,
                                 opt_ms / (sum(r["opt_ms"] for r in o["ranks"]) / len(rk)),
                                 s["step_ms_mean"],
                                 max(r["step_matrix_bytes"] for r in rk),
                                 max(r["inter_node_bytes"] for r in rk),
                                 sum(r["inter_node_bytes"] for r in rk),
                                 sum(r["intra_node_bytes"] for r in rk), bound_ok(s, rate)))
                if H <= 4:
                    sh = ["--optimizer", "shampoo", "--precondition-frequency", "2"]
                    ref2 = train(exe, tmp, f"ref2-{H}", 1, base + sh + ["--grad-accum",
                                                                        str(2 * H)])
                    for label, ex in (("flat", []), ("hsdp", ["--shard-group-size", "2"])):
                        # two ranks per host (the hostfile's slots=2, filled in order)
                        s = train(exe, tmp, f"{label}-{H}", 2 * H, base + sh + ex)
                        if s["weights_hash"] != ref2["weights_hash"]:
                            sys.exit(f"shampoo {label} at {H}x2: weights differ")
                        rk = s["ranks"]
                        opt_ms = sum(r["opt_ms"] for r in rk) / len(rk)
                        rows.append((H, 2, f"shampoo {label}", opt_ms, float("nan"),
                                     s["step_ms_mean"],
                                     max(r["step_matrix_bytes"] for r in rk),
                                     max(r["inter_node_bytes"] for r in rk),
                                     sum(r["inter_node_bytes"] for r in rk),
                                     sum(r["intra_node_bytes"] for r in rk), bound_ok(s, rate)))
                nodes("down")
    finally:
        subprocess.run([NODES, "down"], env=ENV, capture_output=True)
    print(f"{'hosts':>5} {'r/h':>3} {'layout':<15} {'opt ms':>8} {'x owner':>7} "
          f"{'step ms':>8} {'matrix KiB':>10} {'inter KiB/rank':>14} {'inter KiB sum':>13} "
          f"{'intra KiB sum':>13} bound")
    for H, rph, mode, opt_ms, ratio, step, mat, inter, inter_sum, intra_sum, ok in rows:
        print(f"{H:5d} {rph:3d} {mode:<15} {opt_ms:8.1f} "
              f"{'-' if ratio != ratio else f'{ratio:.2f}x':>7} {step:8.1f} {mat / 1024:10.1f} "
              f"{inter / 1024:14.1f} {inter_sum / 1024:13.1f} {intra_sum / 1024:13.1f} "
              f"{'ok' if ok else '!'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
