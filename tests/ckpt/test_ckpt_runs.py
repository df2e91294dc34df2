#!/usr/bin/env python3
"""Save directories, runs and resumes through the CLI (issue #22 items 1-3;
usage: test_ckpt_runs.py STRATA).

1. Every run has an identity in its checkpoints: a new run refuses a
   --save-dir holding another run's checkpoints (they stay intact) unless
   --overwrite (then they are removed); a resume carries the identity on and
   saves into its own directory; --keep prunes only this run's checkpoints.
2. A refused resume overwrites nothing: the --metrics file stays as it was.
3. Every field of the model's shape (vocab, max_seq, n_layer, n_head,
   d_model) is stored and compared on resume, each named with both values;
   a checkpoint without them (saved before) still resumes.
5. Another global batch on resume (item 5: another world size, or another
   --grad-accum) is said once, with both values and how to keep it; the same
   one says nothing.
Exit 0 pass, 1 fail.
"""
import json
import os
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
BASE = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16", "--batch", "4",
        "--eval-every", "0", "--no-progress", "--optimizer", "adamw"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def train(*extra):
    return subprocess.run([STRATA, "train", *BASE, *extra], capture_output=True, text=True,
                          timeout=120)


def steps_in(d):
    return sorted(n for n in os.listdir(d) if n.startswith("step-")) if os.path.isdir(d) else []


def run_id(ckpt):
    return json.load(open(os.path.join(ckpt, "manifest.json")))["user"].get("run_id")


def save_dirs(tmp):
    a = os.path.join(tmp, "a")
    p = train("--steps", "4", "--save-every", "1", "--keep", "2", "--save-dir", a)
    check(p.returncode == 0 and steps_in(a) == ["step-00000003", "step-00000004"],
          f"run A saves and keeps 2: rc {p.returncode} {steps_in(a)} {p.stderr[-300:]}")
    ida = run_id(os.path.join(a, "step-00000004"))
    check(bool(ida) and ida == run_id(os.path.join(a, "step-00000003")),
          f"run A's checkpoints carry one run identity: {ida}")
    # A new run into A's directory: refused, A's checkpoints intact.
    before = {n: open(os.path.join(a, n, "manifest.json")).read() for n in steps_in(a)}
    p = train("--steps", "2", "--seed", "7", "--save-every", "1", "--keep", "2", "--save-dir", a)
    after = {n: open(os.path.join(a, n, "manifest.json")).read() for n in steps_in(a)}
    check(p.returncode == 1 and "another run" in p.stderr and "--overwrite" in p.stderr and
          before == after,
          f"a new run into another run's save dir is refused, nothing changes: rc "
          f"{p.returncode} {sorted(after)} {p.stderr.strip()[-300:]}")
    # The same without --keep (a mixed directory) is refused too.
    p = train("--steps", "2", "--seed", "7", "--save-every", "1", "--save-dir", a)
    check(p.returncode == 1 and "another run" in p.stderr and steps_in(a) == sorted(before),
          f"... without --keep too: rc {p.returncode} {steps_in(a)}")
    # A resume of run A into its own directory: the same run, --keep prunes its own.
    p = train("--steps", "6", "--save-every", "1", "--keep", "2", "--save-dir", a,
              "--resume", a)
    check(p.returncode == 0 and steps_in(a) == ["step-00000005", "step-00000006"] and
          run_id(os.path.join(a, "step-00000006")) == ida,
          f"a resume continues run A in its directory: rc {p.returncode} {steps_in(a)} "
          f"{p.stderr[-300:]}")
    # A resume of run A into run B's directory: refused.
    b = os.path.join(tmp, "b")
    p = train("--steps", "2", "--seed", "7", "--save-every", "1", "--save-dir", b)
    idb = run_id(os.path.join(b, "step-00000002"))
    check(p.returncode == 0 and idb and idb != ida, f"run B has its own identity: {idb}")
    p = train("--steps", "8", "--save-every", "1", "--save-dir", b,
              "--resume", os.path.join(a, "step-00000006"))
    check(p.returncode == 1 and "another run" in p.stderr and
          steps_in(b) == ["step-00000001", "step-00000002"],
          f"a resume of A into B's save dir is refused: rc {p.returncode} {steps_in(b)}")
    # --overwrite: the other run's checkpoints go, the new run's stay.
    p = train("--steps", "3", "--seed", "9", "--save-every", "1", "--keep", "2", "--save-dir", b,
              "--overwrite")
    ids = {run_id(os.path.join(b, n)) for n in steps_in(b)}
    check(p.returncode == 0 and steps_in(b) == ["step-00000002", "step-00000003"] and
          len(ids) == 1 and idb not in ids,
          f"--overwrite removes the other run's checkpoints: rc {p.returncode} {steps_in(b)} "
          f"{ids} {p.stderr[-300:]}")
    # A checkpoint of another run that is not ours is not pruned by --keep:
    # a legacy checkpoint (no identity) resumes, and a directory of legacy
    # checkpoints continues as one run.
    c = os.path.join(tmp, "c")
    p = train("--steps", "2", "--save-every", "1", "--save-dir", c)
    for n in steps_in(c):
        f = os.path.join(c, n, "manifest.json")
        m = json.load(open(f))
        m["user"].pop("run_id", None)
        m["user"].pop("model", None)
        json.dump(m, open(f, "w"))
    p = train("--steps", "4", "--save-every", "1", "--keep", "3", "--save-dir", c, "--resume", c)
    check(p.returncode == 0 and steps_in(c) == ["step-00000002", "step-00000003", "step-00000004"],
          f"checkpoints saved before run identities resume and continue: rc {p.returncode} "
          f"{steps_in(c)} {p.stderr[-300:]}")
    return os.path.join(a, "step-00000006")


