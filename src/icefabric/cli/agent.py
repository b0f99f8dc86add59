"""``icefab agent``: the host agent (enrol, report, apply plans, local rules) and the verbs
shim it serves to NCCL/RCCL processes."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from icefabric.cli.common import fail, require

agent_app = typer.Typer(help="The ICE host agent.", no_args_is_help=True)

VERBS_LAUNCH = """
With --actuator verbs the agent serves --shim-socket to the verbs shim,
which every CCL process loads (docs/verbs-shim.md):

  export LD_PRELOAD=$(icefab agent shim-path) ICE_JOB=train1
  torchrun --nproc-per-node 8 train.py

  mpirun -x LD_PRELOAD=$(icefab agent shim-path) -x ICE_JOB=train1 \\
      ./all_reduce_perf -b 1G

  srun --export=ALL,LD_PRELOAD=$(icefab agent shim-path),ICE_JOB=train1 \\
      python train.py

Set ICE_SHIM_SOCKET too when the socket is not /run/icefab/verbs.sock.
"""


def _higher(specs: list[str]):
    """``--hccl-higher`` values as :class:`HigherSetting`s."""
    import shlex

    from icefabric.agent.actuators.hccl_cfg import HigherSetting

    out = []
    for spec in specs:
        name, _, cmd = spec.partition("=")
        if not name or not cmd.strip():
            raise typer.BadParameter(f"--hccl-higher {spec!r}: expected NAME=COMMAND")
        out.append(HigherSetting(name, tuple(shlex.split(cmd))))
    return out


@agent_app.command("run", epilog=VERBS_LAUNCH)
def run(
    controller: str = typer.Option(..., help="controller URL, e.g. http://127.0.0.1:8000"),
    host: str = typer.Option(..., help="this host's name in the fabric"),
    enrol_token_file: Path = typer.Option(None, help="file with the enrolment token "
                                                     "(else $ICE_ENROL_TOKEN)"),
    actuator: str = typer.Option("dry-run", help="dry-run | hccl-cfg | verbs | twin"),
    hccl_dir: Path = typer.Option(Path("."), help="hccl-cfg: directory of "
                                                  "MultiQpSrcPort.cfg"),
    hccl_higher: list[str] = typer.Option(None, help="hccl-cfg: NAME=COMMAND of a port source "
                                                     "HCCL reads first (hccn_tool multi_qp or "
                                                     "NSLB), printing 'srcIP,dstIP' lines; "
                                                     "its QPs are reported, not acked"),
    shim_socket: Path = typer.Option(Path("/run/icefab/verbs.sock"),
                                     help="verbs: the socket the shims connect to"),
    reports: Path = typer.Option(None, help="JSON list of CommReport, or one collector "
                                            "report (icefab collect ... --json)"),
    job: str = typer.Option(None, help="with a collector report: the job's name; verbs: "
                                       "the job of processes without ICE_JOB"),
    size: str = typer.Option(None, help="with a collector report: message size, e.g. 1G"),
    collective: list[str] = typer.Option(None, help="with a collector report: collective "
                                                    "kind(s), e.g. all_reduce"),
    state_file: Path = typer.Option(None, help="keeps the token and last plan"),
    poll_wait_s: float = typer.Option(20.0, min=0.0),
    once: bool = typer.Option(False, help="one iteration, then exit"),
) -> None:
    """Run the agent until interrupted (Ctrl-C)."""
    import signal
    import threading

    require("agent", "httpx")
    from icefabric.agent.actuators import get_actuator
    from icefabric.agent.client import ControllerClient
    from icefabric.agent.runner import Agent, AgentOptions

    token = _enrol_token(enrol_token_file)
    reps = _reports(reports, job, size, collective)
    opts: dict = {"hccl-cfg": {"directory": hccl_dir, "higher": _higher(hccl_higher or [])},
                  "verbs": {"socket_path": shim_socket,
                            "default_job": job or _single_job(reps)}}.get(actuator, {})
    try:
        act = get_actuator(actuator, **opts)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    collector = (lambda: act.with_qps(reps)) if actuator == "verbs" else (lambda: reps)
    agent = Agent(host, ControllerClient(controller), act, enrol_token=token,
                  collector=collector,
                  options=AgentOptions(poll_wait_s=poll_wait_s, state_file=state_file))
    if actuator == "verbs":
        _start_verbs(act, shim_socket)
    try:
        if once:
            _once(agent, host, controller, bool(reps) or actuator == "verbs")
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            agent.run(stop)
        except KeyboardInterrupt:
            stop.set()
    finally:
        if actuator == "verbs":
            act.stop()


def _enrol_token(enrol_token_file: Path | None) -> str:
    """The enrolment token: the file's, else $ICE_ENROL_TOKEN; one of them is needed."""
    if enrol_token_file is not None:
        token = enrol_token_file.read_text().strip()
    else:
        token = os.environ.get("ICE_ENROL_TOKEN", "")
    if not token:
        raise typer.BadParameter("give --enrol-token-file or set ICE_ENROL_TOKEN")
    return token


