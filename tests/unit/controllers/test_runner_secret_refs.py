"""Which Secrets an overrideRunnerSpec hands a runner pod (api/runner_secrets.py) and which of them the run
controller refuses (runner_pod.closed_secrets): every source that names a Secret is checked (§6.3, §24). Pure."""

from __future__ import annotations

from typing import Any

from burrito_py.api.runner_secrets import RUNNER_SECRET, secret_references
from burrito_py.controllers.run.runner_pod import closed_secrets, secret_names

LAYER: dict[str, Any] = {"metadata": {"name": "app", "namespace": "team"}, "spec": {}}
# A layer editor's secrets-store volume: the kubelet hands payments' service principal to the CSI driver, which logs
# in to the vault with it and mounts what it fetches into the runner.
CSI = {"volumes": [{"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io",
                                         "volumeAttributes": {"secretProviderClass": "payments"},
                                         "nodePublishSecretRef": {"name": "payments-sp-creds"}}}],
       "volumeMounts": [{"name": "v", "mountPath": "/mnt/secrets"}]}


def test_attack_a_csi_volumes_node_publish_secret_needs_its_writers_consent() -> None:
    assert secret_references(CSI) == [("overrideRunnerSpec.volumes[0]", "payments-sp-creds")]
    assert secret_names(CSI) == ["payments-sp-creds"]
    layer = {**LAYER, "spec": {"overrideRunnerSpec": CSI}}
    unannotated = {"metadata": {"name": "payments-sp-creds", "namespace": "team"}}
    refused = closed_secrets(CSI, layer, None, "team", {"payments-sp-creds": unannotated})
    assert len(refused) == 1 and refused[0].startswith(
        "Secret team/payments-sp-creds (TerraformLayer team/app spec.overrideRunnerSpec.volumes[0]) is not open to "
        "runners"), refused
    assert closed_secrets(CSI, layer, None, "team", {"payments-sp-creds": None})[0].startswith(
        "Secret team/payments-sp-creds (TerraformLayer team/app spec.overrideRunnerSpec.volumes[0]) does not exist")
    opened = {"metadata": {**unannotated["metadata"], "annotations": {RUNNER_SECRET: "true"}}}
    assert closed_secrets(CSI, layer, None, "team", {"payments-sp-creds": opened}) == []


def test_a_csi_volume_without_a_secret_names_none() -> None:
    """A driver that fetches with the pod's own ServiceAccount (itself checked: closed_account) names no Secret;
    a malformed `csi` (an object stored raw) names none either, and the API refuses such a pod."""
    plain = {"volumes": [{"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io"}},
                         {"name": "w", "csi": "not-an-object"},
                         {"name": "x", "csi": {"nodePublishSecretRef": {"name": ""}}}]}
    assert secret_references(plain) == []
