"""Figures from an ExperimentResult, for papers as much as for a first look. Every helper
takes an optional ``ax`` and returns the Figure; Agg backend, never ``plt.show()``.

Conventions: message sizes on binary byte ticks (1 MiB, 1 GiB), bandwidth axes from 0,
busbw in GB/s (nccl-tests), link and sending rates in Gb/s, queues in KiB; policies keep
one colour, marker and line style everywhere, and lines that coincide stay visible (later
policies are drawn thinner on top of wider ones).
"""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

from icefabric.units import format_size  # noqa: E402

#: policy -> (colour, marker, line style); colour-blind-safe Okabe–Ito palette.
STYLE = {"ecmp": ("#D55E00", "o", "-"), "ecmp-multiqp": ("#E69F00", "s", "--"),
         "static-disjoint": ("#CC79A7", "^", "-."), "spray": ("#009E73", "D", ":"),
         "ice": ("#0072B2", "*", "-"), "ideal": ("black", "", "--"),
         "ecmp-tuned": ("#56B4E9", "v", "--")}
_FALLBACK = [("#999999", "P", "-"), ("#F0E442", "X", "--"), ("#56B4E9", "h", ":")]
FORMATS = ("png", "svg", "pdf")


def policy_style(policy: str, i: int = 0) -> tuple[str, str, str]:
    return STYLE.get(policy.split(" ")[0], _FALLBACK[i % len(_FALLBACK)])


def byte_formatter() -> FuncFormatter:
    """Axis ticks in B/KiB/MiB/GiB (1048576 -> '1 MiB')."""
    def fmt(x, _pos):
        if x <= 0:
            return ""
        s = format_size(int(round(x)))
        return re.sub(r"(\d)([KMG]?i?B)$", r"\1 \2", s)
    return FuncFormatter(fmt)


