#!/usr/bin/env python3
"""OPENBLAS_CORETYPE forcing a core weaker than the CPU's (issue #22 item 15):
strata keeps the user's core and says, in the start-up blas line and in the
summary's (also under --quiet) and in the JSONL summary, which core OpenBLAS
would pick without it and a 0.1 s SGEMM throughput probe of each. Forced here:
Sandybridge (AVX) on a CPU with AVX2+FMA, 50 steps (a shorter run names both
cores without probing). Without OPENBLAS_CORETYPE nothing is said. Exit 0 pass, 1 fail, 77 skip (no AVX2/FMA, not x86-64, or a BLIS
build). Usage: test_blas_forced.py path/to/strata"""
import json
import os
import platform
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
flags = set()
if platform.machine() == "x86_64":
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
if not {"avx2", "fma"} <= flags:
    print("SKIP: no AVX2+FMA x86-64 CPU (nothing stronger than Sandybridge to compare)")
    sys.exit(77)
failures = 0


def check(ok, what, detail=""):
    global failures
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    if not ok:
        failures += 1
        print("  " + detail[-1500:].replace("\n", "\n  "))


with tempfile.TemporaryDirectory() as tmp:
    text = os.path.join(tmp, "t.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog\n" * 200)
    base = [STRATA, "train", "--data", text, "--layers", "1", "--d-model", "16", "--heads", "2",
            "--seq-len", "16", "--batch", "4", "--steps", "50", "--eval-every", "0",
            "--no-progress"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "STRATA_BLAS_CORE_FROM",
                        "STRATA_TEST_BLAS_CORETYPE_AS_DETECTED")}
    probe = subprocess.run(base + ["--quiet"], capture_output=True, text=True, env=env, timeout=120)
    if "blas: BLIS" in probe.stdout:
        print("SKIP: a BLIS build (no OPENBLAS_CORETYPE)")
        sys.exit(77)
    m = os.path.join(tmp, "m.jsonl")
    for quiet in (False, True):
        p = subprocess.run(base + ["--metrics", m] + (["--quiet"] if quiet else []),
                           capture_output=True, text=True, timeout=120,
                           env={**env, "OPENBLAS_CORETYPE": "Sandybridge"})
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("blas:")]
        want = 1 if quiet else 2  # start-up and summary; --quiet: the summary's
        ok = (p.returncode == 0 and len(lines) == want and
              all("core Sandybridge" in ln and "forced weaker than this CPU's" in ln and
                  ln.count("GFLOP/s") == 2 for ln in lines))
        check(ok, f"forced Sandybridge{' --quiet' if quiet else ''}: {want} blas line(s) name the "
              f"CPU's core and both probes", p.stdout + p.stderr)
        try:
            s = [json.loads(x) for x in open(m)][-1]
            ok = (s["type"] == "summary" and s["blas_core"] == "Sandybridge" and
                  s["blas_core_cpu"] != "Sandybridge" and s["blas_gflops_core"] > 0 and
                  s["blas_gflops_cpu"] > 0)
        except Exception as e:  # noqa: BLE001
            ok, s = False, e
        check(ok, "JSONL summary: blas_core_cpu, blas_gflops_core, blas_gflops_cpu", repr(s))
    # A run under 50 steps is not probed (~0.3 s of start-up) but still says so.
    p = subprocess.run([("2" if x == "50" else x) for x in base], capture_output=True,
                       text=True, timeout=120, env={**env, "OPENBLAS_CORETYPE": "Sandybridge"})
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("blas:")]
    check(p.returncode == 0 and len(lines) == 2 and
          all("forced weaker than this CPU's kernels (it supports" in ln and "GFLOP/s" not in ln
              for ln in lines), "forced Sandybridge, 2 steps: cores named, no probe", p.stdout)
    p = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    check(p.returncode == 0 and "forced weaker" not in p.stdout,
          "OPENBLAS_CORETYPE unset: no forced-core note", p.stdout)
print(f"{failures} failed")
sys.exit(1 if failures else 0)
