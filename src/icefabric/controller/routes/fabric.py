"""Fabric: topology with switch hash models, and link states (admin only)."""

from __future__ import annotations

from fastapi import APIRouter

from icefabric.controller import cables
from icefabric.controller.deps import ERRORS, AdminDep, CoreDep
from icefabric.controller.errors import Conflict
from icefabric.schemas_service import FabricInfo, FabricUpload, LinkRef, LinkStatesUpdate

router = APIRouter(prefix="/v1/fabric", tags=["fabric"], responses=ERRORS)


def _info(core) -> FabricInfo:
    f = core.fabric
    if f is None:
        raise Conflict("no fabric loaded")
    return FabricInfo(name=f.name, version=core.fabric_version, nodes=f.n_nodes,
                      links=f.n_links, servers=len(f.servers),
                      down_links=cables.refs(core.down),
                      plan_seed=core.plan_seed)


@router.put("", response_model=FabricInfo)
def put_fabric(body: FabricUpload, core: CoreDep, _: AdminDep) -> FabricInfo:
    """Load or replace the fabric (topology document, down links, planner seed)."""
    core.set_fabric(body)
    return _info(core)


@router.get("", response_model=FabricInfo)
def get_fabric(core: CoreDep, _: AdminDep) -> FabricInfo:
    """The current fabric's summary."""
    return _info(core)


@router.get("/topology", response_model=dict)
def get_topology(core: CoreDep, _: AdminDep) -> dict:
    """The current topology document."""
    from icefabric.topology.serialize import fabric_to_dict

    if core.fabric is None:
        raise Conflict("no fabric loaded")
    return fabric_to_dict(core.fabric)


@router.post("/links", response_model=FabricInfo)
def set_link_states(body: LinkStatesUpdate, core: CoreDep, _: AdminDep) -> FabricInfo:
    """Mark cables up or down (operator action: every cable between two nodes, or the
    one ``cable`` names); triggers a re-plan."""
    core.set_links([(LinkRef(a=x.a, b=x.b, cable=x.cable), x.up) for x in body.links],
                   "links", "operator")
    return _info(core)
