"""Chakra ET traces drive the iteration: compute nodes as delays (one at a time per rank),
send/receive pairs and collectives as transfers; hand-computed times."""

import math

import pytest

from icefabric.collect.chakra import read_chakra_traces, workload_from_traces
from icefabric.training.chakra import trace_iteration, trace_workload
from icefabric.training.mapping import TrainingError
from icefabric.training.spec import TrainingSpec
from tests.collect.test_chakra import META, attr, f_bytes, f_varint, trace, varint

from .conftest import fabric
from .test_iteration import gpus, simulate

COMP, SEND, RECV, COLL = 4, 5, 6, 7


def node(nid, ntype, deps=(), duration_us=0, attrs=()):
    body = f_varint(1, nid) + f_bytes(2, f"n{nid}".encode()) + f_varint(3, ntype)
    if deps:
        body += f_bytes(5, b"".join(varint(d) for d in deps))  # packed data_deps
    body += f_varint(7, duration_us)
    for a in attrs:
        body += f_bytes(10, a)
    return body


def p2p(src, dst, size):
    return [attr("comm_size", 13, size), attr("comm_src", 7, src), attr("comm_dst", 7, dst),
            attr("comm_tag", 7, 0)]


def write(tmp_path, ranks):
    for r, nodes in enumerate(ranks):
        (tmp_path / f"trace.{r}.et").write_bytes(trace(META, *nodes))
    return TrainingSpec.model_validate({"pools": ["h100"], "chakra": ["trace.*.et"]})


def test_compute_send_receive_compute(tmp_path):
    size = 8 << 20
    spec = write(tmp_path, [
        [node(1, COMP, duration_us=100), node(2, SEND, [1], attrs=p2p(0, 1, size)),
         node(3, COMP, duration_us=30), node(4, COMP, duration_us=40)],  # no deps: serial
        [node(1, RECV, attrs=p2p(0, 1, size)), node(2, COMP, [1], duration_us=50)]])
    fab = fabric(("hgx-h100", 1, "h100"))
    tw = trace_iteration(fab, gpus(fab, 2)[:2], spec, tmp_path)
    res = simulate(fab, tw)
    # NVLink transfer (3.6 Tb/s) + scale-up hops + step overhead
    c = math.ceil(size * 8e9 / 3.6e12 - 1e-6) + 2 * 500 + 1000
    assert res.makespan_ns == max(100_000 + c + 50_000, 100_000 + 30_000 + 40_000)
    assert tw.summary["ranks"] == 2 and tw.summary["compute_nodes"] == 4


def test_collective_across_ranks_waits_for_every_participant(tmp_path):
    ar = [attr("comm_type", 7, 0), attr("comm_size", 13, 1 << 20), attr("pg_name", 29, "dp")]
    spec = write(tmp_path, [[node(1, COMP, duration_us=10), node(2, COLL, [1], attrs=ar)],
                            [node(1, COMP, duration_us=70), node(2, COLL, [1], attrs=ar)]])
    fab = fabric(("hgx-h100", 2, "h100"))
    tw = trace_iteration(fab, gpus(fab, 1), spec, tmp_path)
    res = simulate(fab, tw)
    coll = [i for i in range(tw.tasks.n_tasks) if tw.tasks.kind_name(i) == "comm"]
    assert len(coll) == 1 and list(tw.tasks.task_devices(coll[0])) == [0, 1]
    flows = tw.tasks.task_flows(coll[0])
    assert res.flow_start_ns[flows].min() == 70_000  # after the slower rank's compute
    assert res.makespan_ns > 70_000


def test_broken_traces_are_explained(tmp_path):
    spec = write(tmp_path, [[node(1, RECV, attrs=p2p(1, 0, 64))], [node(1, COMP)]])
    fab = fabric(("hgx-h100", 1, "h100"))
    with pytest.raises(TrainingError, match="rank 0 node 1 receives from rank 1 .* but no "
                       "trace sends it"):
        trace_iteration(fab, gpus(fab, 2)[:2], spec, tmp_path)
    with pytest.raises(TrainingError, match="the traces are of 2 ranks .* but the job has 3 "
                       "accelerators"):
        traces = read_chakra_traces(sorted(tmp_path.glob("*.et")))
        trace_workload(fab, gpus(fab, 3)[:3], workload_from_traces(traces), "t")
    with pytest.raises(TrainingError, match="no Chakra trace matches 'missing/\\*.et'"):
        trace_iteration(fab, gpus(fab, 2)[:2], TrainingSpec.model_validate(
            {"pools": ["h100"], "chakra": ["missing/*.et"]}), tmp_path)
    gather = [attr("comm_type", 7, 3), attr("comm_size", 13, 64), attr("pg_name", 29, "x")]
    spec = write(tmp_path, [[node(1, COLL, attrs=gather)], [node(1, COLL, attrs=gather)]])
    with pytest.raises(TrainingError, match="collective GATHER .* is not modelled"):
        trace_iteration(fab, gpus(fab, 2)[:2], spec, tmp_path)
