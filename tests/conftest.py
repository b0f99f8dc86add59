import numpy as np
import pytest

from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
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
                      LeafSpineSpec(servers_per_leaf=1, n_spines=4, links_per_spine=2))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- databases: every store/service test runs on SQLite and on a real PostgreSQL server ----
@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL server for the session (see tests/postgres_cluster.py)."""
    import os

    from tests.postgres_cluster import ENV, PostgresUnavailable, start_cluster

    mode = os.environ.get(ENV, "auto")
    if mode == "off":
        pytest.skip(f"{ENV}=off")
    try:
        cluster = start_cluster()
    except PostgresUnavailable as e:
        if mode == "require":
            pytest.fail(f"PostgreSQL required ({ENV}=require) but unavailable: {e}")
        pytest.skip(f"PostgreSQL unavailable: {e}")
    yield cluster
    cluster.destroy()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A fresh empty database of each backend (SQLAlchemy URL)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ice.db"
    return request.getfixturevalue("pg_cluster").new_database()
