"""The read cache (docs/architecture.md §10.8) over real HTTP: this process's own writes, the controllers' rewrites
and deletes are seen at once on both backends, and a cache hit is authorized exactly as a miss (real tokens, real
TokenReviews)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from burrito_py.datastore.in_process import running_datastore
from burrito_py.datastore.storage import FilesystemStorage, Storage
from tests.integration.datastore.auth_platform import NS, AuthPlatform, running_auth_platform
from tests.integration.datastore.conftest import S3Bucket

RUN = "/api/v1/layers/default/app/runs/app-plan-5"
# Long enough that anything seen below within it came from an invalidation, never from an expiry.
FOREVER = {"read_cache_ttl_seconds": 3600.0}


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _behind_its_back(storage: Storage, key: str, data: bytes) -> None:
    """Another replica's write: straight to the backend, never through this datastore."""
    asyncio.run(storage.put(key, _once(data), 1 << 20))


@pytest.fixture(params=["filesystem", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "filesystem":
        return FilesystemStorage(tmp_path / "data")
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return bucket.storage()


def test_own_writes_rewrites_and_deletes_are_seen_at_once(backend: Storage, tmp_path: Path):
    with running_datastore(tmp_path / "data", storage=backend, **FOREVER) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        assert http.put(f"{RUN}/attempts/1/plan?format=json", content=b'{"attempt": 1}').status_code == 201
        for _ in range(2):  # the second one from the cache
            assert http.get(f"{RUN}/plan?format=json").content == b'{"attempt": 1}'
        _behind_its_back(backend, "layers/default/app/app-plan-5/1/plan.json", b'{"another replica": 1}')
        assert http.get(f"{RUN}/plan?format=json").content == b'{"attempt": 1}'  # held: the TTL's staleness

        # A new attempt: the run's listing is dropped with the write, so "latest" moves at once.
        assert http.put(f"{RUN}/attempts/2/plan?format=json", content=b'{"attempt": 2}').status_code == 201
        assert http.get(f"{RUN}/plan?format=json").content == b'{"attempt": 2}'

        # The controllers rewrite an attempt's object (the log they collect after an interrupted upload).
        assert http.put(f"{RUN}/attempts/2/logs", content=b"cut off").status_code == 201
        assert http.get(f"{RUN}/attempts/2/logs").content == b"cut off"
        assert http.put(f"{RUN}/attempts/2/logs", content=b"the whole log\n").status_code == 201
        got = http.get(f"{RUN}/attempts/2/logs")
        assert got.content == b"the whole log\n"
        assert got.headers["x-burrito-sha256"] == hashlib.sha256(b"the whole log\n").hexdigest()
        head = http.head(f"{RUN}/attempts/2/plan?format=json")
        assert head.headers["x-burrito-sha256"] == hashlib.sha256(b'{"attempt": 2}').hexdigest()

        # The run thrown away: every cached object and its listing go with it.
        assert http.delete(RUN).status_code == 204
        assert http.get(f"{RUN}/plan?format=json").status_code == 404
        assert http.get(f"{RUN}/attempts/1/plan?format=json").status_code == 404
        assert http.get(f"{RUN}/attempts/2/logs").status_code == 404


def test_off_every_read_goes_to_storage(tmp_path: Path):
    backend = FilesystemStorage(tmp_path / "data")
    with running_datastore(tmp_path / "data", storage=backend, read_cache_max_bytes=0) as url, \
            httpx.Client(base_url=url, timeout=30) as http:
        http.put(f"{RUN}/attempts/1/plan?format=json", content=b"one").raise_for_status()
        assert http.get(f"{RUN}/plan?format=json").content == b"one"
        _behind_its_back(backend, "layers/default/app/app-plan-5/1/plan.json", b"two")
        assert http.get(f"{RUN}/plan?format=json").content == b"two"


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    # A TTL of an hour: what is held below stays held however slow the machine (the default 5 s could pass).
    with running_auth_platform(tmp_path_factory.mktemp("auth-cache"), **FOREVER) as p:
        yield p


HELD = {  # what the controllers seeded for run app-plan-1 (auth_platform._seed), each read on a cached route
    "/api/v1/layers/default/app/runs/app-plan-1/plan?format=json": b'{"seeded": true}',
    "/api/v1/layers/default/app/runs/app-plan-1/attempts/1/plan?format=json": b'{"seeded": true}',
    "/api/v1/layers/default/app/runs/app-plan-1/attempts/1/logs": b"seeded log\n",
    "/api/v1/layers/default/app/runs/app-plan-1/attempts/1/outputs": b'{"seeded": {"value": 1}}',
    "/api/v1/layers/default/app/runs/app-plan-1/attempts/1/review": b'{"planSum": "sha256:00"}',
}


def test_a_cache_hit_is_authorized_as_a_miss(platform: AuthPlatform):
    """The attack: another layer's runner, another run's runner of the same layer, a stranger and a forged token
    ask for app-plan-1's objects while the controllers' reads hold them in the cache. Each gets the refusal it gets
    on a miss; none gets a byte of the object."""
    controller = {"Authorization": f"Bearer {platform.admin_token}"}
    with httpx.Client(base_url=platform.url, timeout=30) as http:
        for path, body in HELD.items():
            for _ in range(2):
                response = http.get(path, headers=controller)
                assert response.status_code == 200 and response.content == body, path
        # Proof that they are held: the backend's bytes change behind the datastore's back, its answer does not.
        backend = FilesystemStorage(platform.data_dir)
        _behind_its_back(backend, "layers/default/app/app-plan-1/1/run.log", b"changed behind its back\n")
        assert http.get("/api/v1/layers/default/app/runs/app-plan-1/attempts/1/logs",
                        headers=controller).content == b"seeded log\n"

        attackers = {
            "other-layer runner": (platform.tokens["other-runner"], 403),
            "same layer, other run's runner": (platform.runner_token("app-plan-0-2"), 403),
            "stranger": (platform.tokens["stranger"], 403),
            "forged": (platform.tokens["forged"], 401),
            "previous attempt's pod": (platform.tokens["previous-attempt"], 403),
        }
        for who, (token, status) in attackers.items():
            for path, body in HELD.items():
                for header in ("Authorization", "X-Burrito-Py-Authorization"):
                    response = http.get(path, headers={header: f"Bearer {token}"})
                    assert response.status_code == status, (who, header, path, response.text)
                    assert body not in response.content and b"behind" not in response.content
        for path in HELD:
            assert http.get(path).status_code == 401  # no token at all
        # The run's own runner still reads them (from the cache).
        own = {"Authorization": f"Bearer {platform.tokens['own-runner']}"}
        assert http.get("/api/v1/layers/default/app/runs/app-plan-1/attempts/1/logs",
                        headers=own).content == b"seeded log\n"
        assert NS == "default"