def _size_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(sizes))))
    ax.xaxis.set_major_formatter(byte_formatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size")


def plot_busbw(res, job: str, collective: str, ax=None):
    """busbw vs message size, one line per policy; ideal dashed black and, when the
    fabric's capacity bound is lower, the bound dotted grey."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(6, 4))
    ax = ax or fig.add_subplot()
    rows = [r for r in res.rows if r["job"] == job and r["collective"] == collective]
    drawn = [p for p in res.policies if any(r["policy"] == p for r in rows)]
    if len({r["size_bytes"] for r in rows}) == 1:  # a line of one point says nothing
        return _busbw_bars(ax, rows, drawn, f"{job} · {collective}")
    for i, p in enumerate(drawn):
        pts = sorted((r["size_bytes"], r["busbw_GBps"]) for r in rows if r["policy"] == p)
        x, y = zip(*pts)
        color, marker, ls = policy_style(p, i)
        # earlier lines wider and with bigger hollow markers: a later line drawn exactly
        # over an earlier one leaves it visible around it
        k = (len(drawn) - 1 - i) / max(len(drawn) - 1, 1)  # 1 for the first, 0 for the last
        ax.plot(x, y, label=p, color=color, marker=marker or None, linestyle=ls,
                linewidth=1.4 + 1.6 * k, markersize=5 + 7 * k,
                markerfacecolor="none" if i % 2 == 0 else color, zorder=2 + i)
        band = sorted((r["size_bytes"], r["busbw_GBps_p10"], r["busbw_GBps_p90"])
                      for r in rows if r["policy"] == p and r.get("busbw_GBps_p10") is not None)
        if band:  # a drawn policy: its p10-p90 range over the draws
            bx, lo, hi = zip(*band)
            ax.fill_between(bx, lo, hi, color=color, alpha=0.15, linewidth=0, zorder=1)
    bound = sorted({(r["size_bytes"], r["bound_busbw_GBps"]) for r in rows
                    if r.get("bound_busbw_GBps") is not None})
    ideal = {r["size_bytes"]: r["busbw_GBps"] for r in rows if r["policy"] == "ideal"}
    if bound and any(b < ideal.get(s, np.inf) * 0.999 for s, b in bound):
        x, y = zip(*bound)
        ax.plot(x, y, color="0.5", linestyle=":", linewidth=2, label="capacity bound",
                zorder=1)
    _size_axis(ax, [r["size_bytes"] for r in rows])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{job} · {collective}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _busbw_bars(ax, rows: list[dict], policies: list[str], title: str):
    """One size: a bar per policy, with its p10-p90 range over the draws as an error bar."""
    by = {r["policy"]: r for r in rows}
    y = np.array([by[p]["busbw_GBps"] for p in policies])
    lo = np.array([by[p].get("busbw_GBps_p10", by[p]["busbw_GBps"]) for p in policies])
    hi = np.array([by[p].get("busbw_GBps_p90", by[p]["busbw_GBps"]) for p in policies])
    x = np.arange(len(policies))
    ax.bar(x, y, color=[policy_style(p, i)[0] for i, p in enumerate(policies)],
           yerr=np.stack([y - lo, hi - y]), capsize=4, ecolor="0.3")
    ax.set_xticks(x, policies, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{title} at {format_size(rows[0]['size_bytes'])}")
    ax.grid(True, axis="y", alpha=0.3)
    return ax.figure


def plot_all_busbw(res):
    groups = list(dict.fromkeys((r["job"], r["collective"]) for r in res.rows))
    n = len(groups)
    cols = min(n, 2)
    rows_ = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows_, cols, figsize=(6 * cols, 4 * rows_), squeeze=False)
    for ax, (job, coll) in zip(axes.flat, groups):
        plot_busbw(res, job, coll, ax=ax)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"{res.scenario}: busbw per policy ({res.engine} engine)")
    fig.tight_layout()
    return fig


def plot_draws(res, job: str, collective: str, ax=None):
    """busbw over the draws: one box per randomised policy and message size (median,
    p25-p75 box, whiskers at p10 and p90, every draw outside them as a dot); policies run
    once are a marker at their value."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(8, 4))
    ax = ax or fig.add_subplot()
    rows = [r for r in res.rows if r["job"] == job and r["collective"] == collective]
    sizes = sorted({r["size_bytes"] for r in rows})
    pols = [p for p in res.policies if any(r["policy"] == p for r in rows)]
    width = 0.8 / max(len(pols), 1)
    for i, p in enumerate(pols):
        color, marker, _ = policy_style(p, i)
        by = {r["size_bytes"]: r for r in rows if r["policy"] == p}
        pos = [k + (i - (len(pols) - 1) / 2) * width for k in range(len(sizes))]
        drawn = [(x, by[s]["busbw_GBps_draws"]) for x, s in zip(pos, sizes)
                 if by.get(s, {}).get("busbw_GBps_draws")]
        if drawn:
            bp = ax.boxplot([v for _, v in drawn], positions=[x for x, _ in drawn],
                            widths=width * 0.85, whis=(10, 90), patch_artist=True,
                            flierprops={"marker": ".", "markersize": 3,
                                        "markeredgecolor": color},
                            medianprops={"color": "black"})
            for box in bp["boxes"]:
                box.set(facecolor=color, alpha=0.45, edgecolor=color)
            ax.plot([], [], color=color, linewidth=6, alpha=0.45, label=f"{p} (draws)")
        else:
            pts = [(x, by[s]["busbw_GBps"]) for x, s in zip(pos, sizes) if s in by]
            ax.plot(*zip(*pts), linestyle="none", marker=marker or "_", color=color,
                    markersize=7, label=p)
    ax.set_xticks(range(len(sizes)), [re.sub(r"(\d)([KMG]?i?B)$", r"\1 \2", format_size(s))
                                      for s in sizes])
    ax.set_xlim(-0.6, len(sizes) - 0.4)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{job} · {collective}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_all_draws(res):
    """:func:`plot_draws` for every job and collective, one panel each."""
    groups = list(dict.fromkeys((r["job"], r["collective"]) for r in res.rows))
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 3.6 * len(groups)), squeeze=False)
    for ax, (job, coll) in zip(axes.flat, groups):
        plot_draws(res, job, coll, ax=ax)
    fig.suptitle(f"{res.scenario}: busbw over {res.draws} draws of QP numbers and hash seeds")
    fig.tight_layout()
    return fig


_NAME = re.compile(r"^([A-Za-z_]+?)-?(\d*)->([A-Za-z_]+?)-?(\d*)(?:/\d+)?$")


def link_groups(names: list[str]) -> tuple[np.ndarray, list[tuple[str, str, int, int]]]:
    """Order switch-to-switch links by tier (``leaf->spine``, ``spine->leaf``, ...) and,
    inside a tier, by the lower-tier switch; returns the column order and the groups as
    ``(tier, switch, first column, end column)``."""
    keys = []
    for i, n in enumerate(names):
        m = _NAME.match(n)
        if m is None:
            keys.append(("other", "", 0, i))
            continue
        a, ai, b, bi = m.groups()
        up = a in ("leaf", "agg") and b in ("spine", "agg", "core")
        sw, num = (f"{a}{ai}", ai) if up else (f"{b}{bi}", bi)
        keys.append((f"{a}->{b}", sw, int(num or 0), i))
    tiers = list(dict.fromkeys(k[0] for k in keys))
    keys.sort(key=lambda k: (tiers.index(k[0]), k[2], k[1], k[3]))
    order = np.array([k[3] for k in keys], dtype=np.int64)
    groups: list[tuple[str, str, int, int]] = []
    for col, (tier, sw, _, _) in enumerate(keys):
        if groups and groups[-1][:2] == (tier, sw):
            groups[-1] = (tier, sw, groups[-1][2], col + 1)
        else:
            groups.append((tier, sw, col, col + 1))
    return order, groups


