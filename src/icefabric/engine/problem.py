"""The neutral input of every engine: links, flows, routes, dependencies.

A :class:`SimProblem` is what a policy's plan turns a (fabric, workload) pair into. Engines
(flow-level max-min, fluid with queues/DCQCN/PFC) read only this, so they can also be fed
directly from other inputs (the packet-level validation scenarios, a replayed trace).

Model
-----
* **Link** ``l``: a directed transmit queue with ``capacity_bps`` and one-way ``delay_ns``
  (a duplex cable is two links).
* **Flow** ``f``: one rate variable ``r_f`` (bits/s of *payload progress*). It has
  ``size_bytes`` to move, may start at ``start_ns`` once all its ``deps`` have completed,
  and completes ``latency_ns`` after its last byte left (propagation / ACK of the last byte).
  A pipelined ring channel is one *coupled* flow: all its hops share ``r_f``, so the ring
  runs at its slowest hop, as on hardware.
* **Route** ``k``: an ordered list of links that carries ``weight_k * r_f`` of flow
  ``flow_k``. A plain transfer on one QP has one route of weight 1; a transfer split over
  ``q`` QPs has ``q`` routes of weight ``1/q``; a coupled ring channel has one route per
  hop (per QP of that hop); per-packet spraying gives one route per path. Routes carry the
  QP id (``-1`` for intra-server hops without a QP) so congestion-control engines can keep
  per-QP state.

The link-by-flow incidence ``A[l, f] = sum_k weight_k * [l in route_k]`` is what a max-min
engine needs; the ordered routes are what a queueing engine needs.

* **Shared routes** (optional, :class:`SharedRoutes`; the flow engine only): a route of a
  *group* of flows carries ``weight`` times the sum of their rates — the NVLink legs every
  flow of a PXN AllToAll from one server on one rail crosses, built once per group, not
  per flow. They add ``weight`` to ``A[l, f]`` of every flow of the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from icefabric.csr import csr_from_lists, indptr_from_lengths
from icefabric.errors import IceFabricError


class EngineError(IceFabricError, RuntimeError):
    """Base of the engine layer's errors: a simulation that cannot proceed (deadlock,
    routes through failed links that are never rerouted, a step limit) or an input it cannot
    run; the message carries the simulated time and an example flow."""


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective call to report on: which flows make it up and how to score it.

    ``kind`` is the nccl-tests name (``all_reduce``, ``all_gather``, ``reduce_scatter``,
    ``alltoall``, ``broadcast``, ``reduce``, ``sendrecv``); ``size_bytes`` is the size
    nccl-tests prints in its ``size`` column; ``nranks`` the communicator size.
    """

    name: str
    job: str
    kind: str
    size_bytes: int
    nranks: int
    flows: np.ndarray  # int64 flow ids
    algorithm: str = ""


LINK_INTRA = 0
"""Server-internal link (NVLink/HCCS/PCIe): no switch queue, no PFC, no ECN."""
LINK_HOST = 1
"""NIC <-> switch port."""
LINK_FABRIC = 2
"""Switch <-> switch."""


@dataclass(frozen=True)
class LinkFailure:
    """Links that go down at ``t_ns``, and where the affected routes go.

    ``reroute_route[i]`` moves to the ordered links
    ``reroute_links[reroute_indptr[i]:reroute_indptr[i+1]]`` at ``t_ns + reroute_delay_ns``
    (the detection/convergence time of whoever reroutes: switch ECMP rehash, ICE agent
    backup port, controller re-plan). Routes through a down link carry nothing meanwhile.
    An empty ``links`` with reroutes is a pure re-route (e.g. a plan change).
    ``flow_rate_cap_bps`` (F,), when given, replaces every flow's pacer cap at the same
    moment: the rates of a re-plan (ICE re-computes its pacing with its paths).
    """

    t_ns: int
    links: np.ndarray
    reroute_route: np.ndarray
    reroute_indptr: np.ndarray
    reroute_links: np.ndarray
    reroute_delay_ns: int = 0
    up: bool = False  # True: the links come back (recovery) instead of failing
    flow_rate_cap_bps: np.ndarray | None = None

    def new_route(self, i: int) -> np.ndarray:
        return self.reroute_links[self.reroute_indptr[i]:self.reroute_indptr[i + 1]]


