"""When a TerraformRepository must be fetched now rather than at the next poll (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.timeutil import parse_time


def sync_requested(repository: Mapping[str, Any]) -> bool:
    """A `sync-<branch>` annotation at least as recent as that branch's last sync asks for a fetch now."""
    annotations = repository["metadata"].get("annotations") or {}
    last_sync = {
        b.get("name", "").replace("/", "."): parse_time(b.get("lastSyncDate"))
        for b in (repository.get("status") or {}).get("branches") or ()
    }
    for key, value in annotations.items():
        if not key.startswith(ann.REPOSITORY_SYNC_PREFIX):
            continue
        asked = parse_time(value)
        synced = last_sync.get(key[len(ann.REPOSITORY_SYNC_PREFIX) :])
        if asked is not None and (synced is None or asked >= synced):
            return True
    return False


def read_by_layers(repository: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What a layer reads of its repository: its spec (inherited settings, sync windows, URL) and each branch's
    last sync (head, outcome). A change of these, and only these, wakes the repository's layers."""
    if repository is None:
        return None
    branches = (repository.get("status") or {}).get("branches") or ()
    return (repository["metadata"].get("generation"),
            tuple((b.get("name"), b.get("latestRev"), b.get("lastSyncStatus")) for b in branches))
