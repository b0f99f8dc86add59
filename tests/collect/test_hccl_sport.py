"""MultiQpSrcPort.cfg writer: format, documented limits and round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icefabric.collect.hccl_sport import (
    MAX_LINES,
    MAX_PORTS_PER_PAIR,
    SportConfigError,
    format_multi_qp_src_port,
    parse_multi_qp_src_port,
    sport_entries_from_qps,
    write_multi_qp_src_port,
)


def test_lines_from_qp_rows(tmp_path):
    rows = [{"src_ip": "192.168.1.1", "dst_ip": "192.168.1.2", "sport": 49153},
            {"src_ip": "192.168.1.1", "dst_ip": "192.168.1.2", "sport": 61000},
            {"src_ip": "192.168.1.2", "dst_ip": "192.168.1.1", "sport": 50000}]
    text = format_multi_qp_src_port(sport_entries_from_qps(rows))
    assert text == ("192.168.1.1,192.168.1.2=49153,61000\n"
                    "192.168.1.2,192.168.1.1=50000\n")
    path = write_multi_qp_src_port(tmp_path / "cfg", sport_entries_from_qps(rows))
    assert path.name == "MultiQpSrcPort.cfg" and path.read_text() == text


def test_limits_are_enforced():
    with pytest.raises(SportConfigError, match="at most 32"):
        format_multi_qp_src_port({("1.1.1.1", "2.2.2.2"): range(50000, 50000 + 33)})
    with pytest.raises(SportConfigError, match="twice"):
        format_multi_qp_src_port([(("1.1.1.1", "2.2.2.2"), [50000]),
                                  (("1.1.1.1", "2.2.2.2"), [50001])])
    with pytest.raises(SportConfigError, match="out of range"):
        format_multi_qp_src_port({("1.1.1.1", "2.2.2.2"): [70000]})
    with pytest.raises(SportConfigError, match="IPv6"):
        format_multi_qp_src_port({("fe80::1", "fe80::2"): [50000]})
    too_many = {(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", "0.0.0.0"): [50000]
                for i in range(MAX_LINES + 1)}
    with pytest.raises(SportConfigError, match="131072"):
        format_multi_qp_src_port(too_many)


def test_bad_plan_leaves_no_file(tmp_path):
    with pytest.raises(SportConfigError):
        write_multi_qp_src_port(tmp_path, {("1.1.1.1", "bad"): [50000]})
    assert not list(tmp_path.iterdir())


@given(st.dictionaries(
    st.tuples(st.ip_addresses(v=4).map(str), st.ip_addresses(v=4).map(str)),
    st.lists(st.integers(1, 65535), min_size=1, max_size=MAX_PORTS_PER_PAIR),
    max_size=20))
def test_round_trip(entries):
    back, warnings = parse_multi_qp_src_port(format_multi_qp_src_port(entries))
    assert back == entries and not warnings
