"""Scenario -> Fabric and a job's NCCL settings, with semantic errors mapped to file
positions (the scenario's jobs become a workload in :mod:`icefabric.pipeline.jobs`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from icefabric.ccl.communicator import QpsRule
from icefabric.ccl.nccl_defaults import NcclModelError, NcclSettings
from icefabric.dataplane.ecmp import PROFILES, ROLES, role_profile
from icefabric.scenario.budget import check_budget
from icefabric.scenario.loader import LoadedScenario
from icefabric.topology import builders
from icefabric.topology.builders import ServerGroup, TopologyError
from icefabric.topology.catalog import SERVERS, SWITCHES, server_profile
from icefabric.topology.model import NODE_KIND_NAMES, Fabric
from icefabric.training.iteration import build_iteration
from icefabric.training.mapping import TrainingError
from icefabric.training.tasks import TrainingWorkload
from icefabric.units import gbps


def build_fabric(ls: LoadedScenario) -> Fabric:
    """The scenario's fabric, once its size is within budget
    (:func:`icefabric.scenario.budget.check_budget`)."""
    check_budget(ls)
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
        groups.append(ServerGroup(prof, p.count, p.name, names=tuple(p.hosts or ())))
    for key in ("leaf_switch", "spine_switch", "core_switch"):
        if getattr(fs, key) not in SWITCHES:
            raise ls.error(("fabric", key), f"unknown switch profile {getattr(fs, key)!r}; "
                           f"known: {', '.join(sorted(SWITCHES))}")
    options = builders.BuildOptions(name=scn.name, seed=scn.seed, hash_seeds=fs.hash_seeds,
                                    host_delay_ns=fs.host_delay_ns,
                                    fabric_delay_ns=fs.fabric_delay_ns, placement=fs.placement)
    fabric = _build_topology(ls, groups, options)
    profiles = fs.hash_profiles
    if isinstance(profiles, str):
        profiles = dict.fromkeys(ROLES, profiles)
    for role, name in (profiles or {}).items():
        if name not in PROFILES or name == "spray":
            raise ls.error(("fabric", "hash_profiles"),
                           f"unknown hash profile {name!r} for {role}s; known: "
                           f"{', '.join(sorted(set(PROFILES) - {'spray'}))}")
    return with_hash_profiles(fabric, profiles, scn.seed) if profiles else fabric


def with_hash_profiles(fabric: Fabric, profiles: dict[str, str], seed: int) -> Fabric:
    """``fabric`` with the switches of each role in ``profiles`` (role -> profile name,
    :func:`icefabric.dataplane.ecmp.role_profile`) re-hashed; profiles with random seeds
    (Cumulus switchd, ``independent``) draw one per switch, reproducibly from ``seed``."""
    rng = np.random.default_rng([seed, 0x4A5])
    algo, prof = list(fabric.node_hash_algorithm), list(fabric.node_hash_profile or
                                                         [""] * fabric.n_nodes)
    hseed, hoff = fabric.node_hash_seed.copy(), fabric.node_hash_offset.copy()
    for s in fabric.switches.tolist():
        role = NODE_KIND_NAMES[fabric.node_kind[s]]
        if role in profiles:
            cfg = role_profile(profiles[role], role, rng)
            algo[s], prof[s], hseed[s], hoff[s] = cfg.algorithm, profiles[role], cfg.seed, \
                cfg.offset
    return replace(fabric, node_hash_algorithm=tuple(algo), node_hash_profile=tuple(prof),
                   node_hash_seed=hseed, node_hash_offset=hoff)


def _build_topology(ls: LoadedScenario, groups: list[ServerGroup],
                    options: builders.BuildOptions) -> Fabric:
    fs = ls.scenario.fabric
    try:
        if fs.kind in ("leaf-spine", "rail-optimized"):
            return builders.leaf_spine(groups, builders.LeafSpineSpec(
                servers_per_leaf=fs.servers_per_leaf, n_spines=fs.spines, oversub=fs.oversub,
                links_per_spine=fs.links_per_spine, rail_optimized=fs.kind == "rail-optimized",
                separate_pools=fs.separate_pools, leaf=fs.leaf_switch, spine=fs.spine_switch),
                options)
        spec = builders.FatTreeSpec(
            pods=fs.pods, leaves_per_pod=fs.leaves_per_pod, aggs_per_pod=fs.aggs_per_pod,
            n_cores=fs.cores, servers_per_leaf=fs.servers_per_leaf, oversub=fs.oversub,
            core_oversub=fs.core_oversub, leaf=fs.leaf_switch, agg=fs.spine_switch,
            core=fs.core_switch)
        return builders.fat_tree(groups, spec, options)
    except TopologyError as e:
        raise ls.error(("fabric",), str(e)) from None


def placed_accels(ls: LoadedScenario, fabric: Fabric, where: tuple, job, used: dict[int, str]
                  ) -> list[int]:
    """Accelerators in rank order (server by server) of a job given by ``servers`` or
    ``pools`` and
    ``ranks_per_server`` (``where``: its field path for errors); ``used`` maps accelerators
    already taken to their job and is updated."""
    by_name = fabric.server_of_name
    if job.servers is not None:
        for k, n in enumerate(job.servers):
            if n not in by_name:
                raise ls.error(where + ("servers", k),
                               f"server {n!r} does not exist (servers are named "
                               f"<pool>-<i>, e.g. {fabric.servers[0].name})")
        srv = [by_name[n] for n in job.servers]
    else:
        pools = {p.name for p in ls.scenario.pools}
        for k, p in enumerate(job.pools):
            if p not in pools:
                raise ls.error(where + ("pools", k), f"pool {p!r} does not exist")
        srv = [i for i, s in enumerate(fabric.servers) if s.pool in job.pools]
    if len(set(srv)) != len(srv):
        raise ls.error(where, "a server is listed twice")
    ranks = []
    for s in srv:
        accels = fabric.servers[s].accels
        k = job.ranks_per_server or len(accels)
        if k > len(accels):
            raise ls.error(where + ("ranks_per_server",),
                           f"{k} ranks per server but {fabric.servers[s].name} has "
                           f"{len(accels)} accelerators")
        for a in accels[:k]:
            if a in used:
                raise ls.error(where, f"accelerator {fabric.node_names[a]} is also used by "
                               f"job {used[a]!r}")
            used[a] = job.name
            ranks.append(a)
    return ranks


def job_nccl_settings(ls: LoadedScenario, j: int, lib: str) -> NcclSettings:
    """The job's NCCL version and ``NCCL_*`` variables, checked against its library."""
    job = ls.scenario.jobs[j]
    if job.nccl_version is not None and lib != "nccl" and lib != "cross":
        raise ls.error(("jobs", j, "nccl_version"),
                       f"job {job.name!r} runs {lib}; nccl_version models NCCL releases only")
    if job.nccl_env and lib == "hccl":
        raise ls.error(("jobs", j, "nccl_env"), f"job {job.name!r} runs hccl, which reads no "
                       "NCCL_* variables (use qps_per_connection)")
    if lib == "cross" and "NCCL_IB_QPS_PER_CONNECTION" in job.nccl_env:
        raise ls.error(("jobs", j, "nccl_env"), "a cross-vendor job uses qps_per_connection "
                       "for every pool; leave NCCL_IB_QPS_PER_CONNECTION out")
    try:
        NcclSettings.resolve(job.nccl_version)
    except NcclModelError as e:
        raise ls.error(("jobs", j, "nccl_version"), str(e)) from None
    try:
        return NcclSettings.resolve(job.nccl_version, job.nccl_env)
    except NcclModelError as e:
        raise ls.error(("jobs", j, "nccl_env"), str(e)) from None


def build_training(ls: LoadedScenario, fabric: Fabric, *, qps_rule: QpsRule | None = None
                   ) -> TrainingWorkload:
    """One iteration of the scenario's training job on ``fabric`` (its accelerators must
    not be used by another job); errors point at the ``training`` section."""
    scn = ls.scenario
    used: dict[int, str] = {}
    for j, job in enumerate(scn.jobs):
        placed_accels(ls, fabric, ("jobs", j), job, used)
    accels = placed_accels(ls, fabric, ("training",), scn.training, used)
    try:
        if scn.training.chakra is not None:
            from pathlib import Path

            from icefabric.training.chakra import trace_iteration

            base = Path(ls.source).parent if Path(ls.source).exists() else Path.cwd()
            return trace_iteration(fabric, np.asarray(accels), scn.training, base,
                                   qps_rule=qps_rule, qpn_seed=scn.seed)
        return build_iteration(fabric, np.asarray(accels), scn.training,
                               qps_rule=qps_rule, qpn_seed=scn.seed)
    except TrainingError as e:
        raise ls.error(("training",), str(e)) from None
