"""The local kubelet's informer asks a silent watch again (local/burrito_local/kube_client.py): a watch that stopped
delivering without ending held a node's new pod back until the server's timeoutSeconds (300 s), Pending for no
reason. Here a server whose first watch says nothing and never ends: the informer asks again, from the version it
had, after its idle time, and sees the pod the second watch carries; no relisting, nothing logged as a failure."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from burrito_local.kube_client import Informer, KubeHttp

POD = {"metadata": {"name": "runner-1", "namespace": "team-a", "uid": "u1", "resourceVersion": "12"}}


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

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    events: list[tuple[str, Any]] = []
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        informer = Informer(KubeHttp(kubeconfig, session), "/api/v1/pods",
                            lambda kind, obj: events.append((kind, obj["metadata"]["name"])), idle=0.3)
        task = asyncio.create_task(informer.run())
        try:
            for _ in range(100):
                if events:
                    break
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    await runner.cleanup()
    assert events == [("ADDED", "runner-1")]
    watches = [q for q in seen if q.get("watch") == "true"]
    assert [q["resourceVersion"] for q in watches[:2]] == ["10", "10"]  # asked again from where it was
    assert len([q for q in seen if q.get("watch") != "true"]) == 1  # listed once
    assert informer.quiet >= 1 and "quiet" not in caplog.text and "failed" not in caplog.text
