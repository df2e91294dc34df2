#!/usr/bin/env python3
"""Float64 reference tests for Shampoo's options and numerics (issue 3, items
3 and 7): grafting before start_preconditioning_step, the relative regularizer
epsilon_rel, pseudo-inverse mode, inverse_exponent_override, every epsilon
option flipped, non-finite gradients refused, zero gradients, and the inverse
root's retry and orthogonality check.

Usage: test_shampoo_options.py PATH/TO/optim_driver

The references (ShampooRef, inv_root_ref, AdamWRef) and the metric are those of
test_optim_reference.py (imported from this directory); see its module doc.

Flip checks ("a switch that does nothing must fail a test"): an option is run
at two values v1, v2 on the same problem. Each C trajectory is compared with
its own float64 reference (tolerance per option). Then, per step t, the
reference predicts the change of the update, dR(t) = dW_ref(v1) - dW_ref(v2),
and the C change dC(t) = dW_C(v1) - dW_C(v2) must match it:
    steps where ||dR(t)|| >= 100 tol ||dW_ref||: ||dC - dR|| / ||dR|| <= 0.05
    steps where ||dR(t)|| <  tol ||dW_ref||:      ||dC|| / ||dW_ref|| <= 3 tol
and at least one step must be of the first kind, so the option is known to
matter there. An option the C code ignored gives dC = 0 and fails.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_optim_reference as T  # noqa: E402

fro, f32, rng_for = T.fro, T.f32, T.rng_for
STEPS = T.STEPS

# Per-option tolerances on the per-step relative update error (module doc of
# test_optim_reference.py), with the largest error measured in parentheses
# (this machine, OpenBLAS 0.3.21) where it is informative.
TOL_SHAMPOO = T.TOL_SHAMPOO          # 1e-4, the default-option trajectories
TOL_ADAM_PHASE = T.TOL_ADAMW         # 1e-5: steps before start are pure Adam/AdaGrad
TOL_EXPONENT = 2e-4                  # exponent 1/2 squares the float32 factor's
                                     # conditioning effect of exponent 1/4
TOL_PSEUDO = 1e-4
TOL_LINALG = T.TOL_LINALG            # 1e-6
FLIP_MATCH = 0.05


def shampoo_cfg(over):
    cfg = dict(T.SHAMPOO_BASE)
    cfg.update(over)
    return cfg


def ref_directions(cfg, shape, grads):
    ref = T.ShampooRef(cfg, shape)
    return [ref.direction(t, g.astype(np.float64)) for t, g in enumerate(grads, 1)]


def w0_for(name, shape, scale=0.01):
    return (scale * rng_for(name + "/w0").standard_normal(shape)).astype(np.float32)


def traj(drv, rep, name, shape, grads, over, tol, w0, counters=True, **kw):
    extra = T.shampoo_counters(rep, name, shape) if counters else None
    return T.run_trajectory(drv, rep, name, "shampoo", shape, grads, over, tol, w0=w0,
                            extra=extra, **kw)


def c_updates(wc, w0):
    prev = np.concatenate([w0[None].astype(np.float64), wc[:-1].astype(np.float64)])
    return wc.astype(np.float64) - prev


def flip(drv, rep, name, shape, grads, over1, over2, tol, label1, label2, counters=True):
    """Runs both settings against their references, then the change check."""
    for o in (over1, over2):
        assert f32(shampoo_cfg(o)["weight_decay"]) == 0.0, "flip checks need wd = 0"
    w0 = w0_for(name, shape)
    w1 = traj(drv, rep, "%s [%s]" % (name, label1), shape, grads, over1, tol, w0, counters)
    w2 = traj(drv, rep, "%s [%s]" % (name, label2), shape, grads, over2, tol, w0, counters)
    if w1 is None or w2 is None:
        rep.check(name + " [flip]", False, "a trajectory failed")
        return
    c1, c2 = shampoo_cfg(over1), shampoo_cfg(over2)
    lr = float(np.float32(c1["lr"]))
    d1 = ref_directions(c1, shape, grads)
    d2 = ref_directions(c2, shape, grads)
    dc = c_updates(w1, w0) - c_updates(w2, w0)
    worst_sig, worst_quiet, n_sig, biggest = 0.0, 0.0, 0, 0.0
    for t in range(len(grads)):
        dr = -lr * (d1[t] - d2[t])
        scale = max(fro(lr * d1[t]), fro(lr * d2[t]))
        if scale == 0.0:
            continue
        rel = fro(dr) / scale
        biggest = max(biggest, rel)
        if rel >= 100 * tol:
            n_sig += 1
            worst_sig = max(worst_sig, fro(dc[t] - dr) / fro(dr))
        elif rel < tol:
            worst_quiet = max(worst_quiet, fro(dc[t]) / scale)
    ok = n_sig > 0 and worst_sig <= FLIP_MATCH and worst_quiet <= 3 * tol
    rep.line(name + " [flip: C change vs reference change]", worst_sig, FLIP_MATCH, ok=ok,
             note="reference predicts up to %.1e relative change; %d/%d steps significant; "
                  "quiet steps C change %.1e" % (biggest, n_sig, len(grads), worst_quiet))


# ---------------------------------------------------------------------------
# start_preconditioning_step: steps before it are pure Adam / AdaGrad


class AdaGradRef:
    """M = b1 M + (1-b1) g; M_hat = M / (1-b1^t); A += g^2; D = M_hat / (sqrt(A) + eps)."""

    def __init__(self, b1, eps, shape):
        self.b1, self.eps = f32(b1), f32(eps)
        self.m = np.zeros(shape)
        self.a = np.zeros(shape)

    def direction(self, t, g):
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.a = self.a + g * g
        return (self.m / (1 - self.b1 ** t)) / (np.sqrt(self.a) + self.eps)


def start_cases(drv, rep):
    shape, start, freq = (12, 10), 8, 4
    for graft in ("adam", "adagrad"):
        name = "shampoo_12x10_%s_start%d_F%d" % (graft, start, freq)
        over = dict(grafting=graft, start_preconditioning_step=start,
                    precondition_frequency=freq, beta1=0.9, grafting_beta2=0.99,
                    grafting_epsilon=1e-8, weight_decay=0.01, momentum=0.0)
        grads = T.gaussian_grads(rng_for(name), shape)
        w0 = w0_for(name, shape)
        wc = traj(drv, rep, name, shape, grads, over, TOL_SHAMPOO, w0)
        if wc is None:
            continue
        cfg = shampoo_cfg(over)
        lr, wd = f32(cfg["lr"]), f32(cfg["weight_decay"])
        pure = (T.AdamWRef(dict(beta1=cfg["beta1"], beta2=cfg["grafting_beta2"],
                                eps=cfg["grafting_epsilon"]), shape)
                if graft == "adam" else AdaGradRef(cfg["beta1"], cfg["grafting_epsilon"], shape))
        prev = w0.astype(np.float64)
        before, after_min, moved = 0.0, np.inf, True
        for t in range(1, STEPS + 1):
            d_ref = -lr * (pure.direction(t, grads[t - 1].astype(np.float64)) + wd * prev)
            cur = wc[t - 1].astype(np.float64)
            e = fro((cur - prev) - d_ref) / fro(d_ref)
            moved = moved and fro(cur - prev) > 0
            if t < start:
                before = max(before, e)
            else:
                after_min = min(after_min, e)
            prev = cur
        rep.line(name + " [steps 1..%d = pure %s]" % (start - 1, graft), before, TOL_ADAM_PHASE,
                 note="vs float64 %s (beta1, grafting_beta2, grafting_epsilon, wd)" % (
                     "AdamW" if graft == "adam" else "AdaGrad"))
        rep.check(name + " [preconditioned from step %d]" % start, after_min > 1e-2,
                  "min deviation from pure %s at steps >= %d: %.2e" % (graft, start, after_min))
        rep.check(name + " [an update at every step]", moved)
        if graft == "adam":
            # The same steps through strata's own AdamW (C against C).
            acfg = dict(rows=shape[0], cols=shape[1], steps=start - 1, lr_scale=1.0,
                        lr=cfg["lr"], beta1=cfg["beta1"], beta2=cfg["grafting_beta2"],
                        eps=cfg["grafting_epsilon"], weight_decay=cfg["weight_decay"])
            data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads[:start - 1]])
            rc, out, _, err = drv.run("adamw", acfg, data, (start - 1) * shape[0] * shape[1])
            if rc != 0 or out is None:
                rep.check(name + " [= strata AdamW]", False, err.strip())
            else:
                wa = out.reshape(start - 1, *shape)
                da, ds = c_updates(wa, w0), c_updates(wc[:start - 1], w0)
                e = max(fro(ds[t] - da[t]) / fro(da[t]) for t in range(start - 1))
                rep.line(name + " [steps 1..%d = strata AdamW]" % (start - 1), e, TOL_ADAM_PHASE,
                         note="C Shampoo vs C AdamW, float32 both")
    # The start step also flips: start 3 vs 9 (F = 3).
    name = "shampoo_10x8_start"
    grads = T.gaussian_grads(rng_for(name), (10, 8))
    flip(drv, rep, name, (10, 8), grads, dict(start_preconditioning_step=3, precondition_frequency=3),
         dict(start_preconditioning_step=9, precondition_frequency=3), TOL_SHAMPOO,
         "start 3", "start 9")


# ---------------------------------------------------------------------------
# Epsilon options, each flipped


def noisy_lowrank(name, shape, rank, noise, steps=STEPS):
    """G_t = U C_t V^T + noise * N_t: U, V fixed Gaussian, N_t a random partial
    isometry (all singular values 1). The factors have `rank` large
    eigenvalues and a flat noise floor ~t noise^2, far from both the large
    eigenvalues and the zero eigenvalues of step 1 (rank min(rows, cols))."""
    rng = rng_for(name)
    u = rng.standard_normal((shape[0], rank))
    v = rng.standard_normal((shape[1], rank))
    k = min(shape)
    out = []
    for _ in range(steps):
        c = rng.standard_normal((rank, rank)) + 2 * np.eye(rank)
        g = u @ c @ v.T / np.sqrt(shape[0] * shape[1]) * 4
        p, _ = np.linalg.qr(rng.standard_normal((shape[0], k)))
        q, _ = np.linalg.qr(rng.standard_normal((shape[1], k)))
        out.append((g + noise * (p @ q.T)).astype(np.float32))
    return out


def factor_spectra(grads, beta2):
    """Eigenvalues of every step's float64 L and R (for choosing cutoffs)."""
    rows, cols = grads[0].shape
    L, R, out = np.zeros((rows, rows)), np.zeros((cols, cols)), []
    for g in grads:
        g = g.astype(np.float64)
        if beta2 == 1.0:
            L, R = L + g @ g.T, R + g.T @ g
        else:
            L = beta2 * L + (1 - beta2) * g @ g.T
            R = beta2 * R + (1 - beta2) * g.T @ g
        out.append((np.linalg.eigvalsh(L), np.linalg.eigvalsh(R)))
    return out


