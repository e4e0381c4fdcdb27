"""The hot GETs (`_HotReads`, docs/architecture.md §10.7) answer exactly as FastAPI's routes do: the same status,
body and headers for every shape of request, good and bad (tokens, schemes, names, attempt numbers, queries),
against the same storage with the hot path on and off."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from burrito_py.datastore.app import DatastoreSettings, _HotReads, create_app
from burrito_py.datastore.auth import AuthUnavailable, Principal, RunnerScope, Unauthenticated
from burrito_py.datastore.storage import FilesystemStorage

ADMIN = Principal("system:serviceaccount:burrito-py:burrito-py-controllers", admin=True)
OWN = Principal("system:serviceaccount:default:burrito-py-runner",
                runner=RunnerScope("default", "app", "app-plan-1", "default", "repo", 1))
OTHER = Principal("system:serviceaccount:default:burrito-py-runner",
                  runner=RunnerScope("default", "other", "other-plan-1", "default", "repo", 1))


class Tokens:
    async def authenticate(self, token: str) -> Principal:
        if token == "down":
            raise AuthUnavailable("API unreachable")
        known = {"admin": ADMIN, "own": OWN, "other": OTHER}
        if token not in known:
            raise Unauthenticated("invalid bearer token")
        return known[token]


def _app(data: Path, hot: bool, answered: list[str]) -> FastAPI:
    """The app; `hot` False: without the hot path (every GET through FastAPI). `answered` gets the path of every
    request the hot path answered."""
    app = create_app(FilesystemStorage(data), DatastoreSettings(data_dir=data, auth_enabled=True),
                     authenticator=Tokens())
    (middleware,) = [m for m in app.user_middleware if m.cls is _HotReads]
    read: list[Any] = middleware.kwargs["read"]  # type: ignore[attr-defined]
    if not hot:
        read.clear()
        return app
    inner = read[0]

    async def counted(*args: Any) -> Any:
        answered.append("/".join(args[1:4]))
        return await inner(*args)

    read[0] = counted
    return app


BASE = "/api/v1/layers/default/app/runs/app-plan-1"
PATHS = [
    f"{BASE}/plan", f"{BASE}/plan?format=json", f"{BASE}/plan?format=bin", f"{BASE}/plan?format=pretty",
    f"{BASE}/plan?format=short", f"{BASE}/plan?format=xml", f"{BASE}/plan?format=", f"{BASE}/plan?format=json&x=1",
    f"{BASE}/plan?format=bin&format=json", f"{BASE}/plan?x=1",
    f"{BASE}/attempts/1/plan", f"{BASE}/attempts/1/plan?format=short", f"{BASE}/attempts/01/plan",
    f"{BASE}/attempts/2/plan", f"{BASE}/attempts/1000000/plan", f"{BASE}/attempts/1000001/plan",
    f"{BASE}/attempts/99999999/plan", f"{BASE}/attempts/-1/plan", f"{BASE}/attempts/x/plan",
    f"{BASE}/attempts/1/logs", f"{BASE}/attempts/1/logs?format=json", f"{BASE}/attempts/3/logs",
    "/api/v1/layers/Default/app/runs/app-plan-1/plan", "/api/v1/layers/default/a..b/runs/app-plan-1/plan",
    f"/api/v1/layers/default/{'a' * 253}/runs/r/plan", f"/api/v1/layers/default/{'a' * 254}/runs/r/plan",
    "/api/v1/layers/default/app/runs/nothing-here/plan", "/api/v1/layers/default/other/runs/other-plan-1/plan",
    f"{BASE}/plan/", f"{BASE}/attempts/1/plan/",
]
HEADERS: list[dict[str, str]] = [
    {}, {"Authorization": "Bearer admin"}, {"Authorization": "bearer own"}, {"Authorization": "Bearer other"},
    {"Authorization": "Bearer nobody"}, {"Authorization": "Bearer down"}, {"Authorization": "Basic YTpiOmM="},
    {"Authorization": "Bearer "}, {"Authorization": "Bearer  own  "}, {"X-Burrito-Py-Authorization": "Bearer own"},
    {"Authorization": "Basic YTpi", "X-Burrito-Py-Authorization": "Bearer admin"},
    {"Authorization": "Bearer nobody", "X-Burrito-Py-Authorization": "Bearer admin"},
]


ANSWERED: list[str] = []


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> tuple[FastAPI, FastAPI]:
    data = tmp_path_factory.mktemp("hot") / "data"
    hot, usual = _app(data, True, ANSWERED), _app(data, False, [])
    admin = {"Authorization": "Bearer admin"}

    async def seed() -> None:
        async with _client(usual) as http:
            for fmt, body in {"json": b'{"p": 1}', "bin": b"\x00bin", "pretty": b"pretty\n", "short": b"short"}.items():
                response = await http.put(f"{BASE}/attempts/1/plan?format={fmt}", content=body, headers=admin)
                assert response.status_code == 201
            assert (await http.put(f"{BASE}/attempts/1/logs", content=b"log\n", headers=admin)).status_code == 201

    asyncio.run(seed())
    return hot, usual


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://datastore")


@pytest.mark.parametrize("path", PATHS)
def test_the_hot_path_answers_as_the_routes_do(apps: tuple[FastAPI, FastAPI], path: str) -> None:
    async def compare() -> None:
        async with _client(apps[0]) as hot, _client(apps[1]) as usual:
            for headers in HEADERS:
                got, want = await hot.get(path, headers=headers), await usual.get(path, headers=headers)
                assert (got.status_code, got.content, dict(got.headers)) == \
                    (want.status_code, want.content, dict(want.headers)), (path, headers)

    asyncio.run(compare())


def test_the_hot_path_is_taken(apps: tuple[FastAPI, FastAPI]) -> None:
    """Not vacuous: the canonical shapes are answered by the hot path, the others by FastAPI."""
    async def get(path: str) -> int:
        ANSWERED.clear()
        async with _client(apps[0]) as http:
            assert (await http.get(path, headers={"Authorization": "Bearer admin"})).status_code in (200, 400, 404, 422)
        return len(ANSWERED)

    async def check() -> None:
        for path in (f"{BASE}/plan", f"{BASE}/plan?format=bin", f"{BASE}/attempts/1/plan?format=short",
                     f"{BASE}/attempts/1/logs", f"{BASE}/attempts/2/plan", "/api/v1/layers/Default/app/runs/r/plan"):
            assert await get(path) == 1, path
        for path in (f"{BASE}/plan?format=json&x=1", f"{BASE}/attempts/01/plan", f"{BASE}/attempts/1/logs?x=1",
                     f"{BASE}/attempts/1000001/plan", f"/api/v1/layers/default/{'a' * 254}/runs/r/plan"):
            assert await get(path) == 0, path

    asyncio.run(check())
