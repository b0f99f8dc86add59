"""Scenario -> communicators: NCCL version, NCCL_* environment and a log's channel count."""

from __future__ import annotations

import numpy as np
import pytest

from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import ScenarioError, loads

from .test_loader import GOOD


def _job(extra: str, base: str = GOOD):
    return base.replace("    pools: [h]\n", "    pools: [h]\n" + extra)


def _comm(text: str):
    ls = loads(text, "t.yaml")
    (job,) = scenario_workload(ls, build_fabric(ls), 1 << 20).jobs
    return job.comm


def test_nccl_version_sets_channels_per_nic_and_split():
    default, old = _comm(GOOD), _comm(_job("    nccl_version: 2.19.4\n"))
    assert (default.n_channels, old.n_channels) == (16, 32)  # 8-NIC H100: 2 vs 4 per NIC
    assert not default.nccl.split_data_on_qps and old.nccl.split_data_on_qps
    ls = loads(_job("    nccl_version: 2.19.4\n"), "t.yaml")
    w = scenario_workload(ls, build_fabric(ls), 1 << 20).workload
    assert w.n_conns == 2 * 32  # each channel's ring crosses between the two servers twice


def test_explicit_channels_win_over_the_version():
    assert _comm(_job("    nccl_version: 2.19.4\n    channels: 8\n")).n_channels == 8


def test_nccl_env_sets_qps_and_clamps_channels():
    comm = _comm(_job("    nccl_env: {NCCL_IB_QPS_PER_CONNECTION: 4, NCCL_MAX_NCHANNELS: 8}\n"))
    assert (comm.qps_per_connection, comm.n_channels) == (4, 8)
    ls = loads(_job("    nccl_env: {NCCL_IB_QPS_PER_CONNECTION: 4}\n"), "t.yaml")
    w = scenario_workload(ls, build_fabric(ls), 1 << 20).workload
    assert w.n_qps == 4 * w.n_conns


@pytest.mark.parametrize("extra, where, msg", [
    ("    qps_per_connection: 2\n    nccl_env: {NCCL_IB_QPS_PER_CONNECTION: 4}\n",
     "jobs[0]", "contradicts nccl_env.NCCL_IB_QPS_PER_CONNECTION 4"),
    ("    nccl_env: {NCCL_ALGO: 1}\n", "jobs[0].nccl_env", "NCCL_ALGO'] are not modelled"),
    ("    nccl_version: 2.17.1\n    nccl_env: {NCCL_IB_SPLIT_DATA_ON_QPS: 0}\n",
     "jobs[0].nccl_env", "added in 2.18"),
    ("    nccl_version: latest\n", "jobs[0].nccl_version", "String should match pattern"),
])
def test_bad_nccl_settings_name_the_field(extra, where, msg):
    with pytest.raises(ScenarioError) as e:
        ls = loads(_job(extra), "t.yaml")
        scenario_workload(ls, build_fabric(ls), 1 << 20)
    assert e.value.field == where and msg in str(e.value)


def test_nccl_settings_on_an_hccl_job_are_an_error():
    text = _job("    nccl_env: {NCCL_IB_QPS_PER_CONNECTION: 2}\n").replace(
        "server: hgx-h100", "server: atlas-800t-a2")
    with pytest.raises(ScenarioError, match="runs hccl, which reads no NCCL_"):
        _comm(text)



def _fabric(profiles: str, seed: int = 0):
    text = GOOD.replace("  spines: 2\n", f"  spines: 2\n  hash_profiles: {profiles}\n")
    return build_fabric(loads(text.replace("name: t", f"name: t\nseed: {seed}"), "t.yaml"))


def test_hash_profiles_per_role_set_every_switch_of_the_role():
    from icefabric.control.hashing import fabric_hash_configs
    from icefabric.topology.model import LEAF, SPINE

    f = _fabric("{leaf: correlated, spine: spectrum_cumulus}")
    cfg = fabric_hash_configs(f)
    leaves, spines = f.nodes_of_kind(LEAF), f.nodes_of_kind(SPINE)
    assert all(cfg[s].seed == 0 and cfg[s].offset == 0 and not cfg[s].symmetric
               for s in leaves)
    assert all(cfg[s].symmetric and f.node_hash_profile[s] == "spectrum_cumulus"
               for s in spines)
    assert len({cfg[s].seed for s in spines}) == len(spines)  # switchd: a random seed each


def test_random_profile_seeds_are_reproducible_from_the_scenario_seed():
    a, b, c = _fabric("independent", 1), _fabric("independent", 1), _fabric("independent", 2)
    assert np.array_equal(a.node_hash_seed, b.node_hash_seed)
    assert not np.array_equal(a.node_hash_seed, c.node_hash_seed)


def test_unknown_hash_profile_names_the_field():
    with pytest.raises(ScenarioError) as e:
        _fabric("{spine: tomahawk}")
    assert e.value.field == "fabric.hash_profiles" and "known: broadcom_rtag7_fboss" in str(e.value)
