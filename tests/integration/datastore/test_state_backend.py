"""The datastore as a layer's Terraform state backend (docs/architecture.md §10.6), over HTTP as Terraform's `http`
backend speaks it: GET and POST of the state, LOCK and UNLOCK of its lock, basic auth whose password is the
token. Who may do it is tested with real pod-bound tokens from the emulator (the attack tests at the end)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.datastore.encryption import EncryptedStorage, Keyring
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.storage import Describe, Exists, FilesystemStorage, ObjectInfo, Stored
from tests.integration.datastore.auth_platform import NS, AuthPlatform, running_auth_platform
from tests.integration.datastore.conftest import S3Bucket

APP = f"/api/v1/layers/{NS}/app/state"
LOCK_INFO = {"ID": "5f0e-lock", "Operation": "OperationTypeApply", "Info": "", "Who": "runner@app-plan-1-1",
             "Version": "1.11.4", "Created": "2026-11-26T23:00:00Z", "Path": ""}


def tfstate(serial: int, lineage: str = "lineage-1", resources: int = 1, value: str = "a-value") -> bytes:
    return json.dumps({
        "version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": lineage, "outputs": {},
        "resources": [{"mode": "managed", "type": "terraform_data", "name": f"r{i}", "provider": "x",
                       "instances": [{"attributes": {"input": value}}]} for i in range(resources)],
    }).encode()


def md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()


def post(url: str, body: bytes, lock_id: str | None = None, **headers: str) -> httpx.Response:
    """As Terraform posts: Content-MD5, and `?ID=` when it holds the lock."""
    params = {"ID": lock_id} if lock_id else None
    return httpx.post(url, content=body, params=params,
                      headers={"Content-Type": "application/json", "Content-MD5": md5(body), **headers})


def lock(url: str, info: dict[str, Any] | bytes, method: str = "LOCK", **headers: str) -> httpx.Response:
    content = info if isinstance(info, bytes) else json.dumps(info).encode()
    return httpx.request(method, f"{url}/lock", content=content, headers=headers)


# -- the protocol, auth off (the anonymous caller is an admin) ------------------------------------------------------
@pytest.fixture
def datastore(tmp_path: Path) -> Iterator[str]:
    with running_datastore(tmp_path / "data", max_state_bytes=64 * 1024) as url:
        yield url


def test_a_layers_state_round_trip_as_terraform_does_it(datastore: str, tmp_path: Path) -> None:
    url = f"{datastore}{APP}"
    assert httpx.get(url).status_code == 404  # no state yet: Terraform starts from none
    assert lock(url, LOCK_INFO).status_code == 200
    assert lock(url, LOCK_INFO).status_code == 200  # a retried LOCK whose answer was lost
    first = post(url, tfstate(1), LOCK_INFO["ID"])
    assert first.status_code == 200, first.text
    assert first.json()["serial"] == 1
    assert post(url, tfstate(1), LOCK_INFO["ID"]).status_code == 200  # a retried POST: the same state again
    assert post(url, tfstate(2, resources=3), LOCK_INFO["ID"]).status_code == 200
    got = httpx.get(url)
    assert (got.status_code, got.content, got.headers["X-Burrito-State-Serial"]) == (200, tfstate(2, resources=3), "2")
    assert httpx.get(f"{url}/lock").json()["id"] == LOCK_INFO["ID"]
    assert lock(url, LOCK_INFO, "UNLOCK").status_code == 200
    assert lock(url, LOCK_INFO, "UNLOCK").status_code == 200  # a retried UNLOCK
    assert httpx.get(f"{url}/lock").status_code == 404
    versions = sorted(p.name for p in (tmp_path / "data" / "states" / NS / "app" / "versions").iterdir())
    assert versions == [*(f"{s:020d}.{ext}" for s in (1, 2) for ext in ("json", "tfstate")), "index.json"]


def test_refused_writes_leave_the_state_as_it_was(datastore: str) -> None:
    url = f"{datastore}{APP}"
    assert post(url, tfstate(5)).status_code == 200
    cases = [
        (tfstate(4), 409, "serial: 4 is lower than the stored state's serial 5"),
        (tfstate(9, lineage="another"), 409, "lineage: 'another' is not the stored state's lineage 'lineage-1'"),
        (tfstate(5, resources=2), 409, "serial: 5 is already stored with other content"),
        (b"not json at all", 400, "the state is not valid JSON: invalid string in json text (corrupt or truncated)"),
        (b'{"lineage": "lineage-1"}', 400, "serial: missing or not an integer"),
        (b'{"serial": 6}', 400, "lineage: missing or not a non-empty string"),
    ]
    for body, status, reason in cases:
        response = post(url, body)
        assert response.status_code == status, (reason, response.text)
        assert reason in response.json()["error"]
    # Truncated on the way: the body no longer matches the Content-MD5 Terraform computed.
    whole = tfstate(6)
    cut = httpx.post(url, content=whole[:-10], headers={"Content-MD5": md5(whole)})
    assert cut.status_code == 400 and "Content-MD5: does not match the body" in cut.json()["error"]
    # Above the size limit (the setting): 413 naming it, before or while reading.
    big = tfstate(7, resources=2000)
    assert len(big) > 64 * 1024
    too_large = post(url, big)
    assert too_large.status_code == 413 and "BURRITO_PY_DATASTORE_MAX_STATE_BYTES" in too_large.json()["error"]
    chunked = httpx.post(url, content=iter([big[:1000], big[1000:]]))  # no Content-Length
    assert chunked.status_code == 413
    assert httpx.get(url).content == tfstate(5)


def test_the_lock_has_one_holder(datastore: str) -> None:
    url = f"{datastore}{APP}"
    assert lock(url, LOCK_INFO).status_code == 200
    other = {**LOCK_INFO, "ID": "another-lock", "Who": "someone@elsewhere"}
    taken = lock(url, other)
    # Terraform reads the holder's lock info from a 423's body and prints it.
    assert taken.status_code == 423 and taken.json()["ID"] == LOCK_INFO["ID"]
    assert taken.json()["Who"] == LOCK_INFO["Who"]
    wrong = lock(url, other, "UNLOCK")
    assert wrong.status_code == 409 and wrong.json()["lock"]["ID"] == LOCK_INFO["ID"]
    assert "does not hold the state" in wrong.json()["error"]
    # While locked, a write without the lock's ID (-lock=false) or with another is refused.
    assert post(url, tfstate(1)).status_code == 409
    assert post(url, tfstate(1), "another-lock").status_code == 409
    assert httpx.get(url).status_code == 404
    no_id = lock(url, {"Who": "me"})
    assert no_id.status_code == 400 and "ID: the lock info names no lock ID" in no_id.json()["error"]
    assert lock(url, b"{not json").status_code == 400
    # An admin's force-unlock (Terraform's force-unlock sends no body).
    assert lock(url, b"", "UNLOCK").status_code == 200
    assert lock(url, other).status_code == 200


class _LockRaceStorage(FilesystemStorage):
    """Another replica's lock, there for every create-if-absent of it and gone for every read (taken and released
    between them, over and over)."""

    async def put(self, key: str, chunks: AsyncIterator[bytes], max_size: int, *, once: bool = False,
                  describe: Describe | None = None, expected: ObjectInfo | None = None) -> Stored:
        if once and key.endswith("/lock.json"):
            raise Exists(key, "0" * 64)
        return await super().put(key, chunks, max_size, once=once, describe=describe, expected=expected)


def test_a_lock_lost_to_every_race_is_never_answered_as_taken(tmp_path: Path) -> None:
    """Terraform reads a 200 to LOCK as "the lock is mine": a caller whose every create of the lock found one never
    gets it, whatever its reads saw."""
    with running_datastore(tmp_path / "data", storage=_LockRaceStorage(tmp_path / "data")) as url:
        answer = lock(f"{url}{APP}", LOCK_INFO)
        assert answer.status_code == 503, (answer.status_code, answer.text)
        assert answer.headers["Retry-After"] == "1" and "retry" in answer.json()["error"]


def test_every_write_is_a_version_and_retention_keeps_the_newest(tmp_path: Path) -> None:
    with running_datastore(tmp_path / "data", state_versions_kept=3) as url:
        for serial in range(1, 7):
            assert post(f"{url}{APP}", tfstate(serial, resources=serial)).status_code == 200
        records = httpx.get(f"{url}{APP}/versions").json()
        assert [r["serial"] for r in records] == [4, 5, 6]
        assert [r["resources"] for r in records] == [4, 5, 6]
        assert all(r["lineage"] == "lineage-1" and r["size"] == len(tfstate(r["serial"], resources=r["serial"]))
                   for r in records)
        assert all(r["created"] and r["writer"] for r in records)
        assert httpx.get(f"{url}{APP}/versions/5").content == tfstate(5, resources=5)
        assert httpx.get(f"{url}{APP}/versions/2").status_code == 404  # dropped
        assert httpx.get(f"{url}{APP}").content == tfstate(6, resources=6)


def test_the_state_is_encrypted_at_rest_as_plans_are(tmp_path: Path) -> None:
    inner = FilesystemStorage(tmp_path / "data")
    storage = EncryptedStorage(inner, Keyring({"a": os.urandom(32)}, "a"))
    with running_datastore(tmp_path / "data", storage=storage) as url:
        body = tfstate(1, value="a-secret-in-the-state")
        assert post(f"{url}{APP}", body).status_code == 200
        assert httpx.get(f"{url}{APP}").content == body
    stored = next((tmp_path / "data" / "states" / NS / "app" / "versions").glob("*.tfstate")).read_bytes()
    assert b"a-secret-in-the-state" not in stored and b"lineage-1" not in stored


def test_the_state_goes_through_s3_too(tmp_path: Path, s3_bucket: S3Bucket) -> None:
    with running_datastore(tmp_path / "data", storage=s3_bucket.storage()) as url:
        assert lock(f"{url}{APP}", LOCK_INFO).status_code == 200
        assert post(f"{url}{APP}", tfstate(1), LOCK_INFO["ID"]).status_code == 200
        assert post(f"{url}{APP}", tfstate(0), LOCK_INFO["ID"]).status_code == 409
        assert httpx.get(f"{url}{APP}").content == tfstate(1)
        assert lock(f"{url}{APP}", LOCK_INFO, "UNLOCK").status_code == 200
    keys = set(s3_bucket.keys())
    assert f"burrito/states/{NS}/app/versions/{1:020d}.tfstate" in keys
    assert f"burrito/states/{NS}/app/lock.json" not in keys


# -- who may: real pod-bound tokens (the attack tests) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path_factory.mktemp("state")) as p:
        yield p


def basic(token: str) -> dict[str, str]:
    """Terraform's http backend: basic auth, TF_HTTP_USERNAME and TF_HTTP_PASSWORD (the token)."""
    return {"Authorization": "Basic " + base64.b64encode(f"burrito-py-runner:{token}".encode()).decode()}


