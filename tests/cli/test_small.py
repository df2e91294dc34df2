#!/usr/bin/env python3
"""Smaller things a new user meets (issue #22 item 12; usage: test_small.py STRATA).

1. A run interrupted before its first validation says "val loss not
   measured" in its summary, never "nan".
2. `strata ckpt show` names the unknown subcommand; an unknown option of any
   ckpt subcommand is refused (exit 2), never read as a directory.
3. Exit classes (README): a contradiction between flags exits 1 (SOAP's
   staleness >= frequency, --keep without --save-every, --save-every without
   --save-dir, --page-state without --async and an nvme tier), a malformed
   flag 2.
Exit 0 pass, 1 fail.
"""
import re
import signal
import subprocess
import sys

STRATA = sys.argv[1]
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16", "--batch", "4",
        "--no-progress", "--optimizer", "adamw"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


p = subprocess.Popen([STRATA, "train", *TINY, "--steps", "1000000", "--eval-every", "0"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.startswith("step "):
        break
p.send_signal(signal.SIGINT)
out, err = p.communicate(timeout=60)
summary = [l for l in out.splitlines() if l.startswith("summary:")]
check(p.returncode == 130 and summary and "val loss not measured" in summary[0] and
      "nan" not in summary[0],
      f"interrupted before validation: rc {p.returncode} {summary[:1]} {err[-200:]}")

# 4. A validation's line says so at its start ("val  N/M"); "step" lines are
#    training steps only; the blas line is printed at start-up and in the
#    summary, once each (only the summary's under --quiet).
for quiet in (False, True):
    r = subprocess.run([STRATA, "train", *TINY, "--steps", "4", "--eval-every", "2",
                        "--eval-batches", "1", *(["--quiet"] if quiet else [])],
                       capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    vals = [l for l in lines if re.match(r"val +\d+/\d+ ", l)]
    steps = [l for l in lines if re.match(r"step \d+/\d+ ", l)]
    blas = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("blas:")]
    if quiet:
        check(r.returncode == 0 and not vals and not steps and len(blas) == 1,
              f"--quiet: no step or val lines, one blas line ({len(blas)})")
    else:
        check(r.returncode == 0 and [v.split("|")[0].split()[1] for v in vals] == ["2/4", "4/4"]
              and len(steps) == 4 and not any("val" in l for l in steps) and len(blas) == 2,
              f"val lines labelled 'val': {vals}; {len(steps)} step lines; {len(blas)} blas lines")

r = subprocess.run([STRATA, "ckpt", "show", "x"], capture_output=True, text=True)
check(r.returncode == 2 and "unknown subcommand 'show'" in r.stderr and "usage:" in r.stderr,
      f"strata ckpt show: rc {r.returncode} {r.stderr.splitlines()[:1]}")
r = subprocess.run([STRATA, "ckpt", "verify"], capture_output=True, text=True)
check(r.returncode == 2 and "expects one checkpoint directory" in r.stderr,
      f"strata ckpt verify without a directory: rc {r.returncode} {r.stderr.splitlines()[:1]}")
# An unknown option is refused (exit 2) by every ckpt subcommand, never taken
# for a directory; --hash is inspect's; -- ends the options.
for args, text in [(["inspect", "--bogus"], "unknown option '--bogus'"),
                   (["verify", "--bogus"], "unknown option '--bogus'"),
                   (["inspect", "--hash", "--bogus", "x"], "unknown option '--bogus'"),
                   (["inspect", "-x", "d"], "unknown option '-x'"),
                   (["verify", "--hash", "d"], "--hash belongs to inspect"),
                   (["inspect", "a", "b"], "expects one checkpoint directory")]:
    r = subprocess.run([STRATA, "ckpt", *args], capture_output=True, text=True)
    check(r.returncode == 2 and text in r.stderr and "missing file" not in r.stderr,
          f"strata ckpt {' '.join(args)}: rc {r.returncode} {r.stderr.splitlines()[:1]}")
r = subprocess.run([STRATA, "ckpt", "verify", "--", "-no-such-dir"], capture_output=True, text=True)
check(r.returncode == 1 and "missing file" in r.stderr,
      f"strata ckpt verify -- -no-such-dir: a directory: rc {r.returncode}")

for args, rc, text in [
        (["--optimizer", "soap", "--async", "--staleness", "5", "--precondition-frequency", "2"],
         0, ""),  # S >= F: chained eigenbasis refreshes (issue 23)
        (["--keep", "2"], 1, "--keep 2 prunes"),
        (["--save-every", "2"], 1, "--save-every needs --save-dir"),
        # --page-state without --async or an nvme tier: one refusal naming the
        # flags, no note before it, no C names (strata_create, page_state)
        (["--page-state"], 1, "--page-state needs --async and an nvme tier"),
        (["--page-state", "--async"], 1, "--page-state needs --async and an nvme tier"),
        (["--page-state", "--async", "--tiers", "device,nvme", "--device", "cuda"], 1,
         "--page-state moves the state between host memory and the nvme tier: it needs "
         "--device cpu"),
        # without --async, as --staleness: a note, not the runtime's refusal
        (["--stale-correction", "newton"], 0, "--stale-correction takes effect with --async"),
        (["--steps", "x"], 2, "--steps"),
        (["--no-such-flag"], 2, "no-such-flag")]:
    r = subprocess.run([STRATA, "train", *TINY, "--steps", "2", *args], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == rc and text in r.stderr and "strata_create" not in r.stderr and
          "note: --page-state" not in r.stderr,
          f"strata train {' '.join(args)}: rc {r.returncode} (want {rc}) {r.stderr.strip()[-160:]}")

for cmd in ("race", "sweep-staleness"):  # each holds a synchronous run: refused at once
    r = subprocess.run([STRATA, cmd, "--page-state", "--tiers", "device,nvme"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "--page-state needs --async" in r.stderr and
          "strata_create" not in r.stderr and "running" not in r.stdout,
          f"strata {cmd} --page-state: rc {r.returncode} {r.stderr.strip()[-160:]}")
r = subprocess.run([STRATA, "plan", "--page-state"], capture_output=True, text=True, timeout=60)
check(r.returncode == 1 and "strata plan: STRATA_ERR_INVALID_ARG: --page-state needs --async" in
      r.stderr and "strata_create" not in r.stderr and "note:" not in r.stderr,
      f"strata plan --page-state: rc {r.returncode} {r.stderr.strip()[-160:]}")

# 5. --overwrite says what it removes (count, run identity), once; a resumed
#    run says "resumed:" once (at start-up, or in the summary under --quiet);
#    --save-dir is created with its missing parents.
import json
import os
import tempfile
with tempfile.TemporaryDirectory() as tmp:
    sd = os.path.join(tmp, "runs", "a", "save")
    base = [STRATA, "train", *TINY, "--eval-every", "0", "--save-every", "1", "--save-dir", sd]
    r = subprocess.run([*base, "--steps", "3"], capture_output=True, text=True, timeout=120)
    with open(os.path.join(sd, "step-00000003", "manifest.json")) as f:
        old_id = json.dumps(json.load(f))
    r = subprocess.run([*base, "--steps", "2", "--overwrite"], capture_output=True, text=True,
                       timeout=120)
    said = [l for l in r.stderr.splitlines() if "--overwrite: removed" in l]
    check(r.returncode == 0 and len(said) == 1 and "removed 3 checkpoints" in said[0] and
          said[0].split(" of run ")[1].split()[0] in old_id and
          sorted(os.listdir(sd)) == ["step-00000001", "step-00000002"],
          f"--overwrite names what it removed: {said} {r.stderr[-200:]}")
    for quiet in ([], ["--quiet"]):
        r = subprocess.run([STRATA, "train", *TINY, "--eval-every", "0", "--steps", "3",
                            "--resume", sd, *quiet], capture_output=True, text=True, timeout=120)
        n = r.stdout.count("resumed:")
        check(r.returncode == 0 and n == 1, f"resume{' --quiet' if quiet else ''}: "
              f"{n} 'resumed:' line(s) {r.stderr[-200:]}")
    # ckpt verify / inspect of a save folder: its newest step-*, as --resume, said;
    # inspect of no checkpoint: the error once, no table header
    for sub in ("verify", "inspect"):
        r = subprocess.run([STRATA, "ckpt", sub, sd], capture_output=True, text=True)
        check(r.returncode == 0 and "is a save folder: its newest checkpoint" in r.stderr and
              "step-00000002" in r.stderr, f"ckpt {sub} SAVE_DIR: rc {r.returncode} "
              f"{r.stderr.strip()[-200:]}")
    r = subprocess.run([STRATA, "ckpt", "inspect", os.path.join(tmp, "none")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and r.stdout == "" and r.stderr.count("missing file") == 1,
          f"ckpt inspect of no checkpoint: rc {r.returncode} stdout {r.stdout[:80]!r}")
    # --resume of a step that is not there names the steps beside it
    r = subprocess.run([STRATA, "train", *TINY, "--steps", "3", "--resume",
                        os.path.join(sd, "step-00000009")], capture_output=True, text=True)
    check(r.returncode == 1 and "holds 2 step-* checkpoints, step-00000001 .. step-00000002" in
          r.stderr, f"--resume of a missing step: {r.stderr.strip()[-200:]}")
    # another corpus than the checkpoint's (the default one) gets a note, as --steps
    other = os.path.join(tmp, "other.txt")
    with open(other, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog\n" * 200)
    r = subprocess.run([STRATA, "train", *TINY, "--eval-every", "0", "--steps", "3", "--resume",
                        sd, "--data", other], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and f"this run reads {os.path.realpath(other)}" in r.stderr,
          f"resume --data OTHER: a note: {r.stderr[-240:]}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
