"""``icefab controller``: run the ICE controller service (FastAPI + uvicorn), load its
fabric, and drive it as an operator: links down/up, plans, hosts and events."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from icefabric.cli.common import fail, require

controller_app = typer.Typer(help="The ICE controller service.", no_args_is_help=True)


@controller_app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    port: int = typer.Option(8000, min=0, max=65535),
    db: str = typer.Option(None, help="database URL (default $ICE_DATABASE_URL or "
                                      "sqlite:///./ice.db)"),
    policy: str = typer.Option(None, help="planning policy (default $ICE_POLICY or ice)"),
    admin_token_file: str = typer.Option(None, help="file with the admin token (created "
                                                    "with a random one, mode 0600, if "
                                                    "missing), when ICE_ADMIN_TOKEN is unset"),
    insecure_local: bool = typer.Option(False, "--insecure-local",
                                        help="development only: no admin token; requests "
                                             "from 127.0.0.1 without a token are the admin "
                                             "(refused unless --host is a loopback address)"),
    log_level: str = typer.Option("info"),
    keep_alive_s: int = typer.Option(65, min=1, help="idle keep-alive of agent connections"),
) -> None:
    """Serve the /v1 API; settings come from ICE_* environment variables and options.
    An admin token is required (ICE_ADMIN_TOKEN or --admin-token-file) unless
    --insecure-local."""
    import ipaddress
    import logging
    import sys

    require("service", "uvicorn", "fastapi", "sqlalchemy")
    import uvicorn
    from pydantic import ValidationError

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings
    from icefabric.controller.store.errors import StoreError

    if insecure_local:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            fail(f"--insecure-local serves without an admin token, so it binds only a "
                 f"loopback address, not {host!r}")
    over = {k: v for k, v in (("database_url", db), ("policy", policy),
                              ("admin_token_file", admin_token_file),
                              ("insecure_local", insecure_local or None)) if v is not None}
    over["tune_gc"] = True  # a long-running server (Settings.tune_gc)
    try:
        app = create_app(Settings(**over))
    except ValidationError as e:
        fail("; ".join(str(x["msg"]).removeprefix("Value error, ") for x in e.errors()))
    except (StoreError, OSError) as e:
        fail(f"cannot start the controller: {e}", code=1)
    # The planner thread is CPU-bound; a short GIL switch interval keeps request latency
    # low while it runs (the default 5 ms convoys every I/O wake-up behind it).
    sys.setswitchinterval(0.0005)
    # the controller's own INFO lines (events, plan versions) beside uvicorn's
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                access_log=False, timeout_keep_alive=keep_alive_s, backlog=4096)


fabric_app = typer.Typer(help="The fabric the controller plans on.", no_args_is_help=True)
controller_app.add_typer(fabric_app, name="fabric")


@fabric_app.command("load")
def fabric_load(
    source: str = typer.Argument(..., help="scenario (built-in name or YAML file) or a "
                                 "topology JSON document (GET /v1/fabric/topology)"),
    from_log: list[Path] = typer.Option(None, "--from-log", help="put the servers of the "
                                        "job in these NCCL/RCCL logs, named as the log "
                                        "names its hosts, on the scenario's fabric"),
    server: str = typer.Option("hgx-h100", help="with --from-log: the hosts' server profile"),
    controller: str = typer.Option("http://127.0.0.1:8000", help="controller URL"),
    admin_token_file: Path = typer.Option(None, help="file with the admin token (else "
                                          "$ICE_ADMIN_TOKEN)"),
) -> None:
    """Load (or replace) the fabric of a running controller: PUT /v1/fabric."""
    from icefabric.schemas_service import FabricUpload

    topology, seed, name = _topology(source, from_log, server)
    body = FabricUpload(topology=topology, plan_seed=seed).model_dump(mode="json")
    info = _admin("PUT", controller, "/v1/fabric", admin_token_file, json=body)
    typer.echo(f"fabric {name} loaded: version {info['version']}, {info['servers']} servers, "
               f"{info['links']} links")


CONTROLLER = typer.Option("http://127.0.0.1:8000", "--controller", help="controller URL")
TOKEN_FILE = typer.Option(None, "--admin-token-file", help="file with the admin token (else "
                          "$ICE_ADMIN_TOKEN)")
JSON = typer.Option(False, "--json", help="Print the controller's JSON instead of a table.")


def _admin(method: str, controller: str, path: str, token_file: Path | None, **kw):
    """One admin request to a running controller; the parsed JSON reply, or one line."""
    require("service", "httpx")
    import httpx

    token = _token(token_file, "ICE_ADMIN_TOKEN", "--admin-token-file")
    try:
        r = httpx.request(method, f"{controller.rstrip('/')}{path}", timeout=60,
                          headers={"Authorization": f"Bearer {token}"}, **kw)
    except httpx.HTTPError as e:
        fail(f"cannot reach the controller at {controller}: {type(e).__name__}; is "
             "`icefab controller serve` running?")
    if r.status_code >= 300:
        fail(f"controller refused {method} {path} (HTTP {r.status_code}): {_detail(r)}")
    return r.json()


def _show(got: list[dict], json_out: bool, title: str, heads: list[str], row) -> None:
    """A view's documents as JSON, or as a table of ``row(document)`` cells."""
    if json_out:
        typer.echo(json.dumps(got, indent=1))
        return
    from icefabric.cli.common import console
    from icefabric.reports.tables import Column, Fitter

    rows = [row(d) for d in got]
    cols = [Column(h, [r[i] for r in rows], key=i == 0) for i, h in enumerate(heads)]
    for r in Fitter(console.width).fit((title, cols)):
        console.print(r)


