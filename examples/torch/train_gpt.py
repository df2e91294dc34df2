#!/usr/bin/env python3
"""A small GPT in plain PyTorch, trained on real text with one of strata's
optimizers (or torch's own, for comparison), printing the loss.

    python examples/torch/train_gpt.py --optimizer shampoo            # ~1 min, 2 cores
    python examples/torch/train_gpt.py --optimizer muon --attach
    python examples/torch/make_tokens.py /usr/share/games/fortunes runs/tok --merges 256
    python examples/torch/train_gpt.py --data runs/tok          # token files, vocab 512
    torchrun --nproc-per-node 2 examples/torch/train_gpt.py --optimizer shampoo

The model: byte-level (vocabulary 256) GPT-2 blocks, the shapes of
`strata train`'s default (4 layers, 4 heads, d_model 128, context 128,
batch 16), the LM head tied to the token embedding. The data: the fortunes
corpus (/usr/share/games/fortunes, Debian's fortunes-min/fortune-mod; the
same default as `strata train`) or any text file or directory (--data),
split into train/val chunks as `strata train` splits it; or nanoGPT-style
token files (--data DIR with train.bin/val.bin, uint16 ids; make_tokens.py
writes them from a text corpus, bytes or a byte-pair vocabulary learned
locally), the vocabulary then --vocab-size or DIR/meta.json's. The learning rate:
linear warm-up over steps/10, cosine to 0.1 of the peak, set through each
param group's "lr" (strata's groups are live, as torch's are).

strata's optimizers come from `strata.torch` and route by the C runtime's
rule (2-D weights to the matrix optimizer; embeddings, norms and biases to
the AdamW tail); the table is printed at start (--quiet: not). Under
torchrun (gloo, CPU), strata shards the optimizer by owner over the ranks
(every rank a different micro-batch); do not wrap the model in DDP.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import math
import os
import stat
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_CORPUS = "/usr/share/games/fortunes"
STRATA = {"shampoo": "Shampoo", "soap": "SOAP", "kl-shampoo": "KLShampoo", "muon": "Muon",
          "normuon": "NorMuon", "dion2": "Dion2", "adamw": "AdamW"}


# ---- data: bytes, split into train/val chunks as strata train does
def read_corpus(path: str) -> bytes:
    """A file, or a directory's regular files (no symlinks, no dot files, no
    .dat index files) in sorted name order, concatenated."""
    if os.path.isdir(path):
        parts = []
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if name.startswith(".") or name.endswith(".dat"):
                continue
            if not stat.S_ISREG(os.lstat(full).st_mode):
                continue
            with open(full, "rb") as f:
                parts.append(f.read())
        return b"".join(parts)
    with open(path, "rb") as f:
        return f.read()


def split_bytes(data: bytes, val_fraction: float, min_len: int) -> tuple[bytes, bytes]:
    """Chunks of a power of two (4096 down to 256 until about 8 land in val);
    chunk i goes to val when floor((i+1) f) > floor(i f)."""
    chunk = 4096
    smallest = max(min_len, 256)
    while val_fraction > 0 and chunk // 2 >= smallest and \
            (len(data) // chunk) * val_fraction < 8:
        chunk //= 2
    train, val = [], []
    for i in range(0, (len(data) + chunk - 1) // chunk):
        piece = data[i * chunk:(i + 1) * chunk]
        is_val = math.floor((i + 1) * val_fraction) > math.floor(i * val_fraction)
        (val if is_val else train).append(piece)
    return b"".join(train), b"".join(val)


def load_data(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(train, val, vocab): the bytes of a text corpus (vocab 256), or a
    directory of nanoGPT token files (train.bin, val.bin: little-endian
    uint16 ids; vocab from --vocab-size, else its meta.json: make_tokens.py)."""
    tok = os.path.join(args.data, "train.bin")
    if os.path.isdir(args.data) and os.path.isfile(tok):
        vocab = args.vocab_size
        meta = os.path.join(args.data, "meta.json")
        if vocab is None and os.path.isfile(meta):
            with open(meta) as f:
                vocab = int(json.load(f)["vocab_size"])
        if vocab is None:
            sys.exit(f"train_gpt: {args.data} holds token files: give --vocab-size")
        parts = []
        for name in ("train.bin", "val.bin"):
            with open(os.path.join(args.data, name), "rb") as f:
                raw = bytearray(f.read())
            if len(raw) % 2:
                sys.exit(f"train_gpt: {name} has an odd size: not uint16 tokens")
            t = torch.frombuffer(raw, dtype=torch.int16).long() & 0xFFFF
            if sys.byteorder != "little":
                t = ((t & 0xFF) << 8) | (t >> 8)
            if len(t) and int(t.max()) >= vocab:
                sys.exit(f"train_gpt: {name} has token {int(t.max())} >= --vocab-size {vocab}")
            parts.append(t)
        return parts[0], parts[1], vocab
    if args.vocab_size not in (None, 256):
        sys.exit("train_gpt: --vocab-size is for token files; a text corpus is bytes (256)")
    train, val = split_bytes(read_corpus(args.data), args.val_fraction, args.seq_len + 1)
    return (torch.frombuffer(bytearray(train), dtype=torch.uint8).long(),
            torch.frombuffer(bytearray(val), dtype=torch.uint8).long(), 256)


