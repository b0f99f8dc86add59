"""The workload: its digest (all of it, or its shape without QP numbers and reported
ports) and QP numbers as each NIC hands them out (``_allocate_qpns``)."""

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icefabric.ccl.communicator import Communicator
from icefabric.ccl.workload import _allocate_qpns
from icefabric.pipeline.jobs import JobSpec, build_workload
from icefabric.topology.model import ACCEL


def test_the_shape_digest_ignores_qp_numbers_and_reported_ports_only(small_fabric):
    acc = small_fabric.nodes_of_kind(ACCEL)
    comm = Communicator("j", small_fabric, acc[:16], channels=2)
    wl = build_workload(small_fabric, [JobSpec(comm, (("all_reduce", None),), 1 << 20)])
    renumbered = wl.with_qpns(99)
    ported = replace(wl, qp_sport=np.full(wl.n_qps, 50000))
    assert not np.array_equal(renumbered.qp_lqpn, wl.qp_lqpn)
    for other in (renumbered, ported):
        assert other.digest(numbers=False) == wl.digest(numbers=False)
        assert other.digest() != wl.digest()
    bigger = replace(wl, flow_size_bytes=wl.flow_size_bytes * 2)
    other_job = replace(wl, conn_job=["k"] * wl.n_conns)
    for other in (bigger, other_job):
        assert other.digest(numbers=False) != wl.digest(numbers=False)
    assert wl.digest() == build_workload(small_fabric, [JobSpec(
        comm, (("all_reduce", None),), 1 << 20)]).digest()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)),
                                           min_size=1, max_size=60))
def test_nic_starts_are_the_draws_one_per_nic(seed, pairs):
    """Every NIC's counter starts where one draw per NIC, in NIC order, put it (the
    numbers every recorded ECMP draw was made from), and counts up over its QPs."""
    src = np.array([a for a, _ in pairs], dtype=np.int64)
    dst = np.array([b for _, b in pairs], dtype=np.int64)
    lq, rq = _allocate_qpns(src, dst, seed, 0x100)
    rng = np.random.default_rng(seed)
    start = {int(n): 0x100 + int(rng.integers(0, 1 << 16)) for n in np.union1d(src, dst)}
    taken = {n: 0 for n in start}
    for q, (a, b) in enumerate(pairs):
        for nic, got in ((a, lq[q]), (b, rq[q])):
            assert got == (start[nic] + taken[nic]) & 0xFFFFFF, f"QP {q} on NIC {nic}"
            taken[nic] += 1


def test_connection_table_numbers_keys_as_connections_does():
    """Keys given as arrays get the ids :meth:`connections` gives the same keys as
    tuples: new ones numbered in order of first appearance (in or out of order, repeated),
    known ones found again, across calls."""
    from icefabric.ccl.workload import ConnSpec, WorkloadBuilder

    calls = [([3, 1, 3, 0], [5, 2, 5, 9]), ([0, 4, 0], [1, 4, 1]), ([1, 3, 7], [2, 5, 0]),
             ([8, 9], [1, 1])]
    table, tuples = WorkloadBuilder(), WorkloadBuilder()
    for x, y in calls:
        nic = np.arange(len(x))
        spec = ConnSpec(1, "j")
        got = table.connection_table(("j", "t", 0), np.array(x), np.array(y), nic, nic, spec)
        want = tuples.connections([("j", "t", 0, a, b) for a, b in zip(x, y)], nic, nic, spec)
        assert got.tolist() == want.tolist()
    assert table._conns.count == tuples._conns.count == 8
