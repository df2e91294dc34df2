#!/usr/bin/env python3
"""Float64 reference test for strata's SOAP and KL-Shampoo (optim/soap.c,
optim/kl_shampoo.c) and their eigenbasis kernels.

Usage: test_soap_kl_reference.py PATH/TO/soap_kl_driver

The references below are written in numpy float64 from the papers and their
reference code, not from the C:
  SOAP        Vyas et al., arXiv 2409.11321; nikhilvyas/SOAP soap.py (class
              SOAP): first step only initializes, Adam in the eigenbasis with
              exp_avg in the original space, bias correction on the step size,
              weight decay after the step, factors updated after the step, QR
              power iteration with the eigenvalue sort and exp_avg_sq permuted.
  KL-Shampoo  Lin et al., arXiv 2509.03378; yorkerlin/KL-Methods kl_opt.py
              (eigenbasis form: QR basis, moving-average eigenvalue estimates,
              clamp, eps damping) and the paper's idealized update (exact form:
              S_a <- b S_a + (1-b)/d_b G S_b^-1 G^T and S_b likewise with the
              inverses from before the step, P = S_a^-1/2 M S_b^-1/2).

Metric (as test_optim_reference.py): for each step t

    err_t = ||dW_C(t) - dW_ref(t)||_F / ||dW_ref(t)||_F,

dW_C(t) = W_C(t) - W_C(t-1) read from the float32 weights, dW_ref(t) the
float64 update driven by the same float32 gradients, its decoupled weight
decay evaluated at W_C(t-1) (teacher forcing, so errors do not accumulate
through W). A case's error is max_t err_t; a step the reference skips must
leave W_C bit-identical. "floor" is ||ulp(W_C)/2|| / ||dW_ref||, the part of
err that float32 storage of W alone explains.

Eigenbases. An eigenbasis is not unique where eigenvalues are (nearly) equal:
a factor of a tall or wide matrix is rank-deficient after the first step
(SOAP and KL-Shampoo's first eigh), and a QR power-iteration step on a
rank-deficient factor leaves the null-space columns to rounding. Any valid
choice is the published algorithm, but later updates depend on it (Adam's
per-coordinate scaling is basis-dependent). So the references run in one of
two modes:
  free    own eigh/QR everywhere (used where the bases are well determined:
          square problems, and every KL exact-form case, whose update is a
          spectral function and basis-independent);
  forced  at every refresh the reference computes its own factor, checks
          that C's basis (dumped by the driver after each step) is a VALID
          output for that factor -- orthonormal, and for eigh: Q^T S Q
          diagonal with non-increasing diagonal; for QR: C's permutation
          sorts the reference's own eigenvalue estimates descending and C's
          Q upper-triangularizes S Q_old[:, perm] (the definition of a QR
          factor) -- to VALID_TOL, then adopts C's Q (and permutation). All
          moments, factors and eigenvalue estimates stay the reference's own.
Forced cases print "valid" (the worst validity residual); square forced cases
also print "basis" (own basis vs C's, column signs aligned). Between
refreshes C's basis must not change at all.

Prints one PASS/FAIL line per case; exits 0 when all pass, 1 otherwise.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import scipy.linalg

TOL_SOAP = 1e-4      # float32 state and products vs float64 (measured: see notes)
TOL_KL = 1e-4
TOL_KERNEL = 1e-5    # eigh / QR kernels: one float32 rounding of a float64 result
TOL_INVARIANT = 1e-5 # C vs C after a permuted/sign-flipped basis (float32 GEMM order)
VALID_TOL = 1e-5     # validity residuals of C's bases (relative)
STEPS = 24           # 23 optimizer updates after SOAP's/KL's initializing first step


def f32(x):
    return float(np.float32(x))


def rng_for(name):
    return np.random.default_rng([20240917, zlib.crc32(name.encode())])


def fro(x):
    return float(np.linalg.norm(x))


# ---------------------------------------------------------------------------
# Driver


class Driver:
    def __init__(self, path, tmpdir):
        self.path, self.tmp, self.count = path, tmpdir, 0

    def _files(self):
        self.count += 1
        return os.path.join(self.tmp, "c%04d" % self.count)

    def run(self, mode, cfg, data):
        """soap / kl: returns (rc, W (steps, rows, cols) or None, basis floats,
        stats dict or None, stderr)."""
        base = self._files()
        paths = [base + s for s in (".json", ".in", ".out", ".basis")]
        with open(paths[0], "w") as f:
            json.dump(cfg, f)
        np.ascontiguousarray(data, dtype="<f4").tofile(paths[1])
        proc = subprocess.run([self.path, mode] + paths, capture_output=True, text=True,
                              timeout=60)
        w = basis = None
        n = cfg["rows"] * cfg["cols"]
        if os.path.exists(paths[2]):
            w = np.fromfile(paths[2], dtype="<f4")
            w = w.reshape(-1, cfg["rows"], cfg["cols"]) if w.size % n == 0 else None
        if os.path.exists(paths[3]):
            basis = np.fromfile(paths[3], dtype="<f4")
        stats = None
        if proc.returncode == 0 and proc.stdout.strip():
            try:
                stats = json.loads(proc.stdout.strip().splitlines()[-1])
            except ValueError:
                stats = None
        return proc.returncode, w, basis, stats, proc.stderr

    def kernel(self, mode, cfg, data, count):
        base = self._files()
        paths = [base + s for s in (".json", ".in", ".out")]
        with open(paths[0], "w") as f:
            json.dump(cfg, f)
        np.ascontiguousarray(data, dtype="<f4").tofile(paths[1])
        proc = subprocess.run([self.path, mode] + paths, capture_output=True, text=True,
                              timeout=60)
        out = None
        if proc.returncode == 0 and os.path.exists(paths[2]):
            out = np.fromfile(paths[2], dtype="<f4")
            out = out if out.size == count else None
        return proc.returncode, out, proc.stderr

    def defaults(self):
        path = os.path.join(self.tmp, "defaults.json")
        proc = subprocess.run([self.path, "defaults", path], capture_output=True, text=True,
                              timeout=60)
        if proc.returncode != 0:
            return None, proc.stderr
        with open(path) as f:
            return json.load(f), ""


def parse_basis(kind, raw, steps, shape, rotated):
    """Per step: {side: (Q, aux)} with aux = perm (soap, -1s before any
    refresh) or s (kl)."""
    dims = shape
    out, off = [], 0
    for _ in range(steps):
        d = {}
        for side in (0, 1):
            if kind == "soap" and not rotated[side]:
                continue
            n = dims[side]
            q = raw[off:off + n * n].reshape(n, n).astype(np.float64)
            off += n * n
            aux = raw[off:off + n].astype(np.float64)
            off += n
            d[side] = (q, aux)
        out.append(d)
    if off != raw.size:
        raise ValueError("basis dump has %d floats, expected %d" % (raw.size, off))
    return out


# ---------------------------------------------------------------------------
# Reporting


class Report:
    def __init__(self):
        self.failed, self.count = [], 0

    def line(self, name, err, tol, ok=None, note=""):
        self.count += 1
        if ok is None:
            ok = bool(np.isfinite(err)) and err <= tol
        if not ok:
            self.failed.append(name)
        print("%-46s max_rel_err %-10s tol %-8s %s%s" % (
            name, "%.3e" % err if np.isfinite(err) else str(err), "%.0e" % tol,
            "PASS" if ok else "FAIL", ("  " + note) if note else ""), flush=True)
        return ok

    def check(self, name, ok, note=""):
        self.count += 1
        if not ok:
            self.failed.append(name)
        print("%-46s %-36s %s%s" % (name, "", "PASS" if ok else "FAIL",
                                     ("  " + note) if note else ""), flush=True)
        return ok


# ---------------------------------------------------------------------------
# Shared float64 pieces


def eigh_desc(a):
    """torch.linalg.eigh then torch.flip(Q, [1]): descending eigenvalues."""
    lam, v = np.linalg.eigh(0.5 * (a + a.T))
    return lam[::-1].copy(), v[:, ::-1].copy()


def qr_q(a):
    """torch.linalg.qr(a)[0] (Householder, LAPACK convention, as numpy)."""
    return np.linalg.qr(a)[0]


class Validity:
    """Checks that a basis produced by C is a valid output of the algorithm
    for the reference's own factor; keeps the worst residual."""

    def __init__(self):
        self.worst = 0.0
        self.basis_dev = 0.0  # own vs C, column signs aligned (informational)
        self.what = ""

    def note(self, r, what):
        if not np.isfinite(r):
            r = np.inf
        if r > self.worst:
            self.worst, self.what = r, what

    def orthonormal(self, q):
        self.note(np.abs(q.T @ q - np.eye(q.shape[0])).max(), "orthonormality")

    def eigh(self, s, q_c, q_own):
        self.orthonormal(q_c)
        scale = max(fro(s), 1e-300)
        d = q_c.T @ s @ q_c
        self.note(fro(d - np.diag(np.diag(d))) / scale, "eigh: Q^T S Q not diagonal")
        if d.shape[0] > 1:
            self.note(max(0.0, float(np.max(np.diff(np.diag(d))))) / scale,
                      "eigh: not descending")
        self.dev(q_c, q_own)

    def qr(self, s, o, perm, q_c, q_own, sort):
        self.orthonormal(q_c)
        est = np.einsum("ij,ij->j", o, s @ o)
        if sort:
            scale = max(float(np.abs(est).max()), 1e-300)
            self.note(max(0.0, float(np.max(np.diff(est[perm])))) / scale if len(est) > 1
                      else 0.0, "qr: perm does not sort the estimates")
        else:
            self.note(0.0 if np.array_equal(perm, np.arange(len(perm))) else np.inf,
                      "qr: unsorted refresh permuted")
        a = s @ o[:, perm]
        r = q_c.T @ a
        self.note(fro(np.tril(r, -1)) / max(fro(a), 1e-300), "qr: Q^T A not upper triangular")
        self.dev(q_c, q_own)

    def dev(self, q_c, q_own):
        sg = np.sign(np.sum(q_c * q_own, axis=0))
        sg[sg == 0] = 1.0
        self.basis_dev = max(self.basis_dev, float(np.abs(q_c - q_own * sg).max()))


