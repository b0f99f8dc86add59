"""The enrolled hosts: their agents' tokens (as digests), NICs and the plan each applied."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from icefabric.controller.errors import Invalid, NotFound
from icefabric.controller.metrics import Metrics
from icefabric.controller.store.repo import Repository
from icefabric.controller.tokens import new_token, sha256
from icefabric.schemas_service import AgentEnrol
from icefabric.topology.model import Fabric


@dataclass
class HostRecord:
    """One enrolled host as the controller knows it."""

    nics: list[dict]
    agent_version: str
    actuator: str
    enrolled_at: float
    last_seen: float = 0.0
    applied_version: int = 0


class Fleet:
    """Enrolment, acks and liveness of every host's agent (stored before acknowledged)."""

    def __init__(self, repo: Repository, lock: threading.RLock, metrics: Metrics):
        self.repo, self._lock, self.metrics = repo, lock, metrics
        self.hosts: dict[str, HostRecord] = {}
        self._host_of_digest: dict[str, str] = {}
        for h in repo.hosts():
            self._host_of_digest[h.token_sha256] = h.host
            self.hosts[h.host] = HostRecord(json.loads(h.nics), h.agent_version, h.actuator,
                                            h.enrolled_at, 0.0, h.applied_version)

    def host_of(self, digest: str) -> str | None:
        """The host whose agent token has ``digest`` (marked as seen now)."""
        host = self._host_of_digest.get(digest)
        if host is not None:
            self.hosts[host].last_seen = time.time()
        return host

    def enrol(self, req: AgentEnrol, fabric: Fabric | None) -> str:
        """Store the host's agent and return its new token (an older one stops working)."""
        if fabric is not None and req.host not in fabric.server_of_name:
            raise NotFound(f"host {req.host!r} is not in the fabric")
        token = new_token("agent")
        d = sha256(token)
        nics = [n.model_dump() for n in req.nics]
        with self._lock:
            self.repo.upsert_host(req.host, d, nics, req.agent_version, req.actuator)
            for k in [k for k, v in self._host_of_digest.items() if v == req.host]:
                del self._host_of_digest[k]
            self._host_of_digest[d] = req.host
            old = self.hosts.get(req.host)
            now = time.time()
            self.hosts[req.host] = HostRecord(nics, req.agent_version, req.actuator, now, now,
                                              old.applied_version if old else 0)
        self.metrics.enrolments.inc()
        return token

    async def ack(self, host: str, version: int, issued: int) -> None:
        """Record that ``host`` applied its plan ``version`` (``issued``: the version of its
        current document). Stored before it returns; acks arriving together share a
        transaction, and no thread waits for it."""
        if version > issued:
            raise Invalid(f"version {version} has not been issued (current {issued})")
        h = self.hosts.get(host)
        if h is None:
            raise NotFound(f"host {host!r} is not enrolled")
        now = time.time()
        await self.repo.set_applied_async(host, version, now)
        h.applied_version, h.last_seen = version, now

    def connected(self, timeout_s: float) -> int:
        """Agents seen within the last ``timeout_s`` seconds."""
        cut = time.time() - timeout_s
        return sum(1 for h in self.hosts.values() if h.last_seen >= cut)
