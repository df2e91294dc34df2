#!/usr/bin/env python3
"""Float64 reference test for strata's optimizer math (AdamW, Shampoo, Muon,
the inverse p-th root and Newton-Schulz).

Usage: test_optim_reference.py PATH/TO/optim_driver

The references below are written from the formulas in include/strata/optim.h
and DESIGN.md "Algorithms", in numpy/scipy float64, independently of optim/.
Each case generates a random problem from a fixed seed, runs it through
optim_driver (the public C API on the cpu backend), and compares.

Metric for the optimizer trajectories: for every step t,

    err_t = ||dW_C(t) - dW_ref(t)||_F / ||dW_ref(t)||_F

where dW_C(t) = W_C(t) - W_C(t-1) is the C update read from its float32
weights, and dW_ref(t) = -lr (D_ref(t) + wd W_C(t-1)) is the float64 reference
update. D_ref(t) (the direction: Adam ratio, grafted Shampoo direction, scaled
Newton-Schulz output) comes from the float64 optimizer state driven by the
same float32 gradients; it does not depend on W. Only the decoupled
weight-decay term is evaluated at the C weights W_C(t-1), so that errors do not
accumulate through the trajectory (teacher forcing). A case's error is
max_t err_t. If ||dW_ref(t)|| = 0 the absolute ||dW_C(t)|| is used (it must be
0). "floor" is the part of err that float32 storage of W alone explains:
||ulp(W_C(t))/2||_F / ||dW_ref(t)||_F; problems are scaled to keep it well
below the tolerance.

Prints one line per case and exits 0 when all pass, 1 otherwise.
"""

import json
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import scipy.linalg

TOL_ADAMW = 1e-5
TOL_MUON = 1e-5
TOL_SHAMPOO = 1e-4
TOL_LINALG = 1e-6  # inverse root / Newton-Schulz: one float32 rounding of a float64 result
STEPS = 20

NS_COEFFS = (3.4445, -4.7750, 2.0315)
SENTINEL = np.float32(12345.0)


def f32(x):
    """A hyperparameter as the C code sees it (stored in a float field)."""
    return float(np.float32(x))


def rng_for(name):
    """Per-case generator: adding or reordering cases does not change others."""
    return np.random.default_rng([20240611, zlib.crc32(name.encode())])


def fro(x):
    return float(np.linalg.norm(x))


# ---------------------------------------------------------------------------
# Driver wrapper