def epsilon_cases(drv, rep):
    # epsilon (absolute): eigenvalues of L, R ~ 1e-3..1e-2 (smallest at step 1
    # far below), so eps = 1e-3 matters; 1e-6 keeps step 1 well-posed in float32.
    name = "shampoo_12x12_flip_epsilon"
    g = T.gaussian_grads(rng_for(name), (12, 12), scale=1e-2)
    flip(drv, rep, name, (12, 12), g, dict(epsilon=1e-6), dict(epsilon=1e-3), TOL_SHAMPOO,
         "epsilon 1e-6", "epsilon 1e-3")

    # epsilon_rel: full rank, lambda_min / lambda_max ~ 1e-3 at step 1.
    name = "shampoo_12x12_flip_epsilon_rel"
    g = T.gaussian_grads(rng_for(name), (12, 12))
    flip(drv, rep, name, (12, 12), g, dict(epsilon_rel=0.0), dict(epsilon_rel=1e-2),
         TOL_SHAMPOO, "epsilon_rel 0", "epsilon_rel 1e-2")

    # max(epsilon, epsilon_rel lambda_max): both of the same size (a sum would be
    # 2x either and fail the trajectory comparison).
    name = "shampoo_12x12_epsilon_and_epsilon_rel_max"
    g = T.gaussian_grads(rng_for(name), (12, 12))
    lmax = max(max(lr[-1], rr[-1]) for lr, rr in factor_spectra(g, 1.0))
    traj(drv, rep, name, (12, 12), g, dict(epsilon=f32(1e-2 * lmax), epsilon_rel=1e-2),
         TOL_SHAMPOO, w0_for(name, (12, 12)),
         note="eps = 1e-2 lambda_max(final) = eps_rel lambda_max(final)")

    # grafting_epsilon: tiny gradients, sqrt(A) ~ 1e-7, so eps_g = 1e-8 vs 1e-6
    # changes ||D||. The roots use epsilon_rel so that they do not depend on scale.
    name = "shampoo_10x10_flip_grafting_epsilon"
    g = T.gaussian_grads(rng_for(name), (10, 10), scale=1e-7)
    base = dict(epsilon=0.0, epsilon_rel=1e-6)
    flip(drv, rep, name, (10, 10), g, dict(base, grafting_epsilon=1e-8),
         dict(base, grafting_epsilon=1e-6), TOL_SHAMPOO, "grafting_epsilon 1e-8",
         "grafting_epsilon 1e-6")
    name = "shampoo_10x10_flip_grafting_epsilon_adagrad"
    flip(drv, rep, name, (10, 10), g, dict(base, grafting="adagrad", grafting_epsilon=1e-8),
         dict(base, grafting="adagrad", grafting_epsilon=1e-6), TOL_SHAMPOO,
         "grafting_epsilon 1e-8", "grafting_epsilon 1e-6")

    # Rank-deficient gradients (the known issue): eps = 1e-12 gives up to 1.33
    # relative error against float64 (test_optim_reference's info case);
    # epsilon_rel = 1e-4 is well-posed in float32.
    for rank, shape in ((2, (16, 16)), (1, (24, 6)), (2, (12, 20))):
        name = "shampoo_%dx%d_rank%d_epsilon_rel1e-4" % (shape[0], shape[1], rank)
        _, _, g = T.lowrank_grads(rng_for("shampoo_%dx%d_rank%d" % (shape[0], shape[1], rank)),
                                  shape, rank)
        traj(drv, rep, name, shape, g, dict(epsilon_rel=1e-4), TOL_SHAMPOO,
             w0_for(name, shape))


