"""The batched engine's compiled pieces against the numpy code they replaced: the dominance
walk behind ``redundant_links`` and the rows the draws change (max-min as the
event-driven flow engine calls it: tests/engine/test_flow.py)."""

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.engine.batch_kernel import dominated_rows, varying_rows


def _sliced(A, pairs):
    """The loop ``redundant_links`` ran before the kernel, kept as the reference."""
    dropped = np.zeros(A.shape[0], dtype=bool)
    for a, b in pairs:
        if dropped[a] or dropped[b]:
            continue
        ra, rb = A[a], A[b]
        if np.all(ra.data <= rb[:, ra.indices].toarray().ravel()):
            dropped[a] = True
    return dropped


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 7), st.integers(1, 6), st.data())
def test_dominated_rows_equals_the_scipy_slicing(rows, cols, data):
    dense = np.array(data.draw(st.lists(
        st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0]), min_size=cols, max_size=cols),
        min_size=rows, max_size=rows)))
    A = sp.csr_matrix(dense)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, rows - 1), st.integers(0, rows - 1))
                               .filter(lambda p: p[0] != p[1]), max_size=12))
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    got = dominated_rows(A.indptr.astype(np.int64), A.indices.astype(np.int64),
                         A.data.astype(np.float64), a, b, rows)
    assert got.tolist() == _sliced(A, pairs).tolist()


def test_a_row_is_dropped_only_under_a_row_that_covers_it():
    A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 2.0, 0.0]]))
    ptr, idx, val = A.indptr.astype(np.int64), A.indices.astype(np.int64), A.data
    # (0, 1): row 0 <= row 1, dropped; (1, 2): row 1 has columns row 2 lacks, kept;
    # (2, 1): 2 <= 2, dropped; (2, 0): row 2 already dropped, skipped
    got = dominated_rows(ptr, idx, val, np.array([0, 1, 2, 2]), np.array([1, 2, 1, 0]), 3)
    assert got.tolist() == [True, False, True]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.data())
def test_varying_rows_are_the_rows_some_set_changes(n_sets, rows, data):
    sets = [[data.draw(st.lists(st.integers(0, 5), max_size=3)) for _ in range(rows)]
            for _ in range(n_sets)]
    if data.draw(st.booleans()):  # often a row the same in every set
        for s in sets[1:]:
            s[0] = sets[0][0]
    ptr = np.cumsum([0] + [len(r) for s in sets for r in s]).astype(np.int64)
    links = np.array([x for s in sets for r in s for x in r], dtype=np.int64)
    differs, varying = varying_rows(ptr, links, n_sets, 6)
    want = [any(s[m] != sets[0][m] for s in sets) for m in range(rows)]
    assert differs.tolist() == want
    on = {x for s in sets for m, r in enumerate(s) if want[m] for x in r}
    assert np.flatnonzero(varying).tolist() == sorted(on)
