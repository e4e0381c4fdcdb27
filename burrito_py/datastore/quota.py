"""How many bytes a runner's next object may hold (docs/architecture.md §10.1): the format's limit, the run's
quota and the namespace's quota, whichever leaves least.

Counting. A run's stored bytes are summed from one listing of its prefix (`Storage.sizes`: file sizes on the
filesystem, `Size` from ListObjectsV2 on S3; no object is read), exact at the time of the write. A namespace's
total (its runs' objects under `layers/<ns>/` and its layers' managed states under `states/<ns>/`: every version
kept, its record and index) would cost a listing of every run it ever stored, so it is listed once and then kept
up to date by this
replica's own writes and deletes, and listed again after `recount_seconds`. It is therefore approximate: writes
by other replicas (and retention's deletes) are seen at the next recount, and concurrent uploads each see the
total before the others land, so a namespace can pass its quota by at most what those uploads hold. Only runner
writes are refused by a quota; the controllers' own writes (logs, inputs, reviews) are counted, never refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from burrito_py.datastore.storage import Storage

MIB = 1024 * 1024
NAMESPACE_PREFIXES = ("layers", "states")  # what a namespace's quota counts: its runs' objects, its managed states


def describe_bytes(size: int) -> str:
    """`8 MiB` / `1536 bytes`: a limit as people set it."""
    if size >= MIB and size % MIB == 0:
        return f"{size // MIB} MiB"
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} bytes"


@dataclass(frozen=True, slots=True)
class Allowance:
    """The most bytes the next object may hold, and the limit that sets it (for the 413's message)."""

    limit: int
    reason: str

    @property
    def exhausted(self) -> bool:
        return self.limit <= 0


def allowance(
    what: str,
    format_limit: int,
    format_setting: str,
    run: str,
    run_used: int | None,
    run_quota: int,
    namespace: str,
    namespace_used: int | None,
    namespace_quota: int,
) -> Allowance:
    """Pure: the smallest of the format's limit and what each quota leaves (a quota of 0, or a usage of None
    for a writer quotas do not apply to, leaves everything)."""
    candidates = [Allowance(format_limit, f"{what} may hold at most {describe_bytes(format_limit)} "
                                          f"({format_setting})")]
    if run_quota > 0 and run_used is not None:
        candidates.append(Allowance(run_quota - run_used, (
            f"run {run} stores {describe_bytes(run_used)} of its quota of {describe_bytes(run_quota)} "
            "(BURRITO_PY_DATASTORE_RUN_QUOTA_BYTES)")))
    if namespace_quota > 0 and namespace_used is not None:
        candidates.append(Allowance(namespace_quota - namespace_used, (
            f"namespace {namespace} stores {describe_bytes(namespace_used)} of its quota of "
            f"{describe_bytes(namespace_quota)} (BURRITO_PY_DATASTORE_NAMESPACE_QUOTA_BYTES)")))
    return min(candidates, key=lambda a: a.limit)


class NamespaceUsage:
    """Stored bytes under `layers/<ns>/` and `states/<ns>/` per namespace, counted as the module docstring says."""

    def __init__(self, storage: Storage, recount_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.storage, self.recount_seconds, self.clock = storage, recount_seconds, clock
        self._held: dict[str, tuple[int, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def used(self, namespace: str) -> int:
        held = self._held.get(namespace)
        if held is not None and self.clock() - held[1] < self.recount_seconds:
            return held[0]
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        async with lock:  # one listing per namespace at a time; the others wait for its count
            held = self._held.get(namespace)
            if held is None or self.clock() - held[1] >= self.recount_seconds:
                counted_at = self.clock()
                total = sum([sum((await self.storage.sizes(f"{top}/{namespace}")).values())
                             for top in NAMESPACE_PREFIXES])
                held = (total, counted_at)
                self._held[namespace] = held
            return held[0]

    def add(self, namespace: str, delta: int) -> None:
        """This replica stored (or deleted, negative) `delta` bytes in `namespace`."""
        held = self._held.get(namespace)
        if held is not None:
            self._held[namespace] = (max(held[0] + delta, 0), held[1])


async def run_used(storage: Storage, prefix: str) -> int:
    return sum((await storage.sizes(prefix)).values())
