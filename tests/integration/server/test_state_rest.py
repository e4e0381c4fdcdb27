"""A managed-state layer's versions through the server's REST API (docs/architecture.md §10.6, §11.2): listed and
compared by whoever may read the layer's runs (a SubjectAccessReview as the caller), downloaded only by whoever may
also read its namespace's Secrets; never by a runner token. Real tokens, RBAC enforced by the emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from burrito_local.identity import ensure_service_account, request_token

from burrito_py.datastore.state import parse_state
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NS_A,
    NS_B,
    PATCH_LAYERS,
    READ_KINDS,
    READ_SECRETS,
    STATE_SECRET,
    RestPlatform,
    account,
    create,
    grant,
    post_state_versions,
    running_rest_platform,
    tfstate,
)

SECRET = STATE_SECRET



@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("state-rest")) as p:
        post_state_versions(p)
        yield p


def test_a_reader_of_the_layers_runs_lists_its_state_versions(platform: RestPlatform) -> None:
    with platform.client("tenant-a") as client:
        answer = client.get(f"/api/layers/{NS_A}/app/state/versions")
    assert answer.status_code == 200, answer.text
    versions = answer.json()
    assert [(v["serial"], v["resources"], v["lineage"]) for v in versions] == [
        (1, 1, "lineage-a"), (2, 2, "lineage-a"), (3, 2, "lineage-a")]
    assert [v["size"] for v in versions] == [parse_state(tfstate(s, i)).size
                                            for s, i in ((1, ["a"]), (2, ["a", "b"]), (3, ["b", "c"]))]
    assert SECRET not in answer.text


def test_the_diff_of_two_versions_names_what_changed_and_shows_no_value(platform: RestPlatform) -> None:
    with platform.client("tenant-a") as client:
        latest = client.get(f"/api/layers/{NS_A}/app/state/diff")
        first = client.get(f"/api/layers/{NS_A}/app/state/diff", params={"from": 1, "to": 3})
    assert latest.status_code == 200, latest.text
    assert latest.json() == {
        "from": 2, "to": 3, "added": ["terraform_data.c"], "removed": ["terraform_data.a"],
        "changed": [{"address": "terraform_data.b", "attributes": ["input"]}],
        "outputs": {"added": [], "removed": [], "changed": []}}
    assert first.json()["added"] == ["terraform_data.b", "terraform_data.c"]
    for answer in (latest, first):
        assert SECRET not in answer.text and "b-3" not in answer.text


def test_downloading_a_version_needs_get_secrets(platform: RestPlatform) -> None:
    with platform.client("auditor") as client:  # reads team-a's kinds and Secrets
        answer = client.get(f"/api/layers/{NS_A}/app/state/versions/2")
    assert answer.status_code == 200 and answer.content == tfstate(2, ["a", "b"])
    with platform.client("tenant-a") as client:
        refused = client.get(f"/api/layers/{NS_A}/app/state/versions/2")
        missing = client.get(f"/api/layers/{NS_A}/app/state/diff", params={"from": 1, "to": 9})
    assert refused.status_code == 403 and "a state holds every secret of the layer" in refused.json()["error"]
    assert SECRET not in refused.text
    assert missing.status_code == 404 and "no state version 9" in missing.json()["error"]


def test_attack_a_diff_of_a_version_beyond_its_limit_is_refused_unread(platform: RestPlatform) -> None:
    """Tenant code in an apply's runner stores a state of 5 MiB of empty resources (a valid state, under the
    datastore's limit); a user then opens the layer's diff. Building both versions whole would cost the server ~26
    times their size, so a version above DIFF_LIMIT is a 413 naming it, before it is read."""
    create(platform.kube, "terraformlayers", NS_A, {
        "kind": "TerraformLayer", "metadata": {"name": "huge"},
        "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "huge"}})
    admin = {"Authorization": f"Bearer {platform.tokens['controller']}"}
    url = f"{platform.datastore_url}/api/v1/layers/{NS_A}/huge/state"
    head = b'{"serial": 2, "lineage": "lineage-h", "resources": ['
    huge = head + b",".join([b"{}"] * (5 * 1024 * 1024 // 3)) + b"]}"
    assert httpx.post(url, content=b'{"serial": 1, "lineage": "lineage-h"}', headers=admin).status_code == 200
    assert httpx.post(url, content=huge, headers=admin, timeout=120).status_code == 200
    with platform.client("tenant-a") as client:
        refused = client.get(f"/api/layers/{NS_A}/huge/state/diff", timeout=120)
        small = client.get(f"/api/layers/{NS_A}/app/state/diff")
    assert refused.status_code == 413, refused.text[:200]
    assert f"version 2 of layer {NS_A}/huge holds {len(huge)} bytes" in refused.json()["error"]
    assert small.status_code == 200


@pytest.mark.parametrize("route", ["versions", "diff", "versions/1"])
@pytest.mark.parametrize(("identity", "namespace", "layer"), [
    ("tenant-a", NS_B, "network"), ("nobody", NS_A, "app"), ("runner", NS_A, "app")])
def test_callers_without_read_access_get_nothing(platform: RestPlatform, route: str, identity: str, namespace: str,
                                                 layer: str) -> None:
    """A tenant of another namespace, an identity with no grant, tenant code with its runner's token: 403, no
    serial, no lineage, no value."""
    with platform.client(identity) as client:
        answer = client.get(f"/api/layers/{namespace}/{layer}/state/{route}")
    assert answer.status_code == 403, answer.text
    assert "lineage" not in answer.text and SECRET not in answer.text


# -- rollback (after the reads above: it adds a version) --------------------------------------------------------------
def restorer(platform: RestPlatform) -> str:
    """A team-a identity that may patch its layers and read its Secrets: who may restore a state."""
    if "restorer" not in platform.tokens:
        ensure_service_account(platform.kube, NS_A, "restorer")
        grant(platform.kube, "restorer", [READ_KINDS, PATCH_LAYERS, READ_SECRETS], account(NS_A, "restorer"), NS_A)
        platform.tokens["restorer"] = request_token(platform.kube, NS_A, "restorer", [AUDIENCE])
    return "restorer"


def serials(platform: RestPlatform) -> list[int]:
    with platform.client("auditor") as client:
        return [v["serial"] for v in client.get(f"/api/layers/{NS_A}/app/state/versions").json()]


@pytest.mark.parametrize("identity", ["auditor", "tenant-a", "person", "nobody", "runner"])
def test_a_rollback_needs_patch_on_the_layer_and_get_secrets(platform: RestPlatform, identity: str) -> None:
    """Reading Secrets alone (auditor), patching layers alone (tenant-a, person), nothing, or a runner token: 403, no
    version written."""
    before = serials(platform)
    with platform.client(identity) as client:
        answer = client.post(f"/api/layers/{NS_A}/app/state/rollback", json={"serial": 1})
    assert answer.status_code == 403, answer.text
    assert serials(platform) == before


def test_a_rollback_is_a_new_version_recorded_with_who_asked_and_an_event(platform: RestPlatform) -> None:
    who = restorer(platform)
    with platform.client(who) as client:
        answer = client.post(f"/api/layers/{NS_A}/app/state/rollback", json={"serial": 1})
        assert answer.status_code == 201, answer.text
        assert answer.json() == {"namespace": NS_A, "name": "app", "rollbackOf": 1, "serial": 4,
                                 "by": f"system:serviceaccount:{NS_A}:restorer"}
        versions = client.get(f"/api/layers/{NS_A}/app/state/versions").json()
        restored = json.loads(client.get(f"/api/layers/{NS_A}/app/state/versions/4").content)
        again = client.post(f"/api/layers/{NS_A}/app/state/rollback", json={"serial": 4})
        missing = client.post(f"/api/layers/{NS_A}/app/state/rollback", json={"serial": 9})
    assert (versions[-1]["serial"], versions[-1]["rollbackOf"]) == (4, 1)
    assert versions[-1]["requestedBy"] == f"system:serviceaccount:{NS_A}:restorer"
    assert restored == {**json.loads(tfstate(1, ["a"])), "serial": 4}
    assert again.status_code == 409 and "already the current state" in again.json()["error"]
    assert missing.status_code == 404
    events = platform.kube.get(f"/api/v1/namespaces/{NS_A}/events").json()["items"]
    rolled = [e["message"] for e in events if e.get("reason") == "StateRolledBack"
              and e["involvedObject"]["name"] == "app"]
    assert rolled == [f"state rolled back to version 1 by system:serviceaccount:{NS_A}:restorer: new version 4"]


def test_no_rollback_while_a_run_holds_the_lock(platform: RestPlatform) -> None:
    admin = {"Authorization": f"Bearer {platform.tokens['controller']}"}
    lock_url = f"{platform.datastore_url}/api/v1/layers/{NS_A}/app/state/lock"
    info = json.dumps({"ID": "a-run-holds-it", "Operation": "OperationTypeApply"}).encode()
    assert httpx.request("LOCK", lock_url, content=info, headers=admin).status_code == 200
    before = serials(platform)
    try:
        with platform.client(restorer(platform)) as client:
            answer = client.post(f"/api/layers/{NS_A}/app/state/rollback", json={"serial": 2})
        assert answer.status_code == 409 and "the state is locked" in answer.json()["error"]
        assert serials(platform) == before
    finally:
        httpx.request("UNLOCK", lock_url, content=info, headers=admin)
