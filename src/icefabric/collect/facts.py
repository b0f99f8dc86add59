"""Flat "facts" view of collected artefacts, in the vocabulary of the reference corpus.

``shared/reference/ccl-logs/README.md`` defines how the ground truth of a CCL artefact is
written (``rings``, ``trees``, ``connections``, ``init_lines``, ``net_ib_devices``,
``nccl_tests`` ...). :func:`artefact_facts` returns the same keys, computed from the collectors'
parse results, so that a test can compare any item of the corpus against its sidecar without
per-file code, and so that a user can diff two logs. No new parsing happens here.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from icefabric.collect.hccl_log import HcclLog, parse_hccl_logs
from icefabric.collect.nccl_log import (
    NcclLog,
    host_nics,
    implied_placement,
    is_dev_index,
    library_inference,
    library_of,
    parse_nccl_logs,
    ring_edge_map,
    rings_by_channel,
)
from icefabric.collect.nccl_tests import NcclTestsOutput, parse_nccl_tests_files
from icefabric.collect.nccl_topo import NcclTopology, is_topology_xml, parse_nccl_topo
from icefabric.collect.ranktable import RankTable, parse_ranktables

_NIC_KEYS = ("index", "name", "port", "link", "speed_mbps", "rail")
_CONN_KEYS = ("channel", "from", "to", "from_dev", "to_dev", "direction", "via", "kind")
_NET_KEYS = ("net_plugin", "net_dev", "gdrdma")


def artefact_facts(files: list[tuple[str, str]]) -> dict[str, Any]:
    """Facts of one artefact made of one or more files (excerpts of the same log).

    Parameters
    ----------
    files : list of (name, text)
        The files in order. Top-level facts are read from all files together (each reader's
        several-files entry point, so line references name their file); ``per_file`` holds the
        facts of each file alone.

    Returns
    -------
    dict
        Keys as in the corpus README (only those the text supports are present).
    """
    out = files_facts(files)
    out["per_file"] = {name: files_facts([(name, text)]) for name, text in files}
    return out


def text_facts(text: str) -> dict[str, Any]:
    """Facts of one text: an NCCL/RCCL log, nccl-tests output, HCCL log or topology XML."""
    return files_facts([(None, text)])


def files_facts(files: list[tuple[str | None, str]]) -> dict[str, Any]:
    """Facts of one or more texts read together (see :func:`artefact_facts`)."""
    joined = "\n".join(t for _, t in files)
    if is_topology_xml(joined):
        return topology_facts(parse_nccl_topo(joined))
    if joined.lstrip().startswith("{"):
        table = parse_ranktables(files)
        if table.ranks:
            return ranktable_facts(table)
    facts: dict[str, Any] = {}
    facts.update(hccl_facts(parse_hccl_logs(files)))
    tests = parse_nccl_tests_files(files)
    log = parse_nccl_logs(files)
    facts.update(nccl_tests_facts(tests))
    facts.update(nccl_log_facts(log, tests))
    return facts


def _clean(d: dict[str, Any], keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    items = d.items() if keys is None else ((k, d.get(k)) for k in keys)
    return {k: v for k, v in items if v is not None and k != "ref"}


def _one_or_per_host(per_host: dict[str, Any]) -> Any:
    """The corpus writes a per-host fact bare when one host printed it, else keyed by host."""
    if len(per_host) == 1:
        return next(iter(per_host.values()))
    return per_host


def connection_facts(conn: dict[str, Any]) -> dict[str, Any]:
    out = {k: conn.get(k) for k in _CONN_KEYS}
    if conn["kind"] in {"NET", "COLLNET"}:
        out.update({k: conn.get(k) for k in _NET_KEYS})
        if conn.get("proxy_rank") is not None:
            out["proxy_rank"] = conn["proxy_rank"]
    return out


def placement_facts(log: NcclLog) -> dict[str, Any]:
    """Hosts, host blocks, devices and cross-host ring edges: what the log prints completed
    with what it implies (:mod:`icefabric.collect.infer`), plus the list of inferred facts.

    ``hosts`` maps each named host to its ranks; ``nodes`` lists every host in NCCL's order
    (by lowest rank) with ``host: None`` for hosts the log never names;
    ``ring_net_edges_from_rings`` holds, per ring whose ranks are all placed, the consecutive
    ranks on different hosts; ``inferred`` lists each inferred value with its line.
    """
    nranks = max([r["nranks"] for r in log.init_lines + log.nranks_fields] + [
        r["nRanks"] for r in log.comm_topology_lines], default=None)
    nnodes = next((r["nNodes"] for r in log.comm_topology_lines), None)
    placement = implied_placement(log, nranks, nnodes)
    f: dict[str, Any] = {}
    groups = placement.groups()
    hosts = {h: rs for h, rs in groups.items() if not h.startswith("#")}
    if hosts:
        f["hosts"] = hosts
    if groups:
        f["nodes"] = [{"host": None if h.startswith("#") else h, "ranks": rs}
                      for h, rs in sorted(groups.items(), key=lambda kv: kv[1][0])]
    edge_map = {c: e for c, e in ring_edge_map(log, nranks, placement).items() if e is not None}
    if edge_map:
        f["ring_net_edges_from_rings"] = {str(c): [[e.a, e.b] for e in edges]
                                          for c, edges in edge_map.items()}
        f["ring_edges"] = {str(c): [_clean(e.model_dump()) for e in edges]
                           for c, edges in edge_map.items()}
    if groups:
        f["host_ranks"] = [_clean(h.model_dump()) for h in placement.hosts_ranks()]
        f["host_from"] = {str(r): _source(placement.host_from(r))
                          for r in sorted(placement.group_of)}
    if placement.device_of:
        f["device_from"] = {str(r): _source(placement.device_from(r))
                            for r in sorted(placement.device_of)}
    if placement.device_of:
        f["rank_to_local_gpu"] = {str(r): d for r, d in sorted(placement.device_of.items())}
    if nnodes is None and placement.nnodes is not None:
        f["nnodes"] = placement.nnodes
    ring_facts: list = []
    rings_by_channel(log, nranks, ring_facts)
    inferred = library_inference(log) + placement.inferred + ring_facts
    if inferred:
        f["inferred"] = [{k: v for k, v in fact.model_dump().items() if k != "rule"}
                         for fact in inferred]
    return f


def _source(src) -> str | None:
    """A fact's provenance in one word and its line: ``"seen 12"``, ``"inferred 3"``."""
    if src is None:
        return None
    return src.status if src.line is None else f"{src.status} {src.line}"


