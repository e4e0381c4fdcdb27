"""The datastore over real HTTP (uvicorn on loopback), used through its client."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.datastore.app import DatastoreSettings, create_app
from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.storage import FilesystemStorage, TooLarge


@pytest.fixture
def datastore(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with running_datastore(tmp_path / "data") as url:
        yield url, tmp_path / "data"


def test_plans_round_trip_and_latest_attempt_wins(datastore: tuple[str, Path], tmp_path: Path):
    url, _ = datastore
    with DatastoreClient(url) as client:
        client.put_plan("default", "app", "app-plan-x", 1, "json", b'{"attempt": 1}')
        client.put_plan("default", "app", "app-plan-x", 2, "json", b'{"attempt": 2}')
        client.put_plan("default", "app", "app-plan-x", 2, "short", b"No changes.")
        plan_file = tmp_path / "plan.bin"
        plan_file.write_bytes(b"\x00binary plan\xff" * 1000)
        client.put_plan("default", "app", "app-plan-x", 2, "bin", plan_file)
        assert client.get_plan("default", "app", "app-plan-x", 1, "json") == b'{"attempt": 1}'
        assert client.get_plan("default", "app", "app-plan-x", None, "json") == b'{"attempt": 2}'
        assert client.get_plan("default", "app", "app-plan-x", None, "short") == b"No changes."
        dest = tmp_path / "out" / "plan.bin"
        client.download_plan("default", "app", "app-plan-x", 2, "bin", dest)
        assert dest.read_bytes() == plan_file.read_bytes()
        with pytest.raises(DatastoreError, match="app-plan-y") as missing:
            client.get_plan("default", "app", "app-plan-y", None, "json")
        assert missing.value.status_code == 404


@pytest.mark.parametrize("namespace", ["default/app/runs/other#", "default?x=", "a%2Fb", "..", "."])
def test_the_client_never_lets_a_segment_address_another_object(datastore: tuple[str, Path], namespace: str):
    """A crafted name (say, a run's spec.layer.namespace) reaches the datastore as one segment, or not at all."""
    url, _ = datastore
    with DatastoreClient(url) as client:
        client.put_logs("default", "app", "other", 1, b"another layer's log\n")
        with pytest.raises(DatastoreError) as refused:
            client.get_logs(namespace, "app", "app-plan-x", 1)
        assert refused.value.status_code == 400


def test_logs_round_trip(datastore: tuple[str, Path]):
    url, _ = datastore
    with DatastoreClient(url) as client:
        client.put_logs("default", "app", "app-plan-x", 1, b"terraform init\n")
        assert client.get_logs("default", "app", "app-plan-x", 1) == b"terraform init\n"


def test_outputs_round_trip_per_attempt_and_missing_is_404(datastore: tuple[str, Path]):
    url, data = datastore
    outputs = b'{"password": {"sensitive": true, "type": "string", "value": "s3cr3t"}}'
    with DatastoreClient(url) as client:
        client.put_outputs("default", "app", "app-apply-x", 2, outputs)
        assert client.get_outputs("default", "app", "app-apply-x", 2) == outputs
        with pytest.raises(DatastoreError, match="outputs of default/app run app-apply-x attempt 1") as missing:
            client.get_outputs("default", "app", "app-apply-x", 1)
        assert missing.value.status_code == 404
    stored = (data / "layers/default/app/app-apply-x/2/outputs.json").read_bytes()
    assert stored.endswith(outputs) and outputs not in stored[:45]  # the object's header (its sum), then the body
    response = httpx.get(f"{url}/api/v1/layers/default/app/runs/app-apply-x/attempts/2/outputs")
    assert response.headers["content-type"] == "application/json"


def test_oversized_outputs_are_413_and_leave_nothing(tmp_path: Path):
    settings = DatastoreSettings(data_dir=tmp_path, max_outputs_bytes=10, auth_enabled=False)
    app = create_app(FilesystemStorage(tmp_path), settings)

    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ds") as http:
            return await http.put("/api/v1/layers/default/app/runs/r/attempts/1/outputs", content=b"x" * 100)

    assert asyncio.run(scenario()).status_code == 413
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_sources_are_stored_once_per_tree(datastore: tuple[str, Path], tmp_path: Path):
    url, data = datastore
    archive = tmp_path / "src.tar.gz"
    archive.write_bytes(b"fake archive bytes")
    with DatastoreClient(url) as client:
        assert not client.has_tree("default", "repo", "tree1")
        client.put_source("default", "repo", "rev1", "tree1", archive)
        assert client.has_tree("default", "repo", "tree1")
        client.put_source("default", "repo", "rev2", "tree1", None)  # same tree: link only
        assert client.has_source("default", "repo", "rev2") and not client.has_source("default", "repo", "rev3")
        dest = tmp_path / "dl.tar.gz"
        client.download_source("default", "repo", "rev2", dest)
        assert dest.read_bytes() == b"fake archive bytes"
        with pytest.raises(DatastoreError, match="not stored"):
            client.put_source("default", "repo", "rev3", "tree-unknown", None)
    assert len(list((data / "sources/default/repo").glob("*.tar.gz"))) == 1


def test_everything_survives_a_restart(tmp_path: Path):
    with running_datastore(tmp_path / "data") as url, DatastoreClient(url) as client:
        client.put_plan("default", "app", "run", 1, "json", b"{}")
    with running_datastore(tmp_path / "data") as url, DatastoreClient(url) as client:
        assert client.get_plan("default", "app", "run", 1, "json") == b"{}"


@pytest.mark.parametrize(("path", "named"), [
    ("/api/v1/layers/Default/app/runs/r/attempts/1/logs", "namespace 'Default'"),
    ("/api/v1/layers/default/app.../runs/r/attempts/1/logs", "layer 'app...'"),
    ("/api/v1/repositories/default/repo/revisions/a..b/source", "revision 'a..b'"),
    # `$` matches before a trailing newline: the rules must hold for the whole segment.
    ("/api/v1/layers/default%0A/app/runs/r/attempts/1/logs", "segment 'default%0A' is invalid: it may not"),
    ("/api/v1/repositories/default/repo/revisions/abc%0A/source", "segment 'abc%0A' is invalid: it may not contain a"),
])
def test_bad_segments_are_400_naming_them(datastore: tuple[str, Path], path: str, named: str):
    url, _ = datastore
    response = httpx.get(url + path)
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]


