"""Every item of the CCL corpora parses and yields exactly its sidecar's facts.

Two corpora: the public reference corpus (``$ICEFAB_CCL_CORPUS``, default its copy in
``tests/collect/corpus/reference``) and the project's own corpus in ``tests/collect/corpus``
(both in the repository, so a fresh clone and CI run them). A new item is tested by dropping its
files and ``<id>.json`` sidecar in either folder. Comparison rules
(see the corpus README): every key listed in ``expected`` must be present and equal; dicts are
compared key by key (a listed dict need not list every key the collector found), lists element
by element with equal length. An ``"a-b"`` string (or ``"a-b,c-d"``) stands for the ranks
a..b when the collector returns a list. Keys that are
prose commentary (``*note``/``*notes``) are not facts and are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icefabric.collect._text import read_text
from icefabric.collect.facts import artefact_facts

from .conftest import PROJECT_CORPUS, corpus_dir


def _sidecars() -> list[Path]:
    out = []
    for d in (corpus_dir(), PROJECT_CORPUS):
        out += _sidecars_in(d) if d.is_dir() else []
    return out


def _sidecars_in(d: Path) -> list[Path]:
    out = []
    for p in sorted(d.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "expected" in data and "files" in data:
            out.append(p)
    return out


def _is_note(key: str) -> bool:
    return key.endswith("note") or key.endswith("notes")


def _range(s: str) -> list[int] | None:
    """``"0-7"`` or ``"0-3,8-11"`` as the list of ranks it names; None if not such a string."""
    out: list[int] = []
    for part in s.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def compare(expected: Any, actual: Any, path: str, errors: list[str]) -> None:
    """Record in ``errors`` every place where ``actual`` does not hold ``expected``."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            errors.append(f"{path}: expected a mapping, got {actual!r:.200}")
            return
        for k, v in expected.items():
            if _is_note(k):
                continue
            if k not in actual:
                errors.append(f"{path}.{k}: missing (collector found keys {sorted(actual)[:30]})")
                continue
            compare(v, actual[k], f"{path}.{k}", errors)
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            errors.append(f"{path}: expected {len(expected)} items, got {actual!r:.300}")
            return
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            compare(e, a, f"{path}[{i}]", errors)
        return
    if isinstance(expected, str) and isinstance(actual, list) and _range(expected) is not None:
        if actual != _range(expected):
            errors.append(f"{path}: expected ranks {expected}, got {actual}")
        return
    if type(expected) is bool or type(actual) is bool:
        if expected is not actual:
            errors.append(f"{path}: expected {expected!r}, got {actual!r}")
        return
    if expected != actual:
        errors.append(f"{path}: expected {expected!r}, got {actual!r}")


@pytest.mark.parametrize("sidecar", _sidecars(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus_item_facts(sidecar: Path) -> None:
    meta = json.loads(sidecar.read_text())
    files = [(name, read_text(sidecar.parent / name)) for name in meta["files"]]
    facts = artefact_facts(files)
    errors: list[str] = []
    compare(meta["expected"], facts, meta.get("id", sidecar.stem), errors)
    assert not errors, "\n".join(errors[:40])


def test_corpus_folder_present_or_skipped(corpus: Path) -> None:
    assert _sidecars_in(corpus), f"no sidecars in {corpus}"


def test_project_corpus_lists_every_item_with_its_source() -> None:
    readme = (PROJECT_CORPUS / "README.md").read_text()
    items = _sidecars_in(PROJECT_CORPUS)
    assert len(items) >= 7
    for p in items:
        meta = json.loads(p.read_text())
        assert meta["id"] == p.stem and f"`{p.stem}`" in readme
        assert meta["source_url"].startswith("https://github.com/") and meta["source_url"] in readme
        for name in meta["files"]:
            assert (PROJECT_CORPUS / name).is_file(), name