def nccl_log_facts(log: NcclLog, tests: NcclTestsOutput | None = None) -> dict[str, Any]:
    """Corpus-vocabulary facts of an NCCL/RCCL log (see module docstring)."""
    f: dict[str, Any] = {}
    _nic_facts(log, f)
    _setup_facts(log, f)
    _comm_facts(log, f)
    _ring_tree_facts(log, f)
    _connections_facts(log, f)
    f.update(placement_facts(log))
    _busid_facts(log, f)
    _topology_facts(log, f)
    _env_facts(log, tests, f)
    return f


def _nic_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """The NET/IB devices of each host, their out-of-band interface and relaxed ordering."""
    nics = host_nics(log)
    if nics:
        per_host = {h: {"nics": [_clean(n, _NIC_KEYS) for n in e["nics"]], "oob": e["oob"],
                        "relaxed_ordering": e["relaxed_ordering"]} for h, e in nics.items()}
        f["net_ib_devices"] = per_host
        f["nics"] = _one_or_per_host({h: e["nics"] for h, e in per_host.items()})
        oob = {h: e["oob"] for h, e in per_host.items() if e["oob"] is not None}
        if oob:
            f["oob"] = _one_or_per_host(oob)
        ro = {h: e["relaxed_ordering"] for h, e in per_host.items()
              if e["relaxed_ordering"] is not None}
        if ro:
            f["relaxed_ordering"] = _one_or_per_host(ro)


def _setup_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """Network, interfaces, environment, versions and host the log names."""
    if log.networks:
        f["network"] = log.networks[0]["network"]
    if log.socket_ifs:
        f["socket_interface"] = f["socket_if"] = log.socket_ifs[0]["if"]
    if log.bootstrap_ifs:
        f["bootstrap_if"] = log.bootstrap_ifs[0]["if"]
    if log.ofi_providers:
        f["ofi_provider"] = log.ofi_providers[0]
    if log.env:
        f["env"] = dict(log.env)
    if log.versions:
        f["nccl_version_lines"] = list(log.versions)
    if log.rccl_versions:
        # "2.21.5-HEAD:9a0e6a1" -> "2.21.5"; the git describe suffix is not the version.
        f["rccl_version"] = log.rccl_versions[0].split("-", 1)[0]
    if "Librccl path" in log.banner:
        f["librccl_path"] = log.banner["Librccl path"]
    host = log.banner.get("Hostname") or (log.hosts_seen[0] if len(log.hosts_seen) == 1 else None)
    if host:
        f["host"] = host


