"""Round trip of the Chakra ET decoder against traces written by ``protobuf`` itself.

The message classes are built at run time from a descriptor of
``schema/protobuf/et_def.proto`` (https://github.com/mlcommons/chakra: GlobalMetadata, Node,
IOInfo, AttributeProto and its ``*List`` messages), so no ``protoc`` or ``chakra`` package is
needed. Files are written as Chakra's ``protolib.encodeMessage`` does: each message preceded
by its length as a varint.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.collect.chakra import COLLECTIVES, NODE_TYPES, parse_chakra_trace

descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
from google.protobuf import descriptor_pool, message_factory  # noqa: E402
from google.protobuf.internal.encoder import _VarintBytes  # noqa: E402

F = descriptor_pb2.FieldDescriptorProto
# AttributeProto's oneof: (field name stem, scalar type); field numbers 3, 5, ... 31, each
# followed by its list form (number + 1, message <Stem>List {repeated <type> values = 1}).
SCALARS = [("double", F.TYPE_DOUBLE), ("float", F.TYPE_FLOAT), ("int32", F.TYPE_INT32),
           ("int64", F.TYPE_INT64), ("uint32", F.TYPE_UINT32), ("uint64", F.TYPE_UINT64),
           ("sint32", F.TYPE_SINT32), ("sint64", F.TYPE_SINT64), ("fixed32", F.TYPE_FIXED32),
           ("fixed64", F.TYPE_FIXED64), ("sfixed32", F.TYPE_SFIXED32),
           ("sfixed64", F.TYPE_SFIXED64), ("bool", F.TYPE_BOOL), ("string", F.TYPE_STRING),
           ("bytes", F.TYPE_BYTES)]


def _list_name(stem: str) -> str:
    return stem[0].upper() + stem[1:] + "List"


def _messages():
    fp = descriptor_pb2.FileDescriptorProto(name="et_def_test.proto", package="ChakraProtoMsg",
                                            syntax="proto3")

    def message(name, fields, oneof=None):
        m = fp.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for num, fname, ftype, label, type_name, in_oneof in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if type_name:
                f.type_name = f".ChakraProtoMsg.{type_name}"
            if in_oneof:
                f.oneof_index = 0

    one, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    attr_fields = [(1, "name", F.TYPE_STRING, one, None, False),
                   (2, "doc_string", F.TYPE_STRING, one, None, False)]
    for i, (stem, t) in enumerate(SCALARS):
        message(_list_name(stem), [(1, "values", t, rep, None, False)])
        attr_fields += [(3 + 2 * i, f"{stem}_val", t, one, None, True),
                        (4 + 2 * i, f"{stem}_list", F.TYPE_MESSAGE, one, _list_name(stem),
                         True)]
    message("AttributeProto", attr_fields, oneof="value")
    message("GlobalMetadata", [(1, "version", F.TYPE_STRING, one, None, False),
                               (2, "attr", F.TYPE_MESSAGE, rep, "AttributeProto", False)])
    message("IOInfo", [(i + 1, n, F.TYPE_STRING, one, None, False)
                       for i, n in enumerate(("values", "shapes", "types"))])
    enum = fp.enum_type.add(name="NodeType")
    for v, n in NODE_TYPES.items():
        enum.value.add(name=n, number=v)
    message("Node", [(1, "id", F.TYPE_UINT64, one, None, False),
                     (2, "name", F.TYPE_STRING, one, None, False),
                     (3, "type", F.TYPE_ENUM, one, "NodeType", False),
                     (4, "ctrl_deps", F.TYPE_UINT64, rep, None, False),
                     (5, "data_deps", F.TYPE_UINT64, rep, None, False),
                     (6, "start_time_micros", F.TYPE_UINT64, one, None, False),
                     (7, "duration_micros", F.TYPE_UINT64, one, None, False),
                     (8, "inputs", F.TYPE_MESSAGE, one, "IOInfo", False),
                     (9, "outputs", F.TYPE_MESSAGE, one, "IOInfo", False),
                     (10, "attr", F.TYPE_MESSAGE, rep, "AttributeProto", False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))
            for n in ("GlobalMetadata", "Node", "AttributeProto")}


MSG = _messages()
U64, I64 = st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1)
U32, I32 = st.integers(0, 2**32 - 1), st.integers(-(2**31), 2**31 - 1)
F32 = st.floats(width=32, allow_nan=False)
VALUES = {"double": st.floats(allow_nan=False), "float": F32, "int32": I32, "int64": I64,
          "uint32": U32, "uint64": U64, "sint32": I32, "sint64": I64, "fixed32": U32,
          "fixed64": U64, "sfixed32": I32, "sfixed64": I64, "bool": st.booleans(),
          "string": st.text(max_size=12), "bytes": st.binary(max_size=12)}


@st.composite
def attributes(draw):
    stem = draw(st.sampled_from([s for s, _ in SCALARS]))
    name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10))
    if draw(st.booleans()):
        return name, stem, draw(st.lists(VALUES[stem], max_size=5)), True
    return name, stem, draw(VALUES[stem]), False


def _attr(name, stem, value, is_list):
    a = MSG["AttributeProto"](name=name, doc_string="written by protobuf")
    if is_list:
        getattr(a, f"{stem}_list").values.extend(value)
    else:
        setattr(a, f"{stem}_val", value)
    return a


@st.composite
def nodes(draw):
    return {"id": draw(U64), "name": draw(st.text(max_size=16)),
            "type": draw(st.sampled_from(sorted(NODE_TYPES))),
            "ctrl_deps": draw(st.lists(U64, max_size=4)),
            "data_deps": draw(st.lists(U64, max_size=4)),
            "start_time_micros": draw(U64), "duration_micros": draw(U64),
            "attrs": draw(st.lists(attributes(), max_size=4, unique_by=lambda a: a[0]))}


def _write(version, meta_attrs, node_list) -> bytes:
    msgs = [MSG["GlobalMetadata"](version=version,
                                  attr=[_attr(*a) for a in meta_attrs])]
    for n in node_list:
        fields = {k: v for k, v in n.items() if k != "attrs"}
        msgs.append(MSG["Node"](**fields, attr=[_attr(*a) for a in n["attrs"]],
                                inputs={"values": "[1]", "shapes": "[[2]]", "types": "[f]"}))
    return b"".join(_VarintBytes(m.ByteSize()) + m.SerializeToString() for m in msgs)


def _expected(stem, value):
    """What a reader sees: float fields carry 32-bit precision."""
    if stem == "float":
        f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
        return [f32(x) for x in value] if isinstance(value, list) else f32(value)
    return value


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=8), st.lists(attributes(), max_size=3, unique_by=lambda a: a[0]),
       st.lists(nodes(), max_size=5))
def test_protobuf_written_trace_decodes_to_what_was_written(version, meta, node_list):
    tr = parse_chakra_trace(_write(version, meta, node_list))
    assert tr.warnings == []
    assert (tr.version or "") == version  # proto3 writes no empty string
    assert tr.metadata == {n: _expected(s, v) for n, s, v, _ in meta}
    assert len(tr.nodes) == len(node_list)
    for got, want in zip(tr.nodes, node_list, strict=True):
        assert (got.id, got.name, got.type) == (want["id"], want["name"],
                                                NODE_TYPES[want["type"]])
        assert (got.ctrl_deps, got.data_deps) == (want["ctrl_deps"], want["data_deps"])
        assert (got.start_time_micros, got.duration_micros) == (
            want["start_time_micros"], want["duration_micros"])
        assert got.attrs == {n: _expected(s, v) for n, s, v, _ in want["attrs"]}


def test_collective_node_as_pytorch_writes_it():
    """A COMM_COLL_NODE with the attributes Chakra's PyTorch converter sets."""
    node = {"id": 7, "name": "nccl:all_reduce", "type": 7, "ctrl_deps": [3], "data_deps": [],
            "start_time_micros": 10, "duration_micros": 250,
            "attrs": [("comm_type", "int64", 0, False), ("comm_size", "int64", 1 << 26, False),
                      ("pg_name", "string", "0", False), ("is_cpu_op", "bool", False, False)]}
    tr = parse_chakra_trace(_write("0.0.4", [("schema", "string", "1.0.2", False)], [node]))
    n = tr.nodes[0]
    assert n.type == "COMM_COLL_NODE" and COLLECTIVES[n.attrs["comm_type"]] == "ALL_REDUCE"
    assert n.attrs == {"comm_type": 0, "comm_size": 1 << 26, "pg_name": "0",
                       "is_cpu_op": False}
