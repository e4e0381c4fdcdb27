"""Pull/merge request webhooks, read into one shape (pure; issue 15 item 1).

The delivery has already been read and its signature checked (`server/webhooks.py`); this says what it means
for a pull request, or None when it means nothing to us:

- GitHub `pull_request`: `opened`/`reopened` → opened, `synchronize` → updated (a new head), `closed` → closed
  or merged (`pull_request.merged`);
- GitLab `Merge Request Hook`: `open`/`reopen` → opened, `update` with `oldrev` → updated, `close`, `merge`;
- Gitea `pull_request`: as GitHub, `synchronized` → updated.

Other actions (labels, titles, reviews, assignments, an `update` without new commits) are None: they change no
plan. A payload missing a field it needs raises `BadPullRequest` naming the field; `updated_at` (the pull
request's, which every provider sends) is among them: it orders the events, so a replayed old one is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.server.webhooks import Delivery
from burrito_py.timeutil import format_time_precise, parse_time

__all__ = ["BadPullRequest", "PullRequestEvent", "pull_request_event"]

Action = Literal["opened", "updated", "closed", "merged"]
_GITHUB = {"opened": "opened", "reopened": "opened", "synchronize": "updated", "synchronized": "updated"}
_GITLAB = {"open": "opened", "reopen": "opened", "close": "closed", "merge": "merged"}


class BadPullRequest(ValueError):
    """The payload lacks what a pull request event must carry (the message names the field)."""


@dataclass(frozen=True, slots=True)
class PullRequestEvent:
    provider: str
    action: Action
    number: int
    base: str  # the branch it would merge into (the branch whose layers it affects)
    head_branch: str
    head_sha: str
    title: str = ""
    url: str = ""
    project: str = ""  # how the provider's API names the repository: `owner/repo`, GitLab `group/project`
    # When the provider last changed the pull request (RFC 3339 UTC): an event older than the one a
    # TerraformPullRequest records is a replay, and ignored (§11.3). Empty only when built by hand.
    updated_at: str = ""


def _get(payload: Mapping[str, Any], dotted: str, kind: type) -> Any:
    value: Any = payload
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadPullRequest(f"{dotted}: missing or not a {kind.__name__}")
    return value


def _time(payload: Mapping[str, Any], dotted: str) -> str:
    """A provider's time as RFC 3339 UTC: GitHub and Gitea write RFC 3339, GitLab also `2013-12-03 17:23:34 UTC`."""
    text = _get(payload, dotted, str).strip()
    parsed = parse_time(text.removesuffix(" UTC") + ("Z" if text.endswith(" UTC") else ""))
    if parsed is None:
        raise BadPullRequest(f"{dotted}: {text[:40]!r} is not a time")
    return format_time_precise(parsed)


def pull_request_event(delivery: Delivery) -> PullRequestEvent | None:
    payload = delivery.payload
    if delivery.provider in ("github", "gitea") and delivery.event == "pull_request":
        action = _get(payload, "action", str)
        if action == "closed":
            kind: Action = "merged" if (payload.get("pull_request") or {}).get("merged") else "closed"
        elif action in _GITHUB:
            kind = _GITHUB[action]  # type: ignore[assignment]
        else:
            return None
        return PullRequestEvent(delivery.provider, kind, _get(payload, "pull_request.number", int),
                                _get(payload, "pull_request.base.ref", str),
                                _get(payload, "pull_request.head.ref", str),
                                _get(payload, "pull_request.head.sha", str),
                                str((payload.get("pull_request") or {}).get("title") or ""),
                                str((payload.get("pull_request") or {}).get("html_url") or ""),
                                _get(payload, "repository.full_name", str), _time(payload, "pull_request.updated_at"))
    if delivery.provider == "gitlab" and delivery.event == "Merge Request Hook":
        attributes = payload.get("object_attributes") or {}
        action = _get(payload, "object_attributes.action", str)
        if action == "update" and attributes.get("oldrev"):
            kind = "updated"  # new commits: GitLab sends `oldrev` only then
        elif action in _GITLAB:
            kind = _GITLAB[action]  # type: ignore[assignment]
        else:
            return None
        return PullRequestEvent("gitlab", kind, _get(payload, "object_attributes.iid", int),
                                _get(payload, "object_attributes.target_branch", str),
                                _get(payload, "object_attributes.source_branch", str),
                                _get(payload, "object_attributes.last_commit.id", str),
                                str(attributes.get("title") or ""), str(attributes.get("url") or ""),
                                _get(payload, "project.path_with_namespace", str),
                                _time(payload, "object_attributes.updated_at"))
    return None
