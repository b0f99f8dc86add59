"""Shared fixtures for the collector tests: the reference corpus of real CCL logs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = ROOT / ".." / "shared" / "reference" / "ccl-logs"


def corpus_dir() -> Path:
    """The corpus folder: ``$ICEFAB_CCL_CORPUS`` when set, else ``<repo>/../shared/...``."""
    return Path(os.environ.get("ICEFAB_CCL_CORPUS", DEFAULT_CORPUS)).resolve()


@pytest.fixture
def corpus() -> Path:
    d = corpus_dir()
    if not d.is_dir():
        pytest.skip(f"CCL corpus not found at {d}")
    return d


def corpus_file(name: str) -> Path:
    p = corpus_dir() / name
    if not p.exists():
        pytest.skip(f"corpus file {name} not available")
    return p
