import numpy as np
import pytest

from icefabric.topology.builders import ServerGroup, leaf_spine
from icefabric.topology.catalog import ServerProfile, server_profile
from icefabric.units import gbps

TINY = ServerProfile(name="tiny-2x100", vendor="test", accelerator="T", n_accel=2, n_nics=2,
                     nic_bps=gbps(100), intra_bps=gbps(1000), pcie_bps=gbps(200),
                     library="nccl", intra_delay_ns=100)


@pytest.fixture
def tiny_profile():
    return TINY


@pytest.fixture
def small_fabric():
    """2 H100 servers + 2 Ascend servers, one server per leaf, 4 spines."""
    return leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h100"),
                       ServerGroup(server_profile("atlas-800t-a2"), 2, "ascend")],
                      servers_per_leaf=1, n_spines=4, links_per_spine=2)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