@pytest.mark.parametrize("path", [
    "/api/v1/layers/default/..%2Fetc/runs/r/attempts/1/logs",
    "/api/v1/layers/default/app/runs/r/attempts/-1/logs",
    "/api/v1/layers/default/..%2Fetc/runs/r/attempts/1/outputs",
    "/api/v1/layers/default/app/runs/r/attempts/x/outputs",
    "/api/v1/layers/default/app/runs/r/attempts/1/plan?format=xml",
    "/api/v1/repositories/default/repo/revisions/..%2F..%2Fx/source",
])
def test_malformed_requests_are_refused_without_touching_storage(datastore: tuple[str, Path], path: str):
    url, data = datastore
    response = httpx.put(url + path, content=b"x")
    assert response.status_code in (400, 404, 405, 422), response.text
    assert [p for p in data.rglob("*") if p.is_file()] == []


def test_oversized_upload_is_413_and_leaves_nothing(tmp_path: Path):
    settings = DatastoreSettings(data_dir=tmp_path, max_log_bytes=10, auth_enabled=False)  # auth: test_auth*.py
    app = create_app(FilesystemStorage(tmp_path), settings)

    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ds") as http:
            return await http.put("/api/v1/layers/default/app/runs/r/attempts/1/logs", content=b"x" * 100)

    assert asyncio.run(scenario()).status_code == 413
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_interrupted_upload_leaves_no_object_and_no_temp_file(tmp_path: Path):
    storage = FilesystemStorage(tmp_path)

    async def broken() -> AsyncIterator[bytes]:
        yield b"half a plan"
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        asyncio.run(storage.put("layers/default/app/r/1/plan.bin", broken(), 1000))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with pytest.raises(TooLarge):
        asyncio.run(storage.put("layers/default/app/r/1/plan.bin", _chunks(b"x" * 50), 10))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


segments = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@functools.cache
def _segment_app() -> FastAPI:
    """One app for every example: building it (its routes, its OpenAPI models) took most of each example's time."""
    return create_app(FilesystemStorage(Path("/nonexistent-never-written")), DatastoreSettings(auth_enabled=False))


