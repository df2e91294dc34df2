"""Per-group lr and weight_decay (strata_param_set_hyper) and `.grad is None`
(strata_param_set_active), each against the C API driven with the same
per-parameter values, bit for bit."""
import json
import struct

import pytest
import torch

import strata.torch as st
from oracle import CRun, same_bits

NAMES = ["blocks.0.attn.weight", "blocks.0.norm.weight", "blocks.0.mlp.weight", "blocks.1.bias",
         "blocks.1.proj"]
SHAPES = [(12, 8), (8,), (8, 12), (12,), (6, 8)]


def make(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g) * 0.5) for s in SHAPES]


def grads(t):
    g = torch.Generator().manual_seed(77 + t)
    return [torch.randn(*s, generator=g) for s in SHAPES]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.mark.parametrize("opt", ["shampoo", "muon"])
def test_two_groups_lambda_lr_per_group(opt):
    ps = make()
    cls = {"shampoo": st.Shampoo, "muon": st.Muon}[opt]
    # group 0: the class's optimizer at its own lr (a 1-D weight in it goes to the
    # tail by the rule); group 1: an explicit AdamW group with its own lr and decay
    o = cls([{"params": list(zip(NAMES[:3], ps[:3])), "lr": 0.02, "weight_decay": 0.01},
             {"params": list(zip(NAMES[3:], ps[3:])), "optimizer": "adamw", "lr": 4e-3,
              "weight_decay": 0.1}], precondition_frequency=2)
    sched = torch.optim.lr_scheduler.LambdaLR(o, [lambda k: 0.5 ** k,
                                                  lambda k: min(1.0, (k + 1) / 3)])
    c = CRun(opt, ps, NAMES, {"precondition_frequency": 2},
             requested={"blocks.1.bias": "adamw", "blocks.1.proj": "adamw"})
    adamw_lr, adamw_wd = float(c.cfg.adamw.lr), float(c.cfg.adamw.weight_decay)
    for t in range(1, 7):
        if t == 4:
            o.param_groups[1]["weight_decay"] = 0.3  # live too
        g0, g1 = o.param_groups
        ratio = g0["lr"] / 0.02
        want = [(g0["lr"], g0["weight_decay"]), (adamw_lr * ratio, adamw_wd),
                (g0["lr"], g0["weight_decay"]), (g1["lr"], g1["weight_decay"]),
                (g1["lr"], g1["weight_decay"])]
        assert o.hyperparameters() == [(f32(a), f32(b)) for a, b in want]
        for i, (lr, wd) in enumerate(want):
            c.hyper(i, lr, wd)
        gs = grads(t)
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        o.step()
        c.step(gs)
        sched.step()
        assert same_bits(ps, c.w), f"step {t}"
        o.zero_grad(set_to_none=True)
    # and the groups did differ from one configuration: a plain run differs
    plain = CRun(opt, make(), NAMES, {"precondition_frequency": 2},
                 requested={"blocks.1.bias": "adamw", "blocks.1.proj": "adamw"})
    for t in range(1, 7):
        plain.step(grads(t))
    assert not same_bits(ps, plain.w)


def rank_tensors(sd, name):
    """The state tensors of parameter `name` in a state_dict's rank file: {key: bytes}."""
    blob = bytes(sd["strata"]["files"]["rank-00000.safetensors"].numpy())
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    table = json.loads(bytes(sd["strata"]["files"]["rank-00000.json"].numpy()))
    owned = {e["name"] for e in table.get("tensors", []) if e.get("param") == name}
    out = {k: blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
           for k, v in head.items() if k in owned}
    assert out, f"no state tensors of {name}"
    return out


@pytest.mark.parametrize("mode", ["sync", "async1"])
@pytest.mark.parametrize("opt", ["shampoo", "soap", "muon", "adamw"])
def test_grad_none_is_skipped(opt, mode):
    ps = make()
    cls = {"shampoo": st.Shampoo, "soap": st.SOAP, "muon": st.Muon, "adamw": st.AdamW}[opt]
    kw, fields = {"precondition_frequency": 2}, {"precondition_frequency": 2}
    if mode == "async1":
        kw.update(async_roots=True, staleness=1, workers=1)
        fields.update({"async": True, "staleness": 1, "workers": 1})
    o = cls(list(zip(NAMES, ps)), **kw)
    c = CRun(opt, ps, NAMES, fields)
    skipped = {3: [0], 4: [0, 1], 5: [2]}  # a matrix at a refresh point, a tail vector, ...
    for t in range(1, 8):
        gs = grads(t)
        off = skipped.get(t, [])
        before = [p.detach().clone() for p in ps]
        sd0 = o.state_dict() if off else None
        for i, (p, g) in enumerate(zip(ps, gs)):
            p.grad = None if i in off else g.clone()
        for i in range(len(ps)):
            c.active(i, i not in off)
        o.step()
        c.step([torch.full_like(g, float("nan")) if i in off else g for i, g in enumerate(gs)])
        assert same_bits(ps, c.w), f"{opt} {mode} step {t}"
        for i in off:  # left alone: weights and state
            assert same_bits([ps[i]], [before[i]])
            sd1 = o.state_dict()
            assert rank_tensors(sd1, NAMES[i]) == rank_tensors(sd0, NAMES[i]), NAMES[i]
        o.zero_grad(set_to_none=True)
    assert o.stats()["step"] == 7


def groups_run(ps, steps, o=None, start=1, state=None):
    if o is None:
        o = st.Shampoo([{"params": list(zip(NAMES[:3], ps[:3])), "lr": 0.02},
                        {"params": list(zip(NAMES[3:], ps[3:])), "optimizer": "adamw",
                         "lr": 4e-3, "weight_decay": 0.1}], precondition_frequency=2)
    sched = torch.optim.lr_scheduler.LambdaLR(o, [lambda k: 0.7 ** k, lambda k: 1.0 / (k + 1)])
    if state is not None:
        o.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
    for t in range(start, start + steps):
        if t == 3:
            o.param_groups[1]["weight_decay"] = 0.25
        for i, (p, g) in enumerate(zip(ps, grads(t))):
            p.grad = None if (t == 5 and i == 0) else g.clone()
        o.step()
        sched.step()
        o.zero_grad(set_to_none=True)
    return o, sched


def test_groups_state_dict_resume():
    """Per-group lr (a scheduler each), a changed weight_decay and a skipped
    parameter survive state_dict() -> load_state_dict(): the resumed run is
    bit-identical to the uninterrupted one."""
    import io
    full = make()
    groups_run(full, 8)
    half = make()
    o, sched = groups_run(half, 4)
    buf = io.BytesIO()
    torch.save({"opt": o.state_dict(), "sched": sched.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf)
    resumed = [torch.nn.Parameter(p.detach().clone()) for p in half]
    groups_run(resumed, 4, start=5, state=ck)
    assert same_bits(resumed, full)
