"""Issue 13, end to end with real terraform: plan policies gate an `auto` layer's apply (gateAutoApply), block
an approved one (mandatory) until an allowed principal overrides it through the server, and a verdict forged in
the datastore changes nothing (the controllers judge the plan themselves)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.identity import (
    DATASTORE_AUDIENCE,
    ensure_service_account,
    request_token,
    service_account_username,
)
from burrito_local.kube_tokens import API_AUDIENCES
from kubernetes.client import ApiException
from prometheus_client import REGISTRY

from burrito_py.api import annotations as ann
from burrito_py.chart.admission_policy import OVERRIDE_MESSAGE
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port
from burrito_py.server.serving import running_server
from burrito_py.server.settings import ServerSettings
from tests.support.emulator import wait_for
from tests.support.engines import Engine
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, running_platform

DB_TF = """
terraform {
  backend "local" {}
}

resource "terraform_data" "db" {
  triggers_replace = ["%s"]
}

resource "terraform_data" "app" {
  input = "%s"
}
"""


def db_code(generation: str, app: str = "v1") -> str:
    return DB_TF % (generation, app)


@pytest.fixture
def world(tmp_path: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, TestRepo]]:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/db/main.tf": db_code("g1")}, "a database")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", repository_poll_interval=timedelta(seconds=1),
                          cluster=real_cluster) as platform:
        platform.create_repository("infra", repo.url)
        yield platform, repo


def create_policy(platform: Platform, name: str, enforcement: str, **spec: Any) -> None:
    platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                    "terraformplanpolicies", {
        "apiVersion": ann.API_VERSION, "kind": "TerraformPlanPolicy", "metadata": {"name": name},
        "spec": {"enforcement": enforcement, "rules": [{"name": "no-db-replace", "noReplace": {"types": [
            "terraform_data"]}}], **spec}})


def apply_runs(platform: Platform, layer: str) -> list[dict[str, Any]]:
    return [r for r in platform.runs(layer) if r["spec"]["action"] == "apply"]


def pending_replace(platform: Platform, repo: TestRepo, layer: str) -> dict[str, Any]:
    """Commit a replace of terraform_data.db and wait until its plan is pending; the layer's status."""
    repo.commit({"layers/db/main.tf": db_code("g2")}, "replace the database")

    def pending() -> dict[str, Any] | None:
        status = platform.layer(layer).get("status") or {}
        plan = status.get("pendingPlan") or {}
        return status if plan.get("revision") == repo.head and (status.get("policy") or {}).get(
            "planSum") == plan.get("sum") else None

    return wait_for(pending, 120, interval=0.3, what="the replacing plan pending")


def settle(platform: Platform, layer: str, seconds: float = 4.0) -> None:
    """Let the controllers reconcile the layer a few times (a touch wakes it) before asserting nothing ran."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                       "terraformlayers", layer,
                                                       {"metadata": {"labels": {"touched": str(int(time.time()))}}})
        time.sleep(1.0)


def test_gate_auto_apply_holds_the_replace_until_that_plan_is_approved(world: tuple[Platform, TestRepo],
                                                                       engine: Engine) -> None:
    """On each engine (terraform 1.11.4, tofu 1.12.6): the policy reads the engine's own `show -json`."""
    platform, repo = world
    create_policy(platform, "db-safety", "gateAutoApply")
    platform.create_layer("db", "infra", "layers/db", auto_apply=True, engine=engine)
    platform.wait_state("db", "Idle", 120)  # the first plan only creates: allowed, applied
    assert len(apply_runs(platform, "db")) == 1

    status = pending_replace(platform, repo, "db")
    plan_sum = status["pendingPlan"]["sum"]
    assert status["state"] == "ApplyNeeded"
    assert f"{platform.namespace}/db-safety/no-db-replace" in status["pendingPlan"]["reason"]
    assert "terraform_data.db" in status["pendingPlan"]["reason"]
    assert status["policy"]["verdict"] == "GatesAutoApply"
    assert status["policy"]["denied"] == [{"policy": f"{platform.namespace}/db-safety", "rule": "no-db-replace",
                                           "enforcement": "gateAutoApply", "addresses": ["terraform_data.db"],
                                           "count": 1}]
    allowed = next(c for c in status["conditions"] if c["type"] == "IsPlanAllowed")
    assert (allowed["status"], allowed["reason"]) == ("False", "GatesAutoApply")
    assert (REGISTRY.get_sample_value("burrito_py_plan_policy_verdicts_total",
                                      {"level": "gateAutoApply", "result": "GatesAutoApply"}) or 0) >= 1

    # A runner cannot write a verdict; an admin forging one in the datastore changes nothing either: the
    # controllers judge the plan from the plan itself, and decide from their own status.
    run, attempt = platform.annotations("db")[ann.PLAN_RUN].split("/")
    token = (platform.kubeconfig.read_text().split("token: ", 1)[1].split()[0]).strip("'\"")
    with DatastoreClient(platform.datastore_url, token=token) as store:
        forged = {"verdict": {"plan_sum": plan_sum, "result": "Allowed", "results": []}}
        store.put_review(platform.namespace, "db", run, int(attempt), json.dumps(forged).encode())
    settle(platform, "db")
    assert len(apply_runs(platform, "db")) == 1 and platform.layer("db")["status"]["state"] == "ApplyNeeded"
    events = {e.reason for e in platform.core.list_namespaced_event(platform.namespace).items
              if e.involved_object.name == "db"}
    assert "PolicyGatesAutoApply" in events

    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "db",
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: plan_sum}}})
    platform.wait_state("db", "Idle", 120)
    applies = apply_runs(platform, "db")
    assert len(applies) == 2 and applies[-1]["metadata"]["annotations"][ann.RUN_PLAN_SUM] == plan_sum
    state = json.loads(platform.state_file("db").read_text())
    assert state["terraform_version"] == engine.version
    db = next(r for r in state["resources"] if r["name"] == "db")
    assert db["instances"][0]["attributes"]["triggers_replace"]["value"] == ["g2"]


