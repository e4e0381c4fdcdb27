"""Pull/merge request webhooks, read into one shape (pure; issue 15 item 1).

The delivery has already been read and its signature checked (`server/webhooks.py`); this says what it means
for a pull request, or None when it means nothing to us:

- GitHub `pull_request`: `opened`/`reopened` → opened, `synchronize` → updated (a new head), `closed` → closed
  or merged (`pull_request.merged`);
- GitLab `Merge Request Hook`: `open`/`reopen` → opened, `update` with `oldrev` → updated, `close`, `merge`;
- Gitea `pull_request`: as GitHub, `synchronized` → updated.

- labels: GitHub/Gitea `labeled`/`unlabeled` (Gitea `label_updated`, `label_cleared`), GitLab `update` with
  `changes.labels` → labeled, with the labels added and removed and the sender (who may approve a fork's head,
  §11.3).

Every event says whether the head is a fork's (`from_fork`): GitHub/Gitea `pull_request.head.repo` against
`base.repo` (by id, else full name), GitLab `source_project_id` against `target_project_id`. A payload that does
not say is a fork: only a head the delivery shows to be in the base repository itself is trusted as one.

Other actions (titles, reviews, assignments, an `update` without new commits or labels) are None: they change no
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

Action = Literal["opened", "updated", "closed", "merged", "labeled"]
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
    from_fork: bool = True  # unknown is a fork (see the module docstring)
    author: str = ""  # who opened it (GitHub/Gitea `pull_request.user.login`, GitLab the opener of an `open`)
    sender: str = ""  # who did this (the delivery's `sender.login`, GitLab `user.username`)
    added: tuple[str, ...] = ()  # labeled: the labels added (Gitea: every label it has now)
    removed: tuple[str, ...] = ()  # labeled: the labels removed
    labels_complete: bool = False  # `added` is every label it has now (Gitea): any other is removed


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


def _login(value: Any, *keys: str) -> str:
    """A login under `value` (a mapping) at the first of `keys` that holds a non-empty string, else ""."""
    if not isinstance(value, Mapping):
        return ""
    return next((str(value[k]) for k in keys if isinstance(value.get(k), str) and value[k]), "")


def github_from_fork(pull_request: Mapping[str, Any]) -> bool:
    """Whether a GitHub/Gitea pull request's head is in another repository than its base. Only a head repository
    the payload shows to be the base one (same id, else same full name) is not a fork; a deleted fork (`head.repo`
    null) or a payload without them is."""
    head = (pull_request.get("head") or {}).get("repo") if isinstance(pull_request.get("head"), Mapping) else None
    base = (pull_request.get("base") or {}).get("repo") if isinstance(pull_request.get("base"), Mapping) else None
    if not isinstance(head, Mapping) or not isinstance(base, Mapping):
        return True
    if head.get("fork") is True:
        return True
    for key in ("id", "full_name"):
        h, b = head.get(key), base.get(key)
        if h is not None and b is not None and not isinstance(h, bool) and not isinstance(b, bool):
            return bool(h != b)
    return True


def gitlab_from_fork(attributes: Mapping[str, Any]) -> bool:
    """Whether a GitLab merge request comes from another project than its target (unknown: it does)."""
    source, target = attributes.get("source_project_id"), attributes.get("target_project_id")
    if not isinstance(source, int) or not isinstance(target, int) or isinstance(source, bool):
        return True
    return source != target


def _gitlab_labels(payload: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(added, removed) label titles of a GitLab `update` (`changes.labels.previous/current`)."""
    changes = (payload.get("changes") or {}).get("labels") if isinstance(payload.get("changes"), Mapping) else None
    if not isinstance(changes, Mapping):
        return (), ()

    def titles(key: str) -> set[str]:
        items = changes.get(key)
        return {str(i["title"]) for i in items or () if isinstance(i, Mapping) and isinstance(i.get("title"), str)}

    before, after = titles("previous"), titles("current")
    return tuple(sorted(after - before)), tuple(sorted(before - after))


def pull_request_event(delivery: Delivery) -> PullRequestEvent | None:
    payload = delivery.payload
    if delivery.provider in ("github", "gitea") and delivery.event == "pull_request":
        action = _get(payload, "action", str)
        pull_request = payload.get("pull_request") or {}
        added: tuple[str, ...] = ()
        removed: tuple[str, ...] = ()
        complete = False
        if action == "closed":
            kind: Action = "merged" if pull_request.get("merged") else "closed"
        elif action in _GITHUB:
            kind = _GITHUB[action]  # type: ignore[assignment]
        elif action in ("labeled", "unlabeled"):
            kind = "labeled"
            name = _get(payload, "label.name", str)
            added, removed = ((name,), ()) if action == "labeled" else ((), (name,))
        elif action in ("label_updated", "label_cleared"):
            # Gitea sends the labels the pull request has now: one not among them is removed.
            kind = "labeled"
            added = tuple(str(label["name"]) for label in pull_request.get("labels") or ()
                          if isinstance(label, Mapping) and isinstance(label.get("name"), str))
            complete = True
        else:
            return None
        return PullRequestEvent(delivery.provider, kind, _get(payload, "pull_request.number", int),
                                _get(payload, "pull_request.base.ref", str),
                                _get(payload, "pull_request.head.ref", str),
                                _get(payload, "pull_request.head.sha", str),
                                str(pull_request.get("title") or ""), str(pull_request.get("html_url") or ""),
                                _get(payload, "repository.full_name", str), _time(payload, "pull_request.updated_at"),
                                from_fork=github_from_fork(pull_request),
                                author=_login(pull_request.get("user"), "login", "username"),
                                sender=_login(payload.get("sender"), "login", "username"), added=added,
                                removed=removed, labels_complete=complete)
    if delivery.provider == "gitlab" and delivery.event == "Merge Request Hook":
        attributes = payload.get("object_attributes") or {}
        action = _get(payload, "object_attributes.action", str)
        added, removed = _gitlab_labels(payload)
        if action == "update" and attributes.get("oldrev"):
            kind = "updated"  # new commits: GitLab sends `oldrev` only then
            added, removed = (), ()
        elif action == "update" and (added or removed):
            kind = "labeled"
        elif action in _GITLAB:
            kind = _GITLAB[action]  # type: ignore[assignment]
        else:
            return None
        actor = _login(payload.get("user"), "username")
        return PullRequestEvent("gitlab", kind, _get(payload, "object_attributes.iid", int),
                                _get(payload, "object_attributes.target_branch", str),
                                _get(payload, "object_attributes.source_branch", str),
                                _get(payload, "object_attributes.last_commit.id", str),
                                str(attributes.get("title") or ""), str(attributes.get("url") or ""),
                                _get(payload, "project.path_with_namespace", str),
                                _time(payload, "object_attributes.updated_at"),
                                from_fork=gitlab_from_fork(attributes),
                                author=actor if kind == "opened" else "", sender=actor, added=added, removed=removed)
    return None
