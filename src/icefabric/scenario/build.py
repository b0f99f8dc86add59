"""Scenario -> Fabric and -> Workload, with semantic errors mapped to file positions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import Workload, WorkloadBuilder
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
        groups.append(ServerGroup(prof, p.count, p.name, names=tuple(p.hosts or ())))
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


def job_communicators(ls: LoadedScenario, fabric: Fabric, qps_override: int | None = None
                      ) -> list[tuple[int, Communicator]]:
    """One communicator per job (index into scenario.jobs, communicator)."""
    scn = ls.scenario
    out = []
    by_name = fabric.server_of_name
    used: dict[int, str] = {}
    for j, job in enumerate(scn.jobs):
        if job.servers is not None:
            names = job.servers
            for k, n in enumerate(names):
                if n not in by_name:
                    raise ls.error(("jobs", j, "servers", k),
                                   f"server {n!r} does not exist (servers are named "
                                   f"<pool>-<i>, e.g. {fabric.servers[0].name})")
            srv = [by_name[n] for n in names]
        else:
            pools = {p.name for p in scn.pools}
            for k, p in enumerate(job.pools):
                if p not in pools:
                    raise ls.error(("jobs", j, "pools", k), f"pool {p!r} does not exist")
            srv = [i for i, s in enumerate(fabric.servers) if s.pool in job.pools]
        if len(set(srv)) != len(srv):
            raise ls.error(("jobs", j), "a server is listed twice")
        ranks = []
        for s in srv:
            accels = fabric.servers[s].accels
            k = job.ranks_per_server or len(accels)
            if k > len(accels):
                raise ls.error(("jobs", j, "ranks_per_server"),
                               f"{k} ranks per server but {fabric.servers[s].name} has "
                               f"{len(accels)} accelerators")
            for a in accels[:k]:
                if a in used:
                    raise ls.error(("jobs", j), f"accelerator {fabric.node_names[a]} is also "
                                   f"used by job {used[a]!r}")
                used[a] = job.name
                ranks.append(a)
        libs = {fabric.servers[s].profile.library for s in srv}
        lib = job.library
        if lib == "auto":
            lib = libs.pop() if len(libs) == 1 else "cross"
        if len(ranks) < 2:
            raise ls.error(("jobs", j), "a job needs at least 2 ranks")
        try:
            comm = Communicator(job=job.name, fabric=fabric, ranks=np.asarray(ranks),
                                library=lib,
                                qps_per_connection=qps_override or job.qps_per_connection,
                                channels=job.channels, step_overhead_ns=job.step_overhead_ns)
        except ValueError as e:
            raise ls.error(("jobs", j), str(e)) from None
        out.append((j, comm))
    return out


def build_workload(ls: LoadedScenario, fabric: Fabric, size_bytes: int, *,
                   qps_per_connection: int | None = None) -> Workload:
    """All jobs run concurrently; each job runs its collectives one after another at
    ``size_bytes`` (nccl-tests runs one size at a time)."""
    scn = ls.scenario
    wb = WorkloadBuilder()
    for j, comm in job_communicators(ls, fabric, qps_per_connection):
        after: list[int] = []
        for c, spec in enumerate(scn.jobs[j].collectives):
            try:
                after = add_collective(wb, comm, spec.kind, size_bytes,
                                       algorithm=spec.algorithm, after=after,
                                       name=f"{comm.job}:{spec.kind}")
            except ValueError as e:
                raise ls.error(("jobs", j, "collectives", c), str(e)) from None
    return wb.build(node_ip=fabric.node_ip, qpn_seed=scn.seed)
