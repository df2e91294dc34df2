#!/usr/bin/env python3
"""Multi-rank `strata train` under mpirun against the single-rank run.

Checks (issue #9's acceptance):
  * mpirun -np N is bit-identical (same weights hash, same losses) to one rank
    with --grad-accum N: Muon, sync Shampoo, async Shampoo (S = 0), for N in
    2, 3 (uneven) and 4; plus the gather and zero1 baselines;
  * -np 4 --shard-group-size 2 with STRATA_RANKS_PER_NODE=2 is bit-identical
    too (sync and async S = 0 Shampoo, SOAP, and async S = 2 against the flat
    4-rank run), and moves fewer inter-node bytes per step than the flat
    layout; each refresh runs once per replica set (the ranks' computed
    refreshes add up to the flat layout's, each rank computes about half of
    what its replica set refreshes and receives the rest), and async S = 2
    keeps every owner's staleness within F - 1 + S;
  * async S = 2 on 4 ranks keeps every owner's staleness within F - 1 + S;
  * owner sharding moves 0 matrix bytes at the optimizer step, the baselines
    do; each rank's resident parameter + optimizer bytes stay within
    1.1 x total / N + the largest matrix's state + the largest layer's
    materialized weights;
  * managed weights (ZeRO-3): each rank's peak resident weights (its owned
    ones plus the layers it materialized at once, measured by strata) stay
    within its owned bytes + the largest layer's materialized bytes (+ the
    final layernorm, held together with the tied embedding at the LM head),
    and within 1.1 x total weights / N + the largest tensor + the largest
    layer's materialized bytes; zero1 keeps every weight on every rank;
  * under HSDP the replicas save identical state for every family (a
    replica that received a shipped refresh and the one that computed it);
  * a checkpoint saved by N ranks resumes bit-identically on N ranks (a
    save streams the layers: no rank's weights exceed its shard plus one
    layer), and reshards: 4 ranks' on 1 rank with --grad-accum 4 bit-identically, on 2
    and 3 ranks, and 3 ranks' on 4; saved again right after the resharding
    load (--save-after-load), every logical tensor (weights and optimizer
    state, reassembled by name across the rank files: `strata ckpt inspect
    --hash`) has the SHA-256 it had in the original; the same for Shampoo
    with --root-method warm-qr (its eigenbases are state: 4 ranks' on 1
    rank bit-identically, saved again on 2 ranks with the same hashes; under
    HSDP the replicas save the same bases, and the checkpoint resumes
    bit-identically there and on 1 rank, sync and async F = 1 S = 2);
  * a checkpoint saved with --shard-group-size 2 resumes flat and with
    --shard-group-size 4: the same per-tensor hashes, and the run continues
    bit-identically to the uninterrupted one;
  * --shard-gradients (ZeRO-2): Shampoo on 3 ranks and with
    --shard-group-size 2 on 4 is bit-identical to --grad-accum N, and each
    rank's gradient bytes at their peak (the memory ledger's) are below the
    full-size ones (HSDP's groups of 2: summed over the ranks) and within its
    owned gradients + two layers';
  * a rank that fails (a bad --data path on one rank only) makes the whole job
    exit non-zero with that rank's message, within seconds.
Exit 0 pass, 1 fail, 77 skip (no mpirun, or strata built without MPI).

Usage: test_mpi_train.py STRATA_EXE [--quick]

--quick (what the sanitizer builds run): world sizes 2 and 3 only, and the
HSDP, replica, checkpoint and resharding cases on a few families that between
them take every path (Dion2, async S=0, SOAP's ring, KL-Shampoo exact on
workers, SOAP, async S=2).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

EXE = os.path.abspath(sys.argv[1])
QUICK = "--quick" in sys.argv
TINY = ["--layers", "2", "--d-model", "32", "--heads", "2", "--seq-len", "32", "--batch", "4",
        "--steps", "20", "--eval-every", "0", "--eval-batches", "2", "--threads", "1",
        "--precondition-frequency", "3", "--quiet"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_MCA_plm_rsh_agent="")
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += not ok


def mpirun(n, args, extra_env=None, timeout=300):
    env = dict(ENV)
    if extra_env:
        env.update(extra_env)
    cmd = ["mpirun", "--oversubscribe", "-np", str(n)] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def summary(path):
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    return recs[-1]


def train(tmp, tag, n, args, env=None):
    metrics = os.path.join(tmp, tag + ".jsonl")
    full = [EXE, "train"] + TINY + args + ["--metrics", metrics]
    if n == 1:
        p = subprocess.run(full, env=dict(ENV, **(env or {})), capture_output=True, text=True,
                           timeout=300)
    else:
        p = mpirun(n, full, env)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:])
        return None
    return summary(metrics)


def ckpt_hashes(path):
    """`strata ckpt inspect --hash`: one line per logical tensor."""
    p = subprocess.run([EXE, "ckpt", "inspect", "--hash", path], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        print(p.stdout[-1000:], p.stderr[-2000:])
        return None
    return p.stdout.splitlines()


def same_hashes(orig, copy, what):
    """The copy (saved right after a resharding load) holds every tensor of
    the original, bit for bit."""
    a, b = ckpt_hashes(orig), ckpt_hashes(copy)
    state = sum(1 for line in (a or []) if line.startswith("state "))
    ok = bool(a) and a == b and state > 0
    if a and b and a != b:
        diff = sorted(set(a) ^ set(b))
        print("  differing lines:", *diff[:6], sep="\n    ")
    check(ok, f"{what}: per-tensor hashes equal ({len(a or [])} tensors, {state} of optimizer "
              f"state)")


def check_shipped(name, hsdp, flat):
    """HSDP ships refreshes: every block refresh runs once per replica set (as
    many as the flat layout, where each matrix has one owner), each rank runs
    about half of its replica set's (2 groups) and receives the rest."""
    comp = [r["refreshes_computed"] for r in hsdp["ranks"]]
    recv = [r["refreshes_received"] for r in hsdp["ranks"]]
    flat_total = sum(r["refreshes_computed"] for r in flat["ranks"])
    check(sum(comp) == flat_total and flat_total > 0,
          f"{name}: HSDP computes each refresh once per replica set ({sum(comp):.0f} block "
          f"refreshes over the ranks, flat layout {flat_total:.0f})")
    check(all(0 < c <= 0.75 * (c + r) and r > 0 for c, r in zip(comp, recv)),
          f"{name}: each rank computes about half its replica set's refreshes and receives "
          f"the rest (computed {', '.join(f'{c:.0f}' for c in comp)}; received "
          f"{', '.join(f'{r:.0f}' for r in recv)})")
    shipped = sum(r["refresh_ship_inter_node_bytes"] for r in hsdp["ranks"])
    check(shipped > 0, f"{name}: shipped roots counted as inter-node bytes "
                       f"({shipped:.0f} per step, all ranks)")


