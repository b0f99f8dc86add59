"""``docs/scenarios.md`` from the schema: every section and field of a scenario file with its
type, default, unit, limits, description and an example taken from the built-in scenarios.

``icefab scenario docs`` writes it; a test checks the committed file is what this module
generates, so the page cannot drift from :mod:`icefabric.scenario.schema`.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel

from icefabric.scenario.budget import DEFAULT_MEMORY_LIMIT, MEMORY_LIMIT_ENV
from icefabric.scenario.loader import DEFAULT_SCENARIO, builtin_names, builtin_text
from icefabric.scenario.schema import Scenario
from icefabric.units import format_size

# Field-name suffix -> unit (longest first), following the project's naming rule.
_UNITS = (("_bytes_per_gbps", "bytes per Gb/s of port speed"), ("_gbps", "Gb/s"),
          ("_bps", "bit/s"), ("_bytes", "bytes"), ("_ns", "ns"), ("_us", "µs"),
          ("_micros", "µs"), ("_s", "s"))
_LIMITS = ((annotated_types.Ge, "≥"), (annotated_types.Gt, ">"), (annotated_types.Le, "≤"),
           (annotated_types.Lt, "<"))
_SIZE_FIELDS = {("Scenario", "sizes"), ("SizesSpec", "min"), ("SizesSpec", "max")}


def _is_model(cls) -> bool:
    return inspect.isclass(cls) and (issubclass(cls, BaseModel) or dataclasses.is_dataclass(cls))


def _models(annotation) -> list[type]:
    """The models (pydantic or dataclass) an annotation can hold (through unions, lists)."""
    if _is_model(annotation):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


@dataclasses.dataclass
class _Field:
    name: str
    annotation: Any
    default: str
    limits: str = ""
    description: str = ""


def _fields(model: type) -> list[_Field]:
    """Every field of a pydantic model or a dataclass (descriptions of a dataclass from its
    docstring's ``name : type — text`` entries)."""
    if dataclasses.is_dataclass(model):
        hints = typing.get_type_hints(model)
        doc = _param_docs(model.__doc__ or "")
        return [_Field(f.name, hints[f.name],
                       "**required**" if f.default is f.default_factory is dataclasses.MISSING
                       else _default_value(f.default, f.default_factory),
                       description=doc.get(f.name, ""))
                for f in dataclasses.fields(model)]
    return [_Field(name, info.annotation,
                   "**required**" if info.is_required()
                   else _default_value(info.default, info.default_factory),
                   _limits(info), info.description or "")
            for name, info in model.model_fields.items()]


def _param_docs(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^([a-z_][\w, ]*?) : [^—]*?(?:— (.*))?$", line)
        if not m:
            continue
        text = m[2] or ""
        for cont in lines[i + 1:]:
            if not cont.startswith("    "):
                break
            text += " " + cont.strip()
        for name in m[1].split(","):
            out[name.strip()] = text.strip()
    return out


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin in (list, tuple):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"list of {inner}" if origin is list or Ellipsis in args else f"[{inner}]"
    if origin is dict:
        return f"mapping {_type_name(args[0])} → {_type_name(args[1])}"
    if _is_model(annotation):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return getattr(annotation, "__name__", str(annotation))


def _default_value(default: Any, factory) -> str:
    if factory not in (None, dataclasses.MISSING):
        try:
            default = factory()
        except TypeError:  # factories that take the validated data
            return "computed"
        if _is_model(type(default)):
            return f"see [{type(default).__name__}](#{type(default).__name__.lower()})"
    if default is None:
        return "none"
    return f"`{_plain(default)}`"


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _unit(model: str, name: str) -> str:
    if (model, name) in _SIZE_FIELDS:
        return "bytes (`4096`, `64KiB`, `1M`, `1GiB`)"
    return next((u for suffix, u in _UNITS if name.endswith(suffix)), "")


def _limits(info) -> str:
    out = [f"{sym} {_plain(getattr(m, type(m).__name__.lower()))}"
           for m in info.metadata for cls, sym in _LIMITS if isinstance(m, cls)]
    out += [f"pattern `{m.pattern}`" for m in info.metadata if getattr(m, "pattern", None)]
    out += [f"at least {m.min_length} item(s)" for m in info.metadata
            if isinstance(m, annotated_types.MinLen)]
    return ", ".join(out)


def _examples() -> dict[tuple[str, str], Any]:
    """(model, field) -> the first value a built-in scenario gives it."""
    import yaml

    found: dict[tuple[str, str], Any] = {}

    def walk(model: type, data: Any) -> None:
        if not isinstance(data, dict):
            return
        for f in _fields(model):
            if f.name not in data:
                continue
            value = data[f.name]
            found.setdefault((model.__name__, f.name), value)
            for sub in _models(f.annotation):
                for item in value if isinstance(value, list) else [value]:
                    walk(sub, item)

    for name in [DEFAULT_SCENARIO, *builtin_names()]:
        walk(Scenario, yaml.safe_load(builtin_text(name)))
    return found


def _example_text(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    if len(text) > 60:
        return ""
    return f"`{text}`"


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()


def _section(model: type, examples: dict) -> list[str]:
    doc = inspect.cleandoc(model.__doc__ or "")
    out = [f"## {model.__name__}", ""]
    if doc:
        out += [re.sub(r"\s*\n\s*", " ", doc.split("\n\n")[0]), ""]
    out += ["| field | type | default | unit | limits | example | description |",
            "|---|---|---|---|---|---|---|"]
    for f in _fields(model):
        ex = (model.__name__, f.name)
        out.append("| " + " | ".join(_cell(c) for c in (
            f"`{f.name}`", _type_name(f.annotation), f.default, _unit(model.__name__, f.name),
            f.limits, _example_text(examples[ex]) if ex in examples else "",
            f.description)) + " |")
    return out + [""]


def _all_models() -> list[type]:
    order: list[type] = []
    todo: list[type] = [Scenario]
    while todo:
        m = todo.pop(0)
        if m in order:
            continue
        order.append(m)
        for f in _fields(m):
            todo += [s for s in _models(f.annotation) if s not in order]
    return order


def scenario_docs() -> str:
    """The Markdown page ``docs/scenarios.md``."""
    examples = _examples()
    out = [
        "# Scenario files",
        "",
        "<!-- Generated by `icefab scenario docs --out docs/scenarios.md` from "
        "src/icefabric/scenario/schema.py; do not edit by hand. -->",
        "",
        "A scenario is one YAML file: the fabric, the server pools, the jobs and their "
        "collectives, the message sizes, the policies to compare and the engine. Unknown "
        "fields are errors. `icefab scenarios` lists the built-in ones, `icefab scenario "
        "show NAME` prints one to copy, `icefab scenario check FILE` validates a file, and "
        "`icefab catalog` lists the server and switch profiles that `server`, "
        "`leaf_switch` ... name. Examples in the tables come from the built-in scenarios.",
        "",
        "Every number has a domain (the limits column; no `.inf` or `.nan`), and before "
        "anything is built the whole scenario is held to a budget "
        "(`icefabric.scenario.budget.Budget`: servers, switches, directed links, ranks, "
        "QPs) and to an estimate of the memory its run needs, at most "
        f"{format_size(DEFAULT_MEMORY_LIMIT)} unless "
        f"`{MEMORY_LIMIT_ENV}` (e.g. `64GiB`) raises it on a bigger machine.",
        "",
        f"The built-in default (`icefab scenario show {DEFAULT_SCENARIO}`):",
        "",
        "```yaml",
        builtin_text(DEFAULT_SCENARIO).rstrip(),
        "```",
        "",
        "Sections, from the top of the file down:",
        "",
    ]
    models = _all_models()
    out += [f"- [{m.__name__}](#{m.__name__.lower()})" for m in models] + [""]
    for m in models:
        out += _section(m, examples)
    return "\n".join(out).rstrip() + "\n"
