"""Shampoo's root_method keyword (strata_shampoo_config.root_method): the
eigh-free Newton roots run and are counted in stats(), the default (eigh)
counts none, newton_f32 (float32 Newton roots on the backend) trains and
resumes from its state_dict bit-identically, warm_qr runs (and at warm_qr_tolerance 0 falls back on every
root after a factor's first, giving eigh's weights exactly) and resumes from its
state_dict bit-identically (its eigenbases are state), warm_qr_f32 (its float32
form) runs with its own weights and fallbacks, and a bad name is
refused by the binding with the field named."""
import pytest

import strata
import strata.torch as st
from test_step import grads, make_params


def run(weights=False, frequency=2, **kw):
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=frequency, **kw)
    for t in range(1, 5):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
    return (o.stats(), [p.detach().clone() for _, p in named]) if weights else o.stats()


def test_warm_qr_roots():
    s, w = run(True, 1, root_method="warm_qr", epsilon_rel=1e-5)
    e, we = run(True, 1, epsilon_rel=1e-5)
    assert s["root_refreshes"] == e["root_refreshes"] > 0 and s["root_newton"] == 0
    assert any(not bool((a == b).all()) for a, b in zip(w, we))  # warm roots differ
    z, wz = run(True, 1, root_method="warm_qr", epsilon_rel=1e-5, warm_qr_tolerance=0.0)
    # tol 0: every root after a factor's first falls back (first roots: 1 / 4 of 4 steps)
    assert z["root_fallbacks"] == z["root_refreshes"] * 3 // 4 > 0
    assert all(bool((a == b).all()) for a, b in zip(wz, we))


def test_warm_qr_f32_roots():
    """root_method="warm_qr_f32" (warm_qr in float32, ssyevd first roots and
    fallbacks): as many roots as warm_qr, its own weights (float32 rounding),
    and at tolerance 0 every root after a factor's first falls back."""
    s, w = run(True, 1, root_method="warm_qr_f32", epsilon_rel=1e-5)
    q, wq = run(True, 1, root_method="warm_qr", epsilon_rel=1e-5)
    assert s["root_refreshes"] == q["root_refreshes"] > 0 and s["root_newton"] == 0
    assert s["root_fallbacks"] < s["root_refreshes"] * 3 // 4  # warm roots were used
    assert any(not bool((a == b).all()) for a, b in zip(w, wq))
    z = run(False, 1, root_method="warm_qr_f32", epsilon_rel=1e-5, warm_qr_tolerance=0.0)
    assert z["root_fallbacks"] == z["root_refreshes"] * 3 // 4 > 0


def test_newton_roots_counted():
    s = run(root_method="newton", epsilon_rel=1e-5)
    assert s["root_refreshes"] > 0
    assert s["root_newton"] + s["root_fallbacks"] == s["root_refreshes"]
    assert s["root_newton"] > 0
    e = run()
    assert e["root_newton"] == 0 and e["root_fallbacks"] == 0


def test_bad_root_method_refused():
    p = make_params()
    with pytest.raises(strata.StrataError) as e:
        st.Shampoo(p, root_method="svd")
    assert e.value.status == "STRATA_ERR_INVALID_ARG" and "root_method" in e.value.message


def test_warm_qr_state_dict_resume():
    """The warm bases are optimizer state: a warm_qr run resumed from its
    state_dict (through torch.save) is bit-identical to the uninterrupted
    run (without them each factor's first root after the resume would be
    an eigh root), and the state_dict holds them."""
    import io

    import torch

    kw = dict(precondition_frequency=1, root_method="warm_qr", epsilon_rel=1e-5)

    def steps(named, o, start, stop):
        for t in range(start, stop):
            for (_, p), g in zip(named, grads(t)):
                p.grad = g
            o.step()
            o.zero_grad(set_to_none=True)

    full = make_params()
    o = st.Shampoo(full, **kw)
    steps(full, o, 1, 9)
    half = make_params()
    o = st.Shampoo(half, **kw)
    steps(half, o, 1, 5)
    assert o.stats()["root_refreshes"] - o.stats()["root_fallbacks"] > 0
    buf = io.BytesIO()
    torch.save({"model": {n: p.detach() for n, p in half}, "opt": o.state_dict()}, buf)
    assert b"warm_basis_L" in buf.getvalue()
    buf.seek(0)
    ck = torch.load(buf)
    named2 = make_params(seed=7)
    with torch.no_grad():
        for n, p in named2:
            p.copy_(ck["model"][n])
    o2 = st.Shampoo(named2, **kw)
    o2.load_state_dict(ck["opt"])
    steps(named2, o2, 5, 9)
    assert all(bool((a.detach() == b.detach()).all()) for (_, a), (_, b) in zip(named2, full))


def test_newton_f32_trains_and_resumes():
    """root_method="newton_f32" (the float32 Newton root on the optimizer's
    backend): at eps_rel 1e-4 its roots are Newton's (counted, none lost),
    the weights stay within float32 root rounding of eigh's, and a run
    resumed from its state_dict is bit-identical to the uninterrupted one
    (it keeps no state beyond the factors: every root is recomputed)."""
    import io

    import torch

    kw = dict(precondition_frequency=1, root_method="newton_f32", epsilon_rel=1e-4)
    s, w = run(True, 1, root_method="newton_f32", epsilon_rel=1e-4)
    e, we = run(True, 1, epsilon_rel=1e-4)
    assert s["root_refreshes"] == e["root_refreshes"] > 0
    assert s["root_newton"] + s["root_fallbacks"] == s["root_refreshes"]
    assert s["root_newton"] > 0
    rel = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(w, we))
    assert rel < 1e-4, rel

    def steps(named, o, start, stop):
        for t in range(start, stop):
            for (_, p), g in zip(named, grads(t)):
                p.grad = g
            o.step()
            o.zero_grad(set_to_none=True)

    full = make_params()
    o = st.Shampoo(full, **kw)
    steps(full, o, 1, 9)
    half = make_params()
    o = st.Shampoo(half, **kw)
    steps(half, o, 1, 5)
    buf = io.BytesIO()
    torch.save({"model": {n: p.detach() for n, p in half}, "opt": o.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf)
    named2 = make_params(seed=7)
    with torch.no_grad():
        for n, p in named2:
            p.copy_(ck["model"][n])
    o2 = st.Shampoo(named2, **kw)
    o2.load_state_dict(ck["opt"])
    steps(named2, o2, 5, 9)
    assert o2.stats()["root_newton"] > 0
    assert all(bool((a.detach() == b.detach()).all()) for (_, a), (_, b) in zip(named2, full))
