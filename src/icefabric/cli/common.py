"""Shared CLI helpers: consoles, error exits, progress."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2):
    """Print one clear line to stderr and exit (bad input is never a traceback)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def progress_bar(enabled: bool, description: str):
    """A rich progress bar (only on a TTY); yields ``update(done, total, label)``."""
    if not enabled or not sys.stderr.isatty():
        yield lambda *a: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[label]}"),
                  TimeElapsedColumn(), console=err_console, transient=True) as prog:
        task = prog.add_task(description, total=None, label="")

        def update(done, total, label=""):
            prog.update(task, completed=done, total=total, label=label)

        yield update
