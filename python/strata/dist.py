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
per tensor at strata_hook_backward). HSDP (shard_group_size): split makes
its groups with torch.distributed.new_group, agreed over the whole job so
that every rank creates every group in the same order (TorchComm._split);
a sum to several owners is the rank-order sum on the first, broadcast.
Not here: the gather sharding baseline's allgatherv / reduce_scatter return
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
    _solo = False  # a split of one rank: every collective is the identity
    POLL_S = 0.1  # a pending collective checks the abort flag and the deadline this often

    def __init__(self, group: Any = None, timeout_s: float | None = 600.0, *,
                 _parent: "TorchComm | None" = None,
                 _members: "list[int] | None" = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise L.StrataError("STRATA_ERR_STATE", "torch.distributed is not initialized")
        self.group = group
        root = self._root = self if _parent is None else _parent._root
        # members: the global ranks of this communicator in strata's rank order
        # (a split's are ordered by key; the root's are its group's)
        if _members is None:
            _members = (list(range(dist.get_world_size())) if group is None else
                        list(dist.get_process_group_ranks(group)))
        self.members = list(_members)
        me = dist.get_rank()
        self.rank = self.members.index(me)
        self.size = len(self.members)
        # the group's own rank order (torch's gather lists): new_group sorts its ranks
        self._group_order = (self.members if group is None and _parent is None
                             else sorted(self.members))
        self.timeout_s = (float(timeout_s) if timeout_s else 0.0) if _parent is None \
            else _parent.timeout_s
        self._err = (_status("STRATA_ERR_IO"), _status("STRATA_ERR_UNSUPPORTED"),
                     _status("STRATA_ERR_TIMEOUT"))
        self._failed: "str | None" = None  # set by abort() (the root's serves every split)
        if _parent is None:
            # the abort flag in the group's store: the same key on every rank (the
            # ranks create their communicators in the same order); splits share it
            TorchComm._created += 1
            self._abort_key = f"strata/abort/{TorchComm._created}"
            self._has_store = self._store() is not None
            self._children: list[TorchComm] = []  # splits: alive as long as the root
            self._groups: dict[tuple[int, ...], Any] = {}  # new_group's, by sorted ranks
        else:
            self._abort_key = root._abort_key
            self._has_store = root._has_store
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
        cb.barrier = _BARRIER(self._guard(self._barrier))
        cb.reduce_to_owners = _TOOWNERS(self._guard(self._reduce_to_owners))
        cb.split = _SPLIT(self._guard(self._split))
        h = c_void_p()
        L.check(lib.strata_comm_create(ctypes.byref(cb), None, ctypes.byref(h)),
                "strata_comm_create")
        self.handle = h.value
        # a split's handle is strata's (strata_comm_destroy at strata_destroy)
        self._own_handle = _parent is None

    @property
    def failed(self) -> "str | None":
        return self._root._failed

    def _g(self, r: int) -> int:
        """The global rank of this communicator's rank r (torch's dst/src)."""
        return self.members[r]

    def _split(self, color: int, key: int, out: Any) -> None:
        """MPI_Comm_split over torch.distributed.new_group. new_group must be
        entered by every rank of the job, for every group, in the same order
        (torch's rule, even for the ranks outside the group): so a split is
        agreed over the root communicator (every rank tells its parent's
        members, its color and its key; one all_gather) and every rank then
        creates every new group of the round in one order. The rule this
        asks, stronger than comm.h's: every rank of the root splits at the
        same time, each its own communicator -- strata_create does (its
        splits are the same on every rank: the shard groups, then the HSDP
        replica sets and their node/leader splits); a split on some ranks
        only waits and fails after timeout_s (STRATA_ERR_TIMEOUT). A group
        of one rank needs no torch group (its collectives are identities); a
        group with the same ranks as one made before reuses it."""
        root = self._root
        W = root.size
        mine = torch.full((W + 2,), -1, dtype=torch.int64)
        mine[:self.size] = torch.tensor([root.members.index(m) for m in self.members])
        mine[W], mine[W + 1] = color, key
        rows = [torch.empty_like(mine) for _ in range(W)]
        root._wait(dist.all_gather(rows, mine, group=root.group, async_op=True),
                   "all_gather (split)")
        # every round's new groups, the same list on every rank: per parent
        # (its root ranks in its order) and color, the ranks ordered by
        # (key, parent rank), as global ranks
        found: dict[tuple[tuple[int, ...], int], list[tuple[int, int, int]]] = {}
        for r in range(W):
            row = rows[r].tolist()
            parent = tuple(x for x in row[:W] if x >= 0)
            found.setdefault((parent, row[W]), []).append((row[W + 1], parent.index(r), r))
        children = sorted(tuple(root.members[r] for _, _, r in sorted(v))
                          for v in found.values())
        for ch in children:
            srt = tuple(sorted(ch))
            if len(ch) > 1 and srt not in root._groups:
                whole = list(srt) == sorted(root.members) and root.group is None
                root._groups[srt] = None if whole else \
                    dist.new_group(list(srt), backend=dist.get_backend(root.group))
        parent = tuple(root.members.index(m) for m in self.members)
        ch = tuple(root.members[r] for _, _, r in sorted(found[(parent, color)]))
        pg = root._groups.get(tuple(sorted(ch)))
        child = TorchComm(pg, _parent=self, _members=list(ch))
        if len(ch) == 1:
            child._solo = True
        root._children.append(child)
        out[0] = child.handle

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
        self._root._failed = (f"{reason}; strata's collectives on this process group were "
                              "aborted so that every rank fails instead of waiting on this one")
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
        """Sum t over ranks, in this communicator's rank order from +0, into
        dst's t (dst: a rank of this communicator)."""
        if self._solo:
            return
        parts = [torch.empty_like(t) for _ in range(self.size)] if self.rank == dst else None
        self._wait(dist.gather(t.clone(), parts, dst=self._g(dst), group=self.group,
                               async_op=True),
                   "gather", dst if self.rank != dst else -1)
        if self.rank == dst:
            acc = torch.zeros_like(t)
            for m in self.members:  # torch's list is in the group's order
                acc += parts[self._group_order.index(m)]
            t.copy_(acc)

    def _allreduce(self, vals: Any, n: int, op: int) -> None:
        if n == 0 or self._solo:
            return
        t = self._view(vals, n, c_double, torch.float64)
        if op == 1:  # STRATA_REDUCE_MAX
            self._wait(dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group, async_op=True),
                       "all_reduce")
            return
        self._sum_in_order(t, 0)
        self._wait(dist.broadcast(t, self._g(0), group=self.group, async_op=True),
                   "broadcast", 0)

    def _barrier(self) -> None:
        if not self._solo:
            self._wait(dist.barrier(self.group, async_op=True), "barrier")

    def _reduce_to_owner(self, buf: Any, n: int, owner: int) -> None:
        if n:
            self._sum_in_order(self._view(buf, n, ctypes.c_float, torch.float32), owner)

    def _reduce_to_owners(self, buf: Any, n: int, owners: Any, n_owners: int) -> None:
        if not n or self._solo:
            return
        t = self._view(buf, n, ctypes.c_float, torch.float32)
        first = owners[0]
        self._sum_in_order(t, first)
        if any(owners[k] != first for k in range(1, n_owners)):
            # the sum to the other owners: a broadcast over the communicator
            # (the others' buf is unspecified after, comm.h). Not send/recv:
            # gloo's point-to-point work never reports is_completed() before
            # wait(), which _wait's polling (timeouts, aborts) needs.
            self._wait(dist.broadcast(t, self._g(first), group=self.group, async_op=True),
                       "broadcast", first if self.rank != first else -1)

    def _broadcast(self, buf: Any, n: int, owner: int) -> None:
        if n and not self._solo:
            self._wait(dist.broadcast(self._view(buf, n, ctypes.c_float, torch.float32),
                                      self._g(owner), group=self.group, async_op=True),
                       "broadcast", owner if self.rank != owner else -1)

    def close(self) -> None:
        """Destroy the handle (after the runtime that used it: strata destroyed
        the splits' handles already) and drop the splits and their torch
        groups, so that none outlives destroy_process_group (a gloo group
        destroyed at interpreter exit can end the process: "terminate called
        without an active exception")."""
        h, self.handle = getattr(self, "handle", None), None
        if h and getattr(self, "_own_handle", False):
            self._lib.strata_comm_destroy(h)
        for c in getattr(self, "_children", []):
            c.group = None
        if getattr(self, "_own_handle", False):
            self._children = []
            self._groups = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