def scale_cases(drv, rep):
    """epsilon_rel makes the update invariant to the gradient scale; an
    absolute epsilon does not, and at factor scale 1e8 it is below one ulp."""
    shape = (12, 12)
    base = T.gaussian_grads(rng_for("shampoo_scale"), shape)
    w0 = w0_for("shampoo_scale", shape)
    runs = {}
    for s in (1e-3, 1.0, 1e4):
        g = [(s * x).astype(np.float32) for x in base]
        for label, over in (("rel", dict(epsilon=0.0, epsilon_rel=1e-4)),
                            ("abs", dict(epsilon=1e-6)),
                            ("abs1e-12", dict(epsilon=1e-12)),
                            ("zero", dict(epsilon=0.0))):
            if label in ("abs1e-12", "zero") and s != 1e4:
                continue
            name = "shampoo_12x12_scale%g_%s" % (s, label)
            runs[(s, label)] = (traj(drv, rep, name, shape, g, over, TOL_SHAMPOO, w0),
                                ref_directions(shampoo_cfg(over), shape, g))
    lr = f32(T.SHAMPOO_BASE["lr"])

    def change(a, b):
        (wa, _), (wb, _) = runs[a], runs[b]
        if wa is None or wb is None:
            return np.inf
        ua, ub = c_updates(wa, w0), c_updates(wb, w0)
        return max(fro(ua[t] - ub[t]) / fro(ub[t]) for t in range(STEPS))

    def ref_change(a, b):
        da, db = runs[a][1], runs[b][1]
        return max(fro(da[t] - db[t]) / fro(db[t]) for t in range(STEPS))

    for s in (1e-3, 1e4):
        rep.line("shampoo_12x12 epsilon_rel: update at grad scale %g = at scale 1" % s,
                 change((s, "rel"), (1.0, "rel")), TOL_SHAMPOO,
                 note="reference predicts %.1e (grafting_epsilon only)" % ref_change(
                     (s, "rel"), (1.0, "rel")))
    pred = ref_change((1e-3, "abs"), (1.0, "abs"))
    got = change((1e-3, "abs"), (1.0, "abs"))
    rep.check("shampoo_12x12 epsilon 1e-6: update depends on grad scale",
              pred > 1e-1 and abs(got - pred) <= 0.05 * pred,
              "scale 1e-3 vs 1: reference %.3e, C %.3e" % (pred, got))
    wa, wb = runs[(1e4, "abs1e-12")][0], runs[(1e4, "zero")][0]
    rep.check("shampoo_12x12 factor scale 1e8: epsilon 1e-12 is below one ulp",
              wa is not None and wb is not None and np.array_equal(wa, wb),
              "C weights with epsilon 1e-12 and 0 are bit-identical (the known issue "
              "epsilon_rel fixes)")
    del lr