def test_the_layers_runner_uses_its_state_with_basic_auth_and_its_lock_names_its_pod(platform: AuthPlatform) -> None:
    url, own = f"{platform.url}{APP}", basic(platform.runner_of("app-apply-1", "apply"))
    assert lock(url, LOCK_INFO, **own).status_code == 200
    assert post(url, tfstate(1), LOCK_INFO["ID"], **own).status_code == 200
    assert httpx.get(url, headers=own).content == tfstate(1)
    admin = {"Authorization": f"Bearer {platform.admin_token}"}
    held = httpx.get(f"{url}/lock", headers=admin).json()
    pod_uid = platform.http.get(f"/api/v1/namespaces/{NS}/pods/app-apply-1-1").json()["metadata"]["uid"]
    # The holder is what the token is bound to, not what the lock info says.
    assert (held["run"], held["attempt"], held["pod"], held["podUid"]) == ("app-apply-1", 1, "app-apply-1-1", pod_uid)
    versions = platform.data_dir / "states" / NS / "app" / "versions"
    meta = json.loads((versions / f"{1:020d}.json").read_bytes()[45:])  # after the filesystem's object header
    assert (meta["run"], meta["attempt"], meta["serial"], meta["resources"]) == ("app-apply-1", 1, 1, 1)
    assert httpx.get(url, headers=admin).content == tfstate(1)  # admins read
    assert lock(url, LOCK_INFO, "UNLOCK", **own).status_code == 200


