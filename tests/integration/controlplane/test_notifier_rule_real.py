"""On kube-apiserver itself: a TerraformNotifier with no target, or more than one, is refused when it is written (the
CRD's CEL rule, 422 with the rule's message), rather than stored and then sending nothing while only the
controllers' log said why (docs/architecture.md §5.10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from burrito_local.controlplane import ControlPlane

from burrito_py.api import annotations as ann
from tests.support.controlplane import kubectl, read_crds, unique_namespace, wait_established

ROOT = Path(__file__).resolve().parents[3]
HOOK = {"urlSecretRef": {"name": "hooks", "key": "slack"}}


def notifier(namespace: str, name: str, **targets: Any) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformNotifier",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"events": ["RunFailed"], **targets}}


@pytest.mark.parametrize(("name", "targets"), [
    ("none", {}),
    ("two", {"slack": HOOK, "teams": HOOK}),
    ("three", {"slack": HOOK, "teams": HOOK,
               "webhook": {"urlSecretRef": HOOK["urlSecretRef"], "hmacSecretRef": {"name": "hooks", "key": "k"}}}),
])
def test_kube_apiserver_refuses_a_notifier_without_exactly_one_target(controlplane: ControlPlane, name: str,
                                                                      targets: dict[str, Any]) -> None:
    kubectl(controlplane, "apply", "--server-side", "--force-conflicts", *[f"--filename={p}" for p in read_crds(ROOT)])
    wait_established(controlplane, *[yaml.safe_load(p.read_text())["metadata"]["name"] for p in read_crds(ROOT)])
    namespace = unique_namespace(controlplane)
    refused = kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(notifier(namespace, name, **targets)),
                      check=False)
    assert refused.returncode != 0, "stored"
    assert "is invalid" in refused.stderr and "exactly one of slack, teams, webhook must be set" in refused.stderr
    kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(notifier(namespace, "one", slack=HOOK)))
