"""Rich tables for ``icefab collect``: one builder per artefact, "-" for every unknown value."""

from __future__ import annotations

from collections import defaultdict
from pathlib import PurePath
from typing import Any

from rich.markup import escape
from rich.table import Table

from icefabric.collect.infer import rank_ranges
from icefabric.schemas import CommunicatorReport, InferredFact, TreeNode


def cell(value: Any) -> str:
    """A table cell: "-" for an unknown (None) value, else the value as text (log text such as
    ``[dev]`` is escaped, never read as rich markup)."""
    return "-" if value is None else escape(str(value))


def _table(title: str, columns: list[str]) -> Table:
    t = Table(title=title)
    for col in columns:
        t.add_column(col)
    return t


def communicator_tables(rep: CommunicatorReport, index: int, total: int) -> list[Table]:
    """Everything a report holds, as tables: summary, ranks, rings, trees, network
    connections, NICs, and the values that were inferred rather than read."""
    title = "communicator" if total == 1 else f"communicator {index + 1} of {total}"
    head = Table(title=title, show_header=False)
    for k, v in (("library", rep.library), ("version", rep.version), ("commId", rep.comm_id),
                 ("nranks", rep.nranks), ("nnodes", rep.nnodes), ("network", rep.network),
                 ("channels", rep.nchannels)):
        head.add_row(k, cell(v))
    out = [head]
    files = len(rep.sources)
    if rep.hosts_ranks:
        t = _table("hosts (every rank: seen on a line of its own, or inferred)",
                   ["host", "node", "ranks", "seen", "inferred"])
        for h in rep.hosts_ranks:
            t.add_row(cell(h.host or "(not named)"), cell(h.node), rank_ranges(h.ranks),
                      rank_ranges(h.seen), rank_ranges(h.inferred))
        out.append(t)
    if rep.ranks:
        t = _table("ranks", ["rank", "host", "node", "device", "busId", "nic", "host from",
                             "device from"])
        for r in rep.ranks:
            t.add_row(*map(cell, (r.rank, r.host, r.node, r.device, r.bus_id, r.nic,
                                  _from(r.host_from, files), _from(r.device_from, files))))
        out.append(t)
    if rep.rings:
        t = _table("rings", ["channel", "order", "cross-host edges (seen / inferred, line)"])
        for ring in rep.rings:
            edges = ring.edges
            t.add_row(str(ring.channel),
                      " ".join(map(str, ring.ranks)) + ("" if ring.complete else " ..."),
                      "-" if edges is None else (
                          ", ".join(f"{e.a}->{e.b} {_from(e, files)}" for e in edges)
                          or "none (one host)"))
        out.append(t)
    if rep.trees:
        out.append(trees_table(rep.trees))
    net = rep.net_connections()
    if net:
        t = _table("network connections", ["channel", "from", "to", "dir", "plugin", "nic#",
                                           "nic", "link", "proxy", "gdr", "host"])
        for c in net:
            t.add_row(*map(cell, (c.channel, c.from_rank, c.to_rank, c.direction, c.net_plugin,
                                  c.net_dev, c.nic, c.link, c.proxy_rank, c.gdrdma, c.host)))
        out.append(t)
    for hn in rep.nics:
        t = _table(f"NICs on {cell(hn.host)} (OOB {cell(hn.oob)})",
                   ["index", "name", "port", "link"])
        for n in hn.nics:
            t.add_row(*map(cell, (n.index, n.name, n.port, n.link)))
        out.append(t)
    if rep.inferred:
        out.append(inferred_table(rep.inferred))
    return out


def _from(src, files: int) -> str | None:
    """``seen 12`` / ``inferred 3`` (``seen file:12`` when the report read several files):
    how a fact is known and from which line; None when it is not known."""
    if src is None:
        return None
    if src.line is None:
        return src.status
    name = f"{PurePath(src.source).name}:" if files > 1 and src.source else ""
    return f"{src.status} {name}{src.line}"


def trees_table(trees: list[TreeNode]) -> Table:
    """Tree neighbours per rank, channels with the same neighbours merged (NCCL prints
    ``down0/down1/down2->rank->up`` per channel; -1 means none)."""
    second = any(t.tree for t in trees)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for t in trees:
        groups[(t.rank, t.tree, tuple(t.down), t.up)].append(t.channel)
    cols = ["rank", "channels", "down", "up"] + (["tree"] if second else [])
    table = _table("trees (-1: none)", cols)
    for (rank, tree, down, up), channels in sorted(groups.items(),
                                                   key=lambda kv: (kv[0][0], kv[0][1], kv[1])):
        row = [str(rank), rank_ranges(channels), "/".join(map(str, down)), str(up)]
        table.add_row(*(row + [str(tree)] if second else row))
    return table


def inferred_table(facts: list[InferredFact]) -> Table:
    """Inferred values grouped by (fact, rule): the ranks, values and lines behind each rule."""
    groups: dict[tuple[str, str], list[InferredFact]] = defaultdict(list)
    for f in facts:
        groups[(f.fact, f.rule)].append(f)
    t = _table("inferred (implied by the log, not printed)", ["fact", "ranks", "value", "from",
                                                               "rule"])
    for (fact, rule), items in groups.items():
        values = list(dict.fromkeys(f.value for f in items))
        shown = "; ".join(values) if len(values) <= 3 else f"{len(values)} values (see --json)"
        lines: dict[str, list[int]] = defaultdict(list)
        for f in items:
            if f.line is not None:
                lines[PurePath(f.source).name if f.source else "-"].append(f.line)
        where = " ".join(f"{src}:{rank_ranges(ls)}" for src, ls in lines.items()) or "-"
        t.add_row(fact, rank_ranges([r for f in items for r in f.ranks]), cell(shown), cell(where),
                  cell(rule))
    return t


def nccl_tests_table(run) -> Table:
    """A run's rows as nccl-tests printed them, under the columns it printed (``#wrong`` or
    ``error``, ``time`` or ``cputime``, with or without ``redop``/``root``; src/util.cu
    ``writeResultHeader``), out-of-place then in-place."""
    cols = run.header_columns or []
    first = run.rows[0] if run.rows else {}
    lead = [c for c in ("size", "count", "type", "redop", "root")
            if c in cols or (not cols and c in first)]
    half_names = cols[len(lead):len(lead) + 4] if len(cols) == len(lead) + 8 else [
        "time", "algbw", "busbw",
        "error" if "error" in first.get("out_of_place", {}) else "#wrong"]
    units = {"size": "(B)", "count": "(elements)", "time": "(us)", "cputime": "(us)",
             "algbw": "(GB/s)", "busbw": "(GB/s)"}
    table = Table(title=cell(run.command or run.collective or "nccl-tests"))
    for c in lead:
        table.add_column(f"\n{c}\n{units.get(c, '')}", justify="right")
    for half in ("out-of-place", "in-place"):
        for i, name in enumerate(half_names):
            table.add_column(f"{half if i == 0 else ''}\n{name}\n{units.get(name, '')}",
                             justify="right")
    for tokens in run.printed_rows:
        table.add_row(*map(cell, tokens))
    return table
