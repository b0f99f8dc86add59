"""The collect layer's error base: an artefact (log, rank table, trace, port file) that does
not say what a collector needs."""

from __future__ import annotations

from icefabric.errors import IceFabricError


class CollectError(IceFabricError, ValueError):
    """An artefact that cannot be read or does not show enough; the message names it."""
