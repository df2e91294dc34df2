"""A strata communicator over torch.distributed (strata_comm_iface, include/strata/comm.h).

strata's collectives call back into Python through ctypes and run on the
user's default process group (gloo on CPU), so `torchrun` needs no MPI:

    torch.distributed.init_process_group("gloo")
    opt = strata.torch.Shampoo(model.named_parameters(), ...)   # finds the group

Why callbacks rather than bootstrapping strata's own MPI communicator:
torchrun starts no MPI job (no mpirun, no PMI), so MPI_Init has no world to
join; the process group is the one thing every rank shares.

Deterministic: every sum is taken in rank order from +0 on the receiving
rank (the contributions are gathered whole, then added), so a run over N
ranks is bit-identical to one process accumulating the same N micro-batch
gradients. Transport: the blocking slots only (no ireduce: strata reduces
per tensor at strata_hook_backward). Not here: split (HSDP, several shard
groups) and the gather sharding baseline's allgatherv / reduce_scatter return
STRATA_ERR_UNSUPPORTED. Timeouts (issue #22 item 11): every collective is
started with async_op=True and waited at most `timeout_s` seconds (default
600; 0 or None waits forever); on expiry the call fails with
STRATA_ERR_TIMEOUT naming this rank, the call and the peer when there is
one, and the step raises it (torchrun then ends the other ranks). Threading: called from the thread inside the strata
call (the binding holds its lock), which takes the GIL for each callback.
"""
from __future__ import annotations

import ctypes
import datetime
import time
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int, c_size_t, c_void_p
from typing import Any

import torch
import torch.distributed as dist

from . import _lib as L

_INT = CFUNCTYPE(c_int, c_void_p)
_ALLRED = CFUNCTYPE(c_int, c_void_p, POINTER(c_double), c_int, c_int)
_TOOWNER = CFUNCTYPE(c_int, c_void_p, POINTER(ctypes.c_float), c_size_t, c_int)
_GATHERV = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, POINTER(c_size_t), POINTER(c_size_t))
_BARRIER = CFUNCTYPE(c_int, c_void_p)
_TOOWNERS = CFUNCTYPE(c_int, c_void_p, POINTER(ctypes.c_float), c_size_t, POINTER(c_int), c_int)
_SPLIT = CFUNCTYPE(c_int, c_void_p, c_int, c_int, POINTER(c_void_p))


class _Iface(Structure):
    _fields_ = [("version", c_int), ("name", c_char_p),
                ("rank", _INT), ("size", _INT), ("node_rank", _INT), ("node_size", _INT),
                ("allreduce_f64", _ALLRED), ("reduce_to_owner", _TOOWNER),
                ("broadcast_from_owner", _TOOWNER), ("allgatherv_f32", _GATHERV),
                ("reduce_scatter_f32", _GATHERV), ("barrier", _BARRIER),
                ("reduce_to_owners", _TOOWNERS), ("split", _SPLIT),
                ("bytes", c_void_p), ("abort", c_void_p), ("destroy", c_void_p),
                ("ireduce_start", c_void_p), ("ireduce_test", c_void_p)]


def _status(name: str) -> int:
    return L.STATUS_NAMES.index(name)


class _Timeout(Exception):
    """A collective waited longer than TorchComm.timeout_s."""


