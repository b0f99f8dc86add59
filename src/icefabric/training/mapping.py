"""Megatron-style mapping of parallel groups to ranks, accelerators and servers.

Megatron-LM orders ranks ``tp-cp-ep-dp-pp`` (``megatron/core/parallel_state.py``,
``RankGenerator``): the tensor-parallel index varies fastest, then the data-parallel index
(expert-parallel groups are consecutive data-parallel ranks), then the pipeline stage. With
ranks numbered server by server, as launchers do, a tensor group of ``tp <= accelerators per
server`` lies inside one server, a data-parallel group spans ``dp`` servers with one rank
each (one rail per tensor rank), and consecutive pipeline stages fill consecutive servers —
so with a job's servers listed pool by pool, early stages run on the first pool and late
stages on the next (a heterogeneous pipeline whose stage boundary crosses vendors).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from icefabric.errors import IceFabricError
from icefabric.topology.catalog import AcceleratorProfile, accelerator_profile
from icefabric.topology.model import Fabric


class TrainingError(IceFabricError, ValueError):
    """Base of the training layer's errors: a job that cannot be laid out or modelled;
    ``str()`` says why."""


@dataclass(frozen=True, eq=False)
class RankGrid:
    """Global ranks of a ``tp x dp x pp`` job (``ep`` divides ``dp``) on accelerators.

    ``accels[r]`` is the accelerator node of global rank ``r``;
    ``r = (stage * dp + replica) * tp + tensor_rank``.
    """

    fabric: Fabric
    accels: np.ndarray
    tp: int
    pp: int
    dp: int
    ep: int = 1

    def __post_init__(self):
        world = self.tp * self.pp * self.dp
        if len(self.accels) != world:
            raise TrainingError(f"tp x pp x dp = {self.tp} x {self.pp} x {self.dp} = {world} "
                                f"ranks, but the job has {len(self.accels)} accelerators")
        if self.dp % self.ep:
            raise TrainingError(f"ep ({self.ep}) must divide dp ({self.dp}): expert groups "
                                "are carved out of the data-parallel ranks")

    @cached_property
    def grid(self) -> np.ndarray:
        """Accelerator of (stage, replica, tensor rank)."""
        return np.asarray(self.accels, dtype=np.int64).reshape(self.pp, self.dp, self.tp)

    def tp_group(self, stage: int, replica: int) -> np.ndarray:
        return self.grid[stage, replica, :]

    def dp_group(self, stage: int, t: int) -> np.ndarray:
        return self.grid[stage, :, t]

    def ep_group(self, stage: int, g: int, t: int) -> np.ndarray:
        """Expert-parallel group ``g``: replicas ``g*ep .. g*ep+ep-1``."""
        return self.grid[stage, g * self.ep:(g + 1) * self.ep, t]

    def edp_group(self, stage: int, e: int, t: int) -> np.ndarray:
        """Expert-data-parallel group: the replicas holding the same experts (``e`` mod
        ``ep``)."""
        return self.grid[stage, e::self.ep, t]

    def servers_of(self, accels: np.ndarray) -> list[int]:
        out: dict[int, None] = {}
        for a in np.asarray(accels).ravel().tolist():
            out.setdefault(int(self.fabric.node_server[a]), None)
        return list(out)

    def stage_pool(self, stage: int) -> str:
        """The pool of every server of ``stage``; raises when a stage spans pools."""
        pools = {self.fabric.servers[s].pool for s in self.servers_of(self.grid[stage])}
        if len(pools) > 1:
            raise TrainingError(f"pipeline stage {stage} spans pools {sorted(pools)}: give "
                                "every pool whole stages (each vendor's library only talks "
                                "inside its pool)")
        return pools.pop()

    def library(self, accels: np.ndarray) -> str:
        libs = {self.fabric.servers[s].profile.library for s in self.servers_of(accels)}
        if len(libs) > 1:
            raise TrainingError(f"a parallel group spans libraries {sorted(libs)}")
        return libs.pop()

    def stage_device(self, stage: int) -> AcceleratorProfile:
        srv = self.fabric.servers[self.servers_of(self.grid[stage])[0]]
        try:
            return accelerator_profile(srv.profile.accelerator)
        except ValueError as e:
            raise TrainingError(str(e)) from None

    def single_server(self, accels: np.ndarray) -> bool:
        return len(self.servers_of(accels)) == 1


def stage_layers(choice, layer_s: np.ndarray, extra_s: np.ndarray) -> list[int]:
    """Layers of every pipeline stage: an explicit list, ``even`` (the first
    ``layers % pp`` stages take one more), or ``balanced``: contiguous layers per stage so
    that the slowest stage is as fast as possible, given ``layer_s[s, i]`` (seconds of layer
    ``i`` on stage ``s``'s accelerator, forward and backward) and ``extra_s[s]`` (the
    embedding or output layer a stage also runs). Every stage gets at least one layer."""
    pp, n_layers = layer_s.shape
    if pp > n_layers:
        raise TrainingError(f"{pp} pipeline stages but only {n_layers} layers")
    if isinstance(choice, list):
        if len(choice) != pp or sum(choice) != n_layers or min(choice) < 1:
            raise TrainingError(f"stage_layers {choice} must list {pp} positive counts that "
                                f"sum to the model's {n_layers} layers")
        return list(choice)
    if choice == "even":
        base, extra = divmod(n_layers, pp)
        return [base + (1 if s < extra else 0) for s in range(pp)]
    prefix = np.concatenate([np.zeros((pp, 1)), np.cumsum(layer_s, axis=1)], axis=1)

    def fill(limit: float) -> list[int] | None:
        """Greedy: every stage takes as many layers as fit under ``limit``."""
        counts, i = [], 0
        for s in range(pp):
            left = pp - s - 1  # stages after this one need a layer each
            hi = n_layers - left
            cost = prefix[s, i + 1:hi + 1] - prefix[s, i] + extra_s[s]
            k = int(np.searchsorted(cost, limit, side="right"))
            if k == 0:
                return None
            k = hi - i if s == pp - 1 else k
            if s == pp - 1 and cost[-1] > limit:
                return None
            counts.append(k)
            i += k
        return counts if i == n_layers else None

    lo, hi = 0.0, float(layer_s.sum() + extra_s.sum())
    best = fill(hi)
    for _ in range(60):  # bisection on the slowest stage's time
        mid = (lo + hi) / 2
        got = fill(mid)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    return best
