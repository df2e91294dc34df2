#!/usr/bin/env python3
"""Float64 reference test for Dion2 (optim/dion2.c).

Usage: test_dion2_reference.py PATH/TO/optim_driver

The reference below is written from the formulas of include/strata/optim.h
("Dion2"), which follow Ahn et al., "Dion2" (arXiv 2512.16928) and the
reference code dion/dion2.py of Microsoft's Dion repository, in numpy
float64, independently of optim/. Newton-Schulz is the float64 standard
iteration of test_muon_ns_reference.py (ns_ref: quintic and Polar Express);
Gram runs of the C code are compared with it too (the same iteration in
exact arithmetic).

Per matrix: M += G; the slices are the rows when m <= n, else the columns;
k = the smallest k >= 1 with float32(k / num) >= fraction; the k largest L1
norms are selected (ties to the lower index); S = M[sel]; M[sel] *= ef_decay;
O = NS(S); the update is lr_eff O scattered into the selected slices, plus
decoupled weight decay lr wd W on every entry.

Metric: per-step relative error of the weight update with teacher forcing
(the weight-decay term at the C weights), max over 20 steps
(test_muon_ns_reference.trajectory_error). The selection itself is also
checked: the slices the C step moved beyond weight decay must be the
reference's (an exact check, reported as a separate line).
Shapes: square, wide (rows selected), tall (columns selected), the
submatrix below and above the Gram threshold (aspect 2; fraction 0.25 of a
square matrix is aspect 4), stacks, fraction 1 (every slice: Muon without
Nesterov), ef_decay 0 and 1, every adjust_lr, weight decay, lr_scale, zero
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

# standard Newton-Schulz, per-step update: float32 products through the
# build's sgemm (measured max 7.5e-6 with OpenBLAS, 1.05e-5 with BLIS)
TOL_DION2 = 2e-5
TOL_DION2_GRAM = 2e-5  # Gram Newton-Schulz vs float64 standard


def selected_count(fraction, num):
    f = np.float32(fraction)
    for k in range(1, num + 1):
        if np.float32(k / num) >= f:
            return k
    return num


class Dion2Ref:
    """dW = -lr (D + wd W) with D = ratio * P, P = NS(M[sel]) in the selected
    slices, zero elsewhere (optim.h "Dion2")."""

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.batch, self.rows, self.cols = shape
        self.M = np.zeros(shape)
        self.ef = f32(cfg["ef_decay"])
        self.sel_rows = self.rows <= self.cols
        self.num = self.rows if self.sel_rows else self.cols
        self.k = selected_count(cfg["fraction"], self.num)
        self.last_sel = []

    def ratio(self):
        m, n = self.rows, self.cols
        a = self.cfg["adjust_lr"]
        if a == "rms_norm":
            return 0.2 * np.sqrt(max(m, n))
        if a == "none":
            return 1.0
        return np.sqrt(m / n)

    def direction(self, t, g):
        c = self.cfg
        self.M = self.M + g
        out = np.zeros_like(self.M)
        self.last_sel = []
        for b in range(self.batch):
            mb = self.M[b] if self.sel_rows else self.M[b].T  # slices are rows of mb
            norms = np.abs(mb).sum(axis=1)
            # stable sort of -norm: ties keep index order
            order = np.argsort(-norms, kind="stable")
            sel = np.sort(order[:self.k])
            self.last_sel.append(sel)
            s = mb[sel, :].copy()
            mb[sel, :] *= self.ef  # mb is a view of M[b]: the error feedback
            o = ns_ref(s if self.sel_rows else s.T, c["ns_steps"], c["ns_schedule"])
            p = np.zeros_like(mb)
            p[sel, :] = o if self.sel_rows else o.T
            out[b] = p if self.sel_rows else p.T
        return self.ratio() * out


BASE = dict(lr=0.01, fraction=0.25, ef_decay=0.95, weight_decay=0.01,
            adjust_lr="spectral_norm", ns_steps=5, ns_schedule="polar_express",
            ns_method="standard")


def moved_slices(cfg, prev, cur, sel_rows, lr, wd):
    """Per matrix, the slices the C step moved beyond weight decay."""
    decayed = prev - lr * wd * prev
    diff = np.abs(cur - decayed)
    out = []
    for b in range(cur.shape[0]):
        d = diff[b] if sel_rows else diff[b].T
        tol = 1e-6 * max(1e-30, float(np.max(np.abs(prev[b])))) + 1e-12
        out.append(np.nonzero(d.max(axis=1) > tol)[0])
    return out


def case(drv, rep, name, shape, over=None, grads=None, tol=TOL_DION2, lr_scale=1.0,
         expect_method=None, check_selection=True):
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
    rc, out, stats, err = drv.run("dion2", drv_cfg, data, steps * batch * rows * cols)
    if rc != 0 or out is None:
        rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
        return
    wc = out.reshape(steps, batch, rows, cols)
    worst, worst_t = trajectory_error(cfg, shape, grads, w0, wc, lr_scale, ref_cls=Dion2Ref)
    used = (stats or {}).get("ns_method", "?")
    ref = Dion2Ref(cfg, shape)
    rep.line(name, worst, tol, note="step %d, k %d of %d, NS %s" % (worst_t, ref.k, ref.num,
                                                                      used))
    if expect_method:
        rep.check(name + " [method]", used == expect_method, "AUTO picked %s" % used)
    if check_selection:
        # The C step's moved slices against the reference's selection, step by step
        # (the reference fed the same gradients; zero gradients select nothing visible).
        lr = float(np.float32(cfg["lr"]) * np.float32(lr_scale))
        wd = f32(cfg["weight_decay"])
        prev = w0.astype(np.float64)
        bad = []
        for t in range(steps):
            ref.direction(t + 1, grads[t].astype(np.float64))
            cur = wc[t].astype(np.float64)
            got = moved_slices(cfg, prev, cur, ref.sel_rows, lr, wd)
            for b in range(batch):
                if not np.array_equal(got[b], ref.last_sel[b]):
                    bad.append("t%d b%d" % (t + 1, b))
            prev = cur
        rep.check(name + " [selection]", not bad,
                  "selected slices differ at " + ", ".join(bad[:4]) if bad else
                  "the C step moved exactly the reference's %d slices each step" % ref.k)
    if stats is not None:
        rep.check(name + " [no leak]", stats.get("bytes_in_use_after", -1) == 0,
                  "backend bytes after destroy %s" % stats.get("bytes_in_use_after"))


def defaults_case(drv, rep):
    """The C defaults are the reference's (dion/dion2.py Dion2.__init__)."""
    got, err = drv.defaults()
    m = (got or {}).get("dion2", {})
    want = dict(lr=f32(0.01), fraction=0.25, ef_decay=f32(0.95), weight_decay=f32(0.01),
                adjust_lr=0, ns_steps=5, ns_schedule=1, ns_method=1)
    bad = ["%s=%s (want %s)" % (k, m.get(k), v) for k, v in want.items()
           if not (k in m and (m[k] == v or (isinstance(v, float) and
                                              abs(m[k] - v) <= 1e-7 * abs(v))))]
    rep.check("dion2_config_defaults", got is not None and not bad,
              "; ".join(bad) or err or "the reference's names and defaults")