class Driver:
    def __init__(self, path, tmpdir):
        self.path = path
        self.tmp = tmpdir
        self.count = 0

    def run(self, mode, cfg, data, out_count):
        """Runs one driver invocation; returns (rc, out float32 array or None,
        stdout JSON dict or None, stderr text)."""
        self.count += 1
        base = os.path.join(self.tmp, "c%04d" % self.count)
        cfg_path, in_path, out_path = base + ".json", base + ".in", base + ".out"
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        np.ascontiguousarray(data, dtype="<f4").tofile(in_path)
        proc = subprocess.run([self.path, mode, cfg_path, in_path, out_path],
                              capture_output=True, text=True, timeout=120)
        out = None
        if os.path.exists(out_path):
            out = np.fromfile(out_path, dtype="<f4").astype(np.float32)
            if out.size != out_count:
                out = None
        stats = None
        if proc.returncode == 0 and proc.stdout.strip():
            try:
                stats = json.loads(proc.stdout.strip().splitlines()[-1])
            except ValueError:
                stats = None
        return proc.returncode, out, stats, proc.stderr

    def defaults(self):
        out_path = os.path.join(self.tmp, "defaults.json")
        proc = subprocess.run([self.path, "defaults", out_path], capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0:
            return None, proc.stderr
        with open(out_path) as f:
            return json.load(f), ""


# ---------------------------------------------------------------------------
# Reporting


class Report:
    def __init__(self, info=False):
        self.failed = []
        self.count = 0
        self.info = info  # informational: print the error, never fail on it

    def line(self, name, err, tol, ok=None, note=""):
        self.count += 1
        if ok is None:
            ok = bool(np.isfinite(err)) and err <= tol
        status = "INFO" if self.info else "PASS" if ok else "FAIL"
        if not ok and not self.info:
            self.failed.append(name)
        print("%-50s max_rel_err %-10s tol %-8s %s%s" % (
            name, "%.3e" % err if np.isfinite(err) else str(err), "%.0e" % tol, status,
            ("  " + note) if note else ""), flush=True)
        return ok

    def check(self, name, ok, note=""):
        """A pass/fail property without a numeric error."""
        self.count += 1
        if not ok:
            self.failed.append(name)
        print("%-50s %-40s %s%s" % (name, "", "PASS" if ok else "FAIL",
                                     ("  " + note) if note else ""), flush=True)
        return ok


# ---------------------------------------------------------------------------
# Float64 references (from include/strata/optim.h)


FLT_EPSILON = 2.0 ** -23


def inv_root_ref(a, eps, p, eps_rel=0.0, pseudo=False, rtol=-1.0, atol=0.0, exponent=None):
    """Inverse root a^(-e), e = exponent or 1/p, float64 (optim.h, linear algebra):
      regularized:    d = (max(lambda, 0) + max(eps, eps_rel lambda_max))^(-e)
      pseudo-inverse: d = lambda > cutoff ? lambda^(-e) : 0,
                      cutoff = max(atol, rtol' lambda_max), rtol' = n FLT_EPSILON if rtol < 0
    with lambda_max = max(max(lambda), 0); out = V diag(d) V^T."""
    e = 1.0 / p if exponent is None else exponent
    lam, v = np.linalg.eigh(np.asarray(a, dtype=np.float64))
    lmax = max(float(lam.max()), 0.0)
    if pseudo:
        r = a.shape[0] * FLT_EPSILON if rtol < 0 else rtol
        cutoff = max(atol, r * lmax)
        keep = lam > cutoff
        d = np.zeros_like(lam)
        d[keep] = lam[keep] ** (-e)
    else:
        d = (np.maximum(lam, 0.0) + max(eps, eps_rel * lmax)) ** (-e)
    return (v * d) @ v.T


def newton_schulz_ref(x, steps):
    """Quintic Newton-Schulz in float64: X /= ||X||_F (X = 0 stays 0; no
    additive epsilon, so the result is scale-invariant: optim.h), then `steps`
    times A = X X^T; X = a X + (b A + c A A) X. Runs on X^T when rows > cols
    (the same result in exact arithmetic, cheaper)."""
    a, b, c = NS_COEFFS
    x = np.array(x, dtype=np.float64)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    nx = fro(x)
    x = x / nx if nx > 0 else x
    for _ in range(steps):
        am = x @ x.T
        x = a * x + (b * am + c * (am @ am)) @ x
    return x.T if transposed else x


class AdamWRef:
    """m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
    D = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)."""

    def __init__(self, cfg, shape):
        self.b1, self.b2, self.eps = f32(cfg["beta1"]), f32(cfg["beta2"]), f32(cfg["eps"])
        self.m = np.zeros(shape)
        self.v = np.zeros(shape)

    def direction(self, t, g):
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mhat = self.m / (1 - self.b1 ** t)
        vhat = self.v / (1 - self.b2 ** t)
        return mhat / (np.sqrt(vhat) + self.eps)


def shampoo_schedule(cfg, t):
    """Refresh points: every F steps from start_preconditioning_step (-1 = F),
    i.e. t = start, start + F, start + 2F, ..."""
    freq = cfg["precondition_frequency"]
    start = cfg["start_preconditioning_step"]
    if start < 0:
        start = freq
    return t >= start and (t - start) % freq == 0


def block_ranges(n, d):
    return [(i, min(i + d, n)) for i in range(0, n, d)]


class ShampooBlockRef:
    def __init__(self, rows, cols):
        self.L = np.zeros((rows, rows))
        self.R = np.zeros((cols, cols))
        self.L_inv = None  # no root before the first refresh
        self.R_inv = None
        self.M = np.zeros((rows, cols))
        self.A = np.zeros((rows, cols))
        self.B = np.zeros((rows, cols))


class ShampooRef:
    """Per block (tiles of at most max_preconditioner_dim, row-major):
      L = b2 L + (1-b2) G G^T, R = b2 R + (1-b2) G^T G   (b2 = 1: L += G G^T)
      M = b1 M + (1-b1) G; M_hat = M / (1-b1^t)          (b1 = 0: M_hat = G)
      at refresh steps L_inv = (L + eps)^(-1/4), R_inv likewise (clamped eigh);
        with epsilon_rel the regularizer is max(eps, eps_rel lambda_max); with
        use_pseudo_inverse eigenvalues <= the cutoff get 0; exponents from
        inverse_exponent_override (< 0: 1/4, 0: identity); a non-finite root
        keeps the previous one (as the C code's failure path)
      grafting Adam:    A = bg A + (1-bg) G^2, D = M_hat / (sqrt(A/(1-bg^t)) + eps_g)
               AdaGrad: A += G^2,              D = M_hat / (sqrt(A) + eps_g)
      P = L_inv M_hat R_inv, P *= ||D|| / ||P||  (no root yet: P = D)
      momentum: B = mu B + P; P = nesterov ? P + mu B : B."""

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.b1, self.b2 = f32(cfg["beta1"]), f32(cfg["beta2"])
        self.eps = f32(cfg["epsilon"])
        self.mu = f32(cfg["momentum"])
        self.bg, self.eps_g = f32(cfg["grafting_beta2"]), f32(cfg["grafting_epsilon"])
        self.eps_rel = f32(cfg.get("epsilon_rel", 0.0))
        self.pseudo = bool(cfg.get("use_pseudo_inverse", False))
        self.rtol = f32(cfg.get("pseudo_inverse_rtol", -1.0))
        self.atol = f32(cfg.get("pseudo_inverse_atol", 0.0))
        ov = cfg.get("inverse_exponent_override", -1.0)
        ov = list(ov) if isinstance(ov, (list, tuple)) else [ov, ov]
        self.exps = [0.25 if f32(x) < 0 else f32(x) for x in ov]
        d = cfg["max_preconditioner_dim"]
        self.rows_r = block_ranges(shape[0], d)
        self.cols_r = block_ranges(shape[1], d)
        self.blocks = {(r, c): ShampooBlockRef(r[1] - r[0], c[1] - c[0])
                       for r in self.rows_r for c in self.cols_r}

    def direction(self, t, g):
        cfg = self.cfg
        out = np.zeros_like(g)
        refresh = shampoo_schedule(cfg, t)
        for (r, c), blk in self.blocks.items():
            gb = g[r[0]:r[1], c[0]:c[1]]
            if self.b2 == 1.0:
                blk.L += gb @ gb.T
                blk.R += gb.T @ gb
            else:
                blk.L = self.b2 * blk.L + (1 - self.b2) * (gb @ gb.T)
                blk.R = self.b2 * blk.R + (1 - self.b2) * (gb.T @ gb)
            if refresh:
                blk.L_inv = self.root(blk.L, 0, blk.L_inv)
                blk.R_inv = self.root(blk.R, 1, blk.R_inv)
            if self.b1 == 0.0:
                mhat = gb
            else:
                blk.M = self.b1 * blk.M + (1 - self.b1) * gb
                mhat = blk.M / (1 - self.b1 ** t)
            graft = cfg["grafting"]
            if graft == "adam":
                blk.A = self.bg * blk.A + (1 - self.bg) * gb * gb
                dgraft = mhat / (np.sqrt(blk.A / (1 - self.bg ** t)) + self.eps_g)
            elif graft == "adagrad":
                blk.A = blk.A + gb * gb
                dgraft = mhat / (np.sqrt(blk.A) + self.eps_g)
            else:
                dgraft = None
            if blk.L_inv is None:
                assert dgraft is not None, "grafting none needs a root at step 1"
                p = dgraft
            else:
                p = blk.L_inv @ mhat @ blk.R_inv
                if dgraft is not None:
                    # ||P|| = 0 only when M_hat = 0; then D = 0 too and P stays 0
                    # (the header's ratio is 0/0 there: we take the update as 0).
                    pn = fro(p)
                    p = p * (fro(dgraft) / pn) if pn > 0 else np.zeros_like(p)
            if self.mu > 0:
                blk.B = self.mu * blk.B + p
                p = p + self.mu * blk.B if cfg["nesterov"] else blk.B.copy()
            out[r[0]:r[1], c[0]:c[1]] = p
        return out

    def root(self, a, factor, prev):
        e = self.exps[factor]
        if e == 0.0:
            return np.eye(a.shape[0])
        with np.errstate(all="ignore"):
            x = inv_root_ref(a, self.eps, None, eps_rel=self.eps_rel, pseudo=self.pseudo,
                             rtol=self.rtol, atol=self.atol, exponent=e)
        return x if np.all(np.isfinite(x)) else prev


class MuonRef:
    """B = mu B + G; G' = nesterov ? G + mu B : B; X = NS5(G'); D = scale X,
    scale = sqrt(max(1, rows/cols)) or 0.2 sqrt(max(rows, cols))."""

    def __init__(self, cfg, shape):
        self.cfg = cfg
        self.mu = f32(cfg["momentum"])
        self.B = np.zeros(shape)
        rows, cols = shape
        if cfg["scale"] == "shape":
            self.scale = np.sqrt(max(1.0, rows / cols))
        else:
            self.scale = 0.2 * np.sqrt(max(rows, cols))

    def direction(self, t, g):
        self.B = self.mu * self.B + g
        gp = g + self.mu * self.B if self.cfg["nesterov"] else self.B
        return self.scale * newton_schulz_ref(gp, self.cfg["ns_steps"])


# ---------------------------------------------------------------------------
# Optimizer trajectory cases

ADAMW_BASE = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
SHAMPOO_BASE = dict(lr=1e-2, beta1=0.9, beta2=1.0, epsilon=1e-12, momentum=0.0,
                    nesterov=False, weight_decay=0.0, precondition_frequency=1,
                    start_preconditioning_step=-1, max_preconditioner_dim=1024,
                    grafting="adam", grafting_beta2=0.999, grafting_epsilon=1e-8,
                    epsilon_rel=0.0, use_pseudo_inverse=False, pseudo_inverse_rtol=-1.0,
                    pseudo_inverse_atol=0.0, inverse_exponent_override=[-1.0, -1.0])
MUON_BASE = dict(lr=0.02, momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0,
                 scale="shape")
REFS = {"adamw": (AdamWRef, ADAMW_BASE), "shampoo": (ShampooRef, SHAMPOO_BASE),
        "muon": (MuonRef, MUON_BASE)}


def gaussian_grads(rng, shape, steps=STEPS, scale=1.0):
    return [(scale * rng.standard_normal(shape)).astype(np.float32) for _ in range(steps)]


def lowrank_grads(rng, shape, rank, isotropic=False, steps=STEPS):
    """Exactly rank-`rank` gradients G_t = U C_t V^T / 4 with fixed U (rows x
    rank), V (cols x rank). All entries are small integers over 4, so every G_t
    is exactly rank `rank` in float32 as in float64 (no rounding noise on the
    null space), and the optimizer state spans one fixed subspace.

    Generic (AdamW, Shampoo): U, V random integers in [-2, 2]; C_t has entries
    in {1, 2} and is nonsingular. Positive entries keep the running averages
    (M, momentum) from cancelling: float32 rounding of a cancelling sum leaves
    noise relative to the summands on the null space, which the preconditioner
    then multiplies by (lambda_max/eps)^(1/2).

    Isotropic (Muon): U, V have +-1 columns on disjoint supports of equal size
    and C_t = c_t C0 with c_t in {1, 2} and C0 a multiple of a rotation, so every
    nonzero singular value of the momentum is the same. Newton-Schulz multiplies
    float32 roundoff in directions with small singular values by up to
    a^5 = 3.4445^5 ~ 490, so a gradient whose range holds a small singular value
    is ill-conditioned in float32 whatever its rank (a generic rank-2 G gave up to
    1.5e-4 against float64 over 15 seeds); isotropic data keeps the null space
    the only thing under test."""
    rows, cols = shape
    if isotropic:
        def basis(n):
            b = np.zeros((n, rank))
            size = n // rank
            for k, idx in enumerate(np.split(rng.permutation(n)[:size * rank], rank)):
                b[idx, k] = rng.choice([-1.0, 1.0], size=size)
            return b

        u, v = basis(rows), basis(cols)
        c0 = np.array([[2.0, 1.0], [-1.0, 2.0]])[:rank, :rank] if rank <= 2 else np.eye(rank)
        cs = [float(rng.choice([1.0, 2.0])) * c0 for _ in range(steps)]
    else:
        u = rng.integers(-2, 3, size=(rows, rank)).astype(np.float64)
        v = rng.integers(-2, 3, size=(cols, rank)).astype(np.float64)
        u[0, :] = 1.0  # no all-zero column
        v[0, :] = 1.0
        cs = []
        while len(cs) < steps:
            c = rng.choice([1.0, 2.0], size=(rank, rank))
            if abs(np.linalg.det(c)) > 0.5:
                cs.append(c)
    out = [(0.25 * (u @ c @ v.T)).astype(np.float32) for c in cs]
    assert all(np.linalg.matrix_rank(g.astype(np.float64)) == rank for g in out)
    return u, v, out


def run_trajectory(drv, rep, name, opt, shape, grads, over, tol, w_scale=0.01,
                   lr_scale=1.0, note="", extra=None, w0=None):
    rng = rng_for(name + "/w0")
    rows, cols = shape
    if w0 is None:
        w0 = (w_scale * rng.standard_normal(shape)).astype(np.float32)
    ref_cls, base = REFS[opt]
    cfg = dict(base)
    cfg.update(over)
    steps = len(grads)
    drv_cfg = dict(cfg, rows=rows, cols=cols, steps=steps, lr_scale=lr_scale)
    data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads])
    rc, out, stats, err_txt = drv.run(opt, drv_cfg, data, steps * rows * cols)
    if rc != 0 or out is None:
        rep.check(name, False, "driver rc=%d: %s" % (rc, err_txt.strip()))
        return None
    wc = out.reshape(steps, rows, cols)
    if not np.all(np.isfinite(wc)):
        bad = int(np.argmax([not np.all(np.isfinite(w)) for w in wc])) + 1
        rep.check(name, False, "non-finite weights from step %d" % bad)
        return wc

    ref = ref_cls(cfg, shape)
    lr = float(np.float32(cfg["lr"]) * np.float32(lr_scale))
    wd = f32(cfg["weight_decay"])
    prev = w0.astype(np.float64)
    worst, worst_t, floor = 0.0, 0, 0.0
    for t in range(1, steps + 1):
        d_ref = -lr * (ref.direction(t, grads[t - 1].astype(np.float64)) + wd * prev)
        cur = wc[t - 1].astype(np.float64)
        d_c = cur - prev
        nref = fro(d_ref)
        e = fro(d_c - d_ref) / nref if nref > 0 else fro(d_c)
        if nref > 0:
            floor = max(floor, fro(0.5 * np.spacing(np.abs(wc[t - 1]))) / nref)
        if e > worst or not np.isfinite(e):
            worst, worst_t = e, t
        prev = cur
    note = ("step %d, floor %.1e" % (worst_t, floor)) + ("; " + note if note else "")
    rep.line(name, worst, tol, note=note)
    if extra is not None:
        extra(stats, cfg, wc)
    return wc


