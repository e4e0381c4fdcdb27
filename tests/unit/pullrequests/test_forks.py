"""Fork pull requests (issue 24, finding 1a): detected from the signed delivery, never planned by default, planned
with RequireApproval only at the head an approver labelled; their plans inherit no secret unless told (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.layer.inputs_record import Upstream
from burrito_py.controllers.pullrequest.decide import (
    PullRequestSnapshot,
    RunFacts,
    decide_pull_request,
    pull_request_record,
)
from burrito_py.gitproviders.base import PullRequestEvent
from burrito_py.gitproviders.delivery import Delivery, pull_request_event
from burrito_py.pullrequests.affected import Affected
from burrito_py.pullrequests.forks import (
    ApprovalToCheck,
    approval_change,
    approval_to_check,
    fork_gate,
    inherits_secrets,
)
from burrito_py.pullrequests.statuses import commit_statuses

HEAD, NEW = "a" * 40, "c" * 40
FORKS = {"forks": {"policy": "RequireApproval", "approvers": ["maintainer"], "approvalLabel": "plan-it"}}


def github(action: str, head_repo: dict[str, Any] | None, base_repo: dict[str, Any] | None, **extra: Any) -> Delivery:
    pull_request: dict[str, Any] = {
        "number": 3, "base": {"ref": "main", **({"repo": base_repo} if base_repo is not None else {})},
        "head": {"ref": "patch-1", "sha": HEAD, **({"repo": head_repo} if head_repo is not None else {})},
        "updated_at": "2026-03-01T10:20:30Z", "user": {"login": "outsider"}}
    return Delivery("github", "pull_request", "d", {"action": action, "pull_request": pull_request,
                                                     "repository": {"full_name": "team/infra"},
                                                     "sender": {"login": extra.pop("sender", "outsider")}, **extra})


BASE = {"id": 1, "full_name": "team/infra", "fork": False}


@pytest.mark.parametrize(("head_repo", "fork"), [
    (BASE, False),
    ({"id": 2, "full_name": "outsider/infra", "fork": True}, True),
    ({"id": 2, "full_name": "team/infra"}, True),  # the id decides, not a name the fork's owner chose
    ({"full_name": "outsider/infra"}, True),
    (None, True),  # a deleted fork, or a payload that does not say: a fork
])
def test_github_and_gitea_tell_a_fork_by_the_head_repository(head_repo: dict[str, Any] | None, fork: bool) -> None:
    event = pull_request_event(github("opened", head_repo, BASE))
    assert event is not None and event.from_fork is fork and event.author == "outsider"


@pytest.mark.parametrize(("source", "target", "fork"), [(5, 5, False), (6, 5, True), (None, 5, True)])
def test_gitlab_tells_a_fork_by_the_source_project(source: int | None, target: int, fork: bool) -> None:
    attributes: dict[str, Any] = {"iid": 3, "action": "open", "target_branch": "main", "source_branch": "x",
                                  "last_commit": {"id": HEAD}, "updated_at": "2026-03-01 10:20:30 UTC",
                                  "target_project_id": target}
    if source is not None:
        attributes["source_project_id"] = source
    event = pull_request_event(Delivery("gitlab", "Merge Request Hook", "d", {
        "object_attributes": attributes, "project": {"path_with_namespace": "team/infra"},
        "user": {"username": "outsider"}}))
    assert event is not None and event.from_fork is fork


def test_label_events_carry_the_label_and_who_added_it() -> None:
    fork = {"id": 2, "full_name": "outsider/infra"}
    event = pull_request_event(github("labeled", fork, BASE, label={"name": "plan-it"}, sender="maintainer"))
    assert event is not None and (event.action, event.added, event.sender) == ("labeled", ("plan-it",), "maintainer")
    gone = pull_request_event(github("unlabeled", fork, BASE, label={"name": "plan-it"}, sender="outsider"))
    assert gone is not None and gone.removed == ("plan-it",)


def label_event(sender: str, head: str = HEAD, added: tuple[str, ...] = ("plan-it",), removed: tuple[str, ...] = (),
                fork: bool = True) -> PullRequestEvent:
    return PullRequestEvent("github", "labeled", 3, "main", "patch-1", head, project="team/infra",
                            from_fork=fork, sender=sender, added=added, removed=removed)


def test_only_an_approvers_label_approves_and_only_the_head_it_was_added_at() -> None:
    change = approval_change(label_event("maintainer"), FORKS)
    assert change.action == "set" and change.approval == {"by": "maintainer", "headSha": HEAD, "label": "plan-it"}
    assert approval_change(label_event("outsider"), FORKS).action == "none"  # the author labels their own PR
    assert approval_change(label_event("maintainer", added=("other",)), FORKS).action == "none"
    assert approval_change(label_event("outsider", added=(), removed=("plan-it",)), FORKS).action == "clear"
    assert approval_change(label_event("maintainer"), {"forks": {"policy": "Ignore"}}).action == "none"
    assert approval_change(label_event("maintainer", fork=False), FORKS).action == "none"


def spec(approval: dict[str, Any] | None, head: str = HEAD, fork: bool = True) -> dict[str, Any]:
    return {"provider": "github", "repository": "infra", "project": "team/infra", "number": 3, "base": "main",
            "headSha": head, "state": "open", "fromFork": fork, **({"approval": approval} if approval else {})}


APPROVED = {"by": "maintainer", "headSha": HEAD, "label": "plan-it"}


def test_a_fork_is_gated_by_default_and_until_an_approval_of_its_very_head() -> None:
    assert fork_gate(spec(None, fork=False), {}, {}) is None
    ignored = fork_gate(spec(APPROVED), {"enabled": True}, {})  # default: forks not planned, approval or not
    assert ignored is not None and ignored.reason == "ForkNotPlanned"
    waiting = fork_gate(spec(None), FORKS, {})
    assert waiting is not None and waiting.reason == "AwaitingApproval" and "plan-it" in waiting.message
    assert fork_gate(spec(APPROVED), FORKS, {}) is None
    pushed = fork_gate(spec(APPROVED, head=NEW), FORKS, {})  # a push after the approval: approve again
    assert pushed is not None and pushed.reason == "AwaitingApproval" and "new push" in pushed.message
    dropped = {"forks": {**FORKS["forks"], "approvers": ["someone-else"]}}  # an approver removed: revoked
    assert fork_gate(spec(APPROVED), dropped, {}) is not None


@given(policy=st.sampled_from([None, "Ignore", "RequireApproval"]),
       by=st.sampled_from(["maintainer", "outsider", ""]), at=st.sampled_from([HEAD, NEW]),
       label=st.sampled_from(["plan-it", "other"]), fork=st.booleans())
def test_the_gate_opens_exactly_for_non_forks_and_approved_heads(policy: str | None, by: str, at: str, label: str,
                                                                   fork: bool) -> None:
    settings = {"forks": {**FORKS["forks"], "policy": policy}} if policy else {}
    approval = {"by": by, "headSha": at, "label": label} if by else None
    open_ = fork_gate(spec(approval, fork=fork), settings, {}) is None
    assert open_ == (not fork or (policy == "RequireApproval" and by == "maintainer" and at == HEAD
                                  and label == "plan-it"))


BY_COMMENT = {"by": "maintainer", "headSha": HEAD, "label": "comment", "comment": "c7", "byId": 42}


def test_attack_an_approval_by_comment_counts_only_once_the_provider_says_its_author_may_write() -> None:
    """Anyone may comment, and a login changes hands (a renamed or deleted account frees it; a typo in `approvers`
    names a stranger): `/burrito-py approve` from whoever holds an approver's login now opened the gate."""
    approved = spec(BY_COMMENT)
    assert approval_to_check(approved, FORKS, {}) == ApprovalToCheck("c7", "maintainer", 42)
    waiting = fork_gate(approved, FORKS, {})
    assert waiting is not None and waiting.reason == "AwaitingApproval"
    assert "has not yet said whether maintainer may write" in waiting.message
    refused = {"approvalChecked": {"comment": "c7", "by": "maintainer", "mayWrite": False}}
    assert approval_to_check(approved, FORKS, refused) is None  # asked once per approving comment
    gate = fork_gate(approved, FORKS, refused)
    assert gate is not None and "maintainer may not write to the repository" in gate.message
    confirmed = {"approvalChecked": {"comment": "c7", "by": "maintainer", "mayWrite": True}}
    assert fork_gate(approved, FORKS, confirmed) is None
    # Another comment's answer says nothing of this one; and the head still binds it.
    other = {"approvalChecked": {"comment": "c6", "by": "maintainer", "mayWrite": True}}
    assert fork_gate(approved, FORKS, other) is not None and approval_to_check(approved, FORKS, other) is not None
    assert fork_gate(spec(BY_COMMENT, head=NEW), FORKS, confirmed) is not None


