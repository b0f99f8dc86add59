"""Agent enrolment and per-host agent records."""

from __future__ import annotations

import time

from fastapi import APIRouter, Path

from icefabric.controller.deps import ERRORS, CoreDep, EnrolDep, HostDep
from icefabric.controller.errors import NotFound
from icefabric.schemas_service import AgentEnrol, AgentEnrolled, AgentView, NicInfo

router = APIRouter(prefix="/v1/agents", tags=["agents"], responses=ERRORS)


def agent_view(core, host: str) -> AgentView:
    h = core.fleet.hosts.get(host)
    if h is None:
        raise NotFound(f"host {host!r} is not enrolled")
    return AgentView(host=host, nics=[NicInfo(**n) for n in h.nics],
                     agent_version=h.agent_version, actuator=h.actuator,
                     enrolled_at=h.enrolled_at, last_seen=h.last_seen,
                     applied_version=h.applied_version, plan_version=core.host_version(host),
                     connected=h.last_seen >= time.time() - core.settings.agent_timeout_s)


@router.post("", response_model=AgentEnrolled, status_code=201)
def enrol(body: AgentEnrol, core: CoreDep, _: EnrolDep) -> AgentEnrolled:
    """Enrol a host's agent with the enrolment (or admin) token; returns the host's agent
    token. Enrolling again rotates the token."""
    token = core.fleet.enrol(body, core.fabric)
    return AgentEnrolled(host=body.host, token=token, fabric_version=core.fabric_version)


@router.get("/{host}", response_model=AgentView)
async def get_agent(core: CoreDep, _: HostDep,
                    host: str = Path(max_length=128)) -> AgentView:
    """One host's agent record (own host, or admin)."""
    return agent_view(core, host)