# ---------------------------------------------------------------------------
# Pseudo-inverse


def pseudo_cases(drv, rep):
    # Exactly rank-deficient gradients: the null spaces are dropped, so float32
    # roundoff there is not amplified (the regularized mode at eps 1e-12 gives
    # up to 1.33 relative error on the first problem).
    for rank, shape in ((2, (16, 16)), (1, (24, 6)), (2, (12, 20)), (1, (8, 8))):
        name = "shampoo_%dx%d_rank%d_pseudo_inverse" % (shape[0], shape[1], rank)
        _, _, g = T.lowrank_grads(rng_for("shampoo_%dx%d_rank%d" % (shape[0], shape[1], rank)),
                                  shape, rank)
        traj(drv, rep, name, shape, g, dict(use_pseudo_inverse=True, epsilon=0.0), TOL_PSEUDO,
             w0_for(name, shape))
    # 1 x N and blocked shapes (one factor of rank <= t for all steps).
    for shape, over in (((1, 32), {}), ((32, 1), dict(beta2=0.9)),
                        ((20, 12), dict(max_preconditioner_dim=8, momentum=0.9))):
        name = "shampoo_%dx%d_pseudo_inverse" % shape
        traj(drv, rep, name, shape, T.gaussian_grads(rng_for(name), shape),
             dict(over, use_pseudo_inverse=True, epsilon=0.0), TOL_PSEUDO, w0_for(name, shape))

    # Noisy low rank: rank 2 plus a flat noise floor ~1e-3 below lambda_max
    # (relative). A cutoff above the floor drops it; the regularized mode and a
    # cutoff below it keep it, with roots ~(1e3)^(1/4) = 5.6x larger there on
    # each side. Both settings are well-posed in float32 (the floor is far
    # above roundoff, ~1e-7 lambda_max, and far below the rank-2 eigenvalues).
    shape = (16, 12)
    name = "shampoo_16x12_noisy_rank2"
    g = noisy_lowrank(name, shape, 2, 0.3)
    spectra = factor_spectra(g, 1.0)
    floor_rel = [(min(l[-12], r[-12]) / max(l[-1], r[-1]), max(l[-3], r[-3]) / max(l[-1], r[-1]),
                  min(l[-2], r[-2]) / max(l[-1], r[-1])) for l, r in spectra]
    rlo = min(x[0] for x in floor_rel)   # smallest floor eigenvalue / lambda_max
    rhi = max(x[1] for x in floor_rel)   # largest floor eigenvalue / lambda_max
    rtop = min(x[2] for x in floor_rel)  # smallest rank-2 eigenvalue / lambda_max
    rtol_drop, rtol_keep = f32(np.sqrt(rhi * rtop)), 1e-5
    # Margins: the eigenvalues of the float32 factors are within ~1e-6
    # (relative) of the float64 ones, so a cutoff 1.5x away from every
    # eigenvalue classifies them identically in C and in the reference.
    rep.check(name + " [problem: floor separated]",
              rlo > 10 * rtol_keep and 2 * rhi < rtol_drop < 0.5 * rtop,
              "floor %.1e..%.1e of lambda_max, rank-2 >= %.1e; rtol %.1e drops it, %.0e keeps it"
              % (rlo, rhi, rtop, rtol_drop, rtol_keep))
    pseudo = dict(use_pseudo_inverse=True, epsilon=0.0)
    flip(drv, rep, name + "_flip_pseudo_inverse", shape, g,
         dict(pseudo, pseudo_inverse_rtol=rtol_drop), dict(epsilon=0.0, epsilon_rel=1e-4),
         TOL_PSEUDO, "pseudo rtol %.1e" % rtol_drop, "regularized epsilon_rel 1e-4")
    flip(drv, rep, name + "_flip_rtol", shape, g, dict(pseudo, pseudo_inverse_rtol=rtol_drop),
         dict(pseudo, pseudo_inverse_rtol=rtol_keep), TOL_PSEUDO, "rtol %.1e" % rtol_drop,
         "rtol %.0e" % rtol_keep)
    # atol between the largest floor eigenvalue and the smallest rank-2 one
    # over all steps (rtol 0 so that only atol cuts), against atol 0 with the
    # default rtol (n FLT_EPSILON = 1.9e-6, below the floor).
    floor = max(max(l[-3], r[-3]) for l, r in spectra)
    top = min(min(l[-2], r[-2]) for l, r in spectra)
    atol = f32(np.sqrt(floor * top))
    rep.check(name + " [problem: atol separates]", 1.5 * floor < atol < top / 1.5,
              "floor <= %.2e < atol %.2e < rank-2 eigenvalues >= %.2e" % (floor, atol, top))
    flip(drv, rep, name + "_flip_atol", shape, g,
         dict(pseudo, pseudo_inverse_rtol=0.0, pseudo_inverse_atol=atol),
         dict(pseudo, pseudo_inverse_atol=0.0), TOL_PSEUDO, "atol %.1e" % atol, "atol 0")

    # Pseudo-inverse with epsilon != 0 is refused (Distributed Shampoo raises).
    for over in (dict(use_pseudo_inverse=True), dict(use_pseudo_inverse=True, epsilon=0.0,
                                                     epsilon_rel=1e-4)):
        cfg = shampoo_cfg(over)
        cfg.update(rows=4, cols=4, steps=1, lr_scale=1.0)
        rc, _, _, err = drv.run("shampoo", cfg, np.zeros(32, np.float32), 16)
        rep.check("shampoo_pseudo_inverse_rejects_eps %s" % {k: v for k, v in over.items()
                                                             if k != "use_pseudo_inverse"},
                  rc == 1 and "STRATA_ERR_INVALID_ARG" in err, err.strip().splitlines()[-1]
                  if err.strip() else "rc=%d" % rc)