def batch_of(data: torch.Tensor, b: int, t: int, gen: torch.Generator) -> tuple[torch.Tensor,
                                                                              torch.Tensor]:
    ix = torch.randint(0, len(data) - t - 1, (b,), generator=gen)
    x = torch.stack([data[i:i + t] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + t + 1] for i in ix.tolist()])
    return x, y


# ---- the model: GPT-2 blocks (Radford et al. 2019), tied head
class Block(nn.Module):
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d: int, n_layer: int, n_head: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("proj.weight",
                                                                      "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()  # LM head tied to wte


# ---- optimizers
class Both:
    """Two torch optimizers stepped together (torch.optim.Muon takes 2-D
    matrices only: the rest go to AdamW, as strata's routing does)."""

    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts
        self.param_groups = [g for o in opts for g in o.param_groups]

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)


def strata_kwargs(pairs: list[str]) -> dict:
    """--strata KEY=VALUE pairs as keywords of strata's optimizer classes
    (the C configuration's field names): ints, floats, true/false, else str."""
    kw: dict = {}
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep or not key:
            sys.exit(f"train_gpt: --strata {pair!r}: expected KEY=VALUE")
        low = val.lower()
        if low in ("true", "false"):
            kw[key] = low == "true"
            continue
        for conv in (int, float):
            try:
                kw[key] = conv(val)
                break
            except ValueError:
                pass
        else:
            kw[key] = val
    return kw


def meta_shampoo(args: argparse.Namespace, matrices: list, soap: bool):
    """Meta's Distributed Shampoo (facebookresearch/optimizers, taken by
    --peer-path, never vendored) on the 2-D matrices, strata Shampoo's
    defaults where they are the same knobs: lr 1e-2, betas (0.9, 1.0),
    epsilon 1e-12, Adam grafting (0.999, 1e-8), blocks of
    --max-preconditioner-dim, roots every --precondition-frequency steps
    from step 1; single device. soap: its eigenvalue-corrected form
    (DefaultSOAPConfig), betas (0.95, 0.95) as strata SOAP's."""
    if args.peer_path:
        sys.path.insert(0, os.path.abspath(args.peer_path))
    try:
        import distributed_shampoo as ds
    except ImportError as e:
        sys.exit(f"train_gpt: --optimizer {args.optimizer} needs Meta's distributed_shampoo "
                 f"(git clone https://github.com/facebookresearch/optimizers; --peer-path "
                 f"to it): {e}")
    kw = dict(lr=args.lr or (3e-3 if soap else 1e-2), epsilon=1e-12 if not soap else 1e-8,
              betas=(0.95, 0.95) if soap else (0.9, 1.0), weight_decay=0.0,
              max_preconditioner_dim=args.max_preconditioner_dim,
              precondition_frequency=args.precondition_frequency,
              start_preconditioning_step=args.precondition_frequency,
              distributed_config=ds.DefaultSingleDeviceDistributedConfig)
    if soap:
        kw["preconditioner_config"] = ds.DefaultSOAPConfig
    else:
        kw["grafting_config"] = ds.AdamPreconditionerConfig(beta2=0.999, epsilon=1e-8)
    return ds.DistributedShampoo(matrices, **kw)


