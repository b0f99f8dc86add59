"""Routing tables of a Clos fabric: ECMP groups, path enumeration, server-internal paths.

Switches forward along shortest (up-down) paths; at each switch the set of next-hop links
toward the destination leaf is its ECMP group, ordered by link id (member ``i`` is the
``i``-th smallest link id; hash models pick a member index). Groups are computed once per
link state (htsim's ``get_bidir_paths``), vectorized over all (switch, destination leaf).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from icefabric.csr import gather, indptr_from_lengths
from icefabric.topology.model import (
    ACCEL,
    LEAF,
    LINK_FABRIC,
    NIC,
    Fabric,
    TopologyError,
)
from icefabric.topology.routing_kernel import group_signatures, leaf_hops


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
        by_dst = np.argsort(dst, kind="stable")
        cls, rep = self._twin_classes(src, dst)
        leaf_sw = self.sw_index[self.leaves]
        hops = leaf_hops(indptr_from_lengths(np.bincount(dst, minlength=S)), src[by_dst],
                         leaf_sw[rep], S)
        # dist[i, s] = hops from switch s to leaf i (inf: unreachable); a twin is as far
        # as its class's first leaf from every switch but the two of them.
        dist = hops[cls].astype(np.float64)
        dist[dist < 0] = np.inf
        dist[np.arange(len(cls)), leaf_sw] = 0
        twin = np.flatnonzero(rep[cls] != np.arange(len(cls)))
        dist[twin, leaf_sw[rep[cls[twin]]]] = 2
        self.dist = dist
        self._hops, self._cls, self._rep = hops, cls, rep  # what dist is made of
        self._build_groups(hops, src, dst, cls, rep)

    def dist_changes(self, other: Routing) -> tuple[np.ndarray, np.ndarray]:
        """``np.nonzero(self.dist != other.dist)`` (leaf indices, switch indices; same
        fabric), from the per-class hop tables: ``dist[i, s]`` is row ``cls[i]`` of the
        small hop table except at the leaf itself (0) and, for a twin, at its class's
        first leaf (2), so rows are compared once per (class here, class there) pair
        and those two places per leaf directly. At 131,072 GPUs this reads ~0.3 M hop
        counts where the float tables hold 16.7 M entries each."""
        S, NL = len(self.switches), len(self.leaves)
        C2 = len(other._rep)
        key, inv = np.unique(self._cls * C2 + other._cls, return_inverse=True)
        k, s = np.nonzero(self._hops[key // C2] != other._hops[key % C2])
        # every leaf of a class pair whose rows differ, at those switches
        ptr = indptr_from_lengths(np.bincount(inv.ravel(), minlength=len(key)))
        n = ptr[k + 1] - ptr[k]
        li = np.argsort(inv.ravel(), kind="stable")[gather(ptr[k], n)]
        si = np.repeat(s, n)
        leaf_sw = self.sw_index[self.leaves]
        own = np.concatenate([leaf_sw, leaf_sw[self._rep[self._cls]],
                              leaf_sw[other._rep[other._cls]]]).reshape(3, NL)
        row = (si != own[:, li]).all(axis=0)  # places the class row gives
        at = np.tile(np.arange(NL), 3)
        moved = self.dist[at, own.ravel()] != other.dist[at, own.ravel()]
        pairs = np.unique(np.concatenate([li[row] * S + si[row],
                                          at[moved] * S + own.ravel()[moved]]))
        return pairs // S, pairs % S

    def _twin_classes(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """Leaves cabled (both ways) to the same set of switches, e.g. the leaves of a
        fat-tree pod: ``cls`` per leaf index and ``rep``, each class's first leaf index.

        Twins ``i`` and ``r`` are equally far from every other switch (a path to ``i``
        ends with a hop from one of those switches, as one to ``r`` does), so routing is
        computed toward one leaf of each class; toward a twin every other switch uses the
        group it has toward ``r``, except the twin's neighbours (down to the twin), the
        twin (no hop) and ``r`` (all of its uplinks)."""
        S, NL = len(self.switches), len(self.leaves)
        is_leaf = np.zeros(S, bool)
        is_leaf[self.sw_index[self.leaves]] = True

        def neighbours(at, other):
            key = np.unique(at[is_leaf[at]].astype(np.int64) * S + other[is_leaf[at]])
            bounds = np.searchsorted(key // S, self.sw_index[self.leaves], side="right")
            return np.split(key % S, bounds[:-1])

        seen: dict[bytes, int] = {}
        cls = np.empty(NL, dtype=np.int64)
        rep = []
        for i, (a, b) in enumerate(zip(neighbours(dst, src), neighbours(src, dst),
                                       strict=True)):
            twin_key = a.tobytes() if len(a) and np.array_equal(a, b) else None
            c = seen.get(twin_key) if twin_key is not None else None
            if c is None:
                c = len(rep)
                rep.append(i)
                if twin_key is not None:
                    seen[twin_key] = c
            cls[i] = c
        return cls, np.array(rep, dtype=np.int64)

    def _build_groups(self, hops, src, dst, cls, rep):
        """ECMP groups: a link s->t is a next hop toward leaf i iff t is one hop closer to i.
        ``grp_id[s * NL + i]`` is the group of switch index ``s`` toward leaf index ``i``,
        ``grp_indptr``/``grp_links`` the members of every group (ordered by link id).

        Toward the first leaf of each twin class (``hops`` rows) equal groups are stored
        once, told apart by two 64-bit sums of random link weights (both colliding: ~2**-128
        per pair) and read from one (switch, leaf) that has them; the twins' own groups
        (:meth:`_twin_classes`) are added after them."""
        S, NL, C = len(self.switches), len(self.leaves), len(rep)
        by_src = np.argsort(src, kind="stable")  # by switch, then link id
        links, to = self.fab_links[by_src], dst[by_src]
        out_ptr = indptr_from_lengths(np.bincount(src, minlength=S))
        w = np.random.default_rng(0x1CE).integers(0, 2**64 - 1, size=(2, len(links)),
                                                   dtype=np.uint64, endpoint=True)
        sig1, sig2 = group_signatures(hops, out_ptr, to, w[0], w[1])
        _, first, gid = np.unique(sig1, return_index=True, return_inverse=True)
        if np.any(sig2[first][gid.ravel()] != sig2):
            raise TopologyError("two ECMP groups share a 64-bit signature: rebuild with "
                                "other weights")
        s_u, c_u = first // C, first % C
        cnt = out_ptr[s_u + 1] - out_ptr[s_u]
        row = np.repeat(np.arange(len(first)), cnt)
        k = np.arange(int(cnt.sum())) + np.repeat(out_ptr[s_u] - np.cumsum(cnt) + cnt, cnt)
        h_s = hops[c_u[row], s_u[row]]
        keep = (h_s > 0) & (hops[c_u[row], to[k]] == h_s - 1)
        grp = gid.reshape(S, C)[:, cls]
        sizes = [np.bincount(row[keep], minlength=len(first))]
        members = [links[k[keep]]]
        twin = np.flatnonzero(rep[cls] != np.arange(NL))
        if len(twin):
            leaf_sw = self.sw_index[self.leaves]
            empty = grp[leaf_sw[rep[0]], rep[0]]
            n = len(first)
            # the twin's neighbours: the cables down to it, one group per (switch, twin)
            to_leaf = np.full(S, -1, dtype=np.int64)
            to_leaf[leaf_sw[twin]] = twin
            down = np.flatnonzero(to_leaf[to] >= 0)
            pair, cnt_d = np.unique(src[by_src][down] * NL + to_leaf[to[down]],
                                    return_counts=True)
            grp[pair // NL, pair % NL] = n + np.arange(len(pair))
            members.append(links[down[np.argsort(src[by_src][down] * NL +
                                                 to_leaf[to[down]], kind="stable")]])
            sizes.append(cnt_d)
            n += len(pair)
            # the class's first leaf: every uplink; the twin itself: no hop
            r = np.unique(rep[cls[twin]])
            first_of = np.full(NL, -1, dtype=np.int64)
            first_of[r] = n + np.arange(len(r))
            grp[leaf_sw[rep[cls[twin]]], twin] = first_of[rep[cls[twin]]]
            members.append(links[np.concatenate([np.arange(out_ptr[x], out_ptr[x + 1])
                                                 for x in leaf_sw[r]])])
            sizes.append(out_ptr[leaf_sw[r] + 1] - out_ptr[leaf_sw[r]])
            grp[leaf_sw[twin], twin] = empty
        self.grp_id = grp.reshape(-1).astype(np.int64)
        self.grp_indptr = indptr_from_lengths(np.concatenate(sizes))
        self.grp_links = np.concatenate(members).astype(np.int64)

    def group_ids(self, switches, dst_leaves) -> np.ndarray:
        """Ids of the ECMP groups at ``switches`` toward ``dst_leaves`` (equal groups, e.g.
        a leaf's uplinks toward every remote leaf, share one id)."""
        return self.grp_id[self.sw_index[switches] * len(self.leaves)
                           + self.leaf_index[dst_leaves]]

    # -- groups ----------------------------------------------------------------------------
    def group(self, switch: int, dst_leaf: int) -> np.ndarray:
        """Next-hop link ids (ECMP members, ordered) at ``switch`` toward ``dst_leaf``."""
        g = self.group_ids(switch, dst_leaf)
        return self.grp_links[self.grp_indptr[g]:self.grp_indptr[g + 1]]

    def group_sizes(self, switches: np.ndarray, dst_leaves: np.ndarray) -> np.ndarray:
        g = self.group_ids(switches, dst_leaves)
        return self.grp_indptr[g + 1] - self.grp_indptr[g]

    def group_member(self, switches, dst_leaves, member) -> np.ndarray:
        g = self.group_ids(switches, dst_leaves)
        return self.grp_links[self.grp_indptr[g] + member]

    # -- fabric paths (NIC to NIC) ---------------------------------------------------------
    def nic_uplink(self, nic: np.ndarray) -> np.ndarray:
        return self.fabric.nic_links[0][np.atleast_1d(np.asarray(nic, dtype=np.int64))]

    def nic_downlink(self, nic: np.ndarray) -> np.ndarray:
        return self.fabric.nic_links[1][np.atleast_1d(np.asarray(nic, dtype=np.int64))]

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
            at, to = cur[active], dst_leaf[active]
            g = self.group_ids(at, to)  # once per step: the table is large, gathers cost
            first = self.grp_indptr[g]
            sizes = self.grp_indptr[g + 1] - first
            if np.any(sizes == 0):
                a = active[np.flatnonzero(sizes == 0)[0]]
                raise RoutingError(f"no route from {f.node_names[cur[a]]} to "
                                   f"{f.node_names[dst_leaf[a]]} (failed links?)")
            member = np.asarray(choose(len(steps), active, at, to, sizes))
            if np.any((member < 0) | (member >= sizes)):
                raise RoutingError("chooser returned a member outside the ECMP group")
            link = self.grp_links[first + member]
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
