"""One Terraform at a time per layer (docs/architecture.md §7): the Lease name and who may take it (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

from burrito_py.api import annotations as ann


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
    WAIT_FOR_POD = "wait-for-pod"  # free or orphaned, but another run's runner pod may still run Terraform on it


def lease_verdict(
    lease: dict[str, Any] | None, run_name: str, holder_state: str | None, holder_exists: bool,
    other_pods: Sequence[str] = (),
) -> LeaseVerdict:
    """`holder_state`/`holder_exists` describe the run named in the lease's holderIdentity; `other_pods`: the
    runner pods of other runs that may still run Terraform on the Lease's state (`other_runs_pods`). A Lease is
    created or taken over only once there are none: deleting a run deletes its Lease at once, but its pod only
    once it stopped (its grace period), or never (`--cascade=orphan`)."""
    if lease is None:
        return LeaseVerdict.WAIT_FOR_POD if other_pods else LeaseVerdict.CREATE
    holder = (lease.get("spec") or {}).get("holderIdentity")
    if holder == run_name:
        # Ours by name: a deleted run's Lease left behind (`--cascade=orphan`, or not yet collected) names the new
        # run of that same (deterministic) name too, while the old one's pod may still run.
        return LeaseVerdict.WAIT_FOR_POD if other_pods else LeaseVerdict.HELD
    if not holder or not holder_exists or holder_state in ("Succeeded", "Failed"):
        return LeaseVerdict.WAIT_FOR_POD if other_pods else LeaseVerdict.TAKE_OVER
    return LeaseVerdict.WAIT


def other_runs_pods(pods: Iterable[Mapping[str, Any]], namespace: str, lease: str, layer_label: str,
                    run_uid: str) -> list[str]:
    """The runner pods of `namespace` that may run Terraform on the state the Lease `lease` guards for a run other
    than `run_uid`, sorted: labelled with that Lease (or, made before pods carried it, with the layer's label
    `layer_label`), not ended (a pod being deleted runs until its grace period ends), and not owned by this run
    (its own attempts are its to follow). Their run may be gone, or a new one of the same name."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        mine = labels.get(ann.LABEL_LEASE) == lease if ann.LABEL_LEASE in labels else (
            labels.get(ann.LABEL_LAYER) == layer_label)
        if (meta.get("namespace") != namespace or not mine
                or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                or any(ref.get("uid") == run_uid for ref in meta.get("ownerReferences") or ())):
            continue
        found.append(str(meta.get("name")))
    return sorted(found)
