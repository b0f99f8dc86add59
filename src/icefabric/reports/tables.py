"""nccl-tests-style tables from an ExperimentResult (rich renderables; no computation
beyond formatting — every number comes from the result object).

Tables fit the width they are printed at (a terminal, or 80 columns when piped): full
policy names when they fit, else short names with a legend, else the columns split over
several tables that repeat the key columns. No cell is ever cut.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from icefabric.experiment.runner import BASELINES, DEPLOYED
from icefabric.units import format_size

#: Short names of the built-in policies (others get the initials of their parts).
SHORT = {"ecmp-multiqp": "mqp", "static-disjoint": "sdisj", "ecmp-tuned": "tuned"}

IDEAL_NOTE = ("ideal = the same jobs on a non-blocking fabric (every server on one switch, "
              "same NICs): no policy can beat it.")
BOUND_NOTE = ("bound = what this fabric's cuts allow: each leaf (or pod) sends its bytes "
              "over its uplinks at full speed (max-flow/cut); where it is below ideal, the "
              "fabric is oversubscribed and 'of bound' is the fair score.")


def short_name(name: str) -> str:
    """Short column name of a policy (``ecmp-multiqp`` -> ``mqp``)."""
    if name in SHORT:
        return SHORT[name]
    if len(name) <= 6:
        return name
    base, _, rest = name.partition(" ")  # e.g. "ice (twin)"
    parts = base.split("-")
    short = parts[0][:4] + "".join(p[0] for p in parts[1:]) if len(parts) > 1 else base[:5]
    return f"{short} {rest}" if rest else short


@dataclass
class Column:
    """One column: header (may hold newlines), cells, and whether it is a key column
    (left-aligned, repeated in every part when a table is split)."""

    header: str
    cells: list[str]
    key: bool = False
    dim: bool = False
    policy: str | None = None  # header ends with this policy's name (shortened if needed)
    prefix: str = ""  # header text before the policy name


@dataclass
class Fitter:
    """Lays tables out for one width and remembers which short names it used."""

    width: int
    used: dict[str, str] = field(default_factory=dict)

    def _measure(self, table: Table) -> int:
        con = Console(width=10_000, file=_Null(), color_system=None)
        return con.measure(table).maximum

    def _table(self, cols: list[Column], short: bool,
               row_names: set[str]) -> Table:
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for c in cols:
            head = c.prefix + short_name(c.policy) if (short and c.policy) else c.header
            t.add_column(head, justify="left" if c.key else "right", no_wrap=True,
                         style="dim" if c.dim else None)
        for i in range(len(cols[0].cells) if cols else 0):
            cells = [c.cells[i] for c in cols]
            if short:
                cells = [short_name(x) if (c.key and x in row_names) else x
                         for c, x in zip(cols, cells)]
            t.add_row(*cells)
        return t

    def fit(self, *variants: tuple[str, list[Column]], row_policies=()
            ) -> list[RenderableType]:
        """The first layout that fits: each (title, columns) variant, most informative
        first, with full policy names, then each with short names, else the last one split
        by columns."""
        names = set(row_policies)
        for short in (False, True):
            for title, cols in variants:
                t = self._table(cols, short, names)
                if self._measure(t) <= self.width:
                    if short:
                        self._note(cols, names)
                    return [_heading(title), t]
        title, cols = variants[-1]
        self._note(cols, names)
        keys = [c for c in cols if c.key]
        parts: list[list[Column]] = [[]]
        for c in (c for c in cols if not c.key):
            trial = self._table(keys + parts[-1] + [c], True, names)
            if parts[-1] and self._measure(trial) > self.width:
                parts.append([])
            parts[-1].append(c)
        out: list[RenderableType] = []
        for i, p in enumerate(parts):
            out += [_heading(f"{title} ({i + 1}/{len(parts)})"),
                    self._table(keys + p, True, names)]
        return out

    def _note(self, cols: list[Column], names: set[str]) -> None:
        for c in cols:
            if c.policy and short_name(c.policy) != c.policy:
                self.used[short_name(c.policy)] = c.policy
        for p in names:
            if short_name(p) != p:
                self.used[short_name(p)] = p

    def legend(self) -> Text | None:
        if not self.used:
            return None
        pairs = ", ".join(f"{k} = {v}" for k, v in sorted(self.used.items()))
        return Text(f"short names: {pairs}", style="dim")


def _heading(title: str) -> Text:
    """A table's title on its own line, wrapped at the console width, not the table's."""
    return Text("\n" + title, style="bold")


class _Null:
    def write(self, _):
        return 0

    def flush(self):
        pass


# --------------------------------------------------------------------------------------
def _groups(rows):
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        g[(r["job"], r["collective"])].append(r)
    return g


def _title(rows) -> str:
    first = rows[0]
    algos = "/".join(sorted({r["algorithm"] for r in rows}))
    return f"{first['job']} · {first['collective']} · {algos} · {first['nranks']} ranks"


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _binds(res) -> bool:
    """Whether the capacity bound is below ideal somewhere (then it is worth a column)."""
    return any(r.get("frac_of_bound") is not None and r.get("frac_of_ideal") is not None
               and r["frac_of_bound"] > r["frac_of_ideal"] * 1.001 for r in res.rows)


def summary_tables(res, fit: Fitter) -> list[RenderableType]:
    """At the largest size, per job and collective: each policy's busbw, its fraction of
    ideal (and of the capacity bound when that is lower), and its gain over every baseline
    that was run."""
    if not res.rows:  # a training-only scenario
        return []
    size = res.sizes[-1]
    base = [b for b in BASELINES if b in res.policies]
    bound = _binds(res)
    rows = [r for r in res.rows if r["size_bytes"] == size]
    coll, pol, busbw, ideal, ofb, lucky = [], [], [], [], [], []
    drawn = res.draws > 1
    gains: dict[str, list[str]] = {b: [] for b in base}
    for (job, c), grp in _groups(rows).items():
        by = {r["policy"]: r for r in grp}
        first = True
        for p in res.policies:
            r = by.get(p)
            if r is None:
                continue
            coll.append(f"{job} {c}" if first else "")
            first = False
            pol.append(p)
            busbw.append(_ranged(r))
            lucky.append(_gain(r.get("gain_vs_ecmp_lucky")) if p != "ecmp" else "")
            ideal.append(_pct(r.get("frac_of_ideal")))
            ofb.append(_pct(r.get("frac_of_bound")))
            for b in base:
                rb = by.get(b)
                gains[b].append("" if rb is None or b == p else
                                f"{r['busbw_GBps'] / rb['busbw_GBps'] - 1:+.1%}")
    cols = [Column("job collective", coll, key=True), Column("policy", pol, key=True),
            Column("busbw GB/s\nmed (p10-p90)" if drawn else "busbw\nGB/s", busbw),
            Column("of\nideal", ideal)]
    if bound:
        cols.append(Column("of\nbound", ofb))
    cols += [Column(f"vs\n{b}", gains[b], policy=b, prefix="vs\n") for b in base]
    if drawn and "ecmp" in base:
        cols.append(Column("vs lucky\necmp p90", lucky))
    what = (f"; ECMP family over {res.draws} draws of QP numbers and hash seeds, gains "
            "over medians" if drawn else "")
    first = (f" ({DEPLOYED} = ECMP as deployed, 2 QPs per NCCL connection, first; ecmp = NCCL's "
             "default, 1)" if DEPLOYED in base else "")
    return fit.fit((f"Summary at {format_size(size)}: busbw, share of the bounds, gain over "
                    f"each baseline{first}{what}", cols), row_policies=res.policies)


def _ranged(r: dict, digits: int = 1) -> str:
    """busbw, with its p10-p90 range where the row has one (drawn policies)."""
    lo, hi = r.get("busbw_GBps_p10"), r.get("busbw_GBps_p90")
    text = f"{r['busbw_GBps']:.{digits}f}"
    return text if lo is None or hi is None else f"{text} [{lo:.{digits}f}-{hi:.{digits}f}]"


def _gain(g) -> str:
    return "" if g is None else f"{g:+.1%}"


def collective_tables(res, fit: Fitter, detail: bool = False) -> list[RenderableType]:
    """Per (job, collective): busbw per size and policy with the gain over the deployed
    ECMP (else ``ecmp``). With ``detail``, one nccl-tests-style table per policy (time,
    algbw, busbw, gains over the deployed and the default ECMP, share of ideal)."""
    out: list[RenderableType] = []
    pols = [p for p in res.policies if p != "ideal"]
    over = gain_baseline(res.policies)
    for _, rows in _groups(res.rows).items():
        title = _title(rows)
        by = {(r["policy"], r["size_bytes"]): r for r in rows}
        sizes = [format_size(s) for s in res.sizes]
        if detail:
            over_all = [b for b in (DEPLOYED, "ecmp") if b in res.policies]
            for p in res.policies:
                out += _detail_table(fit, f"{title} · {p}", res.sizes, by, p, over_all)
            continue
        variants = []
        for with_gain in (True, False):
            cols = [Column("size", sizes, key=True)]
            for p in pols:
                cols.append(Column(p, [_busbw_cell(by.get((p, s)),
                                                   over if with_gain and p != over else None)
                                       for s in res.sizes], policy=p))
            if "ideal" in res.policies:
                cols.append(Column("ideal", [_busbw_cell(by.get(("ideal", s)), False)
                                             for s in res.sizes], dim=True))
            variants.append((f"{title}: busbw GB/s" + (f" (gain over {over})" if with_gain
                                                       and over else ""), cols))
        out += fit.fit(*variants)
    return out


def gain_baseline(policies) -> str | None:
    """The baseline a single gain column is over: the deployed ECMP when it was run, else
    NCCL's default ``ecmp``, else none."""
    return next((b for b in (DEPLOYED, "ecmp") if b in policies), None)


