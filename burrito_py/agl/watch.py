"""Watches of the user kinds, started and stopped as definitions come and go.

Why not kopf: kopf (1.45) treats a 404 on a watch as fatal for the whole operator, and a kind stops
being served exactly when its definition is deleted (or someone deletes its CRD) — a race kopf's own
CRD observer does not always win. Here a kind that is gone simply ends its watch.

A listing the API refuses (a 403: the chart does not let the controllers read the kind) is reported to the
caller, which shows it on the definition (`Ready=False`, naming the permission), and tried again after 1 s,
2 s, 4 s, … up to 5 minutes (`retry_delay`), not every second: the permission may be granted later (a `helm
upgrade` changing RBAC restarts nothing), and the first listing that succeeds says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from burrito_py.kube.client import Kube, KubeError

__all__ = ["KindWatches", "watch_collection"]

log = logging.getLogger(__name__)
Body = dict[str, Any]
Feed = Callable[[str | None, Body], None]
Reset = Callable[[list[Body]], None]
# (collection, None when a listing succeeded, else the API's message refusing it).
Access = Callable[[str, str | None], None]
RETRY_CAP = 300.0


def retry_delay(failures: int, first: float = 1.0, cap: float = RETRY_CAP) -> float:
    """Seconds before listing again after `failures` failed tries in a row."""
    return float(min(first * 2 ** min(max(failures - 1, 0), 30), cap))


async def watch_collection(kube: Kube, collection: str, feed: Feed, reset: Reset, backoff: float = 1.0,
                           access: Access | None = None) -> None:
    """List, then watch from the list's resourceVersion, for as long as the collection is served.

    Every (re)list hands the full listing to `reset` (objects deleted while we were not watching are
    dropped); each event goes to `feed` (`None` type for listed objects is not used: `reset` has them).
    `access` hears whether each listing was allowed; failures back off from `backoff` to 5 minutes."""
    failures = 0
    while True:
        try:
            listing = await kube.get(collection)
            if listing is None:
                return  # no longer served
            failures = 0
            if access is not None:
                access(collection, None)
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
            failures += 1
            if error.status == 403 and access is not None:
                access(collection, error.message or str(error))
            delay = retry_delay(failures, backoff)
            log.warning("watch of %s failed (%s); listing again in %gs", collection, error, delay)
            await asyncio.sleep(delay)
        except Exception:
            failures += 1
            delay = retry_delay(failures, backoff)
            log.exception("watch of %s failed; listing again in %gs", collection, delay)
            await asyncio.sleep(delay)


class KindWatches:
    """One watch task per served collection; `ensure`/`stop` are idempotent. Each remembers whether its last
    listing was allowed (`refusal`), and `changed` hears when that flips."""

    def __init__(self, kube: Kube, changed: Callable[[str], None] | None = None) -> None:
        self._kube = kube
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._refused: dict[str, str] = {}  # collection → the API's message refusing its listing
        self._answered: dict[str, asyncio.Event] = {}  # set once a listing was tried
        self._changed = changed

    def _access(self, collection: str, refusal: str | None) -> None:
        before = self._refused.get(collection)
        if refusal is None:
            self._refused.pop(collection, None)
        else:
            self._refused[collection] = refusal
        self._answered.setdefault(collection, asyncio.Event()).set()
        if before != refusal and self._changed is not None:
            self._changed(collection)

    def ensure(self, collection: str, feed: Feed, reset: Reset) -> None:
        task = self._tasks.get(collection)
        if task is not None and not task.done():
            return
        self._answered.setdefault(collection, asyncio.Event())
        self._tasks[collection] = asyncio.create_task(
            watch_collection(self._kube, collection, feed, reset, access=self._access),
            name=f"agl-watch:{collection}")

    async def answered(self, collections: list[str]) -> None:
        """Wait until each collection's first listing was tried, allowed or refused (the caller bounds the wait)."""
        for collection in collections:
            event = self._answered.get(collection)
            if event is not None:
                await event.wait()

    def refusal(self, collections: list[str]) -> str | None:
        """The API's message refusing one of these collections' listing, None when none is refused."""
        return next((self._refused[c] for c in collections if c in self._refused), None)

    async def stop(self, collection: str) -> None:
        self._refused.pop(collection, None)
        self._answered.pop(collection, None)
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