# ---------------------------------------------------------------------------
# SOAP reference (soap.py, class SOAP), float64


class SoapRef:
    def __init__(self, cfg, shape, rotated, forced=None, perturb=None, permute_v=True):
        self.cfg = cfg
        self.b1, self.b2 = f32(cfg["beta1"]), f32(cfg["beta2"])
        sb = cfg["shampoo_beta"]
        self.sb = f32(sb) if sb >= 0 else self.b2
        self.eps, self.wd, self.lr = f32(cfg["eps"]), f32(cfg["weight_decay"]), f32(cfg["lr"])
        self.F = cfg["precondition_frequency"]
        self.rotated = rotated
        m, n = shape
        self.GG = [np.zeros((m, m)) if rotated[0] else None,
                   np.zeros((n, n)) if rotated[1] else None]
        self.Q = [None, None]
        self.exp_avg = np.zeros(shape)
        self.exp_avg_sq = np.zeros(shape)
        self.step_count = 0
        self.initialized = False
        self.forced = forced      # list of per-step C bases, or None (free)
        self.perturb = perturb    # {side: (perm, signs)} applied to the first eigh (free)
        self.permute_v = permute_v
        self.valid = Validity()
        self.perms = []           # permutations applied at refreshes

    def project(self, x):
        for side in (0, 1):
            if self.Q[side] is not None:
                x = self.Q[0].T @ x if side == 0 else x @ self.Q[1]
        return x

    def project_back(self, x):
        for side in (0, 1):
            if self.Q[side] is not None:
                x = self.Q[0] @ x if side == 0 else x @ self.Q[1].T
        return x

    def update_preconditioner(self, t, g):
        for side in (0, 1):
            if self.GG[side] is not None:
                outer = g @ g.T if side == 0 else g.T @ g
                self.GG[side] = self.sb * self.GG[side] + (1 - self.sb) * outer
        first = not self.initialized
        if first:
            for side in (0, 1):
                if self.GG[side] is None:
                    continue
                _, q = eigh_desc(self.GG[side])
                if self.perturb and side in self.perturb:
                    p, sg = self.perturb[side]
                    q = q[:, p] * sg
                if self.forced is not None:
                    q_c = self.forced[t - 1][side][0]
                    self.valid.eigh(self.GG[side], q_c, q)
                    q = q_c
                self.Q[side] = q
            self.initialized = True
        elif self.step_count > 0 and self.step_count % self.F == 0:
            for side in (0, 1):
                if self.GG[side] is None:
                    continue
                o = self.Q[side]
                est = np.einsum("ij,ij->j", o, self.GG[side] @ o)
                perm = np.argsort(-est, kind="stable")
                q = qr_q(self.GG[side] @ o[:, perm])
                if self.forced is not None:
                    q_c, perm_c = self.forced[t - 1][side]
                    perm_c = perm_c.astype(int)
                    self.valid.qr(self.GG[side], o, perm_c, q_c, q, sort=True)
                    q, perm = q_c, perm_c
                self.perms.append(perm)
                if self.permute_v:
                    self.exp_avg_sq = (self.exp_avg_sq[perm, :] if side == 0
                                       else self.exp_avg_sq[:, perm])
                self.Q[side] = q
        elif self.forced is not None:
            for side in (0, 1):
                if self.GG[side] is not None and not np.array_equal(
                        self.forced[t - 1][side][0], self.Q[side]):
                    self.valid.note(np.inf, "basis changed between refreshes")

    def step(self, t, g, w_prev, lr_scale):
        """dW of step t, or None when the step leaves W untouched."""
        if not self.initialized:
            self.update_preconditioner(t, g)
            return None
        gp = self.project(g)
        self.step_count += 1
        k = self.step_count
        self.exp_avg = self.b1 * self.exp_avg + (1 - self.b1) * g
        self.exp_avg_sq = self.b2 * self.exp_avg_sq + (1 - self.b2) * gp * gp
        denom = np.sqrt(self.exp_avg_sq) + self.eps
        lr = self.lr * lr_scale
        step_size = lr
        if self.cfg["correct_bias"]:
            step_size = lr * np.sqrt(1 - self.b2 ** k) / (1 - self.b1 ** k)
        norm_grad = self.project_back(self.project(self.exp_avg) / denom)
        if self.cfg["normalize_grads"]:
            norm_grad = norm_grad / (1e-30 + np.sqrt(np.mean(norm_grad ** 2)))
        w1 = w_prev - step_size * norm_grad
        w2 = w1 - lr * self.wd * w1
        self.update_preconditioner(t, g)
        return w2 - w_prev


