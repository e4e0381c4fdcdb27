"""The local kubelet's informer asks a silent watch again (local/burrito_local/kube_client.py): a watch that stopped
delivering without ending held a node's new pod back until the server's timeoutSeconds (300 s), Pending for no
reason. Here a server whose first watch says nothing and never ends: the informer asks again, from the version it
had, after its idle time, and sees the pod the second watch carries; no relisting, nothing logged as a failure."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from burrito_local.kube_client import Informer, KubeHttp

POD = {"metadata": {"name": "runner-1", "namespace": "team-a", "uid": "u1", "resourceVersion": "12"}}


@contextlib.asynccontextmanager
async def serving(pods: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  tmp_path: Path) -> AsyncIterator[KubeHttp]:
    """`pods` as the API's /api/v1/pods on loopback, and a KubeHttp for it."""
    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, shutdown_timeout=0.5)  # its handlers never end on their own
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            yield KubeHttp(kubeconfig, session)
    finally:
        await runner.cleanup()


async def run_until(informer: Informer, done: Callable[[], bool]) -> None:
    """Run the informer until `done()` or 5 seconds, then stop it."""
    task = asyncio.create_task(informer.run())
    try:
        deadline = asyncio.get_running_loop().time() + 5.0
        while not done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_silent_watch_is_asked_again_from_its_version(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[dict[str, str]] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        seen.append(query)
        if query.get("watch") != "true":
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": []})
        response = web.StreamResponse()
        await response.prepare(request)
        if len([q for q in seen if q.get("watch") == "true"]) == 1:
            await asyncio.sleep(3600)  # open, and silent: the stall
        await response.write(json.dumps({"type": "ADDED", "object": POD}).encode() + b"\n")
        await asyncio.sleep(3600)
        return response

    events: list[tuple[str, Any]] = []
    async with serving(pods, tmp_path) as http:
        informer = Informer(http, "/api/v1/pods", lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
                            idle=0.3)
        await run_until(informer, lambda: bool(events))
    assert events == [("ADDED", "runner-1")]
    watches = [q for q in seen if q.get("watch") == "true"]
    assert [q["resourceVersion"] for q in watches[:2]] == ["10", "10"]  # asked again from where it was
    assert len([q for q in seen if q.get("watch") != "true"]) == 1  # listed once
    assert informer.quiet >= 1 and "quiet" not in caplog.text and "failed" not in caplog.text


async def test_a_pod_no_watch_delivered_is_found_by_the_next_listing(tmp_path: Path) -> None:
    """A watch that keeps talking (bookmarks) but never delivers the pod: the kubelet's informer lists again after
    its `relist` time and starts what the listing holds."""
    listings: list[int] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            listings.append(1)
            items = [POD] if len(listings) > 1 else []  # the second listing holds it
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": items})
        response = web.StreamResponse()
        await response.prepare(request)
        bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}}
        for _ in range(int(request.query["timeoutSeconds"]) * 10):
            await response.write(json.dumps(bookmark).encode() + b"\n")
            await asyncio.sleep(0.1)
        return response

    events: list[tuple[str, Any]] = []
    async with serving(pods, tmp_path) as http:
        informer = Informer(http, "/api/v1/pods", lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
                            idle=0.5, relist=1.0)
        await run_until(informer, lambda: bool(events))
    assert events == [("ADDED", "runner-1")]
    assert len(listings) == 2 and informer.quiet == 0
