"""HCCL rank table reader: the documented v1.0 server_list and the older group_list layouts."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from icefabric.collect.ranktable import parse_ranktable, report_from_ranktable

V10 = {
    "version": "1.0", "status": "completed", "server_count": "2",
    "server_list": [
        {"server_id": "10.0.0.10", "device": [
            {"device_id": "0", "device_ip": "192.168.100.101", "rank_id": "0"},
            {"device_id": "1", "device_ip": "192.168.101.101", "rank_id": "1"}]},
        {"server_id": "10.0.0.11", "device": [
            {"device_id": "0", "device_ip": "192.168.100.102", "rank_id": "2"},
            {"device_id": "1", "device_ip": "192.168.101.102", "rank_id": "3"}]},
    ],
}

GROUP = {
    "status": "completed", "group_count": "1",
    "group_list": [{"group_name": "hccl_world_group", "device_count": "2", "instance_count": "2",
                    "instance_list": [
                        {"rank_id": "0", "server_id": "10.1.0.1",
                         "devices": [{"device_id": "4", "device_ip": "192.1.1.4"}]},
                        {"rank_id": "1", "server_id": "10.1.0.1",
                         "devices": [{"device_id": 5, "device_ip": "192.1.1.5"}]}]}],
}


def test_server_list_layout():
    t = parse_ranktable(json.dumps(V10))
    assert not t.warnings and t.version == "1.0"
    assert [(r.rank, r.server_id, r.device_id, r.device_ip) for r in t.ranks][2] == (
        2, "10.0.0.11", 0, "192.168.100.102")
    rep = report_from_ranktable(t)
    assert rep.library == "hccl" and rep.nranks == 4 and rep.nnodes == 2
    assert rep.hosts() == ["10.0.0.10", "10.0.0.11"]
    assert [n.name for n in rep.nics[0].nics] == ["192.168.100.101", "192.168.101.101"]
    # a rank table prints every rank's server and device: all seen
    assert [(h.host, h.ranks, h.seen, h.inferred) for h in rep.hosts_ranks] == [
        ("10.0.0.10", [0, 1], [0, 1], []), ("10.0.0.11", [2, 3], [2, 3], [])]
    assert {(r.host_from.status, r.device_from.status) for r in rep.ranks} == {("seen", "seen")}


def test_group_list_layout_and_int_values():
    t = parse_ranktable(json.dumps(GROUP))
    assert [(r.rank, r.device_id) for r in t.ranks] == [(0, 4), (1, 5)]


def test_invalid_json_warns_with_line():
    t = parse_ranktable('{\n "server_list": [\n')
    assert not t.ranks and t.warnings[0].line is not None


def test_rank_table_facts():
    from icefabric.collect.facts import text_facts

    f = text_facts(json.dumps(V10))
    assert f["server_count"] == 2 and f["hosts"]["10.0.0.11"] == [2, 3]

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(
        ["0", "1", "x", "10.0.0.1", "device", "server_list", "rank_id"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["server_list", "device", "devices", "device_id", "device_ip",
                         "rank_id", "server_id", "group_list", "instance_list", "version",
                         "super_pod_list", "host_ip"]), inner, max_size=5),
    max_leaves=30)


@given(_json)
def test_any_json_shape_never_crashes(data):
    t = parse_ranktable(json.dumps(data))
    report_from_ranktable(t).model_dump_json()


def test_rank_tables_of_one_job_merge_and_clashes_are_named():
    from icefabric.collect.ranktable import parse_ranktables

    first = {"version": "1.0", "server_list": [V10["server_list"][0]]}
    second = {"version": "1.0", "server_list": [V10["server_list"][1]]}
    table = parse_ranktables([("a.json", json.dumps(first)), ("b.json", json.dumps(second))])
    assert [r.rank for r in table.ranks] == [0, 1, 2, 3] and table.servers() == [
        "10.0.0.10", "10.0.0.11"] and not table.warnings
    again = parse_ranktables([("a.json", json.dumps(first)), ("c.json", json.dumps(first))])
    (w,) = again.warnings
    assert w.source == "c.json" and "[0, 1]" in w.message


def test_entries_with_numbers_out_of_range_or_bad_ips_are_skipped():
    data = {"version": "1.0", "server_count": "-2", "server_list": [{"server_id": "s0", "device": [
        {"device_id": "-3", "device_ip": "10.0.0.1", "rank_id": "0"},
        {"device_id": "1", "device_ip": "999.1.1.1", "rank_id": "1"},
        {"device_id": "2", "device_ip": "10.0.0.3", "rank_id": "-1"},
        {"device_id": "3", "device_ip": "10.0.0.4", "rank_id": "3"}]}]}
    t = parse_ranktable(json.dumps(data), "rt.json")
    assert [(r.rank, r.device_id) for r in t.ranks] == [(3, 3)]
    assert [w.message for w in t.warnings] == [
        "server_count '-2' is not a count",
        "entry 0 device_id -3 is not a device number (0 to 4095); skipped",
        "entry 1 device_ip '999.1.1.1' is not an IP address; skipped",
        "entry 2 rank_id -1 is not a rank (0 to 1,048,576); skipped"]


def test_json_nested_past_the_parser_is_a_warning_not_a_crash():
    t = parse_ranktable('{"server_list": ' + "[" * 100_000 + "]" * 100_000 + "}", "deep.json")
    assert not t.ranks
    assert t.warnings[0].message.startswith("JSON nested deeper than")
