"""Pairing the two ends of each connection and telling which one sends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.pipeline.pairing import QpEnd, connections, data_qps
from icefabric.qpid import QpId

A, B = 0x0A000001, 0x0A000101


def ends(lq: int, rq: int, *, a_order=0, b_order=0, a_span=None, b_span=None,
         b_receive=False) -> tuple[QpEnd, QpEnd]:
    """A connection A:lq <-> B:rq (A sends when NCCL's rules hold)."""
    return (QpEnd("j", A, B, lq, rq, a_order, span_ns=a_span),
            QpEnd("j", B, A, rq, lq, b_order, receive=b_receive, span_ns=b_span))


def test_the_two_ends_pair_and_each_rule_tells_the_sender():
    a, b = ends(0x10, 0x20, b_receive=True)
    (c,) = connections([b, a], {(A, B), (B, A)})
    assert (c.sender, c.receiver, c.how) == (a, b, "flags")
    a, b = ends(0x10, 0x20, a_span=900_000, b_span=40_000)
    (c,) = connections([a, b], {(A, B), (B, A)})
    assert (c.sender, c.how) == (a, "span")
    a, b = ends(0x10, 0x20)
    (c,) = connections([a, b], {(A, B)})  # the model has data A->B only
    assert (c.sender, c.how) == (a, "model")
    (c,) = connections([a, b], {(A, B), (B, A)})  # data both ways, nothing told
    assert (c.sender, c.how) == (None, "")


def test_receive_sides_never_take_a_data_ordinal():
    """On A the host numbered, in connection order, a receive side (of B->A) before its
    two data QPs; the span tells it, so the data QPs get ordinals 0 and 1."""
    recv = ends(0x30, 0x40, a_order=0, a_span=10, b_span=500)  # B sends to A
    d0 = ends(0x11, 0x21, a_order=1, a_span=700, b_span=20)
    d1 = ends(0x12, 0x22, a_order=3, a_span=800, b_span=30)  # ordinal 2: a destroyed QP
    got = data_qps([e for c in (recv, d0, d1) for e in c], {(A, B), (B, A)})
    assert got[QpId("j", A, B, 0)] == d0[0] and got[QpId("j", A, B, 2)] == d1[0]
    assert got[QpId("j", B, A, 0)] == recv[1]
    assert len(got) == 3


def test_unpaired_ends_follow_the_model():
    (a, _) = ends(0x10, 0x20)
    assert data_qps([a], {(A, B), (B, A)}) == {QpId("j", A, B, 0): a}  # as the host named it
    assert data_qps([a], {(B, A)}) == {}  # the model has no data A->B: it only receives
    assert data_qps([a], {(A, B)}) == {QpId("j", A, B, 0): a}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 10**6), st.integers(1, 10**6)),
                min_size=1, max_size=24), st.randoms(use_true_random=False))
def test_nccl_connections_in_any_order_name_exactly_the_senders(conns, rnd):
    """Any mix of connections both ways between A and B, connected in any order, with
    NCCL's timing (the sender's INIT->RTR contains the receiver's) and no access flags:
    the data QPs are exactly the senders, numbered in their host's order."""
    order = {A: 0, B: 0}
    all_ends, senders = [], []
    seq = list(range(len(conns)))
    rnd.shuffle(seq)
    for i in seq:
        a_sends, recv_span, extra = conns[i]
        s_ip, r_ip = (A, B) if a_sends else (B, A)
        s = QpEnd("j", s_ip, r_ip, 0x100 + i, 0x900 + i, order[s_ip],
                  span_ns=recv_span + extra)
        r = QpEnd("j", r_ip, s_ip, 0x900 + i, 0x100 + i, order[r_ip], span_ns=recv_span)
        order[s_ip] += 1
        order[r_ip] += 1
        all_ends += [s, r]
        senders.append(s)
    got = data_qps(all_ends, {(A, B), (B, A)})
    assert set(got.values()) == set(senders)
    for ip in (A, B):
        mine = sorted((e for e in senders if e.src_ip == ip), key=lambda e: e.order)
        assert [got[QpId("j", ip, e.dst_ip, k)] for k, e in enumerate(mine)] == mine
