"""Watches of the user kinds, started and stopped as definitions come and go.

Why not kopf: kopf (1.45) treats a 404 on a watch as fatal for the whole operator, and a kind stops
being served exactly when its definition is deleted (or someone deletes its CRD) — a race kopf's own
CRD observer does not always win. Here a kind that is gone simply ends its watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from burrito_py.controllers.kube import Kube, KubeError

__all__ = ["KindWatches", "watch_collection"]

log = logging.getLogger(__name__)
Body = dict[str, Any]
Feed = Callable[[str | None, Body], None]
Reset = Callable[[list[Body]], None]


async def watch_collection(kube: Kube, collection: str, feed: Feed, reset: Reset, backoff: float = 1.0) -> None:
    """List, then watch from the list's resourceVersion, for as long as the collection is served.

    Every (re)list hands the full listing to `reset` (objects deleted while we were not watching are
    dropped); each event goes to `feed` (`None` type for listed objects is not used: `reset` has them)."""
    while True:
        try:
            listing = await kube.get(collection)
            if listing is None:
                return  # no longer served
            reset(list(listing.get("items") or ()))
            version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
            while True:
                expired = False
                async for event in kube.watch(collection, version):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        expired = True  # 410 Expired (or any error): list again
                        break
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        feed(kind, obj)
                if expired:
                    break
        except asyncio.CancelledError:
            raise
        except KubeError as error:
            if error.status == 404:
                return
            log.warning("watch of %s failed (%s); listing again", collection, error)
            await asyncio.sleep(backoff)
        except Exception:
            log.exception("watch of %s failed; listing again", collection)
            await asyncio.sleep(backoff)


class KindWatches:
    """One watch task per served collection; `ensure`/`stop` are idempotent."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def ensure(self, collection: str, feed: Feed, reset: Reset) -> None:
        task = self._tasks.get(collection)
        if task is not None and not task.done():
            return
        self._tasks[collection] = asyncio.create_task(watch_collection(self._kube, collection, feed, reset),
                                                      name=f"agl-watch:{collection}")

    async def stop(self, collection: str) -> None:
        task = self._tasks.pop(collection, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_all(self) -> None:
        for collection in list(self._tasks):
            await self.stop(collection)

    def __contains__(self, collection: str) -> bool:
        task = self._tasks.get(collection)
        return task is not None and not task.done()
