"""A JSON topology document for :class:`~icefabric.topology.model.Fabric` (round-trips).

The controller service receives the fabric as this document (``PUT /v1/fabric``) and stores
it; the document is plain JSON (lists of numbers and strings), so it can be written by hand,
diffed and versioned. ``fabric_from_dict(fabric_to_dict(f))`` equals ``f`` array by array.
"""

from __future__ import annotations

from dataclasses import asdict, fields

import numpy as np

from icefabric.topology.catalog import ServerProfile
from icefabric.topology.model import NODE_KIND_NAMES, Fabric, Server, TopologyError

FORMAT = "icefabric.topology"
FORMAT_VERSION = 1

# (field name, dtype) of every per-node / per-link array, in document order.
_ARRAYS: tuple[tuple[str, type], ...] = (
    ("node_kind", np.int8),
    ("node_server", np.int32),
    ("node_index", np.int32),
    ("node_pod", np.int32),
    ("node_ip", np.uint32),
    ("node_buffer_bytes", np.int64),
    ("node_hash_seed", np.int64),
    ("node_hash_offset", np.int8),
    ("link_src", np.int32),
    ("link_dst", np.int32),
    ("link_capacity_bps", np.float64),
    ("link_delay_ns", np.int64),
    ("link_kind", np.int8),
)


class TopologyDocumentError(TopologyError):
    """A topology document that does not describe a consistent fabric."""


def fabric_to_dict(fabric: Fabric) -> dict:
    """The fabric as a JSON-compatible dict (see :func:`fabric_from_dict`).

    Parameters
    ----------
    fabric : Fabric

    Returns
    -------
    dict — ``{"format", "format_version", "name", "node_names", <arrays>, "servers", "meta"}``.
    """
    doc: dict = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": fabric.name,
                 "node_names": list(fabric.node_names),
                 "node_hash_algorithm": list(fabric.node_hash_algorithm)}
    if fabric.node_hash_profile:
        doc["node_hash_profile"] = list(fabric.node_hash_profile)
    for name, _ in _ARRAYS:
        doc[name] = getattr(fabric, name).tolist()
    doc["servers"] = [{"name": s.name, "profile": asdict(s.profile), "pool": s.pool,
                       "accels": list(s.accels), "nics": list(s.nics), "hub": s.hub}
                      for s in fabric.servers]
    doc["meta"] = _jsonable(fabric.meta)
    return doc


def fabric_from_dict(doc: dict) -> Fabric:
    """Rebuild a :class:`Fabric` from :func:`fabric_to_dict` output, checking consistency.

    Raises
    ------
    TopologyDocumentError
        On a missing field, wrong lengths, out-of-range node ids or bad profiles; the
        message names the field.
    """
    if not isinstance(doc, dict):
        raise TopologyDocumentError("topology document must be a JSON object")
    if doc.get("format", FORMAT) != FORMAT:
        raise TopologyDocumentError(f"format must be {FORMAT!r}")
    if doc.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise TopologyDocumentError(f"unsupported format_version {doc.get('format_version')!r}")
    try:
        names, halgo, hprof, arrays = _node_tables(doc)
        _check_links_and_kinds(arrays, len(names))
        servers = _servers(doc, len(names))
        meta = doc.get("meta", {})
        if not isinstance(meta, dict):
            raise TopologyDocumentError("meta: must be an object")
    except KeyError as e:
        raise TopologyDocumentError(f"missing field {e.args[0]!r}") from None
    return Fabric(name=str(doc.get("name", "")), node_names=names, node_hash_algorithm=halgo,
                  servers=tuple(servers), meta=dict(meta), node_hash_profile=hprof, **arrays)


