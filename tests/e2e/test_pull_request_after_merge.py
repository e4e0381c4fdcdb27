"""Issue 30 item 4: after a merge, what was reviewed is what applies.

Real git (a bare repository with GitHub's pull refs; real merge commits), real terraform, the real server receiving
signed webhooks, a fake GitHub API recording the comments, on the real control plane. The layers wait for manual
approval (the harness's default):

1. a pull request is planned, merged with nothing else on the base: the layer plans again on the merge commit, its
   plan makes the reviewed changes, and it is applied with no approval annotation;
2. a second pull request is planned, then the base moves under it (another change to the layer lands first) and it
   is merged: the branch's plan differs from the reviewed one, the layer waits for approval, and the pull request
   is told so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.timeutil import format_time_precise, utcnow
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import layer_code, wait_for
from .test_pull_requests import World, pull_request_world

EXTRA = 'resource "terraform_data" "extra" {\n  input = "landed first"\n}\n'


def _merge(world: World, number: int, head: str, fork: bool = False) -> str:
    """Merge `feature` into main with a merge commit, push main, send the merged event, and let the repository
    fetch main (the push webhook's effect, without its delivery); returns the merge commit."""
    repo = world.repo
    repo.checkout("main")
    repo.git("merge", "-q", "--no-ff", "-m", f"Merge pull request #{number}", "feature")
    merge = repo.head
    repo.push(world.bare.as_uri())
    world.hook("merged", number, head, fork=fork)
    _sync_main(world)
    return merge


def _sync_main(world: World) -> None:
    platform = world.platform
    platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
        {"metadata": {"annotations": {ann.repository_sync_annotation("main"): format_time_precise(utcnow())}}})


def _told(world: World, text: str) -> list[str]:
    return [body for body in world.fake.comments.values() if body.startswith("burrito-py: after the merge") and
            text in body]


def _commented(world: World, number: int, status: str) -> dict[str, Any] | None:
    """The pull request's `Commented` condition when it has this status."""
    conditions = (world.pull_request(number).get("status") or {}).get("conditions") or ()
    cond = next((c for c in conditions if c["type"] == "Commented"), None)
    return cond if cond is not None and cond["status"] == status else None


def _apply_runs(world: World, layer: str) -> list[dict[str, Any]]:
    return [r for r in world.platform.runs(layer) if r["spec"]["action"] == "apply"]


