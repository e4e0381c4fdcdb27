"""Migrating a layer's state into the datastore and out again (issue 29 item 6, docs/architecture.md §5.12, §10.6),
end to end with real terraform 1.11.4 on the real control plane.

A layer whose code keeps its state in a local-file backend outside the runner's work directory (the harness's
`-backend-config=path=…`) is applied; an operator with `patch` on the layers asks `migrate-state` to `managed`: the
datastore then holds every resource instance under the same lineage, the run controller records where the state
lives, and the next plan changes nothing. `migrate-state` to `code` moves it back: the file holds every resource
again. A request naming any other destination, a request by someone who may not patch the layer, and a migration
with nowhere to go are refused, and a failed migration leaves the source state the layer's."""

from __future__ import annotations

import json
from typing import Any

import httpx

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo

from .conftest import Platform, wait_for
from .test_day2_operations import RBAC, ask, events, finished, operator_api, token_of, who

CODE = """
terraform {
  backend "local" {}
}

resource "terraform_data" "single" {
  input = "one"
}

resource "terraform_data" "many" {
  for_each = toset(["x", "y"])
  input    = each.key
}
"""
NO_BACKEND = """
resource "terraform_data" "single" {
  input = "one"
}
"""
INSTANCES = {'terraform_data.single', 'terraform_data.many["x"]', 'terraform_data.many["y"]'}


def instances(state: dict[str, Any]) -> set[str]:
    return {f"{r['type']}.{r['name']}" + ("" if i.get("index_key") is None else f"[{json.dumps(i['index_key'])}]")
            for r in state["resources"] for i in r["instances"]}


def datastore_state(platform: Platform, layer: str) -> httpx.Response:
    return httpx.get(f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/{layer}/state",
                     headers=platform.admin_headers())


def condition(platform: Platform, layer: str, type_: str) -> dict[str, Any] | None:
    status = platform.layer(layer).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


def plan_after(platform: Platform, layer: str, run: str) -> dict[str, Any]:
    """The layer's plan made after run `run`, once it is recorded (its plan-run names a later run)."""
    plan = finished(platform, layer, "plan", after=run)
    assert plan["status"]["state"] == "Succeeded", plan["status"]
    wait_for(lambda: platform.annotations(layer).get(ann.PLAN_RUN, "").startswith(plan["metadata"]["name"] + "/"),
             60, interval=0.2, what=f"the plan of {layer} after {run} recorded")
    return plan


def test_a_layer_migrates_into_the_datastore_and_back_keeping_every_resource(
    platform: Platform, repo: TestRepo,
) -> None:
    repo.commit({"layers/mig/main.tf": CODE}, "a layer with a local-file backend")
    platform.create_repository("repo", repo.url)
    platform.create_layer("mig", "repo", "layers/mig", auto_apply=True)
    platform.wait_state("mig", "Idle", timeout=150)
    file = platform.state_file("mig")  # outside every runner's work directory
    applied = json.loads(file.read_text())
    assert instances(applied) == INSTANCES
    assert datastore_state(platform, "mig").status_code == 404
    api = operator_api(platform)

    # In: a run carrying the requester; the datastore holds every instance under the source's lineage.
    assert ask(platform, api, "mig", {"operation": "migrate-state", "to": "managed"}).status_code == 200
    moved_in = finished(platform, "mig", "migrate-state", timeout=150)
    assert moved_in["status"]["state"] == "Succeeded", moved_in["status"]
    assert moved_in["spec"]["operation"]["requestedBy"] == who(platform)
    assert moved_in["spec"]["operation"]["to"] == "managed"
    assert platform.annotations("mig").get(ann.STATE_LOCATION) == "managed"
    stored = datastore_state(platform, "mig")
    assert stored.status_code == 200, stored.text
    assert instances(stored.json()) == INSTANCES
    assert stored.json()["lineage"] == applied["lineage"]
    name = moved_in["metadata"]["name"]
    assert any(f"migrate-state to managed requested by {who(platform)}: run {name}" in m
               for m in events(platform, "mig", "OperationRequested"))
    assert any(f"by run {name}" in m for m in events(platform, "mig", "StateMigrated"))
    # The next plan reads the datastore's state, and finds nothing to do; the file is no longer written.
    plan_after(platform, "mig", name)
    assert platform.annotations("mig").get(ann.PLAN_SUMMARY) == "No changes."
    assert json.loads(file.read_text())["serial"] == applied["serial"]
    # The spec says nothing of managed state: reported, not followed; setting it makes them agree.
    location = condition(platform, "mig", "StateLocation")
    assert location is not None and (location["status"], location["reason"]) == ("False", "Managed"), location
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers",
                                                   "mig", {"spec": {"state": {"managed": True}}})
    wait_for(lambda: (condition(platform, "mig", "StateLocation") or {}).get("status") == "True", 60, interval=0.2,
             what="StateLocation True once the spec agrees")

    # Nothing to do: asked again (a new request: another requestedAt), refused with a condition and no run.
    platform.wait_state("mig", "Idle", timeout=60)
    assert ask(platform, api, "mig", {"operation": "migrate-state", "to": "managed", "requestedAt": "again"}
               ).status_code == 200
    refused = wait_for(lambda: (c := condition(platform, "mig", "OperationAccepted")) and c["reason"] ==
                       "NothingToMigrate" and c, 60, interval=0.2, what="NothingToMigrate")
    assert refused["status"] == "False" and "already" in refused["message"], refused
    assert [r for r in platform.runs("mig") if r["spec"]["action"] == "migrate-state"
            and r["metadata"]["name"] != name] == []
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers",
                                                   "mig", {"metadata": {"annotations": {ann.OPERATION: None,
                                                                                        ann.OPERATION_BY: None}}})

    # Out: the file holds every instance again, the same lineage, a serial not lower than the datastore's.
    in_datastore = datastore_state(platform, "mig").json()
    assert ask(platform, api, "mig", {"operation": "migrate-state", "to": "code"}).status_code == 200
    moved_out = finished(platform, "mig", "migrate-state", after=name, timeout=150)
    assert moved_out["status"]["state"] == "Succeeded", moved_out["status"]
    assert platform.annotations("mig").get(ann.STATE_LOCATION) == "code"
    back = json.loads(file.read_text())
    assert instances(back) == INSTANCES
    assert back["lineage"] == applied["lineage"] and back["serial"] >= in_datastore["serial"]
    plan_after(platform, "mig", moved_out["metadata"]["name"])
    assert platform.annotations("mig").get(ann.PLAN_SUMMARY) == "No changes."
    # spec.state.managed is still true: the recorded place wins, and the condition says so.
    location = condition(platform, "mig", "StateLocation")
    assert location is not None and (location["status"], location["reason"]) == ("False", "CodeBackend"), location


