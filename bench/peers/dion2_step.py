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
<= 5.1e-6 with the precision and the polynomial matched).

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

    for s in sides:  # warm-up
        step(*sides[s], 1)

    def set_grads(ps, k):
        for p, g in zip(ps, grads[k % len(grads)]):
            p.grad = g
    step_pair.race(sides, set_grads, args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
