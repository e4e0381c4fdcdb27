"""`DELETE /layers/{ns}/{layer}/runs/{run}` (a closed pull request's plan runs are thrown away): everything the
run stored goes, nothing else does, on both backends, over real HTTP through the client."""

from __future__ import annotations

import asyncio
import http.client
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from burrito_py.datastore import s3
from burrito_py.datastore.app import DatastoreSettings, create_app
from burrito_py.datastore.auth import Principal, RunnerScope, Unauthenticated
from burrito_py.datastore.client import DatastoreClient, DatastoreError, PlanFormat
from burrito_py.datastore.encryption import EncryptedStorage, Keyring
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.s3 import S3Storage, make_client
from burrito_py.datastore.storage import DeleteFailed, FilesystemStorage, Storage
from tests.integration.datastore.conftest import S3Bucket

NS, LAYER = "default", "app"
RUN_A = "app-pr-7"
RUN_B = "app-pr-70"  # starts like RUN_A: deleting RUN_A must go by directory, not by string prefix
FORMATS: tuple[PlanFormat, ...] = ("bin", "json", "pretty", "short")
RUN_A_OBJECTS = 2 * (len(FORMATS) + 2) + 3  # per attempt: plans, log, review; then outputs, applied, inputs


@dataclass
class Backend:
    name: str
    storage: Storage
    data_dir: Path

    def keys(self) -> list[str]:
        """Every stored layer object, read from the backend itself (not through the API)."""
        return asyncio.run(self.storage.list("layers"))

    def run_keys(self, run: str, layer: str = LAYER) -> list[str]:
        return [key for key in self.keys() if key.startswith(f"layers/{NS}/{layer}/{run}/")]


