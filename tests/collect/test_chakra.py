"""Chakra ET reader, checked against traces written by a tiny encoder of et_def.proto."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from icefabric.collect.chakra import (
    parse_chakra_trace,
    read_chakra_traces,
    read_varint,
    workload_from_traces,
)


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(num: int, wt: int) -> bytes:
    return varint(num << 3 | wt)


def f_varint(num: int, v: int) -> bytes:
    return key(num, 0) + varint(v)


def f_bytes(num: int, b: bytes) -> bytes:
    return key(num, 2) + varint(len(b)) + b


def attr(name: str, field: int, value) -> bytes:
    body = f_bytes(1, name.encode())
    if field in (7, 9, 11, 13, 27):
        body += f_varint(field, int(value))
    elif field in (15, 17):
        body += f_varint(field, (value << 1) ^ (value >> 63))
    elif field == 21:
        body += key(field, 1) + struct.pack("<Q", value)
    elif field == 29:
        body += f_bytes(field, value.encode())
    elif field == 14:  # Uint64List, packed
        body += f_bytes(field, f_bytes(1, b"".join(varint(x) for x in value)))
    return body


def node(nid: int, name: str, ntype: int, deps=(), attrs=()) -> bytes:
    body = f_varint(1, nid) + f_bytes(2, name.encode()) + f_varint(3, ntype)
    if deps:
        body += f_bytes(4, b"".join(varint(d) for d in deps))  # packed ctrl_deps
    body += f_varint(7, 12)
    for a in attrs:
        body += f_bytes(10, a)
    return body


def trace(*messages: bytes) -> bytes:
    return b"".join(varint(len(m)) + m for m in messages)


META = f_bytes(1, b"0.0.4") + f_bytes(2, attr("schema", 29, "1.0.2-chakra.0.0.4"))


def sample(rank: int) -> bytes:
    return trace(
        META,
        node(1, "fwd", 4),
        node(2, "allreduce_grad", 7, deps=[1],
             attrs=[attr("comm_type", 9, 0), attr("comm_size", 13, 1 << 20),
                    attr("pg_name", 29, "0")]),
        node(3, "send", 5, deps=[2],
             attrs=[attr("comm_size", 21, 4096), attr("comm_src", 7, rank),
                    attr("comm_dst", 17, (rank + 1) % 2), attr("comm_tag", 15, -3)]),
        node(4, "recv", 6, deps=[2],
             attrs=[attr("comm_size", 21, 4096), attr("comm_src", 7, (rank + 1) % 2),
                    attr("comm_dst", 17, rank), attr("comm_tag", 15, -3)]),
    )


def test_decode_nodes_and_workload(tmp_path):
    paths = []
    for r in range(2):
        p = tmp_path / f"chakra.{r}.et"
        p.write_bytes(sample(r))
        paths.append(p)
    traces = read_chakra_traces(paths)
    assert [t.rank for t in traces] == [0, 1]
    t0 = traces[0]
    assert t0.version == "0.0.4" and t0.metadata["schema"] == "1.0.2-chakra.0.0.4"
    assert [n.type for n in t0.nodes] == ["COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE",
                                          "COMM_RECV_NODE"]
    wl = workload_from_traces(traces)
    coll = [o for o in wl["ops"] if o["kind"] == "COLL"]
    assert len(coll) == 2 and coll[0]["collective"] == "ALL_REDUCE"
    assert coll[0]["size_bytes"] == 1 << 20 and coll[0]["deps"] == [1]
    send = next(o for o in wl["ops"] if o["kind"] == "SEND" and o["rank"] == 1)
    assert (send["size_bytes"], send["src"], send["dst"], send["tag"]) == (4096, 1, 0, -3)
    assert send["peer"] == (0, 4) and coll[1]["instance"] == 0


def test_list_attribute():
    data = trace(META, node(1, "x", 7, attrs=[attr("involved", 14, [1, 300, 70000])]))
    assert parse_chakra_trace(data).nodes[0].attrs["involved"] == [1, 300, 70000]


@given(st.integers(0, len(sample(0))))
def test_truncated_trace_never_raises(cut):
    tr = parse_chakra_trace(sample(0)[:cut])
    whole = len(parse_chakra_trace(sample(0)).nodes)
    assert len(tr.nodes) <= whole
    if cut < len(sample(0)) and cut > 0:
        assert tr.warnings or len(tr.nodes) < whole


@given(st.integers(0, (1 << 64) - 1))
def test_varint_round_trip(v):
    assert read_varint(varint(v), 0) == (v, len(varint(v)))


@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data):
    tr = parse_chakra_trace(data)
    assert all(w.message.startswith("byte ") for w in tr.warnings)