# ---------------------------------------------------------------------------
# Exponent override


def exponent_cases(drv, rep):
    # 12 x 10: L has rank 10 at step 1, so the roots need a regularizer that is
    # well-posed in float32 (exponent 1/2 doubles the amplification of
    # roundoff on the null space: eps_rel 1e-4 -> (1e4)^(1/2) = 100).
    shape = (12, 10)
    wp = dict(epsilon=0.0, epsilon_rel=1e-4)
    for ov, tol in (([0.5, 0.5], TOL_EXPONENT), ([0.25, 0.0], TOL_SHAMPOO),
                    ([0.0, 0.25], TOL_SHAMPOO), ([0.0, 0.0], TOL_SHAMPOO),
                    ([1.0 / 6, 1.0 / 3], TOL_EXPONENT)):
        name = "shampoo_12x10_exponent_%.3g_%.3g" % tuple(ov)
        traj(drv, rep, name, shape, T.gaussian_grads(rng_for(name), shape),
             dict(wp, inverse_exponent_override=ov, momentum=0.5), tol, w0_for(name, shape))
    name = "shampoo_12x10_flip_exponent"
    g = T.gaussian_grads(rng_for(name), shape)
    flip(drv, rep, name, shape, g, dict(wp, inverse_exponent_override=[-1.0, -1.0]),
         dict(wp, inverse_exponent_override=[0.5, 0.5]), TOL_EXPONENT, "default 1/4", "1/2")
    flip(drv, rep, name + "_one_sided", shape, g, dict(wp, inverse_exponent_override=0.25),
         dict(wp, inverse_exponent_override=[0.25, 0.0]), TOL_SHAMPOO, "1/4 both",
         "R not preconditioned")
    # Without grafting, exponents (0, 0) give P = M_hat exactly: SGD with the
    # filtered gradient (the identity roots are exact).
    name = "shampoo_8x8_exponent_0_0_graft_none"
    traj(drv, rep, name, (8, 8), T.gaussian_grads(rng_for(name), (8, 8)),
         dict(inverse_exponent_override=0.0, grafting="none"), 1e-6, w0_for(name, (8, 8)))


# ---------------------------------------------------------------------------
# Non-finite gradients and zero gradients


