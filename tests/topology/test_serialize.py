"""The topology document round-trips and rejects inconsistent input with named fields."""

import json

import pytest

from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import load
from icefabric.topology.serialize import (
    TopologyDocumentError,
    fabric_from_dict,
    fabric_to_dict,
    fabrics_equal,
)


@pytest.mark.parametrize("name", ["hetero-default", "homog-small"])
def test_round_trip_through_json(name):
    f = build_fabric(load(name))
    g = fabric_from_dict(json.loads(json.dumps(fabric_to_dict(f))))
    assert fabrics_equal(f, g)
    assert g.link_id(int(g.link_src[5]), int(g.link_dst[5])) == f.link_id(
        int(f.link_src[5]), int(f.link_dst[5]))
    assert g.server_of_name == f.server_of_name


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("link_src"), "link_src"),
    (lambda d: d["link_dst"].pop(), "link_dst"),
    (lambda d: d["node_kind"].__setitem__(0, 99), "node_kind"),
    (lambda d: d["link_capacity_bps"].__setitem__(0, -1.0), "link_capacity_bps"),
    (lambda d: d.__setitem__("servers", "x"), "servers"),
    (lambda d: d["servers"][0]["profile"].__setitem__("bogus", 1), "servers[0]"),
    (lambda d: d.__setitem__("format_version", 99), "format_version"),
])
def test_bad_documents_name_the_field(mutate, field):
    d = fabric_to_dict(build_fabric(load("homog-small")))
    mutate(d)
    with pytest.raises(TopologyDocumentError, match=field.replace("[", r"\[")):
        fabric_from_dict(d)


def test_hash_profiles_round_trip():
    from icefabric.scenario.build import with_hash_profiles

    f = with_hash_profiles(build_fabric(load("homog-small")), {"spine": "spectrum_cumulus"}, 3)
    back = fabric_from_dict(json.loads(json.dumps(fabric_to_dict(f))))
    assert fabrics_equal(f, back) and back.node_hash_profile == f.node_hash_profile
    assert "spectrum_cumulus" in back.node_hash_profile
