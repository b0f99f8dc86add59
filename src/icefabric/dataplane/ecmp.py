"""Configurable models of switch ECMP hashing and next-hop (member) selection.

A switch hashes a key built from packet header fields (for RoCEv2 the 5-tuple
``sip, dip, proto=17, sport, dport=4791``, optionally the BTH destination QP),
rotates the 16-bit result right by a configurable offset and picks one member of
the ECMP group either as ``hash mod N`` or through a resilient bucket table.

These are **models**, not bit-exact replicas of any ASIC: the real key layout,
seed mixing, bit reflection and CRC init value of Broadcom, NVIDIA Spectrum or
other pipelines are not public. Everything that is vendor-specific is therefore a
parameter of :class:`HashConfig`. What the models do preserve is what matters to
ICE: for a fixed flow the choice is deterministic, the source port is the only
per-QP entropy, and the hash families are *linear* (CRC and XOR are affine over
GF(2)), which is what real deployments (and ICE's solver) exploit.

Linearity used by the source-port solver: for keys of equal length,
``crc(a ^ b ^ c) = crc(a) ^ crc(b) ^ crc(c)`` because ``crc(x) = L(x) ^ k`` with a
linear map ``L`` and a constant ``k`` that absorbs the init value and final XOR.
With ``a = key(sip, dip, sport=0)``, ``b = key(0, 0, sport)``, ``c = key(0, 0, 0)``
this gives ``hash(sport) = base_hash(sip, dip) ^ T[sport]`` where
``T[sport] = hash(key(0,0,sport)) ^ hash(key(0,0,0))`` depends neither on the IPs nor
on the seed. Rotation (the SAI offset) and truncation to 16 bits are bit
permutations/projections, so they commute with XOR.

References
----------
.. [1] OCP SAI, ``inc/saiswitch.h`` (``sai_hash_algorithm_t``,
   ``SAI_SWITCH_ATTR_ECMP_DEFAULT_HASH_SEED/OFFSET``) and ``inc/saihash.h`` (native
   hash fields incl. ``RDMA_BTH_DEST_QP``), https://github.com/opencomputeproject/SAI
.. [2] Meta FBOSS, ``fboss/agent/hw/bcm/BcmRtag7Module.cpp`` (Broadcom RTAG7, ECMP
   hash Field0 = CRC16-CCITT), https://github.com/facebook/fboss
.. [3] SONiC ``dockers/docker-orchagent/switch.json.j2`` (per-role hash seeds and the
   leaf hash offset), https://github.com/sonic-net/sonic-buildimage
.. [4] Dell Networking OS9 reference guide, ``hash-algorithm`` (crc16 = CRC16-BISYNC
   default, crc16cc, crc32MSB/LSB, xor16; S4810/S6000 ECMP default crc32MSB).
.. [5] NVIDIA Cumulus Linux user guide, "Equal Cost Multipath Load Sharing"
   (``ecmp_hash_seed`` random by default, ``cl-ecmpcalc --hashfunction
   {crc16-ccitt, crc16-bisync}``, resilient hashing 64..4096 buckets).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "ALGORITHMS",
    "FIELD_WIDTHS_BYTES",
    "HASH_BITS",
    "PROFILES",
    "ROCEV2_5TUPLE",
    "ROLES",
    "TIER_OFFSETS",
    "ROCEV2_5TUPLE_DQPN",
    "HashConfig",
    "Headers",
    "base_hash",
    "build_key",
    "configs_fields_need_dqpn",
    "ecmp_hash",
    "ecmp_hash_scalar",
    "ecmp_select",
    "linear_key",
    "make_profile",
    "resilient_table",
    "role_profile",
    "select_member",
    "sport_xor_table",
]

HASH_BITS = 16
"""Width of the hash output fed to member selection (all modelled functions are 16-bit)."""
_HASH_MASK = (1 << HASH_BITS) - 1

ALGORITHMS = ("crc16_bisync", "crc16_ccitt", "crc32_lo", "crc32_hi", "xor16", "random")
"""Modelled hash functions; ``random`` marks per-packet spraying (SAI ``RANDOM``)."""

_CRC16_POLY = {"crc16_bisync": 0x8005, "crc16_ccitt": 0x1021}
_CRC32_POLY_REFLECTED = 0xEDB88320  # 0x04C11DB7 bit-reversed, as zlib.crc32

FIELD_WIDTHS_BYTES = {"sip": 4, "dip": 4, "proto": 1, "sport": 2, "dport": 2, "bth_dqpn": 3}
"""Key field widths in bytes (IPv4 addresses; the BTH destination QP is 24 bits)."""

ROCEV2_5TUPLE = ("sip", "dip", "proto", "sport", "dport")
ROCEV2_5TUPLE_DQPN = ROCEV2_5TUPLE + ("bth_dqpn",)


@dataclass(frozen=True)
class HashConfig:
    """Hash and member-selection behaviour of one switch (or one ECMP group).

    Parameters
    ----------
    algorithm : str
        One of :data:`ALGORITHMS`: ``crc16_bisync`` (poly 0x8005), ``crc16_ccitt``
        (poly 0x1021), ``crc32_lo``/``crc32_hi`` (low/high 16 bits of the zlib CRC-32),
        ``xor16`` (16-bit XOR fold of the key) or ``random`` (per-packet spray; no
        flow hash exists, so it cannot be steered).
    seed : int
        uint32 hash seed, mixed in as a big-endian key prefix of ``seed_bytes``
        bytes. Real ASICs mix seeds in vendor-specific ways [UNCONFIRMED]; a prefix
        keeps the CRC linear in the other fields, like a non-zero CRC init would.
    offset : int
        SAI ``ECMP_DEFAULT_HASH_OFFSET``: the 16-bit hash is rotated right by this
        many bits before member selection (0..15).
    fields : tuple of str
        Ordered key fields, names from :data:`FIELD_WIDTHS_BYTES`. Absent packet
        fields are hashed as zero (SONiC generic-hash semantics).
    selection : {"mod", "resilient"}
        ``mod``: member = hash mod N (non-resilient SAI dynamic ECMP).
        ``resilient``: bucket = hash mod ``table_size``; buckets are assigned
        round-robin to members (fine-grained / resilient ECMP).
    table_size : int
        Number of buckets for resilient selection (NVIDIA Spectrum default 64).
    crc_init : int or None
        CRC register init value for the CRC16 variants (default 0xFFFF, as the
        suggested model in the domain facts); ignored by CRC-32 (zlib convention) and
        XOR.
    seed_bytes : int
        Width of the seed prefix in bytes (0 disables the seed).
    symmetric : bool
        Symmetric hashing (SAI ``ECMP_DEFAULT_SYMMETRIC_HASH``; on by default in
        Cumulus): both directions of a flow hash alike. Modelled by hashing
        ``sip ^ dip`` in the ``sip`` slot and ``sport ^ dport`` in the ``sport`` slot
        (zeros in the ``dip``/``dport`` slots) [UNCONFIRMED: ASICs may sort instead];
        XOR keeps the hash linear in the source port.
    name : str
        Free-form label (profile name, switch name).

    Notes
    -----
    Never bit-exact with a real ASIC; see the module docstring.
    """

    algorithm: str = "crc16_ccitt"
    seed: int = 0
    offset: int = 0
    fields: tuple[str, ...] = ROCEV2_5TUPLE
    selection: str = "mod"
    table_size: int = 64
    crc_init: int | None = None
    seed_bytes: int = 4
    symmetric: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if not 0 <= int(self.seed) <= 0xFFFFFFFF:
            raise ValueError(f"seed must be a uint32, got {self.seed}")
        if not 0 <= int(self.offset) < HASH_BITS:
            raise ValueError(f"offset must be in [0, {HASH_BITS}), got {self.offset}")
        object.__setattr__(self, "fields", tuple(self.fields))
        unknown = [f for f in self.fields if f not in FIELD_WIDTHS_BYTES]
        if unknown:
            raise ValueError(f"unknown hash fields {unknown}; known: {list(FIELD_WIDTHS_BYTES)}")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"duplicate hash fields in {self.fields}")
        if self.selection not in ("mod", "resilient"):
            raise ValueError(f"selection must be 'mod' or 'resilient', got {self.selection!r}")
        if self.selection == "resilient" and self.table_size < 1:
            raise ValueError("resilient selection needs table_size >= 1")
        if self.seed_bytes not in (0, 1, 2, 3, 4):
            raise ValueError("seed_bytes must be in 0..4")

    @property
    def is_spray(self) -> bool:
        """True for per-packet spraying: there is no flow hash to steer."""
        return self.algorithm == "random"

    def with_seed(self, seed: int) -> HashConfig:
        """Copy with another seed (a switch reseed)."""
        return dataclasses.replace(self, seed=int(seed))


def linear_key(cfg: HashConfig) -> HashConfig:
    """The part of a config that determines :func:`sport_xor_table` (seed and selection dropped).

    Two switches with equal ``linear_key`` share the XOR table; their hashes of a flow
    differ by a constant that does not depend on the source port.
    """
    return dataclasses.replace(cfg, seed=0, selection="mod", table_size=64, name="")


# --------------------------------------------------------------------------- profiles

PROFILES: dict[str, HashConfig] = {
    # Broadcom Trident/Tomahawk RTAG7 as programmed by Meta FBOSS: ECMP uses hash
    # Field0 with CRC16-CCITT (BcmRtag7Module.cpp); the seed is per switch.
    "broadcom_rtag7_fboss": HashConfig("crc16_ccitt", name="broadcom_rtag7_fboss"),
    # Dell OS9 on Broadcom: `hash-algorithm ecmp crc16` (CRC16-BISYNC) is the default.
    "dell_os9_default": HashConfig("crc16_bisync", name="dell_os9_default"),
    # Dell S4810/S6000: ECMP default crc32MSB = upper 16 bits of CRC-32.
    "dell_os9_s6000": HashConfig("crc32_hi", name="dell_os9_s6000"),
    # SONiC switch.json.j2 per-role defaults; SAI default algorithm is CRC, modelled
    # here as CRC16-BISYNC (which CRC a given SAI maps to is vendor-specific).
    "sonic_tor": HashConfig("crc16_bisync", seed=0, name="sonic_tor"),
    "sonic_leaf": HashConfig("crc16_bisync", seed=10, offset=10, name="sonic_leaf"),
    "sonic_spine": HashConfig("crc16_bisync", seed=25, name="sonic_spine"),
    # NVIDIA Spectrum / Cumulus: crc16-ccitt, switchd picks a random seed when none is
    # configured (draw one with make_profile(..., seed=None, rng=...)).
    # Symmetric hashing is on by default in Cumulus.
    "spectrum_cumulus": HashConfig("crc16_ccitt", symmetric=True, name="spectrum_cumulus"),
    # Cumulus resilient hashing, default 64 buckets per group.
    "spectrum_cumulus_resilient": HashConfig(
        "crc16_ccitt", selection="resilient", table_size=64, symmetric=True,
        name="spectrum_cumulus_resilient",
    ),
    # Per-packet spraying (SAI RANDOM); an upper reference, not steerable.
    "spray": HashConfig("random", name="spray"),
    # Every switch alike at the SAI defaults (seed 0, offset 0; domain-facts §3.4): a
    # downstream switch reads the same hash bits as the one before it, so its choice is a
    # function of the previous choice (hash polarization). Seeds alone would not help: a
    # seed prefix only XORs a constant onto a linear hash (module docstring).
    "correlated": HashConfig("crc16_ccitt", name="correlated"),
    # Each tier reads its own bits of the hash (TIER_OFFSETS; SONiC decorrelates its leaf
    # routers the same way with offset 10, §3.4) and each switch its own random seed, so
    # the choices of successive tiers are statistically independent.
    "independent": HashConfig("crc16_ccitt", name="independent"),
}
"""Named starting points for real ASIC families/OSes (see module References) and the two
idealised stage relations, ``correlated`` and ``independent``."""

ROLES = ("leaf", "spine", "core")
"""Switch roles a scenario can give a profile (``spine`` = aggregation in fat-trees)."""

TIER_OFFSETS = {"leaf": 0, "spine": 8, "core": 4}
"""Rotate-right offsets of the ``independent`` profile: with at most 16 members per group
each tier's ``mod N`` reads a disjoint nibble of the 16-bit hash."""

