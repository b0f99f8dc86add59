"""The plan the controller serves: one :class:`PublishedPlan` per version.

A version holds its typed summary, the :class:`PathPlan` it was computed as (kept to re-plan
from after a link change), the digest of the reports it covers, and every planned host's
document. A host's document is stored as its QP plans (a JSON array, written only when
they change) and served as the :class:`HostPlan` JSON made once here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from icefabric.control.plan import PathPlan
from icefabric.controller.cables import Cable, refs
from icefabric.controller.planner import PlanOutcome
from icefabric.controller.store.repo import Repository
from icefabric.schemas_service import HostPlan, PlanSummary

_EMPTY_QPS = b"[]"


@dataclass(frozen=True)
class HostDoc:
    """One host's part of a plan: its QP plans as stored and the document served."""

    version: int  # the plan version this document belongs to
    qps: bytes  # QP_PLANS JSON (what the database keeps)
    doc: bytes  # HostPlan JSON (what the host's agent is sent)


@dataclass(frozen=True)
class PublishedPlan:
    """One plan version as served: summary, path plan and the documents of its hosts."""

    summary: PlanSummary
    paths: PathPlan | None
    workload_key: str  # digest of the reports the plan was built from
    hosts: dict[str, HostDoc]

    @property
    def version(self) -> int:
        return self.summary.version

    def down(self) -> list[Cable]:
        # a plan stored before cables had numbers named whole pairs (-1, as the store)
        return sorted((x.a, x.b, -1 if x.cable is None else x.cable)
                      for x in self.summary.down_links)

    def document(self, host: str) -> bytes:
        """``host``'s document (an empty plan for a host without QPs in this version)."""
        d = self.hosts.get(host)
        return d.doc if d is not None else host_document(self.summary, host, _EMPTY_QPS)


def host_document(summary: PlanSummary, host: str, qps: bytes) -> bytes:
    """The :class:`HostPlan` JSON of ``host`` with QP plans ``qps`` (QP_PLANS JSON, made
    from checked models): the header is a model, the QP array is spliced in as is, so the
    bytes just made are not parsed and checked again."""
    head = HostPlan(host=host, version=summary.version, fabric_version=summary.fabric_version,
                    policy=summary.policy, created_at=summary.created_at,
                    down_links=summary.down_links, qps=[]).model_dump_json().encode()
    assert head.endswith(b'"qps":[]}'), head[-20:]  # qps is the model's last field
    return head[:-3] + qps + b"}"


def next_plan(cur: PublishedPlan | None, out: PlanOutcome, reason: str,
              down: list[Cable], fabric_version: int
              ) -> tuple[PublishedPlan, dict[str, bytes]]:
    """The version after ``cur`` made of ``out``, and the hosts whose QP plans changed
    (with their new QP plans; ``[]`` for a host that has none any more)."""
    old = cur.hosts if cur is not None else {}
    summary = PlanSummary(version=(cur.version if cur else 0) + 1, policy=out.policy,
                          created_at=time.time(), reason=f"{out.kind}: {reason}"[:200],
                          planning_ms=round(out.planning_ms, 3), jobs=out.jobs,
                          qps=out.n_qps, hosts=len(out.hosts),
                          down_links=refs(down),
                          fabric_version=fabric_version, no_path=out.no_path)
    changed = {h: q for h, q in out.hosts.items() if h not in old or old[h].qps != q}
    changed.update({h: _EMPTY_QPS for h in old if h not in out.hosts})
    hosts = {h: HostDoc(summary.version, q, host_document(summary, h, q))
             for h, q in out.hosts.items()}
    return PublishedPlan(summary, out.paths, out.key, hosts), changed


def store(repo: Repository, plan: PublishedPlan, changed: dict[str, bytes]) -> None:
    """Write ``plan`` (summary, path plan, the QP plans of the hosts in ``changed``)."""
    s = plan.summary
    path_plan = {**(plan.paths.to_dict() if plan.paths else {}),
                 "workload_key": plan.workload_key}
    repo.save_plan(s.version, policy=s.policy, reason=s.reason, created_at=s.created_at,
                   planning_ms=s.planning_ms, fabric_version=s.fabric_version,
                   summary=s.model_dump(mode="json"), path_plan=path_plan, host_qps=changed)


def restore(repo: Repository) -> PublishedPlan | None:
    """The newest stored plan (each host's QP plans as last written), or None."""
    latest = repo.latest_plan()
    if latest is None:
        return None
    row, qps = latest
    summary = PlanSummary.model_validate_json(row.summary)
    pp = json.loads(row.path_plan)
    key = pp.pop("workload_key", "")
    paths = PathPlan.from_dict(pp) if pp.get("sport") is not None else None
    hosts = {h: HostDoc(summary.version, q, host_document(summary, h, q))
             for h, (_, q) in qps.items() if q != _EMPTY_QPS}
    return PublishedPlan(summary, paths, key, hosts)