#: The result row's gain column over each baseline that has one.
GAIN_KEY = {DEPLOYED: "gain_vs_deployed", "ecmp": "gain_vs_ecmp"}


def _busbw_cell(r, over: str | None) -> str:
    """busbw (with the p10-p90 range of a drawn policy instead of the gain), and the gain
    over baseline ``over`` when given."""
    if r is None:
        return "-"
    if r.get("busbw_GBps_p10") is not None:
        return _ranged(r)
    g = r.get(GAIN_KEY[over]) if over else None
    return f"{r['busbw_GBps']:.1f}" + (f" ({g:+.0%})" if g is not None else "")


def _detail_table(fit, title, size_bytes, by, p, over) -> list[RenderableType]:
    """Policy ``p``'s nccl-tests-style table: time, algbw, busbw, gains over ``over`` and
    share of ideal per size (``by``: (policy, size) -> row)."""
    cells: dict[str, list[str]] = defaultdict(list)
    for s in size_bytes:
        r = by.get((p, s))
        cells["time us"].append(f"{r['time_us']:.1f}" if r else "-")
        cells["algbw"].append(f"{r['algbw_GBps']:.1f}" if r else "-")
        cells["busbw"].append(f"{r['busbw_GBps']:.1f}" if r else "-")
        for b in over:
            g = r.get(GAIN_KEY[b]) if r else None
            cells[f"vs {b}"].append("" if g is None or p == b else f"{g:+.1%}")
        cells["of ideal"].append(_pct(r.get("frac_of_ideal")) if r else "-")
    sizes = [format_size(s) for s in size_bytes]
    cols = [Column("size", sizes, key=True)] + [Column(h, v) for h, v in cells.items()]
    return fit.fit((title, cols))


