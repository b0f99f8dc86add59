"""Liveness, readiness and Prometheus metrics (no token needed)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from icefabric.controller.deps import CoreDep
from icefabric.controller.metrics import CONTENT_TYPE
from icefabric.schemas_service import ErrorBody, Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz(core: CoreDep) -> Health:
    """The controller is up; current fabric and plan versions."""
    return _health(core)


def _health(core) -> Health:
    return Health(status="ok", policy=core.settings.policy,
                  fabric_version=core.fabric_version,
                  plan_version=core.plan_version, database=core.repo.backend)


@router.get("/readyz", response_model=Health,
            responses={503: {"model": ErrorBody, "description": "Database unavailable"}})
def readyz(core: CoreDep) -> Health:
    """Ready to serve writes: a write to the database commits now (503 with the reason
    if not: unreachable, locked, read-only, full)."""
    core.repo.check_writable()
    return _health(core)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(core: CoreDep) -> PlainTextResponse:
    """Prometheus text format: planning time, agents connected, plan versions, replans."""
    text = core.metrics.render(
        agents_connected=core.fleet.connected(core.settings.agent_timeout_s),
        agents_enrolled=len(core.fleet.hosts))
    return PlainTextResponse(text, media_type=CONTENT_TYPE)
