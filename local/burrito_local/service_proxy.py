"""kube-proxy for the local kubelet: a TCP listener on each Service's clusterIP:port (loopback addresses),
forwarding every connection to a Ready endpoint, round-robin. A port with no Ready endpoint has no
listener, so a client gets "connection refused", as kube-proxy's REJECT rule gives it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from burrito_local.workloads import ready_backends

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Address = tuple[str, int]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


class _Port:
    def __init__(self, address: Address) -> None:
        self.address = address
        self.backends: list[Address] = []
        self._turn = itertools.count()
        self.server: asyncio.Server | None = None
        # The connections being forwarded: held here, since the loop keeps only weak references to tasks (a
        # closed port's connection task was collected mid-transfer: "Task was destroyed but it is pending!"),
        # and cancelled when the port closes, as kube-proxy's removed rule ends them.
        self.connections: set[asyncio.Task[None]] = set()

    def pick(self) -> list[Address]:
        """The backends in this connection's round-robin order (the next ones serve as fallbacks)."""
        if not self.backends:
            return []
        start = next(self._turn) % len(self.backends)
        return self.backends[start:] + self.backends[:start]

    async def serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
        try:
            for backend in self.pick():
                try:
                    reader, writer = await asyncio.open_connection(*backend)
                except OSError:
                    continue
                try:
                    await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
                finally:
                    writer.close()
                break
        finally:
            client_writer.close()
            if task is not None:
                self.connections.discard(task)


class ServiceProxy:
    def __init__(self) -> None:
        self._ports: dict[Address, _Port] = {}

    async def sync(self, services: Iterable[Mapping[str, Any]],
                   endpoints: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        wanted: dict[Address, list[Address]] = {}
        for service in services:
            meta, spec = service["metadata"], service.get("spec") or {}
            ip = spec.get("clusterIP")
            if not ip or ip == "None":
                continue
            for port in spec.get("ports") or ():
                if str(port.get("protocol", "TCP")) != "TCP":
                    continue
                backends = ready_backends(endpoints.get((meta.get("namespace", ""), meta["name"])),
                                          str(port.get("name") or ""))
                wanted[(ip, int(port["port"]))] = backends
        for address in [a for a in self._ports if not wanted.get(a)]:
            await self._close(self._ports.pop(address))
        for address, backends in wanted.items():
            if not backends:
                continue
            port = self._ports.get(address)
            if port is None:
                port = _Port(address)
                try:
                    port.server = await asyncio.start_server(port.serve, *address, reuse_address=True)
                except OSError as exc:
                    log.warning("service proxy: cannot listen on %s:%s: %s", *address, exc)
                    continue
                self._ports[address] = port
            port.backends = backends

    @staticmethod
    async def _close(port: _Port) -> None:
        if port.server is not None:
            port.server.close()
        connections = list(port.connections)
        for task in connections:
            task.cancel()
        if connections:
            await asyncio.gather(*connections, return_exceptions=True)
        if port.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(port.server.wait_closed(), 0.5)

    async def close(self) -> None:
        for port in self._ports.values():
            await self._close(port)
        self._ports.clear()
