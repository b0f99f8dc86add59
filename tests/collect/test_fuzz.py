"""Mutated real logs never crash a collector, and every warning names a real line.

Mutations: truncation at any byte, interleaving the lines of two logs, deleting, duplicating
and garbling bytes (NUL, invalid UTF-8, random values). Inputs are the corpus' own files.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from icefabric.cli.app import app
from icefabric.collect.facts import artefact_facts
from icefabric.collect.hccl_log import parse_hccl_log, parse_hccl_logs
from icefabric.collect.hccl_sport import parse_multi_qp_src_port
from icefabric.collect.nccl_log import build_reports, parse_nccl_log, parse_nccl_logs
from icefabric.collect.nccl_tests import parse_nccl_tests, parse_nccl_tests_files
from icefabric.collect.nccl_topo import parse_nccl_graphs, parse_nccl_topo
from icefabric.collect.ranktable import parse_ranktable
from icefabric.collect.to_job import JobInferenceError, job_from_report

from .conftest import PROJECT_CORPUS, corpus_dir


def _corpus_texts() -> list[bytes]:
    out = []
    for d in (PROJECT_CORPUS, corpus_dir()):
        if d.is_dir():
            out += [p.read_bytes() for p in sorted(d.iterdir())
                    if p.suffix in (".log", ".xml") and p.stat().st_size < 200_000]
    return out


# The project corpus is always there, so these tests run on a clean clone too.
TEXTS = _corpus_texts()


def mutate(data: bytes, other: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    for op, a, b in ops:
        n = max(len(data), 1)
        i, j = sorted((a % n, b % n))
        if op == "truncate":
            data = data[:i]
        elif op == "delete":
            data = data[:i] + data[j:]
        elif op == "duplicate":
            data = data[:j] + data[i:j] + data[j:]
        elif op == "garble":
            rng = random.Random(a * 31 + b)
            junk = bytes(rng.choice(b"\x00\xff\xfe\x1b\x0c\x85:[]/ \n0123456789abcxyz")
                         for _ in range(1 + (b % 16)))
            data = data[:i] + junk + data[i + len(junk):]
        elif op == "interleave":
            mine, theirs = data.split(b"\n"), other.split(b"\n")
            rng = random.Random(a ^ b)
            out = []
            while mine or theirs:
                src = mine if (mine and (not theirs or rng.random() < 0.5)) else theirs
                out.append(src.pop(0))
            data = b"\n".join(out)
    return data


mutations = st.lists(
    st.tuples(st.sampled_from(["truncate", "delete", "duplicate", "garble", "interleave"]),
              st.integers(0, 1 << 20), st.integers(0, 1 << 20)),
    min_size=1, max_size=6)


def _line_count(data: bytes) -> int:
    text = data.decode("utf-8", errors="replace")
    return len(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def _check_warnings(warnings, data: bytes) -> None:
    nlines = _line_count(data)
    for w in warnings:
        if w.line is not None:
            assert 1 <= w.line <= nlines, (w, nlines)
            assert f"line {w.line}" in w.message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(0, 10_000), mutations)
def test_mutated_logs_never_crash(i, j, ops):
    data = mutate(TEXTS[i % len(TEXTS)], TEXTS[j % len(TEXTS)], ops)
    log = parse_nccl_log(data, source="fuzz")
    _check_warnings(log.warnings, data)
    for rep in build_reports(log):
        rep.model_dump_json()
        try:
            job_from_report(rep)
        except JobInferenceError:
            pass
    tests = parse_nccl_tests(data)
    _check_warnings(tests.warnings, data)
    topo = parse_nccl_topo(data)
    _check_warnings(topo.warnings, data)
    _check_warnings(parse_nccl_graphs(data).warnings, data)
    _check_warnings(parse_hccl_log(data).warnings, data)
    parse_ranktable(data)
    _, sport_warnings = parse_multi_qp_src_port(data)
    _check_warnings(sport_warnings, data)
    artefact_facts([("fuzz", data.decode("utf-8", errors="replace"))])


def test_garbled_structured_lines_are_reported_by_line():
    data = TEXTS[0].split(b"\n")
    # Cut every connection line of a real log in the middle: each must be named.
    idx = [k for k, line in enumerate(data) if b" via " in line][:5]
    for k in idx:
        data[k] = data[k][: data[k].index(b" via ") - 3]
    data = b"\n".join(data)
    log = parse_nccl_log(data)
    if idx:
        assert {k + 1 for k in idx} <= {w.line for w in log.warnings}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(0, 10_000), mutations)
def test_mutated_excerpts_read_together_never_crash(i, j, ops):
    a = mutate(TEXTS[i % len(TEXTS)], TEXTS[j % len(TEXTS)], ops)
    b = TEXTS[j % len(TEXTS)].decode("utf-8", errors="replace")
    files = [("a", a.decode("utf-8", errors="replace")), ("b", b)]
    for rep in build_reports(parse_nccl_logs(files)):
        for fact in rep.inferred:
            assert fact.source in (None, "a", "b") and fact.rule
        for ring in rep.rings:
            assert ring.cross_node_edges is None or all(
                a in ring.ranks and b in ring.ranks for a, b in ring.cross_node_edges)
    parse_nccl_tests_files(files)
    parse_hccl_logs(files)
    artefact_facts(files)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), mutations, st.sampled_from(
    ["nccl-log", "nccl-tests", "hccl-log", "ranktable", "topo"]))
def test_cli_exit_codes_on_mutated_logs(tmp_path, i, ops, reader):
    data = mutate(TEXTS[i % len(TEXTS)], TEXTS[(i + 1) % len(TEXTS)], ops)
    f = tmp_path / "in.log"
    f.write_bytes(data)
    res = CliRunner().invoke(app, ["collect", reader, str(f)])
    assert res.exit_code in (0, 2), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "None" not in res.stdout
    if res.exit_code == 2:
        assert "error:" in res.stderr
