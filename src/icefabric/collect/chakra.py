"""Chakra execution traces (MLCommons, protobuf, one file per rank) -> collectives workload.

Format source: ``schema/protobuf/et_def.proto`` of https://github.com/mlcommons/chakra and its
``third_party/utils/protolib.py`` writer: a file is a sequence of messages, each preceded by its
length as a base-128 varint; the first is ``GlobalMetadata {string version = 1; repeated
AttributeProto attr = 2}``, the rest are ``Node {uint64 id = 1; string name = 2; NodeType type =
3; repeated uint64 ctrl_deps = 4; repeated uint64 data_deps = 5; uint64 start_time_micros = 6;
uint64 duration_micros = 7; IOInfo inputs = 8; IOInfo outputs = 9; repeated AttributeProto attr
= 10}``. ``AttributeProto`` is ``{name = 1; doc_string = 2; oneof value {double 3, DoubleList 4,
float 5, FloatList 6, int32 7, ..., int64 9, uint32 11, uint64 13, sint32 15, sint64 17, fixed32
19, fixed64 21, sfixed32 23, sfixed64 25, bool 27, string 29, bytes 31 (+1 = the list form)}}``.

The reader is a ~100-line protobuf wire-format decoder, so traces are readable without the
``chakra`` package or ``protobuf``. Any integer attribute variant is accepted.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icefabric.collect.errors import CollectError
from icefabric.schemas import ParseWarning

NODE_TYPES = {0: "INVALID_NODE", 1: "METADATA_NODE", 2: "MEM_LOAD_NODE", 3: "MEM_STORE_NODE",
              4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE",
              8: "STORAGE_NODE", 9: "BATCH_NODE", 10: "CHECKPOINT_NODE"}
COLLECTIVES = {0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER",
               5: "BROADCAST", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK",
               9: "BARRIER"}


class WireError(CollectError):
    """Bytes that are not a valid protobuf encoding."""


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``; returns (value, next position)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("varint runs past the end of the data")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def decode_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Split one message into (field number, wire type, raw value) triples."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise WireError("field number 0")
        if wt == 0:
            val, pos = read_varint(buf, pos)
        elif wt == 1:
            if pos + 8 > len(buf):
                raise WireError("truncated fixed64")
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise WireError("truncated length-delimited field")
            val, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            if pos + 4 > len(buf):
                raise WireError("truncated fixed32")
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise WireError(f"unsupported wire type {wt}")
        out.append((num, wt, val))
    return out


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def _scalar(num: int, wt: int, raw: Any) -> Any:
    """Value of a scalar AttributeProto field by its number (et_def.proto ``oneof value``)."""
    if num == 3:
        return struct.unpack("<d", raw)[0]
    if num == 5:
        return struct.unpack("<f", raw)[0]
    if num in (7, 9):
        return _signed64(raw)
    if num in (11, 13):
        return raw
    if num in (15, 17):
        return _zigzag(raw)
    if num == 19:
        return struct.unpack("<I", raw)[0]
    if num == 21:
        return struct.unpack("<Q", raw)[0]
    if num == 23:
        return struct.unpack("<i", raw)[0]
    if num == 25:
        return struct.unpack("<q", raw)[0]
    if num == 27:
        return bool(raw)
    if num == 29:
        return raw.decode("utf-8", errors="replace")
    if num == 31:
        return bytes(raw)
    raise WireError(f"unknown attribute value field {num}")


_FIXED = {3: ("<d", 8), 5: ("<f", 4), 19: ("<I", 4), 21: ("<Q", 8), 23: ("<i", 4), 25: ("<q", 8)}


def _list(num: int, raw: bytes) -> list[Any]:
    """Values of a ``*List`` attribute (field ``num`` = scalar number + 1), packed or not."""
    scalar = num - 1
    values: list[Any] = []
    for fnum, wt, val in decode_fields(raw):
        if fnum != 1:
            continue
        if wt == 2 and scalar not in (29, 31):  # packed repeated scalars
            if scalar in _FIXED:
                fmt, size = _FIXED[scalar]
                values += [struct.unpack(fmt, val[i:i + size])[0] for i in range(0, len(val), size)]
            else:
                pos = 0
                while pos < len(val):
                    v, pos = read_varint(val, pos)
                    values.append(_scalar(scalar, 0, v))
        else:
            values.append(_scalar(scalar, wt, val))
    return values


def decode_attribute(raw: bytes) -> tuple[str, Any]:
    """(name, value) of one AttributeProto."""
    name, value = "", None
    for num, wt, val in decode_fields(raw):
        if num == 1:
            name = val.decode("utf-8", errors="replace")
        elif num == 2:
            continue
        elif num % 2 == 0 and 4 <= num <= 32:
            value = _list(num, val)
        else:
            value = _scalar(num, wt, val)
    return name, value


def _repeated_uint(wt: int, val: Any) -> list[int]:
    if wt == 0:
        return [val]
    out, pos = [], 0
    while pos < len(val):
        v, pos = read_varint(val, pos)
        out.append(v)
    return out


@dataclass
class ChakraNode:
    """One node of an execution trace with its attributes decoded."""

    id: int = 0
    name: str = ""
    type: str = "INVALID_NODE"
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)


def decode_node(raw: bytes) -> ChakraNode:
    """Decode one ``Node`` message."""
    node = ChakraNode()
    for num, wt, val in decode_fields(raw):
        if num == 1:
            node.id = val
        elif num == 2:
            node.name = val.decode("utf-8", errors="replace")
        elif num == 3:
            node.type = NODE_TYPES.get(val, f"UNKNOWN_{val}")
        elif num == 4:
            node.ctrl_deps += _repeated_uint(wt, val)
        elif num == 5:
            node.data_deps += _repeated_uint(wt, val)
        elif num == 6:
            node.start_time_micros = val
        elif num == 7:
            node.duration_micros = val
        elif num == 10:
            k, v = decode_attribute(val)
            node.attrs[k] = v
    return node


@dataclass
class ChakraTrace:
    """One rank's trace: metadata version/attributes, nodes, warnings."""

    rank: int | None = None
    version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    nodes: list[ChakraNode] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)


