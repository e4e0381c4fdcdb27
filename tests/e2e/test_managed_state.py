"""Terraform state the platform owns (issue 29, docs/architecture.md §10.6): a layer with `spec.state.managed` and no
backend in its code plans and applies with real terraform 1.11.4, its state in the datastore through Terraform's
`http` backend, one version per write."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

from burrito_py.api import annotations as ann
from burrito_py.datastore.storage import FilesystemStorage
from tests.support.git_repos import TestRepo

from .conftest import Platform, managed_layer_code, wait_for


def stored_versions(platform: Platform, layer: str) -> list[dict[str, object]]:
    """The version records the datastore keeps beside each state (after the filesystem's 45-byte object header); not
    the versions index (`index.json`) beside them."""
    versions = platform.workdir / "datastore" / "states" / platform.namespace / layer / "versions"
    return [json.loads(path.read_bytes()[45:]) for path in sorted(versions.glob("*.json")) if path.name[0].isdigit()]


def test_a_managed_layer_applies_twice_with_its_state_in_the_datastore(platform: Platform, repo: TestRepo) -> None:
    repo.commit({"layers/managed/main.tf": managed_layer_code("v1")}, "a layer with no backend")
    platform.create_repository("repo", repo.url)
    # No extraInitArgs: the harness's default points a local backend at a file, which a managed layer has no use for.
    platform.create_layer("managed", "repo", "layers/managed", auto_apply=True, state={"managed": True},
                          overrideRunnerSpec={})
    platform.wait_state("managed", "Idle", timeout=120)
    url = f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/managed/state"
    first = httpx.get(url, headers=platform.admin_headers())
    assert first.status_code == 200, first.text
    state = first.json()
    assert [i["attributes"]["input"]["value"] for r in state["resources"] for i in r["instances"]] == ["v1"]
    assert not platform.state_file("managed").exists()  # nothing went to a local backend
    applies = [r["metadata"]["name"] for r in platform.runs("managed") if r["spec"]["action"] == "apply"]
    versions = stored_versions(platform, "managed")
    assert versions and versions[-1]["run"] == applies[-1] and versions[-1]["resources"] == 1
    assert httpx.get(f"{url}/lock", headers=platform.admin_headers()).status_code == 404  # released after the apply

    second = repo.commit({"layers/managed/main.tf": managed_layer_code("v2")}, "change the layer")
    wait_for(lambda: platform.annotations("managed").get(ann.APPLY_COMMIT) == second, 120, what="second apply")
    platform.wait_state("managed", "Idle", timeout=60)
    state = httpx.get(url, headers=platform.admin_headers()).json()
    assert [i["attributes"]["input"]["value"] for r in state["resources"] for i in r["instances"]] == ["v2"]
    versions = stored_versions(platform, "managed")
    serials = [int(str(v["serial"])) for v in versions]
    assert serials == sorted(serials) and len(serials) >= 2 and state["serial"] == serials[-1]
    assert {v["lineage"] for v in versions} == {state["lineage"]}
    # The listing (from the versions index) shows exactly the records stored.
    assert httpx.get(f"{url}/versions", headers=platform.admin_headers()).json() == versions
    applies = [r["metadata"]["name"] for r in platform.runs("managed") if r["spec"]["action"] == "apply"]
    assert len(applies) == 2 and {v["run"] for v in versions} == set(applies)
    # The runner's token reached terraform through the environment only: never in a log.
    for run in platform.runs("managed"):
        assert "TF_HTTP_PASSWORD" not in json.dumps(run)


def test_a_managed_layer_whose_code_declares_a_backend_fails_naming_the_field(
    platform: Platform, repo: TestRepo,
) -> None:
    platform.create_repository("repo", repo.url)
    # layers/app's code declares `backend "local" {}`.
    platform.create_layer("declared", "repo", "layers/app", state={"managed": True}, overrideRunnerSpec={},
                          remediation={"onError": {"maxRetries": 0}})
    layer = platform.wait_state("declared", "MaxRetriesReached", timeout=90)
    message = layer["status"]["lastResult"]
    assert "spec.state.managed is true, but the layer's code declares its own backend" in message
    assert 'main.tf: backend "local"' in message


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_a_lock_left_by_a_pod_that_is_gone_is_released_and_the_layer_proceeds(
    platform: Platform, repo: TestRepo,
) -> None:
    """A runner pod killed under terraform (SIGKILL, a lost node) leaves its lock: the next attempt's terraform gets
    a 423. When that attempt ends, the run controller sees the lock's pod is gone, releases it and says so on the
    layer; the retry plans and applies."""
    repo.commit({"layers/orphan/main.tf": managed_layer_code("v1")}, "a managed layer")
    ghost = {"id": "ghost-lock", "info": {"ID": "ghost-lock", "Operation": "OperationTypeApply", "Who": "killed"},
             "holder": f"system:serviceaccount:{platform.namespace}:burrito-py-runner", "run": "orphan-apply-old",
             "attempt": 1,
             "pod": "orphan-apply-old-1", "podUid": "0d7e2a52-0000-4000-8000-000000000000",
             "created": "2026-11-26T22:00:00Z"}
    storage = FilesystemStorage(platform.workdir / "datastore")
    asyncio.run(storage.put(f"states/{platform.namespace}/orphan/lock.json", _once(json.dumps(ghost).encode()), 65536))
    platform.create_repository("repo", repo.url)
    platform.create_layer("orphan", "repo", "layers/orphan", auto_apply=True, state={"managed": True},
                          overrideRunnerSpec={})
    platform.wait_state("orphan", "Idle", timeout=150)
    events = platform.core.list_namespaced_event(platform.namespace, field_selector="involvedObject.name=orphan").items
    released = [e.message for e in events if e.reason == "StateLockReleased"]
    assert released == ["state lock ghost-lock of run orphan-apply-old attempt 1 released: its runner pod "
                        "orphan-apply-old-1 is gone"], [(e.reason, e.message) for e in events]
    first_plan = platform.runs("orphan")[0]
    assert first_plan["status"]["attempts"][0]["exitCode"] == 1  # the attempt that met the lock
    url = f"{platform.datastore_url}/api/v1/layers/{platform.namespace}/orphan/state"
    assert httpx.get(f"{url}/lock", headers=platform.admin_headers()).status_code == 404
    assert httpx.get(url, headers=platform.admin_headers()).json()["serial"] >= 1