def run_raw(drv, over, shape, w0, grads):
    cfg = shampoo_cfg(over)
    cfg.update(rows=shape[0], cols=shape[1], steps=len(grads), lr_scale=1.0)
    data = np.concatenate([w0.ravel()] + [g.ravel() for g in grads])
    rc, out, stats, err = drv.run("shampoo", cfg, data, len(grads) * shape[0] * shape[1])
    wc = out.reshape(len(grads), *shape) if out is not None and rc == 0 else None
    return rc, wc, stats, err


def nonfinite_cases(drv, rep):
    shape = (10, 8)
    grads = T.gaussian_grads(rng_for("shampoo_nonfinite"), shape, steps=16)
    w0 = w0_for("shampoo_nonfinite", shape)
    nan_g = grads[4].copy()
    nan_g[3, 5] = np.nan
    inf_g = grads[9].copy()
    inf_g[0, 0] = -np.inf
    bad = grads[:5] + [nan_g] + grads[5:10] + [inf_g] + grads[10:]
    bad_at = [5, 11]  # indices of the refused calls in `bad`
    for api in ("step", "split"):
        over = dict(max_preconditioner_dim=6, precondition_frequency=2, momentum=0.5,
                    nesterov=True, api=api, weight_decay=0.01)
        name = "shampoo_nonfinite_refused (%s api)" % api
        rc0, clean, _, err0 = run_raw(drv, over, shape, w0, grads)
        rc1, wb, stats, err1 = run_raw(drv, dict(over, skip_nonfinite=True), shape, w0, bad)
        if clean is None or wb is None:
            rep.check(name, False, "driver failed: %s %s" % (err0.strip(), err1.strip()))
            continue
        kept = [i for i in range(len(bad)) if i not in bad_at]
        same_prev = all(np.array_equal(wb[i], wb[i - 1]) for i in bad_at)
        identical = np.array_equal(wb[kept], clean)
        rep.check(name, same_prev and identical and stats["nonfinite_rejected"] == 2,
                  "refused steps leave W unchanged: %s; other steps bit-identical to the run "
                  "without them: %s; nonfinite_rejected %d" % (
                      same_prev, identical, stats["nonfinite_rejected"]))
        rc2, _, _, err2 = run_raw(drv, over, shape, w0, bad)
        rep.check(name + " [error status]", rc2 == 1 and "STRATA_ERR_NONFINITE" in err2,
                  err2.strip().splitlines()[-1] if err2.strip() else "rc=%d" % rc2)


def zero_cases(drv, rep):
    shape = (9, 7)
    w0 = w0_for("shampoo_zero", shape)
    zeros = [np.zeros(shape, np.float32)] * 12
    for label, over in (("adam_momentum_nesterov", dict(momentum=0.9, nesterov=True)),
                        ("adagrad_blocked", dict(grafting="adagrad", max_preconditioner_dim=4)),
                        ("graft_none", dict(grafting="none", start_preconditioning_step=1)),
                        ("pseudo_inverse", dict(use_pseudo_inverse=True, epsilon=0.0)),
                        ("epsilon_rel_only", dict(epsilon=0.0, epsilon_rel=1e-4))):
        rc, wc, stats, err = run_raw(drv, over, shape, w0, zeros)
        ok = wc is not None and all(np.array_equal(w, w0) for w in wc)
        note = "W bit-identical to W0 at every step" if ok else "rc=%d %s" % (rc, err.strip())
        if ok and label == "epsilon_rel_only":
            # lambda_max = 0 and no absolute epsilon: every root fails (counted),
            # the grafting direction (0) is used.
            ok = stats["root_failures"] == 2 * 12 and stats["root_refreshes"] == 0
            note += "; root_failures %d (zero factor, no absolute epsilon)" % stats[
                "root_failures"]
        rep.check("shampoo_zero_grads_exact_zero_update (%s)" % label, ok, note)
    # A zero gradient in the middle of a run: with beta1 = 0 and no momentum the
    # update of that step is exactly 0 (P = 0, D = 0); with weight decay it is
    # the decay alone (checked against the reference by the trajectory).
    g = T.gaussian_grads(rng_for("shampoo_zero_mid"), shape, steps=14)
    for i in (5, 9):
        g[i] = np.zeros(shape, np.float32)
    rc, wc, _, err = run_raw(drv, dict(beta1=0.0), shape, w0, g)
    ok = wc is not None and all(np.array_equal(wc[i], wc[i - 1]) for i in (5, 9)) and \
        all(not np.array_equal(wc[i], wc[i - 1]) for i in (4, 6, 8, 10))
    rep.check("shampoo_zero_grad_mid_run_exact_zero_update", ok,
              "W unchanged exactly at the zero steps" if ok else err.strip())
    # (epsilon 1e-6: L of a 9 x 7 gradient has a null space, ill-posed in
    # float32 at 1e-12; see test_optim_reference.py's non-square cases)
    traj(drv, rep, "shampoo_9x7_zero_grad_mid_run_wd", shape, g,
         dict(beta1=0.0, weight_decay=0.1, lr=0.1, epsilon=1e-6), TOL_SHAMPOO, w0)


# ---------------------------------------------------------------------------
# Inverse root: options, retry, orthogonality check


