"""Source-port solving: model mode (hash inversion) and probing mode."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.control.errors import ControlError
from icefabric.control.sport import (
    HashModelProber,
    LearnGoal,
    PortPathCache,
    ProbeOptions,
    Prober,
    QpChains,
    WantedPaths,
    dense_rows,
    learn_port_paths,
    path_members,
    solve_sports,
    solve_sports_by_probing,
    validate_port_paths,
    verify_sports,
)
from icefabric.dataplane.ecmp import (
    HashConfig,
    Headers,
    ecmp_hash,
    ecmp_hash_scalar,
    make_profile,
    select_member,
)
from icefabric.dataplane.roce import (
    NicPortLimits,
    default_sports,
    flow_label_for_sport,
    rdma_calc_flow_label,
    rdma_get_udp_sport,
)

HASHED = ["crc16_bisync", "crc16_ccitt", "crc32_lo", "crc32_hi", "xor16"]
PORTS = NicPortLimits().ports()

hash_configs = st.builds(
    HashConfig,
    algorithm=st.sampled_from(HASHED),
    seed=st.integers(0, 0xFFFFFFFF),
    offset=st.integers(0, 15),
    selection=st.sampled_from(["mod", "mod", "resilient"]),
    table_size=st.sampled_from([16, 48, 64]),
    symmetric=st.booleans(),
)


def _all_port_members(configs, sip, dip, cfg_row, n_row):
    """Members every usable port selects along one QP's chain (brute force)."""
    d = len(cfg_row)
    qps = QpChains(np.full(PORTS.size, sip), np.full(PORTS.size, dip),
                   np.tile(cfg_row, (PORTS.size, 1)), np.tile(n_row, (PORTS.size, 1)))
    m = path_members(configs, qps, PORTS)
    return m.reshape(PORTS.size, d)


def _unique_per_pair(sip, dip, sp):
    keys = [(int(a), int(b), int(p)) for a, b, p in zip(sip, dip, sp, strict=True) if p >= 0]
    return len(keys) == len(set(keys))


@settings(max_examples=25, deadline=None)
@given(configs=st.lists(hash_configs, min_size=1, max_size=4), data=st.data())
def test_solved_ports_follow_wanted_members_and_none_is_missed(configs, data):
    q = data.draw(st.integers(1, 6))
    depth = data.draw(st.integers(1, 3))
    ci = np.array(data.draw(st.lists(st.lists(st.integers(-1, len(configs) - 1),
                                              min_size=depth, max_size=depth),
                                     min_size=q, max_size=q)))
    nm = np.array(data.draw(st.lists(st.lists(st.integers(1, 12), min_size=depth,
                                              max_size=depth), min_size=q, max_size=q)))
    want = np.array([[data.draw(st.integers(0, int(n) - 1)) for n in row] for row in nm])
    # distinct NIC pairs, so "-1" must mean "no port at all"
    sip = 0x0A000000 + np.arange(q)
    dip = np.array(data.draw(st.lists(st.integers(0, 0xFFFFFFFF), min_size=q, max_size=q)))
    seed = data.draw(st.integers(0, 1000))
    qps = QpChains(sip, dip, ci, nm, want)
    sp = solve_sports(configs, qps, seed=seed)
    ok = verify_sports(configs, qps, sp)
    assert np.all(ok == (sp >= 0))
    assert np.all((sp == -1) | ((sp >= 0xC000) & (sp <= 0xFFFF)))
    for i in range(q):
        members = _all_port_members(configs, sip[i], dip[i], ci[i], nm[i])
        valid = np.where(ci[i] >= 0, members == want[i], True).all(axis=1)
        assert (sp[i] >= 0) == bool(valid.any())
    assert np.array_equal(sp, solve_sports(configs, qps, seed=seed))


