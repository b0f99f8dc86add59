import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.control.rates import allocate_rates, dag_phases


def test_dag_phases_are_depths():
    assert dag_phases([[], [], [0], [1, 2]]).tolist() == [0, 0, 1, 2]
    with pytest.raises(ValueError, match="cycle"):
        dag_phases([[1], [0]])


def test_heterogeneous_receivers_get_their_port_speed():
    # a 400G sender to a 200G receiver: the plan paces it at 200G (minus headroom), instead
    # of letting the 400G NIC build a queue at the 200G port
    A = sp.csr_matrix(np.array([[1.0], [1.0], [1.0]]))  # sender NIC, fabric, receiver port
    r = allocate_rates(A, np.array([400e9, 800e9, 200e9]), np.array([0]), headroom=0.02)
    assert r[0] == pytest.approx(196e9)


def test_job_weights_split_a_shared_bottleneck():
    A = sp.csr_matrix(np.array([[1.0, 1.0]]))
    r = allocate_rates(A, np.array([90.0]), np.array([0, 0]), weight=np.array([2.0, 1.0]),
                       headroom=0)
    np.testing.assert_allclose(r, [60.0, 30.0])


def test_phases_do_not_share_capacity():
    A = sp.csr_matrix(np.array([[1.0, 1.0]]))
    r = allocate_rates(A, np.array([90.0]), np.array([0, 1]), headroom=0)
    np.testing.assert_allclose(r, [90.0, 90.0])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 8), st.data())
def test_rates_are_feasible_in_every_phase(L, F, data):
    A = np.array([[data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) for _ in range(F)]
                  for _ in range(L)])
    A[data.draw(st.integers(0, L - 1)), :] += 1.0  # every flow crosses some link
    cap = np.array([data.draw(st.floats(1, 100)) for _ in range(L)])
    phase = np.array([data.draw(st.integers(0, 2)) for _ in range(F)])
    r = allocate_rates(sp.csr_matrix(A), cap, phase, headroom=0.05)
    for ph in np.unique(phase):
        m = phase == ph
        assert np.all(A[:, m] @ r[m] <= cap * 0.95 * (1 + 1e-7))
    assert np.all(r > 0)
