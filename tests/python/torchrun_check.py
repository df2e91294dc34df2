"""Run by torchrun (tests/python/test_torchrun.py): N ranks on gloo, each
with its micro-batch's gradients, against one process (rank 0, no process
group use) stepping the mean of the same N gradients, as gradient
accumulation over N micro-batches gives it. Owner sharding (each matrix
stepped whole by its owner, the new weights broadcast); HSDP (mode
"hsdpK": shard_group_size K, the matrices owner-sharded within each group of
K ranks and replicated across the groups, each refresh computed by one
replica and shipped to the others); ZeRO-3 over a small model (mode
"zero3", "zero3hsdpK": managed=True through attach's module hooks, with HSDP
too). Arguments: cases OPT:MODE (one
launch, several cases: torchrun's start-up is the slow part), or the
older OPT MODE. Exits 0 when every weight is bit-identical on every rank in
every case, else 1."""
import gc
import sys

import torch
import torch.distributed as dist

import strata.torch as st

SHAPES = {"blocks.0.attn.weight": (12, 8), "blocks.0.mlp.weight": (8, 12),
          "blocks.1.attn.weight": (10, 6), "blocks.0.norm.weight": (8,), "head.bias": (6,)}
CLASSES = {"shampoo": st.Shampoo, "muon": st.Muon, "adamw": st.AdamW, "soap": st.SOAP,
           "kl-shampoo": st.KLShampoo}


def params():
    g = torch.Generator().manual_seed(0)
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g) * 0.5)) for n, s in SHAPES.items()]


def grads(t, r):
    g = torch.Generator().manual_seed(1000 * t + r)
    return [torch.randn(*s, generator=g) for s in SHAPES.values()]


def run_zero3(opt_name: str, mode: str, rank: int, world: int) -> bool:
    """managed=True over torchrun_hooks' Deep model: 3 steps, the whole
    model bit-identical (opt.materialized()) to one process."""
    from torchrun_hooks import batch, loss_of, make_deep, same
    cls = CLASSES[opt_name]
    kw = {"precondition_frequency": 2}
    k = int(mode[9:]) if mode.startswith("zero3hsdp") else 0
    m = make_deep()
    o = cls(m.named_parameters(), model=m, managed=True,
            **dict(kw, shard_group_size=k) if k else kw).attach(m)
    rm = make_deep()
    r = cls(rm.named_parameters(), model=rm, distributed=False, **kw)
    for t in range(1, 4):
        loss_of(m, batch(t, rank)).backward()
        o.step()
        o.zero_grad()
        acc = [torch.zeros_like(p) for p in rm.parameters()]
        for q in range(world):
            rm.zero_grad(set_to_none=True)
            loss_of(rm, batch(t, q)).backward()
            for a, p in zip(acc, rm.parameters()):
                a += p.grad
        for a, p in zip(acc, rm.parameters()):
            p.grad = a * (1.0 / world)
        r.step()
        r.zero_grad()
    peak = o.stats()["weight_bytes_peak"]  # before materialized(), which holds everything
    full = sum(p.numel() * 4 for p in rm.parameters())
    with o.materialized():
        ok = same(m, rm)
    ok = ok and all(o._managed) and peak < full
    print(f"rank {rank}/{world} {opt_name} {mode}: {'bit-identical' if ok else 'DIFFERS'} "
          f"(owns {sum(o._mine)} of {len(o._mine)} parameters, weights held at peak "
          f"{peak} of {full} B)", flush=True)
    del o, r
    return ok


def run_case(opt_name: str, mode: str, rank: int, world: int) -> bool:
    if mode.startswith("zero3"):
        return run_zero3(opt_name, mode, rank, world)
    cls = CLASSES[opt_name]
    kw = {"precondition_frequency": 2} if opt_name in ("shampoo", "soap", "kl-shampoo") else {}
    if mode == "async1":  # refreshes on a worker, S = 1
        kw.update(async_roots=True, staleness=1, workers=1, stagger_refresh=True)
    k = int(mode[4:]) if mode.startswith("hsdp") else 0
    if k:
        kw["shard_group_size"] = k
    # the parameter without a gradient at step 3: a matrix (HSDP refuses to
    # skip a matrix whose refreshes are shipped every step: a vector then)
    skip = 3 if k else 0
    named = params()
    o = cls(named, **kw)
    assert o._comm is not None
    ref_named = params()
    ref = cls(ref_named, distributed=False, **{a: b for a, b in kw.items()
                                                if a != "shard_group_size"})
    for t in range(1, 6):
        mine = grads(t, rank)
        for i, ((_, p), g) in enumerate(zip(named, mine)):
            p.grad = None if (t == 3 and i == skip) else g  # skipped on every rank at step 3
        o.step()
        o.zero_grad(set_to_none=True)
        # one process: the N micro-batches accumulated, then averaged
        for i, (_, p) in enumerate(ref_named):
            acc = torch.zeros(SHAPES[ref_named[i][0]])
            for r in range(world):
                acc += grads(t, r)[i]
            p.grad = None if (t == 3 and i == skip) else acc * (1.0 / world)
        ref.step()
        ref.zero_grad(set_to_none=True)
    ok = all(torch.equal(p.detach().view(torch.int32), q.detach().view(torch.int32))
             for (_, p), (_, q) in zip(named, ref_named))
    if not ok:
        print(f"rank {rank} {opt_name} {mode}: weights differ:",
              [n for (n, p), (_, q) in zip(named, ref_named) if not torch.equal(p, q)],
              flush=True)
    s = o.stats()
    group = k or world
    # a group of one rank (HSDP with K = 1: replicas only) owns everything
    owned_ok = 0 < s["owned_params"] < len(SHAPES) if group > 1 else \
        s["owned_params"] == len(SHAPES)
    ok = ok and s["world_size"] == world and owned_ok
    extra = ""
    if k and opt_name != "muon":
        # each block refresh computed by one replica (the one process's
        # count over all ranks, not once per group) and shipped to the others
        got = torch.tensor([s["refresh_blocks_computed"], s["refresh_blocks_received"]],
                           dtype=torch.int64)
        mine_got = got.clone()
        dist.all_reduce(got)
        one = ref.stats()["refresh_blocks_computed"]
        ok = ok and one > 0 and got[0] == one and got[1] > 0
        extra = (f", refreshed {mine_got[0].item()} blocks, received {mine_got[1].item()}; "
                 f"all ranks {got[0].item()} / {got[1].item()}, one process {one}")
    print(f"rank {rank}/{world} {opt_name} {mode}: {'bit-identical' if ok else 'DIFFERS'} "
          f"(owns {s['owned_params']} of {len(SHAPES)} parameters in a group of {group}"
          f"{extra})", flush=True)
    del o, ref
    return ok


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    args = sys.argv[1:] or ["shampoo"]
    if ":" not in args[0]:
        args = [f"{args[0]}:{args[1] if len(args) > 1 else 'sync'}"]
    ok = True
    for case in args:
        opt_name, mode = case.split(":")
        ok = run_case(opt_name, mode, rank, world) and ok
    flag = torch.tensor([0 if ok else 1])
    dist.all_reduce(flag)
    gc.collect()  # the optimizers' runtimes and communicators before their groups
    dist.destroy_process_group()
    return 0 if flag.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
