"""constraints.txt pins every package that ``pip install -e '.[dev,ray]'`` brings, direct or
transitive, at the version installed (so CI and a fresh clone install the same set); and the
README's test command is the one .ci/run runs."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.optional import need_extra

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


@pytest.mark.parametrize("extra", ["dev", "ray"])
def test_every_installed_dependency_is_pinned(extra):
    if extra != "dev":
        need_extra(extra, extra)
    pins = _pins()
    needed = _closure("ice-fabric", {extra})
    missing = sorted(needed - set(pins))
    assert not missing, f"constraints.txt lacks pins for {missing}"
    for name in needed:
        assert metadata.version(name) == pins[name], name


def _readme_test_command() -> str:
    """The command in the README's fenced block after "run the whole test suite"."""
    text = (ROOT / "README.md").read_text()
    after = text.split("run the whole test suite", 1)[1]
    block = after.split("```bash\n", 1)[1].split("\n```", 1)[0]
    return " ".join(block.replace("\\\n", " ").split())


def _ci_test_command() -> str:
    """The line of .ci/run that installs and runs pytest."""
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if "pip install" in ln and "pytest" in ln and not ln.lstrip().startswith("#")]
    assert len(lines) == 1, f".ci/run should run one install-and-test line, has {lines}"
    return " ".join(lines[0].split())


def test_the_readme_test_command_is_the_one_ci_runs():
    assert _readme_test_command() == _ci_test_command()


def test_the_license_file_is_the_license_pyproject_names():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert " ".join(text.split()[:6]) == "Apache License Version 2.0, January 2004"
    assert "END OF TERMS AND CONDITIONS" in text
