"""strata's optimizers as torch.optim optimizers: Shampoo, SOAP, KLShampoo, Muon, NorMuon,
Dion2, AdamW.

Each optimizer is one strata runtime (strata_create ... strata_commit) over
the parameters it is given; `step()` is strata_step. The binding is thin: no
math here, the C library does every update.

    model = MyModel()
    opt = strata.torch.Shampoo(model.named_parameters(), lr=1e-2,
                               precondition_frequency=10, async_roots=True,
                               stagger_refresh=True)
    for x, y in data:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

Keywords are the C configuration's field names (include/strata/optim.h,
strata.h): the matrix optimizer's own (`lr`, `weight_decay`,
`precondition_frequency`, ...), the AdamW tail's with an `adamw_` prefix
(`adamw_lr`, `adamw_weight_decay`, ...; the AdamW class takes them
unprefixed), and the runtime's (`staleness`, `workers`, `stagger_refresh`,
`max_grad_norm`, `nvme_dir`, ...; `async_roots` is strata_config.async, a
Python keyword; `async=True` through ** works too). An omitted keyword keeps
the C default (strata_config_default). Enum fields take their C names in
lower case ("adam", "eager", "nvme", ...).

This version: CPU float32 tensors; under torchrun (torch.distributed
initialized, world > 1) owner sharding over the default process group
(strata/dist.py; `distributed=False` opts out), HSDP with
`shard_group_size=K` (its groups made with torch.distributed.new_group),
and ZeRO-3 with `managed=True` plus attach(model) (StrataOptimizer.attach:
non-owners hold a layer's weights only around its forward and backward);
attach(model) for strata's module hooks. Refused (StrataError): DDP/FSDP-
wrapped models and DTensors, CUDA tensors and backend="cuda", a ZeRO-3 step
before attach. With torch.distributed initialized, state_dict() follows
torch.distributed.checkpoint's conventions (StrataOptimizer.state_dict), so
dcp.save / dcp.load work, at another world size too. bfloat16/float16 parameters are stepped
through a float32 master copy (the class docstring). Not yet: gather
sharding under torchrun.
"""
from __future__ import annotations

import ctypes
import fnmatch
import json
import logging
import os
import shutil
import tempfile
import contextlib
import threading
from ctypes import byref, c_int, c_int32, c_void_p
from typing import Any, Callable, Iterable, Optional

import torch

from . import _lib as L
from ._lib import StrataError

__all__ = ["Shampoo", "SOAP", "KLShampoo", "Muon", "NorMuon", "Dion2", "AdamW", "StrataError",
           "StrataOptimizer"]

log = logging.getLogger("strata.torch")

_FAMILY_STRUCT = {"adamw": L.AdamWConfig, "shampoo": L.ShampooConfig, "muon": L.MuonConfig,
                  "soap": L.SoapConfig, "kl-shampoo": L.KLShampooConfig,
                  "normuon": L.NorMuonConfig, "dion2": L.Dion2Config}
_FAMILY_FIELD = {"adamw": "adamw", "shampoo": "shampoo", "muon": "muon", "soap": "soap",
                 "kl-shampoo": "kl_shampoo", "normuon": "normuon", "dion2": "dion2"}
# strata_config's own fields a user sets (the nested configs, version, the
# matrix optimizer, comm and the log sink are the binding's)
_RUNTIME_FIELDS = [f for f, _ in L.Config._fields_ if f not in (
    "version", "matrix_optimizer", "adamw", "shampoo", "muon", "soap", "kl_shampoo", "normuon",
    "dion2",
    "comm",
    "log_fn", "log_user")]
_ENUM_FIELDS = {"grafting", "root_method", "scale", "momentum_form", "ns_schedule", "ns_method",
                "ns_dtype", "form",
                "update_scale", "adjust_lr",
                "backend", "install_mode", "roots_tier", "sharding", "log_level",
                "stale_correction",
                "factor_dtype", "root_dtype", "state_dtype_factors", "state_dtype_roots",
                "state_dtype_moments"}
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}

# Names whose dotted components match one of these are embeddings / the LM
# head: the routing rule sends them to the AdamW tail (strata.h "Routing").
DEFAULT_EMBEDDING_PATTERNS = ("*embed*", "wte", "wpe")
DEFAULT_HEAD_PATTERNS = ("lm_head",)


def _err(status: str, msg: str) -> StrataError:
    return StrataError(status, msg)


def _set_field(struct: ctypes.Structure, field: str, value: Any, where: str) -> None:
    if field == "adjust_lr" and value is None:
        value = "none"  # the reference's adjust_lr=None
    if field.endswith("dtype") and isinstance(value, torch.dtype):
        # torch's own names for the two storage precisions strata has
        names = {torch.float32: "f32", torch.bfloat16: "bf16"}
        if value not in names:
            raise _err("STRATA_ERR_INVALID_ARG", f"{where}{field} = {value}: not one of "
                       f"torch.float32, torch.bfloat16 ('f32', 'bf16')")
        value = names[value]
    if field in _ENUM_FIELDS and isinstance(value, str):
        table = L.ENUMS[field]
        key = value.lower()
        if key not in table:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{where}{field} = {value!r}: not one of {sorted(table)}")
        value = table[key]
    if field == "nvme_dir":
        value = None if value is None else os.fsencode(value)
    if field == "inverse_exponent_override":
        vals = list(value)
        if len(vals) != 2:
            raise _err("STRATA_ERR_INVALID_ARG", f"{where}{field}: two values (L, R)")
        arr = getattr(struct, field)
        arr[0], arr[1] = float(vals[0]), float(vals[1])
        return
    ctype = dict(struct._fields_).get(field)
    if ctype is ctypes.c_bool and not (isinstance(value, bool) or value in (0, 1)):
        raise _err("STRATA_ERR_INVALID_ARG", f"{where}{field} = {value!r}: not a bool")
    if ctype in _INT_TYPES and isinstance(value, int) and not isinstance(value, bool):
        # ctypes keeps the low bits of an int out of the C type's range
        # (2**32 would become 0): refused, as the C check would refuse it
        bits = 8 * ctypes.sizeof(ctype)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if ctype(-1).value < 0 \
            else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{where}{field} = {value}: out of the range of its C type [{lo}, {hi}]")
    try:
        setattr(struct, field, value)
    except TypeError as e:
        raise _err("STRATA_ERR_INVALID_ARG", f"{where}{field} = {value!r}: {e}") from None


