"""The binding's step on given gradients is bit-identical to the C API's step
on the same gradients: every optimizer, synchronous and asynchronous S = 0,
gradients in the same buffer and in new ones each step (zero_grad(set_to_none)),
and a learning-rate schedule."""
import pytest
import torch

import strata.torch as st
from oracle import CRun, same_bits

SHAPES = {"blocks.0.attn.weight": (12, 8), "blocks.0.mlp.weight": (8, 12),
          "blocks.0.heads": (2, 3, 4), "blocks.0.norm.weight": (8,), "head.proj": (1, 8)}
CLASSES = {"shampoo": st.Shampoo, "soap": st.SOAP, "kl-shampoo": st.KLShampoo, "muon": st.Muon,
           "normuon": st.NorMuon, "dion2": st.Dion2, "adamw": st.AdamW}
FAMILY = {"shampoo": "shampoo", "soap": "soap", "kl-shampoo": "kl_shampoo", "muon": "muon",
          "normuon": "normuon", "dion2": "dion2", "adamw": "adamw"}
STEPS = 6


def make_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g) * 0.5)) for n, s in SHAPES.items()]


def grads(step, seed=1):
    g = torch.Generator().manual_seed(1000 * seed + step)
    return [torch.randn(*s, generator=g) for s in SHAPES.values()]


def options(opt, mode):
    kw, fields = {}, {}
    if opt in ("shampoo", "soap", "kl-shampoo"):
        kw["precondition_frequency"] = 2
        fields["precondition_frequency"] = 2
        kw["stagger_refresh"] = True
        fields["stagger_refresh"] = True
    if mode.startswith("async"):  # "async": S = 0 (bit-identical to sync), "async1": S = 1
        S = 1 if mode == "async1" else 0
        kw.update(async_roots=True, staleness=S, workers=1)
        fields.update({"async": True, "staleness": S, "workers": 1})
    return kw, fields


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("opt", list(CLASSES))
def test_step_bit_identical_to_c_api(opt, mode):
    named = make_params()
    kw, fields = options(opt, mode)
    o = CLASSES[opt](named, **kw)
    c = CRun(opt, [p for _, p in named], [n for n, _ in named], fields)
    for t in range(1, STEPS + 1):
        gs = grads(t)
        for (_, p), g in zip(named, gs):
            if t % 2:  # a new gradient tensor (as backward after set_to_none) ...
                p.grad = g.clone()
            else:      # ... or the same storage, written in place
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(g)
        o.step()
        c.step(gs)
        assert same_bits([p for _, p in named], c.w), f"{opt} {mode}: step {t} differs"
        if t % 2:
            o.zero_grad(set_to_none=True)
    # the routing is the C runtime's, and each entry says why
    r = {e["name"]: e for e in o.routing()}
    assert r["blocks.0.norm.weight"]["optimizer"] == "adamw"
    assert r["head.proj"]["optimizer"] == "adamw"
    assert r["blocks.0.attn.weight"]["optimizer"] == opt
    assert all(e["reason"] for e in r.values())


def test_lr_scheduler_takes_effect():
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=2)
    sched = torch.optim.lr_scheduler.LambdaLR(o, lambda k: 0.5 ** k)
    c = CRun("shampoo", [p for _, p in named], [n for n, _ in named],
             {"precondition_frequency": 2})
    plain = CRun("shampoo", [p for _, p in named], [n for n, _ in named],
                 {"precondition_frequency": 2})
    lr0 = o.param_groups[0]["lr"]
    for t in range(1, 5):
        gs = grads(t)
        for (_, p), g in zip(named, gs):
            p.grad = g
        lr = o.param_groups[0]["lr"]  # the matrices take it; the tail its ratio
        for i, (n, p) in enumerate(named):
            tail = n in ("blocks.0.norm.weight", "head.proj")
            c.hyper(i, float(c.cfg.adamw.lr) * (lr / lr0) if tail else lr,
                    float(c.cfg.adamw.weight_decay) if tail else float(c.cfg.shampoo.weight_decay))
        o.step()
        c.step(gs)
        plain.step(gs)
        sched.step()
        assert same_bits([p for _, p in named], c.w)
    assert not same_bits([p for _, p in named], plain.w)  # the schedule changed the run
    assert o.param_groups[0]["lr"] == lr0 * 0.5 ** 4


def test_group_override_and_patterns():
    g = torch.Generator().manual_seed(3)
    emb = torch.nn.Parameter(torch.randn(16, 8, generator=g))
    w = torch.nn.Parameter(torch.randn(8, 8, generator=g))
    w2 = torch.nn.Parameter(torch.randn(8, 8, generator=g))
    o = st.Muon([{"params": [("tok_embedding.weight", emb), ("blocks.0.w", w)]},
                 {"params": [("blocks.1.w", w2)], "optimizer": "adamw"}])
    r = {e["name"]: e for e in o.routing()}
    assert r["tok_embedding.weight"]["optimizer"] == "adamw"
    assert "embedding" in r["tok_embedding.weight"]["reason"]
    assert r["blocks.0.w"]["optimizer"] == "muon"
    assert r["blocks.1.w"]["optimizer"] == "adamw"
    assert "param group" in r["blocks.1.w"]["reason"]
    # the adamw group's lr defaults to the tail's
    assert o.param_groups[1]["lr"] == pytest.approx(1e-3)
    # oracle: the same explicit routing through the C API
    c = CRun("muon", [emb, w, w2], ["tok_embedding.weight", "blocks.0.w", "blocks.1.w"],
             requested={"blocks.1.w": "adamw"}, roles={"tok_embedding.weight": "embedding"})
    for t in range(1, 4):
        gs = [torch.randn(*p.shape, generator=g) for p in (emb, w, w2)]
        for p, gr in zip((emb, w, w2), gs):
            p.grad = gr
        o.step()
        c.step(gs)
        assert same_bits([emb, w, w2], c.w)


