"""bfloat16 / float16 parameters: strata steps a float32 master copy (and a
float32 copy of each gradient) and writes the master's rounding back into the
parameter after each step. Bit-identical to a float32 optimizer over the
same weights stepping the same gradients (converted to float32), with and
without attach; the master survives state_dict/save/load; a parameter
written outside the optimizer re-seeds its master."""
import pytest
import torch
from torch import nn

import strata.torch as st


def bits(t):
    return t.detach().view(torch.int32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("attach", [False, True])
def test_low_precision_master_weights(dtype, attach):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 12), nn.Tanh(), nn.Linear(12, 6)).to(dtype)
    ref_w = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]
    kw = {"precondition_frequency": 2}
    opt = st.Shampoo(model.named_parameters(), **kw)
    if attach:
        opt.attach(model)
    ref = st.Shampoo(list(zip(names, ref_w)), **kw)
    for t in range(4):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(t)).to(dtype)
        model(x).float().pow(2).mean().backward()
        for p, r in zip(model.parameters(), ref_w):
            assert p.grad.dtype == dtype
            r.grad = p.grad.float()
        opt.step()
        ref.step()
        opt.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        for i, (p, r) in enumerate(zip(model.parameters(), ref_w)):
            assert torch.equal(bits(opt._master[i]), bits(r)), (t, names[i])
            assert torch.equal(p.detach(), r.detach().to(dtype)), (t, names[i])
    # state_dict round trip restores the master (the weights: load from save())
    sd = opt.state_dict()
    opt.load_state_dict(sd)
    first = next(model.parameters())
    with torch.no_grad():  # written outside the optimizer: the master follows
        first.add_(1.0)
    x = torch.randn(5, 8).to(dtype)
    model(x).float().pow(2).mean().backward()
    opt.step()
    assert torch.isfinite(opt._master[0]).all()
    assert torch.equal(first.detach(), opt._master[0].to(dtype))


def test_low_precision_save_load(tmp_path):
    torch.manual_seed(1)
    model = nn.Linear(6, 4).to(torch.bfloat16)
    opt = st.Muon(model.named_parameters())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    saved = [m.clone() for m in opt._master]
    opt.save(tmp_path / "ck")
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    opt.load(tmp_path / "ck")
    for m, s, p in zip(opt._master, saved, model.parameters()):
        assert torch.equal(bits(m), bits(s))
        assert torch.equal(p.detach(), s.to(torch.bfloat16))
