"""Training-iteration table and figures from an ExperimentResult's ``training`` report
(no computation beyond formatting and drawing: every number comes from the result)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: colours of task kinds in timelines and breakdown bars
KIND_COLORS = {"forward": "#4c78a8", "backward": "#72b7b2", "optimizer": "#54a24b",
               "compute": "#4c78a8", "tp": "#f58518", "pp": "#e45756", "dp": "#b279a2",
               "ep": "#eeca3b", "comm": "#9d755d", "bubble": "#d9d9d9"}
COMM = ("tp", "pp", "dp", "ep", "comm")


def training_header(res) -> str:
    """One line: the training job, its model and plan, and where its stages run."""
    tr = res.training
    return f"training {tr['job']}: {describe_plan(tr['summary'])}"


def describe_plan(s: dict) -> str:
    """A training job's model, parallel plan and stages in one line, from the training
    workload's ``summary``."""
    if "tp" not in s:
        return f"{s.get('ranks', '?')} ranks from Chakra traces"
    stages = " | ".join(f"{st['accelerator']} x{st['layers']}L" for st in s["stages"])
    return (f"{s['model']} · tp {s['tp']} × pp {s['pp']} × dp {s['dp']}"
            + (f" (ep {s['ep']})" if s["ep"] > 1 else "")
            + f" · {s['micro_batches']} micro-batches · {stages}")


def iteration_rows(res) -> list[tuple[str, list[str]]]:
    """(label, one cell per policy) rows of the iteration table, shared by the terminal
    table and the HTML report: time (a drawn policy: its median draw, and the p10-p90
    range), gain over ecmp (and over its lucky p10 draw), fraction of ideal, MFU, the mean
    per-device breakdown and each network group's bus bandwidth."""
    rs = res.training["results"]
    kinds = [k for k in COMM if any(k in r["breakdown"]["exposed_ms"] for r in rs)]

    def pct(v, sign=""):
        return "" if v is None else f"{v:{sign}.1%}"

    rows = [("iteration", [f"{r['iteration_ms']:.1f}" for r in rs])]
    if any("draws" in r for r in rs):  # randomised policies: median draw and range
        rows.append(("p10-p90", [f"{r['iteration_ms_p10']:.1f}-{r['iteration_ms_p90']:.1f}"
                                 if "draws" in r else "" for r in rs]))
    rows.append(("vs ecmp", ["" if r["policy"] == "ecmp" else pct(r.get("gain_vs_ecmp"), "+")
                             for r in rs]))
    if any("gain_vs_ecmp_lucky" in r for r in rs):
        rows.append(("vs lucky ecmp", ["" if r["policy"] == "ecmp" else
                                       pct(r.get("gain_vs_ecmp_lucky"), "+") for r in rs]))
    rows += [
        ("of ideal", [pct(r.get("frac_of_ideal")) for r in rs]),
        ("MFU", [pct(r.get("mfu")) for r in rs]),
        ("compute", [f"{r['breakdown']['compute_ms']:.1f}" for r in rs])]
    rows += [(f"exposed {k}", [f"{r['breakdown']['exposed_ms'].get(k, 0.0):.1f}" for r in rs])
             for k in kinds]
    rows.append(("bubble", [f"{r['breakdown']['bubble_ms']:.1f}" for r in rs]))
    rows += [(f"busbw {k}", [f"{r['collectives'][k]['busbw_GBps']:.1f}"
                             if k in r["collectives"] else "-" for r in rs])
             for k in kinds if k != "tp"]
    return rows


def training_tables(res, fit) -> list:
    """One iteration per policy (a column each, as in the collective tables), laid out by
    ``fit`` (a :class:`~icefabric.reports.tables.Fitter`): full policy names when they fit,
    else short names with the legend, else split."""
    from icefabric.reports.tables import Column

    rows = iteration_rows(res)
    cols = [Column("", [label for label, _ in rows], key=True)]
    cols += [Column(r["policy"], [cells[i] for _, cells in rows], policy=r["policy"])
             for i, r in enumerate(res.training["results"])]
    return fit.fit(("one iteration per policy (ms); breakdown: mean per device; busbw in "
                    "GB/s", cols))


def plot_iteration_timelines(res):
    """A Gantt chart of one iteration per policy: one row per device shown, bars coloured
    by task kind (communication drawn thinner, on top of compute)."""
    tr = res.training
    pols = list(tr["timeline"])
    n_dev = max(len(tr["timeline"][p]["devices"]) for p in pols)
    fig, axes = plt.subplots(len(pols), 1, figsize=(12, 0.5 + (0.45 * n_dev + 0.6) * len(pols)),
                             squeeze=False, sharex=True)
    for ax, p in zip(axes[:, 0], pols):
        plot_timeline(tr["timeline"][p], ax=ax)
        r = next(x for x in tr["results"] if x["policy"] == p)
        ax.set_title(f"{p}: {r['iteration_ms']:.1f} ms", fontsize=9, loc="left")
    present = {task[1] for p in pols for task in tr["timeline"][p]["tasks"]}
    labels = [k for k in KIND_COLORS if k in present]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in labels]
    fig.legend(handles, labels, loc="upper right", ncol=len(labels), fontsize=8)
    axes[-1, 0].set_xlabel("time (ms)")
    fig.suptitle(f"{res.scenario}: one training iteration per policy", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def plot_timeline(tl: dict, ax=None):
    """One policy's timeline (``training.timeline[policy]`` of the result)."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(12, 3))
    ax = ax or fig.add_subplot()
    n = len(tl["devices"])
    for pos, kind, s_us, e_us in tl["tasks"]:
        comm = kind in COMM
        y = n - 1 - pos + (0.05 if comm else -0.35)
        ax.broken_barh([(s_us / 1e3, max(e_us - s_us, 0.0) / 1e3)], (y, 0.3 if comm else 0.7),
                       facecolors=KIND_COLORS.get(kind, "grey"), linewidth=0)
    ax.set_yticks(range(n))
    ax.set_yticklabels(list(reversed(tl["devices"])), fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def plot_iteration_breakdown(res, ax=None):
    """Stacked bars per policy: compute, exposed communication per group, bubble."""
    tr = res.training
    fig = ax.figure if ax is not None else plt.figure(figsize=(7, 4))
    ax = ax or fig.add_subplot()
    pols = [r["policy"] for r in tr["results"]]
    bottom = [0.0] * len(pols)
    parts = [("compute", [r["breakdown"]["compute_ms"] for r in tr["results"]])]
    parts += [(k, [r["breakdown"]["exposed_ms"].get(k, 0.0) for r in tr["results"]])
              for k in COMM]
    parts.append(("bubble", [r["breakdown"]["bubble_ms"] for r in tr["results"]]))
    for name, vals in parts:
        if not any(vals):
            continue
        ax.bar(pols, vals, bottom=bottom, color=KIND_COLORS[name],
               label=name if name in ("compute", "bubble") else f"exposed {name}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per iteration (mean per device)")
    ax.set_title(f"{res.scenario}: where the iteration goes")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8, rotation=20)
    fig.tight_layout()
    return fig


def training_figures(res) -> list[tuple[str, object]]:
    return [("training_timeline", plot_iteration_timelines(res)),
            ("training_breakdown", plot_iteration_breakdown(res))]
