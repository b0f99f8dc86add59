"""Plans: a host fetches its plan (long-poll) and acknowledges what it applied."""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Response

from icefabric.controller.deps import ERRORS, CoreDep, HostDep
from icefabric.controller.published import HostDoc
from icefabric.schemas_service import HostPlan, PlanAck

router = APIRouter(prefix="/v1/hosts", tags=["plans"], responses=ERRORS)


@router.get("/{host}/plan", response_model=HostPlan,
            responses={204: {"description": "No plan newer than after_version yet"}})
async def get_plan(core: CoreDep, _: HostDep, host: str = Path(max_length=128),
                   after_version: int = Query(-1, ge=-1, le=2**62),
                   wait_s: float = Query(0.0, ge=0.0, le=3600.0)) -> Response:
    """This host's current plan (source port, rate and routes per QP; 204 while it has
    none). With ``after_version`` and ``wait_s`` it long-polls: it answers as soon as this
    host's plan has a newer version (a plan that leaves the host as it was does not wake
    it), or 204 after ``wait_s`` seconds. A host without a document yet waits for its
    first whatever ``after_version`` says: answering at once would turn every agent that
    joins before its first plan into a busy loop of requests (the soak's join storm)."""
    if not _newer(core, host, after_version) and wait_s > 0:
        await core.publisher.watch.wait(host, min(wait_s, core.settings.long_poll_max_s))
    doc = _newer(core, host, after_version)
    if doc is None:
        return Response(status_code=204)
    return Response(content=doc.doc, media_type="application/json")


def _newer(core, host: str, after_version: int) -> HostDoc | None:
    """``host``'s document if it is newer than ``after_version``."""
    doc = core.plan.hosts.get(host) if core.plan is not None else None
    return doc if doc is not None and doc.version > after_version else None


@router.post("/{host}/plan/ack", status_code=204)
async def ack_plan(body: PlanAck, core: CoreDep, _: HostDep,
                   host: str = Path(max_length=128)) -> Response:
    """The agent applied plan ``version`` (its host's document's version) on its host."""
    await core.fleet.ack(host, body.version, core.host_version(host))
    return Response(status_code=204)