def parse_chakra_trace(data: bytes, *, rank: int | None = None,
                       source: str | None = None) -> ChakraTrace:
    """Decode a Chakra ET file (length-delimited GlobalMetadata then Nodes).

    Parameters
    ----------
    data : bytes
        File contents.
    rank : int, optional
        The rank this trace belongs to.
    source : str, optional
        Name used in warnings.

    Returns
    -------
    ChakraTrace
        Everything decoded up to the first broken message; a truncated or corrupt tail
        becomes a warning naming the byte offset (binary files have no lines).
    """
    tr = ChakraTrace(rank=rank)
    pos = 0
    first = True
    while pos < len(data):
        start = pos
        try:
            n, pos = read_varint(data, pos)
            if pos + n > len(data):
                raise WireError(f"message of {n} bytes runs past the end (truncated file)")
            body = data[pos:pos + n]
            pos += n
            if first:
                for num, _wt, val in decode_fields(body):
                    if num == 1:
                        tr.version = val.decode("utf-8", errors="replace")
                    elif num == 2:
                        k, v = decode_attribute(val)
                        tr.metadata[k] = v
                first = False
            else:
                tr.nodes.append(decode_node(body))
        except (WireError, struct.error, UnicodeDecodeError) as exc:
            tr.warnings.append(ParseWarning(message=f"byte {start}: {exc}; stopped reading",
                                            line=None, source=source))
            break
    return tr


_RANK_IN_NAME = re.compile(r"(\d+)(?=\D*$)")


def read_chakra_traces(paths: list[str | Path]) -> list[ChakraTrace]:
    """Read one trace file per rank; the rank is the last number in the file name
    (``trace.3.et`` -> 3), else the position in ``paths``."""
    out = []
    for i, p in enumerate(paths):
        m = _RANK_IN_NAME.search(Path(p).name.rsplit(".et", 1)[0])
        rank = int(m[1]) if m else i
        out.append(parse_chakra_trace(Path(p).read_bytes(), rank=rank, source=str(p)))
    return out


def workload_from_traces(traces: list[ChakraTrace]) -> dict[str, Any]:
    """Neutral workload: every communication node with its size and dependencies.

    Returns
    -------
    dict
        ``{"nranks", "ops": [{"rank", "id", "name", "kind" (COLL/SEND/RECV/COMP),
        "collective", "size_bytes", "src", "dst", "tag", "pg_name", "deps",
        "duration_us", "instance", "peer"}]}``. ``deps`` joins control and data
        dependencies (ids within the same rank); compute nodes are kept because communication
        waits on them. ``instance`` numbers a rank's collectives per process group in trace
        order, so equal (pg_name, instance) across ranks is one collective call (every rank
        issues a group's collectives in the same order). ``peer`` is ``(rank, id)`` of the
        matching receive of a send and vice versa (same src, dst and tag, in order).
    """
    ops = []
    for tr in traces:
        for n in tr.nodes:
            kind = {"COMM_COLL_NODE": "COLL", "COMM_SEND_NODE": "SEND",
                    "COMM_RECV_NODE": "RECV", "COMP_NODE": "COMP"}.get(n.type)
            if kind is None:
                continue
            ctype = n.attrs.get("comm_type")
            ops.append({
                "rank": tr.rank, "id": n.id, "name": n.name, "kind": kind,
                "collective": COLLECTIVES.get(ctype, str(ctype)) if kind == "COLL" else None,
                "size_bytes": n.attrs.get("comm_size"),
                "src": n.attrs.get("comm_src"), "dst": n.attrs.get("comm_dst"),
                "tag": n.attrs.get("comm_tag"), "pg_name": n.attrs.get("pg_name"),
                "deps": sorted(set(n.ctrl_deps) | set(n.data_deps)),
                "duration_us": n.duration_micros,
                "instance": None, "peer": None,
            })
    counters: dict[tuple[Any, Any], int] = {}
    sends: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    recvs: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for op in ops:
        if op["kind"] == "COLL":
            key = (op["rank"], op["pg_name"])
            op["instance"] = counters.get(key, 0)
            counters[key] = op["instance"] + 1
        elif op["kind"] == "SEND":
            sends.setdefault((op["rank"], op["dst"], op["tag"]), []).append(op)
        elif op["kind"] == "RECV":
            recvs.setdefault((op["src"], op["rank"], op["tag"]), []).append(op)
    for key, sl in sends.items():
        for snd, rcv in zip(sl, recvs.get(key, []), strict=False):
            snd["peer"], rcv["peer"] = (rcv["rank"], rcv["id"]), (snd["rank"], snd["id"])
    return {"nranks": len(traces), "ops": ops}
