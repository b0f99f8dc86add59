"""The control layer's error base: a planning problem the algorithms cannot solve as asked."""

from __future__ import annotations

from icefabric.errors import IceFabricError


class ControlError(IceFabricError):
    """A plan that cannot be made (e.g. the MILP solver ends without a solution); the
    message says why and what to use instead."""
