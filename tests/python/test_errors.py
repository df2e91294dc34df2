"""Bad input raises StrataError with the strata_status name and loses nothing:
after each refusal the weights are as they were and the next good step is
the C API's (bit for bit)."""
import pytest
import torch

import strata
import strata.torch as st
from oracle import CRun, same_bits
from test_step import grads, make_params


def status_of(excinfo):
    assert isinstance(excinfo.value, strata.StrataError)
    return excinfo.value.status


@pytest.mark.parametrize("make,status", [
    (lambda: torch.zeros(4, 4, dtype=torch.float64, requires_grad=True),
     "STRATA_ERR_INVALID_ARG"),
    (lambda: torch.zeros(4, 4, dtype=torch.int32), "STRATA_ERR_INVALID_ARG"),
    (lambda: torch.zeros(4, 4).to_sparse().requires_grad_(), "STRATA_ERR_INVALID_ARG"),
    (lambda: torch.zeros(4, 6).t().requires_grad_(), "STRATA_ERR_INVALID_ARG"),
    (lambda: torch.zeros(4, 4, device="meta", requires_grad=True), "STRATA_ERR_UNSUPPORTED"),
    (lambda: torch.zeros(0, 4, requires_grad=True), "STRATA_ERR_INVALID_ARG"),
])
def test_bad_parameters_refused(make, status):
    good = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo([good, make()])
    assert status_of(e) == status
    assert e.value.message


def test_unknown_keyword_and_bad_values():
    p = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(TypeError, match="precondition_frequency"):
        st.Shampoo([p], precondition_frequncy=3)
    with pytest.raises(strata.StrataError) as e:  # the C library's own check names the field
        st.Shampoo([p], precondition_frequency=-1)
    assert status_of(e) == "STRATA_ERR_INVALID_ARG"
    assert "precondition_frequency" in e.value.message
    with pytest.raises(strata.StrataError) as e:
        # (staleness >= F is legal since the rings of results, issue #23)
        st.SOAP([p], precondition_frequency=2, async_roots=True, staleness=-1)
    assert status_of(e) == "STRATA_ERR_INVALID_ARG"
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo([p], grafting="sgd")
    assert status_of(e) == "STRATA_ERR_INVALID_ARG"
    with pytest.raises(strata.StrataError) as e:  # not wired to autograd: refused, not ignored
        st.Shampoo([p], shard_gradients=True)
    assert status_of(e) == "STRATA_ERR_UNSUPPORTED" and "shard_gradients" in e.value.message
    st.Shampoo([p], shard_gradients=False)
    for kw in ({}, {"async_roots": True}, {"nvme_dir": "unused"}):  # said in the door's words
        with pytest.raises(strata.StrataError) as e:
            st.Shampoo([p], page_state=True, **kw)
        assert status_of(e) == "STRATA_ERR_INVALID_ARG"
        assert "async_roots=True and nvme_dir" in e.value.message


@pytest.mark.parametrize("cls,kw", [
    # 0 is strata_config's "each family's default" (Shampoo 1, SOAP 10), not a period
    (st.Shampoo, {"precondition_frequency": 0}),
    (st.SOAP, {"precondition_frequency": 0}),
    (st.KLShampoo, {"precondition_frequency": 0}),
    # out of the C int's range: ctypes would keep the low bits (2**32 + 3 -> 3)
    (st.Shampoo, {"precondition_frequency": 2**32 + 3}),
    (st.Shampoo, {"workers": 2**32}),
    (st.Muon, {"ns_steps": -2**40}),
    (st.Shampoo, {"stagger_refresh": 5}),
])
def test_values_the_c_check_would_refuse(cls, kw):
    p = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(strata.StrataError) as e:
        cls([p], **kw)
    assert status_of(e) == "STRATA_ERR_INVALID_ARG"
    assert next(iter(kw)) in e.value.message


def test_error_message_says_each_prefix_once():
    p = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo([p], beta2=2.0)
    text = str(e.value)
    assert text.startswith("STRATA_ERR_INVALID_ARG: strata_create: shampoo.beta2"), text
    assert text.count("STRATA_ERR_INVALID_ARG") == 1 and text.count("strata_create") == 1, text
    inner = strata.StrataError("STRATA_ERR_IO", str(strata.StrataError("STRATA_ERR_IO", "x")))
    assert str(inner) == "STRATA_ERR_IO: x"


