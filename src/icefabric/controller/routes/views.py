"""Read-only views for operators (admin token): plans, links, agents, events."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Path, Query

from icefabric.controller.deps import ERRORS, AdminDep, CoreDep
from icefabric.controller.errors import Conflict, NotFound
from icefabric.controller.routes.agents import agent_view
from icefabric.schemas_service import AgentView, LinkView, PlanSummary

router = APIRouter(prefix="/v1", tags=["views"], responses=ERRORS)
_KIND_NAMES = ("intra", "host", "fabric")  # by Fabric.link_kind


@router.get("/plans", response_model=list[PlanSummary])
def list_plans(core: CoreDep, _: AdminDep, limit: int = Query(100, ge=1, le=1000)
               ) -> list[PlanSummary]:
    """Plan versions, newest first."""
    return [PlanSummary(**s) for s in core.repo.plan_summaries(limit)]


@router.get("/plans/current", response_model=PlanSummary)
async def current_plan(core: CoreDep, _: AdminDep) -> PlanSummary:
    """The current plan's summary."""
    if core.plan is None:
        raise NotFound("no plan yet")
    return core.plan.summary


@router.get("/plans/{version}", response_model=PlanSummary)
def get_plan_summary(core: CoreDep, _: AdminDep,
                     version: int = Path(ge=0, le=2**62)) -> PlanSummary:
    """One plan version's summary."""
    s = core.repo.plan_summary(version)
    if s is None:
        raise NotFound(f"no plan version {version}")
    return PlanSummary(**s)


@router.get("/links", response_model=list[LinkView])
def list_links(core: CoreDep, _: AdminDep,
               kind: str = Query("fabric", pattern="^(fabric|host|intra|all)$")
               ) -> list[LinkView]:
    """Links with their state and the number of planned QPs on each."""
    f = core.fabric
    if f is None:
        raise Conflict("no fabric loaded")
    kinds = {"intra": 0, "host": 1, "fabric": 2}
    down = np.zeros(f.n_links, dtype=bool)
    ids = core.down_link_ids()
    down[ids] = True
    load = np.zeros(f.n_links)
    paths = core.plan.paths if core.plan is not None else None
    if paths is not None and len(paths.route_links) and paths.route_links.max() < f.n_links:
        load = paths.link_load(f.n_links)
    sel = np.arange(f.n_links) if kind == "all" else np.flatnonzero(f.link_kind == kinds[kind])
    names = f.link_names()  # the simulator's names: parallel cables get /1, /2 ...
    return [LinkView(id=int(l), name=names[l], kind=_KIND_NAMES[int(f.link_kind[l])],
                     capacity_bps=float(f.link_capacity_bps[l]),
                     up=not bool(down[l]), planned_qps=int(round(load[l])))
            for l in sel.tolist()]


@router.get("/agents", response_model=list[AgentView])
async def list_agents(core: CoreDep, _: AdminDep) -> list[AgentView]:
    """Every enrolled agent."""
    return [agent_view(core, h) for h in sorted(core.fleet.hosts)]


@router.get("/events", response_model=list[dict])
def list_events(core: CoreDep, _: AdminDep, limit: int = Query(100, ge=1, le=10000)
                ) -> list[dict]:
    """Recent events, newest first."""
    return core.repo.recent_events(limit)
