"""One self-contained HTML report per run or sweep: opens offline, images inline.

:func:`render` turns experiment results (``ExperimentResult``, optionally with their traced
fluid runs) into one page: the scenario, a fabric picture, busbw tables and plots, gains with
ranges, link-utilisation heat maps, the plan summary (where each policy put its QPs),
congestion statistics and queue/rate time series for fluid runs, and how to reproduce it.
:func:`render_sweep` does the same for a sweep's output folder (gain vs axis with ranges).

Every number in a table is copied from the result rows, formatted only: values as stored
(busbw in GB/s to one decimal), fractions as percentages with one decimal.
Ranges: a row that carries quantile columns ``<key>_p10`` and ``<key>_p90`` (per-draw ECMP
distributions) shows ``value (p10–p90)``; sweeps take the range over their seeds.

Plots are PNG (matplotlib, Agg) embedded as base64 ``data:`` URIs; the page has no script
and loads nothing, so it opens from a mail attachment or an air-gapped laptop.
"""

from __future__ import annotations

import base64
import io
import json
import platform
import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import yaml

from icefabric.engine.result import SimResult
from icefabric.errors import IceFabricError
from icefabric.experiment.calibration import trust_line
from icefabric.experiment.runner import ExperimentResult
from icefabric.reports.tables import BASELINES, DEPLOYED, GAIN_KEY, largest_run
from icefabric.sweeps.table import RANGE, collect_rows, gain_baseline, summarize
from icefabric.units import format_size

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("icefabric.reports", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)


class ReportError(IceFabricError, ValueError):
    """Input that cannot be reported on; ``str()`` is the user-facing message."""


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    css: str = ""  # "facts": text columns, left-aligned
    text_cols: int = 1  # leading columns of names (left-aligned); the rest are numbers


@dataclass
class Figure:
    title: str
    src: str  # data: URI
    caption: str = ""


@dataclass
class ReportInput:
    """One experiment to report: the result, where it came from, and optional extras."""

    result: ExperimentResult
    source: str
    scenario_text: str | None = None
    runs: dict[str, SimResult] = field(default_factory=dict)
    recorded: dict = field(default_factory=dict)  # version/commit/command stored with it


# ------------------------------------------------------------------------------ formatting
def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:+.1f}%"


