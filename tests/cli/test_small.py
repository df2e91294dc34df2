#!/usr/bin/env python3
"""Smaller things a new user meets (issue #22 item 12; usage: test_small.py STRATA).

1. A run interrupted before its first validation says "val loss not
   measured" in its summary, never "nan".
2. `strata ckpt show` names the unknown subcommand; an unknown option of any
   ckpt subcommand is refused (exit 2), never read as a directory.
3. Exit classes (README): a contradiction between flags exits 1 (SOAP's
   staleness >= frequency, --keep without --save-every, --save-every without
   --save-dir), a malformed flag 2.
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
        (["--steps", "x"], 2, "--steps"),
        (["--no-such-flag"], 2, "no-such-flag")]:
    r = subprocess.run([STRATA, "train", *TINY, "--steps", "2", *args], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == rc and text in r.stderr,
          f"strata train {' '.join(args)}: rc {r.returncode} (want {rc}) {r.stderr.strip()[-160:]}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
