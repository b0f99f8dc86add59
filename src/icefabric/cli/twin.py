"""``icefab twin SCENARIO --controller URL``: the digital twin against a real controller."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer


def twin(
    scenario: str = typer.Argument("hetero-default", help="scenario file or built-in name"),
    controller: str = typer.Option(None, help="controller URL; if omitted, one is started "
                                              "on a free 127.0.0.1 port"),
    admin_token_file: Path = typer.Option(None, help="file with the admin token (else "
                                                     "$ICE_ADMIN_TOKEN)"),
    policy: str = typer.Option("ice", help="policy of the controller started when "
                                            "--controller is omitted"),
    size: str = typer.Option(None, help="message size (default: the scenario's largest)"),
    engine: str = typer.Option(None, "--engine", "-e",
                               help="flow or fluid (default: the scenario's)"),
    fail: list[str] = typer.Option(None, help="link failure 'NODE_A,NODE_B@T_US' "
                                              "(replaces the scenario's failures)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    out: Path = typer.Option(None, help="write twin.json here"),
) -> None:
    """Run the scenario's hosts as agents against the controller; print the results and
    whether they agree with the in-process policy."""
    from icefabric.scenario.schema import message_size
    from icefabric.twin.run import TwinOptions, run_twin

    fails = _failures(fail)
    server = None
    token = os.environ.get("ICE_ADMIN_TOKEN", "")
    if admin_token_file is not None:
        token = admin_token_file.read_text().strip()
    if controller is None:
        token = token or "twin-admin-token"
        server, controller = _local_controller(policy, token)
    if not token:
        raise typer.BadParameter("give --admin-token-file or set ICE_ADMIN_TOKEN")
    if engine not in (None, "flow", "fluid"):
        raise typer.BadParameter(f"--engine must be flow or fluid, not {engine!r}")
    try:
        res = run_twin(scenario, controller, token, TwinOptions(
            engine=engine, size_bytes=message_size(size) if size else None, failures=fails))
    finally:
        if server is not None:
            server.stop()
    d = res.to_dict()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "twin.json").write_text(json.dumps(d, indent=1))
    if as_json:
        typer.echo(json.dumps(d, indent=1))
    else:
        _print_twin(res)
    if not res.agree or res.qps_on_down_links:
        raise typer.Exit(1)


def _failures(fail: list[str] | None) -> list | None:
    """``--fail NODE_A,NODE_B@T_US`` options as the scenario's FailureSpecs (None: none)."""
    from icefabric.scenario.schema import FailureSpec

    if not fail:
        return None
    fails = []
    for f in fail:
        try:
            link, _, t = f.partition("@")
            a, b = link.split(",")
            fails.append(FailureSpec(at_us=float(t or 0), link=(a.strip(), b.strip())))
        except ValueError:
            raise typer.BadParameter(f"--fail {f!r}: expected NODE_A,NODE_B@T_US") from None
    return fails


def _local_controller(policy: str, token: str):
    """A controller started in this process on a free 127.0.0.1 port (SQLite in a temporary
    folder), and its URL."""
    import tempfile

    from icefabric.controller.settings import Settings
    from icefabric.twin.serve import ThreadedController

    tmp = tempfile.mkdtemp(prefix="icefab-twin-")
    server = ThreadedController(Settings(database_url=f"sqlite:///{tmp}/ice.db",
                                         admin_token=token, policy=policy,
                                         admin_token_file=f"{tmp}/admin.token"))
    return server, server.start()


def _print_twin(res) -> None:
    """The twin's busbw tables, its failures and whether it agrees with the in-process run."""
    from rich.console import Console

    from icefabric.reports.tables import Fitter, collective_tables

    con = Console()
    con.print(f"[bold]{res.scenario}[/] — digital twin: {res.agents} agents, {res.qps} QPs "
              f"over HTTP; policy {res.policy}; engine {res.engine}", highlight=False)
    fit = Fitter(con.width)
    for t in collective_tables(res.to_experiment(), fit):
        con.print(t)
    if fit.legend() is not None:
        con.print(fit.legend())
    for f in res.failures:
        con.print(f"link {'up' if f['up'] else 'down'} {f['link'][0]}-{f['link'][1]} at "
                  f"{f['t_ns'] / 1e3:.0f} us: seen by {f['seen_by']} agents, "
                  f"reported by {f['reported_by']}, "
                  f"{f['backup_ports_used']} QPs to backup ports, plan "
                  f"v{f['plan_version']}", highlight=False)
    con.print(f"plan versions {res.plan_versions}; QPs on failed links "
              f"{res.qps_on_down_links}; applied ports off their planned path "
              f"{res.path_mismatches}; paced QPs {res.paced_qps}/{res.qps}; QPs whose port, "
              f"backup or rate differ from in-process {res.qp_mismatches}; "
              f"twin = in-process: "
              f"{'yes' if res.agree else 'NO'} (max rel. diff {res.max_rel_diff:.1e}); "
              f"{res.wall_s:.1f} s", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("twin")(twin)
