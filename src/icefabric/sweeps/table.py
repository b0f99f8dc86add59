"""A sweep's results as one flat table, and its summary over seeds.

One row per point, policy, job, collective and size: the point's axis labels followed by the
result row's own columns (``busbw_GBps``, ``gain_vs_ecmp``, … and any per-draw quantile
columns such as ``busbw_GBps_p10``). Written as CSV: every column stays readable by a
spreadsheet, pandas or polars without an extra dependency.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from icefabric.experiment.runner import DEPLOYED
from icefabric.sweeps.spec import SEED_AXIS, SweepSpec

POINT_COLUMNS = ("point", "key")
#: Quantiles shown as a range (low, high) wherever a value has them.
RANGE = ("p10", "p90")


def collect_rows(spec: SweepSpec, records: list[dict]) -> list[dict]:
    """Flatten point records into table rows (the record order is kept)."""
    rows = []
    for rec in records:
        head = {"point": rec["index"], "key": rec["key"]}
        head.update({a: rec["labels"][a] for a in spec.axis_names})
        for r in rec["result"]["rows"]:
            rows.append({**head, **r})
    return rows


def write_csv(rows: list[dict], path: Path) -> Path:
    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(cols))
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    return path


def summarize(spec: SweepSpec, rows: list[dict], metric: str = "gain_vs_ecmp") -> list[dict]:
    """``metric`` per (axis labels except the seed, policy, job, collective, size): the
    median over seeds and its p10-p90 range. With one seed, a row's own quantile columns
    (``<metric>_p10``/``_p90``, from ECMP draws) give the range; otherwise the range spans
    the seeds. ``n`` is the number of values behind each figure."""
    axes = [a for a in spec.axis_names if a != SEED_AXIS]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        key = tuple(r[a] for a in axes) + (r["policy"], r["job"], r["collective"],
                                           r["size_bytes"])
        groups[key].append(r)
    out = []
    for key, rs in groups.items():
        vals = np.array([float(r[metric]) for r in rs])
        lo_k, hi_k = (f"{metric}_{q}" for q in RANGE)
        if len(rs) == 1 and rs[0].get(lo_k) is not None and rs[0].get(hi_k) is not None:
            lo, hi = float(rs[0][lo_k]), float(rs[0][hi_k])
        else:
            lo, hi = (float(np.percentile(vals, q)) for q in (10, 90))
        row = dict(zip(axes, key[:len(axes)]))
        row.update(policy=key[-4], job=key[-3], collective=key[-2], size_bytes=key[-1],
                   n=len(rs), median=round(float(np.median(vals)), 4), low=round(lo, 4),
                   high=round(hi, 4))
        out.append(row)
    return out


def gain_baseline(rows: list[dict]) -> tuple[str, str]:
    """(baseline policy, gain column) a sweep's gains are given over: ECMP as deployed
    (``ecmp-tuned``) where the sweep ran it, else NCCL's default ``ecmp``."""
    if any(r.get("gain_vs_deployed") is not None for r in rows):
        return DEPLOYED, "gain_vs_deployed"
    return "ecmp", "gain_vs_ecmp"


def summarize_busbw_and_gain(spec: SweepSpec, rows: list[dict]) -> list[dict]:
    """:func:`summarize` of the absolute busbw, each row with the gain over the
    :func:`gain_baseline` of the same group beside it (``gain``, ``gain_low``,
    ``gain_high``; None where the baseline was not run)."""
    def key(r):
        return tuple(v for k, v in r.items() if k not in ("n", "median", "low", "high"))

    gains = {key(g): g for g in summarize(spec, rows, gain_baseline(rows)[1])}
    out = []
    for b in summarize(spec, rows, "busbw_GBps"):
        g = gains.get(key(b), {})
        out.append({**b, "gain": g.get("median"), "gain_low": g.get("low"),
                    "gain_high": g.get("high")})
    return out
