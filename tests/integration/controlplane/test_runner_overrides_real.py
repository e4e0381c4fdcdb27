"""Attack, on kube-apiserver itself: a tenant's `overrideRunnerSpec` that replaces what the platform gives every
runner pod (docs/architecture.md §6.3, §24) is refused by the CRDs' CEL rules (422 naming the entry and the reason),
the documented overrides are not, and a layer stored before the rules (an older CRD) still gets a pod with the
platform's values from the run controller's own reconcile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from burrito_local.controlplane import ControlPlane

from burrito_py.api.crdgen import crd_filename, generate_crds
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository
from burrito_py.api.run import pod_name
from tests.support.controlplane import (
    apply,
    eventually,
    kubectl,
    kubectl_json,
    read_crds,
    unique_namespace,
    wait_established,
)
from tests.support.runner_overrides import (
    LAYER_OVERRIDE,
    REPOSITORY_OVERRIDE,
    RUN,
    assert_platform_values_won,
    assert_the_run_says_so,
    objects,
    reconcile_once,
    runner_account,
)

ROOT = Path(__file__).resolve().parents[3]


def _install_crds(controlplane: ControlPlane) -> None:
    kubectl(controlplane, "apply", "--server-side", "--force-conflicts", *[f"--filename={p}" for p in read_crds(ROOT)])
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in read_crds(ROOT)]
    wait_established(controlplane, *names)


def _create(controlplane: ControlPlane, body: dict[str, Any]) -> str:
    """kubectl create's stderr, '' when the object was stored."""
    result = kubectl(controlplane, "create", "-f", "-", stdin=json.dumps(body), check=False)
    return "" if result.returncode == 0 else result.stderr


@pytest.mark.parametrize(("override", "field", "said"), [
    ({"env": [{"name": "TF_LOG", "value": "INFO"}, {"name": "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "value": "false"}]},
     "spec.overrideRunnerSpec.env[1]", "env may not set BURRITO_RUNNER_RUN"),
    ({"env": [{"name": "BURRITO_DATASTORE_URL", "value": "https://collector.attacker.example"}]},
     "spec.overrideRunnerSpec.env[0]", "BURRITO_DATASTORE_URL"),
    ({"volumes": [{"name": "burrito-py-token", "configMap": {"name": "forged"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "volume burrito-py-token is burrito-py's"),
    ({"volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "keep-my-credentials"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "volume home is a runner scratch directory"),
    ({"volumes": [{"name": "mine", "configMap": {"name": "forged"}}],
      "volumeMounts": [{"name": "mine", "mountPath": "//run/./secrets/burrito-py/token", "subPath": "token"}]},
     "spec.overrideRunnerSpec.volumeMounts[0]", "the runner's token directory"),
    ({"volumeMounts": [{"name": "tmp", "mountPath": "/usr/local/bin"}]},
     "spec.overrideRunnerSpec.volumeMounts[0]", "volumeMounts burrito-py-token, tmp"),
    ({"volumes": [{"name": "cache", "emptyDir": {}}, {"name": "host-proc", "hostPath": {"path": "/proc"}}]},
     "spec.overrideRunnerSpec.volumes[1]", "a volume may use only configMap, csi"),
])
def test_attack_kube_apiserver_refuses_a_reserved_override(controlplane: ControlPlane, override: dict[str, Any],
                                                            field: str, said: str) -> None:
    _install_crds(controlplane)
    namespace = unique_namespace(controlplane)
    for body in objects(namespace, layer_override=override, repository_override=override)[:2]:
        refused = _create(controlplane, body)
        assert "is invalid" in refused and field in refused and said in refused, refused


def test_the_documented_overrides_are_accepted(controlplane: ControlPlane) -> None:
    _install_crds(controlplane)
    namespace = unique_namespace(controlplane)
    override = {"env": [{"name": "TENV_ROOT", "value": "/cache/tenv"},
                        {"name": "BURRITO_RUNNER_TOOLS_PATH", "value": "/opt/tools"},
                        {"name": "TF_LOG", "value": "INFO"}],
                "volumes": [{"name": "tools", "persistentVolumeClaim": {"claimName": "tool-cache"}},
                            {"name": "work", "emptyDir": {"sizeLimit": "20Gi"}},
                            {"name": "aws", "configMap": {"name": "aws"}}],
                "volumeMounts": [{"name": "aws", "mountPath": "/home/burrito/.aws"},
                                 {"name": "aws", "mountPath": "/var/run/secrets/aws"}]}
    for body in objects(namespace, layer_override=override, repository_override=override)[:2]:
        assert _create(controlplane, body) == ""


def test_attack_a_layer_stored_before_the_rules_gets_the_platforms_values(controlplane: ControlPlane) -> None:
    """The CRDs without their CEL rules (as before this change) store the tenant's objects; the CRDs of this
    version are installed over them (objects are not checked again until written), and the run controller makes
    the run's pod."""
    old = [_without_rules(generate_crds()[crd_filename(kind)]) for kind in (TerraformLayer, TerraformRepository)]
    _install_crds(controlplane)
    namespace = unique_namespace(controlplane)
    repository, layer, run = objects(namespace)

    def stored() -> bool:
        return _create(controlplane, layer) == ""  # until kube-apiserver serves the CRDs without their rules

    try:
        apply(controlplane, *old)
        eventually(stored, what="the rule-less CRD to be served")
        assert _create(controlplane, repository) == ""
    finally:  # the rule-less CRDs never outlive this test, whatever fails in it
        _install_crds(controlplane)
    eventually(lambda: "is invalid" in _create(controlplane, {**layer, "metadata": {**layer["metadata"], "name": "x"}}),
               what="the CRDs' rules to be served again")
    apply(controlplane, runner_account(namespace))
    assert _create(controlplane, run) == ""
    bodies = [kubectl_json(controlplane, "get", kind, "-n", namespace, name) for kind, name in (
        ("terraformrepositories", "repo"), ("terraformlayers", "app"), ("terraformruns", RUN))]
    assert bodies[1]["spec"]["overrideRunnerSpec"]["env"] == LAYER_OVERRIDE["env"], "stored as the tenant wrote it"
    assert bodies[0]["spec"]["overrideRunnerSpec"] == REPOSITORY_OVERRIDE

    asyncio.run(reconcile_once(str(controlplane.kubeconfig), *bodies))

    assert_platform_values_won(kubectl_json(controlplane, "get", "pod", "-n", namespace, pod_name(RUN, 1)))
    status = kubectl_json(controlplane, "get", "terraformrun", "-n", namespace, RUN)["status"]
    events = kubectl_json(controlplane, "get", "events", "-n", namespace)["items"]
    assert_the_run_says_so(status, events, namespace)


def _without_rules(node: Any) -> Any:
    """A CRD as before this change: the same schema without its x-kubernetes-validations."""
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_rules(v) for v in node]
    return node
