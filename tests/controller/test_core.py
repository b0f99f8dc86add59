"""ControllerCore: what it does beside its parts (the collector of a long-running server)."""

import gc

from fastapi.testclient import TestClient

from icefabric.controller.app import create_app
from icefabric.controller.core import FULL_GC_AFTER
from icefabric.schemas_service import FabricUpload
from icefabric.topology.serialize import fabric_to_dict

from .conftest import ADMIN, auth


def test_a_serving_controller_tunes_the_garbage_collector(settings, scenario):
    """With ``tune_gc`` (``controller serve``) the objects alive at start and those of
    each loaded fabric leave the collector's scans and full collections are rare; without
    it the collector is left as it is."""
    _, fabric, _, _ = scenario
    body = FabricUpload(topology=fabric_to_dict(fabric)).model_dump(mode="json")
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    with TestClient(create_app(settings)) as c:
        assert c.put("/v1/fabric", json=body, headers=auth(ADMIN)).status_code == 200
        assert gc.get_freeze_count() == before and gc.get_threshold() == thresholds
    try:
        with TestClient(create_app(settings.model_copy(update={"tune_gc": True}))) as c:
            started = gc.get_freeze_count()
            assert started > before + 10_000  # the imports, at least
            assert c.put("/v1/fabric", json=body, headers=auth(ADMIN)).status_code == 200
            assert gc.get_freeze_count() > started  # the new fabric's objects too
            assert gc.get_threshold() == (*thresholds[:2], FULL_GC_AFTER)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
