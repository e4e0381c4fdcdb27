"""Layer variables (spec.vars, varsFrom Secrets and ConfigMaps) and outputs (status.outputs, writeOutputsToSecret),
end to end with real terraform: the values reach Terraform and the Secret, and never anything people read."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.controllers.layer.outputs import OUTPUTS_RUN
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo

from .conftest import Platform
from .test_core_loop import terraform_state_inputs

PASSWORD = "e2e-s3cr3t-Value-41d9"
CODE = """
terraform {
  backend "local" {}
}

variable "greeting" {
  type = string
}

variable "password" {
  type      = string
  sensitive = true
}

variable "region" {
  type = string
}

resource "terraform_data" "this" {
  input = "${var.greeting} in ${var.region}"
}

resource "terraform_data" "secret" {
  input = var.password
}

output "summary" {
  value = terraform_data.this.output
}

output "password" {
  value     = terraform_data.secret.output
  sensitive = true
}

output "sizes" {
  value = [1, 2]
}
"""


def put(platform: Platform, kind: str, name: str, data: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": platform.namespace},
            "stringData" if kind == "Secret" else "data": data}
    if kind == "Secret":  # meant for Terraform: opened to the namespace's runners (api/runner_secrets.py)
        body["metadata"]["annotations"] = {RUNNER_SECRET: "true"}
    if kind == "Secret":
        platform.core.create_namespaced_secret(platform.namespace, body)
    else:
        platform.core.create_namespaced_config_map(platform.namespace, body)


def run_logs(platform: Platform, layer: str) -> str:
    """Every attempt's log as the datastore serves it, once the run controller has uploaded them all."""
    def uploaded() -> list[tuple[str, int]] | None:
        attempts = [(r["metadata"]["name"], a["number"]) for r in platform.runs(layer)
                    for a in (r.get("status") or {}).get("attempts") or []
                    if a.get("logsUploaded") or a.get("finishedAt")]
        done = all(a.get("logsUploaded") for r in platform.runs(layer)
                   for a in (r.get("status") or {}).get("attempts") or [])
        return attempts if attempts and done else None

    attempts = wait_for(uploaded, 30, 0.2, "every attempt's log uploaded")
    texts = []
    for run, number in attempts:
        url = f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/{layer}/runs/{run}/attempts/{number}/logs"
        response = httpx.get(url, headers=platform.admin_headers(), timeout=10)
        assert response.status_code == 200, response.text
        texts.append(response.text)
    return "\n".join(texts)


def readable_by_people(platform: Platform) -> str:
    """Layer statuses and annotations, events, runs and pods (termination messages included), pod logs."""
    layers = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                           "terraformlayers")["items"]
    events = platform.core.list_namespaced_event(platform.namespace).items
    pods = platform.core.list_namespaced_pod(platform.namespace).items
    pod_logs = [p.read_text(errors="replace") for p in (platform.workdir / "pod-logs").rglob("*") if p.is_file()]
    return "\n".join([
        json.dumps([{"status": o.get("status"), "annotations": o["metadata"].get("annotations")} for o in layers]),
        "\n".join(f"{e.reason}: {e.message}" for e in events),
        json.dumps(platform.runs()),
        "\n".join(str(p.status) for p in pods),
        *pod_logs,
    ])


def assert_never_shown(text: str) -> None:
    for form in (PASSWORD, base64.b64encode(PASSWORD.encode()).decode()):
        assert form not in text, "the secret value (or its base64) is visible"


