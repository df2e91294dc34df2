#!/usr/bin/env python3
"""Float64 reference test for NorMuon (optim/normuon.c).

Usage: test_normuon_reference.py PATH/TO/optim_driver

The reference below is written from the formulas of include/strata/optim.h
("NorMuon"), which follow Li et al., "NorMuon" (arXiv 2510.05491) and the
reference code pytorch-optimizer 4.1.0 (pytorch_optimizer/optimizer/muon/
normuon.py), in numpy float64, independently of optim/. Newton-Schulz is the
float64 standard iteration of test_muon_ns_reference.py (ns_ref: quintic and
Polar Express); a Gram run of the C code is compared with it too (the same
iteration in exact arithmetic).

Metric: per-step relative error of the weight update with teacher forcing
(the weight-decay term at the C weights), max over 20 steps
(test_muon_ns_reference.trajectory_error), with the driver wrapper and report
of test_optim_reference.py.
Shapes: square, wide, tall, below (aspect 1.5) and above (aspect 4) the Gram
threshold (2), a stack of matrices; both update scales, the adjusted lr,
Polar Express, weight decay, lr_scale, no Nesterov, beta2 = 0, zero
gradients.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_optim_reference import Driver, Report, f32, fro, gaussian_grads, rng_for, \
    STEPS  # noqa: E402
from test_muon_ns_reference import ns_ref, trajectory_error  # noqa: E402

TOL_NORMUON = 1e-5       # standard Newton-Schulz, per-step update (measured <= 2.6e-6)
TOL_NORMUON_GRAM = 2e-5  # Gram Newton-Schulz vs float64 standard (measured <= 5.2e-6)


class NorMuonRef:
    """Per matrix of a batch x rows x cols stack (optim.h "NorMuon"):
    B = mu B + (1-mu) G;  G' = nesterov ? (1-mu) G + mu B : B;  X = NS(G');
    o = ||X||_F;  v_i = b2 v_i + (1-b2) mean_j X_ij^2;  X_ij /= sqrt(v_i) + eps;
    preserve_norm: X *= o / (||X|| + eps), lr_eff = lr r (r = use_adjusted_lr ?
    0.2 sqrt(max(m, n)) : sqrt(max(1, m/n))); match_rms: X *= 0.2 sqrt(m n) /
    (||X|| + eps), lr_eff = lr. Returns D = (lr_eff / lr) X, so that
    dW = -lr (D + wd W)."""

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.mu, self.b2, self.eps = f32(cfg["momentum"]), f32(cfg["beta2"]), f32(cfg["eps"])
        self.batch, self.rows, self.cols = shape
        self.B = np.zeros(shape)
        self.v = np.zeros((self.batch, self.rows, 1))

    def direction(self, t, g):
        c, mu = self.cfg, self.mu
        self.B = mu * self.B + (1.0 - mu) * g
        gp = (1.0 - mu) * g + mu * self.B if c["nesterov"] else self.B
        m, n = self.rows, self.cols
        out = np.zeros_like(gp)
        for i in range(self.batch):
            x = ns_ref(gp[i], c["ns_steps"], c["ns_schedule"])
            o = fro(x)
            self.v[i] = self.b2 * self.v[i] + (1.0 - self.b2) * np.mean(x * x, axis=1,
                                                                           keepdims=True)
            x = x / (np.sqrt(self.v[i]) + self.eps)
            if c["update_scale"] == "preserve_norm":
                x = x * (o / (fro(x) + self.eps))
                ratio = 0.2 * np.sqrt(max(m, n)) if c["use_adjusted_lr"] else \
                    np.sqrt(max(1.0, m / n))
            else:
                x = x * (0.2 * np.sqrt(m * n) / (fro(x) + self.eps))
                ratio = 1.0
            out[i] = ratio * x
        return out


BASE = dict(lr=0.02, momentum=0.95, beta2=0.95, weight_decay=0.0, nesterov=True, ns_steps=5,
            update_scale="preserve_norm", use_adjusted_lr=False, eps=1e-10,
            ns_schedule="quintic", ns_method="standard")


def case(drv, rep, name, shape, over=None, grads=None, tol=TOL_NORMUON, lr_scale=1.0,
         expect_method=None):
    if len(shape) == 2:
        shape = (1,) + tuple(shape)
    batch, rows, cols = shape
    cfg = dict(BASE)
    cfg.update(over or {})
    if grads is None:
        grads = gaussian_grads(rng_for(name), shape)
    w0 = (0.01 * rng_for(name + "/w0").standard_normal(shape)).astype(np.float32)
    steps = len(grads)
    drv_cfg = dict(cfg, rows=rows, cols=cols, batch=batch, steps=steps, lr_scale=lr_scale)
    data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads])
    rc, out, stats, err = drv.run("normuon", drv_cfg, data, steps * batch * rows * cols)
    if rc != 0 or out is None:
        rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
        return
    wc = out.reshape(steps, batch, rows, cols)
    worst, worst_t = trajectory_error(cfg, shape, grads, w0, wc, lr_scale, ref_cls=NorMuonRef)
    used = (stats or {}).get("ns_method", "?")
    rep.line(name, worst, tol, note="step %d, NS %s" % (worst_t, used))
    if expect_method:
        rep.check(name + " [method]", used == expect_method, "AUTO picked %s" % used)
    if stats is not None:
        rep.check(name + " [no leak]", stats.get("bytes_in_use_after", -1) == 0,
                  "backend bytes after destroy %s" % stats.get("bytes_in_use_after"))


def defaults_case(drv, rep):
    """The C defaults are the reference's (pytorch-optimizer NorMuon.__init__)."""
    got, err = drv.defaults()
    m = (got or {}).get("normuon", {})
    want = dict(lr=f32(0.02), momentum=f32(0.95), beta2=f32(0.95), weight_decay=0.0,
                nesterov=True, ns_steps=5, update_scale=0, use_adjusted_lr=False,
                eps=f32(1e-10), ns_schedule=0, ns_method=1)
    bad = ["%s=%s (want %s)" % (k, m.get(k), v) for k, v in want.items()
           if not (k in m and (m[k] == v or (isinstance(v, float) and
                                              abs(m[k] - v) <= 1e-7 * abs(v))))]
    rep.check("normuon_config_defaults", got is not None and not bad,
              "; ".join(bad) or err or "the reference's names and defaults")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="strata_normuon_") as tmp:
        drv = Driver(os.path.abspath(sys.argv[1]), tmp)
        print("tolerances: NorMuon %.0e (standard NS), %.0e (Gram NS), per-step update" % (
            TOL_NORMUON, TOL_NORMUON_GRAM))
        defaults_case(drv, rep)
        case(drv, rep, "normuon_16x16_defaults", (16, 16))
        case(drv, rep, "normuon_12x18_wide_below_gram_auto", (12, 18), dict(ns_method="auto"),
             expect_method="standard")
        case(drv, rep, "normuon_8x32_wide_above_gram_auto", (8, 32), dict(ns_method="auto"),
             tol=TOL_NORMUON_GRAM, expect_method="gram")
        case(drv, rep, "normuon_8x32_wide_standard", (8, 32))
        case(drv, rep, "normuon_32x8_tall_above_gram_auto", (32, 8), dict(ns_method="auto"),
             tol=TOL_NORMUON_GRAM, expect_method="gram")
        case(drv, rep, "normuon_24x6_tall_standard", (24, 6))
        case(drv, rep, "normuon_18x12_tall_below_gram_auto", (18, 12), dict(ns_method="auto"),
             expect_method="standard")
        case(drv, rep, "normuon_16x16_gram_forced", (16, 16), dict(ns_method="gram"),
             tol=TOL_NORMUON_GRAM)
        case(drv, rep, "normuon_16x24_polar_express", (16, 24), dict(ns_schedule="polar_express"))
        case(drv, rep, "normuon_10x40_polar_express_gram", (10, 40),
             dict(ns_schedule="polar_express", ns_method="auto"), tol=TOL_NORMUON_GRAM)
        case(drv, rep, "normuon_24x12_match_rms", (24, 12), dict(update_scale="match_rms"))
        case(drv, rep, "normuon_10x30_adjusted_lr", (10, 30), dict(use_adjusted_lr=True))
        case(drv, rep, "normuon_20x10_adjusted_lr_tall", (20, 10), dict(use_adjusted_lr=True))
        case(drv, rep, "normuon_12x12_wd_lrscale0.5", (12, 12), dict(weight_decay=0.1),
             lr_scale=0.5)
        case(drv, rep, "normuon_8x8_no_nesterov_momentum0", (8, 8),
             dict(nesterov=False, momentum=0.0))
        case(drv, rep, "normuon_12x20_beta2_0_ns3", (12, 20), dict(beta2=0.0, ns_steps=3))
        case(drv, rep, "normuon_3x8x12_stack", (3, 8, 12))
        case(drv, rep, "normuon_2x16x6_stack_match_rms", (2, 16, 6),
             dict(update_scale="match_rms"))
        case(drv, rep, "normuon_1x32", (1, 32))
        case(drv, rep, "normuon_8x8_zero_grads_wd", (8, 8), dict(lr=0.1, weight_decay=0.5),
             grads=[np.zeros((1, 8, 8), np.float32)] * STEPS)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
