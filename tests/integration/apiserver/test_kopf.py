"""kopf runs unchanged on the emulator: an operator started before its CRD exists picks the kind up,
its create handler runs exactly once and patches status, its delete handler runs and the finalizer goes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
from burrito_local.apiserver import ApiServer
from kopf.testing import KopfRunner

from tests.integration.apiserver.conftest import WIDGETS, widget, widget_crd
from tests.support.emulator import wait_for, watching

OPERATOR = '''
import kopf

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.level = 0
    settings.watching.reconnect_backoff = 0.1
    settings.scanning.disabled = False

@kopf.on.create("example.com", "v1", "widgets")
def created(spec, name, patch, **_):
    with open({calls!r}, "a") as calls:
        calls.write(f"create {{name}}\\n")
    patch.status["state"] = "Created:" + spec["branch"]

@kopf.on.delete("example.com", "v1", "widgets")
def deleted(name, **_):
    with open({calls!r}, "a") as calls:
        calls.write(f"delete {{name}}\\n")
'''


def test_kopf_operator_started_first_runs_create_handler_exactly_once_and_delete_handler(
    apiserver: ApiServer, http: httpx.Client, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    calls.touch()
    operator = tmp_path / "operator.py"
    operator.write_text(textwrap.dedent(OPERATOR.format(calls=str(calls))))
    with KopfRunner(["run", "--standalone", "-A", "--verbose", str(operator)], timeout=60) as runner:
        wait_for(lambda: watching(apiserver, "/customresourcedefinitions"), timeout=20, what="kopf watching CRDs")
        assert http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=widget_crd()).status_code \
            == 201
        wait_for(lambda: watching(apiserver, "/widgets"), timeout=20, what="kopf watching widgets")
        assert http.post(WIDGETS, json=widget("one")).status_code == 201

        def state() -> str | None:
            found = apiserver.get_object("example.com/v1", "widgets", "default", "one")
            return ((found or {}).get("status") or {}).get("state")

        assert wait_for(state, timeout=20, what="status patched by the handler") == "Created:main"
        obj = apiserver.get_object("example.com/v1", "widgets", "default", "one")
        assert obj is not None and obj["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        # Later changes to status/metadata must not re-run the create handler.
        http.patch(f"{WIDGETS}/one", json={"metadata": {"labels": {"touched": "yes"}}},
                   headers={"Content-Type": "application/merge-patch+json"})
        http.delete(f"{WIDGETS}/one")
        wait_for(lambda: apiserver.get_object("example.com/v1", "widgets", "default", "one") is None, timeout=20,
                 what="kopf removing its finalizer")
    assert runner.exception is None, runner.output
    assert calls.read_text().splitlines() == ["create one", "delete one"]
