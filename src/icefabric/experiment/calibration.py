"""Calibration: public measurements rebuilt as scenarios, each checked against our
distribution over ECMP draws.

The points live in ``benchmarks/calibration/points.yaml`` (source, quote, configuration,
measured figure, assumptions); a point that can be rebuilt has ``reproduce``: a list of
cases, each a scenario file (next to the points file), the policy and job whose busbw
stands for the measurement, the NCCL settings it assumes (``assume``) and the measured
figure. :func:`calibrate` runs every case over the draws and returns our p10-p50-p90
beside the measurement; :func:`render_table` is the table ``docs/calibration.md`` carries
between its ``calibration:begin``/``end`` markers (``icefab calibrate --write``), and the
tests recompute it. The same run is kept with the package (:data:`OUTCOMES`), so that
every output can say how far its ECMP figures are to be trusted (:func:`trust_line`)
without rerunning anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from icefabric.errors import IceFabricError
from icefabric.experiment.runner import run_scenario
from icefabric.scenario.loader import load

BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"
#: The last ``icefab calibrate --write`` run, shipped with the package (trust lines).
OUTCOMES = Path(__file__).with_name("calibration.json")
#: The ECMP family the trust line speaks of: policy -> what it stands for.
TRUSTED = {"ecmp-tuned": "as deployed (2 QPs per NCCL connection)",
           "ecmp": "NCCL's default (1 QP)"}


class CalibrationError(IceFabricError):
    """A points file or one of its cases that cannot be read or run."""


@dataclass(frozen=True)
class Case:
    """One measured figure and the scenario that rebuilds it."""

    point: str
    source: str
    label: str
    scenario: Path
    policy: str
    job: str
    collective: str
    measured: float
    #: the NCCL settings the case assumes (the source does not state them), e.g.
    #: ``NCCL_IB_QPS_PER_CONNECTION=2``
    assume: str
    #: relative slack on both ends of the range, for figures quoted as "around" or for a
    #: comparison with another vendor's planner (documented per case in the points file)
    tolerance: float = 0.0


@dataclass(frozen=True)
class Outcome:
    """Our busbw distribution for a case (p10, p50, p90 over the draws; equal for a
    deterministic policy) and whether the measured figure falls inside p10-p90."""

    case: Case
    draws: int
    seed: int
    p10: float
    p50: float
    p90: float

    @property
    def inside(self) -> bool:
        tol = self.case.tolerance
        return self.p10 * (1 - tol) <= self.case.measured <= self.p90 * (1 + tol)

    def to_dict(self) -> dict:
        d = asdict(self.case)
        d["scenario"] = self.case.scenario.name
        return {**d, "draws": self.draws, "seed": self.seed, "p10": self.p10, "p50": self.p50,
                "p90": self.p90, "inside": self.inside,
                "measured_over_median": round(self.case.measured / self.p50, 3)}


def read_cases(points_file: Path) -> list[Case]:
    """The reproducible cases of a points file."""
    try:
        doc = yaml.safe_load(Path(points_file).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise CalibrationError(f"cannot read calibration points {points_file}: {e}") from None
    out = []
    for p in doc.get("points", []):
        for c in p.get("reproduce") or []:
            try:
                out.append(Case(p["id"], p["source"], str(c["label"]),
                                Path(points_file).parent / c["scenario"], c["policy"],
                                c["job"], c.get("collective", "all_reduce"),
                                float(c["measured"]), str(c["assume"]),
                                float(c.get("tolerance", 0.0))))
            except KeyError as e:
                raise CalibrationError(f"{points_file}: point {p.get('id')}: a reproduce case "
                                       f"lacks {e}") from None
    return out


def run_case(case: Case, draws: int) -> Outcome:
    """Our busbw distribution for ``case`` (``draws`` draws of the randomised policies)."""
    ls = load(str(case.scenario))
    res = run_scenario(ls, policies=[case.policy], draws=draws)
    rows = [r for r in res.rows if r["job"] == case.job and r["collective"] == case.collective
            and r["size_bytes"] == res.sizes[-1]]
    if not rows:
        raise CalibrationError(f"{case.scenario.name}: no {case.collective} row of job "
                               f"{case.job!r}")
    r = rows[0]
    mid = r["busbw_GBps"]
    return Outcome(case, res.draws, res.seed, r.get("busbw_GBps_p10", mid), mid,
                   r.get("busbw_GBps_p90", mid))


def calibrate(points_file: Path, draws: int, progress=None) -> list[Outcome]:
    cases = read_cases(points_file)
    out = []
    for i, c in enumerate(cases):
        if progress:
            progress(i, len(cases), f"{c.point} {c.label}")
        out.append(run_case(c, draws))
    return out


def render_table(outcomes: list[Outcome]) -> str:
    """The markdown table docs/calibration.md keeps between its markers."""
    lines = ["| point | case | policy | NCCL assumed | measured busbw GB/s | ours p10 / p50 / "
             "p90 | inside p10-p90 (tolerance) | measured / our median |",
             "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        c = o.case
        lines.append(f"| [{c.point}]({c.source}) | {c.label} | {c.policy} | {c.assume} | "
                     f"{c.measured:g} | "
                     f"{o.p10:.1f} / {o.p50:.1f} / {o.p90:.1f} | "
                     f"{'yes' if o.inside else 'no'}"
                     f"{f' (±{c.tolerance:.0%})' if c.tolerance else ''} | "
                     f"{c.measured / o.p50:.2f} |")
    n = sorted({o.draws for o in outcomes if o.draws > 1})
    lines.append("")
    lines.append(f"Draws per randomised case: {', '.join(map(str, n)) or '-'} (seed: each "
                 "scenario's `seed`); a policy that plans every path runs once.")
    return "\n".join(lines)


def save_outcomes(outcomes: list[Outcome], path: Path = OUTCOMES) -> None:
    """Keep a run's outcomes (the cases and our quantiles) for :func:`trust_line`."""
    path.write_text(json.dumps([o.to_dict() for o in outcomes], indent=1) + "\n")


