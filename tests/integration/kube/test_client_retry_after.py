"""The controllers' Kubernetes client over HTTP: an answer kube-apiserver gives while a new CRD's storage
initializes (429 "storage is (re)initializing", Retry-After: 1) is sent again after the delay, as client-go does,
instead of failing the caller (kopf's start-up activity then waited 60 s; the emulator never answers so)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from burrito_py.kube.client import RETRY_AFTER_ATTEMPTS, Kube, KubeError

INITIALIZING = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests",
                "message": "storage is (re)initializing", "code": 429, "details": {"retryAfterSeconds": 1}}


class Server:
    def __init__(self, refusals: int, retry_after: str | None = "1") -> None:
        self.refusals, self.retry_after = refusals, retry_after
        self.requests: list[tuple[str, float]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, time.monotonic()))
        if len(self.requests) <= self.refusals:
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return web.json_response(INITIALIZING, status=429, headers=headers)
        return web.json_response({"kind": "List", "items": [{"metadata": {"name": "p"}}]})


Serve = Callable[[Server], Awaitable[Kube]]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[[Server], Awaitable[Kube]]]:
    runners: list[web.AppRunner] = []

    async def start(server: Server) -> Kube:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", server.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        return await Kube.connect(str(kubeconfig))

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_storage_initializing_answer_is_retried_after_its_delay(serve: Serve) -> None:
    server = Server(refusals=2)
    kube = await serve(server)
    try:
        items = await kube.list("/apis/terraform.burrito-py.io/v1alpha1/clusterterraformplanpolicies")
    finally:
        await kube.close()
    assert [i["metadata"]["name"] for i in items] == ["p"]
    times = [t for _, t in server.requests]
    assert len(times) == 3
    assert all(later - earlier >= 0.95 for earlier, later in itertools.pairwise(times))


async def test_a_write_is_retried_too_the_server_did_not_process_it(serve: Serve) -> None:
    server = Server(refusals=1)
    kube = await serve(server)
    try:
        await kube.create("/api/v1/namespaces/x/configmaps", {"metadata": {"name": "c"}})
    finally:
        await kube.close()
    assert [m for m, _ in server.requests] == ["POST", "POST"]


async def test_without_retry_after_the_refusal_reaches_the_caller(serve: Serve) -> None:
    server = Server(refusals=1, retry_after=None)
    kube = await serve(server)
    try:
        with pytest.raises(KubeError) as refused:
            await kube.list("/api/v1/pods")
    finally:
        await kube.close()
    assert refused.value.status == 429 and "storage is (re)initializing" in refused.value.message
    assert len(server.requests) == 1


async def test_the_retries_are_bounded(serve: Serve) -> None:
    server = Server(refusals=100, retry_after="0")
    kube = await serve(server)
    try:
        with pytest.raises(KubeError):
            await kube.list("/api/v1/pods")
    finally:
        await kube.close()
    assert len(server.requests) == RETRY_AFTER_ATTEMPTS + 1
