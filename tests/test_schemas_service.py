"""The service's wire models: checked fields of host plans (issue 23)."""

import ipaddress
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from icefabric.schemas_service import HostPlan, QpPlan, _check_ip

OCTETS = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["01", "00", "", "a", "-1"]))


@given(st.lists(OCTETS, min_size=3, max_size=5).map(".".join)
       | st.text(alphabet="0123456789.\n ", max_size=18))
def test_ipv4_check_accepts_exactly_what_ipaddress_accepts(s):
    try:
        ipaddress.IPv4Address(s)
        want = True
    except ValueError:
        want = False
    try:
        _check_ip(s)
        got = True
    except ValueError as e:
        assert "not an IPv4 address" in str(e)
        got = False
    assert got == want, s


def _qp(**kw):
    d = dict(src_ip="10.0.0.1", dst_ip="10.0.1.1", lqpn=1, rqpn=2, job="j", ordinal=0,
             sport=50000, routes=[[1, 2]], weights=[1.0])
    d.update(kw)
    return d


@pytest.mark.parametrize("field, value, reason", [
    ("sport", 70000, "less than or equal to 65535"), ("sport", -2, "greater than or equal"),
    ("backup_sport", 10**9, "less than or equal to 65535"),
    ("rate_bps", -1e9, "greater than or equal to 0"), ("rate_bps", math.nan, "finite"),
    ("rate_bps", math.inf, "finite"), ("lqpn", 1 << 24, "less than or equal"),
    ("src_ip", "../etc/passwd", "not an IPv4 address"), ("src_ip", "x" * 16, "at most 15"),
    ("dst_ip", "a\nb=c,d", "not an IPv4 address"), ("job", "a\nb", "pattern"),
    ("weights", [math.nan], "finite"), ("weights", [], "1 routes but 0 weights"),
    ("routes", [[-1]], "greater than or equal to 0"), ("sport", "80", "valid integer"),
])
def test_a_qp_plan_out_of_its_domain_is_refused(field, value, reason):
    QpPlan(**_qp())
    with pytest.raises(ValidationError, match=reason):
        QpPlan(**_qp(**{field: value}))


def test_a_host_plan_holds_each_qp_once():
    """(More than MAX_PLAN_QPS QPs: tests/agent/test_runner_hostile.py.)"""
    head = dict(host="h", version=1, fabric_version=1, policy="ice", created_at=0.0)
    HostPlan(**head, qps=[_qp(), _qp(lqpn=2, ordinal=1)])
    with pytest.raises(ValidationError, match="ordinal 0 of job .* is planned twice"):
        HostPlan(**head, qps=[_qp(), _qp(lqpn=2)])
    with pytest.raises(ValidationError, match="lqpn 1 rqpn 2 is planned twice"):
        HostPlan(**head, qps=[_qp(), _qp(ordinal=1)])
    with pytest.raises(ValidationError, match="version"):
        HostPlan(**{**head, "version": 2**63}, qps=[])