def shampoo_counters(rep, name, shape):
    """Checks the driver's counters against the configuration."""

    def check(stats, cfg, wc):
        if stats is None:
            rep.check(name + " [counters]", False, "no counters on stdout")
            return
        d = cfg["max_preconditioner_dim"]
        blocks = len(block_ranges(shape[0], d)) * len(block_ranges(shape[1], d))
        sched = [1 if shampoo_schedule(cfg, t) else 0 for t in range(1, len(wc) + 1)]
        problems = []
        if stats["refresh"] != sched:
            problems.append("is_refresh_step %s, expected %s" % (stats["refresh"], sched))
        if stats["blocks"] != blocks:
            problems.append("blocks %d, expected %d" % (stats["blocks"], blocks))
        if stats["root_failures"] != 0:
            problems.append("root_failures %d" % stats["root_failures"])
        if stats.get("root_retries", 0) != 0:
            problems.append("root_retries %d (dsyevd rejected)" % stats["root_retries"])
        if stats["root_refreshes"] != 2 * blocks * sum(sched):
            problems.append("root_refreshes %d, expected 2 x %d blocks x %d refreshes" % (
                stats["root_refreshes"], blocks, sum(sched)))
        if stats["bytes_in_use_after"] != 0:
            problems.append("%d backend bytes leaked" % stats["bytes_in_use_after"])
        rep.check(name + " [counters]", not problems, "; ".join(problems))

    return check


