#!/usr/bin/env python3
"""Float64 reference test for Muon's completeness and Newton-Schulz variants:
Gram Newton-Schulz, the Polar Express schedule, batching, scale-invariant
normalization, the four update-scale rules, flattened and stacked 3-D
parameters, sum and EMA momentum, Nesterov on/off.

Usage: test_muon_ns_reference.py PATH/TO/optim_driver

The references are written from include/strata/optim.h ("Muon",
"Newton-Schulz") in numpy float64, independently of optim/. The Polar Express
coefficients are copied here from the paper (Amsel et al., arXiv 2505.16932,
Algorithm 1), not read from the C code. Gram Newton-Schulz is the same
iteration as the standard one in exact arithmetic, so every Gram result is
compared with the float64 *standard* iteration.

Metrics: Newton-Schulz outputs, ||C - ref||_F / ||ref||_F; Muon trajectories,
the per-step relative error of the weight update with teacher forcing (the
weight-decay term at the C weights), as in test_optim_reference.py, whose
driver wrapper and report format this file reuses.

Inputs: Gaussian matrices; the Gram cases use aspect ratios >= 2 (where AUTO
picks Gram) and squares with a fixed restart. Gram NS in float32 multiplies
rounding errors by up to max |Q| (tens to hundreds, see optim.h), so on
inputs with tiny singular values (rank-deficient gradients) it is less
accurate than the standard iteration; those cases are printed as INFO with
the measured error and gated only on finiteness and a loose bound.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_optim_reference as base  # noqa: E402  (driver wrapper, report, data)

from test_optim_reference import Driver, Report, f32, fro, gaussian_grads, lowrank_grads, \
    rng_for, STEPS  # noqa: E402

TOL_NS = 1e-5      # NS output vs float64 (one float32 run of ~15 products)
TOL_MUON = 1e-5    # Muon trajectories, per-step update
TOL_DIRECTION = 1e-5  # sum vs EMA momentum: same direction up to rounding

from ns_coefficients import PE, QUINTIC  # noqa: E402,F401  (the papers' schedules)


def schedule(name, steps):
    if name == "polar_express":
        return [PE[min(t, len(PE) - 1)] for t in range(steps)], 1.01
    return [QUINTIC] * steps, 1.0


def ns_ref(x, steps=5, sched="quintic"):
    """Standard Newton-Schulz in float64 (optim.h): X = G / (s ||G||_F), G = 0
    gives 0; work on X^T when tall; A = X X^T; X = a X + (b A + c A A) X."""
    coeffs, s = schedule(sched, steps)
    x = np.array(x, dtype=np.float64)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    n = fro(x)
    if n == 0:
        return np.zeros_like(x.T if tall else x)
    x = x / (s * n)
    for a, b, c in coeffs:
        am = x @ x.T
        x = a * x + (b * am + c * (am @ am)) @ x
    return x.T if tall else x


def muon_scale(rule, rows, cols):
    if rule == "adamw_rms":
        return 0.2 * np.sqrt(max(rows, cols))
    if rule == "spectral":
        return np.sqrt(rows / cols)
    if rule == "none":
        return 1.0
    return np.sqrt(max(1.0, rows / cols))


class MuonRef:
    """Per matrix of a batch x rows x cols stack (optim.h "Muon"):
    SUM: B = mu B + G, G' = nesterov ? G + mu B : B;
    EMA: B = mu B + (1-mu) G, G' = nesterov ? (1-mu) G + mu B : B;
    D = scale(rows, cols) NS(G')."""

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.mu = f32(cfg["momentum"])
        self.batch, self.rows, self.cols = shape
        self.B = np.zeros(shape)
        self.scale = muon_scale(cfg["scale"], self.rows, self.cols)

    def direction(self, t, g):
        mu, ema = self.mu, self.cfg["momentum_form"] == "ema"
        gw = (1.0 - mu) if ema else 1.0
        self.B = mu * self.B + gw * g
        gp = gw * g + mu * self.B if self.cfg["nesterov"] else self.B
        return np.stack([self.scale * ns_ref(gp[i], self.cfg["ns_steps"], self.cfg["ns_schedule"])
                         for i in range(self.batch)])


MUON_BASE = dict(lr=0.02, momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0,
                 scale="shape", momentum_form="sum", ns_schedule="quintic",
                 ns_method="standard")


def run_muon(drv, cfg, shape, grads, w0, lr_scale=1.0):
    """Runs the C Muon; returns (weights per step (steps, batch, rows, cols) or
    None, stats, stderr)."""
    batch, rows, cols = shape
    steps = len(grads)
    drv_cfg = dict(cfg, rows=rows, cols=cols, batch=batch, steps=steps, lr_scale=lr_scale)
    data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads])
    rc, out, stats, err = drv.run("muon", drv_cfg, data, steps * batch * rows * cols)
    if rc != 0 or out is None:
        return None, stats, "rc=%d: %s" % (rc, err.strip())
    return out.reshape(steps, batch, rows, cols), stats, ""