@pytest.mark.parametrize("token", ["other-runner", "previous-attempt", "stranger", "default-sa-pod"])
@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_another_layers_runner_cannot_read_write_or_lock_this_layers_state(
    platform: AuthPlatform, token: str, scheme: str,
) -> None:
    """Tenant code in layer B's runner pod (or an earlier attempt's pod, any other token of the namespace) takes
    aim at layer A's state: read its secrets, write a crafted state, hold or break its lock. All 403, nothing
    changed."""
    url = f"{platform.url}{APP}"
    own, admin = basic(platform.tokens["own-runner"]), {"Authorization": f"Bearer {platform.admin_token}"}
    assert lock(url, LOCK_INFO, **own).status_code == 200
    before = httpx.get(url, headers=admin)
    hostile = basic(platform.tokens[token]) if scheme == "basic" else {
        "Authorization": f"Bearer {platform.tokens[token]}"}
    stolen = {**LOCK_INFO, "ID": "hostile-lock"}
    attempts = {
        "read": httpx.get(url, headers=hostile),
        "write": post(url, tfstate(99, value="crafted"), LOCK_INFO["ID"], **hostile),
        "lock": lock(url, stolen, **hostile),
        "unlock": lock(url, LOCK_INFO, "UNLOCK", **hostile),
        "read the lock": httpx.get(f"{url}/lock", headers=hostile),
        "list the versions": httpx.get(f"{url}/versions", headers=hostile),
        "read a version": httpx.get(f"{url}/versions/1", headers=hostile),
    }
    for what, response in attempts.items():
        assert response.status_code == 403, (what, response.status_code, response.text)
    after = httpx.get(url, headers=admin)
    assert (after.status_code, after.content) == (before.status_code, before.content)
    assert httpx.get(f"{url}/lock", headers=admin).json()["id"] == LOCK_INFO["ID"]
    assert lock(url, LOCK_INFO, "UNLOCK", **own).status_code == 200


