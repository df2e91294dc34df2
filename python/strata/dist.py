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

Failures: a collective that raises on one rank aborts strata's use of the
group (abort(): a flag in the group's store, which every pending collective
checks each POLL_S while it waits; NCCL groups are aborted too), so the
other ranks' collectives fail within that time and every rank's strata call
returns STRATA_ERR_IO (a StrataError in the binding) instead of waiting for
the group's timeout; the binding's checks of a step run on
every rank first and are agreed by one small all_reduce (agree()), so a
step refused on one rank is refused on all, with nothing changed.
"""
from __future__ import annotations

import ctypes
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

    _created = 0
    POLL_S = 0.1  # a pending collective checks the abort flag and the deadline this often

    def __init__(self, group: Any = None, timeout_s: float | None = 600.0) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise L.StrataError("STRATA_ERR_STATE", "torch.distributed is not initialized")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout_s = float(timeout_s) if timeout_s else 0.0
        self._err = (_status("STRATA_ERR_IO"), _status("STRATA_ERR_UNSUPPORTED"),
                     _status("STRATA_ERR_TIMEOUT"))
        self.failed: "str | None" = None  # set by abort()
        # the abort flag in the group's store: the same key on every rank (the
        # ranks create their communicators in the same order)
        TorchComm._created += 1
        self._abort_key = f"strata/abort/{TorchComm._created}"
        self._has_store = self._store() is not None
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
            if self.failed is not None:
                return self._report(f"the process group was aborted earlier ({self.failed})")
            try:
                fn(*args)
                return 0
            except _Timeout as e:
                L.lib().strata_error(c_int(self._err[2]), b"%s",
                                     c_char_p(str(e).encode()[:400]))
                return self._err[2]
            except Exception as e:  # a C caller: report, never raise through ctypes
                self.abort(f"torch.distributed on rank {self.rank}: {e}")
                return self._report(self.failed or str(e))
        return call

    def _report(self, msg: str) -> int:
        L.lib().strata_error(c_int(self._err[0]), b"%s", c_char_p(msg.encode()[:600]))
        return self._err[0]

    @staticmethod
    def _store() -> Any:
        """The default group's store, looked up when needed (a reference kept
        past destroy_process_group outlives the group's threads at exit);
        None when there is none."""
        try:
            from torch.distributed.distributed_c10d import _get_default_store
            return _get_default_store()
        except Exception:
            return None

    def abort(self, reason: str) -> None:
        """Abort strata's collectives after a failed one (or an error on this
        rank while the others may be inside one): the flag in the store makes
        the other ranks' pending and later collectives fail within POLL_S
        (_wait) instead of waiting for the group's timeout, so every rank
        raises; a non-gloo group (NCCL) is also aborted. strata's use of the group ends (every later callback
        fails: STRATA_ERR_IO); re-initialize it to go on. Idempotent."""
        if self.failed is not None:
            return
        self.failed = (f"{reason}; strata's collectives on this process group were aborted "
                       "so that every rank fails instead of waiting on this one")
        try:  # the other ranks' pending and later collectives see it (_wait)
            store = self._store()
            if store is not None:
                store.set(self._abort_key, reason[:400])
        except Exception:
            pass
        try:
            if dist.get_backend(self.group) != "gloo":  # NCCL: its abort wakes the peers
                from torch.distributed.distributed_c10d import _abort_process_group
                _abort_process_group(self.group)
        except Exception:
            pass

    def agree(self, err: "BaseException | None") -> None:
        """Every rank's verdict on a step before any collective of it: one
        small all_reduce. Raises on every rank when any refused (this rank's
        own error, else a StrataError naming the ranks that refused), so a
        refusal on one rank leaves no other waiting, and nothing changed on
        any of them (the group stays usable)."""
        if self.failed is not None:
            raise L.StrataError("STRATA_ERR_IO", self.failed)
        flags = torch.zeros(self.size, dtype=torch.int32)
        flags[self.rank] = 0 if err is None else 1
        try:
            self._wait(dist.all_reduce(flags, group=self.group, async_op=True))
        except Exception as e:
            self.abort(f"torch.distributed on rank {self.rank}: {e}")
            raise L.StrataError("STRATA_ERR_IO", self.failed or str(e)) from err
        if err is not None:
            raise err
        bad = [r for r in range(self.size) if flags[r]]
        if bad:
            raise L.StrataError("STRATA_ERR_STATE", f"rank(s) {bad} refused this step (see "
                                "their error); nothing changed on any rank")

    def _unsupported(self, what: str) -> Any:
        def call(ctx: Any, *args: Any) -> int:
            return self._err[1]
        return call

    def _wait(self, work: Any, what: str = "all_reduce", peer: int = -1) -> None:
        """Wait for an async_op's work: at most timeout_s (issue #22 item 11),
        and checking every POLL_S whether another rank aborted (its flag in
        the store): then raise instead of waiting on a rank that will not
        come. gloo has no abort that wakes a peer's pending operation
        (ProcessGroup.abort and _abort_process_group leave its sockets open).
        Polls is_completed() with short sleeps (from 20 us up to 1 ms) rather
        than wait(timeout=...): a timed-out wait made 2-rank runs abort at
        exit ("terminate called without an active exception") about one run
        in three. On expiry: _Timeout naming this rank, the call and the peer
        (STRATA_ERR_TIMEOUT to the C caller)."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s if self.timeout_s else None
        if not self._has_store and deadline is None:
            work.wait()
            return
        nap, next_check = 2e-5, t0 + self.POLL_S
        while not work.is_completed():
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                who = f" for rank {peer}" if peer >= 0 else ""
                raise _Timeout(f"torch.distributed: rank {self.rank} waited {now - t0:.1f} s "
                               f"in {what}{who} (timeout_s={self.timeout_s:g}): a rank "
                               f"stopped answering")
            if self._has_store and now >= next_check:
                next_check = now + self.POLL_S
                store = self._store()
                if store is not None and store.check([self._abort_key]):
                    why = store.get(self._abort_key).decode(errors="replace")
                    raise RuntimeError(f"another rank aborted: {why}")
        work.wait()  # raises the collective's own error, if any

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
