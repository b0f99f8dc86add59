"""The name of one data QP, the same everywhere: the controller's job model
(:mod:`icefabric.pipeline.jobs`), host plans (:class:`icefabric.schemas_service.QpPlan`) and
the verbs actuator on the hosts (:mod:`icefabric.agent.actuators.verbs`).

A QP is named by what both the model and a real host can know before it connects:
``(job, source IP, destination IP, ordinal)``, where ``ordinal`` numbers the job's *data*
QPs between that NIC pair in connection order. QP numbers are not part of the name: the
controller cannot know them before the QP exists, and plans are made before connection.

What counts as a data QP (docs/verbs-shim.md, "Which QPs take a plan"):

* NCCL's send side (``ncclIbConnect`` in ``src/transport/net_ib/connect.cc``) carries the
  data (RDMA writes); its receive side (``ncclIbAccept``) carries only clear-to-send writes
  and ACKs and never takes a data QP's ordinal when the host can tell it (NCCL >= 2.29.2
  gives it REMOTE_ATOMIC|REMOTE_READ access at INIT, the send side REMOTE_WRITE alone).
* NCCL's GPU-flush QP is connected to itself (loopback) and is never named.

Older NCCL and RCCL give both sides the same access flags: there a receive-side QP still
takes an ordinal of its NIC pair (the limit the docs state, with what it costs).
"""

from __future__ import annotations

from dataclasses import dataclass

from icefabric.units import ipv4_int, ipv4_str


@dataclass(frozen=True, order=True)
class QpId:
    """One data QP: its job, NIC pair (IPv4 addresses as integers) and ordinal.

    >>> q = QpId.of("train", "10.0.0.1", "10.0.1.1", 2)
    >>> q, q.src, q == QpId.of("train", 167772161, "10.0.1.1", 2)
    (QpId(job='train', src_ip=167772161, dst_ip=167772417, ordinal=2), '10.0.0.1', True)
    """

    job: str
    src_ip: int
    dst_ip: int
    ordinal: int

    @classmethod
    def of(cls, job: str, src_ip: str | int, dst_ip: str | int, ordinal: int) -> QpId:
        """From addresses in either form (dotted text or integer)."""
        return cls(str(job), _ip(src_ip), _ip(dst_ip), int(ordinal))

    @property
    def src(self) -> str:
        return ipv4_str(self.src_ip)

    @property
    def dst(self) -> str:
        return ipv4_str(self.dst_ip)

    @property
    def pair(self) -> tuple[str, int, int]:
        """The (job, NIC pair) whose data QPs share one ordinal space."""
        return (self.job, self.src_ip, self.dst_ip)


def _ip(ip: str | int) -> int:
    return ipv4_int(ip) if isinstance(ip, str) else int(ip)