def _reports(reports: Path | None, job: str | None, size: str | None,
             collective: list[str] | None) -> list:
    """The CommReports of ``--reports`` (none without it)."""
    if reports is None:
        return []
    from icefabric.agent.collector import load_reports
    from icefabric.units import parse_size

    try:
        return load_reports(reports, job=job, size_bytes=parse_size(size) if size else None,
                            collectives=collective)
    except ValueError as e:
        raise typer.BadParameter(f"--reports: {e}") from None


def _single_job(reps) -> str | None:
    jobs = {r.job for r in reps}
    return jobs.pop() if len(jobs) == 1 else None


def _start_verbs(act, shim_socket: Path) -> None:
    from icefabric.agent.shim import ShimNotBuilt, shim_path

    try:
        act.start()
    except OSError as e:
        raise typer.BadParameter(f"--shim-socket {shim_socket}: {e.strerror or e}") from None
    try:
        where = f"LD_PRELOAD={shim_path()}"
    except ShimNotBuilt as e:
        where = f"warning: {e}"
    typer.echo(f"verbs actuator serving {shim_socket}; {where}", err=True)


@agent_app.command("shim-path")
def shim_path_cmd() -> None:
    """Print the path of the verbs shim library (for LD_PRELOAD)."""
    from icefabric.agent.shim import ShimNotBuilt, shim_path

    try:
        typer.echo(str(shim_path()))
    except ShimNotBuilt as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@agent_app.command("build-shim")
def build_shim_cmd(out: Path = typer.Option(None, help="output file (default: the user's "
                                                        "cache, found by shim-path)")) -> None:
    """Compile the verbs shim (needs a C compiler and libibverbs headers)."""
    from icefabric.agent.shim import ShimNotBuilt, build_shim

    try:
        typer.echo(str(build_shim(out)))
    except ShimNotBuilt as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


def _once(agent, host: str, controller: str, reported: bool) -> None:
    """One iteration with clear messages: enrol, report, wait for a plan."""
    from icefabric.agent.client import AuthError, BadResponse, ControllerUnavailable, Rejected

    if not reported:
        typer.echo(f"{host}: no --reports given: only a plan the controller already has for "
                   "this host can be applied", err=True)
        agent.poll_wait_s = 0.0
    else:
        typer.echo(f"{host}: reporting, then waiting up to {agent.poll_wait_s:g} s for a plan",
                   err=True)
    try:
        agent.step()
    except ControllerUnavailable as e:
        fail(f"cannot reach the controller at {controller} ({e}); is `icefab controller "
             "serve` running?")
    except AuthError as e:
        fail(f"the controller refused the enrolment token: {e}")
    except Rejected as e:
        fail(f"the controller rejected {host}'s request: {e}{_hint(str(e))}")
    except BadResponse as e:
        fail(f"refused what the controller answered: {e}")
    for job, why in agent.report_errors.items():
        fail(f"the controller rejected {host}'s report of job {job}: {why}{_hint(why)}")
    if agent.plan is None:
        msg = (f"{host}: no plan yet (plan version {agent.version}); the controller plans a "
               "job once every host of it has "
               "reported")
        if not reported:
            fail(msg, code=1)
        typer.echo(msg, err=True)
        return
    typer.echo(f"{host}: plan version {agent.version} applied with the "
               f"{agent.actuator.name} actuator ({len(agent.plan.qps)} QPs)")


def _hint(why: str) -> str:
    if "fabric" in why:
        return " (load one with `icefab controller fabric load SCENARIO`)"
    if "not registered" in why:
        return " (create it with `icefab controller job create JOB --hosts ...`)"
    return ""


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
