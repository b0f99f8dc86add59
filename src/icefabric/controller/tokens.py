"""Who is calling: the admin, the enrolment or scheduler token, or one host's agent.

Tokens are kept only as SHA-256 digests. The admin, enrolment and scheduler digests are
compared with :func:`hmac.compare_digest` (constant time); agent tokens are looked up by
digest (the digest of a 256-bit random token reveals nothing an attacker can use).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from icefabric.controller.settings import Settings

log = logging.getLogger(__name__)


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token(kind: str) -> str:
    """A fresh 256-bit random token, prefixed with its kind (``ice_agent_…``)."""
    return f"ice_{kind}_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the admin (operator) or the agent of one host."""

    kind: str  # "admin" | "agent" | "enrol" | "scheduler"
    host: str | None = None


def admin_token(s: Settings) -> str:
    """The configured admin token, the one in ``admin_token_file`` (made there once if the
    file does not exist), or, with neither (insecure-local), a token nobody knows."""
    if s.admin_token is not None:
        return s.admin_token.get_secret_value()
    if s.admin_token_file is None:
        return new_token("admin")
    p = Path(s.admin_token_file)
    if p.exists():
        return p.read_text().strip()
    tok = new_token("admin")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.touch(mode=0o600)
    p.write_text(tok + "\n")
    log.warning("generated an admin token in %s", p)
    return tok


class Tokens:
    """The digests of the admin, enrolment and scheduler tokens."""

    def __init__(self, settings: Settings):
        self._admin = sha256(admin_token(settings))
        enrol = settings.enrol_token.get_secret_value() if settings.enrol_token else None
        self._enrol = sha256(enrol) if enrol else self._admin
        sched = settings.scheduler_token
        self._scheduler = sha256(sched.get_secret_value()) if sched else None

    def principal(self, token: str, agent_host: Callable[[str], str | None]
                  ) -> Principal | None:
        """The principal of ``token``; ``agent_host(digest)`` names an agent's host."""
        d = sha256(token)
        if hmac.compare_digest(d, self._admin):
            return Principal("admin")
        host = agent_host(d)
        if host is not None:
            return Principal("agent", host)
        if hmac.compare_digest(d, self._enrol):
            return Principal("enrol")
        if self._scheduler is not None and hmac.compare_digest(d, self._scheduler):
            return Principal("scheduler")
        return None
