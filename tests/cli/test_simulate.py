"""``icefab simulate`` as a user runs it: piped, at 80 columns, with progress on stderr."""

import os
import re
import subprocess
import sys

import pytest

POLICIES = ("ecmp", "ecmp-tuned", "ecmp-multiqp", "static-disjoint", "spray", "ice", "ideal")
COLLECTIVES = ("all_reduce", "all_gather", "alltoall")


def _run(columns: str | None):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    # stdout and stderr are pipes: exactly `icefab simulate | cat` (no terminal)
    return subprocess.run([sys.executable, "-m", "icefabric", "simulate", "--sizes", "1M,1G"],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("columns", [None, "80"])
def test_piped_and_80_columns_show_every_name_in_full(columns):
    r = _run(columns)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "…" not in out and "Traceback" not in r.stderr
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    legend = dict(re.findall(r"(\w+) = ([\w-]+)", out.split("short names:")[-1]))
    for p in POLICIES:
        assert re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", out) or p in legend.values(), p
    for c in COLLECTIVES:
        assert re.search(rf"· {c} ·", out), c
    # summary first, then the per-size tables
    assert out.index("Summary at 1GiB") < out.index("mixed · all_reduce · cross-hier")
    # progress went to stderr as plain lines, with the time left, never to stdout
    # 7 policies x 2 sizes, then the draws of the 4 randomised ones at each size
    assert re.search(r"simulating hetero-default: 0/22 next ecmp @ 1MiB", r.stderr)
    assert re.search(r"simulating hetero-default: 22/22 done in [\d.]+ s", r.stderr)
    assert "simulating" not in out
    # the draws note prints its brackets (not read as console markup)
    assert re.search(r"median\s+\[p10-p90\]\s+over\s+100\s+draws", out), out[-400:]


@pytest.mark.parametrize("module, note, says", [
    ("fluid_kernel", "note_fluid_compile",
     "compiling the fluid engine's kernel once (about 30 s;"),
    ("batch_kernel", "note_draws_compile",
     "compiling the kernel that runs the draws once (about 20 s;"),
])
def test_a_cold_kernel_cache_is_announced(module, note, says, tmp_path, monkeypatch, capsys):
    """The first fluid run, or run with ECMP draws, after an install compiles a numba
    kernel (BENCHMARKS.md "Cold start", "ECMP draws"): an empty cache is detected without
    compiling, and the CLI says so once (not with --quiet)."""
    import importlib

    from icefabric.cli import common

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    code = f"from icefabric.engine.{module} import kernel_cached; print(kernel_cached())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.stdout.strip() == "False", f"an empty cache counted as warm: {r.stderr}"
    monkeypatch.setattr(importlib.import_module(f"icefabric.engine.{module}"),
                        "kernel_cached", lambda: False)
    getattr(common, note)(quiet=False)
    assert says in capsys.readouterr().err
    getattr(common, note)(quiet=True)
    assert capsys.readouterr().err == "", "--quiet must silence the note"


def test_sizes_from_8_bytes_print_tables():
    from typer.testing import CliRunner

    from icefabric.cli.app import app

    r = CliRunner().invoke(app, ["simulate", "homog-small", "--sizes", "8,1K", "-p",
                                 "ecmp,spray,ideal", "-n", "3", "-q"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    table = r.stdout[r.stdout.index("32 ranks: busbw GB/s"):].splitlines()
    assert [line.split()[:2] for line in table[3:5]] == [["8B", "0.0"], ["1KiB", "0.0"]]


@pytest.mark.parametrize("sizes, says", [("0", "message size '0' must be between 1 B and "
                                                "1TiB"),
                                         ("-8", "cannot parse size '-8'"),
                                         ("inf", "cannot parse size 'inf'")])
def test_sizes_outside_the_domain_are_one_line(sizes, says):
    from typer.testing import CliRunner

    from icefabric.cli.app import app

    r = CliRunner().invoke(app, ["simulate", "homog-small", "--sizes", sizes, "-q"])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith(f"error: {says}"), r.stderr


def test_a_negative_seed_is_a_usage_error_not_a_traceback():
    from typer.testing import CliRunner

    from icefabric.cli.app import app

    r = CliRunner().invoke(app, ["simulate", "homog-small", "--seed", "-1", "-q"])
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--seed'" in r.stderr and "Traceback" not in r.stderr
