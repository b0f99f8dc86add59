"""Run ``icefab`` command lines on hostile input in capped worker processes (issue 23).

Each case is one command line. Starting a process per case would cost ~2 s of imports, so
cases run in batches inside worker processes (``python tests/fuzz.py``, the CLI invoked
in-process through typer's runner), two workers at a time (the CI machine has two cores).
The caps are enforced from outside, so a hang in C code (a regex, numpy) cannot hide:

* memory: the worker's address space is capped at :data:`MEMORY_CAP` (``RLIMIT_AS``), and
  its peak RSS is reported with every case;
* time: the parent kills a worker whose case runs past :data:`TIME_CAP_S` (that case is
  recorded as past the cap) and starts a fresh worker on the cases left.

The verdict on a case (:meth:`Outcome.problem`): exit 0, or exit 2 whose stderr holds one
``error:`` line (``warning:`` lines may precede it); never a traceback, never past a cap.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

TIME_CAP_S = 60.0
MEMORY_CAP = 2 << 30


@dataclass
class Outcome:
    """What one command line did."""

    argv: list[str]
    exit_code: int | None = None  # None: killed at the time cap or the worker died
    stderr: str = ""
    traceback: str = ""
    seconds: float = 0.0
    peak_rss: int = 0  # bytes, of the worker process so far
    killed: str = ""  # why the parent stopped the worker on this case

    def problem(self) -> str | None:
        """Why this outcome breaks the rule, or None."""
        if self.killed:
            return self.killed
        if self.traceback:
            return f"traceback:\n{self.traceback}"
        if self.seconds > TIME_CAP_S or self.peak_rss > MEMORY_CAP:
            return f"past a cap: {self.seconds:.1f} s, {self.peak_rss / 2**30:.2f} GiB"
        if self.exit_code == 0:
            return None
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        errors = [x for x in lines if not x.startswith("warning: ")]
        if self.exit_code == 2 and len(errors) == 1 and errors[0].startswith("error: "):
            return None
        return f"exit {self.exit_code} with stderr {self.stderr[-500:]!r}"


def _limit_memory() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _run_worker(cases: list[list[str]], env: dict[str, str]) -> list[Outcome]:
    """Run ``cases`` in one worker process at a time, restarting it after a kill."""
    out = [Outcome(argv) for argv in cases]
    todo = list(range(len(cases)))
    while todo:
        proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env, preexec_fn=_limit_memory)
        proc.stdin.write(json.dumps([[i, cases[i]] for i in todo]))
        proc.stdin.close()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current, started, done = None, time.monotonic(), set()
        while True:
            if not sel.select(timeout=max(0.1, TIME_CAP_S + 5 - (time.monotonic() - started))):
                proc.kill()
                if current is not None:
                    out[current].killed = f"killed past the {TIME_CAP_S:.0f} s cap"
                    done.add(current)
                break
            line = proc.stdout.readline()
            if not line:
                if current is not None and current not in done:
                    out[current].killed = f"worker died (exit {proc.wait()})"
                    done.add(current)
                break
            kind, _, rest = line.partition(" ")
            if kind == "start":
                current, started = int(rest), time.monotonic()
            elif kind == "done":
                r = json.loads(rest)
                out[r.pop("i")].__dict__.update(r)
                done.add(current)
        proc.wait()
        sel.close()
        todo = [i for i in todo if i not in done]
    return out


def run_cases(cases: list[list[str]], *, workers: int = 2,
              env: dict[str, str] | None = None) -> list[Outcome]:
    """Every command line of ``cases`` through ``icefab``, ``workers`` processes at once;
    ``env`` is added to the environment."""
    full = {**os.environ, **(env or {}), "COLUMNS": "120"}
    parts = [list(range(k, len(cases), workers)) for k in range(workers)]
    results: list[Outcome | None] = [None] * len(cases)

    def work(idx: list[int]) -> None:
        for i, o in zip(idx, _run_worker([cases[i] for i in idx], full), strict=True):
            results[i] = o

    threads = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results  # type: ignore[return-value]


def _serve() -> None:
    """Worker: run each ``[i, argv]`` of stdin through the CLI in this process."""
    import traceback

    from typer.testing import CliRunner

    from icefabric.cli.app import app

    runner = CliRunner()
    for i, argv in json.loads(sys.stdin.read()):
        print(f"start {i}", flush=True)
        t0 = time.perf_counter()
        r = runner.invoke(app, argv, catch_exceptions=True)
        exc = r.exception if not isinstance(r.exception, SystemExit) else None
        tb = "".join(traceback.format_exception(exc))[-3000:] if exc is not None else ""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print("done " + json.dumps({"i": i, "exit_code": r.exit_code, "stderr": r.stderr,
                                    "traceback": tb, "seconds": time.perf_counter() - t0,
                                    "peak_rss": peak}), flush=True)


if __name__ == "__main__":
    _serve()