def check_shard_gradients(tmp, name, n, args, ref, plain, hsdp=False):
    """--shard-gradients (ZeRO-2): the same weights as one rank with
    --grad-accum N, and each rank's gradients at their peak (the memory
    ledger's) below the full-size ones of the run without it, within its
    owned gradients + two layers' (a block's and the embedding layer's, lent
    together from the tied head's backward) + 64-byte rounding."""
    extra = ["--shard-group-size", "2"] if hsdp else []
    env = {"STRATA_RANKS_PER_NODE": "2"} if hsdp else None
    tag = f"{name}-np{n}-shard-grads{'-hsdp' if hsdp else ''}"
    got = train(tmp, tag, n, args + extra + ["--shard-gradients"], env)
    check(bool(ref and got and got["weights_hash"] == ref["weights_hash"] and
               got["final_train_loss"] == ref["final_train_loss"]),
          f"{tag}: bit-identical to --grad-accum {n}")
    if not (got and plain):
        return
    full = [r["grad_bytes_peak"] for r in plain["ranks"]]
    peak = [r["grad_bytes_peak"] for r in got["ranks"]]
    bound = [r["owned_param_bytes"] + 2 * r["largest_layer_bytes"] + 64 * 28
             for r in got["ranks"]]
    # Shard groups of 2 on TINY's 2 blocks: a rank's half plus the two lent
    # layers can cover the whole model, so only the sum over ranks is smaller.
    smaller = all(p < f for p, f in zip(peak, full)) if not hsdp else sum(peak) < sum(full)
    check(smaller and all(0 < p <= b for p, b in zip(peak, bound)),
          f"{tag}: gradient bytes per rank at their peak {peak} below {full} without it"
          f"{' (summed)' if hsdp else ''}, within owned + 2 layers {bound}")


