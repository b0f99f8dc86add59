"""Facts an NCCL/RCCL log implies without printing them: devices, hosts, and ring edges.

Each rule relies on one behaviour of the library, cited in its ``RULE_*`` text, and fires only
where the lines imply the fact; every value it adds is returned as an
:class:`~icefabric.schemas.InferredFact` naming the rule and the line it came from. Nothing is
guessed: when the lines do not imply a value, it stays unknown.

The rules work on plain records (:class:`PrintedRank`, :class:`LocalRankLine`) that
:mod:`icefabric.collect.nccl_log` extracts, so this module knows the rules and not the formats.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from icefabric.schemas import (
    FactSource,
    HostRanks,
    InferredFact,
    ParseWarning,
    RankInfo,
    RingEdge,
)

RULE_DEVICE = (
    "the [dev] prefix is the printing thread's current CUDA/HIP device (src/debug.cc: "
    "cudaGetDevice), and the rank's own thread prints this line after cudaSetDevice(cudaDev) "
    "(src/init.cc ncclCommInitRankFunc)")
RULE_RING_DUMP = (
    "'Channel cc/NN :' ring orders are printed by rank 0 only (src/graph/rings.cc "
    "ncclBuildRings: if (rank == 0) dumpLine)")
RULE_RING_LINKS = (
    "a rank's 'Ring cc : prev -> me -> next' line gives two links of channel cc's ring "
    "(src/graph/connect.cc); links forming one path over all ranks but one leave one way to "
    "close the ring: through the rank left out")
RULE_BUS_ID = (
    "RCCL ends this line with the printing rank's 'busId %lx' (ROCm/rccl src/init.cc), the "
    "busId this host's connection or init lines give that rank")
RULE_LOCAL_RANK = (
    "localRank counts the lower ranks on the same host (src/init.cc: rankToLocalRank filled in "
    "rank order) and ranks are numbered host by host, so the host holds ranks "
    "rank-localRank .. rank-localRank+localRanks-1")
RULE_DEVICE_BLOCK = (
    "ranks numbered host by host with local device = rank - first rank of the host; the host "
    "size is the highest local device index seen + 1")
RULE_LAST_HOST = (
    "nNodes counts distinct hosts (src/init.cc); the ranks not on the other nNodes-1 hosts are "
    "all on the remaining one")
RULE_BLOCKS = (
    "nRanks = nNodes x localRanks and ranks numbered host by host (src/init.cc): block k holds "
    "ranks k*localRanks .. (k+1)*localRanks-1")
RULE_NNODES = "every rank is placed; hosts counted"
RULE_EDGES = (
    "consecutive ranks of the rank-0 ring order (src/graph/rings.cc) that the host map puts on "
    "different hosts")


@dataclass(frozen=True)
class PrintedRank:
    """A line printed by one rank's own thread: which rank, and the line's host and [dev].

    ``rule`` is set when the rank is implied by a library rule rather than printed in the
    message (the ring dump is printed by rank 0).
    """

    rank: int
    host: str | None
    dev: int | None
    source: str | None
    line: int
    rule: str | None = None


@dataclass(frozen=True)
class LocalRankLine:
    """``comm %p rank R nRanks N nNodes M localRanks L localRank l`` (src/init.cc)."""

    rank: int
    local_rank: int
    local_ranks: int
    nnodes: int
    host: str | None
    source: str | None
    line: int


#: (source, 1-based line) of a line in the log
At = tuple[str | None, int]


def _at(at: At | None) -> str:
    return "?" if at is None else f"{at[0] or '-'}:{at[1]}"


def contradiction(what: str, first: tuple[object, At | None], other: tuple[object, At | None],
                  kept: str = "kept the first") -> ParseWarning:
    """A warning naming both lines that disagree (never a silent pick)."""
    (v1, at1), (v2, at2) = first, other
    line, source = (at2[1], at2[0]) if at2 else (None, None)
    return ParseWarning(message=f"{what}: {v2} ({_at(at2)}) contradicts {v1} ({_at(at1)}); "
                                f"{kept}", line=line, source=source)


@dataclass
class Seen:
    """What the log prints outright: rank -> host and rank -> device, with the line of each."""

    hosts: dict[int, str] = field(default_factory=dict)
    devices: dict[int, int] = field(default_factory=dict)
    host_at: dict[int, At] = field(default_factory=dict)
    device_at: dict[int, At] = field(default_factory=dict)


@dataclass
class Placement:
    """Where every rank the log implies sits, plus what had to be inferred for it.

    ``group_of`` maps a rank to its host key: the host name, or ``"#k"`` for the k-th host the
    log never names. ``node_of`` is NCCL's node index (hosts by lowest rank), filled only when
    every rank of the communicator is placed, since an unplaced rank could start an earlier node.
    """

    group_of: dict[int, str] = field(default_factory=dict)
    node_of: dict[int, int] = field(default_factory=dict)
    device_of: dict[int, int] = field(default_factory=dict)
    nnodes: int | None = None
    inferred: list[InferredFact] = field(default_factory=list)
    seen: Seen = field(default_factory=Seen)
    warnings: list[ParseWarning] = field(default_factory=list)

    def host_from(self, rank: int) -> FactSource | None:
        """How ``rank``'s host is known: the line printing it, or the rule placing it."""
        return self._source(rank, self.seen.host_at, ("host", "node"))

    def device_from(self, rank: int) -> FactSource | None:
        """How ``rank``'s local device is known."""
        return self._source(rank, self.seen.device_at, ("device",))

    def _source(self, rank: int, seen_at: dict[int, At], kinds: tuple[str, ...],
                ) -> FactSource | None:
        if rank in seen_at:
            src, line = seen_at[rank]
            return FactSource(status="seen", source=src, line=line)
        fact = next((f for f in self.inferred if f.fact in kinds and rank in f.ranks), None)
        if fact is None:
            return None
        return FactSource(status="inferred", source=fact.source, line=fact.line, rule=fact.rule)

    def host_of(self, rank: int) -> str | None:
        """The host name of ``rank`` (None when unknown or not named by the log)."""
        g = self.group_of.get(rank)
        return None if g is None or g.startswith("#") else g

    def hosts_ranks(self) -> list[HostRanks]:
        """Every host's full rank set, hosts by lowest rank: the ranks a line shows on it
        (``seen``) and the ranks a rule places there (``inferred``)."""
        out = []
        for key, ranks in sorted(self.groups().items(), key=lambda kv: kv[1][0]):
            seen = [r for r in ranks if r in self.seen.hosts]
            out.append(HostRanks(host=None if key.startswith("#") else key,
                                 node=self.node_of.get(ranks[0]), ranks=ranks, seen=seen,
                                 inferred=[r for r in ranks if r not in self.seen.hosts]))
        return out

    def groups(self) -> dict[str, list[int]]:
        """Host key -> its ranks, hosts ordered by their lowest rank."""
        out: dict[str, list[int]] = defaultdict(list)
        for r in sorted(self.group_of):
            out[self.group_of[r]].append(r)
        return dict(out)


