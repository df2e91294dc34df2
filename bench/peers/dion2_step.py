#!/usr/bin/env python3
"""strata's Dion2 step beside the reference's (Microsoft's Dion repository,
dion/dion2.py, taken by path; never vendored), on the CPU, one process.

Both sides get the same matrices and gradients: a GPT-2-small-shaped set,
--layers x (4 x 768x768, 768x3072, 3072x768), fraction 0.25, the defaults of
both (lr 0.01, ef_decay 0.95, weight decay 0.01, spectral_norm, 5 Polar
Express steps). strata runs through its PyTorch door (strata.torch.Dion2: one
strata_step over every matrix); the reference is Dion2(params) on its
single-process path (distributed_mesh=None), its torch.compile'd functions
replaced by the eager functions they wrap (inductor on this CPU is not what
its users run either: they run CUDA), in its own bfloat16.

Same work, checked before timing: one step from the same state on both
sides, ||dW_strata - dW_ref|| / ||dW_ref|| over the whole set (the reference
in bfloat16 with its own Polar Express polynomial: ~0.15 expected, see
tests/reference/compare_dion2_reference_code.py, whose exact mode measures
<= 5.1e-6 with the precision and the polynomial matched). Then the accuracy
table: each side's step-1 update against a float64 evaluation of its OWN
polynomial (the two sides' Polar Express coefficients differ), with the
same selection (checked), for strata in every ns_dtype x {standard, gram};
see accuracy() below.

Timing: --rounds rounds of --steps steps per side after 2 warm-up steps,
alternating which side goes first; median ms per step, wall clock and
process CPU time (the CPU time is the figure that survives a shared,
oversubscribed machine on one thread). One thread each
(torch.set_num_threads(1), strata blas_threads 1) unless --threads.

Usage:
  STRATA_DION_PATH=/path/to/dion PYTHON bench/peers/dion2_step.py --build build
PYTHON needs torch (e.g. the project's .venv).
"""
import argparse
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import step_pair  # noqa: E402


