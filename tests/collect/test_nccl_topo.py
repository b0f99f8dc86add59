"""Topology dump XML reader: a real truncated H200 dump and a complete synthetic one."""

from __future__ import annotations

from icefabric.collect._text import read_text
from icefabric.collect.nccl_topo import MAX_XML_DEPTH, parse_nccl_topo

from .conftest import corpus_file

COMPLETE = """<system version="1">
  <cpu numaid="0" arch="x86_64">
    <pci busid="0000:16:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" device="0x2335">
        <gpu dev="0" sm="90" rank="0" gdr="1"><nvlink target="0000:07:00.0" count="4"/></gpu>
      </pci>
      <pci busid="0000:19:00.0" class="0x020000">
        <nic><net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/></nic>
      </pci>
    </pci>
  </cpu>
</system>
"""


def test_complete_dump():
    topo = parse_nccl_topo(COMPLETE)
    assert topo.well_formed and not topo.warnings
    assert topo.gpus[0]["pci_busid"] == "0000:18:00.0" and topo.gpus[0]["numaid"] == "0"
    assert topo.nics[0]["speed"] == "400000"
    assert topo.nvlinks == [{"gpu": "0000:18:00.0", "target": "0000:07:00.0", "count": 4}]
    assert topo.common_pci_ancestor("0000:18:00.0", "0000:19:00.0") == "0000:16:00.0"
    link = next(p for p in topo.pci_links if p["busid"] == "0000:18:00.0")
    assert link["upstream"] == "0000:16:00.0"
    assert topo.gpu_nic_affinity() == {"0000:18:00.0": "mlx5_0"}


def test_truncated_real_dump_reads_what_is_there():
    topo = parse_nccl_topo(read_text(corpus_file("xml-ncclt-256-h200-vm-topo.xml")))
    assert not topo.well_formed
    assert topo.warnings and topo.warnings[0].line is not None
    assert [n["name"] for n in topo.nics] == ["mlx5_0"] and len(topo.gpus) == 1


def test_not_xml_is_not_usable():
    topo = parse_nccl_topo("hello <world")
    assert not topo.usable()


GRAPHS = """<graphs version="1">
  <graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="40" speedinter="40"
         latencyinter="0" typeintra="NVL" typeinter="PIX" samechannels="0">
    <channel><net dev="0"/><gpu dev="0"/><gpu dev="1"/><net dev="0"/></channel>
    <channel><net dev="1"/><gpu dev="1"/><gpu dev="0"/><net dev="1"/></channel>
  </graph>
  <graph id="1" pattern="1" crossnic="0" nchannels="1">
    <channel><net dev="0"/><gpu dev="0"/>
"""


def test_graph_dump_gives_channel_rails():
    from icefabric.collect.nccl_topo import parse_nccl_graphs

    g = parse_nccl_graphs(GRAPHS)
    assert not g.well_formed and g.warnings  # second graph cut off
    assert [x["pattern"] for x in g.graphs] == ["4", "1"]
    assert g.channel_nics("0") == [[0, 0], [1, 1]]
    assert g.graphs[1]["channels"] == [[("net", "0"), ("gpu", "0")]]


def test_nesting_past_the_depth_limit_stops_the_reading_with_a_warning():
    text = '<system version="1">\n' + "<pci>" * 100_000 + "</pci>" * 100_000 + "</system>\n"
    topo = parse_nccl_topo(text, "deep.xml")
    assert not topo.well_formed
    assert [w.message for w in topo.warnings] == [
        f"line 2: elements nested deeper than {MAX_XML_DEPTH} (a topology dump nests about "
        "8); the rest is not read"]


def test_entity_bombs_and_external_entities_are_never_expanded():
    bomb = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
            + "".join(f'<!ENTITY {c} "{("&" + p + ";") * 10}">'
                      for p, c in zip("abcdefgh", "bcdefghi"))
            + ']><system version="1"><cpu numaid="&i;"/></system>')
    xxe = ('<?xml version="1.0"?><!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
           '<system version="1"><cpu numaid="&x;"/></system>')
    assert parse_nccl_topo(bomb).cpus == [{"numaid": "&i;"}]
    assert parse_nccl_topo(xxe).cpus == [{"numaid": "&x;"}]
