"""Switch hash configurations of a fabric, and ECMP routing of QPs through them.

The same function routes QPs for the ``ecmp`` baseline and verifies ICE's planned source
ports: a plan is correct only if re-hashing every QP through every switch's model lands it
on its planned path.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icefabric.dataplane.ecmp import PROFILES, HashConfig, Headers, ecmp_hash, select_member
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing


def fabric_hash_configs(fabric: Fabric) -> dict[int, HashConfig]:
    """One :class:`HashConfig` per switch node, from the fabric's per-switch algorithm,
    seed and offset (set by the builder from the switch profile and seed policy) and, when
    the switch has a named hash profile, that profile's key fields, symmetric hashing and
    member selection."""
    out = {}
    profiles = fabric.node_hash_profile
    for s in fabric.switches.tolist():
        base = PROFILES[profiles[s]] if profiles and profiles[s] else HashConfig()
        out[s] = dataclasses.replace(base, algorithm=fabric.node_hash_algorithm[s],
                                     seed=int(fabric.node_hash_seed[s]) & 0xFFFFFFFF,
                                     offset=int(fabric.node_hash_offset[s]),
                                     name=fabric.node_names[s])
    return out


def hash_chooser(fabric: Fabric, configs: dict[int, HashConfig], src_ip, dst_ip, sport,
                 dport: int = 4791):
    """A ``Routing.walk`` chooser that picks members with each switch's hash model."""
    src_ip = np.asarray(src_ip, dtype=np.uint32)
    dst_ip = np.asarray(dst_ip, dtype=np.uint32)
    sport = np.asarray(sport, dtype=np.int64)

    def choose(step, idx, switches, dst_leaves, n_members):
        # the pairs at each switch as one slice of a sort by switch (a radix sort of
        # 16-bit keys where the nodes fit), their fields gathered once in that order: a
        # mask per switch costs switches x pairs (30 s of an 8,192-rank AllToAll's 8 M
        # QPs at 4,480 switches)
        key = switches.astype(np.uint16) if fabric.n_nodes <= 1 << 16 else switches
        order = np.argsort(key, kind="stable")
        at, first = np.unique(switches[order], return_index=True)
        bounds = np.append(first, len(order)).tolist()
        ii = idx[order]
        s_ip, d_ip, sp, nm = src_ip[ii], dst_ip[ii], sport[ii], n_members[order]
        chosen = np.empty(len(idx), dtype=np.int64)
        for s, a, b in zip(at.tolist(), bounds[:-1], bounds[1:]):
            cfg = configs[s]
            h = ecmp_hash(cfg, Headers(s_ip[a:b], d_ip[a:b], sp[a:b], dport))
            chosen[a:b] = select_member(cfg, h, nm[a:b])
        member = np.empty(len(idx), dtype=np.int64)
        member[order] = chosen
        return member

    return choose


def ecmp_routes(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
                src_nic: np.ndarray, dst_nic: np.ndarray, sport: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The NIC-to-NIC path every QP takes under hash-based ECMP, as CSR (indptr, links)."""
    ip = fabric.node_ip
    choose = hash_chooser(fabric, configs, ip[src_nic], ip[dst_nic], sport)
    return routing.walk_csr(src_nic, dst_nic, choose)


def ecmp_paths(fabric: Fabric, routing: Routing, configs: dict[int, HashConfig],
               src_nic: np.ndarray, dst_nic: np.ndarray, sport: np.ndarray
               ) -> list[np.ndarray]:
    """:func:`ecmp_routes` as one array of link ids per QP."""
    ptr, flat = ecmp_routes(fabric, routing, configs, src_nic, dst_nic, sport)
    return np.split(flat, ptr[1:-1]) if len(ptr) > 1 else []
