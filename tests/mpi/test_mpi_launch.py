#!/usr/bin/env python3
"""Under mpirun, said once and for the whole job (issue #22 item 10):
  * a malformed flag (every rank parses the same argv) is printed once, by
    rank 0, and the job exits 2;
  * a configuration refused before any collective (--save-every without
    --save-dir) is printed once, without a rank prefix and without Open
    MPI's MPI_Abort banner, and the job exits 1;
  * the summary reports tokens/s per rank and for the whole job (the ranks'
    sum), in the text and in the JSONL summary (tokens_per_s_job).
Exit 0 pass, 1 fail, 77 skip (no mpirun, or strata built without MPI).

Usage: test_mpi_launch.py STRATA_EXE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_MCA_plm_rsh_agent="")
SMALL = ["--layers", "1", "--d-model", "16", "--heads", "1", "--seq-len", "16", "--batch", "2",
         "--steps", "3", "--eval-every", "0", "--eval-batches", "1", "--threads", "1"]
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += not ok


def mpirun(n, args):
    return subprocess.run(["mpirun", "--oversubscribe", "-np", str(n), EXE, "train"] + args,
                          env=ENV, capture_output=True, text=True, timeout=120)


def main():
    if not shutil.which("mpirun"):
        print("SKIP: no mpirun")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        p = mpirun(2, SMALL + ["--metrics", metrics])
        if "built without MPI" in p.stderr:
            print("SKIP: strata built without MPI")
            return 77
        line = [x for x in p.stdout.splitlines() if "tok/s" in x and "step time" in x]
        check(p.returncode == 0 and line and "tok/s the job (2 ranks)" in line[0],
              f"2 ranks: the summary says the job's tokens/s ({line[0] if line else p.stderr})")
        if p.returncode == 0:
            with open(metrics) as f:
                s = [json.loads(x) for x in f][-1]
            check(s.get("tokens_per_s_job") == 2 * s["tokens_per_s"],
                  f"JSONL tokens_per_s_job {s.get('tokens_per_s_job')} = 2 x tokens_per_s "
                  f"{s['tokens_per_s']}")
        bad = mpirun(3, SMALL + ["--optimizer", "bogus"])
        n = bad.stderr.count("unknown optimizer 'bogus'")
        check(bad.returncode == 2 and n == 1,
              f"a malformed flag on 3 ranks: said {n} time(s), exit {bad.returncode}")
        cfg = mpirun(3, SMALL + ["--save-every", "1"])
        n = cfg.stderr.count("--save-every needs --save-dir")
        check(cfg.returncode == 1 and n == 1 and "MPI_ABORT" not in cfg.stderr and
              "rank 1" not in cfg.stderr,
              f"a refused configuration on 3 ranks: said {n} time(s), no MPI_Abort banner, "
              f"exit {cfg.returncode}")
        if n != 1 or "MPI_ABORT" in cfg.stderr:
            print(cfg.stderr[-2000:])
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
