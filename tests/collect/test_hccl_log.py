"""HCCL plog reader on the real gpustack excerpt."""

from __future__ import annotations

from icefabric.collect._text import read_text
from icefabric.collect.hccl_log import parse_hccl_log

from .conftest import corpus_file, project_file


def test_plog_error_and_rank_facts():
    log = parse_hccl_log(read_text(corpus_file("hccl-gpustack-2021-commroot-fail.log")))
    (err,) = log.plog_errors()
    assert err["errNo"] == "0x0000000005000002" and err["tags"] == ["Init", "CommRootInfoConfig"]
    assert (log.rank, log.rank_size) == (1, 4)


def test_rank_size_before_rank():
    log = parse_hccl_log("[INFO] HCCL(1,python):2025-01-01-00:00:00.000.000 [a.cc:1][2]"
                         "rankSize[8], rank[3]")
    assert (log.rank, log.rank_size) == (3, 8) and log.records[0]["level"] == "INFO"


def test_torch_npu_transport_error_gives_error_and_link():
    # https://github.com/vllm-project/vllm-ascend/issues/3162
    log = parse_hccl_log(read_text(project_file("hccl-vllm-ascend-3162-transport-init.log")))
    (err,) = log.errors
    assert (err.kind, err.code, err.rank, err.pid) == ("cann", "EI0009", 1, 2225827)
    assert err.time == "2025-09-24-20:59:48.119.066"
    (link,) = log.links
    assert (link.rank, link.local_ip, link.remote_rank, link.remote_ip, link.code) == (
        1, "172.16.0.114", 0, "172.16.0.114", "EI0009")
    assert not log.warnings and log.usable()


def test_function_error_header_and_cann_message_of_one_failure():
    # https://github.com/vllm-project/vllm-ascend/issues/486
    log = parse_hccl_log(read_text(project_file("hccl-vllm-ascend-486-socket-timeout.log")))
    fn, header, cann = log.errors
    assert (fn.kind, fn.function, fn.code, fn.name) == ("function", "HcclAllreduce", "6", None)
    assert (header.code, header.pid, header.device, header.rank) == ("ERR01100", 1292363, 1, 1)
    assert (cann.code, cann.line) == ("EI0006", 9) and cann.message.startswith("Getting socket")


def test_hccl_function_error_names_its_hcclresult():
    log = parse_hccl_log(read_text(project_file("hccl-vllm-ascend-672-init-config.log")))
    assert log.errors[0].name == "HCCL_E_RUNTIME"  # 15 in CANN hccl_types.h
    # "EE9999: Inner Error!" prints no PID: it is the header's (the line above), like its rank
    assert [(e.pid, e.rank, e.device) for e in log.errors[2:]] == [(540989, 1, 0)] * 2


def test_links_in_vllm_worker_lines():
    log = parse_hccl_log(read_text(project_file("hccl-vllm-ascend-2643-transport-links.log")))
    assert [(k.rank, k.remote_rank, k.pid) for k in log.links] == [
        (7, 14, 50935), (7, 15, 50935), (7, 11, 50935), (7, 12, 50935)]
    assert not log.errors  # the code line is outside the excerpt


def test_newer_cann_message_form_and_no_pid_form():
    # https://github.com/vllm-project/vllm-ascend/issues/5461 and hiyouga/LlamaFactory#3839
    log = parse_hccl_log(
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket "
        "times out. Reason: 1. The remote does not initiate a connect request.\n"
        "EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process.")
    a, b = log.errors
    assert (a.code, a.name, a.pid, a.time) == ("EI0006", "Get_Socket_Timeout", 749,
                                               "2025-12-29-03:16:15.787.356")
    assert (b.code, b.pid, b.time) == ("EJ0001", None, "2024-05-21-11:57:54.167.645")


def test_cut_link_line_is_a_warning_with_its_line():
    text = read_text(project_file("hccl-vllm-ascend-3162-transport-init.log"))
    cut = text.split("remote_ip_addr")[0]
    log = parse_hccl_log("noise\n" + cut, source="cut.log")
    assert not log.links and log.errors[0].code == "EI0009"  # the error part is still read
    (w,) = log.warnings
    assert (w.line, w.source) == (2, "cut.log") and "link record" in w.message
    log = parse_hccl_log("(W pid=1) ERROR 01-01 00:00:00 [a.py:1] Transport init error. "
                         "createLink para:rank[1]-localUserrank[1]-loc")
    assert log.warnings[0].line == 1 and not log.links


def test_several_files_keep_their_names():
    from icefabric.collect.hccl_log import parse_hccl_logs

    names = ["hccl-vllm-ascend-486-socket-timeout.log", "hccl-vllm-ascend-3162-transport-init.log"]
    log = parse_hccl_logs([(n, read_text(project_file(n))) for n in names])
    assert [e.source for e in log.errors] == [names[0]] * 3 + [names[1]]
    assert log.to_dict()["links"][0]["source"] == names[1]


def test_transport_error_gives_rank_code_reason_and_solution():
    # https://github.com/vllm-project/vllm-ascend/issues/3162: "[rank1]: EI0009: [PID: n] <time>
    # Transport init error. Reason: ..." then "[rank1]:         Solution: ..."
    log = parse_hccl_log(read_text(project_file("hccl-vllm-ascend-3162-transport-init.log")))
    (err,) = log.errors
    assert (err.rank, err.code) == (1, "EI0009")
    assert err.reason.startswith("[Create][DestLink]Create Dest error! createLink para:rank[1]")
    assert err.solution.startswith("Check other NPUs that are not reporting errors")


def test_cann_message_takes_rank_device_and_pid_of_the_header_above_it():
    # hiyouga/LlamaFactory#3839: the EJ0001 line prints no PID and no [rankN]: prefix
    log = parse_hccl_log(read_text(project_file("hccl-llamafactory-3839-ej0001.log")))
    header, cann = log.errors
    assert (header.code, header.rank, header.device, header.pid) == ("ERR02200", 3, 3, 927000)
    assert (cann.code, cann.rank, cann.device, cann.pid) == ("EJ0001", 3, 3, 927000)
    assert cann.reason == "Maybe the last training process is running."
    assert cann.solution == "Wait for 10s after killing the last training process and try again."


def test_a_solution_line_away_from_its_message_or_a_header_of_another_pid_is_not_taken():
    log = parse_hccl_log("\n".join([
        "[ERROR] 2024-05-21-11:57:54 (PID:1, Device:3, RankID:3) ERR02200 DIST call failed.",
        "EJ0001: [PID: 2] 2024-05-21-11:57:54.167.645 Failed. Reason: busy.",
        "unrelated line",
        "        Solution: Wait."]))
    cann = log.errors[1]
    assert (cann.rank, cann.pid, cann.solution) == (None, 2, None)


def test_hccl_report_carries_errors_and_the_ranks_they_name():
    from icefabric.collect.hccl_log import hccl_report

    rep = hccl_report(parse_hccl_log(read_text(project_file("hccl-verl-332-ej0001.log")),
                                     "verl.log"))
    assert rep.library == "hccl" and [(r.rank, r.device, r.pid) for r in rep.ranks] == [
        (2, 0, 468348)]
    assert [e.code for e in rep.errors] == ["7", "ERR02200", "EJ0001"]
    assert rep.errors[2].solution.startswith("Wait for 10s")
