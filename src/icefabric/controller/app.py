"""The controller's FastAPI application factory (no module-level app).

``create_app(settings)`` builds the app, its :class:`ControllerCore` (database, planner
thread) and routers. Every error answers with an :class:`ErrorBody` JSON and a 4xx status;
unexpected errors answer 500 with a generic message and never a stack trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from icefabric.controller.core import Conflict, ControllerCore, Invalid, NotFound
from icefabric.controller.routes import agents, events, fabric, health, plans, reports, views
from icefabric.controller.settings import Settings

log = logging.getLogger(__name__)

API_VERSION = "1.0"


def _error(status: int, code: str, message: str, details=None, headers=None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, "details": details or []},
                        status_code=status, headers=headers)


_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported",
          422: "invalid"}


class BodyLimit:
    """ASGI middleware: reject bodies above a size limit with 413 before parsing them."""

    def __init__(self, app, default: int, overrides: dict[str, int]):
        self.app, self.default, self.overrides = app, default, overrides

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = self.overrides.get(scope["path"], self.default)
        headers = dict(scope.get("headers") or [])
        cl = headers.get(b"content-length")
        if cl is not None:
            if not cl.isdigit():
                return await _error(400, "bad_request", "invalid Content-Length")(
                    scope, receive, send)
            if int(cl) > limit:
                return await _error(413, "too_large", f"body exceeds {limit} bytes")(
                    scope, receive, send)
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            body += msg.get("body", b"")
            if len(body) > limit:
                return await _error(413, "too_large", f"body exceeds {limit} bytes")(
                    scope, receive, send)
            if not msg.get("more_body"):
                break
        done = False

        async def replay():
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class CountRequests:
    """ASGI middleware: count responses by route template and status (for /metrics)."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500
        t0 = time.perf_counter()

        async def send_(msg):
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_)
        finally:
            waited = b"wait_s=" in scope.get("query_string", b"") and \
                b"wait_s=0&" not in scope["query_string"] + b"&"
            self.metrics.count_request(getattr(scope.get("route"), "path", "other"), status,
                                       time.perf_counter() - t0, waited)


def create_app(settings: Settings | None = None, core: ControllerCore | None = None) -> FastAPI:
    """Build the controller app.

    Parameters
    ----------
    settings : Settings, optional — defaults to ``Settings()`` (environment ``ICE_*``).
    core : ControllerCore, optional — an existing core (tests); created from settings else.
    """
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        c = app.state.core
        c.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            c.stop()

    app = FastAPI(
        title="ICE controller",
        version=API_VERSION,
        summary="Intelligent Control Ethernet: global path and rate plans for RoCEv2 fabrics",
        description="Agents enrol, report their hosts' communicators and fetch their plans; "
                    "operators load the fabric and read jobs, plans and links. All `/v1` "
                    "routes except enrolment take `Authorization: Bearer <token>`.",
        lifespan=lifespan,
    )
    app.state.core = core or ControllerCore(settings)
    app.state.settings = settings

    for r in (fabric.router, agents.router, reports.router, plans.router, events.router,
              views.router, health.router):
        app.include_router(r)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        return _error(exc.status_code, _CODES.get(exc.status_code, "error"), detail,
                      headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        details = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", ""))} for e in exc.errors()[:20]]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"])
        return _error(422, "invalid", f"{where}: {first['msg']}" if where else first["msg"],
                      details)

    @app.exception_handler(Invalid)
    async def invalid(request: Request, exc: Invalid):
        return _error(422, "invalid", str(exc))

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound):
        return _error(404, "not_found", str(exc.args[0]) if exc.args else "not found")

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict):
        return _error(409, "conflict", str(exc))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.error("internal error on %s %s: %s", request.method, request.url.path,
                  type(exc).__name__, exc_info=exc)
        return _error(500, "internal", "internal error; see the controller log")

    app.add_middleware(CountRequests, metrics=app.state.core.metrics)
    app.add_middleware(BodyLimit, default=settings.max_body_bytes,
                       overrides={"/v1/fabric": settings.max_fabric_bytes})
    return app
