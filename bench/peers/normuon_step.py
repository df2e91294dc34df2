#!/usr/bin/env python3
"""strata's NorMuon step beside the reference's (pytorch_optimizer's NorMuon,
pytorch_optimizer/optimizer/muon/normuon.py, PyPI `pytorch-optimizer`), on
the CPU, one process. The structure is dion2_step.py's.

Both sides get the same matrices and gradients: a GPT-2-small-shaped set,
--layers x (4 x 768x768, 768x3072, 3072x768), and the same settings, the
defaults of both (lr 0.02, momentum 0.95 with Nesterov, beta2 0.95, eps
1e-10, 5 Newton-Schulz steps with Jordan's quintic coefficients, the
reference's ns_coeffs 'original', update_scale preserve_norm with the lr
ratio sqrt(max(1, rows/cols)), use_adjusted_lr False) plus weight decay
0.01 (decoupled on both: the reference's weight_decouple True). strata runs
through its PyTorch door (strata.torch.NorMuon: one strata_step over every
matrix); the reference is NorMuon([{params, use_muon: True}]) with its
defaults, foreach included (same-shape matrices stacked into one batched
Newton-Schulz).

What cannot be matched: the reference runs Newton-Schulz in bfloat16 (its
zero_power_via_newton_schulz_5 default; strata: float32 unless --ns-dtype
bf16, its products' operands rounded to bfloat16 with float32 sums) and
divides by ||G'||_F clamped at 1e-7 (strata: no clamp), and sums the row
means in float32 (strata: float64, rounded). So the update check below is
not at float32 rounding: ~1e-2 expected from the bfloat16 iteration alone.

Same work, checked before timing: one step from the same state on both
sides, ||dW_strata - dW_ref|| / ||dW_ref|| over the whole set; then the
accuracy table: each side's step-1 update against a float64 evaluation of
the same step (the reference's quintic, the standard iteration: Gram
Newton-Schulz evaluates the same polynomial, Zhang, Amsel, Chen & Dao 2026,
github.com/Dao-AILab/gram-newton-schulz), for the reference at its defaults
and for strata in every ns_dtype x ns_method (standard, auto, gram); the
float64 step is step_pair.normuon_step1_f64, checked against the
reference's own code run on float64 tensors (printed, ~1e-14).

Timing: --rounds rounds of --steps steps per side after 2 warm-up steps,
alternating which side goes first; median ms per step, wall clock and
process CPU time (the CPU time is the figure that survives a shared,
oversubscribed machine on one thread). One thread each
(torch.set_num_threads(1), strata blas_threads 1) unless --threads.

Usage:
  PYTHON bench/peers/normuon_step.py --build build
PYTHON needs torch and pytorch_optimizer (e.g. the project's .venv).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import step_pair  # noqa: E402


def accuracy(args, torch, st, RefNorMuon, w0, g, sides):
    """Step 1 of each side against a float64 evaluation of the same step (the
    reference's quintic, standard iteration, everything in float64), printed
    before any timing: the reference at its defaults (bfloat16 iteration) and
    strata in each (ns_dtype, ns_method). Two float64 evaluations, checked
    against each other: step_pair.normuon_step1_f64 (written from the
    formulas) and the reference's own code on float64 tensors with its
    Newton-Schulz dtype argument float64."""
    import functools
    import pytorch_optimizer.optimizer.muon.base as ref_base
    import pytorch_optimizer.optimizer.muon.normuon as ref_normuon
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    from ns_coefficients import QUINTIC  # Jordan's quintic, as the papers give it

    dw64 = step_pair.normuon_step1_f64(torch, w0, g, [QUINTIC] * 5, wd=args.wd)
    saved = {m: m.zero_power_via_newton_schulz_5 for m in (ref_base, ref_normuon)}
    try:
        for m, f in saved.items():
            m.zero_power_via_newton_schulz_5 = functools.partial(f, dtype=torch.float64)
        ps = [torch.nn.Parameter(w.double().clone()) for w in w0]
        opt = RefNorMuon([dict(params=ps, use_muon=True, weight_decay=args.wd)])
        for p, gi in zip(ps, g):
            p.grad = gi.double().clone()
        opt.step()
    finally:
        for m, f in saved.items():
            m.zero_power_via_newton_schulz_5 = f
    print("accuracy (step 1, ||dW - dW_f64|| / ||dW_f64||; dW_f64: the reference's quintic, "
          "standard iteration, float64): the reference's code on float64 tensors vs the "
          "independent float64 step %.1e" % step_pair.rel_to(ps, w0, dw64))
    print("  reference (pytorch_optimizer defaults: bfloat16 iteration)  %.3e"
          % step_pair.rel_to(sides["reference"][0], w0, dw64))
    for dtype, method in step_pair.strata_modes(("standard", "auto", "gram")):
        ps = [torch.nn.Parameter(w.clone()) for w in w0]
        opt = st.NorMuon([(f"m{i}", p) for i, p in enumerate(ps)],
                         **step_pair.strata_threads(args.threads, args.parallel),
                         weight_decay=args.wd, ns_method=method, ns_dtype=dtype)
        for p, gi in zip(ps, g):
            p.grad = gi.clone()
        opt.step()
        mark = " <- timed" if (dtype, method) == (args.ns_dtype, args.ns_method) else ""
        print("  strata ns_dtype %-4s ns_method %-8s                    %.3e%s"
              % (dtype, method, step_pair.rel_to(ps, w0, dw64), mark))
        del opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--wd", type=float, default=0.01)
    step_pair.add_strata_args(ap)
    args = ap.parse_args()
    try:
        from pytorch_optimizer import NorMuon as RefNorMuon
    except ImportError:
        print("SKIP: pytorch_optimizer is not installed")
        return 77
    step_pair.use_build(args.build)
    import torch
    from importlib.metadata import version
    import strata.torch as st

    torch.set_num_threads(args.threads)
    shapes, w0, grads = step_pair.matrix_set(torch, args.layers)

    def make(side):
        ps = [torch.nn.Parameter(w.clone()) for w in w0]
        if side == "strata":
            opt = st.NorMuon([(f"m{i}", p) for i, p in enumerate(ps)],
                             **step_pair.strata_threads(args.threads, args.parallel),
                             weight_decay=args.wd, ns_method=args.ns_method,
                             ns_dtype=args.ns_dtype)
        else:
            opt = RefNorMuon([dict(params=ps, use_muon=True, weight_decay=args.wd)])
        return ps, opt

    def step(ps, opt, k):
        # The reference's Nesterov lerps into p.grad in place: fresh copies.
        for p, g in zip(ps, grads[k % len(grads)]):
            p.grad = g.clone()
        opt.step()

    # Same work: one step from the same state.
    sides = {s: make(s) for s in ("strata", "reference")}
    for s in sides:
        step(*sides[s], 0)
    print("set: %d matrices (%d layers of 4 x 768x768, 768x3072, 3072x768), %d thread(s) "
          "(strata: %s), strata ns_method %s ns_dtype %s, pytorch_optimizer %s, weight decay "
          "%g" % (len(shapes), args.layers, args.threads, args.parallel, args.ns_method,
                  args.ns_dtype, version("pytorch_optimizer"), args.wd))
    print("same work: step 1 update relative error %.3e (reference Newton-Schulz in bfloat16)"
          % step_pair.update_error(sides, w0))

    accuracy(args, torch, st, RefNorMuon, w0, grads[0], sides)

    for s in sides:  # warm-up
        step(*sides[s], 1)

    def set_grads(ps, k):
        for p, g in zip(ps, grads[k % len(grads)]):
            p.grad = g.clone()
    step_pair.race(sides, set_grads, args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
