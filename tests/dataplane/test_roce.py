"""RoCEv2 source-port derivation: the Linux formulas and their inverse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefabric.dataplane.roce import (
    IBV_RATE_GBPS,
    SPORT_MAX,
    SPORT_MIN,
    NicPortLimits,
    allocate_qpns,
    default_sports,
    flow_label_for_sport,
    flow_label_to_udp_sport,
    nccl_qp_for_request,
    qps_split,
    rdma_calc_flow_label,
    rdma_get_udp_sport,
    static_rate,
)

qpn = st.integers(0, 0xFFFFFF)


@pytest.mark.parametrize(
    ("lqpn", "rqpn", "fl", "sport"),
    [(0x1234, 0x5678, 0x60002, 0xC01A), (0x5678, 0x1234, 0x60002, 0xC01A),
     (0x10A, 0x20B, 0x21F6E, 0xDF66), (100, 101, 0x02774, 0xE774)],
)
def test_worked_examples(lqpn, rqpn, fl, sport):
    assert int(rdma_calc_flow_label(lqpn, rqpn)) == fl
    assert int(rdma_get_udp_sport(0, lqpn, rqpn)) == sport
    assert int(default_sports(lqpn, rqpn)) == sport


def test_vectorised_worked_examples():
    l = np.array([0x1234, 0x5678, 0x10A, 100])
    r = np.array([0x5678, 0x1234, 0x20B, 101])
    assert default_sports(l, r).tolist() == [0xC01A, 0xC01A, 0xDF66, 0xE774]


@given(qpn, qpn)
def test_symmetric_and_in_range(l, r):
    assert int(rdma_calc_flow_label(l, r)) == int(rdma_calc_flow_label(r, l))
    s = int(default_sports(l, r))
    assert SPORT_MIN <= s <= SPORT_MAX


def _calc_flow_label_ref(l: int, r: int) -> int:
    v = (l * r) & (2**64 - 1)
    v ^= v >> 20
    v ^= v >> 40
    return v & 0xFFFFF


@given(qpn, qpn)
def test_flow_label_matches_python_reference(l, r):
    assert int(rdma_calc_flow_label(l, r)) == _calc_flow_label_ref(l, r)


def test_explicit_flow_label_wins():
    assert int(rdma_get_udp_sport(0x0001, 0x1234, 0x5678)) == 0xC001
    assert int(rdma_get_udp_sport(0x3FFF, 1, 2)) == 0xFFFF
    assert int(rdma_get_udp_sport(0x4001, 1, 2)) == 0xC000


def test_inverse_flow_label_covers_every_port():
    ports = np.arange(SPORT_MIN, SPORT_MAX + 1)
    fl = flow_label_for_sport(ports)
    assert np.all(fl > 0) and np.all(fl <= 0xFFFFF)
    assert np.array_equal(flow_label_to_udp_sport(fl), ports)
    assert np.array_equal(rdma_get_udp_sport(fl, 7, 9), ports)
    assert int(flow_label_for_sport(0xC000)) == 0x4001
    with pytest.raises(ValueError):
        flow_label_for_sport(4791)


def test_port_limits():
    lim = NicPortLimits()
    assert lim.n_ports == 16384 and lim.ports()[0] == 0xC000 and lim.ports()[-1] == 0xFFFF
    assert lim.contains(np.array([0xBFFF, 0xC000])).tolist() == [False, True]
    assert NicPortLimits(1000, 1009).n_ports == 10
    with pytest.raises(ValueError):
        NicPortLimits(0xF000, 0xE000)


def test_allocate_qpns_model():
    a = allocate_qpns(64, seed=3)
    assert np.array_equal(a, allocate_qpns(64, seed=3))
    assert np.all(np.diff(a) >= 1) and a[0] >= 0x100 and a[-1] <= 0xFFFFFF
    assert np.array_equal(np.diff(a), np.ones(63))
    g = allocate_qpns(64, seed=3, mean_gap=4.0)
    assert np.all(np.diff(g) >= 1)
    assert allocate_qpns(0, seed=1).size == 0
    # default sports of NCCL QPs between two devices follow from the QPNs
    sp = default_sports(allocate_qpns(8, seed=1), allocate_qpns(8, seed=2))
    assert np.all((sp >= SPORT_MIN) & (sp <= SPORT_MAX))


@given(st.integers(0, 1 << 30), st.integers(1, 128))
def test_qps_split_sums_and_alignment(size, nqps):
    parts = qps_split(size, nqps)
    assert parts.sum() == size and parts.shape == (nqps,)
    chunk = parts[0]
    assert chunk % 128 == 0 or nqps == 1 or size < 128 or chunk == size
    assert np.all(parts[:-1] >= parts[1:])


def test_qps_split_examples():
    assert qps_split(1000, 4).tolist() == [256, 256, 256, 232]
    assert qps_split(1000, 4, align_bytes=1).tolist() == [250, 250, 250, 250]
    assert nccl_qp_for_request(np.arange(5), 2).tolist() == [0, 1, 0, 1, 0]


@given(st.floats(2.5e9, 2e12))
def test_static_rate_is_the_largest_step_not_above_the_plan(rate):
    e, r = static_rate(rate)
    steps = np.array(sorted(IBV_RATE_GBPS.values())) * 1e9
    assert r == steps[steps <= rate].max() and IBV_RATE_GBPS[int(e)] * 1e9 == r


def test_static_rate_edges():
    e, r = static_rate([1e6, float("inf"), 600e9, 800e9, 25e9])
    assert e.tolist() == [2, 0, 22, 22, 15]  # floor 2.5G; inf = IBV_RATE_MAX (no limit)
    assert (r / 1e9).tolist() == [2.5, float("inf"), 600.0, 600.0, 25.0]


def test_static_rate_table_is_libibverbs_own():
    """Every enum value names the rate rdma-core's ibv_rate_to_mbps() gives it (which is
    the signalling rate: the nominal rate plus up to 6.25 % of line coding)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("ibverbs")
    if name is None:
        pytest.skip("libibverbs is not installed")
    lib = ctypes.CDLL(name)
    coding = {e: lib.ibv_rate_to_mbps(e) / 1000 / g for e, g in IBV_RATE_GBPS.items()}
    assert all(1.0 <= c <= 1.0625 for c in coding.values()), coding
