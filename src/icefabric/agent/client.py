"""HTTP client of the controller API (httpx), with typed errors for the agent's loop."""

from __future__ import annotations

import httpx
from pydantic import BaseModel, ValidationError

from icefabric.schemas_service import (
    AgentEnrol,
    AgentEnrolled,
    CommReport,
    EventBatch,
    EventsAccepted,
    HostPlan,
    PlanAck,
    ReportAccepted,
)

#: the largest answer read: a plan of MAX_PLAN_QPS QPs with a few routes each fits; a
#: bigger body is refused before it is held whole in memory
MAX_RESPONSE_BYTES = 128 << 20


class ControllerUnavailable(ConnectionError):
    """Network error, timeout, 5xx (e.g. 503: its database is unavailable) or 429 (rate
    limited): retry later with backoff."""


class AuthError(PermissionError):
    """401: the token is unknown (e.g. the controller lost its database): re-enrol."""


class Rejected(ValueError):
    """Another 4xx: the request itself is wrong or not possible now (``status``)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status


class BadResponse(ValueError):
    """A successful answer whose body is not what the API promises (not JSON, a field
    missing or out of range): nothing of it is used."""


def _parse(model: type[BaseModel], r: httpx.Response):
    """``r``'s body as ``model``, or :class:`BadResponse` naming the first fields at fault
    (a value appears only as its repr: no raw newline reaches a log line)."""
    try:
        return model.model_validate_json(r.content)
    except ValidationError as e:
        errs = e.errors()
        what = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'body'}: {x['msg']}"
                         for x in errs[:3])
        more = f" (and {len(errs) - 3} more)" if len(errs) > 3 else ""
        raise BadResponse(f"{r.request.method} {r.request.url.path}: invalid "
                          f"{model.__name__}: {what}{more}"[:900]) from None


class ControllerClient:
    """Thin typed wrapper over the ``/v1`` API.

    Parameters
    ----------
    base_url : str — e.g. ``http://127.0.0.1:8000``.
    token : str, optional — the host's agent token (set after enrolment).
    timeout_s : float — per-request timeout (long-polls add their wait).
    """

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                  transport=transport, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, token: str | None = None,
                 timeout_s: float | None = None, **kw) -> httpx.Response:
        tok = token or self.token
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        if "content" in kw:
            headers["Content-Type"] = "application/json"
        req = self._http.build_request(method, path, headers=headers,
                                       timeout=timeout_s or self.timeout_s, **kw)
        try:
            r = self._http.send(req, stream=True)
            try:
                body = _read_capped(r, f"{method} {path}")
            finally:
                r.close()
        except httpx.HTTPError as e:
            raise ControllerUnavailable(f"{method} {path}: {type(e).__name__}") from None
        # (the body is already decoded: the copy must not decode it again)
        r = httpx.Response(r.status_code, content=body, request=req, headers=[
            (k, v) for k, v in r.headers.multi_items() if k.lower() != "content-encoding"])
        if r.status_code >= 500 or r.status_code == 429:
            raise ControllerUnavailable(f"{method} {path}: HTTP {r.status_code}: "
                                        f"{_message(r)}")
        if r.status_code == 401:
            raise AuthError(_message(r))
        if r.status_code >= 400:
            raise Rejected(r.status_code, _message(r))
        return r

    def enrol(self, enrol_token: str, req: AgentEnrol) -> AgentEnrolled:
        r = self._request("POST", "/v1/agents", token=enrol_token,
                          content=req.model_dump_json())
        out = _parse(AgentEnrolled, r)
        self.token = out.token
        return out

    def put_report(self, host: str, rep: CommReport) -> ReportAccepted:
        r = self._request("PUT", f"/v1/hosts/{host}/communicators/{rep.job}",
                          content=rep.model_dump_json())
        return _parse(ReportAccepted, r)

    def end_report(self, host: str, job: str) -> None:
        """The job's communicator is gone on this host (404: already forgotten)."""
        try:
            self._request("DELETE", f"/v1/hosts/{host}/communicators/{job}")
        except Rejected as e:
            if e.status != 404:
                raise

    def get_plan(self, host: str, after_version: int = -1, wait_s: float = 0.0
                 ) -> HostPlan | None:
        r = self._request("GET", f"/v1/hosts/{host}/plan",
                          params={"after_version": after_version, "wait_s": wait_s},
                          timeout_s=self.timeout_s + wait_s)
        if r.status_code == 204:
            return None
        return _parse(HostPlan, r)

    def ack(self, host: str, ack: PlanAck) -> None:
        self._request("POST", f"/v1/hosts/{host}/plan/ack", content=ack.model_dump_json())

    def post_events(self, batch: EventBatch) -> EventsAccepted:
        r = self._request("POST", "/v1/events", content=batch.model_dump_json())
        return _parse(EventsAccepted, r)


def _read_capped(r: httpx.Response, what: str) -> bytes:
    body = bytearray()
    for chunk in r.iter_bytes():
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise BadResponse(f"{what}: answer larger than {MAX_RESPONSE_BYTES >> 20} MiB")
    return bytes(body)


def _message(r: httpx.Response) -> str:
    try:
        return str(r.json().get("message", r.text))[:500]
    except ValueError:
        return r.text[:500]
