"""NCCL/RCCL log reader: real corpus logs plus lines built from NCCL's printf formats."""

from __future__ import annotations

from icefabric.collect._text import MAX_LINE_CHARS, read_text
from icefabric.collect.nccl_log import (
    build_reports,
    parse_nccl_log,
    parse_nccl_logs,
    rings_by_channel,
)

from .conftest import corpus_file

P = "host-a:100:200 [0] NCCL INFO "


def test_efa_log_gives_one_16_rank_communicator():
    log = parse_nccl_log(read_text(corpus_file("efa-aws-efa-eks-16r-2.9.9.log")))
    reports = build_reports(log)
    assert len(reports) == 1
    rep = reports[0]
    assert rep.nranks == 16 and rep.version == "2.9.9+cuda11.2" and rep.library == "nccl"
    assert len(rep.rings) == 8 and rep.nchannels == 8
    assert rep.rings[1].ranks == [0, 3, 10, 15, 14, 13, 12, 9, 8, 11, 2, 7, 6, 5, 4, 1]
    assert {r.host for r in rep.ranks} == {"nccl-tests-efa-16-worker-0",
                                          "nccl-tests-efa-16-worker-1"}
    assert rep.hosts() == ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"]
    net = rep.net_connections()
    assert net and all(c.net_plugin == "AWS Libfabric" and c.gdrdma for c in net)
    assert rep.network == "AWS Libfabric"
    assert not rep.warnings


def test_mpi_tags_and_foreign_lines_are_ignored_not_warned():
    log = parse_nccl_log(read_text(corpus_file("vllm-8447-ib-2r-2nodes-2.20.5.log")))
    assert not log.warnings
    assert rings_by_channel(log) == {0: [0, 1], 1: [0, 1]}
    assert set(log.version_hints) == {"2.20.5"}


def test_pxn_proxy_and_flags_follow_net_cc_format():
    # transport/net.cc: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d(%d)%s%s%s"
    log = parse_nccl_log(P + "Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/3(1)/GDRDMA/Shared")
    (c,) = log.connections
    assert (c["channel"], c["conn_index"], c["from"], c["to"]) == (2, 1, 0, 9)
    assert (c["net_plugin"], c["net_dev"], c["proxy_rank"], c["gdrdma"]) == ("IB", 3, 1, True)


def test_shm_and_p2p_kinds():
    log = parse_nccl_log(P + "Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
                         + P + "Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM/read")
    assert [c["kind"] for c in log.connections] == ["SHM", "P2P"]


def test_nccl_25_double_tree_and_24_tree():
    # init.cc (2.5): " [%d] %d/%d/%d->%d->%d|%d->%d->%d/%d/%d" treeUp | treeDn
    log = parse_nccl_log(P + "Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1"
                         " [1] -1/-1/-1->0->1|1->0->-1/-1/-1")
    assert [(t["channel"], t["tree"], t["down"], t["up"]) for t in log.trees] == [
        (0, 0, [1, -1, -1], -1), (0, 1, [1, -1, -1], -1),
        (1, 0, [-1, -1, -1], 1), (1, 1, [-1, -1, -1], 1)]
    log24 = parse_nccl_log(P + "Trees [0] -1->0->1/-1/-1")
    assert log24.trees[0]["up"] == -1 and log24.trees[0]["down"] == [1, -1, -1]


def test_ring_rebuilt_from_per_rank_ring_lines():
    lines = [f"h:1:{r} [{r}] NCCL INFO Ring 00 : {(r - 1) % 4} -> {r} -> {(r + 1) % 4}"
             for r in (2, 0, 3, 1)]
    log = parse_nccl_log("\n".join(lines))
    assert rings_by_channel(log) == {0: [0, 1, 2, 3]}


def test_glued_lines_from_two_processes_are_both_read():
    glued = (P + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC" +
             "host-a:101:201 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC")
    log = parse_nccl_log(glued)
    assert [(c["from"], c["to"]) for c in log.connections] == [(0, 1), (1, 0)]


def test_a_prefix_cut_short_and_glued_keeps_the_host_of_the_next():
    # modelscope/ms-swift#3934: "g183:161258:166018 [1] NCCg183:161260:166021 [3] NCCL INFO"
    log = parse_nccl_log("g183:1:2 [1] NCCg183:1:3 [3] NCCL INFO comm 0x1 rank 3 nRanks 16 "
                         "nNodes 2 localRanks 8 localRank 3 MNNVL 0\n"
                         "2024-01-01 12:00:00 gpu-g183:4:5 [0] NCCL INFO Channel 00/0 : "
                         "0[0] -> 1[1] via P2P/IPC")
    assert log.comm_topology_lines[0]["host"] == "g183"
    assert log.connections[0]["ref"].host == "gpu-g183"  # text before a lone prefix: kept


