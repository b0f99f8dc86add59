"""Turn a :class:`~icefabric.schemas.CommunicatorReport` into a neutral job description.

The simulator (``icefab simulate --from-log``) needs hosts, ranks per host, each rank's local
device, the ring orders and the NIC count; this module supplies them and nothing else, so the
``collect`` layer stays independent of the ``ccl``/``engine`` layers above it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from icefabric.collect.errors import CollectError
from icefabric.collect.infer import describe
from icefabric.schemas import CommunicatorReport


class JobInferenceError(CollectError):
    """The report does not contain enough to place every rank on a host."""


def job_from_report(report: CommunicatorReport, *, name: str | None = None) -> dict[str, Any]:
    """Neutral job description of the communicator in ``report``.

    Parameters
    ----------
    report : CommunicatorReport
        Output of a collector (e.g. :func:`icefabric.collect.nccl_log.build_reports`).
    name : str, optional
        Job name; defaults to the communicator id, else the first source file's stem.

    Returns
    -------
    dict
        ``{"name", "library", "hosts", "gpus_per_host", "nranks", "rank_host",
        "rank_device", "rings", "nics_per_host", "nic_gbps", "channels",
        "qps_per_connection", "nccl_version", "split_data_on_qps", "inferred"}``. ``name``
        is a valid scenario job name (starts with a letter).
        ``rank_host[r]`` indexes ``hosts``; ``rings`` maps channel -> rank order (complete
        rings only); ``nics_per_host`` is None when the log listed no NICs; ``inferred``
        lists, in words, every value that was completed rather than read (empty when all was
        read), ending with the report's own inferred facts (``report: ...``).

    Raises
    ------
    JobInferenceError
        When the number of ranks is unknown or no rank could be placed on a host.

    Notes
    -----
    NCCL numbers ranks host by host (``localRank`` = position inside the host), so a rank whose
    host the log does not show is placed in the block of ``gpus_per_host`` consecutive ranks it
    falls in; hosts the log never named get placeholder names ``node<i>``.
    """
    inferred: list[str] = []
    known = {r.rank: r for r in report.ranks}
    nranks = _nranks(report, known, inferred)
    placed = {r: info.host for r, info in known.items() if info.host is not None}
    if not placed:
        raise JobInferenceError("no rank's host is visible in the report")
    gpus_per_host = _gpus_per_host(report, known, Counter(placed.values()), nranks, inferred)
    block_host = _block_hosts(placed, nranks, gpus_per_host, inferred)
    hosts, rank_host, rank_device = _place_ranks(known, placed, block_host, nranks,
                                                 gpus_per_host)
    nics = [len(h.nics) for h in report.nics if h.nics]
    speeds = [n.speed_mbps for h in report.nics for n in h.nics if n.speed_mbps]
    library = report.library if report.library in ("nccl", "rccl", "hccl") else "nccl"
    inferred += [f"report: {describe(f)}" for f in report.inferred]
    qps = report.env.get("NCCL_IB_QPS_PER_CONNECTION") or report.env.get(
        "HCCL_RDMA_QPS_PER_CONNECTION")
    return {
        "name": _job_name(report, name),
        "library": library,
        "hosts": hosts,
        "gpus_per_host": gpus_per_host,
        "nranks": nranks,
        "rank_host": rank_host,
        "rank_device": rank_device,
        "rings": report.ring_orders(nranks),
        "nics_per_host": max(nics) if nics else None,
        "nic_gbps": max(speeds) / 1000 if speeds else None,
        "channels": report.nchannels,
        "qps_per_connection": int(qps) if qps and qps.isdigit() else 1,
        "nccl_version": report.version if library == "nccl" else None,
        "split_data_on_qps": _int_env(report.env, "NCCL_IB_SPLIT_DATA_ON_QPS"),
        "inferred": inferred,
    }


def _nranks(report: CommunicatorReport, known: dict[int, Any], inferred: list[str]) -> int:
    """The job's rank count: the report's, else the longest complete ring or the highest
    rank seen (noted in ``inferred``)."""
    nranks = report.nranks
    if nranks is None:
        ring_len = max((len(r.ranks) for r in report.rings if r.complete), default=0)
        nranks = max(ring_len, max(known, default=-1) + 1) or None
        if nranks:
            inferred.append(f"nranks={nranks} from the highest rank seen")
    if not nranks:
        raise JobInferenceError("the report does not show how many ranks the job has")
    return nranks


def _gpus_per_host(report: CommunicatorReport, known: dict[int, Any], per_host: Counter,
                   nranks: int, inferred: list[str]) -> int:
    """Ranks per host: from the node count when it divides the ranks, else the smallest
    size that holds every local device index seen and divides the ranks, else the busiest
    host seen (the last two noted in ``inferred``)."""
    if report.nnodes and nranks % report.nnodes == 0:
        return nranks // report.nnodes
    devs = [i.device for i in known.values() if i.device is not None]
    low = max(max(devs, default=-1) + 1, max(per_host.values()), 1)
    guess = next((g for g in range(low, nranks + 1) if nranks % g == 0), None)
    if guess:
        inferred.append(f"gpus_per_host={guess} from the local device indices")
        return guess
    inferred.append(f"gpus_per_host={max(per_host.values())} from the busiest host seen")
    return max(per_host.values())


def _block_hosts(placed: dict[int, str], nranks: int, gpus_per_host: int,
                 inferred: list[str]) -> dict[int, str]:
    """The host of each block of ``gpus_per_host`` consecutive ranks: that of its first
    placed rank, else a placeholder ``node<i>`` no other block uses (noted in ``inferred``)."""
    nblocks = -(-nranks // gpus_per_host)
    block_host: dict[int, str] = {}
    for r, h in placed.items():
        block_host.setdefault(r // gpus_per_host, h)
    used = set(block_host.values())
    for b in range(nblocks):
        if b not in block_host:
            i = b
            while f"node{i}" in used:
                i += 1
            block_host[b] = f"node{i}"
            used.add(block_host[b])
            inferred.append(f"ranks {b * gpus_per_host}..{min(nranks, (b + 1) * gpus_per_host) - 1}"
                            f" placed on unnamed host {block_host[b]}")
    return block_host


def _place_ranks(known: dict[int, Any], placed: dict[int, str], block_host: dict[int, str],
                 nranks: int, gpus_per_host: int) -> tuple[list[str], list[int], list[int]]:
    """The hosts in block order, and each rank's host index and local device (the one
    seen, else its position in its block)."""
    nblocks = -(-nranks // gpus_per_host)
    hosts = list(dict.fromkeys(block_host[b] for b in range(nblocks)))
    host_index = {h: i for i, h in enumerate(hosts)}
    rank_host, rank_device = [], []
    for r in range(nranks):
        h = placed.get(r) or block_host[r // gpus_per_host]
        if h not in host_index:  # a host seen out of block order
            host_index[h] = len(hosts)
            hosts.append(h)
        rank_host.append(host_index[h])
        dev = known[r].device if r in known and known[r].device is not None else None
        if dev is None:
            dev = r % gpus_per_host
        rank_device.append(dev)
    return hosts, rank_host, rank_device


def _job_name(report: CommunicatorReport, name: str | None) -> str:
    """``name``, else ``comm-<id>``, else the first source's stem; made a valid scenario job
    name (scenario.schema.ScenarioJob: it starts with a letter)."""
    if name is None:
        name = Path(report.sources[0]).stem if report.sources else "job"
        if report.comm_id:
            name = f"comm-{report.comm_id}"
    name = re.sub(r"[^\w.-]", "_", name)
    if not name[:1].isalpha():
        name = f"job-{name}"
    return name


def _int_env(env: dict[str, str], key: str) -> int | None:
    v = (env.get(key) or "").strip()
    return int(v) if v.isdigit() else None


def job_from_log(paths: list[str | Path], *, name: str | None = None) -> dict[str, Any]:
    """Job description of the largest communicator found in NCCL/RCCL log file(s).

    This is the entry point for ``icefab simulate --from-log``: it reads the files with
    :func:`icefabric.collect.nccl_log.parse_nccl_logs`, builds the reports and returns
    :func:`job_from_report` of the one with the most ranks, plus ``"warnings"`` (strings
    naming file and line), ``"collective"`` (``all_reduce`` ... when nccl-tests output is in
    the files, else None), ``"sizes_bytes"`` (the sizes of its result rows, or []),
    ``"accelerator"`` (the device model nccl-tests printed, or None), ``"env"`` (NCCL
    variables of the log and the test's command line) and ``"transport"``
    (:func:`icefabric.collect.nccl_log.network_transport`). When the log lists no NICs,
    ``nics_per_host`` counts the devices of an exact ``NCCL_IB_HCA`` list.

    Raises
    ------
    JobInferenceError
        When no communicator (or not enough of one) was found.
    """
    from icefabric.collect._text import read_text
    from icefabric.collect.detect import mixed_sections
    from icefabric.collect.nccl_log import build_reports, network_transport, parse_nccl_logs
    from icefabric.collect.nccl_tests import parse_nccl_tests

    texts = [read_text(p) for p in paths]
    for p, text in zip(paths, texts, strict=True):
        mixed = mixed_sections(text)
        if mixed:
            raise JobInferenceError(f"{p}: {mixed}")
    log = parse_nccl_logs([(str(p), t) for p, t in zip(paths, texts, strict=True)])
    reports = build_reports(log)
    if not reports:
        raise JobInferenceError(f"no NCCL/RCCL communicator found in {len(paths)} file(s)")
    best = max(reports, key=lambda r: (r.nranks or 0, len(r.ranks)))
    job = job_from_report(best, name=name)
    job["warnings"] = [f"{w.source or ''}: {w.message}" for w in log.warnings]
    # nccl-tests output around the NCCL lines says which collective and sizes were run.
    job["collective"], job["sizes_bytes"], job["accelerator"] = None, [], None
    job["env"] = dict(best.env)
    job["transport"] = network_transport(log)
    for text in texts:
        run = next((r for r in parse_nccl_tests(text).runs if r.collective or r.rows), None)
        if run is not None:
            coll = (run.collective or "").removesuffix("_perf") or None
            job["collective"] = job["collective"] or coll
            job["sizes_bytes"] = job["sizes_bytes"] or [r["size"] for r in run.rows]
            job["accelerator"] = job["accelerator"] or next(
                (d["model"] for d in run.devices if d.get("model")), None)
            job["env"] = {**run.env, **job["env"]}
    if job["split_data_on_qps"] is None:  # set on the test's command line only
        job["split_data_on_qps"] = _int_env(job["env"], "NCCL_IB_SPLIT_DATA_ON_QPS")
    if job["nics_per_host"] is None:
        hcas = ib_hca_devices(job["env"].get("NCCL_IB_HCA", ""))
        if hcas:
            job["nics_per_host"] = len(hcas)
            job["inferred"].append(f"nics_per_host={len(hcas)} from NCCL_IB_HCA")
    return job


def ib_hca_devices(value: str) -> list[str]:
    """The NICs an ``NCCL_IB_HCA`` value selects when it lists them (NCCL docs: a comma list
    of ``name[:port]``, ``=`` for exact names, ``^`` to exclude); [] when it excludes or is
    empty, since the NICs left are then unknown."""
    value = value.strip().strip("\"'")
    if not value or value.startswith("^"):
        return []
    return [d for d in value.lstrip("=").split(",") if d.strip()]


# nccl-tests binary stem -> scenario collective kind (scenario.schema.ScenarioCollective).
_COLLECTIVE_KIND = {"all_reduce": "all_reduce", "all_gather": "all_gather",
                    "reduce_scatter": "reduce_scatter", "alltoall": "alltoall",
                    "broadcast": "broadcast"}


def scenario_fragment(job: dict[str, Any], *, server: str = "hgx-h100",
                      pool: str = "fromlog", collective: str | None = None) -> dict[str, Any]:
    """The ``pools``/``jobs``/``sizes`` part of a scenario that replays ``job``.

    Parameters
    ----------
    job : dict
        Output of :func:`job_from_report` or :func:`job_from_log`.
    server : str
        Catalog server profile for the job's hosts (logs do not say which hardware they ran
        on beyond GPU names; choose the closest profile).
    pool : str
        Pool name to use.
    collective : str, optional
        Collective to replay; default: the one nccl-tests ran, else ``all_reduce``.

    Returns
    -------
    dict
        ``{"pools": [...], "jobs": [...]}`` plus ``"sizes"`` when the log had nccl-tests rows;
        merge it into a scenario mapping (fabric, policies ...) before loading it.
    """
    kind = collective or _COLLECTIVE_KIND.get(job.get("collective") or "", "all_reduce")
    spec: dict[str, Any] = {
        "name": job["name"],
        "pools": [pool],
        "library": job["library"],
        "ranks_per_server": job["gpus_per_host"],
        "qps_per_connection": job.get("qps_per_connection", 1),
        "collectives": [{"kind": kind}],
    }
    if job.get("channels"):
        spec["channels"] = min(int(job["channels"]), 64)
    if job.get("nccl_version"):
        spec["nccl_version"] = job["nccl_version"]
    if job.get("split_data_on_qps") is not None:
        spec["nccl_env"] = {"NCCL_IB_SPLIT_DATA_ON_QPS": job["split_data_on_qps"]}
    out: dict[str, Any] = {
        "pools": [{"name": pool, "server": server, "count": len(job["hosts"])}],
        "jobs": [spec],
    }
    if job.get("sizes_bytes"):
        out["sizes"] = list(job["sizes_bytes"])
    return out
