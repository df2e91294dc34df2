#!/usr/bin/env python3
"""bench/peers: strata side by side with what users would run instead (issue #13).

One run prints, per matrix set and thread count, each optimizer's ms/step on
both sides, the ratio (peer / strata: > 1 means strata is faster), GFLOP/s
where the flop count is known, and BEFORE the timing the relative error
between the two sides' updates on the same step (so the timing compares the
same work):

  strata Muon            vs optax.contrib.muon (JAX, jit, float32)
  strata Shampoo F=1/10  vs precondition-opt's distributed_shampoo (JAX)
  strata SOAP            vs the SOAP reference (nikhilvyas/SOAP, PyTorch CPU)

over two matrix sets: the default GPT's matrices (4 layers, d_model 128) and
a GPT-2-small-shaped set (--gpt2-layers layers of 4 x 768x768, 768x3072,
3072x768). Then the training throughput of the same byte-level GPT (same
shapes, batch, AdamW) in PyTorch eager against strata's C trainer, and
OpenBLAS SGEMM GFLOP/s with the core OpenBLAS runs.

Each side is one long-lived process per (optimizer, thread count) that keeps
its state between rounds, as a training run would; rounds alternate which
side goes first; figures are medians. One thread: both sides pinned to CPU 0
(taskset) with one BLAS/XLA/torch thread; "all": every core, each library's
own threading.

Peers are not vendored. Setup (Debian 12; see bench/peers/README.md):
  apt-get install -y python3-torch
  python3 -m venv --system-site-packages /tmp/peers/venv   # /usr/bin/python3
  /tmp/peers/venv/bin/pip install "numpy<2" "jax[cpu]==0.4.30" "jaxlib==0.4.30" \
      "optax==0.2.5" "flax==0.8.5" precondition-opt
  git --git-dir=<mirror of github.com/nikhilvyas/SOAP> show HEAD:soap.py > /tmp/peers/soap.py
Run:
  /tmp/peers/venv/bin/python bench/peers/peers.py --build build --soap /tmp/peers/soap.py
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# ----------------------------------------------------------------- settings
# Matched on both sides (see each worker below and peer_step.c's defaults).
MUON = dict(lr=0.02, mu=0.95)
# eigh: distributed_shampoo's eigendecomposition root (strata's method); its
# default coupled Newton iteration (--shampoo-newton) ran over 10 minutes for
# one F=1 step of the default GPT's set on one thread here: in float32 it
# rarely meets its tolerance and runs all its iterations on the stacked,
# padded statistics.
SHAMPOO = dict(lr=0.01, eps=1e-6, block=1024, eigh=True)
SOAP = dict(lr=3e-3, b1=0.95, b2=0.95, freq=10, wd=0.0)


def default_gpt_shapes(layers=4, c=128):
    """The default GPT's matrices (trainer/gpt.h, stored in x out)."""
    return [s for _ in range(layers) for s in ((c, 3 * c), (c, c), (c, 4 * c), (4 * c, c))]


def gpt2_shapes(layers=12, c=768):
    """GPT-2-small-shaped: per layer q, k, v, o (c x c), fc (c x 4c), proj (4c x c)."""
    return [s for _ in range(layers) for s in ((c, c),) * 4 + ((c, 4 * c), (4 * c, c))]


def muon_flops(shapes, ns_steps=5):
    """Nominal Newton-Schulz flops (2 per multiply-add): per iteration with
    p = min, q = max: A = X X^T (p^2 q), A A (p^3), B X (p^2 q)."""
    f = 0
    for r, c in shapes:
        p, q = min(r, c), max(r, c)
        f += ns_steps * 2 * (2 * p * p * q + p ** 3)
    return f


def write_set(d, shapes, n_sets=2, seed=0):
    rng = np.random.default_rng(seed)
    with open(os.path.join(d, "shapes.txt"), "w") as f:
        for r, c in shapes:
            f.write(f"{r} {c}\n")
    w = [rng.standard_normal((r, c), dtype=np.float32) * 0.02 for r, c in shapes]
    np.concatenate([x.ravel() for x in w]).tofile(os.path.join(d, "w.f32"))
    gs = []
    for _ in range(n_sets):
        gs += [rng.standard_normal((r, c), dtype=np.float32).ravel() for r, c in shapes]
    np.concatenate(gs).tofile(os.path.join(d, "g.f32"))


