"""An apply command of several layers that meets a layer another pull request won meanwhile (docs/architecture.md
§11.3 "Apply before merge"): the layers it had already locked for this command stayed locked to the pull request
though nothing was applied, holding those layers' own applies until a merge, a close or `/burrito-py unlock`. Now
they are released again with the refusal. The pull request controller's own executor, against the emulator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.pullrequest.reconcile import _apply
from burrito_py.pullrequests.commands import ApplyOrder, CommandDecision, Pending
from tests.support.runner_overrides import objects

from .conftest import controllers_context

MINE, THEIRS = "repo-pr-7", "repo-pr-3"


def _pull_request(name: str) -> dict[str, Any]:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformPullRequest",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"state": "open", "provider": "github", "project": "team/infra", "number": int(name[-1]),
                     "headSha": "c" * 40, "base": "main", "fromFork": False, "repository": "repo"}}


def test_a_refused_apply_releases_the_locks_it_took(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    repository, app, _ = objects("default")
    db = {**app, "metadata": {"name": "db", "namespace": "default", "annotations": {ann.PULL_REQUEST_LOCK: THEIRS}}}
    with admin_client(server.url) as admin:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in ((repository, "terraformrepositories"), (app, "terraformlayers"),
                                       (db, "terraformlayers"))]
        prs = [admin.post(f"{base}/terraformpullrequests", json=_pull_request(n)).raise_for_status().json()
               for n in (MINE, THEIRS)]
        orders = tuple(ApplyOrder(("default", layer), f"{layer}-plan", 1, "sha256:" + "1" * 64, f"{layer}-apply")
                       for layer in ("app", "db"))

        async def answer() -> CommandDecision:
            async with controllers_context(kubeconfig, stored[:2], [], pull_requests=prs) as ctx:
                ctx.inventory.layers.observe(stored[2])
                return await _apply(ctx, prs[0], CommandDecision("done", "applying", apply=orders),
                                    Pending("c1", "alice", 1, "/burrito-py apply"))

        decided = asyncio.run(answer())
        assert decided.outcome == "refused" and f"locked to pull request {THEIRS}" in decided.reply, decided
        locks = {name: (admin.get(f"{base}/terraformlayers/{name}").json()["metadata"].get("annotations") or {}).get(
            ann.PULL_REQUEST_LOCK) for name in ("app", "db")}
        assert locks == {"app": None, "db": THEIRS}, locks
        runs = admin.get(f"{base}/terraformruns").json()["items"]
        assert runs == [], "nothing applied"
