"""Issue 30: comment commands on a pull request, end to end: real git, real terraform, the real server receiving
signed comment webhooks, the controllers answering on a fake GitHub or GitLab API.

`/burrito-py plan` from an allowed commenter with write permission is answered at once and plans the layer again
(a new run at the same head); a commenter not allowed is refused with the reason and nothing runs; a redelivered
comment is answered once; a layer the pull request does not touch and an apply (not enabled before merge) are
refused, and nothing is ever applied."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from burrito_py.timeutil import format_time, utcnow
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import layer_code, wait_for
from .test_fork_pull_requests import no_run_for, ours, wait_state
from .test_pull_requests import HOOK_SECRET, PROJECT, World, pr_runs, pull_request_world


@pytest.fixture(params=["github", "gitlab"])
def world(request: pytest.FixtureRequest, tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
          ) -> Iterator[World]:
    with pull_request_world(tmp_path, repo, request.param, real_cluster) as built:
        built.platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, built.platform.namespace, "terraformrepositories", "infra",
            {"spec": {"pullRequests": {"commands": {"allowed": ["alice", "rita"]}}}})
        built.fake.permissions.update({"alice": "write", "rita": "read", "mallory": "write"})
        built.fake.members.update({1: 30, 2: 20, 3: 30})  # GitLab: alice Developer, rita Reporter, mallory
        yield built


USER_IDS = {"alice": 1, "rita": 2, "mallory": 3, "maint": 4, "kate": 5, "kurt": 6}


def comment(world: World, number: int, text: str, login: str, comment_id: int, delivery: str = "") -> float:
    """Send a signed comment webhook; returns when it was sent (time.monotonic)."""
    created = format_time(utcnow())
    if world.provider == "github":
        payload: dict[str, Any] = {
            "action": "created", "issue": {"number": number, "state": "open", "pull_request": {"url": "x"}},
            "comment": {"id": comment_id, "body": text, "user": {"login": login, "id": USER_IDS[login]},
                        "created_at": created},
            "repository": {"clone_url": world.url, "full_name": PROJECT}, "sender": {"login": login}}
        body = json.dumps(payload).encode()
        digest = hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery or f"comment-{comment_id}",
                   "X-Hub-Signature-256": f"sha256={digest}"}
    else:
        payload = {"object_kind": "note", "user": {"username": login, "id": USER_IDS[login]},
                   "project": {"git_http_url": world.url, "path_with_namespace": PROJECT},
                   "object_attributes": {"id": comment_id, "note": text, "noteable_type": "MergeRequest",
                                         "created_at": created.replace("T", " ").replace("Z", " UTC")},
                   "merge_request": {"iid": number, "state": "opened"}}
        body = json.dumps(payload).encode()
        headers = {"X-Gitlab-Event": "Note Hook", "X-Gitlab-Token": HOOK_SECRET,
                   "X-Gitlab-Event-UUID": delivery or f"comment-{comment_id}"}
    sent = time.monotonic()
    answer = world.http.post("/api/webhook", content=body, headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code in (200, 202), answer.text
    world.answers.append(answer.json())
    return sent


def replies(world: World) -> list[str]:
    return [body for body in world.fake.comments.values() if body.startswith("burrito-py: `")]


def answered(world: World, number: int, comment_id: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        handled = (world.pull_request(number).get("status") or {}).get("commands") or ()
        return next((c for c in handled if c["id"] == str(comment_id)), None)

    return wait_for(found, 60, interval=0.05, what=f"comment {comment_id} answered")


def test_a_plan_comment_plans_again_and_an_unauthorized_one_is_refused(world: World) -> None:
    platform, fake = world.platform, world.fake
    real = platform.annotations("app")
    head = world.push(1, {"layers/app/main.tf": layer_code("v2")}, "change app")
    world.hook("opened", 1, head)
    planned = world.wait_pr(1, head, "Planned")
    first = planned["status"]["layers"][0]["run"]

    # An allowed commenter with write access: answered within seconds, the layer planned again at the same head.
    posts = len(fake.comments)
    sent = comment(world, 1, "/burrito-py plan app", "alice", 7001)
    record = answered(world, 1, 7001)
    reply_at = next(fake.times[i] for i in range(len(fake.calls)) if fake.times[i] >= sent
                    and fake.calls[i][0] == "POST" and fake.calls[i][1].endswith(("/comments", "/notes")))
    assert record["outcome"] == "done" and "planning again" in record["message"]
    assert len(fake.comments) == posts + 1 and "done" in replies(world)[-1]
    again = wait_for(lambda: next((r for r in pr_runs(platform) if r["metadata"]["name"] != first), None), 30,
                     interval=0.05, what="the new plan run")
    assert again["spec"]["layer"]["revision"] == head and again["spec"]["action"] == "plan"
    replanned = world.wait_pr(1, head, "Planned")
    assert replanned["status"]["layers"][0]["run"] == again["metadata"]["name"] != first
    assert replanned["status"]["layers"][0]["replan"] == "7001"
    print(f"\n{world.provider}: comment → reply {reply_at - sent:.3f} s")

    # Not allowed, or allowed but read-only, or an apply: refused with the reason; nothing runs, nothing applies.
    runs = {r["metadata"]["name"] for r in pr_runs(platform)}
    for login, text, cid, why in (
        ("mallory", "/burrito-py plan", 7002, "mallory is not among spec.pullRequests.commands.allowed"),
        ("mallory", "/burrito-py apply app", 7003, "mallory is not among"),
        ("rita", "/burrito-py plan", 7004, "rita has no write permission"),
        ("alice", "/burrito-py plan nothere", 7005, "does not change nothere"),
        ("alice", "/burrito-py apply app", 7006, "apply-before-merge is not enabled for app"),
        ("alice", "/burrito-py frobnicate", 7007, "unknown command"),
    ):
        comment(world, 1, text, login, cid)
        record = answered(world, 1, cid)
        assert record["outcome"] == "refused" and why in replies(world)[-1], (text, replies(world)[-1])
    assert {r["metadata"]["name"] for r in pr_runs(platform)} == runs
    assert platform.annotations("app") == real and all(r["spec"]["action"] == "plan" for r in platform.runs())

    # Logins mapped to Kubernetes identities: a SubjectAccessReview (update terraformlayers here) decides.
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(platform.core.api_client)
    rbac.create_namespaced_role(platform.namespace, {"metadata": {"name": "layer-editor"}, "rules": [
        {"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["get", "update", "patch"]}]})
    rbac.create_namespaced_role_binding(platform.namespace, {
        "metadata": {"name": "kate-edits-layers"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                               "kind": "Role", "name": "layer-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kate@example"}]})
    platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
        {"spec": {"pullRequests": {"commands": {"kubernetes": [{"login": "kate", "user": "kate@example"},
                                                               {"login": "kurt", "user": "kurt@example"}]}}}})
    fake.permissions.update({"kate": "write", "kurt": "write"})
    fake.members.update({5: 30, 6: 30})
    comment(world, 1, "/burrito-py plan", "kurt", 7008)
    assert answered(world, 1, 7008)["outcome"] == "refused"
    assert "Kubernetes user kurt@example, who may not update terraformlayers" in replies(world)[-1]
    assert {r["metadata"]["name"] for r in pr_runs(platform)} == runs
    comment(world, 1, "/burrito-py plan app", "kate", 7009)
    assert answered(world, 1, 7009)["outcome"] == "done"
    wait_for(lambda: {r["metadata"]["name"] for r in pr_runs(platform)} != runs, 30, interval=0.05,
             what="kate's plan run")
    world.wait_pr(1, head, "Planned")
    runs = {r["metadata"]["name"] for r in pr_runs(platform)}

    # The provider redelivers alice's plan comment (under a new delivery id): no second answer, no second plan.
    count = len(replies(world))
    comment(world, 1, "/burrito-py plan app", "alice", 7001, delivery="comment-7001-redelivered")
    time.sleep(3)
    assert len(replies(world)) == count
    assert {r["metadata"]["name"] for r in pr_runs(platform)} == runs
    handled = [c["id"] for c in world.pull_request(1)["status"]["commands"]]
    assert handled.count("7001") == 1


def test_a_forks_head_is_approved_for_planning_by_an_approvers_comment_and_only_that_head(world: World) -> None:
    """Issue 30 item 8: `/burrito-py approve` from one of the approvers plans the fork's head it saw; the author's
    own approve, or a plan command before the approval, plans nothing; a push waits for a new approval.

    Attack: anyone may comment, and a login changes hands (a renamed or deleted account frees it for anyone to
    register; a typo in `approvers` names a stranger). `kurt` is listed, but whoever comments as kurt now has no
    access to the repository: before, their approve comment planned the fork's code; now the controllers ask the
    provider first, and only an approver who may write to the repository approves."""
    world.platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, world.platform.namespace, "terraformrepositories", "infra",
        {"spec": {"pullRequests": {"forks": {"policy": "RequireApproval", "approvers": ["maint", "kurt"]}}}})
    world.fake.permissions["maint"] = "write"
    world.fake.members[USER_IDS["maint"]] = 30  # GitLab: Developer
    head = world.push(5, {"layers/app/main.tf": layer_code("from a fork")}, "a fork's change")
    world.hook("opened", 5, head, fork=True, sender="mallory")
    wait_state(world, 5, "AwaitingApproval")
    wait_for(lambda: bool(ours(world, 5)) and "waiting for approval to plan" in ours(world, 5)[0], 30,
             what="the sticky comment saying it waits")
    assert "/burrito-py approve" in ours(world, 5)[0]

    # The fork's author approves their own head; an allowed commander asks for a plan before any approval.
    comment(world, 5, "/burrito-py approve", "mallory", 8001)
    assert answered(world, 5, 8001)["outcome"] == "refused"
    assert "mallory is not among spec.pullRequests.forks.approvers" in replies(world)[-1]
    comment(world, 5, "/burrito-py plan", "alice", 8002)
    assert answered(world, 5, 8002)["outcome"] == "refused" and "not planned" in replies(world)[-1]
    no_run_for(world)
    assert "approval" not in world.pull_request(5)["spec"]

    # The login of a listed approver, held by someone without access to the repository: nothing is planned.
    comment(world, 5, "/burrito-py approve", "kurt", 8004)
    record = answered(world, 5, 8004)
    assert record["outcome"] == "refused" and "kurt may not write to the repository" in record["message"], record
    held = world.pull_request(5)
    assert held["spec"]["approval"]["comment"] == "8004"  # what the server wrote: it does not count
    assert held["status"]["approvalChecked"] == {**held["status"]["approvalChecked"], "comment": "8004",
                                                 "by": "kurt", "mayWrite": False}
    assert held["status"]["state"] == "AwaitingApproval"
    assert "kurt may not write to the repository" in next(
        c["message"] for c in held["status"]["conditions"] if c["type"] == "Planned")
    no_run_for(world)

    # An approver's comment: this head is planned.
    comment(world, 5, "/burrito-py approve", "maint", 8003)
    assert answered(world, 5, 8003)["outcome"] == "done" and "maint approved head" in replies(world)[-1]
    planned = world.wait_pr(5, head, "Planned", timeout=150)
    assert planned["spec"]["approval"]["comment"] == "8003" and planned["spec"]["approval"]["headSha"] == head
    assert len(pr_runs(world.platform)) == 1

    # A push: a new head that waits for its own approval; the approved head's run is discarded.
    pushed = world.push(5, {"layers/app/main.tf": layer_code("pushed after the approval")}, "sneaky push")
    world.hook("synchronize", 5, pushed, fork=True, sender="mallory")
    wait_state(world, 5, "AwaitingApproval")
    wait_for(lambda: not pr_runs(world.platform), 60, what="the approved head's run discarded")
    no_run_for(world)


def test_a_reply_the_provider_refuses_shows_on_the_pull_request_until_it_is_posted(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    """A command's reply that the provider refuses (here: rate limited) was only a log line before: the pull
    request now shows `Commented=False` with the provider's answer and a `CommentFailed` Warning event, the command
    is answered at the retry, and the condition is mended then. The command acts once (one re-plan)."""
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform, fake = world.platform, world.fake
        platform.custom.patch_namespaced_custom_object(
            ann.GROUP, ann.VERSION, platform.namespace, "terraformrepositories", "infra",
            {"spec": {"pullRequests": {"commands": {"allowed": ["alice"]}}}})
        fake.permissions["alice"] = "write"
        head = world.push(3, {"layers/app/main.tf": layer_code("v3")}, "change app")
        world.hook("opened", 3, head)
        world.wait_pr(3, head, "Planned", timeout=180)
        runs = {r["metadata"]["name"] for r in pr_runs(platform)}
        posts = len(replies(world))

        fake.limited = 10**6  # every call from now on: GitHub's secondary rate limit
        comment(world, 3, "/burrito-py plan app", "alice", 9001)

        def commented(status: str) -> dict[str, Any] | None:
            conditions = (world.pull_request(3).get("status") or {}).get("conditions") or ()
            cond = next((c for c in conditions if c["type"] == "Commented"), None)
            return cond if cond is not None and cond["status"] == status else None

        cond = wait_for(lambda: commented("False"), 60, interval=0.2, what="the refused reply shown")
        assert cond["reason"] == "ProviderError", cond
        assert cond["message"].startswith("cannot answer 1 comment command(s) (tried again): "), cond
        assert "rate limit" in cond["message"], cond
        warnings = [e.message for e in platform.core.list_namespaced_event(platform.namespace).items
                    if e.involved_object.kind == "TerraformPullRequest" and e.reason == "CommentFailed"]
        assert warnings == [cond["message"]], warnings
        assert len(replies(world)) == posts
        assert not (world.pull_request(3).get("status") or {}).get("commands"), "nothing answered yet"

        fake.limited = 0
        record = answered(world, 3, 9001)
        assert record["outcome"] == "done", record
        mended = wait_for(lambda: commented("True"), 60, interval=0.2, what="the condition mended")
        assert mended["reason"] == "Posted", mended
        assert len(replies(world)) == posts + 1 and "done" in replies(world)[-1]
        wait_for(lambda: len({r["metadata"]["name"] for r in pr_runs(platform)} - runs) == 1, 30, interval=0.1,
                 what="one re-plan")
        time.sleep(2)
        assert len({r["metadata"]["name"] for r in pr_runs(platform)} - runs) == 1, "the command acted once"
