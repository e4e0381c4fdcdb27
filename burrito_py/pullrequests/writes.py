"""Writing a `PullRequestWrite` (events.py) to the Kubernetes API (docs/architecture.md §11.3): the server's
webhooks and the pull request poll share it, so both leave the same object."""

from __future__ import annotations

from typing import Any, Literal

from burrito_py.api import annotations as ann
from burrito_py.kube.client import Kube, KubeError, crd_path
from burrito_py.pullrequests.events import PullRequestWrite, older

__all__ = ["Outcome", "write_pull_request"]

Outcome = Literal["written", "stale", "absent"]


async def write_pull_request(kube: Kube, namespace: str, write: PullRequestWrite) -> Outcome:
    """"written", "stale" (it records a newer event) or "absent" (a close of one never seen). The spec is
    replaced under the resourceVersion it was compared at, so two writers (two replicas, a webhook and a poll)
    never interleave, and an older event never rolls a newer one back."""
    name, spec = write.name, write.spec
    resource = crd_path("terraformpullrequests", namespace, name)
    if write.create:
        body = {"apiVersion": f"{ann.GROUP}/{ann.VERSION}", "kind": "TerraformPullRequest",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {k: v for k, v in spec.items() if v is not None}}
        try:
            await kube.create(crd_path("terraformpullrequests", namespace), body)
            return "written"
        except KubeError as exc:
            if exc.status != 409:
                raise
    for attempt in range(5):
        held = await kube.get(resource)
        if held is None:
            return "absent"
        if older(spec.get("updatedAt"), (held.get("spec") or {}).get("updatedAt")):
            return "stale"
        held_approval = (held.get("spec") or {}).get("approval") or {}
        written: dict[str, Any] = ({k: v for k, v in spec.items() if k != "approval"}
                                   if write.spare_comment_approval and held_approval.get("comment") else spec)
        patch = {"metadata": {"resourceVersion": held["metadata"]["resourceVersion"]}, "spec": written}
        try:
            await kube.merge_patch(resource, patch)
            return "written"
        except KubeError as exc:
            if exc.status == 404:
                return "absent"
            if exc.status != 409 or attempt == 4:
                raise
    raise AssertionError("unreachable")