def load_outcomes(path: Path = OUTCOMES) -> list[Outcome]:
    """The outcomes :func:`save_outcomes` kept ([] when there are none)."""
    if not path.exists():
        return []
    out = []
    for d in json.loads(path.read_text()):
        case = Case(d["point"], d["source"], d["label"], Path(d["scenario"]), d["policy"],
                    d["job"], d["collective"], d["measured"], d["assume"], d["tolerance"])
        out.append(Outcome(case, d["draws"], d["seed"], d["p10"], d["p50"], d["p90"]))
    return out


def trust_line(outcomes: list[Outcome] | None = None) -> str:
    """One line on how the model's ECMP compares with the public measurements it rebuilds:
    per ECMP policy of :data:`TRUSTED`, the range of measured / our median and how many
    measurements fall inside our p10-p90 (from ``outcomes``, default the kept run)."""
    outcomes = load_outcomes() if outcomes is None else outcomes
    mine = {p: [o for o in outcomes if o.case.policy == p] for p in TRUSTED}
    parts = []
    for policy, what in TRUSTED.items():
        if mine[policy]:
            r = [o.case.measured / o.p50 for o in mine[policy]]
            inside = sum(o.inside for o in mine[policy])
            parts.append(f"{policy}, {what}: measured = {min(r):.2f}-{max(r):.2f}x our "
                         f"median, {inside} of {len(r)} inside our p10-p90")
    if not parts:
        return "trust: no calibration run is recorded (icefab calibrate --write)"
    figures = max(len(v) for v in mine.values())
    points = len({o.case.point for v in mine.values() for o in v})
    return (f"trust: the model's ECMP against {figures} published figures from {points} "
            "sources it can rebuild (docs/calibration.md): " + "; ".join(parts) +
            ". Above 1x the model's ECMP is low and ICE's gain over it an upper estimate.")


def write_table(doc: Path, outcomes: list[Outcome]) -> None:
    """Replace the table between the markers of ``doc``."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise CalibrationError(f"{doc}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{render_table(outcomes)}\n{END}{tail}")


def documented_table(doc: Path) -> str:
    """The table currently between the markers of ``doc``."""
    text = doc.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