def _node_tables(doc: dict) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...],
                                     dict[str, np.ndarray]]:
    """Node names, hash algorithms and profiles, and every array of :data:`_ARRAYS`, each
    a flat list of numbers; the node tables one entry per node."""
    names = tuple(str(x) for x in _req(doc, "node_names", list))
    halgo = tuple(str(x) for x in _req(doc, "node_hash_algorithm", list))
    arrays = {}
    for name, dtype in _ARRAYS:
        raw = _req(doc, name, list)
        try:
            arrays[name] = np.asarray(raw, dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            raise TopologyDocumentError(f"{name}: must be a list of numbers") from None
        if arrays[name].ndim != 1:
            raise TopologyDocumentError(f"{name}: must be a flat list")
    n = len(names)
    for name, _ in _ARRAYS:
        if name.startswith("node_") and len(arrays[name]) != n:
            raise TopologyDocumentError(f"{name}: {len(arrays[name])} entries, expected {n}")
    if len(halgo) != n:
        raise TopologyDocumentError(f"node_hash_algorithm: {len(halgo)} entries, expected {n}")
    hprof = tuple(str(x) for x in doc.get("node_hash_profile") or ())
    if hprof and len(hprof) != n:
        raise TopologyDocumentError(f"node_hash_profile: {len(hprof)} entries, expected {n}")
    return names, halgo, hprof, arrays


def _check_links_and_kinds(arrays: dict[str, np.ndarray], n: int) -> None:
    """One entry per link in every link array, links between existing nodes with positive
    capacities, known node kinds."""
    nl = len(arrays["link_src"])
    for name, _ in _ARRAYS:
        if name.startswith("link_") and len(arrays[name]) != nl:
            raise TopologyDocumentError(f"{name}: {len(arrays[name])} entries, "
                                        f"expected {nl}")
    for name in ("link_src", "link_dst"):
        a = arrays[name]
        if nl and (a.min() < 0 or a.max() >= n):
            raise TopologyDocumentError(f"{name}: node id out of range [0, {n})")
    if nl and np.any(arrays["link_capacity_bps"] <= 0):
        raise TopologyDocumentError("link_capacity_bps: capacities must be positive")
    if n and (arrays["node_kind"].min() < 0
              or arrays["node_kind"].max() >= len(NODE_KIND_NAMES)):
        raise TopologyDocumentError("node_kind: unknown node kind")


def _servers(doc: dict, n: int) -> list[Server]:
    """The servers, each with a valid profile and node ids below ``n``."""
    servers = []
    prof_fields = {f.name for f in fields(ServerProfile)}
    for i, s in enumerate(_req(doc, "servers", list)):
        if not isinstance(s, dict):
            raise TopologyDocumentError(f"servers[{i}]: must be an object")
        prof = s.get("profile")
        if not isinstance(prof, dict) or set(prof) - prof_fields:
            raise TopologyDocumentError(f"servers[{i}].profile: invalid server profile")
        try:
            profile = ServerProfile(**prof)
        except TypeError as e:
            raise TopologyDocumentError(f"servers[{i}].profile: {e}") from None
        ids = [*s.get("accels", []), *s.get("nics", []), s.get("hub", -1)]
        if any(not isinstance(x, int) or x < 0 or x >= n for x in ids):
            raise TopologyDocumentError(f"servers[{i}]: node id out of range")
        servers.append(Server(str(s.get("name", "")), profile, str(s.get("pool", "")),
                              tuple(s.get("accels", [])), tuple(s.get("nics", [])),
                              int(s["hub"])))
    return servers


def fabrics_equal(a: Fabric, b: Fabric) -> bool:
    """True if two fabrics have the same names, arrays, servers and meta."""
    if (a.name, a.node_names, a.node_hash_algorithm, a.node_hash_profile, a.servers) != \
            (b.name, b.node_names, b.node_hash_algorithm, b.node_hash_profile, b.servers):
        return False
    for name, dtype in _ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if x.dtype != dtype or y.dtype != dtype or not np.array_equal(x, y):
            return False
    return _jsonable(a.meta) == _jsonable(b.meta)


def _req(doc: dict, key: str, typ: type):
    v = doc[key]
    if not isinstance(v, typ):
        raise TopologyDocumentError(f"{key}: must be a {typ.__name__}")
    return v


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x
