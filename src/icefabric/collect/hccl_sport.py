"""Writer (and reader) of HCCL's per-QP UDP source-port file ``MultiQpSrcPort.cfg``.

Format source: CANN HCCL user guide, ``HCCL_RDMA_QP_PORT_CONFIG_PATH``
(https://www.hiascend.com/document/detail/zh/canncommercial/850/commlib/hcclug/hcclug_000086.html):
one line per (source IP, destination IP) pair, ``srcIP,dstIP=srcPort0,srcPort1,...``; the number
of ports is the number of QPs between the pair and each port is that QP's RoCEv2 UDP source
port. Limits: at most 32 ports per pair (8 advised), at most 131072 lines, each pair once;
``0.0.0.0`` stands for any address; IPv4 (IPv6 from CANN 9.x).

This is how an ICE plan reaches an Ascend job without touching HCCL: the controller chooses one
source port per QP so that the switches' ECMP hash lands each QP on its planned path.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from icefabric.collect._text import numbered_lines, to_text, warn
from icefabric.collect.errors import CollectError
from icefabric.schemas import ParseWarning

FILE_NAME = "MultiQpSrcPort.cfg"
MAX_PORTS_PER_PAIR = 32
ADVISED_PORTS_PER_PAIR = 8
MAX_LINES = 131072

Pair = tuple[str, str]


class SportConfigError(CollectError):
    """The plan cannot be written as a valid ``MultiQpSrcPort.cfg``."""


def _ip(text: str, *, allow_v6: bool) -> str:
    try:
        addr = ipaddress.ip_address(str(text).strip())
    except ValueError:
        raise SportConfigError(f"not an IP address: {text!r}") from None
    if addr.version == 6 and not allow_v6:
        raise SportConfigError(f"IPv6 address {text} needs allow_ipv6=True (CANN 9.x+)")
    return str(addr)


def sport_entries_from_qps(qps: Iterable[Mapping[str, object]]) -> dict[Pair, list[int]]:
    """Group per-QP plan rows into the file's per-pair port lists.

    Parameters
    ----------
    qps : iterable of mappings
        One row per QP with ``src_ip``, ``dst_ip`` and ``sport`` (the planned UDP source
        port), e.g. the rows of an ICE path plan. QP order within a pair is kept.

    Returns
    -------
    dict
        ``{(src_ip, dst_ip): [sport, ...]}`` in first-seen order.
    """
    out: dict[Pair, list[int]] = {}
    for i, qp in enumerate(qps):
        try:
            pair = (str(qp["src_ip"]), str(qp["dst_ip"]))
            port = int(qp["sport"])  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError) as exc:
            raise SportConfigError(f"QP row {i} lacks src_ip/dst_ip/sport: {exc}") from None
        out.setdefault(pair, []).append(port)
    return out


Entries = Mapping[Pair, Iterable[int]] | Iterable[tuple[Pair, Iterable[int]]]


def format_multi_qp_src_port(entries: Entries, *, allow_ipv6: bool = False) -> str:
    """Text of ``MultiQpSrcPort.cfg`` for per-pair source-port lists.

    Parameters
    ----------
    entries : mapping or iterable of ((src_ip, dst_ip), ports)
        Ports per pair, in QP order. A pair given twice is an error (HCCL allows each pair once).
    allow_ipv6 : bool
        Accept IPv6 addresses (only CANN 9.x and later read them).

    Returns
    -------
    str
        One ``srcIP,dstIP=p0,p1,...`` line per pair, newline-terminated.

    Raises
    ------
    SportConfigError
        More than 32 ports for a pair, a port outside 1..65535, an empty list, a repeated pair,
        more than 131072 lines, or an invalid address.
    """
    items = entries.items() if isinstance(entries, Mapping) else entries
    seen: set[Pair] = set()
    lines: list[str] = []
    for (src, dst), ports in items:
        pair = (_ip(src, allow_v6=allow_ipv6), _ip(dst, allow_v6=allow_ipv6))
        if pair in seen:
            raise SportConfigError(f"pair {pair[0]},{pair[1]} given twice; HCCL reads each once")
        seen.add(pair)
        plist = [int(p) for p in ports]
        if not plist:
            raise SportConfigError(f"pair {pair[0]},{pair[1]} has no ports")
        if len(plist) > MAX_PORTS_PER_PAIR:
            raise SportConfigError(f"pair {pair[0]},{pair[1]} has {len(plist)} ports; "
                                   f"HCCL allows at most {MAX_PORTS_PER_PAIR} QPs per pair")
        bad = [p for p in plist if not 0 < p <= 0xFFFF]
        if bad:
            raise SportConfigError(f"pair {pair[0]},{pair[1]}: ports out of range: {bad}")
        lines.append(f"{pair[0]},{pair[1]}=" + ",".join(map(str, plist)))
    if len(lines) > MAX_LINES:
        raise SportConfigError(f"{len(lines)} pairs exceed HCCL's limit of {MAX_LINES} lines")
    return "".join(line + "\n" for line in lines)


def write_multi_qp_src_port(directory: str | Path, entries, *, allow_ipv6: bool = False) -> Path:
    """Write ``MultiQpSrcPort.cfg`` into ``directory`` (the ``HCCL_RDMA_QP_PORT_CONFIG_PATH``).

    The text is validated completely before anything is written, so a bad plan never leaves a
    half-written file for HCCL to read.
    """
    text = format_multi_qp_src_port(entries, allow_ipv6=allow_ipv6)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / FILE_NAME
    tmp = path.with_suffix(".cfg.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def parse_multi_qp_src_port(text: str | bytes, source: str | None = None
                            ) -> tuple[dict[Pair, list[int]], list[ParseWarning]]:
    """Read a ``MultiQpSrcPort.cfg`` back: per-pair port lists and warnings (line numbers)."""
    out: dict[Pair, list[int]] = {}
    warnings: list[ParseWarning] = []
    for n, raw in numbered_lines(to_text(text), source, warnings):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            left, right = line.split("=", 1)
            src, dst = (x.strip() for x in left.split(","))
            pair = (_ip(src, allow_v6=True), _ip(dst, allow_v6=True))
            ports = [int(p) for p in right.split(",") if p.strip()]
        except (ValueError, SportConfigError) as exc:
            warnings.append(warn(f"unreadable entry ({exc})", n, source))
            continue
        if pair in out:
            warnings.append(warn(f"pair {pair[0]},{pair[1]} repeated; HCCL keeps one", n, source))
            continue
        if len(ports) > MAX_PORTS_PER_PAIR:
            warnings.append(warn(f"{len(ports)} ports exceed {MAX_PORTS_PER_PAIR}", n, source))
        out[pair] = ports
    return out, warnings
