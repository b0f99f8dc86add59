"""First-run compilation of the fluid engine's kernel (issue 12).

    python benchmarks/bench_fluid_compile.py [--top 15]

Runs one small fluid problem (``incast_8to1`` of the public validation set with DCQCN and
PFC, so the code of every mechanism compiles) in a fresh process whose numba cache is an
empty temporary folder (``NUMBA_CACHE_DIR``): the first engine call is what the first run
after an install waits for; the second call shows the run itself. Also lists the functions
that took longest to compile (numba's ``numba:compile`` events; time exclusive of the
functions they compiled in turn), which is where to look to cut it further.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "validation" / "incast_8to1.json"


def child() -> dict:
    """The measurement, in a process with an empty cache."""
    from numba.core import event

    rec = event.RecordingListener()
    event.register("numba:compile", rec)
    from icefabric.engine.registry import get_engine
    from icefabric.engine.validation import engine_options, load_scenario, to_problem

    sc = load_scenario(SCENARIO)
    prob = to_problem(sc, "ns3-dcqcn")
    args = engine_options(sc, "ns3-dcqcn").engine_args()
    fluid = get_engine("fluid")
    times = []
    for _ in range(2):
        c0, w0 = time.process_time(), time.perf_counter()
        fluid(prob, **args)
        times.append((time.process_time() - c0, time.perf_counter() - w0))
    return {"first": times[0], "second": times[1], "functions": _exclusive(rec.buffer)}


def _exclusive(buffer) -> list:
    """(seconds, qualified name) of every compilation, less its nested compilations."""
    stack, out = [], []
    for ts, ev in buffer:
        if ev.is_start:
            stack.append([ts, 0.0, ev.data["dispatcher"].py_func])
            continue
        t0, nested, fn = stack.pop()
        if stack:
            stack[-1][1] += ts - t0
        out.append((ts - t0 - nested, f"{fn.__module__}.{fn.__qualname__}"))
    return sorted(out, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=15, help="functions to list")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child()))
        return
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, __file__, "--child"], check=True, text=True,
                             capture_output=True, env={**os.environ, "NUMBA_CACHE_DIR": cache})
    r = json.loads(out.stdout.splitlines()[-1])
    (c1, w1), (c2, w2) = r["first"], r["second"]
    print(f"first engine call (compiles the kernel): {w1:.1f} s wall, {c1:.1f} s CPU")
    print(f"second call (the run itself): {w2 * 1e3:.1f} ms wall, {c2 * 1e3:.1f} ms CPU")
    print(f"compiled functions: {len(r['functions'])}; longest (exclusive s):")
    for s, name in r["functions"][:args.top]:
        print(f"  {s:6.2f}  {name}")
    print(f"load average (1 min) {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