def test_truncated_ring_line_is_partial_with_warning_free_flag():
    log = parse_nccl_log(P + "Channel 00/02 :    0   1   2 ...")
    assert log.ring_orders[0]["complete"] is False
    rep = build_reports(log)[0]
    assert rep.rings[0].complete is False


def test_unreadable_structured_line_warns_with_line_number():
    log = parse_nccl_log("noise\n" + P + "Channel 00/0 : 0[0] -> ")
    assert len(log.warnings) == 1 and log.warnings[0].line == 2


def test_two_communicators_split_by_comm_id_and_thread():
    text = "\n".join([
        "h:1:10 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 commId 0x11 - Init START",
        "h:1:20 [0] NCCL INFO comm 0xb rank 0 nranks 4 cudaDev 0 commId 0x22 - Init START",
        "h:1:10 [0] NCCL INFO Channel 00/02 :    0   1",
        "h:1:20 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    ])
    reps = build_reports(parse_nccl_log(text))
    assert [(r.comm_id, r.nranks) for r in reps] == [("0x22", 4), ("0x11", 2)]
    assert reps[0].rings[0].ranks == [0, 1, 2, 3] and reps[1].rings[0].ranks == [0, 1]


def test_several_files_merge_in_order():
    a = read_text(corpus_file("nccl-952a-socket-16r-initstart.log"))
    b = read_text(corpus_file("nccl-952b-socket-16r-connections.log"))
    log = parse_nccl_logs([("a", a), ("b", b)])
    rep = build_reports(log)[0]
    assert rep.comm_id == "0xf03f81dc1a49efab" and rep.nranks == 16
    assert {c.via for c in rep.net_connections()} == {"NET/Socket/3"}


def test_rccl_banner_sets_library():
    log = parse_nccl_log(read_text(corpus_file("rccl-tests-163-mi50-socket-2.21.5.log")))
    rep = build_reports(log)[0]
    assert rep.library == "rccl" and rep.network == "Socket"


def test_bytes_input_with_invalid_utf8():
    log = parse_nccl_log(b"h:1:2 [0] NCCL INFO Using network IB\n\xff\xfe garbage\n")
    assert log.networks[0]["network"] == "IB"
    assert log.warnings and log.warnings[0].line == 2


def test_empty_input_is_not_usable():
    log = parse_nccl_log("")
    assert not log.usable() and build_reports(log) == []


def test_rccl_comm_suffix_is_stripped():
    # ROCm/rccl init.cc: INFO(NCCL_INIT, "Trees%s comm %p nRanks %02d busId %lx", ...)
    log = parse_nccl_log(
        "h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 comm 0x5566 nRanks 08 busId c1000\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC comm 0x5566 nRanks 08\n"
        "h:1:2 [0] NCCL INFO Ring 0 : 7 -> 0 -> 1 comm 0x5566 nRanks 08 busId c1000")
    assert not log.warnings
    assert log.trees[0]["up"] == -1 and log.connections[0]["via"] == "P2P/IPC"
    assert log.ring_ranks[0]["next"] == 1 and log.trees[0]["ref"].nranks == 8


def test_nic_detail_line_gives_speed():
    # net_ib init.cc: "NET/IB: [%d] %s:%s:%d/%s provider=%s speed=%d context=%p pciPath=%s ar=%d"
    log = parse_nccl_log(
        P + "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
        + P + "NET/IB: [0] mlx5_0:uverbs0:1/RoCE provider=Mlx5 speed=400000 context=0x1 "
              "pciPath=/sys/x ar=0")
    (hn,) = build_reports(log)[0].nics
    assert hn.nics[0].speed_mbps == 400000 and hn.relaxed_ordering is True


def test_nccl_tests_device_lines_place_every_rank():
    log = parse_nccl_log(read_text(corpus_file("ncclt-oci-h100-roce-2.21.5.log")))
    (rep,) = build_reports(log)
    assert len(rep.ranks) == 16 and rep.ranks[9].host == "instance-20240722-0955"


def test_per_rank_tree_and_ring_lines_of_nccl_27():
    # Lines from https://github.com/NVIDIA/nccl/issues/676 (NCCL 2.7, NCCL_DEBUG_SUBSYS=GRAPH)
    text = "\n".join([
        "gpu01:351578:352168 [0] NCCL INFO Tree 0 : -1 -> 0 -> 1/-1/-1",
        "gpu01:351578:352168 [0] NCCL INFO Tree 1 : 1 -> 0 -> -1/-1/-1",
        "gpu01:351578:352168 [0] NCCL INFO Channel 00/02 :    0   1",
        "gpu01:351578:352168 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1",
        "gpu02:35637:35723 [0] NCCL INFO Tree 0 : 0 -> 1 -> -1/-1/-1",
        "gpu02:35637:35723 [0] NCCL INFO Ring 00 : 0 -> 1 -> 0",
    ])
    log = parse_nccl_log(text)
    assert not log.warnings and len(log.tree_ranks) == 3
    rep = build_reports(log)[0]
    assert [(t.rank, t.channel, t.up) for t in rep.trees] == [(0, 0, -1), (0, 1, 1), (1, 0, 0)]
    assert {r.rank: r.host for r in rep.ranks} == {0: "gpu01", 1: "gpu02"}


def test_net_connection_names_its_nic_and_link_layer():
    text = "\n".join([
        "n1:5:6 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_3:1/RoCE [RO]; OOB e:1<0>",
        "n1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA",
    ])
    rep = build_reports(parse_nccl_log(text))[0]
    (c,) = rep.connections
    assert (c.nic, c.link, c.host) == ("mlx5_3", "RoCE", "n1")
    assert rep.ranks[0].nic == "mlx5_3"


def test_warn_lines_with_source_location_are_read():
    # debug.cc: "%s:%d:%d [%d] %s:%d NCCL WARN %s" (NVIDIA/nccl#1814 title line)
    log = parse_nccl_log("h:1:2 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                         "from peer 10.0.0.1<55921> with status=12")
    assert not log.warnings and log.nccl_warn_lines[0]["ref"].dev == 3


def test_sharp_link_layer_and_rail():
    log = parse_nccl_log(P + "NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1:2/IB ;"
                         " OOB ib0:1.2.3.4<0>")
    nics = log.net_ib[0]["nics"]
    assert [(n["name"], n["link"], n["rail"]) for n in nics] == [
        ("mlx5_0", "IB/SHARP", None), ("mlx5_1", "IB", 2)]


def test_ansi_colour_codes_are_not_damage():
    log = parse_nccl_log("\x1b[32mINFO\x1b[0m vllm\n" + P + "Using network IB")
    assert not log.warnings and log.networks[0]["network"] == "IB"


def test_destroy_lines_are_not_warnings():
    log = parse_nccl_log(P + "comm 0x55d0 rank 3 nranks 8 cudaDev 3 busId 1b000 - Destroy COMPLETE")
    assert not log.warnings and not log.init_lines


def test_nccl_24_lines_without_device_brackets():
    # Lines from https://github.com/NVIDIA/nccl/issues/226 (NCCL 2.4, 64 ranks over sockets)
    text = "\n".join([
        "ip-172-31-0-119:45328:45333 [0] NCCL INFO Ring 00 : 35 -> 34 [send] via NET/Socket/0",
        "ip-172-31-5-237:45266:45271 [0] NCCL INFO Trees [0] 22->23->-1/-1/-1",
        "ip-172-31-7-247:45553:45558 [0] NCCL INFO comm 0x7efe60002250 rank 15 nranks 64 "
        "cudaDev 0 nvmlDev 0 - Init COMPLETE",
    ])
    log = parse_nccl_log(text)
    assert not log.warnings
    (c,) = log.connections
    assert (c["from"], c["to"], c["from_dev"], c["net_plugin"], c["net_dev"]) == (
        35, 34, None, "Socket", 0)
    assert log.trees[0]["rank"] == 23 and log.trees[0]["up"] == 22
    rep = build_reports(log)[0]
    assert rep.nranks == 64 and {r.rank: r.host for r in rep.ranks}[35] == "ip-172-31-0-119"


def test_lines_stripped_of_their_prefix_are_still_read():
    # Excerpt style of https://github.com/NVIDIA/nccl/issues/527 (prefix removed by the poster)
    text = "\n".join([
        "NCCL INFO Channel 00 : 5[901d0] -> 6[a01c0] via P2P/IPC/read",
        "NCCL INFO Channel 01 : 9[101d0] -> 0[101c0] [receive] via NET/AWS Libfabric/0/GDRDMA",
        "NCCL INFO comm 0x7f3678000f60 rank 4 nranks 16 cudaDev 4 busId 901c0 - Init COMPLETE",
    ])
    log = parse_nccl_log(text)
    assert not log.warnings and len(log.connections) == 2 and log.init_lines[0]["rank"] == 4
    rep = build_reports(log)[0]
    assert rep.nranks == 16 and {r.rank: r.bus_id for r in rep.ranks}[6] == "a01c0"


def test_qp_creation_lines_are_collected():
    # printf formats of src/transport/net_ib/connect.cc (NCCL_DEBUG_SUBSYS=NET)
    text = "\n".join([
        P + "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        P + "NET/IB: ncclIbConnect: NCCL Dev 0 IbDev 0 Port 1 qp_num 4711 mtu 5 GID 3 "
            "(80FE/A8C00A00FFFF0000) ctsFifoRkey=0x1 ctsFifoLkey=0x2",
        P + "NET/IB: ncclIbReceiverQpsCreateToRts: QP created: port=1 dev=0 devName=mlx5_0 "
            "ndevs=1 nmdevs=1 qp_num=815 pkey=0 pd=0x5 oooRq=0",
        P + "NET/IB: ncclIbConnect: IbDev 0 Port 1 qp_num 4711 query_ece={supported=1, "
            "vendor_id=0x15b3, options=0x30000002, comp_mask=0x0}",
    ])
    log = parse_nccl_log(text)
    assert not log.warnings
    rep = build_reports(log)[0]
    assert [(q.qp_num, q.role, q.link, q.gid_index, q.ib_dev) for q in rep.qps] == [
        (4711, "send", "RoCE", 3, 0), (815, "recv", None, None, 0)]
    assert rep.qps[1].dev_name == "mlx5_0" and rep.qps[0].host == "host-a"


def test_inline_rccl_version_line():
    log = parse_nccl_log(P + "RCCL version 2.18.3+hip6.1 HEAD:0f4ab1a")
    rep = build_reports(log)[0]
    assert rep.library == "rccl" and rep.version == "2.18.3+hip6.1" and not log.versions


def test_nccl_23_ring_order_lines():
    log = parse_nccl_log(P + "Ring 00 :    0   1   2   3\n" + P + "Ring 01 :    0   3   2   1")
    assert rings_by_channel(log) == {0: [0, 1, 2, 3], 1: [0, 3, 2, 1]} and not log.warnings


def test_old_init_complete_without_cudadev():
    log = parse_nccl_log(P + "comm 0x7f12 rank 3 nranks 8 - COMPLETE")
    (rec,) = log.init_lines
    assert (rec["rank"], rec["nranks"], rec["cudaDev"], rec["phase"]) == (3, 8, None, "COMPLETE")
    assert build_reports(log)[0].nranks == 8


def test_a_line_past_the_cap_is_skipped_with_a_warning_naming_it():
    pre = "h:1:1 [0] NCCL INFO "
    text = (f"{pre}Channel 00/02 :" + " 1" * MAX_LINE_CHARS + "\n"
            f"{pre}comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n")
    log = parse_nccl_log(text, "big.log")
    assert not log.ring_orders and len(log.comm_topology_lines) == 1
    assert [w.message for w in log.warnings] == [
        f"line 1: line of {len(text.splitlines()[0]):,} characters, more than the 8,192 any "
        "CCL prints; skipped"]


def test_rank_counts_beyond_any_job_are_dropped_before_use():
    pre = "h:1:1 [0] NCCL INFO "
    log = parse_nccl_log(f"{pre}comm 0x1 rank 0 nRanks 99999999999999999999 nNodes 2 "
                         f"localRanks 8 localRank 0 MNNVL 0\n{pre}Channel 00/02 : 0 1\n")
    assert not log.comm_topology_lines and log.ring_orders[0]["ranks"] == [0, 1]
    assert log.warnings[0].message == ("line 1: nRanks 99999999999999999999 is beyond any job "
                                       "(1,048,576); line ignored")


def test_patterns_ending_a_line_read_what_they_read_before():
    """The linear forms of the end-of-line patterns (no lazy group before ``\\s*$``)."""
    pre = "h:1:1 [0] NCCL INFO "
    log = parse_nccl_log(f"{pre}Channel 00/0 : 0[0] -> 1[1] via NET/IB/0   \n"
                         f"{pre}NCCL_IB_HCA set by environment to mlx5_0.  \n"
                         f"{pre}Using network IB \n")
    assert log.connections[0]["via"] == "NET/IB/0"
    assert log.env == {"NCCL_IB_HCA": "mlx5_0"}
    assert log.networks[0]["network"] == "IB"
