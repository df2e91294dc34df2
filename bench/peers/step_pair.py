"""What bench/peers/dion2_step.py and normuon_step.py share: strata's
Python door from a build, the GPT-2-small matrix set with its weights and
gradients, the same-work check (one step from the same state on both sides,
||dW_strata - dW_ref|| / ||dW_ref|| over the set) and the timed rounds
(alternating which side goes first, medians of wall and CPU time per step).
"""
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2_LAYER = [(768, 768)] * 4 + [(768, 3072), (3072, 768)]


def add_strata_args(ap):
    """strata's side of a pair: --ns-method, --ns-dtype and --parallel."""
    ap.add_argument("--ns-method", default="standard",
                    help="strata's Newton-Schulz method (the reference: standard)")
    ap.add_argument("--ns-dtype", default="f32",
                    help="strata's Newton-Schulz products: f32 or bf16 (bfloat16 operands, "
                         "float32 sums: the reference's precision)")
    ap.add_argument("--parallel", choices=("blas", "team"), default="blas",
                    help="strata's --threads: blas (blas_threads N, the step team off) or "
                         "team (blas_threads 1, the step team's N threads step matrices side "
                         "by side: what the bf16 products, single-threaded, need)")


def use_build(build):
    """$STRATA_LIBRARY (unless set) from `build`, and the checkout's python/."""
    lib = next((os.path.join(build, "runtime", n) for n in
                sorted(os.listdir(os.path.join(build, "runtime")))
                if n.startswith("libstrata.so")), None)
    os.environ.setdefault("STRATA_LIBRARY", os.path.abspath(lib))
    sys.path.insert(0, os.path.join(ROOT, "python"))


def strata_threads(threads, parallel):
    """strata's thread keywords for `threads` cores: "blas" gives OpenBLAS the
    threads and runs the matrices one after another (step_threads 1: with
    blas_threads 1 the runtime would otherwise start a step team on every
    core); "team" gives each of `threads` step-team threads whole matrices
    with single-threaded BLAS."""
    if parallel == "team":
        return dict(blas_threads=1, step_threads=threads)
    return dict(blas_threads=threads, step_threads=1)


def matrix_set(torch, layers):
    """(shapes, initial weights, 3 gradient sets), seeded."""
    shapes = GPT2_LAYER * layers
    gen = torch.Generator().manual_seed(7)
    w0 = [0.02 * torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(3)]
    return shapes, w0, grads


def update_error(sides, w0):
    """||dW_strata - dW_ref|| / ||dW_ref|| after each side's step from w0."""
    num = sum(float(((a.detach() - w) - (b.detach() - w)).double().norm() ** 2)
              for a, b, w in zip(sides["strata"][0], sides["reference"][0], w0))
    den = sum(float((b.detach() - w).double().norm() ** 2)
              for b, w in zip(sides["reference"][0], w0))
    return (num / den) ** 0.5


def race(sides, set_grads, rounds, steps):
    """Time each side's opt.step() (set_grads(params, k) before, untimed),
    rounds alternating which side goes first; print the medians and the
    ratio reference/strata, wall and CPU time."""
    wall = {s: [] for s in sides}
    cpu = {s: [] for s in sides}
    for r in range(rounds):
        order = ("strata", "reference") if r % 2 == 0 else ("reference", "strata")
        for s in order:
            for k in range(steps):
                set_grads(sides[s][0], k)
                c0, t0 = time.process_time(), time.perf_counter()
                sides[s][1].step()
                wall[s].append(1e3 * (time.perf_counter() - t0))
                cpu[s].append(1e3 * (time.process_time() - c0))
    for name, d in (("wall", wall), ("cpu", cpu)):
        med = {s: statistics.median(v) for s, v in d.items()}
        print("%s ms/step (median of %d): strata %.1f, reference %.1f, ratio reference/strata "
              "%.2f" % (name, len(d["strata"]), med["strata"], med["reference"],
                        med["reference"] / med["strata"]))


# --- Accuracy against float64 (printed before any timing) -------------------
#
# Each side's step-1 update is compared with a float64 evaluation of the same
# step: ||dW_side - dW_f64|| / ||dW_f64|| over the set. The float64 steps
# below are written from the formulas (include/strata/optim.h "NorMuon",
# "Dion2", "Newton-Schulz"; the references' code for their own polynomial and
# normalization), in torch float64, and are independent of both sides' code.

