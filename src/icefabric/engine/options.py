"""Options of one engine run: which engine, and the fluid engine's device models.

:class:`EngineOptions` is the only place the settings of a run are assembled. Its defaults
describe a RoCEv2 fabric as deployed: DCQCN with the NVIDIA ConnectX firmware parameters
(domain-facts §1.2), RED/ECN thresholds scaled to the port speed (HPCC ns-3 per-Gb/s
values), PFC with a dynamic shared-buffer threshold on the switches' own buffer
(domain-facts §2), 4 KiB MTU payload with RoCEv2 headers (Eth 14 + IP 20 + UDP 8 + BTH 12 +
ICRC 4 = 58 B) and one ACK of 58 B per packet. A scenario's ``engine_options`` mapping is
validated against this model (unknown keys are errors that name the field); the packet-level
validation builds one per reference mode (:mod:`icefabric.engine.validation`).

The flow engine (max-min, no queues) ignores every device option.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from icefabric.dataplane.dcqcn import DcqcnParams
from icefabric.dataplane.ecn import RedParams
from icefabric.dataplane.endside import EndSideParams
from icefabric.dataplane.pfc import PfcParams

#: wire bytes per payload byte of a 4 KiB RoCEv2 packet (58 B of headers)
ROCE_WIRE_OVERHEAD = (4096 + 58) / 4096
#: RoCEv2 ACK on the wire (headers only)
ROCE_ACK_BYTES = 58.0
#: no step, sample or horizon of a run beyond 1,000 s of simulated time (a step below 1 ns
#: would never finish)
MAX_TIME_NS = 1e12


class RedPerGbps(BaseModel):
    """RED thresholds that scale with each port's speed (HPCC ns-3: 4 KB and 16 KB per Gb/s,
    Pmax 0.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kmin_bytes_per_gbps: float = Field(4000.0, gt=0)
    kmax_bytes_per_gbps: float = Field(16000.0, gt=0)
    pmax: float = Field(0.2, ge=0, le=1)
    above_kmax: float = Field(1.0, ge=0, le=1)


class EngineOptions(BaseModel):
    """Which engine runs, and the fluid engine's models and numerics.

    Numerics left at ``None`` keep the fluid engine's own defaults
    (:class:`icefabric.engine.fluid.FluidConfig`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    engine: Literal["flow", "fluid"] = "flow"
    cc: Literal["none", "dcqcn"] = Field(
        "dcqcn", description="sender congestion control; none = line rate or pacer, PFC only")
    dcqcn: str | DcqcnParams = Field(
        "nvidia_firmware", description="DCQCN profile (nvidia_firmware, hpcc_ns3_100g, "
        "paper) or its parameters")
    red: RedParams | RedPerGbps = Field(default_factory=RedPerGbps,
                                        description="ECN marking of switch egress queues")
    pfc: Literal["dynamic", "static", "off"] | PfcParams | None = Field(
        None, description="PFC model; a mapping gives PfcParams fields (defaults for the "
        "rest); default: dynamic threshold on the switches' median buffer")
    wire_overhead: float = Field(ROCE_WIRE_OVERHEAD, ge=1.0)
    packet_bytes: float = Field(4096.0, gt=0)
    ack_bytes: float = Field(ROCE_ACK_BYTES, ge=0)
    ack_queueing: bool = True
    endside: bool | EndSideParams | None = Field(
        None, description="ICE end-side rules for paced QPs; default: on for policies that "
        "pace (ice)")
    trace: bool = Field(False, description="record queues of switch egress ports and rates "
                        "of the largest network flows (plots)")
    record_links: tuple[str, ...] = ()
    record_flows: tuple[str, ...] = ()
    sample_interval_ns: float | None = Field(None, ge=1, le=MAX_TIME_NS)
    dt_ns: float | None = Field(None, ge=1, le=MAX_TIME_NS)
    dt_quiet_max_ns: float | None = Field(None, ge=1, le=MAX_TIME_NS)
    dt_pfc_max_ns: float | None = Field(None, ge=1, le=MAX_TIME_NS)
    pfc_tau_ns: float | None = Field(None, ge=1, le=MAX_TIME_NS)
    quiet_tol: float | None = Field(None, gt=0)
    coalesce_ns: float | None = Field(None, ge=0, le=MAX_TIME_NS)
    max_steps: int | None = Field(None, gt=0, le=1_000_000_000)
    max_time_ns: float | None = Field(None, gt=0, le=MAX_TIME_NS)

    @field_validator("dcqcn")
    @classmethod
    def _profile(cls, v):
        if isinstance(v, str):
            DcqcnParams.profile(v)  # raises ValueError naming the known profiles
        return v

    def engine_args(self, *, buffer_bytes: float | None = None, paced: bool = False) -> dict:
        """Keyword arguments of the engine's ``run``.

        Parameters
        ----------
        buffer_bytes : float, optional — the switches' shared buffer, for the default PFC
            model (16 MiB when unknown).
        paced : bool — the plan paces its QPs (ICE): the end-side rules are on unless
            ``endside`` says otherwise.
        """
        if self.engine == "flow":
            return {}
        out = self.model_dump(include={"cc", "wire_overhead", "packet_bytes", "ack_bytes",
                                       "ack_queueing", "record_links", "record_flows"})
        out["dcqcn"] = self.dcqcn
        out["red"] = self.red if isinstance(self.red, RedParams) else self.red.model_dump()
        out["pfc"] = self.pfc if self.pfc is not None else PfcParams(
            buffer_bytes=buffer_bytes if buffer_bytes else PfcParams.buffer_bytes)
        es = self.endside
        if es is None:
            es = paced
        out["endside"] = (EndSideParams() if es is True else es) or None
        for k in ("sample_interval_ns", "dt_ns", "dt_quiet_max_ns", "dt_pfc_max_ns",
                  "pfc_tau_ns", "quiet_tol", "coalesce_ns", "max_steps", "max_time_ns"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out
