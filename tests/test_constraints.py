"""constraints.txt pins every package that ``pip install -e '.[dev,ray]'`` brings, direct or
transitive, at the version installed (so CI and a fresh clone install the same set)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[_norm(name)] = version
    return pins


def _closure(root: str, extras: set[str]) -> set[str]:
    """Names of every distribution the root's requirements (with ``extras``) pull in."""
    seen: set[str] = set()
    done: set[tuple[str, frozenset]] = set()
    todo = [(root, frozenset(extras))]
    while todo:
        name, ex = todo.pop()
        if (_norm(name), ex) in done:
            continue
        done.add((_norm(name), ex))
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            env_ok = (not req.marker or any(req.marker.evaluate({"extra": e})
                                            for e in (ex or {""})))
            if not env_ok:
                continue
            dep = _norm(req.name)
            if dep == _norm(root):  # ice-fabric[sim,service] inside dev
                todo.append((name, ex | req.extras))
                continue
            seen.add(dep)
            todo.append((req.name, frozenset(req.extras)))
    return seen


def test_every_installed_dependency_is_pinned():
    pins = _pins()
    needed = _closure("ice-fabric", {"dev", "ray"})
    missing = sorted(needed - set(pins))
    assert not missing, f"constraints.txt lacks pins for {missing}"
    for name in needed:
        assert metadata.version(name) == pins[name], name
