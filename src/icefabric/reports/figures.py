"""Figures from an ExperimentResult. Every helper takes an optional ``ax`` and returns the
Figure; Agg backend, never ``plt.show()``."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

STYLE = {"ecmp": ("tab:red", "o"), "ecmp-multiqp": ("tab:orange", "s"),
         "static-disjoint": ("tab:purple", "^"), "spray": ("tab:green", "D"),
         "ice": ("tab:blue", "*"), "ideal": ("black", "")}


def plot_busbw(res, job: str, collective: str, ax=None):
    """busbw vs message size, one line per policy (ideal dashed)."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(6, 4))
    ax = ax or fig.add_subplot()
    rows = [r for r in res.rows if r["job"] == job and r["collective"] == collective]
    for p in res.policies:
        pts = sorted((r["size_bytes"], r["busbw_GBps"]) for r in rows if r["policy"] == p)
        if not pts:
            continue
        x, y = zip(*pts)
        color, marker = STYLE.get(p, (None, "."))
        ax.plot(x, y, label=p, color=color, marker=marker or None,
                linestyle="--" if p == "ideal" else "-")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{job} · {collective}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_all_busbw(res):
    groups = sorted({(r["job"], r["collective"]) for r in res.rows})
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


def plot_link_utilization(res, ax=None):
    """Mean utilization of every switch-to-switch link, per policy (a heat map): ECMP's
    collisions show as hot links next to idle ones."""
    stats = [s for s in res.link_stats if s.link_names]
    fig = ax.figure if ax is not None else plt.figure(
        figsize=(max(8, 0.09 * max((len(s.link_names) for s in stats), default=10)),
                 1.0 + 0.6 * max(len(stats), 1)))
    ax = ax or fig.add_subplot()
    if not stats:
        ax.text(0.5, 0.5, "no switch-to-switch links", ha="center")
        return fig
    names = stats[0].link_names
    m = np.array([s.mean_util for s in stats])
    im = ax.imshow(m, aspect="auto", cmap="magma", vmin=0, vmax=max(1.0, float(m.max())),
                   interpolation="nearest")
    ax.set_yticks(range(len(stats)), [s.policy for s in stats])
    step = max(1, len(names) // 24)
    ax.set_xticks(range(0, len(names), step), names[::step], rotation=90, fontsize=6)
    ax.set_title(f"{res.scenario}: mean utilization of fabric links at the largest size")
    fig.colorbar(im, ax=ax, label="utilization")
    fig.tight_layout()
    return fig


def plot_timeseries(run, n_links: int = 6, axes=None):
    """Queue occupancy of the ``n_links`` switch ports with the deepest queues, and the DCQCN
    rate limit / sending rate of the recorded flows, over time (fluid engine runs)."""
    ts = run.timeseries
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    fig = axes[0].figure
    t = np.asarray(ts.get("t_us", []))
    queues = ts.get("queue_bytes", {})
    top = sorted(queues, key=lambda k: -max(queues[k], default=0))[:n_links]
    for k in top:
        axes[0].plot(t, np.asarray(queues[k]) / 1e3, label=k)
    axes[0].set_ylabel("queue (KB)")
    axes[0].set_title(f"{run.policy}: deepest switch egress queues")
    if top:
        axes[0].legend(fontsize=7, loc="upper right")
    for k, v in list(ts.get("send_gbps", {}).items())[:6]:
        line, = axes[1].plot(t, v, label=f"{k} sent")
        lim = ts.get("rate_gbps", {}).get(k)
        if lim is not None:
            axes[1].plot(t, lim, linestyle=":", color=line.get_color())
    axes[1].set_ylabel("Gb/s (solid: sent, dotted: DCQCN limit)")
    axes[1].set_xlabel("time (µs)")
    axes[1].legend(fontsize=6, loc="upper right")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def save_figures(res, out_dir) -> list[str]:
    from pathlib import Path

    out = Path(out_dir)
    paths = []
    figs = [("busbw.png", plot_all_busbw(res))] if res.rows else []
    figs.append(("link_utilization.png", plot_link_utilization(res)))
    if getattr(res, "training", None):
        from icefabric.reports.training import training_figures

        figs += training_figures(res)
    for policy, run in getattr(res, "runs", {}).items():
        if run.timeseries and run.timeseries.get("t_us"):
            figs.append((f"timeseries_{policy}.png", plot_timeseries(run)))
    for name, fig in figs:
        p = out / name
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(str(p))
    return paths


__all__ = ["plot_busbw", "plot_all_busbw", "plot_link_utilization", "plot_timeseries",
           "save_figures"]
