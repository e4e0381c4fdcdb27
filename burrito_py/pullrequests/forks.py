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

`/burrito-py approve` approves too, and anyone may comment: there the login is all the delivery proves, and a login
changes hands (renamed or deleted accounts free theirs for anyone to register; a typo in `approvers` names a stranger).
So a comment's approval counts only once the controllers asked the provider whether its author may write to the
repository (`approval_to_check`, recorded in `status.approvalChecked`): a newcomer holding an approver's old login
has no access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from burrito_py.gitproviders.base import PullRequestEvent

__all__ = ["ApprovalChange", "ApprovalToCheck", "Gate", "approval_change", "approval_to_check",
           "comment_approval_refused", "fork_gate", "fork_settings", "inherits_secrets"]

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


def _approving_comment(approval: Mapping[str, Any]) -> str:
    """The id of the `/burrito-py approve` comment an approval came from; "" for a label's."""
    return str(approval.get("comment") or "") if approval.get("label") == "comment" else ""


class ApprovalToCheck(NamedTuple):
    """A comment's approval whose author's write permission the provider must be asked about."""

    comment: str
    by: str
    by_id: int | None  # GitLab asks members by id


def approval_to_check(spec: Mapping[str, Any], pull_requests: Mapping[str, Any] | None,
                      status: Mapping[str, Any]) -> ApprovalToCheck | None:
    """The fork's approval by comment, by one of the approvers, not asked about yet (`status.approvalChecked`
    names another comment or none); None when nothing is to be asked (no such approval, or asked already)."""
    if not spec.get("fromFork"):
        return None
    approval = spec.get("approval") or {}
    comment = _approving_comment(approval)
    if not comment:
        return None
    by = str(approval.get("by") or "")
    if by not in {str(a) for a in fork_settings(pull_requests).get("approvers") or ()}:
        return None
    if (status.get("approvalChecked") or {}).get("comment") == comment:
        return None
    by_id = approval.get("byId")
    if not isinstance(by_id, int):  # an approval written before the server recorded the id: the command has it
        by_id = next((c.get("byId") for c in spec.get("commands") or () if str(c.get("id")) == comment), None)
    return ApprovalToCheck(comment, by, by_id if isinstance(by_id, int) else None)


def comment_approval_refused(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    """Why the fork's approval by comment does not count (its author may not write to the repository, or that
    was not asked yet); None when it is a label's, or its author's write permission was confirmed."""
    approval = spec.get("approval") or {}
    comment = _approving_comment(approval)
    if not comment:
        return None
    checked = status.get("approvalChecked") or {}
    if checked.get("comment") == comment and checked.get("mayWrite") is True:
        return None
    if checked.get("comment") == comment:
        return (f"{approval.get('by')} may not write to the repository, as its provider says: an approval by "
                "comment counts only from an approver who may (a login can change hands)")
    return f"the provider has not yet said whether {approval.get('by')} may write to the repository"


def fork_gate(spec: Mapping[str, Any], pull_requests: Mapping[str, Any] | None,
              status: Mapping[str, Any]) -> Gate | None:
    """None when the pull request's head may be planned; else why not. A pull request not from a fork is never
    gated; a fork is gated unless RequireApproval and its approval is by an approver, with the label or by a
    comment whose author may write to the repository (`status.approvalChecked`), at `spec.headSha` (the approvers
    and label are read now: removing someone from `approvers` revokes their approvals)."""
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
    by_comment = bool(_approving_comment(approval))  # `/burrito-py approve`
    refused = comment_approval_refused(spec, status)
    if (approval.get("headSha") == head and (approval.get("label") == label or by_comment)
            and approval.get("by") in approvers and refused is None):
        return None
    before = (f" (the approval by {approval.get('by')} was for {str(approval.get('headSha'))[:12]}: a new push "
              "needs a new approval)" if approval.get("headSha") and approval.get("headSha") != head else
              f" (the approval by comment does not count: {refused})" if refused and approval.get("by") in approvers
              else "")
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
