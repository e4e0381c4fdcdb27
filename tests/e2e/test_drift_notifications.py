"""Issue 13, end to end with real terraform: drift told apart from code changes and notified once.

The state is edited behind terraform's back: the next drift check plans a correction at the code already applied,
so the layer is Drifted (status, condition, metric), waits for an approval (`remediationStrategy.drift: detect`,
the default, even under autoApply), and a signed webhook receives exactly one DriftDetected, however many checks
follow. Approving the correction brings it back in sync: one DriftResolved. No body nor event carries the
sensitive value the drifted resource holds."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from burrito_py.api import annotations as ann
from burrito_py.api.notifier import NOTIFIER_SECRET
from burrito_py.notify.sign import EVENT_HEADER, SIGNATURE_HEADER, verify
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, running_platform

SECRET_VALUE = "s3cr3t-drift-value"
HMAC_KEY = b"drift-hmac-key"
DRIFT_TF = """
terraform {
  backend "local" {}
}

variable "secret" {
  type      = string
  sensitive = true
  default   = "@SECRET@"
}

resource "terraform_data" "app" {
  input = "v1"
}

resource "terraform_data" "secret" {
  input = var.secret
}
""".replace("@SECRET@", SECRET_VALUE)


class Receiver:
    """A webhook receiver on loopback that records every delivery."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [headers.get(EVENT_HEADER, "") for headers, _ in self.requests]


@pytest.fixture
def world(tmp_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, TestRepo, Receiver]]:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": DRIFT_TF}, "an app")
    receiver = Receiver()
    try:
        with running_platform(tmp_path / "p", tmp_path / "kubeconfig", drift_detection_period=timedelta(seconds=10),
                              repository_poll_interval=timedelta(seconds=1), cluster=real_cluster) as platform:
            platform.create_repository("infra", repo.url)
            platform.core.create_namespaced_secret(platform.namespace, {
                "metadata": {"name": "hook", "annotations": {NOTIFIER_SECRET: "true"}},
                "stringData": {"url": receiver.url, "key": HMAC_KEY.decode()}})
            platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                            "terraformnotifiers", {
                "apiVersion": ann.API_VERSION, "kind": "TerraformNotifier", "metadata": {"name": "drift"},
                "spec": {"events": ["DriftDetected", "DriftResolved"],
                         "webhook": {"urlSecretRef": {"name": "hook", "key": "url"},
                                     "hmacSecretRef": {"name": "hook", "key": "key"}}}})
            yield platform, repo, receiver
    finally:
        receiver.server.shutdown()


def edit_state_behind_terraforms_back(state_file: Path) -> None:
    state = json.loads(state_file.read_text())
    for resource in state["resources"]:
        attributes = resource["instances"][0]["attributes"]
        value = "changed outside" if resource["name"] == "app" else "tampered"
        attributes["input"] = {"value": value, "type": "string"}
        attributes["output"] = {"value": value, "type": "string"}
    state["serial"] += 1
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_file)


def drifted_metric(namespace: str, layer: str) -> float | None:
    return REGISTRY.get_sample_value("burrito_py_layer_drifted",
                                     {"namespace": namespace, "layer": layer, "repository": "infra"})


def plan_runs(platform: Platform, layer: str) -> set[str]:
    return {r["metadata"]["name"] for r in platform.runs(layer) if r["spec"]["action"] == "plan"}


