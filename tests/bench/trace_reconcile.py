"""How often one reconcile's control flow enters its controller's reconcile.py (issue 28): `python3 -m
tests.bench.trace_reconcile`. Not a benchmark (not run by `python3 -m tests.bench`): a reading aid, counted the
same way for the layer and the pull request.

One reconcile of one object runs against the API emulator (real Kube client, real inventory, no datastore), under
`sys.settrace`, over code of `burrito_py/` only:
- calls: the functions of the controller's reconcile.py invoked (a coroutine resumed after an await is the same
  invocation), and among them named functions (not `<genexpr>`, `<listcomp>`, `<lambda>`);
- entries: how many times the line executed moves from another file of `burrito_py/` into that reconcile.py (what
  a reader following the object sees: back into reconcile.py after each helper).

Scenarios: a layer at a new commit (it plans: the create path, the busiest), the same layer at rest (nothing to
do), and a pull request whose head was seen, with one affected layer (it creates its plan run and publishes; the
provider refuses: no token)."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.reconcile import reconcile_layer
from burrito_py.controllers.pullrequest.reconcile import reconcile_pull_request
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube, crd_path

PACKAGE = str(Path(__file__).resolve().parents[2] / "burrito_py")
COMMIT = "a" * 40
NS = "trace"
PLURALS = {"TerraformRepository": "terraformrepositories", "TerraformLayer": "terraformlayers",
           "TerraformPullRequest": "terraformpullrequests"}


class Counter:
    """A `sys.settrace` function: invocations of the target file's functions, and entries into its lines."""

    def __init__(self, target: str) -> None:
        self.target, self.entries, self.where = target, 0, ""
        self.frames: dict[int, FrameType] = {}  # held, so that an id is never reused during the count

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE):
            return None  # no line events for other code
        if event == "call" and filename == self.target:
            self.frames.setdefault(id(frame), frame)  # a coroutine resumed is the same frame: counted once
        if event == "line" and filename != self.where:
            self.entries += filename == self.target
            self.where = filename
        return self

    @property
    def calls(self) -> int:
        return len(self.frames)

    @property
    def named(self) -> int:
        return sum(1 for frame in self.frames.values() if not frame.f_code.co_name.startswith("<"))


async def count(target: str, run: Callable[[], Awaitable[None]]) -> tuple[int, int, int]:
    """One reconcile under the tracer (this thread only: the event loop's, where the reconcile runs)."""
    counter = Counter(str(Path(PACKAGE) / target))
    sys.settrace(counter)
    try:
        await run()
    finally:
        sys.settrace(None)
    return counter.calls, counter.named, counter.entries


def objects() -> list[dict[str, Any]]:
    repository = {"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                  "metadata": {"name": "repo", "namespace": NS},
                  "spec": {"repository": {"url": "https://git.example/infra.git"},
                           "pullRequests": {"enabled": True, "provider": "github"}}}
    layer = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
             "metadata": {"name": "app", "namespace": NS,
                          "annotations": {ann.BRANCH_COMMIT: COMMIT, ann.RELEVANT_COMMIT: COMMIT}},
             "spec": {"path": "app", "branch": "main", "repository": {"name": "repo"},
                      "terraform": {"version": "1.6.6"}}}
    pull_request = {"apiVersion": ann.API_VERSION, "kind": "TerraformPullRequest",
                    "metadata": {"name": "pr-1", "namespace": NS},
                    "spec": {"provider": "github", "project": "org/infra", "number": 1, "repository": "repo",
                             "base": "main", "branch": "feature", "headSha": COMMIT, "state": "open"}}
    return [repository, layer, pull_request]


async def scenario(api_url: str, kubeconfig: Path) -> dict[str, tuple[int, int, int]]:
    kube = await Kube.connect(str(kubeconfig))
    ctx = Context(ControllerSettings(allow_cross_namespace_repositories=True), kube)
    for body in await kube.list(crd_path("terraformrepositories", NS)):
        ctx.inventory.repositories.observe(body)
    for body in await kube.list(crd_path("terraformlayers", NS)):
        ctx.inventory.layers.observe(body)
    for body in await kube.list(crd_path("terraformpullrequests", NS)):
        ctx.inventory.pull_requests.observe(body)
    ctx.primed = True
    figures: dict[str, tuple[int, int, int]] = {}
    key = (NS, "app")
    figures["layer, new commit (creates a plan run)"] = await count(
        "controllers/layer/reconcile.py", lambda: reconcile_layer(ctx, key))
    figures["layer, at rest (nothing to do)"] = await count(
        "controllers/layer/reconcile.py", lambda: reconcile_layer(ctx, key))
    figures["pull request, head seen (creates a plan run, publishes)"] = await count(
        "controllers/pullrequest/reconcile.py", lambda: reconcile_pull_request(ctx, (NS, "pr-1")))
    await kube.close()
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        api = ApiServer(pod_log_dir=Path(tmp) / "pod-logs")
        api.start()
        try:
            kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
            applier = Applier(api.url)
            for crd in generate_crds().values():
                applier.apply(crd)
            applier.close()
            with admin_client(api.url) as http:
                http.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).raise_for_status()
                for body in objects():
                    plural = PLURALS[body["kind"]]
                    http.post(f"/apis/{ann.API_VERSION}/namespaces/{NS}/{plural}", json=body).raise_for_status()
                # The pull request's head was seen and its one layer found (what a first reconcile leaves).
                http.patch(f"/apis/{ann.API_VERSION}/namespaces/{NS}/terraformpullrequests/pr-1/status",
                           json={"status": {"headSha": COMMIT, "layers": [
                               {"namespace": NS, "name": "app", "path": "app"}]}},
                           headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
            figures = asyncio.run(scenario(api.url, kubeconfig))
        finally:
            api.stop()
    for name, (calls, named, entries) in figures.items():
        print(f"{name}: {calls} calls into reconcile.py ({named} of named functions, the rest comprehensions and "
              f"generator expressions), {entries} entries from another file")


if __name__ == "__main__":
    main()
