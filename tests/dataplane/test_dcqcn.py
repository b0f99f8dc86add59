"""DCQCN kernel, RED and PFC parameter checks against hand-stepped documented rules."""

import numpy as np
import pytest

from icefabric.dataplane.cc import get_cc
from icefabric.dataplane.dcqcn import (
    DcqcnParams,
    dcqcn_init,
    dcqcn_update,
    initial_matrix,
    state_matrix,
)
from icefabric.dataplane.ecn import RedParams, red_mark_probability
from icefabric.dataplane.pfc import PfcParams

G = 1.0 / 256


def test_hpcc_profile_matches_validation_config():
    p = DcqcnParams.hpcc_ns3_100g()
    assert p.g == G and p.alpha_update_interval_ns == 1000 and p.rate_decrease_interval_ns == 4000
    assert p.rate_increase_timer_ns == 300_000 and p.fast_recovery_steps == 1
    assert p.rate_ai_bps == 20e6 and p.rate_hai_bps == 200e6 and p.min_rate_bps == 1e9
    q = DcqcnParams.from_validation_config({"alpha_gain_g": 0.00390625, "rate_ai_mbps": 20,
                                            "rate_hai_mbps": 200, "min_rate_mbps": 1000,
                                            "byte_counter_bytes": None})
    assert q.rate_ai_bps == p.rate_ai_bps and q.byte_counter_bytes is None


def test_firmware_and_paper_profiles():
    fw = DcqcnParams.nvidia_firmware()
    assert fw.g == pytest.approx(5 / 1024) and fw.rate_ai_bps == 5e6 and fw.rate_hai_bps == 50e6
    assert fw.rate_increase_timer_ns == 300_000 and fw.rate_decrease_interval_ns == 4000
    pa = DcqcnParams.paper()
    assert pa.fast_recovery_steps == 5 and pa.cnp_interval_ns == 50_000 and pa.hyper_multiplier
    with pytest.raises(ValueError):
        DcqcnParams.profile("nope")


def test_initial_matrix_is_fresh_state():
    """The fluid engine's initial state matrix is the stacked :func:`dcqcn_init` state."""
    line = np.array([100e9, 25e9, 400e9])
    got = initial_matrix(line)
    want = state_matrix(dcqcn_init(line, DcqcnParams.hpcc_ns3_100g()))
    assert got.shape == want.shape == (14, 3), got.shape
    assert np.array_equal(got, want), got - want


def test_hand_stepped_firmware_sequence():
    """One CNP at t=0, then silence: the documented HPCC ns-3 / firmware rules step by step."""
    p = DcqcnParams.hpcc_ns3_100g()
    s = dcqcn_init(np.array([100e9]), p)
    dcqcn_update(s, np.array([True]), 0.0, p)
    assert s.alpha[0] == 1.0 and s.rc_bps[0] == 100e9      # rate_on_first_cnp = 1
    for t in (1000.0, 2000.0, 3000.0, 4000.0):            # alpha timer, no CNP latched
        dcqcn_update(s, np.array([False]), t, p)
    a4 = (1 - G) ** 4
    assert s.alpha[0] == pytest.approx(a4)
    dcqcn_update(s, np.array([False]), 4001.0, p)         # first decrease check (+1 ns)
    rc1 = 100e9 * (1 - a4 / 2)
    assert s.rc_bps[0] == pytest.approx(rc1)
    assert s.rt_bps[0] == 100e9                            # stage 0: target not clamped
    dcqcn_update(s, np.array([False]), 304001.0, p)       # stage 0 < F: fast recovery
    rc2 = (rc1 + 100e9) / 2
    assert s.rc_bps[0] == pytest.approx(rc2)
    # a second CNP: now stage 1 > 0 so Rt <- Rc before the cut
    dcqcn_update(s, np.array([True]), 305000.0, p)
    dcqcn_update(s, np.array([False]), 308001.0, p)
    assert s.rt_bps[0] == pytest.approx(rc2)
    assert s.rc_bps[0] < rc2 and s.time_stage[0] == 0
    rc3, rt3 = s.rc_bps[0], s.rt_bps[0]
    dcqcn_update(s, np.array([False]), 608001.0, p)       # fast recovery (stage 0)
    rc4 = (rc3 + rt3) / 2
    assert s.rc_bps[0] == pytest.approx(rc4)
    dcqcn_update(s, np.array([False]), 908001.0, p)       # stage 1 == F: additive
    assert s.rt_bps[0] == pytest.approx(rt3 + 20e6)
    assert s.rc_bps[0] == pytest.approx((rc4 + rt3 + 20e6) / 2)
    dcqcn_update(s, np.array([False]), 1208001.0, p)      # stage 2 > F: hyper
    assert s.rt_bps[0] == pytest.approx(rt3 + 220e6)


def test_min_rate_floor_and_vectorised_independence():
    p = DcqcnParams.hpcc_ns3_100g()
    s = dcqcn_init(np.array([100e9, 100e9]), p)
    for k in range(400):
        t = k * 1000.0 + 1.0
        dcqcn_update(s, np.array([True, False]), t, p)
    assert s.rc_bps[0] == pytest.approx(1e9)   # floor
    assert s.rc_bps[1] == 100e9 and not s.started[1]


def test_paper_hyper_increase_multiplier():
    p = DcqcnParams.paper()
    s = dcqcn_init(np.array([40e9]), p)
    s.started[:] = True
    s.rc_bps[:] = 10e9
    s.rt_bps[:] = 20e9
    s.time_stage[:] = 7
    s.byte_stage[:] = 6
    s.t_inc_ns[:] = 0.0
    dcqcn_update(s, np.array([False]), 0.0, p)
    # min(T, B) = 6 >= F = 5: Rt += (6 - 5 + 1) * R_HAI
    assert s.rt_bps[0] == pytest.approx(20e9 + 2 * 200e6)


def test_registry():
    m = get_cc("dcqcn")
    s = m.init(np.array([100e9]), DcqcnParams.hpcc_ns3_100g())
    assert m.next_event_ns(s) == np.inf
    with pytest.raises(ValueError):
        get_cc("timely-not-there")


def test_red_probability():
    q = np.array([0.0, 400e3, 1000e3, 1600e3, 2000e3])
    p = red_mark_probability(q, 400e3, 1600e3, 0.2)
    assert p.tolist() == pytest.approx([0, 0, 0.1, 0.2, 1.0])
    r = RedParams.per_gbps(25e9)
    assert (r.kmin_bytes, r.kmax_bytes) == (100e3, 400e3)
    assert red_mark_probability(np.array([1e9]), np.inf, np.inf, 0.2)[0] == 0


def test_pfc_alpha_rule_and_headroom():
    pf = PfcParams.hpcc_ns3()
    a = pf.port_alpha(np.array([25e9, 100e9, 400e9]))
    assert a.tolist() == [0.125, 0.125, 0.5]
    assert pf.headroom_bytes(np.array([100e9]), np.array([1000]))[0] == pytest.approx(37500)
