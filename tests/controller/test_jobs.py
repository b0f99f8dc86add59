"""Jobs and reports: a host's reports of all its jobs must fit one host plan."""

from __future__ import annotations

import pytest

from icefabric.controller.errors import Invalid
from icefabric.schemas_service import MAX_PLAN_QPS


def test_a_host_cannot_report_more_qps_than_its_plan_holds(loaded, scenario):
    _, _, _, reports = scenario
    core = loaded.app.state.core
    first = reports["h100-0"][0]
    second = first.model_copy(update={"job": "extra"})  # a second job on the same hosts
    core.jobs.create("extra", core.jobs.hosts_of[first.job], core.fabric)

    def with_qps(rep, n):
        q = rep.qps[0]
        return rep.model_copy(update={"qps": [q.model_copy(update={"ordinal": i})
                                              for i in range(n)]})

    core.jobs.put_report(core.fabric, "h100-0", with_qps(first, 40_000))
    too_many = with_qps(second, MAX_PLAN_QPS - 40_000 + 1)
    with pytest.raises(Invalid, match=f"would hold {MAX_PLAN_QPS + 1} QPs"):
        core.jobs.put_report(core.fabric, "h100-0", too_many)
    core.jobs.put_report(core.fabric, "h100-0", with_qps(second, MAX_PLAN_QPS - 40_000))
