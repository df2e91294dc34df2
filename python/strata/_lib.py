"""ctypes mirror of strata's public C API (include/strata/strata.h, optim.h, status.h).

ABI mode: nothing is compiled. The structures below mirror the C structs field
by field, in order; tests/python/test_abi.py compiles a small C program against
the headers and checks every field's offset and every struct's size.

Library lookup order (the first that exists is loaded):
  1. $STRATA_LIBRARY: a path to libstrata.so (or libstrata.so.0);
  2. the checkout's build tree, when this package runs from the checkout
     (python/strata -> ../../build*/runtime/libstrata.so, "build" first);
  3. the dynamic loader's search (LD_LIBRARY_PATH, the installed prefix's
     lib directory known to ldconfig): libstrata.so.0, then libstrata.so.
"""
from __future__ import annotations

import ctypes
import glob
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p)
from typing import Optional

c_enum = c_int  # C enums of strata: int-sized (every value fits an int)


class AdamWConfig(Structure):
    _fields_ = [("lr", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
                ("weight_decay", c_float)]


class ShampooConfig(Structure):
    _fields_ = [("lr", c_float), ("beta1", c_float), ("beta2", c_float),
                ("epsilon", c_float), ("momentum", c_float), ("nesterov", c_bool),
                ("weight_decay", c_float), ("precondition_frequency", c_int),
                ("start_preconditioning_step", c_int), ("refresh_offset", c_int),
                ("max_preconditioner_dim", c_int), ("grafting", c_enum),
                ("grafting_beta2", c_float), ("grafting_epsilon", c_float),
                ("epsilon_rel", c_float), ("use_pseudo_inverse", c_bool),
                ("pseudo_inverse_rtol", c_float), ("pseudo_inverse_atol", c_float),
                ("inverse_exponent_override", c_float * 2), ("root_method", c_enum),
                ("factor_dtype", c_enum), ("root_dtype", c_enum),
                ("warm_qr_tolerance", c_float)]


class MuonConfig(Structure):
    _fields_ = [("lr", c_float), ("momentum", c_float), ("nesterov", c_bool),
                ("ns_steps", c_int), ("weight_decay", c_float), ("scale", c_enum),
                ("momentum_form", c_enum), ("ns_schedule", c_enum), ("ns_method", c_enum),
                ("ns_gram_min_aspect", c_float), ("ns_gram_restarts", c_int),
                ("ns_gram_restart_mask", c_uint64), ("ns_batch_threads", c_int),
                ("ns_dtype", c_enum)]


class SoapConfig(Structure):
    _fields_ = [("lr", c_float), ("beta1", c_float), ("beta2", c_float),
                ("shampoo_beta", c_float), ("eps", c_float), ("weight_decay", c_float),
                ("precondition_frequency", c_int), ("refresh_offset", c_int),
                ("max_precond_dim", c_int), ("precondition_1d", c_bool),
                ("normalize_grads", c_bool), ("correct_bias", c_bool),
                ("factor_dtype", c_enum)]


class KLShampooConfig(Structure):
    _fields_ = [("form", c_enum), ("lr", c_float), ("beta1", c_float), ("beta2", c_float),
                ("shampoo_beta", c_float), ("eps", c_float), ("weight_decay", c_float),
                ("precondition_frequency", c_int), ("refresh_offset", c_int),
                ("init_factor", c_float), ("max_clamp_value", c_int),
                ("normalize_grads", c_bool), ("bias_correction", c_bool)]


class NorMuonConfig(Structure):
    _fields_ = [("lr", c_float), ("momentum", c_float), ("beta2", c_float),
                ("weight_decay", c_float), ("nesterov", c_bool), ("ns_steps", c_int),
                ("update_scale", c_enum), ("use_adjusted_lr", c_bool), ("eps", c_float),
                ("ns_schedule", c_enum), ("ns_method", c_enum), ("ns_gram_min_aspect", c_float),
                ("ns_gram_restarts", c_int), ("ns_gram_restart_mask", c_uint64),
                ("ns_batch_threads", c_int), ("ns_dtype", c_enum)]


class Dion2Config(Structure):
    _fields_ = [("lr", c_float), ("fraction", c_float), ("ef_decay", c_float),
                ("weight_decay", c_float), ("adjust_lr", c_enum), ("ns_steps", c_int),
                ("ns_schedule", c_enum), ("ns_method", c_enum), ("ns_gram_min_aspect", c_float),
                ("ns_gram_restarts", c_int), ("ns_gram_restart_mask", c_uint64),
                ("ns_batch_threads", c_int), ("ns_dtype", c_enum)]


# void (*)(void *user, strata_log_level level, const char *subsystem, const char *msg)
LOG_FN = CFUNCTYPE(None, c_void_p, c_enum, c_char_p, c_char_p)


class Config(Structure):
    _fields_ = [("version", c_int), ("matrix_optimizer", c_enum),
                ("adamw", AdamWConfig), ("shampoo", ShampooConfig), ("muon", MuonConfig),
                ("soap", SoapConfig), ("kl_shampoo", KLShampooConfig),
                ("normuon", NorMuonConfig), ("dion2", Dion2Config),
                ("precondition_frequency", c_int), ("max_grad_norm", c_float), ("route_degenerate_to_adamw", c_bool),
                ("stagger_refresh", c_bool), ("backend", c_enum), ("blas_threads", c_int),
                ("step_threads", c_int), ("async", c_bool), ("staleness", c_int),
                ("install_mode", c_enum), ("workers", c_int), ("pin_workers", c_bool),
                ("wait_timeout_s", c_double), ("roots_tier", c_enum),
                ("host_budget", c_size_t), ("nvme_dir", c_char_p), ("nvme_budget", c_size_t),
                ("nvme_queue_depth", c_int), ("nvme_chunk_bytes", c_size_t),
                ("comm", c_void_p), ("sharding", c_enum), ("shard_group_size", c_int),
                ("average_gradients", c_bool), ("grad_bucket_bytes", c_size_t),
                ("log_level", c_enum), ("log_fn", LOG_FN), ("log_user", c_void_p),
                ("stale_correction", c_enum),
                ("state_dtype_factors", c_enum), ("state_dtype_roots", c_enum),
                ("state_dtype_moments", c_enum), ("shard_gradients", c_bool),
                ("page_state", c_bool),
                ("staleness_warmup", c_int)]


MAX_DIMS = 4
CONFIG_VERSION = 11


class ParamDesc(Structure):
    _fields_ = [("name", c_char_p), ("ndim", c_int), ("shape", c_int64 * MAX_DIMS),
                ("layer", c_int), ("role", c_enum), ("optimizer", c_enum),
                ("stacked", c_bool), ("memory", c_enum), ("data", POINTER(c_float)),
                ("grad", POINTER(c_float)), ("managed", c_bool)]


class ParamLayout(Structure):
    _fields_ = [("tail", c_bool), ("owner", c_int), ("bytes", c_size_t),
                ("shard_offset", c_size_t), ("tail_offset", c_size_t)]


class SaveInfo(Structure):
    _fields_ = [("seconds", c_double), ("drain_seconds", c_double), ("bytes", c_uint64),
                ("drained_jobs", c_int64)]


class LoadInfo(Structure):
    _fields_ = [("step", c_int64), ("seconds", c_double), ("bytes", c_uint64)]


class Stats(Structure):
    """strata_stats (strata.h: the counters strata_stats_get copies)."""
    _fields_ = [
        ("step", c_int64),
        ("n_params", c_int32),
        ("n_matrix", c_int32),
        ("n_tail", c_int32),
        ("matrix_elements", c_int64),
        ("tail_elements", c_int64),
        ("preconditioner_blocks", c_int32),
        ("device_bytes", c_size_t),
        ("device_bytes_peak", c_size_t),
        ("grad_norm", c_double),
        ("last_step_seconds", c_double),
        ("seconds_steps", c_double),
        ("last_seconds_factors", c_double),
        ("last_seconds_roots", c_double),
        ("last_seconds_precondition", c_double),
        ("last_seconds_tail", c_double),
        ("seconds_factors", c_double),
        ("seconds_roots", c_double),
        ("seconds_precondition", c_double),
        ("seconds_tail", c_double),
        ("last_seconds_critical", c_double),
        ("seconds_critical", c_double),
        ("root_refreshes", c_int64),
        ("root_failures", c_int64),
        ("root_retries", c_int64),
        ("nonfinite_rejected", c_int64),
        ("overflow_skipped", c_int64),
        ("nonfinite_directions", c_int64),
        ("forward_hooks", c_int64),
        ("backward_hooks", c_int64),
        ("missing_backward_hooks", c_int64),
        ("coh_installs", c_int64),
        ("coh_waits", c_int64),
        ("coh_dropped", c_int64),
        ("coh_failed", c_int64),
        ("coh_bound_exceeded", c_int64),
        ("coh_wait_seconds", c_double),
        ("last_wait_seconds", c_double),
        ("max_staleness", c_int64),
        ("jobs_submitted", c_int64),
        ("jobs_cancelled", c_int64),
        ("blocks_on_nvme", c_int32),
        ("host_bytes", c_size_t),
        ("host_bytes_peak", c_size_t),
        ("nvme_bytes", c_size_t),
        ("nvme_bytes_peak", c_size_t),
        ("bytes_device_to_host", c_uint64),
        ("nvme_bytes_written", c_uint64),
        ("nvme_bytes_read", c_uint64),
        ("io_errors", c_int64),
        ("snapshot_failures", c_int64),
        ("world_size", c_int32),
        ("rank", c_int32),
        ("step_threads", c_int32),
        ("owned_params", c_int32),
        ("owned_param_bytes", c_size_t),
        ("largest_owned_bytes", c_size_t),
        ("step_matrix_bytes", c_uint64),
        ("comm_bytes_intra_node", c_uint64),
        ("comm_bytes_inter_node", c_uint64),
        ("param_bytes", c_size_t),
        ("param_bytes_peak", c_size_t),
        ("largest_layer_bytes", c_size_t),
        ("planned_makespan", c_double),
        ("planned_lower_bound", c_double),
        ("refresh_blocks_computed", c_int64),
        ("refresh_blocks_received", c_int64),
        ("refresh_ship_bytes_intra_node", c_uint64),
        ("refresh_ship_bytes_inter_node", c_uint64),
        ("stream_snapshots", c_int64),
        ("stream_stages", c_int64),
        ("stream_stages_early", c_int64),
        ("stream_installs", c_int64),
        ("stream_waits", c_int64),
        ("stream_wait_bytes", c_uint64),
        ("seconds_backward_hooks", c_double),
        ("seconds_grad_wait", c_double),
        ("last_grad_wait_seconds", c_double),
        ("grad_buckets", c_int64),
        ("grad_bucket_ring_waits", c_int64),
        ("grad_staging_bytes", c_size_t),
        ("root_newton", c_int64),
        ("root_fallbacks", c_int64),
        ("stream_blocking_waits", c_int64),
        ("stream_waits_timed", c_int64),
        ("stream_waits_untimed", c_int64),
        ("stream_wait_seconds", c_double),
        ("stale_waits_avoided", c_int64),
        ("stale_corrections", c_int64),
        ("stale_refused", c_int64),
        ("stale_refreshes_skipped", c_int64),
        ("stale_max_corrected", c_int64),
        ("step_scratch_bytes", ctypes.c_size_t),
        ("nvme_resident_buffers", ctypes.c_int32),
        ("nvme_resident_bytes", ctypes.c_size_t),
        ("nvme_resident_reads", ctypes.c_int64),
        ("nvme_resident_prefetches", ctypes.c_int64),
        ("nvme_resident_evictions", ctypes.c_int64),
        ("paged_params", ctypes.c_int32),
        ("paged_bytes", ctypes.c_uint64),
        ("page_reads", ctypes.c_int64),
        ("page_reads_waited", ctypes.c_int64),
        ("page_writes", ctypes.c_int64),
    ]


LEDGER_TIERS = ["device", "host-pinned", "host", "managed", "nvme"]
LEDGER_KINDS = ["weights", "master_weights", "gradients", "grad_buckets", "factors", "roots",
                "moments", "grafting", "staging", "comm", "workspace", "activations"]


class MemoryLedger(Structure):
    """strata_memory_ledger (strata/types.h: strata_memory_ledger_get's bytes by
    tier and kind, now and at the peak)."""
    _fields_ = [
        ("bytes", (ctypes.c_uint64 * len(LEDGER_KINDS)) * len(LEDGER_TIERS)),
        ("peak", (ctypes.c_uint64 * len(LEDGER_KINDS)) * len(LEDGER_TIERS)),
        ("tier_bytes", ctypes.c_uint64 * len(LEDGER_TIERS)),
        ("tier_peak", ctypes.c_uint64 * len(LEDGER_TIERS)),
        ("total_bytes", ctypes.c_uint64),
        ("total_peak", ctypes.c_uint64),
    ]


class OptimizerInfo(Structure):
    """strata_optimizer_info (strata/strata.h: strata_optimizer_info_get)."""
    _fields_ = [
        ("has_refresh", c_bool), ("async_capable", c_bool), ("staggers", c_bool),
        ("precondition_frequency", ctypes.c_int), ("max_staleness", ctypes.c_int),
        ("refresh_noun", c_char_p), ("first_refresh", ctypes.c_int64),
        ("state_per_param", ctypes.c_int), ("ema_horizon", c_double),
    ]


# Every mirrored struct, by its C name (the ABI test walks this table).
STRUCTS = {
    "strata_adamw_config": AdamWConfig,
    "strata_shampoo_config": ShampooConfig,
    "strata_muon_config": MuonConfig,
    "strata_soap_config": SoapConfig,
    "strata_kl_shampoo_config": KLShampooConfig,
    "strata_normuon_config": NorMuonConfig,
    "strata_dion2_config": Dion2Config,
    "strata_config": Config,
    "strata_param_desc": ParamDesc,
    "strata_param_layout": ParamLayout,
    "strata_save_info": SaveInfo,
    "strata_load_info": LoadInfo,
    "strata_stats": Stats,
    "strata_memory_ledger": MemoryLedger,
    "strata_optimizer_info": OptimizerInfo,
}

# Enums (values of include/strata/*.h).
OPTIMIZERS = {"default": -1, "adamw": 0, "shampoo": 1, "muon": 2, "soap": 3, "kl-shampoo": 4,
              "normuon": 5, "dion2": 6}
OPTIMIZER_NAMES = {v: k for k, v in OPTIMIZERS.items()}
ROLES = {"auto": 0, "matrix": 1, "embedding": 2, "head": 3, "vector": 4}
STATUS_NAMES = ["STRATA_OK", "STRATA_ERR_INVALID_ARG", "STRATA_ERR_NOMEM", "STRATA_ERR_STATE",
                "STRATA_ERR_NONFINITE", "STRATA_ERR_LINALG", "STRATA_ERR_IO", "STRATA_ERR_DATA",
                "STRATA_ERR_UNSUPPORTED", "STRATA_ERR_TIMEOUT", "STRATA_ERR_INTERNAL"]
ENUMS = {
    "grafting": {"none": 0, "adam": 1, "adagrad": 2},
    "root_method": {"eigh": 0, "newton": 1, "auto": 2, "warm_qr": 3, "newton_f32": 4,
                    "warm_qr_f32": 5},
    "scale": {"shape": 0, "adamw": 1, "adamw_rms": 1, "spectral": 2, "none": 3},
    "momentum_form": {"sum": 0, "ema": 1},
    "ns_schedule": {"quintic": 0, "original": 0, "polar_express": 1, "polar-express": 1},
    "update_scale": {"preserve_norm": 0, "match_rms": 1},
    "adjust_lr": {"spectral_norm": 0, "spectral-norm": 0, "rms_norm": 1, "rms-norm": 1,
                  "none": 2},
    "ns_method": {"auto": 0, "standard": 1, "gram": 2},
    "form": {"eigenbasis": 0, "exact": 1},
    "backend": {"cpu": 0, "cuda": 1},
    "install_mode": {"fixed": 0, "eager": 1},
    "stale_correction": {"off": 0, "newton": 1},
    "roots_tier": {"device": 0, "host": 1, "nvme": 2},
    "sharding": {"owner": 0, "gather": 1, "zero1": 2},
    "log_level": {"error": 0, "warn": 1, "info": 2, "debug": 3},
    # strata_state_dtype: shampoo.factor_dtype / root_dtype, strata_config.state_dtype_*
    "factor_dtype": {"f32": 0, "bf16": 1},
    "root_dtype": {"f32": 0, "bf16": 1},
    "state_dtype_factors": {"f32": 0, "bf16": 1},
    "state_dtype_roots": {"f32": 0, "bf16": 1},
    "state_dtype_moments": {"f32": 0, "bf16": 1},
    "ns_dtype": {"f32": 0, "bf16": 1},
}


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("STRATA_LIBRARY")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(root, "meson.build")):
        builds = sorted(glob.glob(os.path.join(root, "build*", "runtime", "libstrata.so")))
        first = os.path.join(root, "build", "runtime", "libstrata.so")
        out += ([first] if first in builds else []) + [b for b in builds if b != first]
    out += ["libstrata.so.0", "libstrata.so"]
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("strata: libstrata.so not found (set STRATA_LIBRARY to its path, or "
                      "build the checkout: scripts/setup.sh build); tried:\n  " +
                      "\n  ".join(errors))


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded libstrata, with every function's prototype set (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    L = _load()
    st = c_int
    rt = c_void_p
    protos = {
        "strata_version": (c_char_p, []),
        "strata_status_str": (c_char_p, [c_int]),
        "strata_last_error": (c_char_p, []),
        "strata_error_clear": (None, []),
        "strata_config_default": (st, [POINTER(Config)]),
        "strata_create": (st, [POINTER(Config), POINTER(c_void_p)]),
        "strata_param_add": (st, [rt, POINTER(ParamDesc), POINTER(c_int32)]),
        "strata_commit": (st, [rt]),
        "strata_hook_forward": (st, [rt, c_int]),
        "strata_hook_backward": (st, [rt, c_int]),
        "strata_layer_materialize": (st, [rt, c_int]),
        "strata_layer_grad_begin": (st, [rt, c_int]),
        "strata_layer_release": (st, [rt, c_int]),
        "strata_set_lr_scale": (st, [rt, c_float]),
        "strata_step": (st, [rt]),
        "strata_param_data": (st, [rt, c_int32, POINTER(POINTER(c_float))]),
        "strata_param_grad": (st, [rt, c_int32, POINTER(POINTER(c_float))]),
        "strata_param_set_buffers": (st, [rt, c_int32, c_void_p, c_void_p]),
        "strata_param_set_hyper": (st, [rt, c_int32, c_float, c_float]),
        "strata_param_get_hyper": (st, [rt, c_int32, POINTER(c_float), POINTER(c_float)]),
        "strata_param_set_active": (st, [rt, c_int32, ctypes.c_bool]),
        "strata_param_optimizer": (st, [rt, c_int32, POINTER(c_int)]),
        "strata_param_layout_get": (st, [rt, c_int32, POINTER(ParamLayout)]),
        "strata_save": (st, [rt, c_char_p, c_char_p, POINTER(SaveInfo)]),
        "strata_load": (st, [rt, c_char_p, POINTER(c_void_p), POINTER(LoadInfo)]),
        "strata_destroy": (None, [rt]),
        "strata_optimizer_name": (c_char_p, [c_int]),
        "strata_optimizer_info_get": (st, [POINTER(Config), c_int, POINTER(OptimizerInfo)]),
        "strata_stats_get": (st, [rt, POINTER(Stats)]),
        "strata_memory_ledger_get": (st, [rt, POINTER(MemoryLedger)]),
        "strata_memory_ledger_charge": (st, [rt, c_int, c_int, ctypes.c_int64]),
    }
    for name, (res, args) in protos.items():
        f = getattr(L, name)
        f.restype = res
        f.argtypes = args
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [c_void_p]
    libc.free.restype = None
    L._free = libc.free  # type: ignore[attr-defined]
    _lib = L
    return L