class Fixture:
    """A binding run and its oracle, one good step taken."""

    def __init__(self):
        self.named = make_params()
        self.o = st.Shampoo(self.named, precondition_frequency=2)
        self.c = CRun("shampoo", [p for _, p in self.named], [n for n, _ in self.named],
                      {"precondition_frequency": 2})
        self.t = 0
        self.good_step()

    def params(self):
        return [p for _, p in self.named]

    def good_step(self):
        self.t += 1
        gs = grads(self.t)
        for p, g in zip(self.params(), gs):
            p.grad = g.clone()
        self.o.step()
        self.c.step(gs)
        assert same_bits(self.params(), self.c.w)

    def refused(self, status, fn):
        before = [p.detach().clone() for p in self.params()]
        with pytest.raises(strata.StrataError) as e:
            fn()
        assert status_of(e) == status, e.value
        assert same_bits(self.params(), before)
        for p in self.params():
            p.grad = None
        self.good_step()  # nothing was lost: the next step is the oracle's


def test_bad_gradients_lose_nothing():
    f = Fixture()
    ps = f.params()

    def noncontiguous():
        ps[0].grad = torch.randn(8, 12).t()
        f.o.step()
    f.refused("STRATA_ERR_INVALID_ARG", noncontiguous)

    def sparse():
        for p in ps:
            p.grad = torch.zeros_like(p)
        ps[0].grad = torch.zeros(12, 8).to_sparse()
        f.o.step()
    f.refused("STRATA_ERR_INVALID_ARG", sparse)

    def nonfinite():
        for p, g in zip(ps, grads(50)):
            p.grad = g
        ps[1].grad[0, 0] = float("nan")
        f.o.step()
    f.refused("STRATA_ERR_NONFINITE", nonfinite)

    def before_backward():
        f.o.zero_grad(set_to_none=True)
        f.o.step()
    f.refused("STRATA_ERR_STATE", before_backward)

    def wrong_shape():  # torch refuses it first; strata checks it too
        for p in ps:
            p.grad = torch.zeros_like(p)
        try:
            ps[0].grad = torch.zeros(8, 12)
        except RuntimeError:
            ps[0].grad.data = torch.zeros(8, 12)
        f.o.step()
    f.refused("STRATA_ERR_INVALID_ARG", wrong_shape)

    def weight_decay_negative():  # live per group (test_groups.py), but checked
        for p, g in zip(ps, grads(51)):
            p.grad = g
        f.o.param_groups[0]["weight_decay"] = -0.1
        try:
            f.o.step()
        finally:
            f.o.param_groups[0]["weight_decay"] = 0.0
    f.refused("STRATA_ERR_INVALID_ARG", weight_decay_negative)

    def added_after_construction():
        f.o.add_param_group({"params": [torch.nn.Parameter(torch.ones(3, 3))]})
    f.refused("STRATA_ERR_STATE", added_after_construction)

    def param_became_float64():
        saved = ps[0].data
        ps[0].data = ps[0].data.double()
        try:
            f.o.step()
        finally:
            ps[0].data = saved
    f.refused("STRATA_ERR_INVALID_ARG", param_became_float64)

    def param_changed_shape():  # strata would read (and write) past the new storage
        saved = ps[0].data
        ps[0].data = torch.zeros(2, 2)
        ps[0].grad = torch.zeros(2, 2)
        try:
            f.o.step()
        finally:
            ps[0].data = saved
            ps[0].grad = None
    f.refused("STRATA_ERR_INVALID_ARG", param_changed_shape)


def test_load_state_dict_from_elsewhere_refused():
    f = Fixture()
    other_opt = st.Muon(make_params())
    torch_opt = torch.optim.AdamW([p for _, p in make_params()])
    g = torch.Generator().manual_seed(5)
    other_model = st.Shampoo([("x", torch.nn.Parameter(torch.randn(6, 6, generator=g)))],
                             precondition_frequency=2)
    for p in other_model.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    other_model.step()
    f.refused("STRATA_ERR_INVALID_ARG", lambda: f.o.load_state_dict(other_opt.state_dict()))
    f.refused("STRATA_ERR_INVALID_ARG", lambda: f.o.load_state_dict(torch_opt.state_dict()))
    f.refused("STRATA_ERR_INVALID_ARG", lambda: f.o.load_state_dict(other_model.state_dict()))
    sd = f.o.state_dict()
    sd["strata"]["files"]["rank-00000.safetensors"][-5] ^= 1  # a flipped bit
    f.refused("STRATA_ERR_DATA", lambda: f.o.load_state_dict(sd))