_RANDOM_SEED_PROFILES = ("spectrum_cumulus", "spectrum_cumulus_resilient", "independent")


def make_profile(
    name: str,
    *,
    seed: int | None = None,
    rng: int | np.random.Generator | None = None,
    **overrides: object,
) -> HashConfig:
    """Build a :class:`HashConfig` from a named profile.

    Parameters
    ----------
    name : str
        Key of :data:`PROFILES`.
    seed : int or None
        Hash seed. ``None`` keeps the profile's seed, except for Cumulus profiles,
        where switchd draws a random uint32 seed: it is drawn from ``rng``.
    rng : int, numpy Generator or None
        Randomness for the Cumulus random seed (deterministic for an int).
    **overrides
        Any other :class:`HashConfig` field.

    Examples
    --------
    >>> make_profile("sonic_leaf").offset
    10
    """
    if name not in PROFILES:
        raise KeyError(f"unknown hash profile {name!r}; known: {sorted(PROFILES)}")
    cfg = PROFILES[name]
    if seed is None and name in _RANDOM_SEED_PROFILES:
        seed = int(np.random.default_rng(rng).integers(0, 1 << 32))
    if seed is not None:
        overrides["seed"] = int(seed)
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def role_profile(name: str, role: str, rng: np.random.Generator) -> HashConfig:
    """The hash config a switch of ``role`` (one of :data:`ROLES`) gets from profile
    ``name``; profiles with random seeds draw one per call from ``rng``."""
    if role not in ROLES:
        raise KeyError(f"unknown switch role {role!r}; known: {ROLES}")
    cfg = make_profile(name, rng=rng)
    if name == "independent":
        cfg = dataclasses.replace(cfg, offset=TIER_OFFSETS[role])
    return cfg