def read_set(d):
    shapes = [tuple(map(int, ln.split())) for ln in open(os.path.join(d, "shapes.txt"))]
    total = sum(r * c for r, c in shapes)
    w = np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32)
    g = np.fromfile(os.path.join(d, "g.f32"), dtype=np.float32).reshape(-1, total)
    return shapes, w, g


def split(flat, shapes):
    out, off = [], 0
    for r, c in shapes:
        out.append(flat[off:off + r * c].reshape(r, c))
        off += r * c
    return out


# ----------------------------------------------------------------- workers
# A worker answers the same line protocol as peer_step.c: reset, step K,
# dump FILE, quit.

class JaxWorker:
    def __init__(self, kind, d, opts):
        import jax
        import jax.numpy as jnp
        import optax
        jax.config.update("jax_enable_x64", False)
        self.jax, self.jnp, self.kind = jax, jnp, kind
        shapes, w, g = read_set(d)
        self.shapes = shapes
        # optax's layout is (in, out) with Muon's scale sqrt(max(1, out/in)):
        # strata's rows x cols matrix goes in transposed, so both sides scale
        # by sqrt(max(1, rows/cols)) and Newton-Schulz sees the same matrix.
        tr = kind == "muon"
        self.tr = tr
        lay = (lambda x: np.ascontiguousarray(x.T)) if tr else (lambda x: x)
        self.w0 = [jnp.asarray(lay(x)) for x in split(w, shapes)]
        self.g = [[jnp.asarray(lay(x)) for x in split(gs, shapes)] for gs in g]
        if kind == "muon":
            opt = optax.contrib.muon(learning_rate=opts["lr"], beta=opts["mu"], nesterov=True)
        else:
            from precondition import distributed_shampoo as ds
            opt = ds.distributed_shampoo(
                learning_rate=opts["lr"], block_size=opts["block"], beta1=0.0, beta2=1.0,
                diagonal_epsilon=1e-10, matrix_epsilon=opts["eps"], weight_decay=0.0,
                start_preconditioning_step=0, preconditioning_compute_steps=opts["freq"],
                statistics_compute_steps=1, best_effort_shape_interpretation=False,
                graft_type=ds.GraftingType.ADAGRAD, nesterov=False,
                relative_matrix_epsilon=False, merge_small_dims_block_size=1,
                moving_average_for_momentum=False, decoupled_learning_rate=True,
                generate_training_metrics=False, precision=jax.lax.Precision.HIGHEST,
                eigh=opts.get("eigh", True))
        self.opt = opt

        def step(params, state, grads):
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state
        self.step_fn = jax.jit(step)
        self.reset()

    def reset(self):
        self.w = list(self.w0)
        self.state = self.opt.init(self.w)
        self.t = 0

    def step(self, k):
        t0 = time.perf_counter()
        for _ in range(k):
            self.w, self.state = self.step_fn(self.w, self.state, self.g[self.t % len(self.g)])
            self.t += 1
        self.jax.block_until_ready(self.w)
        return time.perf_counter() - t0

    def dump(self, path):
        ws = [np.asarray(x) for x in self.w]
        if self.tr:
            ws = [x.T for x in ws]
        np.concatenate([x.ravel() for x in ws]).astype(np.float32).tofile(path)


