"""ControllerCore: what it does beside its parts (heap freezing for a long-running server)."""

import gc

from fastapi.testclient import TestClient

from icefabric.controller.app import create_app
from icefabric.schemas_service import FabricUpload
from icefabric.topology.serialize import fabric_to_dict

from .conftest import ADMIN, auth


def test_a_serving_controller_freezes_its_heap_at_start_and_at_each_fabric(settings, scenario):
    """With ``freeze_heap`` (``controller serve``) the objects alive at start and those of
    each loaded fabric leave the collector's full scans; without it nothing is frozen."""
    ls, fabric, _, _ = scenario
    body = FabricUpload(topology=fabric_to_dict(fabric)).model_dump(mode="json")
    before = gc.get_freeze_count()
    with TestClient(create_app(settings)) as c:
        assert c.put("/v1/fabric", json=body, headers=auth(ADMIN)).status_code == 200
        assert gc.get_freeze_count() == before
    try:
        with TestClient(create_app(settings.model_copy(update={"freeze_heap": True}))) as c:
            started = gc.get_freeze_count()
            assert started > before + 10_000  # the imports, at least
            assert c.put("/v1/fabric", json=body, headers=auth(ADMIN)).status_code == 200
            assert gc.get_freeze_count() > started  # the new fabric's objects too
    finally:
        gc.unfreeze()
