"""Tests that need an optional extra: skipped with the reason when it is absent, except in CI
(``CI=true``, set by .ci/run, which installs every extra the tests use), where they fail."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_extra(module: str, extra: str) -> ModuleType:
    """Import ``module`` from the ``extra`` install, or skip (fail in CI) saying how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = (f"{module} is not installed ({e}); it comes with the '{extra}' extra: "
               f"pip install -c constraints.txt -e '.[{extra}]'")
        if in_ci():
            pytest.fail(f"CI=true requires the '{extra}' extra: {why}")
        pytest.skip(why)
