"""Jobs from every front end become the same workload; observed facts are kept."""

import numpy as np
import pytest

from icefabric.ccl.communicator import Communicator
from icefabric.pipeline.jobs import (
    JobError,
    JobSpec,
    build_workload,
    report_job,
)
from icefabric.pipeline.plans import scenario_workload
from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.schemas import CommunicatorReport, Ring
from icefabric.schemas_service import CollectiveEntry, CommReport, QpEntry, RankEntry
from icefabric.topology.model import ACCEL
from icefabric.units import ipv4_str
from icefabric.wire import qp_ordinals


def test_reported_qps_and_rings_are_kept(small_fabric):
    hosts = [s.name for s in small_fabric.servers[:2]]
    ranks = [RankEntry(rank=r, host=hosts[r // 8], device=r % 8) for r in range(16)]
    order = [0, 7, 6, 5, 4, 3, 2, 1, 8, 15, 14, 13, 12, 11, 10, 9]  # not rank order
    seen = CommunicatorReport(nranks=16, rings=[Ring(channel=c, ranks=order) for c in (0, 1)])
    base = CommReport(job="j", library="nccl", collectives=[CollectiveEntry(kind="all_reduce")],
                      size_bytes=1 << 20, ranks=ranks, collector=seen)
    job = report_job(small_fabric, [base])
    wl = build_workload(small_fabric, [job])
    # the observed ring, channel by channel: hop i goes from order[i] to order[i + 1]
    assert job.comm.n_channels == 2
    ring = job.comm.ranks[order]
    hops = np.flatnonzero(wl.hop_flow == 0)
    assert wl.hop_src[hops].tolist() == ring.tolist()
    assert wl.hop_dst[hops].tolist() == np.roll(ring, -1).tolist()
    # a host reports one of its QPs: numbers and port replace the modelled ones
    q = 3
    s, d = ipv4_str(wl.qp_src_ip[q]), ipv4_str(wl.qp_dst_ip[q])
    mine = base.model_copy(update={"qps": [QpEntry(src_ip=s, dst_ip=d, sport=0xC123,
                                                   lqpn=0x42, rqpn=0x43,
                                                   ordinal=int(qp_ordinals(wl)[q]))]})
    job = report_job(small_fabric, [base, mine])
    (end,) = job.qps
    assert (end.lqpn, end.rqpn, end.sport, end.order) == (0x42, 0x43, 0xC123, qp_ordinals(wl)[q])
    got = build_workload(small_fabric, [job])
    assert (got.qp_lqpn[q], got.qp_rqpn[q], got.sports()[q]) == (0x42, 0x43, 0xC123)
    others = np.arange(wl.n_qps) != q
    assert np.array_equal(got.qp_lqpn[others], wl.qp_lqpn[others])
    assert np.array_equal(got.sports()[others], wl.sports()[others])


def test_bad_reports_and_collectives_name_the_job(small_fabric):
    ranks = [RankEntry(rank=r, host="nope-0", device=r) for r in range(2)]
    rep = CommReport(job="j", library="nccl", collectives=[CollectiveEntry(kind="alltoall")],
                     size_bytes=1 << 20, ranks=ranks)
    with pytest.raises(JobError, match="job 'j': reports do not fit the fabric"):
        report_job(small_fabric, [rep])
    comm = Communicator("k", small_fabric, small_fabric.nodes_of_kind(ACCEL)[:4])
    with pytest.raises(JobError, match="job 'k': .* no warp algorithm") as e:
        build_workload(small_fabric, [JobSpec(comm, (("all_reduce", "warp"),), 1 << 20)])
    assert e.value.collective == 0


def test_a_ring_that_is_not_an_order_of_the_ranks_is_refused(small_fabric):
    with pytest.raises(ValueError, match="ring of channel 1 is not an order of ranks 0..3"):
        Communicator("j", small_fabric, small_fabric.nodes_of_kind(ACCEL)[:4],
                     rings=((0, 1, 2, 3), (0, 1, 1, 2)))


def test_scenario_jobs_keep_their_rings():
    ls = load("homog-small")
    scn = ls.scenario
    n = len(scenario_workload(ls, build_fabric(ls), 1 << 20).jobs[0].comm.ranks)
    ring = list(range(n))[::-1]
    job = scn.jobs[0].model_copy(update={"rings": [ring]})
    ls.scenario = scn.model_copy(update={"jobs": [job]})
    sw = scenario_workload(ls, build_fabric(ls), 1 << 20)
    comm = sw.jobs[0].comm
    assert comm.rings == (tuple(ring),)
    hops = np.flatnonzero(sw.workload.hop_flow == 0)
    assert sw.workload.hop_src[hops].tolist() == comm.ranks[ring].tolist()
