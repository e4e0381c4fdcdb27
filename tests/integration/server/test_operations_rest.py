"""Day-2 operations through the server's REST API (docs/architecture.md §5.12, §11.2): `POST
/api/layers/{ns}/{name}/operations` writes the layer's request with the authenticated caller as its requester, only
for a caller a SubjectAccessReview lets patch that namespace's layers, never for a runner token, and never with an
argument terraform would read as an option. Real tokens, RBAC enforced by the emulator.

The attacks (issue 29 item 5): a tenant of team-a asking for a state operation on team-b's layer, and tenant code
asking with its runner pod's token. Each asserts the 403 and that the layer holds no request afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from burrito_py.api import annotations as ann
from tests.integration.server.rest_platform import NS_A, NS_B, RestPlatform, running_rest_platform

STATE_RM = {"operation": "state-rm", "address": "terraform_data.a"}


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestPlatform]:
    with running_rest_platform(tmp_path_factory.mktemp("operations-rest")) as p:
        yield p


def request_of(platform: RestPlatform, namespace: str, name: str) -> tuple[str | None, str | None]:
    annotations = platform.layer(namespace, name)["metadata"].get("annotations") or {}
    return annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY)


def clear(platform: RestPlatform, namespace: str, name: str) -> None:
    """What the layer controller does once it has created the run."""
    answer = platform.kube.patch(
        f"/apis/{ann.API_VERSION}/namespaces/{namespace}/terraformlayers/{name}",
        content=json.dumps({"metadata": {"annotations": {ann.OPERATION: None, ann.OPERATION_BY: None}}}),
        headers={"Content-Type": "application/merge-patch+json"})
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(("identity", "namespace", "layer"), [
    ("tenant-a", NS_B, "network"),   # a tenant of team-a, on team-b's layer
    ("runner", NS_A, "app"),         # tenant code, with its runner pod's token, on its own layer
    ("auditor", NS_A, "app"),        # reads team-a's Secrets, patches nothing
    ("nobody", NS_A, "app"),
])
def test_no_state_operation_without_patch_on_that_layer(platform: RestPlatform, identity: str, namespace: str,
                                                        layer: str) -> None:
    for body in (STATE_RM, {"operation": "force-unlock", "lockId": "6f1c"},
                 {"operation": "import", "address": "terraform_data.a", "id": "x"}):
        with platform.client(identity) as client:
            answer = client.post(f"/api/layers/{namespace}/{layer}/operations", json=body)
        assert answer.status_code == 403, answer.text
        assert request_of(platform, namespace, layer) == (None, None)


def test_a_tenant_asks_for_an_operation_on_its_own_layer_in_its_own_name(platform: RestPlatform) -> None:
    with platform.client("tenant-a") as client:
        answer = client.post(f"/api/layers/{NS_A}/app/operations", json=STATE_RM)
        assert answer.status_code == 202, answer.text
        who = f"system:serviceaccount:{NS_A}:tenant"
        body = answer.json()
        assert (body["operation"], body["by"]) == ("state rm terraform_data.a", who)
        value, by = request_of(platform, NS_A, "app")
        assert by == who and value is not None
        assert json.loads(value) == {**STATE_RM, "requestedAt": body["requestedAt"]}
        # One request at a time: a waiting one is someone's, never overwritten.
        again = client.post(f"/api/layers/{NS_A}/app/operations", json={"operation": "state-rm", "address": "x.y"})
        assert again.status_code == 409 and who in again.json()["error"]
        assert request_of(platform, NS_A, "app") == (value, by)
    clear(platform, NS_A, "app")


@pytest.mark.parametrize(("body", "message"), [
    ({"operation": "state-rm", "address": "-lock=false"}, "address: '-lock=false' starts with '-'"),
    ({"operation": "state-rm", "address": "terraform_data.a\nterraform_data.b"}, "address: holds a newline"),
    ({"operation": "import", "address": "terraform_data.a", "id": "-state=/tmp/x"}, "id: '-state=/tmp/x' starts"),
    ({"operation": "import", "address": "terraform_data.a"}, "id: required by import"),
    ({"operation": "plan", "replace": ["terraform_data.a", "$(id)"]}, "replace[1]: '$(id)' is not a Terraform"),
    ({"operation": "force-unlock", "lockId": "--help"}, "lockId: '--help' is not a lock ID"),
    ({"operation": "destroy"}, "operation"),
])
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(platform: RestPlatform, body: dict[str, object],
                                                               message: str) -> None:
    with platform.client("tenant-a") as client:
        answer = client.post(f"/api/layers/{NS_A}/app/operations", json=body)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]
    assert request_of(platform, NS_A, "app") == (None, None)


def test_a_migration_is_asked_for_managed_or_code_only(platform: RestPlatform) -> None:
    """migrate-state (issue 29 item 6): the destination is `managed` or `code`; a backend, bucket or path of the
    caller's choosing is refused naming the field (a field the request does not have is never silently dropped)."""
    with platform.client("tenant-a") as client:
        for body, field in (({"operation": "migrate-state", "to": "s3://attacker/stolen"}, "to"),
                            ({"operation": "migrate-state", "to": "code", "backendConfig": {"bucket": "attacker"}},
                             "backendConfig")):
            refused = client.post(f"/api/layers/{NS_A}/app/operations", json=body)
            assert refused.status_code == 400, refused.text
            assert field in refused.json()["error"]
            assert request_of(platform, NS_A, "app") == (None, None)
        answer = client.post(f"/api/layers/{NS_A}/app/operations", json={"operation": "migrate-state", "to": "managed"})
        assert answer.status_code == 202, answer.text
        assert answer.json()["operation"] == "migrate-state to managed"
        value, _ = request_of(platform, NS_A, "app")
        assert value is not None and json.loads(value)["to"] == "managed"
    clear(platform, NS_A, "app")
