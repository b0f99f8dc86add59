"""The two ends of each connection, paired, and which end carries the data.

Every verbs connection is two RC QPs, one per host: NCCL's send side (``ncclIbConnect``)
writes the data, its receive side (``ncclIbAccept``) only clear-to-send writes and ACKs
(``src/transport/net_ib/connect.cc``). Only the send side is a data QP of the job model
(:func:`icefabric.wire.qp_ordinals`); a receive-side QP must never take a data
QP's plan. The hosts report both ends (``QpEntry``, with what they could tell); here the
controller pairs them — A's local QPN is B's remote QPN and the addresses are mirrored —
and tells the direction of each connection, by the first rule that decides:

1. ``flags``: a host told an end is the receive side (NCCL >= 2.29.2 gives it
   ``REMOTE_ATOMIC|REMOTE_READ`` at INIT; ``ncclIbReceiverQpsCreateToRts``): the other
   end is the sender.
2. ``span``: NCCL's connect protocol. The sender moves its QPs to INIT when it creates
   them (``ncclIbSenderQpsCreate``), sends their numbers, and moves them to RTR only after
   the receiver answered; the receiver creates its QP, moves it INIT -> RTR -> RTS at once
   and only then answers. So the sender's INIT->RTR interval contains the receiver's, and
   the end with the longer INIT->RTR time (each on its own host's clock: no clock
   synchronization needed) is the sender. Equal times decide nothing.
3. ``model``: the job model has data in only one direction of the NIC pair (a ring of
   more than two nodes, a tree edge the model runs one way): that direction.

A connection none of these decides (equal or unknown times, and data both ways in the
model — a 2-node ring, trees, AllToAll, PXN) keeps what the hosts did at RTR: both ends
stay data candidates in their hosts' connection order, as the host agent named them
(docs/verbs-shim.md, "Which QPs take a plan").

A data QP is then named by its :class:`~icefabric.qpid.QpId`: its job, NIC pair and
ordinal among the data QPs of that pair in its host's connection order (:func:`data_qps`),
so the ordinals the controller gives skip every receive-side QP even where the host could
not tell it at RTR.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from icefabric.qpid import QpId
from icefabric.wire import NO_PORT


@dataclass(frozen=True)
class QpEnd:
    """One end of a connection, as its host reported it.

    ``order``: its place in its host's connection order on its NIC pair (the host
    agent's ordinal); ``receive``: the host told it is the receive side; ``span_ns``:
    INIT->RTR time on the host's clock (None = unknown); ``sport``: its source port
    (-1 = not reported).
    """

    job: str
    src_ip: int
    dst_ip: int
    lqpn: int
    rqpn: int
    order: int
    receive: bool = False
    span_ns: int | None = None
    sport: int = NO_PORT

    @property
    def peer_key(self) -> tuple[int, int, int, int]:
        """The key its other end has as its own (mirrored addresses and QP numbers)."""
        return (self.dst_ip, self.src_ip, self.rqpn, self.lqpn)

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.src_ip, self.dst_ip, self.lqpn, self.rqpn)


@dataclass(frozen=True)
class Connection:
    """Two paired ends (``b`` None: its peer has not reported it), the sender (None: not
    told) and the rule that told it (``flags``, ``span``, ``model``, or "")."""

    a: QpEnd
    b: QpEnd | None
    sender: QpEnd | None
    how: str

    @property
    def receiver(self) -> QpEnd | None:
        if self.sender is None:
            return None
        return self.b if self.sender is self.a else self.a


def pair(ends: Iterable[QpEnd]) -> list[tuple[QpEnd, QpEnd | None]]:
    """The ends joined into connections (each end once; an end without its peer alone)."""
    by_key = {e.key: e for e in ends}
    out, seen = [], set()
    for k in sorted(by_key):
        if k in seen:
            continue
        e = by_key[k]
        peer = by_key.get(e.peer_key)
        seen.add(k)
        if peer is not None:
            seen.add(peer.key)
        out.append((e, peer))
    return out


def direction(a: QpEnd, b: QpEnd | None, data_pairs: set[tuple[int, int]]) -> Connection:
    """Which end of ``a``-``b`` sends (module doc: ``flags``, then ``span``, then
    ``model``); ``data_pairs``: the (source, destination) NIC addresses the job model has
    data QPs on."""
    ends = [e for e in (a, b) if e is not None]
    told = [e for e in ends if e.receive]
    if told:
        other = [e for e in ends if not e.receive]
        return Connection(a, b, other[0] if len(other) == 1 else None, "flags")
    if b is not None and a.span_ns is not None and b.span_ns is not None \
            and a.span_ns != b.span_ns:
        return Connection(a, b, a if a.span_ns > b.span_ns else b, "span")
    modelled = [e for e in ends if (e.src_ip, e.dst_ip) in data_pairs]
    reverse_has_data = (a.dst_ip, a.src_ip) in data_pairs
    if len(modelled) == 1 and (b is not None or not reverse_has_data):
        return Connection(a, b, modelled[0], "model")
    if b is None and not modelled:  # nothing is modelled that way: it only receives
        return Connection(a, b, None, "model")
    return Connection(a, b, None, "")


def connections(ends: Iterable[QpEnd], data_pairs: set[tuple[int, int]]) -> list[Connection]:
    """Every connection of ``ends`` with its direction (:func:`direction`)."""
    return [direction(a, b, data_pairs) for a, b in pair(ends)]


def data_qps(ends: Sequence[QpEnd], data_pairs: set[tuple[int, int]]) -> dict[QpId, QpEnd]:
    """The data QPs among ``ends`` (one job's), named by :class:`QpId`: the senders and the
    untold ends (module doc). Each keeps its host's ordinal less the ends its host
    numbered below it on the same NIC pair that turn out to be receive sides, so the
    ordinals skip every receive-side QP and keep the host's gaps (a destroyed QP's)."""
    keep: list[QpEnd] = []
    for c in connections(ends, data_pairs):
        if c.sender is not None:
            keep.append(c.sender)
        elif c.how == "":
            keep += [e for e in (c.a, c.b) if e is not None and
                     (e.src_ip, e.dst_ip) in data_pairs]
    kept = {e.key for e in keep}
    skipped: dict[tuple[str, int, int], list[int]] = {}
    for e in ends:  # numbered by the host (not told receive), yet not a data QP
        if not e.receive and e.key not in kept:
            skipped.setdefault((e.job, e.src_ip, e.dst_ip), []).append(e.order)
    for v in skipped.values():
        v.sort()
    return {QpId(e.job, e.src_ip, e.dst_ip,
                 e.order - bisect_left(skipped.get((e.job, e.src_ip, e.dst_ip), []), e.order)): e
            for e in keep}
