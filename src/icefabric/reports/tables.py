"""nccl-tests-style tables from an ExperimentResult (rich renderables; no computation
beyond formatting — every number comes from the result object)."""

from __future__ import annotations

from collections import defaultdict

from rich.table import Table

from icefabric.units import format_size

BASELINES = ("ecmp", "ecmp-multiqp", "static-disjoint")


def _groups(rows):
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        g[(r["job"], r["collective"])].append(r)
    return g


def collective_tables(res, detail: bool = False) -> list[Table]:
    """One table per (job, collective): busbw per size and policy, gain over ecmp, ideal."""
    out = []
    for (job, coll), rows in _groups(res.rows).items():
        first = rows[0]
        algos = sorted({r["algorithm"] for r in rows})
        t = Table(title=f"{job} · {coll} · {'/'.join(algos)} · {first['nranks']} ranks  "
                  f"(busbw GB/s; gain over ecmp)", title_justify="left")
        t.add_column("size", justify="right")
        pols = [p for p in res.policies if p != "ideal"]
        for p in pols:
            if detail:
                t.add_column(f"{p}\ntime us", justify="right")
                t.add_column(f"{p}\nalgbw", justify="right")
            t.add_column(f"{p}\nbusbw", justify="right")
        if "ideal" in res.policies:
            t.add_column("ideal\nbusbw", justify="right", style="dim")
        by = {(r["policy"], r["size_bytes"]): r for r in rows}
        for size in res.sizes:
            cells = [format_size(size)]
            for p in pols:
                r = by.get((p, size))
                if r is None:
                    cells += ["-"] * (3 if detail else 1)
                    continue
                if detail:
                    cells += [f"{r['time_us']:.1f}", f"{r['algbw_GBps']:.2f}"]
                g = r.get("gain_vs_ecmp")
                gain = "" if p == "ecmp" or g is None else f" ({g:+.0%})"
                cells.append(f"{r['busbw_GBps']:.2f}{gain}")
            if "ideal" in res.policies:
                r = by.get(("ideal", size))
                cells.append(f"{r['busbw_GBps']:.2f}" if r else "-")
            t.add_row(*cells)
        out.append(t)
    return out


def summary_table(res) -> Table:
    """At the largest size: each policy's busbw, fraction of the ideal bound, and its gain
    over every baseline that was run."""
    size = res.sizes[-1]
    base = [b for b in BASELINES if b in res.policies]
    t = Table(title=f"Summary at {format_size(size)}: fraction of the ideal bound and gain "
              f"over the baselines", title_justify="left")
    for c in ("job", "collective", "policy", "busbw GB/s", "of ideal"):
        t.add_column(c, justify="right" if c not in ("job", "collective", "policy") else "left")
    for b in base:
        t.add_column(f"vs {b}", justify="right")
    rows = [r for r in res.rows if r["size_bytes"] == size]
    by = {(r["job"], r["collective"], r["policy"]): r for r in rows}
    for job, coll in _groups(rows):
        for p in res.policies:
            r = by.get((job, coll, p))
            if r is None:
                continue
            frac = r.get("frac_of_ideal")
            cells = [job, coll, p, f"{r['busbw_GBps']:.2f}",
                     f"{frac:.1%}" if frac is not None else "-"]
            for b in base:
                rb = by.get((job, coll, b))
                cells.append("" if rb is None or b == p
                             else f"{r['busbw_GBps'] / rb['busbw_GBps'] - 1:+.1%}")
            t.add_row(*cells)
    return t


def largest_run(res) -> str:
    """What the per-policy runs of link and congestion statistics ran: the largest size, or
    the training iteration of a scenario without collective jobs."""
    return format_size(res.sizes[-1]) if res.sizes else "the training iteration"


def link_table(res) -> Table:
    """Why: utilization of the switch-to-switch links per policy at the largest size."""
    t = Table(title=f"Fabric links (switch-to-switch) at {largest_run(res)}: "
              "utilization and QPs per link", title_justify="left")
    for c in ("policy", "links", "util min", "util mean", "util max", "idle links",
              "max QPs/link", "mean QPs/busy link"):
        t.add_column(c, justify="left" if c == "policy" else "right")
    for s in res.link_stats:
        m = s.summary()
        if m["uplinks"] == 0:
            t.add_row(s.policy, "0 (non-blocking)", "", "", "", "", "", "")
            continue
        t.add_row(s.policy, str(m["uplinks"]), f"{m['util_min']:.0%}", f"{m['util_mean']:.0%}",
                  f"{m['util_max']:.0%}", str(m["idle_links"]), f"{m['max_qps_on_link']:g}",
                  f"{m['mean_qps_on_busy_link']:.1f}")
    return t


def congestion_table(res) -> Table | None:
    """Fluid engine: PFC pauses, queues, ECN marks and CNPs per policy at the largest size."""
    if not res.congestion:
        return None
    t = Table(title=f"Congestion at {largest_run(res)} (fluid engine: DCQCN + PFC)",
              title_justify="left")
    cols = (("policy", "policy"), ("PFC pause us", "pfc_pause_us"),
            ("paused links", "paused_links"), ("max queue KB", "max_queue_KB"),
            ("ECN-marking ports", "ecn_marked_links"), ("CNPs", "cnps"),
            ("fallbacks to DCQCN", "endside_fallbacks"))
    for head, _ in cols:
        t.add_column(head, justify="left" if head == "policy" else "right")
    for c in res.congestion:
        t.add_row(*[str(c[k]) for _, k in cols])
    return t
