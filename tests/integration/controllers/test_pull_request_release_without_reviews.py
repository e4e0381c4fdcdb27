"""A merged pull request whose reviews cannot be read still releases the layers it holds (docs/architecture.md
§11.3). With the `approved` apply requirement, nothing of a merge is recorded before the provider says who
approved it; the reconcile returned there, before releasing the layers the pull request locked (an apply before
merge): while the provider refused (a token revoked, the pull request deleted on the host, a rate limit), the
layers' own applies waited `LockedByPullRequest`, for good when the refusal was. The pull request controller's own
reconcile, against the emulator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.controllers.pullrequest.reconcile import reconcile_pull_request
from tests.support.runner_overrides import objects

from .conftest import controllers_context

PULL_REQUEST = "repo-pr-7"


async def _reconcile(kubeconfig: Path, stored: list[dict[str, Any]], pull_request: dict[str, Any]) -> None:
    async with controllers_context(kubeconfig, stored, [], pull_requests=[pull_request]) as ctx:
        await reconcile_pull_request(ctx, ("default", PULL_REQUEST))


def test_a_merge_whose_reviews_cannot_be_read_still_releases_its_layers(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    repository, layer, _ = objects("default")
    # No token: the provider cannot be asked, as when a token was revoked.
    repository["spec"]["pullRequests"] = {"enabled": True, "commands": {"applyRequirements": ["approved"]}}
    layer["metadata"]["annotations"] = {ann.PULL_REQUEST_LOCK: PULL_REQUEST, ann.PULL_REQUEST_LOCK_BRANCH: "a" * 40,
                                        ann.BRANCH_COMMIT: "b" * 40}  # the branch has moved past the lock: the merge
    pull_request = {"apiVersion": ann.API_VERSION, "kind": "TerraformPullRequest",
                    "metadata": {"name": PULL_REQUEST, "namespace": "default"},
                    "spec": {"state": "merged", "provider": "github", "project": "team/infra", "number": 7,
                             "headSha": "c" * 40, "base": "main", "fromFork": False, "repository": "repo"}}
    with admin_client(server.url) as admin:
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in ((repository, "terraformrepositories"), (layer, "terraformlayers"))]
        admin.post(f"{base}/terraformpullrequests", json=pull_request).raise_for_status()
        # Planned at the merged head (so the merge needs its reviews to be judged).
        planned = admin.patch(f"{base}/terraformpullrequests/{PULL_REQUEST}/status",
                              json={"status": {"state": "Planned", "headSha": "c" * 40}},
                              headers={"Content-Type": "application/merge-patch+json"}).raise_for_status().json()
        asyncio.run(_reconcile(kubeconfig, stored, planned))
        status = admin.get(f"{base}/terraformpullrequests/{PULL_REQUEST}").json().get("status") or {}
        ready = next(c for c in status.get("conditions") or () if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "ReviewsUnavailable"), ready
        assert not status.get("merged"), "nothing of the merge is recorded before its reviews are read"
        annotations = admin.get(f"{base}/terraformlayers/app").json()["metadata"].get("annotations") or {}
        assert ann.PULL_REQUEST_LOCK not in annotations, annotations
