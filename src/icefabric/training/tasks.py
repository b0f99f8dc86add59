"""What a training iteration is made of, for reporting: tasks on devices.

A *task* is one compute step (a delay flow) or one communication operation (the flows of a
collective or a pipeline transfer), with the devices it occupies. A *device* is what runs
one schedule: a pipeline stage of one data-parallel replica in the analytic model (its
tensor-parallel ranks move in lock-step), one rank when a trace drives the job. The
workload's flows carry the timing; tasks say what the flows mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.csr import csr_from_lists

#: task kinds that keep a device's compute units busy
COMPUTE_KINDS = ("forward", "backward", "optimizer", "compute")
#: communication kinds, by parallel group
COMM_KINDS = ("tp", "pp", "dp", "ep", "comm")
KINDS = COMPUTE_KINDS + COMM_KINDS


@dataclass
class Tasks:
    """Task table (CSR lists of devices and flows per task)."""

    kind: np.ndarray  # [T] int: index into KINDS
    stage: np.ndarray  # [T] int, -1 when not a pipeline job
    micro: np.ndarray  # [T] int micro-batch, -1 when not tied to one
    label: list[str]
    dev_ptr: np.ndarray
    devs: np.ndarray
    flow_ptr: np.ndarray
    flows: np.ndarray
    device_names: list[str]

    @property
    def n_tasks(self) -> int:
        return len(self.kind)

    def task_flows(self, i: int) -> np.ndarray:
        return self.flows[self.flow_ptr[i]:self.flow_ptr[i + 1]]

    def task_devices(self, i: int) -> np.ndarray:
        return self.devs[self.dev_ptr[i]:self.dev_ptr[i + 1]]

    def kind_name(self, i: int) -> str:
        return KINDS[int(self.kind[i])]


@dataclass
class TaskLog:
    """Collects tasks while a workload is built; :meth:`freeze` returns :class:`Tasks`."""

    device_names: list[str]
    kind: list[int] = field(default_factory=list)
    stage: list[int] = field(default_factory=list)
    micro: list[int] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    devs: list[list[int]] = field(default_factory=list)
    flows: list[list[int]] = field(default_factory=list)

    def add(self, kind: str, flows, devices, *, stage: int = -1, micro: int = -1,
            label: str = "") -> None:
        self.kind.append(KINDS.index(kind))
        self.stage.append(stage)
        self.micro.append(micro)
        self.label.append(label or kind)
        self.devs.append([int(d) for d in devices])
        self.flows.append([int(f) for f in flows])

    def freeze(self) -> Tasks:
        dptr, devs = csr_from_lists(self.devs)
        fptr, flows = csr_from_lists(self.flows)
        return Tasks(np.asarray(self.kind, dtype=np.int64), np.asarray(self.stage, np.int64),
                     np.asarray(self.micro, np.int64), list(self.label), dptr, devs, fptr,
                     flows, list(self.device_names))


@dataclass
class TrainingWorkload:
    """One training iteration as a workload plus its task table and a summary.

    ``summary`` holds the model, the plan and per-stage figures (layers, accelerator,
    compute per micro-batch) as JSON-ready data.
    """

    name: str
    workload: Workload
    tasks: Tasks
    summary: dict
