#!/usr/bin/env python3
"""Sharded gradients (--shard-gradients, ZeRO-2; issue #21 item 3): per-rank
gradient bytes at 1, 2, 4 and 8 ranks against the goal.

For each world size N the example GPT trains a few steps under
`mpirun --oversubscribe -np N` with and without --shard-gradients (one run
without mpirun at N = 1). From each run's JSONL summary (per-rank figures,
the memory ledger's peaks) it prints, per N, the largest over the ranks of:
  * the ledger's gradients at their peak (with and without the flag),
  * the gradients this rank owns (owned_param_bytes: a gradient is the size of
    its weights),
  * the ledger's total peak (everything strata and the trainer charge), with
    and without the flag,
and the goal a rank's gradients must stay within:
    total / N + one transformer block's gradients + the embedding layer's
    (wte and wpe: the tied LM head adds into wte's gradient before the blocks'
    backward, so layer 0 stays lent from the head to its own hook)
(the in-flight buckets are the staging ring, charged apart as grad_buckets:
printed too). Every run must end with the weights hash of the single-rank
--grad-accum N run (bit-identical). Deterministic figures: bytes, not times.

Usage: bench_grad_shard.py STRATA_EXE [--worlds 1,2,4,8] [--layers 8 --d-model 128 ...]
       (further flags go to strata train)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_MCA_plm_rsh_agent="")


def run(exe, n, args, metrics):
    cmd = [exe, "train"] + args + ["--metrics", metrics, "--quiet"]
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(n)] + cmd
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f][-1]


def grads_peak(summary):
    return sum(t.get("gradients", {}).get("peak", 0) for t in summary["memory"].values()
               if isinstance(t, dict))


def mib(b):
    return f"{b / 1048576:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exe")
    ap.add_argument("--worlds", default="1,2,4,8")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256, help="the model's vocabulary (byte data)")
    a, extra = ap.parse_known_args()
    C, T, V = a.d_model, a.seq_len, a.vocab
    base = ["--layers", str(a.layers), "--d-model", str(C), "--heads", "4", "--seq-len", str(T),
            "--batch", "4", "--steps", "3", "--eval-every", "0", "--eval-batches", "1",
            "--threads", "1", "--optimizer", "shampoo", "--grad-bucket-kib", "256"] + extra
    block = 4 * (12 * C * C + 13 * C)      # gpt.h: a block's 12 tensors
    embed = 4 * (V * C + T * C)            # wte + wpe (layer 0)
    total = a.layers * block + embed + 4 * 2 * C
    print(f"bench_grad_shard: strata train {' '.join(base)}")
    print(f"gradients: total {mib(total)} MiB, one block {mib(block)}, embedding layer "
          f"{mib(embed)} (MiB; float32)")
    print("N | grads peak (max rank) sharded / unsharded | owned (max rank) | goal total/N + "
          "block + embedding | ledger total peak sharded / unsharded | ring | bit-identical")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(w) for w in a.worlds.split(",")]:
            ref = run(a.exe, 1, base + (["--grad-accum", str(n)] if n > 1 else []),
                      os.path.join(tmp, f"ref{n}.jsonl"))
            if n == 1:
                g = grads_peak(ref)
                print(f"1 | {mib(g)} / {mib(g)} | {mib(g)} | {mib(total)} | "
                      f"{mib(ref['memory']['total_peak'])} / same | 0 | -")
                continue
            sh = run(a.exe, n, base + ["--shard-gradients"], os.path.join(tmp, f"sh{n}.jsonl"))
            un = run(a.exe, n, base, os.path.join(tmp, f"un{n}.jsonl"))
            same = sh["weights_hash"] == ref["weights_hash"] == un["weights_hash"]
            gs = max(r["grad_bytes_peak"] for r in sh["ranks"])
            gu = max(r["grad_bytes_peak"] for r in un["ranks"])
            owned = max(r["owned_param_bytes"] for r in sh["ranks"])
            goal = total / n + block + embed
            ring = sh["memory"]["host"].get("grad_buckets", {}).get("peak", 0)
            ls = max(r["ledger_peak"] for r in sh["ranks"])
            lu = max(r["ledger_peak"] for r in un["ranks"])
            within = all(r["grad_bytes_peak"] <= r["owned_param_bytes"] + block + embed +
                         64 * 64 for r in sh["ranks"])
            print(f"{n} | {mib(gs)} / {mib(gu)} | {mib(owned)} | {mib(goal)} | {mib(ls)} / "
                  f"{mib(lu)} | {mib(ring)} | {'yes' if same else 'NO'}"
                  f"{'' if within else ' (a rank over its owned + block + embedding)'}")
            ok = ok and same and within
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
