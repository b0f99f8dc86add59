"""NCCL topology dump XML (``NCCL_TOPO_DUMP_FILE``) -> the server's internal layout.

Format source: NCCL ``src/graph/xml.cc`` / ``xml.h`` (``NCCL_TOPO_XML_VERSION 1``) and the
readers in ``src/graph/topo.cc``: ``<system version>`` -> ``<cpu numaid affinity arch vendor
familyid modelid host_hash>`` -> ``<pci busid class vendor device link_speed link_width>``
(nested for PCIe switches) -> ``<gpu dev sm rank gdr>`` with ``<nvlink target count tclass>``
children, or ``<nic>`` -> ``<net name dev speed port latency guid maxconn gdr>``.
Real dumps are often pasted truncated (NVIDIA/nccl-tests#256), so the reader is a tolerant tag
scanner, not a strict XML parser: it keeps every complete tag it sees and reports whether the
document was well formed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icefabric.collect._text import read_text, to_text, warn
from icefabric.schemas import ParseWarning

_TAG = re.compile(r"<(?P<close>/?)(?P<name>[A-Za-z_][\w.-]*)"
                  r"(?P<attrs>(?:\s+[\w:.-]+\s*=\s*\"[^\"<>]*\")*)"
                  r"\s*(?P<selfclose>/?)>")
_ATTR = re.compile(r"([\w:.-]+)\s*=\s*\"([^\"]*)\"")
#: Deepest element nesting read. A dump nests about 8 deep (system, cpu, a few PCIe switch
#: levels, gpu, nvlink: src/graph/xml.cc); every lookup that walks up the tree is bounded by
#: this, where a 100,000-deep garbage file once made them quadratic (a hang).
MAX_XML_DEPTH = 64


@dataclass
class XmlNode:
    """One element of the dump: tag, attributes (strings, as written), children, parent."""

    tag: str
    attrs: dict[str, str]
    children: list[XmlNode] = field(default_factory=list)
    parent: XmlNode | None = field(default=None, repr=False)
    line: int = 0

    def ancestors(self) -> list[XmlNode]:
        out, cur = [], self.parent
        while cur is not None:
            out.append(cur)
            cur = cur.parent
        return out

    def iter(self, tag: str | None = None):
        """Elements in document order (iterative: garbled input can nest thousands deep)."""
        stack = [self]
        while stack:
            node = stack.pop()
            if tag is None or node.tag == tag:
                yield node
            stack.extend(reversed(node.children))


@dataclass
class NcclTopology:
    """Parsed topology dump.

    ``gpus`` and ``nics`` are flat lists with their PCI bus ids; ``pci_links`` gives each PCI
    device's link speed/width and its upstream PCI node, so PCIe switches and NUMA placement
    can be rebuilt; ``nvlinks`` lists (gpu busid, target busid, count).
    """

    version: str | None = None
    root: XmlNode | None = None
    cpus: list[dict[str, str]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    nics: list[dict[str, Any]] = field(default_factory=list)
    pci_links: list[dict[str, Any]] = field(default_factory=list)
    nvlinks: list[dict[str, Any]] = field(default_factory=list)
    well_formed: bool = False
    warnings: list[ParseWarning] = field(default_factory=list)

    def usable(self) -> bool:
        return bool(self.gpus or self.nics or self.cpus)

    def common_pci_ancestor(self, gpu_busid: str, nic_busid: str) -> str | None:
        """Bus id of the nearest PCI node (switch) above both devices, None if only the CPU."""
        if self.root is None:
            return None
        nodes = {n.attrs.get("busid"): n for n in self.root.iter("pci")}
        a, b = nodes.get(gpu_busid), nodes.get(nic_busid)
        if a is None or b is None:
            return None
        up_b = {id(x) for x in b.ancestors()}
        for anc in a.ancestors():
            if id(anc) in up_b and anc.tag == "pci":
                return anc.attrs.get("busid")
        return None


    def gpu_nic_affinity(self) -> dict[str, str | None]:
        """For each GPU (by PCI bus id) the NIC name closest to it in the PCI tree.

        Distance counts PCI hops up to the nearest common ancestor (a shared PCIe switch
        beats a shared CPU); ties go to the NIC listed first, as NCCL's rail assignment does.
        This is the GPU -> NIC rail map a simulator needs for a real server.
        """
        if self.root is None:
            return {}
        by_bus = {n.attrs.get("busid"): n for n in self.root.iter("pci")}
        nets = [(n.attrs.get("name"), next((a for a in n.ancestors() if a.tag == "pci"), None))
                for n in self.root.iter("net")]
        out: dict[str, str | None] = {}
        for g in self.gpus:
            gnode = by_bus.get(g["pci_busid"])
            best, best_d = None, None
            if gnode is not None:
                up = gnode.ancestors()
                depth = {id(a): i for i, a in enumerate(up)}
                for name, nnode in nets:
                    if nnode is None:
                        continue
                    for j, a in enumerate([nnode, *nnode.ancestors()]):
                        if id(a) in depth:
                            d = depth[id(a)] + j
                            if best_d is None or d < best_d:
                                best, best_d = name, d
                            break
            out[g["pci_busid"]] = best
        return out


def _scan(text: str, source: str | None, warnings: list[ParseWarning]) -> tuple[XmlNode, bool]:
    """Tolerant tag scanner: the element tree of every complete tag, and well-formedness."""
    try:
        ET.fromstring(text)
        well_formed = True
    except Exception:  # noqa: BLE001 - any expat complaint just means "not well formed"
        well_formed = False
    root = XmlNode("#document", {})
    stack = [root]
    line_starts = [m.start() for m in re.finditer(r"^", text, flags=re.M)]

    def line_of(pos: int) -> int:
        lo, hi = 0, len(line_starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if line_starts[mid] <= pos:
                lo = mid + 1
            else:
                hi = mid
        return lo

    for m in _TAG.finditer(text):
        name = m["name"]
        if m["close"]:
            # Close up to the matching open tag; a stray close tag is ignored.
            for i in range(len(stack) - 1, 0, -1):
                if stack[i].tag == name:
                    del stack[i:]
                    break
            else:
                warnings.append(warn(f"stray </{name}>", line_of(m.start()), source))
            continue
        node = XmlNode(name, dict(_ATTR.findall(m["attrs"] or "")), parent=stack[-1],
                       line=line_of(m.start()))
        stack[-1].children.append(node)
        if not m["selfclose"]:
            if len(stack) > MAX_XML_DEPTH:
                warnings.append(warn(f"elements nested deeper than {MAX_XML_DEPTH} (a "
                                     "topology dump nests about 8); the rest is not read",
                                     line_of(m.start()), source))
                return root, False
            stack.append(node)
    if len(stack) > 1:
        warnings.append(warn(f"document ends inside <{stack[-1].tag}> (truncated); "
                             f"read {sum(1 for _ in root.iter()) - 1} elements",
                             line_of(len(text)), source))
    return root, well_formed


def is_topology_xml(text: str) -> bool:
    """True for an NCCL topology dump (starts with an XML tag such as ``<system``)."""
    head = text.lstrip()[:200]
    return head.startswith("<?xml") or head.startswith("<system")


def parse_nccl_topo(text: str | bytes, source: str | None = None) -> NcclTopology:
    """Read an NCCL topology dump (possibly truncated).

    Parameters
    ----------
    text : str or bytes
        XML text as written by ``NCCL_TOPO_DUMP_FILE``.
    source : str, optional
        Name used in warnings.

    Returns
    -------
    NcclTopology
        GPUs, NICs (with ``speed`` in Mb/s as written), PCI links and NVLinks. Unclosed
        elements are closed at the end of the text and reported as a warning.
    """
    topo = NcclTopology()
    root, topo.well_formed = _scan(to_text(text), source, topo.warnings)
    system = next(root.iter("system"), None)
    if system is None:
        if root.children:
            topo.warnings.append(warn("no <system> element", None, source))
        return topo
    topo.root = system
    topo.version = system.attrs.get("version")
    topo.cpus = [dict(c.attrs) for c in system.iter("cpu")]
    for pci in system.iter("pci"):
        up = pci.parent
        topo.pci_links.append({
            "busid": pci.attrs.get("busid"), "class": pci.attrs.get("class"),
            "link_speed": pci.attrs.get("link_speed"),
            "link_width": _int(pci.attrs.get("link_width")),
            "upstream": up.attrs.get("busid") if up is not None and up.tag == "pci" else None,
            "numaid": _numa(pci),
        })
    for gpu in system.iter("gpu"):
        pci = gpu.parent if gpu.parent is not None and gpu.parent.tag == "pci" else None
        links = [{"target": nv.attrs.get("target"), "count": _int(nv.attrs.get("count")),
                  "tclass": nv.attrs.get("tclass")} for nv in gpu.children if nv.tag == "nvlink"]
        busid = pci.attrs.get("busid") if pci else None
        topo.gpus.append({**gpu.attrs, "pci_busid": busid,
                          "pci_device": pci.attrs.get("device") if pci else None,
                          "numaid": _numa(gpu), "nvlinks": links})
        topo.nvlinks += [{"gpu": busid, "target": lk["target"], "count": lk["count"]}
                         for lk in links]
    for net in system.iter("net"):
        pci = next((a for a in net.ancestors() if a.tag == "pci"), None)
        topo.nics.append({**net.attrs,
                          "pci_busid": pci.attrs.get("busid") if pci else None,
                          "pci_class": pci.attrs.get("class") if pci else None,
                          "numaid": _numa(net)})
    return topo


def _int(s: str | None) -> int | None:
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None


def _numa(node: XmlNode) -> str | None:
    cpu = next((a for a in node.ancestors() if a.tag == "cpu"), None)
    return cpu.attrs.get("numaid") if cpu else None


def read_nccl_topo(path: str | Path) -> NcclTopology:
    """Read a topology dump file (see :func:`parse_nccl_topo`)."""
    return parse_nccl_topo(read_text(path), source=str(path))


@dataclass
class NcclGraphs:
    """Searched graphs (``NCCL_GRAPH_DUMP_FILE``): one entry per pattern (ring, tree, ...).

    Each graph is ``{"id", "pattern", "crossnic", "nchannels", "speedintra", "speedinter",
    "typeintra", "typeinter", ..., "channels": [[("net", 0), ("gpu", 0), ...], ...]}`` with
    attribute values as written; ``channels`` lists each channel's path through the server,
    entering and leaving on NICs, i.e. which NIC (rail) each channel uses.
    """

    version: str | None = None
    graphs: list[dict[str, Any]] = field(default_factory=list)
    well_formed: bool = False
    warnings: list[ParseWarning] = field(default_factory=list)

    def usable(self) -> bool:
        return bool(self.graphs)

    def channel_nics(self, graph_id: str = "0") -> list[list[int]]:
        """NIC indices each channel of graph ``graph_id`` uses (entry NIC, exit NIC)."""
        g = next((g for g in self.graphs if g.get("id") == graph_id), None)
        if g is None:
            return []
        return [[int(d) for kind, d in ch if kind == "net" and str(d).lstrip("-").isdigit()]
                for ch in g["channels"]]


def parse_nccl_graphs(text: str | bytes, source: str | None = None) -> NcclGraphs:
    """Read an NCCL graph dump (``NCCL_GRAPH_DUMP_FILE``), tolerating truncation.

    Format source: NCCL ``src/graph/search.cc`` ``ncclTopoGetXmlFromGraphs``: ``<graphs
    version>`` -> ``<graph id pattern crossnic nchannels speedintra speedinter latencyinter
    typeintra typeinter samechannels>`` -> ``<channel>`` -> ``<net dev/>``, ``<gpu dev/>``.

    Returns
    -------
    NcclGraphs
        Graphs in file order with their channels' device sequences.
    """
    out = NcclGraphs()
    root, out.well_formed = _scan(to_text(text), source, out.warnings)
    top = next(root.iter("graphs"), None)
    if top is None:
        return out
    out.version = top.attrs.get("version")
    for g in top.iter("graph"):
        channels = [[(d.tag, d.attrs.get("dev")) for d in ch.children if d.tag in ("net", "gpu")]
                    for ch in g.children if ch.tag == "channel"]
        out.graphs.append({**g.attrs, "channels": channels})
    return out
