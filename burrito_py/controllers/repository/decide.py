"""When a TerraformRepository must be fetched now rather than at the next poll (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.timeutil import parse_time

# A source that cannot be stored is tried again this soon at first: a datastore starting beside the controllers
# (`helm install`, then `kubectl apply` at once) or rolling out answers within seconds.
SOURCE_RETRY_FIRST = timedelta(seconds=2)


def source_not_stored_reason(status_code: int | None) -> str:
    """The reason for a source archive the datastore did not store: no answer or a 5xx (it is starting, rolling
    out or down), or its refusal (a 4xx: too large, forbidden)."""
    return "DatastoreUnavailable" if status_code is None or status_code >= 500 else "SourceNotStored"


def source_retry_delay(repository: Mapping[str, Any], reason: str, now: datetime, poll: timedelta) -> timedelta:
    """When to try again a sync whose source archive could not be stored (`reason`, its Synced condition): after as
    long as it has failed so, from `SOURCE_RETRY_FIRST` up to the poll interval (2 s, 2 s, 4 s, 8 s, …): soon for a
    datastore that is starting, rarely for one that is down."""
    synced = next((c for c in (repository.get("status") or {}).get("conditions") or ()
                   if c.get("type") == "Synced"), None)
    since = None
    if synced is not None and synced.get("status") == "False" and synced.get("reason") == reason:
        since = parse_time(synced.get("lastTransitionTime"))
    failing_for = now - since if since is not None else timedelta(0)
    return min(max(failing_for, SOURCE_RETRY_FIRST), max(poll, SOURCE_RETRY_FIRST))


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