def test_migrations_that_cannot_be_done_are_refused_and_leave_the_state_where_it_is(
    platform: Platform, repo: TestRepo,
) -> None:
    repo.commit({"layers/bare/main.tf": NO_BACKEND}, "a managed layer without a backend")
    platform.create_repository("repo", repo.url)
    platform.create_layer("bare", "repo", "layers/bare", auto_apply=True, state={"managed": True},
                          overrideRunnerSpec={}, remediation={"onError": {"maxRetries": 0}})
    platform.wait_state("bare", "Idle", timeout=150)
    before = datastore_state(platform, "bare").json()
    api = operator_api(platform)

    # Abuse: a destination of the requester's choosing is not a field of the request; nothing runs.
    for bad, field in (({"operation": "migrate-state", "to": "managed", "backendConfig": {"bucket": "evil"}},
                        "backendConfig"),
                       ({"operation": "migrate-state", "to": "s3://evil-bucket/stolen.tfstate"}, "to")):
        assert ask(platform, api, "bare", bad).status_code == 200
        cond = wait_for(lambda f=field: (c := condition(platform, "bare", "OperationAccepted")) and f in c["message"]
                        and c, 60, interval=0.2, what=f"the refusal naming {field}")
        assert (cond["status"], cond["reason"]) == ("False", "InvalidOperation"), cond
    assert [r for r in platform.runs("bare") if r["spec"]["action"] == "migrate-state"] == []

    # Abuse: someone who may read but not patch the layer cannot ask at all (RBAC), in their own name.
    ns = platform.namespace
    with platform.api_http() as http:
        http.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": "viewer"}})
        http.post(f"/apis/{RBAC}/namespaces/{ns}/roles", json={"metadata": {"name": "viewer"}, "rules": [
            {"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["get"]}]}).raise_for_status()
        http.post(f"/apis/{RBAC}/namespaces/{ns}/rolebindings", json={
            "metadata": {"name": "viewer"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                        "name": "viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]}).raise_for_status()
    with platform.api_http(token_of(platform, "viewer")) as viewer:
        denied = ask(platform, viewer, "bare", {"operation": "migrate-state", "to": "code"},
                     by=who(platform, "viewer"))
    assert denied.status_code == 403, denied.text

    # Out of a layer whose code declares no backend: nowhere to go. The run fails saying so; the datastore's state
    # is untouched and stays the layer's.
    assert ask(platform, api, "bare", {"operation": "migrate-state", "to": "code"}).status_code == 200
    failed = finished(platform, "bare", "migrate-state", timeout=150)
    assert failed["status"]["state"] == "Failed", failed["status"]
    # The layer records the run's end after the run does (its own reconcile): until then it shows the last apply.
    wait_for(lambda: "declares no backend to move the state to" in (platform.layer("bare").get("status") or {})
             .get("lastResult", ""), 30, interval=0.2, what="the layer's lastResult naming the missing backend")
    assert ann.STATE_LOCATION not in platform.annotations("bare")
    warned = wait_for(lambda: events(platform, "bare", "StateMigrationFailed"), 30, what="StateMigrationFailed")
    assert "untouched" in warned[0], warned
    after = datastore_state(platform, "bare").json()
    assert (after["serial"], after["lineage"], instances(after)) == (before["serial"], before["lineage"],
                                                                      instances(before))
