#!/usr/bin/env python3
"""scripts/device-check.sh on a machine without a GPU (issue #20 item 4).

test_dry_run.py SCRIPT BUNDLE: runs the device check from the bundle into a
temporary OUT and checks that it ends "N passed, 0 failed, M skipped" with
exit 0, that every GPU check is a SKIP (never a PASS: no GPU ran it) and the
CPU ones (libs, cpu_refs) PASS, that the inventory comes first, and that OUT
holds at most 8 files (the GPU machine returns no more) and no scratch.
Exit 77 where a GPU is present (the real run is the check there), where nvcc
is absent or no bundle is given (as test_bundle.py).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

GPU_CHECKS = ["cuda_ops", "gpt_cuda", "async_s0", "gpt_curve", "async_stagger", "ns_vs_sgemm",
              "tiers", "newton_f32"]
CPU_CHECKS = ["libs", "cpu_refs"]


def main():
    script = sys.argv[1]
    bundle = os.environ.get("STRATA_BUNDLE") or (sys.argv[2] if len(sys.argv) > 2 else "")
    if not (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")):
        print("skipped: no nvcc, no device bundle")
        return 77
    if not bundle or not os.path.exists(bundle):
        print(f"skipped: no bundle at '{bundle}' (STRATA_BUNDLE=DIR names it)")
        return 77
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.count("GPU"):
        print("skipped: a GPU is present (the device check itself is the test there)")
        return 77
    with tempfile.TemporaryDirectory(prefix="strata-dry-") as out:
        r = subprocess.run(["bash", script, bundle, out], capture_output=True, text=True,
                           timeout=300)
        text = r.stdout
        print(text)
        if r.stderr:
            print(r.stderr, file=sys.stderr)
        failures = []
        lines = text.strip().splitlines()
        if not lines or lines[0] != "== inventory":
            failures.append("the inventory does not come first")
        m = re.fullmatch(r"(\d+) passed, (\d+) failed, (\d+) skipped", lines[-1] if lines else "")
        if r.returncode != 0 or not m or m.group(2) != "0":
            failures.append(f"exit {r.returncode}, last line {lines[-1] if lines else ''!r}")
        verdict = {}
        for line in lines:
            f = line.split()
            if len(f) >= 2 and f[0] in ("PASS", "FAIL", "SKIP"):
                verdict[f[1]] = f[0]
        for c in GPU_CHECKS:
            if verdict.get(c) != "SKIP":
                failures.append(f"GPU check {c}: {verdict.get(c, 'missing')}, not SKIP")
        for c in CPU_CHECKS:
            if verdict.get(c) != "PASS":
                failures.append(f"CPU check {c}: {verdict.get(c, 'missing')}, not PASS")
        if m and (int(m.group(1)), int(m.group(3))) != (len(CPU_CHECKS), len(GPU_CHECKS)):
            failures.append(f"counts {m.group(0)} are not {len(CPU_CHECKS)} passed, "
                            f"{len(GPU_CHECKS)} skipped")
        files = sorted(os.listdir(out))
        if files != ["logs.tgz", "results.json", "summary.txt"]:
            failures.append(f"OUT holds {files}, not logs.tgz, results.json, summary.txt")
    for f in failures:
        print("FAIL:", f)
    print("dry run: pass" if not failures else f"dry run: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