def test_missing_grad_is_skipped():
    """torch's rule (test_groups.py has the full check): no update, no warning."""
    import warnings
    named = make_params()
    o = st.AdamW(named)
    c = CRun("adamw", [p for _, p in named], [n for n, _ in named])
    gs = grads(1)
    for (_, p), g in zip(named[1:], gs[1:]):
        p.grad = g
    w0 = named[0][1].detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o.step()
    c.active(0, False)
    c.step(gs)
    assert same_bits([p for _, p in named], c.w)
    assert torch.equal(named[0][1], w0)


def test_closure():
    p = torch.nn.Parameter(torch.ones(4, 4))
    o = st.Muon([p])

    def closure():
        o.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    loss = o.step(closure)
    assert loss.item() == 16.0
    assert not torch.equal(p.detach(), torch.ones(4, 4))


def test_model_embeddings_go_to_the_tail():
    m = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8))
    r = {e["name"]: e for e in st.Shampoo(m.named_parameters(), model=m).routing()}
    assert r["0.weight"]["optimizer"] == "adamw" and "nn.Embedding" in r["0.weight"]["reason"]
    assert r["1.weight"]["optimizer"] == "shampoo"
    # without model=: the live nn.Embedding (or EmbeddingBag) holding the tensor
    # tells, whether the parameters come named ("0.weight" matches no pattern)
    # or bare (model.parameters(): "param.0")
    bag = torch.nn.Sequential(torch.nn.EmbeddingBag(12, 8), torch.nn.Linear(8, 8))
    for cls, mat in ((st.Shampoo, "shampoo"), (st.Muon, "muon")):
        for model, params in ((m, list(m.named_parameters())), (m, list(m.parameters())),
                              (bag, list(bag.parameters()))):
            r = cls(params).routing()
            assert r[0]["optimizer"] == "adamw" and "nn.Embedding" in r[0]["reason"], r[0]
            assert r[1]["optimizer"] == mat and r[1]["reason"] == "2-D matrix", r[1]
    # an explicit choice wins: a group's optimizer keeps the table on the matrix optimizer
    r = st.Muon([{"params": [m[0].weight], "optimizer": "muon"},
                 {"params": [m[1].weight]}]).routing()
    assert r[0]["optimizer"] == "muon" and r[1]["optimizer"] == "muon"
    # a bare Parameter no module holds (F.embedding) is told only by its name
    table = torch.nn.Parameter(torch.randn(10, 8))
    assert st.Muon([table]).routing()[0]["optimizer"] == "muon"
    assert st.Muon([("wte", table)]).routing()[0]["optimizer"] == "adamw"


def test_stats():
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=2)
    for t in range(1, 4):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
    s = o.stats()
    assert s["step"] == 3 and s["n_params"] == len(named)
    assert s["n_matrix"] == 3 and s["n_tail"] == 2 and s["root_refreshes"] > 0
    assert s["missing_backward_hooks"] == 0


def test_memory_ledger():
    """memory_ledger(): the registered buffers at their sizes, the device tier
    equal to stats()' device_bytes, the total the sum of its cells."""
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=2)
    for t in range(1, 3):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
    m, s = o.memory_ledger(), o.stats()
    nbytes = sum(p.numel() * 4 for _, p in named)
    assert m["host"]["weights"]["bytes"] == nbytes
    assert m["device"]["bytes"] == s["device_bytes"]
    assert m["device"]["factors"]["bytes"] > 0 and m["host"]["roots"]["bytes"] > 0
    cells = sum(v["bytes"] for t in m.values() if isinstance(t, dict)
                for v in t.values() if isinstance(v, dict))
    assert cells == m["total_bytes"] and m["total_peak"] >= m["total_bytes"]


def test_routes_by_name_pattern():
    named = make_params()
    o = st.Muon(named, routes={"*.mlp.*": "adamw", "blocks.0.heads": "shampoo"})
    r = {e["name"]: e for e in o.routing()}
    assert r["blocks.0.mlp.weight"]["optimizer"] == "adamw"
    assert "routes" in r["blocks.0.mlp.weight"]["reason"]
    assert r["blocks.0.heads"]["optimizer"] == "shampoo"
    assert r["blocks.0.attn.weight"]["optimizer"] == "muon"
    c = CRun("muon", [p for _, p in named], [n for n, _ in named],
             requested={"blocks.0.mlp.weight": "adamw", "blocks.0.heads": "shampoo"})
    for t in range(1, 4):
        gs = grads(t)
        for (_, p), g in zip(named, gs):
            p.grad = g
        o.step()
        c.step(gs)
        assert same_bits([p for _, p in named], c.w)
