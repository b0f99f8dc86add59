"""One training iteration of the analytic model as a workload: compute as delays, every
parallel group's collectives as flows, all in one dependency DAG.

Per device (a pipeline stage of one data-parallel replica) the passes run in the schedule's
order (:mod:`.schedule`); each pass is a chain of compute delays and the tensor / expert
collectives of :mod:`.passes`. Between stages, activations (forward) and their gradients
(backward) travel point to point: every tensor rank sends its shard to the same tensor rank
of the next stage (``1/tp`` of the activations with sequence parallelism, all of them
otherwise), over ``pp_channels`` connections; the shards and channels of one transfer are one
coupled flow (they start together and the receiver needs all of them). A stage's next pass
waits for its previous pass and that pass's sends (Megatron's ``_communicate`` waits for its
batched sends and receives).

Data-parallel gradients: during the last micro-batch's backward, every bucket's
reduce-scatter (all-reduce without ZeRO) starts when its gradients exist and after the
previous bucket of the same communicator; the optimizer step of a replica waits for its
last pass and all its stage's buckets; parameter all-gathers (ZeRO >= 1) follow the
optimizer steps of all replicas. Expert parameters reduce over their expert-data-parallel
group. Groups contend for the fabric only through the engine: nothing here serialises
collectives of different groups.

Not modelled: interleaved (virtual) pipeline stages, tensor/pipeline communication
overlap, the embedding all-reduce of tied embeddings between the first and last stage, the
gradient-norm all-reduce (a few bytes), and parameter all-gathers overlapped with the next
iteration's forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icefabric.ccl.collectives import add_collective
from icefabric.ccl.communicator import Communicator, QpsRule
from icefabric.ccl.workload import WorkloadBuilder
from icefabric.topology.model import Fabric
from icefabric.training.compute import Roofline, head_times, layer_times, optimizer_seconds
from icefabric.training.mapping import RankGrid, TrainingError, stage_layers
from icefabric.training.model import ModelSpec
from icefabric.training.p2p import Transfer, transfer
from icefabric.training.passes import (
    Segment,
    StagePasses,
    StageSpan,
    bucket_groups,
    merge,
    stage_passes,
)
from icefabric.training.schedule import BACKWARD, FORWARD, stage_ops
from icefabric.training.spec import TrainingSpec
from icefabric.training.tasks import TaskLog, TrainingWorkload


def ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def build_iteration(fabric: Fabric, accels: np.ndarray, spec: TrainingSpec, *,
                    qps_rule: QpsRule | None = None, qpn_seed: int = 0,
                    passes: list[StagePasses] | None = None) -> TrainingWorkload:
    """The workload of one iteration of ``spec`` on ``accels`` (the job's accelerators in
    launcher rank order), with the QPs per connection a policy's ``qps_rule`` sets.

    ``passes`` (one per stage) replace the compute model's segments, e.g. with measured
    per-layer times. Raises :class:`TrainingError` for plans that do not fit."""
    it = _Iteration(fabric, np.asarray(accels, dtype=np.int64), spec, qps_rule, passes)
    return it.build(qpn_seed)


class _Iteration:
    """Builder state: the grid, per-stage passes, communicators and the DAG so far."""

    def __init__(self, fabric: Fabric, accels: np.ndarray, spec: TrainingSpec,
                 qps_rule: QpsRule | None, passes: list[StagePasses] | None):
        self.spec, self.par, self.model = spec, spec.parallel, spec.model_spec()
        self.qps_rule = qps_rule
        par, m = self.par, self.model
        self.dp = par.dp or len(accels) // (par.tp * par.pp)
        self.grid = RankGrid(fabric, accels, par.tp, par.pp, self.dp, par.ep)
        self.micro_batches = self._check_plan()
        self.seq = par.seq_len or m.seq_len
        self.devices = [self.grid.stage_device(s) for s in range(par.pp)]
        self.roofs = [Roofline.of(d, spec.compute_efficiency, spec.memory_efficiency)
                      for d in self.devices]
        self.layers = stage_layers(spec.stage_layers, *self._layer_costs())
        if passes is not None and len(passes) != par.pp:
            raise TrainingError(f"{len(passes)} stage passes given for {par.pp} stages")
        starts = np.concatenate([[0], np.cumsum(self.layers)]).tolist()
        spans = [StageSpan(range(starts[s], starts[s + 1]), s == 0, s == par.pp - 1)
                 for s in range(par.pp)]
        self.passes = passes or [stage_passes(m, par, self.seq, spans[s], self.roofs[s])
                                 for s in range(par.pp)]
        self.wb = WorkloadBuilder()
        self.log = TaskLog([f"s{s}/d{d}" for s in range(par.pp) for d in range(self.dp)])
        self._comms: dict[tuple, Communicator] = {}

    def _check_plan(self) -> int:
        """Refuse plans Megatron would refuse; returns the micro-batches per replica."""
        par, m = self.par, self.model
        if m.is_moe and par.tp > 1 and not par.sequence_parallel:
            raise TrainingError("MoE layers with tensor parallelism need sequence_parallel")
        if par.ep > 1 and not m.is_moe:
            raise TrainingError(f"ep {par.ep} on a dense model: expert parallelism needs "
                                "experts")
        if m.is_moe and m.experts % par.ep:
            raise TrainingError(f"ep ({par.ep}) must divide the {m.experts} experts")
        per_iter = par.micro_batch * self.dp
        if par.global_batch % per_iter:
            raise TrainingError(f"global_batch {par.global_batch} is not a multiple of "
                                f"micro_batch x dp = {per_iter}")
        for s in range(par.pp):
            self.grid.stage_pool(s)  # raises when a stage spans pools
        return par.global_batch // per_iter

    def _layer_costs(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage: forward+backward seconds of every layer, and of the embedding and
        output layer it would hold (for ``balanced`` stage layers)."""
        pp, m = self.par.pp, self.model
        if self.spec.stage_layers != "balanced":
            return np.zeros((pp, m.layers)), np.zeros(pp)
        cost = np.zeros((pp, m.layers))
        for s, roof in enumerate(self.roofs):
            for i in range(m.layers):
                lt = layer_times(m, i, self.par, self.seq, roof)
                cost[s, i] = (lt.attn_fwd + lt.mlp_fwd + lt.attn_bwd + lt.mlp_bwd
                              + lt.recompute(self.par.recompute))
        extra = np.zeros(pp)
        extra[-1] = sum(head_times(m, self.par, self.seq, self.roofs[-1]))
        return cost, extra

    # -- communicators -------------------------------------------------------------------
    def _comm(self, key: tuple, ranks: np.ndarray, channels: int | None) -> Communicator:
        c = self._comms.get(key)
        if c is None:
            lib = self.grid.library(ranks)
            if channels is None and self.grid.single_server(ranks):
                # One server: every channel's ring crosses the same accelerator links, so
                # one channel carrying all the bytes takes the same time.
                channels = 1
            c = Communicator(job="/".join([self.spec.name] + [str(k) for k in key]),
                             fabric=self.grid.fabric, ranks=ranks, library=lib,
                             channels=channels).under(self.qps_rule)
            self._comms[key] = c
        return c

    def tp_comm(self, s: int, d: int) -> Communicator:
        return self._comm(("tp", s, d), self.grid.tp_group(s, d), None)

    def ep_comm(self, s: int, g: int, t: int) -> Communicator:
        return self._comm(("ep", s, g, t), self.grid.ep_group(s, g, t), None)

    def dp_comm(self, s: int, t: int, expert: bool) -> Communicator:
        if expert:
            e = t // self.par.tp
            return self._comm(("edp", s, e, t % self.par.tp),
                              self.grid.edp_group(s, e, t % self.par.tp), self.par.dp_channels)
        return self._comm(("dp", s, t), self.grid.dp_group(s, t), self.par.dp_channels)

    def device(self, s: int, d: int) -> int:
        return s * self.dp + d

    # -- primitives -----------------------------------------------------------------------
    def collective(self, comm: Communicator, kind: str, size: float, after, count: int = 1
                   ) -> tuple[list[int], list[int]]:
        """(all flows, flows a successor waits for) of one collective; ``count`` merged
        collectives keep the sum of their latencies."""
        f0 = len(self.wb.flow_size)
        tail = add_collective(self.wb, comm, kind, int(math.ceil(size)), after=after,
                              name=f"{comm.job}:{kind}")
        flows = list(range(f0, len(self.wb.flow_size)))
        if count > 1:
            for f in flows:
                self.wb.flow_latency[f] *= count
        return flows, tail

    def send(self, src: int, dst: int, d: int, micro: int, after: list[int]) -> list[int]:
        """Activations (or their gradients) of ``micro`` from stage ``src`` to ``dst`` of
        replica ``d``: one coupled flow over every tensor rank's channels."""
        g, par = self.grid, self.par
        a, b = g.tp_group(src, d), g.tp_group(dst, d)
        key = ("pp", min(src, dst), max(src, dst), d)
        comm = self._comms.get(key)
        if comm is None:
            comm = Communicator(job="/".join([self.spec.name] + [str(k) for k in key]),
                                fabric=g.fabric, ranks=np.concatenate([a, b]),
                                library=g.library(a)).under(self.qps_rule)
            self._comms[key] = comm
        per_rank = self.micro_tokens * self.model.hidden * par.param_bytes
        if par.sequence_parallel and par.tp > 1:
            per_rank /= par.tp
        pairs = list(zip(a.tolist(), b.tolist()))
        f = transfer(self.wb, comm, Transfer(pairs, per_rank, par.pp_channels, "send"), after)
        self.log.add("pp", [f], [self.device(src, d), self.device(dst, d)],
                     stage=src, micro=micro, label=f"s{src}->s{dst}")
        return [f]

    @property
    def micro_tokens(self) -> int:
        return self.par.micro_batch * self.seq

    # -- passes ---------------------------------------------------------------------------
    def run_segment(self, s: int, seg: Segment, kind: str, micro: int,
                    cur: list[list[int]]) -> None:
        """Append one segment for every replica of stage ``s``; ``cur[d]`` holds what the
        replica's next step waits for and is updated in place."""
        if seg.compute_s > 0:
            for d in range(self.dp):
                f = self.wb.delay(ns(seg.compute_s), deps=cur[d])
                self.log.add(kind, [f], [self.device(s, d)], stage=s, micro=micro)
                cur[d] = [f]
        for c in seg.comms:
            if c.group == "tp":
                for d in range(self.dp):
                    flows, cur[d] = self.collective(self.tp_comm(s, d), c.kind, c.size_bytes,
                                                    cur[d], c.count)
                    self.log.add("tp", flows, [self.device(s, d)], stage=s, micro=micro,
                                 label=c.kind)
                continue
            for g in range(self.dp // self.par.ep):  # expert all-to-all: a sync point
                members = range(g * self.par.ep, (g + 1) * self.par.ep)
                deps = sorted({f for d in members for f in cur[d]})
                flows: list[int] = []
                tails: list[int] = []
                for t in range(self.par.tp):
                    fl, tl = self.collective(self.ep_comm(s, g, t), c.kind, c.size_bytes,
                                             deps, c.count)
                    flows += fl
                    tails += tl
                for d in members:
                    cur[d] = tails
                self.log.add("ep", flows, [self.device(s, d) for d in members], stage=s,
                             micro=micro, label=c.kind)

    def run_pass(self, s: int, op: str, micro: int, cur: list[list[int]], dp_sync) -> None:
        sp: StagePasses = self.passes[s]
        segs = sp.forward if op == FORWARD else sp.backward
        kind = "forward" if op == FORWARD else "backward"
        if dp_sync is None:  # not the last backward: one step per pass at stage granularity
            for seg in (segs if self.spec.granularity == "layer" else [merge(segs)]):
                self.run_segment(s, seg, kind, micro, cur)
            return
        for group in dp_sync.groups(segs):
            for seg in (group if self.spec.granularity == "layer" else [merge(group)]):
                self.run_segment(s, seg, kind, micro, cur)
            dp_sync.bucket(merge(group), cur)

    # -- the whole iteration --------------------------------------------------------------
    def build(self, qpn_seed: int) -> TrainingWorkload:
        pp, M = self.par.pp, self.micro_batches
        stages = [_Stage(s, stage_ops(self.par.schedule, pp, s, M),
                         [[] for _ in range(self.dp)], _DpSync(self, s)) for s in range(pp)]
        arrived: dict[tuple[str, int, int], list[list[int]]] = {}
        while any(st.pos < len(st.ops) for st in stages):
            progressed = False
            for st in stages:
                while st.pos < len(st.ops):
                    op, m = st.ops[st.pos]
                    src = st.s - 1 if op == FORWARD else st.s + 1
                    if 0 <= src < pp and (op, src, m) not in arrived:
                        break  # its input is not built yet
                    self._op(st, op, m, src, arrived)
                    st.pos += 1
                    progressed = True
            if not progressed:
                raise TrainingError("pipeline schedule deadlocks")  # a bug, not an input
        for st in stages:
            st.sync.finish(st.cur)
        wl = self.wb.build(node_ip=self.grid.fabric.node_ip, qpn_seed=qpn_seed)
        return TrainingWorkload(self.spec.name, wl, self.log.freeze(), self.summary())

    def _op(self, st: _Stage, op: str, m: int, src: int,
            arrived: dict[tuple[str, int, int], list[list[int]]]) -> None:
        """Pass ``op`` of micro-batch ``m`` on stage ``st`` after its input from stage
        ``src`` (``arrived[(op, src, m)]``), then its output's sends on (to stage ``s + 1``
        forward, ``s - 1`` backward)."""
        s, cur = st.s, st.cur
        if 0 <= src < self.par.pp:
            for d in range(self.dp):
                cur[d] = cur[d] + arrived[(op, src, m)][d]
        last_bwd = op == BACKWARD and m == self.micro_batches - 1
        self.run_pass(s, op, m, cur, st.sync if last_bwd else None)
        dst = s + 1 if op == FORWARD else s - 1
        if 0 <= dst < self.par.pp:
            sent = [self.send(s, dst, d, m, cur[d]) for d in range(self.dp)]
            arrived[(op, s, m)] = sent
            for d in range(self.dp):
                cur[d] = cur[d] + sent[d]  # the next pass waits for this pass's sends

    def summary(self) -> dict:
        m, par = self.model, self.par
        stages = []
        for s in range(par.pp):
            sp = self.passes[s]
            opt = optimizer_seconds(self._local_params(s), self.roofs[s])
            stages.append({"stage": s, "pool": self.grid.stage_pool(s),
                           "accelerator": self.devices[s].name, "layers": self.layers[s],
                           "forward_ms": round(merge(sp.forward).compute_s * 1e3, 3),
                           "backward_ms": round(merge(sp.backward).compute_s * 1e3, 3),
                           "optimizer_ms": round(opt * 1e3, 3)})
        tokens = par.global_batch * self.seq
        return {"model": m.name, "params": m.params, "model_flops": model_flops(m, self.seq)
                * tokens, "tokens": tokens, "seq_len": self.seq, "tp": par.tp, "pp": par.pp,
                "dp": self.dp, "ep": par.ep, "micro_batch": par.micro_batch,
                "micro_batches": self.micro_batches, "schedule": par.schedule,
                "zero": par.zero, "sequence_parallel": par.sequence_parallel,
                "recompute": par.recompute, "granularity": self.spec.granularity,
                "peak_flops": sum(self.devices[s].peak_flops for s in range(par.pp))
                * par.tp * self.dp, "stages": stages,
                "device_stage": [s for s in range(par.pp) for _ in range(self.dp)],
                "timeline_devices": [self.device(s, 0) for s in range(par.pp)]}

    def _local_params(self, s: int) -> float:
        dense, expert = self.passes[s].optimizer_params
        if self.par.zero >= 1:
            dense /= self.dp
            expert /= max(self.dp // self.par.ep, 1)
        return dense + expert


@dataclass
class _Stage:
    """One pipeline stage while :meth:`_Iteration.build` interleaves the stages: its
    schedule's ``(op, micro-batch)`` steps and the next one's position ``pos``, what each
    replica's next step waits for (``cur[d]``, updated in place) and its data-parallel
    gradient buckets."""

    s: int
    ops: list[tuple[str, int]]
    cur: list[list[int]]
    sync: _DpSync
    pos: int = 0


class _DpSync:
    """Data-parallel gradient buckets of one stage, and the optimizer step after them."""

    def __init__(self, it: _Iteration, s: int):
        self.it, self.s = it, s
        par = it.par
        self.bucket_params = (par.bucket_params or max(40_000_000, 1_000_000 * it.dp)
                              if par.overlap_grad_reduce else math.inf)
        self.tails: dict[tuple[int, bool], list[int]] = {}  # last flows per communicator
        self.buckets: list[tuple[float, float]] = []

    def groups(self, segments: list[Segment]) -> list[list[Segment]]:
        return bucket_groups(segments, self.bucket_params)

    def _groups_of(self, expert: bool) -> list[int]:
        it = self.it
        if expert:
            n = it.dp // it.par.ep
            return [] if n < 2 else list(range(it.par.ep * it.par.tp))
        return [] if it.dp < 2 else list(range(it.par.tp))

    def bucket(self, seg: Segment, cur: list[list[int]]) -> None:
        """Reduce the gradients ``seg`` completed, once every replica has them."""
        it = self.it
        self.buckets.append((seg.dense_params, seg.expert_params))
        ready = sorted({f for c in cur for f in c})
        kind = "all_reduce" if it.par.zero == 0 else "reduce_scatter"
        for expert, params in ((False, seg.dense_params), (True, seg.expert_params)):
            if params <= 0:
                continue
            for t in self._groups_of(expert):
                self._launch(t, expert, kind, params * it.par.grad_bytes, ready)

    def _launch(self, t: int, expert: bool, kind: str, size: float, after) -> None:
        it = self.it
        comm = it.dp_comm(self.s, t, expert)
        prev = self.tails.get((t, expert), [])
        flows, tail = it.collective(comm, kind, size, sorted(set(after) | set(prev)))
        self.tails[(t, expert)] = tail
        replicas = range(it.dp) if not expert else range(t // it.par.tp, it.dp, it.par.ep)
        it.log.add("dp", flows, [it.device(self.s, d) for d in replicas], stage=self.s,
                   label=kind)

    def finish(self, cur: list[list[int]]) -> None:
        """Optimizer step of every replica, then the parameter all-gathers (ZeRO >= 1)."""
        it = self.it
        reduced = sorted({f for tl in self.tails.values() for f in tl})
        opt_ns = ns(optimizer_seconds(it._local_params(self.s), it.roofs[self.s]))
        done = []
        for d in range(it.dp):
            f = it.wb.delay(opt_ns, deps=sorted(set(cur[d]) | set(reduced)))
            it.log.add("optimizer", [f], [it.device(self.s, d)], stage=self.s)
            done.append(f)
        if it.par.zero == 0:
            return
        self.tails = {}
        for dense, expert in self.buckets:
            for is_expert, params in ((False, dense), (True, expert)):
                if params <= 0:
                    continue
                for t in self._groups_of(is_expert):
                    self._launch(t, is_expert, "all_gather", params * it.par.param_bytes, done)


def model_flops(model: ModelSpec, seq: int) -> float:
    """Training FLOPs per token for model-FLOPs utilisation: ``6 N + 12 L H Q S`` (PaLM,
    Chowdhery et al. 2022, Appendix B) with ``N`` the active non-embedding parameters plus
    the output layer (experts counted ``top_k`` times, shared experts once)."""
    n = 0.0
    for i in range(model.layers):
        dense, expert = model.layer_params(i)
        n += dense + (expert * model.top_k / model.experts if expert else 0.0)
    n += model.embedding_params  # the output layer's matrix multiplication
    return 6.0 * n + 12.0 * model.layers * model.heads * model.qk_dim * seq
