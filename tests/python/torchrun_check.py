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
import os
import shutil
import sys
from typing import Any

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


def run_dcp(opt_name: str, mode: str, rank: int, world: int) -> bool:
    """torch.distributed.checkpoint over the binding's state_dict: the same
    keys on every rank, each state tensor whole on one rank (its owner's
    shard); dcp.save at N ranks after step 2, then from the step-2 weights
    and that checkpoint N -> N (a fresh N-rank optimizer), 1 -> N (the one
    process's checkpoint into N ranks) and N -> 1 (rank 0 alone, no_dist)
    continue for steps 3-5: each bit-identical to the uninterrupted runs
    (N ranks, one process)."""
    import tempfile
    import time
    import torch.distributed.checkpoint as dcp
    t0 = time.monotonic()
    cls = CLASSES[opt_name]
    kw: dict[str, Any] = {"precondition_frequency": 2}
    if mode == "dcpasync1":
        kw.update(async_roots=True, staleness=1, workers=1, stagger_refresh=True)
    # "dcphsdpK": the N-rank optimizers with shard_group_size K (the one
    # process's without)
    nkw = dict(kw, shard_group_size=int(mode[7:])) if mode.startswith("dcphsdp") else kw
    where = [tempfile.mkdtemp(prefix="strata-dcp-") if rank == 0 else None]
    dist.broadcast_object_list(where, src=0)
    root = where[0]

    def mean(t: int) -> list[torch.Tensor]:
        out = []
        for i, s in enumerate(SHAPES.values()):
            acc = torch.zeros(s)
            for r in range(world):
                acc += grads(t, r)[i]
            out.append(acc * (1.0 / world))
        return out

    def step(named: list, o: Any, gs: list[torch.Tensor]) -> None:
        for (_, p), g in zip(named, gs):
            p.grad = g.clone()
        o.step()
        o.zero_grad(set_to_none=True)

    def like(src: list) -> list:
        return [(n, torch.nn.Parameter(p.detach().clone())) for n, p in src]

    named, ref_named = params(), params()
    o, ref = cls(named, **nkw), cls(ref_named, distributed=False, **kw)
    for t in (1, 2):
        step(named, o, grads(t, rank))
        step(ref_named, ref, mean(t))
    sd = o.state_dict()
    keys = sorted(f"{p}/{k}" for p, v in sd["state"].items() for k in v)
    every = [None] * world
    dist.all_gather_object(every, keys)
    union = sorted({k for e in every for k in e})

    def shards(k: str) -> int:
        p, n = k.rsplit("/", 1)
        t = sd["state"].get(p, {}).get(n)
        return 0 if t is None else len(getattr(t, "global_offsets", ((),)))
    whole = torch.tensor([shards(k) for k in union], dtype=torch.int64)
    dist.all_reduce(whole)
    # each tensor whole on one rank (HSDP: on one rank of each replica group)
    copies = world // nkw["shard_group_size"] if "shard_group_size" in nkw else 1
    layout_ok = all(e == keys for e in every) and bool((whole == copies).all()) and \
        len(keys) > 0
    dcp.save({"optim": sd}, checkpoint_id=os.path.join(root, "n"))  # as dcp.save({"optim": o})
    if rank == 0:
        dcp.save({"optim": ref}, checkpoint_id=os.path.join(root, "one"), no_dist=True)
    dist.barrier()
    a_named, b_named = like(named), like(named)
    a, b = cls(a_named, **nkw), cls(b_named, **nkw)
    dcp.load({"optim": a}, checkpoint_id=os.path.join(root, "n"))
    dcp.load({"optim": b}, checkpoint_id=os.path.join(root, "one"))
    c_named = like(ref_named) if rank == 0 else None
    if rank == 0:
        c = cls(c_named, distributed=False, **kw)
        dcp.load({"optim": c}, checkpoint_id=os.path.join(root, "n"), no_dist=True)
    for t in (3, 4, 5):
        for nm, opt in ((named, o), (a_named, a), (b_named, b)):
            step(nm, opt, grads(t, rank))
        step(ref_named, ref, mean(t))
        if rank == 0:
            step(c_named, c, mean(t))

    def same(x: list, y: list) -> bool:
        return all(torch.equal(p.detach().view(torch.int32), q.detach().view(torch.int32))
                   for (_, p), (_, q) in zip(x, y))
    ok = {"layout": layout_ok, "uninterrupted": same(named, ref_named),
          f"{world}->{world}": same(a_named, named), f"1->{world}": same(b_named, named)}
    if rank == 0:
        ok[f"{world}->1"] = same(c_named, ref_named)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
    good = all(ok.values())
    print(f"rank {rank}/{world} {opt_name} {mode}: {'bit-identical' if good else 'DIFFERS'} "
          f"({', '.join(k + (' ok' if v else ' FAILED') for k, v in ok.items())}; "
          f"{len(keys)} state tensors; {time.monotonic() - t0:.1f} s, loaded machine)",
          flush=True)
    return good


def run_case(opt_name: str, mode: str, rank: int, world: int) -> bool:
    if mode.startswith("dcp"):
        return run_dcp(opt_name, mode, rank, world)
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