def no_leak(rep, name):
    def check(stats, cfg, wc):
        ok = stats is not None and stats.get("bytes_in_use_after") == 0
        rep.check(name + " [no leak]", ok, "" if ok else "stats %s" % stats)

    return check


def adamw_cases(drv, rep):
    def case(name, shape, over=None, grads=None, **kw):
        rng = rng_for(name)
        if grads is None:
            grads = gaussian_grads(rng, shape)
        run_trajectory(drv, rep, name, "adamw", shape, grads, over or {}, TOL_ADAMW,
                       extra=no_leak(rep, name) if name == "adamw_8x8_defaults" else None,
                       **kw)

    case("adamw_8x8_defaults", (8, 8))
    case("adamw_16x16_wd0.1_lrscale0.5", (16, 16), dict(weight_decay=0.1), lr_scale=0.5)
    case("adamw_24x6_beta2_0.99", (24, 6), dict(beta2=0.99))
    case("adamw_5x20_beta1_0", (5, 20), dict(beta1=0.0))
    case("adamw_1x32", (1, 32), dict(beta1=0.5, beta2=0.9))
    case("adamw_32x1", (32, 1))
    # Tiny gradients: sqrt(v_hat) ~ 1e-6, so eps = 1e-8 changes the update by ~1%.
    case("adamw_16x16_tiny_grads_eps", (16, 16), dict(eps=1e-8),
         grads=gaussian_grads(rng_for("tiny"), (16, 16), scale=1e-6))
    # Elements whose gradient is always 0 keep m = v = 0: update 0 / (0 + eps) = 0.
    rng = rng_for("adamw_sparse")
    mask = (rng.random((12, 10)) < 0.5).astype(np.float32)
    case("adamw_12x10_sparse", (12, 10),
         grads=[g * mask for g in gaussian_grads(rng, (12, 10))])
    _, _, g1 = lowrank_grads(rng_for("adamw_rank1"), (16, 16), 1)
    case("adamw_16x16_rank1", (16, 16), grads=g1)
    # All-zero gradients: only decoupled weight decay, dW = -lr wd W (lr wd large so
    # the float32 rounding of W stays far below the tolerance).
    case("adamw_8x8_zero_grads_wd", (8, 8), dict(lr=0.1, weight_decay=0.5),
         grads=[np.zeros((8, 8), np.float32)] * STEPS)


