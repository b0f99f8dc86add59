"""SimResult: the only input of tables, plots and reports; saved as JSON.

Results are data before they are text: every printed table is computed from a SimResult,
and ``SimResult.to_json()``/``from_json()`` round-trip, so a run can be re-reported later.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from icefabric.ccl.bandwidth import algbw_GBps, busbw_factor

SCHEMA_VERSION = 1


@dataclass
class CollectiveResult:
    name: str
    job: str
    kind: str
    size_bytes: int
    nranks: int
    start_ns: int
    finish_ns: int
    algorithm: str = ""

    @property
    def time_ns(self) -> int:
        return self.finish_ns - self.start_ns

    @property
    def time_us(self) -> float:
        return self.time_ns / 1e3

    @property
    def algbw_GBps(self) -> float:
        return algbw_GBps(self.size_bytes, max(self.time_ns, 1) / 1e9)

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * busbw_factor(self.kind, self.nranks)


@dataclass
class SimResult:
    """Outcome of one engine run of one policy on one workload.

    Per-link arrays are indexed like the problem's links; ``link_names`` labels them.
    Queue/PFC/ECN/CNP statistics are filled by engines that model them (fluid), and are
    empty dicts otherwise.
    """

    engine: str
    policy: str
    scenario: str
    seed: int
    makespan_ns: int
    flow_start_ns: np.ndarray
    flow_finish_ns: np.ndarray
    collectives: list[CollectiveResult]
    link_names: list[str]
    link_capacity_bps: np.ndarray
    link_bytes: np.ndarray  # payload bytes carried by each link over the run
    link_peak_util: np.ndarray  # max over time of load/capacity
    wall_s: float = 0.0
    events: int = 0
    link_max_queue_bytes: dict[str, float] = field(default_factory=dict)
    link_pfc_pause_ns: dict[str, int] = field(default_factory=dict)
    link_pfc_pause_count: dict[str, int] = field(default_factory=dict)
    link_ecn_marked_frac: dict[str, float] = field(default_factory=dict)
    qp_cnp_count: dict[str, int] = field(default_factory=dict)
    timeseries: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def link_mean_util(self) -> np.ndarray:
        """Average utilization of each link over the makespan."""
        span_s = max(self.makespan_ns, 1) / 1e9
        return self.link_bytes * 8.0 / (self.link_capacity_bps * span_s)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["schema_version"] = SCHEMA_VERSION
        for k, v in list(d.items()):
            if isinstance(v, np.ndarray):
                d[k] = v.tolist()
        d["collectives"] = [
            {**asdict(c), "time_us": c.time_us, "algbw_GBps": c.algbw_GBps,
             "busbw_GBps": c.busbw_GBps} for c in self.collectives]
        return _jsonable(d)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, d: dict) -> SimResult:
        d = dict(d)
        d.pop("schema_version", None)
        colls = []
        for c in d.pop("collectives"):
            c = {k: v for k, v in c.items() if k not in ("time_us", "algbw_GBps", "busbw_GBps")}
            colls.append(CollectiveResult(**c))
        for k in ("flow_start_ns", "flow_finish_ns"):
            d[k] = np.asarray(d[k], dtype=np.int64)
        for k in ("link_capacity_bps", "link_bytes", "link_peak_util"):
            d[k] = np.asarray(d[k], dtype=np.float64)
        return cls(collectives=colls, **d)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> SimResult:
        p = Path(text_or_path) if not str(text_or_path).lstrip().startswith("{") else None
        text = p.read_text() if p is not None else str(text_or_path)
        return cls.from_dict(json.loads(text))


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None if np.isnan(x) else ("inf" if x > 0 else "-inf")
    return x
