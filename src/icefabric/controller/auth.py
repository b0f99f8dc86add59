"""Bearer-token authentication and per-host authorization.

* the **admin** token (``ICE_ADMIN_TOKEN``) may change the fabric and read every view;
* an **agent** token is issued at enrolment for one host and lets its agent read and write
  only that host's data (plan, reports, acks, events);
* the **enrolment** token (``ICE_ENROL_TOKEN``, default: the admin token) may only enrol.

Tokens are stored and compared only as SHA-256 digests: the admin and enrolment digests
with :func:`hmac.compare_digest` (constant time), agent tokens by looking their digest up
(the digest of a 256-bit random token reveals nothing an attacker can use). Tokens are
never logged or echoed in error messages. With ``insecure_local`` (development), a request
without a token from a loopback address is the admin.
"""

from __future__ import annotations

import ipaddress

from fastapi import HTTPException, Request, status

from icefabric.controller.core import ControllerCore
from icefabric.controller.tokens import Principal

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def bearer_token(request: Request) -> str:
    h = request.headers.get("authorization")
    if not h:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token",
                            headers=_CHALLENGE)
    scheme, _, token = h.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                            "Authorization must be 'Bearer <token>'", headers=_CHALLENGE)
    return token


def _loopback(request: Request) -> bool:
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except (AttributeError, ValueError):
        return False


def authenticate(request: Request, core: ControllerCore) -> Principal:
    if core.settings.insecure_local and "authorization" not in request.headers and \
            _loopback(request):
        return Principal("admin")
    p = core.authenticate(bearer_token(request))
    if p is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid token", headers=_CHALLENGE)
    return p


def require_admin(p: Principal) -> Principal:
    if p.kind != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this operation needs the admin token")
    return p


def require_host(p: Principal, host: str) -> Principal:
    """Agents may touch only their own host; the admin may read (and write) any host."""
    if p.kind == "admin":
        return p
    if p.kind == "agent" and p.host == host:
        return p
    raise HTTPException(status.HTTP_403_FORBIDDEN,
                        "this token may not access host data of another host")
