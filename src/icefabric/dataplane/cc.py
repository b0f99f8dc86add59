"""Congestion-control models registered by name (STYLE.md G5).

Every model is an ``init(line_rate_bps, params) -> state`` /
``update(state, cnp, t_ns, params, sent_bytes=None) -> state`` pair over arrays of QPs, plus
``next_event_ns(state)`` so time-stepped engines know when a timer can change a rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CcModel:
    name: str
    init: Callable
    update: Callable
    next_event_ns: Callable
    params: type


_CC: dict[str, CcModel] = {}
_MODULES = {"dcqcn": "icefabric.dataplane.dcqcn"}


def register_cc(name: str, *, init: Callable, update: Callable, next_event_ns: Callable,
                params: type) -> CcModel:
    model = CcModel(name, init, update, next_event_ns, params)
    _CC[name] = model
    return model


def get_cc(name: str) -> CcModel:
    if name not in _CC and name in _MODULES:
        import importlib
        importlib.import_module(_MODULES[name])
    try:
        return _CC[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}; available: "
                         f"{sorted(set(_CC) | set(_MODULES))}") from None