def test_another_layers_runner_may_use_its_own_state(platform: AuthPlatform) -> None:
    """The refusal above is about whose state, not about the token: layer B's runner uses layer B's state."""
    url = f"{platform.url}/api/v1/layers/{NS}/other/state"
    other = basic(platform.runner_of("other-apply-1", "apply", layer="other"))
    assert post(url, tfstate(1, lineage="other-lineage"), **other).status_code == 200
    assert httpx.get(url, headers=other).content == tfstate(1, lineage="other-lineage")
    assert httpx.get(url, headers=basic(platform.tokens["other-runner"])).status_code == 200  # its plan reads it


def test_attack_the_layers_runner_cannot_use_an_admins_lock_by_its_id(platform: AuthPlatform) -> None:
    """An admin locked the layer's state (no runner pod took it). Tenant code in the layer's runner reads the lock's
    ID (GET …/state/lock) and sends it: to write its state under the admin's lock, to "keep" the lock as its own,
    or to release it. Refused; the admin still holds it."""
    url, admin = f"{platform.url}{APP}", {"Authorization": f"Bearer {platform.admin_token}"}
    runner = basic(platform.runner_of("app-apply-admin-lock", "apply"))
    admins = {**LOCK_INFO, "ID": "admin-lock", "Who": "alice@laptop"}
    assert lock(url, admins, **admin).status_code == 200
    before = httpx.get(url, headers=admin)
    learnt = httpx.get(f"{url}/lock", headers=runner).json()["id"]
    assert learnt == "admin-lock"
    written = post(url, tfstate(77, value="crafted"), learnt, **runner)
    assert written.status_code == 409 and written.json()["lock"]["ID"] == "admin-lock", written.text
    kept = lock(url, {**LOCK_INFO, "ID": learnt}, **runner)
    assert kept.status_code == 423 and kept.json()["ID"] == "admin-lock", kept.text
    released = lock(url, {**LOCK_INFO, "ID": learnt}, "UNLOCK", **runner)
    assert released.status_code == 409, released.text
    after = httpx.get(url, headers=admin)
    assert (after.status_code, after.content) == (before.status_code, before.content)
    assert httpx.get(f"{url}/lock", headers=admin).json()["holder"] == (
        "system:serviceaccount:burrito-py:burrito-py-controllers")
    assert lock(url, admins, "UNLOCK", **admin).status_code == 200  # the admin itself still releases it