@settings(max_examples=15, deadline=None)
@given(configs=st.lists(hash_configs, min_size=2, max_size=3), data=st.data())
def test_many_qps_per_pair_get_distinct_valid_ports(configs, data):
    q = 60
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    ci = np.stack([np.zeros(q, int), rng.integers(1, len(configs), q)], axis=1)
    nm = np.stack([np.full(q, 4), rng.choice([2, 3, 8], q)], axis=1)
    want = np.stack([rng.integers(0, 4, q), np.zeros(q, int)], axis=1)
    sip = np.full(q, 0x0A000001) + rng.integers(0, 2, q)
    dip = np.full(q, 0x0A000101)
    used = rng.choice(PORTS, 500, replace=False)
    excl = (np.full(500, 0x0A000001), np.full(500, 0x0A000101), used)
    qps = QpChains(sip, dip, ci, nm, want)
    sp = solve_sports(configs, qps, exclude=excl)
    assert verify_sports(configs, qps, sp)[sp >= 0].all()
    assert _unique_per_pair(sip, dip, sp)
    hit = (sip == 0x0A000001) & (sp >= 0)
    assert not np.isin(sp[hit], used).any()
    # unless polarisation forbids a combination, everything is solvable here
    for i in np.flatnonzero(sp < 0):
        members = _all_port_members(configs, sip[i], dip[i], ci[i], nm[i])
        valid = (members == want[i]).all(axis=1)
        same = (sip == sip[i]) & (ci[:, 1] == ci[i, 1]) & (want == want[i]).all(axis=1)
        assert valid.sum() <= same.sum() + 500


def test_same_class_qps_consume_ports_in_order():
    cfgs = [HashConfig("crc16_ccitt", seed=3)]
    q = 200
    sip, dip = np.full(q, 1), np.full(q, 2)
    qps = QpChains(sip, dip, np.zeros((q, 1), int), np.full((q, 1), 2), np.zeros((q, 1), int))
    sp = solve_sports(cfgs, qps, seed=9)
    assert len(set(sp.tolist())) == q and verify_sports(cfgs, qps, sp).all()
    # a small port range runs out: exactly the matching ports are handed out, then -1
    lim = NicPortLimits(0xC000, 0xC01F)
    sp = solve_sports(cfgs, QpChains(sip, dip, np.zeros((q, 1), int), 2, np.zeros((q, 1), int)),
                      limits=lim)
    match = (ecmp_hash(cfgs[0], Headers(1, 2, lim.ports())) % 2 == 0).sum()
    assert (sp >= 0).sum() == match and set(sp[sp >= 0]) <= set(lim.ports().tolist())


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(1)
    cfgs = [make_profile("sonic_tor", seed=s) for s in range(4)] + [make_profile("sonic_leaf")]
    q = 500
    sip, dip = rng.integers(0, 1 << 32, q), rng.integers(0, 1 << 32, q)
    ci = np.stack([rng.integers(0, 4, q), np.full(q, 4)], axis=1)
    nm = np.array([[8, 6]])
    want = np.stack([rng.integers(0, 8, q), rng.integers(0, 6, q)], axis=1)
    qps = QpChains(sip, dip, ci, nm, want)
    a = solve_sports(cfgs, qps, seed=5)
    assert np.array_equal(a, solve_sports(cfgs, qps, seed=5))
    assert not np.array_equal(a, solve_sports(cfgs, qps, seed=6))
    assert verify_sports(cfgs, qps, a).all()


def test_polarised_tiers_make_some_paths_impossible():
    # Same function and offset at both tiers, different seeds: h2 = h1 ^ const, so with
    # mod 2 the second choice is fixed by the first (why SONiC gives leaves offset 10).
    cfgs = [HashConfig("crc16_bisync", seed=0), HashConfig("crc16_bisync", seed=25)]
    sip, dip = np.full(4, 0x0A000001), np.full(4, 0x0A000202)
    ci = np.tile([0, 1], (4, 1))
    want = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    qps = QpChains(sip, dip, ci, 2, want)
    sp = solve_sports(cfgs, qps)
    assert (sp >= 0).sum() == 2
    c = (ecmp_hash(cfgs[0], Headers(0x0A000001, 0x0A000202, 0)) ^
         ecmp_hash(cfgs[1], Headers(0x0A000001, 0x0A000202, 0)))[0] & 1
    assert [bool(x >= 0) for x in sp] == [bool((w0 ^ w1) == c) for w0, w1 in want]
    # with the SONiC leaf offset, all four combinations exist
    cfgs[1] = make_profile("sonic_leaf")
    sp = solve_sports(cfgs, qps)
    assert (sp >= 0).all() and verify_sports(cfgs, qps, sp).all()


