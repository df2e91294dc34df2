#!/usr/bin/env python3
"""The largest GPT each optimizer trains under the same hard memory cap
(issue #21 item 7): strata (through the PyTorch binding, with its tiers)
against Meta's Distributed Shampoo, on the same model in the same program
(examples/torch/train_gpt.py), side by side in one run.

    bench/bench_memcap.py --peer-path /work/peers/optimizers            # 1536 MiB cap
    bench/bench_memcap.py --cap-mib 3072 --optimizers shampoo,soap --axis d_model

The cap: a memory cgroup made for each trial (cgroup v2 `memory.max`, or on
a cgroup v1 host `memory.limit_in_bytes` with `memory.memsw.limit_in_bytes`
equal to it, so nothing escapes to swap); the trial's process is moved into
it before it starts (the whole process: Python, torch, the model, its
activations, the optimizer; the page cache it fills is charged too, and
reclaimed under the cap as the kernel does). A trial passes when
train_gpt.py trains --steps steps (3) and prints its memory report; it
fails when the kernel's OOM killer ends it (the cgroup's oom_kill count) or
it exits non-zero (its message is printed). The peak charged to the cgroup
(`memory.peak` / `memory.max_usage_in_bytes`) and the process's peak RSS
are reported, with strata's ledger by kind or the peer's optimizer state by
kind (train_gpt.py --memory-report).

Sizes: --axis layers grows the number of blocks at --d-model (768); --axis
d_model grows the width (a multiple of 64, heads = d_model / 64) at
--layers. Search: doubling from the first size until a trial fails (or
--max), then bisection between the last pass and the first fail; the same
rule for every side.

Sides, per optimizer in --optimizers (shampoo, soap):
  strata-OPT   strata's OPT, --strata-opts (default: roots on workers,
               async S=1, in the nvme tier under --nvme-dir with no host
               budget: `async_roots=true staleness=1 roots_tier=nvme
               nvme_dir=DIR`), plus --extra-strata KEY=VALUE pairs (e.g.
               the reduced-precision state of issue #21 item 5,
               `state_dtype_factors=bf16`, or the state paging of item 6,
               `page_state=true`: factors, moments, grafting on nvme between
               a matrix's steps)
  meta-OPT     Distributed Shampoo (DefaultSingleDeviceDistributedConfig;
               meta-soap: DefaultSOAPConfig), its code taken from
               --peer-path (a checkout of facebookresearch/optimizers;
               never vendored: `git clone
               https://github.com/facebookresearch/optimizers`)
Both: the same block size (--max-preconditioner-dim, 1024), precondition
frequency 3 with the first refresh at step 3 (one refresh round in the
3 steps), batch 1 x seq 64 (activations small next to the state), one
torch thread. The AdamW tail (embeddings, norms, biases) is torch's AdamW
for the peer, strata's for strata.

Facts that shape the result (read them with it): Distributed Shampoo
stores each symmetric factor and inverse root packed (n(n+1)/2 floats);
strata stores them whole (n^2 floats) in the device tier, and its roots in
the host or nvme tier. Needs root (the cgroup).

Usage: bench_memcap.py [--cap-mib 1536] [--peer-path DIR] [--optimizers shampoo]
       [--axis layers|d_model] [--d-model 768] [--layers 4] [--start N] [--max N]
       [--steps 3] [--nvme-dir DIR] [--strata-opts "K=V ..."] [--extra-strata K=V]...
       [--python PY] [--timeout 900] [--sides strata,meta]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLE = os.path.join(ROOT, "examples", "torch", "train_gpt.py")


class Cgroup:
    """One memory cgroup with a hard limit, v2 or v1."""

    def __init__(self, cap_bytes: int, tag: str) -> None:
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2) and "memory" in open(v2).read().split():
            self.v2, base = True, "/sys/fs/cgroup"
        elif os.path.isdir("/sys/fs/cgroup/memory"):
            self.v2, base = False, "/sys/fs/cgroup/memory"
        else:
            raise SystemExit("bench_memcap: no memory cgroup controller (v1 or v2) here")
        self.path = os.path.join(base, f"strata-memcap-{os.getpid()}-{tag}")
        os.mkdir(self.path)
        if self.v2:
            self._write("memory.max", str(cap_bytes))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self._write("memory.swap.max", "0")
        else:
            self._write("memory.limit_in_bytes", str(cap_bytes))
            if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                self._write("memory.memsw.limit_in_bytes", str(cap_bytes))

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def enter(self) -> None:  # in the child, before exec
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def peak(self) -> int:
        v = self._read("memory.peak" if self.v2 else "memory.max_usage_in_bytes").strip()
        return int(v) if v.isdigit() else -1

    def oom_kills(self) -> int:
        text = self._read("memory.events" if self.v2 else "memory.oom_control")
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def trial(args, side: str, size: int, nvme: str) -> dict:
    opt = side.split("-", 1)[1]
    d = args.d_model if args.axis == "layers" else size
    layers = size if args.axis == "layers" else args.layers
    cmd = [args.python, EXAMPLE, "--optimizer", side if side.startswith("meta-") else opt,
           "--d-model", str(d), "--n-layer", str(layers), "--n-head", str(max(1, d // 64)),
           "--batch", "1", "--seq-len", "64", "--steps", str(args.steps), "--eval-every", "0",
           "--eval-batches", "1", "--threads", "1", "--precondition-frequency", "3",
           "--max-preconditioner-dim", str(args.max_preconditioner_dim), "--memory-report",
           "--quiet"]
    if side.startswith("meta-"):
        cmd += ["--peer-path", args.peer_path]
    else:
        opts = shlex.split(args.strata_opts.replace("DIR", nvme)) + args.extra_strata
        for kv in opts:
            cmd += ["--strata", kv]
    cg = Cgroup(args.cap_mib << 20, f"{side}-{size}")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=cg.enter,
                           timeout=args.timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or "", e.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    secs = time.monotonic() - t0
    res = {"side": side, "size": size, "d_model": d, "layers": layers, "rc": rc,
           "seconds": round(secs, 1), "cgroup_peak": cg.peak(), "oom_kills": cg.oom_kills()}
    cg.remove()
    rep = [ln for ln in out.splitlines() if ln.startswith("memory: ")]
    res["ok"] = rc == 0 and bool(rep)
    if rep:
        res["report"] = json.loads(rep[-1][len("memory: "):])
    if not res["ok"]:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        res["why"] = "OOM-killed" if res["oom_kills"] else f"exit {rc}: {tail[:160]}"
    for f in os.listdir(nvme):  # the nvme tier's files of this trial
        shutil.rmtree(os.path.join(nvme, f), ignore_errors=True)
    return res


def kinds(res: dict) -> str:
    rep = res.get("report") or {}
    if "strata_ledger" in rep:
        parts = []
        for tier, v in rep["strata_ledger"].items():
            if isinstance(v, dict):
                for k, kv in v.items():
                    if isinstance(kv, dict):
                        parts.append((kv["peak"], f"{tier}.{k}"))
        parts.sort(reverse=True)
        # what is in memory first (the cap holds it), then what lives on nvme
        res = [(b, n) for b, n in parts if not n.startswith("nvme.")]
        nv = [(b, n) for b, n in parts if n.startswith("nvme.")]
        out = ", ".join(f"{n} {b / 2**20:.0f}" for b, n in res[:7])
        if nv:
            out += "; on nvme " + ", ".join(f"{n[5:]} {b / 2**20:.0f}" for b, n in nv[:4])
        return out
    st = rep.get("state_bytes") or {}
    return ", ".join(f"{k} {b / 2**20:.0f}" for k, b in list(st.items())[:6])


def search(args, side: str, nvme: str) -> tuple[int | None, list[dict]]:
    runs: list[dict] = []

    def run(size: int) -> bool:
        r = trial(args, side, size, nvme)
        runs.append(r)
        gib = r["cgroup_peak"] / 2**20
        print(f"  {side:14s} {args.axis} {size:5d}: {'pass' if r['ok'] else 'FAIL'} "
              f"{r['seconds']:6.1f} s, cgroup peak {gib:7.0f} MiB"
              + (f", RSS {r['report']['peak_rss_bytes'] / 2**20:.0f} MiB; {kinds(r)} MiB"
                 if r["ok"] else f" ({r['why']})"), flush=True)
        return r["ok"]

    step = 64 if args.axis == "d_model" else 1
    lo, hi, size = None, None, args.start
    while size <= args.max:
        if run(size):
            lo, size = size, size * 2
        else:
            hi = size
            break
    if lo is None:
        return None, runs
    if hi is None:
        return lo, runs
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if run(mid):
            lo = mid
        else:
            hi = mid
    return lo, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap-mib", type=int, default=1536)
    ap.add_argument("--peer-path", default=os.environ.get("STRATA_META_SHAMPOO_PATH"))
    ap.add_argument("--optimizers", default="shampoo")
    ap.add_argument("--axis", choices=("layers", "d_model"), default="layers")
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--start", type=int, default=None)
    ap.add_argument("--max", type=int, default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--max-preconditioner-dim", type=int, default=1024)
    ap.add_argument("--nvme-dir", default=None)
    ap.add_argument("--strata-opts", default="async_roots=true staleness=1 roots_tier=nvme "
                                             "nvme_dir=DIR")
    ap.add_argument("--extra-strata", action="append", default=[])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--sides", default="strata,meta",
                    help="which sides to search: strata, meta or both (default)")
    args = ap.parse_args()
    if args.start is None:
        args.start = 1 if args.axis == "layers" else 256
    if args.max is None:
        args.max = 64 if args.axis == "layers" else 4096
    if not args.peer_path or not os.path.isdir(os.path.join(args.peer_path,
                                                            "distributed_shampoo")):
        print("bench_memcap: --peer-path (or STRATA_META_SHAMPOO_PATH) must name a checkout of "
              "facebookresearch/optimizers", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench_memcap: needs root (a memory cgroup per trial)", file=sys.stderr)
        return 2
    nvme = args.nvme_dir or tempfile.mkdtemp(prefix="memcap-nvme-", dir=os.getcwd())
    os.makedirs(nvme, exist_ok=True)
    print(f"bench_memcap: cap {args.cap_mib} MiB per trial; axis {args.axis} "
          f"({'d_model %d' % args.d_model if args.axis == 'layers' else '%d layers' % args.layers}"
          f"); {args.steps} steps, batch 1 x 64, block {args.max_preconditioner_dim}, "
          f"precondition frequency 3; strata: {args.strata_opts} {' '.join(args.extra_strata)}; "
          f"peer: {args.peer_path}", flush=True)
    table = []
    for opt in args.optimizers.split(","):
        best = {}
        for side in (f"{k}-{opt}" for k in ("strata", "meta") if k in args.sides.split(",")):
            best[side], runs = search(args, side, nvme)
            table.append((side, best[side], [r for r in runs if r["ok"] and r["size"] ==
                                             best[side]]))
        a, b = best.get(f"strata-{opt}"), best.get(f"meta-{opt}")
        if a and b:
            print(f"{opt}: strata reaches {args.axis} {a}, Distributed Shampoo {b}: "
                  f"{a / b:.2f}x", flush=True)
    print(f"\n| side | largest {args.axis} | parameters | cgroup peak MiB | peak RSS MiB | "
          f"largest kinds (MiB) |")
    print("|---|---|---|---|---|---|")
    for side, size, ok in table:
        if not ok:
            print(f"| {side} | none | | | | |")
            continue
        r = ok[-1]
        print(f"| {side} | {size} | {r['report']['parameters'] / 1e6:.1f}M | "
              f"{r['cgroup_peak'] / 2**20:.0f} | {r['report']['peak_rss_bytes'] / 2**20:.0f} | "
              f"{kinds(r)} |")
    if not args.nvme_dir:
        shutil.rmtree(nvme, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