# ---------------------------------------------------------------------------
# KL-Shampoo references, float64


def kl_clamp(dim, cfg):
    mcv = cfg["max_clamp_value"]
    return float(max(10, min(dim, mcv))) if mcv > 0 else np.inf


def nan_to_zero(x):
    x = np.array(x, dtype=np.float64)
    x[~np.isfinite(x)] = 0.0
    return x


class KLRef:
    """Both forms. Eigenbasis form = kl_opt.py KLOpt (using_klsoap False):
      first call: S_a = (1-b)/d_b G G^T, S_b = (1-b)/d_a G^T G; Q = eigh
      (descending); s = init^-1/2; no update.
      later: k += 1; M = lerp(M, G, 1-b1); P = Q_a [(Q_a^T M Q_b) * X/(1+eps X)] Q_b^T
      (X = s_a s_b^T); update_2d_preconditioner (factors with S^-1 = Q diag(s^2) Q^T,
      eigenvalue estimates, all from the s before the step); QR when k % F == 0.
    Exact form = the paper's idealized update: S = init I at the start; every
      step k += 1: S_a <- b S_a + (1-b)/d_b G S_b^-1 G^T, S_b <- ... G^T S_a^-1 G
      (inverses from before the step); eigh of both when k % F == 0,
      s = min(max(lambda,0)^-1/2, c); then P from the refreshed S.
    wrong_order: S_b's update (and, in the eigenbasis form, its eigenvalue
      estimate) uses the UPDATED S_a -- the sequential order the paper rules
      out; used only to show the test can tell the difference."""

    def __init__(self, cfg, shape, forced=None, wrong_order=False):
        self.cfg = cfg
        self.exact = cfg["form"] == "exact"
        self.b1 = f32(cfg["beta1"])
        sb = cfg["shampoo_beta"]
        self.b = f32(sb) if sb >= 0 else f32(cfg["beta2"])
        self.eps, self.wd, self.lr = f32(cfg["eps"]), f32(cfg["weight_decay"]), f32(cfg["lr"])
        self.F = cfg["precondition_frequency"]
        self.bias = cfg.get("bias_correction", False)
        self.init = f32(cfg["init_factor"])
        self.shape = shape
        self.dims = shape
        self.clamp = [kl_clamp(d, cfg) for d in shape]
        self.exp_avg = np.zeros(shape)
        # init_factor < 0 (strata's "auto"): estimates start at the RMS r of the
        # first nonzero gradient, set when the factors first see it.
        self.auto_pending = self.init < 0
        s0 = float(nan_to_zero([1.0 / np.sqrt(self.init)])[0]) if self.init > 0 else 0.0
        self.s = [np.full(d, s0) for d in shape]
        if self.exact:
            self.S = [max(self.init, 0.0) * np.eye(d) for d in shape]
            self.Q = [np.eye(d) for d in shape]
            self.initialized = True
        else:
            self.S = [np.zeros((d, d)) for d in shape]
            self.Q = [None, None]
            self.initialized = False
        self.k = 0
        self.forced = forced
        self.wrong = wrong_order
        self.valid = Validity()
        self.clamped = 0  # estimates that sat at the clamp after an update

    def inv(self, side):
        q = self.Q[side]
        return (q * self.s[side] ** 2) @ q.T

    def precondition(self):
        qa, qb = self.Q
        x = np.outer(self.s[0], self.s[1])
        x = x / (1.0 + x * self.eps)
        p = qa @ ((qa.T @ self.exp_avg @ qb) * x) @ qb.T
        if self.cfg["normalize_grads"]:
            p = p / (1e-30 + np.sqrt(np.mean(p ** 2)))
        return p

    def eigen_update(self, side, diag):
        s = self.s[side]
        b = self.b
        with np.errstate(divide="ignore", invalid="ignore"):
            d = nan_to_zero(1.0 / (s * s))
            if self.bias and self.k >= 1:
                # Bias correction written as Adam writes it (Kingma & Ba 2015, Alg. 1):
                # the EMA m from zero, m_k = b m_{k-1} + (1-b) x_k, and d_k = m_k /
                # (1 - b^k); m_{k-1} = (1 - b^(k-1)) d_{k-1}, d_{k-1} from the (clamped) s.
                m_prev = (1.0 - b ** (self.k - 1)) * d
                d = (b * m_prev + (1.0 - b) * diag) / (1.0 - b ** self.k)
            else:
                d = d + (1 - b) * (diag - d)
            s = nan_to_zero(1.0 / np.sqrt(d))
        s = np.minimum(s, self.clamp[side])
        self.clamped += int(np.sum(s == self.clamp[side]))
        self.s[side] = s

    def s_from_eigenvalues(self, side, lam):
        with np.errstate(divide="ignore"):
            s = 1.0 / np.sqrt(np.maximum(lam, 0.0))
        s = np.minimum(s, self.clamp[side])
        self.clamped += int(np.sum(s == self.clamp[side]))
        return s

    def refresh_exact(self, side):
        lam, q = eigh_desc(self.S[side])
        self.Q[side], self.s[side] = q, self.s_from_eigenvalues(side, lam)

    def auto_init(self, g):
        r = np.sqrt(np.mean(np.asarray(g, dtype=np.float64) ** 2))
        if not self.auto_pending or not r > 0:
            return
        for side, d in enumerate(self.shape):
            self.s[side] = np.full(d, min(1.0 / np.sqrt(r), self.clamp[side]))
            if self.exact:
                self.S[side] = r * np.eye(d)
        self.auto_pending = False

    def update_factors(self, g):
        self.auto_init(g)
        m, n = self.shape
        b = self.b
        inv_b = self.inv(1)
        self.S[0] = b * self.S[0] + (1 - b) / n * (g @ inv_b @ g.T)
        if self.wrong:
            if self.exact:
                self.refresh_exact(0)
            else:
                gp = self.Q[0].T @ g @ self.Q[1]
                self.eigen_update(0, np.mean((gp * self.s[1][None, :]) ** 2, axis=1))
        inv_a = self.inv(0)
        self.S[1] = b * self.S[1] + (1 - b) / m * (g.T @ inv_a @ g)
        if not self.exact:
            gp = self.Q[0].T @ g @ self.Q[1]
            ldiag = np.mean((gp * self.s[1][None, :]) ** 2, axis=1)
            rdiag = np.mean((gp * self.s[0][:, None]) ** 2, axis=0)
            if not self.wrong:
                self.eigen_update(0, ldiag)
            self.eigen_update(1, rdiag)

    def step(self, t, g, w_prev, lr_scale):
        m, n = self.shape
        lr = self.lr * lr_scale
        if self.exact:
            self.k += 1
            self.update_factors(g)
            if self.k % self.F == 0:
                for side in (0, 1):
                    self.refresh_exact(side)
            self.exp_avg = self.b1 * self.exp_avg + (1 - self.b1) * g
            p = self.precondition()
            w1 = w_prev - lr * p
            return (w1 - lr * self.wd * w1) - w_prev
        if not self.initialized:
            self.auto_init(g)
            self.S[0] = (1 - self.b) / n * (g @ g.T)
            self.S[1] = (1 - self.b) / m * (g.T @ g)
            for side in (0, 1):
                _, q = eigh_desc(self.S[side])
                if self.forced is not None:
                    q_c = self.forced[t - 1][side][0]
                    self.valid.eigh(self.S[side], q_c, q)
                    q = q_c
                self.Q[side] = q
            self.initialized = True
            return None
        self.k += 1
        self.exp_avg = self.b1 * self.exp_avg + (1 - self.b1) * g
        p = self.precondition()
        w1 = w_prev - lr * p
        dw = (w1 - lr * self.wd * w1) - w_prev
        self.update_factors(g)
        if self.k % self.F == 0:
            for side in (0, 1):
                o = self.Q[side]
                q = qr_q(self.S[side] @ o)
                if self.forced is not None:
                    q_c = self.forced[t - 1][side][0]
                    self.valid.qr(self.S[side], o, np.arange(o.shape[0]), q_c, q, sort=False)
                    q = q_c
                self.Q[side] = q
        elif self.forced is not None:
            for side in (0, 1):
                if not np.array_equal(self.forced[t - 1][side][0], self.Q[side]):
                    self.valid.note(np.inf, "basis changed between refreshes")
        return dw


