#!/usr/bin/env python3
"""strata through its Python binding (strata.torch) beside the PyTorch peers a
user would run instead, in one process, on the same model and the same
gradients (issue #19's benchmark); and the binding's own overhead.

Model: examples/torch/train_gpt.py's GPT at the default shapes (4 layers,
d_model 128, 4 heads, byte vocabulary, sequence 128) and a GPT-2-small-sized
one (d_model 768, 12 heads, --gpt2-layers layers; 1 by default: the 12
layers are 12 copies of the same shapes, stepped one after another on both
sides). Gradients: --grad-sets real backward passes of the model on batches
of the fortunes corpus (random bytes when it is missing), taken once; every
side steps the same sequence of them (each step a fresh copy as p.grad, as a
backward after zero_grad(set_to_none=True) gives; untimed).

Peer comparison: the model's Linear weights (the 2-D matrices; embeddings,
norms and biases are the AdamW tail on both sides in training and are left
out here), each side from the same initial weights:

  shampoo-meta  strata.torch.Shampoo (its defaults: Meta's) vs Meta's
                DistributedShampoo (facebookresearch/optimizers, by --meta
                path), Adam grafting (0.999, 1e-8), F = --freq
  shampoo-po    strata.torch.Shampoo vs pytorch_optimizer.Shampoo, matched
                to the latter's plain form (no grafting, beta1 0, beta2 1,
                epsilon = its matrix_eps, no blocking, lr 1e-3)
  soap-ref      strata.torch.SOAP vs the SOAP reference (nikhilvyas/SOAP
                soap.py, by --soap path), both at their (equal) defaults
  soap-po       strata.torch.SOAP vs pytorch_optimizer.SOAP, defaults
  muon-torch    strata.torch.Muon (EMA momentum, Nesterov) vs
                torch.optim.Muon, lr 0.02, no weight decay
  muon-po       strata.torch.Muon vs pytorch_optimizer.Muon (use_muon)

Same work, checked before any timing: both sides step the same gradients
from the same weights for the check steps; at each listed step the relative
error of the update, ||dW_strata - dW_peer|| / ||dW_peer|| over the set, is
printed with the pair's tolerance. Muon is checked on the model's gradients;
its peers run Newton-Schulz in bfloat16 (~9e-2 against strata's float32), so
they are checked, and timed as a third side, with their own code's
iteration in float32 (torch.optim.Muon: torch.bfloat16 swapped for
torch.float32 around its step; pytorch_optimizer: its dtype argument).
Shampoo and SOAP are checked on a fresh Gaussian gradient per check step:
this model's real gradients are rank-deficient (the default GPT's 128 x 128
attention projections: rank 114-117), and in a factor's null space, a
degenerate eigenspace, each eigensolver picks its own basis: SOAP's
per-coordinate Adam in that basis then differs by 0.7 between two correct
implementations, and Shampoo at epsilon 1e-12 amplifies each side's float32
roundoff there (0.59 against Meta's at step F on the real gradients).
SOAP is judged on the square matrices after the first refresh (step F + 1).
The check's steps are the warm-up; then --rounds rounds, alternating which
side goes first, each side stepping one period (F steps: one refresh each;
Muon: --muon-steps), wall and process CPU time; medians over rounds of
ms/step. On a loaded machine the CPU time is the figure to read on one
thread.

Threads: "1": torch.set_num_threads(1), strata blas_threads 1, step_threads
1; "all": torch's and strata's BLAS on every core (blas_threads = cores,
step_threads auto). One process holds both sides, so idle threads are made
to sleep (OMP_WAIT_POLICY=PASSIVE, OPENBLAS_THREAD_TIMEOUT=4; --spin leaves
them): a team spinning after one side's step took the cores from the other.

Binding overhead (--parts overhead), the default model, whole
model.named_parameters() (the AdamW tail included, routed by the binding):
per step, Optimizer.step()'s wall time against the wall time inside
strata_step that the runtime reports (strata_stats.seconds_steps), fresh
gradient tensors each step (the binding re-points them); against the C
API's strata_step called directly (ctypes, the same registered runtime,
the gradients copied into the registered tensors), periods interleaved; and
attach(model)'s hooks: their time inside a training step's forward and
backward (instrumented), and the forward+backward with and without them.

Usage (see bench/peers/README.md):
  env -u OPENBLAS_CORETYPE nice -n 5 .venv/bin/python bench/peers/bench_binding.py \
      --build build --meta /work/peers/optimizers --soap /work/peers/soap/soap.py
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import importlib.util
import io
import json
import os
import pstats
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
import step_pair  # noqa: E402

NCPU = os.cpu_count() or 1


# ------------------------------------------------------------------ model and gradients
def make_model(torch, tg, kind, gpt2_layers):
    torch.manual_seed(1337)
    if kind == "default":
        return tg.GPT(256, 128, 128, 4, 4)
    return tg.GPT(256, 128, 768, gpt2_layers, 12)


def gradient_sets(torch, tg, model, n, batch, seq):
    """n gradient sets {name: grad} of the whole model, from real backward
    passes on batches of the fortunes corpus (random bytes without it)."""
    import torch.nn.functional as F
    gen = torch.Generator().manual_seed(1)
    try:
        train, _ = tg.split_bytes(tg.read_corpus(tg.DEFAULT_CORPUS), 0.1, seq + 1)
        data = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
        source = "fortunes"
    except OSError:
        data = torch.randint(0, 256, (1 << 20,), generator=gen)
        source = "random bytes"
    out = []
    for _ in range(n):
        x, y = tg.batch_of(data, batch, seq, gen)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).backward()
        out.append({k: p.grad.detach().clone() for k, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)
    return out, source


def matrices(model):
    """The Linear weights (2-D, not the embeddings), by name."""
    return [(n, p) for n, p in model.named_parameters()
            if p.dim() == 2 and not n.startswith(("wte", "wpe"))]


# ------------------------------------------------------------------ the pairs
def load_soap_ref(path):
    spec = importlib.util.spec_from_file_location("soap_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SOAP


def strata_threads(threads):
    return dict(blas_threads=1, step_threads=1) if threads == 1 else \
        dict(blas_threads=NCPU, step_threads=0)


def pairs(args):
    """name -> (label, strata class name, strata keywords, peer factory
    (params -> optimizer) or None with why, check steps, tolerance, what
    differs)."""
    F = args.freq
    out = {}

    def meta(ps):
        if args.meta:
            sys.path.insert(0, os.path.abspath(args.meta))
        import distributed_shampoo as ds
        return ds.DistributedShampoo(
            ps, lr=1e-2, betas=(0.9, 1.0), epsilon=args.shampoo_eps, weight_decay=0.0,
            max_preconditioner_dim=1024, precondition_frequency=F,
            start_preconditioning_step=F, use_bias_correction=True,
            grafting_config=ds.AdamPreconditionerConfig(beta2=0.999, epsilon=1e-8),
            distributed_config=ds.DefaultSingleDeviceDistributedConfig)
    out["shampoo-meta"] = (
        f"Shampoo F={F} vs Meta DistributedShampoo", "Shampoo",
        dict(precondition_frequency=F, grafting="adam", lr=1e-2, beta1=0.9, beta2=1.0,
             epsilon=args.shampoo_eps, grafting_beta2=0.999, grafting_epsilon=1e-8,
             max_preconditioner_dim=1024),
        meta, [1, F, F + 1], 1e-4,
        "Meta: float32 factors and eigh, strata: float64 roots; steps before F are "
        "Adam grafting on both", None)

    def po_shampoo(ps):
        import pytorch_optimizer as po
        return po.Shampoo(ps, lr=1e-3, momentum=0.0, weight_decay=0.0,
                          preconditioning_compute_steps=F, matrix_eps=1e-6)
    out["shampoo-po"] = (
        f"Shampoo F={F} vs pytorch_optimizer.Shampoo", "Shampoo",
        dict(precondition_frequency=F, grafting="none", lr=1e-3, beta1=0.0, beta2=1.0,
             epsilon=1e-6, max_preconditioner_dim=4096),
        po_shampoo, [F, F + 1], 1e-4,
        "peer: roots by float32 SVD and zero (no update) before step F; strata: "
        "float64 eigh, the plain gradient before F; matched from step F", None)

    def soap_ref(ps):
        return load_soap_ref(args.soap)(ps)
    out["soap-ref"] = (
        "SOAP vs SOAP reference (soap.py)", "SOAP", {},
        soap_ref if args.soap else None, [2, F + 1], 1e-2,
        "the first step only sets up the eigenbases on both; eigh/QR float32 (peer) "
        "vs float64 (strata); square matrices only (a non-square factor's null "
        "space is a degenerate eigenspace whose basis each solver picks freely)", None)

    def po_soap(ps):
        import pytorch_optimizer as po
        return po.SOAP(ps)
    out["soap-po"] = ("SOAP vs pytorch_optimizer.SOAP", "SOAP", {}, po_soap, [2, F + 1], 1e-2,
                      out["soap-ref"][6], None)

    @contextlib.contextmanager
    def torch_f32():
        # torch.optim.Muon's Newton-Schulz casts to torch.bfloat16 (a global
        # looked up at call time): its own code in float32, for the check only
        import torch
        bf16 = torch.bfloat16
        torch.bfloat16 = torch.float32
        try:
            yield
        finally:
            torch.bfloat16 = bf16

    @contextlib.contextmanager
    def po_f32():
        # pytorch_optimizer's Newton-Schulz takes its dtype (bfloat16 default)
        import functools
        import torch
        import pytorch_optimizer.optimizer.muon.base as base
        orig = base.zero_power_via_newton_schulz_5
        base.zero_power_via_newton_schulz_5 = functools.partial(orig, dtype=torch.float32)
        try:
            yield
        finally:
            base.zero_power_via_newton_schulz_5 = orig

    def torch_muon(ps):
        import torch
        return torch.optim.Muon(ps, lr=0.02, weight_decay=0.0)
    muon_kw = dict(lr=0.02, momentum=0.95, nesterov=True, momentum_form="ema", scale="shape",
                   weight_decay=0.0, ns_steps=5)
    out["muon-torch"] = ("Muon vs torch.optim.Muon", "Muon", muon_kw, torch_muon, [1, 2], 3e-4,
                         "peer: Newton-Schulz in bfloat16 (strata: float32); the tolerance "
                         "is for the peer's own code run in float32 (f32 column)",
                         torch_f32)

    def po_muon(ps):
        import pytorch_optimizer as po
        return po.Muon([dict(params=ps, use_muon=True)], lr=0.02, weight_decay=0.0)
    out["muon-po"] = ("Muon vs pytorch_optimizer.Muon", "Muon", muon_kw, po_muon, [1, 2], 3e-4,
                      out["muon-torch"][6], po_f32)
    return out


# ------------------------------------------------------------------ one pair
def set_grads(named, grads, k):
    g = grads[k % len(grads)]
    for n, p in named:
        p.grad = g[n].clone()


def rel_err(da, db, square):
    num = den = 0.0
    for a, b in zip(da, db):
        if square is not None and a.shape[0] != a.shape[1]:
            continue
        num += float((a - b).double().norm() ** 2)
        den += float(b.double().norm() ** 2)
    return (num / den) ** 0.5 if den > 0 else float("nan")


def run_pair(torch, st, name, spec, model, grads, threads, args):
    label, cls, skw, peer, check_steps, tol, differs, exact = spec
    torch.set_num_threads(NCPU if threads == "all" else 1)
    nth = NCPU if threads == "all" else 1
    w0 = [(n, p.detach().clone()) for n, p in matrices(model)]

    def fresh():
        return [(n, torch.nn.Parameter(w.clone())) for n, w in w0]

    # the check's gradients: the model's for Muon; for Shampoo and SOAP a fresh
    # Gaussian matrix per step (full-rank factors: see the module docstring)
    if name.startswith("muon"):
        cgrads = grads
    else:
        gen = torch.Generator().manual_seed(11)
        cgrads = [{n: torch.randn(w.shape, generator=gen) for n, w in w0}
                  for _ in range(max(check_steps))]

    def updates(side):
        """side's update at each check step (the steps run on it)."""
        out, prev = {}, [p.detach().clone() for _, p in side[0]]
        for k in range(1, max(check_steps) + 1):
            set_grads(side[0], cgrads, k - 1)
            side[1].step()
            cur = [p.detach().clone() for _, p in side[0]]
            if k in check_steps:
                out[k] = [c - q for c, q in zip(cur, prev)]
            prev = cur
        return out
    sides = {}
    ps = fresh()
    sides["strata"] = (ps, getattr(st, cls)(ps, **skw, **strata_threads(nth)))
    ps = fresh()
    sides["peer"] = (ps, peer([p for _, p in ps]))

    # same work: the check steps (also the warm-up); square matrices only for SOAP
    sq = True if name.startswith("soap") else None
    du = {s: updates(sides[s]) for s in sides}
    checks = [(k, rel_err(du["strata"][k], du["peer"][k], None),
               rel_err(du["strata"][k], du["peer"][k], sq) if sq else None) for k in check_steps]
    if exact is not None:  # the peer's own code with its iteration in float32
        ps = fresh()
        side32 = (ps, peer([p for _, p in ps]))
        with exact():
            d32 = updates(side32)
        checks32 = [(k, rel_err(du["strata"][k], d32[k], None)) for k in check_steps]
        worst = max(e for _, e in checks32)
    else:
        checks32 = None
        # SOAP: judged after the first refresh (step F + 1, F full-rank
        # gradients in the factors); step 2's basis comes from one square
        # Gaussian gradient, whose factor's smallest eigenvalues crowd
        # together (near-degenerate), so it reads 1e-2 and moves with the BLAS
        # threads' summation order
        judged = checks[-1:] if sq else checks
        worst = max((c[2] if c[2] is not None else c[1]) for c in judged)

    if exact is not None:  # timed too: the same work at the same precision
        sides["peer_f32"] = side32
    per_round = args.freq if not name.startswith("muon") else args.muon_steps
    wall = {s: [] for s in sides}
    cpu = {s: [] for s in sides}
    k = max(check_steps)
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for s in order:
            tw = tc = 0.0
            ctx = exact if s == "peer_f32" else contextlib.nullcontext
            for j in range(per_round):
                set_grads(sides[s][0], grads, k + j)
                with ctx():
                    c0, t0 = time.process_time(), time.perf_counter()
                    sides[s][1].step()
                    tw += time.perf_counter() - t0
                tc += time.process_time() - c0
            wall[s].append(1e3 * tw / per_round)
            cpu[s].append(1e3 * tc / per_round)
        k += per_round
    med = {s: statistics.median(wall[s]) for s in sides}
    medc = {s: statistics.median(cpu[s]) for s in sides}
    row = dict(pair=name, label=label, threads=threads, checks=checks, checks_f32=checks32,
               tol=tol, worst=worst,
               ok=bool(worst <= tol), differs=differs,
               strata_ms=med["strata"], peer_ms=med["peer"], ratio=med["peer"] / med["strata"],
               strata_cpu_ms=medc["strata"], peer_cpu_ms=medc["peer"],
               cpu_ratio=medc["peer"] / medc["strata"], rounds=args.rounds,
               steps_per_round=per_round)
    if "peer_f32" in sides:
        row.update(peer_f32_ms=med["peer_f32"], ratio_f32=med["peer_f32"] / med["strata"],
                   peer_f32_cpu_ms=medc["peer_f32"],
                   cpu_ratio_f32=medc["peer_f32"] / medc["strata"])
    chk = ", ".join(f"step {s} {e:.2e}" + (f" (square {q:.2e})" if q is not None else "")
                    for s, e, q in checks)
    if checks32:
        chk += "; peer in float32: " + ", ".join(f"step {s} {e:.2e}" for s, e in checks32)
    print(f"  {label:<44s} threads {threads:>3s} | update check {chk} | tol {tol:g}: "
          f"{'ok' if row['ok'] else 'DIFFERS'} | strata {row['strata_ms']:9.2f} ms  peer "
          f"{row['peer_ms']:9.2f} ms | peer/strata {row['ratio']:5.2f}x | cpu "
          f"{row['strata_cpu_ms']:.1f} / {row['peer_cpu_ms']:.1f} ms ({row['cpu_ratio']:.2f}x)" +
          (f" | peer in float32 {row['peer_f32_ms']:.2f} ms: {row['ratio_f32']:.2f}x, cpu "
           f"{row['cpu_ratio_f32']:.2f}x" if "peer_f32" in sides else ""), flush=True)
    return row


