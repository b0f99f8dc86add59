import numpy as np

from icefabric.topology.builders import ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile


def test_a_cable_is_named_and_found_as_in_link_names():
    """Cable k between two switches is ``a->b/k`` and ``b->a/k``: the one number the
    results, the scenario's failures and the controller's API share."""
    f = leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")], servers_per_leaf=2,
                   n_spines=2, links_per_spine=4)
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
