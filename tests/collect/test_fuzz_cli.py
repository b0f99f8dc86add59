"""Garbage collector inputs through ``icefab`` never crash, hang or eat memory (issue 23).

The corpus: every input of the issue (a 300 KB log with a long ``Channel`` and a long
``NET/IB`` line, lines that made a regex quadratic, a 100,000-deep topology XML and JSON,
``nRanks 99999999999999999999``, a rank table with negative numbers and IP 999.1.1.1, a
log concatenating NCCL, RCCL, HCCL and nccl-tests output, an entity bomb and XXE) plus
mutants of the real logs, dumps and rank tables that hypothesis draws with a fixed seed.
Each file goes through the ``collect`` reader of its kind, the logs also through ``simulate
--from-log`` and ``compare nccl-tests``, in capped worker processes (:mod:`tests.fuzz`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ..fuzz import run_cases
from .conftest import PROJECT_CORPUS
from .test_fuzz import TEXTS, mutate, mutations
from .test_ranktable import V10

N_MUTANTS = 90
REF = PROJECT_CORPUS / "reference"
PRE = "host1:1234:1234 [0] NCCL INFO "


def _log(name: str) -> str:
    return (REF / name).read_text()


def issue_inputs() -> dict[str, str | bytes]:
    """The hostile files of issue 23, by file name."""
    nccl = _log("nccl-1538-roce-8nic-2.22.3.log")
    n = 8000  # characters: under the reader's line cap, where only linear regexes are fast
    slow = {  # one ~300 KB file per pattern that used to backtrack over a long run
        "conn": PRE + "Channel 00/0 : 0[0] -> 1[1] via " + " " * n + "x",
        "env": PRE + "NCCL_X set by environment to " + " " * n + "x",
        "network": PRE + "Using network " + " " * n + "x",
        "banner": "RCCL version : " + " " * n + "x",
        "prefix": "GPU/0 :GPU/" + "a" * n + "!",
        "digits": PRE + "x rank 1 nRanks " + "1" * n,
        "hccl": "x" * n + " HCCL function error",
    }
    out: dict[str, str | bytes] = {
        "long-lines.log": nccl + PRE + "Channel 00/02 :" + " 1" * 75000 + " x\n" + PRE
        + "NET/IB : Using" + " [0]mlx5_0:1/RoCE" * 8000 + " [RO]x; OOB\n",
        "nranks.log": nccl + PRE + "comm 0x55d0 rank 0 nRanks 99999999999999999999 nNodes 2 "
        "localRanks 8 localRank 0 MNNVL 0\n",
        "deep.xml": '<system version="1">' + '<pci busid="0000:01:00.0">' * 100_000
        + "</pci>" * 100_000 + "</system>\n",
        "deep.json": '{"version": "1.0", "server_list": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "negative.json": json.dumps({"version": "1.0", "server_count": "-2", "server_list": [
            {"server_id": "s0", "device": [
                {"device_id": "-3", "device_ip": "999.1.1.1", "rank_id": "-1"},
                {"device_id": "1", "device_ip": "999.1.1.1", "rank_id": "1"}]}]}),
        "mixed.log": "".join(_log(f) for f in (
            "nccl-1538-roce-8nic-2.22.3.log", "rccl-929-mi250x-16r-rccltests.log",
            "hccl-gpustack-2021-commroot-fail.log", "ncclt-oci-h100-roce-2.21.5.log")),
        "bomb.xml": '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {c} "{("&" + p + ";") * 10}">'
                  for p, c in zip("abcdefgh", "bcdefghi"))
        + ']><system version="1"><cpu numaid="&i;"/></system>',
        "xxe.xml": '<?xml version="1.0"?><!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        '<system version="1"><cpu numaid="&x;"/></system>',
        "empty.log": "",
        "nul.log": b"\x00" * 300_000,
    }
    out.update({f"slow-{k}.log": (line + "\n") * 37 for k, line in slow.items()})
    return out


def _sources() -> list[tuple[str, bytes]]:
    texts = [(".log" if not t.lstrip().startswith(b"<") else ".xml", t) for t in TEXTS]
    return texts + [(".json", json.dumps(V10).encode())]


def mutants(n: int) -> list[tuple[str, bytes]]:
    """``n`` distinct mutated corpus files (suffix, bytes), the same on every run."""
    src = _sources()
    found: dict[bytes, str] = {}

    @settings(max_examples=3 * n, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.integers(0, len(src) - 1), st.integers(0, len(src) - 1), mutations)
    def draw(i, j, ops):
        if len(found) < n:
            found.setdefault(mutate(src[i][1], src[j][1], ops), src[i][0])

    draw()
    return [(suffix, data) for data, suffix in found.items()]


def _commands(path: Path) -> list[list[str]]:
    kind = {".xml": "topo", ".json": "ranktable"}.get(path.suffix)
    if kind:
        return [["collect", kind, str(path)]]
    return [["collect", k, str(path)] for k in ("nccl-log", "nccl-tests", "hccl-log")]


@pytest.mark.slow
def test_garbage_inputs_exit_0_or_2_with_one_line(tmp_path: Path):
    files = []
    for name, data in issue_inputs().items():
        files.append(tmp_path / name)
        files[-1].write_bytes(data if isinstance(data, bytes) else data.encode())
    for k, (suffix, data) in enumerate(mutants(N_MUTANTS)):
        files.append(tmp_path / f"mutant{k:03d}{suffix}")
        files[-1].write_bytes(data)
    assert len(files) >= 100
    cases = [argv for f in files for argv in _commands(f)]
    replay = ["nranks.log", "mixed.log", "long-lines.log"] + [
        f.name for f in files[-N_MUTANTS::15] if f.suffix == ".log"]
    for name in replay:
        cases.append(["simulate", "homog-small", "--from-log", str(tmp_path / name),
                      "--sizes", "64K", "-p", "ecmp,ideal", "-n", "2", "-q"])
        cases.append(["compare", "nccl-tests", str(tmp_path / name), "-p", "ideal", "-n", "1"])
    outcomes = run_cases(cases)
    bad = [(o.argv, o.problem()) for o in outcomes if o.problem()]
    assert not bad, "\n\n".join(f"{argv}: {why}" for argv, why in bad[:5])
    by = {tuple(o.argv[:2]) + (Path(o.argv[-1]).name,): o for o in outcomes}
    # the issue's cases get the answer they should, in one line
    mixed = next(o for o in outcomes if o.argv[0] == "simulate" and "mixed.log" in o.argv[3])
    assert mixed.exit_code == 2 and "it holds the output of" in mixed.stderr
    assert "JSON nested deeper than" in by[("collect", "ranktable", "deep.json")].stderr
    assert "nested deeper than 64" in by[("collect", "topo", "deep.xml")].stderr
    assert "nRanks 99999999999999999999 is beyond" in by[("collect", "nccl-log",
                                                          "nranks.log")].stderr
    codes = [o.exit_code for o in outcomes]
    print(f"\ncollector fuzz: {len(files)} files, {len(cases)} runs ({len(replay)} logs also "
          f"through simulate --from-log and compare): exit 0 "
          f"{codes.count(0)}, exit 2 {codes.count(2)}, slowest "
          f"{max(o.seconds for o in outcomes):.1f} s, peak RSS "
          f"{max(o.peak_rss for o in outcomes) / 2**30:.2f} GiB")