# ---------------------------------------------------------------------------
# Problems, trajectories

SOAP_BASE = dict(lr=3e-3, beta1=0.95, beta2=0.95, shampoo_beta=-1.0, eps=1e-8,
                 weight_decay=0.01, precondition_frequency=10, max_precond_dim=10000,
                 precondition_1d=False, normalize_grads=False, correct_bias=True)
KL_BASE = dict(form="eigenbasis", lr=1e-4, beta1=0.9, beta2=0.98, shampoo_beta=-1.0, eps=1e-8,
               weight_decay=0.01, precondition_frequency=10, init_factor=0.1,
               max_clamp_value=4000, normalize_grads=False, bias_correction=False)


def gaussian_grads(rng, shape, steps=STEPS, scale=1.0):
    return [(scale * rng.standard_normal(shape)).astype(np.float32) for _ in range(steps)]


def soap_rotated(cfg, shape, vector):
    d = cfg["max_precond_dim"]
    if vector:
        return (bool(cfg["precondition_1d"]) and 1 < shape[0] <= d, False)
    return (1 < shape[0] <= d, 1 < shape[1] <= d)


def make_w0(shape, scale=0.1):
    return (scale * rng_for("w0" + str(shape)).standard_normal(shape)).astype(np.float32)


def run_c(drv, kind, shape, grads, cfg, lr_scale=1.0, w0=None, extra=None, w_scale=0.1):
    rows, cols = shape
    if w0 is None:
        w0 = make_w0(shape, w_scale)
    data = np.concatenate([w0[None]] + [g[None] for g in grads])
    c = dict(cfg, rows=rows, cols=cols, steps=len(grads), lr_scale=lr_scale)
    if extra:
        c.update(extra)
    rc, w, basis, stats, err = drv.run(kind, c, data)
    return w0, rc, w, basis, stats, err


def trajectory_error(ref, w0, w, grads, lr_scale):
    """max_t err_t (teacher-forced W for the decay term), the floor, and
    whether every skipped step left W bit-identical."""
    worst, floor, exact_skip = 0.0, 0.0, True
    prev = w0.astype(np.float32)
    for t, g in enumerate(grads, start=1):
        cur = w[t - 1]
        dw_ref = ref.step(t, g.astype(np.float64), prev.astype(np.float64), lr_scale)
        dw_c = cur.astype(np.float64) - prev.astype(np.float64)
        if dw_ref is None:
            exact_skip &= bool(np.array_equal(cur, prev))
        else:
            nr = fro(dw_ref)
            e = fro(dw_c - dw_ref) / nr if nr > 0 else (0.0 if fro(dw_c) == 0 else np.inf)
            worst = max(worst, e)
            if nr > 0:
                floor = max(floor, fro(np.spacing(np.abs(cur)) / 2) / nr)
        prev = cur
    return worst, floor, exact_skip


class Cases:
    def __init__(self, drv, rep):
        self.drv, self.rep = drv, rep

    def soap(self, name, shape, over=None, grads=None, lr_scale=1.0, mode="forced",
             vector=False, extra=None, tol=TOL_SOAP, basis_tol=None, w_scale=0.01):
        cfg = dict(SOAP_BASE, **(over or {}))
        if grads is None:
            grads = gaussian_grads(rng_for(name), shape)
        ex = dict(extra or {})
        if vector:
            ex["vector"] = True
        w0, rc, w, basis, stats, err = run_c(self.drv, "soap", shape, grads, cfg, lr_scale,
                                             extra=ex, w_scale=w_scale)
        if rc != 0 or w is None:
            self.rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            return None
        rot = soap_rotated(cfg, shape, vector)
        ok_rot = list(rot) == stats["rotated"]
        dumped = parse_basis("soap", basis, len(grads), shape, rot)
        ref = SoapRef(cfg, shape, rot, forced=dumped if mode == "forced" else None)
        e, floor, skip = trajectory_error(ref, w0, w, grads, lr_scale)
        notes = ["floor %.1e" % floor]
        ok = e <= tol and skip and ok_rot and bool(np.all(np.isfinite(w)))
        if mode == "forced":
            notes.append("valid %.1e" % ref.valid.worst)
            ok &= ref.valid.worst <= VALID_TOL
            if basis_tol is not None:
                notes.append("basis %.1e" % ref.valid.basis_dev)
                ok &= ref.valid.basis_dev <= basis_tol
        notes.append(mode)
        if not skip:
            notes.append("FIRST STEP MOVED W")
        if not ok_rot:
            notes.append("rotated sides %s, expected %s" % (stats["rotated"], list(rot)))
        if ref.valid.worst > VALID_TOL:
            notes.append("invalid basis: " + ref.valid.what)
        self.rep.line(name, e, tol, ok=ok, note=", ".join(notes))
        return w, stats, ref, grads, w0, dumped

    def kl(self, name, shape, over=None, grads=None, lr_scale=1.0, mode=None, extra=None,
           tol=TOL_KL, w_scale=1e-3, expect_clamp=None):
        cfg = dict(KL_BASE, **(over or {}))
        if mode is None:
            mode = "free" if cfg["form"] == "exact" else "forced"
        if grads is None:
            grads = gaussian_grads(rng_for(name), shape)
        w0, rc, w, basis, stats, err = run_c(self.drv, "kl", shape, grads, cfg, lr_scale,
                                             extra=extra, w_scale=w_scale)
        if rc != 0 or w is None:
            self.rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            return None
        forced = parse_basis("kl", basis, len(grads), shape, (True, True))
        ref = KLRef(cfg, shape, forced=forced if mode == "forced" else None)
        e, floor, skip = trajectory_error(ref, w0, w, grads, lr_scale)
        # C's eigenvalue estimates s against the reference's after the last step.
        s_err = max(fro(forced[-1][k][1] - ref.s[k]) / max(fro(ref.s[k]), 1e-300)
                    for k in (0, 1))
        notes = ["floor %.1e" % floor, "s %.1e" % s_err, "clamped %d" % ref.clamped]
        ok = e <= tol and skip and s_err <= tol and bool(np.all(np.isfinite(w)))
        if expect_clamp is not None and (ref.clamped > 0) != expect_clamp:
            ok = False
            notes.append("clamp %sexpected" % ("" if expect_clamp else "not "))
        if mode == "forced":
            notes.append("valid %.1e" % ref.valid.worst)
            ok &= ref.valid.worst <= VALID_TOL
        notes.append(mode)
        if not skip:
            notes.append("FIRST STEP MOVED W")
        self.rep.line(name, e, tol, ok=ok, note=", ".join(notes))
        return w, stats, ref, grads, w0, forced


