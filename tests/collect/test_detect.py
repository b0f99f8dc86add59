"""Which reader fits an artefact, on real files of each kind."""

from __future__ import annotations

import pytest

from icefabric.collect._text import read_text
from icefabric.collect.detect import readers_for

from .conftest import corpus_file, project_file


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
