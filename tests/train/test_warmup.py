#!/usr/bin/env python3
"""Short runs of the default model are as smooth as the default run (issue #12,
item 9). With the old default warm-up (steps/10: 4 steps for --steps 40) the
LR peaked before AdamW's second-moment estimate (beta2 0.95, ~20 steps) had
settled: the loss went 3.82 -> 8.24 at step 7 for AdamW and for Shampoo's
grafting phase alike, and Shampoo's first root (step 10, at the peak LR) added
3.33 -> 6.18 at step 12. The default warm-up is now max(steps/10, min(20,
steps/2)). Checked: after step 5 no training loss reaches the first step's,
and no step jumps more than 1.0 nat/byte above the lowest loss so far
(measured: max 4.69 after step 5, worst jump 0.56; before: 8.24).
Exit 0 pass, 1 fail, 77 skip (no corpus). Usage: test_warmup.py path/to/strata"""
import json
import os
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
if not os.path.exists("/usr/share/games/fortunes"):
    print("SKIP: no /usr/share/games/fortunes")
    sys.exit(77)
failures = 0
with tempfile.TemporaryDirectory() as tmp:
    # AdamW itself (--optimizer adamw, --steps 40) still jumps 2.1 over its
    # running minimum with the 20-step warm-up (max 6.01 after step 5): not
    # checked here, see the issue.
    for opt, steps in (("shampoo", 40),):
        m = os.path.join(tmp, f"{opt}-{steps}.jsonl")
        p = subprocess.run([STRATA, "train", "--optimizer", opt, "--steps", str(steps),
                            "--eval-every", "0", "--metrics", m, "--quiet"],
                           capture_output=True, text=True, timeout=900)
        losses = []
        if p.returncode == 0:
            losses = [r["loss"] for r in map(json.loads, open(m)) if r["type"] == "step"]
        ok = len(losses) == steps
        worst_jump = 0.0
        if ok:
            low = losses[0]
            for x in losses[1:]:
                worst_jump = max(worst_jump, x - low)
                low = min(low, x)
            ok = max(losses[5:]) < losses[0] and worst_jump < 1.0
        print(f"{'PASS' if ok else 'FAIL'}: {opt} --steps {steps}: first loss "
              f"{losses[0] if losses else None}, max after step 5 "
              f"{max(losses[5:]) if len(losses) > 5 else None}, worst jump {worst_jump:.3f}")
        if not ok:
            print("  rc", p.returncode, p.stderr[-600:])
        failures += not ok
sys.exit(1 if failures else 0)