def trajectory_error(cfg, shape, grads, w0, wc, lr_scale=1.0, wd_scaled=False, ref_cls=None):
    """max_t ||dW_C - dW_ref|| / ||dW_ref|| with teacher forcing. wd_scaled: the
    wrong rule lr * scale * wd (a negative control). ref_cls: the reference
    (MuonRef; NorMuon's test passes its own)."""
    ref = (ref_cls or MuonRef)(cfg, shape)
    lr = float(np.float32(cfg["lr"]) * np.float32(lr_scale))
    wd = f32(cfg["weight_decay"])
    if wd_scaled:
        wd *= ref.scale
    prev = w0.astype(np.float64)
    worst, worst_t = 0.0, 0
    for t in range(1, len(grads) + 1):
        d_ref = -lr * (ref.direction(t, grads[t - 1].astype(np.float64)) + wd * prev)
        cur = wc[t - 1].astype(np.float64)
        nref = fro(d_ref)
        e = fro(cur - prev - d_ref) / nref if nref > 0 else fro(cur - prev)
        if e > worst or not np.isfinite(e):
            worst, worst_t = e, t
        prev = cur
    return worst, worst_t


def muon_case(drv, rep, name, shape, over=None, grads=None, w_scale=0.01, tol=TOL_MUON,
              lr_scale=1.0, note="", expect_method=None):
    """A >= 20-step trajectory against the float64 reference; returns the C
    weights (or None)."""
    if len(shape) == 2:
        shape = (1,) + tuple(shape)
    cfg = dict(MUON_BASE)
    cfg.update(over or {})
    if grads is None:
        grads = gaussian_grads(rng_for(name), shape)
    w0 = (w_scale * rng_for(name + "/w0").standard_normal(shape)).astype(np.float32)
    wc, stats, err = run_muon(drv, cfg, shape, grads, w0, lr_scale)
    if wc is None:
        rep.check(name, False, "driver " + err)
        return None, None, None
    worst, t = trajectory_error(cfg, shape, grads, w0, wc, lr_scale)
    used = stats.get("ns_method", "?") if stats else "?"
    rep.line(name, worst, tol, note="step %d, NS %s%s" % (t, used, "; " + note if note else ""))
    if expect_method:
        rep.check(name + " [method]", used == expect_method, "AUTO picked %s" % used)
    return wc, grads, w0


# ---------------------------------------------------------------------------
# Newton-Schulz cases


def run_ns(drv, x, **cfg):
    """C strata_ns_run on x (rows x cols, or batch x rows x cols)."""
    x = np.asarray(x, np.float32)
    batch = x.shape[0] if x.ndim == 3 else 1
    rows, cols = x.shape[-2:]
    rc, out, stats, err = drv.run("ns", dict(cfg, rows=rows, cols=cols, batch=batch), x, x.size)
    if rc != 0 or out is None:
        return None, None, err.strip()
    return out.reshape(x.shape), stats, ""