@settings(max_examples=60, deadline=None)
@given(segments)
def test_no_segment_ever_causes_a_server_error(segment: str):
    app = _segment_app()
    quoted = f"/api/v1/layers/default/{quote(segment, safe='')}/runs/r/attempts/1/logs"

    async def scenario() -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ds") as http:
            return (await http.get(quoted)).status_code

    assert asyncio.run(scenario()) in (200, 400, 404, 405, 422)


def test_applied_records_round_trip_and_latest_attempt_wins(datastore: tuple[str, Path]):
    """The runner's durable "this plan is applied" record (issue 11, item 4)."""
    url, data = datastore
    with DatastoreClient(url) as client:
        assert client.get_applied("default", "app", "app-apply-x") is None
        client.put_applied("default", "app", "app-apply-x", 1, "sha256:aa")
        client.put_applied("default", "app", "app-apply-x", 3, "sha256:bb")
        assert client.get_applied("default", "app", "app-apply-x") == "sha256:bb"
        assert client.get_applied("default", "app", "app-apply-y") is None
    assert (data / "layers/default/app/app-apply-x/1/applied.json").exists()


@pytest.mark.parametrize("suffix", ["%0A", "%0D", "%0D%0A", "%09", "%7F"])
def test_a_control_character_in_a_segment_is_400_not_an_alias(datastore: tuple[str, Path], suffix: str):
    """`…/plan%0A` once reached the `…/plan` route (a regex `$` matches before a final newline)."""
    url, _ = datastore
    with DatastoreClient(url) as client:
        client.put_plan("default", "app", "app-plan-x", 1, "json", b"{}")
    base = f"{url}/api/v1/layers/default/app/runs/app-plan-x/attempts/1/plan"
    assert httpx.get(base).status_code == 200
    refused = httpx.get(base + suffix)
    assert refused.status_code == 400, refused.text
    assert "control character" in refused.json()["error"]
    put = httpx.put(f"{url}/api/v1/layers/default/app{suffix}/runs/r/attempts/1/logs", content=b"x")
    assert put.status_code == 400


def test_a_declared_sum_must_match_the_body_and_be_well_formed(datastore: tuple[str, Path], tmp_path: Path):
    """X-Burrito-Sha256 on a PUT (DatastoreClient sends it): a body that does not hash to it stores nothing."""
    import hashlib

    url, _ = datastore
    plan = f"{url}/api/v1/layers/default/app/runs/sums/attempts/1/plan?format=bin"
    wrong = httpx.put(plan, content=b"tampered", headers={"X-Burrito-Sha256": hashlib.sha256(b"plan").hexdigest()})
    assert wrong.status_code == 400 and "is not the declared" in wrong.json()["error"], wrong.text
    bad = httpx.put(plan, content=b"plan", headers={"X-Burrito-Sha256": "not-a-sum"})
    assert bad.status_code == 400 and "X-Burrito-Sha256" in bad.json()["error"]
    assert httpx.get(plan).status_code == 404
    # The client declares its file's sum and length, and the datastore takes it.
    body = tmp_path / "plan.bin"
    body.write_bytes(b"p" * 3_000_000)
    with DatastoreClient(url) as client:
        assert client.put_plan("default", "app", "sums", 1, "bin", body) == \
            "sha256:" + hashlib.sha256(body.read_bytes()).hexdigest()
        assert client.get_plan("default", "app", "sums", 1, "bin") == body.read_bytes()


def test_a_port_another_server_holds_is_refused_never_answered_by_the_stranger(tmp_path: Path):
    """The port is bound before the server starts: one taken by another datastore (another test worker's, picked
    by the same free-port lottery) fails at once, rather than that stranger's /healthz answering for this one."""
    with running_datastore(tmp_path / "first") as url, httpx.Client(base_url=url) as http:
        assert http.put("/api/v1/layers/default/app/runs/r/attempts/1/logs", content=b"first's").status_code == 201
        with pytest.raises(OSError), running_datastore(tmp_path / "second", port=httpx.URL(url).port or 0):
            pytest.fail("a datastore started on a port another one holds")
        assert http.get("/api/v1/layers/default/app/runs/r/attempts/1/logs").content == b"first's"
