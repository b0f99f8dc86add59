"""Telemetry and events in: link down/up, port counters, CNP rates."""

from __future__ import annotations

from fastapi import APIRouter

from icefabric.controller.deps import ERRORS, CoreDep, ObserverDep
from icefabric.schemas_service import EventBatch, EventsAccepted

router = APIRouter(prefix="/v1/events", tags=["events"], responses=ERRORS)


@router.post("", response_model=EventsAccepted, status_code=202)
def post_events(body: EventBatch, core: CoreDep, p: ObserverDep) -> EventsAccepted:
    """Events observed by an agent (as its host: link changes only of its own host's
    links, else 403) or by an operator (any link); link changes re-plan."""
    replan = core.add_events(p.host or "admin", body.events, agent=p.kind == "agent")
    return EventsAccepted(accepted=len(body.events), replan=replan,
                          plan_version=core.plan_version)
