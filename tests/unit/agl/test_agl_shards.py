"""The AGL in a sharded install: instances are compiled by the shard owning their namespace, and only the
first listed shard serves kinds (CRDs, definition status, finalizers); the others only follow served kinds."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from burrito_py.agl.controller import AglController
from burrito_py.kube.client import Kube
from burrito_py.kube.shards import Scope, Shard
from tests.unit.agl.test_agl_compile import DEFINITION

SHARDS = [Shard(name="a", namespaces="team-a-*"), Shard(name="b", namespaces="team-*")]


class NoApi(Kube):
    """A shard that must not call the API: any call fails the test."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def _call(self, method: str, resource_path: str, **_: Any) -> Any:
        self.calls.append((method, resource_path))
        raise AssertionError(f"unexpected API call {method} {resource_path}")


def _instance(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Bucket",
            "metadata": {"name": "photos", "namespace": namespace, "resourceVersion": "1"}, "spec": {}}


def test_a_shard_keeps_only_the_instances_of_its_own_namespaces() -> None:
    agl = AglController(NoApi(), scope=Scope(patterns=["team-*"], shard="b", shards=SHARDS))
    for namespace in ("team-a-prod", "team-b", "payments"):
        agl.on_instance("ADDED", _instance(namespace))
    assert [i["metadata"]["namespace"] for i in agl.instances_of("apps.burrito-py.io", "Bucket")] == ["team-b"]
    # Patterns: kinds are watched cluster-wide (new namespaces followed), what is not ours dropped on arrival.
    assert agl._collections("buckets.apps.burrito-py.io") == ["/apis/apps.burrito-py.io/v1alpha1/buckets"]
    literal = AglController(NoApi(), scope=Scope(patterns=["team-b", "team-c"]))
    assert literal._collections("buckets.apps.burrito-py.io") == [
        "/apis/apps.burrito-py.io/v1alpha1/namespaces/team-b/buckets",
        "/apis/apps.burrito-py.io/v1alpha1/namespaces/team-c/buckets"]


def test_only_the_first_shard_serves_kinds_the_others_follow_served_ones() -> None:
    kube = NoApi()
    agl = AglController(kube, scope=Scope(patterns=["team-*"], shard="b", shards=SHARDS))
    assert not agl.scope.cluster_work
    assert AglController(NoApi(), scope=Scope(shard="a", shards=SHARDS)).scope.cluster_work
    pending = copy.deepcopy(DEFINITION)  # not served yet: b neither writes nor watches
    agl.on_definition("ADDED", pending)
    followed: list[str] = []
    agl.watches.ensure = lambda collection, *_: followed.append(collection)  # type: ignore[method-assign]

    async def reconcile() -> None:
        await agl.reconcile_definition("buckets")

    asyncio.run(reconcile())
    assert (kube.calls, followed) == ([], [])
    served = {**copy.deepcopy(DEFINITION), "status": {"servedCrd": "buckets.apps.burrito-py.io"}}
    served["metadata"]["resourceVersion"] = "2"
    agl.on_definition("MODIFIED", served)
    asyncio.run(reconcile())
    assert kube.calls == []
    assert followed == ["/apis/apps.burrito-py.io/v1alpha1/buckets"]
