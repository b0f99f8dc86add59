"""Telemetry and events in: link down/up, port counters, CNP rates."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from icefabric.controller.deps import ERRORS, CoreDep, PrincipalDep
from icefabric.schemas_service import EventBatch, EventsAccepted

router = APIRouter(prefix="/v1/events", tags=["events"], responses=ERRORS)


@router.post("", response_model=EventsAccepted, status_code=202)
def post_events(body: EventBatch, core: CoreDep, p: PrincipalDep
                      ) -> EventsAccepted:
    """Events observed by an agent (as its host) or an operator; link changes re-plan."""
    if p.kind not in ("agent", "admin"):
        raise HTTPException(403, "events need an agent or admin token")
    replan = core.add_events(p.host or "admin", body.events)
    return EventsAccepted(accepted=len(body.events), replan=replan,
                          plan_version=core.plan_version)