def printed_placement(ranks: list[RankInfo]) -> list[HostRanks]:
    """For an artefact that prints every rank's host and device outright (a rank table,
    nccl-tests' ``# Rank r ... on HOST device d`` lines): mark them ``seen`` on ``ranks`` and
    return each host's ranks (all seen)."""
    hosts = {r.rank: r.host for r in ranks if r.host is not None}
    for r in ranks:
        r.host_from = FactSource(status="seen") if r.host is not None else None
        r.device_from = FactSource(status="seen") if r.device is not None else None
    return Placement(group_of=dict(hosts), seen=Seen(hosts=hosts)).hosts_ranks()


def rank_ranges(values: list[int]) -> str:
    """Sorted integers as compact ranges: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` (``"-"`` if empty)."""
    out: list[str] = []
    vals = sorted(set(values))
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ",".join(out) or "-"


def describe(fact: InferredFact) -> str:
    """One line for a human: what was inferred, for which ranks, from which line."""
    who = f" of ranks {rank_ranges(fact.ranks)}" if fact.ranks else ""
    where = f" ({fact.source or '?'}:{fact.line})" if fact.line is not None else ""
    return f"{fact.fact}{who}: {fact.value}{where}"


def _fact(kind, ranks, value, rule, source=None, line=None) -> InferredFact:
    return InferredFact(fact=kind, ranks=sorted(ranks), value=value, rule=rule, source=source,
                        line=line)