link_app = typer.Typer(help="Tell the controller a cable went down or came back.",
                       no_args_is_help=True)
controller_app.add_typer(link_app, name="link")


CABLE = typer.Option(None, "--cable", min=0, max=1023,
                     help="only this one of several parallel cables between A and B (0 the "
                          "first; as `A->B/N` in /v1/links and result.json); default: every one")


def _link_event(kind: str, link: dict, controller: str, token_file: Path | None) -> None:
    body = {"events": [{"kind": kind, "link": link}]}
    got = _admin("POST", controller, "/v1/events", token_file, json=body)
    state = "down" if kind == "link_down" else "up"
    typer.echo(f"link {_cable(link)} {state}: " + (
        f"re-plan requested (current plan version {got['plan_version']})" if got["replan"]
        else f"already {state}, no re-plan (plan version {got['plan_version']})"))


def _cable(d: dict) -> str:
    from icefabric.controller.cables import name
    from icefabric.schemas_service import LinkRef

    return name(LinkRef.model_validate(d))


@link_app.command("down")
def link_down(a: str = typer.Argument(..., help="one end (node name, as in /v1/links)"),
              b: str = typer.Argument(..., help="the other end"), cable: int = CABLE,
              controller: str = CONTROLLER, admin_token_file: Path = TOKEN_FILE) -> None:
    """Every cable between A and B (or the one --cable names) is down: POST /v1/events
    (admin); the controller re-plans around it and agents fetch the new plan."""
    _link_event("link_down", {"a": a, "b": b, "cable": cable}, controller, admin_token_file)


@link_app.command("up")
def link_up(a: str = typer.Argument(..., help="one end (node name, as in /v1/links)"),
            b: str = typer.Argument(..., help="the other end"), cable: int = CABLE,
            controller: str = CONTROLLER, admin_token_file: Path = TOKEN_FILE) -> None:
    """The cables between A and B (or the one --cable names) are back: POST /v1/events
    (admin); the controller re-plans with them."""
    _link_event("link_up", {"a": a, "b": b, "cable": cable}, controller, admin_token_file)


@controller_app.command("plans")
def plans(limit: int = typer.Option(20, min=1, max=1000, help="newest N versions"),
          controller: str = CONTROLLER, admin_token_file: Path = TOKEN_FILE,
          json_out: bool = JSON) -> None:
    """Plan versions, newest first (GET /v1/plans)."""
    got = _admin("GET", controller, "/v1/plans", admin_token_file, params={"limit": limit})
    _show(got, json_out, f"plans at {controller}, newest first",
          ["version", "created", "policy", "reason", "jobs", "QPs", "hosts", "down links",
           "planning ms"],
          lambda p: [str(p["version"]), _when(p["created_at"]), p["policy"], p["reason"],
                     ",".join(p["jobs"]) or "-", str(p["qps"]), str(p["hosts"]),
                     ",".join(_cable(d) for d in p["down_links"]) or "-",
                     f"{p['planning_ms']:.1f}"])


@controller_app.command("hosts")
def hosts(controller: str = CONTROLLER, admin_token_file: Path = TOKEN_FILE,
          json_out: bool = JSON) -> None:
    """Enrolled host agents and the plan version each applied (GET /v1/agents)."""
    got = _admin("GET", controller, "/v1/agents", admin_token_file)
    _show(got, json_out, f"hosts enrolled at {controller}",
          ["host", "actuator", "NICs", "applied plan", "connected", "last seen"],
          lambda h: [h["host"], h["actuator"], str(len(h["nics"])), str(h["applied_version"]),
                     "yes" if h["connected"] else "no", _when(h["last_seen"])])


@controller_app.command("events")
def events(limit: int = typer.Option(50, min=1, max=10000, help="newest N events"),
           controller: str = CONTROLLER, admin_token_file: Path = TOKEN_FILE,
           json_out: bool = JSON) -> None:
    """Events agents and operators posted, newest first (GET /v1/events)."""
    got = _admin("GET", controller, "/v1/events", admin_token_file, params={"limit": limit})
    _show(got, json_out, f"events at {controller}, newest first",
          ["time", "from", "kind", "link / NIC", "message"],
          lambda e: [_when(e["t"]), e["host"], e["kind"],
                     _cable(e["link"]) if e.get("link")
                     else e.get("nic") or "-", e.get("message") or ""])


