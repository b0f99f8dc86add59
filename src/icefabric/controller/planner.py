"""From agents' communicator reports to a Workload, and from a PathPlan to per-host plans.

The controller plans with exactly the code of the in-process policies: the jobs'
communicators (ranks -> hosts/devices, library, channels, QPs per connection, collectives
and size) are rebuilt with the CCL models of :mod:`icefabric.ccl`, job by job in launch
order, and every modelled QP is matched to the QP an agent reported by
``(job, src_ip, dst_ip, ordinal)``, whose real QP numbers replace the modelled ones. The
workload is then planned by ``get_policy(name).plan(ctx)`` / ``replan``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass, field

import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import Workload, WorkloadBuilder
from icefabric.control.plan import PathPlan, single_path_plan
from icefabric.schemas_service import SERVICE_SCHEMA_VERSION, CommReport
from icefabric.topology.model import Fabric
from icefabric.topology.routing import Routing


class PlanInputError(ValueError):
    """A report that cannot be mapped onto the fabric (unknown host, device, address)."""


def ip_str(ip: int) -> str:
    return str(ipaddress.IPv4Address(int(ip)))


def links_between(fabric: Fabric, a: str, b: str) -> list[int]:
    """Link ids of both directions of every cable between ``a`` and ``b`` (parallel links
    included; empty if none)."""
    idx = _name_index(fabric)
    ia, ib = idx.get(a), idx.get(b)
    if ia is None or ib is None or ia == ib:
        return []
    s, d = fabric.link_src, fabric.link_dst
    return np.flatnonzero(((s == ia) & (d == ib)) | ((s == ib) & (d == ia))).tolist()


_NAME_CACHE: dict[int, dict[str, int]] = {}


def _name_index(fabric: Fabric) -> dict[str, int]:
    key = id(fabric)
    idx = _NAME_CACHE.get(key)
    if idx is None or len(idx) != fabric.n_nodes:
        idx = {n: i for i, n in enumerate(fabric.node_names)}
        _NAME_CACHE.clear()
        _NAME_CACHE[key] = idx
    return idx


_IP_CACHE: dict[int, tuple[Fabric, set[str]]] = {}


def _all_ips(fabric: Fabric) -> set[str]:
    hit = _IP_CACHE.get(id(fabric))
    if hit is None or hit[0] is not fabric:
        hit = (fabric, {ip_str(ip) for ip in fabric.node_ip[fabric.node_ip > 0]})
        _IP_CACHE.clear()
        _IP_CACHE[id(fabric)] = hit
    return hit[1]


def host_nic_ips(fabric: Fabric, host: str) -> set[str]:
    s = fabric.server_of_name.get(host)
    if s is None:
        return set()
    return {ip_str(fabric.node_ip[n]) for n in fabric.servers[s].nics}


def check_report(fabric: Fabric, host: str, rep: CommReport) -> None:
    """Raise :class:`PlanInputError` unless ``rep`` fits the fabric and the reporting host."""
    hosts = {r.host for r in rep.ranks}
    if host not in hosts:
        raise PlanInputError(f"host {host!r} has no rank in job {rep.job!r}")
    ranks = sorted(r.rank for r in rep.ranks)
    if ranks != list(range(len(ranks))):
        raise PlanInputError("ranks must be numbered 0..n-1, each once")
    for r in rep.ranks:
        s = fabric.server_of_name.get(r.host)
        if s is None:
            raise PlanInputError(f"rank {r.rank}: host {r.host!r} is not in the fabric")
        if r.device >= len(fabric.servers[s].accels):
            raise PlanInputError(f"rank {r.rank}: host {r.host!r} has no device {r.device}")
    mine = host_nic_ips(fabric, host)
    all_ips = _all_ips(fabric)
    seen = set()
    for i, q in enumerate(rep.qps):
        if q.src_ip not in mine:
            raise PlanInputError(f"qps[{i}]: source {q.src_ip} is not a NIC of host {host!r}")
        if q.dst_ip not in all_ips:
            raise PlanInputError(f"qps[{i}]: destination {q.dst_ip} is not a NIC in the fabric")
        key = (q.src_ip, q.dst_ip, q.ordinal)
        if key in seen:
            raise PlanInputError(f"qps[{i}]: duplicate QP {q.src_ip}->{q.dst_ip} "
                                 f"ordinal {q.ordinal}")
        seen.add(key)


@dataclass
class JobState:
    """All reports of one job and whether every host of it has reported."""

    job: str
    reports: dict[str, CommReport] = field(default_factory=dict)

    @property
    def any(self) -> CommReport:
        return self.reports[min(self.reports)]

    @property
    def hosts_expected(self) -> list[str]:
        return sorted({r.host for r in self.any.ranks})

    @property
    def complete(self) -> bool:
        return set(self.hosts_expected) <= set(self.reports)


@dataclass
class BuiltWorkload:
    workload: Workload
    jobs: list[str]
    qp_job: list[str]
    qp_ordinal: np.ndarray
    key: str
    unmatched_qps: int
    errors: dict[str, str]


def build_workload(fabric: Fabric, jobs: dict[str, JobState]) -> BuiltWorkload:
    """The Workload of every complete job, in ``(job_order, job)`` order.

    The jobs are built as :func:`icefabric.scenario.build.build_workload` builds them (one
    builder, collectives chained per job), so a twin that reports a scenario's jobs gets the
    same workload, QP for QP.
    """
    wb = WorkloadBuilder()
    done, errors = [], {}
    ready = sorted((j for j in jobs.values() if j.reports and j.complete),
                   key=lambda j: (j.any.job_order, j.job))
    for js in ready:
        rep = js.any
        ranks = sorted(rep.ranks, key=lambda r: r.rank)
        try:
            accels = [fabric.servers[fabric.server_of_name[r.host]].accels[r.device]
                      for r in ranks]
            comm = Communicator(job=js.job, fabric=fabric, ranks=np.asarray(accels),
                                library=rep.library,
                                qps_per_connection=rep.qps_per_connection,
                                channels=rep.channels, step_overhead_ns=rep.step_overhead_ns)
            n_colls, n_flows = len(wb.collectives), len(wb.flow_size)
            after: list[int] = []
            for c in rep.collectives:
                after = add_collective(wb, comm, c.kind, rep.size_bytes, algorithm=c.algorithm,
                                       after=after, name=f"{js.job}:{c.kind}")
        except (KeyError, IndexError, ValueError) as e:
            errors[js.job] = str(e)
            if len(wb.collectives) != n_colls or len(wb.flow_size) != n_flows:
                # A partially added job would corrupt the builder: start over without it.
                bad = {**{k: v for k, v in jobs.items() if k != js.job}}
                out = build_workload(fabric, bad)
                out.errors.update(errors)
                return out
            continue
        done.append(js.job)
    wl = wb.build(node_ip=fabric.node_ip)
    qp_job = [wl.conn_job[c] for c in wl.qp_conn.tolist()]
    ordinal = np.zeros(wl.n_qps, dtype=np.int64)
    counter: dict[tuple, int] = {}
    unmatched = 0
    reported: dict[tuple, tuple[int, int]] = {}
    for js in ready:
        for rep in js.reports.values():
            for q in rep.qps:
                reported[(js.job, q.src_ip, q.dst_ip, q.ordinal)] = (q.lqpn, q.rqpn)
    sip = [ip_str(x) for x in wl.qp_src_ip.tolist()]
    dip = [ip_str(x) for x in wl.qp_dst_ip.tolist()]
    for q in range(wl.n_qps):
        k = (qp_job[q], sip[q], dip[q])
        ordinal[q] = counter.get(k, 0)
        counter[k] = int(ordinal[q]) + 1
        got = reported.get((*k, int(ordinal[q])))
        if got is None:
            unmatched += 1
        else:
            wl.qp_lqpn[q], wl.qp_rqpn[q] = got
    h = hashlib.sha256()
    for js in ready:
        if js.job in done:
            for host in sorted(js.reports):
                h.update(js.reports[host].model_dump_json().encode())
    return BuiltWorkload(wl, done, qp_job, ordinal, h.hexdigest(), unmatched, errors)


def host_qps_json(fabric: Fabric, bw: BuiltWorkload, plan: PathPlan) -> dict[str, bytes]:
    """Per host, the JSON array of :class:`QpPlan` of the QPs whose sending NIC is on it.

    Built with plain dicts (not model instances): this runs for every QP on every re-plan.
    """
    wl = bw.workload
    ptr = plan.qp_route_ptr()
    per_host: dict[str, list[dict]] = {}
    srv = fabric.node_server[wl.qp_src_nic].tolist()
    names = [s.name for s in fabric.servers]
    sip = [ip_str(x) for x in wl.qp_src_ip.tolist()]
    dip = [ip_str(x) for x in wl.qp_dst_ip.tolist()]
    backup = plan.meta.get("backup_sport")
    rates = plan.rate_bps.tolist()
    sport = plan.sport.tolist()
    lq, rq = wl.qp_lqpn.tolist(), wl.qp_rqpn.tolist()
    weights = plan.route_weight.tolist()
    for q in range(wl.n_qps):
        rate = rates[q]
        b = None
        if backup is not None and int(backup[q]) >= 0:
            b = int(backup[q])
        per_host.setdefault(names[srv[q]], []).append({
            "src_ip": sip[q], "dst_ip": dip[q], "lqpn": lq[q], "rqpn": rq[q],
            "job": bw.qp_job[q], "ordinal": int(bw.qp_ordinal[q]), "sport": sport[q],
            "rate_bps": rate if np.isfinite(rate) else None,
            "routes": [plan.route(r).tolist() for r in range(ptr[q], ptr[q + 1])],
            "weights": weights[ptr[q]:ptr[q + 1]], "backup_sport": b})
    return {h: json.dumps(v, separators=(",", ":")).encode() for h, v in per_host.items()}


def compose_host_plan(host: str, qps_json: bytes, *, version: int, fabric_version: int,
                      policy: str, created_at: float, down: list[tuple[str, str]]) -> bytes:
    """A :class:`HostPlan` document from its header fields and the host's QP array
    (plain JSON; runs for every host on every new plan version)."""
    head = json.dumps({"schema_version": SERVICE_SCHEMA_VERSION, "host": host,
                       "version": version, "fabric_version": fabric_version, "policy": policy,
                       "created_at": created_at,
                       "down_links": [{"a": a, "b": b} for a, b in down]},
                      separators=(",", ":")).encode()
    return head[:-1] + b',"qps":' + qps_json + b"}"


def compute_plan(fabric: Fabric, jobs: dict[str, JobState], *, policy_name: str, seed: int,
                 down_ids: list[int], prev: PathPlan | None, prev_key: str,
                 unchanged) -> dict | None:
    """Build the workload and plan it (``replan`` if the workload is the one ``prev`` was
    made for). Returns None when there is nothing to plan or nothing changed
    (``unchanged(key)`` says whether the current plan already covers workload ``key``)."""
    import time

    from icefabric.policies.base import PlanContext, get_policy

    t0 = time.perf_counter()
    bw = build_workload(fabric, jobs)
    no_path = no_path_jobs(fabric, bw, down_ids) if down_ids else []
    if no_path:  # plan the other jobs; these cannot run until a path comes back
        bw = build_workload(fabric, {k: v for k, v in jobs.items()
                                     if k not in {x["job"] for x in no_path}})
    if unchanged(bw.key) or (bw.workload.n_qps == 0 and prev is None):
        return None
    policy = get_policy(policy_name)
    ctx = PlanContext.create(fabric, bw.workload, seed=seed)
    if bw.workload.n_qps == 0:  # every job ended or has no path: an empty plan
        plan = single_path_plan([], np.zeros(0, dtype=np.int64), policy.name)
        kind = "plan"
    elif prev is not None and prev_key == bw.key and prev.n_qps == bw.workload.n_qps:
        plan = policy.replan(ctx.after_failure(down_ids), prev)
        kind = "replan"
    else:
        if down_ids:
            ctx = ctx.after_failure(down_ids)
        plan = policy.plan(ctx)
        kind = "plan"
    planning_ms = (time.perf_counter() - t0) * 1e3
    return {"kind": kind, "plan": plan, "key": bw.key, "jobs": bw.jobs,
            "n_qps": bw.workload.n_qps, "qps": host_qps_json(fabric, bw, plan),
            "planning_ms": planning_ms, "policy": plan.policy or policy.name,
            "no_path": no_path}


def no_path_jobs(fabric: Fabric, bw: BuiltWorkload, down_ids: list[int],
                 examples: int = 5) -> list[dict]:
    """The jobs with QPs that no working path joins under ``down_ids`` (a NIC link down,
    or one leaf cut off from the other): ``{job, qps, examples, reason}`` per job."""
    wl = bw.workload
    routing = Routing(fabric, down_ids)
    bad = np.flatnonzero(~routing.reachable(wl.qp_src_nic, wl.qp_dst_nic))
    out: dict[str, dict] = {}
    names = fabric.node_names
    for q in bad.tolist():
        s, d = int(wl.qp_src_nic[q]), int(wl.qp_dst_nic[q])
        e = out.setdefault(bw.qp_job[q], {"job": bw.qp_job[q], "qps": 0, "examples": [],
                                          "reason": ""})
        e["qps"] += 1
        if len(e["examples"]) < examples:
            e["examples"].append(f"{ip_str(wl.qp_src_ip[q])}->{ip_str(wl.qp_dst_ip[q])}")
        if not e["reason"]:
            src_down = routing.down[routing.nic_uplink(s)[0]]
            if src_down or routing.down[routing.nic_downlink(d)[0]]:
                e["reason"] = f"NIC link of {names[s] if src_down else names[d]} is down"
            else:
                e["reason"] = (f"no working path from {names[fabric.nic_leaf[s]]} to "
                               f"{names[fabric.nic_leaf[d]]}")
    return sorted(out.values(), key=lambda e: e["job"])


_WORKER_FABRIC: dict[int, Fabric] = {}


class FabricNotCached(LookupError):
    pass


def compute_plan_in_worker(fabric_version: int, fabric_doc: dict | None, jobs: dict,
                           prev: dict | None, unchanged_key: str | None, **kw) -> dict | None:
    """:func:`compute_plan` in a planner process: plain data in and out (picklable)."""
    from icefabric.topology.serialize import fabric_from_dict

    fabric = _WORKER_FABRIC.get(fabric_version)
    if fabric is None:
        if fabric_doc is None:
            raise FabricNotCached(fabric_version)
        _WORKER_FABRIC.clear()
        fabric = _WORKER_FABRIC[fabric_version] = fabric_from_dict(fabric_doc)
    states = {j: JobState(j, {h: CommReport.model_validate(d) for h, d in reps.items()})
              for j, reps in jobs.items()}
    out = compute_plan(fabric, states, prev=path_plan_from_dict(prev) if prev else None,
                       unchanged=lambda k: k == unchanged_key, **kw)
    if out is not None:
        out["plan"] = path_plan_to_dict(out["plan"])
    return out


def path_plan_to_dict(plan: PathPlan) -> dict:
    def arr(x):
        return [None if not np.isfinite(v) else v for v in x.tolist()] \
            if x.dtype.kind == "f" else x.tolist()

    meta = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in plan.meta.items() if _json_ok(v)}
    return {"sport": arr(plan.sport), "route_qp": arr(plan.route_qp),
            "route_weight": arr(plan.route_weight), "route_indptr": arr(plan.route_indptr),
            "route_links": arr(plan.route_links), "rate_bps": arr(plan.rate_bps),
            "policy": plan.policy, "meta": meta}


def path_plan_from_dict(d: dict) -> PathPlan:
    def f(x):
        return np.array([np.inf if v is None else v for v in x], dtype=np.float64)

    return PathPlan(sport=np.asarray(d["sport"], dtype=np.int64),
                    route_qp=np.asarray(d["route_qp"], dtype=np.int64),
                    route_weight=f(d["route_weight"]),
                    route_indptr=np.asarray(d["route_indptr"], dtype=np.int64),
                    route_links=np.asarray(d["route_links"], dtype=np.int64),
                    rate_bps=f(d["rate_bps"]), policy=d.get("policy", ""),
                    meta=dict(d.get("meta", {})))


def _json_ok(v) -> bool:
    try:
        json.dumps(v.tolist() if isinstance(v, np.ndarray) else v)
        return True
    except (TypeError, ValueError):
        return False