@dataclass(frozen=True)
class SharedRoutes:
    """Routes shared by groups of flows: route ``k`` (links ``links[indptr[k]:indptr[k+1]]``)
    carries ``weight[k]`` times the summed rate of the flows of group ``group[k]``
    (``group_flows[group_indptr[g]:group_indptr[g+1]]``; a flow listed twice counts twice).
    Per flow it is what a route of its own with that weight would carry."""

    group_indptr: np.ndarray  # [G+1]
    group_flows: np.ndarray
    group: np.ndarray  # [KS] int64
    weight: np.ndarray  # [KS] float64
    indptr: np.ndarray  # [KS+1]
    links: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.group_indptr) - 1

    def incidence(self, n_links: int, n_flows: int) -> sp.csr_matrix:
        """What the shared routes add to ``A[l, f]``: the groups' incidence times their
        membership (each a single product, 1.0 times a group's summed weight)."""
        per_group = route_incidence(self.indptr, self.links, self.group, self.weight, n_links,
                                    self.n_groups)
        member = sp.csr_matrix((np.ones(len(self.group_flows)), self.group_flows,
                                self.group_indptr), shape=(self.n_groups, n_flows))
        return per_group @ member

    def flows_touching(self, mask: np.ndarray, n_flows: int) -> np.ndarray:
        """Per flow: whether one of its shared routes crosses a link where ``mask``."""
        hit = np.zeros(self.n_groups, dtype=bool)
        hit[self.group[routes_touching(self.indptr, self.links, mask)]] = True
        owner = np.repeat(np.arange(self.n_groups), np.diff(self.group_indptr))
        out = np.zeros(n_flows, dtype=bool)
        out[self.group_flows[hit[owner]]] = True
        return out

    def validate(self, n_links: int, n_flows: int) -> None:
        G, K = self.n_groups, len(self.group)
        if len(self.weight) != K or len(self.indptr) != K + 1:
            raise ValueError("shared routes: weight/indptr do not match the routes")
        for name, arr, hi in (("group", self.group, G), ("group_flows", self.group_flows,
                                                         n_flows), ("links", self.links,
                                                                    n_links)):
            if len(arr) and (arr.min() < 0 or arr.max() >= hi):
                raise ValueError(f"shared routes: {name} out of range")