# ---------------------------------------------------------------------------
# SOAP cases


def soap_cases(cs):
    rep = cs.rep
    # Well-determined bases: square problems run free AND forced (with the
    # own-vs-C basis deviation checked).
    cs.soap("soap_16x16_defaults", (16, 16), mode="free")
    cs.soap("soap_16x16_defaults [forced]", (16, 16), grads=gaussian_grads(
        rng_for("soap_16x16_defaults"), (16, 16)), basis_tol=1e-4)
    cs.soap("soap_12x12_F3_lrscale0.5", (12, 12), dict(precondition_frequency=3),
            lr_scale=0.5, mode="free")
    cs.soap("soap_10x10_F2_sb0.8_wd0.1_nobias_norm", (10, 10),
            dict(precondition_frequency=2, shampoo_beta=0.8, weight_decay=0.1,
                 correct_bias=False, normalize_grads=True), mode="free")
    cs.soap("soap_9x9_F4_betas0.9_0.99", (9, 9),
            dict(precondition_frequency=4, beta1=0.9, beta2=0.99), mode="free")
    # Rank-deficient first factor (tall, wide, 1 x N): forced.
    cs.soap("soap_24x8_tall_F4", (24, 8), dict(precondition_frequency=4))
    cs.soap("soap_6x20_wide_F4", (6, 20), dict(precondition_frequency=4))
    cs.soap("soap_1x32_F5", (1, 32), dict(precondition_frequency=5))
    cs.soap("soap_32x1_F5", (32, 1), dict(precondition_frequency=5))
    cs.soap("soap_40x40_defaults", (40, 40))
    # Weight decay as large as the step: W ~ 1, lr 0.1, wd 0.5.
    cs.soap("soap_8x8_lr0.1_wd0.5_F3", (8, 8), dict(lr=0.1, weight_decay=0.5,
                                                    precondition_frequency=3),
            mode="free", w_scale=1.0)
    # Sides above max_precond_dim are not rotated (identity), as the reference.
    cs.soap("soap_8x40_maxdim16_F3", (8, 40), dict(max_precond_dim=16, precondition_frequency=3),
            mode="free")
    cs.soap("soap_40x8_maxdim16_F3", (40, 8), dict(max_precond_dim=16, precondition_frequency=3),
            mode="free")
    cs.soap("soap_20x24_maxdim10_adam", (20, 24), dict(max_precond_dim=10), mode="free")
    # F = 1: strata keeps M in the original space and projects it every step
    # (the paper's Algorithm 3); the reference (soap.py) keeps it in the
    # eigenbasis and carries it at every refresh: the same in exact arithmetic.
    cs.soap("soap_12x12_F1_m_orig", (12, 12), dict(precondition_frequency=1), mode="free")
    cs.soap("soap_10x10_F1_sb0.8_nobias_norm", (10, 10),
            dict(precondition_frequency=1, shampoo_beta=0.8, correct_bias=False,
                 normalize_grads=True), mode="free")
    cs.soap("soap_24x8_tall_F1", (24, 8), dict(precondition_frequency=1))
    cs.soap("soap_8x40_maxdim16_F1", (8, 40), dict(max_precond_dim=16, precondition_frequency=1),
            mode="free")
    # 1-D tensors (create_vector): plain Adam by default, rotated with precondition_1d.
    cs.soap("soap_vector24", (24, 1), vector=True, mode="free")
    cs.soap("soap_vector24_precond1d_F3", (24, 1), dict(precondition_1d=True,
                                                        precondition_frequency=3), vector=True)

    # Split API == _step, bit for bit.
    for name, shape in (("soap_split_api_12x12", (12, 12)), ("soap_split_api_24x8", (24, 8))):
        g = gaussian_grads(rng_for(name), shape)
        cfg = dict(SOAP_BASE, precondition_frequency=3)
        _, rc1, w1, b1, _, e1 = run_c(cs.drv, "soap", shape, g, cfg)
        _, rc2, w2, b2, _, e2 = run_c(cs.drv, "soap", shape, g, cfg, extra=dict(api="split"))
        rep.check(name + " [bit-identical]", rc1 == 0 and rc2 == 0 and np.array_equal(w1, w2)
                  and np.array_equal(b1, b2), (e1 + e2).strip())

    zero_cases("soap", cs, SOAP_BASE)
    robustness_cases("soap", cs, SOAP_BASE)
    soap_invariance(cs)


def zero_cases(kind, cs, base):
    """All-zero gradients: the update is exactly the weight decay (in float32:
    w1 = w - step*0 = w, w2 = w1 + (-lr wd) w1), never NaN; the first step
    (SOAP, KL eigenbasis) leaves W alone."""
    rep = cs.rep
    shape = (8, 8)
    zeros = [np.zeros(shape, np.float32)] * 12
    forms = [dict()] if kind == "soap" else [dict(form="eigenbasis"), dict(form="exact")]
    for form in forms:
        for wd in (0.0, 0.5):
            cfg = dict(base, lr=0.1, weight_decay=wd, precondition_frequency=3, **form)
            tag = "%s%s_zero_grads_wd%g" % (kind, "_" + form["form"] if form else "", wd)
            w0, rc, w, _, stats, err = run_c(cs.drv, kind, shape, zeros, cfg)
            if rc != 0 or w is None:
                rep.check(tag, False, err.strip())
                continue
            skip_first = kind == "soap" or form.get("form") == "eigenbasis"
            prev, ok = w0, True
            decay = np.float32(-np.float32(np.float32(0.1) * np.float32(1.0)) * np.float32(wd))
            for t in range(len(zeros)):
                if t == 0 and skip_first:
                    want = prev
                else:
                    w1 = prev.copy()
                    want = (w1 + decay * w1).astype(np.float32)
                ok &= bool(np.array_equal(w[t], want))
                prev = w[t]
            ok &= stats["root_failures"] == 0
            rep.check(tag, ok, "W exactly as weight decay alone dictates; %d refreshes, "
                      "%d failures" % (stats["root_refreshes"], stats["root_failures"]))