def test_only_a_forks_approval_by_comment_by_an_approver_is_asked_about() -> None:
    assert approval_to_check(spec(APPROVED), FORKS, {}) is None  # a label: the provider limits who may add one
    assert approval_to_check(spec(BY_COMMENT, fork=False), FORKS, {}) is None
    assert approval_to_check(spec({**BY_COMMENT, "by": "outsider"}), FORKS, {}) is None  # never opens the gate
    assert approval_to_check(spec(None), FORKS, {}) is None
    # An approval written before the server recorded the commenter's id: the comment's own record has it.
    older = {**spec({k: v for k, v in BY_COMMENT.items() if k != "byId"}),
             "commands": [{"id": "c7", "by": "maintainer", "byId": 7, "text": "/burrito-py approve"}]}
    assert approval_to_check(older, FORKS, {}) == ApprovalToCheck("c7", "maintainer", 7)


@given(check=st.sampled_from([None, "c7", "c6"]), may=st.booleans(), head=st.sampled_from([HEAD, NEW]),
       by=st.sampled_from(["maintainer", "outsider"]))
def test_a_comment_approval_opens_the_gate_exactly_when_its_author_was_found_to_write(
        check: str | None, may: bool, head: str, by: str) -> None:
    status = {"approvalChecked": {"comment": check, "by": by, "mayWrite": may}} if check else {}
    open_ = fork_gate(spec({**BY_COMMENT, "by": by}, head=head), FORKS, status) is None
    assert open_ == (check == "c7" and may and head == HEAD and by == "maintainer")