@dataclass(frozen=True)
class SimProblem:
    """Arrays for one simulation. Build with :func:`build_problem`; never mutate."""

    link_capacity_bps: np.ndarray  # [L] float64
    link_delay_ns: np.ndarray  # [L] int64
    link_src: np.ndarray  # [L] int64 node ids (for PFC upstream relations)
    link_dst: np.ndarray  # [L] int64
    flow_size_bytes: np.ndarray  # [F] float64
    flow_start_ns: np.ndarray  # [F] int64 earliest start
    flow_latency_ns: np.ndarray  # [F] int64 added after the last byte
    flow_rate_cap_bps: np.ndarray  # [F] float64, inf = no cap (pacer)
    dep_indptr: np.ndarray  # [F+1] CSR: flow f waits for dep_indices[dep_indptr[f]:dep_indptr[f+1]]
    dep_indices: np.ndarray
    route_flow: np.ndarray  # [K] int64
    route_weight: np.ndarray  # [K] float64
    route_qp: np.ndarray  # [K] int64, -1 = no QP (intra-server)
    route_indptr: np.ndarray  # [K+1] CSR of ordered link ids
    route_links: np.ndarray
    collectives: tuple[CollectiveSpec, ...] = ()
    link_kind: np.ndarray | None = None  # [L] LINK_INTRA / LINK_HOST / LINK_FABRIC
    node_is_switch: np.ndarray | None = None  # [N] bool, indexed by link_src/link_dst
    failures: tuple[LinkFailure, ...] = ()
    link_names: tuple[str, ...] = ()
    flow_names: Sequence[str] = ()
    meta: dict = field(default_factory=dict)
    shared: SharedRoutes | None = None  # the flow engine's only (others refuse them)

    @property
    def n_links(self) -> int:
        return len(self.link_capacity_bps)

    @property
    def n_flows(self) -> int:
        return len(self.flow_size_bytes)

    @property
    def n_routes(self) -> int:
        return len(self.route_flow)

    def route(self, k: int) -> np.ndarray:
        return self.route_links[self.route_indptr[k]:self.route_indptr[k + 1]]

    def deps(self, f: int) -> np.ndarray:
        return self.dep_indices[self.dep_indptr[f]:self.dep_indptr[f + 1]]

    def dependents(self) -> tuple[np.ndarray, np.ndarray]:
        """The reverse of the dependencies as a CSR ``(indptr, flows)``: the flows waiting
        for flow ``f`` are ``flows[indptr[f]:indptr[f+1]]``, in ascending order."""
        F = self.n_flows
        order = np.argsort(self.dep_indices, kind="stable")
        flows = np.repeat(np.arange(F, dtype=np.int64), np.diff(self.dep_indptr))[order]
        return indptr_from_lengths(np.bincount(self.dep_indices, minlength=F)), flows

    def incidence(self) -> sp.csr_matrix:
        """``A[l, f]``: fraction of flow ``f``'s rate carried by link ``l`` (summed over its
        routes and shared routes; a link used twice by one route counts twice). Built once
        per problem; do not modify it."""
        return self._incidence

    @cached_property
    def _incidence(self) -> sp.csr_matrix:
        return self.incidence_of(self.route_indptr, self.route_links)

    def incidence_of(self, indptr: np.ndarray, links: np.ndarray) -> sp.csr_matrix:
        """:meth:`incidence` with the routes' links ``(indptr, links)`` (after a
        re-route); shared routes are never re-routed."""
        A = route_incidence(indptr, links, self.route_flow, self.route_weight, self.n_links,
                            self.n_flows)
        if self.shared is None:
            return A
        A = A + self.shared.incidence(self.n_links, self.n_flows)
        A.sum_duplicates()
        return A

    def flows_touching(self, blocked_routes: np.ndarray, down: np.ndarray) -> np.ndarray:
        """Per flow: whether a route of it is ``blocked`` or a shared route of it
        crosses a ``down`` link."""
        out = np.bincount(self.route_flow[blocked_routes], minlength=self.n_flows) > 0
        if self.shared is not None:
            out |= self.shared.flows_touching(down, self.n_flows)
        return out

    def route_delay_ns(self) -> np.ndarray:
        """One-way propagation delay of every route."""
        d = self.link_delay_ns[self.route_links]
        return np.add.reduceat(d, self.route_indptr[:-1]) if len(d) else np.zeros(0, np.int64)

    def require_own_routes(self, engine: str) -> None:
        """Raise :class:`EngineError` if the problem has shared routes: ``engine`` reads
        every flow's own routes (build the problem without ``shared``)."""
        if self.shared is not None:
            raise EngineError(f"the {engine} engine needs a route per flow; this problem has "
                              f"shared routes (build it without shared=True)")

    def validate(self) -> None:
        """Raise ValueError on inconsistent arrays (cheap; called by engines)."""
        L, F, K = self.n_links, self.n_flows, self.n_routes
        for name, arr, n in (("link_delay_ns", self.link_delay_ns, L),
                             ("flow_start_ns", self.flow_start_ns, F),
                             ("flow_latency_ns", self.flow_latency_ns, F),
                             ("flow_rate_cap_bps", self.flow_rate_cap_bps, F),
                             ("route_weight", self.route_weight, K),
                             ("route_qp", self.route_qp, K)):
            if len(arr) != n:
                raise ValueError(f"{name} has {len(arr)} entries, expected {n}")
        if len(self.dep_indptr) != F + 1 or len(self.route_indptr) != K + 1:
            raise ValueError("CSR index pointers have the wrong length")
        if np.any(self.link_capacity_bps <= 0):
            raise ValueError("every link needs a positive capacity")
        if np.any(self.flow_size_bytes < 0):
            raise ValueError("flow sizes must be non-negative")
        if K and (self.route_links.min() < 0 or self.route_links.max() >= L):
            raise ValueError("route references a link that does not exist")
        if K and (self.route_flow.min() < 0 or self.route_flow.max() >= F):
            raise ValueError("route references a flow that does not exist")
        if len(self.dep_indices) and (self.dep_indices.min() < 0 or self.dep_indices.max() >= F):
            raise ValueError("dependency references a flow that does not exist")
        if self.shared is not None:
            self.shared.validate(L, F)
        counts = np.bincount(self.route_flow, minlength=F)
        if np.any((counts == 0) & (self.flow_size_bytes > 0)):
            bad = int(np.flatnonzero((counts == 0) & (self.flow_size_bytes > 0))[0])
            raise ValueError(f"flow {bad} carries bytes but has no route")


