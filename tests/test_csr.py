"""CSR helpers: positions within rows, gathering rows, replacing rows."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from icefabric.csr import csr_from_lists, gather, indptr_from_lengths, replace_rows, within

rows = st.lists(st.lists(st.integers(0, 99), max_size=5), max_size=8)


def test_within_and_gather_by_hand():
    assert within([2, 0, 3]).tolist() == [0, 1, 0, 1, 2]
    assert gather([5, 0], [2, 3]).tolist() == [5, 6, 0, 1, 2]
    assert indptr_from_lengths([2, 0, 3]).tolist() == [0, 2, 2, 5]


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