# --------------------------------------------------------------------------- CRC tables


@functools.cache
def _crc16_table(poly: int) -> np.ndarray:
    """256-entry table for an MSB-first (non-reflected) CRC-16."""
    t = np.arange(256, dtype=np.uint32) << 8
    for _ in range(8):
        t = np.where(t & 0x8000, (t << 1) ^ poly, t << 1) & 0xFFFF
    t = t.astype(np.uint32)
    t.setflags(write=False)
    return t


@functools.cache
def _crc32_table() -> np.ndarray:
    """256-entry table for the reflected CRC-32 of zlib/Ethernet."""
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_CRC32_POLY_REFLECTED), t >> 1)
    t = t.astype(np.uint32)
    t.setflags(write=False)
    return t


# --------------------------------------------------------------------------- keys


class Headers(NamedTuple):
    """The header fields a switch may hash, of one packet or of many (scalars or 1-D
    arrays, broadcast to one length).

    Attributes
    ----------
    src_ip, dst_ip : int or array of uint32 — IPv4 addresses as integers.
    sport, dport : int or array — UDP ports (RoCEv2 destination port 4791).
    proto : int or array — IP protocol (17 = UDP).
    dqpn : int, array or None — BTH destination QP (24 bits), hashed only if
        ``"bth_dqpn"`` is in the config's fields (absent: zero).
    """

    src_ip: object
    dst_ip: object
    sport: object
    dport: object = 4791
    proto: object = 17
    dqpn: object = None


