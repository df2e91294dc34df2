"""Run by torchrun (tests/python/test_torchrun.py): N ranks on gloo, each
with its micro-batch's gradients, against one process (rank 0, no process
group use) stepping the mean of the same N gradients, as gradient
accumulation over N micro-batches gives it. Owner sharding (each matrix
stepped whole by its owner, the new weights broadcast). Exits 0 when every
weight is bit-identical on every rank, else 1."""
import os
import sys

import torch
import torch.distributed as dist

import strata.torch as st

SHAPES = {"blocks.0.attn.weight": (12, 8), "blocks.0.mlp.weight": (8, 12),
          "blocks.1.attn.weight": (10, 6), "blocks.0.norm.weight": (8,), "head.bias": (6,)}


def params():
    g = torch.Generator().manual_seed(0)
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g) * 0.5)) for n, s in SHAPES.items()]


def grads(t, r):
    g = torch.Generator().manual_seed(1000 * t + r)
    return [torch.randn(*s, generator=g) for s in SHAPES.values()]


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    opt_name = sys.argv[1] if len(sys.argv) > 1 else "shampoo"
    cls = {"shampoo": st.Shampoo, "muon": st.Muon, "adamw": st.AdamW}[opt_name]
    kw = {"precondition_frequency": 2} if opt_name == "shampoo" else {}
    if len(sys.argv) > 2 and sys.argv[2] == "async1":  # refreshes on a worker, S = 1
        kw.update(async_roots=True, staleness=1, workers=1, stagger_refresh=True)
    named = params()
    o = cls(named, **kw)
    assert o._comm is not None
    ref_named = params()
    ref = cls(ref_named, distributed=False, **kw)
    for t in range(1, 6):
        mine = grads(t, rank)
        for i, ((_, p), g) in enumerate(zip(named, mine)):
            p.grad = None if (t == 3 and i == 0) else g  # skipped on every rank at step 3
        o.step()
        o.zero_grad(set_to_none=True)
        # one process: the N micro-batches accumulated, then averaged
        for i, (_, p) in enumerate(ref_named):
            acc = torch.zeros(SHAPES[ref_named[i][0]])
            for r in range(world):
                acc += grads(t, r)[i]
            p.grad = None if (t == 3 and i == 0) else acc * (1.0 / world)
        ref.step()
        ref.zero_grad(set_to_none=True)
    ok = all(torch.equal(p.detach().view(torch.int32), q.detach().view(torch.int32))
             for (_, p), (_, q) in zip(named, ref_named))
    s = o.stats()
    ok = ok and s["world_size"] == world and 0 < s["owned_params"] < len(SHAPES)
    print(f"rank {rank}/{world} {opt_name}: {'bit-identical' if ok else 'DIFFERS'} "
          f"(owns {s['owned_params']} of {len(SHAPES)} parameters)", flush=True)
    flag = torch.tensor([0 if ok else 1])
    dist.all_reduce(flag)
    del o, ref
    dist.destroy_process_group()
    return 0 if flag.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