class TorchSoapWorker:
    def __init__(self, d, opts, soap_path, threads):
        import importlib.util
        import torch
        torch.set_num_threads(threads)
        spec = importlib.util.spec_from_file_location("soap_ref", soap_path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self.torch, self.SOAP, self.opts = torch, mod.SOAP, opts
        shapes, w, g = read_set(d)
        self.shapes = shapes
        self.w0 = [torch.from_numpy(x.copy()) for x in split(w, shapes)]
        self.g = [[torch.from_numpy(x.copy()) for x in split(gs, shapes)] for gs in g]
        self.reset()

    def reset(self):
        torch, o = self.torch, self.opts
        self.p = [torch.nn.Parameter(x.clone()) for x in self.w0]
        self.opt = self.SOAP(self.p, lr=o["lr"], betas=(o["b1"], o["b2"]),
                             weight_decay=o["wd"], precondition_frequency=o["freq"])
        self.t = 0

    def step(self, k):
        t0 = time.perf_counter()
        for _ in range(k):
            for p, g in zip(self.p, self.g[self.t % len(self.g)]):
                p.grad = g
            self.opt.step()
            self.t += 1
        return time.perf_counter() - t0

    def dump(self, path):
        np.concatenate([p.detach().numpy().ravel() for p in self.p]).astype(
            np.float32).tofile(path)


def worker_main(side, d, threads, opts, soap_path):
    import warnings
    warnings.filterwarnings("ignore", category=UserWarning)  # jax: float64 requests in float32
    if side == "torch-soap":
        w = TorchSoapWorker(d, opts, soap_path, threads)
    else:
        w = JaxWorker(side.split("-")[1], d, opts)
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "reset":
            w.reset()
            print("ok", flush=True)
        elif parts[0] == "step":
            print(f"{w.step(int(parts[1])):.9f}", flush=True)
        elif parts[0] == "dump":
            w.dump(parts[1])
            print("ok", flush=True)
        elif parts[0] == "quit":
            break


# ----------------------------------------------------------------- driver

def thread_env(threads, all_cores):
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if not all_cores:
        env["XLA_FLAGS"] = ("--xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1")
    env["JAX_PLATFORMS"] = "cpu"
    return env


def pin(all_cores):
    return [] if all_cores else ["taskset", "-c", "0"]


class Proc:
    def __init__(self, cmd, env):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)
        self.banner = self._read()

    def _read(self):
        """The next answer line. Other lines on the worker's stdout are
        passed on as notes: LAPACK's xerbla prints there (Debian's torch
        1.13: "** On entry to SSYEVD parameter number 8 had an illegal
        value" for SOAP's 3072 x 3072 factor, after which the reference
        retries eigh in float64)."""
        while True:
            ln = self.p.stdout.readline()
            if not ln or ln.startswith("error"):
                raise RuntimeError(f"{self.p.args[:3]}: {ln.strip() or 'exited'}")
            t = ln.strip()
            if t == "ok" or t.startswith("ready"):
                return t
            try:
                float(t)
                return t
            except ValueError:
                side = "strata" if any("peer_step" in a for a in self.p.args) else "peer"
                print(f"    note ({side}): {t}", file=sys.stderr, flush=True)

    def cmd(self, s):
        self.p.stdin.write(s + "\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=60)


def rel_err(d, a_path, b_path, shapes, only_square=False):
    """||U_a - U_b|| / ||U_b|| over the set's matrices (only the square ones
    when only_square: see SOAP in step_bench)."""
    w0 = np.fromfile(os.path.join(d, "w.f32"), dtype=np.float32).astype(np.float64)
    a = w0 - np.fromfile(a_path, dtype=np.float32)
    b = w0 - np.fromfile(b_path, dtype=np.float32)
    if only_square:
        keep = np.concatenate([np.full(r * c, r == c) for r, c in shapes])
        a, b = a[keep], b[keep]
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def compare(args, d, name, shapes, opt, peer_side, strata_keys, peer_opts, check_steps,
            steps_per_round, threads, all_cores, flops_per_step, only_square=False):
    env = thread_env(threads, all_cores)
    s_cmd = pin(all_cores) + [os.path.join(args.build, "bench", "peer_step"), opt, d,
                              str(threads)] + [f"{k}={v}" for k, v in strata_keys.items()]
    p_cmd = pin(all_cores) + [sys.executable, os.path.abspath(__file__), "--worker", peer_side,
                              "--dir", d, "--threads", str(threads), "--opts",
                              json.dumps(peer_opts), "--soap", args.soap or ""]
    s = Proc(s_cmd, env)
    p = Proc(p_cmd, env)
    # --before BUILD: an earlier strata build timed in the same rounds (its
    # peer_step gets the same keys; one it does not know fails the run)
    o = None
    if args.before:
        o_cmd = list(s_cmd)
        o_cmd[len(pin(all_cores))] = os.path.join(args.before, "bench", "peer_step")
        o = Proc(o_cmd, env)
    try:
        # the same update on the same step(s), before any timing
        a, b = os.path.join(d, "strata.out"), os.path.join(d, "peer.out")
        for proc, path in ((s, a), (p, b)):
            proc.cmd("reset")
            proc.cmd(f"step {check_steps}")
            proc.cmd(f"dump {path}")
        err = rel_err(d, a, b, shapes, only_square)
        procs = (s, p) + ((o,) if o else ())
        for proc in procs:  # reset, then one warm-up round (jit compile, first refresh)
            proc.cmd("reset")
            proc.cmd(f"step {steps_per_round}")
        ts, tp, to = [], [], []
        for r in range(args.rounds):
            order = [(s, ts), (p, tp)] + ([(o, to)] if o else [])
            if r % 2:
                order.reverse()
            for proc, acc in order:
                acc.append(1e3 * float(proc.cmd(f"step {steps_per_round}")) / steps_per_round)
    finally:
        s.close()
        p.close()
        if o:
            o.close()
    ms_s, ms_p = statistics.median(ts), statistics.median(tp)
    gf = ""
    if flops_per_step:
        gf = f" | GFLOP/s strata {flops_per_step / ms_s / 1e6:7.1f} peer {flops_per_step / ms_p / 1e6:7.1f}"
    before = ""
    if o:
        ms_o = statistics.median(to)
        before = f" | before {ms_o:9.2f} ms, peer/before {ms_p / ms_o:5.2f}x"
    print(f"  {name:<34} threads {'all' if all_cores else 1:>3} | rel err {err:9.2e}"
          f"{' (square)' if only_square else ''} | "
          f"strata {ms_s:9.2f} ms  peer {ms_p:9.2f} ms | peer/strata {ms_p / ms_s:5.2f}x{gf}"
          f"{before}", flush=True)
    res = dict(name=name, threads="all" if all_cores else 1, rel_err=err, strata_ms=ms_s,
               peer_ms=ms_p, ratio=ms_p / ms_s)
    if o:
        res["before_ms"] = statistics.median(to)
    return res


def step_bench(args, results):
    sets = []
    if "default" in args.sets:
        sets.append(("default GPT (4 x 128)", default_gpt_shapes()))
    if "gpt2" in args.sets:
        sets.append((f"GPT-2-small-shaped ({args.gpt2_layers} layers)",
                     gpt2_shapes(args.gpt2_layers)))
    ncpu = os.cpu_count() or 1
    for set_name, shapes in sets:
        nparam = sum(r * c for r, c in shapes)
        print(f"\n{set_name}: {len(shapes)} matrices, {nparam / 1e6:.2f} M parameters", flush=True)
        with tempfile.TemporaryDirectory(dir=args.tmp) as d:
            write_set(d, shapes)
            for all_cores in args.thread_modes:
                threads = ncpu if all_cores else 1
                if "muon" in args.opts:
                    results.append(compare(
                        args, d, "Muon vs optax.contrib.muon", shapes, "muon", "jax-muon",
                        dict(lr=MUON["lr"], mu=MUON["mu"], ns=args.ns), MUON, 1,
                        args.muon_steps, threads, all_cores, muon_flops(shapes)))
                for f in (1, 10):
                    if f"shampoo{f}" not in args.opts:
                        continue
                    o = dict(SHAMPOO, freq=f)
                    # distributed_shampoo starts with eps*I statistics and adds
                    # eps*I again before the root: (L + 2 eps I)^(-1/4)
                    results.append(compare(
                        args, d, f"Shampoo F={f} vs distributed_shampoo", shapes, "shampoo",
                        "jax-shampoo", dict(lr=o["lr"], eps=2 * o["eps"], block=o["block"],
                                            freq=f, start=1), o, 1,
                        args.shampoo_steps if f == 1 else 10, threads, all_cores, 0))
                if "soap" in args.opts and args.soap:
                    # The reference's first step only sets up the eigenbases;
                    # the check is on the first update (step 2). A non-square
                    # matrix's larger factor has rank min(m, n) after one
                    # gradient: its null space is a degenerate eigenspace
                    # whose basis each eigensolver picks freely, and Adam's
                    # per-coordinate division in that basis is not invariant
                    # to the choice (0.7 relative difference measured). So
                    # the update is compared on the square matrices, whose
                    # factors are full rank.
                    results.append(compare(
                        args, d, "SOAP vs SOAP reference (torch)", shapes, "soap", "torch-soap",
                        dict(lr=SOAP["lr"], b1=SOAP["b1"], b2=SOAP["b2"], freq=SOAP["freq"],
                             wd=SOAP["wd"]), SOAP, 2, 10, threads, all_cores, 0,
                        only_square=True))


# ----------------------------------------------------------------- SGEMM

def openblas():
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    return None


def sgemm_bench(args, results):
    lib = openblas()
    if lib is None:
        print("\nSGEMM: libopenblas not found", flush=True)
        return
    lib.openblas_get_corename.restype = ctypes.c_char_p
    lib.openblas_get_config.restype = ctypes.c_char_p
    print(f"\nOpenBLAS SGEMM ({lib.openblas_get_config().decode()}), core "
          f"{lib.openblas_get_corename().decode()} "
          f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})", flush=True)
    sg = lib.cblas_sgemm
    P = ctypes.POINTER(ctypes.c_float)
    sg.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, P, ctypes.c_int, P, ctypes.c_int,
                                        ctypes.c_float, P, ctypes.c_int]
    for all_cores in args.thread_modes:
        threads = (os.cpu_count() or 1) if all_cores else 1
        lib.openblas_set_num_threads(threads)
        for n in (768, 1024):
            a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
            b, c = a.copy(), np.zeros_like(a)
            pa, pb, pc = (x.ctypes.data_as(P) for x in (a, b, c))
            ts = []
            for _ in range(args.rounds + 1):
                t0 = time.perf_counter()
                sg(101, 111, 111, n, n, n, 1.0, pa, n, pb, n, 0.0, pc, n)
                ts.append(time.perf_counter() - t0)
            gf = 2 * n ** 3 / statistics.median(ts[1:]) / 1e9
            print(f"  sgemm {n}^3 threads {'all' if all_cores else 1:>3}: {gf:7.1f} GFLOP/s",
                  flush=True)
            results.append(dict(name=f"sgemm {n}", threads="all" if all_cores else 1, gflops=gf))


