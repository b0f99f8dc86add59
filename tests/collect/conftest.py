"""Shared fixtures for the collector tests: the reference corpus of real CCL logs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The project's own corpus (real logs from public threads with their sidecars), in the repo.
PROJECT_CORPUS = Path(__file__).resolve().parent / "corpus"
# The public reference corpus (shared/reference/ccl-logs), vendored so a fresh clone runs it.
DEFAULT_CORPUS = PROJECT_CORPUS / "reference"


def corpus_dir() -> Path:
    """The public corpus folder: ``$ICEFAB_CCL_CORPUS`` when set, else the vendored copy."""
    return Path(os.environ.get("ICEFAB_CCL_CORPUS", DEFAULT_CORPUS)).resolve()


def project_file(name: str) -> Path:
    """A file of the project's own corpus (always present)."""
    return PROJECT_CORPUS / name


@pytest.fixture
def corpus() -> Path:
    d = corpus_dir()
    if not d.is_dir():
        pytest.skip(f"CCL corpus not found at {d}")
    return d


def corpus_file(name: str) -> Path:
    """A file of the public corpus, looked up in ``$ICEFAB_CCL_CORPUS`` then the default
    folder, so unit tests keep their inputs when the variable points at another corpus."""
    for d in (corpus_dir(), DEFAULT_CORPUS.resolve()):
        p = d / name
        if p.exists():
            return p
    pytest.skip(f"corpus file {name} not available")