class TorchComm:
    """strata_comm over torch.distributed's default group; `.handle` is the
    strata_comm pointer for strata_config.comm. Keep the object alive as
    long as a runtime uses it; close() destroys the handle."""

    def __init__(self, group: Any = None, timeout_s: float | None = 600.0) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise L.StrataError("STRATA_ERR_STATE", "torch.distributed is not initialized")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout_s = float(timeout_s) if timeout_s else 0.0
        self._err = (_status("STRATA_ERR_IO"), _status("STRATA_ERR_UNSUPPORTED"),
                     _status("STRATA_ERR_TIMEOUT"))
        lib = L.lib()
        lib.strata_comm_create.restype = c_int
        lib.strata_comm_create.argtypes = [POINTER(_Iface), c_void_p, POINTER(c_void_p)]
        lib.strata_comm_destroy.restype = None
        lib.strata_comm_destroy.argtypes = [c_void_p]
        lib.strata_sync_weights.restype = c_int
        lib.strata_sync_weights.argtypes = [c_void_p]
        self._lib = lib
        cb = self._cb = _Iface()
        cb.version = 1  # STRATA_COMM_IFACE_VERSION
        cb.name = b"torch"
        cb.rank = _INT(lambda ctx: self.rank)
        cb.size = _INT(lambda ctx: self.size)
        cb.node_rank = _INT(lambda ctx: self.rank)  # one node as far as strata's plan goes
        cb.node_size = _INT(lambda ctx: self.size)
        cb.allreduce_f64 = _ALLRED(self._guard(self._allreduce))
        cb.reduce_to_owner = _TOOWNER(self._guard(self._reduce_to_owner))
        cb.broadcast_from_owner = _TOOWNER(self._guard(self._broadcast))
        cb.allgatherv_f32 = _GATHERV(self._unsupported("allgatherv (gather sharding)"))
        cb.reduce_scatter_f32 = _GATHERV(self._unsupported("reduce_scatter (gather sharding)"))
        cb.barrier = _BARRIER(self._guard(
            lambda: self._wait(dist.barrier(self.group, async_op=True), "barrier")))
        cb.reduce_to_owners = _TOOWNERS(self._guard(self._reduce_to_owners))
        cb.split = _SPLIT(self._unsupported("split (HSDP shard groups)"))
        h = c_void_p()
        L.check(lib.strata_comm_create(ctypes.byref(cb), None, ctypes.byref(h)),
                "strata_comm_create")
        self.handle = h.value

    def _guard(self, fn: Any) -> Any:
        def call(ctx: Any, *args: Any) -> int:
            try:
                fn(*args)
                return 0
            except _Timeout as e:
                L.lib().strata_error(c_int(self._err[2]), b"%s",
                                     c_char_p(str(e).encode()[:400]))
                return self._err[2]
            except Exception as e:  # a C caller: report, never raise through ctypes
                L.lib().strata_error(c_int(self._err[0]), b"%s",
                                     c_char_p(f"torch.distributed: {e}".encode()[:400]))
                return self._err[0]
        return call

    def _unsupported(self, what: str) -> Any:
        def call(ctx: Any, *args: Any) -> int:
            return self._err[1]
        return call

    def _wait(self, work: Any, what: str, peer: int = -1) -> None:
        """Wait for an async_op's work, at most timeout_s."""
        if not self.timeout_s:
            work.wait()
            return
        t0 = time.monotonic()
        try:
            work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except RuntimeError as e:
            waited = time.monotonic() - t0
            if waited < 0.9 * self.timeout_s:
                raise
            who = f" for rank {peer}" if peer >= 0 else ""
            raise _Timeout(f"torch.distributed: rank {self.rank} waited {waited:.1f} s in "
                           f"{what}{who} (timeout_s={self.timeout_s:g}): a rank stopped "
                           f"answering ({e})") from None

    @staticmethod
    def _view(ptr: Any, n: int, ctype: Any, dtype: torch.dtype) -> torch.Tensor:
        arr = (ctype * n).from_address(ctypes.cast(ptr, c_void_p).value)
        return torch.frombuffer(arr, dtype=dtype, count=n)

    def _sum_in_order(self, t: torch.Tensor, dst: int) -> None:
        """Sum t over ranks, in rank order from +0, into dst's t."""
        parts = [torch.empty_like(t) for _ in range(self.size)] if self.rank == dst else None
        self._wait(dist.gather(t.clone(), parts, dst=dst, group=self.group, async_op=True),
                   "gather", dst if self.rank != dst else -1)
        if self.rank == dst:
            acc = torch.zeros_like(t)
            for p in parts:
                acc += p
            t.copy_(acc)

    def _allreduce(self, vals: Any, n: int, op: int) -> None:
        if n == 0:
            return
        t = self._view(vals, n, c_double, torch.float64)
        if op == 1:  # STRATA_REDUCE_MAX
            self._wait(dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group, async_op=True),
                       "all_reduce")
            return
        self._sum_in_order(t, 0)
        self._wait(dist.broadcast(t, 0, group=self.group, async_op=True), "broadcast", 0)

    def _reduce_to_owner(self, buf: Any, n: int, owner: int) -> None:
        if n:
            self._sum_in_order(self._view(buf, n, ctypes.c_float, torch.float32), owner)

    def _reduce_to_owners(self, buf: Any, n: int, owners: Any, n_owners: int) -> None:
        if not n:
            return
        t = self._view(buf, n, ctypes.c_float, torch.float32)
        first = owners[0]
        self._sum_in_order(t, first)
        for k in range(1, n_owners):
            o = owners[k]
            if o == first:
                continue
            if self.rank == first:
                self._wait(dist.isend(t, o, group=self.group), "send", o)
            elif self.rank == o:
                self._wait(dist.irecv(t, first, group=self.group), "recv", first)

    def _broadcast(self, buf: Any, n: int, owner: int) -> None:
        if n:
            self._wait(dist.broadcast(self._view(buf, n, ctypes.c_float, torch.float32), owner,
                                      group=self.group, async_op=True),
                       "broadcast", owner if self.rank != owner else -1)

    def close(self) -> None:
        h, self.handle = getattr(self, "handle", None), None
        if h:
            self._lib.strata_comm_destroy(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
