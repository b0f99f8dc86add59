"""Validation against the packet-level reference set (``shared/reference/validation``).

A scenario file (schema in that folder's README) is turned into a :class:`SimProblem`,
run by our engines in each reference's mode, and compared row by row:

=============  ================================================================
reference      our mode
=============  ================================================================
``ns3-dcqcn``  fluid, DCQCN (``config.dcqcn``), RED/ECN (``config.ecn``), PFC with the
               ns-3 dynamic shared-buffer threshold (``config.pfc_ns3``), ns-3 wire size
``ns3-pfc``    fluid, no CC, ns-3 PFC, ns-3 wire size; also the ``flow`` engine
``htsim-pfc``  fluid, no CC, htsim static XOFF/XON (``config.pfc_htsim``), htsim wire size;
               also the ``flow`` engine
=============  ================================================================

Packet-level effects are inputs computed from ``config.packet`` and the path, never
per-scenario constants: every payload byte costs ``wire/payload`` bytes on the wire, and a
flow completes when the sender gets the ACK of its last byte — forward propagation, one
store-and-forward packet time per hop after the first, and the ACK's way back
(``flow_latency_ns``). This is the ≈5 µs / 10 µs per ring step the README describes.
Nothing here depends on a file name.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from icefabric.dataplane.dcqcn import DcqcnParams
from icefabric.dataplane.pfc import PfcParams
from icefabric.engine.options import EngineOptions, RedPerGbps
from icefabric.engine.problem import (
    LINK_FABRIC,
    LINK_HOST,
    CollectiveSpec,
    EngineError,
    LinkFailure,
    SimProblem,
    build_problem,
    csr_from_lists,
)
from icefabric.engine.registry import get_engine

REFERENCES = ("ns3-dcqcn", "ns3-pfc", "htsim-pfc")
_KIND = {"ring_allreduce": "all_reduce", "alltoall": "alltoall", "incast": "incast"}


class ReferenceFileError(EngineError):
    """A validation file that cannot be read; the message names the file and the field."""


@dataclass(frozen=True)
class PacketModel:
    """Per-packet costs a fluid model must add back (validation ``config.packet``)."""

    payload_bytes: float = 4096.0
    wire_bytes: float = 4132.0
    ack_wire_bytes: float = 60.0

    @property
    def wire_overhead(self) -> float:
        return self.wire_bytes / self.payload_bytes


@dataclass
class Scenario:
    """A parsed validation file."""

    name: str
    path: Path
    category: str
    data: dict
    node_ids: list[str]
    node_is_switch: np.ndarray
    link_names: list[str]
    link_src: np.ndarray
    link_dst: np.ndarray
    link_cap_bps: np.ndarray
    link_delay_ns: np.ndarray
    flow_ids: list[str]

    @property
    def references(self) -> list[str]:
        return [r for r in REFERENCES if r in self.data.get("results", {})]


def _require(d: dict, key: str, where: str):
    if key not in d:
        raise ReferenceFileError(f"{where}: missing field {key!r}")
    return d[key]


def load_scenario(path: str | Path) -> Scenario:
    """Read and check one validation JSON file (raises :class:`ReferenceFileError`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReferenceFileError(f"{path.name}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ReferenceFileError(f"{path.name}: top level must be an object")
    where = path.name
    topo = _require(data, "topology", where)
    nodes = _require(topo, "nodes", f"{where}: topology")
    links = _require(topo, "links", f"{where}: topology")
    flows = _require(data, "flows", where)
    try:
        node_ids = [str(n["id"]) for n in nodes]
        is_sw = np.array([n.get("kind") == "switch" for n in nodes], bool)
        idx = {n: i for i, n in enumerate(node_ids)}
        names, src, dst, cap, dly = [], [], [], [], []
        default_rate = data.get("config", {}).get("link", {}).get("default_rate_gbps", 100)
        for j, lk in enumerate(links):
            a, b = str(lk["a"]), str(lk["b"])
            if a not in idx or b not in idx:
                raise ReferenceFileError(f"{where}: topology.links[{j}] names an unknown node")
            for u, v in ((a, b), (b, a)):
                names.append(f"{u}->{v}")
                src.append(idx[u])
                dst.append(idx[v])
                cap.append(float(lk.get("rate_gbps", default_rate)) * 1e9)
                dly.append(float(lk.get("delay_us", 1.0)) * 1e3)
        fids = [str(f["id"]) for f in flows]
    except (KeyError, TypeError) as e:
        raise ReferenceFileError(f"{where}: malformed topology or flows ({e!r})") from None
    return Scenario(name=str(data.get("name", path.stem)), path=path,
                    category=str(data.get("category", "")), data=data, node_ids=node_ids,
                    node_is_switch=is_sw, link_names=names, link_src=np.array(src, np.int64),
                    link_dst=np.array(dst, np.int64), link_cap_bps=np.array(cap),
                    link_delay_ns=np.array(dly), flow_ids=fids)


def _shortest_path(sc: Scenario, s: int, d: int, down: set[int]) -> list[int]:
    """Links of the BFS shortest path from node ``s`` to ``d`` avoiding ``down`` links.

    Paths never transit a host (hosts do not forward)."""
    n = len(sc.node_ids)
    adj: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for li, (u, v) in enumerate(zip(sc.link_src, sc.link_dst, strict=False)):
        if li not in down:
            adj[u].append((v, li))
    prev = {s: (-1, -1)}
    dq = deque([s])
    while dq:
        u = dq.popleft()
        if u == d:
            break
        if u != s and not sc.node_is_switch[u]:
            continue
        for v, li in adj[u]:
            if v not in prev:
                prev[v] = (u, li)
                dq.append(v)
    if d not in prev:
        raise ReferenceFileError(f"{sc.path.name}: no path from {sc.node_ids[s]} to "
                                 f"{sc.node_ids[d]}")
    out = []
    v = d
    while v != s:
        u, li = prev[v]
        out.append(li)
        v = u
    return out[::-1]


def _node_path_links(sc: Scenario, nodes: list[str], where: str) -> list[int]:
    lut = {(sc.node_ids[u], sc.node_ids[v]): i for i, (u, v) in
           enumerate(zip(sc.link_src, sc.link_dst, strict=False))}
    try:
        return [lut[(a, b)] for a, b in zip(nodes[:-1], nodes[1:], strict=False)]
    except KeyError:
        raise ReferenceFileError(f"{where}: route {nodes} uses a missing link") from None


def packet_model(sc: Scenario, reference: str) -> PacketModel:
    pk = sc.data.get("config", {}).get("packet", {})
    payload = float(pk.get("payload_bytes_per_data_packet", 4096))
    if reference.startswith("htsim"):
        return PacketModel(payload, float(pk.get("htsim_data_packet_wire_bytes", payload + 64)),
                           float(pk.get("htsim_ack_wire_bytes", 64)))
    return PacketModel(payload, float(pk.get("ns3_data_packet_wire_bytes", payload + 36)),
                       float(pk.get("ns3_ack_wire_bytes", 60)))


def flow_latency_ns(cap_bps: np.ndarray, delay_ns: np.ndarray, route: list[int],
                    pm: PacketModel) -> float:
    """Time from the fluid's last byte leaving the sender to the sender holding its ACK.

    Forward propagation, one packet serialization per hop after the first (store and
    forward), and the ACK's propagation and serialization back over the same hops.
    """
    r = np.asarray(route, np.int64)
    if len(r) == 0:
        return 0.0
    prop = float(delay_ns[r].sum())
    sf = float(np.sum(pm.wire_bytes * 8 / cap_bps[r[1:]] * 1e9))
    ack = float(np.sum(pm.ack_wire_bytes * 8 / cap_bps[r] * 1e9))
    return 2 * prop + sf + ack


def to_problem(sc: Scenario, reference: str = "ns3-pfc") -> SimProblem:
    """Build the :class:`SimProblem` of a scenario for one reference's packet model."""
    pm = packet_model(sc, reference)
    fidx = {f: i for i, f in enumerate(sc.flow_ids)}
    if len(fidx) != len(sc.flow_ids):
        raise ReferenceFileError(f"{sc.path.name}: duplicate flow ids")
    explicit = sc.data["topology"].get("routes") or {}
    flows = _flow_table(sc, fidx, explicit, pm)
    failures = _link_failures(sc, flows, explicit.get("after_failure", {}))
    kinds = np.where(sc.node_is_switch[sc.link_src] & sc.node_is_switch[sc.link_dst],
                     LINK_FABRIC, LINK_HOST)
    return build_problem(
        link_capacity_bps=sc.link_cap_bps, link_delay_ns=np.round(sc.link_delay_ns),
        flow_size_bytes=flows.sizes, routes=flows.routes,
        route_flow=np.arange(len(flows.routes)), route_qp=np.arange(len(flows.routes)),
        flow_start_ns=np.round(flows.starts), flow_latency_ns=np.round(flows.latency),
        deps=flows.deps, link_src=sc.link_src, link_dst=sc.link_dst,
        collectives=_collectives(sc, fidx), link_names=sc.link_names,
        flow_names=sc.flow_ids, link_kind=kinds, node_is_switch=sc.node_is_switch,
        failures=failures, meta={"scenario": sc.name, "wire_overhead": pm.wire_overhead})


@dataclass
class _FlowTable:
    """The file's flows in order: their pre-failure routes (link ids), end nodes
    (``ends``: node indices), sizes, start times and ACK latencies (ns), and the flows
    each waits for."""

    routes: list[list[int]]
    ends: list[tuple[int, int]]
    sizes: list[float]
    starts: list[float]
    latency: list[float]
    deps: list[list[int]]


def _flow_table(sc: Scenario, fidx: dict[str, int], explicit: dict,
                pm: PacketModel) -> _FlowTable:
    """The flows of ``sc`` on the routes the file gives before any failure (``explicit``:
    ``topology.routes``), else on shortest paths."""
    nidx = {n: i for i, n in enumerate(sc.node_ids)}
    # a file without ``after_failure`` routes may give its flows' routes directly
    before = explicit.get("before_failure", explicit if "after_failure" not in explicit else {})
    t = _FlowTable([], [], [], [], [], [])
    for j, f in enumerate(sc.data["flows"]):
        w = f"{sc.path.name}: flows[{j}]"
        try:
            s, d = nidx[str(f["src"])], nidx[str(f["dst"])]
            size = float(f["size_bytes"])
        except KeyError as e:
            raise ReferenceFileError(f"{w}: missing or unknown {e}") from None
        if f["id"] in before:
            r = _node_path_links(sc, [str(x) for x in before[f["id"]]], w)
        else:
            r = _shortest_path(sc, s, d, set())
        try:
            t.deps.append([fidx[str(a)] for a in f.get("after", [])])
        except KeyError as e:
            raise ReferenceFileError(f"{w}: 'after' names unknown flow {e}") from None
        t.routes.append(r)
        t.ends.append((s, d))
        t.sizes.append(size)
        t.starts.append(float(f.get("start_us", 0.0)) * 1e3)
        t.latency.append(flow_latency_ns(sc.link_cap_bps, sc.link_delay_ns, r, pm))
    return t


def _link_failures(sc: Scenario, flows: _FlowTable, after: dict) -> list[LinkFailure]:
    """A :class:`LinkFailure` per link-down event of the file, with the new routes of
    every flow it hits: the file's ``after_failure`` route, else the shortest path around
    every link down so far. The flows' pre-failure routes stay in ``flows`` (the initial
    problem runs on them; the failures carry the new ones)."""
    lut = {(sc.node_ids[u], sc.node_ids[v]): i for i, (u, v) in
           enumerate(zip(sc.link_src, sc.link_dst, strict=False))}
    routes = list(flows.routes)
    failures = []
    down: set[int] = set()
    for e in sc.data["topology"].get("link_events", []) or []:
        if e.get("event", "down") != "down":
            continue
        a, b = str(e["a"]), str(e["b"])
        ls = [lut[(a, b)], lut[(b, a)]]
        down |= set(ls)
        hit = [k for k, r in enumerate(routes) if set(r) & down]
        new = []
        for k in hit:
            fid = sc.flow_ids[k]
            if fid in after:
                new.append(_node_path_links(sc, [str(x) for x in after[fid]], sc.path.name))
            else:
                new.append(_shortest_path(sc, *flows.ends[k], down))
        ip, li = csr_from_lists(new)
        failures.append(LinkFailure(t_ns=int(round(float(e["time_us"]) * 1e3)),
                                    links=np.array(ls, np.int64),
                                    reroute_route=np.array(hit, np.int64), reroute_indptr=ip,
                                    reroute_links=li))
        for k, r in zip(hit, new, strict=False):
            routes[k] = r  # later failures see the rerouted paths
    return failures


def _collectives(sc: Scenario, fidx: dict[str, int]) -> list[CollectiveSpec]:
    """The file's collectives (their flows by index) for per-collective comparison rows."""
    colls = []
    for c in sc.data.get("collectives", []) or []:
        try:
            fl = np.array([fidx[str(x)] for x in c["flows"]], np.int64)
        except KeyError as e:
            raise ReferenceFileError(f"{sc.path.name}: collective {c.get('name')} names "
                                     f"unknown flow {e}") from None
        ranks = c.get("ranks") or []
        size = int(c.get("size_bytes", c.get("size_bytes_per_pair", 0)))
        colls.append(CollectiveSpec(name=str(c["name"]), job=str(c["name"]),
                                    kind=_KIND.get(c.get("type", ""), str(c.get("type", ""))),
                                    size_bytes=size, nranks=max(len(ranks), 1), flows=fl,
                                    algorithm="ring" if "ring" in c.get("type", "") else ""))
    return colls


def engine_options(sc: Scenario, reference: str, engine: str = "fluid") -> EngineOptions:
    """Our engine's options that reproduce one reference's mode from the file's config."""
    if engine != "fluid":
        return EngineOptions(engine=engine)
    cfg = sc.data.get("config", {})
    pm = packet_model(sc, reference)
    opts: dict = {"engine": engine, "wire_overhead": pm.wire_overhead,
                  "packet_bytes": pm.payload_bytes, "ack_bytes": pm.ack_wire_bytes,
                  "cc": "none"}
    if reference.startswith("ns3"):
        pn = cfg.get("pfc_ns3", {})
        alpha = tuple((float(k), float(v)) for k, v in
                      (pn.get("alpha_by_port_rate_gbps") or {"100": 0.125}).items())
        opts["pfc"] = PfcParams(
            mode="dynamic", buffer_bytes=float(pn.get("switch_buffer_bytes", 16 * 2**20)),
            alpha_by_gbps=alpha, alpha_default=min(v for _, v in alpha),
            reserve_bytes=float(pn.get("reserve_bytes_per_port", 4096)),
            resume_offset_bytes=float(pn.get("resume_offset_bytes", 3072)),
            headroom_rtts=3.0, pause_delay=True)
    else:
        ph = cfg.get("pfc_htsim", {})
        opts["pfc"] = PfcParams(mode="static", xoff_bytes=float(ph.get("xoff_bytes", 2**20)),
                                xon_bytes=float(ph.get("xon_bytes", 1036288)),
                                pause_delay=float(ph.get("pause_propagation_delay_us", 0)) > 0)
    if reference == "ns3-dcqcn":
        e = cfg.get("ecn", {})
        opts.update(cc="dcqcn", dcqcn=DcqcnParams.from_validation_config(cfg.get("dcqcn", {})),
                    red=RedPerGbps(kmin_bytes_per_gbps=float(e.get("kmin_bytes_per_gbps", 4000)),
                                   kmax_bytes_per_gbps=float(e.get("kmax_bytes_per_gbps",
                                                                   16000)),
                                   pmax=float(e.get("pmax", 0.2))))
    return EngineOptions(**opts)


# --------------------------------------------------------------------------------------
# comparison rows
# --------------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    engine: str
    reference: str
    group: str
    ours_us: float
    reference_us: float
    rel_error: float
    contended: bool
    ours_wall_s: float
    reference_wall_s: float
    within_band: bool
    band: float
    refs_disagree_pct: float | None = None
    # PFC/queue agreement, on the makespan row only (README §5: same set of paused links,
    # totals within x2 of the reference that uses the same threshold model)
    paused_links_ours: int | None = None
    paused_links_ref: int | None = None
    paused_links_common: int | None = None
    pause_total_ratio: float | None = None
    max_queue_ratio: float | None = None


def is_contended(sc: Scenario) -> bool:
    """Category (a) is the uncontended ring; without a category, any reference pause."""
    cat = sc.category.strip().lower()
    if cat:
        return not cat.startswith("a")
    res = sc.data.get("results", {})
    return any(r.get("pfc_pause_us") for r in res.values())


def band_for(reference: str, contended: bool, group_kind: str) -> float:
    """Acceptance band (relative): issue targets 5 % uncontended, 15 % vs DCQCN contended;
    PFC-only references ±5 % on makespan/collectives, ±10 % for a shorter job and ±15 %
    on single flows (README §5)."""
    if not contended:
        return 0.05
    if reference == "ns3-dcqcn":
        return 0.15
    return {"makespan": 0.05, "collective": 0.05, "short_job": 0.10}.get(group_kind, 0.15)


def _groups(sc: Scenario, res, reference: str) -> list[tuple[str, str, float, float]]:
    """(group, kind, ours_us, ref_us) of one run against one reference."""
    d = sc.data
    ref = d["results"][reference]
    out = [("makespan", "makespan", res.makespan_ns / 1e3, float(ref["makespan_us"]))]
    colls = d.get("collectives", []) or []
    ref_c = ref.get("collectives", {}) or {}
    longest = max((float(v.get("duration_us", 0)) for v in ref_c.values()), default=0.0)
    in_coll = set()
    for c, cr in zip(colls, res.collectives, strict=False):
        in_coll |= {str(x) for x in c["flows"]}
        if c["name"] in ref_c:
            rd = float(ref_c[c["name"]]["duration_us"])
            kind = "collective" if rd >= longest * 0.999 or len(colls) == 1 else "short_job"
            out.append((f"coll:{c['name']}", kind, cr.time_ns / 1e3, rd))
    loose = [i for i, f in enumerate(sc.flow_ids) if f not in in_coll]
    if 0 < len(loose) <= 16:
        for i in loose:
            rf = ref["flows"].get(sc.flow_ids[i])
            if rf is None:
                continue
            ours = (res.flow_finish_ns[i] - res.flow_start_ns[i]) / 1e3
            out.append((f"flow:{sc.flow_ids[i]}", "flow", float(ours),
                        float(rf["finish_us"]) - float(rf["start_us"])))
    return out


def _disagree(sc: Scenario, group: str) -> float | None:
    comp = sc.data.get("comparison", {}).get("ns3-pfc_vs_htsim-pfc", {})
    if not comp:
        return None
    if group == "makespan":
        return comp.get("makespan_rel_diff_pct")
    if group.startswith("coll:"):
        return (comp.get("collective_duration_rel_diff_pct") or {}).get(group[5:])
    return None


def _pfc_agreement(ref: dict, res) -> dict:
    """Paused-link sets, total pause time and peak queue of ours vs one reference."""
    rp = {k: float(v) for k, v in (ref.get("pfc_pause_us") or {}).items()}
    op = {k: v / 1e3 for k, v in res.link_pfc_pause_ns.items() if v > 0}
    out: dict = {"paused_links_ours": len(op), "paused_links_ref": len(rp),
                 "paused_links_common": len(set(op) & set(rp))}
    if rp and op:
        out["pause_total_ratio"] = round(sum(op.values()) / sum(rp.values()), 3)
    rq = ref.get("max_queue_bytes") or {}
    if rq and res.link_max_queue_bytes:
        out["max_queue_ratio"] = round(max(res.link_max_queue_bytes.values()) /
                                       max(float(v) for v in rq.values()), 3)
    return out


#: engines already run once in this process (their first run loads compiled code)
_WARM: set[str] = set()


def run_scenario(sc: Scenario, engines=("fluid",), references=None,
                 errors: list[str] | None = None, seeds: int = 3) -> list[Row]:
    """Run one scenario in every reference mode with each engine; return comparison rows.

    DCQCN runs are stochastic (CNP draws), like the packet-level reference they are
    compared with; they are repeated with ``seeds`` seeds and each group reports the
    median (``ours_wall_s`` is the mean wall time of one run, after an untimed first run
    of each engine in the process, which loads its compiled code). Other modes are
    deterministic and run once. An engine that fails on a scenario is reported in
    ``errors`` (when given) and the other engines still run; without ``errors`` the
    exception propagates."""
    rows: list[Row] = []
    contended = is_contended(sc)
    refs = [r for r in (references or sc.references) if r in sc.references]
    for eng in engines:
        fn = get_engine(eng)
        for ref in refs:
            if eng != "fluid" and ref == "ns3-dcqcn":
                continue  # a max-min flow model has no DCQCN dynamics to compare
            prob = to_problem(sc, ref)
            opts = engine_options(sc, ref, eng)
            args = opts.engine_args()
            if eng == "fluid":
                args.update(scenario=sc.name, policy=ref)
            n_runs = max(1, seeds) if eng == "fluid" and opts.cc == "dcqcn" else 1
            runs, walls = [], []
            try:
                if eng not in _WARM:  # load the compiled kernel once, outside the timing
                    fn(prob, **args)
                    _WARM.add(eng)
                for seed in range(n_runs):
                    t0 = time.perf_counter()
                    runs.append(fn(prob, **(args | {"seed": seed} if n_runs > 1 else args)))
                    walls.append(time.perf_counter() - t0)
            except Exception as e:  # one engine's failure must not hide the others
                if errors is None:
                    raise
                errors.append(f"{sc.path.name}: engine {eng} ({ref}): {type(e).__name__}: {e}")
                continue
            wall = float(np.mean(walls))
            ref_wall = float(sc.data["results"][ref].get("wall_s", float("nan")))
            per_run = [_groups(sc, res, ref) for res in runs]
            makespans = [res.makespan_ns for res in runs]
            mid = runs[int(np.argsort(makespans)[len(runs) // 2])]  # median run for PFC stats
            pfc = _pfc_agreement(sc.data["results"][ref], mid) if eng == "fluid" else {}
            for j, (group, kind, _, theirs) in enumerate(per_run[0]):
                ours = float(np.median([g[j][2] for g in per_run]))
                err = (ours - theirs) / theirs if theirs > 0 else float("nan")
                band = band_for(ref, contended, kind)
                rows.append(Row(sc.name, eng, ref, group, round(ours, 3), round(theirs, 3),
                                round(err, 5), contended, round(wall, 4), ref_wall,
                                bool(abs(err) <= band), band, _disagree(sc, group),
                                **(pfc if group == "makespan" else {})))
    return rows


def available_engines(requested: list[str] | None = None) -> list[str]:
    """The requested engines that can be imported (``flow`` is optional)."""
    out = []
    for e in requested or ["fluid", "flow"]:
        try:
            get_engine(e)
        except (ValueError, ImportError):
            continue
        out.append(e)
    return out


def validate_dir(folder: str | Path, engines: list[str] | None = None,
                 exclude: tuple[str, ...] = (), seeds: int = 3) -> tuple[list[Row], list[str]]:
    """Run every ``*.json`` scenario of ``folder``. Returns (rows, errors).

    A malformed file yields one error naming it; the others still run. Raises
    ``FileNotFoundError`` when the folder holds no readable scenario at all.
    """
    folder = Path(folder)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    engines = available_engines(engines)
    rows: list[Row] = []
    errors: list[str] = []
    n_ok = 0
    for f in files:
        try:
            sc = load_scenario(f)
        except ReferenceFileError as e:
            errors.append(str(e))
            continue
        if sc.name in exclude or f.stem in exclude:
            continue
        try:
            rows.extend(run_scenario(sc, engines, errors=errors, seeds=seeds))
            n_ok += 1
        except (ReferenceFileError, KeyError, TypeError, ValueError) as e:
            errors.append(f"{f.name}: {type(e).__name__}: {e}")
    if n_ok == 0:
        raise FileNotFoundError(
            f"no valid validation scenarios in {folder}" + (f" ({'; '.join(errors)})"
                                                            if errors else ""))
    return rows, errors


def _engine_note(rows: list[Row]) -> list[str]:
    """Say which engine the out-of-band rows come from (the flow engine is a reference)."""
    bad = [r for r in rows if not r.within_band]
    if not any(r.engine == "flow" for r in rows):
        return []
    by = {e: sum(r.engine == e for r in bad) for e in sorted({r.engine for r in rows})}
    return [f"{len(rows) - len(bad)} of {len(rows)} rows are within band; out of band: "
            + ", ".join(f"{n} {e}-engine rows" for e, n in by.items()) + ". The `flow` "
            "engine (max-min, no queues, no PFC or DCQCN) is listed for comparison: it holds "
            "on uncontended and PFC-only bandwidth-bound cases and misses where PFC "
            "interplay decides the result (a spreading victim, the shorter of two jobs) — "
            "which is what the fluid engine is for.", ""]


#: identifies a row across runs: (scenario, engine, reference, group)
RowKey = tuple[str, str, str, str]


def _key(r: Row) -> RowKey:
    return (r.scenario, r.engine, r.reference, r.group)


def load_before(path: str | Path) -> dict[RowKey, float]:
    """Each row's ``rel_error`` from an earlier run's ``icefab validate --json`` output (to
    show what a change moved). Raises ``ValueError`` naming the file if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        out = {(r["scenario"], r["engine"], r["reference"], r["group"]): float(r["rel_error"])
               for r in data}
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: not an 'icefab validate --json' output ({e})") from None
    return out


def _moved_lines(rows: list[Row], before: dict[RowKey, float]) -> list[str]:
    """The fluid rows whose error moved by more than 5 points since ``before``."""
    moved = [(r, 100 * (r.rel_error - before[_key(r)])) for r in rows
             if r.engine == "fluid" and _key(r) in before]
    big = "; ".join(f"{r.scenario} {r.reference} {r.group} ({d:+.1f})" for r, d in moved
                    if abs(d) > 5)
    n_big = sum(abs(d) > 5 for _, d in moved)
    return [f"`before` is each row's error in the run this table is compared with "
            f"(`--before`), Δ the change in points. {n_big} of {len(moved)} fluid rows moved "
            f"by more than 5 points" + (f": {big}." if big else "."), ""]


def rows_to_markdown(rows: list[Row], errors: list[str] = (),
                     before: dict[RowKey, float] | None = None) -> str:
    """The VALIDATION.md table; with ``before`` (:func:`load_before`), each row also shows
    its earlier error and the change."""
    cmp = before is not None
    lines = ["# Validation against packet-level references", "",
             "Generated by `icefab validate`. `rel_error` = (ours - reference) / reference. "
             "Bands: 5 % on uncontended scenarios; on contended ones 15 % vs `ns3-dcqcn`, "
             "5 % vs PFC-only references on makespan/collectives (10 % for a shorter job, "
             "15 % for single flows). `refs Δ%` is the ns3-pfc vs htsim-pfc disagreement "
             "from the file's `comparison`.", "",
             ] + _summary_lines(rows) + _engine_note(rows) + [
             "## All rows", ""] + (_moved_lines(rows, before) if cmp else []) + [
             "| scenario | engine | reference | group | ours (µs) | reference (µs) | error | "
             + ("before | Δ (pts) | " if cmp else "") +
             "band | ok | contended | refs Δ% | ours wall (s) | ref wall (s) |",
             "|---|---|---|---|---:|---:|---:|" + ("---:|---:|" if cmp else "")
             + "---:|---|---|---:|---:|---:|"]
    for r in rows:
        dis = "" if r.refs_disagree_pct is None else f"{r.refs_disagree_pct:.2f}"
        was = (before or {}).get(_key(r))
        then = ("— | — | " if was is None else
                f"{100 * was:+.2f} % | {100 * (r.rel_error - was):+.2f} | ") if cmp else ""
        lines.append(f"| {r.scenario} | {r.engine} | {r.reference} | {r.group} | "
                     f"{r.ours_us:.1f} | {r.reference_us:.1f} | {100 * r.rel_error:+.2f} % | "
                     f"{then}"
                     f"{100 * r.band:.0f} % | {'yes' if r.within_band else '**no**'} | "
                     f"{'yes' if r.contended else 'no'} | {dis} | {r.ours_wall_s:.3f} | "
                     f"{r.reference_wall_s:.2f} |")
    n = len(rows)
    ok = sum(r.within_band for r in rows)
    lines += ["", f"{ok} of {n} rows within band."]
    pf = [r for r in rows if r.group == "makespan" and r.paused_links_ref is not None]
    if pf:
        lines += ["", "## PFC and queues (fluid engine, makespan rows)", "",
                  "Paused links: ours / reference / in both. Ratios are ours ÷ reference "
                  "(total pause time over all links; largest egress queue).", "",
                  "| scenario | reference | paused links (ours/ref/both) | pause-time ratio | "
                  "max-queue ratio |", "|---|---|---|---:|---:|"]
        for r in pf:
            pr = "" if r.pause_total_ratio is None else f"{r.pause_total_ratio:.2f}"
            qr = "" if r.max_queue_ratio is None else f"{r.max_queue_ratio:.2f}"
            lines.append(f"| {r.scenario} | {r.reference} | {r.paused_links_ours} / "
                         f"{r.paused_links_ref} / {r.paused_links_common} | {pr} | {qr} |")
    if errors:
        lines += ["", "Files that could not be run:", ""] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def _summary_lines(rows: list[Row]) -> list[str]:
    """Per scenario: fluid makespan error vs each reference, and wall times."""
    fl = [r for r in rows if r.engine == "fluid" and r.group == "makespan"]
    if not fl:
        return []
    by: dict[str, dict[str, Row]] = {}
    for r in fl:
        by.setdefault(r.scenario, {})[r.reference] = r
    out = ["## Summary (fluid engine, makespan)", "",
           "| scenario | contended | vs ns3-dcqcn | vs ns3-pfc | vs htsim-pfc | refs Δ% | "
           "wall ours / ns3-dcqcn (s) | wall ours / ns3-pfc (s) | wall ours / htsim (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for sc, d in by.items():
        cells, walls = [], []
        for ref in REFERENCES:
            r = d.get(ref)
            cells.append("—" if r is None else f"{100 * r.rel_error:+.2f} %")
            walls.append("—" if r is None else f"{r.ours_wall_s:.2f} / {r.reference_wall_s:.2f}")
        any_r = next(iter(d.values()))
        dis = "" if any_r.refs_disagree_pct is None else f"{any_r.refs_disagree_pct:.2f}"
        out.append(f"| {sc} | {'yes' if any_r.contended else 'no'} | " + " | ".join(cells)
                   + f" | {dis} | " + " | ".join(walls) + " |")
    tot = {ref: (sum(r.ours_wall_s for r in fl if r.reference == ref),
                 sum(r.reference_wall_s for r in fl if r.reference == ref)) for ref in REFERENCES}
    out += ["", "Total wall time, ours / reference: " + ", ".join(
        f"{ref} {a:.1f} s / {b:.1f} s" for ref, (a, b) in tot.items()), ""]
    return out


def row_dict(r: Row) -> dict:
    d = asdict(r)
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            d[k] = None
    return d
