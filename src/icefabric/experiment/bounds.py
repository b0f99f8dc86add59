"""A capacity-aware bound on collective time: what the fabric's cuts allow.

``ideal`` runs the jobs on a non-blocking twin of the fabric, so on an oversubscribed fabric
no policy can come near it. The cut bound asks instead how long a collective's bytes need
to leave (or enter) each leaf — and each pod of a fat-tree — through that group's links to
the rest of the fabric: any routing, even perfect per-packet spraying, needs at least
``bytes * 8 / capacity`` for the busiest cut. On a two-tier leaf-spine whose leaves reach
every spine, spreading each leaf's traffic evenly over its uplinks meets this cut, so it is
the max-flow (fractional multipath) bound of the fabric.

``max(ideal time, cut time)`` is then a lower bound on the collective's time on this
fabric; other jobs on the same links only make the real time longer.

References
----------
.. [1] T. Leighton, S. Rao, "Multicommodity max-flow min-cut theorems and their use in
   designing approximation algorithms", J. ACM 46(6), 1999 (cut bounds on concurrent flow).
"""

from __future__ import annotations

import numpy as np

from icefabric.ccl.workload import Workload
from icefabric.topology.model import LINK_FABRIC, Fabric
from icefabric.units import BITS_PER_BYTE, NS_PER_S


def _cut_groups(fabric: Fabric) -> list[np.ndarray]:
    """Node -> group id maps of the cuts to check (-1 = outside every group): one group
    per leaf, and one per pod on fabrics that have pods."""
    leaf_group = np.full(fabric.n_nodes, -1, dtype=np.int64)
    leaves = np.unique(fabric.nic_leaf[fabric.nic_leaf >= 0])
    leaf_group[leaves] = np.arange(len(leaves))
    groups = [leaf_group]
    if np.any(fabric.node_pod >= 0) and fabric.meta.get("builder") == "fat_tree":
        pod = fabric.node_pod.astype(np.int64)
        groups.append(np.where(fabric.is_switch, pod, -1))
    return groups


def collective_cut_ns(fabric: Fabric, workload: Workload) -> dict[str, int]:
    """Least time (ns) each collective call's bytes need to cross the fabric's tightest
    cut (see the module docstring); 0 for a collective that stays inside one leaf.

    Examples
    --------
    >>> from icefabric.topology.builders import LeafSpineSpec, ServerGroup, leaf_spine
    >>> from icefabric.topology.catalog import server_profile
    >>> from icefabric.ccl.communicator import Communicator
    >>> from icefabric.ccl.collectives import add_collective
    >>> from icefabric.ccl.workload import WorkloadBuilder
    >>> from icefabric.topology.model import ACCEL
    >>> fab = leaf_spine([ServerGroup(server_profile("hgx-h100"), 2, "h")],
    ...                  LeafSpineSpec(servers_per_leaf=1, n_spines=4, oversub=2.0))
    >>> wb = WorkloadBuilder()
    >>> comm = Communicator("job", fab, fab.nodes_of_kind(ACCEL))
    >>> _ = add_collective(wb, comm, "alltoall", 2**30)
    >>> cut = collective_cut_ns(fab, wb.build(node_ip=fab.node_ip))
    >>> # 64 rank pairs x 1 GiB / 16 = 4 GiB leave each leaf over 4 x 400G uplinks
    >>> round(cut["job:alltoall:1073741824"] / 1e6, 2)  # ms
    21.47
    """
    W = workload
    net = np.flatnonzero(W.hop_src_nic >= 0)
    out = {c.name: 0 for c in W.collectives}
    if len(net) == 0:
        return out
    hop_bytes = W.flow_size_bytes[W.hop_flow[net]] * W.hop_weight[net]
    coll = W.flow_collective[W.hop_flow[net]]
    src_leaf = fabric.nic_leaf[W.hop_src_nic[net]]
    dst_leaf = fabric.nic_leaf[W.hop_dst_nic[net]]
    fab = fabric.link_kind == LINK_FABRIC
    n_coll = len(W.collectives)
    worst = np.zeros(n_coll)
    for group in _cut_groups(fabric):
        n_groups = int(group.max(initial=-1)) + 1
        if n_groups == 0:
            continue
        a, b = group[src_leaf], group[dst_leaf]
        lsrc, ldst = group[fabric.link_src], group[fabric.link_dst]
        leaving = fab & (lsrc >= 0) & (lsrc != ldst)
        entering = fab & (ldst >= 0) & (lsrc != ldst)
        for side, ends, links in ((a, lsrc, leaving), (b, ldst, entering)):
            cross = (a != b) & (side >= 0)
            sent = np.bincount(coll[cross] * n_groups + side[cross], hop_bytes[cross],
                               minlength=n_coll * n_groups).reshape(n_coll, n_groups)
            cap = np.bincount(ends[links], fabric.link_capacity_bps[links],
                              minlength=n_groups)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(cap > 0, sent * BITS_PER_BYTE / cap, 0.0)
            worst = np.maximum(worst, t.max(axis=1))
    for c, call in enumerate(W.collectives):
        out[call.name] = int(np.ceil(worst[c] * NS_PER_S))
    return out
