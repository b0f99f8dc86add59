"""The engine's workspace: memory kept between runs, handed out zeroed, never shared."""

from pathlib import Path

import numpy as np

from icefabric.engine import fluid
from icefabric.engine.validation import engine_options, load_scenario, to_problem
from icefabric.engine.workspace import Workspace

REF = Path(__file__).resolve().parents[2] / "data" / "validation"  # vendored public set


def test_memory_given_back_comes_back_zeroed_in_any_shape():
    ws = Workspace(max_bytes=2**20, min_bytes=0)
    a = ws.zeros((4, 5), np.int64)
    a[:] = 7
    ws.give_back(a)
    b = ws.zeros((2, 3), np.int64)
    assert np.shares_memory(a, b), "the pooled buffer was not reused"
    assert b.shape == (2, 3) and b.flags.c_contiguous and not b.any()
    c = ws.zeros((4, 5), np.int64)  # b is still out: fresh memory, not b's
    assert not np.shares_memory(b, c) and not c.any()


def test_only_the_elements_said_used_are_zeroed_and_the_bound_holds():
    ws = Workspace(max_bytes=800, min_bytes=0)
    a = ws.zeros((10, 10), np.float64)  # 800 bytes
    a[0, :3] = 1.0
    ws.give_back(a, used=3)
    assert len(ws._free) == 1 and not ws._free[0][0].any()
    big = ws.zeros((200,), np.float64)  # 1,600 bytes written: over the bound, not kept
    ws.give_back(big)
    assert [b.size for b, _ in ws._free] == [100]
    ws.clear()
    parts = [ws.zeros((50,), np.float64) for _ in range(3)]  # 400 bytes each
    for a in parts:
        ws.give_back(a)
    assert [id(b) for b, _ in ws._free] == [id(parts[1].base), id(parts[2].base)], \
        "the oldest was not the one dropped"


def test_arrays_it_did_not_hand_out_are_ignored():
    ws = Workspace(max_bytes=2**20, min_bytes=0)
    own = np.zeros(50)
    ws.give_back(own[:10].reshape(2, 5))
    ws.give_back(np.ones((3, 3)))
    a = ws.zeros((3,), np.float64)
    ws.give_back(a)
    ws.give_back(a)  # twice: kept once
    assert len(ws._free) == 1 and ws._free[0][0] is a.base


def _run(sc, seed: int):
    prob = to_problem(sc, "ns3-dcqcn")
    return fluid.run(prob, **engine_options(sc, "ns3-dcqcn").engine_args(), seed=seed)


def _same(a, b) -> bool:
    ta, tb = a.to_dict(), b.to_dict()
    ta.pop("wall_s")
    tb.pop("wall_s")
    return ta == tb


def test_a_run_after_other_runs_equals_a_fresh_run(monkeypatch):
    """A, then B, then A again (each with every array from the pool) gives the fresh A:
    both leave CNP marks in their delay lines and differ in every shape."""
    ws = Workspace(max_bytes=2**30, min_bytes=0)
    monkeypatch.setattr(fluid, "_WORKSPACE", ws)
    a = load_scenario(REF / "two_jobs_shared_uplink.json")
    b = load_scenario(REF / "alltoall_16_oversub_2to1.json")
    fresh = _run(a, 1)
    _run(b, 2)
    _run(a, 0)
    again = _run(a, 1)
    assert _same(fresh, again), "a run's result depends on the runs before it"
    assert ws._free and not any(buf.any() for buf, _ in ws._free), "pooled memory not zero"