def state_bytes(opt, model: nn.Module) -> dict:
    """A torch optimizer's state tensors' bytes, by the last key of their
    names (Distributed Shampoo's state is nested dicts and dataclasses),
    largest first; the model's parameters and gradients (which its state
    also references) are not counted."""
    by: dict = {}
    seen_storage: set = {p.untyped_storage().data_ptr() for p in model.parameters()} | \
        {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
    seen: set = set()

    def walk(obj, key):
        if isinstance(obj, torch.Tensor):
            ptr = obj.untyped_storage().data_ptr()
            if ptr in seen_storage:  # a view of a tensor already counted
                return
            seen_storage.add(ptr)
            by[key] = by.get(key, 0) + obj.untyped_storage().nbytes()
            return
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, key if isinstance(k, (int, torch.Tensor)) else str(k))
        elif isinstance(obj, (list, tuple, set)):
            for v in obj:
                walk(v, key)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
            for k, v in vars(obj).items():  # dataclasses holding factor matrices
                walk(v, k.lstrip("_"))

    for o in getattr(opt, "opts", [opt]):
        walk(dict(o.state), "state")
        walk(getattr(o, "_per_group_state_lists", None), "group_state")
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))


# `strata train`'s defaults (trainer/trainer.c, gpt_train_options_default),
# as keywords of strata.torch's classes, so that this example and `strata
# train` run the same settings (tests/python/test_example.py compares them
# with strata train's JSONL config record): every optimizer's AdamW tail and
# clipping, then each matrix optimizer's own. Keywords not here keep the C
# library's defaults in both.
TRAINER_COMMON = {"adamw_lr": 3e-3, "adamw_weight_decay": 0.0, "adamw_beta2": 0.95,
                  "max_grad_norm": 1.0}
# The tail's lr where the trainer's default for the matrix optimizer is not
# TRAINER_COMMON's (trainer.c, gpt_default_tail_lr: the race's tail sweep).
TRAINER_TAIL_LR = {"muon": 0.04, "normuon": 0.04, "soap": 0.01, "kl-shampoo": 0.01,
                   "shampoo": 0.02, "dion2": 0.01}
TRAINER_DEFAULTS = {
    "adamw": {"lr": 3e-3, "weight_decay": 0.0, "beta2": 0.95},
    "shampoo": {"lr": 3e-3, "beta2": 0.95, "epsilon": 1e-10, "grafting_beta2": 0.95,
                "max_preconditioner_dim": 1024},
    "muon": {"lr": 0.05},
    "soap": {"lr": 6e-3, "weight_decay": 0.0},
    "kl-shampoo": {"init_factor": -1.0, "lr": 1e-2, "weight_decay": 0.0, "bias_correction": True},
    "normuon": {"lr": 0.04},
    "dion2": {"lr": 0.04},
}