def main():
    if not shutil.which("mpirun"):
        print("SKIP: no mpirun")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        probe = mpirun(1, [EXE, "train", "--steps", "1", "--layers", "1", "--d-model", "8",
                           "--heads", "1", "--seq-len", "8", "--batch", "1", "--eval-every", "0",
                           "--eval-batches", "1", "--quiet"])
        if "built without MPI" in probe.stderr:
            print("SKIP: strata built without MPI")
            return 77
        cases = [("muon", ["--optimizer", "muon"]),
                 ("normuon", ["--optimizer", "normuon"]),
                 ("dion2", ["--optimizer", "dion2"]),
                 ("shampoo", ["--optimizer", "shampoo"]),
                 ("shampoo-async-S0", ["--optimizer", "shampoo", "--async", "--staleness", "0",
                                       "--workers", "1"])]
        # --quick (the sanitizer builds, tests/meson.build): every code path once,
        # not every family on every path; the release build runs the whole matrix.
        worlds = [2, 3] if QUICK else [2, 3, 4]
        for name, args in cases:
            for n in worlds:
                ref = train(tmp, f"{name}-ga{n}", 1, args + ["--grad-accum", str(n)])
                got = train(tmp, f"{name}-np{n}", n, args)
                ok = ref is not None and got is not None and \
                    got["weights_hash"] == ref["weights_hash"] and \
                    got["final_val_loss"] == ref["final_val_loss"] and \
                    got["final_train_loss"] == ref["final_train_loss"]
                check(ok, f"{name}: -np {n} bit-identical to --grad-accum {n} "
                          f"({got and got['weights_hash']} vs {ref and ref['weights_hash']})")
                if ref and got and name != "shampoo-async-S0":
                    # The summary's counters are the ranks' sum (the trial saw rank 0's).
                    # Every state lives on one rank; each rank adds its one shared
                    # step scratch (strata_stats.step_scratch_bytes).
                    dev = got["device_bytes"] - sum(r["step_scratch_bytes"] for r in got["ranks"])
                    rdev = ref["device_bytes"] - ref["step_scratch_bytes"]
                    check(got["totals_ranks"] == n and
                          got["root_refreshes"] == ref["root_refreshes"] and dev == rdev and
                          all(isinstance(r["owned_params"], int) for r in got["ranks"]),
                          f"{name} -np {n}: summary root_refreshes {got['root_refreshes']} and "
                          f"device_bytes less the step scratch {dev} summed over the ranks "
                          f"equal --grad-accum {n}'s ({ref['root_refreshes']}, {rdev})")
                if got and name != "shampoo-async-S0":
                    ranks = got["ranks"]
                    check(all(r["step_matrix_bytes"] == 0 for r in ranks),
                          f"{name} -np {n}: owner sharding moves 0 matrix bytes at the step")
                if name == "shampoo" and n == 3:
                    check_shard_gradients(tmp, name, n, args, ref, got)
        # Hierarchical sync: 2 emulated nodes of 2 ranks, owner groups of 2.
        # soap-ring: F = 1, S = 2, a ring of chained eigenbasis refreshes in
        # flight per block (issue 23), shipped from the replica that chains them.
        ring = ["--optimizer", "soap", "--async", "--staleness", "2", "--precondition-frequency",
                "1", "--workers", "1"]
        hsdp_cases = cases + [("soap", ["--optimizer", "soap"]), ("soap-ring", ring)]
        if QUICK:
            hsdp_cases = [c for c in hsdp_cases if c[0] in ("dion2", "shampoo-async-S0",
                                                           "soap-ring")]
        for name, args in hsdp_cases:
            ref = train(tmp, f"{name}-ga4-hsdp", 1, args + ["--grad-accum", "4"])
            env = {"STRATA_RANKS_PER_NODE": "2"}
            hsdp = train(tmp, f"{name}-hsdp", 4, args + ["--shard-group-size", "2"], env)
            flat = train(tmp, f"{name}-flat", 4, args, env)
            ok = ref and hsdp and flat and hsdp["weights_hash"] == ref["weights_hash"] == \
                flat["weights_hash"]
            check(bool(ok), f"{name}: -np 4 --shard-group-size 2 (2 nodes) bit-identical to "
                            f"--grad-accum 4")
            if name == "shampoo":
                check_shard_gradients(tmp, name, 4, args, ref, hsdp, hsdp=True)
            if hsdp and flat:
                hi = sum(r["inter_node_bytes"] for r in hsdp["ranks"])
                fi = sum(r["inter_node_bytes"] for r in flat["ranks"])
                check(hi < fi, f"{name}: HSDP inter-node bytes per step {hi:.0f} < flat {fi:.0f}")
            if hsdp and flat and name not in ("muon", "normuon", "dion2"):  # nothing to refresh
                check_shipped(name, hsdp, flat)
        # Four replicas per matrix, two on each of 2 nodes (8 ranks, groups of
        # 2): a result crosses to the other node once, to its node leader,
        # which hands it on inside its node.
        short = ["--optimizer", "shampoo", "--steps", "6"]
        ref = train(tmp, "shampoo-ga8", 1, short + ["--grad-accum", "8"])
        got = train(tmp, "shampoo-hsdp8", 8, short + ["--shard-group-size", "2"],
                    {"STRATA_RANKS_PER_NODE": "4"})
        check(bool(ref and got and got["weights_hash"] == ref["weights_hash"]),
              "shampoo: -np 8 --shard-group-size 2 (2 nodes of 4) bit-identical to "
              "--grad-accum 8")
        if got:
            inter = [r["refresh_ship_inter_node_bytes"] for r in got["ranks"]]
            leaders = [0, 1, 4, 5]  # group 0 and 2: the first replica on each node
            check(all((inter[r] > 0) == (r in leaders) for r in range(8)),
                  f"shipped roots cross nodes only between node leaders (inter-node bytes "
                  f"per rank {', '.join(f'{b:.0f}' for b in inter)})")
            comp = sum(r["refreshes_computed"] for r in got["ranks"])
            recv = sum(r["refreshes_received"] for r in got["ranks"])
            check(comp > 0 and recv == 3 * comp,
                  f"4 replicas: each result computed once ({comp:.0f}) and received by the 3 "
                  f"others ({recv:.0f})")
        # Baselines: same numbers, but matrix bytes move at the optimizer step.
        for mode in ("gather", "zero1"):
            ref = train(tmp, f"muon-ga4-{mode}", 1, ["--optimizer", "muon", "--grad-accum", "4"])
            got = train(tmp, f"muon-np4-{mode}", 4, ["--optimizer", "muon", "--sharding", mode])
            ok = ref is not None and got is not None and got["weights_hash"] == ref["weights_hash"]
            check(ok, f"--sharding {mode} -np 4 bit-identical to --grad-accum 4")
            if got:
                moved = [r["step_matrix_bytes"] for r in got["ranks"]]
                check(all(m > 0 for m in moved), f"--sharding {mode}: matrix bytes move at the "
                      f"optimizer step ({', '.join(f'{m:.0f}' for m in moved)} per rank)")
        # Resident bytes within 1.1 x total / N + the largest matrix's state
        # (+ the largest layer's materialized weights): every tensor and its
        # state live on exactly one owner, so the ranks' owned weights and
        # optimizer state add up to the total.
        C = 32                                   # TINY's --d-model
        weights = 4 * (256 * C + 32 * C + 2 * (12 * C * C + 13 * C) + 2 * C)
        largest_tensor = 4 * max(256 * C, 32 * C, 4 * C * C)
        head_lnf = 4 * 2 * C                     # lnf, held with wte at the head
        for opt in ("shampoo", "muon"):
            for n in worlds:
                got = train(tmp, f"{opt}-resident-np{n}", n, ["--optimizer", opt])
                if not got:
                    check(False, f"{opt} -np {n} ran")
                    continue
                ranks = got["ranks"]
                res = [r["resident_bytes"] for r in ranks]
                owned = [r["owned_param_bytes"] + r["resident_bytes"] - r["param_bytes_peak"]
                         for r in ranks]          # owned weights + optimizer state
                layer = max(r["largest_layer_bytes"] for r in ranks)
                total = sum(owned)
                bound = 1.1 * total / n + max(r["largest_item_bytes"] for r in ranks) + layer
                check(max(res) <= bound,
                      f"{opt} -np {n}: resident {', '.join(f'{b / 1024:.0f}' for b in res)} KiB "
                      f"<= {bound / 1024:.0f} KiB (1.1 x total/N + largest item + largest "
                      f"layer); planned makespan / lower bound "
                      f"{got['planned_makespan'] / got['planned_lower_bound']:.3f}")
                # The weights alone (ZeRO-3): strata's measured peak.
                check(sum(r["owned_param_bytes"] for r in ranks) == weights,
                      f"{opt} -np {n}: owned weights add up to the model's {weights} B")
                peak = [r["param_bytes_peak"] for r in ranks]
                parts = ", ".join("%.0f+%.0f" % (r["owned_param_bytes"], r["largest_layer_bytes"])
                                  for r in ranks)
                check(all(0 < r["largest_layer_bytes"] and r["param_bytes_peak"] <=
                          r["owned_param_bytes"] + r["largest_layer_bytes"] + head_lnf
                          for r in ranks),
                      f"{opt} -np {n}: peak weights {', '.join(f'{b:.0f}' for b in peak)} B "
                      f"<= owned + one layer ({parts})")
                wbound = 1.1 * weights / n + largest_tensor + layer
                check(max(peak) <= wbound and max(peak) < weights,
                      f"{opt} -np {n}: peak weights {max(peak):.0f} B <= {wbound:.0f} B "
                      f"(1.1 x {weights}/{n} + largest tensor {largest_tensor} + largest layer "
                      f"{layer:.0f}), < the whole model")
        got = train(tmp, "muon-zero1-resident", 2, ["--optimizer", "muon", "--sharding", "zero1"])
        check(bool(got) and all(r["param_bytes_peak"] == weights for r in got["ranks"]),
              "--sharding zero1: every rank keeps every weight (param_bytes_peak = the model)")
        # Async S = 2 on 4 ranks: every owner's staleness within F - 1 + S;
        # with HSDP (results shipped when due) too, and fixed install makes it
        # bit-identical to the flat layout.
        s2 = ["--optimizer", "shampoo", "--async", "--staleness", "2", "--workers", "1"]
        got = train(tmp, "async-S2-np4", 4, s2)
        hsdp = train(tmp, "async-S2-hsdp", 4, s2 + ["--shard-group-size", "2"],
                     {"STRATA_RANKS_PER_NODE": "2"})
        for what, run in (("4 ranks", got), ("4 ranks, HSDP", hsdp)):
            if run:
                worst = max(r["max_staleness"] for r in run["ranks"])
                exceeded = sum(r["staleness_bound_exceeded"] for r in run["ranks"])
                check(worst <= 3 - 1 + 2 and exceeded == 0,
                      f"async S=2 on {what}: max staleness {worst:.0f} (bound 4), "
                      f"{exceeded:.0f} exceeded")
            else:
                check(False, f"async S=2 on {what} ran")
        if got and hsdp:
            check(hsdp["weights_hash"] == got["weights_hash"],
                  "async S=2: -np 4 --shard-group-size 2 bit-identical to the flat layout")
            check_shipped("async S=2", hsdp, got)
        # A checkpoint of the HSDP run while refreshes are in flight (the save
        # ships them to every replica) resumes bit-identically.
        ck = os.path.join(tmp, "ck-hsdp")
        env = {"STRATA_RANKS_PER_NODE": "2"}
        hs = ["--shard-group-size", "2"]
        saved = train(tmp, "ck-hsdp-full", 4, s2 + hs + ["--save-every", "10", "--save-dir", ck],
                      env)
        res = train(tmp, "ck-hsdp-res", 4, s2 + hs + ["--resume",
                                                      os.path.join(ck, "step-00000010")], env)
        check(bool(hsdp and saved and res and saved["weights_hash"] == hsdp["weights_hash"] ==
                   res["weights_hash"]),
              "async S=2 HSDP: saving at step 10 changes nothing, resuming from it is "
              "bit-identical")
        # --root-method warm-qr under HSDP: the eigenbases are part of the
        # refresh result, shipped with the roots (optim/shampoo.c warm_basis),
        # so the replicas save the same bases (ckpt inspect --hash), and the
        # checkpoint resumes bit-identically on the same layout and on 1 rank
        # with --grad-accum 4 (whose owner's copy of every block's bases is
        # the one its computing replica refined); also async F = 1 S = 2,
        # whose refreshes in flight chain their bases (saved in their slots).
        wqr = ["--optimizer", "shampoo", "--root-method", "warm-qr"]
        wqr_cases = [("sync", wqr)]
        if not QUICK:
            wqr_cases.append(("async-F1-S2", wqr + ["--async", "--staleness", "2", "--workers",
                                                    "1", "--precondition-frequency", "1"]))
        for name, args in wqr_cases:
            ck = os.path.join(tmp, f"ck-hsdp-wqr-{name}")
            step10 = os.path.join(ck, "step-00000010")
            saved = train(tmp, f"ck-hsdp-wqr-{name}-full", 4,
                          args + hs + ["--save-every", "10", "--save-dir", ck], env)
            hashes = ckpt_hashes(step10) if saved else None
            check(bool(hashes), f"shampoo warm-qr {name} HSDP: the replicas' saved bases are "
                                f"identical (ckpt inspect --hash, {len(hashes or [])} tensors)")
            if name == "sync":
                res = train(tmp, f"ck-hsdp-wqr-{name}-res", 4, args + hs + ["--resume", step10],
                            env)
                check(bool(saved and res and saved["weights_hash"] == res["weights_hash"]),
                      f"shampoo warm-qr {name} HSDP: resuming from step 10 is bit-identical")
            one = train(tmp, f"ck-hsdp-wqr-{name}-one", 1,
                        args + ["--grad-accum", "4", "--resume", step10])
            check(bool(saved and one and saved["weights_hash"] == one["weights_hash"]),
                  f"shampoo warm-qr {name} HSDP: its checkpoint resumed on 1 rank with "
                  f"--grad-accum 4 is bit-identical")
        # HSDP checkpoints hold identical replicas (issue #22 item 7): a replica
        # that received a shipped refresh saves the same slot bytes as the one
        # that computed it (`strata ckpt inspect --hash` compares the replicas'
        # copies of every tensor and exits 1 when any differ), every family.
        replicas = (("shampoo", ["--optimizer", "shampoo"]),
                    ("soap", ["--optimizer", "soap"]),
                    ("kl-shampoo", ["--optimizer", "kl-shampoo"]),
                    ("kl-exact-async", ["--optimizer", "kl-shampoo", "--kl-form", "exact",
                                        "--async", "--staleness", "1", "--workers", "1"]),
                    ("muon", ["--optimizer", "muon"]),
                    ("normuon", ["--optimizer", "normuon"]),
                    ("adamw", ["--optimizer", "adamw"]))
        if QUICK:
            replicas = [r for r in replicas if r[0] in ("soap", "kl-exact-async")]
        for name, args in replicas:
            ck = os.path.join(tmp, f"rep-{name}")
            got = train(tmp, f"rep-{name}", 4, args + hs + ["--steps", "8", "--save-every", "7",
                                                            "--save-dir", ck], env)
            hashes = ckpt_hashes(os.path.join(ck, "step-00000007")) if got else None
            check(bool(hashes), f"{name} HSDP (--shard-group-size 2 of 4): the replicas' saved "
                                f"state is identical (ckpt inspect --hash, "
                                f"{len(hashes or [])} tensors)")
        # Checkpoints across ranks: save at step 6 of 12, resume, same weights.
        for n in ((4,) if QUICK else (2, 4)):
            for name, args in (("shampoo", ["--optimizer", "shampoo"]),
                               ("shampoo-async-S2", ["--optimizer", "shampoo", "--async",
                                                     "--staleness", "2", "--workers", "1"]),
                               ("muon", ["--optimizer", "muon"]),
                               ("normuon", ["--optimizer", "normuon"]),
                               ("dion2", ["--optimizer", "dion2"])):
                ck = os.path.join(tmp, f"ck-{name}-{n}")
                full = train(tmp, f"ck-full-{name}-{n}", n,
                             args + ["--save-every", "10", "--save-dir", ck])
                res = train(tmp, f"ck-res-{name}-{n}", n,
                            args + ["--resume", os.path.join(ck, "step-00000010")])
                ok = full and res and full["weights_hash"] == res["weights_hash"]
                check(bool(ok), f"{name} -np {n}: resume from step 10 bit-identical to the "
                                f"uninterrupted run")
                # Streaming save (issue #21 item 4): rank 0 writes the model while the
                # layers stream past, so no rank's weights ever exceed its shard plus
                # one layer (before: rank 0 held the whole model during the save).
                if full:
                    whole = sum(r["owned_param_bytes"] for r in full["ranks"])
                    peaks = [(r["param_bytes_peak"], r["owned_param_bytes"],
                              r["largest_layer_bytes"]) for r in full["ranks"]]
                    check(all(pk <= own + layer + 4 * 2 * 32 and pk < whole
                              for pk, own, layer in peaks),
                          f"{name} -np {n}: peak weights with a save "
                          f"{', '.join(str(pk) for pk, _, _ in peaks)} B <= owned + one layer, "
                          f"< the model's {whole} B")
        # Resharding: 4 ranks' checkpoint on 1 rank with --grad-accum 4 (the
        # same numbers as 4 ranks) continues bit-identically; on 2 and 3 ranks,
        # and 3 ranks' on 4, it loads and trains on.
        reshards = (("shampoo", ["--optimizer", "shampoo"]),
                    ("soap", ["--optimizer", "soap"]),
                    ("shampoo-async-S2", ["--optimizer", "shampoo", "--async",
                                          "--staleness", "2", "--workers", "1"]))
        for name, args in (reshards[1:] if QUICK else reshards):
            ck = os.path.join(tmp, f"rs-{name}")
            full = train(tmp, f"rs-full-{name}", 4, args + ["--save-every", "10", "--save-dir", ck])
            one = train(tmp, f"rs-one-{name}", 1,
                        args + ["--grad-accum", "4", "--resume",
                                os.path.join(ck, "step-00000010")])
            check(bool(full and one and full["weights_hash"] == one["weights_hash"]),
                  f"{name}: 4 ranks' checkpoint resumed on 1 rank with --grad-accum 4, "
                  f"bit-identical")
            for m in (2, 3):
                again = os.path.join(tmp, f"rs-{m}-{name}-again")
                got = train(tmp, f"rs-{m}-{name}", m,
                            args + ["--resume", os.path.join(ck, "step-00000010"),
                                    "--save-after-load", "--save-dir", again])
                check(bool(got) and got["final_val_loss"] == got["final_val_loss"],
                      f"{name}: 4 ranks' checkpoint resumed on {m} ranks and trained on")
                same_hashes(os.path.join(ck, "step-00000010"),
                            os.path.join(again, "step-00000010"),
                            f"{name}: 4 ranks' checkpoint saved again on {m} ranks")
        # --root-method warm-qr keeps each factor's eigenbasis in the state
        # (in the checkpoint): 4 ranks' checkpoint resumed on 1 rank with
        # --grad-accum 4 continues bit-identically (without the bases it
        # differs: each factor's first root after the resume would be an
        # eigh root), and saved again on 2 ranks holds the same bases.
        wqr = ["--optimizer", "shampoo", "--root-method", "warm-qr"]
        ck = os.path.join(tmp, "rs-wqr")
        full = train(tmp, "rs-full-wqr", 4, wqr + ["--save-every", "10", "--save-dir", ck])
        one = train(tmp, "rs-one-wqr", 1, wqr + ["--grad-accum", "4", "--resume",
                                                 os.path.join(ck, "step-00000010")])
        check(bool(full and one and full["weights_hash"] == one["weights_hash"]),
              "shampoo warm-qr: 4 ranks' checkpoint resumed on 1 rank with --grad-accum 4, "
              "bit-identical")
        again = os.path.join(tmp, "rs-2-wqr-again")
        got = train(tmp, "rs-2-wqr", 2, wqr + ["--resume", os.path.join(ck, "step-00000010"),
                                               "--save-after-load", "--save-dir", again])
        check(bool(got), "shampoo warm-qr: 4 ranks' checkpoint resumed on 2 ranks and trained on")
        same_hashes(os.path.join(ck, "step-00000010"), os.path.join(again, "step-00000010"),
                    "shampoo warm-qr: 4 ranks' checkpoint saved again on 2 ranks")
        # The reassembled weights: resumed on 1, 2, 3 ranks with no step left,
        # the weights hash equals the one at the save.
        ck6 = os.path.join(tmp, "rs-6")
        six = ["--optimizer", "shampoo", "--steps", "6"]
        at6 = train(tmp, "rs-at6", 4, six + ["--save-every", "6", "--save-dir", ck6])
        for m in (1, 2, 3):
            again = os.path.join(tmp, f"rs-re6-{m}-again")
            got = train(tmp, f"rs-re6-{m}", m,
                        six + ["--resume", os.path.join(ck6, "step-00000006"),
                               "--save-after-load", "--save-dir", again])
            check(bool(at6 and got and got["weights_hash"] == at6["weights_hash"]),
                  f"4 ranks' checkpoint loaded on {m} rank(s): the same weights hash")
            same_hashes(os.path.join(ck6, "step-00000006"), os.path.join(again, "step-00000006"),
                        f"shampoo: 4 ranks' checkpoint saved again on {m} rank(s)")
        ck3 = os.path.join(tmp, "rs-3to4")
        got3 = train(tmp, "rs-3", 3, ["--optimizer", "muon", "--save-every", "10", "--save-dir",
                                      ck3])
        again = os.path.join(tmp, "rs-3to4-again")
        got4 = train(tmp, "rs-4", 4, ["--optimizer", "muon", "--resume",
                                      os.path.join(ck3, "step-00000010"), "--save-after-load",
                                      "--save-dir", again])
        check(bool(got3 and got4), "muon: 3 ranks' checkpoint resumed on 4 ranks")
        same_hashes(os.path.join(ck3, "step-00000010"), os.path.join(again, "step-00000010"),
                    "muon: 3 ranks' checkpoint saved again on 4 ranks")
        # A change of --shard-group-size across a resume: saved by 4 ranks in
        # shard groups of 2 (2 emulated nodes), resumed flat and in one group
        # of 4; the same tensors, and the same weights as the uninterrupted run.
        env2 = {"STRATA_RANKS_PER_NODE": "2"}
        sg = ["--optimizer", "shampoo", "--async", "--staleness", "2", "--workers", "1",
              "--steps", "12"]
        ck_sg = os.path.join(tmp, "sg2")
        full_sg = train(tmp, "sg2-full", 4, sg + ["--shard-group-size", "2", "--save-every", "6",
                                                  "--save-dir", ck_sg], env2)
        for label, extra in (("flat", []), ("--shard-group-size 4", ["--shard-group-size", "4"])):
            again = os.path.join(tmp, f"sg2-to-{len(extra)}")
            got = train(tmp, f"sg2-to-{len(extra)}", 4,
                        sg + extra + ["--resume", os.path.join(ck_sg, "step-00000006"),
                                      "--save-after-load", "--save-dir", again], env2)
            check(bool(full_sg and got and got["weights_hash"] == full_sg["weights_hash"]),
                  f"--shard-group-size 2 checkpoint resumed {label}: trained on, bit-identical "
                  f"to the uninterrupted run")
            same_hashes(os.path.join(ck_sg, "step-00000006"), os.path.join(again, "step-00000006"),
                        f"--shard-group-size 2 checkpoint saved again {label}")
        # A failing rank ends the job with its message, never a hang.
        wrapper = os.path.join(tmp, "one_bad_rank.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then\n'
                    f'  exec "{EXE}" train --data /nonexistent/corpus "$@"\nfi\n'
                    f'exec "{EXE}" train "$@"\n')
        os.chmod(wrapper, 0o755)
        t0 = time.monotonic()
        try:
            p = mpirun(3, [wrapper] + TINY + ["--steps", "200"], timeout=60)
            dt = time.monotonic() - t0
            check(p.returncode != 0 and "rank 1" in p.stderr and "/nonexistent" in p.stderr
                  and dt < 30,
                  f"one failing rank: exit {p.returncode} after {dt:.1f} s with its message")
        except subprocess.TimeoutExpired:
            check(False, "one failing rank: the job hung (killed after 60 s)")
        # A rank killed outright (SIGKILL in the middle of training): the
        # launcher ends the others, never a hang.
        killer = os.path.join(tmp, "one_killed_rank.sh")
        with open(killer, "w") as f:
            f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then\n'
                    f'  "{EXE}" train "$@" & pid=$!; sleep 2; kill -9 $pid; wait $pid; exit 137\n'
                    f'fi\nexec "{EXE}" train "$@"\n')
        os.chmod(killer, 0o755)
        t0 = time.monotonic()
        try:
            p = mpirun(3, [killer] + TINY + ["--steps", "100000"], timeout=90)
            dt = time.monotonic() - t0
            check(p.returncode != 0 and dt < 60,
                  f"one rank killed (SIGKILL): the job ended, exit {p.returncode}, "
                  f"after {dt:.1f} s")
        except subprocess.TimeoutExpired:
            check(False, "one rank killed: the job hung (killed after 90 s)")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
