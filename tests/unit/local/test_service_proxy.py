"""The local kube-proxy (local/burrito_local/service_proxy.py): a Service port whose endpoints go away closes, and
the connections it was forwarding end with it, cleanly. Before, such a connection's task was left to the garbage
collector mid-transfer, and `burrito-py dev` printed asyncio's "Task was destroyed but it is pending!" in the
middle of the user's terminal."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket

import pytest
from burrito_local.service_proxy import ServiceProxy


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def service(port: int) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": "svc"},
            "spec": {"clusterIP": "127.0.0.1", "ports": [{"name": "http", "port": port}]}}


def endpoints(backend: int | None) -> dict[tuple[str, str], dict[str, object]]:
    if backend is None:
        return {}
    return {("ns", "svc"): {"subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                          "ports": [{"name": "http", "port": backend}]}]}}


def test_a_closed_port_ends_the_connections_it_forwarded_without_a_destroyed_task(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bytes:
        async def echo_hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(5))
            await writer.drain()
            await reader.read()  # hold the connection open until the client goes

        backend = await asyncio.start_server(echo_hold, "127.0.0.1", 0)
        backend_port = backend.sockets[0].getsockname()[1]
        proxy, port = ServiceProxy(), free_loopback_port()
        await proxy.sync([service(port)], endpoints(backend_port))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
        await proxy.sync([service(port)], endpoints(None))  # the endpoint is no longer ready: the port closes
        rest = await asyncio.wait_for(reader.read(), 5)  # the client sees the connection end
        writer.close()
        gc.collect()
        await asyncio.sleep(0.05)
        await proxy.close()
        backend.close()
        await backend.wait_closed()
        return rest

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        assert asyncio.run(scenario()) == b""
        gc.collect()
    assert not [r for r in caplog.records if "Task was destroyed" in r.getMessage()], caplog.text
