"""Inference rules: each on a real log where it fires, and on lines where it must not."""

from __future__ import annotations

from icefabric.collect._text import read_text
from icefabric.collect.infer import (
    RULE_BLOCKS,
    RULE_DEVICE,
    RULE_DEVICE_BLOCK,
    RULE_LAST_HOST,
    RULE_LOCAL_RANK,
    RULE_RING_DUMP,
    RULE_RING_LINKS,
    cross_node_edges,
)
from icefabric.collect.nccl_log import build_reports, parse_nccl_log, parse_nccl_logs

from .conftest import corpus_file, project_file


def _report(*names: str):
    (rep,) = build_reports(parse_nccl_logs([(n, read_text(project_file(n))) for n in names]))
    return rep


def _facts(rep, kind: str):
    return [f for f in rep.inferred if f.fact == kind]


def test_one_host_prints_and_the_other_is_the_host_left_over():
    # NVIDIA/nccl#1412: only swat1-04 prints; nRanks 16 nNodes 2 localRanks 8.
    rep = _report("nccl-1412a-16r-onehost-ringdump.log")
    assert rep.nranks == 16 and rep.nnodes == 2
    hosts = {r.rank: (r.host, r.node) for r in rep.ranks}
    assert all(hosts[r] == ("swat1-04", 0) for r in range(8))
    assert all(hosts[r] == (None, 1) for r in range(8, 16))
    (node,) = _facts(rep, "node")
    assert node.ranks == list(range(8, 16)) and node.rule == RULE_LAST_HOST and node.line == 1
    block = next(f for f in _facts(rep, "host") if f.rule == RULE_LOCAL_RANK)
    assert block.ranks == [2, 4]  # the ranks of 0-7 no line of this excerpt names


def test_rank_zero_sits_where_the_ring_dump_is_printed():
    rep = _report("nccl-1412a-16r-onehost-ringdump.log")
    fact = next(f for f in _facts(rep, "host") if f.ranks == [0])
    assert fact.rule == RULE_RING_DUMP and fact.line == 5 and fact.value == "swat1-04"


def test_ring_edges_across_hosts_from_the_rank0_dump():
    rep = _report("nccl-1412a-16r-onehost-ringdump.log", "nccl-1412b-16r-onehost-initcomplete.log")
    edges = {r.channel: r.cross_node_edges for r in rep.rings}
    assert edges == {0: [(1, 8), (9, 0)], 1: [(3, 10), (11, 2)], 2: [(7, 14), (15, 6)],
                     3: [(5, 12), (13, 4)], 4: [(1, 8), (9, 0)]}
    lines = [f.line for f in _facts(rep, "ring_cross_node_edges")]
    assert lines == [5, 6, 7, 10, 11]


def test_only_the_second_host_prints():
    # NVIDIA/nccl#1357 excerpt: qh100-gpu20 holds ranks 12-14 with localRank 4-6 of 8.
    rep = _report("nccl-1357-h100-16r-secondhost-trees.log")
    hosts = {r.rank: (r.host, r.node) for r in rep.ranks}
    assert hosts[0] == (None, 0) and hosts[15] == ("qh100-gpu20", 1)
    assert {r.rank: r.device for r in rep.ranks if r.device is not None} == {12: 4, 13: 5, 14: 6}


def test_device_from_the_dev_prefix_of_a_rank_s_own_line():
    rep = _report("nccl-1412a-16r-onehost-ringdump.log")
    dev = {f.ranks[0]: (f.value, f.line) for f in _facts(rep, "device")}
    assert dev[1] == ("device 1", 8)  # the Trees line is rank 1's only line
    assert dev[0] == ("device 0", 5)  # ring dump: printed by rank 0
    assert all(RULE_DEVICE in f.rule for f in _facts(rep, "device"))


