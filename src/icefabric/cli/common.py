"""Shared CLI helpers: consoles, error exits, progress."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2):
    """Print one clear line to stderr and exit (bad input is never a traceback)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def note_fluid_compile(quiet: bool) -> None:
    """One stderr line when the fluid engine's compiled kernel is not in numba's cache yet:
    the first run after an install compiles it once (BENCHMARKS.md, "Cold start")."""
    from icefabric.engine import fluid_kernel

    _note_compile(quiet, "the fluid engine's kernel", fluid_kernel.kernel_cached, 30)


def note_draws_compile(quiet: bool) -> None:
    """The same for the batched flow engine's kernel, which runs ECMP draws
    (BENCHMARKS.md, "ECMP draws")."""
    from icefabric.engine import batch_kernel

    _note_compile(quiet, "the kernel that runs the draws", batch_kernel.kernel_cached, 20)


def _note_compile(quiet: bool, what: str, cached, seconds: int) -> None:
    """``seconds``: the kernel's first-run compilation, measured with an empty
    ``NUMBA_CACHE_DIR`` (BENCHMARKS.md: the fluid kernel 27-37 s of CPU depending on the
    machine's load, the draws kernel ~20 s)."""
    if not quiet and not cached():
        err_console.print(f"note: compiling {what} once (about {seconds} s; later runs load "
                          "it from numba's cache)", highlight=False)


#: Without a terminal, a plain progress line at most this often (seconds).
PLAIN_EVERY_S = 2.0


@contextmanager
def progress_bar(enabled: bool, description: str):
    """Progress of a run of many steps on stderr, with the time left; yields
    ``update(done, total, label)``. On a terminal a rich bar; otherwise (a pipe, a CI log)
    plain lines: one when the run starts, then at most one every :data:`PLAIN_EVERY_S`
    seconds, and one when it ends."""
    if not enabled:
        yield lambda *a: None
        return
    if not sys.stderr.isatty():
        yield _plain_progress(description)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[label]}"), TimeElapsedColumn(),
                  TextColumn("left"), TimeRemainingColumn(), console=err_console,
                  transient=True) as prog:
        task = prog.add_task(description, total=None, label="")

        def update(done, total, label=""):
            prog.update(task, completed=done, total=total, label=label)

        yield update


def _plain_progress(description: str):
    t0 = time.perf_counter()
    last = [-float("inf")]

    def update(done, total, label=""):
        now = time.perf_counter() - t0
        if done < total and done > 0 and now - last[0] < PLAIN_EVERY_S:
            return
        last[0] = now
        if done >= total:
            msg = f"{description}: {total}/{total} done in {now:.1f} s"
        else:
            left = f", about {now / done * (total - done):.0f} s left" if done else ""
            msg = f"{description}: {done}/{total} next {label}; {now:.1f} s{left}"
        print(msg, file=sys.stderr, flush=True)

    return update


def command_line() -> str:
    """The command as typed (``icefab ...``), for result provenance."""
    import shlex

    return shlex.join(["icefab", *sys.argv[1:]])


def parse_formats(text: str) -> tuple[str, ...]:
    """``png,svg`` -> ("png", "svg"); an unknown format is a clear error."""
    from icefabric.reports.figures import FORMATS

    fmts = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        fail(f"--format: unknown figure format {', '.join(bad) or repr(text)}; use "
             f"{', '.join(FORMATS)}")
    return fmts


def require(extra: str, *modules: str) -> None:
    """Fail with the install command when an optional dependency of a command is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        fail(f"this command needs {', '.join(missing)}: pip install 'ice-fabric[{extra}]'")