_INT_TYPES = (ctypes.c_int, ctypes.c_uint, ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t,
              ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


_LOW = (torch.bfloat16, torch.float16)  # stepped through a float32 master copy


def _check_tensor(t: Any, name: str, what: str, shape: Optional[torch.Size] = None,
                  low_ok: bool = False) -> None:
    """The zero-copy contract: a strided, contiguous float32 CPU tensor
    (bfloat16/float16 too where `low_ok`: a parameter with a master copy)."""
    if not isinstance(t, torch.Tensor):
        raise _err("STRATA_ERR_INVALID_ARG", f"{name}: {what} is {type(t).__name__}, not a tensor")
    if type(t).__name__ == "DTensor":  # FSDP2 / tensor parallel shards
        raise _wrapper_refusal(f"{name}: {what} is a DTensor")
    if t.layout != torch.strided:
        raise _err("STRATA_ERR_INVALID_ARG",
                   f"{name}: {what} has layout {t.layout}; strata reads dense (strided) storage")
    if t.device.type != "cpu":
        raise _err("STRATA_ERR_UNSUPPORTED", f"{name}: {what} is on {t.device}; " +
                   (_cuda_refusal() if t.device.type == "cuda" else
                    "strata reads CPU tensors only"))
    if t.dtype != torch.float32 and not (low_ok and t.dtype in _LOW):
        if t.dtype in _LOW:
            raise _err("STRATA_ERR_UNSUPPORTED",
                       f"{name}: {what} is {t.dtype}, its parameter float32: strata reads "
                       "float32 gradients of float32 parameters (a bfloat16/float16 "
                       "parameter is stepped through a float32 master copy)")
        raise _err("STRATA_ERR_INVALID_ARG",
                   f"{name}: {what} is {t.dtype}; strata steps float32 tensors only")
    if not t.is_contiguous():
        raise _err("STRATA_ERR_INVALID_ARG",
                   f"{name}: {what} is not contiguous (strides {t.stride()}); strata reads the "
                   "storage in place: pass a contiguous tensor")
    if shape is not None and t.shape != shape:
        raise _err("STRATA_ERR_INVALID_ARG",
                   f"{name}: {what} has shape {tuple(t.shape)}, the parameter {tuple(shape)}")
    if t.numel() == 0:
        raise _err("STRATA_ERR_INVALID_ARG", f"{name}: {what} is empty")


_CUDA_BUILT: Optional[bool] = None


def _cuda_refusal() -> str:
    """Why a CUDA tensor is refused: whether the loaded libstrata has the CUDA
    backend (strata_backend_create_kind probes it once), and that the binding
    does not drive it in this version either way."""
    global _CUDA_BUILT
    if _CUDA_BUILT is None:
        lib = L.lib()
        lib.strata_backend_create_kind.restype = c_int
        lib.strata_backend_create_kind.argtypes = [c_int, c_int, ctypes.POINTER(c_void_p)]
        lib.strata_backend_destroy.restype = None
        lib.strata_backend_destroy.argtypes = [c_void_p]
        be = c_void_p()
        _CUDA_BUILT = lib.strata_backend_create_kind(L.ENUMS["backend"]["cuda"], 1,
                                                     byref(be)) == 0
        if _CUDA_BUILT:
            lib.strata_backend_destroy(be)
        lib.strata_error_clear()
    built = ("the loaded libstrata has the CUDA backend, but" if _CUDA_BUILT else
             "the loaded libstrata was built without the CUDA backend (or finds no device), and")
    return (f"{built} this version of the binding steps CPU tensors only (it does not run "
            "strata's CUDA backend on torch's stream): keep the parameters on the CPU "
            "(model.cpu()) or use a torch.optim optimizer for GPU parameters")


def _wrapper_refusal(what: str) -> StrataError:
    return _err("STRATA_ERR_UNSUPPORTED",
                f"{what}: strata reduces the gradients of its parameters itself (owner "
                "sharding over the process group: each gradient reduced to its matrix's "
                "owner, the new weights broadcast), so a DistributedDataParallel / "
                "FullyShardedDataParallel wrapper would reduce them twice (and FSDP's flat "
                "shards are not the model's matrices). Give strata the unwrapped model "
                "(model.module's parameters) and do not wrap it: "
                "strata.torch.<Optimizer>(model.named_parameters()) under torchrun does the "
                "data parallelism")


def _is_wrapper(m: Any) -> bool:
    """A DDP or FSDP (1 or 2) wrapper module."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        if isinstance(m, DDP):
            return True
    except ImportError:  # pragma: no cover - torch without distributed
        pass
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        if isinstance(m, FSDP):
            return True
    except ImportError:  # pragma: no cover
        pass
    try:
        from torch.distributed.fsdp import FSDPModule  # fully_shard (FSDP2)
        if isinstance(m, FSDPModule):
            return True
    except ImportError:  # pragma: no cover - older torch
        pass
    return False


def _wrapped_params() -> set[int]:
    """ids of the parameters of every live DDP/FSDP wrapper (they exist only
    with torch.distributed initialized; the scan runs at construction then)."""
    import gc
    import warnings
    out: set[int] = set()
    with warnings.catch_warnings():  # isinstance on some lazy module objects warns
        warnings.simplefilter("ignore")
        for o in gc.get_objects():
            if isinstance(o, torch.nn.Module) and _is_wrapper(o):
                out.update(id(p) for p in o.parameters())
    return out


_EMBEDDING_MODULES = (torch.nn.Embedding, torch.nn.EmbeddingBag)


def _embedding_weights(params: list[torch.Tensor],
                       model: Optional[torch.nn.Module]) -> set[int]:
    """ids of those of `params` that are the weight of an nn.Embedding or
    nn.EmbeddingBag: of `model`'s modules when it is given, else of every live
    module (one pass over the collector's objects at construction, about 40 ms
    per 200k objects: a parameter given as model.parameters() or by an
    unhelpful name, "0.weight" in an nn.Sequential, is still told by the
    module that holds it). A table used
    through F.embedding on a bare Parameter has no such module: route it by
    name (embedding_patterns), `routes` or a param group."""
    want = {id(p) for p in params if p.dim() == 2}
    if model is not None:
        return {id(m.weight) for m in model.modules()
                if isinstance(m, _EMBEDDING_MODULES) and id(m.weight) in want}
    if not want:
        return set()
    import gc
    import warnings
    out: set[int] = set()
    with warnings.catch_warnings():  # isinstance on some lazy module objects warns
        warnings.simplefilter("ignore")
        for o in gc.get_objects():
            if isinstance(o, _EMBEDDING_MODULES):
                w = o._parameters.get("weight")
                if w is not None and id(w) in want:
                    out.add(id(w))
    return out


class _Guard:
    """StrataOptimizer._locked()'s context manager: the per-optimizer lock,
    refusing a call from inside a strata call on the same thread (one object
    per optimizer, reused: a generator-based context manager cost a few
    microseconds per C call, which the hooks pay per parameter)."""
    __slots__ = ("_opt",)

    def __init__(self, opt: "StrataOptimizer") -> None:
        self._opt = opt

    def __enter__(self) -> None:
        o = self._opt
        me = threading.get_ident()
        if o._owner == me:
            raise _err("STRATA_ERR_STATE", "called from inside a strata call on this thread "
                       "(a log handler during step()?): the runtime is mid-call")
        o._lock.acquire()
        o._owner = me

    def __exit__(self, *exc: Any) -> bool:
        o = self._opt
        o._owner = None
        o._lock.release()
        return False


_F32 = torch.float32
_STRIDED = torch.strided
_PLAIN = (torch.Tensor, torch.nn.Parameter)


class StrataOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer over one strata runtime (base of the five classes).

    Parameters: an iterable of tensors, of (name, tensor) pairs
    (`model.named_parameters()`: the names go to strata's routing table and
    checkpoints), or of param-group dicts. A group may carry `"optimizer"`
    (one of "adamw", "shampoo", "muon", "normuon", "dion2", "soap", "kl-shampoo") to route its
    parameters explicitly; its "lr" and "weight_decay" default to that
    optimizer's.

    Parameter tensors: float32, contiguous, on the CPU, one to four
    dimensions (a 0-d scalar too), each its storage read and updated in place.
    bfloat16 and float16 parameters: strata steps a float32 master copy of
    the weights (taken at construction) and reads a float32 copy of each
    gradient (converted at step(), or in attach()'s hook); after each step
    the parameter gets the master rounded to its dtype, as mixed-precision
    master weights do. Memory: 8 bytes per such element besides the
    parameter and its gradient (4 the master, 4 the gradient copy).
    state_dict/save hold the master; a parameter written outside the
    optimizer (the model's load_state_dict) re-seeds its master from it at
    the next step (a warning: the lower bits are lost).
    Routing (the C runtime's rule, strata.h): 2-D to the matrix optimizer
    (more dimensions flattened to (d0, d1*...)); 1-D, 0-d, 1xN and Nx1 and
    the names matching `embedding_patterns` / `head_patterns` (any dotted
    component, fnmatch) and the weights of nn.Embedding / nn.EmbeddingBag
    modules (`model`'s when given, else found among the live modules, so
    that model.parameters() of an nn.Sequential routes its embedding too)
    to the AdamW tail, as torch.optim.Muon's documentation asks of
    embeddings and the head. An output head is told only by its name
    (`head_patterns`, default "lm_head") or as a tied embedding's weight.
    `routes` maps fnmatch patterns of full names to an optimizer ({"*.attn.*": "adamw"}: the
    first match wins; a group's "optimizer" wins over it), as an explicit
    per-parameter choice (strata_param_desc.optimizer). `routing()` returns the table; it is logged at INFO
    ("strata.torch") at construction.

    Learning rate and weight decay: `param_groups[i]["lr"]` and
    `["weight_decay"]` are live (schedulers work) and per group; a group may
    set its own at construction. Each step gives every parameter its group's
    values through strata_param_set_hyper (they replace the C configuration's
    lr and weight_decay for that parameter; strata's global scale,
    strata_set_lr_scale, stays 1), only where they changed. A parameter
    routed to another optimizer than its group's (the group's "optimizer",
    else the class's: e.g. a 1-D or embedding tensor of a Shampoo group,
    routed to the AdamW tail by the rule or by `routes`) takes its own
    optimizer's configured lr times the group's lr / the group's lr at
    construction, and keeps its own optimizer's weight_decay: put such
    parameters in a group with "optimizer": "adamw" to give them values.
    `hyperparameters()` lists what the next step uses.

    Gradients: `p.grad` is read in place (float32, contiguous, the
    parameter's shape, CPU, dense); a new `.grad` tensor (backward after
    zero_grad(set_to_none=True)) is re-pointed with strata_param_set_buffers.
    A parameter whose `.grad` is None is skipped that step, as torch's
    optimizers do (strata_param_set_active): no update, no weight decay, its
    moments, momentum and factors unchanged. strata counts steps globally:
    its bias corrections on a later step use the global step count (torch's
    AdamW counts per parameter), and a refresh point (roots, eigenbasis) on
    a skipped step is missed until its next one. step() with no gradient at
    all raises STRATA_ERR_STATE.

    Under torchrun: `shard_group_size=K` is HSDP (strata_config; dist.py
    makes the groups). `managed=True` is ZeRO-3 (strata_param_desc.managed,
    in effect with owner sharding over several ranks, as in C): from
    attach(model) on, each rank keeps only the weights it owns (the
    parameter a view of strata's buffer) and the module hooks materialize
    the others' around each layer's forward and backward (attach);
    materialized() for whole-model use; stats()["weight_bytes_peak"] the
    most weights held at once. A parameter used by two modules, a
    bfloat16/float16 one and one outside `model` stay resident.

    Errors raise StrataError (status name, C message) and change nothing.
    Threading: a per-optimizer lock is held around every C call.
    """

    _matrix: str = "shampoo"

    def __init__(self, params: Iterable[Any], *,
                 embedding_patterns: Iterable[str] = DEFAULT_EMBEDDING_PATTERNS,
                 head_patterns: Iterable[str] = DEFAULT_HEAD_PATTERNS,
                 model: Optional[torch.nn.Module] = None,
                 routes: Optional[dict[str, str]] = None,
                 distributed: Optional[bool] = None,
                 managed: bool = False,
                 **options: Any) -> None:
        self._rt: Optional[int] = None
        # ZeRO-3 (strata_param_desc.managed): asked for; in effect from attach()
        self._managed_req = bool(managed)
        self._managed: list[bool] = []     # per parameter, in effect in the runtime
        self._mine: list[bool] = []        # ... and owned by this rank (strata's buffer)
        self._mat_bytes = self._mat_peak = 0  # the binding's materialized copies
        self._held_peak = 0                # ... plus strata's weights, at most
        self._zlayers: set[int] = set()    # layers with managed parameters
        self._held: set[int] = set()       # ... whose copies are filled now
        self._seen: dict[int, set[int]] = {}  # ... and their gradients of this backward
        self._comm: Any = None
        self._lock = threading.Lock()
        self._owner: Optional[int] = None
        self._guard = _Guard(self)
        self._hyper_key: Optional[tuple[tuple[float, float], ...]] = None
        self._lib = L.lib()
        self._embedding_patterns = tuple(embedding_patterns)
        self._head_patterns = tuple(head_patterns)
        self._embedding_ids: set[int] = set()  # filled once the parameters are collected
        self._options = dict(options)
        self._routes = dict(routes or {})
        for pat, o in self._routes.items():
            if o not in L.OPTIMIZERS or o == "default":
                raise _err("STRATA_ERR_INVALID_ARG", f"routes[{pat!r}] = {o!r}: not one of "
                           "adamw, shampoo, muon, soap, kl-shampoo, normuon, dion2")
        self._cfg = self._make_config(dict(options))
        import torch.distributed as dist
        if distributed is None:
            distributed = dist.is_available() and dist.is_initialized() and \
                dist.get_world_size() > 1
        if distributed:
            # strata's owner sharding over the process group (strata/dist.py)
            from .dist import TorchComm
            self._comm = TorchComm()
            self._cfg.comm = self._comm.handle
        fam = getattr(self._cfg, _FAMILY_FIELD[self._matrix])
        defaults = {"lr": float(fam.lr), "weight_decay": float(fam.weight_decay),
                    "optimizer": None}
        groups = self._normalize(params)
        super().__init__(groups, defaults)
        if model is not None and _is_wrapper(model):
            raise _wrapper_refusal(f"model is a {type(model).__name__}")
        self._collect()
        # the weights of nn.Embedding modules are embeddings whatever their name:
        # model's, else any live module's (torch.optim.Muon's rule, embeddings to AdamW)
        # (the scan of live modules only for 2-D tensors nothing else routes yet)
        self._embedding_ids = _embedding_weights(
            self._params if model is not None else
            [p for p, n, req in zip(self._params, self._names, self._requested)
             if req is None and self._role(n)[0] == L.ROLES["auto"]], model)
        if dist.is_available() and dist.is_initialized():
            wrapped = _wrapped_params()
            for p, n in zip(self._params, self._names):
                if id(p) in wrapped:
                    raise _wrapper_refusal(f"{n} belongs to a DDP/FSDP-wrapped model")
        self._base = [(float(g["lr"]), float(g["weight_decay"])) for g in self.param_groups]
        # hook layers (attach(); all 0 without it) and the hooks' per-step record
        self._layers = [0] * len(self._params)
        self._managed = [False] * len(self._params)
        self._mine = [False] * len(self._params)
        self._hooks: list[Any] = []
        self._reduced: set[int] = set()   # layers whose strata_hook_backward ran this step
        self._ready: dict[int, set[int]] = {}  # layer -> its parameters whose grad is final
        self._no_sync = False
        self._stepped = False
        self._scale = 1.0
        self._zeros = torch.zeros(max(p.numel() for p in self._params), dtype=torch.float32)
        self._zeros_ptr = _ptr(self._zeros)
        # bfloat16/float16 parameters: strata steps a float32 master copy of the
        # weights (and reads a float32 copy of the gradient); the parameter gets
        # the master's rounding after each step
        self._master: list[Optional[torch.Tensor]] = [
            p.detach().float().contiguous() if p.dtype in _LOW else None for p in self._params]
        self._g32: list[Optional[torch.Tensor]] = [
            None if m is None else torch.zeros_like(m) for m in self._master]
        self._low = [i for i, m in enumerate(self._master) if m is not None]
        # the shapes strata's buffers were registered with (a parameter whose
        # .data is replaced by another shape would be read past its end)
        self._shapes = [p.shape for p in self._params]
        self._layer_ids = [0]
        self._master_warned = False
        self._rt = self._build(self._data_ptrs())
        self._bufs = [(d, _ptr(self._zeros)) for d in self._data_ptrs()]
        self._routing = self._read_routing(self._rt)
        self._sync_cache(self._rt)
        for r in self._routing:
            log.info("route %-32s %-14s -> %-10s (%s)", r["name"], "x".join(map(str, r["shape"]))
                     or "scalar", r["optimizer"], r["reason"])

    def _locked(self) -> "_Guard":
        """The per-optimizer lock around C calls. A call from inside one of
        them on the same thread (a logging handler run by strata's log sink
        during a step) is refused with STRATA_ERR_STATE: the runtime is
        driven by one thread at a time and is mid-call."""
        return self._guard

    # ---- configuration
    def _make_config(self, opts: dict[str, Any]) -> L.Config:
        cfg = L.default_config()
        cfg.matrix_optimizer = L.OPTIMIZERS[self._matrix]
        if "async" in opts:
            if "async_roots" in opts:
                raise TypeError("give async_roots or async, not both")
            opts["async_roots"] = opts.pop("async")
        fam_name = _FAMILY_FIELD[self._matrix]
        fam = getattr(cfg, fam_name)
        fam_fields = [f for f, _ in type(fam)._fields_]
        tail_fields = [f for f, _ in L.AdamWConfig._fields_]
        for key, value in opts.items():
            if key == "precondition_frequency":
                # one refresh period for every family (strata_config's own
                # field; the families' copies stay at their defaults). There
                # 0 means "each family's default"; a period given here is the
                # family's own F, which its check holds to >= 1 (0 would
                # silently be Shampoo's 1, SOAP's 10): refused
                if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                    raise _err("STRATA_ERR_INVALID_ARG",
                               f"{fam_name}.precondition_frequency = {value}: must be >= 1 "
                               "(omit it for the family's default period)")
                _set_field(cfg, key, value, "strata_config.")
            elif key in fam_fields:
                _set_field(fam, key, value, fam_name + ".")
            elif self._matrix != "adamw" and key.startswith("adamw_") and \
                    key[6:] in tail_fields:
                _set_field(cfg.adamw, key[6:], value, "adamw.")
            elif key == "async_roots":
                cfg.__setattr__("async", bool(value))
            elif key == "shard_gradients" and value:
                # The door registers torch's .grad tensors, which the backward
                # writes whole; strata's lent per-layer buffers are not wired
                # to autograd here (the C trainer's --shard-gradients is).
                raise _err("STRATA_ERR_UNSUPPORTED", "shard_gradients=True: sharded gradients "
                           "are not wired to PyTorch's autograd in this version (the C "
                           "trainer's --shard-gradients is); managed=True shards the weights")
            elif key in _RUNTIME_FIELDS and key != "async":
                _set_field(cfg, key, value, "strata_config.")
            else:
                valid = fam_fields + ([] if self._matrix == "adamw" else
                                      ["adamw_" + f for f in tail_fields]) + \
                    ["async_roots"] + [f for f in _RUNTIME_FIELDS if f != "async"]
                valid = list(dict.fromkeys(valid))  # a family field may also be a runtime one
                raise TypeError(f"{type(self).__name__}: unknown keyword {key!r}; "
                                f"valid: {', '.join(valid)}")
        if cfg.page_state and not (getattr(cfg, "async") and cfg.nvme_dir):
            # said in the door's keywords, before strata_create says it in C names
            raise _err("STRATA_ERR_INVALID_ARG", "page_state=True needs async_roots=True and "
                       "nvme_dir=DIR (the nvme tier's folder; the binding has no default)")
        if cfg.backend != L.ENUMS["backend"]["cpu"]:
            raise _err("STRATA_ERR_UNSUPPORTED", "backend='cuda': " + _cuda_refusal())
        self._log_cb = L.LOG_FN(self._on_log)
        cfg.log_fn = self._log_cb
        return cfg

    @staticmethod
    def _on_log(user: Any, level: int, subsystem: bytes, msg: bytes) -> None:
        sub = subsystem.decode(errors="replace") if subsystem else "strata"
        logging.getLogger("strata." + sub).log(_LEVELS.get(level, logging.INFO), "%s",
                                               msg.decode(errors="replace") if msg else "")

    def _normalize(self, params: Iterable[Any]) -> list[dict[str, Any]]:
        if isinstance(params, torch.Tensor):
            raise TypeError("params: an iterable of tensors or dicts, not a tensor")
        items = list(params)
        if not items:
            raise _err("STRATA_ERR_INVALID_ARG", "optimizer got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        out = []
        pos = 0
        for g in groups:
            if not isinstance(g, dict):
                raise TypeError("params: mix of dicts and tensors")
            g = dict(g)
            ps = g["params"]
            ps = [ps] if isinstance(ps, torch.Tensor) else list(ps)
            tensors, names = [], []
            for p in ps:
                if isinstance(p, tuple):
                    names.append(str(p[0]))
                    tensors.append(p[1])
                else:
                    names.append(f"param.{pos}")
                    tensors.append(p)
                pos += 1
            g["params"] = tensors
            g["param_names"] = names
            opt = g.get("optimizer")
            if opt is not None:
                if opt not in L.OPTIMIZERS or opt == "default":
                    raise _err("STRATA_ERR_INVALID_ARG", f"param group optimizer {opt!r}: not "
                               "one of adamw, shampoo, muon, soap, kl-shampoo, normuon, dion2")
                if opt != self._matrix:
                    ofam = getattr(self._cfg, _FAMILY_FIELD[opt])
                    g.setdefault("lr", float(ofam.lr))
                    g.setdefault("weight_decay", float(ofam.weight_decay))
            out.append(g)
        return out

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_rt", None) is not None:
            raise _err("STRATA_ERR_STATE", "add_param_group after construction: the runtime "
                       "is committed (strata_param_add refuses parameters after "
                       "strata_commit); create a new optimizer over all parameters")
        super().add_param_group(param_group)

    def _collect(self) -> None:
        self._params: list[torch.Tensor] = []
        self._names: list[str] = []
        self._requested: list[Optional[str]] = []
        self._why: list[str] = []
        seen: set[int] = set()
        device = None
        for g in self.param_groups:
            for p, n in zip(g["params"], g["param_names"]):
                _check_tensor(p, n, "the parameter", low_ok=True)
                if p.dim() > L.MAX_DIMS:
                    raise _err("STRATA_ERR_INVALID_ARG",
                               f"{n}: {p.dim()} dimensions, at most {L.MAX_DIMS}")
                if device is not None and p.device != device:
                    raise _err("STRATA_ERR_INVALID_ARG",
                               f"{n}: on {p.device}, the others on {device}")
                device = p.device
                if id(p) in seen:
                    raise _err("STRATA_ERR_INVALID_ARG", f"{n}: given twice")
                seen.add(id(p))
                if n in self._names:
                    raise _err("STRATA_ERR_INVALID_ARG", f"duplicate parameter name {n!r}")
                self._params.append(p)
                self._names.append(n)
                req, why = g.get("optimizer"), f"param group optimizer {g.get('optimizer')!r}"
                if req is None:
                    for pat, o in self._routes.items():
                        if fnmatch.fnmatchcase(n, pat):
                            req, why = o, f"routes: name matches {pat!r}"
                            break
                self._requested.append(req)
                self._why.append(why)

    def _role(self, name: str, p: Optional[torch.Tensor] = None) -> tuple[int, str]:
        if p is not None and id(p) in self._embedding_ids:
            return L.ROLES["embedding"], "embedding: an nn.Embedding's weight"
        comps = name.split(".")
        for kind, pats in (("embedding", self._embedding_patterns),
                           ("head", self._head_patterns)):
            for pat in pats:
                if any(fnmatch.fnmatchcase(c, pat) for c in comps):
                    return L.ROLES[kind], f"{kind}: name matches {pat!r}"
        return L.ROLES["auto"], ""

    # ---- the runtime
    def _build(self, data_ptrs: list[int]) -> int:
        """strata_create, strata_param_add for every parameter (weights at
        data_ptrs, gradients at the shared zero buffer), strata_commit."""
        lib = self._lib
        rt = c_void_p()
        L.check(lib.strata_create(byref(self._cfg), byref(rt)), "strata_create")
        try:
            for i, p in enumerate(self._params):
                d = L.ParamDesc()
                d.name = self._names[i].encode()
                d.ndim = p.dim()
                for k, s in enumerate(p.shape):
                    d.shape[k] = s
                d.layer = self._layers[i]
                d.role = self._role(self._names[i], p)[0]
                req = self._requested[i]
                d.optimizer = L.OPTIMIZERS[req] if req else -1
                d.memory = 0
                d.managed = self._managed[i]
                d.data = ctypes.cast(data_ptrs[i], ctypes.POINTER(ctypes.c_float))
                d.grad = ctypes.cast(_ptr(self._zeros), ctypes.POINTER(ctypes.c_float))
                pid = c_int32()
                L.check(lib.strata_param_add(rt, byref(d), byref(pid)),
                        f"strata_param_add({self._names[i]})")
            L.check(lib.strata_commit(rt), "strata_commit")
        except BaseException:
            lib.strata_destroy(rt)
            raise
        return rt.value

    def _read_routing(self, rt: int) -> list[dict[str, Any]]:
        out = []
        for i, p in enumerate(self._params):
            o = c_int()
            L.check(self._lib.strata_param_optimizer(rt, i, byref(o)), "strata_param_optimizer")
            lay = L.ParamLayout()
            L.check(self._lib.strata_param_layout_get(rt, i, byref(lay)), "param_layout_get")
            shape = tuple(p.shape)
            rows = shape[0] if shape else 1
            cols = p.numel() // rows
            role, why = self._role(self._names[i], p)
            if self._requested[i]:
                reason = self._why[i]
            elif why:
                reason = why
            elif p.dim() <= 1:
                reason = f"{p.dim()}-D tensor"
            elif self._cfg.route_degenerate_to_adamw and (rows == 1 or cols == 1):
                reason = f"{rows}x{cols} matrix (route_degenerate_to_adamw)"
            elif p.dim() > 2:
                reason = f"{p.dim()}-D tensor as a {rows}x{cols} matrix"
            else:
                reason = "2-D matrix"
            out.append({"name": self._names[i], "shape": shape,
                        "optimizer": L.OPTIMIZER_NAMES[o.value], "tail": bool(lay.tail),
                        "reason": reason})
        return out

    def stats(self) -> dict[str, Any]:
        """strata_stats_get's counters as a dict (field names and units of
        strata_stats, include/strata/strata.h: "step", "root_refreshes",
        "device_bytes", "last_step_seconds", ...)."""
        out = L.Stats()
        with self._locked():
            L.check(self._lib.strata_stats_get(self._rt, byref(out)), "strata_stats_get")
        d = {f: getattr(out, f) for f, _ in L.Stats._fields_}
        # ZeRO-3: the binding's copies of materialized layers (the parameters'
        # own storage, beside strata's param_bytes), now and at most; and the
        # most weights this rank held at once: strata's (owned, the layer
        # buffer being copied) plus the copies. Resident: param_bytes_peak
        d["managed_copy_bytes"], d["managed_copy_bytes_peak"] = self._mat_bytes, self._mat_peak
        d["weight_bytes_peak"] = max(self._held_peak, out.param_bytes_peak) \
            if any(self._managed) else out.param_bytes_peak
        return d

    def memory_ledger(self) -> dict[str, Any]:
        """strata_memory_ledger_get: this rank's bytes by tier and kind, as
        {"total_bytes", "total_peak", tier: {"bytes", "peak", kind: {"bytes",
        "peak"}}} with empty tiers and kinds left out (tiers and kinds of
        strata/types.h: "device", "host", ...; "factors", "roots", ...)."""
        out = L.MemoryLedger()
        with self._locked():
            L.check(self._lib.strata_memory_ledger_get(self._rt, byref(out)),
                    "strata_memory_ledger_get")
        d: dict[str, Any] = {"total_bytes": out.total_bytes, "total_peak": out.total_peak}
        for t, tn in enumerate(L.LEDGER_TIERS):
            if not out.tier_peak[t]:
                continue
            d[tn] = {"bytes": out.tier_bytes[t], "peak": out.tier_peak[t]}
            for k, kn in enumerate(L.LEDGER_KINDS):
                if out.peak[t][k]:
                    d[tn][kn] = {"bytes": out.bytes[t][k], "peak": out.peak[t][k]}
        return d

    def routing(self) -> list[dict[str, Any]]:
        """Which parameter went to which optimizer and why: one dict per
        parameter in registration order, with "name", "shape", "optimizer"
        (strata_param_optimizer), "tail" (routed to AdamW by the rule) and
        "reason"."""
        return [dict(r) for r in self._routing]

    def __del__(self) -> None:
        rt = getattr(self, "_rt", None)
        if rt is not None:
            # ZeRO-3: an owner's parameters are views of strata's buffers: their
            # own copy first (the other ranks' stay empty placeholders)
            for i, mine in enumerate(getattr(self, "_mine", [])):
                if mine:
                    try:
                        self._params[i].data = self._params[i].data.clone()
                    except Exception:
                        pass
            self._rt = None
            try:
                self._lib.strata_destroy(rt)
            except Exception:
                pass
        comm = getattr(self, "_comm", None)
        if comm is not None:  # after the runtime that used it
            self._comm = None
            comm.close()

    # ---- the step
    def _sync_cache(self, rt: int) -> None:
        """What the runtime holds now: every parameter's (lr, weight_decay)
        (strata_param_get_hyper, float32 values), all active."""
        self._hyper = []
        for i in range(len(self._params)):
            lr, wd = ctypes.c_float(), ctypes.c_float()
            L.check(self._lib.strata_param_get_hyper(rt, i, byref(lr), byref(wd)),
                    "strata_param_get_hyper")
            self._hyper.append((lr.value, wd.value))
        self._active = [True] * len(self._params)
        self._hyper_key = None

    def _configured(self, family: str) -> tuple[float, float]:
        fam = getattr(self._cfg, _FAMILY_FIELD[family])
        return float(fam.lr), float(fam.weight_decay)

    def optimizer_info(self) -> dict[str, Any]:
        """strata_optimizer_info_get for the matrix optimizer under this
        optimizer's configuration: has_refresh, async_capable, staggers,
        precondition_frequency, max_staleness, refresh_noun, first_refresh
        (step), state_per_param, ema_horizon (steps: 1/(1 - beta) of its
        slowest second-moment EMA, 0 when none; the AdamW tail's is
        adamw_ema_horizon, from adamw.beta2), as the C trainer's default
        warm-up reads them."""
        info = L.OptimizerInfo()
        L.check(self._lib.strata_optimizer_info_get(byref(self._cfg), L.OPTIMIZERS[self._matrix],
                                                    byref(info)), "strata_optimizer_info_get")
        d = {k: getattr(info, k) for k, _ in L.OptimizerInfo._fields_}
        d["refresh_noun"] = (info.refresh_noun or b"").decode()
        b2 = float(self._cfg.adamw.beta2)
        d["adamw_ema_horizon"] = float(round(1.0 / (1.0 - b2))) if 0.0 < b2 < 1.0 else 0.0
        return d

    def hyperparameters(self) -> list[tuple[float, float]]:
        """Every parameter's (lr, weight_decay) as the next step will use
        them, in registration order (float32 values, as strata holds them:
        the groups' values mapped by the rule of the class docstring)."""
        return [(ctypes.c_float(a).value, ctypes.c_float(b).value) for a, b in self._wanted()]

    def _wanted(self) -> list[tuple[float, float]]:
        """Each parameter's (lr, weight_decay) from its group, checked."""
        out = []
        pos = 0
        for i, g in enumerate(self.param_groups):
            lr, wd = float(g["lr"]), float(g["weight_decay"])
            for key, v in (("lr", lr), ("weight_decay", wd)):
                if not (v >= 0.0) or v == float("inf"):
                    raise _err("STRATA_ERR_INVALID_ARG", f"param group {i}: {key} = {v}")
            gfam = g.get("optimizer") or self._matrix
            lr0 = self._base[i][0]
            for _ in g["params"]:
                routed = self._routing[pos]["optimizer"]
                if routed == gfam:
                    out.append((lr, wd))
                else:
                    # routed elsewhere (the tail by the rule, routes=): its own
                    # optimizer's lr times the group's schedule, its own decay
                    clr, cwd = self._configured(routed)
                    if lr0 == 0.0 and lr != 0.0:
                        raise _err("STRATA_ERR_UNSUPPORTED",
                                   f"param group {i}: lr {lr} from 0 at construction: "
                                   f"{self._names[pos]} (routed to {routed}) follows the "
                                   "group's lr as a ratio, and a ratio from 0 is undefined")
                    out.append((clr * (lr / lr0 if lr0 != 0.0 else 1.0), cwd))
                pos += 1
        return out

    def _gather(self) -> tuple[list[tuple[int, int]], list[bool]]:
        """Every parameter's (data, grad) pointers for this step, checked
        first, and whether it has a gradient (is active). The common case of
        _check_tensor's contract (a plain, dense, contiguous, non-empty
        float32 CPU tensor; a gradient of the parameter's shape) is tested
        inline; anything else goes through _check_tensor / _check_grad,
        which accept it or name what is wrong."""
        bufs = []
        active = []
        any_grad = False
        f32, strided, plain = _F32, _STRIDED, _PLAIN
        master, managed, g32s, zeros = self._master, self._managed, self._g32, self._zeros_ptr
        shapes = self._shapes
        for i, p in enumerate(self._params):
            m = master[i]
            if m is not None or not (type(p) in plain and p.dtype is f32 and p.layout is strided
                                     and p.is_cpu and p.is_contiguous() and
                                     p.shape == shapes[i]):
                _check_tensor(p, self._names[i], "the parameter", low_ok=m is not None)
                if p.shape != shapes[i]:
                    raise _err("STRATA_ERR_INVALID_ARG",
                               f"{self._names[i]}: the parameter has shape {tuple(p.shape)}, "
                               f"registered with {tuple(shapes[i])} (strata's state is sized "
                               "at construction: a new shape needs a new optimizer)")
            # a managed parameter's weights are strata's (its registered pointer stays)
            d = self._bufs[i][0] if managed[i] else (p if m is None else m).data_ptr()
            g = p.grad
            if g is None:  # skipped this step (strata_param_set_active); the zeros buffer
                # stands in for the gradient torch may have freed (several ranks still
                # reduce it at strata_hook_backward; nothing reads the result)
                bufs.append((d, zeros))
                active.append(False)
                continue
            active.append(True)
            any_grad = True
            if m is None and type(g) in plain and g.dtype is f32 and g.layout is strided and \
                    g.is_cpu and g.is_contiguous() and g.shape == p.shape:
                bufs.append((d, g.data_ptr()))  # (non-empty: the parameter's shape)
                continue
            self._check_grad(i, g)
            if g32s[i] is not None and self._comm is not None and \
                    self._layers[i] in self._reduced:
                # attach()'s hook copied and reduced it already (the owner holds the mean)
                bufs.append((d, _ptr(g32s[i])))
            else:
                bufs.append((d, self._grad_ptr(i, g)))
        if not any_grad:
            raise _err("STRATA_ERR_STATE", "step() before any backward: no parameter has a "
                       "gradient (nothing changed)")
        return bufs, active

    def _data(self, i: int) -> torch.Tensor:
        """What strata steps for parameter i: the parameter, or its float32 master."""
        m = self._master[i]
        return self._params[i] if m is None else m

    def _data_ptrs(self) -> list[int]:
        return [_ptr(self._data(i)) for i in range(len(self._params))]

    def _check_grad(self, i: int, g: torch.Tensor) -> None:
        n, p = self._names[i], self._params[i]
        if g.is_sparse or g.layout != torch.strided:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{n}: sparse gradient ({g.layout}); strata reads dense gradients")
        _check_tensor(g, n, "its gradient", p.shape, low_ok=self._master[i] is not None)

    def _grad_ptr(self, i: int, g: torch.Tensor) -> int:
        """The gradient strata reads: g itself, or (a low-precision parameter)
        its float32 copy, refreshed from g now."""
        g32 = self._g32[i]
        if g32 is None:
            return _ptr(g)
        g32.copy_(g)
        return _ptr(g32)

    def _masters_current(self) -> None:
        """A low-precision parameter written outside the optimizer (the
        model's load_state_dict, an init): its master follows (warned once)."""
        for i in self._low:
            m = self._master[i]
            if not torch.equal(self._params[i], m.to(self._params[i].dtype)):
                if not self._master_warned:
                    log.warning("%s changed outside the optimizer: its float32 master copy "
                                "is taken from it again (the bits below its %s are lost)",
                                self._names[i], self._params[i].dtype)
                    self._master_warned = True
                m.copy_(self._params[i])

    @torch.no_grad()
    def _write_back(self) -> None:
        for i in self._low:
            self._params[i].copy_(self._master[i])

    def _repoint(self, rt: int, bufs: list[tuple[int, int]]) -> None:
        """strata_param_set_buffers where a pointer changed (pointers as
        ints: argtypes c_void_p; the message is built only on an error)."""
        if bufs == self._bufs:
            return
        set_buffers = self._lib.strata_param_set_buffers
        for i, (d, g) in enumerate(bufs):
            od, og = self._bufs[i]
            if d != od or g != og:
                st = set_buffers(rt, i, d if d != od else None, g if g != og else None)
                if st:
                    L.check(st, f"strata_param_set_buffers({self._names[i]})")
                self._bufs[i] = (d, g)

    def _group_key(self) -> Optional[tuple[tuple[float, float], ...]]:
        """The groups' (lr, weight_decay), to tell whether _wanted() could
        give anything else than at the last step (None: not plain floats)."""
        try:
            return tuple((float(g["lr"]), float(g["weight_decay"])) for g in self.param_groups)
        except (TypeError, ValueError, RuntimeError, KeyError):
            return None

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """One strata_step over every parameter, reading the gradients in
        place; `closure` (re-evaluates the model, returns the loss) runs
        first, with gradients enabled. Errors: StrataError (nothing changed:
        a bad gradient, a non-finite one, STRATA_ERR_NONFINITE, ...)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with self._locked():
            rt = self._rt
            if rt is None:
                raise _err("STRATA_ERR_STATE", "the optimizer's runtime is gone")
            err: Optional[StrataError] = None
            try:
                if self._zero3() and not self._hooks:
                    raise _err("STRATA_ERR_STATE", "managed=True (ZeRO-3) needs attach(model) "
                               "before the first step: its module hooks materialize each "
                               "layer's weights before its forward and backward and release "
                               "them after (nothing changed)")
                # the groups' lr and weight decay as at the last step: nothing to set
                key = self._group_key()
                wanted = None if key is not None and key == self._hyper_key else self._wanted()
                if self._low:
                    self._masters_current()
                bufs, active = self._gather()
            except StrataError as e:
                err = e
            if self._comm is not None:  # a refusal on one rank is a refusal on all
                self._comm.agree(err)
            elif err is not None:
                raise err
            self._repoint(rt, bufs)
            lib = self._lib
            if self._scale != 1.0:  # the groups' lrs are absolute (strata_param_set_hyper)
                L.check(lib.strata_set_lr_scale(rt, ctypes.c_float(1.0)),
                        "strata_set_lr_scale")
                self._scale = 1.0
            if wanted is not None:
                for i, (lr, wd) in enumerate(wanted):
                    key_i = (ctypes.c_float(lr).value, ctypes.c_float(wd).value)
                    if key_i != self._hyper[i]:
                        L.check(lib.strata_param_set_hyper(rt, i, ctypes.c_float(lr),
                                                           ctypes.c_float(wd)),
                                f"strata_param_set_hyper({self._names[i]})")
                        self._hyper[i] = key_i
                self._hyper_key = key
            if active != self._active:
                for i, a in enumerate(active):
                    if a != self._active[i]:
                        L.check(lib.strata_param_set_active(rt, i, a),
                                f"strata_param_set_active({self._names[i]})")
                        self._active[i] = a
            # the layers attach()'s gradient hooks did not reduce (all of them
            # without attach: layer 0), in the same order on every rank
            for layer in self._layer_ids:
                if layer not in self._reduced:
                    st = lib.strata_hook_backward(rt, layer)
                    if st:
                        L.check(st, f"strata_hook_backward({layer})")
            self._reduced.clear()
            self._ready.clear()
            L.check(lib.strata_step(rt), "strata_step")
            self._stepped = True
            if self._held:
                for layer in list(self._held):  # ZeRO-3: nothing stays filled past a step
                    self._empty(layer)
            self._seen.clear()
            if self._comm is not None:  # the owners' new weights to every rank
                L.check(lib.strata_sync_weights(rt), "strata_sync_weights")
            if self._low:
                self._write_back()
        return loss

    # ---- module hooks
    def attach(self, model: torch.nn.Module) -> "StrataOptimizer":
        """Register module hooks on `model` (the module whose parameters this
        optimizer steps), as strata's C training loop calls its hooks:

        - every module that directly holds some of the parameters becomes one
          strata layer (ids 0, 1, ... in `model.modules()` order; a parameter
          shared by two modules, a tied embedding, belongs to the first;
          parameters outside `model` form one more layer);
        - a forward pre-hook on each such module calls
          strata_hook_forward(layer): the layer is about to run (the roots it
          will use are prefetched from the nvme tier);
        - a post-accumulate-grad hook on each parameter: once every parameter
          of a layer has its final gradient of this backward, the layer's
          gradients go to strata (strata_param_set_buffers) and
          strata_hook_backward(layer) runs: under torchrun it reduces them to
          their owners while the backward of the layers below goes on (one
          blocking reduce per tensor over the process group: strata's
          bucketed non-blocking reduce needs a transport with non-blocking
          slots, MPI, which TorchComm is not). In one process nothing reads
          a gradient before the step, so the hook only counts the layer's
          gradients and runs strata_hook_backward(layer); step() checks and
          re-points them, as without attach.

        With managed=True (ZeRO-3, several ranks): the managed parameters
        this rank does not own keep their shape over storage of 0 bytes; the
        forward pre-hook materializes the layer (strata_hook_forward, the
        owners broadcast) and copies it into the parameters' storage, sized
        again (a copy, not a view of strata's buffer: autograd keeps views
        of a weight for the backward, which must see the same storage, as
        FSDP's resize-in-place gives), then strata's buffer is released; a
        forward hook empties the storage again; a full-backward pre-hook
        materializes it for the layer's backward
        (strata_layer_materialize), emptied once its gradients are in. The
        hooks run in the same order on every rank (the same model).

        step() then runs strata_hook_backward only for the layers whose
        gradients did not all arrive (a parameter without a gradient). The
        results are bit-identical to the same training without attach.
        Under torchrun the owners' gradients are the mean after the backward
        (they are reduced in place), not after step(): clip with
        max_grad_norm rather than torch.nn.utils.clip_grad_norm_, and wrap
        all but the last micro-batch's backward of a gradient accumulation in
        `with opt.no_sync():` (a second reduce of a layer in one step is
        refused, STRATA_ERR_STATE). Call before the first step and before
        load()/load_state_dict() (the layers are set at strata_commit: the
        runtime is rebuilt); once.
        Returns self. Errors: StrataError (STRATA_ERR_STATE: after a step, or
        attached already; STRATA_ERR_UNSUPPORTED: a DDP/FSDP wrapper;
        STRATA_ERR_INVALID_ARG: no parameter of this optimizer in `model`)."""
        if _is_wrapper(model):
            raise _wrapper_refusal(f"attach({type(model).__name__})")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"attach: a torch.nn.Module, not {type(model).__name__}")
        index = {id(p): i for i, p in enumerate(self._params)}
        layers = [-1] * len(self._params)
        modules: list[tuple[torch.nn.Module, int]] = []
        for m in model.modules():
            mine = [index[id(p)] for p in m.parameters(recurse=False)
                    if id(p) in index and layers[index[id(p)]] < 0]
            if not mine:
                continue
            for i in mine:
                layers[i] = len(modules)
            modules.append((m, len(modules)))
        if not modules:
            raise _err("STRATA_ERR_INVALID_ARG", "attach: the model holds none of this "
                       "optimizer's parameters")
        extra = len(modules)
        layers = [extra if x < 0 else x for x in layers]
        # ZeRO-3: the parameters strata manages (managed=True under torchrun,
        # owner sharding): those of the model's modules, each used by one
        # module (a tied weight read by two layers stays resident), float32
        uses: dict[int, int] = {}
        for m in model.modules():
            for p in m.parameters(recurse=False):
                uses[id(p)] = uses.get(id(p), 0) + 1
        zero3 = self._zero3()
        managed = [zero3 and layers[i] != extra and uses.get(id(p), 0) == 1 and
                   self._master[i] is None for i, p in enumerate(self._params)]
        with self._locked():
            if self._hooks:
                raise _err("STRATA_ERR_STATE", "attach: attached already")
            if self._stepped:
                raise _err("STRATA_ERR_STATE", "attach after a step or a load: strata's layers "
                           "are set when its runtime is committed (attach rebuilds it, which "
                           "would drop its state); attach before the first step and before "
                           "load/load_state_dict")
            old_layers, self._layers = self._layers, layers
            self._layer_ids = sorted(set(layers))
            self._managed = managed
            try:  # a fresh runtime with the layers (collective under torchrun)
                rt = self._build(self._data_ptrs())
            except BaseException:
                self._layers = old_layers
                self._layer_ids = sorted(set(old_layers))
                self._managed = [False] * len(self._params)
                raise
            old, self._rt = self._rt, rt
            self._bufs = [(d, _ptr(self._zeros)) for d in self._data_ptrs()]
            if any(managed):
                self._adopt(rt)
            self._sync_cache(rt)
            self._scale = float("nan")
            if old is not None:
                self._lib.strata_destroy(old)
        # a layer is handed over when its parameters that take gradients all have one
        self._layer_size = {}
        zlayers = self._zlayers = {layers[i] for i in range(len(self._params)) if managed[i]}
        for m, layer in modules:
            self._hooks.append(m.register_forward_pre_hook(
                lambda mod, args, layer=layer: self._on_forward(layer)))
            if layer in zlayers:  # ZeRO-3: released after its forward, again for its backward
                self._hooks.append(m.register_forward_hook(
                    lambda mod, args, out, layer=layer: self._empty(layer)))
                self._hooks.append(m.register_full_backward_pre_hook(
                    lambda mod, gout, layer=layer: self._on_backward(layer)))
        for i, p in enumerate(self._params):
            if layers[i] != extra and p.requires_grad:
                self._layer_size[layers[i]] = self._layer_size.get(layers[i], 0) + 1
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda t, i=i: self._on_grad(i)))
        log.info("attach: %d layers over %s (%d parameters outside it)%s", len(modules),
                 type(model).__name__, sum(1 for x in layers if x == extra),
                 f"; ZeRO-3: {sum(managed)} parameters managed" if any(managed) else "")
        if self._managed_req and zero3 and not any(managed):
            log.warning("managed=True: no parameter could be managed (tied, low precision "
                        "or outside the model): every weight stays resident")
        return self

    # ---- ZeRO-3 (managed weights)
    def _zero3(self) -> bool:
        """managed=True in effect (as strata_param_desc.managed: owner
        sharding over several ranks; otherwise ignored, as in C)."""
        return self._managed_req and self._comm is not None and self._comm.size > 1 and \
            self._cfg.sharding == L.ENUMS["sharding"]["owner"]

    def _adopt(self, rt: int) -> None:
        """After a commit with managed parameters: strata holds their
        weights. The owner's parameter becomes a view of strata's buffer
        (strata_param_data: valid until strata_destroy, updated in place by
        strata_step); elsewhere the parameter keeps its shape over storage
        of 0 bytes (the placeholder), filled by the module hooks."""
        self._mine = [False] * len(self._params)
        for i, p in enumerate(self._params):
            if not self._managed[i]:
                continue
            w = ctypes.POINTER(ctypes.c_float)()
            st = self._lib.strata_param_data(rt, i, byref(w))
            with torch.no_grad():
                if st == 0:  # owned: strata's buffer
                    self._mine[i] = True
                    p.data = self._view(ctypes.addressof(w.contents), p)
                else:  # STRATA_ERR_STATE: not held here until its layer is materialized
                    self._lib.strata_error_clear()
                    t = torch.empty(p.shape, dtype=torch.float32)
                    t.untyped_storage().resize_(0)
                    p.data = t

    @staticmethod
    def _view(addr: int, p: torch.Tensor) -> torch.Tensor:
        n = p.numel()
        arr = (ctypes.c_float * n).from_address(addr)
        return torch.frombuffer(arr, dtype=torch.float32, count=n).view(p.shape)

    def _zero3_layer(self, layer: int) -> list[int]:
        return [i for i in range(len(self._params))
                if self._managed[i] and not self._mine[i] and self._layers[i] == layer]

    @torch.no_grad()
    def _fill(self, layer: int) -> None:
        """strata materialized `layer` (its managed weights from their owners
        into strata's layer buffer): copy them into the parameters' own
        storage (sized again), then release strata's buffer. The copy rather
        than a view: autograd saves views of a weight (a Linear's weight.t())
        that must see the same storage at backward, which FSDP's
        resize-in-place keeps (and strata frees its buffer at release)."""
        for i in self._zero3_layer(layer):
            p = self._params[i]
            w = ctypes.POINTER(ctypes.c_float)()
            L.check(self._lib.strata_param_data(self._rt, i, byref(w)),
                    f"strata_param_data({self._names[i]})")
            nbytes = p.numel() * 4
            st = p.untyped_storage()
            if st.nbytes() != nbytes:
                st.resize_(nbytes)
                self._mat_bytes += nbytes
                self._charge(nbytes)
            p.data.copy_(self._view(ctypes.addressof(w.contents), p))
        self._mat_peak = max(self._mat_peak, self._mat_bytes)
        # the most this rank holds: strata's weights now (its owned ones and
        # the layer buffer, before its release) plus the copies
        stats = L.Stats()
        L.check(self._lib.strata_stats_get(self._rt, byref(stats)), "strata_stats_get")
        self._held_peak = max(self._held_peak, stats.param_bytes + self._mat_bytes)
        self._held.add(layer)
        L.check(self._lib.strata_layer_release(self._rt, layer),
                f"strata_layer_release({layer})")

    def _charge(self, delta: int) -> None:
        """The copies in strata's memory ledger (host tier, weights), so that
        memory_ledger() covers what this rank holds."""
        L.check(self._lib.strata_memory_ledger_charge(
            self._rt, L.LEDGER_TIERS.index("host"), L.LEDGER_KINDS.index("weights"), delta),
            "strata_memory_ledger_charge")

    def _empty(self, layer: int) -> None:
        """The layer's managed weights that this rank does not own back to
        the placeholder (storage of 0 bytes; the shape stays)."""
        if layer not in self._held:
            return
        for i in self._zero3_layer(layer):
            st = self._params[i].untyped_storage()
            if st.nbytes():
                self._mat_bytes -= st.nbytes()
                self._charge(-st.nbytes())
                st.resize_(0)
        self._held.discard(layer)

    @contextlib.contextmanager
    def materialized(self) -> Any:
        """ZeRO-3 (managed=True, attached): within it every parameter holds
        its current weights on this rank (each managed layer materialized,
        strata_layer_materialize, in layer order: collective, every rank
        enters it at the same point), for evaluation outside the hooks,
        model.state_dict() or a check; on exit the ones this rank does not
        own are placeholders again. Costs the whole model's weights while
        inside. Without managed weights in effect it does nothing."""
        try:
            with self._locked():
                for layer in sorted(self._zlayers):
                    L.check(self._lib.strata_layer_materialize(self._rt, layer),
                            f"strata_layer_materialize({layer})")
                    self._fill(layer)
        except BaseException as e:
            self._fail_ranks(e)
            raise
        try:
            yield self
        finally:
            for layer in list(self._held):
                self._empty(layer)

    def _on_backward(self, layer: int) -> None:
        """ZeRO-3: before the layer's backward, its weights again
        (strata_layer_materialize: collective within the shard group)."""
        with self._locked():
            try:
                L.check(self._lib.strata_layer_materialize(self._rt, layer),
                        f"strata_layer_materialize({layer})")
                self._fill(layer)
            except BaseException as e:
                self._fail_ranks(e)
                raise

    def detach(self) -> None:
        """Remove attach()'s hooks (the layers stay; step() runs every
        layer's strata_hook_backward again). Refused under ZeRO-3
        (STRATA_ERR_STATE): its weights live in the hooks."""
        if any(self._managed):
            raise _err("STRATA_ERR_STATE", "detach with managed=True (ZeRO-3) weights: the "
                       "module hooks materialize them; without them the parameters this "
                       "rank does not own are empty")
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's zero_grad; also forgets which layers attach()'s hooks
        handed over since the last step (their gradients are discarded)."""
        super().zero_grad(set_to_none=set_to_none)
        self._reduced.clear()
        self._ready.clear()
        self._seen.clear()

    @contextlib.contextmanager
    def no_sync(self) -> Any:
        """Within it, attach()'s gradient hooks do nothing: the backward of a
        micro-batch that is not the last of a gradient accumulation (as
        DistributedDataParallel.no_sync). The last micro-batch's backward,
        outside it, hands the accumulated gradients to strata."""
        prev, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = prev

    def _fail_ranks(self, e: BaseException) -> None:
        """An error on this rank while the others may be inside a collective
        of the same hook: abort the group so that they fail too."""
        if self._comm is not None:
            self._comm.abort(f"rank {self._comm.rank}: {e}")

    def _on_forward(self, layer: int) -> None:
        with self._guard:
            try:
                st = self._lib.strata_hook_forward(self._rt, layer)
                if st:
                    L.check(st, f"strata_hook_forward({layer})")
                if layer in self._zlayers:
                    self._fill(layer)
            except BaseException as e:
                self._fail_ranks(e)
                raise

    def _on_grad(self, i: int) -> None:
        layer = self._layers[i]
        if self._comm is not None or layer in self._zlayers:
            self._on_grad_ranks(i)
            return
        # One process: nothing reads a gradient before step(), which checks
        # and re-points every one (_gather, as without attach); the hook
        # records that the layer's gradients are final (strata_hook_backward
        # once all have arrived: the same calls, in the same order).
        if self._no_sync or layer in self._reduced or self._params[i].grad is None:
            return
        ready = self._ready.get(layer)
        if ready is None:
            ready = self._ready[layer] = set()
        ready.add(i)
        if len(ready) == self._layer_size[layer]:
            with self._guard:
                st = self._lib.strata_hook_backward(self._rt, layer)
                if st:
                    L.check(st, f"strata_hook_backward({layer})")
            self._reduced.add(layer)
            del self._ready[layer]

    @torch.no_grad()
    def _on_grad_ranks(self, i: int) -> None:
        """_on_grad under torchrun or for a ZeRO-3 layer: the gradient goes to
        strata now (its layer's reduce starts once all have arrived)."""
        layer = self._layers[i]
        if layer in self._zlayers:  # ZeRO-3: the layer's backward is done once all arrived
            seen = self._seen.setdefault(layer, set())
            seen.add(i)
            if len(seen) == self._layer_size[layer]:
                del self._seen[layer]
                self._empty(layer)
        if self._no_sync:
            return
        with self._locked():
            try:
                if layer in self._reduced:
                    if self._comm is None:
                        return  # one rank: the hook reduces nothing; step() reads .grad
                    raise _err("STRATA_ERR_STATE",
                               f"{self._names[i]}: a second backward before step() under "
                               "torchrun (its layer's gradients were reduced already): "
                               "wrap all but the last micro-batch's backward of a gradient "
                               "accumulation in `with opt.no_sync():`")
                p, n = self._params[i], self._names[i]
                g = p.grad
                if g is None:
                    return
                self._check_grad(i, g)
                gp = self._grad_ptr(i, g)
                od, og = self._bufs[i]
                if gp != og:
                    L.check(self._lib.strata_param_set_buffers(self._rt, i, None,
                                                               c_void_p(gp)),
                            f"strata_param_set_buffers({n})")
                    self._bufs[i] = (od, gp)
                ready = self._ready.setdefault(layer, set())
                ready.add(i)
                if len(ready) == self._layer_size[layer]:
                    L.check(self._lib.strata_hook_backward(self._rt, layer),
                            f"strata_hook_backward({layer})")
                    self._reduced.add(layer)
                    del self._ready[layer]
            except BaseException as e:
                self._fail_ranks(e)
                raise

    # ---- checkpoints
    def _meta(self) -> dict[str, Any]:
        return {"optimizer": self._matrix, "class": type(self).__name__,
                "params": [[n, list(p.shape)] for n, p in zip(self._names, self._params)],
                "routing": [r["optimizer"] for r in self._routing],
                "base": [list(b) for b in self._base]}

    def _check_meta(self, meta: Any, where: str) -> None:
        mine = self._meta()
        if not isinstance(meta, dict) or meta.get("optimizer") != mine["optimizer"]:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{where}: written by {meta.get('class') if isinstance(meta, dict) else '?'}"
                       f", not {mine['class']}")
        if [list(x) for x in meta.get("params", [])] != mine["params"]:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{where}: its parameters (names and shapes) differ from this optimizer's")
        if meta.get("routing") != mine["routing"]:
            raise _err("STRATA_ERR_INVALID_ARG", f"{where}: its routing differs")
        if meta.get("base") != mine["base"]:
            raise _err("STRATA_ERR_INVALID_ARG",
                       f"{where}: its groups' configured lr and weight_decay "
                       f"{meta.get('base')} differ from this optimizer's {mine['base']}")

    def _user_json(self) -> str:
        return json.dumps({"strata_torch": self._meta(),
                           "lr": [float(g["lr"]) for g in self.param_groups],
                           "hyper": [[float(g["lr"]), float(g["weight_decay"])]
                                     for g in self.param_groups]})

    def save(self, path: str | os.PathLike[str]) -> None:
        """strata_save into directory `path` (strata's checkpoint format:
        `strata ckpt inspect/verify` read it; crash-safe, see strata.h):
        weights, optimizer state, step counter, lr scale, and the param
        groups' lr in the manifest's user object. Errors: StrataError."""
        with self._locked():
            L.check(self._lib.strata_save(self._rt, os.fsencode(os.fspath(path)),
                                          self._user_json().encode(), None), "strata_save")

    def load(self, path: str | os.PathLike[str]) -> None:
        """strata_load from directory `path` written by save(): optimizer
        state, step counter, lr scale, the groups' lr, and the weights, which
        strata writes into the parameters' storage in place (its checkpoint
        holds them). Into a fresh runtime, swapped in on success: on any
        error (another optimizer's or model's checkpoint, corrupt files)
        StrataError and nothing changed."""
        self._load_dir(os.fspath(path), restore_weights=True)

    def _load_dir(self, path: str, restore_weights: bool,
                  hypers: Optional[list[tuple[float, float]]] = None) -> None:
        """strata_load(path) into a fresh runtime over scratch copies of the
        weights, swapped in once every rank accepted it (under torchrun the
        verdicts are agreed: a refusal on one rank is one on all, nothing
        changed anywhere). ZeRO-3 (managed weights in effect): the new
        runtime holds the managed weights (strata_load writes an owner's
        into its buffer); with restore_weights=False the owned ones get this
        rank's current values back, so only the optimizer state changes."""
        zero3 = any(self._managed)
        with self._locked():
            # strata_load writes the checkpoint's weights into scratch copies: the
            # parameters change only once everything was accepted. A managed
            # parameter this rank does not own has no storage here: zeros stand in
            # (strata keeps no copy of it)
            scratch = [torch.zeros(self._params[i].shape, dtype=torch.float32)
                       if self._managed[i] and not self._mine[i]
                       else self._data(i).detach().clone() for i in range(len(self._params))]
            rt = self._build([_ptr(t) for t in scratch])
            err: Optional[BaseException] = None
            user: Any = {}
            try:
                uj = c_void_p()
                L.check(self._lib.strata_load(rt, os.fsencode(path), byref(uj), None),
                        "strata_load")
                if uj.value:
                    text = ctypes.string_at(uj.value).decode()
                    self._lib._free(uj)
                    user = json.loads(text)
                self._check_meta(user.get("strata_torch") if isinstance(user, dict) else None,
                                 path)
                for i in range(len(self._params)):
                    if not self._managed[i]:
                        L.check(self._lib.strata_param_set_buffers(
                            rt, i, c_void_p(_ptr(self._data(i))), None),
                            "strata_param_set_buffers")
            except StrataError as e:
                err = e
            except BaseException as e:
                self._lib.strata_destroy(rt)
                raise
            if self._comm is not None:
                try:
                    self._comm.agree(err)
                except BaseException:
                    self._lib.strata_destroy(rt)
                    raise
            elif err is not None:
                self._lib.strata_destroy(rt)
                raise err
            if zero3:
                # the owned managed weights now: views of the old runtime's buffers
                # (valid until it is destroyed below)
                cur = [self._params[i].data if self._mine[i] else None
                       for i in range(len(self._params))]
                self._adopt(rt)
                if not restore_weights:
                    with torch.no_grad():
                        for i, c in enumerate(cur):
                            if c is not None and self._mine[i]:
                                self._params[i].data.copy_(c)
                    del cur
            if restore_weights:
                with torch.no_grad():
                    for i, t in enumerate(scratch):
                        if not self._managed[i]:
                            self._data(i).copy_(t)
                self._write_back()
            old, self._rt = self._rt, rt
            self._stepped = True  # attach() would rebuild the runtime: refused from here
            self._bufs = [(d, _ptr(self._zeros)) for d in self._data_ptrs()]
            if zero3:  # a managed parameter's registered pointer stays the one given at
                # commit (strata reads its own buffer, never that pointer again: attach)
                self._bufs = [(_ptr(scratch[i]) if self._managed[i] else d, g)
                              for i, (d, g) in enumerate(self._bufs)]
            self._scale = float("nan")  # set again at the next step (strata_load restored it)
            self._sync_cache(rt)        # strata_load restored the per-parameter lr and decay
            hyper = hypers if hypers is not None else user.get("hyper", [])
            for g, h in zip(self.param_groups, hyper):
                g["lr"], g["weight_decay"] = h
            if not hyper:  # an older binding's checkpoint: the lr only
                for g, lr in zip(self.param_groups, user.get("lr", [])):
                    g["lr"] = lr
            if old is not None:
                self._lib.strata_destroy(old)

    def _groups_sd(self) -> list[dict[str, Any]]:
        groups = []
        pos = 0
        for g in self.param_groups:
            gd = {k: v for k, v in g.items() if k != "params"}
            gd["params"] = list(range(pos, pos + len(g["params"])))
            pos += len(g["params"])
            groups.append(gd)
        return groups

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: {"state": ..., "param_groups": [...]} with params as
        positions, plus "strata".

        Without torch.distributed: "state" is {} and "strata" holds the files
        of a strata_save checkpoint (manifest.json, model.safetensors,
        rank-00000.*) as uint8 tensors, so torch.save pickles it. The weights
        travel too (model.safetensors: one copy of the model's float32
        weights); load_state_dict does not write them back into the model.

        With torch.distributed initialized (torchrun, any world size, or
        distributed=False there): torch.distributed.checkpoint's conventions,
        so that dcp.save({"optimizer": opt}) and dcp.load(...) work, also
        at another world size. "state" is {parameter name: {state name:
        tensor}} with the same keys on every rank: every optimizer state
        tensor of strata's checkpoint (its rank files' "<name>/<state>":
        factors, roots, moments, momentum, the refresh engine's results as
        uint8), each owned whole by the rank that owns its parameter: there
        the tensor with its values, elsewhere an empty placeholder of 0
        elements; both carry DCP's CheckpointableTensor fields
        (torch.distributed.checkpoint.protocol: global_shape and one shard
        at offset 0 on the owner, no shard elsewhere), so DCP writes each
        tensor once, from its owner, and at load reads each into the rank
        that owns it then. "strata" is {"format": 2, "ckpt": one JSON text,
        the same on every rank}: the checkpoint's manifest (step, lr scale,
        configuration, parameter table, statistics), every rank file's
        safetensors header and engine slot table (rank-NNNNN.json), and the
        weights file's header; no weights (they are the model's state dict).
        Collective under torchrun: strata_save writes one directory that all
        ranks share (a temporary directory of rank 0's, under $TMPDIR: on
        several nodes TMPDIR must be a shared file system, else
        STRATA_ERR_UNSUPPORTED on every rank)."""
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return self._state_dict_dcp()
        with self._locked():
            tmp = tempfile.mkdtemp(prefix="strata-sd-")
            try:
                d = os.path.join(tmp, "ckpt")
                L.check(self._lib.strata_save(self._rt, d.encode(), self._user_json().encode(),
                                              None), "strata_save")
                files = {}
                for name in sorted(os.listdir(d)):
                    with open(os.path.join(d, name), "rb") as f:
                        files[name] = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return {"state": {}, "param_groups": self._groups_sd(),
                "strata": {"format": 1, "meta": self._meta(), "files": files}}

    def _shared_tmp(self) -> str:
        """A temporary directory every rank sees: rank 0's mkdtemp, its path
        broadcast; each rank checks it exists (agreed)."""
        import torch.distributed as dist
        path = [tempfile.mkdtemp(prefix="strata-sd-") if self._comm.rank == 0 else None]
        dist.broadcast_object_list(path, src=self._comm.members[0], group=self._comm.group)
        err = None
        if not os.path.isdir(path[0]):
            err = _err("STRATA_ERR_UNSUPPORTED",
                       f"state_dict under torchrun: rank {self._comm.rank} cannot see rank 0's "
                       f"temporary directory {path[0]}: strata_save writes one directory that "
                       "all ranks share; set TMPDIR to a file system every node shares, or use "
                       "save(dir) with such a directory")
        try:
            self._comm.agree(err)
        except BaseException:
            if self._comm.rank == 0:
                shutil.rmtree(path[0], ignore_errors=True)
            raise
        return path[0]

    def _state_dict_dcp(self) -> dict[str, Any]:
        """state_dict() with torch.distributed initialized (its docstring)."""
        import torch.distributed as dist
        proto = _dcp_protocol()
        comm = self._comm
        me = comm.rank if comm is not None else 0
        with self._locked():
            tmp = self._shared_tmp() if comm is not None else tempfile.mkdtemp(prefix="strata-sd-")
            try:
                d = os.path.join(tmp, "ckpt")
                L.check(self._lib.strata_save(self._rt, d.encode(), self._user_json().encode(),
                                              None), "strata_save")
                with open(os.path.join(d, "manifest.json"), "rb") as f:
                    manifest = f.read().decode()
                world = int(json.loads(manifest)["world_size"])
                model_header = _st_read(os.path.join(d, "model.safetensors"), False)[0]
                headers, slots = [], []
                mine = b""
                for k in range(world):
                    h, data = _st_read(os.path.join(d, f"rank-{k:05d}.safetensors"), k == me)
                    headers.append(h)
                    if k == me:
                        mine = data
                    with open(os.path.join(d, f"rank-{k:05d}.json"), "rb") as f:
                        slots.append(f.read().decode())
            finally:
                if comm is not None:  # every rank has read before rank 0 removes it
                    dist.barrier(group=comm.group)
                if me == 0:
                    shutil.rmtree(tmp, ignore_errors=True)
        state: dict[str, dict[str, torch.Tensor]] = {}
        for k, h in enumerate(headers):
            for full, info in json.loads(h).items():
                if full == "__metadata__":
                    continue
                pname, sub = full.rsplit("/", 1)
                shape = tuple(info["shape"])
                dtype = _ST_DTYPES.get(info["dtype"])
                if dtype is None:
                    raise _err("STRATA_ERR_UNSUPPORTED", f"state_dict: {full}: safetensors "
                               f"dtype {info['dtype']} has no torch dtype here")
                have = state.setdefault(pname, {}).get(sub)
                if k == me:
                    a, b = info["data_offsets"]
                    t = torch.frombuffer(bytearray(mine[a:b]), dtype=torch.uint8) \
                        if b > a else torch.empty(0, dtype=torch.uint8)
                    t = t.view(dtype).reshape(shape)
                    _owned(t, shape, True)
                elif have is not None or not proto:
                    continue  # an HSDP replica's copy, or this rank's (owned) one
                else:
                    t = _owned(torch.empty(0, dtype=dtype), shape, False)
                state[pname][sub] = t
        # the refresh engine's slots: a slot's result is in the rank file only
        # while it is ready or installed; its key is there always (zeros for an
        # empty slot, which the slot table marks free), so that the keys do not
        # depend on how far training went (a fresh optimizer's state_dict, the
        # template DCP loads into, has the same keys as a trained one's)
        for k, j in enumerate(slots):
            for blk in json.loads(j).get("blocks", []):
                pname = blk["param"]
                for n in range(len(blk.get("slots", []))):
                    sub = f"engine.{blk['block']}.{n}"
                    have = state.setdefault(pname, {}).get(sub)
                    shape = (int(blk["slot_bytes"]),)
                    if k == me and (have is None or not have.global_offsets):
                        state[pname][sub] = _owned(torch.zeros(shape, dtype=torch.uint8), shape,
                                                   True)
                    elif have is None and proto:
                        state[pname][sub] = _owned(torch.empty(0, dtype=torch.uint8), shape,
                                                   False)
        state = {p: v for p, v in state.items() if v}  # without the protocol: owned ones only
        ck = json.dumps({"meta": self._meta(), "manifest": manifest,
                         "model_header": model_header, "headers": headers, "slots": slots})
        return {"state": state, "param_groups": self._groups_sd(),
                "strata": {"format": 2, "ckpt": ck}}

    def _write_dcp(self, state_dict: dict[str, Any], sd: dict[str, Any], d: str) -> None:
        """load_state_dict of a format-2 state dict (state_dict()'s docstring):
        the strata checkpoint it came from, rebuilt in a directory of this
        rank's own: the manifest with its file table's sizes and digests for
        the files rewritten here, each rank file holding a state tensor this
        rank has (the ones it owns now: DCP filled them) whole, its header as
        saved, the tensors this rank does not have as zeros (strata_load
        reads, of an old rank's file, only the parameters this rank owns
        now), the weights file with the current weights (load_state_dict
        keeps the model's weights), into directory `d` (created here). Then
        load_state_dict's strata_load reshards it."""
        try:
            ck = json.loads(sd["ckpt"])
            manifest = json.loads(ck["manifest"])
            headers, slots = list(ck["headers"]), list(ck["slots"])
            model_header = ck["model_header"]
        except (KeyError, TypeError, ValueError) as e:
            raise _err("STRATA_ERR_DATA", f"load_state_dict: its 'strata' entry is not "
                       f"readable ({e})") from None
        self._check_meta(ck.get("meta"), "load_state_dict")
        state = state_dict.get("state")
        if not isinstance(state, dict):
            raise _err("STRATA_ERR_INVALID_ARG", "load_state_dict: no 'state' dict")
        os.mkdir(d)
        written: dict[str, tuple[int, str]] = {}
        for k, (h, j) in enumerate(zip(headers, slots)):
            parts, have, lack = [], set(), []
            for full, info in json.loads(h).items():
                if full == "__metadata__":
                    continue
                pname, sub = full.rsplit("/", 1)
                t = state.get(pname, {}).get(sub) if isinstance(state.get(pname), dict) \
                    else None
                if isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(info["shape"]) \
                        and t.dtype == _ST_DTYPES.get(info["dtype"]):
                    parts.append((info["data_offsets"], t))
                    have.add(pname)
                else:
                    lack.append((pname, full))
            if not parts:
                continue  # this rank reads nothing of rank k's file
            # a parameter this rank has (owns now) must have all its tensors:
            # strata_load would read the zeros standing in for a missing one
            miss = [full for pname, full in lack if pname in have]
            if miss:
                raise _err("STRATA_ERR_INVALID_ARG",
                           f"load_state_dict: the checkpoint's {miss[0]} (of {len(miss)}) "
                           "is not in this state dict, or has another shape or dtype "
                           "(a loading optimizer with fewer refresh slots: another "
                           "staleness or async setting?)")
            name = f"rank-{k:05d}.safetensors"
            written[name] = _st_write(os.path.join(d, name), h, parts)
            name = f"rank-{k:05d}.json"
            with open(os.path.join(d, name), "wb") as f:
                f.write(j.encode())
            written[name] = (len(j.encode()), _sha256(os.path.join(d, name)))
        index = {n: i for i, n in enumerate(self._names)}
        parts = []
        for full, info in json.loads(model_header).items():
            i = index.get(full)
            if full != "__metadata__" and i is not None and \
                    not (self._managed[i] and not self._mine[i]):
                parts.append((info["data_offsets"], self._data(i).detach()))
        written["model.safetensors"] = _st_write(os.path.join(d, "model.safetensors"),
                                                 model_header, parts)
        for f in manifest.get("files", []):
            if f.get("name") in written:
                f["bytes"], f["sha256"] = written[f["name"]]
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(manifest, f)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state_dict() of an optimizer of the same class over the
        same parameters (names, shapes, routing): optimizer state, step
        counter, the groups' hyperparameters; the model's weights are left as
        they are (load them with the model's own load_state_dict). Either
        format of state_dict(); the distributed one (format 2) at any world
        size, as torch.distributed.checkpoint.load fills it (each rank the
        state tensors of the parameters it owns now). Collective under
        torchrun (a refusal on one rank is one on all). Errors:
        StrataError (STRATA_ERR_INVALID_ARG: another optimizer's or model's
        state; STRATA_ERR_DATA: corrupt), and nothing changed."""
        tmp = tempfile.mkdtemp(prefix="strata-sd-")
        d = os.path.join(tmp, "ckpt")
        err: Optional[StrataError] = None
        try:
            try:  # every check before any collective: agreed under torchrun
                groups = self._write_sd(state_dict, d)
            except StrataError as e:
                err = e
            except OSError as e:
                err = _err("STRATA_ERR_IO", f"load_state_dict: {e}")
            if self._comm is not None:
                self._comm.agree(err)
            elif err is not None:
                raise err
            self._load_dir(d, restore_weights=False,
                           hypers=[(float(g["lr"]), float(g["weight_decay"])) for g in groups])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write_sd(self, state_dict: dict[str, Any], d: str) -> list[dict[str, Any]]:
        """The strata checkpoint directory `d` of a state_dict() (either
        format), checked; returns its param groups."""
        sd = state_dict.get("strata") if isinstance(state_dict, dict) else None
        if not isinstance(sd, dict) or ("files" not in sd and sd.get("format") != 2):
            raise _err("STRATA_ERR_INVALID_ARG", "load_state_dict: not a strata optimizer's "
                       "state_dict (no 'strata' entry)")
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise _err("STRATA_ERR_INVALID_ARG", "load_state_dict: its param groups differ")
        if sd.get("format") == 2:
            self._write_dcp(state_dict, sd, d)
            return groups
        self._check_meta(sd.get("meta"), "load_state_dict")
        os.mkdir(d)
        for name, t in sd["files"].items():
            if os.sep in name or name.startswith("."):
                raise _err("STRATA_ERR_DATA", f"load_state_dict: bad file name {name!r}")
            with open(os.path.join(d, name), "wb") as f:
                if isinstance(t, torch.Tensor):
                    t = t.detach().contiguous().to(torch.uint8)
                    f.write(ctypes.string_at(t.data_ptr(), t.numel()) if t.numel() else b"")
                else:
                    f.write(bytes(t))
        return groups


# safetensors dtypes (the names strata's checkpoint writes, ckpt/ckpt.h) as torch's
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
              "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
              "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


_HAS_DCP_PROTOCOL: Optional[bool] = None


def _dcp_protocol() -> bool:
    """Whether torch.distributed.checkpoint has the CheckpointableTensor
    protocol (torch.distributed.checkpoint.protocol, PyTorch 2.13 or so on;
    2.15 has it). Without it (older torch, e.g. 2.11) the distributed
    state_dict holds on each rank only the tensors it owns, as plain
    tensors: DCP saves and loads them as well (a key present on one rank is
    written by it; a load reads what the rank's own state_dict asks for), but
    the keys then differ between ranks."""
    global _HAS_DCP_PROTOCOL
    if _HAS_DCP_PROTOCOL is None:
        try:
            from torch.distributed.checkpoint.protocol import CheckpointableTensor  # noqa: F401
            _HAS_DCP_PROTOCOL = True
        except ImportError:
            _HAS_DCP_PROTOCOL = False
    return _HAS_DCP_PROTOCOL


def _owned(t: torch.Tensor, shape: tuple[int, ...], whole: bool) -> torch.Tensor:
    """torch.distributed.checkpoint's CheckpointableTensor fields on `t`: a
    tensor of global shape `shape` of which this rank holds all (one shard
    at offset 0) or nothing (no shard: the placeholder)."""
    zero = (0,) * len(shape)
    t.global_shape = tuple(shape)
    t.global_offsets = (zero,) if whole else ()
    t.local_offsets = (zero,) if whole else ()
    t.local_sizes = (tuple(shape),) if whole else ()
    return t


def _st_read(path: str, data: bool) -> tuple[str, bytes]:
    """A safetensors file's header (its JSON text, as written) and, when
    `data`, its data section."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = f.read(n)
        return head.decode(), f.read() if data else b""


def _sha256(path: str) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _st_write(path: str, header: str, parts: list[tuple[list[int], torch.Tensor]]) -> \
        tuple[int, str]:
    """A safetensors file: `header` as it was, each given tensor's bytes at its
    data offsets, zeros elsewhere (holes). Returns (bytes, SHA-256 hex)."""
    head = header.encode()
    end = max((b for _, b in (x for x, _ in parts)), default=0)
    for _, info in json.loads(header).items():
        if isinstance(info, dict) and "data_offsets" in info:
            end = max(end, int(info["data_offsets"][1]))
    base = 8 + len(head)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for (a, b), t in parts:
            t = t.detach().contiguous().reshape(-1).view(torch.uint8)
            if t.numel() != b - a:
                raise _err("STRATA_ERR_DATA", f"{path}: a tensor of {t.numel()} bytes for "
                           f"{b - a}")
            f.seek(base + a)
            f.write(ctypes.string_at(t.data_ptr(), b - a) if b > a else b"")
        f.truncate(base + end)
    return base + end, _sha256(path)


def _doc(cls: type, family: str) -> type:
    fields = ", ".join(f for f, _ in _FAMILY_STRUCT[family]._fields_)
    cls.__doc__ = (f"strata's {family} over torch parameters (strata_config.matrix_optimizer = "
                   f"{family}).\n\nIts keywords: {fields} (strata_{_FAMILY_FIELD[family]}_config"
                   ", include/strata/optim.h)"
                   + ("" if family == "adamw" else "; the tail's adamw_lr, adamw_beta1, "
                      "adamw_beta2, adamw_eps, adamw_weight_decay")
                   + "; the runtime's " + ", ".join(
                       "async_roots" if f == "async" else f for f in _RUNTIME_FIELDS)
                   + " (strata_config, include/strata/strata.h).\n\n"
                   + (StrataOptimizer.__doc__ or ""))
    return cls


class Shampoo(StrataOptimizer):
    _matrix = "shampoo"


class SOAP(StrataOptimizer):
    _matrix = "soap"


class KLShampoo(StrataOptimizer):
    _matrix = "kl-shampoo"


class Muon(StrataOptimizer):
    _matrix = "muon"


class NorMuon(StrataOptimizer):
    _matrix = "normuon"


class Dion2(StrataOptimizer):
    _matrix = "dion2"


class AdamW(StrataOptimizer):
    _matrix = "adamw"


for _c, _f in ((Shampoo, "shampoo"), (SOAP, "soap"), (KLShampoo, "kl-shampoo"), (Muon, "muon"),
               (NorMuon, "normuon"), (Dion2, "dion2"), (AdamW, "adamw")):
    _doc(_c, _f)