def _comm_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """Communicator init and topology lines, rank count, library, version, channel counts."""
    if log.init_lines:
        f["init_lines"] = [_clean(r) for r in log.init_lines]
        f["init"] = f["init_lines"][0]
        cids = [r["commId"] for r in log.init_lines if r.get("commId")]
        if cids:
            f["commId"] = cids[0]
    if log.comm_topology_lines:
        f["comm_topology_lines"] = [_clean(r) for r in log.comm_topology_lines]
        first = log.comm_topology_lines[0]
        f["nNodes"], f["localRanks"] = first["nNodes"], first["localRanks"]
        f["nnodes"] = first["nNodes"]
    nranks = [r["nranks"] for r in log.init_lines + log.nranks_fields] + [
        r["nRanks"] for r in log.comm_topology_lines]
    if nranks:
        f["nranks"] = max(nranks)
    if log.has_debug_lines():
        f["library"] = library_of(log)
    if log.rccl_versions or log.versions:
        f["version"] = (log.rccl_versions or log.versions)[0]
    f.update(log.misc)
    if log.channel_counts:
        cc = log.channel_counts[0]
        f["coll_channels"], f["p2p_channels"] = cc["coll"], cc["p2p"]
        f["p2p_channels_per_peer"] = cc["p2p_per_peer"]
        if cc["collnet"] is not None:
            f["collnet_channels"] = cc["collnet"]
        if cc["nvls"] is not None:
            f["nvls_channels"] = cc["nvls"]


def _ring_tree_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """Rings per channel (after ``nranks``: it bounds them) and trees."""
    rings = rings_by_channel(log, f.get("nranks"))
    if rings:
        f["rings"] = {str(c): r for c, r in rings.items()}
        nch = [r["nchannels"] for r in log.ring_orders if r["nchannels"]]
        f["nchannels"] = max(nch) if nch else len(rings)
    if log.trees:
        # "trees" holds the first (or only) tree of each channel; NCCL 2.5's second tree,
        # printed after "|", is listed apart so both read like the printed columns.
        f["trees"] = [{k: t[k] for k in ("rank", "channel", "down", "up")}
                      for t in log.trees if t["tree"] == 0]
        second = [{k: t[k] for k in ("rank", "channel", "down", "up")}
                  for t in log.trees if t["tree"] == 1]
        if second:
            f["trees2"] = second
        f["tree_channels"] = len({t["channel"] for t in log.trees})


def _connections_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """Channel connections, and those through the network (all, then unique)."""
    if log.connections:
        conns = [connection_facts(c) for c in log.connections]
        f["connections"] = conns
        net = [c for c in conns if c["kind"] == "NET"]
        if net:
            f["net_connections"] = net
            uniq = sorted({(c["channel"], c["from"], c["to"], c["net_dev"]) for c in net},
                          key=lambda t: (t[0], t[1], t[2], -1 if t[3] is None else t[3]))
            f["net_connections_unique"] = [
                {"channel": a, "from": b, "to": c, "net_dev": d} for a, b, c, d in uniq]


def _busid_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """The PCI bus id of each rank, from init lines then connection lines."""
    busids: dict[str, str] = {}
    for rec in log.init_lines:
        if rec.get("busId"):
            busids.setdefault(str(rec["rank"]), rec["busId"])
    for conn in log.connections:
        for rank, dev in ((conn["from"], conn["from_dev"]), (conn["to"], conn["to_dev"])):
            if dev is not None and not is_dev_index(dev):
                busids.setdefault(str(rank), dev)
    if busids:
        f["busid_by_rank"] = dict(sorted(busids.items(), key=lambda kv: int(kv[0])))


def _topology_facts(log: NcclLog, f: dict[str, Any]) -> None:
    """NVLS heads, the system and topology print, and the GPU/NET path table."""
    if log.nvls_heads:
        heads: dict[str, list[int]] = {}
        for rec in log.nvls_heads:
            heads.setdefault(str(rec["head"]), rec["ranks"])
        f["nvls_heads_visible"] = dict(sorted(heads.items(), key=lambda kv: int(kv[0])))
    if log.systems:
        f["system"] = {"maxBw": log.systems[0]["maxBw"], "totalBw": log.systems[0]["totalBw"]}
    if log.topo_nodes:
        f["topology_nodes_visible"] = list(log.topo_nodes)
    if log.paths:
        f["paths"] = {}
        order: list[str] = []
        for rec in log.paths:
            f["paths"].setdefault(rec["node"], rec["peers"])
            order += [n for n in rec["peers"] if n not in order]
        f["gpus"] = [n for n in order if n.startswith("GPU/")]
        f["nets"] = [n for n in order if n.startswith("NET/")]


