"""Sweep figures: gain over the sweep's ECMP baseline against the first axis, with ranges.

One panel per combination of the other axes (the seed axis is the range, not a panel), one
line per policy: the median over seeds with a p10-p90 band. Agg backend, never
``plt.show()``.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icefabric.reports.figures import policy_style  # noqa: E402
from icefabric.sweeps.spec import SEED_AXIS, SweepSpec  # noqa: E402

_HIDDEN = ("ideal",)  # a bound, not a scheme (the baseline is the zero line)


def _x(labels: tuple[str, ...]) -> tuple[np.ndarray, list[str] | None]:
    """Numeric positions when every label is a number, else categories."""
    try:
        return np.array([float(v) for v in labels]), None
    except ValueError:
        return np.arange(len(labels), dtype=float), list(labels)


def plot_gain_vs_axis(spec: SweepSpec, summary: list[dict], base: str = "ecmp"):
    """Gain over ``base`` (median, p10-p90 band) vs the first axis, for one (job,
    collective, size); ``summary`` rows come from :func:`icefabric.sweeps.table.summarize`."""
    axes = [a for a in spec.axes if a.name != SEED_AXIS]
    if not axes:
        axes_x, panels = None, [()]
    else:
        axes_x = axes[0]
        panels = list(itertools.product(*[a.labels for a in axes[1:]]))
    n = len(panels)
    fig, subs = plt.subplots(1, n, figsize=(min(4.2 * n, 17), 3.6), squeeze=False,
                             sharey=True)
    policies = [p for p in dict.fromkeys(r["policy"] for r in summary)
                if p not in _HIDDEN and p != base]
    for ax, panel in zip(subs[0], panels):
        sel = [r for r in summary
               if all(r[a.name] == lab for a, lab in zip(axes[1:], panel))]
        for i, p in enumerate(policies):
            # Dodge: policies with equal gains (ice and spray often are) stay visible.
            _line(ax, axes_x, [r for r in sel if r["policy"] == p], p,
                  dodge=(i - (len(policies) - 1) / 2) * 0.06)
        ax.axhline(0, color=policy_style(base)[0], lw=1, ls="--", label=base)
        xs = np.unique(_x(axes_x.labels)[0]) if axes_x else np.zeros(1)
        half = (float(np.diff(xs).min()) if len(xs) > 1 else 1.0) / 2
        ax.set_xlim(xs[0] - half, xs[-1] + half)
        ax.set_title(", ".join(f"{a.name}={lab}" for a, lab in zip(axes[1:], panel)) or
                     spec.name, fontsize=9)
        ax.set_xlabel(axes_x.name if axes_x else "")
        ax.grid(True, alpha=0.3)
        ax.yaxis.set_major_formatter(lambda v, _: f"{v * 100:+.0f}%")
    subs[0][0].set_ylabel(f"busbw gain over {base}")
    subs[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _line(ax, axis, rows: list[dict], policy: str, dodge: float) -> None:
    """Median line with a p10-p90 band and error bars; ``dodge`` shifts it sideways by
    that fraction of the spacing between x positions."""
    if not rows:
        return
    if axis is None:
        xs, ticks = np.zeros(1), None
        order = rows[:1]
    else:
        xs, ticks = _x(axis.labels)
        pos = {lab: x for lab, x in zip(axis.labels, xs)}
        order = sorted(rows, key=lambda r: pos[r[axis.name]])
        xs = np.array([pos[r[axis.name]] for r in order])
        if ticks is not None:
            ax.set_xticks(np.arange(len(ticks)), ticks)
        elif len(xs):
            ax.set_xticks(sorted(set(xs)), [f"{v:g}" for v in sorted(set(xs))])
    step = float(np.diff(np.unique(xs)).min()) if len(np.unique(xs)) > 1 else 1.0
    xs = xs + dodge * step
    color, marker, _ = policy_style(policy)
    med = np.array([r["median"] for r in order])
    lo = np.array([r["low"] for r in order])
    hi = np.array([r["high"] for r in order])
    line, = ax.plot(xs, med, marker=marker or "o", color=color, label=policy)
    ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
    ax.errorbar(xs, med, yerr=[med - lo, hi - med], fmt="none", ecolor=line.get_color(),
                capsize=3, lw=0.8)


__all__ = ["plot_gain_vs_axis"]
