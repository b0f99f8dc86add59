"""A picture of a fabric: switch tiers and servers, cabling aggregated per switch pair.

Servers are boxes coloured by pool and labelled with their NICs (count x speed); a line
between two nodes stands for all parallel links between them, its width growing with their
total capacity. Agg backend, never ``plt.show()``.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icefabric.topology.model import CORE, LEAF, LINK_FABRIC, LINK_HOST, SPINE, Fabric  # noqa: E402

_TIER_Y = {LEAF: 1.0, SPINE: 2.0, CORE: 3.0}
_TIER_NAME = {LEAF: "leaves", SPINE: "spines / aggregation", CORE: "cores"}
_POOL_COLORS = plt.get_cmap("tab10").colors


def _spread(n: int, width: float) -> np.ndarray:
    return np.linspace(0, width, n) if n > 1 else np.array([width / 2])


def _positions(fabric: Fabric) -> tuple[dict[int, tuple[float, float]], dict[int, tuple]]:
    """x, y per switch node and per server index (servers on y = 0, in leaf order)."""
    leaf_of: dict[int, list[int]] = defaultdict(list)
    for i, srv in enumerate(fabric.servers):
        leaves = {int(fabric.nic_leaf[n]) for n in srv.nics}
        leaf_of[min(leaves)].append(i)
    width = float(max(len(fabric.servers), 4))
    pos: dict[int, tuple[float, float]] = {}
    for kind, y in _TIER_Y.items():
        nodes = fabric.nodes_of_kind(kind)
        if kind == LEAF:  # keep servers under their leaf
            nodes = sorted(nodes.tolist(), key=lambda n: (min(leaf_of.get(n, [10**9])), n))
        for x, n in zip(_spread(len(nodes), width), nodes):
            pos[int(n)] = (float(x), y)
    order = [i for leaf in sorted(leaf_of, key=lambda n: pos[n][0]) for i in leaf_of[leaf]]
    srv_pos = {i: (float(x), 0.0) for i, x in zip(order, _spread(len(order), width))}
    return pos, srv_pos


def _edges(fabric: Fabric) -> Counter:
    """Total capacity (bits/s) per unordered pair of endpoints: switch pairs, and
    (server index, leaf) for host cabling; one direction counted."""
    server_of = fabric.node_server
    cap: Counter = Counter()
    for l in np.flatnonzero(fabric.link_kind == LINK_FABRIC).tolist():
        a, b = int(fabric.link_src[l]), int(fabric.link_dst[l])
        if a < b:
            cap[("sw", a, b)] += float(fabric.link_capacity_bps[l])
    host = np.flatnonzero((fabric.link_kind == LINK_HOST)
                          & fabric.is_switch[fabric.link_dst]).tolist()
    for l in host:
        s, leaf = int(server_of[fabric.link_src[l]]), int(fabric.link_dst[l])
        cap[("srv", s, leaf)] += float(fabric.link_capacity_bps[l])
    return cap


#: Switch squares (marker area, points^2) and their labels (points): a label fits inside its
#: square at a size a printed page or a laptop screen shows legibly.
SWITCH_MARKER, SWITCH_FONT = 480, 7.5


def switch_label(name: str) -> str:
    """A switch's short label (``spine12`` -> ``sp12``, ``leaf3`` -> ``lf3``)."""
    return name.replace("spine", "sp").replace("leaf", "lf")


def plot_fabric(fabric: Fabric, ax=None):
    """Draw ``fabric`` (leaf-spine, rail-optimized or fat-tree) and return the Figure."""
    pos, srv_pos = _positions(fabric)
    n = max(len(fabric.servers), 4)
    fig = ax.figure if ax is not None else plt.figure(figsize=(min(max(7, 0.9 * n), 18), 4.6))
    ax = ax or fig.add_subplot()
    edges = _edges(fabric)
    top = max(edges.values(), default=1.0)
    for (kind, a, b), bps in edges.items():
        (x0, y0), (x1, y1) = (pos[a], pos[b]) if kind == "sw" else (srv_pos[a], pos[b])
        ax.plot([x0, x1], [y0 + 0.12, y1 - 0.1], color="0.55" if kind == "sw" else "0.75",
                lw=0.4 + 2.6 * bps / top, zorder=1)
    pools = list(dict.fromkeys(s.pool for s in fabric.servers))
    for i, srv in enumerate(fabric.servers):
        x, y = srv_pos[i]
        color = _POOL_COLORS[pools.index(srv.pool) % len(_POOL_COLORS)]
        p = srv.profile
        ax.add_patch(plt.Rectangle((x - 0.4, y - 0.3), 0.8, 0.42, color=color, alpha=0.85,
                                   zorder=2))
        ax.text(x, y - 0.09, f"{srv.name}\n{p.n_nics}×{p.nic_bps / 1e9:g}G", ha="center",
                va="center", fontsize=6.5 if n <= 16 else 5, color="white", zorder=3)
    names = fabric.node_names
    for node, (x, y) in pos.items():
        ax.scatter([x], [y], s=SWITCH_MARKER, marker="s", color="#34495e", zorder=2)
        if len(pos) <= 48:
            ax.text(x, y, switch_label(names[node]), ha="center", va="center",
                    fontsize=SWITCH_FONT, fontweight="bold", color="white", zorder=3)
    for kind, y in _TIER_Y.items():
        if len(fabric.nodes_of_kind(kind)):
            ax.text(-0.8, y, _TIER_NAME[kind], ha="right", va="center", fontsize=8)
    ax.text(-0.8, 0, "servers", ha="right", va="center", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=_POOL_COLORS[i % len(_POOL_COLORS)])
               for i in range(len(pools))]
    ax.legend(handles, [f"pool {p}" for p in pools], loc="upper right", fontsize=7,
              frameon=False)
    ax.set_xlim(-3.2, max(x for x, _ in list(pos.values()) + list(srv_pos.values())) + 1)
    ax.set_ylim(-0.6, max(y for _, y in pos.values()) + 0.6)
    ax.axis("off")
    meta = fabric.meta
    ax.set_title(f"{fabric.name}: {meta.get('builder', '')}, oversubscription "
                 f"{meta.get('oversub', 1):g}:1 (line width ~ total link capacity)", fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["plot_fabric"]