def robustness_cases(kind, cs, base):
    rep = cs.rep
    shape = (10, 6)
    forms = [dict()] if kind == "soap" else [dict(form="eigenbasis"), dict(form="exact")]
    for form in forms:
        tag = kind + ("_" + form["form"] if form else "")
        cfg = dict(base, precondition_frequency=3, **form)
        g = gaussian_grads(rng_for(tag + "nonfinite"), shape, steps=14)
        # A NaN gradient at step 6 is rejected with STRATA_ERR_NONFINITE and
        # changes nothing: the run equals the run without that gradient.
        bad = [x.copy() for x in g]
        bad[5][2, 3] = np.nan
        w0, rc1, w1, _, st1, e1 = run_c(cs.drv, kind, shape, bad, cfg,
                                        extra=dict(nonfinite_ok=True))
        _, rc2, w2, _, _, e2 = run_c(cs.drv, kind, shape, g[:5] + g[6:], cfg)
        ok = (rc1 == 0 and rc2 == 0 and st1["nonfinite_steps"] == 1 and
              np.array_equal(w1[5], w1[4]) and np.array_equal(np.delete(w1, 5, axis=0), w2))
        rep.check(tag + "_nan_grad_rejected", ok, (e1 + e2).strip() or
                  "NONFINITE at step 6, W untouched, run == run without that gradient")
        # A finite gradient whose outer product overflows float32 (issue #12
        # item 2): caught before it lands, the step is skipped and counted,
        # nothing changes (the run equals the run without that gradient), and
        # no later decomposition fails.
        huge = [x.copy() for x in g]
        huge[2] = huge[2] * np.float32(1e30)
        _, rc, w, _, st, err = run_c(cs.drv, kind, shape, huge, cfg,
                                     extra=dict(nonfinite_ok=True))
        _, rc2, w2, _, _, e2 = run_c(cs.drv, kind, shape, g[:2] + g[3:], cfg)
        ok = (rc == 0 and rc2 == 0 and w is not None and bool(np.all(np.isfinite(w))) and
              st["root_failures"] == 0 and st["overflow_skipped"] == 1 and
              np.array_equal(w[2], w[1]) and np.array_equal(np.delete(w, 2, axis=0), w2))
        rep.check(tag + "_overflowing_grad", ok, (err + e2).strip() or
                  "skipped %d, weights finite; %d root failures, %d refreshes, run == run "
                  "without that gradient" % (st["overflow_skipped"], st["root_failures"],
                                             st["root_refreshes"]))
        rep.check(tag + "_no_leak", st is not None and st["bytes_in_use_after"] == 0,
                  "backend bytes after destroy: %s" % (st or {}).get("bytes_in_use_after"))


