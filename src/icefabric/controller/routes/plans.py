"""Plans: a host fetches its plan (long-poll) and acknowledges what it applied."""

from __future__ import annotations

from fastapi import APIRouter, Path, Query, Response

from icefabric.controller.deps import ERRORS, CoreDep, HostDep
from icefabric.schemas_service import HostPlan, PlanAck

router = APIRouter(prefix="/v1/hosts", tags=["plans"], responses=ERRORS)


@router.get("/{host}/plan", response_model=HostPlan,
            responses={204: {"description": "No plan newer than after_version yet"}})
async def get_plan(core: CoreDep, _: HostDep, host: str = Path(max_length=128),
                   after_version: int = Query(-1, ge=-1, le=2**62),
                   wait_s: float = Query(0.0, ge=0.0, le=3600.0)) -> Response:
    """This host's current plan (source port, rate and routes per QP). With
    ``after_version`` and ``wait_s`` it long-polls: it answers as soon as a newer version
    exists, or 204 after ``wait_s`` seconds."""
    if core.plan_version <= after_version and wait_s > 0:
        await core.publisher.watch.wait_newer(after_version,
                                              min(wait_s, core.settings.long_poll_max_s))
    plan = core.plan
    if plan is None or plan.version <= after_version:
        return Response(status_code=204)
    return Response(content=plan.document(host), media_type="application/json")


@router.post("/{host}/plan/ack", status_code=204)
async def ack_plan(body: PlanAck, core: CoreDep, _: HostDep,
                   host: str = Path(max_length=128)) -> Response:
    """The agent applied plan ``version`` on its host."""
    await core.fleet.ack(host, body.version, core.plan_version)
    return Response(status_code=204)