def inv_root_cases(drv, rep):
    def run(a32, **cfg):
        n = a32.shape[0]
        return drv.run("inv_root", dict(cfg, n=n), a32, n * n)

    def case(name, a32, ref, tol=TOL_LINALG, **cfg):
        rc, out, info, err = run(a32, **cfg)
        if rc != 0 or out is None:
            rep.check(name, False, "driver rc=%d: %s" % (rc, err.strip()))
            return None, None
        n = a32.shape[0]
        out = out.reshape(n, n).astype(np.float64)
        rep.line(name, fro(out - ref) / max(fro(ref), 1e-300), tol,
                 note="retries %d, ortho_error %.1e" % (info["retries"], info["ortho_error"]))
        return out, info

    rng = rng_for("inv_root_options")
    q, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    lam = np.array([1.0, 0.7, 0.3, 0.1, 3e-2, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 0.0])
    a = T.sym_f32((q * lam) @ q.T)
    a64 = a.astype(np.float64)

    # Regularized: eps_rel alone, max(eps, eps_rel lambda_max) both ways.
    case("inv_root_eps_rel1e-4", a, T.inv_root_ref(a64, 0.0, 4.0, eps_rel=1e-4), eps_rel=1e-4)
    _, info = case("inv_root_eps1e-2_eps_rel1e-4_max", a,
                   T.inv_root_ref(a64, 1e-2, 4.0, eps_rel=1e-4), eps=1e-2, eps_rel=1e-4)
    if info:
        rep.check("inv_root_eps_eff_is_max", abs(info["eps_eff"] - 1e-2) < 1e-12,
                  "eps_eff %.6g (want max(1e-2, 1e-4 lambda_max) = 1e-2)" % info["eps_eff"])
    _, info = case("inv_root_eps1e-6_eps_rel1e-3_max", a,
                   T.inv_root_ref(a64, 1e-6, 4.0, eps_rel=1e-3), eps=1e-6, eps_rel=1e-3)
    if info:
        want = 1e-3 * info["lambda_max"]
        rep.check("inv_root_eps_eff_is_rel", abs(info["eps_eff"] - want) <= 1e-12 * want,
                  "eps_eff %.6g (want 1e-3 lambda_max = %.6g)" % (info["eps_eff"], want))
    # Exponents.
    for e in (0.5, 1.0 / 3, 1.0, 0.125):
        case("inv_root_exponent%.3g_eps1e-3" % e, a,
             T.inv_root_ref(a64, 1e-3, None, exponent=e), exponent=e, eps=1e-3)
    # Pseudo-inverse: the default cutoff (n FLT_EPSILON lambda_max = 1.4e-6)
    # drops 1e-8 and 0 and keeps 1e-6... no: 1e-6 < 1.4e-6 is dropped too.
    for rtol, atol in ((-1.0, 0.0), (1e-2, 0.0), (1e-4, 0.0), (0.0, 5e-4), (0.0, 5e-6)):
        name = "inv_root_pseudo_rtol%g_atol%g" % (rtol, atol)
        ref = T.inv_root_ref(a64, 0.0, 4.0, pseudo=True, rtol=rtol, atol=atol)
        _, info = case(name, a, ref, mode="pseudo", rank_rtol=rtol, rank_atol=atol)
        if info:
            r = 12 * T.FLT_EPSILON if rtol < 0 else rtol
            cutoff = max(atol, r * np.linalg.eigvalsh(a64)[-1])
            want = int(np.sum(np.linalg.eigvalsh(a64) > cutoff))
            rep.check(name + " [rank]", info["rank"] == want,
                      "rank %d (want %d), cutoff %.3g" % (info["rank"], want, info["cutoff"]))
    # Flips at the root level: the reference predicts a change and C follows.
    for label, c1, c2 in (("rtol", dict(mode="pseudo", rank_rtol=1e-2),
                           dict(mode="pseudo", rank_rtol=1e-4)),
                          ("atol", dict(mode="pseudo", rank_rtol=0.0, rank_atol=5e-4),
                           dict(mode="pseudo", rank_rtol=0.0, rank_atol=5e-6)),
                          ("eps_rel", dict(eps_rel=1e-2), dict(eps_rel=1e-5)),
                          ("eps", dict(eps=1e-2), dict(eps=1e-5)),
                          ("exponent", dict(eps=1e-3, exponent=0.25),
                           dict(eps=1e-3, exponent=0.5))):
        def ref_of(c):
            return T.inv_root_ref(a64, c.get("eps", 0.0), None,
                                  eps_rel=c.get("eps_rel", 0.0), pseudo=c.get("mode") == "pseudo",
                                  rtol=c.get("rank_rtol", -1.0), atol=c.get("rank_atol", 0.0),
                                  exponent=c.get("exponent", 0.25))
        r1, r2 = ref_of(c1), ref_of(c2)
        _, o1, _, _ = run(a, **c1)
        _, o2, _, _ = run(a, **c2)
        if o1 is None or o2 is None:
            rep.check("inv_root_flip_" + label, False, "driver failed")
            continue
        dc = (o1.astype(np.float64) - o2.astype(np.float64)).reshape(12, 12)
        dr = r1 - r2
        rel = fro(dr) / max(fro(r1), fro(r2))
        rep.line("inv_root_flip_" + label, fro(dc - dr) / fro(dr), 1e-4,
                 ok=rel > 1e-2 and fro(dc - dr) / fro(dr) <= 1e-4,
                 note="reference predicts a %.1e relative change" % rel)

    # Zero matrix: pseudo-inverse gives exactly 0; regularized without an
    # absolute epsilon has nothing to add (lambda_max = 0) and fails.
    z = np.zeros((5, 5), np.float32)
    rc, out, _, err = run(z, mode="pseudo")
    rep.check("inv_root_pseudo_zero_matrix", rc == 0 and out is not None and
              bool(np.all(out == 0)), err.strip() or "root is exactly 0")
    rc, out, _, err = run(z, eps_rel=1e-3)
    rep.check("inv_root_zero_matrix_eps_rel_only_fails", rc == 1 and "STRATA_ERR_LINALG" in err
              and out is not None and bool(np.all(out == T.SENTINEL)),
              "STRATA_ERR_LINALG, out untouched" if rc == 1 else "rc=%d" % rc)
    rc, _, _, err = run(a, exponent=0.0)
    rep.check("inv_root_exponent0_invalid", rc == 1 and "STRATA_ERR_INVALID_ARG" in err,
              err.strip().splitlines()[-1] if err.strip() else "rc=%d" % rc)

    # Scale 1e8 with a null space: float64 roundoff leaves null eigenvalues of
    # ~1e-8, so an absolute 1e-12 is lost (informational error) while
    # eps_rel = 1e-6 (1e2 here) is well-posed.
    b = rng.standard_normal((10, 3))
    big = T.sym_f32(1e8 * (b @ b.T))
    case("inv_root_psd_rank3_scale1e8_eps_rel1e-6", big,
         T.inv_root_ref(big.astype(np.float64), 0.0, 4.0, eps_rel=1e-6), eps_rel=1e-6)
    rc, out, _, _ = run(big, eps=1e-12)
    if rc == 0:
        ref = T.inv_root_ref(big.astype(np.float64), 1e-12, 4.0)
        e = fro(out.reshape(10, 10) - ref) / fro(ref)
        T.Report(info=True).line("inv_root_psd_rank3_scale1e8_eps1e-12 (info)", e, TOL_LINALG,
                                 note="absolute eps below roundoff: not well-posed")

    # Retry and orthogonality check: a forced retry (dsyev) gives the same root;
    # the check's variants do not change the result.
    q, lam = T.random_spd(rng, 40, 1e-3, 1e2)
    s = T.sym_f32((q * lam) @ q.T)
    ref = T.inv_root_ref(s.astype(np.float64), 1e-9, 4.0)
    base, _ = case("inv_root_spd_n40", s, ref, eps=1e-9)
    for label, cfg in (("force_retry", dict(force_retry=True)),
                       ("force_retry_full_check", dict(force_retry=True, ortho_check="full")),
                       ("full_check", dict(ortho_check="full")),
                       ("no_check", dict(ortho_check="off"))):
        out, info = case("inv_root_spd_n40_" + label, s, ref, eps=1e-9, **cfg)
        if info is None:
            continue
        want_retry = 1 if cfg.get("force_retry") else 0
        ok = info["retries"] == want_retry and info["driver"] == want_retry
        if cfg.get("ortho_check") != "off":
            ok = ok and 0 <= info["ortho_error"] < 1e-12
        else:
            ok = ok and info["ortho_error"] == -1  # not measured
        if not want_retry and base is not None:
            ok = ok and np.array_equal(out, base)
        rep.check("inv_root_spd_n40_" + label + " [info]", ok,
                  "retries %d, driver %d, ortho_error %.2g%s" % (
                      info["retries"], info["driver"], info["ortho_error"],
                      "" if want_retry else ", bit-identical to the default check"))


