"""``icefab collect ...``: read CCL artefacts and show what they reveal about a job."""

from __future__ import annotations

import json
from pathlib import Path

import typer

collect_app = typer.Typer(
    name="collect",
    help="Read CCL artefacts (NCCL/RCCL logs, nccl-tests output, HCCL rank tables).",
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


def _read(path: Path) -> str:
    from icefabric.collect._text import read_text

    try:
        return read_text(path)
    except OSError as exc:
        _err(f"error: cannot read {path}: {exc.strerror or exc}")
        raise typer.Exit(NOTHING_USABLE) from None


@collect_app.command("nccl-log")
def nccl_log_cmd(
    files: list[Path] = typer.Argument(..., help="NCCL/RCCL NCCL_DEBUG=INFO log file(s)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report(s) as JSON."),
) -> None:
    """Communicators, rings and network connections found in NCCL/RCCL debug logs."""
    from icefabric.collect.nccl_log import build_reports, parse_nccl_logs

    log = parse_nccl_logs([(str(f), _read(f)) for f in files])
    reports = build_reports(log)
    _print_warnings(log.warnings)
    if not reports:
        _err(f"error: no NCCL/RCCL communicator information found in {len(files)} file(s) "
             "(is this an NCCL_DEBUG=INFO log?)")
        raise typer.Exit(NOTHING_USABLE)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json", by_alias=True) for r in reports],
                              indent=2))
        return
    _render_reports(reports)


def _render_reports(reports) -> None:
    from rich.table import Table

    console = _console()
    for rep in reports:
        head = Table(title=f"communicator {rep.comm_id or '?'}", show_header=False)
        for k, v in (("library", rep.library), ("version", rep.version), ("nranks", rep.nranks),
                     ("nnodes", rep.nnodes), ("network", rep.network),
                     ("channels", rep.nchannels)):
            head.add_row(k, "-" if v is None else str(v))
        console.print(head)
        if rep.ranks:
            t = Table(title="ranks")
            for col in ("rank", "host", "device", "busId", "nic"):
                t.add_column(col)
            for r in rep.ranks:
                t.add_row(*(str(x) if x is not None else "-"
                            for x in (r.rank, r.host, r.device, r.bus_id, r.nic)))
            console.print(t)
        if rep.rings:
            t = Table(title="rings")
            t.add_column("channel")
            t.add_column("order")
            for ring in rep.rings:
                t.add_row(str(ring.channel),
                          " ".join(map(str, ring.ranks)) + ("" if ring.complete else " ..."))
            console.print(t)
        net = rep.net_connections()
        if net:
            t = Table(title="network connections")
            for col in ("channel", "from", "to", "dir", "plugin", "nic#", "nic", "link",
                        "proxy", "gdr", "host"):
                t.add_column(col)
            for c in net:
                t.add_row(*(str(x) if x is not None else "-" for x in (
                    c.channel, c.from_rank, c.to_rank, c.direction, c.net_plugin, c.net_dev,
                    c.nic, c.link, c.proxy_rank, c.gdrdma, c.host)))
            console.print(t)
        for hn in rep.nics:
            t = Table(title=f"NICs on {hn.host or '?'} (OOB {hn.oob or '-'})")
            for col in ("index", "name", "port", "link"):
                t.add_column(col)
            for n in hn.nics:
                t.add_row(str(n.index), n.name, str(n.port), n.link or "-")
            console.print(t)


@collect_app.command("nccl-tests")
def nccl_tests_cmd(
    file: Path = typer.Argument(..., help="nccl-tests / rccl-tests output."),
    as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
) -> None:
    """Result rows (size, time, algbw, busbw, #wrong) of nccl-tests output."""
    from icefabric.collect.nccl_tests import parse_nccl_tests

    out = parse_nccl_tests(_read(file), source=str(file))
    _print_warnings(out.warnings)
    if not out.usable():
        _err(f"error: no nccl-tests result rows found in {file}")
        raise typer.Exit(NOTHING_USABLE)
    runs = [r for r in out.runs if r.rows]
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in runs], indent=2))
        return
    from rich.table import Table

    console = _console()
    for run in runs:
        t = Table(title=run.command or run.collective or "nccl-tests")
        for col in ("size (B)", "count", "type", "redop", "time us", "algbw GB/s",
                    "busbw GB/s", "#wrong", "in-place time", "in-place busbw"):
            t.add_column(col, justify="right")
        for r in run.rows:
            o, i = r["out_of_place"], r["in_place"]
            t.add_row(str(r["size"]), str(r["count"]), r["type"], r.get("redop", "-"),
                      str(o["time_us"]), str(o["algbw_GBps"]), str(o["busbw_GBps"]),
                      str(o.get("wrong", o.get("error"))), str(i["time_us"]),
                      str(i["busbw_GBps"]))
        console.print(t)
        if run.avg_bus_bandwidth_GBps is not None:
            console.print(f"avg bus bandwidth: {run.avg_bus_bandwidth_GBps} GB/s")