def infer_devices(printed: list[PrintedRank], seen: Seen) -> Placement:
    """Device of each rank from the ``[dev]`` prefix of lines its own thread printed.

    The devices ``seen`` prints outright (``cudaDev`` ...) win and are not inferred; a
    ``[dev]`` prefix that disagrees with one gives a warning naming both lines. The first line
    read for a rank decides.
    """
    out = Placement(device_of=dict(seen.devices), seen=seen)
    for p in printed:
        if p.dev is None:
            continue
        if p.rank in seen.devices:
            if p.dev != seen.devices[p.rank] and p.rule is None:
                out.warnings.append(contradiction(
                    f"rank {p.rank}: device", (seen.devices[p.rank], seen.device_at.get(p.rank)),
                    (f"[{p.dev}] prefix", (p.source, p.line)), "kept the printed device"))
            continue
        if p.rank in out.device_of:
            continue
        out.device_of[p.rank] = p.dev
        rule = RULE_DEVICE if p.rule is None else f"{p.rule}; {RULE_DEVICE}"
        out.inferred.append(_fact("device", [p.rank], f"device {p.dev}", rule, p.source, p.line))
    return out


def _block_of_host(ranks: set[int], lines: list[LocalRankLine], devices: dict[int, int],
                   dev_at: dict[int, At], width_hint: int | None,
                   ) -> tuple[range, str, At | None] | None:
    """The block of consecutive ranks one host holds, if its lines imply one, with the rule
    and the line it rests on (the localRank line, or the line of the lowest rank's device)."""
    if lines:
        bases = {ln.rank - ln.local_rank for ln in lines}
        widths = {ln.local_ranks for ln in lines}
        if len(bases) != 1 or len(widths) != 1:
            return None
        base, width, rule, ref = bases.pop(), widths.pop(), RULE_LOCAL_RANK, lines[0]
        at: At | None = (ref.source, ref.line)
    else:
        # One rank on its device says nothing about numbering; two or more agreeing do.
        with_dev = sorted(r for r in ranks if r in devices)
        bases = {r - devices[r] for r in with_dev}
        if len(bases) != 1 or not width_hint or len(with_dev) < 2:
            return None
        base, width, rule, at = bases.pop(), width_hint, RULE_DEVICE_BLOCK, dev_at.get(with_dev[0])
    block = range(base, base + width)
    if base < 0 or not ranks <= set(block):
        return None
    return block, rule, at