def test_drift_is_detected_notified_once_and_resolved(world: tuple[Platform, TestRepo, Receiver]) -> None:
    platform, _, receiver = world
    platform.create_layer("app", "infra", "layers/app", auto_apply=True)
    platform.wait_state("app", "Idle", 120)
    applies = [r for r in platform.runs("app") if r["spec"]["action"] == "apply"]
    assert len(applies) == 1
    edit_state_behind_terraforms_back(platform.state_file("app"))

    def drifted() -> dict[str, Any] | None:
        # Drifted and waiting (between two checks: each later check is a plan run of its own).
        status = platform.layer("app").get("status") or {}
        return status if (status.get("drift") or {}).get("state") == "Drifted" and status.get("state") == \
            "ApplyNeeded" else None

    status = wait_for(drifted, 60, interval=0.3, what="the layer Drifted")  # one drift period (10 s) and a plan
    assert status["drift"]["addresses"] == ["terraform_data.app", "terraform_data.secret"]
    assert status["drift"]["resources"] == 2 and status["drift"]["since"]
    assert status["state"] == "ApplyNeeded" and "drift" in status["pendingPlan"]["reason"]
    condition = next(c for c in status["conditions"] if c["type"] == "Drifted")
    assert (condition["status"], condition["reason"]) == ("True", "DriftDetected")
    table = subprocess.run(["kubectl", "get", "tfl", "app"], env={**os.environ, "KUBECONFIG": str(platform.kubeconfig)},
                           capture_output=True, text=True, check=True, timeout=60).stdout
    assert table.splitlines()[0].split()[-2] == "DRIFT" and table.splitlines()[1].split()[-2] == "Drifted", table
    wait_for(lambda: drifted_metric(platform.namespace, "app") == 1.0, 10, interval=0.2, what="the drifted metric")
    wait_for(lambda: receiver.events() == ["DriftDetected"], 30, interval=0.2, what="one DriftDetected delivery")

    # Five more identical checks: each a new plan (a new sum), the same drift: no more notifications, no apply.
    seen = plan_runs(platform, "app")
    wait_for(lambda: len(plan_runs(platform, "app") - seen) >= 5, 120, interval=0.5, what="five more drift checks")
    assert receiver.events() == ["DriftDetected"]
    assert len([r for r in platform.runs("app") if r["spec"]["action"] == "apply"]) == 1

    # The fix: approve the correction (the pending sum may move on with each check, so approve the current one).
    def approve_current() -> bool:
        layer = platform.layer("app")
        state = (layer.get("status") or {}).get("state")
        pending = ((layer.get("status") or {}).get("pendingPlan") or {}).get("sum")
        if pending and (layer["metadata"].get("annotations") or {}).get(ann.APPROVE_PLAN) != pending:
            platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                           "terraformlayers", "app",
                                                           {"metadata": {"annotations": {ann.APPROVE_PLAN: pending}}})
        return state == "Idle" and ((layer.get("status") or {}).get("drift") or {}).get("state") == "InSync"

    wait_for(approve_current, 120, interval=0.5, what="the correction applied and the layer in sync")
    wait_for(lambda: receiver.events() == ["DriftDetected", "DriftResolved"], 30, interval=0.2,
             what="one DriftResolved delivery")
    wait_for(lambda: drifted_metric(platform.namespace, "app") == 0.0, 10, interval=0.2,
             what="the drifted metric back to 0")
    state = json.loads(platform.state_file("app").read_text())
    app = next(r for r in state["resources"] if r["name"] == "app")
    assert app["instances"][0]["attributes"]["input"]["value"] == "v1"

    for headers, body in receiver.requests:
        assert verify(body, headers.get(SIGNATURE_HEADER), HMAC_KEY)
        assert len(body) <= 1024 and SECRET_VALUE.encode() not in body and b"tampered" not in body
        assert json.loads(body)["layer"] == "app"
    events = [e for e in platform.core.list_namespaced_event(platform.namespace).items
              if e.involved_object.name == "app"]
    assert {"DriftDetected", "DriftResolved"} <= {e.reason for e in events}
    for event in events:
        assert len(event.message.encode()) <= 1024 and SECRET_VALUE not in event.message
    raw = json.dumps(platform.layer("app"))
    assert SECRET_VALUE not in raw and "tampered" not in raw
    notifier = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                            "terraformnotifiers",
                                                            "drift")
    assert notifier["status"]["lastDelivery"]["result"] == "Delivered"
    assert receiver.url not in json.dumps(notifier) and base64.b64encode(HMAC_KEY).decode() not in json.dumps(notifier)


def test_a_commit_that_ends_a_drift_resolves_it(world: tuple[Platform, TestRepo, Receiver]) -> None:
    """Issue 25 item 4: the drift ended by a new commit's apply (not by approving the correction). The commit's
    plan is a code change, not a drift correction, so the drift state went Drifted → CodeChange → InSync and the
    DriftResolved event, which looked for Drifted → InSync, was never posted: a notifier never heard it was over."""
    platform, repo, receiver = world
    platform.create_layer("app", "infra", "layers/app", auto_apply=True)
    platform.wait_state("app", "Idle", 120)
    edit_state_behind_terraforms_back(platform.state_file("app"))
    wait_for(lambda: receiver.events() == ["DriftDetected"], 60, interval=0.2, what="one DriftDetected delivery")

    head = repo.commit({"layers/app/main.tf": DRIFT_TF.replace('input = "v1"', 'input = "v2"')}, "v2")

    def applied_in_sync() -> bool:
        layer = platform.layer("app")
        status = layer.get("status") or {}
        return ((layer["metadata"].get("annotations") or {}).get(ann.APPLY_COMMIT) == head
                and status.get("state") == "Idle" and (status.get("drift") or {}).get("state") == "InSync")

    wait_for(applied_in_sync, 120, interval=0.3, what="the commit applied and the layer in sync")
    wait_for(lambda: receiver.events() == ["DriftDetected", "DriftResolved"], 30, interval=0.2,
             what="one DriftResolved delivery")
    reasons = [e.reason for e in platform.core.list_namespaced_event(platform.namespace).items
               if e.involved_object.name == "app"]
    assert reasons.count("DriftDetected") == 1 and reasons.count("DriftResolved") == 1, reasons