def trainer_warmup(steps: int, opt) -> int:
    """`strata train`'s default warm-up (trainer.c, default_warmup): steps/10,
    but at least the horizon of the slowest second-moment EMA the run keeps
    (the matrix optimizer's and the AdamW tail's, strata_optimizer_info),
    and the whole run when it is shorter than that horizon, but never fewer
    steps than the tail's horizon (a shorter run ends before its peak)."""
    if not hasattr(opt, "optimizer_info"):
        return max(1, steps // 10)
    info = opt.optimizer_info()
    tail = info["adamw_ema_horizon"]
    floor_w = int(min(max(info["ema_horizon"], tail), max(steps, tail)))
    return max(steps // 10, floor_w, 1)


def matrices_lr_scale(args: argparse.Namespace, opt) -> tuple[int, float]:
    """`strata train`'s matrices' own warm-up (trainer.c, matrices_own_warmup):
    with the default warm-up W, a run shorter than the matrix optimizer's
    horizon H (KL-Shampoo: 50) warms its matrices over H while the tail keeps
    W, so their lr is scaled by W/H (both ramps last the whole run). Returns
    (W, H), or (1, 1) for no scaling."""
    if args.warmup is not None or args.library_defaults or not hasattr(opt, "optimizer_info"):
        return 1, 1.0
    w, h = trainer_warmup(args.steps, opt), opt.optimizer_info()["ema_horizon"]
    return (w, h) if h > w else (1, 1.0)


def make_optimizer(args: argparse.Namespace, model: GPT):
    if args.optimizer in STRATA:
        import strata.torch as st
        kw = {} if args.library_defaults else dict(TRAINER_DEFAULTS[args.optimizer])
        if not args.library_defaults:
            for k, v in TRAINER_COMMON.items():
                if args.optimizer != "adamw" or not k.startswith("adamw_"):
                    kw[k] = v  # AdamW: its own lr, wd and beta2 above
            if args.optimizer in TRAINER_TAIL_LR:
                kw["adamw_lr"] = TRAINER_TAIL_LR[args.optimizer]
        given = strata_kwargs(args.strata)
        kw.update(given)
        if kw.get("form") == "exact" and "bias_correction" not in given:
            kw.pop("bias_correction", None)  # as `strata train --kl-form exact`: off unless asked
        if args.lr is not None:
            kw["lr"] = args.lr
        if args.optimizer != "adamw" and args.adamw_lr is not None:
            kw["adamw_lr"] = args.adamw_lr
        if args.optimizer in ("shampoo", "soap", "kl-shampoo"):
            kw["precondition_frequency"] = args.precondition_frequency
            if args.optimizer == "shampoo":  # SOAP and KL-Shampoo do not block
                kw["max_preconditioner_dim"] = args.max_preconditioner_dim
        if args.async_roots:
            kw.update(async_roots=True, staleness=args.staleness, stagger_refresh=True,
                      workers=args.workers)
        try:
            opt = getattr(st, STRATA[args.optimizer])(model.named_parameters(), model=model,
                                                      **kw)
        except TypeError as e:  # an unknown --strata key: the binding lists the valid ones
            sys.exit(f"train_gpt: --strata: {e}")
        w, h = matrices_lr_scale(args, opt)
        if h > w:  # the same optimizer at the scaled matrix lr (the tail keeps its own)
            del opt  # float32 lr x W / H, in strata train's order
            kw["lr"] = ctypes.c_float(kw["lr"]).value * w / h
            opt = getattr(st, STRATA[args.optimizer])(model.named_parameters(), model=model,
                                                      **kw)
        if args.attach:
            opt.attach(model)
        return opt
    matrices = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n
                and "wpe" not in n]
    others = [p for n, p in model.named_parameters() if not any(p is m for m in matrices)]
    if args.optimizer == "torch-adamw":
        return torch.optim.AdamW(model.parameters(), lr=args.lr or 1e-3, weight_decay=0.0)
    if args.strata:
        sys.exit(f"train_gpt: --strata sets strata's optimizers; --optimizer {args.optimizer} "
                 f"is not one")
    if args.optimizer.startswith("po-"):  # pytorch-optimizer (PyPI), on the matrices
        try:
            import pytorch_optimizer as po
        except ImportError:
            sys.exit(f"train_gpt: --optimizer {args.optimizer} needs pytorch-optimizer "
                     f"(pip install pytorch-optimizer)")
        tail = torch.optim.AdamW(others, lr=args.adamw_lr or 3e-3, betas=(0.9, 0.95),
                                 weight_decay=0.0)
        if args.optimizer == "po-muon":
            return Both(po.Muon([{"params": matrices, "use_muon": True}], lr=args.lr or 0.05,
                                weight_decay=0.0), tail)
        if args.optimizer == "po-soap":
            return Both(po.SOAP(matrices, lr=args.lr or 3e-3, weight_decay=0.0,
                                precondition_frequency=args.precondition_frequency), tail)
        return Both(po.Shampoo(matrices, lr=args.lr or 3e-3,
                               preconditioning_compute_steps=args.precondition_frequency), tail)
    if args.optimizer in ("meta-shampoo", "meta-soap"):
        return Both(meta_shampoo(args, matrices, args.optimizer == "meta-soap"),
                    torch.optim.AdamW(others, lr=args.adamw_lr or 3e-3, betas=(0.9, 0.95),
                                      weight_decay=0.0))
    if args.optimizer == "torch-muon":
        if not hasattr(torch.optim, "Muon"):
            sys.exit("train_gpt: this torch has no torch.optim.Muon")
        return Both(torch.optim.Muon(matrices, lr=args.lr or 0.02),
                    torch.optim.AdamW(others, lr=args.adamw_lr or 1e-3, weight_decay=0.0))
    sys.exit(f"train_gpt: unknown optimizer {args.optimizer!r}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optimizer", default="shampoo",
                    choices=list(STRATA) + ["torch-adamw", "torch-muon", "meta-shampoo",
                                            "meta-soap", "po-shampoo", "po-soap", "po-muon"],
                    help="strata's (NAME), torch's (torch-*), Meta's Distributed Shampoo "
                         "(meta-*, --peer-path) or the pytorch-optimizer package's (po-*) on "
                         "the 2-D matrices, torch's AdamW on the rest")
    ap.add_argument("--peer-path", default=None,
                    help="meta-shampoo/meta-soap: a checkout of facebookresearch/optimizers")
    ap.add_argument("--strata", action="append", default=[], metavar="KEY=VALUE",
                    help="a keyword of strata's optimizer (the C config's field name), e.g. "
                         "tiers=nvme nvme_dir=/tmp/x host_budget=0; repeatable")
    ap.add_argument("--max-preconditioner-dim", type=int, default=1024,
                    help="Shampoo's block size (strata's and Meta's; Meta's SOAP blocks too)")
    ap.add_argument("--library-defaults", action="store_true",
                    help="strata's optimizers with the C library's defaults instead of "
                         "`strata train`'s (its lrs, clipping, betas: TRAINER_DEFAULTS)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up steps (default: strata train's rule, trainer_warmup)")
    ap.add_argument("--memory-report", action="store_true",
                    help="print one 'memory: {json}' line at the end: peak RSS, strata's "
                         "ledger or a torch optimizer's state bytes")
    ap.add_argument("--data", default=DEFAULT_CORPUS,
                    help="text file or directory, or a directory of token files "
                         "(train.bin, val.bin; make_tokens.py)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="token files' vocabulary (default: their meta.json)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=60,
                    help="optimizer steps (60: about a minute on 2 cores; strata train: 300)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    # strata train's names (--layers, --heads); --n-layer, --n-head: the older aliases
    ap.add_argument("--layers", "--n-layer", dest="n_layer", type=int, default=4,
                    help="transformer blocks")
    ap.add_argument("--heads", "--n-head", dest="n_head", type=int, default=4,
                    help="attention heads")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--lr", type=float, default=None,
                    help="peak lr of the matrix optimizer (default: strata's own default)")
    ap.add_argument("--adamw-lr", type=float, default=None, help="peak lr of the AdamW tail")
    ap.add_argument("--precondition-frequency", type=int, default=10)
    ap.add_argument("--async", dest="async_roots", action="store_true",
                    help="roots on CPU workers, staleness budget, staggered refreshes")
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--attach", action="store_true",
                    help="strata's module hooks (opt.attach(model)); same results")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    ap.add_argument("--metrics", default=None, help="JSONL file: one line per step (step, loss, val_loss, lr_scale, seconds; "
                         "strata's optimizers also grad_norm before clipping and root_refreshes, "
                         "as strata train's --metrics)")
    ap.add_argument("--quiet", action="store_true", help="no routing table")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = 0, 1
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    if not args.quiet and rank == 0:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        logging.getLogger("strata").setLevel(logging.INFO)
    if not os.path.exists(args.data):
        sys.exit(f"train_gpt: no corpus at {args.data} (install fortunes-min, or --data FILE)")
    train, val, vocab = load_data(args)
    if len(train) <= args.seq_len + 1 or len(val) <= args.seq_len + 1:
        sys.exit(f"train_gpt: {args.data} is too small for --seq-len {args.seq_len}")
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.seq_len, args.d_model, args.n_layer, args.n_head)
    opt = make_optimizer(args, model)
    logging.getLogger("strata").setLevel(logging.WARNING)
    for g in opt.param_groups:
        g["peak_lr"] = g["lr"]
    warmup = args.warmup if args.warmup is not None else trainer_warmup(args.steps, opt)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its micro-batch
    out = open(args.metrics, "w") if args.metrics and rank == 0 else None

    def lr_scale(step: int) -> float:  # warm-up, then cosine to 0.1
        if step < warmup:
            return (step + 1) / warmup
        p = (step - warmup) / max(1, args.steps - warmup - 1)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, p)))

    @torch.no_grad()
    def val_loss() -> float:
        g = torch.Generator().manual_seed(7)
        tot = 0.0
        for _ in range(args.eval_batches):
            x, y = batch_of(val, args.batch, args.seq_len, g)
            tot += F.cross_entropy(model(x).view(-1, vocab), y.view(-1)).item()
        return tot / args.eval_batches

    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        unit = "bytes" if vocab == 256 and not os.path.isfile(
            os.path.join(args.data, "train.bin")) else f"tokens, vocab {vocab}"
        print(f"train_gpt: {args.optimizer} on {args.data} ({len(train)} train, {len(val)} val "
              f"{unit}), {n} parameters, {args.steps} steps, {world} rank(s)", flush=True)
    t0 = time.perf_counter()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = g["peak_lr"] * lr_scale(step)
        x, y = batch_of(train, args.batch, args.seq_len, gen)
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = step + 1 == args.steps
        vl = val_loss() if (args.eval_every and (step + 1) % args.eval_every == 0) or last \
            else None
        if rank == 0:
            line = f"step {step + 1:4d}  loss {loss.item():.4f}"
            if vl is not None:
                line += f"  val {vl:.4f}"
            print(line + f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
            if out:
                rec = {"step": step + 1, "loss": loss.item(), "val_loss": vl,
                       "lr_scale": lr_scale(step), "seconds": time.perf_counter() - t0}
                if hasattr(opt, "stats"):  # as strata train's JSONL: the norm before clipping
                    s = opt.stats()
                    rec.update(grad_norm=s["grad_norm"], root_refreshes=s["root_refreshes"])
                out.write(json.dumps(rec) + "\n")
    if out:
        out.close()
    if args.memory_report and rank == 0:
        import resource
        rep = {"optimizer": args.optimizer, "parameters": n,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        if hasattr(opt, "memory_ledger"):
            rep["strata_ledger"] = opt.memory_ledger()
        else:
            rep["state_bytes"] = state_bytes(opt, model)
        print("memory: " + json.dumps(rep), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
