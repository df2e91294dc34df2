"""Run by torchrun --nproc-per-node 2 (tests/python/test_torchrun.py): the
binding's hooks and failure handling over gloo, in one launch:

1. a DDP-wrapped model's parameters are refused (STRATA_ERR_UNSUPPORTED);
2. attach(model): the gradient hooks reduce each layer to its owner during
   backward; 4 steps (the last a gradient accumulation of two micro-batches
   under no_sync) bit-identical to one process stepping the rank-ordered
   mean of the same micro-batch gradients (rank 0 computes that reference);
   bfloat16 parameters too (float32 masters and gradient copies);
2c. ZeRO-3 (managed=True): refused without attach; attached, each rank
   keeps its owned weights and the others' only around each layer's forward
   and backward (the module hooks); 4 steps (the last a no_sync gradient
   accumulation) bit-identical to one process, and the peak of the weights
   held per rank (strata's param_bytes_peak plus the binding's copies) below
   the resident mode's (printed with the RSS); resumed from step 2 through
   torch.distributed.checkpoint (load_state_dict, the model's weights
   loaded before attach) and through load(dir), bit-identical;
3. a step refused on one rank only (a non-contiguous gradient on rank 1) raises on
   both, changes nothing, and the next step is still bit-identical;
4. a collective that raises on rank 1 (injected) aborts the process group:
   both ranks get a StrataError (STRATA_ERR_IO) instead of rank 0 waiting.

Prints one "hooks ok" line per rank and exits 0 when all hold."""
import os
import shutil
import sys

import torch
import torch.distributed as dist
from torch import nn