# ----------------------------------------------------------------- training

def torch_gpt_worker(threads, steps, layers, d_model, heads, seq, batch):
    """The byte-level GPT of trainer/gpt.h in PyTorch eager (pre-LN,
    tanh GELU, tied LM head, learned positions), AdamW on every tensor with
    the CLI's defaults (lr 3e-3, betas 0.9/0.95, wd 0, clip 1.0); prints
    tokens/s over `steps` steps after 3 warm-up steps."""
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            s.qkv, s.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            s.fc, s.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
            s.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

        def forward(s, x):
            B, T, C = x.shape
            q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
            hd = C // heads
            q, k, v = (t.view(B, T, heads, hd).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            att = att.masked_fill(~s.mask[:T, :T], float("-inf")).softmax(-1)
            x = x + s.proj((att @ v).transpose(1, 2).reshape(B, T, C))
            return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(256, d_model), nn.Embedding(seq, d_model)
            s.h = nn.ModuleList(Block() for _ in range(layers))
            s.lnf = nn.LayerNorm(d_model)

        def forward(s, idx, tgt):
            x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
            for b in s.h:
                x = b(x)
            logits = s.lnf(x) @ s.wte.weight.t()
            return F.cross_entropy(logits.reshape(-1, 256), tgt.reshape(-1))

    m = GPT()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    data = torch.randint(0, 256, (batch, seq + 1))

    def step():
        loss = m(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t0
    print(f"{batch * seq * steps / dt:.1f}", flush=True)


def train_bench(args, results):
    ncpu = os.cpu_count() or 1
    print(f"\nTraining throughput: byte-level GPT {args.train_layers} layers, d_model "
          f"{args.train_d_model}, {args.train_heads} heads, seq 128, batch 16, AdamW "
          f"({args.train_steps} steps per run, median of {args.rounds} runs)", flush=True)
    corpus = os.path.join(args.tmp, "peers-corpus.txt")
    if not os.path.exists(corpus):
        rng = np.random.default_rng(2)
        with open(corpus, "wb") as f:  # text-like bytes; throughput does not depend on them
            f.write(bytes(rng.integers(32, 127, 400000, dtype=np.uint8)))
    for all_cores in args.thread_modes:
        threads = ncpu if all_cores else 1
        env = thread_env(threads, all_cores)
        ts, tp = [], []
        for r in range(args.rounds):
            metrics = os.path.join(args.tmp, "peers-train.jsonl")
            s_cmd = pin(all_cores) + [
                os.path.join(args.build, "cli", "strata"), "train", "--optimizer", "adamw",
                "--data", corpus, "--layers", str(args.train_layers), "--d-model",
                str(args.train_d_model), "--heads", str(args.train_heads), "--seq-len", "128",
                "--batch", "16", "--steps", str(args.train_steps + 3), "--eval-every", "0",
                "--eval-batches", "1", "--threads", str(threads), "--quiet", "--metrics",
                metrics]
            p_cmd = pin(all_cores) + [
                sys.executable, os.path.abspath(__file__), "--torch-gpt", str(threads),
                str(args.train_steps), str(args.train_layers), str(args.train_d_model),
                str(args.train_heads)]

            def run_strata():
                subprocess.run(s_cmd, env=env, check=True, stdout=subprocess.DEVNULL)
                recs = [json.loads(ln) for ln in open(metrics)]
                # the steps after the same 3 warm-up steps the PyTorch side skips
                st = [x["step_ms"] for x in recs if x.get("type") == "step"][3:]
                ts.append(16 * 128 * len(st) / (sum(st) / 1e3))

            def run_torch():
                out = subprocess.run(p_cmd, env=env, check=True, capture_output=True, text=True)
                tp.append(float(out.stdout.split()[-1]))
            for fn in ((run_strata, run_torch) if r % 2 == 0 else (run_torch, run_strata)):
                fn()
        s, p = statistics.median(ts), statistics.median(tp)
        print(f"  threads {'all' if all_cores else 1:>3}: strata {s:9.0f} tok/s  PyTorch eager "
              f"{p:9.0f} tok/s | strata/PyTorch {s / p:5.2f}x", flush=True)
        results.append(dict(name="train tokens/s", threads="all" if all_cores else 1,
                            strata_tok_s=s, torch_tok_s=p, ratio=s / p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build folder (peer_step, strata)")
    ap.add_argument("--before", help="an earlier build folder whose peer_step is timed in the "
                    "same rounds (before/after of a change; step part only)")
    ap.add_argument("--soap", help="path of the SOAP reference's soap.py (not vendored)")
    ap.add_argument("--sets", default="default,gpt2", help="default,gpt2")
    ap.add_argument("--gpt2-layers", type=int, default=12)
    ap.add_argument("--opts", default="muon,shampoo1,shampoo10,soap")
    ap.add_argument("--threads", default="1,all", help="1,all")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--muon-steps", type=int, default=2, help="Muon steps per round")
    ap.add_argument("--shampoo-steps", type=int, default=2, help="Shampoo F=1 steps per round")
    ap.add_argument("--ns", default="auto", help="strata's Newton-Schulz method")
    ap.add_argument("--shampoo-newton", action="store_true",
                    help="distributed_shampoo with its default coupled Newton root")
    ap.add_argument("--parts", default="step,sgemm,train")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--train-layers", type=int, default=4)
    ap.add_argument("--train-d-model", type=int, default=128)
    ap.add_argument("--train-heads", type=int, default=4)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    # internal: the worker processes
    ap.add_argument("--worker")
    ap.add_argument("--dir")
    ap.add_argument("--torch-gpt", nargs=5, metavar="N")
    args, extra = ap.parse_known_args()
    if args.torch_gpt:
        t, steps, layers, dm, heads = (int(x) for x in args.torch_gpt[:5])
        torch_gpt_worker(t, steps, layers, dm, heads, 128, 16)
        return 0
    if args.worker:
        worker_main(args.worker, args.dir, int(args.threads), json.loads(args.opts),
                    args.soap)
        return 0
    if args.shampoo_newton:
        SHAMPOO["eigh"] = False
    args.sets = args.sets.split(",")
    args.opts = args.opts.split(",")
    args.thread_modes = [m == "all" for m in args.threads.split(",")]
    parts = args.parts.split(",")
    for name, got, known in (("--sets", args.sets, ("default", "gpt2")),
                             ("--opts", args.opts, ("muon", "shampoo1", "shampoo10", "soap")),
                             ("--threads", args.threads.split(","), ("1", "all")),
                             ("--parts", parts, ("step", "sgemm", "train"))):
        bad = [x for x in got if x not in known]
        if bad:
            ap.error(f"{name}: unknown {', '.join(bad)} (known: {', '.join(known)})")
    if "step" in parts and "soap" in args.opts and args.soap and not os.path.isfile(args.soap):
        ap.error(f"--soap: no file {args.soap}")
    if "step" in parts and set(args.opts) & {"muon", "shampoo1", "shampoo10"}:
        try:
            import jax  # noqa: F401  (the peers' side; checked before any timing)
            import optax  # noqa: F401
        except ImportError as e:
            ap.error(f"the JAX peers do not import here ({e}): run this script with the "
                     "venv's python of the setup section of bench/peers/README.md")
    lib = openblas()
    if lib is not None:
        lib.openblas_get_corename.restype = ctypes.c_char_p
    print(f"bench/peers: {os.cpu_count()} cores, OpenBLAS core "
          f"{lib.openblas_get_corename().decode() if lib else '?'}; ratios are peer/strata "
          f"time (> 1: strata faster); rel err = ||U_strata - U_peer|| / ||U_peer|| of the "
          f"checked step's update", flush=True)
    results = []
    if "step" in parts:
        step_bench(args, results)
    if "sgemm" in parts:
        sgemm_bench(args, results)
    if "train" in parts:
        train_bench(args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
