"""A definition being deleted withdraws its kind (docs/architecture.md §21, "AGL"): a real API server keeps a deleted
CRD, Terminating, and serves its kind until it has removed the instances. The definition is released only once the
CRD is gone, so that a released definition means the kind is no longer served (seen on the real control plane: the
definition gone, `kubectl get <kind>` still answered "No resources found")."""

from __future__ import annotations

from typing import Any

from burrito_py.agl.controller import CRDS, AglController
from burrito_py.agl.definition import LABEL_DEFINITION

NAME = "buckets.t1.apps.burrito-py.io"


class TerminatingCrds:
    """A CRD that a DELETE only marks Terminating, as kube-apiserver does while it cleans up the instances."""

    def __init__(self, owner: str) -> None:
        self.crd: dict[str, Any] | None = {"metadata": {"name": NAME, "labels": {LABEL_DEFINITION: owner}}}
        self.deletes: list[str] = []

    async def get(self, resource_path: str) -> dict[str, Any] | None:
        assert resource_path == f"{CRDS}/{NAME}"
        return self.crd

    async def delete(self, resource_path: str) -> None:
        self.deletes.append(resource_path)
        assert self.crd is not None
        self.crd["metadata"]["deletionTimestamp"] = "2026-11-28T03:00:00Z"


def controller(kube: TerminatingCrds) -> AglController:
    made = object.__new__(AglController)  # only `_delete_crd`'s collaborator, the API client
    made.kube = kube  # type: ignore[assignment]
    return made


async def test_the_kind_is_withdrawn_only_once_its_crd_is_gone() -> None:
    kube = TerminatingCrds("buckets")
    agl = controller(kube)
    assert await agl._delete_crd(NAME, "buckets") is False  # deleted, and still Terminating
    assert await agl._delete_crd(NAME, "buckets") is False  # still there: not deleted again
    assert kube.deletes == [f"{CRDS}/{NAME}"]
    kube.crd = None  # the API server removed it
    assert await agl._delete_crd(NAME, "buckets") is True


async def test_a_crd_another_definition_serves_is_never_deleted() -> None:
    kube = TerminatingCrds("someone-else")
    assert await controller(kube)._delete_crd(NAME, "buckets") is True
    assert kube.deletes == []