def crossing_grads(rng, shape, steps=STEPS):
    """G_t = U diag(a_t) V^T + noise with a_t's order reversing over time, so
    that the eigenvalue order of the factors changes between refreshes and the
    QR refresh must sort (a non-identity permutation)."""
    m, n = shape
    r = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((m, m)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lo, hi = np.linspace(1.0, 4.0, r), np.linspace(4.0, 1.0, r)
    out = []
    for t in range(steps):
        a = hi if t < steps // 3 else lo
        g = (u[:, :r] * a) @ v[:, :r].T + 0.05 * rng.standard_normal(shape)
        out.append(g.astype(np.float32))
    return out


def soap_invariance(cs):
    rep = cs.rep
    shape = (12, 12)
    name = "soap_invariance"
    cfg = dict(SOAP_BASE, precondition_frequency=3)
    g = gaussian_grads(rng_for(name), shape)
    rng = rng_for(name + "perm")
    perms = {s: (rng.permutation(12), rng.choice([-1.0, 1.0], 12)) for s in (0, 1)}
    # (1) Reference: permuting and sign-flipping the first eigenbasis changes
    # no update (the QR refresh sorts again and permutes exp_avg_sq with it).
    w0 = make_w0(shape)
    a = SoapRef(cfg, shape, (True, True))
    b = SoapRef(cfg, shape, (True, True), perturb=perms)
    worst = 0.0
    for t, x in enumerate(g, start=1):
        da = a.step(t, x.astype(np.float64), w0.astype(np.float64), 1.0)
        db = b.step(t, x.astype(np.float64), w0.astype(np.float64), 1.0)
        if da is not None:
            worst = max(worst, fro(da - db) / fro(da))
    rep.line(name + "_reference_perm_sign", worst, 1e-10,
             note="float64 reference, permuted+flipped first basis vs sorted")
    # (2) C: the same through strata_soap_install_eigenbasis, right after the
    # first eigh (V = 0) and mid-run (t = 7, V != 0, permuted consistently).
    _, rc0, base, _, _, e0 = run_c(cs.drv, "soap", shape, g, cfg)
    for at in (1, 7):
        for side in (0, 1):
            p, sg = perms[side]
            inst = dict(at=at, side=side, perm=[int(i) for i in p], signs=[float(s) for s in sg],
                        permute_moments=True)
            _, rc, w, _, _, err = run_c(cs.drv, "soap", shape, g, cfg, extra=dict(install=inst))
            if rc != 0 or rc0 != 0:
                rep.check("%s_C_install_t%d_side%d" % (name, at, side), False,
                          (e0 + err).strip())
                continue
            e = traj_diff(w0, base, w)
            rep.line("%s_C_install_t%d_side%d" % (name, at, side), e, TOL_INVARIANT,
                     note="C permuted+flipped basis (V permuted) vs C unpermuted")
    # (3) Negative control: the same permutation without permuting V must
    # change the updates far beyond the tolerance (the test has teeth).
    p, sg = perms[0]
    inst = dict(at=7, side=0, perm=[int(i) for i in p], signs=[float(s) for s in sg],
                permute_moments=False)
    _, rc, w, _, _, err = run_c(cs.drv, "soap", shape, g, cfg, extra=dict(install=inst))
    e = traj_diff(w0, base, w) if rc == 0 else np.nan
    rep.check(name + "_C_unpermuted_V_differs", rc == 0 and e > 100 * TOL_SOAP,
              "max rel diff %.2e (want > %.0e)" % (e, 100 * TOL_SOAP))

    # (4) Eigenvalue order changes between refreshes: C's refreshes apply
    # non-identity permutations and still match the reference; a reference
    # that forgets to permute exp_avg_sq does not.
    name = "soap_eigen_crossing_16x12_F3"
    gc = crossing_grads(rng_for(name), (16, 12))
    r = cs.soap(name, (16, 12), dict(precondition_frequency=3), grads=gc)
    if r is not None:
        w, stats, ref, grads, w0, dumped = r
        nonid = sum(int(not np.array_equal(p, np.arange(len(p)))) for p in ref.perms)
        rep.check(name + " [sorting exercised]", nonid > 0,
                  "%d of %d refresh permutations are not the identity" % (nonid, len(ref.perms)))
        bad = SoapRef(dict(SOAP_BASE, precondition_frequency=3), (16, 12), (True, True),
                      forced=dumped, permute_v=False)
        e, _, _ = trajectory_error(bad, w0, w, grads, 1.0)
        rep.check(name + " [no-V-permutation ref differs]", e > 100 * TOL_SOAP,
                  "max rel err %.2e vs a reference without the V permutation (want > %.0e)" % (
                      e, 100 * TOL_SOAP))


def traj_diff(w0, wa, wb):
    """max_t ||dWa - dWb|| / ||dWa||."""
    worst, prev_a, prev_b = 0.0, w0.astype(np.float64), w0.astype(np.float64)
    for t in range(wa.shape[0]):
        da = wa[t].astype(np.float64) - prev_a
        db = wb[t].astype(np.float64) - prev_b
        if fro(da) > 0:
            worst = max(worst, fro(da - db) / fro(da))
        elif fro(db) > 0:
            worst = np.inf
        prev_a, prev_b = wa[t].astype(np.float64), wb[t].astype(np.float64)
    return worst


# ---------------------------------------------------------------------------
# KL-Shampoo cases


def kl_cases(cs):
    rep = cs.rep
    lr = dict(lr=1e-3)
    # Eigenbasis form (the reference code), forced bases.
    cs.kl("kl_eig_16x16_defaults", (16, 16))
    cs.kl("kl_eig_12x12_F3_lrscale0.5", (12, 12), dict(lr, precondition_frequency=3),
          lr_scale=0.5)
    cs.kl("kl_eig_24x8_tall_F4", (24, 8), dict(lr, precondition_frequency=4))
    cs.kl("kl_eig_6x20_wide_F4", (6, 20), dict(lr, precondition_frequency=4))
    cs.kl("kl_eig_1x32_F5", (1, 32), dict(lr, precondition_frequency=5))
    cs.kl("kl_eig_32x1_F5", (32, 1), dict(lr, precondition_frequency=5))
    cs.kl("kl_eig_10x14_sb0.9_wd0.1_norm_F2", (10, 14),
          dict(lr, shampoo_beta=0.9, weight_decay=0.1, normalize_grads=True,
               precondition_frequency=2))
    # Small gradients: the eigenvalue estimates decay until s hits the clamp
    # max(10, min(dim, 4000)) (the reference's clamp feeds back into d).
    small = dict(lr, precondition_frequency=3, shampoo_beta=0.5)
    cs.kl("kl_eig_12x12_small_grads_clamped", (12, 12), small, expect_clamp=True, w_scale=1e-5,
          grads=gaussian_grads(rng_for("kl_small"), (12, 12), scale=1e-3))
    cs.kl("kl_eig_12x12_small_grads_no_clamp", (12, 12), dict(small, max_clamp_value=0),
          w_scale=1e-5,
          grads=gaussian_grads(rng_for("kl_small"), (12, 12), scale=1e-3), expect_clamp=False)
    for form in ("eigenbasis", "exact"):
        cs.kl("kl_%s_8x8_lr0.1_wd0.5_F3" % form[:5], (8, 8),
              dict(lr=0.1, weight_decay=0.5, precondition_frequency=3, form=form), w_scale=1.0)
    # init_factor < 0 (auto): estimates from the first nonzero gradient's RMS;
    # a zero first gradient defers it (both forms).
    for form in ("eigenbasis", "exact"):
        over = dict(lr, init_factor=-1.0, form=form,
                    precondition_frequency=3 if form == "eigenbasis" else 1)
        cs.kl("kl_%s_14x10_auto_init" % form[:5], (14, 10), over)
        g = gaussian_grads(rng_for("kl_auto_zero_" + form), (10, 14))
        g[0] = np.zeros_like(g[0])
        # no weight decay: the zero-gradient step must leave W exactly unchanged
        cs.kl("kl_%s_10x14_auto_init_zero_first" % form[:5], (10, 14),
              dict(over, weight_decay=0.0), grads=g)
    # Bias-corrected eigenvalue estimates (strata's; the eigenbasis form only): the
    # constant start 0.1 and the auto start, and a fast EMA (b = 0.5) whose start is
    # gone after a few steps; the same runs without the correction differ (below).
    bc = dict(lr, bias_correction=True, precondition_frequency=3)
    cs.kl("kl_eig_12x12_bias_correction", (12, 12), bc)
    cs.kl("kl_eig_14x10_bias_correction_auto", (14, 10), dict(bc, init_factor=-1.0))
    cs.kl("kl_eig_6x20_bias_correction_sb0.5", (6, 20), dict(bc, shampoo_beta=0.5))
    r = cs.kl("kl_eig_12x12_bias_correction_vs_off", (12, 12), bc,
              grads=gaussian_grads(rng_for("kl_eig_12x12_bias_correction"), (12, 12)))
    if r is not None:
        w, stats, ref, grads, w0, forced = r
        off = KLRef(dict(KL_BASE, **dict(bc, bias_correction=False)), (12, 12), forced=forced)
        e_off, _, _ = trajectory_error(off, w0, w, grads, 1.0)
        rep.check("kl_eig_bias_correction_is_seen", e_off > 100 * TOL_KL,
                  "C vs the uncorrected reference: %.1e (must be far above %.0e)"
                  % (e_off, TOL_KL))
    # Exact form (the paper's idealized update), free-running: basis-independent.
    ex = dict(lr, form="exact", precondition_frequency=1)
    cs.kl("kl_exact_16x16_F1", (16, 16), ex)
    cs.kl("kl_exact_24x8_tall_F1", (24, 8), ex)
    cs.kl("kl_exact_6x20_wide_F1", (6, 20), ex)
    cs.kl("kl_exact_1x32_F1", (1, 32), ex)
    cs.kl("kl_exact_12x12_F3_lrscale2", (12, 12), dict(ex, precondition_frequency=3),
          lr_scale=2.0)
    cs.kl("kl_exact_12x12_small_grads_clamped", (12, 12), dict(ex, shampoo_beta=0.7),
          expect_clamp=True, grads=gaussian_grads(rng_for("kl_small_exact"), (12, 12), scale=0.01))
    cs.kl("kl_exact_9x11_defaults_F10", (9, 11), dict(form="exact"))

    # Wrong update order (S_b from the UPDATED S_a): C matches the correct
    # order and is far from the wrong one, in both forms.
    for name, shape, over in (("kl_exact_order_12x12", (12, 12), ex),
                              ("kl_exact_order_20x6", (20, 6), ex),
                              ("kl_eig_order_12x12", (12, 12), dict(lr, precondition_frequency=3)),
                              ("kl_eig_order_6x20", (6, 20), dict(lr, precondition_frequency=3))):
        r = cs.kl(name, shape, over)
        if r is None:
            continue
        w, stats, ref, grads, w0, forced = r
        cfg = dict(KL_BASE, **over)
        wrong = KLRef(cfg, shape, forced=None if cfg["form"] == "exact" else forced,
                      wrong_order=True)
        e, _, _ = trajectory_error(wrong, w0, w, grads, 1.0)
        rep.check(name + " [wrong order differs]", e > 100 * TOL_KL,
                  "C vs sequential-order reference: max rel err %.2e (want > %.0e)" % (
                      e, 100 * TOL_KL))

    # Split API == _step, bit for bit.
    for name, shape, over in (("kl_split_api_eig_12x10", (12, 10),
                               dict(lr, precondition_frequency=3)),
                              ("kl_split_api_exact_12x10", (12, 10),
                               dict(ex, precondition_frequency=2))):
        g = gaussian_grads(rng_for(name), shape)
        cfg = dict(KL_BASE, **over)
        _, rc1, w1, b1, _, e1 = run_c(cs.drv, "kl", shape, g, cfg)
        _, rc2, w2, b2, _, e2 = run_c(cs.drv, "kl", shape, g, cfg, extra=dict(api="split"))
        rep.check(name + " [bit-identical]", rc1 == 0 and rc2 == 0 and np.array_equal(w1, w2)
                  and np.array_equal(b1, b2), (e1 + e2).strip())

    zero_cases("kl", cs, dict(KL_BASE))
    robustness_cases("kl", cs, dict(KL_BASE, lr=1e-3))


# ---------------------------------------------------------------------------
# Kernels, self-checks, defaults


def kernel_cases(cs):
    rep, drv = cs.rep, cs.drv
    rng = rng_for("kernels")
    # 300: the blocked QR (block 128) with two full blocks and a partial one.
    for n in (1, 2, 7, 33, 300):
        q0, _ = np.linalg.qr(rng.standard_normal((n, n)))
        lam = np.sort(rng.uniform(0.1, 10.0, n))
        a = ((q0 * lam) @ q0.T).astype(np.float32)
        a = (0.5 * (a + a.T)).astype(np.float32)
        rc, out, err = drv.kernel("eigh", dict(n=n), a, n * n + n)
        if out is None:
            rep.check("eigh_n%d" % n, False, err.strip())
            continue
        q, lam_c = out[:n * n].reshape(n, n).astype(np.float64), out[n * n:]
        lam_r, q_r = eigh_desc(a.astype(np.float64))
        v = Validity()
        v.eigh(a.astype(np.float64), q, q_r)
        e = max(v.basis_dev, fro(lam_c - lam_r) / fro(lam_r))
        rep.line("eigh_n%d_descending" % n, e, TOL_KERNEL,
                 ok=e <= TOL_KERNEL and v.worst <= VALID_TOL,
                 note="vs numpy eigh+flip (vectors up to sign); valid %.1e" % v.worst)
        o, _ = np.linalg.qr(rng.standard_normal((n, n)))
        o = o.astype(np.float32)
        for sort, blocked in ((True, False), (False, False), (True, True)):
            name = "qr_n%d_sort%d%s" % (n, sort, "_blocked" if blocked else "")
            rc, out, err = drv.kernel("qr", dict(n=n, sort=sort, blocked=blocked),
                                      np.concatenate([a, o]), n * n + n)
            if out is None:
                rep.check(name, False, err.strip())
                continue
            qn, perm = out[:n * n].reshape(n, n).astype(np.float64), out[n * n:].astype(int)
            a64, o64 = a.astype(np.float64), o.astype(np.float64)
            est = np.einsum("ij,ij->j", o64, a64 @ o64)
            perm_r = np.argsort(-est, kind="stable") if sort else np.arange(n)
            q_r = qr_q(a64 @ o64[:, perm_r])
            e = fro(qn - q_r) / np.sqrt(n)
            rep.line(name, e, TOL_KERNEL,
                     ok=e <= TOL_KERNEL and np.array_equal(perm, perm_r),
                     note="vs numpy.linalg.qr of (a o)[:, argsort(-diag(o^T a o))], same signs")
    # Failures: non-finite input is STRATA_ERR_LINALG.
    bad = np.full((3, 3), np.nan, np.float32)
    rc, out, err = drv.kernel("eigh", dict(n=3), bad, 12)
    rep.check("eigh_nonfinite_input", rc == 1 and "STRATA_ERR_LINALG" in err, err.strip())
    rc, out, err = drv.kernel("qr", dict(n=3, sort=True), np.concatenate([bad, bad]), 12)
    rep.check("qr_nonfinite_input", rc == 1 and "STRATA_ERR_LINALG" in err, err.strip())


def selfchecks(rep):
    """The references against closed forms (no C involved)."""
    rng = rng_for("selfcheck")
    # Exact KL form, eps = 0 and no clamp active: P = S_a^-1/2 M S_b^-1/2 with
    # the factors of the paper's simultaneous update, via scipy.
    cfg = dict(KL_BASE, form="exact", precondition_frequency=1, eps=0.0, beta1=0.0)
    ref = KLRef(cfg, (6, 4))
    sa, sb = 0.1 * np.eye(6), 0.1 * np.eye(4)
    worst = 0.0
    w = np.zeros((6, 4))
    for t in range(1, 6):
        g = rng.standard_normal((6, 4))
        b = f32(cfg["beta2"])
        sa_new = b * sa + (1 - b) / 4 * g @ np.linalg.inv(sb) @ g.T
        sb_new = b * sb + (1 - b) / 6 * g.T @ np.linalg.inv(sa) @ g
        sa, sb = sa_new, sb_new
        p = np.real(scipy.linalg.fractional_matrix_power(sa, -0.5) @ g @
                    scipy.linalg.fractional_matrix_power(sb, -0.5))
        lr = f32(cfg["lr"])
        want = -lr * p * (1 - lr * f32(cfg["weight_decay"]))
        got = ref.step(t, g, w, 1.0)
        worst = max(worst, fro(got - want) / fro(want))
    rep.line("selfcheck_kl_exact_vs_paper_equation", worst, 1e-7,
             note="eps=0, b1=0: -lr S_a^-1/2 G S_b^-1/2 via scipy fractional_matrix_power")
    # SOAP with both sides unrotated is Adam with a skipped first step and the
    # bias correction on the step size.
    cfg = dict(SOAP_BASE, weight_decay=0.0)
    ref = SoapRef(cfg, (3, 5), (False, False))
    m = v = np.zeros((3, 5))
    worst = 0.0
    for t in range(1, 8):
        g = rng.standard_normal((3, 5))
        got = ref.step(t, g, np.zeros((3, 5)), 1.0)
        if t == 1:
            continue
        k = t - 1
        b1, b2 = f32(cfg["beta1"]), f32(cfg["beta2"])
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        want = -f32(cfg["lr"]) * (m / (1 - b1 ** k)) / (np.sqrt(v / (1 - b2 ** k)) +
                                                        f32(cfg["eps"]) / np.sqrt(1 - b2 ** k))
        worst = max(worst, fro(got - want) / fro(want))
    rep.line("selfcheck_soap_unrotated_is_adam", worst, 1e-12)
    # Householder QR's Q ignores column signs (so sign flips cannot matter).
    a = rng.standard_normal((7, 7))
    d = np.diag(rng.choice([-1.0, 1.0], 7))
    rep.line("selfcheck_qr_sign_invariance", fro(qr_q(a) - qr_q(a @ d)), 1e-12)


def defaults_case(cs):
    got, err = cs.drv.defaults()
    if got is None:
        cs.rep.check("config_defaults", False, err.strip())
        return
    want = {"soap": dict(SOAP_BASE), "kl": dict(KL_BASE, form=0)}
    bad = []
    for opt, fields in want.items():
        for k, v in fields.items():
            g = got.get(opt, {}).get(k)
            same = (g == v) if isinstance(v, (bool, int)) and not isinstance(v, float) \
                else (g is not None and f32(g) == f32(v))
            if not same:
                bad.append("%s.%s=%s (want %s)" % (opt, k, g, v))
    cs.rep.check("config_defaults", not bad,
                 "; ".join(bad) or "soap: soap.py defaults; kl: kl_opt.py defaults")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/soap_kl_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    t0 = time.monotonic()
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="strata_soapkl_") as tmp:
        cs = Cases(Driver(os.path.abspath(sys.argv[1]), tmp), rep)
        print("metric: per-step relative error of the weight update (see module doc); "
              "tolerances SOAP %.0e, KL-Shampoo %.0e, kernels %.0e" % (TOL_SOAP, TOL_KL,
                                                                       TOL_KERNEL))
        selfchecks(rep)
        defaults_case(cs)
        kernel_cases(cs)
        soap_cases(cs)
        kl_cases(cs)
    print("\n%.1f s" % (time.monotonic() - t0))
    if rep.failed:
        print("%d of %d checks FAILED: %s" % (len(rep.failed), rep.count, ", ".join(rep.failed)))
        return 1
    print("all %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