def _env_facts(log: NcclLog, tests: NcclTestsOutput | None, f: dict[str, Any]) -> None:
    """Algorithm and HCA list set in the environment (the log's over nccl-tests')."""
    env = dict(log.env)
    if tests is not None:
        for run in tests.runs:
            env = {**run.env, **env}
    if "NCCL_ALGO" in env:
        f["algo"] = env["NCCL_ALGO"]
    if "NCCL_IB_HCA" in env:
        f["nccl_ib_hca"] = [x for x in env["NCCL_IB_HCA"].lstrip("=^").split(",") if x]


def nccl_tests_facts(tests: NcclTestsOutput) -> dict[str, Any]:
    """Corpus-vocabulary facts of nccl-tests output."""
    f: dict[str, Any] = {}
    devices = next((r.devices for r in tests.runs if r.devices), None)
    if devices:
        f["devices"] = devices
    first = tests.first_with_rows()
    if first is None:
        params = next((r.params for r in tests.runs if r.params), None)
        if params:
            f["params"] = params
        return f
    f["nccl_tests"] = first.to_dict()
    f["table_rows"] = len(first.rows)
    if first.avg_bus_bandwidth_GBps is not None:
        f["avg_bus_bandwidth_GBps"] = first.avg_bus_bandwidth_GBps
    idx = tests.runs.index(first)
    if idx + 1 < len(tests.runs):
        nxt = tests.runs[idx + 1]
        if nxt.command:
            f["next_command"] = nxt.command
        if nxt.params:
            f["next_run_params"] = nxt.params
    return f


def hccl_facts(log: HcclLog) -> dict[str, Any]:
    """Corpus-vocabulary facts of an HCCL plog excerpt."""
    f: dict[str, Any] = {}
    errs = log.plog_errors()
    if errs:
        e = errs[0]
        f["hccl_error"] = {k: e[k] for k in ("pid", "process", "timestamp", "src", "tid",
                                              "errNo", "message") if k in e}
    if log.errors:
        f["hccl_errors"] = [_clean(e.model_dump()) for e in log.errors]
    if log.links:
        f["hccl_links"] = [_clean(asdict(k)) for k in log.links]
    if log.rank_size is not None:
        f["rank"], f["rankSize"] = log.rank, log.rank_size
    return f


def topology_facts(topo: NcclTopology) -> dict[str, Any]:
    """Corpus-vocabulary facts of a topology dump XML."""
    f: dict[str, Any] = {"well_formed": topo.well_formed}
    if topo.version is not None:
        f["system_version"] = topo.version
    if topo.cpus:
        f["cpu"] = topo.cpus[0]
    f["gpus"] = [
        {**{k: v for k, v in g.items() if k not in ("nvlinks", "numaid")},
         "nvlinks": [{"target": lk["target"], "count": lk["count"]} for lk in g["nvlinks"]]}
        for g in topo.gpus
    ]
    f["nics"] = [{k: v for k, v in n.items() if k != "numaid"} for n in topo.nics]
    if topo.gpus and topo.nics and topo.gpus[0]["pci_busid"] and topo.nics[0]["pci_busid"]:
        sw = topo.common_pci_ancestor(topo.gpus[0]["pci_busid"], topo.nics[0]["pci_busid"])
        if sw is not None:
            f["gpu_nic_common_switch"] = sw
    return f


def ranktable_facts(table: RankTable) -> dict[str, Any]:
    """Corpus-vocabulary facts of an HCCL rank table."""
    servers = table.servers()
    return {
        "version": table.version,
        "status": table.status,
        "server_count": len(servers),
        "servers": servers,
        "nranks": len(table.ranks),
        "rankSize": len(table.ranks),
        "ranks": [{"rank": r.rank, "server_id": r.server_id, "device_id": r.device_id,
                   "device_ip": r.device_ip} for r in table.ranks],
        "hosts": {s: [r.rank for r in table.ranks if r.server_id == s] for s in servers},
    }