def defaults_case(drv, rep):
    got, err = drv.defaults()
    s = (got or {}).get("shampoo", {})
    ok = (s.get("epsilon_rel") == 0 and s.get("use_pseudo_inverse") is False and
          f32(s.get("pseudo_inverse_rtol", 0)) == -1.0 and s.get("pseudo_inverse_atol") == 0 and
          s.get("inverse_exponent_override") == [-1, -1])
    rep.check("shampoo_option_defaults", ok, "%s" % {k: s.get(k) for k in (
        "epsilon_rel", "use_pseudo_inverse", "pseudo_inverse_rtol", "pseudo_inverse_atol",
        "inverse_exponent_override")} if s else err)


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/optim_driver" % sys.argv[0], file=sys.stderr)
        return 2
    np.seterr(all="ignore")
    rep = T.Report()
    import tempfile
    with tempfile.TemporaryDirectory(prefix="strata_shampoo_opts_") as tmp:
        drv = T.Driver(os.path.abspath(sys.argv[1]), tmp)
        for section in (defaults_case, start_cases, epsilon_cases, scale_cases, pseudo_cases,
                        exponent_cases, nonfinite_cases, zero_cases, inv_root_cases):
            section(drv, rep)
    if rep.failed:
        print("\n%d of %d checks FAILED: %s" % (len(rep.failed), rep.count,
                                                ", ".join(rep.failed)))
        return 1
    print("\nall %d checks passed" % rep.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
