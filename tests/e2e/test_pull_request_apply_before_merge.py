"""Issue 30 item 3: apply before merge, end to end on the real control plane (docs §22.8): real git, real terraform,
the real server receiving signed webhooks, the controllers answering on a fake GitHub or GitLab API.

A layer opted in (`spec.pullRequests.applyBeforeMerge`): a pull request is planned; a read-only commenter's apply
is refused; an allowed one's applies exactly the plan the pull request shows (its run and sum) as a TerraformRun of
the pull request, and the layer is locked to it: a redelivered or repeated command applies nothing again, a second
pull request's apply is refused naming the holder, and the layer's own approved apply waits, visibly. The merge
releases the lock and the layer, planning the merge commit, finds nothing left to apply. A second pull request
applied, then closed without merging, releases the lock and says its change is still live."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from burrito_py.pullrequests.apply import apply_run_name
from tests.support.git_repos import TestRepo, run_git
from tests.support.real_cluster import RealCluster

from .conftest import layer_code, wait_for
from .test_pull_request_after_merge import _merge
from .test_pull_request_commands import answered, comment, replies
from .test_pull_requests import World, pr_runs, pull_request_world


def _applies(world: World) -> list[dict[str, Any]]:
    return [r for r in pr_runs(world.platform) if r["spec"]["action"] == "apply"]


def _layer_applies(world: World) -> list[dict[str, Any]]:
    return [r for r in world.platform.runs("app") if r["spec"]["action"] == "apply"]


def _finished(world: World, name: str, timeout: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = next((r for r in _applies(world) if r["metadata"]["name"] == name), None)
        return run if run is not None and (run.get("status") or {}).get("state") in ("Succeeded", "Failed") else None

    run = wait_for(done, timeout, interval=0.5, what=f"apply run {name} finished")
    assert run["status"]["state"] == "Succeeded", run["status"]
    return run


def _opened_and_applied(world: World, number: int, message: str, comment_id: int) -> str:
    """Pull request `number` changing app's message, planned, then applied by alice's comment: its head."""
    head = world.push(number, {"layers/app/main.tf": layer_code(message)}, f"app says {message}")
    world.hook("opened", number, head)
    world.wait_pr(number, head, "Planned", timeout=180)
    comment(world, number, "/burrito-py apply app", "alice", comment_id)
    assert answered(world, number, comment_id)["outcome"] == "done", replies(world)[-1]
    run = wait_for(lambda: [r for r in _applies(world) if r["spec"]["pullRequest"].endswith(f"-pr-{number}")]
                   or None, 30, interval=0.2, what=f"the apply run of pull request {number}")
    _finished(world, run[0]["metadata"]["name"])
    assert message in world.platform.state_file("app").read_text()
    return head


def _lock_condition(world: World) -> dict[str, Any] | None:
    conditions = (world.platform.layer("app").get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == "PullRequestLock"), None)


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_apply_before_merge_applies_the_reviewed_plan_locks_the_layer_and_merge_or_close_releases_it(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster, provider: str
) -> None:
    with pull_request_world(tmp_path, repo, provider, real_cluster) as world:
        platform, fake = world.platform, world.fake
        fake.members.update({1: 30, 2: 20})  # GitLab: alice Developer, rita Reporter
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
            {"spec": {"pullRequests": {"commands": {"allowed": ["alice", "rita"]}}}})
        fake.permissions.update({"alice": "write", "rita": "read"})
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "app",
            {"spec": {"pullRequests": {"applyBeforeMerge": True}}})
        pr1 = world.pull_request  # the TerraformPullRequest of a number

        head = world.push(1, {"layers/app/main.tf": layer_code("v2")}, "change app")
        world.hook("opened", 1, head)
        row = world.wait_pr(1, head, "Planned", timeout=180)["status"]["layers"][0]
        plan_sum, plan_run = row["planSum"], row["run"]
        assert plan_sum.startswith("sha256:") and row["planAttempt"] >= 1
        # The sticky comment shows the sum an apply applies.
        wait_for(lambda: [b for b in fake.comments.values() if b.startswith("<!-- burrito-py:pull-request")
                          and f"plan `{plan_sum}`" in b] or None, 30, what="the sticky comment showing the plan's sum")

        # Attack: a run written by hand (anyone who may create runs) as this pull request's apply of its plan, on a
        # layer no command locked: the run controller gives it no pod (the pod would get the layer's identity).
        name = pr1(1)["metadata"]["name"]
        platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformruns", {
            "apiVersion": ann.API_VERSION, "kind": "TerraformRun", "metadata": {"name": "forged-apply"},
            "spec": {"action": "apply", "pullRequest": name, "layer": {"name": "app", "revision": head},
                     "artifact": {"run": plan_run, "attempt": row["planAttempt"], "sum": plan_sum}}})

        def refused() -> dict[str, Any] | None:
            forged = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                  "terraformruns", "forged-apply")
            conditions = (forged.get("status") or {}).get("conditions") or ()
            found = next((c for c in conditions if c["type"] == "Admitted" and c["reason"] == "ApplyNotAllowed"), None)
            return {**found, "attempts": (forged.get("status") or {}).get("attempts") or []} if found else None

        admitted = wait_for(refused, 60, interval=0.2, what="the forged apply refused")
        assert "is not locked to pull request" in admitted["message"], admitted
        time.sleep(2)
        assert not refused() or not refused()["attempts"]  # type: ignore[index]
        assert all("forged-apply" not in p.metadata.name for p in platform.core.list_namespaced_pod(
            platform.namespace).items)
        assert not platform.state_file("app").exists() or "v2" not in platform.state_file("app").read_text()
        platform.custom.delete_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformruns",
                                                        "forged-apply")
        wait_for(lambda: all(r["metadata"]["name"] != "forged-apply" for r in pr_runs(world.platform)), 30,
                 interval=0.2, what="the forged run gone")

        # Attack: a commenter allowed by the list but without write permission on the repository.
        comment(world, 1, "/burrito-py apply app", "rita", 9001)
        assert answered(world, 1, 9001)["outcome"] == "refused"
        assert "rita has no write permission" in replies(world)[-1] and not _applies(world)

        # Alice applies: exactly the plan shown, as a run of the pull request, requested by her.
        sent = comment(world, 1, "/burrito-py apply app", "alice", 9002)
        record = answered(world, 1, 9002)
        assert record["outcome"] == "done", replies(world)[-1]
        assert plan_sum in replies(world)[-1]
        (run,) = wait_for(lambda: _applies(world) or None, 30, interval=0.05, what="the apply run")
        created = time.monotonic()
        assert run["metadata"]["name"] == apply_run_name(name, 1, (platform.namespace, "app"), plan_sum)
        assert run["spec"]["pullRequest"] == name and run["spec"]["layer"]["revision"] == head
        assert run["spec"]["artifact"] == {"run": plan_run, "attempt": row["planAttempt"], "sum": plan_sum}
        assert run["metadata"]["annotations"][ann.RUN_REQUESTED_BY] == "alice (comment 9002)"
        applied = _finished(world, run["metadata"]["name"])
        print(f"\napply command → apply run seen {created - sent:.2f} s, → applied {time.monotonic() - sent:.2f} s")
        assert applied["status"]["attempts"][-1]["appliedSum"] == plan_sum
        assert "v2" in platform.state_file("app").read_text()
        assert platform.annotations("app")[ann.PULL_REQUEST_LOCK] == name
        held = wait_for(lambda: _lock_condition(world), 60, interval=0.5, what="the layer's PullRequestLock condition")
        assert held["status"] == "False" and name in held["message"]

        # Redelivered (a new delivery id, the same comment): answered once, applied once. Asked again: refused.
        count = len(replies(world))
        comment(world, 1, "/burrito-py apply app", "alice", 9002, delivery="comment-9002-redelivered")
        time.sleep(3)
        assert len(replies(world)) == count and len(_applies(world)) == 1
        comment(world, 1, "/burrito-py apply app", "alice", 9003)
        assert answered(world, 1, 9003)["outcome"] == "refused" and "already applied" in replies(world)[-1]
        assert len(_applies(world)) == 1

        # A second pull request (its own branch from main): its apply is refused, naming the holder.
        repo.checkout("main")
        repo.branch("other")
        other = repo.commit({"layers/app/main.tf": layer_code("v-other")}, "another change to app")
        repo.push(world.bare.as_uri())
        pull_ref = "refs/pull/3/head" if provider == "github" else "refs/merge-requests/3/head"
        run_git(world.bare, "update-ref", pull_ref, other)
        world.hook("opened", 3, other, branch="other")
        world.wait_pr(3, other, "Planned", timeout=180)
        comment(world, 3, "/burrito-py apply app", "alice", 9004)
        assert answered(world, 3, 9004)["outcome"] == "refused"
        assert f"locked to pull request {name}" in replies(world)[-1]
        assert len(_applies(world)) == 1
        world.hook("closed", 3, other, branch="other")
        repo.checkout("feature")

        # The layer's own apply waits: its pending plan (of main, from before) approved, nothing applies.
        pending = wait_for(lambda: (platform.layer("app").get("status") or {}).get("pendingPlan"), 60,
                           what="the layer's pending plan")
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "app",
            {"metadata": {"annotations": {ann.APPROVE_PLAN: pending["sum"]}}})
        wait_for(lambda: "waits" in ((_lock_condition(world) or {}).get("message") or ""), 60, interval=0.5,
                 what="the layer saying its apply waits")
        time.sleep(3)
        assert not _layer_applies(world) and "v2" in platform.state_file("app").read_text()

        # Merged: released once the branch has the merge; the layer plans the merge commit and has nothing to apply.
        merge = _merge(world, 1, head)
        wait_for(lambda: ann.PULL_REQUEST_LOCK not in platform.annotations("app"), 120, interval=0.5,
                 what="the lock released after the merge")

        def settled() -> dict[str, Any] | None:
            body = platform.layer("app")
            a = body["metadata"].get("annotations") or {}
            return body if (a.get(ann.PLAN_COMMIT) == merge and (body.get("status") or {}).get("state") == "Idle"
                            and _lock_condition(world) is None) else None

        try:
            layer = wait_for(settled, 240, interval=0.5, what="app planned at the merge, nothing to apply")
        except AssertionError:
            raise AssertionError(f"app: {platform.layer('app')}") from None
        assert layer["metadata"]["annotations"][ann.PLAN_SUMMARY] == "No changes."
        assert not _layer_applies(world), [(r["metadata"]["name"], r["spec"], r.get("status", {}).get("state"),
                                            r["metadata"].get("annotations"), merge) for r in _layer_applies(world)]
        assert "v2" in platform.state_file("app").read_text()

        # Another pull request applied, then unlocked by comment: released, saying the change is still live.
        head4 = _opened_and_applied(world, 4, "v3", 9005)
        assert platform.annotations("app")[ann.PULL_REQUEST_LOCK] == pr1(4)["metadata"]["name"]
        comment(world, 4, "/burrito-py unlock", "rita", 9006)
        assert answered(world, 4, 9006)["outcome"] == "refused"
        assert platform.annotations("app")[ann.PULL_REQUEST_LOCK] == pr1(4)["metadata"]["name"]
        comment(world, 4, "/burrito-py unlock", "alice", 9007)
        assert answered(world, 4, 9007)["outcome"] == "done" and "still live" in replies(world)[-1]
        assert ann.PULL_REQUEST_LOCK not in platform.annotations("app")
        world.hook("closed", 4, head4)

        # Another one applied, then closed without merging: released, and the pull request is told the change is
        # still live. On GitLab the provider refuses that notice at first (rate limited): the lock is released all
        # the same, the pull request shows the notice is not posted yet (`Commented=False`), rather than only a log
        # line, and keeps it (`status.releaseNotice`) until the provider takes it.
        head5 = _opened_and_applied(world, 5, "v4", 9008)
        assert platform.annotations("app")[ann.PULL_REQUEST_LOCK] == pr1(5)["metadata"]["name"]
        if provider == "gitlab":
            fake.limited = 10**6
        world.hook("closed", 5, head5)
        wait_for(lambda: ann.PULL_REQUEST_LOCK not in platform.annotations("app"), 60, interval=0.5,
                 what="the lock released on close")
        assert "v4" in platform.state_file("app").read_text()
        if provider == "gitlab":
            def unsaid() -> dict[str, Any] | None:
                conditions = (pr1(5).get("status") or {}).get("conditions") or ()
                return next((c for c in conditions if c["type"] == "Commented" and c["status"] == "False"), None)

            cond = wait_for(unsaid, 60, interval=0.2, what="the notice's refusal shown")
            assert cond["message"].startswith(f"released `{platform.namespace}/app`, but cannot say so on the pull "
                                              "request yet (tried again in 15 s): "), cond
            assert cond["reason"] == "ProviderError", cond
            assert cond["message"].endswith("creating the note: rate limited by the provider for 2 s"), cond
            assert not [b for b in fake.comments.values() if "closed without merging" in b]
            assert pr1(5)["status"]["releaseNotice"] == [f"{platform.namespace}/app"]
            fake.limited = 0  # the provider takes it again: the notice is posted at the next try
        told = wait_for(lambda: [b for b in fake.comments.values() if "closed without merging" in b] or None,
                        60, what="the pull request told its change is still live")
        assert "still live" in told[0] and f"`{platform.namespace}/app`" in told[0]
        said = wait_for(lambda: (s := pr1(5).get("status") or {}) and "releaseNotice" not in s and s, 30,
                        interval=0.2, what="the notice no longer pending")
        assert [(c["status"], c["reason"]) for c in said["conditions"] if c["type"] == "Commented"] == [
            ("True", "Posted")]
        assert len([b for b in fake.comments.values() if "closed without merging" in b]) == 1, "posted once"
        assert not _layer_applies(world)