def test_hand_computed_default_ports_collide_on_one_spine():
    """Leaf with 2 spines (SONiC ToR profile: CRC16-BISYNC, seed 0, member = h mod 2).

    Four QPs between NIC pairs 10.0.0.{1..4} -> 10.0.1.{1..4}, QPNs 0x104..0x107 and
    0x204..0x207, flow label left at 0 (NCCL). By hand: 0x104 * 0x204 = 0x20C10 (< 2^20,
    so the two XOR folds change nothing), sport = 0xC000 | (0x0C10 ^ (0x20000 >> 14)) =
    0xCC18; likewise 0xCF11, 0xD22C, 0xD539. Their CRC16 hashes (bitwise reference)
    are all odd: every QP lands on spine 1 while spine 0 idles.
    """
    lqpn = np.arange(0x104, 0x108)
    rqpn = np.arange(0x204, 0x208)
    sip = 0x0A000001 + np.arange(4)
    dip = 0x0A000101 + np.arange(4)
    assert rdma_calc_flow_label(lqpn, rqpn).tolist() == [0x20C10, 0x20F19, 0x21224, 0x21531]
    sp = default_sports(lqpn, rqpn)
    assert sp.tolist() == [0xCC18, 0xCF11, 0xD22C, 0xD539]
    tor = make_profile("sonic_tor")
    ref = [ecmp_hash_scalar(tor, Headers(int(a), int(b), int(s))) for a, b, s in zip(sip, dip, sp,
                                                                            strict=True)]
    assert ref == [0x324B, 0x26C3, 0x99F5, 0xBC9D]
    assert ecmp_hash(tor, Headers(sip, dip, sp)).tolist() == ref
    assert select_member(tor, np.array(ref), 2).tolist() == [1, 1, 1, 1]
    # ICE: two QPs per spine, realised through the GRH flow label
    want = np.array([[0], [1], [0], [1]])
    qps = QpChains(sip, dip, np.zeros((4, 1), int), 2, want)
    ice = solve_sports([tor], qps)
    assert verify_sports([tor], qps, ice).all()
    fl = flow_label_for_sport(ice)
    assert np.array_equal(rdma_get_udp_sport(fl, lqpn, rqpn), ice)


def test_impossible_decisions_give_minus_one():
    cfgs = [HashConfig(), make_profile("spray")]
    sp = solve_sports(cfgs, QpChains([1, 1, 1], [2, 2, 2], [[0, -1], [0, 1], [0, -1]], [[4, 4]],
                                     [[5, 0], [0, 0], [3, 0]]))
    assert sp[0] == -1 and sp[1] == -1 and sp[2] >= 0
    with pytest.raises(ValueError, match="refers to config 2, only 2 given"):
        solve_sports(cfgs, QpChains([1], [2], [[2]], 2, [[0]]))
    with pytest.raises(ValueError, match="want is needed"):
        solve_sports(cfgs, QpChains([1], [2], [[0]], 2))


def test_bth_dqpn_field_is_used():
    cfg = HashConfig("crc16_ccitt", fields=("sip", "dip", "proto", "sport", "dport",
                                             "bth_dqpn"), seed=4)
    q = 64
    dq = np.arange(q) + 0x300
    want = np.arange(q)[:, None] % 16
    qps = QpChains(np.full(q, 7), np.full(q, 8), np.zeros((q, 1), int), 16, want, dqpn=dq)
    sp = solve_sports([cfg], qps)
    assert verify_sports([cfg], qps, sp).all()
    # without the QPN the hashes differ: the ports no longer verify
    assert not verify_sports([cfg], dataclasses.replace(qps, dqpn=dq + 1), sp).all()


# --------------------------------------------------------------------------- probing


