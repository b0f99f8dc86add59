"""The controller's FastAPI application factory (no module-level app).

``create_app(settings)`` builds the app, its :class:`ControllerCore` (database, planner
thread) and routers. Every error answers with an :class:`ErrorBody` JSON and a 4xx status;
a database that is unavailable answers 503 (``database_unavailable``); unexpected errors
answer 500 with a generic message and never a stack trace. Request limits: :mod:`.limits`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from icefabric.controller.core import ControllerCore
from icefabric.controller.errors import Conflict, Forbidden, Invalid, NotFound
from icefabric.controller.limits import BodyLimit, RateLimit, TokenBuckets, error_response
from icefabric.controller.routes import (
    agents,
    events,
    fabric,
    health,
    jobs,
    plans,
    reports,
    views,
)
from icefabric.controller.settings import Settings
from icefabric.controller.store.errors import StoreError

log = logging.getLogger(__name__)

API_VERSION = "1.0"


_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported",
          422: "invalid", 429: "rate_limited"}
#: the controller's own errors and their statuses
_STATUS = {Invalid: 422, NotFound: 404, Forbidden: 403, Conflict: 409}


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


def _add_error_handlers(app: FastAPI) -> None:
    """Every error answers with an :class:`ErrorBody` JSON (never a stack trace)."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        return error_response(exc.status_code, _CODES.get(exc.status_code, "error"), detail,
                              headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        details = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", ""))} for e in exc.errors()[:20]]
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"])
        return error_response(422, "invalid",
                              f"{where}: {first['msg']}" if where else first["msg"], details)

    async def known(request: Request, exc: Exception):
        status = _STATUS[type(exc)]
        return error_response(status, _CODES[status],
                              str(exc.args[0]) if exc.args else _CODES[status])

    for kind in _STATUS:
        app.add_exception_handler(kind, known)

    @app.exception_handler(StoreError)
    async def store_unavailable(request: Request, exc: StoreError):
        # The database is down, locked or broken: a clear 503 agents retry with backoff
        # (they keep their last plan meanwhile); plans already issued are still served.
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        return error_response(503, "database_unavailable",
                              f"database unavailable: {exc}; retry later",
                              headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.error("internal error on %s %s: %s", request.method, request.url.path,
                  type(exc).__name__, exc_info=exc)
        return error_response(500, "internal", "internal error; see the controller log")


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

    for r in (fabric.router, agents.router, jobs.router, reports.router, plans.router,
              events.router, views.router, health.router):
        app.include_router(r)

    _add_error_handlers(app)
    app.add_middleware(CountRequests, metrics=app.state.core.metrics)
    app.add_middleware(BodyLimit, default=settings.max_body_bytes,
                       overrides={"/v1/fabric": settings.max_fabric_bytes},
                       max_depth=settings.max_json_depth)
    app.add_middleware(RateLimit, rules={("POST", "/v1/agents"): TokenBuckets(
        settings.enrol_rate_per_s, settings.enrol_burst)})
    return app
