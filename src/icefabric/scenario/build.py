"""Scenario -> Fabric, with semantic errors mapped to file positions (the scenario's jobs
become a workload in :mod:`icefabric.pipeline.jobs`)."""

from __future__ import annotations

from dataclasses import replace

from icefabric.scenario.loader import LoadedScenario
from icefabric.topology import builders
from icefabric.topology.builders import ServerGroup, TopologyError
from icefabric.topology.catalog import SERVERS, SWITCHES, server_profile
from icefabric.topology.model import Fabric
from icefabric.units import gbps


def build_fabric(ls: LoadedScenario) -> Fabric:
    scn = ls.scenario
    fs = scn.fabric
    groups = []
    for i, p in enumerate(scn.pools):
        if p.server not in SERVERS:
            raise ls.error(("pools", i, "server"), f"unknown server profile {p.server!r}; "
                           f"known: {', '.join(sorted(SERVERS))}")
        prof = server_profile(p.server)
        if p.nic_gbps is not None:
            prof = replace(prof, nic_bps=gbps(p.nic_gbps))
        groups.append(ServerGroup(prof, p.count, p.name))
    for key in ("leaf_switch", "spine_switch", "core_switch"):
        if getattr(fs, key) not in SWITCHES:
            raise ls.error(("fabric", key), f"unknown switch profile {getattr(fs, key)!r}; "
                           f"known: {', '.join(sorted(SWITCHES))}")
    common = dict(hash_seeds=fs.hash_seeds, host_delay_ns=fs.host_delay_ns,
                  fabric_delay_ns=fs.fabric_delay_ns, seed=scn.seed, name=scn.name,
                  placement=fs.placement)
    try:
        if fs.kind in ("leaf-spine", "rail-optimized"):
            return builders.leaf_spine(
                groups, servers_per_leaf=fs.servers_per_leaf, n_spines=fs.spines,
                oversub=fs.oversub, links_per_spine=fs.links_per_spine,
                rail_optimized=fs.kind == "rail-optimized", separate_pools=fs.separate_pools,
                leaf=fs.leaf_switch, spine=fs.spine_switch, **common)
        return builders.fat_tree(
            groups, pods=fs.pods, leaves_per_pod=fs.leaves_per_pod,
            aggs_per_pod=fs.aggs_per_pod, n_cores=fs.cores,
            servers_per_leaf=fs.servers_per_leaf, oversub=fs.oversub,
            core_oversub=fs.core_oversub, leaf=fs.leaf_switch, agg=fs.spine_switch,
            core=fs.core_switch, **common)
    except TopologyError as e:
        raise ls.error(("fabric",), str(e)) from None
