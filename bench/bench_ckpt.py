#!/usr/bin/env python3
"""Checkpoint save and load throughput against the disk, side by side.

One run. For each model (the default GPT and a larger one, saved before
the first inverse roots; then GPT-2-small, 12 x 768 at seq 256, saved with
its roots present) it trains a few steps with a save after every step
(`strata train --save-every 1`), then resumes from the last checkpoint for
one more step (the load is timed alone), and, in the same directory and in the same run,
measures the disk with fio:

  * save: strata_save's wall time is the pause the training loop sees (the
    refresh drain, the weight sync, writing, fsync of every file and of the
    directory, the rename); throughput = checkpoint bytes / pause. Median
    over the saves, and the worst pause.
  * load: strata_load's wall time (reads, SHA-256 of every file, parsing,
    copies into the runtime), once cold (the checkpoint's pages dropped from
    the page cache with posix_fadvise(POSIX_FADV_DONTNEED) after the save's
    fsync) and once warm (right after a cold load).
  * fio write: sequential 1 MiB writes, buffered (direct=0), fsync at the end
    (end_fsync=1): the same path as strata_save. Its size is the
    checkpoint's, so both pay the same final flush.
  * fio read: sequential 1 MiB reads, buffered (direct=0) with fio's
    invalidate=1 (posix_fadvise DONTNEED on the file first): the cache is
    dropped the same way as for strata's cold load.

GPT-2-small's roots take minutes to compute on a small machine, so they are
computed once: a seed run of one step with its first refresh at step 1
(`--start-preconditioning-step 1`) saves a checkpoint, and every round
resumes from it and saves after each of its steps (each save holds the
roots, the factors and the grafting state; the seed's load is not
measured). It runs --gpt2-rounds rounds of --gpt2-saves saves (batch 1: the
forward/backward is not what is measured; the checkpoint does not depend
on it); --no-gpt2 leaves it out.

fio and strata alternate for --rounds rounds; medians are reported. The
ratio column is strata / fio. The OpenBLAS core is read from the library the
strata binary links (openblas_get_corename), under this process's
environment, which strata inherits.

Usage: bench_ckpt.py STRATA_EXE [--dir DIR] [--rounds 3] [--saves 3]
                     [--gpt2-rounds 1] [--gpt2-saves 2] [--no-gpt2]
       (DIR: where checkpoints and fio's file go; default a temporary
       directory under the current one, removed at the end)
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# (label, model flags, saved with roots present)
MODELS = [
    ("default GPT (4 x 128)", ["--seq-len", "64", "--batch", "4"], False),
    ("larger GPT (8 x 256)", ["--layers", "8", "--d-model", "256", "--heads", "8",
                              "--seq-len", "64", "--batch", "4"], False),
    ("GPT-2-small (12 x 768, seq 256), roots present",
     ["--layers", "12", "--d-model", "768", "--heads", "12", "--seq-len", "256", "--batch", "1",
      "--start-preconditioning-step", "1"], True),
]
# Short steps: the forward/backward is not what is measured.
COMMON = ["--optimizer", "shampoo", "--eval-every", "0", "--eval-batches", "1", "--quiet"]


def openblas_core(exe):
    """openblas_get_corename() of the OpenBLAS the strata binary links."""
    p = subprocess.run(["ldd", exe], capture_output=True, text=True)
    m = re.search(r"(libopenblas\S*)\s+=>\s+(\S+)", p.stdout)
    if not m:
        return "unknown (no libopenblas in ldd output)"
    lib = ctypes.CDLL(m.group(2))
    lib.openblas_get_corename.restype = ctypes.c_char_p
    lib.openblas_get_config.restype = ctypes.c_char_p
    return f"{lib.openblas_get_corename().decode()} ({lib.openblas_get_config().decode()})"


def train(exe, args, metrics):
    cmd = [exe, "train"] + COMMON + args + ["--metrics", metrics]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f][-1]


def drop_cache(path):
    """Evict a checkpoint's clean pages (fsynced by strata_save)."""
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fio(directory, rw, size_bytes):
    name = os.path.join(directory, "fio-seq.dat")
    size_mib = max(1, (size_bytes + (1 << 20) - 1) >> 20)
    cmd = ["fio", "--name=seq", f"--filename={name}", f"--rw={rw}", "--bs=1M",
           f"--size={size_mib}M", "--ioengine=psync", "--direct=0", "--numjobs=1",
           "--output-format=json"]
    cmd += ["--end_fsync=1"] if rw == "write" else ["--invalidate=1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"fio failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    job = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
    side = job["write" if rw == "write" else "read"]
    # bw_bytes covers the I/O only; with end_fsync the flush is part of the
    # job's runtime, so use bytes / job runtime (ms) for writes.
    seconds = (job["job_runtime"] if "job_runtime" in job else side["runtime"]) / 1e3
    return side["io_bytes"] / 1048576.0 / seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--gpt2-rounds", type=int, default=1)
    ap.add_argument("--gpt2-saves", type=int, default=2)
    ap.add_argument("--no-gpt2", action="store_true")
    a = ap.parse_args()
    exe = os.path.abspath(a.exe)
    base = a.dir or tempfile.mkdtemp(prefix="bench_ckpt.", dir=".")
    os.makedirs(base, exist_ok=True)
    print(f"OpenBLAS core: {openblas_core(exe)}")
    print(f"directory: {os.path.abspath(base)}")
    rows = []
    try:
        for label, margs, roots in MODELS:
            if roots and a.no_gpt2:
                continue
            rounds, saves = (a.gpt2_rounds, a.gpt2_saves) if roots else (a.rounds, a.saves)
            save_mibs, pauses, load_cold, load_warm, fio_w, fio_r = [], [], [], [], [], []
            ckpt_mib = 0.0
            first, seed = [], None
            if roots:
                # the roots once: one step, refreshed at step 1, saved
                seed_dir = os.path.join(base, f"seed-{len(rows)}")
                train(exe, margs + ["--steps", "1", "--save-every", "1", "--save-dir", seed_dir],
                      os.path.join(base, "seed.jsonl"))
                seed = os.path.join(seed_dir, "step-00000001")
                first = ["--resume", seed]
            for r in range(rounds):
                sd = os.path.join(base, f"ck-{len(rows)}-{r}")
                steps = saves + (1 if roots else 0)
                got = train(exe, margs + first + ["--steps", str(steps), "--save-every", "1",
                                                  "--save-dir", sd],
                            os.path.join(base, "save.jsonl"))
                ckpt_bytes = got["ckpt_bytes"]
                ckpt_mib = ckpt_bytes / 1048576.0
                # One figure per run from the summary: last save's rate and the
                # worst pause; strata prints the last, so rate = bytes / pause.
                save_mibs.append(got["ckpt_save_mib_s"])
                pauses.append(got["ckpt_pause_max_s"])
                fio_w.append(fio(base, "write", int(ckpt_bytes)))
                last = os.path.join(sd, f"step-{steps:08d}")
                drop_cache(last)
                # one step after the load: a run with nothing left to train
                # writes no summary (and so no load figures)
                cold = train(exe, margs + ["--steps", str(steps + 1), "--resume", last],
                             os.path.join(base, "load.jsonl"))
                load_cold.append(cold["ckpt_load_mib_s"])
                warm = train(exe, margs + ["--steps", str(steps + 1), "--resume", last],
                             os.path.join(base, "load.jsonl"))
                load_warm.append(warm["ckpt_load_mib_s"])
                if warm["weights_hash"] != cold["weights_hash"]:
                    sys.exit("the two loads of one checkpoint gave different weights")
                fio_r.append(fio(base, "read", int(ckpt_bytes)))
                os.remove(os.path.join(base, "fio-seq.dat"))
                shutil.rmtree(sd)
            if seed:
                shutil.rmtree(os.path.dirname(seed))
            med = statistics.median
            rows.append((label, ckpt_mib, med(save_mibs), 1e3 * max(pauses), med(fio_w),
                         med(load_cold), med(load_warm), med(fio_r), rounds, saves))
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)
    print("\nmedians over the rounds (strata and fio alternating); save = strata_save's pause")
    hdr = ("model", "rounds x saves", "ckpt MiB", "save MiB/s", "pause max ms", "fio write MiB/s", "save/fio",
           "load cold MiB/s", "load warm MiB/s", "fio read MiB/s", "cold/fio")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for label, mib, sv, pz, fw, lc, lw, fr, nr, ns in rows:
        print(f"| {label} | {nr} x {ns} | {mib:.1f} | {sv:.0f} | {pz:.1f} | {fw:.0f} | {sv / fw:.2f} | "
              f"{lc:.0f} | {lw:.0f} | {fr:.0f} | {lc / fr:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
