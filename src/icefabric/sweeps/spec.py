"""Sweep files: a base scenario plus axes, expanded into a grid of points.

A sweep file is YAML::

    name: oversub-nicmix
    base: hetero-default            # built-in scenario name, or a path relative to this file
    set: {sizes: [256MiB]}          # fields changed at every point (same paths as axes)
    axes:
      fabric.oversub: [1, 2, 4]     # a scenario field path and its values
      nic_mix:                      # a named axis: each label sets several fields
        400G+200G: {}
        400G+100G:
          pools[1].nic_gbps: 100
    seeds: [1, 2, 3]                # each point once per seed: the ranges in reports

Field paths use dots for mapping keys and ``[i]`` for list items (``pools[0].count``).
Every point is validated as a scenario, so a bad value names its point and field. A point's
``key`` hashes its resolved scenario: results stored under that key are reused (resume)
exactly when the point would run the same thing again.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from icefabric.errors import IceFabricError
from icefabric.scenario.loader import ScenarioError, builtin_names, builtin_text, loads


class SweepError(IceFabricError, ValueError):
    """Bad sweep input or a failed sweep; ``str()`` is the user-facing message."""


SEED_AXIS = "seed"
#: The fields of a sweep file and what each holds (docs/sweeps.md is generated from this).
FIELDS: dict[str, str] = {
    "name": "the sweep's name (default: the file's stem); names the report",
    "description": "one paragraph on what the sweep asks (shown in the report)",
    "base": "**required**: the scenario every point starts from: a built-in scenario name "
            "(`icefab scenarios`), a scenario file (relative to the sweep file), or the "
            "scenario itself as a mapping",
    "set": "field paths set at every point, e.g. `{sizes: [256MiB], policies: [ecmp, ice]}`",
    "axes": "the grid: per axis either a field path and its list of values "
            "(`fabric.oversub: [1, 2, 4]`) or a named axis whose labels each set several "
            "fields (`nic_mix: {400G+100G: {pools[1].nic_gbps: 100}}`; `{}` keeps the base)",
    "seeds": "each point once per seed, as a list of seeds or a count (counting up from the "
             "base's `seed`): the p10-p90 ranges of the report",
}
_TOKEN = re.compile(r"\.?([A-Za-z_][\w-]*)|\[(\d+)\]")


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid: value labels and, per label, the fields it sets."""

    name: str
    labels: tuple[str, ...]
    settings: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str
    source: str
    base: dict
    fixed: dict[str, Any]
    axes: tuple[Axis, ...]

    @property
    def axis_names(self) -> list[str]:
        return [a.name for a in self.axes]

    def to_dict(self) -> dict:
        """The sweep as resolved (base inlined), saved beside its results."""
        return {"name": self.name, "description": self.description, "source": self.source,
                "base": self.base, "set": self.fixed,
                "axes": [{"name": a.name, "labels": list(a.labels),
                          "settings": list(a.settings)} for a in self.axes]}

    @classmethod
    def from_dict(cls, d: dict) -> SweepSpec:
        axes = tuple(Axis(a["name"], tuple(a["labels"]), tuple(a["settings"]))
                     for a in d["axes"])
        return cls(d["name"], d.get("description", ""), d.get("source", ""), d["base"],
                   d.get("set", {}), axes)


@dataclass(frozen=True)
class Point:
    """One grid point: its axis labels and the scenario it runs."""

    index: int
    labels: dict[str, str]
    scenario: dict
    key: str


def set_path(data: dict, path: str, value: Any) -> None:
    """Set ``value`` at a field path such as ``pools[0].count`` inside nested data.

    Mapping keys may be new (a field the base leaves at its default); list items must exist.
    """
    tokens = [(m.group(1), m.group(2)) for m in _TOKEN.finditer(path)]
    if not tokens or "".join(m.group(0) for m in _TOKEN.finditer(path)) != path:
        raise SweepError(f"bad field path {path!r} (use e.g. fabric.oversub or pools[0].count)")
    node: Any = data
    for i, (key, idx) in enumerate(tokens):
        last = i == len(tokens) - 1
        if key is not None:
            if not isinstance(node, dict):
                raise SweepError(f"{path}: {key!r} is not inside a mapping")
            if last:
                node[key] = copy.deepcopy(value)
            else:
                node = node.setdefault(key, {})
        else:
            if not isinstance(node, list) or int(idx) >= len(node):
                raise SweepError(f"{path}: the base scenario has no item [{idx}] there")
            if last:
                node[int(idx)] = copy.deepcopy(value)
            else:
                node = node[int(idx)]


