"""nccl-tests output reader on real outputs of three generations of the table layout."""

from __future__ import annotations

from icefabric.collect._text import read_text
from icefabric.collect.nccl_tests import measured_table, parse_nccl_tests, parse_row

from .conftest import corpus_file


def test_new_layout_with_header_devices_and_summary():
    out = parse_nccl_tests(read_text(corpus_file("ncclt-oci-h100-roce-2.21.5.log")))
    run = out.first_with_rows()
    assert run is not None and len(run.rows) == 5 and not out.warnings
    assert run.rows[-1]["size"] == 17179869184
    assert run.rows[-1]["in_place"]["busbw_GBps"] == 464.79
    assert run.avg_bus_bandwidth_GBps == 458.452
    assert run.out_of_bounds == {"count": 0, "status": "OK"}
    m = measured_table(run)
    assert m["collective"] == "all_reduce" and m["nranks"] == 16 and len(m["hosts"]) == 2


def test_oldest_layout_without_redop_and_root():
    out = parse_nccl_tests(read_text(corpus_file("ncclt-340-2.6.4-oldformat.log")))
    run = out.first_with_rows()
    assert len(run.rows) == 12 and "redop" not in run.rows[0]
    assert run.rows[0]["out_of_place"]["error"] == "0e+00"
    assert out.runs[1].command.startswith("./broadcast_perf")


def test_row_layout_inferred_without_header():
    row = parse_row("  8  2  float  sum  -1  25.06  0.00  0.00  0  25.95  0.00  0.00  0")
    assert row["root"] == -1 and row["redop"] == "sum" and row["in_place"]["wrong"] == 0
    assert parse_row("  8  2  float  sum  25.06") is None


def test_cut_row_becomes_warning_with_line():
    out = parse_nccl_tests("#  size count type\n       8   2   float  sum  -1  25.0  0.0\n")
    assert not out.usable()
    assert out.warnings[0].line == 2


def test_not_available_half():
    row = parse_row("  1024  256  float  none  -1  5.0  0.2  0.2  0  N/A  N/A  N/A  N/A")
    assert row["out_of_place"]["busbw_GBps"] == 0.2 and row["in_place"]["time_us"] is None


def test_version_header_decodes_library_code():
    out = parse_nccl_tests(read_text(corpus_file("ncclt-dgxspark-gb10-roce.log")))
    run = out.first_with_rows()
    assert run.version == "2.20.0" and run.nccl_library == "2.31.2"
    assert run.collective == "all_reduce_perf" and len(run.devices) == 2


def test_excerpts_of_one_run_continue_it_with_its_layout():
    from icefabric.collect.nccl_tests import parse_nccl_tests_files

    text = read_text(corpus_file("rccl-929-mi250x-16r-rccltests.log"))
    lines = text.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.lstrip().startswith("64 "))
    out = parse_nccl_tests_files([("a", "".join(lines[:cut])), ("b", "".join(lines[cut:]))])
    (run,) = [r for r in out.runs if r.rows]
    whole = parse_nccl_tests(text).first_with_rows()
    assert run.rows == whole.rows and run.printed_rows == whole.printed_rows
    assert run.rows[3]["out_of_place"]["error"] == "1e-07"  # the header's "error" layout held


def test_a_file_starting_with_a_header_is_a_new_run():
    from icefabric.collect.nccl_tests import parse_nccl_tests_files

    text = read_text(corpus_file("ncclt-oci-h100-roce-2.21.5.log"))
    out = parse_nccl_tests_files([("a", text), ("b", text)])
    assert [len(r.rows) for r in out.runs] == [5, 5]
