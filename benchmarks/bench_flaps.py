"""Link-flap storm against a real controller: how the planner's debounce coalesces it.

The schedule of ``tests/twin/test_flaps.py`` (leaf0-spine0 down/up every 4 ms for 1 s,
three cables down and up at once, then leaf3's eight uplinks down for good) is replayed
against a controller on loopback (policy ``ice``, SQLite, 8 twin agents) once per debounce
value; every plan any agent applied is checked (QPs on working paths or reported "no
path"). Prints JSON and a markdown table: changes sent, plan requests, plans computed,
the time from the last change until every agent applied the final plan.

Run: ``PYTHONPATH=src:. python benchmarks/bench_flaps.py [--debounce 0 0.02 0.05 0.2]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from tests.twin.test_flaps import SCHEDULE

from icefabric.controller.settings import Settings
from icefabric.twin.flaps import FlapOptions, run_flaps
from icefabric.twin.serve import ThreadedController

ADMIN = "bench-flaps-admin"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--debounce", type=float, nargs="+", default=[0.0, 0.02, 0.05, 0.2])
    p.add_argument("--scenario", default="hetero-default")
    args = p.parse_args(argv)
    rows = []
    for d in args.debounce:
        tmp = tempfile.mkdtemp(prefix="ice-flaps-")
        s = Settings(database_url=f"sqlite:///{tmp}/ice.db", admin_token=ADMIN, policy="ice",
                     plan_debounce_s=d)
        with ThreadedController(s) as url:
            res = run_flaps(args.scenario, url, ADMIN, SCHEDULE, FlapOptions(debounce_s=d))
        row = {k: v for k, v in res.to_dict().items() if k != "no_path"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| debounce s | changes | plan requests | plans | plans/s during the storm | "
          "last change -> all agents on the final plan | QPs checked | off path |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['debounce_s']} | {r['changes_sent']} | {r['plan_requests']} | "
              f"{r['plans']} | {r['plans'] / r['flap_s']:.1f} | {r['converge_s'] * 1e3:.0f} ms"
              f" | {r['qps_checked']} | {r['qps_off_path']} |")
    return rows


if __name__ == "__main__":
    main()
