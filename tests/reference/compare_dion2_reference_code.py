#!/usr/bin/env python3
"""strata's Dion2 (optim/dion2.c, through optim_driver) against the reference
code itself: dion/dion2.py of Microsoft's Dion repository, taken by path.

Usage: compare_dion2_reference_code.py PATH/TO/optim_driver
Environment: STRATA_DION_PATH, the root of a Dion checkout (the folder holding
dion/dion2.py); absent: exit 77 (skipped). The repository is never vendored:
CI has no copy and relies on test_dion2_reference.py (float64, independent).
Needs torch; when this interpreter has none and STRATA_PYTHON names another,
the script re-runs under it (exit 77 when neither has torch).

How the reference runs here, on the CPU, in one process: Dion2(params,
distributed_mesh=None) is its single-process path (world size 1, no process
group: no collective, no DTensor); TORCH_COMPILE_DISABLE=1 runs its
torch.compile'd functions eagerly (no inductor, no C++ compiler needed); no
triton and no CUDA are used (use_triton=False and triton_post_ortho=False,
the defaults). Same W0 and gradients, one parameter per case, 8 steps; per
step the reference starts from strata's weights (teacher forcing: M does not
depend on W), and the metric is the relative error of the weight update,
||dW_strata - dW_ref||_F / ||dW_ref||_F, max over the steps.

Two modes:
  exact   the reference's Dion2 step with (a) its newton_schulz_func argument
          set to a float32 torch implementation of strata's standard
          Newton-Schulz (the schedule of the case, coefficients from
          ns_coefficients.py) and (b) its bfloat16 cast of the selected
          submatrix made a float32 cast (the module's `torch.bfloat16` looked
          up through a stand-in module that answers float32). What remains is
          the reference's own code: momentum, L1 top-k selection, error
          feedback, gather/scatter, adjust_lr, weight decay. Tolerance 2e-5
          (standard), 5e-5 (strata Gram against the reference's standard).
  as-is   the reference untouched (bfloat16 submatrix, its bfloat16 Polar
          Express with its own coefficients, epsilon 1e-8) against strata's
          defaults (float32, the Polar Express paper's coefficients): the
          difference is the precision and the polynomial, reported, with a
          loose bound (0.25) that still catches a wrong selection (~1) or a
          missing shape scale (>= 0.4 on the wide and tall cases). Measured
          on one 16 x 64 Gaussian matrix: the reference's bfloat16 Polar
          Express vs the same polynomial in float32 0.082, its polynomial vs
          the paper's (float32) 0.124, both 0.146 (after 5 steps both leave
          the singular values in about [0.86, 1.14], differently).
Prints one line per case and the maximum error of each mode; exit 0 when all
pass, 1 otherwise, 77 skipped.
"""

import json
import os
import subprocess
import sys
import tempfile
import types
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TOL_EXACT = 2e-5
TOL_EXACT_GRAM = 5e-5
TOL_AS_IS = 0.25
STEPS = 8


class Driver:
    """optim_driver MODE CONFIG IN OUT (as test_optim_reference.Driver, which
    needs scipy; the torch interpreter may not have it)."""

    def __init__(self, path, tmp):
        self.path, self.tmp, self.count = path, tmp, 0

    def run(self, mode, cfg, data, out_count):
        self.count += 1
        base = os.path.join(self.tmp, "c%04d" % self.count)
        with open(base + ".json", "w") as f:
            json.dump(cfg, f)
        np.ascontiguousarray(data, dtype="<f4").tofile(base + ".in")
        proc = subprocess.run([self.path, mode, base + ".json", base + ".in", base + ".out"],
                              capture_output=True, text=True, timeout=120)
        out = None
        if proc.returncode == 0 and os.path.exists(base + ".out"):
            out = np.fromfile(base + ".out", dtype="<f4")
            if out.size != out_count:
                out = None
        stats = None
        if proc.returncode == 0 and proc.stdout.strip():
            stats = json.loads(proc.stdout.strip().splitlines()[-1])
        return proc.returncode, out, stats, proc.stderr


