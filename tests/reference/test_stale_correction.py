#!/usr/bin/env python3
"""Float64 reference for the stale-root correction (issue 23, item 5: the
asynchronous runtime's safety valve, strata_inv_root_correct in
optim/root_newton_f32.c).

Usage: test_stale_correction.py PATH/TO/optim_driver

The valve's step: X is the inverse p-th root of an older factor A_old + eps I,
the new factor is B = A_new + eps I; one symmetrized Newton step
    R = I - X^p B,  X+ = X + (X R + R^T X) / (2p)
(Bini, Higham & Meini 2005, eq. (3.1)), kept only when ||I - X+^p B||_F is
finite and smaller than ||R||_F. Written here in float64 numpy, independently
of the C code (which runs float32 sgemm on the CPU backend).

Cases (n = 96, spectrum logspace(-2, 0), eps 1e-3; the new factor an EMA step
A_new = 0.9 A_old + 0.1 s^2 G G^T / k with a rank-k gradient, k = 8, as
Shampoo's beta2 = 0.9 would make it; p = 4 and p = 2):
  - s = 0.03 (a small step: ||R||_F 0.95, spectral 0.10):
    the C step against the float64 step from the same float32 inputs:
    ||X+_C - X+_ref||_F / ||X+_ref||_F <= 1e-5, residuals within 1e-4 relative
    (float32 products);
    the residual shrinks: ||R+||_F <= 0.5 ||R||_F for p = 4, <= 0.6 for
    p = 2 (float64: 0.348 and 0.506; quadratic in the commuting part, the
    EMA decay, r+ ~ (p+1)/(2p) r^2, linear in the rank-k part);
    the corrected root is closer to the exact root of the new factor (float64
    eigh): error ratio <= 0.2 (float64: 0.080 for p = 4, 0.099 for p = 2);
  - s = 0.1 (new directions: spectral residual 0.32, but X and B do not
    commute and the step grows ||R||_F from 1.31 to 3.3): the residual gate
    refuses it (STRATA_ERR_LINALG) and X comes back untouched bit for bit;
  - a new factor 100 times the old one (x^p b = 100 per eigenvalue, outside
    the step's region): refused before the step, X untouched bit for bit.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def root(a, p):
    lam, v = np.linalg.eigh(0.5 * (a + a.T))
    return (v * np.maximum(lam, 0.0) ** (-1.0 / p)) @ v.T


def newton_ref(a32, eps, x32, p):
    a = a32.astype(np.float64)
    x = x32.astype(np.float64)
    b = a + eps * np.eye(len(a))
    xp = np.linalg.matrix_power(x, p)
    r = np.eye(len(a)) - xp @ b
    xn = x + (x @ r + r.T @ x) / (2.0 * p)
    rn = np.eye(len(a)) - np.linalg.matrix_power(xn, p) @ b
    return xn, np.linalg.norm(r), np.linalg.norm(rn)


def run(driver, tmp, n, p, eps, a32, x32, tag):
    cfg, inp, out = (os.path.join(tmp, tag + s) for s in (".json", ".in", ".out"))
    with open(cfg, "w") as f:
        json.dump({"n": n, "p": p, "eps": eps}, f)
    np.concatenate([a32.ravel(), x32.ravel()]).astype("<f4").tofile(inp)
    proc = subprocess.run([driver, "root_correct", cfg, inp, out], capture_output=True,
                          text=True, timeout=60)
    if proc.returncode != 0:
        return None, None, proc.stderr.strip()
    return (np.fromfile(out, dtype="<f4").reshape(n, n), json.loads(proc.stdout), "")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    rng = np.random.default_rng(23)
    n, k, eps = 96, 8, 1e-3
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a_old = (q * np.logspace(-2, 0, n)) @ q.T
    g = rng.standard_normal((n, k))
    a_new = 0.9 * a_old + 0.1 * 0.03**2 * (g @ g.T) / k
    a_gate = 0.9 * a_old + 0.1 * 0.1**2 * (g @ g.T) / k
    ok = True

    def check(name, cond, detail):
        nonlocal ok
        ok &= bool(cond)
        print("%s %s: %s" % ("PASS" if cond else "FAIL", name, detail))

    with tempfile.TemporaryDirectory() as tmp:
        for p in (4, 2):
            a32 = a_new.astype(np.float32)
            x32 = root(a_old + eps * np.eye(n), p).astype(np.float32)
            xc, info, err = run(driver, tmp, n, p, eps, a32, x32, "p%d" % p)
            if xc is None:
                check("p=%d driver" % p, False, err)
                continue
            xr, r0, r1 = newton_ref(a32, eps, x32, p)
            check("p=%d status" % p, info["status"] == "STRATA_OK", info["status"])
            rel = np.linalg.norm(xc - xr) / np.linalg.norm(xr)
            check("p=%d step vs float64" % p, rel <= 1e-5, "rel err %.2e (tol 1e-5)" % rel)
            e0 = abs(info["residual_before"] - r0) / r0
            e1 = abs(info["residual_after"] - r1) / r1
            check("p=%d residuals vs float64" % p, e0 <= 1e-4 and e1 <= 1e-4,
                  "before %.4g (ref %.4g), after %.4g (ref %.4g)"
                  % (info["residual_before"], r0, info["residual_after"], r1))
            tol = 0.5 if p == 4 else 0.6
            check("p=%d residual shrinks" % p, info["residual_after"] <= tol * info["residual_before"],
                  "||R+||/||R|| = %.3g (float64 %.3g, tol %.2g)"
                  % (info["residual_after"] / info["residual_before"], r1 / r0, tol))
            exact = root(a_new.astype(np.float64) + eps * np.eye(n), p)
            d0 = np.linalg.norm(x32 - exact)
            d1 = np.linalg.norm(xc.astype(np.float64) - exact)
            check("p=%d closer to the new root" % p, d1 <= 0.2 * d0,
                  "error %.3g -> %.3g, ratio %.3g (tol 0.2)" % (d0, d1, d1 / d0))
        # refused: the step tried and rejected by its measured residual, and a
        # factor so far away that it is not tried; X must come back untouched
        x32 = root(a_old + eps * np.eye(n), 4).astype(np.float32)
        for tag, a in (("gate", a_gate), ("far", 100.0 * a_old)):
            a32 = a.astype(np.float32)
            xc, info, err = run(driver, tmp, n, 4, eps, a32, x32, tag)
            if xc is None:
                check("refusal %s driver" % tag, False, err)
                continue
            check("refused (%s)" % tag, info["status"] == "STRATA_ERR_LINALG",
                  "%s, residual %.3g -> %.3g" % (info["status"], info["residual_before"],
                                                 info["residual_after"]))
            check("refused root untouched (%s)" % tag,
                  np.array_equal(xc.view(np.uint32), x32.view(np.uint32)), "bit for bit")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