def _label(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def _axis(name: str, values: Any, source: str) -> Axis:
    if isinstance(values, dict):  # named axis: label -> {path: value}
        bad = [k for k, v in values.items() if not isinstance(v, dict)]
        if bad:
            raise SweepError(f"{source}: axes.{name}: each label maps to fields to set "
                             f"({{path: value}}); {bad[0]!r} does not")
        return Axis(name, tuple(str(k) for k in values), tuple(dict(v) for v in values.values()))
    if not isinstance(values, list) or not values:
        raise SweepError(f"{source}: axes.{name}: give a non-empty list of values or a "
                         "mapping of labels to fields")
    labels = tuple(_label(v) for v in values)
    if len(set(labels)) != len(labels):
        raise SweepError(f"{source}: axes.{name}: values repeat")
    return Axis(name, labels, tuple({name: v} for v in values))


def _base(ref: Any, here: Path | None, source: str) -> tuple[dict, str]:
    if isinstance(ref, dict):
        return copy.deepcopy(ref), f"{source}:base"
    if not isinstance(ref, str):
        raise SweepError(f"{source}: base: give a built-in scenario name or a file path")
    p = Path(ref) if here is None or Path(ref).is_absolute() else here / ref
    if p.suffix in (".yaml", ".yml") or p.exists():
        try:
            return yaml.safe_load(p.read_text()), str(p)
        except OSError as e:
            raise SweepError(f"{source}: base: cannot read {p}: {e.strerror}") from None
    if ref in builtin_names():
        return yaml.safe_load(builtin_text(ref)), f"<builtin:{ref}>"
    raise SweepError(f"{source}: base: no scenario file or built-in scenario named {ref!r}")


def parse_sweep(data: Any, source: str = "<string>", here: Path | None = None) -> SweepSpec:
    """Build a SweepSpec from parsed YAML (``here``: folder that relative paths start from)."""
    if not isinstance(data, dict):
        raise SweepError(f"{source}: a sweep file must be a YAML mapping")
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise SweepError(f"{source}: unknown field(s) {sorted(unknown)}; a sweep has "
                         f"{', '.join(FIELDS)}")
    if "base" not in data:
        raise SweepError(f"{source}: base: missing (a built-in scenario name or a file path)")
    base, _ = _base(data["base"], here, source)
    fixed = data.get("set") or {}
    if not isinstance(fixed, dict):
        raise SweepError(f"{source}: set: give a mapping of field paths to values")
    axes = [_axis(str(k), v, source) for k, v in (data.get("axes") or {}).items()]
    seeds = data.get("seeds")
    if seeds is not None:
        if isinstance(seeds, int) and seeds >= 1:
            start = int(base.get("seed", 0))
            seeds = list(range(start, start + seeds))
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            raise SweepError(f"{source}: seeds: give a count or a list of integers")
        if any(a.name == SEED_AXIS for a in axes):
            raise SweepError(f"{source}: give seeds either as 'seeds' or as an axis, not both")
        axes.append(_axis(SEED_AXIS, seeds, source))
    name = str(data.get("name") or Path(source).stem)
    spec = SweepSpec(name, str(data.get("description", "")), source, base, dict(fixed),
                     tuple(axes))
    points(spec)  # every point must be a valid scenario: fail before anything runs
    return spec


def load_sweep(path_or_name: str | Path) -> SweepSpec:
    """Load a sweep file, or a built-in sweep by name (see :func:`builtin_sweeps`)."""
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        try:
            text, here = p.read_text(), p.parent
        except OSError as e:
            raise SweepError(f"cannot read sweep file {p}: {e.strerror}") from None
        source = str(p)
    elif str(path_or_name) in builtin_sweeps():
        text, here, source = builtin_sweep_text(str(p)), None, f"<builtin sweep:{p}>"
    else:
        raise SweepError(f"no sweep file or built-in sweep named {str(path_or_name)!r}; "
                         f"built-ins: {', '.join(builtin_sweeps())}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SweepError(f"{source}: invalid YAML: {getattr(e, 'problem', e)}") from None
    return parse_sweep(data, source, here)


def _builtin_dir():
    return resources.files("icefabric.sweeps") / "builtin"


def builtin_sweeps() -> list[str]:
    return sorted(f.name[:-5] for f in _builtin_dir().iterdir() if f.name.endswith(".yaml"))


def builtin_sweep_text(name: str) -> str:
    """The file of built-in sweep ``name`` as shipped."""
    return _builtin_dir().joinpath(f"{name}.yaml").read_text()


def points(spec: SweepSpec) -> list[Point]:
    """The grid in row-major order of the axes (the last axis varies fastest)."""
    out = []
    combos = itertools.product(*[range(len(a.labels)) for a in spec.axes])
    for index, combo in enumerate(combos):
        data = copy.deepcopy(spec.base)
        for path, value in spec.fixed.items():
            set_path(data, path, value)
        labels = {}
        for a, i in zip(spec.axes, combo):
            labels[a.name] = a.labels[i]
            for path, value in a.settings[i].items():
                set_path(data, path, value)
        where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "the base"
        try:
            loads(yaml.safe_dump(data, sort_keys=False), f"<{spec.name} point {where}>")
        except ScenarioError as e:
            raise SweepError(str(e)) from None
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        out.append(Point(index, labels, data, hashlib.sha256(text.encode()).hexdigest()[:16]))
    return out