def count_case(rep):
    """The selected count: ceil(fraction num) up to fraction's float rounding."""
    want = {(0.25, 16): 4, (0.25, 7): 2, (0.1, 10): 1, (0.3, 10): 3, (1.0, 5): 5,
            (0.01, 8): 1, (0.5, 3): 2}
    bad = ["%s -> %d" % (k, selected_count(*k)) for k, v in want.items()
           if selected_count(*k) != v]
    rep.check("dion2_selected_count_rule", not bad, "; ".join(bad) or "k as optim.h states")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="strata_dion2_") as tmp:
        drv = Driver(os.path.abspath(sys.argv[1]), tmp)
        print("tolerances: Dion2 %.0e (standard NS), %.0e (Gram NS), per-step update" % (
            TOL_DION2, TOL_DION2_GRAM))
        defaults_case(drv, rep)
        count_case(rep)
        # square: 4 of 16 rows, the 4 x 16 submatrix is above the Gram threshold
        case(drv, rep, "dion2_16x16_defaults", (16, 16))
        case(drv, rep, "dion2_16x16_gram_auto", (16, 16), dict(ns_method="auto"),
             tol=TOL_DION2_GRAM, expect_method="gram")
        # fraction 0.75 of 12 rows: 9 x 12 is below the threshold
        case(drv, rep, "dion2_12x12_f0.75_below_gram_auto", (12, 12),
             dict(fraction=0.75, ns_method="auto"), expect_method="standard")
        case(drv, rep, "dion2_8x32_wide", (8, 32), dict(fraction=0.5))
        case(drv, rep, "dion2_32x8_tall_columns", (32, 8), dict(fraction=0.5))
        case(drv, rep, "dion2_40x10_tall_gram_auto", (40, 10), dict(ns_method="auto"),
             tol=TOL_DION2_GRAM, expect_method="gram")
        case(drv, rep, "dion2_15x12_tall_f0.75_below_gram_auto", (15, 12),
             dict(fraction=0.75, ns_method="auto"), expect_method="standard")
        case(drv, rep, "dion2_12x20_quintic", (12, 20), dict(ns_schedule="quintic"))
        case(drv, rep, "dion2_10x30_rms_norm", (10, 30), dict(adjust_lr="rms_norm"))
        case(drv, rep, "dion2_20x10_none", (20, 10), dict(adjust_lr="none", fraction=0.3))
        case(drv, rep, "dion2_12x12_fraction1", (12, 12), dict(fraction=1.0))
        case(drv, rep, "dion2_12x16_ef0", (12, 16), dict(ef_decay=0.0))
        case(drv, rep, "dion2_12x16_ef1", (12, 16), dict(ef_decay=1.0))
        case(drv, rep, "dion2_12x12_wd_lrscale0.5", (12, 12), dict(weight_decay=0.1),
             lr_scale=0.5)
        case(drv, rep, "dion2_3x8x12_stack", (3, 8, 12))
        case(drv, rep, "dion2_2x16x6_stack_tall", (2, 16, 6), dict(fraction=0.5))
        case(drv, rep, "dion2_1x32", (1, 32))
        case(drv, rep, "dion2_8x8_zero_grads_wd", (8, 8), dict(lr=0.1, weight_decay=0.5),
             grads=[np.zeros((1, 8, 8), np.float32)] * STEPS, check_selection=False)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