def test_a_merged_pull_request_applies_what_was_reviewed_and_waits_when_the_base_moved(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform

        # 1. Reviewed, then merged with nothing else on the base: applied without an approval.
        head = world.push(1, {"layers/app/main.tf": layer_code("v2")}, "change app")
        world.hook("opened", 1, head)
        planned = world.wait_pr(1, head, "Planned", timeout=180)
        digest = planned["status"]["layers"][0].get("changesDigest")
        assert digest and digest.startswith("sha256:"), planned["status"]
        # The provider refuses every call from the merge on (GitHub's secondary rate limit): what the merge meant
        # cannot be said yet, and the pull request shows why (`Commented=False`) until it can.
        world.fake.limited = 10**6
        merge = _merge(world, 1, head)

        def applied() -> dict[str, Any] | None:
            body = platform.layer("app")
            a = body["metadata"].get("annotations") or {}
            done = a.get(ann.APPLY_COMMIT) == merge and a.get(ann.APPLY_SUM) == a.get(ann.PLAN_SUM)
            return body if done and (body.get("status") or {}).get("state") == "Idle" else None

        try:
            layer = wait_for(applied, 240, interval=0.5, what="app applied at the merge commit")
        except AssertionError:
            raise AssertionError(f"app: {platform.layer('app').get('status')}; pull request: "
                                 f"{world.pull_request(1).get('status')}") from None
        reviewed = layer["status"]["reviewedPlan"]
        assert reviewed["result"] == "Approved" and reviewed["headSha"] == head, reviewed
        assert ann.APPROVE_PLAN not in layer["metadata"].get("annotations", {})  # nobody approved it
        assert "v2" in platform.state_file("app").read_text()
        merged = world.pull_request(1)["status"]
        assert merged["state"] == "Merged" and merged["merged"]["reason"] == "", merged
        unsaid = wait_for(lambda: _commented(world, 1, "False"), 60, interval=0.2, what="the verdict's refusal shown")
        assert unsaid["reason"] == "ProviderError" and "rate limit" in unsaid["message"], unsaid
        assert unsaid["message"].startswith("cannot say on the pull request what its merge meant (tried again): ")
        assert not _told(world, "applies without a manual approval")
        world.fake.limited = 0
        wait_for(lambda: _told(world, "applies without a manual approval"), 60, what="the pull request told")
        assert wait_for(lambda: _commented(world, 1, "True"), 60, interval=0.2)["reason"] == "Posted"
        merged = world.pull_request(1)["status"]
        assert merged["merged"]["layers"] == [{"namespace": platform.namespace, "name": "app",
                                               "changesDigest": digest, "told": f"Approved:{reviewed['planSum']}"}]
        assert not _apply_runs(world, "other")  # a layer the pull request did not change is untouched

        # 2. Reviewed, then the base moves under it before the merge: the layer waits, and the pull request says so.
        world.repo.checkout("feature")
        head = world.push(2, {"layers/app/main.tf": layer_code("v3")}, "change app again")
        world.hook("opened", 2, head)
        world.wait_pr(2, head, "Planned", timeout=180)
        world.repo.checkout("main")
        world.repo.commit({"layers/app/extra.tf": EXTRA}, "another change to app lands first")
        world.repo.push(world.bare.as_uri())
        applies = len(_apply_runs(world, "app"))
        merge = _merge(world, 2, head)

        def waiting() -> dict[str, Any] | None:
            body = platform.layer("app")
            status = body.get("status") or {}
            pending = status.get("pendingPlan") or {}
            verdict = status.get("reviewedPlan") or {}
            return body if (status.get("state") == "ApplyNeeded" and pending.get("revision") == merge
                            and verdict.get("pullRequest", "").endswith("-pr-2")) else None

        try:
            layer = wait_for(waiting, 240, interval=0.5, what="app waiting for approval at the second merge")
        except AssertionError:
            raise AssertionError(f"app: {platform.layer('app').get('status')}; pull request: "
                                 f"{world.pull_request(2).get('status')}") from None
        verdict = layer["status"]["reviewedPlan"]
        assert verdict["result"] == "Differs", verdict
        assert "the merged result differs from what was reviewed: waiting for approval" in verdict["message"]
        approval = next(c for c in layer["status"]["conditions"] if c["type"] == "IsPlanApproved")
        assert approval["reason"] == "WaitingForApproval", approval
        assert "differs from what was reviewed" in layer["status"]["pendingPlan"]["reason"]
        told = wait_for(lambda: _told(world, "the merged result differs from what was reviewed: waiting for "
                                             "approval"), 60, what="the pull request told why it waits")
        assert "#2" in told[0] and "app" in told[0]
        assert len(_apply_runs(world, "app")) == applies  # nothing applied


def test_attack_a_forks_merged_plan_never_applies_without_an_approval(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    """An outsider's fork, approved for planning by a maintainer's label and merged: the merged files are the
    head's and the branch's plan makes exactly the changes of the fork's plan (the same digest), yet its plan ran the
    outsider's code, so it approves nothing: the layer waits, and the pull request says why."""
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
            {"spec": {"pullRequests": {"forks": {"policy": "RequireApproval", "approvers": ["maintainer"],
                                                 "approvalLabel": "burrito-py/plan"}}}})
        head = world.push(5, {"layers/app/main.tf": layer_code("from a fork")}, "a fork's change")
        world.hook("opened", 5, head, fork=True, sender="outsider")
        world.hook("labeled", 5, head, fork=True, sender="maintainer", label="burrito-py/plan")
        planned = world.wait_pr(5, head, "Planned", timeout=180)
        reviewed_digest = planned["status"]["layers"][0]["changesDigest"]
        merge = _merge(world, 5, head, fork=True)

        def judged() -> dict[str, Any] | None:
            body = platform.layer("app")
            status = body.get("status") or {}
            verdict = status.get("reviewedPlan") or {}
            return body if (status.get("state") == "ApplyNeeded" and verdict.get("pullRequest", "").endswith("-pr-5")
                            and (status.get("pendingPlan") or {}).get("revision") == merge) else None

        try:
            layer = wait_for(judged, 240, interval=0.5, what="app judged at the fork's merge")
        except AssertionError:
            raise AssertionError(f"app: {platform.layer('app').get('status')}; pull request: "
                                 f"{world.pull_request(5).get('status')}") from None
        # Everything else matches: the branch's plan makes the fork's reviewed changes.
        assert layer["status"]["policy"]["plan"]["changesDigest"] == reviewed_digest
        verdict = layer["status"]["reviewedPlan"]
        assert verdict["result"] == "Differs" and "fork" in verdict["message"], verdict
        assert world.pull_request(5)["status"]["merged"]["reason"].startswith("a fork's pull request")
        wait_for(lambda: _told(world, "fork"), 60, what="the pull request told why it waits")
        assert not _apply_runs(world, "app")


def test_a_merge_whose_reviews_cannot_be_read_says_why_and_is_recorded_once_they_can(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    """The `approved` apply requirement is asked of the provider when the merge is seen. While the provider does not
    answer (here: rate limited), nothing of the merge is recorded and, before, nothing said why but the log: the pull
    request now shows `Ready=False, ReviewsUnavailable` with the provider's answer, and the merge is recorded (and
    the condition mended) once the reviews are read."""
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
            {"spec": {"pullRequests": {"commands": {"applyRequirements": ["approved"]}}}})
        head = world.push(7, {"layers/app/main.tf": layer_code("v7")}, "change app")
        world.hook("opened", 7, head)
        world.wait_pr(7, head, "Planned", timeout=180)
        world.fake.approved_by, world.fake.reviewed_at = ["reviewer"], head  # an approval of the merged head
        world.fake.permissions["reviewer"] = "write"  # an approval counts only from someone who may write
        world.fake.limited = 10**6  # every call from now on: GitHub's secondary rate limit
        _merge(world, 7, head)

        def ready(reason: str) -> dict[str, Any] | None:
            status = world.pull_request(7).get("status") or {}
            cond = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
            return status if cond.get("reason") == reason else None

        waiting = wait_for(lambda: ready("ReviewsUnavailable"), 60, interval=0.2, what="the reviews' failure shown")
        cond = next(c for c in waiting["conditions"] if c["type"] == "Ready")
        assert cond["status"] == "False", cond
        assert cond["message"].startswith("cannot read its reviews for the apply requirement approved: "), cond
        assert "rate limit" in cond["message"], cond
        assert not waiting.get("merged"), "nothing of the merge is recorded before its reviews are read"

        world.fake.limited = 0
        recorded = wait_for(lambda: ready("ReviewsRead"), 60, interval=0.2, what="the merge recorded")
        assert recorded["merged"]["reason"] == "" and recorded["merged"]["headSha"] == head, recorded["merged"]
        cond = next(c for c in recorded["conditions"] if c["type"] == "Ready")
        assert cond["status"] == "True", cond
