"""Where an iteration's time goes, per device: compute, exposed communication, bubbles.

From the simulated start and finish of every flow, each task gets an interval. On every
device the iteration ``[0, T]`` is cut at every interval boundary; a piece is

* **compute** when a compute task of the device runs in it,
* **exposed communication** when no compute runs but a communication task that occupies
  the device does — shared equally among the kinds (tp, pp, dp, ep) active in the piece,
* **bubble** otherwise (the device waits for other devices: pipeline fill and drain,
  stragglers, the slowest replica's optimizer step).

So ``compute + sum(exposed) + bubble = T`` on every device, which the tests check.
Communication hidden behind compute (data-parallel buckets during the backward pass)
counts as compute: it costs nothing unless it delays something.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icefabric.training.tasks import COMM_KINDS, COMPUTE_KINDS, KINDS, Tasks

_COMPUTE_CODES = [KINDS.index(k) for k in COMPUTE_KINDS]


@dataclass
class DeviceTime:
    """Seconds of one device (or the mean of several) in each category."""

    compute_s: float
    exposed_s: dict[str, float]
    bubble_s: float

    @property
    def exposed_total_s(self) -> float:
        return sum(self.exposed_s.values())

    def to_dict(self) -> dict:
        return {"compute_ms": round(self.compute_s * 1e3, 4),
                "exposed_ms": {k: round(v * 1e3, 4) for k, v in self.exposed_s.items()},
                "exposed_total_ms": round(self.exposed_total_s * 1e3, 4),
                "bubble_ms": round(self.bubble_s * 1e3, 4)}


def task_intervals(tasks: Tasks, flow_start_ns: np.ndarray, flow_finish_ns: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) in ns of every task: its first flow's start, its last flow's finish."""
    n = tasks.n_tasks
    owner = np.repeat(np.arange(n), np.diff(tasks.flow_ptr))
    start = np.full(n, np.iinfo(np.int64).max)
    end = np.zeros(n, dtype=np.int64)
    np.minimum.at(start, owner, flow_start_ns[tasks.flows])
    np.maximum.at(end, owner, flow_finish_ns[tasks.flows])
    return start, end


def device_times(tasks: Tasks, flow_start_ns: np.ndarray, flow_finish_ns: np.ndarray,
                 iteration_ns: int) -> list[DeviceTime]:
    """The breakdown of every device over ``[0, iteration_ns]``."""
    start, end = task_intervals(tasks, flow_start_ns, flow_finish_ns)
    dev_task = np.repeat(np.arange(tasks.n_tasks), np.diff(tasks.dev_ptr))
    out = []
    for dev in range(len(tasks.device_names)):
        mine = dev_task[tasks.devs == dev]
        out.append(_one_device(tasks.kind[mine], start[mine], end[mine], iteration_ns))
    return out


def _one_device(kind: np.ndarray, start: np.ndarray, end: np.ndarray, T: int) -> DeviceTime:
    cuts = np.unique(np.concatenate([[0, T], start, end]))
    length = np.diff(cuts).astype(np.float64)
    lo = np.searchsorted(cuts, start)
    hi = np.searchsorted(cuts, end)

    def covered(mask: np.ndarray) -> np.ndarray:
        diff = np.zeros(len(cuts), dtype=np.int64)
        np.add.at(diff, lo[mask], 1)
        np.add.at(diff, hi[mask], -1)
        return np.cumsum(diff)[:-1] > 0

    busy = covered(np.isin(kind, _COMPUTE_CODES))
    active = {k: covered(kind == KINDS.index(k)) & ~busy for k in COMM_KINDS}
    n_active = sum(a.astype(np.int64) for a in active.values())
    share = np.where(n_active > 0, length / np.maximum(n_active, 1), 0.0)
    exposed = {k: float(share[a].sum()) / 1e9 for k, a in active.items() if a.any()}
    compute = float(length[busy].sum()) / 1e9
    return DeviceTime(compute, exposed, T / 1e9 - compute - sum(exposed.values()))


def mean_time(times: list[DeviceTime]) -> DeviceTime:
    kinds = sorted({k for t in times for k in t.exposed_s}, key=COMM_KINDS.index)
    n = max(len(times), 1)
    return DeviceTime(sum(t.compute_s for t in times) / n,
                      {k: sum(t.exposed_s.get(k, 0.0) for t in times) / n for k in kinds},
                      sum(t.bubble_s for t in times) / n)
