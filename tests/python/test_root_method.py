"""Shampoo's root_method keyword (strata_shampoo_config.root_method): the
eigh-free Newton roots run and are counted in stats(), the default (eigh)
counts none, and a bad name is refused by the binding with the field named."""
import pytest

import strata
import strata.torch as st
from test_step import grads, make_params


def run(**kw):
    named = make_params()
    o = st.Shampoo(named, precondition_frequency=2, **kw)
    for t in range(1, 5):
        for (_, p), g in zip(named, grads(t)):
            p.grad = g
        o.step()
    return o.stats()


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