@pytest.fixture(params=["filesystem", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "filesystem":
        return Backend("filesystem", FilesystemStorage(tmp_path / "data"), tmp_path / "data")
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return Backend("s3", bucket.storage(), tmp_path / "unused")


@pytest.fixture
def datastore(backend: Backend) -> Iterator[str]:
    with running_datastore(backend.data_dir, storage=backend.storage) as url:
        yield url


def store_run_a(client: DatastoreClient) -> None:
    """Two attempts' plans in every format, logs and reviews; outputs and the applied record; the inputs."""
    for attempt in (1, 2):
        for fmt in FORMATS:
            client.put_plan(NS, LAYER, RUN_A, attempt, fmt, f"{fmt} plan of attempt {attempt}".encode())
        client.put_logs(NS, LAYER, RUN_A, attempt, f"log of attempt {attempt}\n".encode())
        client.put_review(NS, LAYER, RUN_A, attempt, b'{"planSum": "sha256:aa"}')
    client.put_outputs(NS, LAYER, RUN_A, 2, b'{"password": {"sensitive": true, "value": "s3cr3t"}}')
    client.put_applied(NS, LAYER, RUN_A, 2, "sha256:aa")
    client.put_inputs(NS, LAYER, RUN_A, b'{"digest": "sha256:00", "variables": {}}')


def store_others(client: DatastoreClient) -> None:
    client.put_plan(NS, LAYER, RUN_B, 1, "json", b'{"run": "b"}')
    client.put_plan(NS, "other", RUN_A, 1, "json", b'{"layer": "other"}')  # same run name, another layer


def _status(call: Callable[[], object]) -> int:
    try:
        call()
    except DatastoreError as exc:
        return exc.status_code or 0
    return 200


def run_a_reads(client: DatastoreClient) -> dict[str, int]:
    """The status of every read of run A's objects."""
    reads: dict[str, Callable[[], object]] = {"latest plan": partial(client.get_plan, NS, LAYER, RUN_A, None, "json")}
    for attempt in (1, 2):
        for fmt in FORMATS:
            reads[f"plan {fmt} {attempt}"] = partial(client.get_plan, NS, LAYER, RUN_A, attempt, fmt)
        reads[f"logs {attempt}"] = partial(client.get_logs, NS, LAYER, RUN_A, attempt)
        reads[f"review {attempt}"] = partial(client.get_review, NS, LAYER, RUN_A, attempt)
    reads["outputs 2"] = partial(client.get_outputs, NS, LAYER, RUN_A, 2)
    reads["inputs"] = partial(client.get_inputs, NS, LAYER, RUN_A)
    return {name: _status(read) for name, read in reads.items()}


def test_deleting_a_run_removes_all_it_stored_and_nothing_else(backend: Backend, datastore: str) -> None:
    with DatastoreClient(datastore) as client:
        store_run_a(client)
        store_others(client)
        assert len(backend.run_keys(RUN_A)) == RUN_A_OBJECTS
        assert set(run_a_reads(client).values()) == {200}

        client.delete_run(NS, LAYER, RUN_A)

        assert set(run_a_reads(client).values()) == {404}, run_a_reads(client)
        assert client.get_applied(NS, LAYER, RUN_A) is None
        assert client.get_plan(NS, LAYER, RUN_B, None, "json") == b'{"run": "b"}'
        assert client.get_plan(NS, "other", RUN_A, 1, "json") == b'{"layer": "other"}'

        client.delete_run(NS, LAYER, RUN_A)  # again: nothing there, still a success
        client.delete_run(NS, LAYER, "never-stored")
        assert httpx.delete(f"{datastore}/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}").status_code == 204
    assert backend.keys() == [f"layers/{NS}/{LAYER}/{RUN_B}/1/plan.json", f"layers/{NS}/other/{RUN_A}/1/plan.json"]
    if backend.name == "filesystem":  # no empty directories left behind; the layer's other run keeps its own
        assert not (backend.data_dir / "layers" / NS / LAYER / RUN_A).exists()
        assert (backend.data_dir / "layers" / NS / LAYER / RUN_B / "1").is_dir()


def test_a_run_stored_again_after_its_deletion_is_served(backend: Backend, datastore: str) -> None:
    with DatastoreClient(datastore) as client:
        store_run_a(client)
        client.delete_run(NS, LAYER, RUN_A)
        client.put_plan(NS, LAYER, RUN_A, 1, "json", b'{"again": true}')
        assert client.get_plan(NS, LAYER, RUN_A, None, "json") == b'{"again": true}'
    assert backend.run_keys(RUN_A) == [f"layers/{NS}/{LAYER}/{RUN_A}/1/plan.json"]


BAD = ["..", "%2e%2e", "..%2Fapp", "a%2Fb", ".", "a..b", "Bad", "-x", "x_y", "x%0A"]


def test_bad_segments_are_400_and_delete_nothing(backend: Backend, datastore: str) -> None:
    with DatastoreClient(datastore) as client:
        store_run_a(client)
        store_others(client)
        with pytest.raises(DatastoreError) as refused:  # the client never sends a dot segment
            client.delete_run(NS, LAYER, "..")
        assert refused.value.status_code == 400
        with pytest.raises(DatastoreError, match="run 'App-pr-7' is invalid") as named:
            client.delete_run(NS, LAYER, "App-pr-7")
        assert named.value.status_code == 400
    before = backend.keys()
    host, port = urlsplit(datastore).hostname or "127.0.0.1", urlsplit(datastore).port
    statuses: dict[str, int] = {}
    for position in range(3):  # namespace, layer, run
        for value in BAD:
            segments = [NS, LAYER, RUN_A]
            segments[position] = value
            path = "/api/v1/layers/{}/{}/runs/{}".format(*segments)
            # http.client sends the path as written (httpx would resolve '..' and '.' before sending).
            connection = http.client.HTTPConnection(host, port, timeout=30)
            try:
                connection.request("DELETE", path)
                response = connection.getresponse()
                response.read()
            finally:
                connection.close()
            statuses[path] = response.status
    assert set(statuses.values()) == {400}, {path: status for path, status in statuses.items() if status != 400}
    assert backend.keys() == before and len(before) == RUN_A_OBJECTS + 2


class _Tokens:
    """Bearer tokens mapped to principals, as the TokenReview and the runner pod binding would resolve them
    (test_auth_matrix.py covers the real resolution)."""

    def __init__(self, principals: dict[str, Principal]) -> None:
        self.principals = principals

    async def authenticate(self, token: str) -> Principal:
        try:
            return self.principals[token]
        except KeyError:
            raise Unauthenticated("unknown token") from None


def test_only_an_admin_may_delete_a_run_not_even_its_own_runner(backend: Backend, tmp_path: Path) -> None:
    with running_datastore(backend.data_dir, storage=backend.storage) as url, DatastoreClient(url) as client:
        store_run_a(client)  # auth off here: the seeding is not under test
    own_runner = Principal(
        "system:serviceaccount:default:burrito-py-runner", runner=RunnerScope(NS, LAYER, RUN_A, NS, "repo", 1)
    )
    tokens = _Tokens({
        "admin": Principal("system:serviceaccount:burrito-py:burrito-py-controllers", admin=True),
        "own-runner": own_runner,
        "stranger": Principal("system:serviceaccount:default:someone"),
    })
    app = create_app(backend.storage, DatastoreSettings(data_dir=tmp_path), authenticator=tokens)

    async def delete(token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ds") as http_:
            return await http_.delete(f"/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}", headers=headers)

    refused = asyncio.run(delete("own-runner"))
    assert refused.status_code == 403
    assert "may not delete a run's artifacts" in refused.json()["error"] and RUN_A in refused.json()["error"]
    assert asyncio.run(delete("stranger")).status_code == 403
    assert asyncio.run(delete(None)).status_code == 401
    assert asyncio.run(delete("forged")).status_code == 401
    assert len(backend.run_keys(RUN_A)) == RUN_A_OBJECTS
    assert asyncio.run(delete("admin")).status_code == 204
    assert backend.run_keys(RUN_A) == []


def test_deleting_decrypts_nothing(backend: Backend) -> None:
    """Objects written with a key the datastore no longer holds cannot be read, and are deleted all the same."""
    old = EncryptedStorage(backend.storage, Keyring({"old": os.urandom(32)}, "old"))
    with running_datastore(backend.data_dir, storage=old) as url, DatastoreClient(url) as client:
        store_run_a(client)
    new = EncryptedStorage(backend.storage, Keyring({"new": os.urandom(32)}, "new"))
    with running_datastore(backend.data_dir, storage=new) as url, DatastoreClient(url) as client:
        unreadable = httpx.get(f"{url}/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}/inputs")
        assert unreadable.status_code == 500 and "not configured" in unreadable.json()["error"]
        client.delete_run(NS, LAYER, RUN_A)
    assert backend.run_keys(RUN_A) == []


class _FlakyDeletes:
    """A real S3 client whose DeleteObjects calls are recorded, and which reports chosen keys as not deleted,
    as S3 does for each key it could not delete (the call itself succeeds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batches: list[int] = []
        self.refuse: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        objects = kwargs["Delete"]["Objects"]
        self.batches.append(len(objects))
        kept = [o for o in objects if o["Key"] not in self.refuse]
        response: dict[str, Any] = {}
        if kept:
            response = self.inner.delete_objects(**{**kwargs, "Delete": {**kwargs["Delete"], "Objects": kept}})
        errors = [{"Key": o["Key"], "Code": "InternalError", "Message": "injected"}
                  for o in objects if o["Key"] in self.refuse]
        return {**response, "Errors": [*response.get("Errors", []), *errors]}


def test_s3_deletes_in_batches_and_objects_it_could_not_delete_are_a_503_a_retry_finishes(
    s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3, "DELETE_BATCH", 4)  # 15 keys: batches of 4, 4, 4 and 3
    client = _FlakyDeletes(make_client(endpoint_url=s3_bucket.endpoint, path_style=True))
    storage = S3Storage(client, s3_bucket.name, "burrito")
    stuck = f"burrito/layers/{NS}/{LAYER}/{RUN_A}/2/plan.bin"
    with running_datastore(tmp_path / "unused", storage=storage) as url, DatastoreClient(url) as store:
        store_run_a(store)
        store_others(store)
        client.refuse.add(stuck)
        response = httpx.delete(f"{url}/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}")
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert "1 of 15 objects could not be deleted" in error and f"{RUN_A}/2/plan.bin (InternalError)" in error
        assert client.batches == [4, 4, 4, 3]
        left = s3_bucket.keys()
        assert [key for key in left if f"/{LAYER}/{RUN_A}/" in key] == [stuck]
        with pytest.raises(DatastoreError, match="unavailable"):  # the client retries, then reports it
            store.delete_run(NS, LAYER, RUN_A)

        client.refuse.clear()
        store.delete_run(NS, LAYER, RUN_A)
        assert sorted(s3_bucket.keys()) == [f"burrito/layers/{NS}/{LAYER}/{RUN_B}/1/plan.json",
                                            f"burrito/layers/{NS}/other/{RUN_A}/1/plan.json"]


def test_a_backend_that_cannot_be_listed_is_a_500_like_every_route(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    missing = S3Storage(make_client(endpoint_url=s3_bucket.endpoint, path_style=True), "no-such-bucket-here")
    with running_datastore(tmp_path / "unused", storage=missing) as url:
        assert httpx.get(f"{url}/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}/inputs").status_code == 500
        assert httpx.delete(f"{url}/api/v1/layers/{NS}/{LAYER}/runs/{RUN_A}").status_code == 500


def test_filesystem_names_what_it_could_not_delete_and_deletes_the_rest(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path)
    keys = [f"layers/{NS}/{LAYER}/{RUN_A}/1/plan.json", f"layers/{NS}/{LAYER}/{RUN_A}/1/run.log"]
    for key in keys:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"x")
    blocked = f"layers/{NS}/{LAYER}/{RUN_A}/inputs.json"
    (tmp_path / blocked / "in-the-way").mkdir(parents=True)  # a directory where a file is expected
    with pytest.raises(DeleteFailed, match=f"1 of 3 objects could not be deleted: {blocked} "):
        asyncio.run(storage.delete_many([*keys, blocked]))
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not (tmp_path / keys[0]).parent.exists() and (tmp_path / blocked).is_dir()