def test_group_hyperparameters_checked():
    a = torch.nn.Parameter(torch.ones(4, 4))
    b = torch.nn.Parameter(torch.ones(4, 4))
    v = torch.nn.Parameter(torch.ones(4))
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo([{"params": [a], "optimizer": "sgd"}])
    assert status_of(e) == "STRATA_ERR_INVALID_ARG"
    # groups with their own lr and different schedules: fine
    o = st.Shampoo([{"params": [a], "lr": 0.5}, {"params": [b], "optimizer": "adamw"}])
    o.param_groups[0]["lr"] *= 0.5
    a.grad, b.grad = torch.ones(4, 4), torch.ones(4, 4)
    o.step()
    # a tail vector in a group whose lr was 0 at construction follows no ratio
    o = st.Shampoo([{"params": [a, v], "lr": 0.0}])
    o.param_groups[0]["lr"] = 0.1
    a.grad, v.grad = torch.ones(4, 4), torch.ones(4)
    before = [a.detach().clone(), v.detach().clone()]
    with pytest.raises(strata.StrataError) as e:
        o.step()
    assert status_of(e) == "STRATA_ERR_UNSUPPORTED"
    assert torch.equal(a, before[0]) and torch.equal(v, before[1])
    o.param_groups[0]["lr"] = 0.0
    o.step()


def test_import_strata_without_torch_and_version():
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None; import strata; "
            "print(strata.version())")
    env = dict(__import__("os").environ)
    env["PYTHONPATH"] = sys.path[1] if len(sys.path) > 1 else ""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=__import__("os").path.dirname(strata.__file__) + "/..")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == strata.version()


def test_load_state_dict_other_lr_refused():
    f = Fixture()
    named = make_params()
    other = st.Shampoo(named, precondition_frequency=2, lr=0.5)
    f.refused("STRATA_ERR_INVALID_ARG", lambda: f.o.load_state_dict(other.state_dict()))


def test_reentry_from_a_log_handler_refused():
    """strata's log sink runs Python logging inside strata_step: a handler that
    calls back into the optimizer gets STRATA_ERR_STATE, not a deadlock or a
    second thread of control inside the runtime."""
    import logging
    seen = []
    p = torch.nn.Parameter(torch.ones(4, 4))
    o = st.Shampoo([p])

    class Handler(logging.Handler):
        def emit(self, record):
            if not seen:
                try:
                    o.stats()
                except strata.StrataError as e:
                    seen.append(e.status)
    h = Handler()
    logging.getLogger("strata").addHandler(h)
    logging.getLogger("strata").setLevel(logging.DEBUG)
    try:
        p.grad = torch.full((4, 4), 1e19)  # finite, but could overflow: a WARN inside the step
        o.step()
    finally:
        logging.getLogger("strata").removeHandler(h)
        logging.getLogger("strata").setLevel(logging.NOTSET)
    assert seen == ["STRATA_ERR_STATE"]


def test_load_refused_after_strata_load_keeps_weights(tmp_path):
    """load(dir) of a checkpoint strata_load accepts but the binding refuses
    (the groups' configured lr differ): the parameters keep their weights
    (strata_load wrote into scratch copies)."""
    a = [("w", torch.nn.Parameter(torch.ones(4, 4)))]
    oa = st.Shampoo(a, lr=0.01)
    a[0][1].grad = torch.ones(4, 4)
    oa.step()
    oa.save(tmp_path / "ck")
    b = [("w", torch.nn.Parameter(torch.full((4, 4), 3.0)))]
    ob = st.Shampoo(b, lr=0.02)
    with pytest.raises(strata.StrataError) as e:
        ob.load(tmp_path / "ck")
    assert e.value.status == "STRATA_ERR_INVALID_ARG" and "lr" in e.value.message
    assert torch.equal(b[0][1].detach(), torch.full((4, 4), 3.0))


def test_bf16_factors_check_the_routed_family_only():
    """strata_config.state_dtype_factors is the matrix optimizer's: SOAP with
    its beta2 0.95 stores bf16 factors (half the float32 bytes in the ledger)
    without Shampoo's copy (library beta2 1) being checked; Shampoo itself
    with beta2 1 is refused, naming the rule."""
    m = torch.nn.Linear(16, 8)
    o = st.SOAP(m.named_parameters(), lr=1e-3, state_dtype_factors="bf16", beta2=0.95)
    assert o.memory_ledger()["device"]["factors"]["bytes"] == (8 * 8 + 16 * 16) * 2
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo(m.named_parameters(), state_dtype_factors="bf16")
    assert "STRATA_ERR_INVALID_ARG" in str(e.value) and "0.99609375" in str(e.value)