def test_a_gated_fork_gets_no_run_loses_its_runs_and_says_why() -> None:
    gate = fork_gate(spec(APPROVED, head=NEW), FORKS, {})
    old = RunFacts("pr3-app-0123456789", ("team", "app"), "Running")
    snap = PullRequestSnapshot("infra-pr-3", "team", spec(APPROVED, head=NEW), {"headSha": HEAD}, {("team", "app"): ""},
                               (old,), affected=Affected((("team", "app"),), ()), gate=gate)
    decision = decide_pull_request(snap)
    assert decision.create == () and decision.discard == (old,) and not decision.needs_affected
    assert decision.status["state"] == "AwaitingApproval" and decision.status["headSha"] is None
    assert decision.results is not None and decision.results.notice is not None
    [status] = commit_statuses(decision.results)
    assert status.state == "pending" and "awaiting approval" in status.description and len(status.description) <= 140


def test_pull_requests_inherit_no_secret_unless_told_and_forks_only_by_their_own_setting() -> None:
    assert not inherits_secrets({}, False) and not inherits_secrets(None, True)
    assert inherits_secrets({"inheritSecrets": True}, False)
    assert not inherits_secrets({"inheritSecrets": True}, True)
    assert inherits_secrets({"forks": {"inheritSecrets": True}}, True)


def test_a_pull_requests_record_has_no_varsfrom_value_nor_sensitive_upstream_output() -> None:
    record = pull_request_record(Upstream("sha256:d", {"vpc": "vpc-1", "db_password": "hunter2-long"},
                                          ("db_password",)))
    assert record["variables"] == {"vpc": "vpc-1"} and record["secretVariables"] == []
    assert "hunter2-long" not in str(record) and record["digest"] == "sha256:d"