def largest_run(res) -> str:
    """What the per-policy runs of link and congestion statistics ran: the largest size, or
    the training iteration of a scenario without collective jobs."""
    return format_size(res.sizes[-1]) if res.sizes else "the training iteration"


def link_tables(res, fit: Fitter) -> list[RenderableType]:
    """Why: utilization of the switch-to-switch links per policy at the largest size."""
    heads = ("links", "util\nmin", "util\nmean", "util\nmax", "idle\nlinks", "max\nQPs/link",
             "QPs per\nbusy link")
    cells: list[list[str]] = [[] for _ in heads]
    for s in res.link_stats:
        m = s.summary()
        vals = (["0"] + ["-"] * 6 if m["uplinks"] == 0 else
                [str(m["uplinks"]), f"{m['util_min']:.0%}", f"{m['util_mean']:.0%}",
                 f"{m['util_max']:.0%}", str(m["idle_links"]), f"{m['max_qps_on_link']:g}",
                 f"{m['mean_qps_on_busy_link']:.1f}"])
        for c, v in zip(cells, vals):
            c.append(v)
    pols = [s.policy for s in res.link_stats]
    cols = [Column("policy", pols, key=True)] + [Column(h, c) for h, c in zip(heads, cells)]
    return fit.fit((f"Fabric links (switch-to-switch) at {largest_run(res)}: "
                    "utilization and QPs per link", cols), row_policies=pols)


