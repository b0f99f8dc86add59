"""The controller's metrics through prometheus-client: the names and values scrapers and the
benchmarks read."""

from icefabric.controller.metrics import Metrics


def test_render_keeps_names_and_counts():
    m = Metrics()
    m.observe_plan(0.003, "plan", 4)
    m.observe_plan(0.2, "replan", 5)
    m.plan_errors.inc()
    m.link_events.inc(3)
    m.count_request("/v1/reports", 200, 0.004)
    m.count_request("/v1/plan", 200, 9.0, waited=True)
    text = m.render(agents_connected=2, agents_enrolled=3)
    lines = set(text.splitlines())
    for line in ('ice_planning_seconds_bucket{le="0.005"} 1.0',
                 'ice_planning_seconds_bucket{le="0.5"} 2.0', "ice_planning_seconds_count 2.0",
                 "ice_plans_total 1.0", "ice_replans_total 1.0", "ice_plan_version 5.0",
                 "ice_plan_errors_total 1.0", "ice_link_events_total 3.0",
                 "ice_agents_connected 2.0", "ice_agents_enrolled 3.0",
                 'ice_http_requests_total{route="/v1/reports",status="200"} 1.0',
                 'ice_http_requests_total{route="/v1/plan",status="200"} 1.0',
                 # the long-poll that waited is counted but not timed
                 "ice_http_request_seconds_count 1.0"):
        assert line in lines, line
    assert "_created" not in text
    assert m.value("ice_plan_errors_total") == 1.0
    assert Metrics().value("ice_plan_errors_total") == 0.0  # one registry per controller
