"""Prometheus text-format metrics (exposition format 0.0.4), without a client library."""

from __future__ import annotations

import threading

PLAN_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
HTTP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class Metrics:
    """Counters and a planning-time histogram; rendered by :meth:`render`."""

    def __init__(self):
        self._lock = threading.Lock()
        self.plan_version = 0
        self.plans = 0
        self.replans = 0
        self.plan_errors = 0
        self.plan_requests = 0
        self.enrolments = 0
        self.reports = 0
        self.events = 0
        self.link_events = 0
        self.cnp_reports = 0
        self.requests: dict[tuple[str, int], int] = {}
        self._buckets = [0] * len(PLAN_BUCKETS_S)
        # Handling time of non-long-poll requests (long-polls wait by design).
        self._http = [0] * len(HTTP_BUCKETS_S)
        self._http_sum = 0.0
        self._http_count = 0
        self._sum = 0.0
        self._count = 0

    def observe_plan(self, seconds: float, kind: str, version: int) -> None:
        with self._lock:
            self.plan_version = version
            if kind == "replan":
                self.replans += 1
            else:
                self.plans += 1
            self._sum += seconds
            self._count += 1
            for i, b in enumerate(PLAN_BUCKETS_S):
                if seconds <= b:
                    self._buckets[i] += 1

    def count_request(self, route: str, status: int, seconds: float = 0.0,
                      waited: bool = False) -> None:
        with self._lock:
            k = (route, status)
            self.requests[k] = self.requests.get(k, 0) + 1
            if not waited:
                self._http_sum += seconds
                self._http_count += 1
                for i, b in enumerate(HTTP_BUCKETS_S):
                    if seconds <= b:
                        self._http[i] += 1

    def render(self, *, agents_connected: int, agents_enrolled: int) -> str:
        with self._lock:
            out = [
                "# HELP ice_planning_seconds Time to compute a plan or replan.",
                "# TYPE ice_planning_seconds histogram",
            ]
            for b, c in zip(PLAN_BUCKETS_S, self._buckets):
                out.append(f'ice_planning_seconds_bucket{{le="{b}"}} {c}')
            out += [f'ice_planning_seconds_bucket{{le="+Inf"}} {self._count}',
                    f"ice_planning_seconds_sum {self._sum:.6f}",
                    f"ice_planning_seconds_count {self._count}"]
            out += ["# HELP ice_http_request_seconds Request handling time (long-polls that "
                    "waited excluded).", "# TYPE ice_http_request_seconds histogram"]
            for b, c in zip(HTTP_BUCKETS_S, self._http):
                out.append(f'ice_http_request_seconds_bucket{{le="{b}"}} {c}')
            out += [f'ice_http_request_seconds_bucket{{le="+Inf"}} {self._http_count}',
                    f"ice_http_request_seconds_sum {self._http_sum:.6f}",
                    f"ice_http_request_seconds_count {self._http_count}"]
            simple = [
                ("ice_agents_connected", "gauge", "Agents seen within the agent timeout.",
                 agents_connected),
                ("ice_agents_enrolled", "gauge", "Hosts with an agent token.", agents_enrolled),
                ("ice_plan_version", "gauge", "Current plan version.", self.plan_version),
                ("ice_plans_total", "counter", "Full plans computed.", self.plans),
                ("ice_replans_total", "counter", "Re-plans after link changes.", self.replans),
                ("ice_plan_errors_total", "counter", "Planning failures.", self.plan_errors),
                ("ice_plan_requests_total", "counter", "Changes that asked for a plan "
                 "(coalesced into ice_plans_total + ice_replans_total).", self.plan_requests),
                ("ice_enrolments_total", "counter", "Agent enrolments.", self.enrolments),
                ("ice_reports_total", "counter", "Communicator reports stored.", self.reports),
                ("ice_events_total", "counter", "Telemetry events received.", self.events),
                ("ice_link_events_total", "counter", "Link up/down changes.", self.link_events),
            ]
            for name, typ, help_, v in simple:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} {typ}", f"{name} {v}"]
            out += ["# HELP ice_http_requests_total HTTP requests by route and status.",
                    "# TYPE ice_http_requests_total counter"]
            for (route, status), c in sorted(self.requests.items()):
                out.append(f'ice_http_requests_total{{route="{route}",status="{status}"}} {c}')
        return "\n".join(out) + "\n"
