"""attach(model): strata's forward and gradient hooks on the user's modules.
One process: the hooks are called in the model's order (forward ascending,
backward descending), every layer's backward hook once per step, and the
weights are bit-identical to the same training without attach. The refusals
around it (after a step, twice, DDP wrappers, CUDA). Under torchrun:
test_torchrun.py::test_torchrun_hooks_and_failures."""
import datetime

import pytest
import torch
from torch import nn

import strata
import strata.torch as st


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.blocks = nn.Sequential(nn.Linear(8, 12), nn.Tanh(), nn.Linear(12, 8))
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        return self.head(self.norm(h + self.blocks(h)))


def make() -> Net:
    torch.manual_seed(0)
    return Net()


def train(model: Net, opt: st.StrataOptimizer, steps: int) -> None:
    for t in range(steps):
        g = torch.Generator().manual_seed(t)
        x, y = torch.randint(0, 16, (4, 6), generator=g), torch.randint(0, 16, (4, 6), generator=g)
        nn.functional.cross_entropy(model(x).reshape(-1, 16), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


class Recorder:
    """Stands in for the loaded library: records the hook calls, forwards all."""

    def __init__(self, lib) -> None:
        self._lib, self.calls = lib, []

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if name in ("strata_hook_forward", "strata_hook_backward", "strata_step"):
            def rec(*args):
                what = name.replace("strata_hook_", "").replace("strata_", "")
                self.calls.append((what, args[1] if len(args) > 1 else None))
                return f(*args)
            return rec
        return f


@pytest.mark.parametrize("cls,kw", [(st.Shampoo, {"precondition_frequency": 2}),
                                    (st.Muon, {}),
                                    (st.Shampoo, {"precondition_frequency": 2,
                                                  "async_roots": True, "staleness": 1,
                                                  "workers": 1, "stagger_refresh": True})])
def test_attach_bit_identical_and_in_order(cls, kw):
    plain, hooked = make(), make()
    a = cls(plain.named_parameters(), model=plain, **kw)
    b = cls(hooked.named_parameters(), model=hooked, **kw)
    assert b.attach(hooked) is b
    rec = Recorder(b._lib)
    b._lib = rec
    train(plain, a, 4)
    train(hooked, b, 4)
    for (n, p), (_, q) in zip(plain.named_parameters(), hooked.named_parameters()):
        assert torch.equal(p.view(torch.int32), q.view(torch.int32)), n
    # layers: emb 0, blocks.0 1, blocks.2 2, norm 3, head 4
    per_step = [("forward", 0), ("forward", 1), ("forward", 2), ("forward", 3),
                ("forward", 4), ("backward", 4), ("backward", 3), ("backward", 2),
                ("backward", 1), ("backward", 0), ("step", None)]
    assert rec.calls == per_step * 4
    s = b.stats()
    assert s["forward_hooks"] == 20 and s["backward_hooks"] == 20
    assert s["missing_backward_hooks"] == 0


def test_attach_layer_without_gradient_flushed_at_step():
    """A layer whose parameters got no gradient this backward (a frozen
    branch) has its backward hook run by step(), after the hooks' own."""
    m = make()
    opt = st.Shampoo(m.named_parameters(), model=m).attach(m)
    rec = Recorder(opt._lib)
    opt._lib = rec
    x = torch.randint(0, 16, (4, 6))
    m.head(m.norm(m.emb(x))).sum().backward()  # blocks not used
    opt.step()
    back = [c for c in rec.calls if c[0] == "backward"]
    assert back == [("backward", 4), ("backward", 3), ("backward", 0), ("backward", 1),
                    ("backward", 2)]
    assert opt.stats()["missing_backward_hooks"] == 0


def test_attach_refusals():
    m = make()
    opt = st.Shampoo(m.named_parameters())
    train(m, opt, 1)
    with pytest.raises(strata.StrataError) as e:
        opt.attach(m)
    assert e.value.status == "STRATA_ERR_STATE" and "before the first step" in e.value.message
    m3 = make()
    opt3 = st.Shampoo(m3.named_parameters())
    opt3.load_state_dict(opt.state_dict())  # then attach would drop the loaded state
    with pytest.raises(strata.StrataError) as e:
        opt3.attach(m3)
    assert e.value.status == "STRATA_ERR_STATE" and "load" in e.value.message
    m2 = make()
    opt2 = st.Shampoo(m2.named_parameters()).attach(m2)
    with pytest.raises(strata.StrataError) as e:
        opt2.attach(m2)
    assert e.value.status == "STRATA_ERR_STATE"
    with pytest.raises(strata.StrataError) as e:
        opt2.attach(nn.Linear(3, 3))
    assert e.value.status == "STRATA_ERR_INVALID_ARG"


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="no gloo")
def test_ddp_wrapped_model_refused():
    """A model wrapped in DistributedDataParallel (one-rank gloo group here):
    its parameters, model=, and attach() are refused, naming why and what to
    do; nothing is created."""
    import torch.distributed as dist
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        m = make()
        ddp = nn.parallel.DistributedDataParallel(m)
        for build in (lambda: st.Shampoo(m.named_parameters()),
                      lambda: st.Shampoo(ddp.parameters()),
                      lambda: st.Muon(m.parameters(), model=ddp)):
            with pytest.raises(strata.StrataError) as e:
                build()
            assert e.value.status == "STRATA_ERR_UNSUPPORTED"
            assert "DistributedDataParallel" in e.value.message
            assert "do not wrap" in e.value.message
        other = make()
        opt = st.Shampoo(other.named_parameters())  # an unwrapped model is fine
        with pytest.raises(strata.StrataError) as e:
            opt.attach(ddp)
        assert e.value.status == "STRATA_ERR_UNSUPPORTED"
        del ddp
    finally:
        dist.destroy_process_group()


def test_cuda_refused_clearly():
    p = nn.Parameter(torch.ones(4, 4))
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo([p], backend="cuda")
    assert e.value.status == "STRATA_ERR_UNSUPPORTED"
    assert "CPU tensors only" in e.value.message and "CUDA backend" in e.value.message
    if torch.cuda.is_available():  # a GPU machine: a CUDA parameter, the same refusal
        with pytest.raises(strata.StrataError) as e:
            st.Shampoo([nn.Parameter(torch.ones(4, 4, device="cuda"))])
        assert e.value.status == "STRATA_ERR_UNSUPPORTED" and "cuda" in e.value.message