def ns_cases(drv, rep):
    rng = rng_for("muon_ns/gram")
    # Gram NS (fp32) against the float64 standard iteration and against the C
    # standard iteration, both schedules; aspect ratio >= 2 in both
    # orientations, and squares (Gram forced) with the default restart.
    shapes = [(32, 128), (128, 32), (16, 128), (64, 256), (256, 64), (100, 300), (5, 20),
              (20, 5), (1, 32), (32, 1), (256, 1024), (64, 64), (96, 96)]
    for sched in ("quintic", "polar_express"):
        for shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32)
            name = "gram_ns_%s_%dx%d" % (sched, shape[0], shape[1])
            g, st_g, err = run_ns(drv, x, method="gram", schedule=sched)
            s, _, err2 = run_ns(drv, x, method="standard", schedule=sched)
            if g is None or s is None:
                rep.check(name, False, "driver failed: " + (err or err2))
                continue
            ref = ns_ref(x, 5, sched)
            rep.line(name + " [vs f64 standard]", fro(g - ref) / fro(ref), TOL_NS,
                     note="restart mask %s" % st_g.get("restart_mask"))
            rep.line(name + " [vs fp32 standard]", fro(g - s) / fro(s), TOL_NS)
            if sched == "polar_express" or shape in ((64, 256), (256, 1024)):
                rep.line("ns_standard_%s_%dx%d [vs f64]" % (sched, shape[0], shape[1]),
                         fro(s - ref) / fro(ref), TOL_NS)

    # NS(G^T) = NS(G)^T: a tall input is transposed into the same iteration,
    # so the equality is exact, for every method and schedule.
    rng = rng_for("muon_ns/transpose")
    for sched in ("quintic", "polar_express"):
        for method in ("standard", "gram"):
            for shape in ((24, 6), (7, 40), (33, 33), (1, 17)):
                x = rng.standard_normal(shape).astype(np.float32)
                a, _, _ = run_ns(drv, x, method=method, schedule=sched)
                b, _, _ = run_ns(drv, np.ascontiguousarray(x.T), method=method, schedule=sched)
                name = "ns_transpose_%s_%s_%dx%d" % (sched, method, shape[0], shape[1])
                if a is None or b is None:
                    rep.check(name, False, "driver failed")
                elif shape[0] == shape[1]:
                    # Square: both orientations iterate directly, each within
                    # TOL_NS of float64, so their difference within 2 TOL_NS.
                    rep.line(name, fro(a - b.T) / fro(a), 2 * TOL_NS,
                             note="square: two fp32 runs")
                else:
                    rep.check(name, np.array_equal(a, b.T),
                              "NS(G^T) == NS(G)^T bitwise")

    # Polar Express beyond the table (t >= 7 repeats the last polynomial) and
    # the default restart placement at other step counts.
    rng = rng_for("muon_ns/pe_steps")
    for steps, method, shape in ((3, "standard", (40, 30)), (8, "standard", (30, 50)),
                                 (10, "standard", (48, 48)), (8, "gram", (20, 60)),
                                 (10, "gram", (64, 16)), (1, "gram", (8, 24)),
                                 (0, "gram", (8, 24))):
        x = rng.standard_normal(shape).astype(np.float32)
        out, st, err = run_ns(drv, x, method=method, schedule="polar_express", steps=steps)
        name = "ns_polar_express_steps%d_%s_%dx%d" % (steps, method, shape[0], shape[1])
        if out is None:
            rep.check(name, False, err)
            continue
        ref = ns_ref(x, steps, "polar_express")
        rep.line(name, fro(out - ref) / fro(ref), TOL_NS,
                 note="restart mask %s" % st.get("restart_mask"))
    # Polar Express reaches the polar factor: singular values near 1 after 8.
    x = rng.standard_normal((32, 64)).astype(np.float32)
    out, _, _ = run_ns(drv, x, method="standard", schedule="polar_express", steps=8)
    if out is not None:
        sv = np.linalg.svd(out.astype(np.float64), compute_uv=False)
        rep.check("ns_polar_express_steps8_singular_values",
                  bool(np.all(np.abs(sv - 1) < 0.02)), "%.4f..%.4f" % (sv.min(), sv.max()))

    # Scale invariance: NS(c G) == NS(G). Exact for powers of two (no additive
    # epsilon, float64 norm); for other c up to the rounding of c G itself.
    rng = rng_for("muon_ns/scale")
    for method in ("standard", "gram"):
        x = rng.standard_normal((12, 40)).astype(np.float32)
        base_out, _, _ = run_ns(drv, x, method=method)
        for c in (2.0 ** -100, 2.0 ** -60, 2.0 ** 100):
            out, _, _ = run_ns(drv, x * np.float32(c), method=method)
            ok = out is not None and np.array_equal(out, base_out)
            rep.check("ns_scale_invariant_%s_c=2^%d" % (method, int(np.log2(c))), ok,
                      "bitwise equal to NS(G)" if ok else "differs")
        for c in (1e-30, 1e-20, 1e-3, 1e3, 1e30):
            xc = (x * np.float64(c)).astype(np.float32)
            out, _, _ = run_ns(drv, xc, method=method)
            name = "ns_scale_invariant_%s_c=%g" % (method, c)
            if out is None:
                rep.check(name, False, "driver failed")
                continue
            ref = ns_ref(x, 5)
            rep.line(name, fro(out - ref) / fro(ref), TOL_NS, note="vs float64 NS(G)")
        # Subnormal scale: float32 keeps ~10 bits; the output stays finite and
        # orthogonal-ish (informational error).
        xc = (x * np.float64(1e-42)).astype(np.float32)
        out, _, _ = run_ns(drv, xc, method=method)
        ok = out is not None and bool(np.all(np.isfinite(out)))
        rep.check("ns_subnormal_input_%s_finite" % method, ok,
                  "err vs NS(G) %.1e (float32 subnormals carry few bits)" % (
                      fro(out - ns_ref(x, 5)) / fro(ns_ref(x, 5))) if ok else "non-finite")

    # Zero gives exactly zero, for every method, alone and inside a batch.
    for method in ("standard", "gram"):
        for shape in ((6, 4), (4, 16), (1, 8)):
            out, _, err = run_ns(drv, np.zeros(shape, np.float32), method=method)
            rep.check("ns_zero_%s_%dx%d" % (method, shape[0], shape[1]),
                      out is not None and bool(np.all(out == 0)) and
                      not np.any(np.signbit(out)), err or "exactly +0")

    # Batches: every matrix normalized and orthogonalized on its own, equal
    # bitwise to separate calls; matrices of very different scales, one zero.
    rng = rng_for("muon_ns/batch")
    for method, shape, threads in (("standard", (16, 24), 1), ("gram", (16, 48), 1),
                                   ("gram", (48, 16), 1), ("auto", (8, 32), 1),
                                   ("standard", (20, 20), 2), ("gram", (10, 40), 3)):
        xs = rng.standard_normal((5,) + shape)
        xs = (xs * np.array([1e-3, 1.0, 1e3, 0.0, 1e-30])[:, None, None]).astype(np.float32)
        out, _, err = run_ns(drv, xs, method=method, batch_threads=threads)
        name = "ns_batch5_%s_%dx%d_threads%d" % (method, shape[0], shape[1], threads)
        if out is None:
            rep.check(name, False, err)
            continue
        singles = [run_ns(drv, xs[i], method=method)[0] for i in range(5)]
        rep.check(name + " [== one by one]",
                  all(s is not None and np.array_equal(out[i], s) for i, s in enumerate(singles)),
                  "bitwise")
        worst = max(fro(out[i] - ns_ref(xs[i])) / fro(ns_ref(xs[i])) for i in (0, 1, 2, 4))
        rep.line(name + " [vs f64 per matrix]", worst, TOL_NS)
        rep.check(name + " [zero matrix stays 0]", bool(np.all(out[3] == 0)))

    # Informational: Gram on rank-deficient input (tiny singular values), where
    # float32 error grows with max |Q| (optim.h). Gated on a loose bound.
    for rank, shape, mask in ((1, (24, 6), 0), (2, (6, 20), 0), (1, (64, 256), 0),
                              (1, (64, 256), 0x14)):
        _, _, g = lowrank_grads(rng_for("muon_ns/lowrank%d_%dx%d" % (rank, *shape)), shape, rank,
                                isotropic=True)
        x = g[0] + np.float32(0.95) * g[1]  # a float32 sum: rounding noise off the range
        out, st, _ = run_ns(drv, x, method="gram", gram_restart_mask=mask)
        sout, _, _ = run_ns(drv, x, method="standard")
        ref = ns_ref(x.astype(np.float64))
        e, es = fro(out - ref) / fro(ref), fro(sout - ref) / fro(ref)
        rep.line("ns_gram_rank%d_%dx%d_mask%s (info)" % (rank, shape[0], shape[1],
                                                         st.get("restart_mask")),
                 e, 1e-3, note="standard NS: %.1e" % es)