def default_config() -> Config:
    """A strata_config filled by strata_config_default (the C defaults)."""
    cfg = Config()
    check(lib().strata_config_default(ctypes.byref(cfg)), "strata_config_default")
    return cfg


def _once(message: str, status: str) -> str:
    """`message` with each "prefix: " said once: a C detail that already
    starts with the call's name ("strata_create: strata_create: ..."), or an
    inner error's text that repeats the status name, is not repeated."""
    out: list[str] = []
    for part in message.split(": "):
        if part == status or (out and part == out[-1]):
            continue
        out.append(part)
    return ": ".join(out)


class StrataError(RuntimeError):
    """A strata call failed: `status` is the strata_status name
    ("STRATA_ERR_INVALID_ARG", ...), `code` its value, `message` the C library's
    strata_last_error() detail (or the binding's, for checks made in Python)."""

    def __init__(self, status: int | str, message: str):
        if isinstance(status, str):
            code = STATUS_NAMES.index(status)
        else:
            code = int(status)
        self.code = code
        self.status = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else "STRATA_ERR_UNKNOWN"
        self.message = _once(message, self.status)
        super().__init__(f"{self.status}: {self.message}")


def check(status: int, what: str) -> None:
    """Raise StrataError when `status` is not STRATA_OK (message from strata_last_error)."""
    if status != 0:
        detail = lib().strata_last_error()
        msg = detail.decode("utf-8", "replace") if detail else ""
        raise StrataError(status, f"{what}: {msg}" if msg else what)
