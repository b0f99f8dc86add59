"""Actuators: how an agent applies a plan on its host (twin NICs, HCCL source-port file,
the verbs shim of NCCL/RCCL processes, dry run). Choose one by name with
:func:`get_actuator`."""

from __future__ import annotations

from icefabric.agent.actuators.base import Actuator, ApplyResult


def get_actuator(name: str, **options) -> Actuator:
    """``twin``, ``hccl-cfg`` (option ``directory``), ``verbs`` (options ``socket_path``,
    ``default_job``; call ``start()``) or ``dry-run`` (option ``stream``)."""
    if name == "twin":
        from icefabric.agent.actuators.twin import TwinNicActuator

        return TwinNicActuator(**options)
    if name == "hccl-cfg":
        from icefabric.agent.actuators.hccl_cfg import HcclCfgActuator

        return HcclCfgActuator(**options)
    if name == "verbs":
        from icefabric.agent.actuators.verbs import VerbsActuator

        return VerbsActuator(**options)
    if name == "dry-run":
        from icefabric.agent.actuators.dryrun import DryRunActuator

        return DryRunActuator(**options)
    raise ValueError(f"unknown actuator {name!r}; available: twin, hccl-cfg, verbs, dry-run")


__all__ = ["Actuator", "ApplyResult", "get_actuator"]
