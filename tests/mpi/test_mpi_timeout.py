#!/usr/bin/env python3
"""A rank that stops answering ends the job (issue #22 item 11).

Under mpirun, one rank is stopped (SIGSTOP) after a few training steps; with
STRATA_COMM_TIMEOUT_S=3 the other ranks' collectives time out: the job must
end within seconds (not hang), non-zero, with STRATA_ERR_TIMEOUT and a
report naming the stopped rank as the one not answering. Cases: 3 ranks
flat (sync Shampoo: the blocking reductions and broadcasts), and 4 ranks in
2 emulated nodes with --shard-group-size 2 and async S = 2 (the
hierarchical reduction, the shard groups' sub-communicators, refresh
shipping). A bad STRATA_COMM_TIMEOUT_S is refused with its name.
Exit 0 pass, 1 fail, 77 skip (no mpirun, or strata built without MPI).

Usage: test_mpi_timeout.py STRATA_EXE
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stall import run_stalled  # noqa: E402

EXE = os.path.abspath(sys.argv[1])
TINY = ["--layers", "2", "--d-model", "32", "--heads", "2", "--seq-len", "32", "--batch", "4",
        "--steps", "100000", "--eval-every", "0", "--eval-batches", "2", "--threads", "1",
        "--precondition-frequency", "3", "--quiet"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_MCA_plm_rsh_agent="", STRATA_COMM_TIMEOUT_S="3")
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += not ok


def stalled_case(tmp, name, n, args, target, env=None):
    e = dict(ENV, **(env or {}))
    rc, err, dt, acted = run_stalled(["mpirun", "--oversubscribe", "-np", str(n)], e, EXE, tmp,
                                     name, TINY + args, target, hang_s=90)
    reports = re.findall(r"rank (\d+): STRATA_ERR_TIMEOUT: .*not answering: rank (\d+)", err)
    named = {int(r) for r, who in reports if int(who) == target}
    ok = acted and rc not in (None, 0) and dt is not None and dt < 45 and len(named) >= 1 and \
        target not in named
    check(ok, f"{name}: rank {target} stopped: the job ended (exit {rc}) "
              f"{'%.1f' % dt if dt is not None else '-'} s later; ranks {sorted(named)} "
              f"reported STRATA_ERR_TIMEOUT waiting for rank {target}")
    if not ok:
        print(err[-3000:])


def main():
    if not shutil.which("mpirun"):
        print("SKIP: no mpirun")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(["mpirun", "-np", "1", EXE, "train", "--steps", "1", "--layers",
                                "1", "--d-model", "8", "--heads", "1", "--seq-len", "8",
                                "--batch", "1", "--eval-every", "0", "--eval-batches", "1",
                                "--quiet"], env=ENV, capture_output=True, text=True, timeout=120)
        if "built without MPI" in probe.stderr:
            print("SKIP: strata built without MPI")
            return 77
        check(probe.returncode == 0, f"one rank with STRATA_COMM_TIMEOUT_S=3 trains "
                                     f"(exit {probe.returncode})")
        bad = subprocess.run(["mpirun", "-np", "1", EXE, "train", "--steps", "1", "--quiet"],
                             env=dict(ENV, STRATA_COMM_TIMEOUT_S="soon"), capture_output=True,
                             text=True, timeout=120)
        check(bad.returncode != 0 and "STRATA_COMM_TIMEOUT_S" in bad.stderr,
              f"STRATA_COMM_TIMEOUT_S=soon refused naming the variable (exit {bad.returncode})")
        stalled_case(tmp, "flat-np3", 3, ["--optimizer", "shampoo"], 1)
        stalled_case(tmp, "hsdp-np4-async-S2", 4,
                     ["--optimizer", "shampoo", "--async", "--staleness", "2", "--workers", "1",
                      "--shard-group-size", "2"], 2, {"STRATA_RANKS_PER_NODE": "2"})
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
