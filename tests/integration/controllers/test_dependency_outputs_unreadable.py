"""A dependent layer whose upstream's outputs cannot be read (docs/architecture.md §5.11) says why in its
DependenciesSatisfied message, not only in the controllers' log: a datastore that does not answer, or an outputs
object that is not `output -json`. The layer controller's own gathering, against a real datastore."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.dependencies import dependency_snapshot
from burrito_py.controllers.layer.dependency_decisions import judge_dependencies
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import free_port, running_datastore

NS = "team"


def layers() -> tuple[dict[str, Any], dict[str, Any]]:
    upstream = {"metadata": {"name": "a", "namespace": NS, "uid": "uid-a",
                             "annotations": {ann.APPLY_RUN: "a-apply/1"}},
                "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "a"},
                "status": {"state": "Idle", "appliedRevision": "c2"}}
    dependent = {"metadata": {"name": "b", "namespace": NS, "uid": "uid-b", "annotations": {ann.BRANCH_COMMIT: "c2"}},
                 "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "b",
                          "dependsOn": [{"name": "a", "inputs": {"vpc": "vpc_id"}}]}}
    return upstream, dependent


def message_with(url: str) -> str:
    async def judge() -> str:
        store = DatastoreClient(url, timeout=2.0)
        try:
            # The gathering reads only the inventory and the datastore: no API call is made.
            ctx = Context(settings=ControllerSettings(metrics_port=0), kube=None, datastore=store)  # type: ignore[arg-type]
            upstream, dependent = layers()
            ctx.inventory.layers.observe(upstream)
            ctx.inventory.layers.observe(dependent)
            snapshot = await dependency_snapshot(ctx, dependent)
            assert snapshot is not None
            verdict = judge_dependencies(snapshot)
            assert verdict is not None and verdict.condition.reason == "UpstreamPending", verdict
            return verdict.condition.message
        finally:
            store.close()

    return asyncio.run(judge())


def test_outputs_the_datastore_cannot_give_are_named_on_the_dependent() -> None:
    message = message_with(f"http://127.0.0.1:{free_port()}")
    assert "the outputs of team/a are not read yet: cannot read them from the datastore: " in message, message
    assert "datastore unavailable" in message


def test_outputs_that_are_not_output_json_are_named_on_the_dependent(tmp_path: Path) -> None:
    with running_datastore(tmp_path / "datastore") as url:
        with DatastoreClient(url) as store:
            store.put_outputs(NS, "a", "a-apply", 1, b"not the outputs of terraform")
        message = message_with(url)
    assert message.endswith("the outputs of team/a are not read yet: the datastore's copy of apply a-apply/1's "
                            "outputs is not `output -json` of outputs"), message
