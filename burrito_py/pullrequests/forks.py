"""Fork pull requests (docs/architecture.md §11.3; issue 24, finding 1a): whether a pull request's head may be planned,
and what a label event does to its approval (pure).

A fork's head is an outsider's code: planning it runs that code (a provider shipped in the pull request, an
`external` data source) in a runner pod. So a fork is planned only when its repository says
`spec.pullRequests.forks.policy: RequireApproval`, and then only at a head one of `forks.approvers` approved by
adding `forks.approvalLabel`: the approval names the head it was given at (the label event's own head), and a
later push is a new head that waits for a new one.

What is trusted: the delivery's signature (the repository's webhook secret, §11.1) proves the provider sent it, so
its `sender` is who added the label, and its `head.sha` the head at that moment. The provider already lets only
people with some write access label a pull request (GitHub triage, GitLab Reporter, Gitea write); `approvers`
narrows that to named logins. Nothing else of the payload (the author, the title, the head's branch) is trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.gitproviders.base import PullRequestEvent

__all__ = ["ApprovalChange", "Gate", "approval_change", "fork_gate", "fork_settings", "inherits_secrets"]

DEFAULT_LABEL = "burrito-py/plan"


def fork_settings(pull_requests: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """`spec.pullRequests.forks` of a repository, {} when unset."""
    forks = (pull_requests or {}).get("forks")
    return forks if isinstance(forks, Mapping) else {}


def inherits_secrets(pull_requests: Mapping[str, Any] | None, from_fork: bool) -> bool:
    """Whether a pull request's plans get the layer's varsFrom values and Secret-fed runner env: only when the
    repository says so, for a fork only by `forks.inheritSecrets` (never by the general setting)."""
    if from_fork:
        return fork_settings(pull_requests).get("inheritSecrets") is True
    return (pull_requests or {}).get("inheritSecrets") is True


@dataclass(frozen=True, slots=True)
class Gate:
    """Why a pull request's head is not planned now: the status state, the `Planned` condition's reason, and
    what the comment and the commit status say (who must do what)."""

    state: Literal["AwaitingApproval", "NotPlanned"]
    reason: Literal["AwaitingApproval", "ForkNotPlanned"]
    message: str
    short: str  # for the commit status (140 characters)


def fork_gate(spec: Mapping[str, Any], pull_requests: Mapping[str, Any] | None) -> Gate | None:
    """None when the pull request's head may be planned; else why not. A pull request not from a fork is never
    gated; a fork is gated unless RequireApproval and its approval is by an approver, with the label, at
    `spec.headSha` (the approvers and label are read now: removing someone from `approvers` revokes their
    approvals)."""
    if not spec.get("fromFork"):
        return None
    forks = fork_settings(pull_requests)
    if forks.get("policy") != "RequireApproval":
        return Gate("NotPlanned", "ForkNotPlanned",
                    "this pull request comes from a fork, and the repository does not plan forks' pull requests "
                    "(spec.pullRequests.forks.policy)", "a fork's pull request: this repository does not plan them")
    label = str(forks.get("approvalLabel") or DEFAULT_LABEL)
    approvers = sorted(str(a) for a in forks.get("approvers") or ())
    head = str(spec.get("headSha") or "")
    approval = spec.get("approval") or {}
    by_comment = approval.get("label") == "comment" and bool(approval.get("comment"))  # `/burrito-py approve`
    if (approval.get("headSha") == head and (approval.get("label") == label or by_comment)
            and approval.get("by") in approvers):
        return None
    before = (f" (the approval by {approval.get('by')} was for {str(approval.get('headSha'))[:12]}: a new push "
              "needs a new approval)" if approval.get("headSha") and approval.get("headSha") != head else "")
    return Gate("AwaitingApproval", "AwaitingApproval",
                f"this pull request comes from a fork: waiting for approval to plan: it is planned once a maintainer "
                f"({', '.join(approvers)}) adds the label {label!r} or comments `/burrito-py approve` at head "
                f"{head[:12]}{before}",
                f"a fork's pull request: awaiting approval (a maintainer adds the label {label[:60]!r})")


@dataclass(frozen=True, slots=True)
class ApprovalChange:
    """What a label event does to `spec.approval`: `set` (the new approval), `clear`, or nothing, and why."""

    action: Literal["set", "clear", "none"]
    approval: Mapping[str, Any] | None = None
    why: str = ""


def approval_change(event: PullRequestEvent, pull_requests: Mapping[str, Any] | None) -> ApprovalChange:
    """A label event on a fork's pull request: the approval label added by an approver approves the event's head;
    the label removed (by anyone) withdraws the approval; anything else changes nothing."""
    if event.action != "labeled":
        return ApprovalChange("none")
    forks = fork_settings(pull_requests)
    if not event.from_fork:
        return ApprovalChange("none", why="not a fork's pull request: no approval needed")
    if forks.get("policy") != "RequireApproval":
        return ApprovalChange("none", why="the repository does not plan forks' pull requests")
    label = str(forks.get("approvalLabel") or DEFAULT_LABEL)
    if label in event.added:
        if event.sender and event.sender in {str(a) for a in forks.get("approvers") or ()}:
            return ApprovalChange("set", {"by": event.sender, "headSha": event.head_sha, "label": label,
                                          **({"at": event.updated_at} if event.updated_at else {})})
        if not event.labels_complete:
            return ApprovalChange("none", why=f"{event.sender or 'an unknown sender'} is not among "
                                  "spec.pullRequests.forks.approvers: the label approves nothing")
        return ApprovalChange("none", why="the label is there, but this event's sender is not among the approvers")
    if label in event.removed or event.labels_complete:
        return ApprovalChange("clear", why=f"the label {label!r} was removed")
    return ApprovalChange("none", why=f"not the approval label {label!r}")