def shampoo_cases(drv, rep):
    def case(name, shape, over=None, grads=None, tol=TOL_SHAMPOO, **kw):
        if grads is None:
            grads = gaussian_grads(rng_for(name), shape)
        return run_trajectory(drv, rep, name, "shampoo", shape, grads, over or {}, tol,
                              extra=shampoo_counters(rep, name, shape), **kw)

    # Full-rank square problems at the default epsilon 1e-12. Step 1 (L = G G^T)
    # is the worst conditioned: float32 factors cost ~ kappa(G_1)^2 * 6e-8.
    case("shampoo_8x8_defaults", (8, 8))
    case("shampoo_16x16_defaults", (16, 16))
    case("shampoo_16x16_beta2_0.99_adagrad", (16, 16), dict(beta2=0.99, grafting="adagrad"))
    case("shampoo_12x12_beta2_0.95_momentum", (12, 12),
         dict(beta2=0.95, momentum=0.9, nesterov=False))
    case("shampoo_12x12_nesterov_wd", (12, 12),
         dict(momentum=0.5, nesterov=True, weight_decay=0.1))
    case("shampoo_10x10_beta1_0", (10, 10), dict(beta1=0.0))
    case("shampoo_8x8_graft_none", (8, 8), dict(grafting="none"))
    # Without grafting the (1-b2) factor and lr_scale are visible (grafting
    # rescales a constant factor on L or R away).
    case("shampoo_8x8_graft_none_beta2_0.9_lrscale0.5", (8, 8),
         dict(grafting="none", beta2=0.9), lr_scale=0.5)
    case("shampoo_12x12_F3_start4", (12, 12),
         dict(precondition_frequency=3, start_preconditioning_step=4, momentum=0.9))
    case("shampoo_12x12_F5_start_default", (12, 12),
         dict(precondition_frequency=5, grafting="adagrad"))

    # Non-square and blocked problems: one factor of each block is rank-deficient
    # for a while (24x6: L has rank <= 6t until t = 4; 1x32 / 32x1: R or L has
    # rank <= t for all 20 steps; 8x4 blocks: rank 4 at t = 1). On the null space
    # of a factor the root is eps^(-1/4), (lambda_max/eps)^(1/4) ~ 3e3 times the
    # root on its range at eps = 1e-12, and the float32 root and the float32
    # product L_inv M R_inv lose that factor times 6e-8 (a float32 emulation of the
    # header's algorithm gives 1e-4..2e-4 relative error against float64 here).
    # So these cases use epsilon = 1e-6 (lambda_max/eps ~ 1e8, emulated error
    # ~5e-6), which is well-posed in float32 and still far below the eigenvalues
    # on the range, so the clamp/eps path is exercised on the null space.
    wp = dict(epsilon=1e-6)
    case("shampoo_24x6_tall", (24, 6), dict(wp))
    case("shampoo_5x20_wide_momentum", (5, 20), dict(wp, momentum=0.9, nesterov=True))
    case("shampoo_1x32", (1, 32), dict(wp))
    case("shampoo_32x1_beta2_0.9", (32, 1), dict(wp, beta2=0.9))
    case("shampoo_20x12_dim8_blocked", (20, 12), dict(wp, max_preconditioner_dim=8))
    # Blocked with F = 3, start = 4 at the default epsilon: by the first refresh
    # (t = 4) every 8x4 block's L has rank 8, so eps = 1e-12 is well-posed.
    case("shampoo_20x12_dim8_F3_start4", (20, 12),
         dict(max_preconditioner_dim=8, precondition_frequency=3,
              start_preconditioning_step=4, weight_decay=0.05))
    # The split API (update_factors / compute_roots at refresh steps / apply)
    # must give exactly the weights of strata_shampoo_step.
    over = dict(wp, max_preconditioner_dim=8, precondition_frequency=2, momentum=0.9)
    g = gaussian_grads(rng_for("split"), (20, 12))
    w0 = (0.01 * rng_for("split/w0").standard_normal((20, 12))).astype(np.float32)
    w_step = case("shampoo_20x12_dim8_F2 (step api)", (20, 12), over, grads=g, w0=w0)
    w_split = case("shampoo_20x12_dim8_F2 (split api)", (20, 12), dict(over, api="split"),
                   grads=g, w0=w0)
    if w_step is not None and w_split is not None:
        rep.check("shampoo_split_api_bit_identical", np.array_equal(w_step, w_split),
                  "max |diff| %.3e" % float(np.max(np.abs(w_step - w_split))))

    # All-zero gradients: L = R = 0, roots eps^(-1/4) I, M_hat = 0, D = 0: the
    # update is exactly the weight decay, and never NaN (||P|| = 0 here).
    zeros = [np.zeros((8, 8), np.float32)] * STEPS
    case("shampoo_8x8_zero_grads_wd", (8, 8), dict(lr=0.1, weight_decay=0.5), grads=zeros)
    case("shampoo_8x8_zero_grads_no_wd", (8, 8), dict(momentum=0.9), grads=zeros)
    case("shampoo_6x9_zero_grads_dim4", (6, 9), dict(max_preconditioner_dim=4,
                                                     grafting="adagrad"),
         grads=[np.zeros((6, 9), np.float32)] * STEPS)
    # Five zero gradients, then random ones (roots first computed from L = 0).
    g = gaussian_grads(rng_for("zero_then"), (8, 8))
    case("shampoo_8x8_zero_then_random", (8, 8), dict(momentum=0.5),
         grads=[np.zeros((8, 8), np.float32)] * 5 + g[5:])

    # Exactly rank-deficient gradients G_t = U C_t V^T (see lowrank_grads): both
    # factors of a block have rank r, their null-space eigenvalues are 0 (clamped)
    # + eps, and the roots there are eps^(-1/4) against lambda^(-1/4) on the
    # range. float32 roundoff in L, in the float32 roots (whose entries are
    # ~eps^(-1/4) while their action on the range is lambda^(-1/4)) and in M
    # reaches the null spaces and comes back multiplied by ~(lambda_max/eps)^(1/2).
    # Measured against this C code over 10 seeds per shape (relative error):
    #   eps = 1e-12: 3e-4 (8x8 rank 1) to 1.3 (16x16 rank 2, 24x6, 12x20): no
    #   float32 implementation can match float64 here; eps = 1e-6 lambda_max:
    #   up to 9e-5; 1e-4 lambda_max: up to 1e-5; 1e-3 lambda_max: up to 3e-6.
    # So these cases use eps = 1e-3 lambda_max (largest eigenvalue of the final
    # factors), still far below the range eigenvalues after the first steps.
    for rank, shape in ((1, (8, 8)), (2, (16, 16)), (1, (24, 6)), (2, (12, 20))):
        name = "shampoo_%dx%d_rank%d" % (shape[0], shape[1], rank)
        _, _, g = lowrank_grads(rng_for(name), shape, rank)
        g64 = [x.astype(np.float64) for x in g]
        lam = max(np.linalg.eigvalsh(sum(x @ x.T for x in g64))[-1],
                  np.linalg.eigvalsh(sum(x.T @ x for x in g64))[-1])
        eps = f32(1e-3 * lam)
        case(name, shape, dict(epsilon=eps), grads=g,
             note="eps %.2e = 1e-3 lambda_max" % eps)
    # Informational: rank 2 at the default eps = 1e-12. Gated on finiteness, the
    # counters (no root failure) only; its error is printed, not compared.
    name = "shampoo_16x16_rank2_eps1e-12 (info)"
    _, _, g = lowrank_grads(rng_for("shampoo_16x16_rank2"), (16, 16), 2)
    w = run_trajectory(drv, Report(info=True), name, "shampoo", (16, 16), g, {},
                       TOL_SHAMPOO, extra=shampoo_counters(rep, name, (16, 16)))
    rep.check(name + " [finite]", w is not None and bool(np.all(np.isfinite(w))))


