#!/usr/bin/env python3
"""bench_blas.py: two strata builds on two BLAS libraries, side by side in one
run (issue #13 item 4: "consider a meson option for another BLAS (BLIS from
Debian) and measure it").

Usage: bench_blas.py BUILD_A BUILD_B [--rounds 5] [--threads 1,2]
                     [--parts sgemm,muon,soap,train] [--json FILE]

BUILD_A and BUILD_B are meson build folders, typically
  meson setup build-ob   --buildtype=release                 (OpenBLAS)
  meson setup build-blis --buildtype=release -Dblas=blis     (BLIS)
Each figure is a median over rounds; every round runs both builds, the order
alternating (A first in even rounds), so a noisy machine affects both alike.
The ratio printed is A's time / B's time (> 1: B is faster); for GFLOP/s and
tokens/s, B / A, which is the same direction.

  sgemm  bench/bench_sgemm N T: C = A B, N x N float32, N in {768, 1024},
         T BLAS threads (median of 5 calls in each process)
  muon   bench/peers/peer_step on one GPT-2-small layer (4 x 768x768,
         768x3072, 3072x768; strata's defaults, EMA momentum), ms per step
  soap   the same layer with SOAP (F = 10), ms per step
  train  `strata train` on the default model with each of
         --train-optimizers (default adamw: the model's products only, and
         shampoo, the CLI's default) for --train-steps steps: the summary's
         tokens/s

Each long-lived peer_step process keeps its optimizer state between rounds,
as training does; the first step (SOAP's sets up the eigenbases by a full
eigendecomposition) is warm-up, not timed. Then each round times 2 steps, and
two figures are printed: the median over rounds, and the mean over all timed
steps. With the default 5 rounds SOAP's 10 timed steps hold exactly one
eigenbasis refresh (QR, LAPACK), so its median is the plain step and its mean
the step amortized over F = 10.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

GPT2_LAYER = [(768, 768)] * 4 + [(768, 3072), (3072, 768)]


def exe(build, rel):
    p = os.path.join(build, rel)
    if not os.access(p, os.X_OK):
        sys.exit(f"bench_blas: {p} not found: build it (ninja -C {build})")
    return p


def blas_of(build):
    """(library, core) the build links, from bench_sgemm, and its ldd lines."""
    out = subprocess.run([exe(build, "bench/bench_sgemm"), "64", "1", "1"], capture_output=True,
                         text=True, check=True).stdout.split()
    ldd = subprocess.run(["ldd", exe(build, "cli/strata")], capture_output=True, text=True).stdout
    libs = [ln.split()[0] + " -> " + ln.split()[2] for ln in ldd.splitlines()
            if any(k in ln for k in ("blas", "blis", "lapack")) and "=>" in ln]
    return out[1], out[2], libs


def order(r, a, b):
    return [a, b] if r % 2 == 0 else [b, a]


def sgemm(args, builds, res):
    print("\nSGEMM GFLOP/s (bench_sgemm; median over rounds)", flush=True)
    print(f"{'n':>6} {'threads':>7} {builds[0]['tag']:>14} {builds[1]['tag']:>14} {'B/A':>7}")
    for n in (768, 1024):
        for t in args.threads:
            g = {0: [], 1: []}
            for r in range(args.rounds):
                for i in order(r, 0, 1):
                    out = subprocess.run([exe(builds[i]["dir"], "bench/bench_sgemm"), str(n),
                                          str(t), "5"], capture_output=True, text=True,
                                         check=True).stdout.split()
                    g[i].append(float(out[out.index("gflops") + 1]))
            a, b = statistics.median(g[0]), statistics.median(g[1])
            print(f"{n:>6} {t:>7} {a:>14.1f} {b:>14.1f} {b / a:>7.2f}", flush=True)
            res.append(dict(part="sgemm", n=n, threads=t, a=a, b=b, ratio=b / a,
                            unit="GFLOP/s", a_all=g[0], b_all=g[1]))


class Peer:
    """One peer_step process (bench/peers/peer_step.c's stdin protocol)."""

    def __init__(self, build, opt, d, threads, keys):
        cmd = [exe(build, "bench/peer_step"), opt, d, str(threads)] + keys
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            sys.exit(f"bench_blas: peer_step: {line.strip()}")

    def cmd(self, s):
        self.p.stdin.write(s + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        if line.startswith("error") or not line:
            sys.exit(f"bench_blas: peer_step {s}: {line}")
        return line

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def layer_dir(tmp):
    rng = np.random.default_rng(0)
    with open(os.path.join(tmp, "shapes.txt"), "w") as f:
        for r, c in GPT2_LAYER:
            f.write(f"{r} {c}\n")
    total = sum(r * c for r, c in GPT2_LAYER)
    (rng.standard_normal(total, dtype=np.float32) * 0.02).tofile(os.path.join(tmp, "w.f32"))
    # two gradient sets: steps alternate them, so the factors keep changing
    (rng.standard_normal(2 * total, dtype=np.float32) * 1e-3).tofile(os.path.join(tmp, "g.f32"))
    return tmp


def opt_step(args, builds, res, opt, d):
    keys = ["freq=10"] if opt == "soap" else []
    warm, k = 1, 2
    print(f"\n{opt} step on one GPT-2-small layer, ms per step ({k} steps per round; "
          f"median over rounds | mean over all timed steps)", flush=True)
    print(f"{'threads':>7} {builds[0]['tag']:>14} {builds[1]['tag']:>14} {'A/B':>7} | "
          f"{'mean A':>9} {'mean B':>9} {'A/B':>7}")
    for t in args.threads:
        peers = [Peer(b["dir"], opt, d, t, keys) for b in builds]
        for p in peers:
            p.cmd("reset")
            p.cmd(f"step {warm}")
        ms = {0: [], 1: []}
        for r in range(args.rounds):
            for i in order(r, 0, 1):
                ms[i].append(1e3 * float(peers[i].cmd(f"step {k}")) / k)
        for p in peers:
            p.close()
        a, b = statistics.median(ms[0]), statistics.median(ms[1])
        ma, mb = statistics.mean(ms[0]), statistics.mean(ms[1])
        print(f"{t:>7} {a:>14.1f} {b:>14.1f} {a / b:>7.2f} | {ma:>9.1f} {mb:>9.1f} "
              f"{ma / mb:>7.2f}", flush=True)
        res.append(dict(part=opt, threads=t, a=a, b=b, ratio=a / b, unit="ms/step",
                        a_mean=ma, b_mean=mb, a_all=ms[0], b_all=ms[1]))


def train(args, builds, res, tmp, opt):
    print(f"\nstrata train --optimizer {opt}, default model, {args.train_steps} steps: tokens/s "
          f"(median over rounds)", flush=True)
    print(f"{'threads':>7} {builds[0]['tag']:>14} {builds[1]['tag']:>14} {'B/A':>7}")
    metrics = os.path.join(tmp, "m.jsonl")
    for t in args.threads:
        tps = {0: [], 1: []}
        for r in range(args.rounds):
            for i in order(r, 0, 1):
                subprocess.run([exe(builds[i]["dir"], "cli/strata"), "train", "--steps",
                                str(args.train_steps), "--optimizer", opt, "--eval-every", "0",
                                "--threads", str(t),
                                "--metrics", metrics, "--quiet"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with open(metrics) as f:
                    summ = [json.loads(x) for x in f if '"summary"' in x][-1]
                tps[i].append(summ["tokens_per_s"])
        a, b = statistics.median(tps[0]), statistics.median(tps[1])
        print(f"{t:>7} {a:>14.0f} {b:>14.0f} {b / a:>7.2f}", flush=True)
        res.append(dict(part="train-" + opt, threads=t, a=a, b=b, ratio=b / a, unit="tokens/s",
                        a_all=tps[0], b_all=tps[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("build_a", help="meson build folder A (e.g. OpenBLAS)")
    ap.add_argument("build_b", help="meson build folder B (e.g. -Dblas=blis)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    ap.add_argument("--threads", default="1,2", help="BLAS thread counts, comma-separated")
    ap.add_argument("--parts", default="sgemm,muon,soap,train",
                    help="what to time: sgemm, muon, soap, train")
    ap.add_argument("--train-steps", type=int, default=30, help="steps per strata train run")
    ap.add_argument("--train-optimizers", default="adamw,shampoo",
                    help="matrix optimizers of the train part")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    args.threads = [int(x) for x in args.threads.split(",")]
    parts = args.parts.split(",")
    bad = [x for x in parts if x not in ("sgemm", "muon", "soap", "train")]
    if bad:
        ap.error(f"--parts: unknown {', '.join(bad)} (known: sgemm, muon, soap, train)")
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if v in os.environ:
            print(f"note: {v}={os.environ[v]} is set", flush=True)
    builds = []
    for tag, d in (("A", args.build_a), ("B", args.build_b)):
        lib, core, libs = blas_of(d)
        builds.append(dict(dir=d, lib=lib, core=core, tag=f"{tag}:{lib}"))
        print(f"{tag} = {d}: {lib}, core {core}; cli/strata loads " + "; ".join(libs))
    print(f"{os.cpu_count()} cores; {args.rounds} interleaved rounds", flush=True)
    res = []
    with tempfile.TemporaryDirectory(prefix="bench_blas.") as tmp:
        if "sgemm" in parts:
            sgemm(args, builds, res)
        d = layer_dir(tmp) if ("muon" in parts or "soap" in parts) else None
        for opt in ("muon", "soap"):
            if opt in parts:
                opt_step(args, builds, res, opt, d)
        if "train" in parts:
            for opt in args.train_optimizers.split(","):
                train(args, builds, res, tmp, opt)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(builds=builds, rounds=args.rounds, results=res), f, indent=1)


if __name__ == "__main__":
    main()