def accuracy(args, torch, st, Dion2, w0, g, sides):
    """Step 1 of each side against a float64 evaluation of the same step with
    that side's OWN polynomial, printed before any timing. The two sides'
    Polar Express coefficients differ: the reference's (dion/polar_express.py,
    _POLAR_EXPRESS_COEFFS, read from the checkout: 5 polynomials with a 1.02
    safety factor, X / (1.02 ||X||_F + epsilon), epsilon 1e-8) and strata's
    (the paper's, arXiv 2505.16932 Algorithm 1, safety 1.01, X / (1.01
    ||X||_F): tests/reference/ns_coefficients.py). Each float64 step is
    step_pair.dion2_step1_f64 (same selection: the top-k L1 norms of M = G,
    checked against the slices each side moved); the reference's is also
    its own code on float64 tensors (its bfloat16 casts made float64, its
    newton_schulz_func a float64 standard iteration of its polynomial)."""
    import types
    import dion.dion2 as ref_mod
    from dion.polar_express import _POLAR_EXPRESS_COEFFS as REF_PE
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    from ns_coefficients import PE

    steps = 5
    strata_pe = [PE[min(t, len(PE) - 1)] for t in range(steps)]
    eps_ref = 1e-8  # Dion2's epsilon default
    dw_ref64, sel64 = step_pair.dion2_step1_f64(torch, w0, g, list(REF_PE), 1.02, eps_ref)
    dw_st64, sel_st64 = step_pair.dion2_step1_f64(torch, w0, g, strata_pe, 1.01)
    assert sel64 == sel_st64

    class Float64Torch(types.ModuleType):
        """The real torch, except bfloat16 means float64."""

        def __init__(self):
            super().__init__("torch")

        def __getattr__(self, name):
            return torch.float64 if name == "bfloat16" else getattr(torch, name)

    def ns64(x, epsilon=None):  # the reference stacks same-shape matrices
        if x.ndim > 2:
            return torch.stack([ns64(xi) for xi in x.reshape(-1, *x.shape[-2:])]).reshape(
                *x.shape[:-2], *ns64(x.reshape(-1, *x.shape[-2:])[0]).shape)
        return step_pair.ns_f64(torch, x, list(REF_PE), 1.02, eps_ref)

    ps = [torch.nn.Parameter(w.double().clone()) for w in w0]
    opt = Dion2(ps, newton_schulz_func=ns64)
    saved = ref_mod.torch, torch.get_default_dtype()
    ref_mod.torch = Float64Torch()
    torch.set_default_dtype(torch.float64)  # its scalar tensors (lr, weight decay)
    try:
        for p, gi in zip(ps, g):
            p.grad = gi.double().clone()
        opt.step()
    finally:
        ref_mod.torch = saved[0]
        torch.set_default_dtype(saved[1])
    wd_lr = 0.01 * 0.01

    def same_sel(params):
        return "same selection" if step_pair.moved_slices(torch, params, w0, wd_lr) == sel64 \
            else "SELECTION DIFFERS"
    print("accuracy (step 1, ||dW - dW_f64|| / ||dW_f64||, dW_f64: float64 standard "
          "iteration of the side's own polynomial): the reference's code on float64 tensors "
          "vs the independent float64 step %.1e (%s)" % (step_pair.rel_to(ps, w0, dw_ref64),
                                                         same_sel(ps)))
    print("  reference (Dion2 defaults: bfloat16, its Polar Express), vs its own f64  %.3e (%s)"
          % (step_pair.rel_to(sides["reference"][0], w0, dw_ref64),
             same_sel(sides["reference"][0])))
    print("  the two polynomials, float64 against float64                            %.3e"
          % (sum(float((a - b).norm() ** 2) for a, b in zip(dw_st64, dw_ref64)) /
             sum(float(b.norm() ** 2) for b in dw_ref64)) ** 0.5)
    for dtype, method in step_pair.strata_modes(("standard", "gram")):
        ps = [torch.nn.Parameter(w.clone()) for w in w0]
        opt = st.Dion2([(f"m{i}", p) for i, p in enumerate(ps)],
                       **step_pair.strata_threads(args.threads, args.parallel),
                       ns_method=method, ns_dtype=dtype)
        for p, gi in zip(ps, g):
            p.grad = gi
        opt.step()
        mark = " <- timed" if (dtype, method) == (args.ns_dtype, args.ns_method) else ""
        print("  strata ns_dtype %-4s ns_method %-8s (paper's Polar Express), vs its f64 %.3e "
              "(%s)%s" % (dtype, method, step_pair.rel_to(ps, w0, dw_st64), same_sel(ps), mark))
        del opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dion", default=os.environ.get("STRATA_DION_PATH"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    step_pair.add_strata_args(ap)
    args = ap.parse_args()
    if not args.dion or not os.path.isfile(os.path.join(args.dion, "dion", "dion2.py")):
        print("SKIP: no Dion checkout (--dion or STRATA_DION_PATH)")
        return 77
    step_pair.use_build(args.build)
    sys.path.insert(0, args.dion)
    import torch
    import strata.torch as st
    from dion.dion2 import Dion2

    def eager(f):
        for _ in range(8):
            g = getattr(f, "_torchdynamo_orig_callable", None) or getattr(f, "__wrapped__", None)
            if g is None:
                return f
            f = g
        return f
    for modname in ("dion.dion2", "dion.megabatch_base", "dion.polar_express",
                    "dion.newton_schulz_triton"):
        mod = importlib.import_module(modname)
        for k, v in list(vars(mod).items()):
            if callable(v) and (hasattr(v, "_torchdynamo_orig_callable") or
                                hasattr(v, "__wrapped__")):
                setattr(mod, k, eager(v))

    torch.set_num_threads(args.threads)
    shapes, w0, grads = step_pair.matrix_set(torch, args.layers)

    def make(side):
        ps = [torch.nn.Parameter(w.clone()) for w in w0]
        if side == "strata":
            opt = st.Dion2([(f"m{i}", p) for i, p in enumerate(ps)],
                           **step_pair.strata_threads(args.threads, args.parallel),
                           ns_method=args.ns_method, ns_dtype=args.ns_dtype)
        else:
            opt = Dion2(ps)
        return ps, opt

    def step(ps, opt, k):
        for p, g in zip(ps, grads[k % len(grads)]):
            p.grad = g
        opt.step()

    # Same work: one step from the same state.
    sides = {s: make(s) for s in ("strata", "reference")}
    for s in sides:
        step(*sides[s], 0)
    print("set: %d matrices (%d layers of 4 x 768x768, 768x3072, 3072x768), %d thread(s) "
          "(strata: %s), strata ns_method %s ns_dtype %s" % (
              len(shapes), args.layers, args.threads, args.parallel, args.ns_method,
              args.ns_dtype))
    print("same work: step 1 update relative error %.3e (reference in bfloat16, its own "
          "Polar Express)" % step_pair.update_error(sides, w0))

    accuracy(args, torch, st, Dion2, w0, grads[0], sides)

    for s in sides:  # warm-up
        step(*sides[s], 1)

    def set_grads(ps, k):
        for p, g in zip(ps, grads[k % len(grads)]):
            p.grad = g
    step_pair.race(sides, set_grads, args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
