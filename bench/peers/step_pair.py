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