def test_a_printed_cudadev_is_read_not_inferred():
    rep = _report("nccl-1412b-16r-onehost-initcomplete.log")
    by_rule = {f.ranks[0]: f.rule for f in _facts(rep, "device")}
    assert by_rule == {2: RULE_DEVICE, 3: RULE_DEVICE_BLOCK}  # 0,1,4,5,6 print cudaDev
    assert {r.rank: r.device for r in rep.ranks}[6] == 6


def test_devices_in_order_place_a_host_s_block_and_its_devices():
    # NVIDIA/nccl#1412 Init COMPLETE excerpt: ranks 0,1,4,5,6 print cudaDev = rank, rank 2 its
    # Init timings line; rank 3 is between them
    rep = _report("nccl-1412b-16r-onehost-initcomplete.log")
    (host,) = _facts(rep, "host")
    assert (host.ranks, host.rule) == ([3], RULE_DEVICE_BLOCK)  # block 0-6: highest dev 6
    assert 7 not in {r.rank for r in rep.ranks}  # nothing implies rank 7's host


def test_blocks_of_local_ranks_for_hosts_never_named():
    # init.cc: "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
    text = "\n".join(f"b:7:{r} [{r - 8}] NCCL INFO comm 0x{r} rank {r} nRanks 32 nNodes 4 "
                     f"localRanks 8 localRank {r - 8} MNNVL 0" for r in (8, 9, 15))
    (rep,) = build_reports(parse_nccl_log(text, "x.log"))
    nodes = {r.rank: r.node for r in rep.ranks}
    assert [nodes[r] for r in (0, 8, 16, 31)] == [0, 1, 2, 3]
    blocks = [f.ranks for f in _facts(rep, "node")]
    assert blocks == [list(range(0, 8)), list(range(16, 24)), list(range(24, 32))]
    assert all(f.rule == RULE_BLOCKS for f in _facts(rep, "node"))


def test_no_block_when_another_host_holds_one_of_its_ranks():
    text = "\n".join([
        "a:1:1 [3] NCCL INFO comm 0x1 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        "b:2:2 [0] NCCL INFO comm 0x2 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
    ])
    (rep,) = build_reports(parse_nccl_log(text))
    assert {r.rank: r.host for r in rep.ranks if r.host} == {3: "a", 5: "b"}
    assert not _facts(rep, "host") and all(r.node is None for r in rep.ranks)


