"""QpId: one name for a data QP in jobs, host plans and the verbs actuator."""

from hypothesis import given
from hypothesis import strategies as st

from icefabric.qpid import QpId
from icefabric.schemas_service import QpPlan
from icefabric.units import ipv4_str

ip = st.integers(0, 2**32 - 1)


@given(st.text(min_size=1, max_size=8), ip, ip, st.integers(0, 1000))
def test_either_address_form_names_the_same_qp(job, s, d, o):
    q = QpId.of(job, ipv4_str(s), ipv4_str(d), o)
    assert q == QpId.of(job, s, d, o) and hash(q) == hash(QpId(job, s, d, o))
    assert (q.src, q.dst, q.pair) == (ipv4_str(s), ipv4_str(d), (job, s, d))


def test_a_host_plan_entry_names_its_qp():
    p = QpPlan(src_ip="10.0.0.1", dst_ip="10.0.1.1", lqpn=5, rqpn=6, job="gpt", ordinal=3,
               sport=50000, routes=[[1]], weights=[1.0])
    assert p.qp_id == QpId.of("gpt", "10.0.0.1", "10.0.1.1", 3)
    assert p.qp_id != QpId.of("gpt", "10.0.1.1", "10.0.0.1", 3)  # the other direction
    assert sorted([QpId.of("j", 1, 2, 1), QpId.of("j", 1, 2, 0)])[0].ordinal == 0
