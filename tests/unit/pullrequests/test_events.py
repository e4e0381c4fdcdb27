"""Pull/merge request webhooks of GitHub, GitLab and Gitea read into one shape; other actions mean nothing."""

from __future__ import annotations

from typing import Any

import pytest

from burrito_py.gitproviders.base import BadPullRequest, PullRequestEvent
from burrito_py.gitproviders.delivery import Delivery, pull_request_event

SHA = "9f2c1e0d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"


def github(action: str, merged: bool = False, provider: str = "github") -> Delivery:
    return Delivery(provider, "pull_request", "d-1", {  # type: ignore[arg-type]
        "action": action, "number": 12,
        "pull_request": {"number": 12, "title": "Bigger db", "html_url": "https://example/pr/12", "merged": merged,
                         "base": {"ref": "main", "sha": "1" * 40}, "head": {"ref": "feature/db", "sha": SHA},
                         "updated_at": "2026-03-01T10:20:30Z" if provider == "github" else "2026-03-01T11:20:30+01:00"},
        "repository": {"clone_url": "https://example/team/infra.git", "full_name": "team/infra"}})


def gitlab(action: str, oldrev: str | None = None) -> Delivery:
    attributes: dict[str, Any] = {"iid": 12, "action": action, "title": "Bigger db", "url": "https://example/mr/12",
                                  "target_branch": "main", "source_branch": "feature/db",
                                  "last_commit": {"id": SHA}, "updated_at": "2026-03-01 10:20:30 UTC"}
    if oldrev:
        attributes["oldrev"] = oldrev
    return Delivery("gitlab", "Merge Request Hook", "d-2", {"object_kind": "merge_request",
                                                            "project": {"path_with_namespace": "team/infra"},
                                                            "object_attributes": attributes})


def event(provider: str, action: str) -> PullRequestEvent:
    url = "https://example/pr/12" if provider != "gitlab" else "https://example/mr/12"
    return PullRequestEvent(provider, action, 12, "main", "feature/db", SHA, "Bigger db", url,  # type: ignore[arg-type]
                            "team/infra", "2026-03-01T10:20:30.000000Z")  # every provider's form of one time


@pytest.mark.parametrize(("delivery", "expected"), [
    (github("opened"), event("github", "opened")),
    (github("reopened"), event("github", "opened")),
    (github("synchronize"), event("github", "updated")),
    (github("closed"), event("github", "closed")),
    (github("closed", merged=True), event("github", "merged")),
    (github("opened", provider="gitea"), event("gitea", "opened")),
    (github("synchronized", provider="gitea"), event("gitea", "updated")),
    (github("closed", merged=True, provider="gitea"), event("gitea", "merged")),
    (gitlab("open"), event("gitlab", "opened")),
    (gitlab("reopen"), event("gitlab", "opened")),
    (gitlab("update", oldrev="1" * 40), event("gitlab", "updated")),
    (gitlab("close"), event("gitlab", "closed")),
    (gitlab("merge"), event("gitlab", "merged")),
])
def test_each_provider_read_into_one_shape(delivery: Delivery, expected: PullRequestEvent) -> None:
    assert pull_request_event(delivery) == expected


@pytest.mark.parametrize("delivery", [
    github("assigned"), github("edited"), github("review_requested"), gitlab("update"),  # no new commits
    gitlab("approved"), Delivery("github", "push", None, {"ref": "refs/heads/main"}),
])
def test_other_actions_mean_nothing(delivery: Delivery) -> None:
    assert pull_request_event(delivery) is None


def test_a_payload_missing_a_field_names_it() -> None:
    broken = github("opened")
    del broken.payload["pull_request"]["head"]["sha"]
    with pytest.raises(BadPullRequest, match=r"pull_request\.head\.sha"):
        pull_request_event(broken)
    flagged = github("opened")
    flagged.payload["pull_request"]["number"] = True
    with pytest.raises(BadPullRequest, match=r"pull_request\.number"):
        pull_request_event(flagged)
    for value in (None, "yesterday"):  # the time orders events (a replayed old one is ignored): required
        undated = gitlab("open")
        undated.payload["object_attributes"]["updated_at"] = value
        with pytest.raises(BadPullRequest, match=r"object_attributes\.updated_at"):
            pull_request_event(undated)