def test_unplaced_rank_gives_unknown_edges_not_an_empty_list():
    assert cross_node_edges([0, 1, 2, 3], {0: "a", 1: "a", 2: "a"}) is None
    assert cross_node_edges([0, 1, 2, 3], {r: "a" for r in range(4)}) == []
    # a ring line cut without "..." (NVIDIA/nccl#514: 20 of 32 ranks shown) is not a ring
    assert cross_node_edges([0, 7, 6, 5, 8, 15, 9], {r: str(r // 8) for r in range(16)}) is None
    log = parse_nccl_log("h:1:2 [0] NCCL INFO Channel 00/02 :    0   1   2   3")
    (rep,) = build_reports(log)
    assert rep.rings[0].cross_node_edges is None  # ranks 1-3 are on hosts the log never shows


def test_rccl_detected_from_its_line_suffix_with_nranks():
    # ROCm/rccl#1026: no banner, no Init line; every line ends "comm %p nRanks 08 ...".
    rep = _report("rccl-1026a-mi250x-8r-trees.log", "rccl-1026b-mi250x-8r-connections.log")
    assert rep.library == "rccl" and rep.nranks == 8 and rep.nnodes == 2
    (lib,) = _facts(rep, "library")
    assert lib.line == 9 and "ROCm/rccl" in lib.rule
    assert [r.device for r in rep.ranks] == [0, 1, 2, 3, 0, 1, 2, 3]
    rank0 = next(f for f in _facts(rep, "device") if f.ranks == [0])
    assert "busId" in rank0.rule and rank0.line == 13  # "Connected all rings ... busId c1000"


def test_other_rccl_markers_and_plain_nccl():
    init = "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 - Init COMPLETE\n"
    for line in ("NCCL version 2.18.3+hip6.0", "NCCL INFO RCCL_MSCCL_ENABLE set by environment",
                 "Librccl path : /opt/rocm/lib/librccl.so.1"):
        (rep,) = build_reports(parse_nccl_log(init + line))
        assert rep.library == "rccl" and _facts(rep, "library")[0].line == 2, line
    (plain,) = build_reports(parse_nccl_log(init + "NCCL version 2.21.5+cuda12.4"))
    assert plain.library == "nccl" and not _facts(plain, "library")


def test_nranks_from_an_init_timings_line():
    log = parse_nccl_log("h:1:2 [2] NCCL INFO Init timings: rank 2 nranks 16 total 1.08 "
                         "(kernels 0.51, bootstrap 0.22)")
    (rep,) = build_reports(log)
    assert rep.nranks == 16 and [(r.rank, r.host, r.device) for r in rep.ranks] == [(2, "h", 2)]


def test_new_init_start_line_with_rank_prefix():
    # init.cc (2.27+): "[Rank %d] %s comm %p rank %d nranks %d cudaDev %d ... - Init START"
    log = parse_nccl_log("h:1:2 [1] NCCL INFO [Rank 1] ncclCommInitRankConfig comm 0x5 rank 1 "
                         "nranks 2 cudaDev 1 nvmlDev 1 busId 1b000 commId 0xab - Init START")
    assert log.init_lines[0]["commId"] == "0xab" and not log.warnings


def test_a_ring_cut_with_dots_has_unknown_edges():
    # rings.cc dumpLine ends a line too long for its buffer with "..."
    text = "\n".join([
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0",
        "a:1:1 [0] NCCL INFO Channel 00/02 :    0   1 ...",
        "a:1:1 [0] NCCL INFO Channel 01/02 :    0   1   2   3",
    ])
    (rep,) = build_reports(parse_nccl_log(text))
    assert [r.cross_node_edges for r in rep.rings] == [None, [(1, 2), (3, 0)]]


def test_every_rank_s_host_is_marked_seen_or_inferred_with_its_line():
    # NVIDIA/nccl#629: 8 of 16 ranks print Init COMPLETE (cudaDev = rank - first rank of host)
    rep = _report("nccl-629-16r-initcomplete-partial.log")
    assert [(h.host, h.ranks, h.seen) for h in rep.hosts_ranks] == [
        ("A03-R28-I49-2-6000166", list(range(8)), [2, 4, 5]),
        ("A03-R28-I49-3-9000018", list(range(8, 16)), [8, 9, 12, 14, 15])]
    by_rank = {r.rank: r for r in rep.ranks}
    assert by_rank[2].host_from.model_dump() == {"status": "seen", "line": 10, "rule": None,
                                                 "source": "nccl-629-16r-initcomplete-partial.log"}
    three = by_rank[3].host_from
    assert (three.status, three.line, three.rule) == ("inferred", 10, RULE_DEVICE_BLOCK)
    assert by_rank[13].device_from.status == "inferred" and by_rank[13].device == 5
    assert all(r.host_from is not None and r.device_from is not None for r in rep.ranks)


def test_glued_cut_prefixes_keep_the_host_and_its_block():
    # modelscope/ms-swift#3934: "g183:161258:166018 [1] NCCg183:161260:166021 [3] NCCL INFO comm"
    rep = _report("ms-swift-3934-16r-glued.log")
    assert {r.host for r in rep.ranks} == {"g183", None}
    assert [(h.host, h.ranks, h.seen) for h in rep.hosts_ranks] == [
        ("g183", list(range(8)), [3, 4, 7]), (None, list(range(8, 16)), [])]


def test_rings_closed_from_per_rank_ring_links_and_their_edges_inferred():
    # NVIDIA/nccl#1189: channel 2 shows only rank 0's "Ring 02 : 2 -> 0 -> 1"; with nRanks 4
    # the ring is closed through rank 3, and both hosts are known.
    rep = _report("nccl-1189-h20-4r-ringlinks.log")
    rings = {r.channel: r for r in rep.rings}
    assert rings[2].ranks == [0, 1, 3, 2] and rings[7].ranks == [0, 2, 3, 1]
    assert [(e.a, e.b, e.status, e.line) for e in rings[2].edges] == [
        (1, 3, "inferred", 1), (2, 0, "inferred", 1)]
    closed = [f for f in _facts(rep, "ring") if f.value.startswith("channel 2:")]
    assert closed[0].rule == RULE_RING_LINKS and closed[0].line == 1


def test_ring_links_that_leave_two_ranks_out_or_fork_fix_no_ring():
    lines = ["h:1:1 [0] NCCL INFO Ring 00 : 5 -> 0 -> 1",  # 6 ranks: 2, 3, 4 unknown
             "h:1:1 [0] NCCL INFO Ring 01 : 2 -> 0 -> 1",
             "h:1:2 [1] NCCL INFO Ring 01 : 0 -> 1 -> 2",  # 0 -> 1 -> 2 -> 0: 3 of 6 ranks
             "h:1:1 [0] NCCL INFO Ring 02 : 3 -> 0 -> 1",
             "h:1:2 [1] NCCL INFO Ring 02 : 4 -> 1 -> 2",  # 1 after 0 and after 4: no ring
             "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 6 nNodes 1 localRanks 6 localRank 0"]
    (rep,) = build_reports(parse_nccl_log("\n".join(lines)))
    assert rep.rings == [] and not _facts(rep, "ring")


def test_net_connection_lines_are_seen_edges():
    # aws-samples/aws-efa-eks: both hosts print their NET send/receive lines
    (rep,) = build_reports(parse_nccl_log(read_text(corpus_file("efa-aws-efa-eks-16r-2.9.9.log"))))
    ring0 = next(r for r in rep.rings if r.channel == 0)
    assert [(e.a, e.b, e.status) for e in ring0.edges] == [(1, 8, "seen"), (9, 0, "seen")]
    assert all(e.line is not None for e in ring0.edges)
    assert not _facts(rep, "ring_cross_node_edges")  # nothing about them was inferred


def _warnings(text: str) -> list[str]:
    (rep,) = build_reports(parse_nccl_log(text, "x.log"))
    return [w.message for w in rep.warnings if "contradicts" in w.message]


def test_two_lines_showing_two_hosts_for_a_rank_warn_with_both_lines():
    text = "\n".join([
        "a:1:1 [1] NCCL INFO comm 0x1 rank 1 nranks 4 cudaDev 1 busId 1000 - Init START",
        "b:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 4 cudaDev 1 busId 1000 - Init COMPLETE"])
    (msg,) = _warnings(text)
    assert "rank 1: host: b (x.log:2) contradicts a (x.log:1)" in msg


def test_a_dev_prefix_against_a_printed_cudadev_warns():
    text = "\n".join([
        "h:1:1 [1] NCCL INFO comm 0x1 rank 1 nranks 4 cudaDev 1 busId 1000 - Init START",
        "h:1:1 [2] NCCL INFO Trees [0] -1/-1/-1->1->0"])
    (msg,) = _warnings(text)
    assert "rank 1: device: [2] prefix (x.log:2) contradicts 1 (x.log:1)" in msg


def test_a_net_line_between_ranks_of_one_host_warns():
    text = "\n".join([
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "h:1:1 [0] NCCL INFO Channel 00/02 :    0   1",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0"])
    (msg,) = _warnings(text)
    assert "ring edge 0->1: NET connection (x.log:3) contradicts hosts shared (x.log:1)" in msg


def test_a_host_block_clashing_with_a_read_host_warns_and_is_not_used():
    text = "\n".join([
        "a:1:1 [3] NCCL INFO comm 0x1 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        "b:2:2 [0] NCCL INFO comm 0x2 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"])
    (msg,) = _warnings(text)
    assert msg == ("rank 5: host: a (host block) (x.log:1) contradicts b (x.log:2); "
                   "no host block used")
