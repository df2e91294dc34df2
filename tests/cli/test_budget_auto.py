#!/usr/bin/env python3
"""--staleness auto and --precondition-frequency auto (issue #23 item 3; usage:
test_budget_auto.py STRATA).

1. `strata train --staleness auto` (Shampoo, tiny GPT) plans S before the
   runtime is created and runs with it: the printed "budget:" line, the
   summary's JSONL "budget" object and the async line agree (F the
   configuration's, S >= 1, bound F - 1 + S, utilization under the 80%
   ceiling when feasible).
2. Both auto (SOAP): F is planned too, and the run's staleness bound is the
   plan's.
3. Refusals: a family without refreshes (muon) exits 1 naming it; 'autox'
   exits 2; --precondition-frequency auto with --resume exits 1.
Exit 0 pass, 1 fail.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16", "--batch", "4",
        "--no-progress", "--eval-every", "0", "--eval-batches", "1", "--steps", "8"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def summary_of(path):
    with open(path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    return [r for r in recs if r.get("type") == "summary"][-1]


with tempfile.TemporaryDirectory() as tmp:
    for opt, flags in (("shampoo", ["--staleness", "auto"]),
                       ("soap", ["--staleness", "auto", "--precondition-frequency", "auto"])):
        m = os.path.join(tmp, opt + ".jsonl")
        r = subprocess.run([STRATA, "train", *TINY, "--optimizer", opt, *flags, "--metrics", m],
                           capture_output=True, text=True, timeout=120)
        lines = [l for l in r.stdout.splitlines() if l.startswith("budget: F = ") or
                 l.startswith("budget: NOT")]
        check(r.returncode == 0 and len(lines) == 2,
              f"{opt} {' '.join(flags)}: rc {r.returncode}, {len(lines)} budget lines "
              f"(start, summary) {r.stderr[-300:]}")
        if r.returncode != 0 or not lines:
            continue
        print("  " + lines[0])
        s = summary_of(m)
        b = s.get("budget", {})
        F, S = b.get("frequency", -1), b.get("staleness", -1)
        got = re.search(r"F = (\d+), S = (\d+) \(staleness <= (\d+)\)", lines[0])
        check(got and (int(got[1]), int(got[2]), int(got[3])) == (F, S, F - 1 + S) and
              b.get("bound") == F - 1 + S and S >= 1 and F >= 1,
              f"{opt}: printed choice {got and got.groups()} = JSONL F {F} S {S} bound "
              f"{b.get('bound')}")
        check(s.get("async") is True and s.get("staleness") == S and
              s.get("staleness_bound") == F - 1 + S,
              f"{opt}: the run used the plan (async {s.get('async')}, S {s.get('staleness')}, "
              f"bound {s.get('staleness_bound')})")
        if "--precondition-frequency" not in flags:
            check(F == 10, f"{opt}: F not planned stays the default 10 ({F})")
        if not b.get("feasible"):
            check("NOT SUSTAINABLE" in lines[0] and S < 1000 and
                  (b.get("sustainable_frequency", 0) == 0 or b["sustainable_frequency"] > F),
                  f"{opt}: infeasible said, S {S} covers the latency, F >= "
                  f"{b.get('sustainable_frequency')} would sustain")
        else:
            check(b.get("sustainable_frequency") == F, f"{opt}: feasible at F {F}")
        check(not b.get("feasible") or b.get("utilization", 9) <= b.get("ceiling", 0) + 1e-9,
              f"{opt}: utilization {b.get('utilization')} <= ceiling {b.get('ceiling')}")
        check(b.get("step_s", 0) > 0 and b.get("blocks", 0) > 0 and b.get("workers", 0) >= 1,
              f"{opt}: step {b.get('step_s')} s, {b.get('blocks')} blocks, "
              f"{b.get('workers')} workers")

    r = subprocess.run([STRATA, "train", *TINY, "--optimizer", "muon", "--staleness", "auto"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "nothing to plan" in r.stderr and "muon" in r.stderr,
          f"muon --staleness auto refused: rc {r.returncode} {r.stderr[-200:]}")
    r = subprocess.run([STRATA, "train", *TINY, "--staleness", "autox"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "also accepts 'auto'" in r.stderr,
          f"--staleness autox: rc {r.returncode} {r.stderr[-200:]}")
    r = subprocess.run([STRATA, "train", *TINY, "--optimizer", "shampoo",
                        "--precondition-frequency", "auto", "--resume", tmp],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "resumed run's schedule" in r.stderr,
          f"--precondition-frequency auto --resume refused: rc {r.returncode} "
          f"{r.stderr[-200:]}")

print("FAILED: " + "; ".join(failures) if failures else "all passed")
sys.exit(1 if failures else 0)
