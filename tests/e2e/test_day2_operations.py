"""Day-2 operations as runs (issue 29 item 5, docs/architecture.md §5.12), end to end with real terraform 1.11.4 on
the real control plane: an operator with `patch` on the namespace's layers asks with the layer annotation, in their
own name (the chart's admission policy refuses another name); the controllers run `state rm` and `import` on a
managed-state layer as TerraformRuns carrying the requester, then plan again; `force-unlock` releases a lock through the
datastore; a `-replace` plan waits for the approval of its sum, and its apply replaces the resource."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.datastore.storage import FilesystemStorage
from tests.support.git_repos import TestRepo

from .conftest import Platform, wait_for

CODE = """
resource "terraform_data" "a" {
  input = "a"
}

resource "terraform_data" "b" {
  input = "b"
}
"""
OPERATOR = "operator"
RBAC = "rbac.authorization.k8s.io/v1"


def who(platform: Platform, account: str = OPERATOR) -> str:
    return f"system:serviceaccount:{platform.namespace}:{account}"


def token_of(platform: Platform, account: str) -> str:
    """A TokenRequest token of the namespace's ServiceAccount `account`, for the API server's own audiences."""
    with platform.api_http() as http:
        made = http.post(f"/api/v1/namespaces/{platform.namespace}/serviceaccounts/{account}/token",
                         json={"spec": {"expirationSeconds": 3600}})
        made.raise_for_status()
        return str(made.json()["status"]["token"])


def operator_api(platform: Platform) -> httpx.Client:
    """An operator ServiceAccount that may get and patch the namespace's layers (Role + RoleBinding), nothing else."""
    ns = platform.namespace
    with platform.api_http() as http:
        http.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json={"metadata": {"name": OPERATOR}})
        rules = [{"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["get", "patch"]}]
        http.post(f"/apis/{RBAC}/namespaces/{ns}/roles",
                  json={"metadata": {"name": OPERATOR}, "rules": rules}).raise_for_status()
        http.post(f"/apis/{RBAC}/namespaces/{ns}/rolebindings", json={
            "metadata": {"name": OPERATOR}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                        "name": OPERATOR},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": ns}]}).raise_for_status()
    return platform.api_http(token_of(platform, OPERATOR))


def ask(platform: Platform, api: httpx.Client, layer: str, request: dict[str, Any],
        by: str | None = None) -> httpx.Response:
    by = by or who(platform)
    return api.patch(f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/{layer}",
                     content=json.dumps({"metadata": {"annotations": {ann.OPERATION: json.dumps(request),
                                                                      ann.OPERATION_BY: by}}}),
                     headers={"Content-Type": "application/merge-patch+json"})


def state_of(platform: Platform, layer: str) -> dict[str, str]:
    """Resource address → id in the layer's current state (the datastore's)."""
    url = f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/{layer}/state"
    state = httpx.get(url, headers=platform.admin_headers()).json()
    return {f"{r['type']}.{r['name']}": i["attributes"]["id"] for r in state["resources"] for i in r["instances"]}


def finished(platform: Platform, layer: str, action: str, after: str | None = None,
             timeout: float = 120) -> dict[str, Any]:
    """The first run of `action` created after the run `after` (None: the first kept), once it is terminal. (Run
    history keeps 5 runs: older ones are deleted, so runs are found by order, never counted.)"""
    def done() -> dict[str, Any] | None:
        runs = platform.runs(layer)
        names = [r["metadata"]["name"] for r in runs]
        start = names.index(after) + 1 if after is not None and after in names else 0
        found = next((r for r in runs[start:] if r["spec"]["action"] == action), None)
        if found is not None and (found.get("status") or {}).get("state") in ("Succeeded", "Failed"):
            return found
        return None
    return wait_for(done, timeout, interval=0.2, what=f"a {action} run of {layer} after {after}")


def events(platform: Platform, layer: str, reason: str) -> list[str]:
    found = platform.core.list_namespaced_event(platform.namespace, field_selector=f"involvedObject.name={layer}").items
    return [e.message for e in found if e.reason == reason]


def approve_current_plan(platform: Platform, layer: str) -> str:
    pending = wait_for(lambda: (platform.layer(layer).get("status") or {}).get("pendingPlan"), 120,
                       what=f"a plan of {layer} waiting for approval")
    platform.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", layer,
                                                   {"metadata": {"annotations": {ann.APPROVE_PLAN: pending["sum"]}}})
    return str(pending["sum"])


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_state_rm_import_and_force_unlock_on_a_managed_layer(platform: Platform, repo: TestRepo) -> None:
    repo.commit({"layers/ops/main.tf": CODE}, "two resources")
    platform.create_repository("repo", repo.url)
    platform.create_layer("ops", "repo", "layers/ops", state={"managed": True}, overrideRunnerSpec={})
    approve_current_plan(platform, "ops")
    platform.wait_state("ops", "Idle", timeout=120)
    assert set(state_of(platform, "ops")) == {"terraform_data.a", "terraform_data.b"}
    api = operator_api(platform)

    # The admission policy: the operator may ask only in their own name.
    forged = ask(platform, api, "ops", {"operation": "state-rm", "address": "terraform_data.a"}, by="someone-else")
    assert forged.status_code in (403, 422), forged.text
    assert "must name the user who sets" in forged.text
    assert ann.OPERATION not in platform.annotations("ops")

    # state rm: a run carrying the requester, an Event naming them, the resource gone from the state, a new plan.
    assert ask(platform, api, "ops", {"operation": "state-rm", "address": "terraform_data.a"}).status_code == 200
    removed = finished(platform, "ops", "state-rm")
    assert removed["status"]["state"] == "Succeeded", removed["status"]
    assert removed["spec"]["operation"] == {"requestedBy": who(platform), "address": "terraform_data.a", "replace": [],
                                            "target": []}
    assert ann.OPERATION not in platform.annotations("ops") and ann.OPERATION_BY not in platform.annotations("ops")
    assert set(state_of(platform, "ops")) == {"terraform_data.b"}
    name = removed["metadata"]["name"]
    assert f"state rm terraform_data.a requested by {who(platform)}: run {name}" in events(platform, "ops",
                                                                                "OperationRequested")
    # The layer plans again against the changed state: terraform_data.a is to be created, waiting for approval.
    layer = platform.wait_state("ops", "ApplyNeeded", timeout=120)
    assert "1 to add" in layer["status"]["lastResult"], layer["status"]
    names = [r["metadata"]["name"] for r in platform.runs("ops")]  # in creation order
    assert names.index(name) < names.index(layer["status"]["pendingPlan"]["run"].split("/")[0])

    # import: the resource back into the state under the ID given, as argv.
    assert ask(platform, api, "ops", {"operation": "import", "address": "terraform_data.a", "id": "imported-a"}
               ).status_code == 200
    imported = finished(platform, "ops", "import", after=name)
    assert imported["status"]["state"] == "Succeeded", imported["status"]
    assert imported["spec"]["operation"]["requestedBy"] == who(platform)
    assert state_of(platform, "ops")["terraform_data.a"] == "imported-a"
    assert f"import terraform_data.a (ID imported-a) requested by {who(platform)}" in " ".join(
        events(platform, "ops", "OperationRequested"))

    # force-unlock: a lock no live pod holds, released by the run's runner through the datastore (not by the
    # controllers' orphan rule, which would release it only after a failed attempt).
    # The plan after the import, then no live run.
    finished(platform, "ops", "plan", after=imported["metadata"]["name"])
    wait_for(lambda: (platform.layer("ops").get("status") or {}).get("state") in ("ApplyNeeded", "Idle"), 60,
             interval=0.2, what="the layer at rest after the import's plan")
    ghost = {"id": "ghost-lock", "info": {"ID": "ghost-lock", "Operation": "OperationTypeApply", "Who": "killed"},
             "holder": "someone", "run": "ops-apply-old", "attempt": 1, "pod": "ops-apply-old-1",
             "podUid": "0d7e2a52-0000-4000-8000-000000000000", "created": "2026-11-26T22:00:00Z"}
    storage = FilesystemStorage(platform.workdir / "datastore")
    asyncio.run(storage.put(f"states/{platform.namespace}/ops/lock.json", _once(json.dumps(ghost).encode()), 65536))
    assert ask(platform, api, "ops", {"operation": "force-unlock", "lockId": "ghost-lock"}).status_code == 200
    unlocked = finished(platform, "ops", "force-unlock", after=imported["metadata"]["name"])
    assert unlocked["status"]["state"] == "Succeeded", unlocked["status"]
    assert unlocked["status"]["attempts"][0]["exitCode"] == 0
    lock = httpx.get(f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/ops/state/lock",
                     headers=platform.admin_headers())
    assert lock.status_code == 404
    assert events(platform, "ops", "StateLockReleased") == []


def test_a_bad_request_runs_nothing_and_says_why(platform: Platform, repo: TestRepo) -> None:
    repo.commit({"layers/ops/main.tf": CODE}, "two resources")
    platform.create_repository("repo", repo.url)
    platform.create_layer("bad", "repo", "layers/ops", auto_apply=True)
    platform.wait_state("bad", "Idle", timeout=120)
    api = operator_api(platform)
    assert ask(platform, api, "bad", {"operation": "state-rm", "address": "-state=/etc/passwd"}).status_code == 200
    condition = wait_for(lambda: next((c for c in platform.layer("bad")["status"]["conditions"]
                                       if c["type"] == "OperationAccepted"), None), 60, what="OperationAccepted")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidOperation")
    assert "address: '-state=/etc/passwd' starts with '-'" in condition["message"]
    assert wait_for(lambda: events(platform, "bad", "InvalidOperation"), 30, what="the Warning")
    assert [r for r in platform.runs("bad") if r["spec"]["action"] == "state-rm"] == []
    # A runner's ServiceAccount asks for nothing (RBAC and the admission policy), even in its own name.
    runner = platform.api_http(token_of(platform, "burrito-py-runner"))
    refused = ask(platform, runner, "bad", {"operation": "state-rm", "address": "terraform_data.a"},
                  by=who(platform, "burrito-py-runner"))
    assert refused.status_code == 403, refused.text


def test_a_replace_plan_waits_for_approval_then_replaces(platform: Platform, repo: TestRepo) -> None:
    repo.commit({"layers/ops/main.tf": CODE}, "two resources")
    platform.create_repository("repo", repo.url)
    platform.create_layer("rep", "repo", "layers/ops", state={"managed": True}, overrideRunnerSpec={})
    approve_current_plan(platform, "rep")
    platform.wait_state("rep", "Idle", timeout=120)
    ids = state_of(platform, "rep")
    api = operator_api(platform)
    first_apply = finished(platform, "rep", "apply")["metadata"]["name"]
    assert ask(platform, api, "rep", {"operation": "plan", "replace": ["terraform_data.a"]}).status_code == 200
    planned = finished(platform, "rep", "plan", after=first_apply)
    assert planned["status"]["state"] == "Succeeded"
    assert planned["spec"]["operation"] == {"requestedBy": who(platform), "replace": ["terraform_data.a"], "target": []}
    layer = platform.wait_state("rep", "ApplyNeeded", timeout=60)
    assert layer["status"]["pendingPlan"]["run"].startswith(planned["metadata"]["name"])
    assert "1 to add, 0 to change, 1 to destroy" in layer["status"]["lastResult"], layer["status"]
    # It waits: no apply without the approval of its sum.
    with pytest.raises(AssertionError, match="timed out"):
        finished(platform, "rep", "apply", after=planned["metadata"]["name"], timeout=5)
    approve_current_plan(platform, "rep")
    applied = finished(platform, "rep", "apply", after=planned["metadata"]["name"])
    assert applied["status"]["state"] == "Succeeded"
    now = state_of(platform, "rep")
    assert now["terraform_data.a"] != ids["terraform_data.a"] and now["terraform_data.b"] == ids["terraform_data.b"]
    assert platform.wait_state("rep", "Idle", timeout=60)["status"]["lastResult"].startswith("Applied: ")

