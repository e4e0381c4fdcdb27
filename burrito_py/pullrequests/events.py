"""What a pull request event makes of a repository's TerraformPullRequest (docs/architecture.md §11.3): pure.

The one way a pull request becomes an object, whoever saw it: the server, from a verified webhook delivery
(`server/app.py`), and the pull request poll, from the provider's listing (`controllers/pullrequest/poll.py`).
`writes.py` writes what this decides.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from burrito_py.api.pullrequest import pull_request_name
from burrito_py.gitproviders.base import PullRequestEvent
from burrito_py.pullrequests.forks import approval_change
from burrito_py.timeutil import parse_time

__all__ = ["PullRequestWrite", "older", "pull_request_write"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PullRequestWrite:
    """The TerraformPullRequest `name` of a repository's namespace gets `spec` (merge-patched): created first unless
    `create` is False (a close or merge of one never seen creates nothing)."""

    name: str
    spec: dict[str, Any] = field(hash=False)
    create: bool
    # Gitea's label events list every label: one without the label withdraws a label's approval, not one given by
    # a `/burrito-py approve` comment (only an explicit removal of the label does).
    spare_comment_approval: bool = False
    approval_note: str = ""  # what a label event did to a fork's approval, for the log


def pull_request_write(event: PullRequestEvent, repository: str, settings: Mapping[str, Any] | None
                       ) -> PullRequestWrite:
    """What `event` writes on the TerraformPullRequest of repository `repository` (its name), whose
    `spec.pullRequests` is `settings`."""
    spec: dict[str, Any] = {
        "provider": event.provider, "repository": repository, "project": event.project,
        "number": event.number, "base": event.base, "headBranch": event.head_branch,
        "headSha": event.head_sha, "state": {"closed": "closed", "merged": "merged"}.get(event.action, "open"),
        "title": event.title[:1024], "url": event.url, "fromFork": event.from_fork}
    if event.author:
        spec["author"] = event.author[:255]
    if event.updated_at:
        spec["updatedAt"] = event.updated_at
    # A label event may approve (or withdraw the approval of) a fork's head (pullrequests/forks.py).
    change = approval_change(event, settings)
    if change.action == "set":
        spec["approval"] = dict(change.approval or {})
    elif change.action == "clear":
        spec["approval"] = None
    return PullRequestWrite(pull_request_name(repository, event.number), spec,
                            create=event.action not in ("closed", "merged"),
                            spare_comment_approval=change.action == "clear" and not event.removed,
                            approval_note=change.why)


def older(event: str | None, recorded: str | None) -> bool:
    """Whether an event's time is before the recorded one (either unknown: not older, as before times were kept).
    Equal times are accepted: providers write whole seconds, and two events in one second must both count."""
    when, then = parse_time(event), parse_time(recorded)
    return when is not None and then is not None and when < then
