"""Shampoo's root_method keyword (strata_shampoo_config.root_method): the
eigh-free Newton roots run and are counted in stats(), the default (eigh)
counts none, warm_qr runs (and at warm_qr_tolerance 0 falls back on every
root after a factor's first, giving eigh's weights exactly), and a bad name is
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