def plot_link_utilization(res, ax=None):
    """Mean utilization of every switch-to-switch link per policy (heat map), columns
    grouped by tier and switch: ECMP's collisions show as hot links next to idle ones."""
    stats = [s for s in res.link_stats if s.link_names]
    n_links = max((len(s.link_names) for s in stats), default=10)
    fig = ax.figure if ax is not None else plt.figure(
        figsize=(min(max(8, 0.06 * n_links + 3), 24), 1.8 + 0.45 * max(len(stats), 1)))
    ax = ax or fig.add_subplot()
    if not stats:
        ax.text(0.5, 0.5, "no switch-to-switch links", ha="center")
        return fig
    order, groups = link_groups(stats[0].link_names)
    m = np.array([s.mean_util for s in stats])[:, order]
    im = ax.imshow(m, aspect="auto", cmap="magma", vmin=0, vmax=max(1.0, float(m.max())),
                   interpolation="nearest")
    ax.set_yticks(range(len(stats)), [s.policy for s in stats], fontsize=9)
    centers = [(g[2] + g[3] - 1) / 2 for g in groups]
    every = max(1, int(np.ceil(len(groups) / 40)))
    ax.set_xticks(centers[::every], [g[1] for g in groups][::every], fontsize=8,
                  rotation=0 if len(groups) <= 16 else 90)
    for i, g in enumerate(groups[1:], 1):
        new_tier = g[0] != groups[i - 1][0]
        ax.axvline(g[2] - 0.5, color="white", linewidth=2.0 if new_tier else 0.5)
    top = ax.secondary_xaxis("top")
    tiers = list(dict.fromkeys(g[0] for g in groups))
    tier_mid = [np.mean([c for g, c in zip(groups, centers) if g[0] == t]) for t in tiers]
    top.set_xticks(tier_mid, [t.replace("->", " → ") + " links" for t in tiers], fontsize=9)
    at = byte_formatter()(res.sizes[-1], None) if res.sizes else "the training iteration"
    ax.set_title(f"{res.scenario}: mean utilization of fabric links at {at}", pad=22)
    fig.colorbar(im, ax=ax, label="utilization", fraction=0.03, pad=0.01)
    fig.tight_layout()
    return fig


def flow_label(name: str) -> str:
    """Engine flow name -> legend label: ``gpt:all_reduce:1073741824#12`` ->
    ``gpt all_reduce 1 GiB, flow 12``."""
    coll, _, f = name.rpartition("#")
    if not coll:
        return name
    parts = coll.split(":")
    if len(parts) == 3 and parts[2].isdigit():
        parts[2] = byte_formatter()(int(parts[2]), None)
    return f"{' '.join(parts)}, flow {f}"


