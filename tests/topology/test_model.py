import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import LinkPairs, reverse_links


def test_a_cable_is_named_and_found_as_in_link_names():
    """Cable k between two switches is ``a->b/k`` and ``b->a/k``: the one number the
    results, the scenario's failures and the controller's API share."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=2, links_per_spine=4))
    names = f.link_names()
    every = f.links_between("leaf0", "spine1")
    assert len(every) == 8
    for k in range(4):
        ids = f.links_between("spine1", "leaf0", cable=k)
        assert sorted(names[i] for i in ids) == sorted(
            ["leaf0->spine1" + (f"/{k}" if k else ""), "spine1->leaf0" + (f"/{k}" if k else "")])
    cables = np.concatenate([f.links_between("leaf0", "spine1", cable=k) for k in range(4)])
    assert np.array_equal(np.sort(cables), every)
    assert len(f.links_between("leaf0", "spine1", cable=4)) == 0
    assert len(f.links_between("leaf0", "spine1", cable=-1)) == 0


def test_link_cable_numbers_parallel_links_as_their_names():
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                   LeafSpineSpec(servers_per_leaf=2, n_spines=2, links_per_spine=3))
    names = f.link_names()
    ids = f.links_between("leaf1", "spine0")
    assert sorted((int(f.link_cable[i]), names[i]) for i in ids) == [
        (0, "leaf1->spine0"), (0, "spine0->leaf1"), (1, "leaf1->spine0/1"),
        (1, "spine0->leaf1/1"), (2, "leaf1->spine0/2"), (2, "spine0->leaf1/2")]
    nic = f.links_between("h-0/nic0", "leaf0")
    assert len(nic) == 2 and not f.link_cable[nic].any()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.booleans()), max_size=30))
def test_reverse_links_pair_the_two_directions_of_each_cable(cables):
    """Cable k's ``a->b/k`` and ``b->a/k`` are each other's reverse (the fluid engine's ACK
    path); a simplex link has none."""
    src, dst = [], []
    for a, b, duplex in cables:
        if a == b:
            continue
        src.append(a), dst.append(b)
        if duplex:
            src.append(b), dst.append(a)
    src, dst = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
    rev = reverse_links(src, dst)
    k = LinkPairs(src, dst).cable()
    has = rev >= 0
    assert np.array_equal(src[rev[has]], dst[has]) and np.array_equal(dst[rev[has]], src[has])
    assert np.array_equal(k[rev[has]], k[has])
    assert np.array_equal(rev[rev[has]], np.flatnonzero(has))  # an involution
    # a link has a reverse exactly when its pair has at least k + 1 cables the other way
    back = np.array([np.sum((src == d) & (dst == s)) for s, d in zip(src, dst)], dtype=np.int64)
    assert np.array_equal(has, back > k)
