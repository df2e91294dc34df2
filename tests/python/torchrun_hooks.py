"""Run by torchrun --nproc-per-node 2 (tests/python/test_torchrun.py): the
binding's hooks and failure handling over gloo, in one launch:

1. a DDP-wrapped model's parameters are refused (STRATA_ERR_UNSUPPORTED);
2. attach(model): the gradient hooks reduce each layer to its owner during
   backward; 4 steps (the last a gradient accumulation of two micro-batches
   under no_sync) bit-identical to one process stepping the rank-ordered
   mean of the same micro-batch gradients (rank 0 computes that reference);
3. a step refused on one rank only (a non-contiguous gradient on rank 1) raises on
   both, changes nothing, and the next step is still bit-identical;
4. a collective that raises on rank 1 (injected) aborts the process group:
   both ranks get a StrataError (STRATA_ERR_IO) instead of rank 0 waiting.

Prints one "hooks ok" line per rank and exits 0 when all hold."""
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
    return all(torch.equal(p.detach().view(torch.int32), q.detach().view(torch.int32))
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
    print(f"rank {rank}/{world}: hooks ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