@collect_app.command("ranktable")
def ranktable_cmd(
    file: Path = typer.Argument(..., help="HCCL rank table JSON (Ascend)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Ranks, servers, devices and device IPs of an HCCL rank table."""
    from icefabric.collect.ranktable import parse_ranktable, report_from_ranktable

    table = parse_ranktable(_read(file), source=str(file))
    _print_warnings(table.warnings)
    if not table.ranks:
        _err(f"error: no ranks found in rank table {file}")
        raise typer.Exit(NOTHING_USABLE)
    if as_json:
        typer.echo(report_from_ranktable(table).model_dump_json(indent=2, by_alias=True))
        return
    from rich.table import Table

    t = Table(title=f"HCCL rank table {file.name} (version {table.version or '?'})")
    for col in ("rank", "server", "device", "device_ip", "host_ip"):
        t.add_column(col)
    for r in table.ranks:
        t.add_row(str(r.rank), r.server_id, str(r.device_id), r.device_ip or "-",
                  r.host_ip or "-")
    _console().print(t)


@collect_app.command("topo")
def topo_cmd(
    file: Path = typer.Argument(..., help="NCCL topology dump (NCCL_TOPO_DUMP_FILE)."),
    as_json: bool = typer.Option(False, "--json", help="Print GPUs, NICs and links as JSON."),
) -> None:
    """GPUs, NICs and their PCIe/NVLink layout from an NCCL topology dump."""
    from icefabric.collect.nccl_topo import parse_nccl_topo

    topo = parse_nccl_topo(_read(file), source=str(file))
    _print_warnings(topo.warnings)
    if not topo.usable():
        _err(f"error: no <system> with CPUs, GPUs or NICs found in {file}")
        raise typer.Exit(NOTHING_USABLE)
    affinity = topo.gpu_nic_affinity()
    if as_json:
        typer.echo(json.dumps({"version": topo.version, "well_formed": topo.well_formed,
                               "cpus": topo.cpus, "gpus": topo.gpus, "nics": topo.nics,
                               "pci_links": topo.pci_links, "nvlinks": topo.nvlinks,
                               "gpu_nic_affinity": affinity}, indent=2))
        return
    from rich.table import Table

    console = _console()
    t = Table(title=f"GPUs in {file.name}")
    for col in ("dev", "busid", "sm", "numa", "nvlinks", "closest NIC"):
        t.add_column(col)
    for g in topo.gpus:
        t.add_row(str(g.get("dev")), str(g["pci_busid"]), str(g.get("sm")), str(g["numaid"]),
                  str(sum(lk["count"] or 0 for lk in g["nvlinks"])),
                  str(affinity.get(g["pci_busid"])))
    console.print(t)
    t = Table(title=f"NICs in {file.name}")
    for col in ("name", "dev", "speed Mb/s", "port", "busid", "numa", "gdr"):
        t.add_column(col)
    for n in topo.nics:
        t.add_row(*(str(n.get(k)) for k in ("name", "dev", "speed", "port", "pci_busid",
                                               "numaid", "gdr")))
    console.print(t)


@collect_app.command("chakra")
def chakra_cmd(
    files: list[Path] = typer.Argument(..., help="Chakra ET files, one per rank."),
    as_json: bool = typer.Option(False, "--json", help="Print the workload as JSON."),
) -> None:
    """Communication operations (collectives, send/recv) of Chakra execution traces."""
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
        t.add_row(*(str(x) if x is not None else "-" for x in (
            o["rank"], o["id"], o["kind"], o["collective"], o["size_bytes"], o["src"],
            o["dst"], o["pg_name"], ",".join(map(str, o["deps"])))))
    _console().print(t)


def register(app: typer.Typer) -> None:
    """Add the ``collect`` sub-command group to the ``icefab`` app."""
    app.add_typer(collect_app, name="collect")
