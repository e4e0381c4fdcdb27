"""The controllers start before the datastore answers (`helm install` starts every Deployment at once and
`kubectl apply` follows), against the real controllers (emulator, a git server over HTTP, a fake GitHub): the
repository and a pull request say on their status that the source cannot be stored, never only in the log, and
both go on within seconds of the datastore answering, not at the next poll (docs/architecture.md §8, §11.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port, running_datastore
from tests.support.emulator import wait_for

from .test_pull_request_poll import NS, TF, World, running_world

pytestmark = pytest.mark.slow


def ready(world: World) -> dict[str, Any] | None:
    conditions = ((world.pull_request(7) or {}).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == "Ready"), None)


def test_a_repository_and_a_pull_request_synced_before_the_datastore_answers_say_so_then_go_on(
        tmp_path: Path) -> None:
    port = free_port()
    with running_world(tmp_path, "github", datastore_port=port) as world:
        world.http.post(f"{TF}/namespaces/{NS}/terraformlayers", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": "app"},
            "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "app"}}).raise_for_status()
        down = wait_for(lambda: (c := world.condition("Synced")) and c["status"] == "False" and c, 40, interval=0.2,
                        what="the repository's Synced condition")
        assert down["reason"] == "DatastoreUnavailable", down
        assert down["message"].startswith("the source archive cannot be stored: "), down
        assert world.repository()["status"]["branches"][0]["lastSyncStatus"].startswith("not synced: ")

        head = world.push(7, {"app/main.tf": "# a change\n"})
        world.fake.open_pull(7, head)
        waiting = wait_for(lambda: (c := ready(world)) and c["status"] == "False" and c, 40, interval=0.2,
                           what="the pull request's Ready condition")
        assert waiting["reason"] == "DatastoreUnavailable", waiting
        assert waiting["message"].startswith("the source archive of the head cannot be stored: "), waiting
        events = world.http.get(f"/api/v1/namespaces/{NS}/events").json()["items"]
        assert not [e for e in events if e["involvedObject"]["name"] == "infra-pr-7"], "no Event per retry"

        with running_datastore(tmp_path / "datastore", port=port) as url:
            # The repository polls every 30 s here: synced well before that, on the source's own retry.
            synced = wait_for(lambda: (c := world.condition("Synced")) and c["status"] == "True" and c, 15,
                              interval=0.2, what="the repository synced once the datastore answers")
            assert synced["reason"] == "FetchSucceeded"
            wait_for(lambda: (c := ready(world)) and c["reason"] != "DatastoreUnavailable", 40, interval=0.2,
                     what="the pull request past the datastore")
            with DatastoreClient(url) as store:
                assert store.has_source(NS, "infra", head), "the head's source stored"
        pull_request = world.http.get(f"{TF}/namespaces/{NS}/terraformpullrequests/infra-pr-7").json()
    assert pull_request["spec"]["headSha"] == head