def test_variables_reach_terraform_and_outputs_reach_the_secret_and_status(platform: Platform, repo: TestRepo):
    repo.commit({"layers/vars/main.tf": CODE}, "a layer with variables and outputs")
    put(platform, "Secret", "creds", {"password": PASSWORD, "unused": "not-a-variable"})
    put(platform, "ConfigMap", "site-defaults", {"region": "first-region"})
    put(platform, "ConfigMap", "site", {"region": "eu-west-3"})
    platform.create_repository("repo", repo.url)
    platform.create_layer(
        "app", "repo", "layers/vars", auto_apply=True,
        vars={"greeting": "hello", "region": "from-vars"},
        varsFrom=[{"kind": "Secret", "name": "creds", "keys": ["password"]},
                  {"kind": "ConfigMap", "name": "site-defaults"},
                  {"kind": "ConfigMap", "name": "site"},  # later: wins over site-defaults and spec.vars
                  {"kind": "Secret", "name": "not-there", "optional": True}],
        writeOutputsToSecret={"name": "app-outputs", "outputs": ["summary", "password:db-password", "sizes"]},
    )
    platform.wait_state("app", "Idle", timeout=90)
    assert sorted(terraform_state_inputs(platform.state_file("app"))) == sorted(["hello in eu-west-3", PASSWORD])

    def with_outputs() -> dict[str, Any] | None:
        body = platform.layer("app")
        return body if body["status"].get("outputs") else None

    layer = wait_for(with_outputs, 30, 0.1, "status.outputs")
    apply_run = layer["metadata"]["annotations"][ann.APPLY_RUN]
    assert layer["status"]["outputs"] == ["password", "sizes", "summary"]
    assert layer["status"]["outputsSync"] == {"run": apply_run, "secret": {
        "name": "app-outputs", "outputs": ["summary", "password:db-password", "sizes"]}}

    secret = platform.core.read_namespaced_secret("app-outputs", platform.namespace)
    values = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert values == {"summary": "hello in eu-west-3", "db-password": PASSWORD, "sizes": "[1, 2]"}
    assert secret.metadata.labels[ann.LABEL_LAYER] == "app"
    assert secret.metadata.annotations[OUTPUTS_RUN] == apply_run
    (owner,) = secret.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("TerraformLayer", "app", layer["metadata"]["uid"])

    logs = run_logs(platform, "app")
    assert "burrito-py: variables greeting, password, region written to burrito-py.auto.tfvars.json" in logs
    assert "burrito-py: 3 output(s) recorded" in logs
    assert_never_shown(logs + readable_by_people(platform))

    # At rest, nothing reads the outputs again: with them gone from the datastore, a reconcile that read them
    # would find nothing, say so in a Warning and empty status.outputs. A sync-now plan (no changes) makes the
    # layer reconcile and rewrite its status several times; status.outputs survives those status patches.
    run, attempt = apply_run.split("/")
    stored = platform.workdir / "datastore" / "layers" / platform.namespace / "app" / run / attempt / "outputs.json"
    stored.unlink()
    runs_before = len(platform.runs("app"))
    platform.sync_now("app")
    wait_for(lambda: len(platform.runs("app")) > runs_before
             and all((r.get("status") or {}).get("state") == "Succeeded" for r in platform.runs("app")),
             60, 0.1, "the sync-now plan")
    platform.wait_state("app", "Idle", timeout=30)
    layer = platform.layer("app")
    assert layer["status"]["outputs"] == ["password", "sizes", "summary"]
    assert layer["status"]["outputsSync"]["run"] == apply_run
    assert "OutputsMissing" not in readable_by_people(platform)


def test_a_missing_secret_fails_the_plan_naming_it(platform: Platform, repo: TestRepo, tmp_path: Path):
    repo.commit({"layers/vars/main.tf": CODE}, "a layer with variables")
    put(platform, "Secret", "creds", {"password": PASSWORD})
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/vars", vars={"greeting": "hi", "region": "r"},
                          varsFrom=[{"kind": "Secret", "name": "creds"}, {"kind": "Secret", "name": "db-creds"}])

    def failed() -> dict[str, object] | None:
        body = platform.layer("app")
        return body if "db-creds" in ((body.get("status") or {}).get("lastResult") or "") else None

    layer = wait_for(failed, 60, 0.2, "the plan to fail naming the Secret")
    assert layer["status"]["lastResult"] == (
        f"Plan failed: Secret {platform.namespace}/db-creds (spec.varsFrom[1]) does not exist")
    assert ann.PLAN_SUM not in layer["metadata"]["annotations"]
    assert platform.runs("app")[0]["spec"]["action"] == "plan"
    assert_never_shown(readable_by_people(platform) + run_logs(platform, "app"))
