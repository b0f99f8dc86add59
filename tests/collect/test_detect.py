"""Which reader fits an artefact, on real files of each kind."""

from __future__ import annotations

import pytest

from icefabric.collect._text import read_text
from icefabric.collect.detect import ccl_sections, mixed_sections, readers_for

from .conftest import PROJECT_CORPUS, corpus_file, project_file


@pytest.mark.parametrize(("path", "expected"), [
    ("nccl-1412a-16r-onehost-ringdump.log", ["nccl-log"]),
    ("rccl-1026b-mi250x-8r-connections.log", ["nccl-log"]),
    ("hccl-vllm-ascend-3162-transport-init.log", ["hccl-log"]),
])
def test_project_corpus_kinds(path, expected):
    assert readers_for(read_text(project_file(path))) == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("ncclt-oci-h100-roce-2.21.5.log", ["nccl-tests"]),  # device list only: not an NCCL log
    ("efa-aws-efa-eks-16r-2.9.9.log", ["nccl-log", "nccl-tests"]),
    ("xml-ncclt-256-h200-vm-topo.xml", ["topo"]),
    ("hccl-gpustack-2021-commroot-fail.log", ["hccl-log"]),
])
def test_public_corpus_kinds(path, expected):
    assert readers_for(read_text(corpus_file(path))) == expected


def test_rank_table_and_nothing():
    table = '{"version": "1.0", "server_list": [{"server_id": "s", "device": ' \
            '[{"device_id": "0", "rank_id": "0"}]}]}'
    assert readers_for(table) == ["ranktable"]
    assert readers_for("hello\nworld\n") == []


def test_a_file_of_several_libraries_outputs_is_named_section_by_section():
    ref = PROJECT_CORPUS / "reference"
    parts = [(ref / f).read_text() for f in ("nccl-tests-185-roce-h100-2.19.3.log",
                                             "rccl-929-mi250x-16r-rccltests.log",
                                             "hccl-gpustack-2021-commroot-fail.log")]
    n1, n2 = parts[0].count("\n"), parts[1].count("\n")
    rccl, hccl = ccl_sections(parts[1])["RCCL"], ccl_sections(parts[2])["HCCL"]
    assert ccl_sections(parts[0]) == {"NCCL 2.19.3": 5}
    assert mixed_sections("".join(parts)) == (
        f"it holds the output of NCCL 2.19.3 (line 5), RCCL (line {n1 + rccl}) and HCCL (line "
        f"{n1 + n2 + hccl}); give each job's log in a file of its own")
    assert mixed_sections(parts[0]) is None and mixed_sections(parts[2]) is None
