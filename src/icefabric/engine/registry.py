"""Engines registered by name (``flow``, ``fluid``); each is
``run(problem: SimProblem, **options) -> SimResult``."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from icefabric.engine.problem import SimProblem
from icefabric.engine.result import SimResult

EngineFn = Callable[..., SimResult]
_ENGINES: dict[str, EngineFn] = {}
# Engines live in their own modules and register on import.
_MODULES = {"flow": "icefabric.engine.flow", "fluid": "icefabric.engine.fluid"}


def register_engine(name: str) -> Callable[[EngineFn], EngineFn]:
    def deco(fn: EngineFn) -> EngineFn:
        _ENGINES[name] = fn
        return fn
    return deco


def get_engine(name: str) -> EngineFn:
    if name not in _ENGINES and name in _MODULES:
        importlib.import_module(_MODULES[name])
    try:
        return _ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; available: {sorted(_MODULES)}") from None


def run_engine(problem: SimProblem, engine: str = "flow", **options) -> SimResult:
    return get_engine(engine)(problem, **options)