def _when(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


job_app = typer.Typer(help="Jobs: created by their scheduler with the hosts they run on; "
                             "only those hosts may report them.", no_args_is_help=True)
controller_app.add_typer(job_app, name="job")


def _job_request(method: str, job: str, controller: str, token_file: Path | None,
                 body: dict | None = None):
    require("service", "httpx")
    import httpx

    token = (token_file.read_text().strip() if token_file is not None else
             os.environ.get("ICE_SCHEDULER_TOKEN") or os.environ.get("ICE_ADMIN_TOKEN", ""))
    if not token:
        fail("give --token-file or set ICE_SCHEDULER_TOKEN (or ICE_ADMIN_TOKEN)")
    try:
        return httpx.request(method, f"{controller.rstrip('/')}/v1/jobs/{job}", json=body,
                             timeout=30, trust_env=False,
                             headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as e:
        fail(f"cannot reach the controller at {controller}: {type(e).__name__}; is "
             "`icefab controller serve` running?")


@job_app.command("create")
def job_create(
    job: str = typer.Argument(..., help="the job's name (as its agents report it)"),
    hosts: str = typer.Option(..., help="comma-separated hosts its ranks run on"),
    controller: str = typer.Option("http://127.0.0.1:8000", help="controller URL"),
    token_file: Path = typer.Option(None, help="file with the scheduler or admin token "
                                    "(else $ICE_SCHEDULER_TOKEN, else $ICE_ADMIN_TOKEN)"),
) -> None:
    """Create a job on its hosts (a scheduler's prolog does this): PUT /v1/jobs/JOB."""
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    r = _job_request("PUT", job, controller, token_file, {"hosts": names})
    if r.status_code not in (200, 201):
        fail(f"controller refused job {job} (HTTP {r.status_code}): {_detail(r)}")
    typer.echo(f"job {job} {'created' if r.status_code == 201 else 'exists'} on "
               f"{len(names)} hosts")


@job_app.command("delete")
def job_delete(
    job: str = typer.Argument(...),
    controller: str = typer.Option("http://127.0.0.1:8000", help="controller URL"),
    token_file: Path = typer.Option(None, help="file with the scheduler or admin token"),
) -> None:
    """The job ended (a scheduler's epilog): DELETE /v1/jobs/JOB."""
    r = _job_request("DELETE", job, controller, token_file)
    if r.status_code != 204:
        fail(f"controller refused deleting job {job} (HTTP {r.status_code}): {_detail(r)}")
    typer.echo(f"job {job} deleted")


def _token(path: Path | None, env: str, option: str) -> str:
    token = path.read_text().strip() if path is not None else os.environ.get(env, "")
    if not token:
        fail(f"give {option} or set {env}")
    return token


def _topology(source: str, logs: list[Path] | None, server: str) -> tuple[dict, int, str]:
    """(topology document, planner seed, name) from a scenario (with the servers of a
    logged job in place of its pools) or a topology JSON file."""
    p = Path(source)
    if p.suffix == ".json":
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            fail(f"{source}: not a readable topology document: {e}")
        return doc, 0, str(doc.get("name", p.stem))
    from icefabric.scenario.build import build_fabric
    from icefabric.scenario.loader import ScenarioError, load
    from icefabric.topology.serialize import fabric_to_dict

    try:
        ls = load(source)
        if logs:
            ls = _with_log_hosts(ls, logs, server)
        fabric = build_fabric(ls)
    except (ScenarioError, ValueError) as e:
        fail(str(e))
    return fabric_to_dict(fabric), ls.scenario.seed, ls.scenario.name


def _with_log_hosts(ls, logs: list[Path], server: str):
    """The scenario with one pool: the logged job's hosts, named as in the log, so that
    agents' reports of that job (icefab collect ... --json) match fabric servers."""
    import yaml

    from icefabric.experiment.fromlog import scenario_from_log
    from icefabric.scenario.loader import loads

    missing = [str(p) for p in logs if not p.exists()]
    if missing:
        fail(f"no such log file: {', '.join(missing)}")
    new, job = scenario_from_log(ls, logs, server=server)
    data = yaml.safe_load(new.text)
    data["pools"][0]["hosts"] = list(job["hosts"])
    return loads(yaml.safe_dump(data, sort_keys=False), new.source)


def _detail(r) -> str:
    try:
        d = r.json()
    except ValueError:
        return r.text[:300]
    return str(d.get("detail", d) if isinstance(d, dict) else d)[:300]


def register(app: typer.Typer) -> None:
    app.add_typer(controller_app, name="controller")
