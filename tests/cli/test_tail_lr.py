#!/usr/bin/env python3
"""The AdamW tail's lr (--adamw-lr; trainer.c, gpt_default_tail_lr and
tail_own_lr) on a tiny model, a few steps each:

1. Without --adamw-lr each run's tail takes the trainer's default for its
   matrix optimizer (the JSONL config's adamw_lr), the one --help lists;
   --adamw-lr overrides it.
2. --optimizer adamw: --adamw-lr is the tail's own lr, --lr the matrices'.
   Equal to the matrices' lr (given or not) the run is bit-identical to the
   default one-lr run; different, the run differs and its record names both;
   its checkpoint's manifest gives each tail parameter the tail's lr (the
   matrices none). Without --adamw-lr the tail follows --lr (one lr).
3. A resume of such a run is bit-identical to the uninterrupted run; resumed
   with another --adamw-lr it continues at the new one and says so.
4. The race names each run's lr and tail lr.
Exit 0 pass, 1 fail. Usage: test_tail_lr.py STRATA"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch", "2",
        "--eval-every", "3", "--eval-batches", "1", "--threads", "1", "--no-progress",
        "--quiet"]
OPTIMIZERS = ["adamw", "shampoo", "muon", "soap", "kl-shampoo", "normuon", "dion2"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def f32(v):
    return ctypes.c_float(v).value


def train(tmp, tag, *args):
    """(config record, [(step, loss, val_loss)], stderr) of a run, or None."""
    m = os.path.join(tmp, tag + ".jsonl")
    p = subprocess.run([STRATA, "train", *TINY, *args, "--metrics", m], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        print(f"{tag}: rc {p.returncode}: {p.stderr[-600:]}")
        return None
    recs = [json.loads(line) for line in open(m)]
    cfg = next(r for r in recs if r["type"] == "config")
    steps = [(r["step"], r.get("loss"), r.get("val_loss")) for r in recs if r["type"] == "step"]
    return cfg, steps, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    # 1. the default tail per optimizer as --help lists it, and --adamw-lr over it
    h = subprocess.run([STRATA, "train", "--help"], capture_output=True, text=True).stdout
    m = re.search(r"--adamw-lr X(.*?)\(default: (.*?)\)\n", h, re.S)
    listed = " ".join(m.group(2).split()) if m else ""
    table = dict((k, float(v)) for k, v in re.findall(r"([a-z0-9-]+) ([0-9.e-]+)", listed))
    others = table.pop("others", None)
    check(others is not None and table, f"--help lists the default tail lrs ({listed!r})")
    for opt in OPTIMIZERS:
        want = table.get(opt, others)
        r = train(tmp, f"{opt}-default", "--optimizer", opt, "--steps", "2")
        check(r and want is not None and f32(r[0]["adamw_lr"]) == f32(want),
              f"--optimizer {opt}: the tail's lr {want}, as --help says "
              f"({r and r[0]['adamw_lr']})")
    r = train(tmp, "muon-given", "--optimizer", "muon", "--steps", "2", "--adamw-lr", "0.003")
    check(r and f32(r[0]["adamw_lr"]) == f32(3e-3), "--optimizer muon --adamw-lr 0.003: 0.003")

    # 2. AdamW: one lr, or the tail's own
    six = ["--optimizer", "adamw", "--steps", "6"]
    one = train(tmp, "adamw", *six)
    same = train(tmp, "adamw-same", *six, "--adamw-lr", "0.003")
    same2 = train(tmp, "adamw-same2", *six, "--lr", "0.003", "--adamw-lr", "0.003")
    ck = os.path.join(tmp, "ck")
    split = train(tmp, "adamw-split", *six, "--adamw-lr", "0.02", "--save-every", "3",
                  "--save-dir", ck)
    ok = one and same and same2 and split
    check(ok and one[1] == same[1] == same2[1] and len(one[1]) == 6,
          "adamw: --adamw-lr equal to the matrices' lr is bit-identical to the one-lr run")
    check(ok and split[1] != one[1] and split[1][0] == one[1][0],
          "adamw --adamw-lr 0.02: the same first loss, then another run")
    check(ok and f32(split[0]["adamw_lr"]) == f32(0.02) and f32(split[0]["lr"]) == f32(3e-3),
          f"adamw --adamw-lr 0.02: the record's adamw_lr 0.02, lr 0.003 "
          f"({split and (split[0]['adamw_lr'], split[0]['lr'])})")
    lone = train(tmp, "adamw-lr-alone", *six, "--lr", "0.006")
    both = train(tmp, "adamw-lr-both", *six, "--lr", "0.006", "--adamw-lr", "0.006")
    check(lone and both and f32(lone[0]["adamw_lr"]) == f32(6e-3) and lone[1] == both[1],
          "adamw --lr 0.006 alone: one lr for every tensor (the tail follows it), "
          "bit-identical to --adamw-lr 0.006")
    man = os.path.join(ck, "step-00000003", "manifest.json")
    params = json.load(open(man))["params"] if os.path.exists(man) else []
    tail = [p for p in params if p.get("tail")]
    mats = [p for p in params if not p.get("tail")]
    check(tail and mats and all(f32(p.get("lr", -1)) == f32(0.02) for p in tail) and
          not any("lr" in p for p in mats),
          f"the manifest: {len(tail)} tail parameters at lr 0.02, {len(mats)} matrices without "
          f"their own")

    # 3. resume: bit-identical, or at a new tail lr with a note
    res = train(tmp, "adamw-resumed", *six, "--adamw-lr", "0.02", "--resume",
                os.path.join(ck, "step-00000003"))
    check(res and split and [s for s in res[1] if s[0] > 3] == split[1][3:] and
          "tail's lr was" not in res[2],
          "adamw --adamw-lr 0.02 resumed at step 3: steps 4-6 bit-identical, no note")
    new = train(tmp, "adamw-resumed-new", *six, "--adamw-lr", "0.01", "--resume",
                os.path.join(ck, "step-00000003"))
    check(new and split and "the AdamW tail's lr was 0.02 at the save, is 0.01 now" in new[2]
          and [s for s in new[1] if s[0] > 4] != split[1][4:],
          f"resumed with --adamw-lr 0.01: a note, and the run continues at 0.01 "
          f"({new and new[2][-300:]})")

    # 4. the race's runs name their lrs
    p = subprocess.run([STRATA, "race", *TINY, "--runs", "adamw,muon", "--steps", "2", "--out",
                        os.path.join(tmp, "race")], capture_output=True, text=True, timeout=120)
    tails = {o: "%g" % table.get(o, others or 0) for o in ("adamw", "muon")}
    check(p.returncode == 0 and
          f"running muon (2 steps, lr 0.05, tail lr {tails['muon']})" in p.stdout and
          f"running adamw (2 steps, lr 0.003, tail lr {tails['adamw']})" in p.stdout,
          f"race: each run's lr and tail lr ({p.returncode} {p.stdout[:300]} {p.stderr[-300:]})")

sys.exit(1 if failures else 0)
