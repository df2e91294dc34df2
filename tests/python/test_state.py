"""state_dict() / load_state_dict() (through torch.save) and save(dir) /
load(dir): a resumed run is bit-identical to the uninterrupted one."""
import io

import pytest
import torch

import strata.torch as st
from oracle import same_bits
from test_step import CLASSES, grads, make_params, options

STEPS, CUT = 8, 4


def run(opt, mode, steps, o=None, named=None, start=1):
    if named is None:
        named = make_params()
    if o is None:
        o = CLASSES[opt](named, **options(opt, mode)[0])
    for t in range(start, start + steps):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
        o.zero_grad(set_to_none=True)
    return named, o


def fresh_copy(named, opt, mode):
    new = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in named]
    return new, CLASSES[opt](new, **options(opt, mode)[0])


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("opt", ["shampoo", "soap", "kl-shampoo", "muon", "normuon", "dion2",
                                 "adamw"])
def test_state_dict_resume(opt, mode):
    full, _ = run(opt, mode, STEPS)
    half, o = run(opt, mode, CUT)
    buf = io.BytesIO()
    torch.save({"model": {n: p.detach() for n, p in half}, "opt": o.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf)  # the safe loader (weights_only) reads it
    named2, o2 = fresh_copy(make_params(seed=7), opt, mode)  # other weights, overwritten:
    with torch.no_grad():
        for n, p in named2:
            p.copy_(ck["model"][n])
    before = [p.detach().clone() for _, p in named2]
    o2.load_state_dict(ck["opt"])
    assert same_bits([p for _, p in named2], before)  # the model's weights are the model's
    run(opt, mode, STEPS - CUT, o=o2, named=named2, start=CUT + 1)
    assert same_bits([p for _, p in named2], [p for _, p in full])


@pytest.mark.parametrize("mode", ["async", "async1"])
@pytest.mark.parametrize("opt", ["shampoo", "soap"])
def test_save_load_dir_resume(opt, mode, tmp_path):
    full, _ = run(opt, mode, STEPS)
    half, o = run(opt, mode, CUT)
    o.save(tmp_path / "ck")
    assert (tmp_path / "ck" / "manifest.json").exists()
    named2, o2 = fresh_copy(make_params(seed=9), opt, mode)
    o2.load(tmp_path / "ck")  # restores the weights too
    assert same_bits([p for _, p in named2], [p for _, p in half])
    run(opt, mode, STEPS - CUT, o=o2, named=named2, start=CUT + 1)
    assert same_bits([p for _, p in named2], [p for _, p in full])


def test_state_dict_keeps_lr_and_scheduler():
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=2)
    sched = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    for t in range(1, 4):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
        sched.step()
    sd = o.state_dict()
    assert sd["param_groups"][0]["params"] == list(range(len(named)))
    named2 = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in named]
    o2 = st.Shampoo(named2, precondition_frequency=2)
    o2.load_state_dict(sd)
    assert o2.param_groups[0]["lr"] == o.param_groups[0]["lr"]
    for (_, p), (_, q), g in zip(named, named2, grads(9)):
        p.grad = g
        q.grad = g.clone()
    o.step()
    o2.step()
    assert same_bits([p for _, p in named], [p for _, p in named2])