def place_ranks(nranks: int | None, nnodes: int | None, devices: Placement,
                local_lines: list[LocalRankLine], printed: list[PrintedRank] = (),
                ) -> Placement:
    """Hosts of the ranks: the hosts read, completed where the log implies the rest.

    Parameters
    ----------
    nranks, nnodes : int or None
        Communicator size and host count, when printed.
    devices : Placement
        :func:`infer_devices`: the hosts and devices the log prints (``seen``, facts, not
        inferred) and the devices its ``[dev]`` prefixes imply.
    local_lines : list of LocalRankLine
        The communicator's ``localRank`` lines.
    printed : list of PrintedRank
        Lines whose rank is implied by a rule (``rule`` set): their host is inferred too.

    Returns
    -------
    Placement
        ``group_of``/``node_of``/``nnodes``, ``device_of`` (``devices`` plus the devices the
        device-index numbering implies), the inferred facts and, for lines that disagree,
        warnings naming both.

    Notes
    -----
    Rules, in order: rank 0 is on the host of the ring dump (``RULE_RING_DUMP``); a host's
    block from its ``localRank`` lines (``RULE_LOCAL_RANK``) or from device indices
    (``RULE_DEVICE_BLOCK``); with ``nNodes`` hosts, the ranks left over are on the one host
    left (``RULE_LAST_HOST``) or, with ``nRanks = nNodes x localRanks``, in blocks of
    ``localRanks`` (``RULE_BLOCKS``). A block that would contradict a host read elsewhere is
    not used, and the contradiction is warned about.
    """
    seen = devices.seen
    out = Placement(device_of=dict(devices.device_of), seen=seen,
                    inferred=list(devices.inferred), warnings=list(devices.warnings))
    hosts = dict(seen.hosts)
    for p in printed:
        if p.rule is None or p.host is None:
            continue
        if p.rank not in hosts:
            hosts[p.rank] = p.host
            out.inferred.append(_fact("host", [p.rank], p.host, p.rule, p.source, p.line))
        elif hosts[p.rank] != p.host:
            out.warnings.append(contradiction(
                f"rank {p.rank}: host", (hosts[p.rank], seen.host_at.get(p.rank)),
                (p.host, (p.source, p.line))))
    out.group_of = dict(hosts)
    _place_host_blocks(out, hosts, nranks, local_lines)
    if nranks is not None:
        _place_unnamed(out, nranks, nnodes, local_lines)
        if len(out.group_of) == nranks and set(out.group_of) == set(range(nranks)):
            order = sorted(out.groups().items(), key=lambda kv: kv[1][0])
            out.node_of = {r: i for i, (_, rs) in enumerate(order) for r in rs}
            out.nnodes = len(order)
            if nnodes is None:
                out.inferred.append(_fact("nnodes", [], f"{len(order)} hosts", RULE_NNODES))
    return out


def _place_host_blocks(out: Placement, hosts: dict[int, str], nranks: int | None,
                       local_lines: list[LocalRankLine]) -> None:
    """Complete each named host to the block of ranks its lines imply."""
    by_host: dict[str, set[int]] = defaultdict(set)
    for r, h in hosts.items():
        by_host[h].add(r)
    lines_of: dict[str | None, list[LocalRankLine]] = defaultdict(list)
    for ln in local_lines:
        lines_of[ln.host].append(ln)
    devices = out.device_of
    dev_at = {**{f.ranks[0]: (f.source, f.line) for f in out.inferred
                 if f.fact == "device" and f.line is not None}, **out.seen.device_at}
    width_hint = max(devices.values()) + 1 if devices else None
    blocks = []
    for h, ranks in by_host.items():
        found = _block_of_host(ranks, lines_of.get(h, []), devices, dev_at, width_hint)
        if found is not None and (nranks is None or found[0].stop <= nranks):
            blocks.append((h, *found))
    # A block holding a rank read on another host shows the ranks are not numbered host by
    # host: then no block is trusted.
    clash = next(((h, at, r) for h, block, _, at in blocks for r in block
                  if hosts.get(r, h) != h), None)
    if clash is not None:
        h, at, r = clash
        out.warnings.append(contradiction(
            f"rank {r}: host", (hosts[r], out.seen.host_at.get(r)), (f"{h} (host block)", at),
            "no host block used"))
        return
    for h, block, rule, at in blocks:
        new = [r for r in block if r not in out.group_of]
        for r in new:
            out.group_of[r] = h
        src, line = at if at else (None, None)
        if new:
            out.inferred.append(_fact("host", new, h, rule, src, line))
        if rule == RULE_DEVICE_BLOCK:
            # The numbering that placed these ranks also gives their devices.
            for r in block:
                if r not in out.device_of:
                    out.device_of[r] = r - block.start
                    out.inferred.append(_fact("device", [r], f"device {r - block.start}",
                                              rule, src, line))