def route_incidence(indptr: np.ndarray, links: np.ndarray, route_flow: np.ndarray,
                    route_weight: np.ndarray, n_links: int, n_flows: int) -> sp.csr_matrix:
    """Link-by-flow incidence of routes given as CSR (see :meth:`SimProblem.incidence`)."""
    lengths = np.diff(indptr)
    cols = np.repeat(route_flow, lengths)
    vals = np.repeat(route_weight, lengths)
    a = sp.coo_matrix((vals, (links, cols)), shape=(n_links, n_flows))
    return a.tocsr()  # duplicates are summed


def routes_touching(indptr: np.ndarray, links: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For every route of a CSR: whether it crosses a link where ``mask`` is True."""
    hit = mask[links].astype(np.int64)
    route = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return np.bincount(route, weights=hit, minlength=len(indptr) - 1) > 0


def build_problem(*, link_capacity_bps, link_delay_ns, flow_size_bytes, routes,
                  route_flow, route_weight=None, route_qp=None, flow_start_ns=None,
                  flow_latency_ns=None, flow_rate_cap_bps=None, deps=None, link_src=None,
                  link_dst=None, collectives=(), link_names=(), flow_names=(),
                  link_kind=None, node_is_switch=None, failures=(),
                  meta=None) -> SimProblem:
    """Assemble and validate a :class:`SimProblem` from Python lists or arrays.

    ``routes`` is a list of ordered link-id lists, ``deps`` a list (one per flow) of flow-id
    lists. Omitted per-flow arrays default to: start 0, latency 0, no rate cap.
    """
    cap = np.asarray(link_capacity_bps, dtype=np.float64)
    L = len(cap)
    size = np.asarray(flow_size_bytes, dtype=np.float64)
    F = len(size)
    K = len(routes)
    r_indptr, r_links = csr_from_lists(routes)
    d_indptr, d_indices = csr_from_lists(deps if deps is not None else [[] for _ in range(F)])
    prob = SimProblem(
        link_capacity_bps=cap,
        link_delay_ns=np.asarray(link_delay_ns, dtype=np.int64).reshape(L),
        link_src=np.asarray(link_src if link_src is not None else np.arange(L), dtype=np.int64),
        link_dst=np.asarray(link_dst if link_dst is not None else np.arange(L), dtype=np.int64),
        flow_size_bytes=size,
        flow_start_ns=np.asarray(flow_start_ns if flow_start_ns is not None else np.zeros(F),
                                 dtype=np.int64),
        flow_latency_ns=np.asarray(flow_latency_ns if flow_latency_ns is not None
                                   else np.zeros(F), dtype=np.int64),
        flow_rate_cap_bps=np.asarray(flow_rate_cap_bps if flow_rate_cap_bps is not None
                                     else np.full(F, np.inf), dtype=np.float64),
        dep_indptr=d_indptr,
        dep_indices=d_indices,
        route_flow=np.asarray(route_flow, dtype=np.int64).reshape(K),
        route_weight=np.asarray(route_weight if route_weight is not None else np.ones(K),
                                dtype=np.float64).reshape(K),
        route_qp=np.asarray(route_qp if route_qp is not None else np.full(K, -1),
                            dtype=np.int64).reshape(K),
        route_indptr=r_indptr,
        route_links=r_links,
        collectives=tuple(collectives),
        link_kind=(np.asarray(link_kind, dtype=np.int8) if link_kind is not None
                   else np.full(L, LINK_FABRIC, dtype=np.int8)),
        node_is_switch=(np.asarray(node_is_switch, dtype=bool) if node_is_switch is not None
                        else None),
        failures=tuple(failures),
        link_names=tuple(link_names) or tuple(f"link{i}" for i in range(L)),
        flow_names=tuple(flow_names),
        meta=dict(meta or {}),
    )
    prob.validate()
    return prob
