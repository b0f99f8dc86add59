"""Cables the operator and agents name, as the controller keeps them.

A cable is ``(a, b, k)``: the two node names in sorted order and its index among the
parallel cables between them, numbered as the simulator names links (cable ``k`` is
``a->b/k`` and ``b->a/k`` of :meth:`~icefabric.topology.model.Fabric.link_names`, so the
API, ``/v1/links``, the scenario's ``failures`` and ``result.json`` name one cable the same
way). The controller keeps every down cable explicitly: "every cable between A and B" is
expanded when it is named.
"""

from __future__ import annotations

from collections.abc import Iterable

from icefabric.controller.errors import Invalid
from icefabric.schemas_service import LinkRef
from icefabric.topology.model import Fabric

Cable = tuple[str, str, int]


def cables(fabric: Fabric, link: LinkRef, where: str) -> list[Cable]:
    """The cables ``link`` names (every one between its ends, or its ``cable``);
    :class:`Invalid` naming ``where`` when there is no such cable."""
    why = fabric.missing_cable(link.a, link.b, link.cable)
    if why is not None:
        raise Invalid(f"{where}: {why}")
    a, b = sorted((link.a, link.b))
    ks = range(fabric.n_cables(a, b)) if link.cable is None else [link.cable]
    return [(a, b, k) for k in ks]


def link_ids(fabric: Fabric, down: Iterable[Cable]) -> list[int]:
    """The directed link ids of ``down`` cables, sorted."""
    return sorted(i for a, b, k in down for i in fabric.links_between(a, b, k).tolist())


def refs(down: Iterable[Cable]) -> list[LinkRef]:
    return [LinkRef(a=a, b=b, cable=k) for a, b, k in sorted(down)]


def name(link: LinkRef) -> str:
    """``a-b`` (every cable) or ``a-b/k``, for log lines and tables."""
    return f"{link.a}-{link.b}" + ("" if link.cable is None else f"/{link.cable}")
