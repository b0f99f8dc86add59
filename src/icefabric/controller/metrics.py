"""The controller's Prometheus metrics, exposed through ``prometheus-client``.

Each :class:`Metrics` has its own registry (not the library's global one), so several
controller cores in one process (tests, the twin) count apart.
"""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

# No ``*_created`` series: scrapers and the benchmarks read the counters alone.
prometheus_client.disable_created_metrics()

PLAN_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
HTTP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: The exposition format :meth:`Metrics.render` writes (text format 0.0.4).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class Metrics:
    """Counters, gauges and histograms of one controller; :meth:`render` exposes them."""

    def __init__(self):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.planning = Histogram("ice_planning_seconds", "Time to compute a plan or replan.",
                                  buckets=PLAN_BUCKETS_S, registry=r)
        self.http_time = Histogram(
            "ice_http_request_seconds",
            "Request handling time (long-polls that waited excluded).",
            buckets=HTTP_BUCKETS_S, registry=r)
        self.agents_connected = Gauge("ice_agents_connected",
                                      "Agents seen within the agent timeout.", registry=r)
        self.agents_enrolled = Gauge("ice_agents_enrolled", "Hosts with an agent token.",
                                     registry=r)
        self.plan_version = Gauge("ice_plan_version", "Current plan version.", registry=r)
        self.plans = Counter("ice_plans_total", "Full plans computed.", registry=r)
        self.replans = Counter("ice_replans_total", "Re-plans after link changes.", registry=r)
        self.plan_errors = Counter("ice_plan_errors_total", "Planning failures.", registry=r)
        self.plan_requests = Counter(
            "ice_plan_requests_total", "Changes that asked for a plan (coalesced into "
            "ice_plans_total + ice_replans_total).", registry=r)
        self.enrolments = Counter("ice_enrolments_total", "Agent enrolments.", registry=r)
        self.reports = Counter("ice_reports_total", "Communicator reports stored.", registry=r)
        self.events = Counter("ice_events_total", "Telemetry events received.", registry=r)
        self.link_events = Counter("ice_link_events_total", "Link up/down changes.",
                                   registry=r)
        self.cnp_reports = Counter("ice_cnp_reports_total", "CNP-rate events received.",
                                   registry=r)
        self.requests = Counter("ice_http_requests_total", "HTTP requests by route and status.",
                                ["route", "status"], registry=r)

    def observe_plan(self, seconds: float, kind: str, version: int) -> None:
        self.plan_version.set(version)
        (self.replans if kind == "replan" else self.plans).inc()
        self.planning.observe(seconds)

    def count_request(self, route: str, status: int, seconds: float = 0.0,
                      waited: bool = False) -> None:
        self.requests.labels(route=route, status=str(status)).inc()
        if not waited:
            self.http_time.observe(seconds)

    def value(self, name: str, **labels: str) -> float:
        """Current value of one series (``ice_plan_errors_total`` ...), 0 if never set."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def render(self, *, agents_connected: int, agents_enrolled: int) -> str:
        self.agents_connected.set(agents_connected)
        self.agents_enrolled.set(agents_enrolled)
        return generate_latest(self.registry).decode()
