"""Routing tables of a Clos fabric: ECMP groups, path enumeration, server-internal paths.

Switches forward along shortest (up-down) paths; at each switch the set of next-hop links
toward the destination leaf is its ECMP group, ordered by link id (member ``i`` is the
``i``-th smallest link id; hash models pick a member index). Groups are computed once per
link state (htsim's ``get_bidir_paths``), vectorized over all (switch, destination leaf).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from icefabric.csr import indptr_from_lengths
from icefabric.topology.model import (
    ACCEL,
    LEAF,
    LINK_FABRIC,
    LINK_HOST,
    NIC,
    Fabric,
    TopologyError,
)


class RoutingError(TopologyError):
    """No usable path (disconnected fabric, failed links)."""


class Routing:
    """ECMP next-hop groups toward every leaf, for a fabric and a set of failed links.

    Parameters
    ----------
    fabric : Fabric
    down_links : iterable of int — failed link ids (both directions should be given).
    """

    def __init__(self, fabric: Fabric, down_links=()):
        self.fabric = fabric
        self.down = np.zeros(fabric.n_links, dtype=bool)
        self.down[np.asarray(list(down_links), dtype=np.int64)] = True
        f = fabric
        self.switches = f.switches
        self.sw_index = np.full(f.n_nodes, -1, dtype=np.int64)
        self.sw_index[self.switches] = np.arange(len(self.switches))
        self.leaves = f.nodes_of_kind(LEAF)
        self.leaf_index = np.full(f.n_nodes, -1, dtype=np.int64)
        self.leaf_index[self.leaves] = np.arange(len(self.leaves))
        fab = (f.link_kind == LINK_FABRIC) & ~self.down
        self.fab_links = np.flatnonzero(fab)
        S = len(self.switches)
        src = self.sw_index[f.link_src[fab]]
        dst = self.sw_index[f.link_dst[fab]]
        adj = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(S, S)).tocsr()
        # dist[i, s] = hops from switch s to leaf i (BFS on the reversed graph).
        leaf_sw = self.sw_index[self.leaves]
        self.dist = shortest_path(adj.T.tocsr(), unweighted=True, indices=leaf_sw)
        self._build_groups(src, dst)

    def _build_groups(self, src, dst):
        S, NL = len(self.switches), len(self.leaves)
        d = self.dist  # [NL, S]
        links = self.fab_links
        # A link s->t is a next hop toward leaf i iff dist[i, t] == dist[i, s] - 1.
        ok = d[:, dst] == d[:, src] - 1  # [NL, n_fab_links]
        li, k = np.nonzero(ok)
        key = src[k] * NL + li  # group id = switch_index * NL + leaf_index
        order = np.lexsort((links[k], key))
        key, k = key[order], k[order]
        counts = np.bincount(key, minlength=S * NL)
        self.grp_indptr = np.zeros(S * NL + 1, dtype=np.int64)
        np.cumsum(counts, out=self.grp_indptr[1:])
        self.grp_links = links[k].astype(np.int64)

    # -- groups ----------------------------------------------------------------------------
    def group(self, switch: int, dst_leaf: int) -> np.ndarray:
        """Next-hop link ids (ECMP members, ordered) at ``switch`` toward ``dst_leaf``."""
        g = self.sw_index[switch] * len(self.leaves) + self.leaf_index[dst_leaf]
        return self.grp_links[self.grp_indptr[g]:self.grp_indptr[g + 1]]

    def group_sizes(self, switches: np.ndarray, dst_leaves: np.ndarray) -> np.ndarray:
        g = self.sw_index[switches] * len(self.leaves) + self.leaf_index[dst_leaves]
        return self.grp_indptr[g + 1] - self.grp_indptr[g]

    def group_member(self, switches, dst_leaves, member) -> np.ndarray:
        g = self.sw_index[switches] * len(self.leaves) + self.leaf_index[dst_leaves]
        return self.grp_links[self.grp_indptr[g] + member]

    # -- fabric paths (NIC to NIC) ---------------------------------------------------------
    @cached_property
    def _nic_links(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node: the NIC's uplink and downlink ids (-1 for non-NICs)."""
        f = self.fabric
        up = np.full(f.n_nodes, -1, dtype=np.int64)
        down = np.full(f.n_nodes, -1, dtype=np.int64)
        host = np.flatnonzero(f.link_kind == LINK_HOST)
        from_nic = f.node_kind[f.link_src[host]] == NIC
        up[f.link_src[host[from_nic]]] = host[from_nic]
        to_nic = f.node_kind[f.link_dst[host]] == NIC
        down[f.link_dst[host[to_nic]]] = host[to_nic]
        return up, down

    def nic_uplink(self, nic: np.ndarray) -> np.ndarray:
        return self._nic_links[0][np.atleast_1d(np.asarray(nic, dtype=np.int64))]

    def nic_downlink(self, nic: np.ndarray) -> np.ndarray:
        return self._nic_links[1][np.atleast_1d(np.asarray(nic, dtype=np.int64))]

    def reachable(self, src_nic: np.ndarray, dst_nic: np.ndarray) -> np.ndarray:
        """Per NIC pair, whether any working path joins them (both NIC links up and the
        destination leaf reachable from the source leaf over working fabric links)."""
        sn = np.atleast_1d(np.asarray(src_nic, dtype=np.int64))
        dn = np.atleast_1d(np.asarray(dst_nic, dtype=np.int64))
        f = self.fabric
        hops = self.dist[self.leaf_index[f.nic_leaf[dn]], self.sw_index[f.nic_leaf[sn]]]
        return ~self.down[self.nic_uplink(sn)] & ~self.down[self.nic_downlink(dn)] & \
            np.isfinite(hops)

    def walk_csr(self, src_nic: np.ndarray, dst_nic: np.ndarray, choose
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Route many NIC pairs hop by hop; paths as CSR ``(indptr, link ids)``.

        ``choose(step, idx, switch, dst_leaf, n_members) -> member`` is called once per ECMP
        decision depth with arrays for the pairs ``idx`` still travelling; it returns the
        member index picked at each of those switches (a hash model, a plan, ...). Every
        path runs NIC uplink, switch hops, NIC downlink. No per-pair Python loop.
        """
        f = self.fabric
        sn = np.asarray(src_nic, dtype=np.int64)
        dn = np.asarray(dst_nic, dtype=np.int64)
        n = len(sn)
        up, down = self.nic_uplink(sn) if n else sn, self.nic_downlink(dn) if n else dn
        if n and (np.any(self.down[up]) or np.any(self.down[down])):
            bad = int(np.flatnonzero(self.down[up] | self.down[down])[0])
            raise RoutingError(f"NIC link of pair {bad} is down: no path")
        cur = f.nic_leaf[sn].copy()
        dst_leaf = f.nic_leaf[dn]
        steps = []
        active = np.flatnonzero(cur != dst_leaf)
        while len(active):
            if len(steps) > 8:
                raise RoutingError("routing loop: no convergence after 8 switch hops")
            sizes = self.group_sizes(cur[active], dst_leaf[active])
            if np.any(sizes == 0):
                a = active[np.flatnonzero(sizes == 0)[0]]
                raise RoutingError(f"no route from {f.node_names[cur[a]]} to "
                                   f"{f.node_names[dst_leaf[a]]} (failed links?)")
            member = np.asarray(choose(len(steps), active, cur[active], dst_leaf[active],
                                       sizes))
            if np.any((member < 0) | (member >= sizes)):
                raise RoutingError("chooser returned a member outside the ECMP group")
            link = self.group_member(cur[active], dst_leaf[active], member)
            steps.append((active, link))
            cur[active] = f.link_dst[link]
            active = active[cur[active] != dst_leaf[active]]
        nsteps = np.zeros(n, dtype=np.int64)
        for idx, _ in steps:
            nsteps[idx] += 1
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(nsteps + 2, out=ptr[1:])
        flat = np.empty(int(ptr[-1]), dtype=np.int64)
        flat[ptr[:-1]] = up
        flat[ptr[1:] - 1] = down
        for d, (idx, link) in enumerate(steps):  # pairs active at step d made steps 0..d-1
            flat[ptr[idx] + 1 + d] = link
        return ptr, flat

    def walk(self, src_nic: np.ndarray, dst_nic: np.ndarray, choose) -> list[np.ndarray]:
        """:meth:`walk_csr` as one array of link ids per pair."""
        ptr, flat = self.walk_csr(src_nic, dst_nic, choose)
        return np.split(flat, ptr[1:-1]) if len(ptr) > 1 else []

    def all_paths(self, src_leaf: int, dst_leaf: int, limit: int = 4096) -> list[np.ndarray]:
        """Every shortest switch path (as link ids) from ``src_leaf`` to ``dst_leaf``."""
        if src_leaf == dst_leaf:
            return [np.zeros(0, dtype=np.int64)]
        out: list[np.ndarray] = []
        f = self.fabric

        def rec(node, acc):
            if len(out) >= limit:
                return
            if node == dst_leaf:
                out.append(np.array(acc, dtype=np.int64))
                return
            grp = self.group(node, dst_leaf)
            if len(grp) == 0:
                return
            for l in grp:
                rec(int(f.link_dst[l]), acc + [int(l)])

        rec(src_leaf, [])
        if not out:
            raise RoutingError(f"no path from {f.node_names[src_leaf]} to "
                               f"{f.node_names[dst_leaf]}")
        return out

    def n_paths(self, src_leaf: int, dst_leaf: int) -> int:
        """Number of ECMP paths between two leaves (product over the decision tree)."""
        return len(self.all_paths(src_leaf, dst_leaf))


class ServerPaths:
    """Paths inside a server: accelerator <-> accelerator via the hub (NVSwitch/HCCS), and
    accelerator <-> NIC, directly for a NIC the accelerator owns, else through the hub and
    the NIC owner's PCIe link (NCCL PXN / PCIe-switch path)."""

    def __init__(self, fabric: Fabric):
        self.f = fabric

    @cached_property
    def _hub(self) -> np.ndarray:
        """Hub node of every server."""
        return np.array([s.hub for s in self.f.servers], dtype=np.int64)

    def paths(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Links of the paths ``a[i] -> b[i]`` as CSR ``(indptr, link ids)``."""
        f = self.f
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        srv, ka, kb = f.node_server[a], f.node_kind[a], f.node_kind[b]
        same = a == b
        aa = (ka == ACCEL) & (kb == ACCEL)
        an = (ka == ACCEL) & (kb == NIC)
        na = (ka == NIC) & (kb == ACCEL)
        bad = ~same & ((srv != f.node_server[b]) | (srv < 0) | ~(aa | an | na))
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise RoutingError(f"no server path from {f.node_names[a[i]]} to "
                               f"{f.node_names[b[i]]}")
        own = (an & (f.nic_accel[b] == a)) | (na & (f.nic_accel[a] == b))
        hub = self._hub[np.maximum(srv, 0)]
        # node sequences: a hub b | a b | a hub owner(b) b | a owner(a) hub b
        nodes = np.stack([a, b, b, b], axis=1)
        hops = np.where(same, 0, np.where(aa, 2, np.where(own, 1, 3)))
        nodes[aa, 1] = hub[aa]
        via = an & ~own
        nodes[via, 1], nodes[via, 2] = hub[via], f.nic_accel[b[via]]
        via = na & ~own
        nodes[via, 1], nodes[via, 2] = f.nic_accel[a[via]], hub[via]
        step = np.arange(3) < hops[:, None]
        links = f.link_ids(nodes[:, :3][step], nodes[:, 1:][step])
        return indptr_from_lengths(hops), links

    def path(self, a: int, b: int) -> list[int]:
        """Links of the path ``a -> b``."""
        return self.paths(np.array([a]), np.array([b]))[1].tolist()


def leaf_pairs_paths(routing: Routing, pairs) -> dict[tuple[int, int], list[np.ndarray]]:
    """All paths for each distinct (src_leaf, dst_leaf) pair."""
    return {p: routing.all_paths(*p) for p in set(map(tuple, pairs))}


__all__ = ["Routing", "RoutingError", "ServerPaths", "leaf_pairs_paths"]
