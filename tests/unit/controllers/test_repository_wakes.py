"""A repository's layers are woken when what they read of it changes, whichever path the inventory hears of the
change by. The race this guards (it failed an e2e run): a sync's own status write is observed first, then its
layers are woken by nothing, because the watch event that follows carries the same object and looked like no
change; a layer that reconciled between the annotation and the status write stayed on "fetch failed"."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.context import Context
from burrito_py.controllers.repository.decide import read_by_layers
from burrito_py.controllers.repository.reconcile import _write_status
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube
from burrito_py.kube.conditions import Cond
from burrito_py.kube.inventory import Key
from burrito_py.kube.scheduler import Scheduler
from burrito_py.operator.main import wire_inventory

NS = "team-a"


class ApiServer:
    """The status subresource's merge patch as kube-apiserver answers it: the object, resourceVersion + 1."""

    def __init__(self, repository: dict[str, Any]) -> None:
        self.held = copy.deepcopy(repository)

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.held = {**self.held, "status": patch["status"],
                     "metadata": {**self.held["metadata"],
                                  "resourceVersion": str(int(self.held["metadata"]["resourceVersion"]) + 1)}}
        return copy.deepcopy(self.held)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:  # events
        return body


class Woken:
    def __init__(self) -> None:
        self.keys: list[Key] = []

    def schedule(self, key: Key, delay: float = 0.0) -> None:
        self.keys.append(key)


def repository(branches: list[dict[str, Any]], generation: int = 1, rv: int = 1) -> dict[str, Any]:
    return {"apiVersion": "config.terraform.burrito-py.io/v1alpha1", "kind": "TerraformRepository",
            "metadata": {"name": "infra", "namespace": NS, "generation": generation, "resourceVersion": str(rv)},
            "spec": {"repository": {"url": "https://git.example.com/infra.git"}},
            "status": {"state": "SyncNeeded", "branches": branches}}


def layer(name: str, repository_name: str = "infra") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
            "spec": {"repository": {"name": repository_name}, "branch": "main", "path": "app"}}


FAILED = [{"name": "main", "lastSyncDate": "2026-11-27T19:07:50.1Z",
           "lastSyncStatus": "fetch failed: Secret team-a/absent (spec.repository.secretName) does not exist"}]
SYNCED = [{"name": "main", "lastSyncDate": "2026-11-27T19:07:52.3Z", "lastSyncStatus": "Synced",
           "latestRev": "7519a285cd8e10b0e53ec2182b409cd5671b8fe7"}]


def context(held: dict[str, Any]) -> tuple[Context, ApiServer, Woken]:
    api = ApiServer(held)
    ctx = Context(ControllerSettings(), cast(Kube, api))
    woken = Woken()
    ctx.layers = cast(Scheduler, woken)
    wire_inventory(ctx)
    ctx.inventory.layers.observe(layer("app"))
    ctx.inventory.layers.observe(layer("elsewhere", "other"))
    ctx.inventory.repositories.observe(held)
    ctx.primed = True
    return ctx, api, woken


def test_a_sync_written_by_us_wakes_the_layers_though_the_watch_event_then_looks_unchanged() -> None:
    ctx, api, woken = context(repository(FAILED))
    asyncio.run(_write_status(ctx, api.held, "Synced", SYNCED, Cond("Synced", True, "FetchSucceeded"),
                              datetime(2026, 11, 27, 19, 7, 52, tzinfo=UTC), Cond("Webhooks", True, "Published")))
    assert woken.keys == [(NS, "app")]  # the layer of this repository only
    ctx.inventory.repositories.observe(copy.deepcopy(api.held))  # the watch event of that very write
    assert woken.keys == [(NS, "app")]  # nothing more to tell
    assert ctx.inventory.repositories.get((NS, "infra"))["status"]["branches"] == SYNCED  # type: ignore[index]


def test_a_spec_change_wakes_the_layers_and_a_condition_of_its_own_does_not() -> None:
    ctx, _, woken = context(repository(SYNCED))
    polled = repository(SYNCED, rv=2)
    polled["status"]["conditions"] = [{"type": "PullRequestsPolled", "status": "True", "reason": "Polled"}]
    ctx.inventory.repositories.observe(polled)
    assert woken.keys == []
    ctx.inventory.repositories.observe(repository(SYNCED, generation=2, rv=3))  # e.g. spec.terraform.version
    assert woken.keys == [(NS, "app")]


def test_a_repository_that_goes_wakes_its_layers() -> None:
    ctx, _, woken = context(repository(SYNCED))
    ctx.inventory.repositories.forget(repository(SYNCED))
    assert woken.keys == [(NS, "app")]


def test_a_late_watch_event_rolls_nothing_back_and_wakes_nobody() -> None:
    ctx, _, woken = context(repository(SYNCED, rv=5))
    assert not ctx.inventory.repositories.observe(repository(FAILED, rv=4))
    assert woken.keys == []


branch = st.fixed_dictionaries({"name": st.sampled_from(["main", "dev"]),
                                "lastSyncStatus": st.sampled_from(["Synced", "fetch failed: x"]),
                                "latestRev": st.sampled_from(["a" * 40, "b" * 40])})


@given(st.lists(branch, max_size=2), st.lists(branch, max_size=2), st.integers(1, 3), st.integers(1, 3))
def test_layers_are_woken_exactly_when_what_they_read_changed(
    before: list[dict[str, Any]], after: list[dict[str, Any]], gen_before: int, gen_after: int,
) -> None:
    ctx, _, woken = context(repository(before, gen_before))
    ctx.inventory.repositories.observe(repository(after, gen_after, rv=2))
    changed = read_by_layers(repository(before, gen_before)) != read_by_layers(repository(after, gen_after))
    assert woken.keys == ([(NS, "app")] if changed else [])
    assert changed == (before != after or gen_before != gen_after)


def test_before_the_first_listing_is_complete_no_layer_is_looked_for(monkeypatch: Any) -> None:
    """At start-up every repository arrives at once: none may walk every layer (nothing is woken then anyway)."""
    ctx, _, woken = context(repository(SYNCED))
    ctx.primed = False

    def walked(*_: Any) -> list[Any]:
        raise AssertionError("the layers were walked before the first listing was complete")

    monkeypatch.setattr(ctx.inventory, "layers_of_repository", walked)
    ctx.inventory.repositories.observe({**repository(FAILED, rv=2), "metadata": {
        **repository(FAILED)["metadata"], "name": "another", "resourceVersion": "2"}})
    assert woken.keys == []