def plot_timeseries(run, n_links: int = 6, axes=None):
    """Queue occupancy of the ``n_links`` switch ports with the deepest queues (with the
    ECN marking and PFC pause thresholds of the run), and the DCQCN rate limit / sending
    rate of the recorded flows, over time (fluid engine runs)."""
    ts = run.timeseries
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    fig = axes[0].figure
    t = np.asarray(ts.get("t_us", []))
    queues = ts.get("queue_bytes", {})
    top = sorted(queues, key=lambda k: -max(queues[k], default=0))[:n_links]
    peak = 0.0
    for i, k in enumerate(top):
        q = np.asarray(queues[k]) / 1024
        peak = max(peak, float(q.max(initial=0)))
        axes[0].plot(t, q, label=k, linewidth=1.4, linestyle=("-", "--", "-.", ":")[i % 4])
    shown = _thresholds(axes[0], run.meta.get("queue_thresholds", {}), top, peak)
    axes[0].set_ylim(0, max([peak, *shown, 1.0]) * 1.12)
    axes[0].set_ylabel("queue (KiB)")
    axes[0].set_title(f"{run.policy}: deepest switch egress queues")
    if top:
        axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for k, v in list(ts.get("send_gbps", {}).items())[:6]:
        line, = axes[1].plot(t, v, label=flow_label(k))
        lim = ts.get("rate_gbps", {}).get(k)
        if lim is not None:
            axes[1].plot(t, lim, linestyle=":", color=line.get_color())
    axes[1].set_ylim(bottom=0)
    axes[1].set_ylabel("rate (Gb/s)\nsolid: sent, dotted: DCQCN limit")
    axes[1].set_xlabel("time (µs)")
    if ts.get("send_gbps"):
        axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def _thresholds(ax, th: dict, links: list[str], peak_kib: float) -> list[float]:
    """Grey lines at the ECN Kmin/Kmax and PFC pause thresholds of the plotted ports (one
    per distinct value) that lie within reach of the data (up to twice its peak); those
    above are named in a note. Returns the values drawn, in KiB."""
    drawn, above = [], []
    for key, label, style in (("ecn_kmin_bytes", "ECN Kmin", (0, (4, 3))),
                              ("ecn_kmax_bytes", "ECN Kmax", (0, (1, 2))),
                              ("pfc_xoff_bytes", "PFC pause at most", (0, (6, 2, 1, 2)))):
        for v in sorted({th[key][n] / 1024 for n in links if n in th.get(key, {})}):
            if v > 2 * max(peak_kib, 1.0):
                above.append(f"{label} {v:.0f}")
                continue
            drawn.append(v)
            ax.axhline(v, color="0.35", linestyle=style, linewidth=1)
            ax.annotate(f"{label} {v:.0f} KiB", (0.01, v), xycoords=("axes fraction", "data"),
                        ha="left", va="bottom", fontsize=7, color="0.3")
    if above:
        ax.text(0.99, 0.97, "above the chart: " + ", ".join(above) + " KiB",
                transform=ax.transAxes, ha="right", va="top", fontsize=7, color="0.3")
    return drawn


def result_figures(res, runs: dict | None = None) -> list[tuple[str, str, object, str]]:
    """The figures of a result, not drawn yet: ``(file name, title, draw, caption)``, where
    ``draw()`` gives a figure or, for training, ``(name, figure)`` pairs. ``runs``: the
    traced runs (default ``res.runs``). Shared by :func:`save_figures` and the HTML
    report, which draw them one at a time so progress can follow."""
    todo = [("busbw", "busbw per message size", lambda: plot_all_busbw(res), "")] \
        if res.rows else []
    if res.rows and getattr(res, "draws", 1) > 1:
        todo.append(("busbw_draws", "busbw over the ECMP draws", lambda: plot_all_draws(res),
                     f"One box per randomised policy and size over {res.draws} draws "
                     "of QP numbers and switch hash seeds: median line, p25-p75 box, "
                     "whiskers at p10 and p90. Policies that plan every path run once "
                     "(a marker)."))
    todo.append(("link_utilization", "Link utilisation", lambda: plot_link_utilization(res),
                 "Mean utilisation of every switch-to-switch link at the largest size, one "
                 "row per policy: hot links beside idle ones are hash collisions."))
    for policy, run in (getattr(res, "runs", {}) if runs is None else runs).items():
        if run.timeseries and run.timeseries.get("t_us"):
            todo.append((f"timeseries_{policy}", f"Queues and rates: {policy}",
                         lambda run=run: plot_timeseries(run), ""))
    if getattr(res, "training", None):
        from icefabric.reports.training import training_figures

        todo.append(("training", "training", lambda: training_figures(res), ""))
    return todo


def save_figures(res, out_dir, formats=("png",), progress=None) -> list[str]:
    """Write every figure in each of ``formats`` (png, svg, pdf); returns the paths.
    ``progress(done, total, name)`` hears of each figure before it is drawn (a large run's
    figures take tens of seconds)."""
    from pathlib import Path

    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown figure format(s) {bad}; use {', '.join(FORMATS)}")
    out = Path(out_dir)
    todo = result_figures(res)
    paths = []
    for i, (name, _, draw, _) in enumerate(todo):
        if progress:
            progress(i, len(todo), name)
        made = draw()
        for fname, fig in (made if isinstance(made, list) else [(name, made)]):
            for fmt in formats:
                p = out / f"{fname}.{fmt}"
                fig.savefig(p, dpi=150 if fmt == "png" else None)
                paths.append(str(p))
            plt.close(fig)
    if progress:
        progress(len(todo), len(todo), "done")
    return paths


__all__ = ["plot_busbw", "plot_all_busbw", "plot_draws", "plot_all_draws",
           "plot_link_utilization", "plot_timeseries", "result_figures", "save_figures",
           "link_groups", "byte_formatter", "flow_label", "FORMATS"]
