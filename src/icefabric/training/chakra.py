"""A training iteration from Chakra execution traces instead of the analytic model.

The traces (one per rank, read by :mod:`icefabric.collect.chakra`) give every rank's
compute and communication nodes with their dependencies. Here:

* a compute node becomes a delay of its ``duration_micros``; a rank runs one compute node
  at a time, in a dependency-respecting order (ASTRA-sim's ``HardwareResource`` admits one
  GPU compute node per NPU at a time);
* the collective nodes with the same process group and call number on every rank
  (``instance``) are one collective over those ranks, run by the model of the ranks'
  library (``comm_size`` is taken as the nccl-tests ``size`` of the call); it starts when
  every participant's dependencies are done;
* a send and its matching receive are one point-to-point transfer over ``channels``
  connections; the receiver's dependents wait for it;
* barriers are zero-length synchronisation points.

Rank ``r`` of the traces runs on the job's ``r``-th accelerator (launcher order). Devices
are ranks.
"""

from __future__ import annotations

import glob
import heapq
from collections import defaultdict
from pathlib import Path

import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator, QpsRule
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.collect.chakra import read_chakra_traces, workload_from_traces
from icefabric.topology.model import Fabric
from icefabric.training.mapping import TrainingError
from icefabric.training.p2p import Transfer, transfer
from icefabric.training.spec import TrainingSpec
from icefabric.training.tasks import TaskLog, TrainingWorkload

KINDS = {"ALL_REDUCE": "all_reduce", "ALL_GATHER": "all_gather",
         "REDUCE_SCATTER": "reduce_scatter", "REDUCE_SCATTER_BLOCK": "reduce_scatter",
         "ALL_TO_ALL": "alltoall", "BROADCAST": "broadcast"}
P2P_CHANNELS = 2  # NCCL: nNetChannels = 2 per peer up to 2.28 (see training.spec)


def trace_paths(patterns: list[str], base: Path) -> list[Path]:
    """Files named by ``patterns`` (globs allowed), relative to ``base``, in order."""
    out: list[Path] = []
    for pat in patterns:
        p = Path(pat) if Path(pat).is_absolute() else base / pat
        hits = sorted(glob.glob(str(p)))
        if not hits:
            raise TrainingError(f"no Chakra trace matches {pat!r} (relative to {base})")
        out += [Path(h) for h in hits]
    return out


def trace_iteration(fabric: Fabric, accels: np.ndarray, spec: TrainingSpec, base: Path, *,
                    qps_rule: QpsRule | None = None, qpn_seed: int = 0) -> TrainingWorkload:
    """The iteration the traces of ``spec.chakra`` describe, on ``accels``."""
    try:
        traces = read_chakra_traces(trace_paths(spec.chakra, base))
    except OSError as e:
        raise TrainingError(f"cannot read Chakra trace: {e}") from None
    for tr in traces:
        if tr.warnings:
            raise TrainingError(f"Chakra trace of rank {tr.rank}: {tr.warnings[0].message}")
    return trace_workload(fabric, accels, workload_from_traces(traces), spec.name,
                          qps_rule=qps_rule, qpn_seed=qpn_seed)


def trace_workload(fabric: Fabric, accels: np.ndarray, neutral: dict, name: str, *,
                   qps_rule: QpsRule | None = None, qpn_seed: int = 0) -> TrainingWorkload:
    """Workload of a neutral trace workload (:func:`workload_from_traces`)."""
    n = neutral["nranks"]
    ranks = sorted({op["rank"] for op in neutral["ops"]})
    if ranks and (ranks[0] < 0 or ranks[-1] >= n or len(accels) != n):
        raise TrainingError(f"the traces are of {n} ranks (numbered {ranks[0]}..{ranks[-1]}) "
                            f"but the job has {len(accels)} accelerators")
    units, unit_of = _units(neutral["ops"])
    b = _Builder(fabric, np.asarray(accels, dtype=np.int64), name, qps_rule,
                 [f"rank{r}" for r in range(n)])
    tails: dict[int, list[int]] = {}
    for u in _topological(units, unit_of):
        after = sorted({f for d in units[u]["deps"] for f in tails[unit_of[d]]})
        tails[u] = b.emit(units[u], after)
    wl = b.wb.build(node_ip=fabric.node_ip, qpn_seed=qpn_seed)
    comp = [op["duration_us"] for op in neutral["ops"] if op["kind"] == "COMP"]
    summary = {"source": "chakra", "ranks": n, "compute_nodes": len(comp),
               "compute_ms_per_rank": round(sum(comp) / 1e3 / max(n, 1), 4),
               "timeline_devices": list(range(n))}
    return TrainingWorkload(name, wl, b.log.freeze(), summary)