def _fabric(seed: int = 0):
    """Two source leaves (4 uplinks, mod 4) then one of 4 aggregation switches (3 uplinks)."""
    rng = np.random.default_rng(seed)
    cfgs = [make_profile("sonic_tor", seed=int(s)) for s in rng.integers(0, 16, 2)]
    cfgs += [HashConfig("crc16_ccitt", seed=int(s), offset=10) for s in
             rng.integers(0, 1 << 32, 4)]

    def next_decision(sip, dip, prefix):
        if len(prefix) == 0:
            return (sip & 1, 4)
        if len(prefix) == 1:
            return (2 + prefix[0], 3)
        return None

    return cfgs, next_decision


class _ReseedMidRun:
    """Prober that reseeds switch ``switch`` once after ``after`` probes."""

    def __init__(self, inner: HashModelProber, after: int, switch: int, new_seed: int):
        self.inner, self.after, self.switch, self.new_seed = inner, after, switch, new_seed
        self.done = False

    def probe(self, src_ip, dst_ip, sports):
        if not self.done and self.inner.n_probes >= self.after:
            self.inner.reseed(self.switch, self.new_seed)
            self.done = True
        return self.inner.probe(src_ip, dst_ip, sports)


def _changing_seed(prober: HashModelProber, switch: int, sip: int, dip: int) -> int:
    ports = np.random.default_rng(0).choice(PORTS, 512, replace=False)
    before = prober.paths(sip, dip, ports)
    old = prober.configs[switch]
    for s in range(1, 1000):
        prober.configs[switch] = old.with_seed(old.seed + s)
        changed = prober.paths(sip, dip, ports) != before
        prober.configs[switch] = old
        if changed:
            return old.seed + s
    raise AssertionError("no seed changes the mapping")


def _want_paths(rng, q):
    return [(int(rng.integers(0, 4)), int(rng.integers(0, 3))) for _ in range(q)]


def test_hash_model_prober_matches_model_mode():
    cfgs, nd = _fabric()
    prober = HashModelProber(cfgs, nd)
    assert isinstance(prober, Prober)
    ports = PORTS[:500]
    paths = prober.paths(5, 9, ports)
    ci = np.array([[1, 2 + p[0]] for p in paths])
    want = np.array(paths)
    assert verify_sports(cfgs, QpChains(np.full(500, 5), np.full(500, 9), ci, [[4, 3]], want),
                         ports).all()


def test_hash_model_prober_names_a_routing_loop():
    cfgs, _ = _fabric()
    prober = HashModelProber(cfgs, lambda sip, dip, prefix: (0, 4))  # never reaches dst
    with pytest.raises(ControlError, match="from 5 to 9 takes more than 64 ECMP decisions"):
        prober.paths(5, 9, PORTS[:10])


def test_learn_port_paths_with_losses_and_budget():
    cfgs, nd = _fabric()
    prober = HashModelProber(cfgs, nd, loss_prob=0.2, seed=1)
    pm = learn_port_paths(prober, 3, 4, goal=LearnGoal(budget=2000, n_ports=300),
                          options=ProbeOptions(batch=64, seed=2))
    assert len(pm.port_path) >= 300 and pm.probes_used <= 2000
    assert pm.probes_used == prober.n_probes > len(pm.port_path)  # losses were retried
    truth = prober.paths(3, 4, np.array(list(pm.port_path)))
    assert truth == list(pm.port_path.values())
    small = learn_port_paths(HashModelProber(cfgs, nd), 3, 4, goal=LearnGoal(budget=100),
                             options=ProbeOptions(batch=64))
    assert small.probes_used == 100 and len(small.port_path) == 100


