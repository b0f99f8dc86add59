"""One pipeline stage's forward and backward pass as segments: compute, then collectives.

A :class:`Segment` is a compute step followed by the collectives that must finish before
the next step can start (Megatron runs tensor-parallel and expert all-to-all collectives on
the compute stream's critical path unless comm-overlap options are on, which are not
modelled). Per layer, forward (Shoeybi et al. 2019, Korthikanti et al. 2022):

* attention block, then MLP block; each ends with a tensor all-reduce of the layer's
  activations, or with sequence parallelism starts with an all-gather and ends with a
  reduce-scatter of the same size;
* an MoE block replaces the MLP: all-to-all dispatch of the routed tokens, experts,
  all-to-all combine (the tensor group is sequence-parallel, so no tensor collective);
* backward mirrors it in reverse layer order; full recomputation re-runs each layer's
  forward (with its collectives) right before its backward, selective recomputation only
  the attention core.

Backward segments carry the gradients they complete (``dense_params``/``expert_params``,
per rank) so data-parallel buckets can start as soon as their gradients exist.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from icefabric.training.compute import LayerTimes, Roofline, head_times, layer_times
from icefabric.training.model import ModelSpec
from icefabric.training.spec import ParallelSpec


@dataclass(frozen=True)
class Comm:
    """A collective of a group (``tp`` or ``ep``): nccl-tests kind and size; ``count``
    collectives of that kind merged into one (same bytes, latencies added)."""

    group: str
    kind: str
    size_bytes: float
    count: int = 1


@dataclass(frozen=True)
class Segment:
    compute_s: float
    comms: tuple[Comm, ...] = ()
    dense_params: float = 0.0
    expert_params: float = 0.0


def merge(segments: list[Segment]) -> Segment:
    """One segment with the summed compute, the collectives merged per (group, kind) and the
    summed gradients: the same work with one compute step and one collective per kind."""
    comms: dict[tuple[str, str], Comm] = {}
    for s in segments:
        for c in s.comms:
            k = (c.group, c.kind)
            old = comms.get(k)
            comms[k] = c if old is None else replace(
                old, size_bytes=old.size_bytes + c.size_bytes, count=old.count + c.count)
    return Segment(sum(s.compute_s for s in segments), tuple(comms.values()),
                   sum(s.dense_params for s in segments),
                   sum(s.expert_params for s in segments))


@dataclass(frozen=True)
class StagePasses:
    """Forward and backward segments of one micro-batch on one stage (per rank)."""

    forward: list[Segment]
    backward: list[Segment]
    optimizer_params: tuple[float, float]  # (dense, expert) parameters a rank updates


def _block(compute: float, act_bytes: float, tp: int, sp: bool) -> list[Segment]:
    if tp == 1:
        return [Segment(compute)]
    if sp:
        return [Segment(0.0, (Comm("tp", "all_gather", act_bytes),)),
                Segment(compute, (Comm("tp", "reduce_scatter", act_bytes),))]
    return [Segment(compute, (Comm("tp", "all_reduce", act_bytes),))]


def _moe(compute: float, a2a_bytes: float, ep: int) -> list[Segment]:
    if ep == 1:
        return [Segment(compute)]
    return [Segment(0.0, (Comm("ep", "alltoall", a2a_bytes),)),
            Segment(compute, (Comm("ep", "alltoall", a2a_bytes),))]


@dataclass(frozen=True)
class StageSpan:
    """What one pipeline stage holds: its ``layers``, and the embedding (``first``) and the
    output layer (``last``)."""

    layers: range
    first: bool
    last: bool


def stage_passes(model: ModelSpec, par: ParallelSpec, seq: int, span: StageSpan,
                 roof: Roofline) -> StagePasses:
    """Segments of the stage ``span`` at ``seq`` tokens per sequence on ``roof``."""
    layers, first, last = span.layers, span.first, span.last
    tp, ep, sp = par.tp, par.ep, par.sequence_parallel and par.tp > 1
    T = par.micro_batch * seq
    act = T * model.hidden * par.param_bytes  # a layer's activations (nccl-tests size)
    # dispatched tokens of a rank: its T/tp tokens, top_k copies each
    a2a = T / tp * model.top_k * model.hidden * par.param_bytes
    fwd: list[Segment] = []
    bwd: list[Segment] = []
    emb = model.embedding_params / tp
    if first:  # vocabulary-parallel embedding: partial sums reduced across the tensor group
        fwd += _block(0.0, act, tp, sp)[-1:]
    times: dict[int, LayerTimes] = {}
    for i in layers:
        lt = times[i] = layer_times(model, i, par, seq, roof)
        fwd += _block(lt.attn_fwd, act, tp, sp)
        moe = model.is_moe_layer(i)
        fwd += _moe(lt.mlp_fwd, a2a, ep) if moe else _block(lt.mlp_fwd, act, tp, sp)
    head_f, head_b = head_times(model, par, seq, roof) if last else (0.0, 0.0)
    if last:
        fwd.append(Segment(head_f))
        bwd.append(Segment(head_b, dense_params=emb))
    dense_total, expert_total = (emb if last else 0.0), 0.0
    for i in reversed(layers):
        lt = times[i]
        moe = model.is_moe_layer(i)
        if par.recompute == "full":
            bwd += _block(lt.attn_fwd, act, tp, sp)
            bwd += _moe(lt.mlp_fwd, a2a, ep) if moe else _block(lt.mlp_fwd, act, tp, sp)
        bwd += _moe(lt.mlp_bwd, a2a, ep) if moe else _block(lt.mlp_bwd, act, tp, sp)
        attn = _block(lt.attn_bwd + lt.recompute(par.recompute if par.recompute != "full"
                                                  else "none"), act, tp, sp)
        dense, expert = model.layer_params(i)
        attn[-1] = replace(attn[-1], dense_params=dense / tp, expert_params=expert / ep)
        bwd += attn
        dense_total += dense / tp
        expert_total += expert / ep
    if first:
        bwd.append(Segment(0.0, dense_params=emb))
        if not (last and model.tied_embeddings):
            dense_total += emb
    return StagePasses(fwd, bwd, (dense_total, expert_total))


def bucket_groups(segments: list[Segment], bucket_params: float) -> list[list[Segment]]:
    """Consecutive segments whose gradients fill one bucket each (a bucket closes after the
    segment that brings it to ``bucket_params``; the rest goes into the last bucket)."""
    groups: list[list[Segment]] = [[]]
    filled = 0.0
    for s in segments:
        groups[-1].append(s)
        filled += s.dense_params + s.expert_params
        if filled >= bucket_params:
            groups.append([])
            filled = 0.0
    if not groups[-1]:
        groups.pop()
    elif len(groups) > 1 and not any(s.dense_params or s.expert_params for s in groups[-1]):
        tail = groups.pop()  # trailing compute without gradients joins the last bucket
        groups[-1] += tail
    return groups
