"""EngineOptions: one validated model for every engine run's settings."""

import pytest
from pydantic import ValidationError

from icefabric.dataplane.endside import EndSideParams
from icefabric.dataplane.pfc import PfcParams
from icefabric.engine.options import ROCE_WIRE_OVERHEAD, EngineOptions


def test_fluid_args_describe_a_roce_fabric_by_default():
    a = EngineOptions(engine="fluid").engine_args(buffer_bytes=32e6, paced=True)
    assert a["cc"] == "dcqcn" and a["dcqcn"] == "nvidia_firmware"
    assert a["wire_overhead"] == ROCE_WIRE_OVERHEAD == (4096 + 58) / 4096
    assert a["pfc"] == PfcParams(buffer_bytes=32e6) and a["endside"] == EndSideParams()
    assert a["red"] == {"kmin_bytes_per_gbps": 4000.0, "kmax_bytes_per_gbps": 16000.0,
                        "pmax": 0.2, "above_kmax": 1.0}
    assert "dt_ns" not in a  # numerics left to the engine
    unpaced = EngineOptions(engine="fluid").engine_args()
    assert unpaced["endside"] is None and unpaced["pfc"] == PfcParams()
    assert EngineOptions(engine="fluid", endside=False).engine_args(paced=True)["endside"] \
        is None
    assert EngineOptions(engine="flow", dt_ns=5.0).engine_args() == {}


def test_a_pfc_mapping_and_numerics_reach_the_engine():
    o = EngineOptions(engine="fluid", pfc={"buffer_bytes": 1 << 24, "mode": "static"},
                      dt_ns=500)
    a = o.engine_args(buffer_bytes=64e6)
    assert a["pfc"] == PfcParams(mode="static", buffer_bytes=1 << 24) and a["dt_ns"] == 500


@pytest.mark.parametrize("bad, field", [({"dcqnc": "paper"}, "dcqnc"),
                                        ({"dcqcn": "nvidia"}, "dcqcn"),
                                        ({"cc": "timely"}, "cc"),
                                        ({"wire_overhead": 0.5}, "wire_overhead")])
def test_bad_options_name_the_field(bad, field):
    with pytest.raises(ValidationError) as e:
        EngineOptions(**bad)
    assert e.value.errors()[0]["loc"][0] == field