def test_mandatory_needs_an_override_by_an_allowed_principal(world: tuple[Platform, TestRepo]) -> None:
    platform, repo = world
    alice = service_account_username(platform.namespace, "alice")
    create_policy(platform, "db-lock", "mandatory", overrideBy={"users": [alice]})
    platform.create_layer("db", "infra", "layers/db", auto_apply=False)
    first = wait_for(lambda: (platform.layer("db").get("status") or {}).get("pendingPlan"), 120, interval=0.3,
                     what="the first plan")
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "db",
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: first["sum"]}}})
    platform.wait_state("db", "Idle", 120)

    status = pending_replace(platform, repo, "db")
    plan_sum = status["pendingPlan"]["sum"]
    assert status["policy"]["verdict"] == "Denied"
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "db",
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: plan_sum}}})
    settle(platform, "db")  # approval alone: nothing
    assert len(apply_runs(platform, "db")) == 1
    cond = next(c for c in platform.layer("db")["status"]["conditions"] if c["type"] == "IsPlanAllowed")
    assert (cond["status"], cond["reason"]) == ("False", "Denied")

    with platform.api_http() as admin:
        for account in ("alice", "mallory"):
            ensure_service_account(admin, platform.namespace, account)
        # Both may patch layers (RBAC: the server asks that before any override), so what refuses mallory's
        # override below is overrideBy, and her direct patch the admission policy.
        admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{platform.namespace}/roles", json={
            "metadata": {"name": "layer-editor"}, "rules": [{"apiGroups": [ann.GROUP], "resources": [
                "terraformlayers"], "verbs": ["get", "patch"]}]}).raise_for_status()
        admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{platform.namespace}/rolebindings", json={
            "metadata": {"name": "mallory-edits-layers"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                       "kind": "Role", "name": "layer-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": platform.namespace}
                         for name in ("mallory", "alice")]}).raise_for_status()
        tokens = {a: request_token(admin, platform.namespace, a, [*API_AUDIENCES, DATASTORE_AUDIENCE])
                  for a in ("alice", "mallory")}

    settings = ServerSettings(host="127.0.0.1", port=free_port(), kubeconfig=platform.kubeconfig,
                              datastore_url=platform.datastore_url)
    with running_server(settings) as server_url, httpx.Client(base_url=server_url, timeout=30) as http:
        def override(account: str) -> httpx.Response:
            return http.post(f"/api/layers/{platform.namespace}/db/override", json={"planSum": plan_sum},
                             headers={"Authorization": f"Bearer {tokens[account]}"})

        refused = override("mallory")
        assert refused.status_code == 403 and "overrideBy" in refused.json()["error"], refused.text
        with platform.api_http(tokens["mallory"]) as mallory:
            forged = json.dumps({"sum": plan_sum, "user": alice, "groups": []})
            layer = f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{platform.namespace}/terraformlayers/db"
            direct = mallory.patch(layer,
                                   json={"metadata": {"annotations": {ann.OVERRIDE_POLICY: forged}}},
                                   headers={"Content-Type": "application/merge-patch+json"})
            # The Status's message, decoded: kube-apiserver's JSON escapes < and > (\u003c, \u003e).
            assert direct.status_code in (403, 422) and OVERRIDE_MESSAGE in direct.json()["message"], direct.text
        settle(platform, "db", 2.0)
        assert len(apply_runs(platform, "db")) == 1

        accepted = override("alice")
        assert accepted.status_code == 202 and accepted.json()["by"] == alice, accepted.text
    platform.wait_state("db", "Idle", 120)
    applies = apply_runs(platform, "db")
    assert len(applies) == 2 and applies[-1]["metadata"]["annotations"][ann.RUN_PLAN_SUM] == plan_sum
    events = [e for e in platform.core.list_namespaced_event(platform.namespace).items
              if e.involved_object.name == "db" and e.reason == "PolicyOverridden"]
    assert len(events) == 1 and alice in events[0].message
    assert ann.OVERRIDE_POLICY not in platform.annotations("db")  # consumed with the approval


def test_a_policy_that_cannot_parse_never_silently_allows(world: tuple[Platform, TestRepo]) -> None:
    """The API refuses a policy without enforcement or with two rule kinds in one rule (schema), so a
    half-written policy never becomes one that judges nothing."""
    platform, _ = world
    with pytest.raises(ApiException) as refused:
        platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                        "terraformplanpolicies", {
            "apiVersion": ann.API_VERSION, "kind": "TerraformPlanPolicy", "metadata": {"name": "half"},
            "spec": {"rules": [{"name": "r", "noDestroy": {}}]}})
    assert refused.value.status == 422 and "enforcement" in str(refused.value.body)