def _units(ops: list[dict]) -> tuple[list[dict], dict]:
    """Group trace nodes into units (a compute node, a collective over its ranks, a matched
    send/receive pair); ``unit_of[(rank, node id)]`` names each node's unit."""
    units: list[dict] = []
    unit_of: dict[tuple[int, int], int] = {}
    colls: dict[tuple, int] = {}
    known = {(op["rank"], op["id"]) for op in ops}
    for op in ops:
        key = (op["rank"], op["id"])
        deps = {(op["rank"], d) for d in op["deps"] if (op["rank"], d) in known}
        if op["kind"] == "COLL":
            ck = (op["pg_name"], op["instance"])
            if ck not in colls:
                colls[ck] = len(units)
                units.append({"kind": "COLL", "collective": op["collective"], "ranks": [],
                              "size": op["size_bytes"], "deps": set(), "label": op["name"]})
            u = colls[ck]
            units[u]["ranks"].append(op["rank"])
        elif op["kind"] == "RECV":
            if op["peer"] is None:
                raise TrainingError(f"rank {op['rank']} node {op['id']} receives from rank "
                                    f"{op['src']} (tag {op['tag']}) but no trace sends it")
            continue  # joins its send's unit below
        elif op["kind"] == "SEND" and op["peer"] is None:
            raise TrainingError(f"rank {op['rank']} node {op['id']} sends to rank "
                                f"{op['dst']} (tag {op['tag']}) but no trace receives it")
        else:
            u = len(units)
            units.append({"kind": op["kind"], "rank": op["rank"], "deps": set(),
                          "label": op["name"], "duration_us": op["duration_us"],
                          "size": op["size_bytes"], "dst": op["peer"] and op["peer"][0]})
        unit_of[key] = u
        units[u]["deps"] |= deps
    for op in ops:
        if op["kind"] == "RECV":
            u = unit_of[tuple(op["peer"])]
            unit_of[(op["rank"], op["id"])] = u
            units[u]["deps"] |= {(op["rank"], d) for d in op["deps"]
                                 if (op["rank"], d) in known}
    return units, unit_of


def _topological(units: list[dict], unit_of: dict) -> list[int]:
    """Units in dependency order (smallest index first among the ready ones)."""
    indeg = [0] * len(units)
    children: dict[int, set[int]] = defaultdict(set)
    for u, unit in enumerate(units):
        for d in unit["deps"]:
            p = unit_of[d]
            if p != u and u not in children[p]:
                children[p].add(u)
                indeg[u] += 1
    ready = [u for u in range(len(units)) if indeg[u] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        u = heapq.heappop(ready)
        out.append(u)
        for c in children[u]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(out) != len(units):
        raise TrainingError("the traces' dependencies form a cycle")
    return out


class _Builder:
    """Emits units as flows: delays, collectives, transfers; one compute at a time per
    rank."""

    def __init__(self, fabric, accels, name, qps_rule, devices):
        self.fabric, self.accels, self.name, self.qps_rule = fabric, accels, name, qps_rule
        self.wb = WorkloadBuilder()
        self.log = TaskLog(devices)
        self.last_compute: dict[int, int] = {}
        self.comms: dict[tuple, Communicator] = {}

    def emit(self, unit: dict, after: list[int]) -> list[int]:
        kind = unit["kind"]
        if kind == "COMP":
            r = unit["rank"]
            prev = self.last_compute.get(r)
            f = self.wb.delay(int(unit["duration_us"]) * 1000,
                              deps=after + ([prev] if prev is not None else []))
            self.last_compute[r] = f
            self.log.add("compute", [f], [r], label=unit["label"])
            return [f]
        if kind == "SEND":
            return self.send(unit["rank"], unit["dst"], float(unit["size"] or 0), after,
                             unit["label"])
        return self.collective(unit, after)

    def _comm(self, ranks: list[int]) -> Communicator:
        key = tuple(ranks)
        c = self.comms.get(key)
        if c is None:
            acc = self.accels[ranks]
            libs = {self.fabric.servers[int(self.fabric.node_server[a])].profile.library
                    for a in acc.tolist()}
            c = Communicator(job=f"{self.name}/comm/{len(self.comms)}", fabric=self.fabric,
                             ranks=acc, library=libs.pop() if len(libs) == 1 else "cross",
                             ).under(self.qps_rule)
            self.comms[key] = c
        return c

    def collective(self, unit: dict, after: list[int]) -> list[int]:
        ranks = sorted(unit["ranks"])
        name = unit["collective"]
        if name == "BARRIER" or len(ranks) < 2:
            f = self.wb.delay(0, deps=after)
            self.log.add("comm", [f], ranks, label=unit["label"])
            return [f]
        if name not in KINDS:
            raise TrainingError(f"collective {name} ({unit['label']!r}) is not modelled; "
                                f"modelled: {', '.join(sorted(KINDS))}, BARRIER")
        f0 = len(self.wb.flow_size)
        try:
            tail = add_collective(self.wb, self._comm(ranks), KINDS[name],
                                  int(unit["size"] or 0), after=after,
                                  name=f"{self.name}/comm:{unit['label']}")
        except ValueError as e:
            raise TrainingError(f"collective {unit['label']!r}: {e}") from None
        self.log.add("comm", range(f0, len(self.wb.flow_size)), ranks, label=unit["label"])
        return tail

    def send(self, src: int, dst: int, size: float, after: list[int], label: str) -> list[int]:
        comm = self._comm(sorted([src, dst]))
        pair = [(int(self.accels[src]), int(self.accels[dst]))]
        f = transfer(self.wb, comm, Transfer(pair, size, P2P_CHANNELS, label), after)
        self.log.add("comm", [f], [src, dst], label=label)
        return [f]