def _frac(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _num(v) -> str:
    return "–" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _gbps(v) -> str:
    """A bandwidth in GB/s to one decimal (the model's figures are not finer than that)."""
    return "–" if v is None else f"{v:.1f}"


def ranged(row: dict, key: str, fmt=_num) -> str:
    """``value`` or ``value (low–high)`` when the row carries ``key``'s p10/p90."""
    lo, hi = (row.get(f"{key}_{q}") for q in RANGE)
    text = fmt(row.get(key))
    return text if lo is None or hi is None else f"{text} ({fmt(lo)} – {fmt(hi)})"


def figure(fig, title: str, caption: str = "") -> Figure:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return Figure(title, "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(),
                  caption)


def data_uri(text: str, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(text.encode()).decode()


# --------------------------------------------------------------------------- result tables
def _collectives(res: ExperimentResult) -> list[tuple[str, str]]:
    """(job, collective) pairs in the order the result lists them."""
    return list(dict.fromkeys((r["job"], r["collective"]) for r in res.rows))


def _largest_rows(res: ExperimentResult) -> list[dict]:
    """Rows at the largest size, grouped by collective, policies in the run's order."""
    groups = _collectives(res)
    return sorted((r for r in res.rows if r["size_bytes"] == res.sizes[-1]),
                  key=lambda r: (groups.index((r["job"], r["collective"])),
                                 res.policies.index(r["policy"])))


def _gain_cell(r: dict, rb: dict | None, base: str) -> str:
    """``r``'s gain over baseline row ``rb``: with the p10-p90 range over the draws where
    the row carries it (the deployed and the default ECMP), else the ratio of medians."""
    if rb is None or rb is r:
        return "–"
    if base in GAIN_KEY:
        return ranged(r, GAIN_KEY[base], _pct)
    return _pct(r["busbw_GBps"] / rb["busbw_GBps"] - 1)


def summary_table(res: ExperimentResult, idx: int) -> Table:
    """Largest size: busbw, fraction of the ideal bound and the gain over every baseline
    that was run, the deployed ECMP first and NCCL's default beside it."""
    base = [b for b in BASELINES if b in res.policies]
    largest = _largest_rows(res)
    by = {(r["job"], r["collective"], r["policy"]): r for r in largest}
    out = [[r["job"], r["collective"], r["policy"], ranged(r, "busbw_GBps", _gbps),
            _frac(r.get("frac_of_ideal"))] +
           [_gain_cell(r, by.get((r["job"], r["collective"], b)), b) for b in base]
           for r in largest]
    heads = [f"vs {b}" + (" (deployed)" if b == DEPLOYED else " (NCCL default)"
                          if b == "ecmp" else "") for b in base]
    return Table(f"summary-{idx}", f"Summary at {format_size(res.sizes[-1])}",
                 ["job", "collective", "policy", "busbw (GB/s)", "of ideal", *heads], out,
                 "ideal: the same workload on a non-blocking fabric (an upper bound). "
                 f"{DEPLOYED}: ECMP as RoCE clusters deploy it (NCCL_IB_QPS_PER_CONNECTION=2); "
                 "ecmp: NCCL's default (1 QP per connection). Gains over the ECMP family: "
                 "median (p10 – p90) over the draws.", text_cols=3)


def headline(res: ExperimentResult) -> list[str]:
    """What ICE buys, at which size, under which assumptions: one sentence per collective
    at the largest size (gain over the deployed ECMP first, over NCCL's default beside it),
    then the assumptions the figures rest on."""
    if not res.rows or "ice" not in res.policies:
        return []
    size = format_size(res.sizes[-1])
    out = []
    for r in _largest_rows(res):
        if r["policy"] != "ice":
            continue
        gains = [f"{_pct(r[GAIN_KEY[b]])} over {b}" + (" (ECMP as deployed)" if b == DEPLOYED
                                                         else " (NCCL's default)")
                 for b in (DEPLOYED, "ecmp") if r.get(GAIN_KEY[b]) is not None]
        ideal = (f", {_frac(r['frac_of_ideal'])} of ideal" if r.get("frac_of_ideal")
                 is not None else "")
        out.append(f"{r['job']} · {r['collective']} at {size}: ICE {_gbps(r['busbw_GBps'])} "
                   f"GB/s, {', '.join(gains) or 'no ECMP baseline run'}{ideal}.")
    model = ("flow engine: max-min rates, no queues" if res.engine == "flow" else
             "fluid engine: queues, ECN, DCQCN, PFC")
    draws = (f"ECMP medians over {res.draws} draws of QP numbers and switch hash seeds"
             if res.draws > 1 else "one draw of ECMP's QP numbers and hash seeds")
    out.append(f"Assumes: scenario {res.scenario}'s fabric, placement and switch hash models; "
               f"{model}; {draws}.")
    return out


def training_iteration_table(res: ExperimentResult, idx: int) -> Table:
    """The training job's iteration per policy (time, gains, breakdown, group busbw)."""
    from icefabric.reports.training import iteration_rows, training_header

    return Table(f"training-{idx}", training_header(res),
                 ["", *[r["policy"] for r in res.training["results"]]],
                 [[label, *cells] for label, cells in iteration_rows(res)],
                 "ms per iteration; breakdown is the mean per device (compute + exposed "
                 "communication + bubble = iteration); busbw in GB/s. See docs/training.md.")


def busbw_tables(res: ExperimentResult, idx: int) -> list[Table]:
    """Per (job, collective): busbw (GB/s) per size and policy, as nccl-tests prints it."""
    out = []
    for g, (job, coll) in enumerate(_collectives(res)):
        by = {(r["policy"], r["size_bytes"]): r for r in res.rows
              if (r["job"], r["collective"]) == (job, coll)}
        first = next(iter(by.values()))
        rows = [[format_size(s)] + [ranged(by[(p, s)], "busbw_GBps", _gbps) if (p, s) in by
                                    else "–"
                                    for p in res.policies] for s in res.sizes]
        out.append(Table(f"busbw-{idx}-{g}", f"{job} · {coll} · {first['algorithm']} · "
                         f"{first['nranks']} ranks: busbw (GB/s)", ["size"] + res.policies,
                         rows))
    return out


def plan_table(res: ExperimentResult, idx: int) -> Table:
    """Where each policy's plan put its QPs on the switch-to-switch links, and the load."""
    rows = []
    for s in res.link_stats:
        m = s.summary()
        rows.append([m["policy"], str(m["uplinks"]), _frac(m["util_mean"]),
                     _frac(m["util_max"]), str(m["idle_links"]), f"{m['max_qps_on_link']:g}",
                     f"{m['mean_qps_on_busy_link']:.2f}"])
    return Table(f"plan-{idx}", f"Plan summary at {largest_run(res)}: QPs and "
                 "utilisation on switch-to-switch links",
                 ["policy", "links", "mean util", "max util", "idle links", "max QPs/link",
                  "mean QPs/busy link"], rows,
                 "A policy that spreads its QPs leaves no link idle while another carries "
                 "several QPs.")


CONGESTION_COLUMNS = (("policy", "policy"), ("PFC pause (µs)", "pfc_pause_us"),
                      ("paused links", "paused_links"), ("PFC pauses", "pfc_pause_count"),
                      ("max queue (KB)", "max_queue_KB"),
                      ("ECN-marking ports", "ecn_marked_links"), ("CNPs", "cnps"),
                      ("end-side fallbacks", "endside_fallbacks"))


def congestion_table(res: ExperimentResult, idx: int) -> Table | None:
    if not res.congestion:
        return None
    return Table(f"congestion-{idx}", f"Congestion at {largest_run(res)} "
                 "(fluid engine: DCQCN, ECN, PFC)", [h for h, _ in CONGESTION_COLUMNS],
                 [[_num(c.get(k)) for _, k in CONGESTION_COLUMNS] for c in res.congestion])


# -------------------------------------------------------------------------- figures, misc
def _scenario_fabric(inp: ReportInput):
    """The run's fabric, rebuilt from its scenario text, or from the built-in scenario of
    the same name when that builds the very fabric the result describes; else None."""
    from icefabric.scenario.build import build_fabric
    from icefabric.scenario.loader import ScenarioError, builtin_names, builtin_text, loads

    text = inp.scenario_text
    if text is None and inp.result.scenario in builtin_names():
        text = builtin_text(inp.result.scenario)
    if text is None:
        return None
    try:
        fab = build_fabric(loads(text))
    except (ScenarioError, ValueError):
        return None
    same = json.loads(json.dumps(fab.describe())) == inp.result.fabric
    return fab if inp.scenario_text is not None or same else None


def fabric_picture(inp: ReportInput) -> Figure | None:
    from icefabric.reports.fabric_figure import plot_fabric

    fab = _scenario_fabric(inp)
    return None if fab is None else figure(plot_fabric(fab), "Fabric")


def result_figures(inp: ReportInput, progress=None) -> tuple[Figure | None, list[Figure]]:
    """The fabric drawing (None without the scenario's fabric) and the other figures of
    one result, drawn one at a time; ``progress(done, total, title)`` hears of each before
    it is drawn (a large run's figures take tens of seconds)."""
    from icefabric.reports.figures import result_figures as planned

    todo = planned(inp.result, inp.runs)
    n = len(todo) + 1
    if progress:
        progress(0, n, "fabric")
    fabric, figs = fabric_picture(inp), []
    for i, (_, title, draw, caption) in enumerate(todo, 1):
        if progress:
            progress(i, n, title)
        made = draw()
        if isinstance(made, list):  # training: (name, figure) pairs
            figs += [figure(fig, name.replace("_", " ")) for name, fig in made]
        else:
            figs.append(figure(made, title, caption))
    if progress:
        progress(n, n, "")
    return fabric, figs


def environment() -> dict[str, str]:
    """Versions of what made the report (and, for runs made here, the result)."""
    import matplotlib
    import numpy
    import scipy

    from icefabric import __version__

    return {"icefab": __version__, "python": platform.python_version(),
            "numpy": numpy.__version__, "scipy": scipy.__version__,
            "matplotlib": matplotlib.__version__, "platform": platform.platform()}


def reproduce_command(res: ExperimentResult, scenario_file: str = "scenario.yaml") -> str:
    """An ``icefab simulate`` command that reruns ``res`` from its recorded settings."""
    from icefabric.scenario.loader import builtin_names

    scn = res.scenario if res.scenario in builtin_names() else scenario_file
    sizes = ["--sizes", ",".join(format_size(s) for s in res.sizes)] if res.sizes else []
    return shlex.join(["icefab", "simulate", scn, "--engine", res.engine, "--policies",
                       ",".join(res.policies), *sizes, "--report", "report.html"])


def result_section(inp: ReportInput, idx: int, progress=None) -> dict:
    res = inp.result
    facts = [("scenario", res.scenario), ("description", res.description),
             ("engine", res.engine), ("seed", str(res.seed)),
             ("policies", ", ".join(res.policies)),
             ("message sizes", ", ".join(format_size(s) for s in res.sizes)),
             ("fabric", ", ".join(f"{k} {v}" for k, v in res.fabric.items()
                                  if not isinstance(v, dict))),
             ("nodes", ", ".join(f"{v} {k}" for k, v in res.fabric.get("nodes", {}).items()
                                 if v)),
             ("simulated in", f"{res.wall_s:.1f} s"), ("source", inp.source)]
    tables = [summary_table(res, idx), *busbw_tables(res, idx)] if res.rows else []
    if res.training:
        tables.append(training_iteration_table(res, idx))
    extra = [t for t in (plan_table(res, idx),
                         congestion_table(res, idx)) if t is not None]
    fabric, figs = result_figures(inp, progress)
    return {"id": idx, "title": f"{res.scenario} ({res.engine} engine)", "facts": facts,
            "headline": headline(res),
            "scenario_text": inp.scenario_text, "tables": tables, "extra_tables": extra,
            "fabric": fabric, "figures": figs, "notes": res.notes,
            "reproduce": reproduce_command(res), "recorded": inp.recorded,
            "json_uri": data_uri(res.to_json(), "application/json")}


def _write(out_path: str | Path, context: dict) -> Path:
    out = Path(out_path)
    page = _TEMPLATES.get_template("report.html.j2").render(
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), env=environment(),
        **context)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ReportError(f"cannot write {out}: {e.strerror}") from None
    return out


def render(inputs: list[ReportInput], out_path: str | Path, *,
           command: str | None = None, progress=None) -> Path:
    """Write one HTML page for ``inputs`` (one section each) to ``out_path``.

    ``command``: the command line that produced the results in this process, shown under
    "Reproduce" (results loaded from files show the command rebuilt from their settings).
    ``progress(done, total, title)`` hears of each figure of each section.
    """
    if not inputs:
        raise ReportError("nothing to report")
    sections = [result_section(inp, i, progress) for i, inp in enumerate(inputs)]
    title = "ice-fabric report: " + ", ".join(dict.fromkeys(s.result.scenario for s in inputs))
    return _write(out_path, {"title": title, "sections": sections, "sweep": None,
                             "command": command, "trust": trust_line()})


# ---------------------------------------------------------------------------------- sweeps
def sweep_figures(spec, summary: list[dict], base: str) -> list[Figure]:
    from icefabric.reports.sweep_figures import plot_gain_vs_axis

    groups = list(dict.fromkeys((r["job"], r["collective"], r["size_bytes"]) for r in summary))
    return [figure(plot_gain_vs_axis(spec, [r for r in summary
                                           if (r["job"], r["collective"], r["size_bytes"]) == g],
                                     base),
                   f"{g[0]} · {g[1]} · {format_size(g[2])}: gain over {base}")
            for g in groups]


def sweep_rows(spec, rows: list[dict]) -> list[list[str]]:
    """Per point (axes but the seed), policy, job, collective and size: the absolute busbw
    and the gain over the sweep's ECMP baseline (:func:`~icefabric.sweeps.table.
    gain_baseline`), each median (p10–p90) over the seeds; shared by the report and the
    table ``icefab sweep`` prints at its end."""
    from icefabric.sweeps.spec import SEED_AXIS
    from icefabric.sweeps.table import gain_baseline, summarize_busbw_and_gain

    axes = [a for a in spec.axis_names if a != SEED_AXIS]
    base = gain_baseline(rows)[0]
    out = []
    for r in summarize_busbw_and_gain(spec, rows):
        bw = f"{_gbps(r['median'])} ({_gbps(r['low'])} – {_gbps(r['high'])})"
        gain = ("–" if r["gain"] is None or r["policy"] == base else
                f"{_pct(r['gain'])} ({_pct(r['gain_low'])} – {_pct(r['gain_high'])})")
        out.append([str(r[a]) for a in axes] + [r["policy"], r["job"], r["collective"],
                                                 format_size(r["size_bytes"]), bw, gain])
    return out


def _named_settings(axis) -> str:
    """What the labels of a named axis stand for ("" for a field-path axis)."""
    if all(list(s) == [axis.name] for s in axis.settings):
        return ""
    return "; ".join(f"{lab}: " + (", ".join(f"{k}={v}" for k, v in s.items()) or "the base")
                     for lab, s in zip(axis.labels, axis.settings))


def sweep_section(out_dir: str | Path) -> dict:
    from icefabric.sweeps.run import load_sweep_dir
    from icefabric.sweeps.spec import SEED_AXIS

    spec, grid, recs = load_sweep_dir(out_dir)
    if not recs:
        raise ReportError(f"{out_dir}: no finished points yet (run `icefab sweep` first)")
    rows = collect_rows(spec, recs)
    base, metric = gain_baseline(rows)
    summary = summarize(spec, rows, metric)
    axes = [a for a in spec.axis_names if a != SEED_AXIS]
    table = Table("sweep-summary", f"Gain over {base}: median and p10–p90 range over seeds",
                  axes + ["policy", "job", "collective", "size", "n", "median", "p10", "p90"],
                  [[r[a] for a in axes] + [r["policy"], r["job"], r["collective"],
                                           format_size(r["size_bytes"]), str(r["n"]),
                                           _pct(r["median"]), _pct(r["low"]), _pct(r["high"])]
                   for r in summary if r["policy"] != base], text_cols=len(axes) + 4)
    busbw = Table("sweep-busbw", "busbw (GB/s) per point and policy: median (p10–p90) over "
                  f"seeds, with the gain over {base} beside it",
                  axes + ["policy", "job", "collective", "size", "busbw (GB/s)", f"vs {base}"],
                  sweep_rows(spec, rows), text_cols=len(axes) + 4)
    axes_table = Table("sweep-axes", "Axes", ["axis", "values", "each value sets"],
                       [[a.name, ", ".join(a.labels), _named_settings(a)] for a in spec.axes],
                       css="facts")
    csv_text = (Path(out_dir) / "results.csv").read_text() \
        if (Path(out_dir) / "results.csv").exists() else ""
    wall = sum(r.get("wall_s", 0.0) for r in recs)
    return {"spec": spec, "done": len(recs), "total": len(grid),
            "tables": [axes_table, table, busbw],
            "figures": sweep_figures(spec, summary, base), "cpu_s": f"{wall:.0f}",
            "base_text": yaml.safe_dump(spec.base, sort_keys=False),
            "set_text": yaml.safe_dump(spec.fixed, sort_keys=False) if spec.fixed else "",
            "csv_uri": data_uri(csv_text, "text/csv"),
            "reproduce": shlex.join(["icefab", "sweep", spec.source if not
                                     spec.source.startswith("<builtin") else spec.name,
                                     "--out", str(out_dir)])}


def render_sweep(out_dir: str | Path, out_path: str | Path, *,
                 command: str | None = None) -> Path:
    """Write the HTML report of the sweep stored in ``out_dir``."""
    sweep = sweep_section(out_dir)
    return _write(out_path, {"title": f"ice-fabric sweep: {sweep['spec'].name}",
                             "sections": [], "sweep": sweep, "command": command,
                             "trust": trust_line()})


__all__ = ["ReportError", "ReportInput", "render", "render_sweep", "environment"]