def _as_u64(x: object, n: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "i" and a.size and int(a.min()) < 0:
        raise ValueError("hash key fields must be non-negative")
    return np.broadcast_to(a.astype(np.uint64, copy=False), (n,))


def build_key(cfg: HashConfig, pkt: Headers, seed: object = None) -> np.ndarray:
    """Hash key bytes of many packets as an ``(n, k)`` uint8 array.

    Layout: ``seed`` (``cfg.seed_bytes`` bytes, big-endian) followed by ``cfg.fields``
    in order, each big-endian with the width of :data:`FIELD_WIDTHS_BYTES`; an absent
    ``dqpn`` is hashed as zero. All inputs broadcast to one length ``n``. ``seed``
    (scalar or per-packet array) overrides ``cfg.seed``, which lets packets of many
    switches that differ only by seed be hashed in one call.
    """
    src_ip, dst_ip, sport, dport, proto, dqpn = pkt
    seed_v = cfg.seed if seed is None else seed
    values = {"sip": src_ip, "dip": dst_ip, "proto": proto, "sport": sport, "dport": dport,
              "bth_dqpn": 0 if dqpn is None else dqpn, "seed": seed_v}
    shape = np.broadcast_shapes(*(np.shape(v) for v in values.values()))
    if len(shape) > 1:
        raise ValueError(f"hash inputs must be scalars or 1-D arrays, got shape {shape}")
    n = shape[0] if shape else 1
    if cfg.symmetric:
        values["sip"] = _as_u64(src_ip, n) ^ _as_u64(dst_ip, n)
        values["sport"] = _as_u64(sport, n) ^ _as_u64(dport, n)
        values["dip"] = values["dport"] = 0
    cols: list[np.ndarray] = []
    sv = _as_u64(seed_v, n)
    for i in range(cfg.seed_bytes - 1, -1, -1):
        cols.append(((sv >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8))
    for f in cfg.fields:
        v = _as_u64(values[f], n)
        for i in range(FIELD_WIDTHS_BYTES[f] - 1, -1, -1):
            cols.append(((v >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8))
    if not cols:
        return np.zeros((n, 0), dtype=np.uint8)
    return np.stack(cols, axis=1)


def _rotr16(h: np.ndarray, offset: int) -> np.ndarray:
    if offset == 0:
        return h
    return ((h >> np.uint32(offset)) | (h << np.uint32(HASH_BITS - offset))) & np.uint32(
        _HASH_MASK
    )


def _hash_key_columns(cfg: HashConfig, key: np.ndarray) -> np.ndarray:
    """Table-driven hash over the key columns, vectorised over packets (rows)."""
    n, k = key.shape
    alg = cfg.algorithm
    if alg in _CRC16_POLY:
        table = _crc16_table(_CRC16_POLY[alg])
        init = 0xFFFF if cfg.crc_init is None else int(cfg.crc_init) & 0xFFFF
        crc = np.full(n, init, dtype=np.uint32)
        eight, low16 = np.uint32(8), np.uint32(0xFFFF)
        for j in range(k):
            crc = ((crc << eight) & low16) ^ table[(crc >> eight) ^ key[:, j]]
        h = crc
    elif alg in ("crc32_lo", "crc32_hi"):
        table = _crc32_table()
        crc = np.full(n, 0xFFFFFFFF, dtype=np.uint32)
        for j in range(k):
            crc = table[(crc ^ key[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        crc ^= np.uint32(0xFFFFFFFF)
        h = crc & np.uint32(0xFFFF) if alg == "crc32_lo" else crc >> np.uint32(16)
    elif alg == "xor16":
        if k % 2:
            key = np.concatenate([key, np.zeros((n, 1), dtype=np.uint8)], axis=1)
        words = (key[:, 0::2].astype(np.uint32) << np.uint32(8)) | key[:, 1::2]
        h = np.bitwise_xor.reduce(words, axis=1) if words.shape[1] else np.zeros(n, np.uint32)
    else:
        raise ValueError(
            f"algorithm {alg!r} has no flow hash (per-packet spray); it cannot be hashed or steered"
        )
    return _rotr16(h.astype(np.uint32), cfg.offset)


def ecmp_hash(cfg: HashConfig, pkt: Headers, seed: object = None) -> np.ndarray:
    """16-bit ECMP hash of many packets (vectorised).

    Parameters
    ----------
    cfg : HashConfig
        Switch hash model.
    pkt : Headers
        The packets' header fields.
    seed : int, array or None
        Overrides ``cfg.seed`` (per packet if an array).

    Returns
    -------
    numpy.ndarray of uint32
        Hash values in ``[0, 2**16)``, after the offset rotation.

    Notes
    -----
    Builds the ``(n, k)`` key byte matrix and runs a 256-entry table-driven CRC
    column by column, so the Python loop is over the k key bytes only.
    """
    return _hash_key_columns(cfg, build_key(cfg, pkt, seed))


def base_hash(cfg: HashConfig, pkt: Headers, seed: object = None) -> np.ndarray:
    """Hash of the flow with source port 0 (``pkt.sport`` is not read).

    ``ecmp_hash(cfg, Headers(sip, dip, s)) == base_hash(cfg, Headers(sip, dip, 0)) ^
    sport_xor_table(cfg)[s]``.
    """
    return ecmp_hash(cfg, pkt._replace(sport=0), seed)


@functools.lru_cache(maxsize=64)
def _sport_xor_table_cached(lin: HashConfig) -> np.ndarray:
    sports = np.arange(1 << 16, dtype=np.uint32)
    if "sport" not in lin.fields:
        t = np.zeros(1 << 16, dtype=np.uint32)
    else:
        zero = Headers(0, 0, 0, 0, 0, 0)
        t = ecmp_hash(lin, zero._replace(sport=sports)) ^ ecmp_hash(lin, zero)
    t.setflags(write=False)
    return t


def sport_xor_table(cfg: HashConfig) -> np.ndarray:
    """XOR contribution of each UDP source port to the hash (65,536 entries, read-only).

    ``T[s] = hash(key(0, 0, s)) ^ hash(key(0, 0, 0))``; by linearity of CRC/XOR over
    GF(2) for equal-length keys, ``hash(key(sip, dip, s)) = base_hash(sip, dip) ^ T[s]``
    for every IP pair and seed (see the module docstring). Cached per
    :func:`linear_key`, so switches that differ only by seed share one table.
    """
    if cfg.is_spray:
        raise ValueError("per-packet spray has no flow hash")
    return _sport_xor_table_cached(linear_key(cfg))


# --------------------------------------------------------------------------- selection


def resilient_table(table_size: int, n_members: int) -> np.ndarray:
    """Bucket -> member table with buckets assigned round-robin (bucket ``b`` -> ``b % N``)."""
    if n_members < 1 or table_size < 1:
        raise ValueError("table_size and n_members must be >= 1")
    return np.arange(table_size, dtype=np.int64) % n_members


def select_member(
    cfg: HashConfig,
    hash_: object,
    n_members: object,
    table: np.ndarray | None = None,
) -> np.ndarray:
    """Member index chosen by an ECMP group for each hash value.

    Parameters
    ----------
    cfg : HashConfig
        ``cfg.selection`` chooses ``mod`` (member = hash mod N) or ``resilient``
        (bucket = hash mod ``table_size``, then the bucket table).
    hash_ : array of uint32
        Output of :func:`ecmp_hash`.
    n_members : int or array of int
        Group size(s) N >= 1, broadcast against ``hash_``.
    table : array of int, optional
        Explicit bucket -> member table for resilient groups (e.g. after a member
        removal only that member's buckets were re-assigned). Default: round-robin.

    Returns
    -------
    numpy.ndarray of int64
    """
    h = np.asarray(hash_).astype(np.int64)
    n = np.asarray(n_members, dtype=np.int64)
    if np.any(n < 1):
        raise ValueError("n_members must be >= 1")
    if cfg.is_spray:
        raise ValueError("per-packet spray has no flow hash; draw members at random instead")
    if cfg.selection == "mod":
        return h % n
    if table is not None:
        table = np.asarray(table, dtype=np.int64)
        return table[h % table.shape[0]]
    return (h % cfg.table_size) % n


# --------------------------------------------------------------------------- scalar reference


def _crc16_bitwise(data: bytes, poly: int, init: int) -> int:
    crc = init
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def ecmp_hash_scalar(cfg: HashConfig, pkt: Headers) -> int:
    """Bitwise reference of :func:`ecmp_hash` for one packet (integer fields; slow; for
    tests).

    Follows the minimal model of the domain facts (§3.5): bitwise MSB-first CRC16,
    ``zlib.crc32`` for the CRC-32 variants, 16-bit XOR fold, rotate right by offset.
    """
    import zlib

    src_ip, dst_ip, sport, dport, proto, dqpn = pkt
    values = {"sip": src_ip, "dip": dst_ip, "proto": proto, "sport": sport, "dport": dport,
              "bth_dqpn": dqpn or 0}
    if cfg.symmetric:
        values.update(sip=src_ip ^ dst_ip, dip=0, sport=sport ^ dport, dport=0)
    key = int(cfg.seed).to_bytes(4, "big")[4 - cfg.seed_bytes:] if cfg.seed_bytes else b""
    for f in cfg.fields:
        key += int(values[f]).to_bytes(FIELD_WIDTHS_BYTES[f], "big")
    alg = cfg.algorithm
    if alg in _CRC16_POLY:
        init = 0xFFFF if cfg.crc_init is None else cfg.crc_init & 0xFFFF
        h = _crc16_bitwise(key, _CRC16_POLY[alg], init)
    elif alg == "crc32_lo":
        h = zlib.crc32(key) & 0xFFFF
    elif alg == "crc32_hi":
        h = zlib.crc32(key) >> 16
    elif alg == "xor16":
        h = 0
        for i in range(0, len(key), 2):
            h ^= int.from_bytes(key[i:i + 2].ljust(2, b"\0"), "big")
    else:
        raise ValueError("per-packet spray has no flow hash")
    off = cfg.offset
    return ((h >> off) | (h << (16 - off))) & 0xFFFF if off else h


def configs_fields_need_dqpn(configs: Sequence[HashConfig]) -> bool:
    """True if any config hashes the BTH destination QP."""
    return any("bth_dqpn" in c.fields for c in configs)


def ecmp_select(configs: Sequence[HashConfig], cfg_index: object, n_members: object,
                pkt: Headers) -> np.ndarray:
    """Member chosen for each packet at its own switch (one hash per row).

    The building block for walking flows through a fabric depth by depth: at each
    depth the caller knows which switch (index into ``configs``) each flow is at and
    its group size, and gets back the member index the hash selects.

    Parameters
    ----------
    configs : sequence of HashConfig
        One model per switch (or per ECMP group).
    cfg_index : array of int, shape (n,)
        Switch of each packet; ``-1`` = no decision (result ``-1``).
    n_members : int or array of int, shape (n,)
        ECMP group size at that switch.
    pkt : Headers
        The packets' header fields (broadcast to ``n``).

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        Member indices, ``-1`` where ``cfg_index < 0``.
    """
    ci = np.asarray(cfg_index, dtype=np.int64).ravel()
    n = ci.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    nm = np.broadcast_to(np.asarray(n_members, dtype=np.int64), (n,))
    cols = Headers(*(np.broadcast_to(np.asarray(v), (n,))
                     for v in pkt._replace(dqpn=0 if pkt.dqpn is None else pkt.dqpn)))
    for c in np.unique(ci[ci >= 0]):
        rows = np.flatnonzero(ci == c)
        cfg = configs[int(c)]
        h = ecmp_hash(cfg, Headers(*(v[rows] for v in cols)))
        out[rows] = select_member(cfg, h, nm[rows])
    return out
