"""The plan the controller serves: one :class:`PublishedPlan` per version.

A version holds its typed summary, the :class:`PathPlan` it was computed as and the QpId of
each of its QPs (the next plan starts from them: :mod:`.planner`), the digests of the
workload it covers, and every host's document.
Each host's document has its own version: the plan version that last changed it (its QP
plans, the fabric version or the policy). A new plan makes new documents only for the hosts
it changes, so only their agents are woken, and only their QP plans are stored (a JSON
array per host and version); the :class:`HostPlan` JSON served is made once per document
(the forms and their conversions: :mod:`icefabric.wire`).
"""

from __future__ import annotations

from dataclasses import dataclass

from icefabric.control.plan import PathPlan
from icefabric.controller.cables import Cable, refs
from icefabric.controller.planner import PlanOutcome
from icefabric.controller.store.repo import Repository
from icefabric.schemas_service import PlanSummary
from icefabric.wire import QpIds, host_document, path_record, paths_from_record

EMPTY_QPS = b"[]"


@dataclass(frozen=True)
class HostDoc:
    """One host's document: its QP plans as stored and the document served."""

    version: int  # the plan version that made this document
    fabric_version: int
    policy: str
    qps: bytes  # its QP plans as stored (wire.host_record: what the database keeps)
    doc: bytes  # HostPlan JSON (what the host's agent is sent)

    @classmethod
    def make(cls, summary: PlanSummary, host: str, qps: bytes) -> HostDoc:
        """``host``'s document with stored QP plans ``qps`` made by plan ``summary``."""
        return cls(summary.version, summary.fabric_version, summary.policy, qps,
                   host_document(summary, host, qps))

    def same(self, summary: PlanSummary, qps: bytes) -> bool:
        """Would plan ``summary`` leave this document as it is?"""
        return self.qps == qps and self.fabric_version == summary.fabric_version and \
            self.policy == summary.policy


@dataclass(frozen=True)
class PublishedPlan:
    """One plan version as served: summary, path plan and every host's document."""

    summary: PlanSummary
    paths: PathPlan | None
    workload_key: str  # digest of the workload the plan covers (Workload.digest)
    shape_key: str  # the same without QP numbers and reported ports
    ids: QpIds | None  # the QpId of each QP of ``paths`` (None: restored; not stored)
    hosts: dict[str, HostDoc]  # hosts that have (or had) QPs

    @property
    def version(self) -> int:
        return self.summary.version

    def down(self) -> list[Cable]:
        # a plan stored before cables had numbers named whole pairs (-1, as the store)
        return sorted((x.a, x.b, -1 if x.cable is None else x.cable)
                      for x in self.summary.down_links)

    def host_version(self, host: str) -> int:
        """The version of ``host``'s document (0: it never had one)."""
        d = self.hosts.get(host)
        return d.version if d is not None else 0


def next_plan(cur: PublishedPlan | None, out: PlanOutcome, reason: str,
              down: list[Cable], fabric_version: int, now: float
              ) -> tuple[PublishedPlan, list[str]]:
    """The version after ``cur`` made of ``out``, and the hosts whose documents it changed
    (a host that had QPs and has none now gets an empty document)."""
    old = cur.hosts if cur is not None else {}
    summary = PlanSummary(version=(cur.version if cur else 0) + 1, policy=out.policy,
                          created_at=now, reason=f"{out.kind}: {reason}"[:200],
                          planning_ms=round(out.planning_ms, 3), jobs=out.jobs,
                          qps=out.n_qps, hosts=len(out.hosts),
                          down_links=refs(down),
                          fabric_version=fabric_version, no_path=out.no_path)
    hosts: dict[str, HostDoc] = {}
    for h in old.keys() | out.hosts.keys():
        qps = out.hosts.get(h, EMPTY_QPS)
        d = old.get(h)
        hosts[h] = d if d is not None and d.same(summary, qps) else \
            HostDoc.make(summary, h, qps)
    changed = sorted(h for h, d in hosts.items() if d.version == summary.version)
    summary = summary.model_copy(update={"hosts_changed": len(changed)})
    return PublishedPlan(summary, out.paths, out.key, out.shape_key, out.ids, hosts), changed


def store(repo: Repository, plan: PublishedPlan, changed: list[str]) -> None:
    """Write ``plan``: summary, path plan and the QP plans of the ``changed`` hosts."""
    repo.save_plan(plan.summary.model_dump(mode="json"),
                   path_record(plan.paths, plan.workload_key, plan.shape_key),
                   {h: plan.hosts[h].qps for h in changed})


def restore(repo: Repository) -> PublishedPlan | None:
    """The newest stored plan, with every host's document as it was served (each made
    from the QP plans and summary of the version that last changed it)."""
    latest = repo.latest_plan()
    if latest is None:
        return None
    row, qps = latest
    summaries = {v: PlanSummary.model_validate(repo.plan_summary(v))
                 for v in {v for v, _ in qps.values()} | {row.version}}
    paths, key, shape_key = paths_from_record(row.path_plan)
    hosts = {h: HostDoc.make(summaries[v], h, q) for h, (v, q) in qps.items()}
    return PublishedPlan(summaries[row.version], paths, key, shape_key, None, hosts)
