"""One Terraform at a time per layer (docs/architecture.md §7): the Lease name and who may take it (pure)."""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import Any


def lock_key(repository_namespace: str, repository_name: str, path: str, layer_key: str | None = None) -> str:
    """What a layer's Lease protects: the Terraform state. By default one state per repository and path, on
    every branch (as burrito keys its lock); a layer's `spec.lockKey` names its own."""
    if layer_key:
        return "key\x00" + layer_key
    normalised = path.strip("/").removeprefix("./").rstrip("/") or "."
    return "\x00".join(("repo", repository_namespace, repository_name, normalised))


def lease_name(key: str) -> str:
    """A valid Lease name for any key, however long: a fixed prefix and 24 hex characters of its sha256."""
    return "burrito-py-layer-" + hashlib.sha256(key.encode()).hexdigest()[:24]


class LeaseVerdict(Enum):
    CREATE = "create"  # no lease yet
    HELD = "held"  # already ours: acquiring is idempotent
    TAKE_OVER = "take-over"  # held by a run that is gone or finished: an orphan
    WAIT = "wait"  # held by a live run


def lease_verdict(
    lease: dict[str, Any] | None, run_name: str, holder_state: str | None, holder_exists: bool
) -> LeaseVerdict:
    """`holder_state`/`holder_exists` describe the run named in the lease's holderIdentity."""
    if lease is None:
        return LeaseVerdict.CREATE
    holder = (lease.get("spec") or {}).get("holderIdentity")
    if holder == run_name:
        return LeaseVerdict.HELD
    if not holder or not holder_exists or holder_state in ("Succeeded", "Failed"):
        return LeaseVerdict.TAKE_OVER
    return LeaseVerdict.WAIT
