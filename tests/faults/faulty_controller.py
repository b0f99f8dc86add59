"""``python faulty_controller.py controller serve ...``: the real controller CLI with one
fault point, so a test can SIGKILL it at a known moment.

``ICE_FAULT_AT`` chooses the point; the fault fires once the file ``ICE_FAULT_ARM`` exists
(the test arms it when the system is where it wants it). At the point the process writes
the point's name to ``ICE_FAULT_MARKER`` and stops there (sleeps) until it is killed:

* ``planning`` — a new plan is computed but not yet stored;
* ``write`` — inside the transaction that stores a plan: its rows are written (flushed to
  the database) but not committed.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path


def _armed() -> bool:
    return Path(os.environ["ICE_FAULT_ARM"]).exists()


def _hold(point: str) -> None:
    Path(os.environ["ICE_FAULT_MARKER"]).write_text(point)
    time.sleep(3600)  # the test kills us here


def install(point: str) -> None:
    from icefabric.controller import planner
    from icefabric.controller.store.repo import Repository

    if point == "planning":
        real_plan = planner.compute_plan

        def compute_plan(*a, **kw):
            out = real_plan(*a, **kw)
            if out is not None and _armed():
                _hold("planning")
            return out

        planner.compute_plan = compute_plan
    elif point == "write":
        real_writing = Repository._writing
        real_save = Repository.save_plan
        storing = []

        @contextmanager
        def writing(self):
            with real_writing(self) as s:
                yield s
                if storing and _armed():
                    s.flush()  # the plan's rows are in the database, uncommitted
                    _hold("write")

        def save_plan(self, *a, **kw):
            storing.append(1)
            try:
                return real_save(self, *a, **kw)
            finally:
                storing.pop()

        Repository._writing = writing
        Repository.save_plan = save_plan
    else:
        raise SystemExit(f"unknown ICE_FAULT_AT {point!r}")


if __name__ == "__main__":
    if os.environ.get("ICE_FAULT_AT"):
        install(os.environ["ICE_FAULT_AT"])
    from icefabric.cli.app import app

    app(args=sys.argv[1:], prog_name="icefab")