def _place_unnamed(out: Placement, nranks: int, nnodes: int | None,
                   local_lines: list[LocalRankLine]) -> None:
    """Put the ranks no named host holds on the hosts the log never names, where implied."""
    left = [r for r in range(nranks) if r not in out.group_of]
    if not left or nnodes is None:
        return
    named = len(set(out.group_of.values()))
    ref = local_lines[0] if local_lines else None
    src, line = (ref.source, ref.line) if ref else (None, None)
    if nnodes - named == 1:
        for r in left:
            out.group_of[r] = "#0"
        out.inferred.append(_fact("node", left, "a host the log does not name", RULE_LAST_HOST,
                                  src, line))
        return
    widths = {ln.local_ranks for ln in local_lines}
    if len(widths) != 1:
        return
    width = widths.pop()
    if width * nnodes != nranks:
        return
    k = 0
    for b in range(0, nranks, width):
        block = list(range(b, b + width))
        if all(r not in out.group_of for r in block):
            for r in block:
                out.group_of[r] = f"#{k}"
            out.inferred.append(_fact("node", block, "a host the log does not name",
                                      RULE_BLOCKS, src, line))
            k += 1


def cross_node_edges(ring: list[int], group_of: dict[int, str]) -> list[tuple[int, int]] | None:
    """Consecutive (a, b) of a ring order on different hosts; None unless every rank is placed.

    A ring whose ranks are not all placed has unknown edges, never "no edge": an empty list
    means the ring stays on one host. A ring that is not a permutation of ``0..n-1`` was cut
    (older NCCL cut long ring lines without ``...``, NVIDIA/nccl#514), so its edges are unknown.
    """
    edges, _ = ring_edges(ring, {}, Placement(group_of=group_of))
    return None if edges is None else [(e.a, e.b) for e in edges]


def ring_edges(ring: list[int], links: dict[tuple[int, int], tuple[bool, At]],
               placement: Placement, ring_at: At | None = None,
               ) -> tuple[list[RingEdge] | None, list[ParseWarning]]:
    """The cross-host edges of one whole ring, each seen or inferred.

    An edge is ``seen`` when the channel's connection line of the pair says how it goes
    (``links``: (a, b) -> (crosses, line)): SHM and P2P connect only ranks with the same host
    hash (NCCL ``src/transport/shm.cc`` shmCanConnect, ``src/graph/paths.cc``
    ncclTopoCheckP2p; P2P crosses hosts only with MNNVL) and NET is what is left
    (``src/transport/net.cc``; within a host only with P2P and SHM disabled). Else it is
    ``inferred`` when the hosts of both ranks are known (``RULE_EDGES``, the ring's line
    ``ring_at`` cited). None when some pair is neither, or the ring is not a permutation of
    ``0..n-1`` (cut, see :func:`cross_node_edges`). A connection line that disagrees with the
    hosts gives a warning naming the lines of both.
    """
    if not ring or sorted(ring) != list(range(len(ring))):
        return None, []
    group_of = placement.group_of
    edges: list[RingEdge] = []
    warnings: list[ParseWarning] = []
    for a, b in zip(ring, ring[1:] + ring[:1], strict=True):
        placed = a in group_of and b in group_of
        apart = placed and group_of[a] != group_of[b]
        link = links.get((a, b))
        if link is not None:
            crosses, at = link
            if placed and crosses != apart:
                hosts_at = placement.host_from(a), placement.host_from(b)
                where = next((h for h in hosts_at if h is not None and h.line is not None), None)
                warnings.append(contradiction(
                    f"ring edge {a}->{b}",
                    ("hosts " + ("apart" if apart else "shared"),
                     (where.source, where.line) if where else None),
                    ("NET connection" if crosses else "intra-host connection", at),
                    "kept the connection line"))
            if crosses:
                edges.append(RingEdge(a=a, b=b, status="seen", source=at[0], line=at[1]))
        elif not placed:
            return None, warnings
        elif apart:
            src, line = ring_at if ring_at else (None, None)
            edges.append(RingEdge(a=a, b=b, status="inferred", source=src, line=line))
    return edges, warnings
