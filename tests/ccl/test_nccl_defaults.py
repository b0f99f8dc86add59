"""NCCL version defaults: channels, QPs per connection, data split (NVIDIA/nccl tags)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefabric.ccl.nccl_defaults import (
    NcclModelError,
    NcclServerView,
    NcclSettings,
    parse_version,
    ring_channels,
    server_view,
)
from icefabric.topology.catalog import server_profile

H100 = server_view(90, 8, 400e9, 512e9)  # 8 x 400G ConnectX-7, PCIe Gen5 x16
A100 = server_view(80, 8, 200e9, 256e9)  # 8 x 200G ConnectX-6, PCIe Gen4 x16


def channels(version, server=H100, **env):
    return ring_channels(NcclSettings.resolve(version, env), server, n_nodes=2)


def test_server_view_is_what_nccl_prints():
    # NCCL's H100 topology dump: "maxBw 48.0", NET[50.0], PCI[48.0] (nccl-tests#256).
    assert (H100.nic_GBps, H100.pcie_GBps) == (50.0, 48.0)
    assert (A100.nic_GBps, A100.pcie_GBps) == (25.0, 24.0)
    p = server_profile("hgx-h100")
    assert server_view(p.cuda_sm, p.n_nics, p.nic_bps, p.pcie_bps) == H100
    assert server_view(None, 8, 400e9, 512e9) is None  # AMD / Ascend: not NCCL's search


@pytest.mark.parametrize("version, expected", [
    # v2.17.1: no "4 compute channels" rule in connect.cc -> 8 search x 2 = 16
    ("2.17.1", 16),
    # v2.18.1 connect.cc:403 / v2.18.6 :405 / v2.19.4 :410: minCompCap == 90, bwIntra 48 > 45,
    # 2*16 <= MAXCHANNELS -> 32 (search.cc keeps 8 channels: ccMin > 80, bw 48 < 50, 8 > 4)
    ("2.18.1", 32), ("2.18.6", 32), ("2.19.3", 32), ("2.19.4", 32),
    # v2.20.3 connect.cc:456 and v2.24.3 :469: only while nChannels < 16 -> stays 16
    ("2.20.3", 16), ("2.20.5", 16), ("2.24.3", 16),
    # v2.25.1 :466, v2.27.3 :466, v2.30.7 :481: minCompCap >= 90, still nChannels < 16
    ("2.25.1", 16), ("2.27.3", 16), ("2.27.7", 16), ("2.30.7", 16),
])
def test_8nic_h100_channels_follow_the_release(version, expected):
    assert channels(version) == expected


@pytest.mark.parametrize("version", ["2.17.1", "2.18.6", "2.19.4", "2.20.3", "2.27.7"])
def test_8nic_a100_runs_two_channels_per_nic_in_every_release(version):
    # bw 24 < 25: no search duplication, not sm90 -> Postset doubling only.
    assert channels(version, A100) == 16


def test_four_nic_h100_duplicates_in_the_search_from_2_18_3():
    four = NcclServerView(cuda_sm=90, n_nics=4, nic_GBps=50.0, pcie_GBps=48.0)
    # 2.17: 4 -> 8; 2.18.1: 4 -> 8 -> 16 (bw 48); 2.18.3+: DupChannels 4 -> 8 at bw 24,
    # Postset -> 16, bw 24 is below the sm90 rule's 45.
    assert [channels(v, four) for v in ("2.17.1", "2.18.1", "2.19.4", "2.27.7")] == \
        [8, 16, 16, 16]


def test_data_split_and_qps_defaults_by_release():
    assert NcclSettings.resolve("2.17.1").split_data_on_qps  # no parameter: always split
    assert NcclSettings.resolve("2.19.4").split_data_on_qps  # IB_SPLIT_DATA_ON_QPS=1
    assert not NcclSettings.resolve("2.20.3").split_data_on_qps  # default 0: round-robin
    assert not NcclSettings.resolve().split_data_on_qps  # default version 2.27.7
    assert {NcclSettings.resolve(v).qps_per_connection for v in ("2.17", "2.19", "2.27")} \
        == {1}


def test_environment_overrides_the_release():
    s = NcclSettings.resolve("2.27.7", {"NCCL_IB_QPS_PER_CONNECTION": "4",
                                         "NCCL_IB_SPLIT_DATA_ON_QPS": 1})
    assert (s.qps_per_connection, s.split_data_on_qps) == (4, True)
    assert channels("2.19.4", NCCL_MAX_NCHANNELS=16) == 16
    assert channels("2.27.7", NCCL_MIN_NCHANNELS=32) == 32
    assert channels("2.27.7", NCCL_MIN_NCHANNELS=-2) == 16  # -2 = NCCL's "unset"


@pytest.mark.parametrize("version, env, msg", [
    ("2.27.7", {"NCCL_ALGO": "Ring"}, "not modelled"),
    ("2.17.1", {"NCCL_IB_SPLIT_DATA_ON_QPS": 0}, "added in 2.18"),
    ("2.27.7", {"NCCL_IB_QPS_PER_CONNECTION": 200}, "outside [1, 128]"),
    ("2.27.7", {"NCCL_MAX_NCHANNELS": "many"}, "not an integer"),
    ("two.nineteen", {}, "not an NCCL version"),
])
def test_bad_settings_are_named(version, env, msg):
    with pytest.raises(NcclModelError, match=msg.replace("[", r"\[")):
        NcclSettings.resolve(version, env)


def test_version_forms_and_the_modelled_range():
    assert parse_version("v2.19.3-1") == parse_version("2.19.3+cuda12.3") == (2, 19, 3)
    assert parse_version("2.20") == (2, 20, 0)
    with pytest.raises(NcclModelError, match="from 2.17 on"):
        channels("2.12.12")


@given(st.sampled_from(["2.17.1", "2.18.1", "2.18.3", "2.19.4", "2.20.3", "2.25.1", "2.27.7"]),
       st.integers(1, 16), st.sampled_from([12.5, 25.0, 50.0]), st.sampled_from([24.0, 48.0]),
       st.sampled_from([80, 90]))
def test_channels_stay_within_nccl_bounds(version, nics, nic, pcie, sm):
    c = channels(version, NcclServerView(sm, nics, nic, pcie))
    assert 2 <= c <= 64 and c % 2 == 0  # Postset always doubles; MAXCHANNELS = 64