def test_probing_with_loss_and_reseeds_gives_correct_unique_ports():
    cfgs, nd = _fabric(seed=3)
    inner = HashModelProber(cfgs, nd, loss_prob=0.2, seed=7)
    rng = np.random.default_rng(11)
    q = 80
    sip = rng.choice([0x0A000001, 0x0A000002, 0x0A000003], q)
    dip = rng.choice([0x0A000101, 0x0A000102], q)
    want = _want_paths(rng, q)
    new_seed = _changing_seed(inner, 0, 0x0A000002, 0x0A000101)
    prober = _ReseedMidRun(inner, after=500, switch=0, new_seed=new_seed)  # mid-learning
    cache = PortPathCache()
    opts = ProbeOptions(batch=128, seed=1)
    sp = solve_sports_by_probing(prober, WantedPaths(sip, dip, want), cache=cache, options=opts)
    assert prober.done

    def check(sp):
        assert (sp >= 0).all() and _unique_per_pair(sip, dip, sp)
        for i in range(q):
            assert inner.paths(int(sip[i]), int(dip[i]), np.array([sp[i]]))[0] == want[i]

    check(sp)
    # a reseed between rounds: cached maps stop matching verification probes -> relearn
    inv0 = cache.invalidations
    inner.reseed(2, _changing_seed(inner, 2, 0x0A000001, 0x0A000101))
    inner.reseed(0, _changing_seed(inner, 0, 0x0A000002, 0x0A000101))
    sp2 = solve_sports_by_probing(inner, WantedPaths(sip, dip, want), cache=cache, options=opts)
    check(sp2)
    assert cache.invalidations > inv0
    # no change: the cache answers with verification probes only
    n0 = inner.n_probes
    sp3 = solve_sports_by_probing(inner, WantedPaths(sip, dip, want), cache=cache, options=opts)
    check(sp3)
    assert inner.n_probes - n0 < 3 * q


def test_probing_respects_exclusions_and_budget():
    cfgs, nd = _fabric()
    prober = HashModelProber(cfgs, nd)
    want = [(1, 2)] * 5 + [(3, 0)] * 5
    sip, dip = np.full(10, 0x0A000001), np.full(10, 0x0A000101)
    first = solve_sports_by_probing(prober, WantedPaths(sip, dip, want))
    excl = (sip, dip, first)
    second = solve_sports_by_probing(prober, WantedPaths(sip, dip, want), exclude=excl)
    assert (second >= 0).all() and not set(first) & set(second)
    starved = solve_sports_by_probing(HashModelProber(cfgs, nd), WantedPaths(sip, dip, want),
                                      options=ProbeOptions(budget_per_pair=8, batch=8))
    assert (starved == -1).any()


def test_validate_port_paths_detects_reseed():
    cfgs, nd = _fabric(seed=5)
    prober = HashModelProber(cfgs, nd, loss_prob=0.2, seed=3)
    pm = learn_port_paths(prober, 0x0A000001, 0x0A000101, goal=LearnGoal(n_ports=200),
                          options=ProbeOptions(batch=64))
    assert validate_port_paths(prober, pm)
    prober.reseed(1, _changing_seed(prober, 1, 0x0A000001, 0x0A000101))
    assert not validate_port_paths(prober, pm, n_probes=64)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3), st.integers(0, 2**40)),
                min_size=1, max_size=40))
def test_dense_rows_rank_rows_as_unique_axis0(rows):
    """Narrow columns (offset by their minimum), a wide one (ranked by np.unique): the
    ids are np.unique(axis=0)'s inverse, the order the solver's port choices rely on."""
    a = np.array(rows, dtype=np.int64)
    want = np.unique(a, axis=0, return_inverse=True)[1].ravel()
    assert dense_rows([a[:, j] for j in range(3)]).tolist() == want.tolist()


def test_chains_past_62_key_bits_check_the_rest_as_filters():
    """Eight decisions of 2^13 members fold 104 bits: those past 62 no longer fit the
    index key and are checked as filters; ports are still found where the chain has one
    (the members some ports take) and every port found takes the wanted members."""
    cfgs = [HashConfig("crc16_ccitt", seed=s, offset=s) for s in range(8)]
    sip = np.full(6, 0x0A000001)
    dip = 0x0A000100 + np.arange(6)
    cfg = np.tile(np.arange(8), (6, 1))
    n = np.full((6, 8), 1 << 13)
    want = path_members(cfgs, QpChains(sip, dip, cfg, n), 0xC000 + 97 * np.arange(6))
    qps = QpChains(sip, dip, cfg, n, want)
    sp = solve_sports(cfgs, qps)
    assert np.all(sp >= 0)
    assert verify_sports(cfgs, qps, sp).all()