def muon_cases(drv, rep):
    def case(name, shape, over=None, grads=None, tol=TOL_MUON, **kw):
        if grads is None:
            grads = gaussian_grads(rng_for(name), shape)
        return run_trajectory(drv, rep, name, "muon", shape, grads, over or {}, tol, **kw)

    case("muon_16x16_defaults", (16, 16), extra=no_leak(rep, "muon_16x16_defaults"))
    case("muon_8x8_no_nesterov", (8, 8), dict(nesterov=False))
    case("muon_12x12_momentum0_lrscale0.5", (12, 12), dict(momentum=0.0), lr_scale=0.5)
    case("muon_12x12_ns3_wd", (12, 12), dict(ns_steps=3, weight_decay=0.1))
    case("muon_24x6_tall_shape", (24, 6))
    case("muon_24x6_tall_adamw_rms", (24, 6), dict(scale="adamw_rms", nesterov=False))
    case("muon_5x20_wide_shape", (5, 20))
    case("muon_5x20_wide_adamw_rms", (5, 20), dict(scale="adamw_rms"))
    case("muon_1x32", (1, 32))
    case("muon_32x1_adamw_rms", (32, 1), dict(scale="adamw_rms"))
    case("muon_8x8_zero_grads_wd", (8, 8), dict(lr=0.1, weight_decay=0.5),
         grads=[np.zeros((8, 8), np.float32)] * STEPS)
    # Exactly rank-deficient gradients (isotropic on their range: see
    # lowrank_grads). NS must keep the null space at zero (and no division by a
    # zero norm); the tall ones take the transposed path.
    for rank, shape in ((1, (16, 16)), (2, (12, 12)), (1, (24, 6)), (2, (6, 20)),
                        (3, (16, 16))):
        name = "muon_%dx%d_rank%d" % (shape[0], shape[1], rank)
        _, _, g = lowrank_grads(rng_for(name), shape, rank, isotropic=True)
        case(name, shape, grads=g)


# ---------------------------------------------------------------------------
# Linear algebra cases


def random_spd(rng, n, lo, hi):
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return q, lam


def sym_f32(a):
    a = 0.5 * (a + a.T)
    return a.astype(np.float32)  # elementwise rounding keeps it exactly symmetric