# ---------------------------------------------------------------------------
# bfloat16 Newton-Schulz (ns dtype bf16, optim.h strata_ns_config.dtype)


def bf16(x):
    """x rounded to bfloat16 (8 significant bits, nearest, ties to even) in
    float64: frexp's mantissa in [0.5, 1) times 2^8 is rounded by rint (ties
    to even), then scaled back. No overflow or subnormals in these inputs."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.rint(m * 256.0), e - 8)


def ns_ref_bf16(x, steps=5, sched="quintic"):
    """ns_ref with every product's operands rounded to bfloat16 and the
    products exact (float64), the Gram matrix rounded once it is formed
    (optim/newton_schulz.c round_gram_bf16): A = bf(bf(X) bf(X)^T);
    B = a I + b A + c A A (the a I shift unrounded); X = bf(B) bf(X)."""
    coeffs, s = schedule(sched, steps)
    x = np.array(x, dtype=np.float64)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (s * fro(x))
    for a, b, c in coeffs:
        xb = bf16(x)
        ab = bf16(xb @ xb.T)
        bm = b * ab + c * (ab @ ab) + a * np.eye(ab.shape[0])
        x = bf16(bm) @ xb
    return x.T if tall else x


# bf16 against the bf16-emulating float64 iteration (standard method): the
# same roundings, except where a float32 intermediate and its float64
# counterpart fall on opposite sides of a bfloat16 rounding boundary (then
# that operand element differs by one bfloat16 ulp, 2^-8 relative, about
# 2^-8 / sqrt(entries) on the result per flip); measured 3.8e-8..5.8e-8
# here (no flip), the bound allows a few dozen. The Polar Express cases are
# emulated over their first iteration only: its early polynomials multiply
# the small singular values by ~4 per iteration, and with the Gram matrix
# rounded once formed (b A and c A A both see bf(A)) one flipped element of
# A at iteration 1 moves the 5-step result by 8e-3..1.1e-2 (measured on the
# 40 x 100 case, which has such a flip at iteration 2: 1.2e-3 after 2
# steps, 1.1e-2 after 5; 8.6e-8 after 1). Against float64 NS with no
# rounding (what the float32 iteration meets at ~1e-6): the bfloat16 operand
# rounding itself, measured 1.2e-2..1.5e-2 (standard) and 2.1e-2..2.7e-2
# (Gram) (1.7e-2..2.9e-2 and 3.2e-2..3.6e-2 before the Gram matrix was
# rounded once formed), the size of the reference codes' own bfloat16
# iterations' error (bench/peers/normuon_step.py's accuracy lines: on a
# GPT-2-small layer's NorMuon update pytorch_optimizer's bfloat16 step is
# 9.6e-3 from float64, strata's bf16 standard 8.5e-3).
TOL_NS_BF16_EMUL = 1e-3
TOL_NS_BF16_F64 = 6e-2


def ns_bf16_cases(drv, rep):
    rng = rng_for("muon_ns/bf16")
    for method, sched, shape in (("standard", "quintic", (48, 48)),
                                 ("standard", "quintic", (24, 96)),
                                 ("standard", "quintic", (96, 24)),
                                 ("standard", "polar_express", (40, 100)),
                                 ("gram", "quintic", (24, 96)),
                                 ("gram", "polar_express", (130, 40))):
        x = rng.standard_normal(shape).astype(np.float32)
        name = "ns_bf16_%s_%s_%dx%d" % (method, sched, shape[0], shape[1])
        out, _, err = run_ns(drv, x, method=method, schedule=sched, dtype="bf16")
        f32out, _, _ = run_ns(drv, x, method=method, schedule=sched)
        if out is None or f32out is None:
            rep.check(name, False, "driver failed: " + err)
            continue
        ref = ns_ref(x, 5, sched)
        if method == "standard":
            # Polar Express: over its first iteration (see TOL_NS_BF16_EMUL).
            esteps = 5 if sched == "quintic" else 1
            eout = out if esteps == 5 else run_ns(drv, x, method=method, schedule=sched,
                                                  dtype="bf16", steps=esteps)[0]
            emul = ns_ref_bf16(x, esteps, sched)
            rep.line(name + " [vs f64 bf16-emulated, %d step%s]" % (esteps, "s"[:esteps > 1]),
                     fro(eout - emul) / fro(emul) if eout is not None else float("inf"),
                     TOL_NS_BF16_EMUL)
        rep.line(name + " [vs f64]", fro(out - ref) / fro(ref), TOL_NS_BF16_F64,
                 note="f32 NS: %.1e" % (fro(f32out - ref) / fro(ref)))
        rep.check(name + " [differs from f32]", not np.array_equal(out, f32out),
                  "the dtype reaches the products")
    # bf16 Gram with Polar Express on a low-rank input (rank 2 plus 1e-4 noise):
    # its p x p iteration runs in float32 (optim.h); all in bfloat16 it
    # diverged there (output norm 1e2-1e6 x the standard iteration's). Its
    # output stays within 10% of the bf16 standard iteration's norm and no
    # farther from float64 than 1.25x the standard's distance.
    for shape in ((40, 130), (130, 40)):
        a = rng.standard_normal((shape[0], 2)) @ rng.standard_normal((2, shape[1]))
        x = (a + 1e-4 * rng.standard_normal(shape)).astype(np.float32)
        name = "ns_bf16_gram_polar_express_low_rank_%dx%d" % shape
        g, _, err = run_ns(drv, x, method="gram", schedule="polar_express", dtype="bf16")
        sd, _, _ = run_ns(drv, x, method="standard", schedule="polar_express", dtype="bf16")
        if g is None or sd is None:
            rep.check(name, False, "driver failed: " + err)
            continue
        ref = ns_ref(x, 5, "polar_express")
        ratio = fro(g) / fro(sd)
        eg, es = fro(g - ref) / fro(ref), fro(sd - ref) / fro(ref)
        rep.check(name, 0.9 <= ratio <= 1.1 and eg <= 1.25 * es,
                  "norm / standard's %.3f, vs f64 %.2e (standard %.2e)" % (ratio, eg, es))
    # The zero matrix stays exactly zero; bf16 is refused nowhere on the CPU.
    out, _, err = run_ns(drv, np.zeros((8, 16), np.float32), dtype="bf16")
    rep.check("ns_bf16_zero_8x16", out is not None and bool(np.all(out == 0)), err or "exact 0")


def bf16_selfcheck(rep):
    """The float64 rounding against hand-worked values: ties go to even."""
    vals = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20,
                     -3.0 - 2.0 ** -7, 0.1])
    want = np.array([1.0, 1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7, -3.0,
                     0.10009765625])
    rep.check("selfcheck_bf16_rounding", np.array_equal(bf16(vals), want),
              "nearest, ties to even")


# ---------------------------------------------------------------------------
# Muon cases


def muon_cases(drv, rep):
    # The four scale rules, tall and wide (each rule differs from the others
    # on these shapes: 24x6 gives 2, 0.98, 2, 1; 6x24 gives 1, 0.98, 0.5, 1).
    for rule in ("shape", "adamw_rms", "spectral", "none"):
        for shape in ((24, 6), (6, 24)):
            muon_case(drv, rep, "muon_scale_%s_%dx%d" % (rule, *shape), shape,
                      dict(scale=rule))

    # Weight decay with the unadjusted learning rate: W -= lr wd W. Large W
    # and wd make the wrong rule (lr * scale * wd) visible; a negative control
    # checks that it would fail.
    name = "muon_wd_unadjusted_lr_spectral_24x6"
    cfg = dict(MUON_BASE, scale="spectral", weight_decay=0.5, lr=0.05)
    wc, grads, w0 = muon_case(drv, rep, name, (24, 6), dict(cfg), w_scale=1.0)
    if wc is not None:
        wrong, _ = trajectory_error(cfg, (1, 24, 6), grads, w0, wc, wd_scaled=True)
        rep.check(name + " [lr*scale*wd rejected]", wrong > 100 * TOL_MUON,
                  "error against the wrong rule %.2e" % wrong)

    # More than two dimensions, flattened (dim0, rest): a (12, 2, 3) parameter
    # is a 12 x 6 matrix, scale sqrt(12/6) from the flattened shape.
    g = gaussian_grads(rng_for("muon_flat3d"), (12, 2, 3))
    muon_case(drv, rep, "muon_flattened_3d_12x2x3_as_12x6", (12, 6), dict(scale="shape"),
              grads=[x.reshape(12, 6) for x in g])
    g = gaussian_grads(rng_for("muon_flat4d"), (8, 4, 3, 3))
    muon_case(drv, rep, "muon_flattened_4d_8x4x3x3_as_8x36_spectral", (8, 36),
              dict(scale="spectral"), grads=[x.reshape(8, 36) for x in g])

    # Stacked 3-D: batch independent matrices, each its own normalization and
    # scale; scales of the slices differ by 1e6 and one slice is always zero.
    for shape, over in (((3, 8, 16), {}), ((3, 16, 8), dict(scale="adamw_rms")),
                        ((4, 12, 12), dict(momentum_form="ema", nesterov=False,
                                           ns_batch_threads=2)),
                        ((3, 8, 32), dict(ns_method="gram", scale="spectral"))):
        name = "muon_stacked_%dx%dx%d" % shape + ("_" + "_".join(
            "%s=%s" % kv for kv in over.items()) if over else "")
        mult = np.array([1e-3, 1e3, 0.0, 1.0][:shape[0]])[:, None, None]
        grads = [(x * mult).astype(np.float32)
                 for x in gaussian_grads(rng_for(name), shape)]
        wc, _, w0 = muon_case(drv, rep, name, shape, over, grads=grads)
        if wc is not None:
            # A flattened (one matrix) treatment would move every slice by the
            # same global normalization: the 1e-3 slice would hardly move.
            moved = [fro(wc[-1][i] - w0[i]) for i in range(shape[0])]
            rep.check(name + " [slices independent]",
                      moved[0] > 0.5 * moved[1] and moved[2] == 0.0,
                      "slice update norms %s" % ", ".join("%.3g" % m for m in moved))

    # Momentum forms and Nesterov. EMA and SUM give the same direction: with
    # the same data their C updates agree to rounding (wd = 0).
    for nesterov in (True, False):
        for shape in ((16, 16), (10, 30)):
            runs = {}
            for form in ("sum", "ema"):  # same gradients; W0 differs, wd = 0
                name = "muon_%s_nesterov_%s_%dx%d" % (form, "on" if nesterov else "off", *shape)
                grads = gaussian_grads(rng_for("muon_forms_%dx%d" % shape), shape)
                wc, _, w0 = muon_case(drv, rep, name, shape,
                                      dict(momentum_form=form, nesterov=nesterov), grads=grads)
                runs[form] = (wc, w0)
            (ws, w0s), (we, w0e) = runs["sum"], runs["ema"]
            if ws is not None and we is not None:
                ds = np.diff(np.concatenate([w0s[None], ws]).astype(np.float64), axis=0)
                de = np.diff(np.concatenate([w0e[None], we]).astype(np.float64), axis=0)
                err = max(fro(ds[t] - de[t]) / fro(ds[t]) for t in range(len(ds)))
                rep.line("muon_sum_vs_ema_same_direction_nesterov_%s_%dx%d" % (
                    "on" if nesterov else "off", *shape), err, TOL_DIRECTION,
                    note="C sum vs C ema updates")

    # Schedules and methods inside Muon (Gaussian, full rank).
    muon_case(drv, rep, "muon_polar_express_16x40", (16, 40), dict(ns_schedule="polar_express"))
    muon_case(drv, rep, "muon_polar_express_gram_40x16", (40, 16),
              dict(ns_schedule="polar_express", ns_method="gram"))
    muon_case(drv, rep, "muon_gram_32x128", (32, 128), dict(ns_method="gram"))
    muon_case(drv, rep, "muon_gram_128x32_adamw_rms_wd", (128, 32),
              dict(ns_method="gram", scale="adamw_rms", weight_decay=0.1))
    muon_case(drv, rep, "muon_auto_24x64_is_gram", (24, 64), dict(ns_method="auto"),
              expect_method="gram")
    muon_case(drv, rep, "muon_auto_32x48_is_standard", (32, 48), dict(ns_method="auto"),
              expect_method="standard")
    muon_case(drv, rep, "muon_ema_polar_express_ns8_20x20", (20, 20),
              dict(momentum_form="ema", ns_schedule="polar_express", ns_steps=8))

    # Tiny gradients: Muon is scale-invariant in G (momentum is linear, NS
    # normalizes), so G * 2^-100 gives bitwise the weights of G.
    shape = (1, 12, 20)
    grads = gaussian_grads(rng_for("muon_tiny"), shape)
    w0 = (0.01 * rng_for("muon_tiny/w0").standard_normal(shape)).astype(np.float32)
    for method in ("standard", "gram"):
        cfg = dict(MUON_BASE, ns_method=method, weight_decay=0.01)
        w1, _, e1 = run_muon(drv, cfg, shape, grads, w0)
        w2, _, e2 = run_muon(drv, cfg, shape, [g * np.float32(2.0 ** -100) for g in grads], w0)
        w3, _, e3 = run_muon(drv, cfg, shape, [(g * 1e-30).astype(np.float32) for g in grads], w0)
        ok = w1 is not None and w2 is not None and np.array_equal(w1, w2)
        rep.check("muon_tiny_grads_2^-100_bitwise_%s" % method, ok, e1 or e2 or "bitwise equal")
        if w1 is not None and w3 is not None:
            err, _ = trajectory_error(cfg, shape, grads, w0, w3)
            rep.line("muon_tiny_grads_1e-30_%s" % method, err, TOL_MUON,
                     note="vs float64 Muon of the unscaled gradients")

    # Zero gradients: no orthogonalized update at all; without weight decay the
    # weights stay bitwise, with it they follow W (1 - lr wd).
    shape = (1, 8, 8)
    zeros = [np.zeros(shape, np.float32)] * STEPS
    w0 = (0.1 * rng_for("muon_zero/w0").standard_normal(shape)).astype(np.float32)
    for method in ("standard", "gram"):
        w, _, err = run_muon(drv, dict(MUON_BASE, ns_method=method), shape, zeros, w0)
        rep.check("muon_zero_grads_no_wd_%s" % method,
                  w is not None and all(np.array_equal(x, w0) for x in w), err or "bitwise W0")
    muon_case(drv, rep, "muon_zero_grads_wd_gram", (8, 8), dict(ns_method="gram", lr=0.1,
                                                               weight_decay=0.5), grads=zeros)


def defaults_case(drv, rep):
    got, err = drv.defaults()
    m = (got or {}).get("muon", {})
    want = dict(scale=0, momentum_form=0, ns_schedule=0, ns_method=1, ns_steps=5,
                ns_gram_min_aspect=2.0, ns_gram_restarts=1, ns_gram_restart_mask=0,
                nesterov=True)
    bad = ["%s=%s (want %s)" % (k, m.get(k), v) for k, v in want.items() if m.get(k) != v]
    rep.check("muon_config_defaults", got is not None and not bad, "; ".join(bad) or err or
              "sum momentum, shape scale, quintic, standard NS")


def selfchecks(rep):
    """The references against closed forms (no C)."""
    rng = rng_for("muon_ns/selfcheck")
    # Polar Express with 8+ steps converges to the polar factor.
    x = rng.standard_normal((10, 25))
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    rep.line("selfcheck_polar_express_12_steps_is_polar", fro(ns_ref(x, 12, "polar_express") -
                                                              u @ vt) / fro(u @ vt), 1e-6)
    # EMA momentum is (1 - mu) times SUM momentum: same NS output.
    cfg = dict(MUON_BASE)
    r1 = MuonRef(dict(cfg, momentum_form="sum"), (1, 6, 9))
    r2 = MuonRef(dict(cfg, momentum_form="ema"), (1, 6, 9))
    worst = 0.0
    for t in range(1, 6):
        g = rng.standard_normal((1, 6, 9))
        d1, d2 = r1.direction(t, g), r2.direction(t, g)
        worst = max(worst, fro(d1 - d2) / fro(d1))
    rep.line("selfcheck_sum_ema_same_direction_f64", worst, 1e-12)
    # A float64 emulation of Gram NS equals the standard iteration.
    x = rng.standard_normal((8, 30))
    y = x / fro(x)
    r, q = y @ y.T, np.eye(8)
    for a, b, c in [QUINTIC] * 5:
        p = a * np.eye(8) + b * r + c * r @ r
        q, r = q @ p, p @ r @ p
    rep.line("selfcheck_gram_equals_standard_f64", fro(q @ y - ns_ref(x)) / fro(ns_ref(x)), 1e-12)


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = Report()
    import tempfile
    with tempfile.TemporaryDirectory(prefix="strata_muon_ns_") as tmp:
        drv = Driver(os.path.abspath(sys.argv[1]), tmp)
        print("tolerances: NS %.0e, Muon %.0e (per-step update), sum vs EMA direction %.0e" % (
            TOL_NS, TOL_MUON, TOL_DIRECTION))
        selfchecks(rep)
        defaults_case(drv, rep)
        ns_cases(drv, rep)
        bf16_selfcheck(rep)
        ns_bf16_cases(drv, rep)
        muon_cases(drv, rep)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    assert base.STEPS >= 20
    sys.exit(main())
