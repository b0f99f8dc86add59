"""Size budgets of a scenario, checked before anything is built.

Each field of the schema has its own domain (:mod:`icefabric.scenario.schema`); a scenario
of valid fields can still ask for more than a machine holds (100,000 servers, an AllToAll over
a million ranks). :func:`estimate` counts what the scenario would build -- servers,
switches, directed links, ranks, QPs -- from the file alone, and :func:`check_budget` refuses
one past its :class:`Budget` with one line naming the field, the count and the limit.

The memory estimate is deliberately pessimistic. Measured (``/usr/bin/time -f %M``, flow
engine): ``homog-small`` 0.19 GiB (the interpreter, numpy, numba and the kernels), the
384-rank AllToAll of ``benchmarks/alltoall-384.yaml`` at one draw 0.32 GiB, so about 0.9 KiB
per QP; the estimate takes :data:`BYTES_PER_QP` = 4 KiB per QP (several policies' plans and
the ideal fabric's twin alive at once), plus each draw's arrays of the batched ECMP kernel.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from icefabric.scenario.loader import LoadedScenario
from icefabric.topology.catalog import SERVERS
from icefabric.units import GiB, KiB, UnitError, format_size, parse_size

BASE_BYTES = 256 * 2**20  # interpreter, numpy, numba, compiled kernels (measured 0.19 GiB)
BYTES_PER_QP = 4 * KiB
BYTES_PER_LINK = 1 * KiB
BYTES_PER_QP_DRAW = 128  # float64 rates, bytes left and times of each QP in each draw
#: NCCL rings per job when the scenario does not say (NCCL opens up to 32 on 8-NIC servers)
DEFAULT_CHANNELS = 32
#: transfers per rank of a training iteration (DP rings, PP sends, TP/EP groups)
TRAINING_QPS_PER_RANK = 64
DEFAULT_MEMORY_LIMIT = 4 * GiB
#: environment variable that overrides the memory limit (``64GiB``) on a bigger machine
MEMORY_LIMIT_ENV = "ICEFAB_MEMORY_LIMIT"


def memory_limit() -> int:
    """The memory limit of a run: ``$ICEFAB_MEMORY_LIMIT`` or :data:`DEFAULT_MEMORY_LIMIT`
    (an environment variable, so the draws' worker processes inherit it)."""
    text = os.environ.get(MEMORY_LIMIT_ENV)
    if not text:
        return DEFAULT_MEMORY_LIMIT
    try:
        return parse_size(text)
    except UnitError as e:
        raise UnitError(f"{MEMORY_LIMIT_ENV}: {e}") from None


@dataclass(frozen=True)
class Budget:
    """Limits of one scenario. The counts are an order of magnitude above the largest
    fabric the benchmarks build (2,048 servers, 16,384 GPUs); ``memory_bytes`` is the one to
    raise on a big machine (``ICEFAB_MEMORY_LIMIT=64GiB``)."""

    servers: int = 1 << 17
    switches: int = 1 << 16
    links: int = 1 << 23
    ranks: int = 1 << 20
    qps: int = 1 << 26
    memory_bytes: int = field(default_factory=memory_limit)


@dataclass(frozen=True)
class ScenarioSize:
    """What a scenario would build, counted from the file (an estimate where the builders
    decide: links inside servers, a library's channels)."""

    servers: int
    switches: int
    links: int
    ranks: int
    qps: int
    memory_bytes: int
    #: field path of the job with the most QPs (what to blame for QPs and memory)
    qps_field: tuple


def _leaves(ls: LoadedScenario) -> int:
    fs, pools = ls.scenario.fabric, ls.scenario.pools
    if fs.kind == "fat-tree":
        return fs.pods * fs.leaves_per_pod
    rails = max((SERVERS[p.server].n_nics for p in pools if p.server in SERVERS), default=1)
    rails = rails if fs.kind == "rail-optimized" else 1
    if fs.separate_pools:
        return rails * sum(math.ceil(p.count / fs.servers_per_leaf) for p in pools)
    return rails * math.ceil(sum(p.count for p in pools) / fs.servers_per_leaf)


def _switch_links(ls: LoadedScenario, leaves: int) -> tuple[int, int]:
    """Switches and directed switch-to-switch links."""
    fs = ls.scenario.fabric
    if fs.kind == "fat-tree":
        aggs = fs.pods * fs.aggs_per_pod
        return leaves + aggs + fs.cores, 2 * (leaves * fs.aggs_per_pod + aggs * fs.cores)
    return leaves + fs.spines, 2 * leaves * fs.spines * fs.links_per_spine


def _job_qps(ls: LoadedScenario, job, accels: dict[str, int]) -> tuple[int, int]:
    """Ranks and QPs of one job (every collective's transfers at one size)."""
    def ranks_on(pool: str, n: int) -> int:
        a = accels.get(pool, 1)
        return n * min(job.ranks_per_server or a, a)

    if job.servers is not None:
        pool_of = {h: p.name for p in ls.scenario.pools for h in p.hosts or ()}
        ranks = sum(ranks_on(pool_of.get(n, n.rsplit("-", 1)[0]), 1) for n in job.servers)
    else:
        counts = {p.name: p.count for p in ls.scenario.pools}
        ranks = sum(ranks_on(p, counts.get(p, 0)) for p in job.pools)
    qps = 0
    for c in getattr(job, "collectives", ()):
        if c.kind == "alltoall":
            # NCCL opens 2 channels (connections) per remote peer up to 2 x p2pnChannels
            # (<= 128) ranks, one beyond (icefabric.ccl.nccl.p2p_net_channels)
            per_peer = 2 if ranks <= 128 else 1
            qps += per_peer * ranks * max(ranks - 1, 0) * job.qps_per_connection
        else:
            qps += ranks * (job.channels or DEFAULT_CHANNELS) * job.qps_per_connection
    return ranks, qps or ranks * TRAINING_QPS_PER_RANK


def estimate(ls: LoadedScenario, draws: int = 1) -> ScenarioSize:
    """Count what ``ls`` would build (``draws``: of the randomised policies)."""
    scn = ls.scenario
    servers = sum(p.count for p in scn.pools)
    profiles = {p.name: SERVERS.get(p.server) for p in scn.pools}
    accels = {n: p.n_accel for n, p in profiles.items() if p is not None}
    nics = sum(p.count * (profiles[p.name].n_nics if profiles[p.name] else 1)
               for p in scn.pools)
    leaves = _leaves(ls)
    switches, switch_links = _switch_links(ls, leaves)
    # NIC cables both ways, plus each accelerator to its NICs and the scale-up domain
    links = switch_links + 2 * nics + 4 * sum(p.count * accels.get(p.name, 1)
                                              for p in scn.pools)
    jobs = [(("jobs", j), job) for j, job in enumerate(scn.jobs)]
    if scn.training is not None:
        jobs.append((("training",), scn.training))
    ranks, qps, worst = 0, 0, (("jobs",), 0)
    for path, job in jobs:
        r, q = _job_qps(ls, job, accels)
        ranks, qps = ranks + r, qps + q
        worst = max(worst, (path, q), key=lambda x: x[1])
    memory = (BASE_BYTES + BYTES_PER_LINK * links + BYTES_PER_QP * qps
              + BYTES_PER_QP_DRAW * qps * (draws if draws > 1 else 0))
    return ScenarioSize(servers, switches, links, ranks, qps, memory, worst[0])


def check_budget(ls: LoadedScenario, budget: Budget | None = None, draws: int = 1
                 ) -> ScenarioSize:
    """Refuse a scenario past ``budget`` (default :class:`Budget`) before it is built.

    Raises
    ------
    ScenarioError
        One line naming the field to change, the count and the limit.
    """
    b = budget or Budget()
    size = estimate(ls, draws)
    checks = (("servers", ("pools",), "servers"), ("switches", ("fabric",), "switches"),
              ("links", ("fabric",), "directed links"), ("ranks", ("jobs",), "ranks"),
              ("qps", size.qps_field, "QPs (transfers of one size)"))
    for attr, path, what in checks:
        n, limit = getattr(size, attr), getattr(b, attr)
        if n > limit:
            raise ls.error(path, f"the scenario builds about {n:,} {what}, more than the "
                           f"budget of {limit:,}")
    if size.memory_bytes > b.memory_bytes:
        raise ls.error(size.qps_field, f"the run needs about {_gib(size.memory_bytes)} of "
                       f"memory, more than the limit of {_gib(b.memory_bytes)} "
                       f"({MEMORY_LIMIT_ENV}=64GiB raises it on a bigger machine)")
    return size


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else format_size(n - n % 2**20)