# ------------------------------------------------------------------ the binding's overhead
OVERHEAD_OPTS = {
    "shampoo": ("Shampoo", dict(precondition_frequency=10)),
    "shampoo-async": ("Shampoo", dict(precondition_frequency=10, async_roots=True,
                                      staleness=1, stagger_refresh=True, workers=1)),
    "soap": ("SOAP", {}),
    "muon": ("Muon", {}),
    "adamw": ("AdamW", {}),
}


class TimedLib:
    """The binding's ctypes library with strata_step timed (wall and this
    thread's CPU time): what step() spends outside it is the binding's."""

    def __init__(self, lib):
        self._lib = lib
        self.wall = self.cpu = 0.0

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name != "strata_step":
            return f

        def timed(*a):
            w, c = time.perf_counter(), time.thread_time()
            r = f(*a)
            self.cpu += time.thread_time() - c
            self.wall += time.perf_counter() - w
            return r
        return timed


def overhead(torch, st, tg, model, grads, threads, args):
    """Optimizer.step() through Python against the strata_step call inside
    it (the same registered runtime, the same gradients, the same steps),
    then attach()'s hooks in training steps."""
    import torch.nn.functional as F
    nth = NCPU if threads == "all" else 1
    torch.set_num_threads(nth)
    steps = args.overhead_steps
    rows = []
    for key in args.overhead_opts.split(","):
        cls, kw = OVERHEAD_OPTS[key]
        kw = dict(kw)
        if not kw.get("async_roots"):
            kw.update(strata_threads(nth))
        m = copy.deepcopy(model)
        named = list(m.named_parameters())
        opt = getattr(st, cls)(named, model=m, **kw)
        lib = opt._lib = TimedLib(opt._lib)
        for k in range(2):  # warm-up
            set_grads(named, grads, k)
            opt.step()
        k = 2
        tw = tc = 0.0
        lib.wall = lib.cpu = 0.0
        s0 = opt.stats()["seconds_steps"]
        for j in range(steps * args.overhead_rounds):
            # as in training: the gradients freed, then new tensors (re-pointed
            # where their address changed)
            opt.zero_grad(set_to_none=True)
            set_grads(named, grads, k)
            k += 1
            w, c = time.perf_counter(), time.thread_time()
            opt.step()
            tc += time.thread_time() - c
            tw += time.perf_counter() - w
        n = steps * args.overhead_rounds
        rt_wall = opt.stats()["seconds_steps"] - s0
        row = dict(opt=key, threads=threads, steps=n, params=len(named),
                   step_ms=1e3 * tw / n, c_ms=1e3 * lib.wall / n, runtime_ms=1e3 * rt_wall / n,
                   step_cpu_ms=1e3 * tc / n, c_cpu_ms=1e3 * lib.cpu / n)
        row["overhead_ms"] = row["step_ms"] - row["c_ms"]
        row["overhead_cpu_ms"] = row["step_cpu_ms"] - row["c_cpu_ms"]
        row["overhead_pct"] = 100.0 * row["overhead_ms"] / row["c_ms"]
        row["overhead_cpu_pct"] = 100.0 * row["overhead_cpu_ms"] / row["c_cpu_ms"]
        rows.append(row)
        print(f"  {key:<14s} threads {threads:>3s} | {row['params']} params, {n} steps | "
              f"step() {row['step_ms']:8.2f} ms, strata_step {row['c_ms']:8.2f} ms (runtime's "
              f"own {row['runtime_ms']:.2f}): binding {row['overhead_ms']:6.3f} ms = "
              f"{row['overhead_pct']:5.2f}% | CPU (this thread) {row['step_cpu_ms']:.2f} vs "
              f"{row['c_cpu_ms']:.2f} ms: {row['overhead_cpu_ms']:.3f} ms = "
              f"{row['overhead_cpu_pct']:.2f}%", flush=True)
        if args.profile:  # where the Python time goes (not in the figures)
            prof = cProfile.Profile()
            for j in range(steps):
                set_grads(named, grads, k)
                k += 1
                prof.enable()
                opt.step()
                prof.disable()
            sio = io.StringIO()
            pstats.Stats(prof, stream=sio).sort_stats("tottime").print_stats(12)
            print("\n".join("      " + ln for ln in sio.getvalue().splitlines()[:30]))
        del opt

        # attach(): the hooks' own time inside forward+backward (instrumented),
        # against strata_step in the same training steps; and the
        # forward+backward with and without the hooks, interleaved
        gen = torch.Generator().manual_seed(3)
        data = torch.randint(0, 256, (1 << 16,), generator=gen)
        ma, mb = copy.deepcopy(model), copy.deepcopy(model)
        oa = getattr(st, cls)(ma.named_parameters(), model=ma, **kw).attach(ma)
        ob = getattr(st, cls)(mb.named_parameters(), model=mb, **kw)
        la = oa._lib = TimedLib(oa._lib)
        calls: dict = {}  # (hook, argument) -> wall seconds of each call, over the steps
        record = [False]
        for attr in ("_on_forward", "_on_grad"):
            orig = getattr(oa, attr)

            def timed(x, orig=orig, attr=attr):
                w = time.perf_counter()
                orig(x)
                if record[0]:
                    calls.setdefault((attr, x), []).append(time.perf_counter() - w)
            setattr(oa, attr, timed)
        fb = {"attach": [], "plain": []}
        acc = dict(c=0.0, c_cpu=0.0, step=0.0)
        for it in range(args.hook_steps + 1):
            x, y = tg.batch_of(data, 16, 128, gen)
            order = (("attach", ma, oa), ("plain", mb, ob))
            for side, m2, o in (order if it % 2 == 0 else order[::-1]):
                record[0] = it > 0
                c0 = time.thread_time()
                F.cross_entropy(m2(x).reshape(-1, 256), y.reshape(-1)).backward()
                c1 = time.thread_time()
                if side == "attach":
                    la.wall = la.cpu = 0.0
                w = time.perf_counter()
                o.step()
                w = time.perf_counter() - w
                o.zero_grad(set_to_none=True)
                if it == 0:
                    continue  # warm-up
                fb[side].append(c1 - c0)
                if side == "attach":
                    acc["c"] += la.wall
                    acc["c_cpu"] += la.cpu
                    acc["step"] += w
        n = args.hook_steps
        # per step: each hook call's median over the steps (a short call is
        # rarely preempted; the median drops those that were), summed
        hooks_s = sum(statistics.median(v) for v in calls.values())
        h = dict(opt=key, threads=threads, steps=n, hook_calls=len(calls),
                 hooks_ms=1e3 * hooks_s, c_ms=1e3 * acc["c"] / n,
                 c_cpu_ms=1e3 * acc["c_cpu"] / n, step_ms=1e3 * acc["step"] / n,
                 fb_attach_cpu_ms=1e3 * statistics.median(fb["attach"]),
                 fb_plain_cpu_ms=1e3 * statistics.median(fb["plain"]))
        h["hooks_pct"] = 100.0 * h["hooks_ms"] / h["c_ms"]
        h["hooks_cpu_pct"] = 100.0 * h["hooks_ms"] / h["c_cpu_ms"]
        h["fb_diff_cpu_pct"] = 100.0 * (h["fb_attach_cpu_ms"] - h["fb_plain_cpu_ms"]) / \
            h["c_cpu_ms"]
        h["step_overhead_pct"] = 100.0 * (h["step_ms"] - h["c_ms"]) / h["c_ms"]
        rows.append(dict(hooks=h))
        print(f"  {key:<14s} attach    | {h['hook_calls']} hook calls, "
              f"{h['hooks_ms']:.3f} ms/step = {h['hooks_cpu_pct']:.2f}% of strata_step's CPU "
              f"{h['c_cpu_ms']:.2f} ms ({h['hooks_pct']:.2f}% of its wall {h['c_ms']:.2f}); "
              f"step() beyond strata_step {h['step_overhead_pct']:+.2f}%; fwd+bwd CPU median "
              f"{h['fb_attach_cpu_ms']:.1f} (attach) vs {h['fb_plain_cpu_ms']:.1f} ms (plain): "
              f"{h['fb_diff_cpu_pct']:+.1f}% of strata_step (noisy)", flush=True)
        del oa, ob
    return rows


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--meta", default=os.environ.get("STRATA_META_SHAMPOO_PATH"),
                    help="a checkout of facebookresearch/optimizers (distributed_shampoo)")
    ap.add_argument("--soap", default=os.environ.get("STRATA_SOAP_REFERENCE"),
                    help="the SOAP reference's soap.py (nikhilvyas/SOAP)")
    ap.add_argument("--sets", default="default,gpt2")
    ap.add_argument("--gpt2-layers", type=int, default=1)
    ap.add_argument("--pairs", default="shampoo-meta,soap-ref,muon-torch,shampoo-po,soap-po,"
                    "muon-po")
    ap.add_argument("--gpt2-pairs", default=None,
                    help="pairs on the GPT-2 set (default: --pairs)")
    ap.add_argument("--threads", default="1,all")
    ap.add_argument("--freq", type=int, default=10, help="F: Shampoo's and SOAP's refresh period")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shampoo-eps", type=float, default=1e-12,
                    help="shampoo-meta's epsilon, both sides")
    ap.add_argument("--muon-steps", type=int, default=3, help="Muon's steps per round")
    ap.add_argument("--grad-sets", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--parts", default="peers,overhead")
    ap.add_argument("--overhead-opts", default="shampoo,shampoo-async,soap,muon,adamw")
    ap.add_argument("--overhead-threads", default="1")
    ap.add_argument("--overhead-steps", type=int, default=10)
    ap.add_argument("--overhead-rounds", type=int, default=3)
    ap.add_argument("--hook-steps", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="cProfile of step()'s Python side")
    ap.add_argument("--json", default=None)
    ap.add_argument("--spin", action="store_true",
                    help="leave OMP_WAIT_POLICY / OPENBLAS_THREAD_TIMEOUT as they are")
    ap.add_argument("--python", default=None,
                    help="a folder holding another version's strata package (before/after)")
    args = ap.parse_args()

    # Both libraries' idle threads sleep instead of spinning: in one process
    # torch's OpenMP team, spinning after a peer's step, took the cores from
    # strata's OpenBLAS threads and the other way round (at "all", loaded:
    # 10x wall over CPU time). Set before torch and libstrata load.
    if not args.spin:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    if args.python:  # another checkout's binding (before/after a change)
        sys.path.insert(0, os.path.abspath(args.python))
    step_pair.use_build(args.build)
    if args.python:
        sys.path.remove(os.path.join(ROOT, "python"))
    import torch
    import strata.torch as st
    import train_gpt as tg
    parts = args.parts.split(",")
    out = {"cpus": NCPU, "torch": torch.__version__, "rows": [], "overhead": []}
    print(f"strata {os.environ.get('STRATA_LIBRARY')}, binding {st.__file__}; torch "
          f"{torch.__version__}; {NCPU} cores; "
          f"load average {os.getloadavg()[0]:.1f} at start; OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY')}, OPENBLAS_THREAD_TIMEOUT="
          f"{os.environ.get('OPENBLAS_THREAD_TIMEOUT')}", flush=True)
    if "peers" in parts:
        specs = pairs(args)
        for kind in args.sets.split(","):
            model = make_model(torch, tg, kind, args.gpt2_layers)
            grads, source = gradient_sets(torch, tg, model, args.grad_sets, args.batch, 128)
            mats = matrices(model)
            print(f"\n{kind} GPT ({'4 x 128' if kind == 'default' else f'{args.gpt2_layers} x 768'}"
                  f"): {len(mats)} matrices, {sum(p.numel() for _, p in mats) / 1e6:.2f} M "
                  f"parameters; gradients: {args.grad_sets} backward passes, batch "
                  f"{args.batch} x 128, {source}", flush=True)
            names = (args.gpt2_pairs or args.pairs) if kind == "gpt2" else args.pairs
            for threads in args.threads.split(","):
                for name in names.split(","):
                    spec = specs[name]
                    if spec[3] is None:
                        print(f"  {spec[0]}: skipped (no --soap path)")
                        continue
                    try:
                        row = run_pair(torch, st, name, spec, model, grads, threads, args)
                    except ImportError as e:
                        print(f"  {spec[0]}: skipped ({e})")
                        continue
                    row["set"] = kind
                    out["rows"].append(row)
    if "overhead" in parts:
        model = make_model(torch, tg, "default", 0)
        grads, source = gradient_sets(torch, tg, model, args.grad_sets, args.batch, 128)
        print(f"\nbinding overhead, default GPT, whole model ({source} gradients)", flush=True)
        for threads in args.overhead_threads.split(","):
            out["overhead"] += overhead(torch, st, tg, model, grads, threads, args)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    if out["rows"]:
        print("\n| set | pair | threads | update check (worst) | strata ms | peer ms | "
              "peer/strata | CPU ratio |\n|---|---|---|---|---|---|---|---|")
        for r in out["rows"]:
            w = r["worst"]
            print(f"| {r['set']} | {r['label']} | {r['threads']} | {w:.1e} "
                  f"({'ok' if r['ok'] else 'differs'}) | {r['strata_ms']:.1f} | "
                  f"{r['peer_ms']:.1f} | {r['ratio']:.2f}x | {r['cpu_ratio']:.2f}x |")
            if "ratio_f32" in r:
                print(f"| {r['set']} | {r['label']}, peer's Newton-Schulz in float32 | "
                      f"{r['threads']} | {r['worst']:.1e} | {r['strata_ms']:.1f} | "
                      f"{r['peer_f32_ms']:.1f} | {r['ratio_f32']:.2f}x | "
                      f"{r['cpu_ratio_f32']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
