"""HCCL plog reader on the real gpustack excerpt."""

from __future__ import annotations

from icefabric.collect._text import read_text
from icefabric.collect.hccl_log import parse_hccl_log

from .conftest import corpus_file


def test_plog_error_and_rank_facts():
    log = parse_hccl_log(read_text(corpus_file("hccl-gpustack-2021-commroot-fail.log")))
    (err,) = log.plog_errors()
    assert err["errNo"] == "0x0000000005000002" and err["tags"] == ["Init", "CommRootInfoConfig"]
    assert (log.rank, log.rank_size) == (1, 4)


def test_rank_size_before_rank():
    log = parse_hccl_log("[INFO] HCCL(1,python):2025-01-01-00:00:00.000.000 [a.cc:1][2]"
                         "rankSize[8], rank[3]")
    assert (log.rank, log.rank_size) == (3, 8) and log.records[0]["level"] == "INFO"
