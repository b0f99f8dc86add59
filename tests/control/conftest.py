import numpy as np
import pytest

from icefabric.topology.builders import (
    FatTreeSpec,
    LeafSpineSpec,
    ServerGroup,
    fat_tree,
    leaf_spine,
)
from icefabric.topology.catalog import server_profile
from icefabric.topology.routing import Routing


@pytest.fixture(scope="session")
def small_fabric():
    """4 H100 servers, 2 per leaf, 4 spines x 2 links (16 paths between the two leaves)."""
    return leaf_spine([ServerGroup(server_profile("hgx-h100"), 4, "h")],
                      LeafSpineSpec(servers_per_leaf=2, n_spines=4, links_per_spine=2))


@pytest.fixture(scope="session")
def hetero_fabric():
    """2 H100 (400G) + 2 Ascend (200G) servers, one per leaf, 3 spines."""
    return leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h"),
                       ServerGroup(server_profile("atlas-800t-a2"), 2, "a")],
                      LeafSpineSpec(servers_per_leaf=1, n_spines=3))


@pytest.fixture(scope="session")
def ft_fabric():
    return fat_tree([ServerGroup(server_profile("hgx-h100"), 8, "h")],
                    FatTreeSpec(pods=2, leaves_per_pod=2, aggs_per_pod=4, n_cores=8,
                                servers_per_leaf=2))


def nics_of(fabric, servers):
    return np.array([n for s in servers for n in fabric.servers[s].nics], dtype=np.int64)


@pytest.fixture(scope="session")
def routing_of():
    cache = {}

    def get(f, down=()):
        key = (id(f), tuple(down))
        if key not in cache:
            cache[key] = Routing(f, down)
        return cache[key]
    return get
