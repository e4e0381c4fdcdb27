"""KUBE-API-FIDELITY.md § CRDs, and kubectl over the emulator (tables, apply, describe, wait)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import yaml
from burrito_local.apiserver import ApiServer

from burrito_py.api.crdgen import generate_crds
from tests.integration.apiserver.conftest import GROUP, MERGE, KubectlRun, stream_lines, widget, widget_crd
from tests.support.emulator import wait_for, watching

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
TABLE = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
         "application/json")


def test_crd_create_registers_served_versions_with_established_and_names_accepted(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    assert http.get("/apis/example.com/v1").status_code == 404
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(stream_lines(apiserver, CRDS, {"watch": "true"}, 1)))
    reader.start()
    wait_for(lambda: watching(apiserver, CRDS))
    created = http.post(CRDS, json=widget_crd(("v1", "v1beta1")))
    assert created.status_code == 201
    reader.join(10)
    assert got[0]["type"] == "ADDED" and got[0]["object"]["metadata"]["name"] == "widgets.example.com"
    conditions = {c["type"]: c["status"] for c in created.json()["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert created.json()["status"]["acceptedNames"]["kind"] == "Widget"
    assert [v["version"] for v in http.get("/apis/example.com").json()["versions"]] == ["v1", "v1beta1"]
    assert "widgets" in {r["name"] for r in http.get("/apis/example.com/v1beta1").json()["resources"]}
    # Versions share storage, as in etcd: written through one, read through the other.
    beta = {**widget(), "apiVersion": f"{GROUP}/v1beta1"}
    assert http.post("/apis/example.com/v1beta1/namespaces/default/widgets", json=beta).status_code == 201
    read = http.get("/apis/example.com/v1/namespaces/default/widgets/w").json()
    assert read["apiVersion"] == "example.com/v1" and read["spec"]["branch"] == "main"


def test_crd_delete_unregisters_it_and_deletes_its_custom_resources(
    apiserver: ApiServer, http: httpx.Client, widgets: str
) -> None:
    http.post(widgets, json=widget("a"))
    http.post(widgets, json={**widget("held"), "metadata": {"name": "held", "finalizers": ["example.com/x"]}})
    deleting = http.delete(f"{CRDS}/widgets.example.com")
    assert deleting.status_code == 200
    conditions = {c["type"] for c in http.get(f"{CRDS}/widgets.example.com").json()["status"]["conditions"]}
    assert "Terminating" in conditions
    assert http.get(f"{widgets}/a").status_code == 404
    assert http.post(widgets, json=widget("new")).status_code == 405
    http.patch(f"{widgets}/held", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert http.get(f"{CRDS}/widgets.example.com").status_code == 404
    assert http.get("/apis/example.com/v1").status_code == 404
    assert "example.com" not in {g["name"] for g in http.get("/apis").json()["groups"]}
    assert http.get(widgets).status_code == 404


def test_a_crd_without_instances_goes_at_once_answering_with_the_crd_as_marked(
    http: httpx.Client, widgets: str
) -> None:
    deleting = http.delete(f"{CRDS}/widgets.example.com")
    assert deleting.status_code == 200
    marked = deleting.json()
    assert marked["kind"] == "CustomResourceDefinition" and marked["metadata"]["deletionTimestamp"]
    assert "customresourcecleanup.apiextensions.k8s.io" in marked["metadata"]["finalizers"]
    assert http.get(f"{CRDS}/widgets.example.com").status_code == 404
    assert http.get("/apis/example.com/v1").status_code == 404


def test_a_terminating_crd_is_served_until_its_held_instances_are_released(
    http: httpx.Client, widgets: str
) -> None:
    held = {**widget("held"), "metadata": {"name": "held", "finalizers": ["example.com/x"]}}
    http.post(widgets, json=held)
    http.post(widgets, json=widget("free"))
    http.delete(f"{CRDS}/widgets.example.com")

    crd = http.get(f"{CRDS}/widgets.example.com").json()
    terminating = next(c for c in crd["status"]["conditions"] if c["type"] == "Terminating")
    assert (terminating["status"], terminating["reason"]) == ("True", "InstanceDeletionInProgress")
    assert crd["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    # The kind is still served: the held instance is marked, readable, listable and writable (a controller
    # finishing its finalizer's work can still patch it), and discovery still lists the kind.
    assert http.get(f"{widgets}/free").status_code == 404, "an instance without finalizers goes at once"
    instance = http.get(f"{widgets}/held").json()
    assert instance["metadata"]["deletionTimestamp"]
    assert [i["metadata"]["name"] for i in http.get(widgets).json()["items"]] == ["held"]
    patched = http.patch(f"{widgets}/held", headers=MERGE, json={"metadata": {"labels": {"seen": "yes"}}})
    assert patched.status_code == 200 and patched.json()["metadata"]["labels"] == {"seen": "yes"}
    status = http.patch(f"{widgets}/held/status", headers=MERGE, json={"status": {"state": "Releasing"}})
    assert status.status_code == 200
    assert "widgets" in {r["name"] for r in http.get("/apis/example.com/v1").json()["resources"]}

    refused = http.post(widgets, json=widget("new"))
    assert refused.status_code == 405
    assert refused.json()["reason"] == "MethodNotAllowed"
    assert refused.json()["message"] == "create not allowed while custom resource definition is terminating"
    again = http.delete(f"{CRDS}/widgets.example.com")
    assert again.status_code == 200 and again.json()["metadata"]["deletionTimestamp"] == \
        crd["metadata"]["deletionTimestamp"], "deleting a terminating CRD again changes nothing"

    http.patch(f"{widgets}/held", headers=MERGE, json={"metadata": {"finalizers": None}})
    assert http.get(f"{CRDS}/widgets.example.com").status_code == 404
    assert "example.com" not in {g["name"] for g in http.get("/apis").json()["groups"]}


def test_kubectl_delete_crd_returns_once_its_last_instance_is_released(
    http: httpx.Client, widgets: str, kubectl: KubectlRun
) -> None:
    http.post(widgets, json={**widget("held"), "metadata": {"name": "held", "finalizers": ["example.com/x"]}})

    def release() -> None:
        wait_for(lambda: http.get(f"{widgets}/held").json()["metadata"].get("deletionTimestamp"), 20,
                 what="the instance to be marked by the CRD's deletion")
        http.patch(f"{widgets}/held", headers=MERGE, json={"metadata": {"finalizers": None}})

    releaser = threading.Thread(target=release)
    releaser.start()
    done = kubectl("delete", "crd", "widgets.example.com", "--timeout=30s")
    releaser.join(10)
    assert done.stdout.strip() == 'customresourcedefinition.apiextensions.k8s.io "widgets.example.com" deleted'
    assert http.get(f"{CRDS}/widgets.example.com").status_code == 404
    assert kubectl("get", "widgets", check=False).returncode != 0


def test_crd_name_must_be_plural_dot_group(http: httpx.Client) -> None:
    crd = widget_crd()
    crd["metadata"]["name"] = "wrong.example.com"
    response = http.post(CRDS, json=crd)
    assert response.status_code == 422 and response.json()["details"]["causes"][0]["field"] == "metadata.name"


def test_additional_printer_columns_are_kept_and_served_in_tables(http: httpx.Client, widgets: str) -> None:
    stored = http.get(f"{CRDS}/widgets.example.com").json()
    columns = stored["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == ["State", "Repository", "Age"]
    http.post(widgets, json=widget(repository={"name": "infra"}))
    http.patch(f"{widgets}/w/status", json={"status": {"state": "Planned"}}, headers=MERGE)
    table = http.get(widgets, headers={"Accept": TABLE}).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Repository", "Age"]
    name, state, repository, age = table["rows"][0]["cells"]
    assert (name, state, repository) == ("w", "Planned", "infra") and age.endswith("s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    one = http.get(f"{widgets}/w", headers={"Accept": TABLE}, params={"includeObject": "Object"}).json()
    assert one["rows"][0]["object"]["spec"]["branch"] == "main"


def test_kubectl_applies_crds_and_objects_and_get_shows_printer_columns(
    kubectl: KubectlRun, tmp_path: Path
) -> None:
    crds = tmp_path / "crds.yaml"
    crds.write_text(yaml.safe_dump_all(list(generate_crds().values())))
    kubectl("apply", "--validate=false", "-f", str(crds))
    kubectl("wait", "--for=condition=Established", "crd/terraformlayers.terraform.burrito-py.io", "--timeout=10s")
    layer = {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformLayer",
             "metadata": {"name": "app", "namespace": "default"},
             "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "layers/app"}}
    manifest = tmp_path / "layer.yaml"
    manifest.write_text(yaml.safe_dump(layer))
    assert "created" in kubectl("apply", "--validate=false", "-f", str(manifest)).stdout
    assert "unchanged" in kubectl("apply", "--validate=false", "-f", str(manifest)).stdout
    layer["metadata"]["name"] = "ssa"
    manifest.write_text(yaml.safe_dump(layer))
    assert "serverside-applied" in kubectl("apply", "--server-side", "--validate=false", "-f", str(manifest)).stdout
    lines = kubectl("get", "terraformlayers").stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "REPOSITORY", "BRANCH", "PATH", "LAST", "RESULT", "DRIFT", "AGE"]
    starts = [lines[0].index(h) for h in ("NAME", "STATE", "REPOSITORY", "BRANCH", "PATH", "LAST RESULT", "DRIFT",
                                          "AGE")]
    rows = {line.split()[0]: [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            for line in lines[1:]}
    assert rows["app"][:7] == ["app", "", "infra", "main", "layers/app", "", ""]  # unset columns print empty
    assert rows["app"][7].endswith("s") and set(rows) == {"app", "ssa"}
    assert kubectl("get", "tfl", "app", "-o", "jsonpath={.spec.branch}").stdout == "main"
    refused = kubectl("apply", "--server-side", "--validate=false", "-f", "-", check=False,
                      stdin=yaml.safe_dump({**layer, "metadata": {"name": "bad", "namespace": "default"},
                                            "spec": {"repository": {"name": "infra"}, "path": "x"}}))
    assert refused.returncode != 0 and "spec.branch" in refused.stderr


def test_kubectl_get_describe_patch_and_delete_builtins(kubectl: KubectlRun, http: httpx.Client) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    created = http.post("/api/v1/namespaces/default/pods", json=pod).json()
    http.post("/api/v1/namespaces/default/events", json={
        "metadata": {"name": "p.1"}, "type": "Warning", "reason": "BackOff", "message": "it hurts",
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "default",
                           "uid": created["metadata"]["uid"]}})
    header = kubectl("get", "pods").stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert kubectl("get", "pod", "p", "--no-headers").stdout.split()[:3] == ["p", "0/1", "Pending"]
    described = kubectl("describe", "pod", "p").stdout
    assert "BackOff" in described and "it hurts" in described
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}))
    kubectl("patch", "configmap", "c", "--type=merge", "-p", '{"data": {"b": "2"}}')
    kubectl("label", "configmap", "c", "team=x")
    assert json.loads(kubectl("get", "cm", "-l", "team=x", "-o", "json").stdout)["items"][0]["data"] == {
        "a": "1", "b": "2"}
    kubectl("delete", "configmap", "c", "--wait=true", "--timeout=10s")
    assert http.get("/api/v1/namespaces/default/configmaps/c").status_code == 404
    missing = kubectl("get", "configmap", "nope", check=False)
    assert missing.returncode == 1 and 'configmaps "nope" not found' in missing.stderr


def test_kubectl_get_watch_streams_table_rows(apiserver: ApiServer, kubectl: KubectlRun, http: httpx.Client) -> None:
    import subprocess

    watcher = subprocess.Popen(["kubectl", "--kubeconfig", str(Path(apiserver_kubeconfig())), "get", "configmaps",
                                "--watch", "--request-timeout=10s"], stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: watching(apiserver, "/configmaps"), timeout=10)
        http.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "watched"}, "data": {"a": "1"}})
        assert watcher.stdout is not None
        lines = [watcher.stdout.readline()]
        while not lines[-1].startswith("watched"):
            lines.append(watcher.stdout.readline())
        assert lines[0].split() == ["NAME", "DATA", "AGE"] and lines[-1].split()[:2] == ["watched", "1"]
    finally:
        watcher.terminate()
        watcher.wait(5)


def apiserver_kubeconfig() -> str:
    import os

    return os.environ["KUBECONFIG"]


def test_kubectl_apply_validates_custom_resources_on_the_server_without_flags(
    kubectl: KubectlRun, http: httpx.Client, widgets: str
) -> None:
    manifest = yaml.safe_dump({**widget("strict"), "spec": {"branch": "main", "bogus": 1}})
    refused = kubectl("apply", "-f", "-", stdin=manifest, check=False)
    assert refused.returncode != 0 and 'strict decoding error: unknown field "spec.bogus"' in refused.stderr
    warned = kubectl("apply", "--validate=warn", "-f", "-", stdin=manifest)
    assert 'unknown field "spec.bogus"' in warned.stderr and "created" in warned.stdout
    assert http.get(f"{widgets}/strict").json()["spec"] == {"branch": "main", "mode": "plan", "replicas": 1}
    valid = yaml.safe_dump(widget("strict"))
    assert "configured" in kubectl("apply", "-f", "-", stdin=valid).stdout  # the last-applied annotation changes
    assert "unchanged" in kubectl("apply", "-f", "-", stdin=valid).stdout


def test_kubectl_create_generators_send_protobuf_that_is_understood(kubectl: KubectlRun, http: httpx.Client) -> None:
    kubectl("create", "namespace", "team")
    kubectl("create", "configmap", "c", "-n", "team", "--from-literal=a=1")
    kubectl("create", "secret", "generic", "s", "-n", "team", "--from-literal=p=secret")
    kubectl("create", "serviceaccount", "runner", "-n", "team")
    assert http.get("/api/v1/namespaces/team/configmaps/c").json()["data"] == {"a": "1"}
    secret = http.get("/api/v1/namespaces/team/secrets/s").json()
    assert secret["data"] == {"p": "c2VjcmV0"} and secret["type"] == "Opaque"
    assert "generateName" not in secret["metadata"]
    assert http.get("/api/v1/namespaces/team/serviceaccounts/runner").status_code == 200
