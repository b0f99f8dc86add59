"""The root of every error a user can cause and fix: a bad scenario, log or option, a run
that cannot finish. Each layer derives one base class from it (``TopologyError``,
``CollectError``, ``ControlError``, ``ScenarioError``, ``EngineError``, ``PolicyError``,
``PipelineError``, ``TwinError``, ...); the ``icefab`` command catches the root once and
prints one line."""

from __future__ import annotations


class IceFabricError(Exception):
    """Bad input or a run that cannot proceed; ``str()`` is the message for the user."""
