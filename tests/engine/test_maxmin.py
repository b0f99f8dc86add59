import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.engine.maxmin import maxmin_rates


@st.composite
def instances(draw):
    L = draw(st.integers(1, 6))
    F = draw(st.integers(1, 8))
    A = np.zeros((L, F))
    for f in range(F):
        links = draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=L, unique=True))
        for l in links:
            A[l, f] = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))
    cap = np.array(draw(st.lists(st.floats(1.0, 100.0), min_size=L, max_size=L)))
    fcap = np.array(draw(st.lists(st.one_of(st.just(np.inf), st.floats(0.5, 50.0)),
                                  min_size=F, max_size=F)))
    return A, cap, fcap


@settings(max_examples=200, deadline=None)
@given(instances())
def test_maxmin_invariants(inst):
    A, cap, fcap = inst
    r = maxmin_rates(sp.csr_matrix(A), cap, fcap)
    load = A @ r
    # no link above capacity, no flow above its cap
    assert np.all(load <= cap * (1 + 1e-7))
    assert np.all(r <= fcap * (1 + 1e-7))
    # every flow is limited: at its cap, or on a saturated link where no other flow on that
    # link has a higher rate (max-min bottleneck condition)
    sat = load >= cap * (1 - 1e-6)
    for f in range(A.shape[1]):
        if r[f] >= fcap[f] * (1 - 1e-7):
            continue
        links = np.flatnonzero((A[:, f] > 0) & sat)
        assert len(links), f"flow {f} is not limited by anything"
        assert any(r[f] >= r[A[l] > 0].max() * (1 - 1e-6) for l in links)


def test_weighted_coupled_flow():
    # one coupled flow crossing link 0 twice (coefficient 2) shares it with a plain flow
    A = sp.csr_matrix(np.array([[2.0, 1.0]]))
    r = maxmin_rates(A, np.array([90.0]))
    np.testing.assert_allclose(r, [30.0, 30.0])


def test_flow_without_links_gets_its_cap():
    A = sp.csr_matrix((1, 2))
    np.testing.assert_array_equal(maxmin_rates(A, np.array([1.0]), np.array([5.0, np.inf])),
                                  [5.0, np.inf])


def _progressive_filling(A, cap, fcap):
    """Textbook progressive filling (Bertsekas & Gallager §6.5.2): grow every unfrozen flow
    by the same amount until a link saturates or a cap binds, freeze, repeat."""
    L, F = A.shape
    rate, frozen, rem = np.zeros(F), np.zeros(F, bool), cap.astype(float).copy()
    on_links = (A > 0).any(axis=0)
    rate[~on_links], frozen[~on_links] = fcap[~on_links], True
    while not frozen.all():
        s = A @ (~frozen)
        share = np.where(s > 0, rem / np.where(s > 0, s, 1), np.inf)
        d = min(share.min(), (fcap - rate)[~frozen].min())
        rate[~frozen] += d
        rem -= s * d
        sat = (s > 0) & (rem <= 1e-9 * cap)
        frozen |= ((A[sat] > 0).any(axis=0) | (rate >= fcap * (1 - 1e-9)))
    return rate


@settings(max_examples=300, deadline=None)
@given(instances())
def test_maxmin_equals_progressive_filling(inst):
    # the bottleneck-batched algorithm returns exactly what level-by-level filling returns
    A, cap, fcap = inst
    np.testing.assert_allclose(maxmin_rates(sp.csr_matrix(A), cap, fcap),
                               _progressive_filling(A, cap, fcap), rtol=1e-7)


def test_maxmin_chain_of_bottlenecks():
    # hand-computed: link 0 (cap 3) has flows 0,1,2 -> 1 each; link 1 (cap 5) carries flow 2
    # and flow 3 -> flow 3 gets 4; link 2 (cap 10) carries flow 3 and flow 4 -> flow 4 gets 6
    A = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]], float)
    r = maxmin_rates(sp.csc_matrix(A), np.array([3.0, 5.0, 10.0]))
    np.testing.assert_allclose(r, [1, 1, 1, 4, 6])
