"""ECMP hash models: vectorised == bitwise reference, CRC check values, XOR-table linearity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.dataplane import ecmp
from icefabric.dataplane.ecmp import (
    ALGORITHMS,
    PROFILES,
    HashConfig,
    Headers,
    base_hash,
    build_key,
    ecmp_hash,
    ecmp_hash_scalar,
    ecmp_select,
    make_profile,
    resilient_table,
    select_member,
    sport_xor_table,
)

HASHED = [a for a in ALGORITHMS if a != "random"]
u32 = st.integers(0, 0xFFFFFFFF)

configs = st.builds(
    HashConfig,
    algorithm=st.sampled_from(HASHED),
    seed=u32,
    offset=st.integers(0, 15),
    fields=st.sampled_from([ecmp.ROCEV2_5TUPLE, ecmp.ROCEV2_5TUPLE_DQPN,
                            ("sport", "dip", "sip"), ("sip", "dip", "sport", "dport")]),
    crc_init=st.sampled_from([None, 0, 0x1D0F]),
    seed_bytes=st.sampled_from([4, 2, 0]),
    symmetric=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(cfg=configs, data=st.data())
def test_vectorised_hash_equals_bitwise_reference(cfg, data):
    n = data.draw(st.integers(1, 12))
    sip = data.draw(st.lists(u32, min_size=n, max_size=n))
    dip = data.draw(st.lists(u32, min_size=n, max_size=n))
    sport = data.draw(st.lists(st.integers(0, 0xFFFF), min_size=n, max_size=n))
    dqpn = data.draw(st.lists(st.integers(0, 0xFFFFFF), min_size=n, max_size=n))
    h = ecmp_hash(cfg, Headers(np.array(sip, np.uint32), np.array(dip, np.uint32),
                               np.array(sport), dqpn=np.array(dqpn)))
    ref = [ecmp_hash_scalar(cfg, Headers(a, b, s, dqpn=q))
           for a, b, s, q in zip(sip, dip, sport, dqpn, strict=True)]
    assert h.dtype == np.uint32
    assert h.tolist() == ref
    assert int(h.max()) < 1 << 16


@pytest.mark.parametrize(
    ("algorithm", "check"),
    [("crc16_ccitt", 0x29B1),   # CRC-16/CCITT-FALSE("123456789")
     ("crc16_bisync", 0xAEE7),  # poly 0x8005, init 0xFFFF, MSB-first (CRC-16/CMS)
     ("crc32_lo", 0x3926),      # CRC-32("123456789") = 0xCBF43926
     ("crc32_hi", 0xCBF4)],
)
def test_crc_check_values(algorithm, check):
    key = np.frombuffer(b"123456789", dtype=np.uint8)[None, :]
    assert int(ecmp._hash_key_columns(HashConfig(algorithm), key)[0]) == check


def test_key_layout_is_seed_then_fields_big_endian():
    cfg = HashConfig(seed=0x01020304)
    key = build_key(cfg, Headers(0x0A000001, 0x0A000002, 0xC001))
    assert key.shape == (1, 4 + 4 + 4 + 1 + 2 + 2)
    assert key[0].tolist() == [1, 2, 3, 4, 10, 0, 0, 1, 10, 0, 0, 2, 17, 0xC0, 0x01, 0x12, 0xB7]


def test_offset_is_rotate_right():
    cfg0 = HashConfig("crc16_ccitt", seed=7)
    h0 = int(ecmp_hash(cfg0, Headers(1, 2, 3))[0])
    for off in range(16):
        h = int(ecmp_hash(dataclasses.replace(cfg0, offset=off), Headers(1, 2, 3))[0])
        assert h == ((h0 >> off) | (h0 << (16 - off))) & 0xFFFF


@settings(max_examples=60, deadline=None)
@given(cfg=configs, sip=u32, dip=u32, dqpn=st.integers(0, 0xFFFFFF),
       sports=st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=20))
def test_sport_xor_table_identity(cfg, sip, dip, dqpn, sports):
    sp = np.array(sports)
    table = sport_xor_table(cfg)
    direct = ecmp_hash(cfg, Headers(sip, dip, sp, dqpn=dqpn))
    assert np.array_equal(base_hash(cfg, Headers(sip, dip, 0, dqpn=dqpn)) ^ table[sp], direct)


def test_xor_table_does_not_depend_on_seed_or_ips():
    a = HashConfig("crc16_bisync", seed=10, offset=10)
    b = dataclasses.replace(a, seed=0xDEADBEEF, name="other")
    assert sport_xor_table(a) is sport_xor_table(b)
    t = sport_xor_table(a)
    assert t.shape == (65536,) and t[0] == 0 and not t.flags.writeable
    sp = np.arange(0xC000, 0xC100)
    for sip, dip in [(0, 0), (0x0A000001, 0x0A0000FF), (0xFFFFFFFF, 0x12345678)]:
        for cfg in (a, b):
            assert np.array_equal(ecmp_hash(cfg, Headers(sip, dip, sp)),
                                  ecmp_hash(cfg, Headers(sip, dip, 0)) ^ t[sp])


def test_per_packet_seed_override_matches_configs():
    seeds = np.array([0, 10, 25, 0xFFFFFFFF])
    cfg = HashConfig("crc16_bisync")
    h = ecmp_hash(cfg, Headers(5, 6, 0xC123), seed=seeds)
    assert h.tolist() == [int(ecmp_hash(cfg.with_seed(int(s)), Headers(5, 6, 0xC123))[0])
                          for s in seeds]


def test_select_member_mod_and_resilient():
    h = np.arange(200, dtype=np.uint32)
    assert np.array_equal(select_member(HashConfig(), h, 6), h % 6)
    res = HashConfig(selection="resilient", table_size=64)
    assert np.array_equal(select_member(res, h, 6), (h % 64) % 6)
    assert np.array_equal(resilient_table(8, 3), [0, 1, 2, 0, 1, 2, 0, 1])
    # member 1 removed: only its buckets move (to members 0 and 2)
    table = np.array([0, 0, 2, 0, 2, 2, 0, 2])
    assert set(select_member(res, h, 3, table=table).tolist()) == {0, 2}
    nm = np.array([2, 4, 8])
    assert select_member(HashConfig(), np.array([7, 7, 7]), nm).tolist() == [1, 3, 7]


def test_spray_has_no_flow_hash():
    spray = make_profile("spray")
    assert spray.is_spray
    with pytest.raises(ValueError):
        ecmp_hash(spray, Headers(1, 2, 3))
    with pytest.raises(ValueError):
        sport_xor_table(spray)


def test_profiles():
    assert make_profile("sonic_tor").seed == 0
    leaf = make_profile("sonic_leaf")
    assert (leaf.seed, leaf.offset) == (10, 10)
    assert make_profile("sonic_spine").seed == 25
    assert make_profile("broadcom_rtag7_fboss").algorithm == "crc16_ccitt"
    assert make_profile("dell_os9_default").algorithm == "crc16_bisync"
    assert make_profile("dell_os9_s6000").algorithm == "crc32_hi"
    c1 = make_profile("spectrum_cumulus", rng=3)
    assert c1 == make_profile("spectrum_cumulus", rng=3)
    assert c1.seed != make_profile("spectrum_cumulus", rng=4).seed
    assert make_profile("spectrum_cumulus", seed=5).seed == 5
    assert make_profile("sonic_tor", offset=3).offset == 3
    assert set(PROFILES) >= {"sonic_leaf", "spectrum_cumulus_resilient"}
    with pytest.raises(KeyError):
        make_profile("nope")


@pytest.mark.parametrize("bad", [dict(algorithm="md5"), dict(offset=16), dict(seed=-1),
                                 dict(fields=("sip", "ttl")), dict(selection="hrw"),
                                 dict(fields=("sip", "sip"))])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        HashConfig(**bad)


def test_ecmp_select_uses_each_rows_switch():
    cfgs = [HashConfig("crc16_ccitt", seed=1), HashConfig("crc32_lo", seed=2, offset=3),
            HashConfig("xor16", selection="resilient", table_size=16)]
    rng = np.random.default_rng(0)
    ci = rng.integers(-1, 3, 300)
    nm = rng.integers(1, 9, 300)
    sip, dip = rng.integers(0, 1 << 32, 300), rng.integers(0, 1 << 32, 300)
    sp = rng.integers(0xC000, 0x10000, 300)
    m = ecmp_select(cfgs, ci, nm, Headers(sip, dip, sp))
    for i in range(300):
        if ci[i] < 0:
            assert m[i] == -1
        else:
            c = cfgs[ci[i]]
            h = ecmp_hash_scalar(c, Headers(int(sip[i]), int(dip[i]), int(sp[i])))
            assert m[i] == select_member(c, np.array([h]), nm[i])[0]


def test_symmetric_hash_is_direction_independent():
    cfg = make_profile("spectrum_cumulus", seed=99)
    assert cfg.symmetric
    a = ecmp_hash(cfg, Headers(0x0A000001, 0x0A000102, 0xC123, 4791))
    b = ecmp_hash(cfg, Headers(0x0A000102, 0x0A000001, 4791, 0xC123))
    assert np.array_equal(a, b)
    asym = dataclasses.replace(cfg, symmetric=False)
    assert not np.array_equal(ecmp_hash(asym, Headers(0x0A000001, 0x0A000102, 0xC123, 4791)),
                              ecmp_hash(asym, Headers(0x0A000102, 0x0A000001, 4791, 0xC123)))


def _stage_table(profile: str, seed: int = 0) -> np.ndarray:
    """Leaf member (of 16) x spine member (of 2) counts for 20,000 random source ports."""
    rng = np.random.default_rng(seed)
    sport = rng.integers(0xC000, 0x10000, 20_000)
    leaf, spine = (ecmp.role_profile(profile, r, rng) for r in ("leaf", "spine"))
    pkt = ecmp.Headers(0x0A000001, 0x0A000102, sport)
    a = ecmp.select_member(leaf, ecmp.ecmp_hash(leaf, pkt), 16)
    b = ecmp.select_member(spine, ecmp.ecmp_hash(spine, pkt), 2)
    table = np.zeros((16, 2))
    np.add.at(table, (a, b), 1)
    return table


def test_correlated_stages_repeat_the_leafs_choice():
    table = _stage_table("correlated")
    assert np.all(table.min(axis=1) == 0)  # the spine's member follows from the leaf's


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_independent_stages_are_uncorrelated(seed):
    table = _stage_table("independent", seed)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    assert chi2 < 44.3  # 15 degrees of freedom, p = 0.0001


def test_role_profiles_draw_random_seeds_and_tier_offsets():
    rng = np.random.default_rng(5)
    a, b = ecmp.role_profile("independent", "leaf", rng), ecmp.role_profile("independent",
                                                                             "core", rng)
    assert a.seed != b.seed and (a.offset, b.offset) == (0, ecmp.TIER_OFFSETS["core"])
    assert ecmp.role_profile("sonic_leaf", "spine", rng) == ecmp.PROFILES["sonic_leaf"]
    with pytest.raises(KeyError, match="unknown switch role"):
        ecmp.role_profile("correlated", "tor", rng)
