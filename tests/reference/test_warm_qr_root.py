#!/usr/bin/env python3
"""Float64 reference tests for the warm-started eigenbasis roots (issue 23,
item 4): strata_inv_root_warm_qr (Shampoo's root_method warm_qr) and its
float32 form strata_inv_root_warm_qr_f32 (root_method warm_qr_f32).

Usage: test_warm_qr_root.py PATH/TO/optim_driver

Reference, written here in numpy float64 independently of the C code: one
step of orthogonal iteration from the previous basis Q (columns the
eigenvectors, largest eigenvalue first; Golub & Van Loan, Matrix
Computations, 4th ed., 8.2.4; SOAP's refresh, Vyas et al. 2024, arXiv
2409.11321, Algorithm 4):
    P = A Q,  l = diag(Q^T A Q),  crit = ||Q^T A Q - diag||_F / ||Q^T A Q||_F
    (Distributed Shampoo's criterion, formed here as the full matrix),
    order = argsort(-l), Q' = qr(P[:, order]) (numpy),
    root = Q' diag((max(l_order, 0) + eps_eff)^(-1/p)) Q'^T,
    eps_eff = max(eps, eps_rel * max(l)).
The root does not depend on the signs numpy's and LAPACK's QR give the
columns; the returned basis is compared column by column up to sign.
Metric: ||C - ref||_F / ||ref||_F; tolerance 1e-6 (float32 output; measured
<= 3.2e-8 on this machine, OpenBLAS 0.3.21); the criterion 1e-5 relative
(9e-7), the basis 1 - |cos| <= 1e-5 (1.8e-8).

Float32 form (every check again with "f32": true): the same reference; the
products, QR and root are float32 (SGEMM, sgeqrf, SSYRK, ssyevd for the
first root and the fallback), so its tolerances are float32 rounding's: an
O(n^3) product's relative error is about n u (u = 6e-8; 1e-5 at n = 160),
tolerance 1e-4 on the root (10x margin; measured <= 9.3e-7 here), 1e-3 on
the criterion (its sums lose sqrt(n) u / crit, about 2e-5 at crit 0.05;
measured <= 9e-7) and 1e-4 on 1 - |cos| of the basis (measured <= 1.9e-7).
Its fallback and first root are ssyevd's root: the fallback's equals the
no-basis call's bit for bit (both ssyevd), and both are checked against the
float64 eigh root at 1e-4; ssyevd's eigenvectors pass the probe check
(orthogonality error under 1e-3; measured 6.3e-6 at n = 64), and a rejected
ssyevd (forced) gives the float64 form's root bit for bit, 2 retries counted.

Checks:
  - no previous basis: the dsyevd root (bit for bit the inv_root eigh root)
    and its eigenvectors as the basis, descending, no fallback counted;
  - warm from the exact basis of A_prev, A = 0.95 A_prev + a rank-4 update:
    the reference's root, the criterion, the basis; and the warm root
    nearer the exact root of A than the stale exact root of A_prev (what
    S = 1 would use);
  - p = 2 and eps_rel;
  - the fallback: a random orthogonal basis (criterion ~1) and tol 0: the
    root and basis are eigh's bit for bit, fallback = 1;
  - a non-finite basis is treated as none (eigh, not counted);
  - bad arguments (tol > 1) are refused with the output untouched.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_optim_reference as T  # noqa: E402  (Driver, Report)

SENTINEL = np.float32(12345.0)


def sym64(a32):
    a = a32.astype(np.float64)
    return 0.5 * (a + a.T)


def eigh_root(a32, p, eps=0.0, eps_rel=0.0):
    lam, v = np.linalg.eigh(sym64(a32))
    eps_eff = max(eps, eps_rel * max(lam.max(), 0.0))
    return (v * (np.maximum(lam, 0.0) + eps_eff) ** (-1.0 / p)) @ v.T


def warm_ref(a32, basis_rows, p, eps=0.0, eps_rel=0.0):
    a = sym64(a32)
    q = basis_rows.astype(np.float64).T
    b = q.T @ a @ q
    l = np.diag(b).copy()
    crit = np.sqrt(max(np.sum(b * b) - np.sum(l * l), 0.0) / np.sum(b * b))
    order = np.argsort(-l, kind="stable")
    qn, _ = np.linalg.qr((a @ q)[:, order])
    ls = l[order]
    eps_eff = max(eps, eps_rel * max(ls[0], 0.0))
    root = (qn * (np.maximum(ls, 0.0) + eps_eff) ** (-1.0 / p)) @ qn.T
    return root, qn, crit


def rel(x, ref):
    return float(np.linalg.norm(x.astype(np.float64) - ref) / np.linalg.norm(ref))


def spd(rng, n, k):
    g = rng.standard_normal((n, k)) / np.sqrt(k)
    return (g @ g.T).astype(np.float32)


def exact_basis_rows(a32):
    lam, v = np.linalg.eigh(sym64(a32))
    return v[:, ::-1].T.astype(np.float32)  # row k: eigenvector k, descending


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rep = T.Report()
    with tempfile.TemporaryDirectory() as tmp:
        drv = T.Driver(os.path.abspath(sys.argv[1]), tmp)
        for f32 in (False, True):
            run_form(rep, drv, f32)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


def run_form(rep, drv, f32):
    """Every check for one form (f32: strata_inv_root_warm_qr_f32)."""
    rng = T.rng_for("warm_qr_root")
    pre = "f32_" if f32 else ""
    warm_method = 5 if f32 else 3  # STRATA_ROOT_WARM_QR_F32 / STRATA_ROOT_WARM_QR
    tol_root, tol_crit, tol_basis = (1e-4, 1e-3, 1e-4) if f32 else (1e-6, 1e-5, 1e-5)

    def warm(a32, basis, p=4, **cfg):
        n = a32.shape[0]
        data = np.concatenate([a32.ravel(), basis.ravel()])
        rc, out, st, err = drv.run("warm_qr_root", dict(n=n, p=float(p), f32=f32, **cfg),
                                   data, 2 * n * n)
        root = out[:n * n].reshape(n, n) if out is not None else None
        nb = out[n * n:].reshape(n, n) if out is not None else None
        return rc, root, nb, st, err

    def eigh_c(a32, p=4, **cfg):
        n = a32.shape[0]
        rc, out, _, _ = drv.run("inv_root", dict(n=n, p=float(p), **cfg), a32, n * n)
        return out.reshape(n, n) if rc == 0 and out is not None else None

    # 1. No previous basis: eigh, and its basis.
    n = 64
    a = spd(rng, n, 96)
    rc, root, nb, st, err = warm(a, np.zeros((n, n), np.float32), have_basis=False,
                                 eps_rel=1e-6)
    ok = rc == 0 and st is not None
    rep.check(pre + "first_root [runs]", ok, err.strip())
    if ok:
        ref_c = eigh_c(a, eps_rel=1e-6)
        if f32:  # ssyevd's root: float32 rounding from the float64 eigh root
            rep.line(pre + "first_root [ssyevd root vs float64 eigh]",
                     rel(root, eigh_root(a, 4, eps_rel=1e-6)), tol_root)
        else:
            rep.check("first_root [= inv_root eigh bit for bit]",
                      ref_c is not None and np.array_equal(root, ref_c), "")
        if f32:  # ssyevd's eigenvectors passed the probe check
            rep.line(pre + "first_root [ssyevd orthogonality error]", st["ortho_error"], 1e-3)
            # a rejected ssyevd (forced) goes to the float64 root: dsyevd
            # (rejected too, forced) then dsyev, bit for bit the float64
            # form's, two retries counted
            zero = np.zeros((n, n), np.float32)
            rc1, r1, _, s1, e1 = warm(a, zero, have_basis=False, eps_rel=1e-6,
                                      force_retry=True)
            rc2, out2, _, _ = drv.run("warm_qr_root", dict(n=n, p=4.0, eps_rel=1e-6,
                                                           have_basis=False, force_retry=True),
                                      np.concatenate([a.ravel(), zero.ravel()]), 2 * n * n)
            rep.check(pre + "first_root [ssyevd rejected: the float64 root, 2 retries]",
                      rc1 == 0 and rc2 == 0 and s1["retries"] == 2 and
                      np.array_equal(r1, out2[:n * n].reshape(n, n)), e1.strip())
        rep.check(pre + "first_root [method eigh, no fallback, basis kept]",
                  st["method"] == 0 and st["fallback"] == 0 and st["have_basis"] == 1, "")
        lam = np.linalg.eigvalsh(sym64(a))[::-1]
        q = nb.astype(np.float64).T
        resid = np.linalg.norm(sym64(a) @ q - q * lam) / np.linalg.norm(lam)
        rep.line(pre + "first_root [basis: eigenvectors, descending]", resid,
                 1e-4 if f32 else 1e-6)

    # 2. Warm from the exact basis of A_prev, then a rank-4 EMA update
    #    (the F = 1 setting); two sizes, p = 4 and 2.
    for n, p, eps_rel in ((48, 4, 1e-6), (160, 4, 1e-6), (96, 2, 1e-4)):
        a_prev = spd(rng, n, 2 * n)
        g = rng.standard_normal((n, 4)) * (0.5 / np.sqrt(n))
        a = (0.95 * a_prev.astype(np.float64) + g @ g.T).astype(np.float32)
        basis = exact_basis_rows(a_prev)
        name = pre + "warm_n%d_p%d" % (n, p)
        rc, root, nb, st, err = warm(a, basis, p=p, eps_rel=eps_rel, tol=0.5)
        if rc != 0 or st is None:
            rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            continue
        ref, qn, crit = warm_ref(a, basis, p, eps_rel=eps_rel)
        rep.check(name + " [warm used]", st["method"] == warm_method and st["fallback"] == 0,
                  "method %d fallback %d" % (st["method"], st["fallback"]))
        rep.line(name + " [root vs reference]", rel(root, ref), tol_root,
                 note="criterion %.3g" % crit)
        rep.line(name + " [criterion]", abs(st["residual"] - crit) / crit, tol_crit)
        cosines = np.abs(np.sum(nb.astype(np.float64).T * qn, axis=0))
        rep.line(name + " [basis vs reference, up to sign]", float(np.max(1 - cosines)),
                 tol_basis)
        exact = eigh_root(a, p, eps_rel=eps_rel)
        stale = eigh_root(a_prev, p, eps_rel=eps_rel)
        e_w, e_s = rel(root, exact), rel(stale.astype(np.float32), exact)
        rep.check(name + " [nearer the exact root than the stale root]", e_w < e_s,
                  "warm %.3g, stale %.3g" % (e_w, e_s))

    # 3. The fallback: a basis that does not diagonalize A, and tol 0.
    n = 64
    a = spd(rng, n, 96)
    ref_c = eigh_c(a, eps_rel=1e-6)
    if f32:  # the fallback is ssyevd's root: the no-basis call's
        rc0, ref_c, _, _, _ = warm(a, np.zeros((n, n), np.float32), have_basis=False,
                                   eps_rel=1e-6)
        ref_c = ref_c if rc0 == 0 else None
        rep.line(pre + "fallback_ssyevd_root [vs float64 eigh]",
                 rel(ref_c, eigh_root(a, 4, eps_rel=1e-6)) if ref_c is not None else 1.0,
                 tol_root)
    q_rand, _ = np.linalg.qr(rng.standard_normal((n, n)))
    for name, basis, tol in (("fallback_random_basis", q_rand.T.astype(np.float32), 0.12),
                             ("fallback_tol0", exact_basis_rows(a), 0.0)):
        name = pre + name
        rc, root, nb, st, err = warm(a, basis, eps_rel=1e-6, tol=tol)
        ok = rc == 0 and st is not None
        rep.check(name + " [runs]", ok, err.strip())
        if not ok:
            continue
        rep.check(name + " [fallback counted, method eigh]",
                  st["fallback"] == 1 and st["method"] == 0 and st["residual"] > tol,
                  "fallback %d criterion %.3g" % (st["fallback"], st["residual"]))
        rep.check(name + (" [root = ssyevd's bit for bit]" if f32 else
                          " [root = eigh bit for bit]"),
                  ref_c is not None and np.array_equal(root, ref_c), "")
        rc2, _, nb2, _, _ = warm(a, np.zeros((n, n), np.float32), have_basis=False,
                                 eps_rel=1e-6)
        rep.check(name + " [basis = eigh's]", rc2 == 0 and np.array_equal(nb, nb2), "")

    # 4. A non-finite basis: treated as none.
    basis = exact_basis_rows(a)
    basis[3, 5] = np.nan
    rc, root, _, st, err = warm(a, basis, eps_rel=1e-6)
    rep.check(pre + "nonfinite_basis [eigh, not counted]",
              rc == 0 and st is not None and st["method"] == 0 and st["fallback"] == 0 and
              ref_c is not None and np.array_equal(root, ref_c), err.strip())

    # 5. Bad arguments: refused, output untouched.
    rc, root, _, _, err = warm(a, exact_basis_rows(a), eps_rel=1e-6, tol=1.5)
    rep.check(pre + "bad_tol [refused, output untouched]",
              rc == 1 and root is not None and bool(np.all(root == SENTINEL)) and
              "INVALID_ARG" in err, err.strip())


if __name__ == "__main__":
    sys.exit(main())