def refused_resume(tmp, ckpt):
    metrics = os.path.join(tmp, "m.jsonl")
    open(metrics, "w").write("the user's earlier metrics\n")
    cases = [("n_head", ["--heads", "1"], "2", "1"), ("n_layer", ["--layers", "2"], "1", "2"),
             ("d_model", ["--d-model", "48"], "32", "48"),
             ("max_seq", ["--seq-len", "8"], "16", "8")]
    for key, opts, saved, now in cases:
        p = train("--steps", "8", *opts, "--resume", ckpt, "--metrics", metrics)
        check(p.returncode == 1 and "STRATA_ERR_INVALID_ARG" in p.stderr and key in p.stderr and
              f"is {saved} in the checkpoint and {now} in this run" in p.stderr,
              f"resume with another {key}: rc {p.returncode}: {p.stderr.strip()[-300:]}")
        check(open(metrics).read() == "the user's earlier metrics\n",
              f"the refused resume ({key}) left --metrics as it was")
    # vocab has no flag: the checkpoint's own record says another value.
    d = os.path.join(tmp, "vocab")
    subprocess.run(["cp", "-r", ckpt, d], check=True)
    f = os.path.join(d, "manifest.json")
    m = json.load(open(f))
    m["user"]["model"]["vocab"] = 255
    json.dump(m, open(f, "w"))
    p = train("--steps", "8", "--resume", d, "--metrics", metrics)
    check(p.returncode == 1 and "vocab" in p.stderr and "255" in p.stderr,
          f"resume with another vocab: rc {p.returncode}: {p.stderr.strip()[-300:]}")
    # Refused by the runtime (another optimizer): the metrics stay too.
    p = train("--steps", "8", "--resume", ckpt, "--metrics", metrics, "--optimizer", "muon")
    check(p.returncode == 1 and open(metrics).read() == "the user's earlier metrics\n",
          f"a resume the runtime refuses leaves --metrics as it was: rc {p.returncode}")
    p = train("--steps", "8", "--resume", ckpt, "--metrics", metrics)
    check(p.returncode == 0 and open(metrics).read().startswith("{"),
          f"an accepted resume writes --metrics: rc {p.returncode} {p.stderr[-300:]}")


def global_batch(tmp):
    d = os.path.join(tmp, "ga")
    p = train("--steps", "2", "--grad-accum", "2", "--save-every", "2", "--save-dir", d)
    check(p.returncode == 0, f"a --grad-accum 2 run saves: rc {p.returncode} {p.stderr[-300:]}")
    ck = os.path.join(d, "step-00000002")
    p = train("--steps", "3", "--resume", ck)
    notes = [l for l in p.stderr.splitlines() if "micro-batch" in l]
    check(p.returncode == 0 and len(notes) == 1 and "global batch 8" in notes[0] and
          "global batch 4" in notes[0] and "--grad-accum 2 keeps it" in notes[0],
          f"resumed with half the global batch: said once, both values, the fix: {notes}")
    p = train("--steps", "3", "--grad-accum", "2", "--resume", ck)
    check(p.returncode == 0 and "micro-batch" not in p.stderr,
          f"resumed with the same global batch: nothing said: {p.stderr[-300:]}")


with tempfile.TemporaryDirectory() as tmp:
    ckpt = save_dirs(tmp)
    refused_resume(tmp, ckpt)
    global_batch(tmp)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
