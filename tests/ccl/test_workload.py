"""The workload's digest: all of it, or its shape without QP numbers and reported ports."""

from dataclasses import replace

import numpy as np

from icefabric.ccl.communicator import Communicator
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
