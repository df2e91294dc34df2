#!/usr/bin/env python3
"""Float64 reference tests for the eigh-free inverse roots (issue 23, item 4):
strata_inv_root_ex with method NEWTON (the coupled Newton iteration of Guo &
Higham 2006) and AUTO, and Shampoo with root_method newton.

Usage: test_inv_root_newton.py PATH/TO/optim_driver

Reference: numpy's float64 eigh of the same float32 matrix, symmetrized,
    root = V diag((max(lambda, 0) + eps_eff)^(-1/p)) V^T,
written here independently of the C code (neither its eigh path nor its
Newton iteration). Metric: ||C - ref||_F / ||ref||_F.

Tolerances (largest measured on this machine, OpenBLAS 0.3.21, in parentheses):
  cond <= 1e4, any scale:          2e-7  (2.7e-8: one float32 rounding)
  cond 1e6:                         1e-5  (2.7e-8; a residual of 1e-6, the
                                           acceptance bound, allows a relative
                                           root error of ~1e-6 / p)
  rank-deficient + eps_rel:        1e-4  (2.0e-5: float32 roundoff leaves null-space
                                           eigenvalues of either sign, which eigh
                                           clamps at 0 and Newton shifts by eps_eff)
  eps_eff from the estimated lambda_max: 1e-6 relative (3e-16, 64 power iterations)
  float32 through the CPU backend, cond 1e2: 5e-6 (7.6e-7: float32 iterates)
The fallback is exercised twice: a cap of 1 iteration, and an indefinite
matrix (a negative eigenvalue beyond eps: the iteration diverges); both must
return eigh's root bit for bit, with info.fallback = 1.
Shampoo: newton roots against the float64 Shampoo reference of
test_optim_reference.py at its tolerance (1e-4), and the newton and eigh C
trajectories within 1e-4 of each other per step (metric: the per-step
relative weight-update error of test_optim_reference.py); a rank-deficient
run falls back on every root (counted) and equals eigh's run exactly.
Shampoo with root_method newton_f32 (the float32 iteration on the driver's CPU
backend): the same three checks at eps_rel 1e-4 (p = 4, and p = 2 on L), its
rank-1 run at epsilon 1e-12 refused by the float32 residual check on every
root (eigh's run exactly, every fallback counted), and its refusals
(pseudo-inverse, exponent 1/3) named.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_optim_reference as T  # noqa: E402  (Driver, Report, Shampoo reference)

SENTINEL = np.float32(12345.0)
AUTO_MIN_DIM = 2048  # STRATA_ROOT_AUTO_MIN_DIM


def root_ref(a32, p, eps=0.0, eps_rel=0.0):
    a = a32.astype(np.float64)
    a = 0.5 * (a + a.T)
    lam, v = np.linalg.eigh(a)
    eps_eff = max(eps, eps_rel * max(lam.max(), 0.0))
    d = (np.maximum(lam, 0.0) + eps_eff) ** (-1.0 / p)
    return (v * d) @ v.T, eps_eff


def spd_with_spectrum(rng, lam):
    n = len(lam)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = (q * lam) @ q.T
    return (0.5 * (a + a.T)).astype(np.float32)


def rel(x, ref):
    return float(np.linalg.norm(x.astype(np.float64) - ref) / np.linalg.norm(ref))


def run_root(drv, a32, p, **cfg):
    n = a32.shape[0]
    return drv.run("inv_root", dict(n=n, p=float(p), **cfg), a32, n * n)


def root_cases(drv, rep):
    rng = T.rng_for("inv_root_newton")

    def case(name, a32, p, tol, eps=0.0, eps_rel=0.0, expect_newton=True, **extra):
        n = a32.shape[0]
        rc, out, st, err = run_root(drv, a32, p, eps=eps, eps_rel=eps_rel, method="newton",
                                    **extra)
        if rc != 0 or out is None or st is None:
            rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            return None
        ref, eps_eff = root_ref(a32, p, eps, eps_rel)
        e = rel(out.reshape(n, n), ref)
        note = "iters %d residual %.1e method %d fallback %d" % (
            st["newton_iters"], st["residual"], st["method"], st["fallback"])
        rep.line(name, e, tol, note=note)
        if expect_newton:
            rep.check(name + " [newton used]", st["method"] == 1 and st["fallback"] == 0 and
                      st["newton_iters"] > 0 and 0 <= st["residual"] <= 1e-6, note)
        out_m = out.reshape(n, n)
        rep.check(name + " [symmetric]", bool(np.array_equal(out_m, out_m.T)), "")
        return st

    # Well-conditioned: cond 1e3, p = 2 and 4, two sizes.
    for n in (24, 96):
        a = spd_with_spectrum(rng, np.geomspace(1e-3, 1.0, n) * 7.0)
        for p in (2, 4):
            case("newton_cond1e3_n%d_p%d" % (n, p), a, p, 2e-7, eps=1e-9)
    # Ill-conditioned: cond 1e6, and a scale far from 1 (factor sums grow).
    for p in (2, 4):
        a = spd_with_spectrum(rng, np.geomspace(1e-6, 1.0, 64))
        case("newton_cond1e6_n64_p%d" % p, a, p, 1e-5, eps=1e-12)
        a = spd_with_spectrum(rng, np.geomspace(1e-4, 1.0, 40) * 3e5)
        case("newton_cond1e4_scale3e5_n40_p%d" % p, a, p, 2e-7)
    # Rank-deficient PSD factor regularized by eps_rel (lambda_max estimated).
    g = rng.standard_normal((48, 6))
    a = (g @ g.T).astype(np.float32)
    for p in (2, 4):
        st = case("newton_rank6_n48_epsrel1e-4_p%d" % p, a, p, 1e-4, eps_rel=1e-4)
        if st is not None:
            _, eps_eff = root_ref(a, p, 0.0, 1e-4)
            e = abs(st["eps_eff"] - eps_eff) / eps_eff
            rep.line("newton_rank6_n48_epsrel1e-4_p%d [eps_eff]" % p, e, 1e-6,
                     note="estimate %.9g exact %.9g" % (st["eps_eff"], eps_eff))

    # float32 through the CPU backend (strata_inv_root_newton_f32): accurate to
    # float32 iteration rounding on well-conditioned factors; a cond-1e6 factor
    # misses STRATA_ROOT_F32_RESIDUAL_TOL and falls back to the float64 root.
    for n, p in ((24, 2), (24, 4), (96, 4)):
        a = spd_with_spectrum(rng, np.geomspace(1e-2, 1.0, n) * 3.0)
        rc, out, st, err = run_root(drv, a, p, eps=1e-9, method="newton32")
        name = "newton32_cond1e2_n%d_p%d" % (n, p)
        if rc != 0 or st is None:
            rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            continue
        ref, _ = root_ref(a, p, 1e-9)
        rep.line(name, rel(out.reshape(n, n), ref), 5e-6,
                 note="iters %d residual %.1e fallback %d" % (
                     st["newton_iters"], st["residual"], st["fallback"]))
        rep.check(name + " [newton used]", st["method"] == 1 and st["fallback"] == 0, "")
    a = spd_with_spectrum(rng, np.geomspace(1e-6, 1.0, 48))
    rc, out, st, err = run_root(drv, a, 4, eps=1e-12, method="newton32")
    rc_e, out_e, st_e, err_e = run_root(drv, a, 4, eps=1e-12, method="eigh")
    # The float32 path's fallback rebuilds the float64 factor from its float32
    # input: bit for bit eigh's root on x86-64; where the compiler contracts
    # a*b+c into an FMA (aarch64's default) the factor differs in its last
    # bits, and at condition 1e6 the eigendecomposition carries that to about
    # 1e-16 x 1e6 relative (measured 1.9e-11 under qemu-aarch64): 1e-9.
    same = rc == 0 and rc_e == 0 and st is not None and out.shape == out_e.shape
    diff = float(np.max(np.abs(out - out_e)) / max(np.max(np.abs(out_e)), 1e-300)) if same else 1.0
    rep.check("newton32_cond1e6_falls_back_to_eigh", same and st["fallback"] == 1 and
              st["method"] == 0 and diff <= 1e-9,
              "%s rel diff to eigh %.1e %s" % (st, diff, err.strip()))

    # Fallbacks: must return eigh's root exactly, and say so.
    def fallback(name, a32, p, **extra):
        n = a32.shape[0]
        rc_e, out_e, st_e, err_e = run_root(drv, a32, p, method="eigh", **extra)
        extra_n = dict(extra)
        rc, out, st, err = run_root(drv, a32, p, method="newton", **extra_n)
        ok = (rc == 0 and rc_e == 0 and st is not None and st["fallback"] == 1 and
              st["method"] == 0 and np.array_equal(out, out_e))
        rep.check(name, ok, "rc %d/%d stats %s %s" % (rc, rc_e, st, err.strip()))

    a = spd_with_spectrum(rng, np.geomspace(1e-3, 1.0, 32))
    fallback("newton_fallback_cap1_n32_p4", a, 4, eps=1e-9, newton_max_iter=1)
    fallback("newton_fallback_cap1_n32_p2", a, 2, eps=1e-9, newton_max_iter=1)
    lam = np.linspace(-0.5, 1.0, 20)
    fallback("newton_fallback_indefinite_n20_p4", spd_with_spectrum(rng, lam), 4, eps=1e-3)

    # AUTO below STRATA_ROOT_AUTO_MIN_DIM is eigh; pseudo-inverse with AUTO is eigh.
    rc, out, st, err = run_root(drv, a, 4, eps=1e-9, method="auto")
    rep.check("auto_n32_is_eigh", rc == 0 and st is not None and st["method"] == 0 and
              st["fallback"] == 0 and st["newton_iters"] == 0, "%s %s" % (st, err.strip()))
    rc, out, st, err = run_root(drv, a, 4, mode="pseudo", method="auto")
    rep.check("auto_pseudo_is_eigh", rc == 0 and st is not None and st["method"] == 0,
              "%s %s" % (st, err.strip()))
    # Refusals: NEWTON without a supported exponent or mode; non-finite input.
    rc, out, st, err = run_root(drv, a, 3, eps=1e-9, method="newton")
    rep.check("newton_p3_refused", rc != 0 and "NEWTON" in err, err.strip())
    rc, out, st, err = run_root(drv, a, 4, mode="pseudo", method="newton")
    rep.check("newton_pseudo_refused", rc != 0 and "NEWTON" in err, err.strip())
    # Edges: n = 1 (M_0 = I: no iteration), a zero factor with eps > 0 (the
    # root is eps^(-1/4) I), and with eps = 0 (no spectral bound: Newton is
    # rejected, eigh fails too, the error says both and `out` is untouched).
    for method in ("newton", "newton32"):
        one = np.array([[4.0]], np.float32)
        rc, out, st, err = run_root(drv, one, 4, method=method)
        rep.check("%s_n1" % method, rc == 0 and st is not None and st["method"] == 1 and
                  abs(float(out[0]) - 4.0 ** -0.25) <= 1e-7, "%s %s" % (out, err.strip()))
        z = np.zeros((5, 5), np.float32)
        rc, out, st, err = run_root(drv, z, 4, eps=1e-6, method=method)
        ok = rc == 0 and st is not None and st["method"] == 1 and np.allclose(
            out.reshape(5, 5), 1e-6 ** -0.25 * np.eye(5), rtol=1e-6, atol=0)
        rep.check("%s_zero_eps1e-6" % method, ok, "%s %s" % (st, err.strip()))
    rc, out, st, err = run_root(drv, np.zeros((5, 5), np.float32), 4, method="newton")
    rep.check("newton_zero_eps0_refused", rc != 0 and out is not None and
              bool(np.all(out == SENTINEL)) and "newton rejected" in err, err.strip())
    bad = a.copy()
    bad[3, 5] = np.nan
    rc, out, st, err = run_root(drv, bad, 4, eps=1e-9, method="newton")
    rep.check("newton_nan_refused", rc != 0 and out is not None and
              bool(np.all(out == SENTINEL)), err.strip())


def shampoo_config_cases(drv, rep):
    # shampoo_config_check refuses what NEWTON cannot compute.
    g = T.gaussian_grads(T.rng_for("shampoo_newton_cfg"), (6, 4), steps=2)
    data = np.concatenate([np.zeros(24, np.float32)] + [x.ravel() for x in g])
    for method in ("newton", "newton_f32"):
        for name, over in (("pseudo", dict(use_pseudo_inverse=True, epsilon=0.0)),
                           ("exponent_1/3", dict(inverse_exponent_override=[1.0 / 3, 0.25]))):
            cfg = dict(T.SHAMPOO_BASE, rows=6, cols=4, steps=2, lr_scale=1.0,
                       root_method=method)
            cfg.update(over)
            rc, out, st, err = drv.run("shampoo", cfg, data, 2 * 24)
            rep.check("shampoo_%s_%s_refused" % (method, name),
                      rc != 0 and "root_method = %s" % method in err, err.strip())
    cfg = dict(T.SHAMPOO_BASE, rows=6, cols=4, steps=2, lr_scale=1.0, root_method="auto",
               use_pseudo_inverse=True, epsilon=0.0)
    rc, out, st, err = drv.run("shampoo", cfg, data, 2 * 24)
    rep.check("shampoo_auto_pseudo_runs_eigh", rc == 0 and st is not None and
              st["root_newton"] == 0 and st["root_fallbacks"] == 0, "%s %s" % (st, err.strip()))


def shampoo_cases(drv, rep):
    # A run with newton roots against the float64 reference (the eigh-defined
    # Shampoo), and against the C eigh run.
    def pair(name, shape, grads, over, tol, expect_fallbacks, newton="newton"):
        runs, stats = {}, {}
        w0 = (0.01 * T.rng_for(name + "/w0").standard_normal(shape)).astype(np.float32)
        for method in ("eigh", newton):
            cfg = dict(over, root_method=method)
            seen = {}

            def keep(st, cfg_, wc, seen=seen):
                seen["stats"] = st

            key = "newton" if method == newton else method
            runs[key] = T.run_trajectory(drv, rep, "%s_%s" % (name, method), "shampoo",
                                         shape, grads, cfg, tol, extra=keep, w0=w0)
            stats[key] = seen.get("stats")
        if runs["eigh"] is None or runs["newton"] is None or stats["newton"] is None:
            rep.check(name + " [pair]", False, "a run failed")
            return
        st = stats["newton"]
        refreshes = st["root_refreshes"]
        if expect_fallbacks:
            ok = st["root_fallbacks"] == refreshes and st["root_newton"] == 0
            same = bool(np.array_equal(runs["eigh"], runs["newton"]))
            rep.check(name + " [every root fell back, counted; eigh's weights]", ok and same,
                      "newton %d fallbacks %d refreshes %d identical %s" % (
                          st["root_newton"], st["root_fallbacks"], refreshes, same))
            return
        rep.check(name + " [newton counted]", st["root_newton"] == refreshes and
                  st["root_fallbacks"] == 0 and refreshes > 0,
                  "newton %d fallbacks %d refreshes %d" % (st["root_newton"],
                                                          st["root_fallbacks"], refreshes))
        prev = w0.astype(np.float64)
        worst = 0.0
        for t in range(len(grads)):
            de = runs["eigh"][t].astype(np.float64) - prev
            dn = runs["newton"][t].astype(np.float64) - prev
            worst = max(worst, T.fro(dn - de) / T.fro(de))
            prev = runs["eigh"][t].astype(np.float64)
        rep.line(name + " [newton vs eigh, C]", worst, 1e-4)

    shape = (24, 16)
    grads = T.gaussian_grads(T.rng_for("shampoo_newton"), shape)
    pair("shampoo_newton_24x16_epsrel1e-6", shape, grads, dict(epsilon_rel=1e-6),
         T.TOL_SHAMPOO, False)
    # p = 2 on L. eps_rel, not an absolute epsilon: the step-1 factor L = G G^T
    # (24 x 24, rank 16) has float32-roundoff eigenvalues of either sign in its
    # null space, which eigh clamps at 0 and Newton shifts by eps_eff; eps_rel
    # puts eps_eff above that noise so the two definitions agree.
    pair("shampoo_newton_24x16_p2_epsrel1e-5", shape, grads,
         dict(epsilon_rel=1e-5, inverse_exponent_override=[0.5, 0.25]), T.TOL_SHAMPOO, False)
    # Rank-1 gradients with epsilon 1e-12: cond ~1e12 and float32 roundoff in the
    # null space; Newton cannot reach its residual, every root falls back to eigh.
    _, _, lr = T.lowrank_grads(T.rng_for("shampoo_newton_rank1"), (12, 10), 1)
    # (tolerance against the reference 1e-3: eigh's own run measures 1.7e-4 on
    # this rank-1 problem at epsilon 1e-12; the check here is the fallback.)
    pair("shampoo_newton_rank1_12x10_eps1e-12", (12, 10), lr[:6], {}, 1e-3, True)

    # root_method newton_f32: the same iteration in float32 on the backend (the
    # driver's CPU backend; the GPU's cuBLAS on CUDA), accepted under
    # STRATA_ROOT_F32_RESIDUAL_TOL. eps_rel 1e-4 bounds cond(B) by 1e4, where
    # float32 rounding leaves the residual near 1e4 sqrt(n) 6e-8 < 3e-2: every
    # root is Newton's, within the float64 reference's tolerance, and within
    # 1e-4 of the C eigh run per step. The rank-1 run at epsilon 1e-12 (cond
    # ~1e12) is refused by the float32 residual check on every root: each is
    # the float64 eigh root (counted in root_fallbacks), the run eigh's exactly.
    pair("shampoo_newton_f32_24x16_epsrel1e-4", shape, grads, dict(epsilon_rel=1e-4),
         T.TOL_SHAMPOO, False, newton="newton_f32")
    pair("shampoo_newton_f32_24x16_p2_epsrel1e-4", shape, grads,
         dict(epsilon_rel=1e-4, inverse_exponent_override=[0.5, 0.25]), T.TOL_SHAMPOO, False,
         newton="newton_f32")
    pair("shampoo_newton_f32_rank1_12x10_eps1e-12", (12, 10), lr[:6], {}, 1e-3, True,
         newton="newton_f32")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = T.Report()
    with tempfile.TemporaryDirectory(prefix="strata_newton_") as tmp:
        drv = T.Driver(os.path.abspath(sys.argv[1]), tmp)
        root_cases(drv, rep)
        shampoo_config_cases(drv, rep)
        shampoo_cases(drv, rep)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