def inv_root_cases(drv, rep):
    def run(a32, eps, p):
        n = a32.shape[0]
        return drv.run("inv_root", dict(n=n, eps=eps, p=p), a32, n * n)

    def case(name, a32, eps, p=4.0, scipy_check=False):
        rc, out, _, err_txt = run(a32, eps, p)
        if rc != 0 or out is None:
            rep.check(name, False, "driver rc=%d: %s" % (rc, err_txt.strip()))
            return
        n = a32.shape[0]
        out = out.reshape(n, n).astype(np.float64)
        ref = inv_root_ref(a32, eps, p)
        e = fro(out - ref) / fro(ref)
        rep.line(name, e, TOL_LINALG, note="vs eigh, clamp(lambda,0)+eps")
        if scipy_check:
            ref2 = scipy.linalg.fractional_matrix_power(
                a32.astype(np.float64) + eps * np.eye(n), -1.0 / p)
            e2 = fro(out - np.real(ref2)) / fro(ref2)
            rep.line(name + " [scipy fmp]", e2, TOL_LINALG,
                     note="vs scipy.linalg.fractional_matrix_power")

    rng = rng_for("inv_root")
    for n, lo, hi, eps in ((8, 0.1, 10.0, 1e-12), (16, 1e-3, 1e2, 1e-12), (64, 1e-2, 1e2, 1e-6),
                           (5, 1.0, 1.0, 1e-12)):
        q, lam = random_spd(rng, n, lo, hi)
        a = sym_f32((q * lam) @ q.T)
        case("inv_root_spd_n%d_eps%.0e" % (n, eps), a, eps, scipy_check=True)
    q, lam = random_spd(rng, 12, 0.1, 10.0)
    a = sym_f32((q * lam) @ q.T)
    case("inv_root_spd_n12_p2", a, 1e-8, p=2.0, scipy_check=True)
    case("inv_root_n1", np.array([[4.0]], np.float32), 0.0, scipy_check=True)
    # PSD with exact zero eigenvalues (rank 3 of 10): on the null space the root
    # is eps^(-1/4). eps >= 1e-6 so that float64 roundoff in the computed zero
    # eigenvalues (~1e-16 * ||A||) does not matter (at 1e-12 it would, ~1e-4).
    b = rng.standard_normal((10, 3))
    a = sym_f32(b @ b.T)
    for eps in (1e-3, 1e-6):
        case("inv_root_psd_rank3_n10_eps%.0e" % eps, a, eps)
    # The zero matrix: eigenvalues exactly 0, root = eps^(-1/4) I (Shampoo's root
    # of an all-zero factor).
    case("inv_root_zero_n6_eps1e-12", np.zeros((6, 6), np.float32), 1e-12)
    # Indefinite: negative eigenvalues are clamped to 0 before adding eps.
    q, _ = np.linalg.qr(rng.standard_normal((9, 9)))
    lam = np.array([-3.0, -1.0, -0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    a = sym_f32((q * lam) @ q.T)
    case("inv_root_indefinite_n9_eps1e-4", a, 1e-4)
    case("inv_root_indefinite_n9_eps1e-1", a, 1e-1)
    # Failures: STRATA_ERR_LINALG and `out` untouched.
    for name, a, eps in (("inv_root_nan_input", np.full((4, 4), np.nan, np.float32), 1e-6),
                         ("inv_root_zero_eps0_inf_root", np.zeros((4, 4), np.float32), 0.0)):
        rc, out, _, err_txt = run(a, eps, 4.0)
        ok = (rc == 1 and "STRATA_ERR_LINALG" in err_txt and out is not None
              and bool(np.all(out == SENTINEL)))
        rep.check(name, ok, "rc=%d (want 1, STRATA_ERR_LINALG, out untouched): %s" % (
            rc, err_txt.strip()) if not ok else "STRATA_ERR_LINALG, out untouched")


def newton_schulz_cases(drv, rep):
    def run(x32, steps=5):
        rows, cols = x32.shape
        rc, out, _, err_txt = drv.run("newton_schulz", dict(rows=rows, cols=cols, steps=steps),
                                      x32, rows * cols)
        if rc != 0 or out is None:
            return None, err_txt
        return out.reshape(rows, cols), ""

    rng = rng_for("newton_schulz")
    for shape, steps, scale in (((8, 8), 5, 1.0), ((16, 16), 5, 1.0), ((24, 6), 5, 1.0),
                                ((5, 20), 5, 1.0), ((1, 32), 5, 1.0), ((32, 1), 5, 1.0),
                                ((64, 48), 5, 1.0), ((10, 10), 3, 1.0), ((12, 7), 5, 1e-3),
                                ((7, 12), 5, 1e3)):
        name = "ns_%dx%d_steps%d_scale%g" % (shape[0], shape[1], steps, scale)
        x = (scale * rng.standard_normal(shape)).astype(np.float32)
        out, err_txt = run(x, steps)
        if out is None:
            rep.check(name, False, "driver failed: " + err_txt.strip())
            continue
        ref = newton_schulz_ref(x, steps)
        rep.line(name, fro(out - ref) / fro(ref), TOL_LINALG * 10,
                 note="vs float64 quintic iteration")
        outT, _ = run(np.ascontiguousarray(x.T), steps)
        if outT is not None:
            rep.line(name + " [NS(G^T)=NS(G)^T]", fro(outT.T - out) / fro(out), TOL_LINALG * 10)
        if steps == 5 and min(shape) > 1:
            s = np.linalg.svd(out.astype(np.float64), compute_uv=False)
            rep.check(name + " [sv in 0.6..1.25]", bool(s.min() > 0.6 and s.max() < 1.25),
                      "singular values %.3f..%.3f" % (s.min(), s.max()))
    out, err_txt = run(np.zeros((6, 4), np.float32))
    rep.check("ns_zero_matrix", out is not None and bool(np.all(out == 0)),
              err_txt.strip() or "output is exactly 0")


# ---------------------------------------------------------------------------
# Self-checks of the references against closed forms (no C involved)


def reference_selfchecks(rep):
    rng = rng_for("selfcheck")
    # AdamW step 1: m_hat = g, v_hat = g^2, so D = g / (|g| + eps).
    g = rng.standard_normal((6, 5))
    cfg = dict(ADAMW_BASE)
    d = AdamWRef(cfg, g.shape).direction(1, g)
    rep.line("selfcheck_adamw_step1_closed_form",
             fro(d - g / (np.abs(g) + f32(cfg["eps"]))) / fro(d), 1e-12)

    # Shampoo, one step, b1 = 0, no grafting, eps -> 0:
    # (G G^T)^(-1/4) G (G^T G)^(-1/4) = U V^T, the polar factor of G.
    q1, _ = np.linalg.qr(rng.standard_normal((7, 7)))
    q2, _ = np.linalg.qr(rng.standard_normal((7, 7)))
    g = (q1 * rng.uniform(0.5, 2.0, 7)) @ q2.T
    cfg = dict(SHAMPOO_BASE, beta1=0.0, grafting="none", epsilon=1e-30)
    p = ShampooRef(cfg, g.shape).direction(1, g)
    rep.line("selfcheck_shampoo_one_step_polar", fro(p - scipy.linalg.polar(g)[0]) / 7 ** 0.5,
             1e-10)

    # Blocking: a blocked reference equals independent references on the tiles.
    cfg = dict(SHAMPOO_BASE, max_preconditioner_dim=4, momentum=0.9, nesterov=True)
    whole = ShampooRef(cfg, (10, 7))
    tiles = {(r, c): ShampooRef(dict(cfg, max_preconditioner_dim=1024), (r[1] - r[0], c[1] - c[0]))
             for r in block_ranges(10, 4) for c in block_ranges(7, 4)}
    worst = 0.0
    for t in range(1, 6):
        g = rng.standard_normal((10, 7))
        pw = whole.direction(t, g)
        for (r, c), ref in tiles.items():
            pt = ref.direction(t, g[r[0]:r[1], c[0]:c[1]])
            worst = max(worst, fro(pw[r[0]:r[1], c[0]:c[1]] - pt) / fro(pt))
    rep.line("selfcheck_shampoo_blocks_independent", worst, 1e-12)

    # Newton-Schulz: transposing a tall input is only a cost saving; the
    # singular values land in the quintic's band around 1.
    a, b, c = NS_COEFFS
    x = rng.standard_normal((9, 4))
    y = x / fro(x)
    for _ in range(5):
        am = y @ y.T
        y = a * y + (b * am + c * (am @ am)) @ y
    ref = newton_schulz_ref(x, 5)
    rep.line("selfcheck_ns_transpose_path", fro(ref - y) / fro(y), 1e-12)
    s = np.linalg.svd(ref, compute_uv=False)
    rep.check("selfcheck_ns_singular_values", bool(s.min() > 0.6 and s.max() < 1.25),
              "%.3f..%.3f" % (s.min(), s.max()))

    # The inverse root agrees with scipy on an SPD matrix.
    qm, lam = random_spd(rng, 6, 0.1, 10.0)
    am = (qm * lam) @ qm.T
    rep.line("selfcheck_inv_root_vs_scipy",
             fro(inv_root_ref(am, 1e-3, 4.0) - np.real(
                 scipy.linalg.fractional_matrix_power(am + 1e-3 * np.eye(6), -0.25))) /
             fro(inv_root_ref(am, 1e-3, 4.0)), 1e-12)


# ---------------------------------------------------------------------------
# Defaults


def defaults_case(drv, rep):
    got, err_txt = drv.defaults()
    if got is None:
        rep.check("config_defaults", False, "driver failed: " + err_txt.strip())
        return
    want = {
        "adamw": dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01),
        "shampoo": dict(lr=1e-2, beta1=0.9, beta2=1.0, epsilon=1e-12, momentum=0.0,
                        nesterov=False, weight_decay=0.0, precondition_frequency=1,
                        start_preconditioning_step=-1, max_preconditioner_dim=1024,
                        grafting=1, grafting_beta2=0.999, grafting_epsilon=1e-8,
                        epsilon_rel=0.0, use_pseudo_inverse=False, pseudo_inverse_rtol=-1.0,
                        pseudo_inverse_atol=0.0),
        "muon": dict(lr=0.02, momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0,
                     scale=0, momentum_form=0, ns_schedule=0, ns_method=1,
                     ns_gram_min_aspect=2.0, ns_gram_restarts=1, ns_gram_restart_mask=0),
    }
    bad = []
    for opt, fields in want.items():
        for k, v in fields.items():
            g = got.get(opt, {}).get(k)
            same = (g == v) if isinstance(v, (bool, int)) and not isinstance(v, float) \
                else (g is not None and f32(g) == f32(v))
            if not same:
                bad.append("%s.%s=%s (header: %s)" % (opt, k, g, v))
    rep.check("config_defaults", not bad, "; ".join(bad) or "match optim.h")


# ---------------------------------------------------------------------------


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = Report()
    with tempfile.TemporaryDirectory(prefix="strata_ref_") as tmp:
        drv = Driver(os.path.abspath(sys.argv[1]), tmp)
        print("metric: per-step relative error of the weight update (see module doc); "
              "tolerances AdamW/Muon %.0e, Shampoo %.0e" % (TOL_ADAMW, TOL_SHAMPOO))
        reference_selfchecks(rep)
        for section in (defaults_case, adamw_cases, shampoo_cases, muon_cases,
                        inv_root_cases, newton_schulz_cases):
            section(drv, rep)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