import strata
import strata.dist
import strata.torch as st


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.l1 = nn.Linear(8, 12)
        self.l2 = nn.Linear(12, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        h = h + self.l2(torch.tanh(self.l1(h)))
        return self.head(self.norm(h))


class Deep(nn.Module):
    """For ZeRO-3: layers of one size, so that no rank owns most of the bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 16)
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))
        self.head = nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for b in self.blocks:
            h = h + torch.tanh(b(h))
        return self.head(h)


def make_deep() -> Deep:
    torch.manual_seed(0)
    return Deep()


def make() -> Net:
    torch.manual_seed(0)
    return Net()


def batch(t: int, r: int, k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * t + 10 * k + r)
    return torch.randint(0, 16, (4, 6), generator=g), torch.randint(0, 16, (4, 6), generator=g)


def loss_of(m: Net, xy: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = xy
    return nn.functional.cross_entropy(m(x).reshape(-1, 16), y.reshape(-1))


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p.detach().view(torch.uint8), q.detach().view(torch.uint8))
               for p, q in zip(a.parameters(), b.parameters()))


def expect(ok: bool, what: str) -> None:
    if not ok:
        print(f"rank {dist.get_rank()}: FAILED {what}", flush=True)
        sys.exit(1)


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    kw = {"precondition_frequency": 2}

    # 1. DDP-wrapped parameters
    wrapped = nn.parallel.DistributedDataParallel(make())
    try:
        st.Shampoo(wrapped.module.named_parameters(), **kw)
        expect(False, "DDP parameters accepted")
    except strata.StrataError as e:
        expect(e.status == "STRATA_ERR_UNSUPPORTED" and "DistributedDataParallel" in e.message,
               f"DDP refusal: {e}")
    del wrapped

    # 2. attach: reduce-to-owner in the gradient hooks
    model = make()
    opt = st.Shampoo(model.named_parameters(), model=model, **kw).attach(model)
    ref_model = make()
    ref = st.Shampoo(ref_model.named_parameters(), model=ref_model, distributed=False, **kw)

    def ref_step(t: int, micro: int) -> None:
        acc = [torch.zeros_like(p) for p in ref_model.parameters()]
        for r in range(world):  # each rank's gradient, summed in rank order from +0
            ref_model.zero_grad(set_to_none=True)
            for k in range(micro):
                loss_of(ref_model, batch(t, r, k)).backward()
            for a, p in zip(acc, ref_model.parameters()):
                a += p.grad
        for a, p in zip(acc, ref_model.parameters()):
            p.grad = a * (1.0 / world)
        ref.step()
        ref.zero_grad(set_to_none=True)

    for t in range(1, 5):
        micro = 2 if t == 4 else 1
        for k in range(micro):
            if k < micro - 1:
                with opt.no_sync():
                    loss_of(model, batch(t, rank, k)).backward()
            else:
                loss_of(model, batch(t, rank, k)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ref_step(t, micro)
        expect(same(model, ref_model), f"attach step {t} bit-identical")
    s = opt.stats()
    expect(s["missing_backward_hooks"] == 0 and s["backward_hooks"] == 4 * 5 and
           s["forward_hooks"] == 5 * 5, f"hook counts {s['forward_hooks']} "
           f"{s['backward_hooks']} {s['missing_backward_hooks']}")

    # 2b. bfloat16 parameters with attach: the float32 gradient copies are
    # reduced in the hooks, the float32 masters stepped, bit-identical
    lowp = make().to(torch.bfloat16)
    lopt = st.Muon(lowp.named_parameters(), model=lowp).attach(lowp)
    ref_lp = make().to(torch.bfloat16)
    ref32 = [p.detach().float().clone() for p in ref_lp.parameters()]
    ref_l = st.Muon(list(zip([n for n, _ in ref_lp.named_parameters()], ref32)),
                    embedding_patterns=("emb",), distributed=False)  # as model= routes it
    for t in range(1, 3):
        loss_of(lowp, batch(t, rank)).float().backward()
        lopt.step()
        lopt.zero_grad(set_to_none=True)
        acc = [torch.zeros_like(w) for w in ref32]
        for r in range(world):
            ref_lp.zero_grad(set_to_none=True)
            loss_of(ref_lp, batch(t, r)).float().backward()
            for a, p in zip(acc, ref_lp.parameters()):
                a += p.grad.float()
        for a, w in zip(acc, ref32):
            w.grad = a * (1.0 / world)
        ref_l.step()
        ref_l.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, w in zip(ref_lp.parameters(), ref32):
                p.copy_(w)
        expect(all(torch.equal(m.view(torch.int32), w.view(torch.int32))
                   for m, w in zip(lopt._master, ref32)), f"bfloat16 step {t} bit-identical")
        expect(same(lowp, ref_lp), f"bfloat16 weights at step {t}")

    # 2c. ZeRO-3: managed weights through the module hooks, against the
    # resident mode on the same model
    rmodel = make_deep()
    ropt = st.Shampoo(rmodel.named_parameters(), model=rmodel, **kw).attach(rmodel)
    for t in range(1, 3):
        loss_of(rmodel, batch(t, rank)).backward()
        ropt.step()
        ropt.zero_grad(set_to_none=True)
    zmodel = make_deep()
    zopt = st.Shampoo(zmodel.named_parameters(), model=zmodel, managed=True, **kw)
    for p in zmodel.parameters():
        p.grad = torch.ones_like(p)
    try:
        zopt.step()
        expect(False, "managed=True stepped without attach")
    except strata.StrataError as e:
        expect(e.status == "STRATA_ERR_STATE" and "attach" in e.message, f"no attach: {e}")
    zopt.zero_grad(set_to_none=True)
    zopt.attach(zmodel)
    zref_model = make_deep()
    zref = st.Shampoo(zref_model.named_parameters(), model=zref_model, distributed=False, **kw)
    owned = [i for i, m in enumerate(zopt._mine) if m]
    expect(all(zopt._managed) and 0 < len(owned) < len(zopt._params),
           f"managed {zopt._managed}, owned {owned}")
    def ztrain(m: nn.Module, o: st.StrataOptimizer, t: int) -> None:
        micro = 2 if t == 4 else 1
        for k in range(micro):
            if k < micro - 1:
                with o.no_sync():
                    loss_of(m, batch(t, rank, k)).backward()
            else:
                loss_of(m, batch(t, rank, k)).backward()
        o.step()
        o.zero_grad(set_to_none=True)

    import tempfile
    import torch.distributed.checkpoint as dcp
    where = [tempfile.mkdtemp(prefix="strata-z3-") if rank == 0 else None]
    dist.broadcast_object_list(where, src=0)
    zdir = where[0]
    for t in range(1, 5):
        micro = 2 if t == 4 else 1
        ztrain(zmodel, zopt, t)
        acc = [torch.zeros_like(p) for p in zref_model.parameters()]
        for r in range(world):
            zref_model.zero_grad(set_to_none=True)
            for k in range(micro):
                loss_of(zref_model, batch(t, r, k)).backward()
            for a, p in zip(acc, zref_model.parameters()):
                a += p.grad
        for a, p in zip(acc, zref_model.parameters()):
            p.grad = a * (1.0 / world)
        zref.step()
        zref.zero_grad(set_to_none=True)
        if t == 2:  # ZeRO-3 checkpoints: DCP (state_dict) and strata's own (save)
            # the weights: the one process's, bit-identical (checked below)
            zw2 = {n: p.detach().clone() for n, p in zref_model.named_parameters()}
            dcp.save({"optim": zopt}, checkpoint_id=os.path.join(zdir, "dcp"))
            zopt.save(os.path.join(zdir, "strata"))
        zp, rp = list(zmodel.parameters()), list(zref_model.parameters())
        expect(all(torch.equal(zp[i].view(torch.int32), rp[i].view(torch.int32))
                   for i in owned), f"ZeRO-3 step {t}: owned weights bit-identical")
        expect(all(zp[i].untyped_storage().nbytes() == 0 for i in range(len(zp))
                   if i not in owned), f"ZeRO-3 step {t}: the others' weights released")
    zs, rs = zopt.stats(), ropt.stats()
    zpeak = zs["weight_bytes_peak"]
    full = sum(p.numel() * 4 for p in zmodel.parameters())
    with open("/proc/self/status") as f:
        rss = next((ln.split()[1] for ln in f if ln.startswith("VmHWM")), "?")
    zl, rl = zopt.memory_ledger(), ropt.memory_ledger()
    zw, rw = zl["host"]["weights"]["peak"], rl["host"]["weights"]["peak"]
    print(f"rank {rank}: weights held at peak: ZeRO-3 {zpeak} B (strata's peak "
          f"{zs['param_bytes_peak']}, copies' {zs['managed_copy_bytes_peak']}; owns "
          f"{len(owned)} of {len(zp)}), resident {rs['weight_bytes_peak']} B (model {full} B); "
          f"ledger weights peak ZeRO-3 {zw} B, resident {rw} B; ledger total peak ZeRO-3 "
          f"{zl['total_peak']} B, resident {rl['total_peak']} B; VmHWM {rss} kB", flush=True)
    expect(rs["weight_bytes_peak"] >= full and zpeak < rs["weight_bytes_peak"] and
           rw >= full and zw < rw and zl["total_peak"] < rl["total_peak"],
           f"ZeRO-3 peak {zpeak} (ledger {zw}, total {zl['total_peak']}) below resident "
           f"{rs['weight_bytes_peak']} (ledger {rw}, total {rl['total_peak']})")
    # ZeRO-3 resumes from step 2: load_state_dict through dcp.load (the model's
    # weights from its own state dict before attach), and load(dir) (the
    # weights from strata's checkpoint, into a model at its initial weights);
    # steps 3-4 bit-identical to the uninterrupted run
    import time
    tz = time.monotonic()
    z2model, z3model = make_deep(), make_deep()
    z2model.load_state_dict(zw2)
    z2 = st.Shampoo(z2model.named_parameters(), model=z2model, managed=True, **kw).attach(z2model)
    z3 = st.Shampoo(z3model.named_parameters(), model=z3model, managed=True, **kw).attach(z3model)
    dcp.load({"optim": z2}, checkpoint_id=os.path.join(zdir, "dcp"))
    z3.load(os.path.join(zdir, "strata"))
    for t in (3, 4):
        ztrain(z2model, z2, t)
        ztrain(z3model, z3, t)
    with zopt.materialized(), z2.materialized(), z3.materialized():
        expect(same(z2model, zmodel) and same(z3model, zmodel) and same(zmodel, zref_model),
               "ZeRO-3 resumed (dcp.load, load) bit-identical to the uninterrupted run")
    expect(all(z2._mine[i] == zopt._mine[i] and z2._managed[i] for i in range(len(zopt._params))),
           "ZeRO-3 resumed: managed, the same owners")
    print(f"rank {rank}: ZeRO-3 resumed through dcp.load and load(dir): bit-identical "
          f"({time.monotonic() - tz:.1f} s with the checkpoints, loaded machine)", flush=True)
    del z2, z3
    dist.barrier()
    if rank == 0:
        shutil.rmtree(zdir, ignore_errors=True)
    try:
        zopt.detach()
        expect(False, "ZeRO-3 detach accepted")
    except strata.StrataError as e:
        expect(e.status == "STRATA_ERR_STATE", f"ZeRO-3 detach: {e}")
    with zopt.materialized():  # every weight on every rank: the whole model bit-identical
        expect(same(zmodel, zref_model), "ZeRO-3: all weights bit-identical")
        x = batch(9, 0)[0]
        with torch.no_grad():
            expect(torch.equal(zmodel(x), zref_model(x)), "ZeRO-3 forward bit-identical")
    expect(all(p.untyped_storage().nbytes() == 0 for i, p in enumerate(zmodel.parameters())
               if i not in owned), "ZeRO-3: released after materialized()")
    del zopt, zref, ropt

    # 3. a step refused on rank 1 only: both raise, nothing changes
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    if rank == 1:  # a non-contiguous gradient (torch refuses a float64 one itself)
        w = model.l1.weight
        w.grad = torch.ones(w.shape[::-1]).t()
    try:
        opt.step()
        expect(False, "a step refused on rank 1 went through")
    except strata.StrataError as e:
        want = "STRATA_ERR_INVALID_ARG" if rank == 1 else "STRATA_ERR_STATE"
        expect(e.status == want, f"refused step: {e}")
    opt.zero_grad(set_to_none=True)
    loss_of(model, batch(5, rank)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    ref_step(5, 1)
    expect(same(model, ref_model), "after the refused step, bit-identical")

    # 4. a collective that raises on rank 1: the group is aborted, both raise
    if rank == 1:
        def boom(self, *args):  # noqa: ANN001
            raise RuntimeError("injected failure")
        strata.dist.TorchComm._reduce_to_owner = boom
    store = dist.distributed_c10d._get_default_store()  # outlives the group
    opt2 = st.Muon(make().named_parameters())
    for p in opt2._params:
        p.grad = torch.ones_like(p)
    try:
        opt2.step()
        expect(False, "a failed collective went unnoticed")
    except strata.StrataError as e:
        expect(e.status == "STRATA_ERR_IO" and "aborted" in e.message, f"abort: {e}")
        if rank == 0:
            print(f"rank 0 saw: {e.message[:160]}", flush=True)
    # rank 1 stays alive until rank 0 has raised too: without the abort rank 0
    # would wait in its gather for ever (and the test fail by its timeout)
    store.set(f"raised{rank}", "1")
    store.wait([f"raised{1 - rank}"])
    del store  # not kept to interpreter exit (its threads would outlive the group)
    print(f"rank {rank}/{world}: hooks ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