def test_attack_a_runner_cannot_fill_the_volume_with_state_versions(platform: AuthPlatform, tmp_path: Path) -> None:
    """Tenant code in an apply's runner posts version after version of a large state (each kept, 100 by default):
    they count in the namespace's quota as its artifacts do, and no run that writes state starts once the namespace
    is over it: its LOCK is a 413 naming the quota, before Terraform changed anything. A POST is never refused for
    the quota: an apply's comes after the infrastructure changed, and a refused one was a state lost (Terraform kept
    it only in the runner's errored.tfstate). A plan still locks and reads."""
    quota = 10_000
    runner = basic(platform.runner_of("app-apply-quota", "apply"))
    with running_datastore(tmp_path / "data", auth_enabled=True, kubeconfig=platform.kubeconfig,
                           admin_users=["system:serviceaccount:burrito-py:burrito-py-controllers"],
                           namespace_quota_bytes=quota, quota_recount_seconds=3600) as url:
        states = [tfstate(serial, value="v" * 2800) for serial in range(1, 5)]
        assert sum(len(body) for body in states[:3]) < quota < sum(len(body) for body in states)
        assert lock(f"{url}{APP}", LOCK_INFO, **runner).status_code == 200
        for body in states:  # the last one past the quota: stored all the same, the apply's state is never lost
            assert post(f"{url}{APP}", body, LOCK_INFO["ID"], **runner).status_code == 200
        assert httpx.get(f"{url}{APP}", headers=runner).content == states[3]
        assert lock(f"{url}{APP}", LOCK_INFO, "UNLOCK", **runner).status_code == 200
        refused = lock(f"{url}{APP}", LOCK_INFO, **runner)  # the next state-writing run does not start
        assert refused.status_code == 413, refused.text
        error = refused.json()["error"]
        assert error.startswith(f"the lock of layer {NS}/app refused: namespace {NS} uses "), error
        assert "(BURRITO_PY_DATASTORE_NAMESPACE_QUOTA_BYTES)" in error
        plan = basic(platform.tokens["own-runner"])  # a plan writes nothing: it locks and reads as before
        plan_lock = {**LOCK_INFO, "ID": "plan-lock", "Operation": "OperationTypePlan"}
        assert lock(f"{url}{APP}", plan_lock, **plan).status_code == 200
        assert lock(f"{url}{APP}", plan_lock, "UNLOCK", **plan).status_code == 200


def test_attack_a_plan_runs_token_never_writes_the_state(platform: AuthPlatform) -> None:
    """Tenant code in a plan's runner (a plan never writes state) writes a crafted state into its layer's: 403,
    nothing stored. What a plan does with the state, read it under its lock, still works."""
    url, plan = f"{platform.url}{APP}", basic(platform.tokens["own-runner"])
    admin = {"Authorization": f"Bearer {platform.admin_token}"}
    before = httpx.get(f"{url}/versions", headers=admin).json()
    plan_lock = {**LOCK_INFO, "ID": "plan-lock", "Operation": "OperationTypePlan"}
    assert lock(url, plan_lock, **plan).status_code == 200
    written = post(url, tfstate(90, value="crafted"), "plan-lock", **plan)
    assert written.status_code == 403, written.text
    assert "run app-plan-1, which never writes a state" in written.json()["error"]
    assert httpx.get(url, headers=plan).status_code in (200, 404)  # it reads the state (none yet, or the last)
    assert lock(url, plan_lock, "UNLOCK", **plan).status_code == 200
    assert httpx.get(f"{url}/versions", headers=admin).json() == before


def test_attack_an_ended_runs_token_cannot_lock_write_or_read_the_state(platform: AuthPlatform) -> None:
    """The pod of a run that has ended (its token valid for the pod's lifetime) takes the layer's lock, blocking
    every later run, or writes a state: 403, nothing held or stored."""
    url, admin = f"{platform.url}{APP}", {"Authorization": f"Bearer {platform.admin_token}"}
    ended = basic(platform.runner_of("app-apply-ended", "apply", state="Succeeded"))
    before = httpx.get(f"{url}/versions", headers=admin).json()
    taken = lock(url, {**LOCK_INFO, "ID": "ended-lock"}, **ended)
    assert taken.status_code == 403, taken.text
    assert "run app-apply-ended, which has ended" in taken.json()["error"]
    assert post(url, tfstate(91, value="crafted"), **ended).status_code == 403
    assert httpx.get(url, headers=ended).status_code == 403
    assert httpx.get(f"{url}/lock", headers=admin).status_code == 404
    assert httpx.get(f"{url}/versions", headers=admin).json() == before


def test_no_token_or_a_bad_password_is_401(platform: AuthPlatform) -> None:
    url = f"{platform.url}{APP}"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers=basic("not-a-token")).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Basic %%%"}).status_code == 401


def test_a_runner_cannot_record_a_rollback(platform: AuthPlatform) -> None:
    """Tenant code would dress its own crafted state as an audited rollback someone asked for: only admins (the
    server, after its SubjectAccessReview) record one."""
    url, own = f"{platform.url}{APP}", basic(platform.runner_of("app-apply-rollback", "apply"))
    admin = {"Authorization": f"Bearer {platform.admin_token}"}
    before = httpx.get(f"{url}/versions", headers=admin).json()
    forged = httpx.post(url, content=tfstate(50), params={"rollbackOf": 1, "requestedBy": "alice"}, headers=own)
    assert forged.status_code == 403 and "may not record a rollback" in forged.json()["error"]
    assert httpx.get(f"{url}/versions", headers=admin).json() == before
