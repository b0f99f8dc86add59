"""Request limits of the controller, as ASGI middleware in front of every route.

* :class:`BodyLimit` — bodies above a size limit answer 413 before they are read whole,
  and JSON nested deeper than a limit answers 400 before it is parsed (a deep body costs
  the parser recursion and the validators time for nothing a real message needs);
* :class:`RateLimit` — token buckets per client address for chosen routes (enrolment):
  above the rate, 429 with ``Retry-After``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict

import numpy as np
from fastapi.responses import JSONResponse


def error_response(status: int, code: str, message: str, details=None,
                   headers=None) -> JSONResponse:
    """The :class:`~icefabric.schemas_service.ErrorBody` every error answers with."""
    return JSONResponse({"error": code, "message": message, "details": details or []},
                        status_code=status, headers=headers)


_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def json_depth(body: bytes, chunk: int = 1 << 20) -> int:
    """Deepest nesting of arrays and objects in a JSON text (``[]`` is 1, ``{"a": [1]}``
    is 2); brackets inside strings do not count.

    Vectorized in chunks of ``chunk`` bytes (O(n) time, O(chunk) memory) with the scan
    state — inside a string, trailing backslashes, depth — carried across chunks. A quote
    is a string boundary unless an odd number of backslashes precedes it. Malformed JSON
    gives some number; the parser rejects it afterwards.
    """
    depth = best = 0
    in_string = 0
    bs_run = 0  # backslashes at the end of the previous chunk
    for off in range(0, len(body), chunk):
        a = np.frombuffer(body, dtype=np.uint8, count=min(chunk, len(body) - off), offset=off)
        idx = np.arange(len(a))
        last = np.maximum.accumulate(np.where(a != _BACKSLASH, idx, -1))
        before = np.concatenate(([-1], last[:-1]))  # last non-backslash before i
        run = idx - 1 - before + np.where(before < 0, bs_run, 0)
        quote = (a == _QUOTE) & (run % 2 == 0)
        inside = (np.cumsum(quote) + in_string) % 2
        level = np.cumsum(_STEP[a] * (inside == 0), dtype=np.int64) + depth
        best = max(best, int(level.max()))
        depth, in_string = int(level[-1]), int(inside[-1])
        bs_run = bs_run + len(a) if last[-1] < 0 else len(a) - 1 - int(last[-1])
    return best


def too_deep(body: bytes, limit: int) -> bool:
    """True if the JSON text ``body`` nests deeper than ``limit`` (cheap when it has
    fewer brackets than the limit, as nearly every message has)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    return json_depth(body) > limit


class BodyLimit:
    """ASGI middleware: 413 above a size limit (per path, else ``default``), 400 above
    ``max_depth`` levels of JSON nesting; both before any route sees the body."""

    def __init__(self, app, default: int, overrides: dict[str, int], max_depth: int):
        self.app, self.default, self.overrides = app, default, overrides
        self.max_depth = max_depth

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = self.overrides.get(scope["path"], self.default)
        headers = dict(scope.get("headers") or [])
        cl = headers.get(b"content-length")
        if cl is not None:
            if not cl.isdigit():
                return await error_response(400, "bad_request", "invalid Content-Length")(
                    scope, receive, send)
            if int(cl) > limit:
                return await error_response(413, "too_large", f"body exceeds {limit} bytes")(
                    scope, receive, send)
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            body += msg.get("body", b"")
            if len(body) > limit:
                return await error_response(413, "too_large", f"body exceeds {limit} bytes")(
                    scope, receive, send)
            if not msg.get("more_body"):
                break
        if too_deep(bytes(body), self.max_depth):
            return await error_response(
                400, "too_deep", f"JSON nested deeper than {self.max_depth} levels")(
                scope, receive, send)
        done = False

        async def replay():
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class TokenBuckets:
    """Token buckets by key (client address): ``rate_per_s`` tokens a second, up to
    ``burst``. Idle buckets are forgotten beyond ``max_keys`` (least recently used), so
    many addresses cannot grow memory."""

    def __init__(self, rate_per_s: float, burst: int, max_keys: int = 10_000):
        self.rate, self.burst, self.max_keys = rate_per_s, burst, max_keys
        self._b: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str, now: float | None = None) -> float:
        """Take one token; returns 0 if allowed, else the seconds until one is free."""
        now = time.monotonic() if now is None else now
        tokens, t = self._b.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - t) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._b[key] = (tokens, now)
        while len(self._b) > self.max_keys:
            self._b.popitem(last=False)
        return wait


class RateLimit:
    """ASGI middleware: ``rules[(method, path)]`` is a :class:`TokenBuckets` keyed by the
    client's address; over the rate a request answers 429 with ``Retry-After``."""

    def __init__(self, app, rules: dict[tuple[str, str], TokenBuckets]):
        self.app, self.rules = app, rules

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            buckets = self.rules.get((scope["method"], scope["path"]))
            if buckets is not None:
                client = (scope.get("client") or ("?", 0))[0]
                wait = buckets.take(client)
                if wait > 0:
                    return await error_response(
                        429, "rate_limited", f"too many requests to {scope['path']} from "
                        f"{client}; retry in {wait:.1f} s",
                        headers={"Retry-After": str(math.ceil(wait))})(scope, receive, send)
        return await self.app(scope, receive, send)