def congestion_tables(res, fit: Fitter) -> list[RenderableType]:
    """Fluid engine: PFC pauses, queues, ECN marks and CNPs per policy at the largest size."""
    if not res.congestion:
        return []
    spec = (("PFC pause\nus", "pfc_pause_us"), ("paused\nlinks", "paused_links"),
            ("max queue\nKB", "max_queue_KB"), ("ECN-marking\nports", "ecn_marked_links"),
            ("CNPs", "cnps"), ("fallbacks\nto DCQCN", "endside_fallbacks"))
    pols = [c["policy"] for c in res.congestion]
    cols = [Column("policy", pols, key=True)] + \
        [Column(h, [str(c[k]) for c in res.congestion]) for h, k in spec]
    return fit.fit((f"Congestion at {largest_run(res)} (fluid engine: DCQCN + "
                    "PFC)", cols), row_policies=pols)


def notes(res) -> list[str]:
    """One-line explanations of the columns that need one."""
    out = []
    if "ideal" in res.policies:
        out.append(IDEAL_NOTE)
    if _binds(res):
        out.append(BOUND_NOTE)
    return out


def render(res, width: int, *, detail: bool = False) -> list[RenderableType]:
    """Everything ``icefab simulate`` prints after its header, summary first, laid out for
    ``width`` columns."""
    fit = Fitter(width)
    out: list[RenderableType] = []
    out += summary_tables(res, fit)
    if notes(res):
        out.append(Text("\n" + "\n".join(notes(res)), style="dim"))
    out += collective_tables(res, fit, detail=detail)
    if res.training:
        from icefabric.reports.training import training_header, training_tables

        out += [Text("\n" + training_header(res))] + training_tables(res, fit)
    out += link_tables(res, fit)
    out += congestion_tables(res, fit)
    legend = fit.legend()
    if legend is not None:
        out.append(legend)
    return out


def fabric_summary(fab: dict) -> str:
    """One line on the fabric from ``Fabric.describe()``: its kind (rail-optimized shown as
    such), oversubscription and size."""
    builder = fab.get("builder", "")
    kind = {"leaf_spine": "leaf-spine", "fat_tree": "fat-tree"}.get(builder, builder)
    if fab.get("rail_optimized"):
        kind = f"rail-optimized {kind}"
    over = fab.get("oversub", 1.0)
    ratio = "non-blocking (1:1)" if over == 1 else f"{over:g}:1 oversubscribed"
    nodes = fab.get("nodes", {})
    parts = [f"{fab.get('servers')} servers", f"{nodes.get('accel')} accelerators",
             f"{fab.get('leaves')} leaves"]
    if builder == "fat_tree":
        parts += [f"{fab.get('pods')} pods", f"{fab.get('cores')} cores"]
    elif fab.get("spines"):
        parts.append(f"{fab['spines']} spines")
    return f"fabric: {kind}, {ratio}; " + ", ".join(parts)
