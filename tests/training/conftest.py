import pytest

from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
from icefabric.topology.catalog import server_profile


def fabric(*groups, servers_per_leaf=2, spines=2):
    """A leaf-spine of ``(profile, count, pool)`` groups."""
    return leaf_spine([ServerGroup(server_profile(p), n, name) for p, n, name in groups],
                      LeafSpineSpec(servers_per_leaf=servers_per_leaf, n_spines=spines))


@pytest.fixture
def h100x4():
    return fabric(("hgx-h100", 4, "h100"))


@pytest.fixture
def hetero():
    return fabric(("hgx-h100", 2, "h100"), ("atlas-800t-a2", 2, "ascend"))
