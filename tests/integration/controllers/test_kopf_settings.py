"""Issue 12 item 1: kopf peering stays off. One active operator is ensured by our leader Lease; kopf's peering
(KopfPeering objects, equal peers freezing) must never come back with a kopf upgrade. The settings the
controllers rely on are asserted here, and a running operator is checked to touch no peering resource."""

from __future__ import annotations

import time
from pathlib import Path

import kopf
import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier

from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.operator.main import ControllerThread, check_kopf_settings, kopf_settings


def test_the_kopf_settings_we_run_with() -> None:
    settings = kopf_settings()
    assert settings.peering.standalone is True
    assert settings.peering.mandatory is False
    assert settings.posting.enabled is False
    assert settings.watching.server_timeout == 300
    check_kopf_settings(settings)


@pytest.mark.parametrize(("attribute", "value"), [("standalone", False), ("mandatory", True)])
def test_peering_turned_back_on_stops_the_controllers(attribute: str, value: bool) -> None:
    settings = kopf_settings()
    setattr(settings.peering, attribute, value)
    with pytest.raises(RuntimeError, match=f"peering.{attribute} is {value!r}"):
        check_kopf_settings(settings)
    default = kopf.OperatorSettings()
    with pytest.raises(RuntimeError, match="kopf settings changed under the controllers"):
        check_kopf_settings(default)  # kopf's own defaults post events: not what we run with


def test_a_running_operator_touches_no_peering_resource(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with ApiServer(pod_log_dir=tmp_path / "pod-logs") as api:
        api.write_kubeconfig(kubeconfig)
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.close()
        api.clear_requests()
        settings = ControllerSettings(metrics_port=0, agl_enabled=False, datastore_url="http://127.0.0.1:9",
                                      git_cache_dir=tmp_path / "git")
        with ControllerThread(settings, kubeconfig):
            time.sleep(2)
        paths = [r.path for r in api.requests]
        assert any(p.endswith("/terraformlayers") for p in paths)  # it did run and list
        assert not [p for p in paths if "kopf.dev" in p or "peering" in p], paths