def ns_f64(torch, x, coeffs, scale=1.0, eps=0.0):
    """Standard Newton-Schulz in float64 on x (any float dtype): the wide
    orientation (a tall x is transposed and back), X = x / (scale ||x||_F +
    eps), per (a, b, c): A = X X^T; X = a X + (b A + c A A) X. x = 0 gives 0."""
    x = x.detach().double()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    n = float(x.norm())
    if n == 0.0:
        return torch.zeros_like(x.T if tall else x)
    x = x / (scale * n + eps)
    for a, b, c in coeffs:
        am = x @ x.T
        x = a * x + (b * am + c * (am @ am)) @ x
    return x.T if tall else x


def normuon_step1_f64(torch, w0, g, coeffs, lr=0.02, momentum=0.95, beta2=0.95, eps=1e-10,
                      wd=0.0):
    """NorMuon's first step from zero state, float64, per matrix (pytorch_optimizer
    NorMuon's defaults: Nesterov, preserve_norm, lr ratio sqrt(max(1, m/n)),
    decoupled weight decay): B = (1-mu) G; G' = (1-mu) G + mu B; X = NS(G')
    (the reference clamps ||G'||_F at 1e-7, strata does not: the same for
    these gradients, ||G'||_F ~ 10); o = ||X||_F; v = (1-b2) mean_j X_ij^2;
    X /= sqrt(v) + eps; X *= o / (||X||_F + eps); dW = -lr wd W - lr r X.
    Returns the list of dW (float64)."""
    out = []
    for w, gi in zip(w0, g):
        w, gi = w.double(), gi.double()
        b = (1.0 - momentum) * gi
        gp = (1.0 - momentum) * gi + momentum * b
        x = ns_f64(torch, gp, coeffs)
        o = float(x.norm())
        v = (1.0 - beta2) * (x * x).mean(dim=1, keepdim=True)
        x = x / (v.sqrt() + eps)
        x = x * (o / (float(x.norm()) + eps))
        m, n_ = w.shape
        r = max(1.0, m / n_) ** 0.5
        out.append(-lr * wd * w - lr * r * x)
    return out


def dion2_step1_f64(torch, w0, g, coeffs, scale, eps=0.0, lr=0.01, fraction=0.25, wd=0.01):
    """Dion2's first step from zero state, float64, per matrix (the Dion
    reference's defaults: spectral_norm lr ratio sqrt(m/n), decoupled weight
    decay): M = G; the slices are the rows when m <= n, else the columns; the
    k = ceil(fraction * num) largest L1 norms are selected; O = NS(M[sel])
    with the given polynomial and normalization; dW = -lr wd W - lr r O in the
    selected slices. Returns (list of dW, list of selected index sets)."""
    import math
    out, sels = [], []
    for w, gi in zip(w0, g):
        w, mm = w.double(), gi.double()
        m, n = w.shape
        rows = m <= n
        s = mm if rows else mm.T
        k = max(1, int(math.ceil(fraction * s.shape[0])))
        sel = torch.sort(torch.topk(s.abs().sum(dim=1), k).indices).values
        o = ns_f64(torch, s[sel] if rows else s[sel].T, coeffs, scale, eps)
        d = torch.zeros_like(w)
        if rows:
            d[sel] = o
        else:
            d[:, sel] = o
        out.append(-lr * wd * w - lr * (m / n) ** 0.5 * d)
        sels.append(set(sel.tolist()))
    return out, sels


def rel_to(params, w0, dw64):
    """||dW - dW_f64|| / ||dW_f64|| over the set, dW = params - w0."""
    num = sum(float(((p.detach().double() - w.double()) - d).norm() ** 2)
              for p, w, d in zip(params, w0, dw64))
    den = sum(float(d.norm() ** 2) for d in dw64)
    return (num / den) ** 0.5


def moved_slices(torch, params, w0, wd_lr):
    """Per matrix, the slices (rows when m <= n, else columns) a Dion2 step
    moved beyond weight decay."""
    out = []
    for p, w in zip(params, w0):
        d = (p.detach().double() - w.double() * (1.0 - wd_lr)).abs()
        if d.shape[0] > d.shape[1]:
            d = d.T
        tol = 1e-6 * float(w.abs().max())
        out.append(set(torch.nonzero(d.max(dim=1).values > tol).flatten().tolist()))
    return out


def strata_modes(methods):
    """(ns_dtype, ns_method) pairs for the accuracy table."""
    return [(d, m) for d in ("f32", "bf16") for m in methods]
