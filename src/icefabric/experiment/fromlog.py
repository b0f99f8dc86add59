"""Scenarios from real artefacts: replace a scenario's pools, jobs and sizes with the job a
CCL log (or an nccl-tests output) shows, keeping the scenario's fabric, policies and engine.

The job keeps what the log showed: its hosts, ranks per host, library, channel count, QPs
per connection and the ring order of every channel (``rings``), so the CCL models run the
rings the library built instead of re-inventing them. Without an explicit server profile,
the catalog profile is the one whose accelerator and NIC count match the log
(:func:`infer_server`), and its NIC speed is the log's when the log prints one. A log does
not say which leaf a host hangs off, so the hosts are spread over at least two leaves (the
case where the fabric matters) rather than packed onto one. The scenario is built as a
model (no text round trip); its YAML (``LoadedScenario.text``) reproduces the run.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from icefabric.collect.to_job import JobInferenceError, job_from_log, scenario_fragment
from icefabric.scenario.loader import LoadedScenario, ScenarioError
from icefabric.scenario.schema import Scenario
from icefabric.topology.catalog import SERVERS

# Device names as nccl-tests / rccl-tests print them -> catalog accelerator (same NVLink/
# NIC generation: an H800 or H200 server is cabled like an H100 one).
_ACCELERATORS = (("H100", "H100 SXM"), ("H800", "H100 SXM"), ("H200", "H100 SXM"),
                 ("A100", "A100 SXM"), ("A800", "A100 SXM"), ("MI300", "MI300X OAM"),
                 ("910B", "Ascend 910B"))
_LIBRARY_DEFAULT = {"nccl": "hgx-h100", "rccl": "mi300x", "hccl": "atlas-800t-a2"}


def infer_server(job: dict) -> tuple[str, list[str]]:
    """The catalog server profile that fits a log's hosts, and how it was chosen (words).

    The accelerator the test printed picks the profiles of that accelerator (else the
    library's usual server); among them the one with the log's NIC count per host, else the
    one with the closest count."""
    acc = job.get("accelerator") or ""
    family = next((cat for key, cat in _ACCELERATORS if key in acc.upper()), None)
    fits = [p for p in SERVERS.values() if p.accelerator == family]
    if not fits:
        name = _LIBRARY_DEFAULT.get(job.get("library"), "hgx-h100")
        why = (f"no catalog server has {acc}" if acc else "the log names no accelerator")
        return name, [f"server {name}: {why}; the usual {job.get('library')} server"]
    nics = job.get("nics_per_host")
    best = min(fits, key=lambda p: (abs(p.n_nics - nics) if nics else p.n_nics != p.n_accel,
                                    p.name))
    nic_words = (f"{nics} NICs per host" if nics and best.n_nics == nics else
                 f"{nics} NICs per host, none with that count: closest" if nics else
                 "NIC count not in the log: one NIC per accelerator")
    return best.name, [f"server {best.name}: {acc}, {nic_words}"]


#: What the model's ECMP means on a transport other than RoCE (why its figures do not apply).
_NOT_ROCE = {
    "InfiniBand": "InfiniBand switches route by the subnet manager's forwarding tables "
                  "(or adaptive routing), not by hashing a UDP port, so the ECMP figures "
                  "and ICE's source-port steering do not describe this fabric",
    "EFA": "EFA runs SRD, which sprays every message over many paths (AWS, 'A Cloud-"
           "Optimized Transport Protocol for Elastic and Scalable HPC', IEEE Micro 2020), so "
           "there are no per-flow ECMP collisions to model and the ECMP figures do not apply",
    "Libfabric": "a Libfabric provider decides how traffic is spread; the model's per-QP ECMP "
                 "may not describe it",
    "sockets": "NCCL's socket transport runs over TCP through the kernel; the RoCE model "
               "(ECMP per QP, DCQCN, PFC) does not describe it",
}


def transport_warning(transport: str | None) -> str | None:
    """One sentence when a log's transport is not RoCE (or unknown), saying what that means
    for the figures the replay prints; None for RoCE."""
    if transport == "RoCE":
        return None
    if transport is None:
        return ("the log does not show its network transport (no NET/IB device list or "
                "'Using network' line); the replay assumes RoCEv2")
    why = next((v for k, v in _NOT_ROCE.items() if k in transport), "")
    return (f"the log's transport is {transport}, not RoCE: the replay runs it as RoCEv2 on "
            f"the scenario's fabric anyway; {why}")


def _spread(fabric: dict, n_hosts: int) -> list[str]:
    """Put the hosts on at least two leaves (a log does not say where they are cabled)."""
    spl = max(1, min(fabric["servers_per_leaf"], -(-n_hosts // 2)))
    if spl == fabric["servers_per_leaf"] or n_hosts < 2:
        return []
    fabric["servers_per_leaf"] = spl
    return [f"servers_per_leaf={spl}: the {n_hosts} hosts spread over "
            f"{-(-n_hosts // spl)} leaves (the log does not say where they are cabled)"]


def scenario_from_log(base: LoadedScenario, paths: list[str | Path], *,
                      server: str | None = None, sizes: list[int] | None = None
                      ) -> tuple[LoadedScenario, dict]:
    """The base scenario with the log-derived job in place of its pools and jobs.

    ``server`` is the hosts' catalog profile; default: :func:`infer_server`. Returns the new
    scenario and the job description (with its ``inferred`` values and ``warnings``).
    Raises :class:`~icefabric.collect.errors.CollectError` when the logs do not show a
    usable job.
    """
    try:
        job = job_from_log([str(p) for p in paths])
    except JobInferenceError as e:
        raise JobInferenceError(f"no usable job in {', '.join(map(str, paths))}: {e}") from None
    if server is None:
        server, why = infer_server(job)
        job["inferred"] += why
    job["server"] = server
    note = transport_warning(job.get("transport"))
    job["transport_warning"] = note
    if note:
        job["warnings"] = [note, *job.get("warnings", [])]
    frag = scenario_fragment(job, server=server)
    if job.get("nic_gbps") and SERVERS.get(server) and (
            job["nic_gbps"] * 1e9 != SERVERS[server].nic_bps):
        frag["pools"][0]["nic_gbps"] = job["nic_gbps"]
        job["inferred"].append(f"nic_gbps={job['nic_gbps']:g} from the log's NIC speed")
    rings = [job["rings"][c] for c in sorted(job["rings"])]
    if rings:
        frag["jobs"][0]["rings"] = rings
    if not _blockwise(job):
        job["warnings"] = [
            "the log places ranks out of host-by-host order; the replay places rank r on "
            f"host r // {job['gpus_per_host']}, device r % {job['gpus_per_host']}",
            *job.get("warnings", [])]
    # the scenario's own fields (engine_options.engine is the top-level 'engine')
    plain = {"engine_options": {"engine"}}
    data = base.scenario.model_dump(mode="json", exclude={"failures": True, **plain})
    job["inferred"] += _spread(data["fabric"], len(job["hosts"]))
    data.update(name=f"{data['name']}+{job['name']}",
                description=(f"job {job['name']} ({job['nranks']} ranks on {len(job['hosts'])} "
                             f"hosts, from {', '.join(Path(p).name for p in paths)}) on the "
                             f"fabric of {base.scenario.name}"),
                pools=frag["pools"], jobs=frag["jobs"])
    if sizes is not None:
        data["sizes"] = list(sizes)
    elif "sizes" in frag:
        data["sizes"] = frag["sizes"]
    source = f"<from-log {Path(paths[0]).name}>"
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"the job of the log does not fit: {e.errors()[0]['msg']}",
                            source) from None
    text = yaml.safe_dump(scn.model_dump(mode="json", exclude_defaults=True, exclude=plain),
                          sort_keys=False, default_flow_style=None)
    return LoadedScenario(scn, source, {}, text), job


def _blockwise(job: dict) -> bool:
    """Whether rank r sits on host r // g, device r % g (how a scenario places ranks)."""
    g = job["gpus_per_host"]
    return all(h == r // g and d == r % g for r, (h, d) in
               enumerate(zip(job["rank_host"], job["rank_device"], strict=True)))
