"""``icefab collect ...``: read CCL artefacts and show what they reveal about a job.

Every reader takes one or more files (excerpts of one log, one file per host or rank) and
exits with :data:`NOTHING_USABLE` and a message naming the reader that fits when it finds
nothing of its kind. Tables print "-" for every value the artefact does not show.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

collect_app = typer.Typer(
    name="collect",
    help="Read CCL artefacts (NCCL/RCCL logs, nccl-tests output, HCCL logs and rank tables, "
         "NCCL topology dumps, Chakra traces).",
    no_args_is_help=True,
)

NOTHING_USABLE = 2


def _err(msg: str) -> None:
    typer.echo(msg, err=True)


def _print_warnings(warnings) -> None:
    for w in warnings:
        src = f"{w.source}: " if w.source else ""
        _err(f"warning: {src}{w.message}")


def _console():
    from rich.console import Console

    console = Console()
    # Piped output would be cut at rich's 80-column default; tables here are wider.
    return console if console.is_terminal else Console(width=200)


def _read_all(files: list[Path]) -> list[tuple[str, str]]:
    from icefabric.collect._text import read_text

    out = []
    for path in files:
        try:
            out.append((str(path), read_text(path)))
        except OSError as exc:
            _err(f"error: cannot read {path}: {exc.strerror or exc}")
            raise typer.Exit(NOTHING_USABLE) from None
    return out


def _nothing(what: str, reader: str, texts: list[tuple[str, str]], detail: str = "") -> None:
    """Exit saying nothing of ``what`` was found and, per file, which reader would fit."""
    from icefabric.collect.detect import readers_for

    names = ", ".join(name for name, _ in texts)
    hints = []  # in the same line: an error is one line
    for name, text in texts:
        fits = [r for r in readers_for(text) if r != reader]
        if fits:
            hints.append(f"{name} holds {' and '.join(fits)} content: try "
                         + " or ".join(f"`icefab collect {r} {name}`" for r in fits))
    _err(f"error: no {what} found in {names}{detail}" + "".join(f"; {h}" for h in hints))
    raise typer.Exit(NOTHING_USABLE)


FilesArg = typer.Argument(..., help="One or more files, read together in the order given.")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON.")


@collect_app.command("nccl-log")
def nccl_log_cmd(files: list[Path] = FilesArg, as_json: bool = JsonOpt) -> None:
    """Communicators, ranks, rings, trees and NET connections of NCCL/RCCL debug logs.

    Values the log implies without printing them (hosts, devices, cross-host ring edges) are
    filled in and listed as inferred, with the rule and the line. JSON: a list of communicator
    reports (``icefabric.schemas.CommunicatorReport``; shape in docs/collect.md).
    """
    from icefabric.cli.collect_views import communicator_tables
    from icefabric.collect.nccl_log import build_reports, parse_nccl_logs

    texts = _read_all(files)
    log = parse_nccl_logs(texts)
    _print_warnings(log.warnings)
    reports = build_reports(log) if log.has_debug_lines() else []
    if not reports:
        detail = (f" ({log.nccl_lines} NCCL/RCCL lines read, none names a communicator, rank, "
                  "ring or NIC)" if log.nccl_lines else " (no NCCL_DEBUG=INFO lines)")
        _nothing("NCCL/RCCL communicator information", "nccl-log", texts, detail)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json", by_alias=True) for r in reports],
                              indent=2))
        return
    console = _console()
    for i, rep in enumerate(reports):
        for table in communicator_tables(rep, i, len(reports)):
            console.print(table)


@collect_app.command("nccl-tests")
def nccl_tests_cmd(files: list[Path] = FilesArg, as_json: bool = JsonOpt) -> None:
    """Result rows of nccl-tests / rccl-tests output, under the columns the tool printed.

    Rows at the top of a file continue the previous file's run (excerpts of one run).
    """
    from icefabric.cli.collect_views import nccl_tests_table
    from icefabric.collect.nccl_tests import parse_nccl_tests_files

    texts = _read_all(files)
    out = parse_nccl_tests_files(texts)
    _print_warnings(out.warnings)
    if not out.usable():
        _nothing("nccl-tests result rows", "nccl-tests", texts)
    runs = [r for r in out.runs if r.rows]
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in runs], indent=2))
        return
    console = _console()
    for run in runs:
        console.print(nccl_tests_table(run))
        if run.devices:
            hosts = {d["host"] for d in run.devices}
            console.print(f"{len(run.devices)} ranks on {len(hosts)} host(s)")
        if run.avg_bus_bandwidth_GBps is not None:
            console.print(f"avg bus bandwidth: {run.avg_bus_bandwidth_GBps} GB/s")


@collect_app.command("hccl-log")
def hccl_log_cmd(files: list[Path] = FilesArg, as_json: bool = JsonOpt) -> None:
    """Errors (code, rank, PID, device, time) and failed links of HCCL / torch_npu logs.

    Reads CANN plog lines and the torch_npu / CANN error reports frameworks print. JSON:
    ``{"rank", "rank_size", "errors": [...], "links": [...], "plog_lines", "sources",
    "warnings"}`` (docs/collect.md).
    """
    from icefabric.cli.collect_views import cell
    from icefabric.collect.hccl_log import parse_hccl_logs

    texts = _read_all(files)
    log = parse_hccl_logs(texts)
    _print_warnings(log.warnings)
    if not log.usable():
        _nothing("HCCL plog, torch_npu/CANN error or transport lines", "hccl-log", texts)
    if as_json:
        typer.echo(json.dumps(log.to_dict(), indent=2))
        return
    from rich.table import Table

    console = _console()
    if log.errors:
        t = Table(title="HCCL errors")
        for col in ("file:line", "kind", "code", "rank", "device", "pid", "time", "message",
                    "solution"):
            t.add_column(col)
        for e in log.errors:
            code = f"{e.code} ({e.name})" if e.name else e.code
            t.add_row(f"{cell(Path(e.source).name if e.source else None)}:{e.line}", e.kind,
                      cell(code), *map(cell, (e.rank, e.device, e.pid, e.time,
                                              _shorten(e.message, 160),
                                              e.solution and _shorten(e.solution, 100))))
        console.print(t)
    if log.links:
        t = Table(title="links HCCL could not set up")
        for col in ("rank", "local IP", "remote rank", "remote IP", "code", "pid", "time"):
            t.add_column(col)
        for k in log.links:
            t.add_row(*map(cell, (k.rank, k.local_ip, k.remote_rank, k.remote_ip, k.code, k.pid,
                                  k.time)))
        console.print(t)
    if log.rank_size is not None:
        console.print(f"rank {cell(log.rank)} of {log.rank_size} (framework log line)")
    if log.records:
        console.print(f"{len(log.records)} plog line(s)")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@collect_app.command("ranktable")
def ranktable_cmd(files: list[Path] = FilesArg, as_json: bool = JsonOpt) -> None:
    """Ranks, servers, devices and device IPs of HCCL rank tables (one job's files merged)."""
    from icefabric.cli.collect_views import cell
    from icefabric.collect.ranktable import parse_ranktables, report_from_ranktable

    texts = _read_all(files)
    table = parse_ranktables(texts)
    _print_warnings(table.warnings)
    if not table.ranks:
        _nothing("ranks of an HCCL rank table", "ranktable", texts)
    if as_json:
        typer.echo(report_from_ranktable(table).model_dump_json(indent=2, by_alias=True))
        return
    from rich.table import Table

    t = Table(title=f"HCCL rank table (version {cell(table.version)})")
    for col in ("rank", "server", "device", "device_ip", "host_ip"):
        t.add_column(col)
    for r in table.ranks:
        t.add_row(*map(cell, (r.rank, r.server_id, r.device_id, r.device_ip, r.host_ip)))
    _console().print(t)


@collect_app.command("topo")
def topo_cmd(
    files: list[Path] = typer.Argument(..., help="NCCL topology dumps (NCCL_TOPO_DUMP_FILE), "
                                                 "e.g. one per host."),
    as_json: bool = JsonOpt,
) -> None:
    """GPUs, NICs and their PCIe/NVLink layout from NCCL topology dumps.

    JSON: a list with one object per file (``source``, ``version``, ``cpus``, ``gpus``,
    ``nics``, ``pci_links``, ``nvlinks``, ``gpu_nic_affinity``).
    """
    from icefabric.collect.nccl_topo import parse_nccl_topo

    texts = _read_all(files)
    topos = []
    for name, text in texts:
        topo = parse_nccl_topo(text, source=name)
        _print_warnings(topo.warnings)
        if topo.usable():
            topos.append((name, topo))
    if not topos:
        _nothing("<system> with CPUs, GPUs or NICs", "topo", texts)
    if as_json:
        typer.echo(json.dumps([
            {"source": name, "version": t.version, "well_formed": t.well_formed, "cpus": t.cpus,
             "gpus": t.gpus, "nics": t.nics, "pci_links": t.pci_links, "nvlinks": t.nvlinks,
             "gpu_nic_affinity": t.gpu_nic_affinity()} for name, t in topos], indent=2))
        return
    for name, topo in topos:
        _print_topology(Path(name).name, topo)


def _print_topology(name: str, topo) -> None:
    from rich.table import Table

    from icefabric.cli.collect_views import cell

    console = _console()
    affinity = topo.gpu_nic_affinity()
    t = Table(title=f"GPUs in {cell(name)}")
    for col in ("dev", "busid", "sm", "numa", "nvlinks", "closest NIC"):
        t.add_column(col)
    for g in topo.gpus:
        t.add_row(*map(cell, (g.get("dev"), g.get("pci_busid"), g.get("sm"), g.get("numaid"),
                              sum(lk["count"] or 0 for lk in g["nvlinks"]),
                              affinity.get(g["pci_busid"]))))
    console.print(t)
    t = Table(title=f"NICs in {cell(name)}")
    for col in ("name", "dev", "speed Mb/s", "port", "busid", "numa", "gdr"):
        t.add_column(col)
    for n in topo.nics:
        t.add_row(*map(cell, (n.get(k) for k in ("name", "dev", "speed", "port", "pci_busid",
                                                  "numaid", "gdr"))))
    console.print(t)


@collect_app.command("chakra")
def chakra_cmd(
    files: list[Path] = typer.Argument(..., help="Chakra ET files, one per rank."),
    as_json: bool = JsonOpt,
) -> None:
    """Communication operations (collectives, send/recv) of Chakra execution traces."""
    from icefabric.cli.collect_views import cell
    from icefabric.collect.chakra import read_chakra_traces, workload_from_traces

    try:
        traces = read_chakra_traces(files)
    except OSError as exc:
        _err(f"error: cannot read trace: {exc}")
        raise typer.Exit(NOTHING_USABLE) from None
    for tr in traces:
        _print_warnings(tr.warnings)
    wl = workload_from_traces(traces)
    comm = [o for o in wl["ops"] if o["kind"] != "COMP"]
    if not comm:
        _err(f"error: no communication nodes found in {len(files)} trace(s)")
        raise typer.Exit(NOTHING_USABLE)
    if as_json:
        typer.echo(json.dumps(wl, indent=2))
        return
    from rich.table import Table

    t = Table(title=f"communication in {len(traces)} trace(s)")
    for col in ("rank", "id", "kind", "collective", "size (B)", "src", "dst", "pg", "deps"):
        t.add_column(col)
    for o in comm:
        t.add_row(*map(cell, (o["rank"], o["id"], o["kind"], o["collective"], o["size_bytes"],
                              o["src"], o["dst"], o["pg_name"],
                              ",".join(map(str, o["deps"])) or None)))
    _console().print(t)


def register(app: typer.Typer) -> None:
    """Add the ``collect`` sub-command group to the ``icefab`` app."""
    app.add_typer(collect_app, name="collect")