def rng_for(name):
    return np.random.default_rng([20240611, zlib.crc32(name.encode())])


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def ensure_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    other = os.environ.get("STRATA_PYTHON")
    if other and os.path.abspath(other) != os.path.abspath(sys.executable) and \
            not os.environ.get("STRATA_DION_REEXEC"):
        os.environ["STRATA_DION_REEXEC"] = "1"
        os.execv(other, [other] + sys.argv)
    skip("torch is not importable (set STRATA_PYTHON to a Python with torch)")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    root = os.environ.get("STRATA_DION_PATH")
    if not root or not os.path.isfile(os.path.join(root, "dion", "dion2.py")):
        skip("STRATA_DION_PATH does not name a Dion checkout (dion/dion2.py)")
    ensure_torch()
    import torch
    sys.path.insert(0, root)
    import importlib
    import dion.dion2 as ref_mod
    from dion.dion2 import Dion2

    # Eager: every torch.compile'd function of the reference replaced by the
    # function it wraps (torch 2.15 refuses fullgraph=True under
    # TORCH_COMPILE_DISABLE; the eager functions are the same code).
    def eager(f):
        for _ in range(8):
            g = getattr(f, "_torchdynamo_orig_callable", None) or getattr(f, "__wrapped__", None)
            if g is None:
                return f
            f = g
        return f
    for modname in ("dion.dion2", "dion.megabatch_base", "dion.polar_express",
                    "dion.newton_schulz_triton", "dion.opt_utils"):
        mod = importlib.import_module(modname)
        for k, v in list(vars(mod).items()):
            if callable(v) and (hasattr(v, "_torchdynamo_orig_callable") or
                                hasattr(v, "__wrapped__")):
                setattr(mod, k, eager(v))
    from ns_coefficients import PE, QUINTIC  # noqa: E402

    def schedule(name, steps):  # as test_muon_ns_reference.schedule (no scipy here)
        if name == "polar_express":
            return [PE[min(t, len(PE) - 1)] for t in range(steps)], 1.01
        return [QUINTIC] * steps, 1.0

    torch.set_num_threads(1)

    def strata_ns(sched, steps):
        coeffs, s = schedule(sched, steps)

        def ns(x, epsilon=None):
            x = x.to(torch.float32)
            tall = x.size(-2) > x.size(-1)
            if tall:
                x = x.mT
            n = x.norm(dim=(-2, -1), keepdim=True)
            x = torch.where(n > 0, x / (s * n), torch.zeros_like(x))
            for a, b, c in coeffs:
                am = x @ x.mT
                x = a * x + (b * am + c * (am @ am)) @ x
            return x.mT if tall else x
        return ns

    class Float32Torch(types.ModuleType):
        """The real torch, except bfloat16 means float32."""

        def __init__(self):
            super().__init__("torch")

        def __getattr__(self, name):
            return torch.float32 if name == "bfloat16" else getattr(torch, name)

    def run_ref(mode, shape, cfg, w0, grads, wc):
        """The reference's updates from strata's weights, step by step."""
        p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        kw = dict(lr=cfg["lr"], fraction=cfg["fraction"], ef_decay=cfg["ef_decay"],
                  weight_decay=cfg["weight_decay"], adjust_lr=cfg["ref_adjust_lr"])
        if mode == "exact":
            kw["newton_schulz_func"] = strata_ns(cfg["ns_schedule"], cfg["ns_steps"])
        opt = Dion2([p], **kw)
        saved = ref_mod.torch
        if mode == "exact":
            ref_mod.torch = Float32Torch()
        try:
            worst, worst_t = 0.0, 0
            prev = w0.astype(np.float64)
            for t in range(len(grads)):
                with torch.no_grad():
                    p.copy_(torch.from_numpy(prev.astype(np.float32)))
                p.grad = torch.from_numpy(grads[t].copy())
                opt.step()
                d_ref = p.detach().numpy().astype(np.float64) - prev
                d_c = wc[t].astype(np.float64) - prev
                e = np.linalg.norm(d_c - d_ref) / max(np.linalg.norm(d_ref), 1e-30)
                if e > worst or not np.isfinite(e):
                    worst, worst_t = e, t + 1
                prev = wc[t].astype(np.float64)
        finally:
            ref_mod.torch = saved
        return worst, worst_t

    adjust = {"spectral_norm": "spectral_norm", "rms_norm": "rms_norm", "none": None}
    cases = [
        # name, shape, overrides, strata ns_method
        ("square_64", (64, 64), {}, "standard"),
        ("wide_32x96_rows", (32, 96), {}, "standard"),
        ("tall_96x32_cols", (96, 32), {}, "standard"),
        ("square_48_f0.75_below_gram", (48, 48), dict(fraction=0.75), "auto"),
        ("square_64_gram_above", (64, 64), {}, "auto"),
        ("tall_80x40_gram_above", (80, 40), {}, "auto"),
        ("wide_24x72_rms_norm_quintic", (24, 72),
         dict(adjust_lr="rms_norm", ns_schedule="quintic"), "standard"),
        ("square_32_none_f0.5_wd0.1", (32, 32),
         dict(adjust_lr="none", fraction=0.5, weight_decay=0.1), "standard"),
        ("stack_3x16x40", (3, 16, 40), {}, "standard"),
    ]
    base = dict(lr=0.01, fraction=0.25, ef_decay=0.95, weight_decay=0.01,
                adjust_lr="spectral_norm", ns_steps=5, ns_schedule="polar_express")
    failed = []
    worst_mode = {"exact": 0.0, "as-is": 0.0}
    print("tolerances: exact %.0e (standard NS), %.0e (strata Gram), as-is %.1g; "
          "per-step update, %d steps" % (TOL_EXACT, TOL_EXACT_GRAM, TOL_AS_IS, STEPS))
    with tempfile.TemporaryDirectory(prefix="strata_dion2_ref_") as tmp:
        drv = Driver(os.path.abspath(sys.argv[1]), tmp)
        for name, shape, over, method in cases:
            cfg = dict(base)
            cfg.update(over)
            cfg["ref_adjust_lr"] = adjust[cfg["adjust_lr"]]
            full = shape if len(shape) == 3 else (1,) + shape
            rng = rng_for("dion2_ref/" + name)
            w0 = (0.02 * rng.standard_normal(shape)).astype(np.float32)
            grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(STEPS)]
            for mode in ("exact", "as-is"):
                if mode == "as-is" and (cfg["ns_schedule"] != "polar_express" or
                                        method != "standard"):
                    continue  # the reference's default NS is Polar Express, standard
                drv_cfg = {k: v for k, v in cfg.items() if k != "ref_adjust_lr"}
                drv_cfg.update(rows=full[1], cols=full[2], batch=full[0], steps=STEPS,
                               lr_scale=1.0, ns_method=method)
                data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads])
                rc, out, stats, err = drv.run("dion2", drv_cfg, data, STEPS * w0.size)
                if rc != 0 or out is None:
                    failed.append(name)
                    print("%-44s FAIL driver rc=%d: %s" % (name, rc, err.strip()))
                    continue
                wc = out.reshape((STEPS,) + shape)
                worst, t = run_ref(mode, shape, cfg, w0, grads, wc)
                used = (stats or {}).get("ns_method", "?")
                tol = TOL_AS_IS if mode == "as-is" else \
                    (TOL_EXACT_GRAM if used == "gram" else TOL_EXACT)
                ok = worst <= tol
                worst_mode[mode] = max(worst_mode[mode], worst)
                if not ok:
                    failed.append("%s/%s" % (name, mode))
                print("%-34s %-6s max_rel_err %.3e  tol %.2g  %s  step %d, strata NS %s" % (
                    name, mode, worst, tol, "PASS" if ok else "FAIL", t, used))
    print("max error: exact %.3e, as-is %.3e" % (worst_mode["exact"], worst_mode["as-is"]))
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    print("all cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
