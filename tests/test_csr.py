"""CSR helpers: positions within rows, gathering rows, replacing rows."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.csr import (
    CsrRows,
    copy_slices,
    csr_from_lists,
    dense_ids,
    gather,
    indptr_from_lengths,
    replace_rows,
    unique_inverse,
    within,
)

rows = st.lists(st.lists(st.integers(0, 99), max_size=5), max_size=8)


def test_within_and_gather_by_hand():
    assert within([2, 0, 3]).tolist() == [0, 1, 0, 1, 2]
    assert gather([5, 0], [2, 3]).tolist() == [5, 6, 0, 1, 2]
    assert indptr_from_lengths([2, 0, 3]).tolist() == [0, 2, 2, 5]


@given(st.lists(st.integers(0, 2**62), max_size=40), st.sampled_from([50, 10**6, 2**62]))
def test_unique_inverse_is_numpys(keys, width):
    # keys in a small span (ranked through a table), a wide one (one sort of the keys
    # packed with their positions), one too wide to pack (np.unique)
    a = np.array(keys, dtype=np.int64) % width
    span = int(a.max(initial=0)) + 1
    u, inv = unique_inverse(a, span)
    want_u, want_inv = np.unique(a, return_inverse=True)
    assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.tolist()
    assert dense_ids(a, span).tolist() == want_inv.tolist()


@given(rows, rows, st.data())
def test_replace_rows_is_the_list_replacement(old, new, data):
    if not old:
        return
    picked = data.draw(st.lists(st.integers(0, len(old) - 1), unique=True,
                                max_size=min(len(old), len(new))))
    ptr, vals = csr_from_lists(old)
    nptr, nvals = csr_from_lists(new[:len(picked)])
    got_ptr, got = replace_rows(ptr, vals, np.array(picked, dtype=np.int64), nptr, nvals)
    want = [list(r) for r in old]
    for i, r in enumerate(picked):
        want[r] = new[i]
    assert [got[got_ptr[i]:got_ptr[i + 1]].tolist() for i in range(len(want))] == want
    # gather picks whole rows out of a CSR
    idx = gather(ptr[:-1], np.diff(ptr))
    assert vals[idx].tolist() == [x for r in old for x in r]


@given(rows, rows, st.data())
def test_csr_rows_replaced_reads_as_the_list_replacement(old, new, data):
    if not old:
        return
    new = new[:len(old)]
    idx = data.draw(st.lists(st.integers(0, len(old) - 1), min_size=len(new),
                             max_size=len(new), unique=True))
    seq = CsrRows(*csr_from_lists(old))
    got = seq.replaced(np.asarray(idx, dtype=np.int64), new)
    want = [list(r) for r in old]
    for i, r in zip(idx, new):
        want[i] = r
    assert [r.tolist() for r in got] == want
    assert [r.tolist() for r in seq] == [list(r) for r in old]  # the original is untouched
    # replaced again: the second rows go after the first ones, the original stays shared
    idx2 = data.draw(st.lists(st.integers(0, len(old) - 1), max_size=3, unique=True))
    new2 = [[7] * (i % 3) for i in idx2]
    again = got.replaced(np.asarray(idx2, dtype=np.int64), new2)
    want2 = list(want)
    for i, r in zip(idx2, new2):
        want2[i] = r
    assert [again[i].tolist() for i in range(len(old))] == want2
    assert again.values is seq.values
    ptr, flat = csr_from_lists(got)
    assert flat.tolist() == [x for r in want for x in r]
    assert np.diff(ptr).tolist() == [len(r) for r in want]
    ptr, flat = csr_from_lists(again)
    assert flat.tolist() == [x for r in want2 for x in r]


def test_csr_rows_index_like_a_list():
    seq = CsrRows(np.array([0, 2, 2, 3]), np.array([7, 8, 9]))
    assert len(seq) == 3
    assert seq[-1].tolist() == [9]
    assert [r.tolist() for r in seq[0:2]] == [[7, 8], []]
    with pytest.raises(IndexError, match="row 3 of 3"):
        seq[3]


@settings(deadline=None)  # the first call compiles the kernel
@given(rows)
def test_copy_slices_is_the_gather_assignment(lists):
    """copy_slices writes what ``dst[gather(at, n)] = src[gather(start, n)]`` writes."""
    indptr, src = csr_from_lists(lists)
    n = np.diff(indptr)
    start = indptr[:-1][::-1].copy()  # the rows in reverse, to fresh places
    n = n[::-1].copy()
    at = indptr_from_lengths(n)[:-1] + 3
    want = np.full(int(n.sum()) + 3, -1, dtype=np.int64)
    want[gather(at, n)] = src[gather(start, n)]
    got = np.full(len(want), -1, dtype=np.int64)
    copy_slices(got, at, src, start, n)
    assert got.tolist() == want.tolist()
