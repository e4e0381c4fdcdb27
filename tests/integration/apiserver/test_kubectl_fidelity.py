"""What kubectl sees of the emulator where it used to differ from kube-apiserver: label and annotation
validation (422, the real server's words), `kubectl create token` (a protobuf TokenRequest), and
`kubectl apply` of built-in kinds validated against the OpenAPI the emulator serves."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from burrito_local.apiserver import ApiServer

from tests.integration.apiserver.conftest import CMS, KubectlRun, cm, widget

LONG = "x" * 64


def test_a_label_value_over_63_characters_is_refused_with_the_real_message(http: httpx.Client) -> None:
    refused = http.post(CMS, json=cm("long", labels={"burrito-py.io/layer": LONG}))
    assert refused.status_code == 422
    status = refused.json()
    assert status["reason"] == "Invalid"
    assert status["message"] == (f'ConfigMap "long" is invalid: metadata.labels: Invalid value: "{LONG}": '
                                 "must be no more than 63 characters")
    assert status["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "metadata.labels",
                                            "message": f'Invalid value: "{LONG}": must be no more than 63 '
                                                       "characters"}]
    assert http.get(f"{CMS}/long").status_code == 404
    assert http.post(CMS, json=cm("ok", labels={"burrito-py.io/layer": "x" * 63})).status_code == 201


def test_labels_are_checked_on_every_write_and_on_custom_resources(http: httpx.Client, widgets: str) -> None:
    assert http.post(CMS, json=cm("c")).status_code == 201
    patched = http.patch(f"{CMS}/c", json={"metadata": {"labels": {"bad key!": "v"}}},
                         headers={"Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 422
    assert patched.json()["message"].startswith(
        'ConfigMap "c" is invalid: metadata.labels: Invalid value: "bad key!": name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
    current = http.get(f"{CMS}/c").json()
    current["metadata"]["labels"] = {"ok": "-starts-with-a-dash"}
    replaced = http.put(f"{CMS}/c", json=current)
    assert replaced.status_code == 422 and "a valid label must be an empty string" in replaced.json()["message"]
    body = widget("w")
    body["metadata"]["labels"] = {"k": LONG}
    refused = http.post(widgets, json=body)
    assert refused.status_code == 422
    assert refused.json()["message"] == (f'Widget.example.com "w" is invalid: metadata.labels: Invalid value: '
                                         f'"{LONG}": must be no more than 63 characters')


def test_annotations_over_256_kib_in_total_are_refused(http: httpx.Client) -> None:
    half = "y" * (128 * 1024)
    body = cm("big")
    body["metadata"]["annotations"] = {"a": half, "b": half}
    refused = http.post(CMS, json=body)
    assert refused.status_code == 422
    assert refused.json()["message"] == ('ConfigMap "big" is invalid: metadata.annotations: Too long: must have at '
                                         "most 262144 bytes")
    body["metadata"]["annotations"] = {"a": half, "b": half[:-2]}
    assert http.post(CMS, json=body).status_code == 201


def test_kubectl_apply_shows_the_servers_refusal(kubectl: KubectlRun) -> None:
    # (`kubectl label` checks label values itself, with the same words: kubectl 1.32's
    # `invalid label value: "team=…": must be no more than 63 characters`.)
    done = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(cm("labelled", labels={"team": LONG})), check=False)
    assert done.returncode != 0
    assert (f'The ConfigMap "labelled" is invalid: metadata.labels: Invalid value: "{LONG}": must be no more than '
            "63 characters") in done.stderr


def test_kubectl_create_token_issues_a_token_the_token_review_accepts(
    apiserver: ApiServer, kubectl: KubectlRun, http: httpx.Client
) -> None:
    kubectl("create", "serviceaccount", "robot")
    token = kubectl("create", "token", "robot", "--audience", "burrito-py", "--duration", "2h").stdout.strip()
    review = http.post("/apis/authentication.k8s.io/v1/tokenreviews",
                       json={"spec": {"token": token, "audiences": ["burrito-py"]}}).json()["status"]
    assert review["authenticated"] and review["user"]["username"] == "system:serviceaccount:default:robot"
    claims = json.loads(__import__("base64").urlsafe_b64decode(token.split(".")[1] + "==="))
    assert 7200 - 5 <= claims["exp"] - claims["iat"] <= 7200

    # Without --audience the token is for the API itself: kubectl can use it.
    api_token = kubectl("create", "token", "robot").stdout.strip()
    whoami = kubectl("auth", "whoami", "--token", api_token, "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == "system:serviceaccount:default:robot"

    # A token bound to a pod dies with the pod.
    pod = {"metadata": {"name": "holder"}, "spec": {"containers": [{"name": "main", "image": "none"}]}}
    assert http.post("/api/v1/namespaces/default/pods", json=pod).status_code == 201
    bound = kubectl("create", "token", "robot", "--audience", "burrito-py", "--bound-object-kind", "Pod",
                    "--bound-object-name", "holder").stdout.strip()
    spec = {"spec": {"token": bound, "audiences": ["burrito-py"]}}
    reviewed = http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=spec).json()["status"]
    assert reviewed["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]
    http.delete("/api/v1/namespaces/default/pods/holder")
    assert not http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=spec).json()["status"]["authenticated"]
    missing = kubectl("create", "token", "nobody", check=False)
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    return tmp_path / "manifest.yaml"


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "labels": {"a": "b"}},
       "spec": {"restartPolicy": "Never", "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "true"],
                                "env": [{"name": "X", "value": "1"}],
                                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                                "securityContext": {"allowPrivilegeEscalation": False,
                                                    "readOnlyRootFilesystem": True,
                                                    "capabilities": {"drop": ["ALL"]}},
                                "ports": [{"containerPort": 8080, "name": "http"}],
                                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                "volumes": [{"name": "tmp", "emptyDir": {}}]}}


def test_kubectl_apply_of_a_pod_is_validated_by_the_server_without_flags(
    kubectl: KubectlRun, http: httpx.Client, manifest: Path
) -> None:
    manifest.write_text(yaml.safe_dump(POD))
    assert "pod/web created" in kubectl("apply", "-f", str(manifest)).stdout
    assert "pod/web unchanged" in kubectl("apply", "-f", str(manifest)).stdout
    typo = json.loads(json.dumps(POD))
    typo["metadata"]["name"] = "typo"
    typo["spec"]["containers"][0]["imagee"] = typo["spec"]["containers"][0].pop("image")
    manifest.write_text(yaml.safe_dump(typo))
    refused = kubectl("apply", "-f", str(manifest), check=False)
    assert refused.returncode != 0
    assert ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
            '"spec.containers[0].imagee"') in refused.stderr
    warned = kubectl("apply", "--validate=warn", "-f", str(manifest))
    assert 'unknown field "spec.containers[0].imagee"' in warned.stderr
    stored = http.get("/api/v1/namespaces/default/pods/typo").json()
    assert "imagee" not in stored["spec"]["containers"][0], "unknown fields of built-ins are dropped, as Go drops them"


def test_kubectl_applies_the_charts_kinds_and_more_without_validate_false(
    kubectl: KubectlRun, http: httpx.Client, manifest: Path
) -> None:
    from burrito_py.chart.chart import render_chart

    extra = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "tenant"},
         "stringData": {"k": "v"}},
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": "tenant"},
         "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}},
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "tenant"},
         "involvedObject": {"kind": "Lease", "name": "l", "namespace": "tenant"}, "reason": "Tested",
         "message": "hello", "type": "Normal"},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "burrito-py-system"}},
    ]
    objects = extra + render_chart({}, "burrito-py", "burrito-py-system")
    kinds = {o["kind"] for o in objects}
    assert {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Service",
            "Deployment", "PersistentVolumeClaim", "CustomResourceDefinition"} <= kinds
    manifest.write_text(yaml.safe_dump_all(objects))
    first = kubectl("apply", "-f", str(manifest))
    assert first.stdout.count(" created") == len(objects), first.stdout
    again = kubectl("apply", "-f", str(manifest))
    assert "created" not in again.stdout and "unchanged" in again.stdout
    assert http.get("/apis/coordination.k8s.io/v1/namespaces/tenant/leases/l").json()["spec"]["holderIdentity"] == "me"


def test_kubectl_explain_reads_the_served_schemas(kubectl: KubectlRun, manifest: Path) -> None:
    from burrito_py.api.crdgen import generate_crds

    explained = kubectl("explain", "pod.spec.containers.image").stdout
    assert "FIELD: image <string>" in explained and "Container image name" in explained
    assert "FIELD: strategy <DeploymentStrategy>" in kubectl("explain", "deployment.spec.strategy").stdout
    manifest.write_text(yaml.safe_dump_all(list(generate_crds().values())))
    kubectl("apply", "-f", str(manifest))
    layer = kubectl("explain", "terraformlayer.spec.branch").stdout
    assert "GROUP:      terraform.burrito-py.io" in layer and "FIELD: branch <string>" in layer


def test_openapi_documents_name_the_kinds_and_their_schemas(http: httpx.Client) -> None:
    index = http.get("/openapi/v3").json()["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/rbac.authorization.k8s.io/v1", "apis/coordination.k8s.io/v1"} <= set(index)
    core = http.get("/openapi/v3/api/v1").json()
    schemas = core["components"]["schemas"]
    pod = schemas["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    assert pod["properties"]["spec"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]
    assert schemas["io.k8s.api.core.v1.PodSpec"]["required"] == ["containers"]
    for ref in {r for r in json.dumps(core).split('"$ref": "')[1:]}:
        assert ref.split('"')[0].rpartition("/")[2] in schemas, "every reference resolves in the document"
    patch = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
