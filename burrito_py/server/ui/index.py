"""The layers the UI lists, kept by one list-and-watch per server process (per managed namespace when the server's
`namespaces` setting confines it): the layers page filters, sorts and pages 10,000 layers without reading them all
from the API on each request, and the same watch feeds the pages' live updates (server-sent events) to every
browser. Detail pages and actions read the API directly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from burrito_py.kube.client import Body, Kube, KubeError, crd_path
from burrito_py.server.ui.queries import LayerRow, layer_row

log = logging.getLogger(__name__)
RETRY_SECONDS = 2.0
SYNC_SECONDS = 30.0


class LayerIndex:
    def __init__(self, kube: Kube, namespaces: Sequence[str]) -> None:
        self.kube = kube
        self.scopes: list[str | None] = list(sorted(namespaces)) or [None]
        self.rows: dict[tuple[str, str], LayerRow] = {}
        self.bodies: dict[tuple[str, str], Body] = {}
        self._synced = {scope: asyncio.Event() for scope in self.scopes}
        self._subscribers: set[asyncio.Queue[tuple[str, str]]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def ready(self) -> None:
        """Started on first use (in the server's event loop); waits for every scope's first list."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._follow(scope), name=f"ui-layers-{scope}") for scope in self.scopes]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._synced.values())), SYNC_SECONDS)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[tuple[str, str]]]:
        """A queue of (namespace, name) of each layer changed from now on."""
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(maxsize=10_000)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def _publish(self, key: tuple[str, str]) -> None:
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):  # a stalled browser misses updates, never blocks others
                queue.put_nowait(key)

    def _store(self, layer: Body) -> tuple[str, str]:
        key = (layer["metadata"]["namespace"], layer["metadata"]["name"])
        self.bodies[key], self.rows[key] = layer, layer_row(layer)
        return key

    async def _follow(self, scope: str | None) -> None:
        resource = crd_path("terraformlayers", scope)
        while True:
            try:
                items, version = await self.kube.list_versioned(resource)
                fresh = {self._store(item) for item in items}
                for key in [k for k in self.rows if (scope is None or k[0] == scope) and k not in fresh]:
                    self.rows.pop(key, None)
                    self.bodies.pop(key, None)
                    self._publish(key)
                self._synced[scope].set()
                while True:  # watch until the API ends the stream, then again from the last version seen
                    version = await self._watch(resource, version)
            except asyncio.CancelledError:
                raise
            except _Expired:
                continue  # relist at once
            except Exception as exc:  # the API down or refusing: keep what we have, try again
                log.warning("UI: watching layers%s failed: %s", f" of {scope}" if scope else "", exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def _watch(self, resource: str, version: str) -> str:
        async for event in self.kube.watch(resource, version, timeout_seconds=240):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise _Expired if obj.get("code") == 410 else KubeError(int(obj.get("code") or 0), "", str(obj))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                self.rows.pop(key, None)
                self.bodies.pop(key, None)
            else:
                key = self._store(obj)
            self._publish(key)
        return version


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""
