"""``icefab plan SCENARIO``: print a policy's path plan (per job, per QP: path, source port,
backup port, pacing rate) and the predicted per-link load."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        scenario: str = typer.Argument("hetero-default", help="built-in name or YAML file"),
        policy: str = typer.Option("ice", help="policy whose plan to print"),
        size: str = typer.Option("", help="message size (default: the largest)"),
        sport_mode: str = typer.Option("model", help="ice: model | probe"),
        json_out: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
        max_qps: int = typer.Option(64, help="QPs shown per job in the table (0 = all)"),
        from_log: list[str] = typer.Option(None, "--from-log", help="plan the job found in "
                                           "these NCCL/RCCL logs on SCENARIO's fabric"),
        server: str = typer.Option("hgx-h100", "--server", help="with --from-log: server "
                                   "profile of the log's hosts"),
    ) -> None:
        """Compute and print the path plan of SCENARIO."""
        import json

        from icefabric.cli.common import fail
        from icefabric.pipeline.plans import scenario_policy
        from icefabric.pipeline.recipe import RunSpec
        from icefabric.policies.ice import describe_plan
        from icefabric.scenario.build import build_fabric
        from icefabric.scenario.loader import load
        from icefabric.scenario.schema import message_size

        ls = load(scenario)
        if from_log:
            from pathlib import Path

            from icefabric.experiment.fromlog import scenario_from_log

            missing = [p for p in from_log if not Path(p).exists()]
            if missing:
                fail(f"no such log file: {', '.join(missing)}")
            ls, _ = scenario_from_log(ls, from_log, server=server)
        sz = message_size(size) if size else ls.scenario.size_list()[-1]
        pol = scenario_policy(ls, policy, **({"sport_mode": sport_mode} if policy == "ice"
                                             else {}))
        p = RunSpec(ls, build_fabric(ls), pol, failures=False).size_plan(sz)
        view = describe_plan(p.fabric, p.workload, p.paths)
        view["scenario"] = ls.scenario.name
        view["size_bytes"] = sz
        if json_out:
            typer.echo(json.dumps(view, indent=1))
            return
        _print_plan(view, max_qps)


def _print_plan(view: dict, max_qps: int) -> None:
    """The plan's QPs per job (at most ``max_qps`` each; 0 = all) and the predicted load of
    every fabric link, busiest first."""
    from rich.console import Console
    from rich.table import Table

    con = Console()
    m = view["meta"]
    con.print(f"[bold]{view['scenario']}[/] policy={view['policy']} QPs={view['n_qps']} "
              f"max link util={view['max_util']} "
              + (f"method={m.get('method')} verified={m.get('verified_frac')}"
                 if "method" in m else ""))
    for job, rows in view["jobs"].items():
        t = Table(title=f"job {job}")
        for c in ("qp", "src", "dst", "path", "sport", "backup", "demand Gb/s",
                  "pacer Gb/s"):
            t.add_column(c)
        shown = rows if max_qps <= 0 else rows[:max_qps]
        for r in shown:
            t.add_row(str(r["qp"]), r["src"], r["dst"], " > ".join(r["path"][1:-1]),
                      str(r["sport"]), "" if r["backup_sport"] is None
                      else str(r["backup_sport"]), f"{r['rate_gbps']:g}",
                      "" if r["pacing_gbps"] is None else f"{r['pacing_gbps']:g}")
        if len(shown) < len(rows):
            t.caption = f"{len(rows) - len(shown)} more QPs (use --max-qps 0 or --json)"
        con.print(t)
    t = Table(title="predicted fabric link load (sum over jobs of each job's busiest phase)")
    for c in ("link", "load Gb/s", "capacity Gb/s", "util"):
        t.add_column(c)
    for r in sorted(view["links"], key=lambda r: -r["util"]):
        t.add_row(r["link"], f"{r['load_gbps']:g}", f"{r['capacity_gbps']:g}",
                  f"{r['util']:.3f}")
    con.print(t)
